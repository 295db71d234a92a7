"""Analytical derivatives of forward dynamics (rbd_deriv.core.aba_derivatives).

Oracles: Pinocchio's computeABADerivatives (1e-9), the complex-step derivative
of the reference forward dynamics (1e-10),
central finite differences on the manifold (1e-6) and identities linking them to
the RNEA derivatives.
"""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.testing import FINITE_DIFFERENCE_RTOL, assert_close, finite_diff, reference


def _derivatives(case, q, v, tau, fext=None):
    return [x.copy() for x in rd.aba_derivatives(case.model, case.data, q, v, tau, fext)]


def _check_pinocchio(case):
    rng = case.rng("daba fext")
    for q, v, tau in case.states("daba"):
        for fext in (None, case.random_fext(rng)):
            dddq_dq, dddq_dv, Minv = _derivatives(case, q, v, tau, fext)
            pin_dq, pin_dv, pin_minv = case.bridge.aba_derivatives(q, v, tau, fext)
            assert dddq_dq.shape == dddq_dv.shape == Minv.shape == (case.model.nv, case.model.nv)
            assert_close(dddq_dq, pin_dq, what="dddq/dq")
            assert_close(dddq_dv, pin_dv, what="dddq/dv")
            assert_close(Minv, pin_minv, what="dddq/dtau")


def test_aba_derivatives_match_pinocchio(any_robot):
    _check_pinocchio(any_robot)


def _check_complex_step(case):
    q, v, tau = case.states("daba complex", 1)[0]
    fext = case.random_fext(case.rng("daba complex fext"))
    dddq_dq, dddq_dv, Minv = _derivatives(case, q, v, tau, fext)
    cs_dq, cs_dv, cs_dtau = reference.complex_step_aba_derivatives(case.model, q, v, tau, fext)
    assert_close(dddq_dq, cs_dq, rtol=1e-10, what="dddq/dq vs complex step")
    assert_close(dddq_dv, cs_dv, rtol=1e-10, what="dddq/dv vs complex step")
    assert_close(Minv, cs_dtau, rtol=1e-10, what="dddq/dtau vs complex step")


def test_aba_derivatives_match_complex_step(light_robot):
    _check_complex_step(light_robot)


def _check_finite_differences(case):
    q, v, a = case.states("daba fd", 1)[0]
    fext = case.random_fext(case.rng("daba fd fext"))
    # Torques that produce accelerations of order one: a random tau on a light robot gives
    # huge ddq, whose round-off divided by the step would swamp the finite differences.
    tau = rd.rnea(case.model, case.data, q, v, a, fext).copy()
    dddq_dq, dddq_dv, Minv = _derivatives(case, q, v, tau, fext)
    fd_dq, fd_dv, fd_dtau = finite_diff.aba_derivatives(case.model, case.data, q, v, tau, fext)
    assert_close(dddq_dq, fd_dq, rtol=FINITE_DIFFERENCE_RTOL, what="dddq/dq vs finite differences")
    assert_close(dddq_dv, fd_dv, rtol=FINITE_DIFFERENCE_RTOL, what="dddq/dv vs finite differences")
    assert_close(Minv, fd_dtau, rtol=FINITE_DIFFERENCE_RTOL, what="dddq/dtau vs finite differences")


def test_aba_derivatives_match_finite_differences(light_robot):
    _check_finite_differences(light_robot)


def _check_identities(case):
    """Differentiating M(q) ddq + h(q, v) = tau gives dddq/dx = -Minv dtau/dx at a = ddq."""
    model, data = case.model, case.data
    rng = case.rng("daba identities fext")
    for q, v, tau in case.states("daba identities"):
        fext = case.random_fext(rng)
        dddq_dq, dddq_dv, Minv = _derivatives(case, q, v, tau, fext)
        assert_close(Minv, rd.minverse(model, data, q), what="dddq/dtau == minverse")
        np.testing.assert_array_equal(Minv, Minv.T)
        ddq = rd.aba(model, data, q, v, tau, fext).copy()
        dtau_dq, dtau_dv, _ = [x.copy() for x in rd.rnea_derivatives(model, data, q, v, ddq, fext)]
        assert_close(dddq_dq, -Minv @ dtau_dq, what="dddq/dq == -Minv dtau/dq")
        assert_close(dddq_dv, -Minv @ dtau_dv, what="dddq/dv == -Minv dtau/dv")


def test_aba_derivative_identities(any_robot):
    _check_identities(any_robot)


def test_aba_derivatives_with_armature_match_pinocchio(armature_robot):
    _check_pinocchio(armature_robot)
    _check_identities(armature_robot)


def test_aba_derivatives_with_armature_on_massless_bodies_match_pinocchio(massless_armature_robot):
    _check_pinocchio(massless_armature_robot)


def test_aba_derivatives_name_a_joint_where_massless_bodies_make_m_singular(massless_robot):
    massless_robot.assert_singular_named(rd.aba_derivatives, *massless_robot.states("singular", 1)[0])
