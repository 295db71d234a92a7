"""Record the fixed-base MPC's plans, tick by tick, with every input that made them.

Run once on the commit whose MPC is the reference (8350ccc, the last one with the separate fixed-base
stack: ``MPCProblem`` + ``RiccatiWorkspace`` + the dense Riccati kernels)::

    .venv/bin/python test/data/record_fixed_base_plans.py

It writes ``test/data/fixed_base_plans/<case>.npz``: per tick the measured state, its time, the held
linearization (held mode), the reference and the disturbance handed to ``solve``, and the plan that came
out (states, torques, first gain, cost, iteration counts, status). ``test/test_mpc.py`` feeds the same
inputs, in the same order, to the MPC of today's commit and asks for the same plans to 1e-9.

Each case is a short closed loop on an ABA plant (1 ms steps, 100 Hz ticks) tracking a sinusoid, so that
the ticks warm-start from their predecessors the way a running node does. The cases cover both modes, both
Riccati passes (the bundled 7-joint arm is under the structured pass's joint count, panda and fixed-base
talos above it), torque boxes that bind, disturbance estimates and three Gauss-Newton iterations per tick.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control import (HeldLinearization, Mode, ModelPredictiveController, MPCProblem,
                               SinusoidReference, horizon_reference)
from rbd_deriv.sim import AbaPlant
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, bundled_urdf

FOLDER = Path(__file__).resolve().parent / "fixed_base_plans"
TICK_RATE = 100.0

#: name: (robot, horizon, mode, ticks, torque margin, iterations, disturbance [N m] or 0, reference amplitude as a
#: fraction of each joint's range). Each keeps its plans bounded: a plan that diverges (states of 1e9 and more)
#: amplifies round-off past any tolerance and compares nothing.
CASES = {
    "arm_held": ("arm", 20, Mode.HELD, 12, 1.0, 1, 0.0, 0.1),
    "arm_relinearize": ("arm", 20, Mode.RELINEARIZE, 12, 1.0, 1, 0.0, 0.1),
    "arm_held_box": ("arm", 20, Mode.HELD, 12, 0.6, 1, 0.5, 0.1),
    "arm_relinearize_iterations": ("arm", 20, Mode.RELINEARIZE, 8, 0.5, 3, 0.3, 0.1),
    "panda_held": ("panda", 15, Mode.HELD, 10, 1.0, 1, 0.0, 0.03),
    "panda_relinearize": ("panda", 15, Mode.RELINEARIZE, 10, 1.0, 1, 0.2, 0.03),
    "talos_held": ("talos", 10, Mode.HELD, 6, 1.0, 1, 0.0, 0.1),
    "talos_relinearize_box": ("talos", 10, Mode.RELINEARIZE, 6, 0.5, 1, 0.0, 0.1),
}


def load(robot: str):
    """Fixed-base model of ``robot``."""
    if robot == "arm":
        return rd.load_urdf(str(bundled_urdf("rbd_arm7")))
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[robot]))
    if robot == "panda":
        # Panda's fingers carry next to no inertia: with an armature its mass matrix stays regular
        # wherever the loop takes it.
        model.armature = np.full(model.nv, 0.01)
    return model


def record(name: str) -> dict:
    """Run one case; the arrays of its file."""
    robot, horizon, mode, ticks, margin, iterations, disturbance_size, amplitude = CASES[name]
    model = load(robot)
    data = model.create_data()
    problem = MPCProblem.from_model(model, horizon=horizon, dt=0.01, mode=mode, torque_margin=margin,
                                    max_iterations=iterations, default_effort=10.0)
    controller = ModelPredictiveController(problem, model)
    plant = AbaPlant(model, dt=1e-3)
    plant.effort_limit = problem.torque_upper.copy()
    rng = np.random.default_rng(7)
    lower = np.maximum(model.lower_position_limit, -np.pi)
    upper = np.minimum(model.upper_position_limit, np.pi)
    center = 0.5 * (lower + upper)
    reference = SinusoidReference(center, amplitude * (upper - lower), rng.uniform(0.3, 0.8, model.nv),
                                  ramp=0.3)
    plant.reset(center + 0.02 * (upper - lower) * rng.uniform(-1.0, 1.0, model.nv))
    nv, nx = model.nv, 2 * model.nv
    X_ref = np.zeros((horizon + 1, nx))
    U_ref = np.zeros((horizon, nv))
    out = {key: [] for key in ("x0", "time", "A", "B", "x_lin", "u_lin", "x_next", "X_ref", "U_ref",
                                "disturbance", "states", "torques", "gain", "cost", "iterations",
                                "qp_iterations", "clamped", "status")}
    steps = int(round(1.0 / (TICK_RATE * plant.dt)))
    for tick in range(ticks):
        # A late tick now and then, so that warm starts read the previous plan between knots.
        t = tick / TICK_RATE + (0.0043 if tick % 3 == 2 else 0.0)
        q, v = plant.q.copy(), plant.v.copy()
        x0 = np.r_[q, v]
        linearization = None
        if mode is Mode.HELD:
            u = rd.rnea(model, data, q, v, np.zeros(nv)).copy()
            A, B = rd.linearize(model, data, q, v, u, problem.dt)
            linearization = HeldLinearization(A.copy(), B.copy(), x0.copy(), u, data.x_next.copy(),
                                              problem.dt)
            for key, value in (("A", A), ("B", B), ("x_lin", x0), ("u_lin", u),
                               ("x_next", data.x_next)):
                out[key].append(np.array(value))
        horizon_reference(reference, t, horizon, problem.dt, model, problem.torque_lower,
                          problem.torque_upper, X_ref, U_ref, data)
        disturbance = disturbance_size * np.sin(np.arange(nv) + tick)
        controller.set_reference(X_ref, U_ref)
        plan = controller.solve(x0, t, linearization, disturbance)
        for key, value in (("x0", x0), ("time", t), ("X_ref", X_ref), ("U_ref", U_ref),
                           ("disturbance", disturbance), ("states", plan.states),
                           ("torques", plan.torques), ("gain", plan.gain), ("cost", plan.cost),
                           ("iterations", plan.iterations), ("qp_iterations", plan.qp_iterations),
                           ("clamped", plan.clamped), ("status", plan.status.value)):
            out[key].append(np.array(value))
        try:
            plant.step(plan.torque if plan.ok else rd.gravity_torques(model, data, q), steps)
        except rd.InputError:  # the plant diverged: the ticks so far are the case
            break
    arrays = {key: np.array(values) for key, values in out.items() if values}
    arrays["case"] = np.array([robot, mode.value, str(horizon), str(margin), str(iterations)])
    return arrays


def main() -> None:
    FOLDER.mkdir(exist_ok=True)
    for name in CASES:
        arrays = record(name)
        np.savez_compressed(FOLDER / f"{name}.npz", **arrays)
        print(f"{name}: {len(arrays['time'])} ticks, clamped {arrays['clamped'].tolist()}, "
              f"status {sorted(set(arrays['status'].tolist()))}, largest |state| "
              f"{np.abs(arrays['states']).max():.3g}, cost up to {np.nanmax(arrays['cost']):.3g}")


if __name__ == "__main__":
    main()
