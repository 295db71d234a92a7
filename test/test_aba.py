"""Forward dynamics (rbd_deriv.core.aba) against Pinocchio, the reference and inverse dynamics."""

from __future__ import annotations

import rbd_deriv as rd
from rbd_deriv.testing import assert_close, reference


def _check(case):
    model, data, bridge = case.model, case.data, case.bridge
    rng = case.rng("aba fext")
    for q, v, tau in case.states("aba"):
        ddq = rd.aba(model, data, q, v, tau)
        assert ddq.shape == (model.nv,)
        assert_close(ddq, bridge.aba(q, v, tau), what="aba")
        fext = case.random_fext(rng)
        assert_close(rd.aba(model, data, q, v, tau, fext), bridge.aba(q, v, tau, fext), what="aba with fext")


def test_aba_matches_pinocchio(any_robot):
    _check(any_robot)


def _check_inverse(case):
    model, data = case.model, case.data
    rng = case.rng("inverse fext")
    for q, v, a in case.states("aba(rnea)"):
        for fext in (None, case.random_fext(rng)):
            tau = rd.rnea(model, data, q, v, a, fext).copy()
            assert_close(rd.aba(model, data, q, v, tau, fext), a, what="aba(rnea(a)) == a")


def test_aba_inverts_rnea(any_robot):
    _check_inverse(any_robot)


def test_aba_matches_reference_on_random_trees(random_robot):
    model, data = random_robot.model, random_robot.data
    rng = random_robot.rng("aba reference")
    for q, v, tau in random_robot.states("aba reference", 1):
        fext = random_robot.random_fext(rng)
        assert_close(rd.aba(model, data, q, v, tau, fext), reference.forward_dynamics(model, q, v, tau, fext))


def test_aba_with_armature_matches_pinocchio_and_inverts_rnea(armature_robot):
    _check(armature_robot)
    _check_inverse(armature_robot)


def test_aba_names_a_joint_where_massless_bodies_make_m_singular(massless_robot):
    model, data = massless_robot.model, massless_robot.data
    q, v, tau = massless_robot.states("singular", 1)[0]
    data.ws[:] = 0.0
    rd.Data.initialize(model, data.ws)
    massless_robot.assert_singular_named(rd.aba, q, v, tau)
    assert not data.ddq.any(), "nothing written"


def test_aba_with_armature_on_massless_bodies_matches_pinocchio(massless_armature_robot):
    _check(massless_armature_robot)
