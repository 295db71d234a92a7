"""Tests of rbd_deriv.sim: the MuJoCo plant (the simulator node's) and the in-process ABA plant.

The two plants share no code: MuJoCo builds its own model from the URDF and integrates it with
its own semi-implicit Euler. Without damping or friction they must therefore agree to round-off,
which checks the URDF preparation, the joint mapping and the ABA plant's integrator at once.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError, ModelError, RbdDerivError, URDFError
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


def plant_of(kind, model, **options):
    """``"aba"``: the in-process AbaPlant; ``"mujoco"``: the simulator node's plant from make_plant."""
    if kind == "aba":
        return AbaPlant(model, **options)
    return make_plant(kind, URDF, model=model, **options)


def excitation(model, steps, seed):
    """Smooth random accelerations (steps, nv) of a few rad/s^2."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(-2.0, 2.0, (3, model.nv))
    t = np.arange(steps)[:, None] * 1e-3
    return weights[0] + weights[1] * np.sin(7 * t) + weights[2] * np.cos(11 * t)


def test_mujoco_and_aba_plants_agree_without_dissipation(arm):
    model, data = arm
    q0 = np.array([0.2, -0.4, 0.3, -1.0, 0.5, 0.6, -0.2])
    v0 = np.array([0.3, -0.2, 0.1, 0.4, -0.5, 0.2, 0.6])
    plants = [plant_of("aba", model), plant_of("mujoco", model)]
    accelerations = excitation(model, 300, seed=1)
    for plant in plants:
        plant.reset(q0, v0)
        for acceleration in accelerations:
            # Inverse dynamics at the plant's own state keeps the motion gentle and the arm
            # off its joint limits, which MuJoCo enforces and the ABA plant does not.
            plant.step(rd.rnea(model, data, plant.q, plant.v, acceleration))
    aba, engine = plants
    assert (np.abs(aba.q) < 0.8 * np.asarray(model.upper_position_limit)).all()
    # Same equations, same integrator, two independent implementations: round-off only.
    assert_close(engine.q, aba.q, what="positions after 0.3 s")
    assert_close(engine.v, aba.v, what="velocities after 0.3 s")
    assert engine.time == pytest.approx(0.3) and aba.time == pytest.approx(0.3)


@pytest.mark.parametrize("backend", ["aba", "mujoco"])
def test_gravity_compensation_holds_still(arm, backend):
    model, data = arm
    plant = plant_of(backend, model, damping=0.5, friction=0.2)
    q0 = np.array([0.5, 0.7, -0.3, -1.2, 0.4, 0.9, 0.1])
    plant.reset(q0)
    plant.step(rd.gravity_torques(model, data, q0), steps=500)
    assert_close(plant.q, q0, what="positions")
    assert_close(plant.v, np.zeros(7), what="velocities")


@pytest.mark.parametrize("backend", ["aba", "mujoco"])
def test_damping_and_friction_slow_the_arm_down(arm, backend):
    model, data = arm
    q0 = np.zeros(7)
    v0 = np.full(7, 1.0)
    speeds = {}
    for damping, friction in ((0.0, 0.0), (2.0, 1.0)):
        plant = plant_of(backend, model, damping=damping, friction=friction)
        plant.reset(q0, v0)
        for _ in range(100):
            plant.step(rd.gravity_torques(model, data, plant.q))
        M = rd.crba(model, data, plant.q)
        speeds[damping] = plant.v @ M @ plant.v
    # Twice the kinetic energy with dissipation is clearly below the conservative case.
    assert speeds[2.0] < 0.8 * speeds[0.0]


@pytest.mark.parametrize("backend", ["aba", "mujoco"])
def test_torque_saturates_at_the_effort_limit(arm, backend):
    model, _ = arm
    limit = np.asarray(model.effort_limit)
    command = 2.0 * limit * np.array([1, -1, 1, -1, 1, -1, 1])
    saturated = plant_of(backend, model)
    exact = plant_of(backend, model)
    saturated.reset(np.zeros(7))
    exact.reset(np.zeros(7))
    applied = saturated.step(command, steps=20)
    exact.step(np.clip(command, -limit, limit), steps=20)
    assert_close(applied, np.clip(command, -limit, limit))
    assert saturated.saturated_steps == 20 and exact.saturated_steps == 0
    assert_close(saturated.q, exact.q)


@pytest.mark.parametrize("backend", ["aba", "mujoco"])
def test_brakes_stop_the_joints_where_they_are(arm, backend):
    model, _ = arm
    plant = plant_of(backend, model)
    plant.reset(np.full(7, 0.1), np.full(7, 0.5))
    plant.step(np.zeros(7), steps=10)
    q = plant.q
    plant.brake()
    assert_close(plant.q, q, what="positions kept")
    assert_close(plant.v, np.zeros(7), what="velocities stopped")
    assert plant.time == pytest.approx(0.01)


@pytest.mark.parametrize("backend", ["aba", "mujoco"])
def test_bad_torque_is_refused_and_changes_nothing(arm, backend):
    model, _ = arm
    plant = plant_of(backend, model)
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
    # The in-process plant is not a simulator backend.
    with pytest.raises(InputError, match="backend"):
        make_plant("builtin", URDF, model=model)
    with pytest.raises(ModelError, match="not in the MuJoCo model"):
        MujocoPlant(URDF, ["joint1", "nope"], [1.0, 1.0])
    with pytest.raises(InputError, match="damping"):
        AbaPlant(model, damping=-1.0)
    with pytest.raises(InputError, match="dt"):
        AbaPlant(model, dt=0.0)


def test_missing_mujoco_is_a_clear_error(arm, monkeypatch):
    model, _ = arm
    monkeypatch.setitem(__import__("sys").modules, "mujoco", None)  # what `import mujoco` sees uninstalled
    with pytest.raises(RbdDerivError, match="pip install mujoco"):
        make_plant("mujoco", URDF, model=model)
