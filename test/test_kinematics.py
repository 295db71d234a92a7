"""Forward kinematics (rbd_deriv.core.kinematics): joint and frame placements against Pinocchio."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.testing import assert_close


def _check_placements(case, count=2):
    model, data, bridge = case.model, case.data, case.bridge
    rng = case.rng("kinematics")
    for _ in range(count):
        q = case.random_q(rng)
        oMi = rd.forward_kinematics(model, data, q)
        assert oMi.shape == (model.njoints, 4, 4)
        assert_close(oMi, bridge.joint_placements(q), what="oMi")
        assert_close(data.oMi, oMi, what="data.oMi")
        for name in model.frame_names:
            assert_close(rd.frame_placement(model, data, name), bridge.frame_placement(q, name), what=f"frame {name}")


def test_placements_match_pinocchio(any_robot):
    _check_placements(any_robot)


def test_frames_follow_the_last_forward_kinematics(small_robot):
    model, data = small_robot.model, small_robot.data
    rng = small_robot.rng("last fk")
    q0, q1 = small_robot.random_q(rng), small_robot.random_q(rng)
    name = model.joint_names[-1]  # a frame that moves with every configuration change of its joint
    rd.forward_kinematics(model, data, q0)
    first = rd.frame_placement(model, data, name).copy()
    rd.forward_kinematics(model, data, q1)
    assert_close(rd.frame_placement(model, data, name), small_robot.bridge.frame_placement(q1, name))
    assert not np.allclose(first, rd.frame_placement(model, data, name))


def test_placements_are_rigid_transforms(random_robot):
    rng = random_robot.rng("rigid")
    oMi = rd.forward_kinematics(random_robot.model, random_robot.data, random_robot.random_q(rng))
    for placement in oMi:
        rotation = placement[:3, :3]
        assert_close(rotation @ rotation.T, np.eye(3), what="orthonormal rotation")
        assert np.linalg.det(rotation) > 0
        np.testing.assert_array_equal(placement[3], [0, 0, 0, 1])
