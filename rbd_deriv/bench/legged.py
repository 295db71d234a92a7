"""Benchmark of the legged MPC tick: ``python -m rbd_deriv.bench legged`` (``--help`` for options).

A tick is :meth:`rbd_deriv.control.legged.LeggedMPC.solve` with one real-time iteration: move the
contact schedule one knot along the gait, warm-start from the previous plan, relinearize the
contact dynamics of every knot (touchdown impulses composed), the costs' Gauss-Newton derivatives,
the Riccati backward and forward passes, the first knot's forces and cone check. The loop feeds
each tick the state its previous plan predicts one knot later (the plant is the MPC's own model,
stepped by the knot's dt), so every tick warm-starts as on a robot and relinearizes.

Cases (:func:`cases`), one row each:

- every gait the MPC node builds for the robot, at the node's horizon and step: the gaits of
  ``gaits`` (and ``gait``, ``idle_gait``) in config/mpc_node.yaml overlaid by config/<robot>.yaml,
  made from its ``gait_table`` (:func:`~rbd_deriv.control.legged_settings.make_gait`), each horizon
  at least one cycle of its gait as the node makes it (:func:`robot_gaits`). solo12: stand, trot,
  pace, bound (cycles of 0.4 s at most) at N = 20, dt = 0.02 s, and crawl (0.8 s) at N = 40; talos: stand at
  N = 25, dt = 0.02 s, on the reduced model its node plans on (``locked_joints``: arms, grippers and head
  locked at the posture, :func:`node_locked_joints`; Crocoddyl gets the same reduced model);
- the long horizons of :data:`LONG_HORIZONS`, N = 50 x dt = 0.01 s (0.5 s ahead): solo12 trotting
  and talos standing.

Targets on this 2-core machine: N = 50 x 10 ms, solo12 trotting >= 100 Hz and talos standing
>= 50 Hz (issue "Locomotion: legged robots that go where they are told, at 100 Hz"); at the node's
N = 20, solo12 >= 500 Hz and talos >= 100 Hz (issue "whole-body MPC with contacts"), for every
gait; solo12's crawl at N = 40: the node's rate, 200 Hz (config/solo12.yaml ``rate_hz``). And on
every row, with Crocoddyl: our tick's median <= 0.5 of Crocoddyl's on the same problem.

Reported: median and p99 tick, the rate the median allows against its target, and the median time
of each part of the tick (:data:`~rbd_deriv.control.legged.TIMING_PARTS`), which says where the time
goes. ``--crocoddyl-python PATH`` also times Crocoddyl on the same problem, in another environment
(``./run crocoddyl-env`` makes it and prints its Python: Crocoddyl 3.2.1 needs Pinocchio 4.0), its
ticks in turn with ours (``--rounds`` rounds of a tenth of the ticks by default, each side warmed up
first), so that a change of the shared machine's load weighs on both: its median and p99, the share of its ticks whose line search took the
whole step (each shorter step costs it another rollout; ours takes the whole step, halved only beyond
the step's velocity bounds), ours / theirs and whether it is <= 0.5;
:mod:`rbd_deriv.bench.crocoddyl_legged` says how the problem is written there and where it differs.

The problem of a case: the robot's feet, contact kind and SRDF posture of
:data:`~rbd_deriv.testing.robots.LEGGED_ROBOTS`, its cost weights there too (``weights``; solo12: the
:class:`~rbd_deriv.control.legged.LeggedWeights` defaults), and the MPC's defaults for the rest (mu 0.7,
swing height 0.05 m unless the gait's row sets one; the node's are the same), the SRDF posture as it is
(the node first sets it on its floor). talos's weights are
those of config/talos.yaml; solo12's differ from config/solo12.yaml's, which holds the base harder and
the swing feet closer against a planned hop (base position 1e4 instead of 100, base velocity 100
instead of 1, swing 1e5 instead of 1e4, cone barrier 1 instead of 1e-3): the weights change the plan,
not the work of a tick, but solo12's rows are not its node's problem to the last number.

``--robots``, ``--gaits`` and ``--cases robot/gait/N ...`` select rows.

``--push``: a closed loop without ROS on the rigid-contact plant of
:mod:`rbd_deriv.testing.rigid_contact` (every foot held by ``rd.contact_dynamics``, 1 kHz, the
plan's feedback policy between ticks every 20 ms, N = 10), standing, with a lateral push on the base
(solo12: 5 N, talos: 200 N, 0.1 s from t = 0.3 s) over 2 s: the largest and final base
deviation, refused plans and the plant's largest excursion out of the friction cone.

One thread on both sides: BLAS is set to one thread for the process
(:func:`rbd_deriv.threads.single_threaded_blas`), and so are the batches of :mod:`rbd_deriv.core.batch`
(``numba.set_num_threads(1)``; with the machine's two, the linearization shares its knots with a worker
thread: measured no faster here, solo12 0.42 ms either way, talos 1.37 ms against 1.17 alone, at load 1-2).
Nothing is asserted: the numbers are printed (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numba
import numpy as np

import rbd_deriv as rd
from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.control.legged import TIMING_PARTS, LeggedMPC, LeggedWeights
from rbd_deriv.control.legged_settings import GaitSpec, built_gaits, make_gait, parse_gait_table, swing_height
from rbd_deriv.control.locked_joints import locked_positions
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf
from rbd_deriv.threads import single_threaded_blas

#: Weight of Crocoddyl's friction-cone cost (a quadratic barrier, zero inside the pyramid).
CROCODDYL_CONE_WEIGHT = 1.0

#: Our tick's median over Crocoddyl's that a row must not exceed.
RATIO_TARGET = 0.5

#: robot -> target rate [Hz] of its rows at the node's horizon (issue "whole-body MPC with contacts").
NODE_TARGETS = {"solo12": 500.0, "talos": 100.0}

#: (robot, gait) -> (N, dt [s], target rate [Hz]): the rows beside the node's configuration.
LONG_HORIZONS = {("solo12", "trot"): (50, 0.01, 100.0), ("talos", "stand"): (50, 0.01, 50.0)}


@dataclass(frozen=True)
class Case:
    """One row of the benchmark: ``robot`` on gait ``gait`` over ``horizon`` knots of ``dt`` [s], and the rate
    [Hz] its median tick should allow."""

    robot: str
    gait: str
    horizon: int
    dt: float
    target_hz: float

    @property
    def name(self) -> str:
        """``robot/gait/N``: what ``--cases`` selects."""
        return f"{self.robot}/{self.gait}/{self.horizon}"


def robot_gaits(robot: str) -> tuple[dict[str, GaitSpec], list[str], dict[str, Any]]:
    """What the MPC node builds for ``robot``: its gait table, the names of the gaits it makes (``gaits``, then
    ``gait`` and ``idle_gait`` if not among them) and its parameters (config/mpc_node.yaml's ``mpc_node``
    section overlaid by config/<robot>.yaml's, as the node is given both files)."""
    from rbd_deriv.demo.processes import read_parameters

    parameters = dict(read_parameters("mpc_node.yaml")["mpc_node"],
                      **read_parameters(f"{robot}.yaml").get("mpc_node", {}))
    return parse_gait_table(parameters["gait_table"]), built_gaits(parameters), parameters


def cases(robots: Sequence[str] = tuple(NODE_TARGETS)) -> list[Case]:
    """The rows of the module docstring for ``robots``, in order: each robot's node gaits at the node's horizon
    (at least one cycle) and step, then its :data:`LONG_HORIZONS`."""
    rows = []
    for robot in robots:
        table, names, parameters = robot_gaits(robot)
        info = LEGGED_ROBOTS[robot]
        feet = tuple(info["feet"])
        kinds = (str(info["kind"]),) * len(feet)
        horizon, dt = int(parameters["horizon"]), float(parameters["dt"])
        for gait in names:
            knots = make_gait(gait, feet, kinds, table, dt).period
            rows.append(Case(robot, gait, max(horizon, knots), dt,
                             NODE_TARGETS[robot] if knots <= horizon else float(parameters["rate_hz"])))
        rows += [Case(robot, gait, n, step, target)
                 for (name, gait), (n, step, target) in LONG_HORIZONS.items() if name == robot]
    return rows


HEADERS = (["case", "nv", "contacts", "dt [ms]", "tick p50 [ms]", "tick p99 [ms]", "rate [Hz]", "target [Hz]",
            "met"] + [f"{part} [ms]" for part in TIMING_PARTS]
           + ["cone refusals", "failures", "Crocoddyl p50 [ms]", "Crocoddyl p99 [ms]", "Crocoddyl full steps",
              "ours / theirs", f"<= {RATIO_TARGET:g}"])


def _crocoddyl_cells(crocoddyl: dict, ours_us: float) -> list:
    """Crocoddyl's median and p99 [ms], the share of its ticks whose line search took the whole step, ours /
    theirs and whether it meets :data:`RATIO_TARGET`."""
    if not crocoddyl:
        return ["-"] * 5
    if "error" in crocoddyl:
        return [f"failed: {crocoddyl['error'][:60]}"] + ["-"] * 4
    ratio = ours_us / crocoddyl["median_us"]
    return [1e-3 * crocoddyl["median_us"], 1e-3 * crocoddyl["p99_us"], crocoddyl["full_steps"], ratio,
            "yes" if ratio <= RATIO_TARGET else "NO"]


def node_locked_joints(name: str) -> dict[str, float]:
    """{joint: position [rad]} the MPC node of robot ``name`` plans as locked: its config's ``locked_joints`` at
    the SRDF posture (:func:`rbd_deriv.mpc_loops.planning_model`); empty for a robot planned whole."""
    robot = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True)
    posture = reference_posture(robot, example_robot_srdf(name), str(LEGGED_ROBOTS[name]["posture"]),
                                missing="neutral")
    return locked_positions(robot, list(robot_gaits(name)[2]["locked_joints"]), posture)


def build(name: str, gait: str, horizon: int, dt: float) -> tuple[Any, LeggedMPC, np.ndarray]:
    """The model of robot ``name``, its legged MPC on gait ``gait`` (``stand`` or a row of its node's gait table,
    :func:`robot_gaits`) over ``horizon`` knots of ``dt`` [s], and the posture's state at rest (nq + nv,)."""
    info = LEGGED_ROBOTS[name]
    table, _, parameters = robot_gaits(name)
    locked = node_locked_joints(name)
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True, locked_joints=locked)
    posture = reference_posture(model, example_robot_srdf(name), str(info["posture"]), missing="neutral",
                                absent=locked)
    feet = tuple(info["feet"])
    pattern = make_gait(gait, feet, (str(info["kind"]),) * len(feet), table, dt)
    weights = LeggedWeights(**dict(info.get("weights", {})))
    mpc = LeggedMPC(model, feet, pattern, posture, horizon=horizon, dt=dt, weights=weights,
                    swing_height=swing_height(table, gait, parameters["swing_height"]))
    return model, mpc, np.r_[posture, np.zeros(model.nv)]


def crocoddyl_spec(name: str, mpc: LeggedMPC, x0: np.ndarray, ticks: int, warmup: int) -> dict:
    """The problem of ``mpc`` as the JSON that :mod:`rbd_deriv.bench.crocoddyl_legged` reads: the gait as its
    knot pattern (P, nc) and lift table (P, nc) of one period, the feet and their kinds, the references and
    weights, N and dt [s], the start x0 (nx,), and how many ticks to time after how many untimed ones. The
    feet's stance placements are the MPC's own (the posture's), wherever x0 puts them."""
    weights = mpc.weights
    return {"urdf": str(EXAMPLE_ROBOTS[name]), "feet": list(mpc.feet), "kinds": list(mpc.kinds),
            "locked": node_locked_joints(name),
            "x0": x0.tolist(), "x_ref": mpc.x_ref.tolist(), "state_weights": mpc.state_weight.tolist(),
            "weights": {"terminal": weights.terminal, "torque": weights.torque, "force": weights.force,
                        "swing": weights.swing, "swing_orientation": weights.swing_orientation},
            "cone_weight": CROCODDYL_CONE_WEIGHT, "u_static": mpc.u_static.tolist(),
            "weight": mpc.weight, "pattern": mpc.gait.pattern.tolist(), "lift": mpc._lift.tolist(),
            "stance": mpc.stance.tolist(), "stance_rotations": mpc.stance_rotations.tolist(),
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


class CrocoddylTicks:
    """Crocoddyl's ticks on ``spec``'s problem, on request, in the interpreter ``python``
    (:func:`rbd_deriv.bench.crocoddyl_legged.serve`): its untimed warm-up ticks are run when it is made.

    Raises:
        RuntimeError: The interpreter's process ended without answering (the last line of its stderr says why).
    """

    def __init__(self, python: str, spec: dict) -> None:
        script = Path(__file__).with_name("crocoddyl_legged.py")
        self._errors = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen([python, str(script), "--serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._errors, text=True)
        self._send(json.dumps(spec))

    def _send(self, line: str) -> dict:
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
        except BrokenPipeError:
            answer = ""
        if not answer:
            self._process.wait(timeout=60)
            self._errors.seek(0)
            lines = self._errors.read().strip().splitlines()
            raise RuntimeError(lines[-1] if lines else f"exited with {self._process.returncode}")
        return json.loads(answer)

    def run(self, ticks: int) -> list[float]:
        """Time ``ticks`` more ticks: their times [us]."""
        return self._send(str(int(ticks)))["us"]

    def close(self) -> dict:
        """The reply of :func:`rbd_deriv.bench.crocoddyl_legged.run` over every tick timed; the process ends."""
        try:
            return self._send("")
        finally:
            self._process.wait(timeout=60)
            self._errors.close()


def run_case(case: Case, ticks: int, warmup: int = 10, crocoddyl_python: str | None = None,
             rounds: int = 10) -> dict:
    """Time ``ticks`` ticks of ``case`` after ``warmup`` untimed ones; medians of the tick and its parts [us].
    With ``crocoddyl_python``, Crocoddyl's ticks on the same problem in turn with ours: ``rounds`` rounds of
    ``ticks / rounds`` of ours then as many of Crocoddyl's, so that both meet the same load of the machine."""
    model, mpc, x = build(case.robot, case.gait, case.horizon, case.dt)
    crocoddyl: dict = {}
    theirs = None
    if crocoddyl_python:
        try:
            theirs = CrocoddylTicks(crocoddyl_python, crocoddyl_spec(case.robot, mpc, x, ticks, warmup))
        except RuntimeError as error:
            crocoddyl = {"error": str(error)}
    measured, parts = [], {part: [] for part in TIMING_PARTS}
    refusals = failures = 0
    tick = 0
    sizes = [warmup] + [ticks // rounds + (r < ticks % rounds) for r in range(rounds)]
    for round_, size in enumerate(sizes):
        for _ in range(size):
            start = time.perf_counter()
            plan = mpc.solve(x, phase=tick)
            elapsed = time.perf_counter() - start
            if round_:
                measured.append(elapsed * 1e6)
                for part in TIMING_PARTS:
                    parts[part].append(plan.timings[part] * 1e6)
                failures += not plan.ok
                refusals += plan.ok and not plan.cone_ok
            x = mpc.solver.X[1].copy()
            tick += 1
        if round_ and theirs is not None and size:
            try:
                theirs.run(size)
            except RuntimeError as error:
                crocoddyl, theirs = {"error": str(error)}, None
    if theirs is not None:
        try:
            crocoddyl = theirs.close()
        except RuntimeError as error:
            crocoddyl = {"error": str(error)}
    median = float(np.median(measured))
    return {"crocoddyl": crocoddyl, "nv": model.nv, "contacts": len(mpc.feet), "gait": case.gait,
            "horizon": case.horizon, "dt": case.dt,
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
    model, mpc, x0 = build(name, "stand", 10, 0.02)
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
    parser.add_argument("--warmup", type=int, default=10, help="untimed ticks before them (default 10)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="with Crocoddyl: our ticks and Crocoddyl's in turn, this many rounds of each (default 10)")
    parser.add_argument("--robots", nargs="+", default=list(NODE_TARGETS), choices=list(NODE_TARGETS))
    parser.add_argument("--gaits", nargs="+", metavar="GAIT", help="only these gaits (default all)")
    parser.add_argument("--cases", nargs="+", metavar="ROBOT/GAIT/N",
                        help="only these cases, e.g. solo12/trot/50 (default all of --robots and --gaits)")
    parser.add_argument("--crocoddyl-python", metavar="PATH",
                        help="a Python with crocoddyl (./run crocoddyl-env prints one): also time "
                             "Crocoddyl on the same problems")
    parser.add_argument("--push", action="store_true",
                        help="also run the standing closed loop with a push on the rigid-contact plant")
    parser.add_argument("--json", help="also write the results to this JSON file")
    arguments = parser.parse_args(argv)
    available = cases(arguments.robots)
    unknown = set(arguments.cases or ()) - {case.name for case in available}
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}: the cases of --robots are "
                     + ", ".join(case.name for case in available))
    selected = [case for case in available if (arguments.gaits is None or case.gait in arguments.gaits)
                and (arguments.cases is None or case.name in arguments.cases)]
    if not selected:
        parser.error("no case left: they are " + ", ".join(case.name for case in available))
    single_threaded_blas()
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return _run(arguments, selected)
    finally:
        numba.set_num_threads(threads)


def _run(arguments: argparse.Namespace, selected: Sequence[Case]) -> int:
    """The rows of ``selected`` and the push loops ``arguments`` ask for, printed and written."""
    rows, results = [], []
    for case in selected:
        result = run_case(case, arguments.ticks, arguments.warmup, crocoddyl_python=arguments.crocoddyl_python,
                          rounds=max(1, min(arguments.rounds, arguments.ticks)))
        rows.append([case.name, result["nv"], result["contacts"], 1e3 * case.dt,
                     1e-3 * result["median_us"], 1e-3 * result["p99_us"], round(result["rate_hz"]),
                     f">= {case.target_hz:g}", "yes" if result["rate_hz"] >= case.target_hz else "NO"]
                    + [1e-3 * result["parts_us"][part] for part in TIMING_PARTS]
                    + [result["cone_refusals"], result["failures"]]
                    + _crocoddyl_cells(result["crocoddyl"], result["median_us"]))
        results.append({"case": case.name, "robot": case.robot, "target_hz": case.target_hz, **result})
        print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows, title=f"Legged MPC tick ({arguments.ticks} ticks per case after "
                                            f"{arguments.warmup}, one real-time iteration each; parts are "
                                            "medians; case: robot/gait/N; 1-minute load "
                                            f"{os.getloadavg()[0]:.1f})"))
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
