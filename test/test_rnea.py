"""Inverse dynamics (rbd_deriv.core.rnea): rnea, nonlinear_effects, gravity_torques against Pinocchio
and against the plain reference implementation."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.testing import assert_close, reference


def _check_against_pinocchio(case):
    model, data, bridge = case.model, case.data, case.bridge
    rng = case.rng("rnea fext")
    for q, v, a in case.states("rnea"):
        tau = rd.rnea(model, data, q, v, a)
        assert tau.shape == (model.nv,)
        assert_close(tau, bridge.rnea(q, v, a), what="rnea")
        fext = case.random_fext(rng)
        assert_close(rd.rnea(model, data, q, v, a, fext), bridge.rnea(q, v, a, fext), what="rnea with fext")
        assert_close(rd.nonlinear_effects(model, data, q, v), bridge.nonlinear_effects(q, v), what="nle")
        assert_close(rd.gravity_torques(model, data, q), bridge.gravity_torques(q), what="gravity")


def test_rnea_matches_pinocchio(any_robot):
    _check_against_pinocchio(any_robot)


def test_rnea_matches_reference_on_random_trees(random_robot):
    """The reference reads only the model's public arrays: this checks the library's
    kernels agree with its own model description."""
    model, data = random_robot.model, random_robot.data
    rng = random_robot.rng("reference fext")
    for q, v, a in random_robot.states("reference"):
        fext = random_robot.random_fext(rng)
        assert_close(rd.rnea(model, data, q, v, a, fext), reference.rnea(model, q, v, a, fext))


def test_rnea_splits_into_mass_matrix_and_bias(random_robot):
    """tau = M a + h(q, v), h = nle, and nle(q, 0) = g(q)."""
    model, data = random_robot.model, random_robot.data
    for q, v, a in random_robot.states("split"):
        M = rd.crba(model, data, q).copy()
        h = rd.nonlinear_effects(model, data, q, v).copy()
        assert_close(rd.rnea(model, data, q, v, a), M @ a + h, what="M a + h")
        assert_close(rd.nonlinear_effects(model, data, q, np.zeros(model.nv)), rd.gravity_torques(model, data, q),
                     what="nle(q, 0) == g(q)")


def test_zero_fext_equals_no_fext(small_robot):
    model, data = small_robot.model, small_robot.data
    q, v, a = small_robot.states("zero fext", 1)[0]
    without = rd.rnea(model, data, q, v, a).copy()
    np.testing.assert_array_equal(rd.rnea(model, data, q, v, a, np.zeros((model.njoints, 6))), without)


def test_result_is_a_read_only_view_overwritten_by_the_next_call(small_robot):
    model, data = small_robot.model, small_robot.data
    (q0, v0, a0), (q1, v1, a1) = small_robot.states("view", 2)
    first = rd.rnea(model, data, q0, v0, a0)
    kept = first.copy()
    assert not first.flags.writeable
    second = rd.rnea(model, data, q1, v1, a1)
    assert np.shares_memory(first, second)
    assert not np.array_equal(first, kept)


def test_rnea_with_armature_matches_pinocchio(armature_robot):
    """tau gains armature * a; nle and gravity (a = 0) do not change."""
    _check_against_pinocchio(armature_robot)


def test_rnea_of_a_robot_with_massless_bodies_matches_pinocchio(massless_robot):
    _check_against_pinocchio(massless_robot)
