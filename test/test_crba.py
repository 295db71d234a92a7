"""Joint-space inertia matrix (rbd_deriv.core.crba) against Pinocchio and identities."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.testing import assert_close, reference


def _check(case):
    model, data, bridge = case.model, case.data, case.bridge
    for q, _, _ in case.states("crba"):
        M = rd.crba(model, data, q)
        assert M.shape == (model.nv, model.nv)
        assert_close(M, bridge.crba(q), what="M")
        np.testing.assert_array_equal(M, M.T)
        assert np.linalg.eigvalsh(M).min() > 0


def test_crba_matches_pinocchio(any_robot):
    _check(any_robot)


def test_columns_are_rnea_without_velocity_and_gravity(random_robot):
    """M e_k = rnea(q, 0, e_k) - g(q): the definition of M through inverse dynamics."""
    model, data = random_robot.model, random_robot.data
    for q, _, _ in random_robot.states("columns", 1):
        M = rd.crba(model, data, q).copy()
        g = rd.gravity_torques(model, data, q).copy()
        zero = np.zeros(model.nv)
        columns = np.stack([rd.rnea(model, data, q, zero, e) - g for e in np.eye(model.nv)], axis=1)
        assert_close(M, columns, what="M vs rnea columns")
        assert_close(M, reference.mass_matrix(model, q), what="M vs reference")


def test_mass_matrix_is_invariant_to_the_base_placement(floating_robot):
    """With the base velocity in the body frame, M depends on the joint angles only."""
    model, data = floating_robot.model, floating_robot.data
    rng = floating_robot.rng("base pose")
    q0 = floating_robot.random_q(rng)
    q1 = q0.copy()
    q1[:7] = floating_robot.random_q(rng)[:7]
    M0 = rd.crba(model, data, q0).copy()
    assert_close(rd.crba(model, data, q1), M0, what="M invariant to base placement")


def test_crba_with_armature_matches_pinocchio(armature_robot):
    _check(armature_robot)
    model, data = armature_robot.model, armature_robot.data
    bare = rd.load_urdf(armature_robot.source, floating_base=armature_robot.floating_base)
    for q, _, _ in armature_robot.states("armature diagonal", 1):
        # The armature adds to the diagonal only.
        assert_close(rd.crba(model, data, q) - rd.crba(bare, bare.create_data(), q), np.diag(model.armature),
                     what="M(armature) - M")


def test_crba_of_a_robot_with_massless_bodies_matches_pinocchio(massless_robot):
    """M matches and is singular: zero on the diagonal of the joints that move only massless bodies."""
    model, data, bridge = massless_robot.model, massless_robot.data, massless_robot.bridge
    singular = bridge.joints_moving_no_inertia()
    assert singular, "the robot has no joint moving only massless bodies: the test checks nothing"
    for q, _, _ in massless_robot.states("crba"):
        M = rd.crba(model, data, q)
        assert_close(M, bridge.crba(q), what="M")
        for name in singular:
            iv = model.idx_v[name]
            assert M[iv, iv] == 0.0, name
