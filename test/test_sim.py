"""Tests of rbd_deriv.sim: the built-in ABA plant and the MuJoCo plant.

The two backends share no code: MuJoCo builds its own model from the URDF and integrates it with
its own semi-implicit Euler. Without damping or friction they must therefore agree to round-off,
which checks the URDF preparation, the joint mapping and the built-in integrator at once.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError, ModelError, URDFError
from rbd_deriv.sim import AbaPlant, make_plant
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import bundled_urdf

mujoco = pytest.importorskip("mujoco")

from rbd_deriv.sim.mujoco_plant import MujocoPlant, mujoco_ready_urdf  # noqa: E402

URDF = str(bundled_urdf("rbd_arm7"))


@pytest.fixture(scope="module")
def arm():
    model = rd.load_urdf(URDF)
    return model, model.create_data()


def excitation(model, steps, seed):
    """Smooth random accelerations (steps, nv) of a few rad/s^2."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(-2.0, 2.0, (3, model.nv))
    t = np.arange(steps)[:, None] * 1e-3
    return weights[0] + weights[1] * np.sin(7 * t) + weights[2] * np.cos(11 * t)


def test_mujoco_and_builtin_agree_without_dissipation(arm):
    model, data = arm
    q0 = np.array([0.2, -0.4, 0.3, -1.0, 0.5, 0.6, -0.2])
    v0 = np.array([0.3, -0.2, 0.1, 0.4, -0.5, 0.2, 0.6])
    plants = [make_plant("builtin", URDF, model=model), make_plant("mujoco", URDF, model=model)]
    accelerations = excitation(model, 300, seed=1)
    for plant in plants:
        plant.reset(q0, v0)
        for acceleration in accelerations:
            # Inverse dynamics at the plant's own state keeps the motion gentle and the arm
            # off its joint limits, which MuJoCo enforces and the built-in plant does not.
            plant.step(rd.rnea(model, data, plant.q, plant.v, acceleration))
    builtin, engine = plants
    assert (np.abs(builtin.q) < 0.8 * np.asarray(model.upper_position_limit)).all()
    # Same equations, same integrator, two independent implementations: round-off only.
    assert_close(engine.q, builtin.q, what="positions after 0.3 s")
    assert_close(engine.v, builtin.v, what="velocities after 0.3 s")
    assert engine.time == pytest.approx(0.3) and builtin.time == pytest.approx(0.3)


@pytest.mark.parametrize("backend", ["builtin", "mujoco"])
def test_gravity_compensation_holds_still(arm, backend):
    model, data = arm
    plant = make_plant(backend, URDF, damping=0.5, friction=0.2, model=model)
    q0 = np.array([0.5, 0.7, -0.3, -1.2, 0.4, 0.9, 0.1])
    plant.reset(q0)
    plant.step(rd.gravity_torques(model, data, q0), steps=500)
    assert_close(plant.q, q0, what="positions")
    assert_close(plant.v, np.zeros(7), what="velocities")


@pytest.mark.parametrize("backend", ["builtin", "mujoco"])
def test_damping_and_friction_slow_the_arm_down(arm, backend):
    model, data = arm
    q0 = np.zeros(7)
    v0 = np.full(7, 1.0)
    speeds = {}
    for damping, friction in ((0.0, 0.0), (2.0, 1.0)):
        plant = make_plant(backend, URDF, damping=damping, friction=friction, model=model)
        plant.reset(q0, v0)
        for _ in range(100):
            plant.step(rd.gravity_torques(model, data, plant.q))
        M = rd.crba(model, data, plant.q)
        speeds[damping] = plant.v @ M @ plant.v
    # Twice the kinetic energy with dissipation is clearly below the conservative case.
    assert speeds[2.0] < 0.8 * speeds[0.0]


@pytest.mark.parametrize("backend", ["builtin", "mujoco"])
def test_torque_saturates_at_the_effort_limit(arm, backend):
    model, _ = arm
    limit = np.asarray(model.effort_limit)
    command = 2.0 * limit * np.array([1, -1, 1, -1, 1, -1, 1])
    saturated = make_plant(backend, URDF, model=model)
    exact = make_plant(backend, URDF, model=model)
    saturated.reset(np.zeros(7))
    exact.reset(np.zeros(7))
    applied = saturated.step(command, steps=20)
    exact.step(np.clip(command, -limit, limit), steps=20)
    assert_close(applied, np.clip(command, -limit, limit))
    assert saturated.saturated_steps == 20 and exact.saturated_steps == 0
    assert_close(saturated.q, exact.q)


@pytest.mark.parametrize("backend", ["builtin", "mujoco"])
def test_bad_torque_is_refused_and_changes_nothing(arm, backend):
    model, _ = arm
    plant = make_plant(backend, URDF, model=model)
    plant.reset(np.full(7, 0.1))
    with pytest.raises(InputError, match="torque"):
        plant.step(np.full(7, np.nan))
    with pytest.raises(InputError, match="torque"):
        plant.step(np.zeros(6))
    assert_close(plant.q, np.full(7, 0.1))
    assert plant.time == 0.0
    with pytest.raises(InputError, match="reset"):
        plant.reset(np.zeros(3))


def test_urdf_preparation_for_mujoco():
    text = mujoco_ready_urdf(URDF)
    assert "<visual" not in text and "<collision" not in text
    assert 'fusestatic="false"' in text
    with pytest.raises(URDFError, match="XML"):
        mujoco_ready_urdf("<robot><link></robot>")
    with pytest.raises(URDFError, match="expected <robot>"):
        mujoco_ready_urdf("<mujoco/>")


def test_construction_errors(arm):
    model, _ = arm
    with pytest.raises(InputError, match="backend"):
        make_plant("bullet", URDF, model=model)
    with pytest.raises(ModelError, match="not in the MuJoCo model"):
        MujocoPlant(URDF, ["joint1", "nope"], [1.0, 1.0])
    with pytest.raises(InputError, match="damping"):
        AbaPlant(model, damping=-1.0)
    with pytest.raises(InputError, match="dt"):
        AbaPlant(model, dt=0.0)
