"""Analytical derivatives of inverse dynamics (rbd_deriv.core.rnea_derivatives).

Oracles: Pinocchio's computeRNEADerivatives (1e-9), the complex-step derivative
of the plain reference RNEA (1e-10), central finite differences on the manifold
(1e-6, see rbd_deriv.testing), and identities.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.testing import FINITE_DIFFERENCE_RTOL, assert_close, finite_diff, random_urdf, reference
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge


def _derivatives(case, q, v, a, fext=None):
    return [x.copy() for x in rd.rnea_derivatives(case.model, case.data, q, v, a, fext)]


def _check_pinocchio(case):
    rng = case.rng("drnea fext")
    for q, v, a in case.states("drnea"):
        for fext in (None, case.random_fext(rng)):
            dtau_dq, dtau_dv, M = _derivatives(case, q, v, a, fext)
            pin_dq, pin_dv, pin_m = case.bridge.rnea_derivatives(q, v, a, fext)
            assert dtau_dq.shape == dtau_dv.shape == M.shape == (case.model.nv, case.model.nv)
            assert_close(dtau_dq, pin_dq, what="dtau/dq")
            assert_close(dtau_dv, pin_dv, what="dtau/dv")
            assert_close(M, pin_m, what="dtau/da")


def test_rnea_derivatives_match_pinocchio(any_robot):
    _check_pinocchio(any_robot)


def _check_complex_step(case):
    rng = case.rng("drnea complex fext")
    q, v, a = case.states("drnea complex", 1)[0]
    fext = case.random_fext(rng)
    dtau_dq, dtau_dv, M = _derivatives(case, q, v, a, fext)
    cs_dq, cs_dv, cs_da = reference.complex_step_rnea_derivatives(case.model, q, v, a, fext)
    assert_close(dtau_dq, cs_dq, rtol=1e-10, what="dtau/dq vs complex step")
    assert_close(dtau_dv, cs_dv, rtol=1e-10, what="dtau/dv vs complex step")
    assert_close(M, cs_da, rtol=1e-10, what="dtau/da vs complex step")


def test_rnea_derivatives_match_complex_step(light_robot):
    _check_complex_step(light_robot)


def _check_finite_differences(case):
    q, v, a = case.states("drnea fd", 1)[0]
    fext = case.random_fext(case.rng("drnea fd fext"))
    dtau_dq, dtau_dv, _ = _derivatives(case, q, v, a, fext)
    fd_dq, fd_dv = finite_diff.rnea_derivatives(case.model, case.data, q, v, a, fext)
    assert_close(dtau_dq, fd_dq, rtol=FINITE_DIFFERENCE_RTOL, what="dtau/dq vs finite differences")
    assert_close(dtau_dv, fd_dv, rtol=FINITE_DIFFERENCE_RTOL, what="dtau/dv vs finite differences")


def test_rnea_derivatives_match_finite_differences(light_robot):
    _check_finite_differences(light_robot)


def _check_identities(case):
    model, data = case.model, case.data
    zero = np.zeros(model.nv)
    for q, v, a in case.states("drnea identities"):
        _, _, M = _derivatives(case, q, v, a)
        assert_close(M, rd.crba(model, data, q), what="dtau/da == crba")
        np.testing.assert_array_equal(M, M.T)
        # At rest, inverse dynamics is gravity compensation; its velocity derivative vanishes
        # because Coriolis and centrifugal torques are quadratic in v.
        dtau_dq, dtau_dv, _ = _derivatives(case, q, zero, zero)
        assert_close(dtau_dq, case.bridge.gravity_derivatives(q), what="dtau/dq at rest == dg/dq")
        assert_close(dtau_dv, np.zeros((model.nv, model.nv)), what="dtau/dv at v = 0")


def test_rnea_derivative_identities(any_robot):
    _check_identities(any_robot)



@pytest.mark.parametrize("floating_base", [False, True])
def test_rnea_derivatives_with_custom_gravity(floating_base):
    """Gravity enters dtau/dq: a tilted gravity vector must be followed exactly."""
    xml = random_urdf(np.random.default_rng(77), 7)
    gravity = np.array([1.5, -2.0, -8.7])
    model = rd.load_urdf(xml, floating_base=floating_base, gravity=gravity)
    bridge = PinocchioBridge.for_model(model, xml)
    data = model.create_data()
    rng = np.random.default_rng(78)
    q, v, a = bridge.random_configuration(rng), rng.uniform(-2, 2, model.nv), rng.uniform(-2, 2, model.nv)
    dtau_dq, dtau_dv, _ = [x.copy() for x in rd.rnea_derivatives(model, data, q, v, a)]
    pin_dq, pin_dv, _ = bridge.rnea_derivatives(q, v, a)
    assert_close(dtau_dq, pin_dq, what="dtau/dq, tilted gravity")
    assert_close(dtau_dv, pin_dv, what="dtau/dv, tilted gravity")
    zero = np.zeros(model.nv)
    assert_close(rd.rnea_derivatives(model, data, q, zero, zero)[0], bridge.gravity_derivatives(q),
                 what="dg/dq, tilted gravity")


def test_rnea_derivatives_with_armature_match_pinocchio(armature_robot):
    _check_pinocchio(armature_robot)
    _check_identities(armature_robot)


def test_rnea_derivatives_of_a_robot_with_massless_bodies_match_pinocchio(massless_robot):
    _check_pinocchio(massless_robot)
