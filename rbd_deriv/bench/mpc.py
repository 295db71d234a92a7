"""Benchmark of the MPC tick: ``python -m rbd_deriv.bench.mpc`` (``--help`` for options).

A tick is what the MPC node does between two commands: build the reference of the horizon
(inverse-dynamics feedforward over N knots) and solve (warm start, dynamics of the horizon,
Riccati pass with box-constrained torques, rollout). Each case runs the controller in closed loop
on the built-in plant for ``--ticks`` ticks at the node's default rate (200 Hz, so the warm start
shifts as on a robot), and times every tick; the plant and, in held mode, the linearization (the
dynamics node's work) are not timed. Reported: median and p99 tick time and the rate they allow.

Targets: the 7-dof arm with N = 20 at >= 500 Hz in held mode (1) and >= 200 Hz in
re-linearization mode (2). The mean cost per tick and the RMS tracking error of the closed
loop (the plant is the model itself, so any difference comes from the modes) compare the two. Talos with a fixed base (nv = 44) and Romeo with a fixed base
(nv = 55) are reported at N = 10 and N = 20; talos at N = 20 has the target of >= 200 Hz in both
modes, Romeo none. Romeo's hands and fingers have no
effort limit and no mass in their URDF: they get 10 N m and the test suite's minimum mass, and
the reference is centred where gravity can be held. Romeo's loop still does not track (its fingers
of a few grams on a swinging arm diverge): its rows time ticks of a failing loop, and a case whose
plant state leaves the finite numbers stops there (``diverged`` gives the tick).

Nothing is asserted: the numbers are printed (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.control import (HeldLinearization, Mode, ModelPredictiveController, MPCProblem,
                               SinusoidReference, horizon_reference)
from rbd_deriv.sim import AbaPlant
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, bundled_urdf, with_minimum_mass
from rbd_deriv.threads import single_threaded_blas

#: Rate the controller runs at in the benchmark loop [Hz], the node's default.
TICK_RATE = 200.0

#: Targets on the arm at N = 20: mode -> rate [Hz].
ARM_TARGETS = {Mode.HELD: 500.0, Mode.RELINEARIZE: 200.0}
TALOS_TARGET = 200.0
"""Fixed-base talos at N = 20, either mode [Hz]."""

HEADERS = ["robot", "nv", "N", "mode", "tick p50 [us]", "tick p99 [us]", "rate [Hz]",
           "target [Hz]", "met", "mean cost", "rms error [rad]", "failures", "diverged at tick"]

#: Torque bound [N m] for joints without an effort limit in their URDF (Romeo's fingers).
DEFAULT_EFFORT = 10.0


def load_robot(name: str) -> Any:
    """Fixed-base model of ``arm``, ``talos`` or ``romeo``."""
    if name == "arm":
        return rd.load_urdf(str(bundled_urdf("rbd_arm7")))
    source = EXAMPLE_ROBOTS[name]
    if name == "romeo":
        return rd.load_urdf(with_minimum_mass(source))
    return rd.load_urdf(str(source))


def holdable_center(model: Any, data: Any, lower: np.ndarray, upper: np.ndarray,
                    effort: np.ndarray, rng: Any, samples: int = 200) -> np.ndarray:
    """Centre of the reference motion: the middle of the joint ranges if gravity can be held there
    with half the effort limits, else the sample of the ranges that needs the least of them.

    Romeo cannot hold its wrists at mid-range (gravity needs 1.5 times their URDF effort limit): a
    reference there would measure a loop that cannot track.
    """
    def load(q: np.ndarray) -> float:
        return float(np.max(np.abs(rd.gravity_torques(model, data, q)) / effort))

    best = 0.5 * (lower + upper)
    best_load = load(best)
    for _ in range(samples):
        if best_load <= 0.5:
            break
        q = rng.uniform(lower, upper)
        if load(q) < best_load:
            best, best_load = q, load(q)
    return best


def run_case(model: Any, horizon: int, mode: Mode, ticks: int, seed: int = 0) -> dict:
    """Closed loop for ``ticks`` ticks; returns tick-time statistics [us] and the mean cost."""
    problem = MPCProblem.from_model(model, horizon=horizon, dt=0.01, mode=mode,
                                    default_effort=DEFAULT_EFFORT)
    controller = ModelPredictiveController(problem, model)
    data = model.create_data()
    plant = AbaPlant(model, dt=1e-3)
    # The plant clamps to the URDF limits; joints without one get the same bound as the problem
    # (a URDF limit of 0 would leave them unactuated, falling under gravity).
    plant.effort_limit = problem.torque_upper.copy()
    rng = np.random.default_rng(seed)
    lower = np.maximum(model.lower_position_limit, -np.pi)
    upper = np.minimum(model.upper_position_limit, np.pi)
    center = holdable_center(model, data, lower, upper, problem.torque_upper, rng)
    frequency = rng.uniform(0.2, 0.6, model.nv)
    # Peak speeds a 2 pi f stay below 80 % of the URDF velocity limits where they are given.
    speed = np.where(model.velocity_limit > 0, model.velocity_limit, np.inf)
    amplitude = np.minimum(0.15 * (upper - lower), 0.8 * speed / (2 * np.pi * frequency))
    reference = SinusoidReference(center, amplitude, frequency, ramp=0.5)
    plant.reset(center)
    X_ref = np.zeros((horizon + 1, 2 * model.nv))
    U_ref = np.zeros((horizon, model.nv))
    times, costs, errors, failures, diverged = [], [], [], 0, None
    steps_per_tick = int(round(1.0 / (TICK_RATE * plant.dt)))
    for tick in range(ticks):
        t = tick / TICK_RATE
        q, v = plant.q, plant.v
        linearization = None
        if mode is Mode.HELD:
            u = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()
            A, B = rd.linearize(model, data, q, v, u, problem.dt)
            linearization = HeldLinearization(A.copy(), B.copy(), np.r_[q, v], u,
                                              data.x_next.copy(), problem.dt)
        start = time.perf_counter()
        horizon_reference(reference, t, horizon, problem.dt, model, problem.torque_lower,
                          problem.torque_upper, X_ref, U_ref, data)
        controller.set_reference(X_ref, U_ref)
        plan = controller.solve(np.r_[q, v], t, linearization)
        times.append(time.perf_counter() - start)
        if not plan.ok:
            failures += 1
        else:
            costs.append(controller.cost(plan))
        torque = plan.torque if plan.ok else rd.gravity_torques(model, data, q)
        try:
            plant.step(torque, steps_per_tick)
        except rd.InputError:  # the plant's state is no longer finite: the loop diverged
            diverged = tick
            break
        errors.append(plant.q - reference.sample(np.array([t + 1.0 / TICK_RATE]))[0][0])
    # The first ticks include numba's compilation or cache loading.
    measured = np.asarray(times[min(10, ticks // 5):]) * 1e6
    median = float(np.median(measured))
    return {"median_us": median, "p99_us": float(np.percentile(measured, 99)),
            "rate_hz": 1e6 / median, "mean_cost": float(np.mean(costs)) if costs else float("nan"),
            "tracking_rms_rad": float(np.sqrt(np.mean(np.square(errors)))), "failures": failures,
            "diverged": diverged}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench.mpc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=400, help="ticks per case (default 400)")
    parser.add_argument("--robots", nargs="+", default=["arm", "talos", "romeo"],
                        choices=["arm", "talos", "romeo"])
    parser.add_argument("--json", help="also write the results to this JSON file")
    arguments = parser.parse_args(argv)
    single_threaded_blas()  # as the MPC node does
    rows, results = [], []
    for name in arguments.robots:
        model = load_robot(name)
        horizons = [20] if name == "arm" else [10, 20]
        for horizon in horizons:
            for mode in Mode:
                result = run_case(model, horizon, mode, arguments.ticks)
                target = (ARM_TARGETS.get(mode) if name == "arm"
                          else TALOS_TARGET if name == "talos" and horizon == 20 else None)
                met = "-" if target is None else ("yes" if result["rate_hz"] >= target else "NO")
                rows.append([name, model.nv, horizon, mode.value, result["median_us"],
                             result["p99_us"], result["rate_hz"],
                             "-" if target is None else f">= {target:g}", met,
                             result["mean_cost"], result["tracking_rms_rad"], result["failures"],
                             "-" if result["diverged"] is None else result["diverged"]])
                results.append({"robot": name, "nv": model.nv, "horizon": horizon,
                                "mode": mode.value, "target_hz": target, **result})
                print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows, title=f"MPC tick ({arguments.ticks} closed-loop ticks per case at "
                             f"{TICK_RATE:g} Hz; rate = 1 / median tick)"))
    if arguments.json:
        write_json(arguments.json, {"machine": machine_info(("numpy", "numba")), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
