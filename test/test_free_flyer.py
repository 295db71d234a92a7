"""Tests of rbd_deriv.sim.free_flyer: MuJoCo's free joint against the library's free flyer.

The oracle is the library's kinematics: after a state crosses the conversion, MuJoCo's own forward
kinematics (body placements) and body velocities must equal :func:`rbd_deriv.frame_placement` and
:func:`rbd_deriv.frame_velocity` of every link, in both directions (library state into MuJoCo, MuJoCo state
out to the library).
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.sim import make_plant
from rbd_deriv.sim.free_flyer import from_mujoco, rotation_of, to_mujoco
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

mujoco = pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def solo():
    path = str(EXAMPLE_ROBOTS["solo12"])
    model = rd.load_urdf(path, floating_base=True)
    return model, model.create_data(), make_plant("mujoco", path, model=model)


def random_state(model, rng):
    q = rd.neutral(model)
    q[0:3] = rng.uniform(-1, 1, 3)
    quaternion = rng.normal(size=4)
    q[3:7] = quaternion / np.linalg.norm(quaternion)
    q[7:] = rng.uniform(-1.5, 1.5, model.nv - 6)
    return q, rng.uniform(-2, 2, model.nv)


def assert_mujoco_matches_library(model, data, plant, q, v):
    """Every MuJoCo body's placement and velocity (world axes) against the library's link frames."""
    mj_model, mj_data = plant.mj_model, plant.mj_data
    rd.forward_kinematics(model, data, q)
    velocity = np.zeros(6)
    for body in range(1, mj_model.nbody):
        name = mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_BODY, body)
        placement = rd.frame_placement(model, data, name)
        assert_close(mj_data.xpos[body], placement[:3, 3], what=f"{name} position")
        assert_close(mj_data.xmat[body].reshape(3, 3), placement[:3, :3], what=f"{name} rotation")
        mujoco.mj_objectVelocity(mj_model, mj_data, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
        expected = rd.frame_velocity(model, data, q, v, name, "local_world_aligned")
        # MuJoCo gives a body's velocity at its centre of mass, the library a frame's at its origin.
        expected[:3] += np.cross(expected[3:], mj_data.xipos[body] - mj_data.xpos[body])
        assert_close(np.r_[velocity[3:], velocity[:3]], expected, what=f"{name} velocity")


def test_library_state_into_mujoco(solo):
    model, data, plant = solo
    rng = np.random.default_rng(3)
    for _ in range(5):
        q, v = random_state(model, rng)
        plant.reset(q, v)
        assert_mujoco_matches_library(model, data, plant, q, v)
        # and back out: the plant reports the library's state
        assert_close(plant.q, q, what="q round trip")
        assert_close(plant.v, v, what="v round trip")


def test_mujoco_state_out_to_the_library(solo):
    model, data, plant = solo
    rng = np.random.default_rng(4)
    for _ in range(5):
        plant.reset(rd.neutral(model))
        # A state written in MuJoCo's own terms: (w, x, y, z), a world-frame linear velocity.
        plant.mj_data.qpos[:] = rng.uniform(-1, 1, plant.mj_model.nq)
        quaternion = rng.normal(size=4)
        plant.mj_data.qpos[3:7] = quaternion / np.linalg.norm(quaternion)
        plant.mj_data.qvel[:] = rng.uniform(-2, 2, plant.mj_model.nv)
        mujoco.mj_forward(plant.mj_model, plant.mj_data)
        assert_mujoco_matches_library(model, data, plant, plant.q, plant.v)


def test_base_velocity_is_the_derivative_of_the_pose(solo):
    """v = log(q(t)^-1 q(t + h)) / h: the twist the plant reports moves the pose it reports, to first order."""
    model, _, plant = solo
    rng = np.random.default_rng(5)
    q, v = random_state(model, rng)
    plant.reset(q, v)
    h = 1e-6
    qpos, qvel = plant.mj_data.qpos.copy(), plant.mj_data.qvel.copy()
    # MuJoCo's own integrator moves its state by h with the velocity it holds.
    moved = qpos.copy()
    mujoco.mj_integratePos(plant.mj_model, moved, qvel, h)
    plant.mj_data.qpos[:] = moved
    q_after = plant.q
    derivative = rd.difference(model, q, q_after) / h
    assert np.abs(derivative - v).max() < 1e-5 * max(1.0, np.abs(v).max())


def test_conversion_round_trip_and_quaternion_order():
    rng = np.random.default_rng(6)
    for _ in range(20):
        quaternion = rng.normal(size=4)
        q = np.r_[rng.normal(size=3), quaternion / np.linalg.norm(quaternion)]
        v = rng.normal(size=6)
        qpos, qvel = to_mujoco(q, v)
        assert_close(qpos[3:7], np.r_[q[6], q[3:6]], what="(w, x, y, z)")
        # The world-frame velocity of the origin is R times the body-frame one.
        assert_close(qvel[0:3], rotation_of(q[3:7]) @ v[0:3])
        back_q, back_v = from_mujoco(qpos, qvel)
        assert_close(back_q, q)
        assert_close(back_v, v)
    # A rotation of 90 degrees about z: x goes to y.
    half = np.sqrt(0.5)
    assert_close(rotation_of(np.array([0.0, 0.0, half, half])) @ [1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
