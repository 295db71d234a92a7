"""Benchmark of the legged MPC tick: ``python -m rbd_deriv.bench legged`` (``--help`` for options).

A tick is :meth:`rbd_deriv.control.legged.LeggedMPC.solve` with one real-time iteration: move the
contact schedule one knot along the gait, warm-start from the previous plan, relinearize the
contact dynamics of every knot (touchdown impulses composed), the costs' Gauss-Newton derivatives,
the Riccati backward and forward passes, the first knot's forces and cone check. The loop feeds
each tick the state its previous plan predicts one knot later (the plant is the MPC's own model,
stepped by the knot's dt), so every tick warm-starts as on a robot and relinearizes.

Cases: solo12 trotting (point feet, N = 20, dt = 0.02 s: 8 knots of swing per diagonal pair, 2 of
support) and talos standing on its two soles (6D contacts, N = 20). Targets on this 2-core
machine (issue "whole-body MPC with contacts"): solo12 >= 500 Hz, talos >= 100 Hz. Reported:
median and p99 tick, the rate the median allows, and the median time of each part of the tick,
which says where the time goes. Crocoddyl is not timed here: it is not in the package's
environment (installing it beside Pinocchio 4.1 downgrades example-robot-data).

BLAS is set to one thread for the process (:func:`rbd_deriv.control.blas.single_threaded_blas`).
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
from rbd_deriv.control.blas import single_threaded_blas
from rbd_deriv.control.legged import TIMING_PARTS, LeggedMPC
from rbd_deriv.control.schedule import Gait
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf

#: robot -> (gait, target rate [Hz]).
CASES = {"solo12": ("trot", 500.0), "talos": ("stand", 100.0)}

HEADERS = (["robot", "nv", "contacts", "gait", "N", "tick p50 [us]", "tick p99 [us]", "rate [Hz]",
            "target [Hz]", "met"] + [f"{part} [us]" for part in TIMING_PARTS]
           + ["cone refusals", "failures"])


def build(name: str, horizon: int, dt: float) -> tuple[Any, LeggedMPC, np.ndarray]:
    """The model, its legged MPC on the case's gait, and the posture's state at rest."""
    info = LEGGED_ROBOTS[name]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf(name), str(info["posture"]),
                                missing="neutral")
    feet = tuple(info["feet"])
    gait = (Gait.trot(feet, swing=8, support=2) if CASES[name][0] == "trot"
            else Gait.standing(feet, str(info["kind"])))
    mpc = LeggedMPC(model, feet, gait, posture, horizon=horizon, dt=dt)
    return model, mpc, np.r_[posture, np.zeros(model.nv)]


def run_case(name: str, ticks: int, horizon: int = 20, dt: float = 0.02, warmup: int = 10) -> dict:
    """Time ``ticks`` ticks after ``warmup`` untimed ones; medians of the tick and its parts."""
    model, mpc, x = build(name, horizon, dt)
    measured, parts = [], {part: [] for part in TIMING_PARTS}
    refusals = failures = 0
    for tick in range(warmup + ticks):
        start = time.perf_counter()
        plan = mpc.solve(x, phase=tick)
        elapsed = time.perf_counter() - start
        if tick >= warmup:
            measured.append(elapsed * 1e6)
            for part in TIMING_PARTS:
                parts[part].append(plan.timings[part] * 1e6)
            failures += not plan.result.ok
            refusals += plan.result.ok and not plan.cone_ok
        x = mpc.solver.X[1].copy()
    median = float(np.median(measured))
    return {"nv": model.nv, "contacts": len(mpc.feet), "gait": CASES[name][0], "horizon": horizon,
            "median_us": median, "p99_us": float(np.percentile(measured, 99)),
            "rate_hz": 1e6 / median, "parts_us": {part: float(np.median(values))
                                                   for part, values in parts.items()},
            "cone_refusals": int(refusals), "failures": int(failures)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench legged", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=200, help="timed ticks per case (default 200)")
    parser.add_argument("--robots", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", help="also write the results to this JSON file")
    arguments = parser.parse_args(argv)
    single_threaded_blas()
    rows, results = [], []
    for name in arguments.robots:
        result = run_case(name, arguments.ticks)
        target = CASES[name][1]
        rows.append([name, result["nv"], result["contacts"], result["gait"], result["horizon"],
                     result["median_us"], result["p99_us"], result["rate_hz"], f">= {target:g}",
                     "yes" if result["rate_hz"] >= target else "NO"]
                    + [result["parts_us"][part] for part in TIMING_PARTS]
                    + [result["cone_refusals"], result["failures"]])
        results.append({"robot": name, "target_hz": target, **result})
        print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows, title=f"Legged MPC tick ({arguments.ticks} ticks per case, one "
                                            "real-time iteration each; parts are medians)"))
    if arguments.json:
        write_json(arguments.json, {"machine": machine_info(("numpy", "numba")), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
