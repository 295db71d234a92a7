"""``bag-play``: publish a bag's topics into running nodes with their recorded timing (rclpy).

For machines without the ``ros2 bag`` command (the PyPI ROS 2 wheels do not ship it). The recorded
bytes are published as they are (no decoding), so any message type whose Python package is installed
can be played. Each topic keeps the durability it was recorded with (``/robot_description`` stays
transient local, so a node started later still receives it).

Example::

    python -m rbd_deriv bag-play recording/ --rate 1.0 --topics /joint_states /robot_description

This is the only module of :mod:`rbd_deriv.replay` that imports rclpy.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import rclpy
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.replay.bagio import BagError, open_bag
from rbd_deriv.replay.progress import ProgressBar

__all__ = ["main", "message_class", "play"]

PROGRAM = "bag-play"

# Longer sleeps than this are left to the OS; the rest is a short busy wait, for sub-millisecond timing.
_SPIN_THRESHOLD_S = 0.002


def message_class(msgtype: str) -> Any:
    """The rclpy message class of a type name such as ``sensor_msgs/msg/JointState``.

    Raises:
        BagError: The type's Python package is not installed.
    """
    package, kind, name = msgtype.split("/") if msgtype.count("/") == 2 else (None, None, None)
    if package is None:
        raise BagError(f"unexpected message type name {msgtype!r}")
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError) as err:
        raise BagError(f"message type {msgtype} is not installed ({err})") from err


def _qos(connection: Any) -> QoSProfile:
    profiles = getattr(connection.ext, "offered_qos_profiles", []) or []
    latched = any(getattr(p.durability, "name", "") == "TRANSIENT_LOCAL" for p in profiles)
    if latched or connection.topic.endswith("robot_description"):
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE)


def play(
    bag: Path,
    rate: float = 1.0,
    topics: Optional[Sequence[str]] = None,
    delay_s: float = 1.0,
    quiet: bool = False,
    node_name: str = "rbd_deriv_bag_play",
    wait_s: float = 0.0,
) -> Dict[str, Any]:
    """Publish the bag's messages at ``rate`` times their recorded pace; returns counts and timing.

    Args:
        bag: rosbag2 folder or file.
        rate: Speed factor (2.0 plays twice as fast); ``inf`` publishes as fast as possible.
        topics: Topics to play; all when None.
        delay_s: Wait after creating the publishers, so that subscribers are matched before the first
            message [s].
        quiet: No progress bar.
        wait_s: Before playing, wait up to this long [s] until every played topic has a subscriber (a node
            under test has started and been discovered); then ``delay_s`` as usual.

    Raises:
        BagError: Missing bag, unknown topic, or no playable topic.
    """
    if not rate > 0:
        raise BagError(f"--rate must be > 0, got {rate}")
    if not rclpy.ok():
        rclpy.init()
    node = rclpy.create_node(node_name)
    report: Dict[str, Any] = {"published": {}, "skipped_topics": {}}
    try:
        with open_bag(bag) as reader:
            connections = list(reader.connections)
            if topics:
                known = {c.topic for c in connections}
                unknown = [t for t in topics if t not in known]
                if unknown:
                    raise BagError(f"bag has no topic {unknown}; topics: {sorted(known)}", bag)
                connections = [c for c in connections if c.topic in topics]
            publishers: Dict[int, Any] = {}
            for connection in connections:
                try:
                    cls = message_class(connection.msgtype)
                except BagError as err:
                    report["skipped_topics"][connection.topic] = str(err)
                    print(f"{PROGRAM}: skipping {connection.topic}: {err}", file=sys.stderr)
                    continue
                publishers[connection.id] = node.create_publisher(cls, connection.topic, _qos(connection))
            if not publishers:
                raise BagError("no topic of the bag can be published", bag)
            playing = [c for c in connections if c.id in publishers]
            total = sum(c.msgcount for c in playing)
            if wait_s > 0:
                report["unsubscribed_topics"] = _wait_for_subscribers(publishers, playing, wait_s)
            time.sleep(delay_s)
            lateness: List[float] = []
            counts: Dict[str, int] = {c.topic: 0 for c in playing}
            first_time: Optional[int] = None
            start = 0.0
            with ProgressBar("play", total or None, enabled=not quiet) as bar:
                for connection, timestamp, raw in reader.messages(playing):
                    if first_time is None:
                        first_time, start = timestamp, time.perf_counter()
                    target = start + (timestamp - first_time) * 1e-9 / rate
                    _sleep_until(target)
                    publishers[connection.id].publish(bytes(raw))
                    lateness.append(time.perf_counter() - target)
                    counts[connection.topic] += 1
                    bar.advance()
            elapsed = time.perf_counter() - start if first_time is not None else 0.0
        late = np.asarray(lateness) * 1e6
        report["published"] = counts
        report["wall_s"] = elapsed
        report["lateness_us"] = {
            "p50": float(np.percentile(late, 50)) if late.size else float("nan"),
            "p99": float(np.percentile(late, 99)) if late.size else float("nan"),
            "max": float(late.max()) if late.size else float("nan"),
        }
        # Let transient-local and reliable messages reach late subscribers before the node goes away.
        time.sleep(min(delay_s, 1.0))
    finally:
        node.destroy_node()
    return report


def _wait_for_subscribers(publishers: Dict[int, Any], playing: List[Any], wait_s: float) -> List[str]:
    """Wait until each topic has a matched subscriber or ``wait_s`` passes; returns the topics still without."""
    deadline = time.monotonic() + wait_s
    waiting = list(playing)
    while waiting and time.monotonic() < deadline:
        waiting = [c for c in waiting if publishers[c.id].get_subscription_count() == 0]
        if waiting:
            time.sleep(0.02)
    lonely = sorted({c.topic for c in waiting})
    if lonely:
        print(f"{PROGRAM}: no subscriber after {wait_s} s on {lonely}; playing anyway", file=sys.stderr)
    return lonely


def _sleep_until(target: float) -> None:
    remaining = target - time.perf_counter()
    if remaining > _SPIN_THRESHOLD_S:
        time.sleep(remaining - _SPIN_THRESHOLD_S)
    while time.perf_counter() < target:
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m rbd_deriv bag-play``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description="Publish a rosbag2's topics with their recorded timing (or scaled by --rate)."
    )
    parser.add_argument("bag", type=Path, help="rosbag2 folder (or a single .mcap / .db3 file)")
    parser.add_argument("--rate", type=float, default=1.0, help="speed factor; 2 plays twice as fast (default 1)")
    parser.add_argument("--topics", nargs="+", help="topics to play (default: all)")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds to wait after creating the publishers")
    parser.add_argument(
        "--wait-for-subscribers", type=float, default=0.0, metavar="SECONDS",
        help="first wait up to SECONDS until every played topic has a subscriber",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        report = play(args.bag, args.rate, args.topics, args.delay, args.quiet, wait_s=args.wait_for_subscribers)
    except RbdDerivError as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    finally:
        if rclpy.ok():
            rclpy.shutdown()
    late = report["lateness_us"]
    print(
        f"published {sum(report['published'].values())} messages in {report['wall_s']:.2f} s "
        f"({', '.join(f'{t}: {n}' for t, n in report['published'].items())}); "
        f"lateness p50 {late['p50']:.0f} us, p99 {late['p99']:.0f} us, max {late['max']:.0f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
