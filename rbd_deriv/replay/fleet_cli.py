"""``fleet-eval``: evaluate every bag of a fleet as ``bag-eval`` does and merge them into one report.

Example::

    python -m rbd_deriv fleet-eval /data/bags more_bags.txt --out-dir fleet_report --workers 2

finds the bags (:func:`rbd_deriv.replay.fleet.discover`), evaluates them on a local process pool or on Ray
(:mod:`rbd_deriv.replay.fleet`), prints a line per bag as it finishes and writes ``index.html``,
``fleet.json``, ``bags.csv`` and ``timing.json`` into ``--out-dir`` (:mod:`rbd_deriv.replay.fleet_report`).
A bag that cannot be used is one row with its reason. Exit status: 0 when the report is written (whatever
became of single bags), 2 when the command cannot run (bad option, nothing found, an output folder that is
not a fleet report), 130 after Ctrl-C, with the report of the bags that finished.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.replay.fleet import (BagResult, FleetOptions, LocalEngine, RayEngine, discover, make_tasks, merge,
                                    merge_timing)
from rbd_deriv.replay.evaluate import EvaluationConfig

__all__ = ["build_parser", "run", "main"]

PROGRAM = "fleet-eval"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Evaluate every bag under PATH as bag-eval does (torque residual, cond(M), compute time) and "
        "merge them into one report per robot and joint: index.html, fleet.json, bags.csv.",
    )
    parser.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                        help="a bag (rosbag2 folder, .mcap or .db3), a folder searched recursively, or a text file "
                        "listing them (one a line)")
    parser.add_argument("--out-dir", type=Path, required=True, help="where the report goes")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--urdf", type=Path, help="URDF of every bag; bags of another robot are refused")
    source.add_argument("--description-topic", default="/robot_description",
                        help="std_msgs/String topic with each bag's URDF (default /robot_description)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local: a process pool on this machine (default); ray: one Ray task per bag")
    parser.add_argument("--address", help="Ray cluster address ('auto' or host:port); without it, a local Ray instance")
    parser.add_argument("--workers", type=int, help="processes (local) or CPUs of the local Ray instance; default: cores")
    parser.add_argument("--group-by", choices=("robot", "folder"), default="robot",
                        help="group bags by the URDF's robot name (default) or by the bag's folder")
    parser.add_argument("--outlier-k", type=float, default=3.0,
                        help="a bag stands out when its residual RMS exceeds the group's median + k MAD (default 3)")
    parser.add_argument("--topic", default="/joint_states", help="sensor_msgs/JointState topic")
    parser.add_argument("--odom", help="nav_msgs/Odometry topic of a floating base")
    parser.add_argument("--acceleration", choices=("central", "forward"), default="central", help="as bag-eval")
    parser.add_argument("--half-window", type=int, default=1, help="as bag-eval")
    parser.add_argument("--stamps", choices=("auto", "header", "bag"), default="auto", help="as bag-eval")
    parser.add_argument("--latency-samples", type=int, default=1000, help="as bag-eval")
    parser.add_argument("--bag-plots", action="store_true", help="also draw bag-eval's PNG for every bag")
    parser.add_argument("--output-bags", action="store_true", help="also write every bag's output bag (large)")
    parser.add_argument("--task-memory-mb", type=float, default=1024.0, help="memory each Ray task declares [MB]")
    parser.add_argument("--quiet", action="store_true", help="no line per bag")
    return parser


def _prepare(out_dir: Path) -> Path:
    """The folder for the per-bag outputs, emptied when an earlier fleet report (or a run that ended before
    its report) left one."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out-dir {out_dir} is a file", "out_dir")
    if out_dir.is_dir() and {p.name for p in out_dir.iterdir()} - {"bags"} and not (out_dir / "fleet.json").is_file():
        raise InputError(f"--out-dir {out_dir} holds files but no fleet report; choose an empty or new folder",
                         "out_dir")
    bags_dir = out_dir / "bags"
    if bags_dir.is_dir():
        shutil.rmtree(bags_dir)
    bags_dir.mkdir(parents=True)
    return bags_dir


def _options(args: argparse.Namespace) -> FleetOptions:
    if args.urdf is not None and not args.urdf.is_file():
        raise InputError(f"URDF file not found: {args.urdf}", "urdf")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}", "workers")
    if not args.outlier_k > 0:
        raise InputError(f"--outlier-k must be > 0, got {args.outlier_k}", "outlier_k")
    if args.address and args.engine != "ray":
        raise InputError("--address is for --engine ray", "address")
    evaluation = EvaluationConfig(acceleration=args.acceleration, half_window=args.half_window, stamps=args.stamps,
                                  latency_samples=args.latency_samples)
    evaluation.validate()
    return FleetOptions(urdf=args.urdf.resolve() if args.urdf else None, description_topic=args.description_topic,
                        topic=args.topic, odom=args.odom, evaluation=evaluation, bag_plots=args.bag_plots,
                        output_bags=args.output_bags)


def run(args: argparse.Namespace, engine: Optional[Any] = None) -> Dict[str, Any]:
    """Discover, evaluate, merge and write the report; returns ``{"fleet", "timing", "page", "interrupted"}``.

    Args:
        args: From :func:`build_parser`.
        engine: An engine to use instead of the one ``args`` names (tests pass one with hooks).

    Raises:
        RbdDerivError: The command cannot run (the message says why).
    """
    options = _options(args)
    entries = discover(args.paths)
    if not entries:
        raise InputError(f"no bag found under {', '.join(str(p) for p in args.paths)}", "paths")
    out_dir: Path = args.out_dir
    if engine is None:
        engine = (RayEngine(args.address, args.workers, args.task_memory_mb) if args.engine == "ray"
                  else LocalEngine(args.workers))
    created = not out_dir.exists()
    bags_dir = _prepare(out_dir)
    tasks = make_tasks(entries, bags_dir, options)
    results: List[BagResult] = []
    total = len(tasks)

    def on_result(result: BagResult) -> None:
        results.append(result)
        if not args.quiet:
            state = "ok" if result.ok else f"FAILED {result.reason}: {result.detail}"
            seconds = result.timing.get("process_s")
            took = f" {seconds:.1f} s" if seconds is not None else ""
            print(f"[{len(results)}/{total}] {result.name} {result.robot} {state}{took}", file=sys.stderr, flush=True)

    load = os.getloadavg()[0]
    tic = time.perf_counter()
    interrupted = False
    try:
        engine.run(tasks, on_result)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:  # no report follows: leave the folder as this run found it
        shutil.rmtree(bags_dir, ignore_errors=True)
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    wall = time.perf_counter() - tic
    finished = {result.number for result in results}
    if interrupted:
        for task in tasks:
            if task.number not in finished:
                results.append(BagResult.failed(task, "interrupted", "the run was interrupted before this bag finished"))
    fleet = merge(results, args.group_by, args.outlier_k)
    fleet = {"inputs": [str(path) for path in args.paths],
             "options": {"urdf": str(options.urdf) if options.urdf else None,
                         "description_topic": options.description_topic, "topic": options.topic, "odom": options.odom,
                         "acceleration": options.evaluation.acceleration,
                         "half_window": options.evaluation.half_window, "stamps": options.evaluation.stamps},
             "interrupted": interrupted, **fleet}
    timing = {"run": {**engine.describe(), "wall_s": wall, "load_before": load, "load_after": os.getloadavg()[0]},
              **merge_timing(results, args.group_by)}
    status = "The run was interrupted: the bags marked 'interrupted' were not evaluated." if interrupted else ""
    from rbd_deriv.replay.fleet_report import write_report

    page = write_report(out_dir, fleet, timing, status)
    return {"fleet": fleet, "timing": timing, "page": page, "interrupted": interrupted}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m rbd_deriv fleet-eval``; returns the exit status."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        outcome = run(args)
    except RbdDerivError as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    fleet, timing = outcome["fleet"], outcome["timing"]
    totals = fleet["totals"]
    print(f"{totals['bags']} bags: {totals['evaluated']} evaluated, {totals['failed']} not evaluated "
          f"{fleet['failures'] or ''}; {len(fleet['groups'])} groups; {timing['run']['wall_s']:.1f} s with "
          f"{timing['run']['engine']} ({timing['run']['workers']} workers); report in {outcome['page']}")
    if outcome["interrupted"]:
        print(f"{PROGRAM}: interrupted; the report holds the bags that finished", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
