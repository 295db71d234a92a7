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
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import importlib.util

import rbd_deriv as rd
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.pipeline import warm_up
from rbd_deriv.replay.evaluate import Chunk, Evaluation, EvaluationConfig, actuated_joint_names, evaluate, survey
from rbd_deriv.replay.progress import ProgressBar, StageClock

__all__ = ["main", "build_parser", "run", "run_evaluation"]

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
    parser.add_argument("--acceleration", choices=("central", "forward"), default="central",
                        help="acceleration estimate: central (quadratic fit over 2h+1 messages) or forward "
                        "((v[i+1]-v[i])/dt, exact for semi-implicit Euler data such as MuJoCo's)")
    parser.add_argument("--half-window", type=int, default=1, help="central fit half-width h, window 2h+1 (default 1: central difference)")
    parser.add_argument("--gap-factor", type=float, default=5.0, help="a step above this many median steps is a gap")
    parser.add_argument("--stamps", choices=("auto", "header", "bag"), default="auto", help="time base (auto: header unless all zero)")
    parser.add_argument("--chunk", type=int, default=1024, help="messages per batched call")
    parser.add_argument("--latency-samples", type=int, default=1000, help="messages also timed one call at a time")
    parser.add_argument("--out-dir", type=Path, help="where to write the report (default: <bag>_eval next to the bag)")
    parser.add_argument("--out-storage", choices=("mcap", "sqlite3"), default="mcap",
                        help="storage of the output bag (default mcap, written a chunk at a time; sqlite3 is slower)")
    parser.add_argument("--prefix", default="/rbd_deriv", help="namespace of the output bag topics")
    parser.add_argument("--no-bag", action="store_true", help="do not write the output bag")
    parser.add_argument("--residual-topic", action="store_true", help="also write the torque residual into the output bag")
    parser.add_argument("--no-png", action="store_true", help="do not draw the PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


class MissingDependencyError(RbdDerivError):
    """An optional package that bag-eval needs is not installed."""


def _require(module: str, purpose: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"{purpose} needs the Python package '{module}': pip install {module} (or pip install 'rbd_deriv[replay]')"
        )


def _base_frames(model: rd.Model, parent: str, child: str) -> Tuple[str, str]:
    """Frames of the base pose on the output bag's /tf: the odometry's, where it names them; else ``odom`` and
    the URDF's root link (the link the free flyer moves, robot_state_publisher's root)."""
    frames = list(model.frame_names)
    return parent or "odom", child or frames[frames.index(rd.FREE_FLYER_JOINT) + 1]


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> Dict[str, object]:
    """Carry out one evaluation; returns the JSON summary. Raises RbdDerivError on unusable input."""
    return run_evaluation(args)[0]


def run_evaluation(
    args: argparse.Namespace, consumers: Sequence[Callable[[Chunk], None]] = ()
) -> Tuple[Dict[str, object], Evaluation]:
    """:func:`run`, also handing each computed chunk to ``consumers``; returns the summary and the evaluation.

    Args:
        args: The options of :func:`build_parser`.
        consumers: Called with every :class:`~rbd_deriv.replay.evaluate.Chunk`, after the output bag.

    Raises:
        RbdDerivError: Unusable input (the message says why).
    """
    _require("rosbags", "reading bags")
    if not args.no_png:
        _require("matplotlib", "the PNG report (or use --no-png)")
    from rbd_deriv.replay import bagio, outbag, report
    from rbd_deriv.replay.storage import BagSource

    clock = StageClock()
    quiet = args.quiet
    config = EvaluationConfig(
        dt=args.dt,
        acceleration=args.acceleration,
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
    with clock.stage("open"):
        typestore = bagio.package_typestore()
        source = BagSource(args.bag)
        if args.urdf is not None:
            if not args.urdf.is_file():
                raise bagio.BagError(f"URDF file not found: {args.urdf}")
            description = args.urdf.read_text()
        else:
            description = bagio.read_robot_description(source, typestore, args.description_topic)
        model = rd.load_urdf(description, floating_base=args.odom is not None)
        info = bagio.require_topic(source, args.topic, bagio.JOINT_STATE_TYPE)
        base_frames = None
        if args.odom:
            bagio.require_topic(source, args.odom, bagio.ODOMETRY_TYPE)
            base_frames = _base_frames(model, *bagio.read_odometry_frames(source, typestore, args.odom))
    with clock.stage("jit_warmup"):
        warm_up(model, dt=args.dt or 1e-3, batched=True)

    with clock.stage("scan"), ProgressBar("scan", info.count or None, enabled=not quiet) as bar:
        first_pass = survey(source, typestore, args.topic, actuated_joint_names(model), config, bar.update)

    writer = None
    chunk_consumers: List[Callable[[Chunk], None]] = []
    storage = args.out_storage
    if not args.no_bag:
        out_dir.mkdir(parents=True, exist_ok=True)
        writer = outbag.OutputBag(out_bag, model, typestore, first_pass.dt, first_pass.frame_id, description,
                                  storage=storage, prefix=args.prefix, residual=args.residual_topic,
                                  base_frames=base_frames)
        chunk_consumers.append(writer)
    chunk_consumers.extend(consumers)
    try:
        with ProgressBar("evaluate", first_pass.messages, enabled=not quiet) as bar:
            evaluation = evaluate(model, source, typestore, args.topic, config, first_pass, args.odom, chunk_consumers,
                                  bar.update, clock)
        if writer is not None:
            _say(quiet, f"write      finishing {out_bag}")
            with clock.stage("write"):
                counts = writer.close()
            writer = None
    finally:
        if writer is not None:
            writer.abort()

    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: Dict[str, object] = {"json": str(out_dir / "summary.json")}
    if not args.no_png:
        png = out_dir / "report.png"
        _say(quiet, f"plot       drawing {png}")
        with clock.stage("plot"):
            report.plot(evaluation, png, title=f"{args.bag.name}: {args.topic}")
        outputs["png"] = str(png)
    if not args.no_bag:
        outputs["bag"] = str(out_bag)
        outputs["bag_storage"] = storage
        outputs["bag_topics"] = counts
    with clock.stage("report"):
        summary = report.summarize(evaluation, model, args.bag, outputs)
        summary["timing"]["wall_s"] = clock.breakdown()
        report.write_json(summary, out_dir / "summary.json")
    summary["timing"]["wall_s"] = clock.breakdown()
    return summary, evaluation


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
    wall = summary["timing"]["wall_s"]
    excluded = wall.get("jit_warmup", 0.0)
    print(
        f"evaluated {summary['messages']['evaluated']} messages in {wall['total'] - excluded:.2f} s "
        f"(excluding {excluded:.2f} s of JIT warm-up); report in {summary['outputs'].get('json')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
