"""Legged robots through the nodes while other work takes every core: do they stay up?

    python -m rbd_deriv.bench load                       # solo12 trotting, talos standing, 3 runs each
    python -m rbd_deriv.bench load --robots solo12 --runs 1 --clock wall --json load.json

Each run is one legged demo (``python -m rbd_deriv.demo --robot R --gait G --cmd-vel ...``: the simulator and
the MPC node as processes over DDS, the robot's own files) as a child process. ``--busy-after`` seconds after
its scenario starts (2 s standing, then the gait), as many busy processes as the machine has cores
(``--busy``) spin for ``--busy-for`` seconds at the nodes' own priority, then stop; the run goes on for
``--after`` seconds more. Printed per run: whether the robot fell (the demo's verdict: base below its fall
height or tilted past it), the MPC's rate over the run, the simulated clock's pace (1.0 on
the wall clock), the largest torque against the actuators' limits, the commands that were not a plan's (safe
commands by source), samples past the MPC's friction cone, and the 1-minute load average at the end of the busy
window. The exit code is 1 if a robot fell or a run did not finish.

Cases (:data:`CASES`): solo12 trotting at 0.3 m/s, talos standing. The target (issue "Reliability of the legged
loop"): with both cores taken by other work for 20 s, neither falls; the rate may drop.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.nodes.processes import CLOCKS, stop_processes

__all__ = ["CASES", "LoadRun", "busy_processes", "main", "run_case"]

CASES: Dict[str, Tuple[str, Tuple[float, float, float]]] = {
    "solo12": ("trot", (0.3, 0.0, 0.0)),
    "talos": ("stand", (0.0, 0.0, 0.0)),
}
"""Robot -> (gait, cmd_vel (vx [m/s], vy [m/s], wz [rad/s])) run under load."""

STARTUP_TIMEOUT = 300.0
"""[s] for the demo's nodes to start and its scenario to begin."""

SPIN = "while True: pass"
"""What a busy process runs: one core's worth of work that never sleeps."""


@dataclass
class LoadRun:
    """One demo run with the cores taken. Figures are the demo's JSON over the whole run (busy and not)."""

    robot: str
    gait: str
    clock: str
    busy: int                        # busy processes
    busy_s: float                    # [s] they spun, of the wall clock
    finished: bool                   # the demo ended with its report (exit code 0 or 1)
    fell: Optional[bool] = None
    mpc_rate_hz: Optional[float] = None
    real_time_factor: Optional[float] = None
    max_torque_ratio: Optional[float] = None
    cone_violations: Optional[int] = None
    safe_commands: Dict[str, int] = field(default_factory=dict)
    load_average: Optional[float] = None   # 1-minute, when the busy processes stopped
    log: str = ""


def busy_processes(count: int) -> List[subprocess.Popen]:
    """Start ``count`` processes that each spin one core (:data:`SPIN`) until stopped."""
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]


def _wait_for_start(demo: subprocess.Popen, log: Path, timeout: float) -> bool:
    """Wait until the demo's log says its scenario is running; False if it ended or the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            return False
        if log.exists() and any(line.startswith("running ") for line in log.read_text(errors="replace").splitlines()):
            return True
        time.sleep(0.2)
    return False


def run_case(robot: str, clock: str, busy: int, busy_after: float, busy_for: float, after: float,
             folder: Path) -> LoadRun:
    """One demo of ``robot`` (its :data:`CASES` entry) on ``clock`` with ``busy`` spinning processes from
    ``busy_after`` [s] after its scenario starts, for ``busy_for`` [s], the demo running ``after`` [s] longer.
    Its log and JSON go to ``folder``."""
    gait, command = CASES[robot]
    tag = f"{robot}_{clock}_{int(time.time() * 1000) % 10**8}"
    log, summary = folder / f"{tag}.log", folder / f"{tag}.json"
    duration = busy_after + busy_for + after
    arguments = [sys.executable, "-m", "rbd_deriv.demo", "--robot", robot, "--gait", gait,
                 "--cmd-vel", ",".join(f"{x:g}" for x in command), "--push-velocity", "0",
                 "--duration", f"{duration:g}", "--clock", clock, "--json", str(summary),
                 "--output", str(folder / f"{tag}.png"), "--video", "none"]
    result = LoadRun(robot, gait, clock, busy, busy_for, finished=False, log=str(log))
    with open(log, "w", encoding="utf-8") as out:
        demo = subprocess.Popen(arguments, stdout=out, stderr=subprocess.STDOUT)
        spinning: List[subprocess.Popen] = []
        try:
            if _wait_for_start(demo, log, STARTUP_TIMEOUT):
                time.sleep(busy_after)
                spinning = busy_processes(busy)
                time.sleep(busy_for)
                result.load_average = os.getloadavg()[0]
            stop_processes(spinning, timeout=2.0, first_signal=signal.SIGKILL)
            spinning = []
            demo.wait(timeout=STARTUP_TIMEOUT + duration)
        finally:
            stop_processes(spinning + [demo], timeout=5.0)
    if demo.returncode in (0, 1) and summary.exists():
        document = json.loads(summary.read_text(encoding="utf-8"))
        sources = document.get("commands_by_source", {})
        result.finished = True
        result.fell = bool(document["fell"])
        result.mpc_rate_hz = document.get("mpc_rate_hz")
        result.real_time_factor = document.get("real_time_factor")
        result.max_torque_ratio = document.get("max_torque_ratio")
        result.cone_violations = document.get("cone_violations")
        result.safe_commands = {source: count for source, count in sources.items() if source != "plan" and count}
    return result


def report(runs: Sequence[LoadRun]) -> str:
    """The runs as a table, and the verdict against the target."""
    rows = []
    for run in runs:
        rows.append([
            run.robot, run.gait, run.clock, f"{run.busy} x {run.busy_s:g} s",
            "-" if run.fell is None else ("FELL" if run.fell else "no"),
            run.mpc_rate_hz if run.mpc_rate_hz is not None else float("nan"),
            run.real_time_factor if run.real_time_factor is not None else float("nan"),
            run.max_torque_ratio if run.max_torque_ratio is not None else float("nan"),
            " ".join(f"{source} {count}" for source, count in run.safe_commands.items()) or "none",
            "-" if run.cone_violations is None else run.cone_violations,
            run.load_average if run.load_average is not None else float("nan"),
        ])
    table = format_table(["robot", "gait", "clock", "busy", "fell", "MPC Hz", "sim pace", "torque/limit",
                          "safe commands", "cone", "load 1 min"], rows,
                         title="legged demos with every core taken by busy processes (target: no fall)")
    failed = [run for run in runs if not run.finished or run.fell]
    verdict = (f"target met: {len(runs)} of {len(runs)} runs stayed up" if not failed else
               f"target MISSED: {len(failed)} of {len(runs)} runs fell or did not finish (logs: "
               + ", ".join(run.log for run in failed) + ")")
    return table + "\n" + verdict


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; exit code 1 if a robot fell or a run did not finish."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--runs", type=int, default=3, help="runs per robot (default 3)")
    parser.add_argument("--clock", choices=CLOCKS, default="simulated", help="the nodes' clock (the demos')")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1,
                        help="busy processes (default: one per core)")
    parser.add_argument("--busy-after", type=float, default=4.0,
                        help="[s] after the scenario starts (2 s standing, then the gait)")
    parser.add_argument("--busy-for", type=float, default=20.0, help="[s] the busy processes spin")
    parser.add_argument("--after", type=float, default=4.0, help="[s] the demo goes on after them")
    parser.add_argument("--logs", default=None, help="folder for the demos' logs and JSON (default: temp)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    arguments = parser.parse_args(argv)
    if arguments.runs < 1 or arguments.busy < 0:
        parser.error("--runs must be >= 1 and --busy >= 0")
    for name in ("busy_after", "busy_for", "after"):
        if not getattr(arguments, name) >= 0.0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0 s")
    folder = Path(arguments.logs or tempfile.mkdtemp(prefix="rbd_deriv_load_"))
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for index in range(arguments.runs):
        for robot in arguments.robots:
            run = run_case(robot, arguments.clock, arguments.busy, arguments.busy_after, arguments.busy_for,
                           arguments.after, folder)
            runs.append(run)
            print(f"run {index + 1}/{arguments.runs} {robot}: "
                  + ("did not finish" if not run.finished else "fell" if run.fell else "stayed up"), flush=True)
    print(report(runs))
    if arguments.json:
        write_json(arguments.json, {"machine": machine_info(()), "runs": [asdict(run) for run in runs]})
    return 1 if any(not run.finished or run.fell for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
