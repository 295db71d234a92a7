"""Inverse of the joint-space inertia matrix (rbd_deriv.core.minverse) against Pinocchio and M."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.testing import assert_close


def _check(case):
    model, data, bridge = case.model, case.data, case.bridge
    for q, _, _ in case.states("minverse"):
        Minv = rd.minverse(model, data, q).copy()
        assert Minv.shape == (model.nv, model.nv)
        assert_close(Minv, bridge.minverse(q), what="Minv")
        np.testing.assert_array_equal(Minv, Minv.T)
        M = rd.crba(model, data, q).copy()
        assert_close(M @ Minv, np.eye(model.nv), what="M Minv == I")
        assert_close(Minv @ M, np.eye(model.nv), what="Minv M == I")


def test_minverse_matches_pinocchio(any_robot):
    _check(any_robot)


def test_minverse_columns_are_aba_without_bias(random_robot):
    """Minv tau = aba(q, v, tau) - aba(q, v, 0): forward dynamics is affine in tau."""
    model, data = random_robot.model, random_robot.data
    for q, v, tau in random_robot.states("affine", 1):
        Minv = rd.minverse(model, data, q).copy()
        drift = rd.aba(model, data, q, v, np.zeros(model.nv)).copy()
        assert_close(Minv @ tau, rd.aba(model, data, q, v, tau) - drift, what="Minv tau")


def test_minverse_with_armature_matches_pinocchio(armature_robot):
    _check(armature_robot)


def test_minverse_with_armature_on_massless_bodies_matches_pinocchio(massless_armature_robot):
    _check(massless_armature_robot)


def test_minverse_names_a_joint_where_massless_bodies_make_m_singular(massless_robot):
    massless_robot.assert_singular_named(rd.minverse, massless_robot.states("singular", 1)[0][0])
