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
which says where the time goes. ``--crocoddyl-python PATH`` also times Crocoddyl on the same
problems, in another environment (``./run crocoddyl-env`` makes it and prints its Python: Crocoddyl
3.2.1 needs Pinocchio 4.0), right after our ticks: :mod:`rbd_deriv.bench.crocoddyl_legged` says how
the problem is written there and where it differs.

``--push``: a closed loop without ROS on the rigid-contact plant of
:mod:`rbd_deriv.testing.rigid_contact` (every foot held by ``rd.contact_dynamics``, 1 kHz, the
plan's feedback policy between ticks every 20 ms, N = 10), standing, with a lateral push on the base
(solo12: 5 N, talos: 200 N, 0.1 s from t = 0.3 s) over 2 s: the largest and final base
deviation, refused plans and the plant's largest excursion out of the friction cone.

BLAS is set to one thread for the process (:func:`rbd_deriv.threads.single_threaded_blas`).
Nothing is asserted: the numbers are printed (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.control.legged import TIMING_PARTS, LeggedMPC, LeggedWeights
from rbd_deriv.control.schedule import Gait
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf
from rbd_deriv.threads import single_threaded_blas

#: Weight of Crocoddyl's friction-cone cost (a quadratic barrier, zero inside the pyramid).
CROCODDYL_CONE_WEIGHT = 1.0

#: robot -> (gait, target rate [Hz]).
CASES = {"solo12": ("trot", 500.0), "talos": ("stand", 100.0)}

HEADERS = (["robot", "nv", "contacts", "gait", "N", "tick p50 [us]", "tick p99 [us]", "rate [Hz]",
            "target [Hz]", "met"] + [f"{part} [us]" for part in TIMING_PARTS]
           + ["cone refusals", "failures", "Crocoddyl p50 [us] (ours / theirs)"])


def _crocoddyl_cell(crocoddyl: dict, ours_us: float) -> str:
    if not crocoddyl:
        return "-"
    if "error" in crocoddyl:
        return f"failed: {crocoddyl['error'][:60]}"
    return f"{crocoddyl['median_us']:.0f} ({ours_us / crocoddyl['median_us']:.2f})"


def build(name: str, horizon: int, dt: float, standing: bool = False
          ) -> tuple[Any, LeggedMPC, np.ndarray]:
    """The model, its legged MPC on the case's gait (or standing), and the posture's state at rest."""
    info = LEGGED_ROBOTS[name]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf(name), str(info["posture"]),
                                missing="neutral")
    feet = tuple(info["feet"])
    gait = (Gait.trot(feet, swing=8, support=2) if CASES[name][0] == "trot" and not standing
            else Gait.standing(feet, str(info["kind"])))
    weights = LeggedWeights(**dict(info.get("weights", {})))
    mpc = LeggedMPC(model, feet, gait, posture, horizon=horizon, dt=dt, weights=weights)
    return model, mpc, np.r_[posture, np.zeros(model.nv)]


def crocoddyl_spec(name: str, mpc: LeggedMPC, x0: np.ndarray, ticks: int, warmup: int) -> dict:
    """The problem of ``mpc`` as the JSON that :mod:`rbd_deriv.bench.crocoddyl_legged` reads."""
    model = mpc.model
    data = model.create_data()
    rd.forward_kinematics(model, data, x0[:model.nq])
    placements = [rd.frame_placement(model, data, foot) for foot in mpc.feet]
    weights = mpc.weights
    return {"urdf": str(EXAMPLE_ROBOTS[name]), "feet": list(mpc.feet), "kind": mpc.kinds[0],
            "x0": x0.tolist(), "x_ref": mpc.x_ref.tolist(), "state_weights": mpc.state_weight.tolist(),
            "weights": {"terminal": weights.terminal, "torque": weights.torque,
                        "force": weights.force, "swing": weights.swing},
            "cone_weight": CROCODDYL_CONE_WEIGHT, "u_static": mpc.u_static.tolist(),
            "weight": mpc.weight, "pattern": mpc.gait.pattern.tolist(), "lift": mpc._lift.tolist(),
            "stance": [p[:3, 3].tolist() for p in placements],
            "stance_rotations": [p[:3, :3].tolist() for p in placements],
            "swing_height": mpc.swing_height, "mu": mpc.mu, "dt": mpc.dt, "horizon": mpc.horizon,
            "ticks": ticks, "warmup": warmup}


def run_crocoddyl(python: str, spec: dict) -> dict:
    """Crocoddyl's ticks in the interpreter ``python`` (see :mod:`rbd_deriv.bench.crocoddyl_legged`)."""
    script = Path(__file__).with_name("crocoddyl_legged.py")
    completed = subprocess.run([python, str(script)], input=json.dumps(spec), capture_output=True,
                               text=True, timeout=1800)
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1] if completed.stderr else "failed"}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run_case(name: str, ticks: int, horizon: int = 20, dt: float = 0.02, warmup: int = 10,
             crocoddyl_python: str | None = None) -> dict:
    """Time ``ticks`` ticks after ``warmup`` untimed ones; medians of the tick and its parts; with
    ``crocoddyl_python``, Crocoddyl's ticks on the same problem right after."""
    model, mpc, x = build(name, horizon, dt)
    start_state = x.copy()
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
            failures += not plan.ok
            refusals += plan.ok and not plan.cone_ok
        x = mpc.solver.X[1].copy()
    median = float(np.median(measured))
    if crocoddyl_python:
        crocoddyl = run_crocoddyl(crocoddyl_python, crocoddyl_spec(name, mpc, start_state, ticks, warmup))
    else:
        crocoddyl = {}
    return {"crocoddyl": crocoddyl, "nv": model.nv, "contacts": len(mpc.feet), "gait": CASES[name][0],
            "horizon": horizon,
            "median_us": median, "p99_us": float(np.percentile(measured, 99)),
            "rate_hz": 1e6 / median, "parts_us": {part: float(np.median(values))
                                                   for part, values in parts.items()},
            "cone_refusals": int(refusals), "failures": int(failures)}


#: robot -> lateral push [N] of the closed-loop case.
PUSHES = {"solo12": 5.0, "talos": 200.0}

PUSH_HEADERS = ["robot", "push [N]", "peak deviation [mm]", "at [s]", "final deviation [mm]",
                "refused plans", "plant cone excursion [N]", "tick p50 [us]"]


def run_push(name: str, seconds: float = 2.0) -> dict:
    """The standing closed loop with a push (see the module docstring)."""
    from rbd_deriv.testing.rigid_contact import RigidContactPlant, standing_loop
    info = LEGGED_ROBOTS[name]
    model, mpc, x0 = build(name, 10, 0.02, standing=True)
    plant = RigidContactPlant(model, tuple(info["feet"]), str(info["kind"]), x0)
    run = standing_loop(mpc, plant, seconds, [0.0, PUSHES[name], 0.0], 0.3, 0.1)
    deviation = run["deviation"]
    return {"push_n": PUSHES[name], "peak_m": float(deviation.max()),
            "peak_at_s": float(np.argmax(deviation) * 1e-3), "final_m": float(deviation[-1]),
            "refused": int(run["refused"]), "plant_cone_excursion_n": run["cone_violation"],
            "tick_median_us": float(np.median(run["tick_seconds"]) * 1e6)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench legged", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=200, help="timed ticks per case (default 200)")
    parser.add_argument("--robots", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--crocoddyl-python", metavar="PATH",
                        help="a Python with crocoddyl (./run crocoddyl-env prints one): also time "
                             "Crocoddyl on the same problems")
    parser.add_argument("--push", action="store_true",
                        help="also run the standing closed loop with a push on the rigid-contact plant")
    parser.add_argument("--json", help="also write the results to this JSON file")
    arguments = parser.parse_args(argv)
    single_threaded_blas()
    rows, results = [], []
    for name in arguments.robots:
        result = run_case(name, arguments.ticks, crocoddyl_python=arguments.crocoddyl_python)
        target = CASES[name][1]
        rows.append([name, result["nv"], result["contacts"], result["gait"], result["horizon"],
                     result["median_us"], result["p99_us"], result["rate_hz"], f">= {target:g}",
                     "yes" if result["rate_hz"] >= target else "NO"]
                    + [result["parts_us"][part] for part in TIMING_PARTS]
                    + [result["cone_refusals"], result["failures"]]
                    + [_crocoddyl_cell(result["crocoddyl"], result["median_us"])])
        results.append({"robot": name, "target_hz": target, **result})
        print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows, title=f"Legged MPC tick ({arguments.ticks} ticks per case, one "
                                            "real-time iteration each; parts are medians)"))
    pushes = []
    if arguments.push:
        push_rows = []
        for name in arguments.robots:
            result = run_push(name)
            pushes.append({"robot": name, **result})
            push_rows.append([name, result["push_n"], 1e3 * result["peak_m"], result["peak_at_s"],
                              1e3 * result["final_m"], result["refused"],
                              result["plant_cone_excursion_n"], result["tick_median_us"]])
        print()
        print(format_table(PUSH_HEADERS, push_rows, title="Standing closed loop on the rigid-contact "
                                                          "plant, push from 0.3 s to 0.4 s, 2 s"))
    if arguments.json:
        write_json(arguments.json, {"machine": machine_info(("numpy", "numba")), "results": results,
                                    "pushes": pushes})
    return 0


if __name__ == "__main__":
    sys.exit(main())
