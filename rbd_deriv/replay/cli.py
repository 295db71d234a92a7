"""``bag-eval``: evaluate the dynamics pipeline over a recorded rosbag2 and write a report.

Example::

    python -m rbd_deriv bag-eval recording/ --urdf urdf/rbd_arm7.urdf --out-dir recording_eval

reads ``/joint_states`` (and ``/robot_description`` when no ``--urdf`` is given), computes at every
message, prints a summary and writes ``summary.json``, ``report.png`` and the ``outputs`` bag into
``--out-dir``. Exit status: 0 on success, 2 when the input cannot be used (the message says why).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import importlib.util

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.replay.evaluate import EvaluationConfig, actuated_joint_names, evaluate
from rbd_deriv.replay.progress import ProgressBar

__all__ = ["main", "build_parser", "run"]

PROGRAM = "bag-eval"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Run rbd_deriv over every joint_states message of a rosbag2 (mcap or sqlite3): "
        "compute time, torque residual against recorded efforts, cond(M); write JSON, PNG and an output bag.",
    )
    parser.add_argument("bag", type=Path, help="rosbag2 folder (or a single .mcap / .db3 file)")
    parser.add_argument("--urdf", type=Path, help="URDF file; default: the first message on --description-topic")
    parser.add_argument("--description-topic", default="/robot_description", help="std_msgs/String topic with the URDF")
    parser.add_argument("--topic", default="/joint_states", help="sensor_msgs/JointState topic (default /joint_states)")
    parser.add_argument("--odom", help="nav_msgs/Odometry topic of a floating base (makes the model floating-base)")
    parser.add_argument("--dt", type=float, help="linearization step [s]; default: median message period")
    parser.add_argument("--half-window", type=int, default=1, help="acceleration fit half-width h, window 2h+1 (default 1: central difference)")
    parser.add_argument("--gap-factor", type=float, default=5.0, help="a step above this many median steps is a gap")
    parser.add_argument("--stamps", choices=("auto", "header", "bag"), default="auto", help="time base (auto: header unless all zero)")
    parser.add_argument("--chunk", type=int, default=1024, help="messages per batched call")
    parser.add_argument("--latency-samples", type=int, default=1000, help="messages also timed one call at a time")
    parser.add_argument("--out-dir", type=Path, help="where to write the report (default: <bag>_eval next to the bag)")
    parser.add_argument("--out-storage", choices=("mcap", "sqlite3"), help="storage of the output bag (default: as the input)")
    parser.add_argument("--prefix", default="/rbd_deriv", help="namespace of the output bag topics")
    parser.add_argument("--no-bag", action="store_true", help="do not write the output bag")
    parser.add_argument("--residual-topic", action="store_true", help="also write the torque residual into the output bag")
    parser.add_argument("--no-png", action="store_true", help="do not draw the PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def _input_storage(bag: Path) -> str:
    if bag.is_file():
        return "mcap" if bag.suffix == ".mcap" else "sqlite3"
    return "mcap" if any(bag.glob("*.mcap")) else "sqlite3"


def _warm_up(model: "rd.Model", dt: float) -> float:
    """Compile every kernel used (numba JIT) on two states so that timings exclude compilation."""
    tic = time.perf_counter()
    q = np.tile(rd.neutral(model), (2, 1))
    v = np.zeros((2, model.nv))
    rd.rnea_batch(model, q, v, v)
    rd.linearize_batch(model, q, v, v, dt)
    data = model.create_data()
    rd.rnea(model, data, q[0], v[0], v[0])
    rd.linearize(model, data, q[0], v[0], v[0], dt)
    rd.minverse(model, data, q[0])
    return time.perf_counter() - tic


class MissingDependencyError(RbdDerivError):
    """An optional package that bag-eval needs is not installed."""


def _require(module: str, purpose: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"{purpose} needs the Python package '{module}': pip install {module} (or pip install 'rbd_deriv[replay]')"
        )


def run(args: argparse.Namespace) -> Dict[str, object]:
    """Carry out one evaluation; returns the JSON summary. Raises RbdDerivError on unusable input."""
    _require("rosbags", "reading bags")
    if not args.no_png:
        _require("matplotlib", "the PNG report (or use --no-png)")
    from rbd_deriv.replay import bagio, outbag, report

    started = time.perf_counter()
    quiet = args.quiet
    config = EvaluationConfig(
        dt=args.dt,
        half_window=args.half_window,
        gap_factor=args.gap_factor,
        stamps=args.stamps,
        chunk=args.chunk,
        latency_samples=args.latency_samples,
    )
    config.validate()
    out_dir = args.out_dir if args.out_dir is not None else args.bag.parent / f"{args.bag.name}_eval"
    out_bag = out_dir / "outputs"
    if not args.no_bag and out_bag.exists():
        raise bagio.BagError(f"output bag {out_bag} exists already; remove it or choose another --out-dir", out_bag)
    wall: Dict[str, float] = {}
    tic = time.perf_counter()
    typestore = bagio.package_typestore()
    with bagio.open_bag(args.bag) as reader:
        if args.urdf is not None:
            if not args.urdf.is_file():
                raise bagio.BagError(f"URDF file not found: {args.urdf}")
            description = args.urdf.read_text()
        else:
            description = bagio.read_robot_description(reader, typestore, args.description_topic)
        model = rd.load_urdf(description, floating_base=args.odom is not None)
        total = sum(c.msgcount for c in reader.connections if c.topic == args.topic)
        with ProgressBar("read", total or None, enabled=not quiet) as bar:
            series = bagio.read_joint_states(reader, typestore, args.topic, actuated_joint_names(model), bar.update)
        odometry = bagio.read_odometry(reader, typestore, args.odom) if args.odom else None
    wall["read"] = time.perf_counter() - tic
    wall["jit_warmup"] = _warm_up(model, args.dt or 1e-3)

    with ProgressBar("compute", len(series), enabled=not quiet) as bar:
        evaluation = evaluate(model, series, odometry, config, lambda done, _: bar.update(done))

    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: Dict[str, object] = {"json": str(out_dir / "summary.json")}
    if not args.no_png:
        tic = time.perf_counter()
        png = out_dir / "report.png"
        report.plot(evaluation, png, title=f"{args.bag.name}: {args.topic}")
        outputs["png"] = str(png)
        wall["plot"] = time.perf_counter() - tic
    if not args.no_bag:
        tic = time.perf_counter()
        storage = args.out_storage or _input_storage(args.bag)
        with ProgressBar("write", evaluation.rows.size, enabled=not quiet) as bar:
            counts = outbag.write_output_bag(
                out_bag,
                evaluation,
                model,
                description,
                typestore,
                storage,
                args.prefix,
                lambda done, _: bar.update(done),
                residual=args.residual_topic,
            )
        outputs["bag"] = str(out_bag)
        outputs["bag_storage"] = storage
        outputs["bag_topics"] = counts
        wall["write_bag"] = time.perf_counter() - tic
    summary = report.summarize(evaluation, model, args.bag, args.half_window, outputs, wall)
    # Everything from opening the bag to the report, JIT warm-up included (subtract it for the figure).
    summary["timing"]["run_wall_s"] = time.perf_counter() - started
    report.write_json(summary, out_dir / "summary.json")
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m rbd_deriv bag-eval``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        summary = run(args)
    except RbdDerivError as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    from rbd_deriv.replay import report

    print(report.format_text(summary))
    timing = summary["timing"]
    wall = timing["wall_s"]
    excluded = wall.get("jit_warmup", 0.0)
    print(
        f"evaluated {summary['messages']['evaluated']} messages in {timing['run_wall_s'] - excluded:.2f} s "
        f"(excluding {excluded:.2f} s of JIT warm-up); report in {summary['outputs'].get('json')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
