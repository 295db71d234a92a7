"""``bag-play``: publish a bag's topics into running nodes with their recorded timing (rclpy).

For machines without the ``ros2 bag`` command (the PyPI ROS 2 wheels do not ship it). The recorded
bytes are published as they are (no decoding), so any message type whose Python package is installed
can be played. Each topic keeps the durability it was recorded with (``/robot_description`` stays
transient local, so a node started later still receives it). Messages go out in the order they were
recorded; what a damaged bag still holds is played (:mod:`rbd_deriv.replay.storage`).

Pacing sleeps until each message is due (no busy wait), so playing at 1 kHz takes a few percent of a
core. With ``--clock`` the player also publishes the recording's time on ``/clock``, as ``ros2 bag play
--clock`` does: nodes started with ``use_sim_time:=true`` then take their time from the recording, and
a check such as the dynamics node's ``max_state_age`` compares recorded stamps with recorded time.

Example::

    python -m rbd_deriv bag-play recording/ --clock --topics /joint_states /robot_description

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
from rbd_deriv.replay.progress import ProgressBar
from rbd_deriv.replay.stats import LogHistogram
from rbd_deriv.replay.storage import BagError, BagSource, TopicInfo

__all__ = ["main", "message_class", "play"]

PROGRAM = "bag-play"
CLOCK_TOPIC = "/clock"
DEFAULT_CLOCK_HZ = 100.0


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


def _qos(topic: TopicInfo) -> QoSProfile:
    if topic.latched or topic.name.endswith("robot_description"):
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE)


class _Clock:
    """``/clock`` ticks on the recording's timeline, every ``1 / rate_hz`` of recorded time."""

    def __init__(self, node: Any, rate_hz: float) -> None:
        from rosgraph_msgs.msg import Clock

        # The QoS of rclpy's time source subscription (keep last 1, best effort) is what matters.
        self.publisher = node.create_publisher(Clock, CLOCK_TOPIC, QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        self.message = Clock()
        self.period_ns = int(round(1e9 / rate_hz))
        self.next_ns: Optional[int] = None
        self.count = 0

    def publish(self, bag_ns: int) -> None:
        self.message.clock.sec, self.message.clock.nanosec = divmod(int(bag_ns), 1_000_000_000)
        self.publisher.publish(self.message)
        self.count += 1

    def due(self, bag_ns: int) -> List[int]:
        """Recorded times of the ticks up to ``bag_ns`` not yet published."""
        if self.next_ns is None:
            self.next_ns = bag_ns
        ticks = list(range(self.next_ns, bag_ns + 1, self.period_ns))
        if ticks:
            self.next_ns = ticks[-1] + self.period_ns
        return ticks


def _fine_timer_slack() -> None:
    """Ask Linux to wake this thread within 1 us of a sleep's end instead of the default 50 us."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK [ns]
        except (OSError, AttributeError):
            pass


def _sleep_until(target: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``target``; the OS wakes the thread (no busy wait)."""
    remaining = target - time.perf_counter()
    while remaining > 0:
        time.sleep(remaining)
        remaining = target - time.perf_counter()


def play(
    bag: Path,
    rate: float = 1.0,
    topics: Optional[Sequence[str]] = None,
    delay_s: float = 1.0,
    quiet: bool = False,
    node_name: str = "rbd_deriv_bag_play",
    wait_s: float = 0.0,
    clock_hz: Optional[float] = None,
) -> Dict[str, Any]:
    """Publish the bag's messages at ``rate`` times their recorded pace; returns counts and timing.

    Args:
        bag: rosbag2 folder or file.
        rate: Speed factor (2.0 plays twice as fast); ``inf`` publishes as fast as possible.
        topics: Topics to play; all when None.
        delay_s: Wait after creating the publishers, so that subscribers are matched before the first
            message [s].
        quiet: No progress bar.
        wait_s: Before playing, wait up to this long [s] until every played topic (``/clock`` included) has a
            subscriber (a node under test has started and been discovered); then ``delay_s`` as usual.
        clock_hz: Publish the recording's time on ``/clock`` at this rate of recorded time [Hz]; None: no
            clock.

    Returns:
        ``published`` (messages per topic), ``wall_s``, ``lateness_us`` (p50, p99, max; None when nothing
        was published), ``cpu_s`` (CPU time of this process while playing), ``clock_messages``,
        ``skipped_topics``, ``unsubscribed_topics``, ``damage`` (unreadable stretches of the bag).

    Raises:
        BagError: Missing bag, unknown topic, or no playable topic.
    """
    if not rate > 0:
        raise BagError(f"--rate must be > 0, got {rate}")
    if clock_hz is not None and not clock_hz > 0:
        raise BagError(f"--clock must be a rate > 0 Hz, got {clock_hz}")
    source = BagSource(bag)
    available = source.topics
    if topics:
        unknown = [t for t in topics if t not in available]
        if unknown:
            raise BagError(f"bag has no topic {unknown}; topics: {sorted(available)}", bag)
    chosen = [available[t] for t in (topics or list(available))]
    if not rclpy.ok():
        rclpy.init()
    node = rclpy.create_node(node_name)
    report: Dict[str, Any] = {"published": {}, "skipped_topics": {}, "unsubscribed_topics": [], "clock_messages": 0}
    try:
        publishers: Dict[str, Any] = {}
        for topic in chosen:
            try:
                cls = message_class(topic.msgtype)
            except BagError as err:
                report["skipped_topics"][topic.name] = str(err)
                print(f"{PROGRAM}: skipping {topic.name}: {err}", file=sys.stderr)
                continue
            publishers[topic.name] = node.create_publisher(cls, topic.name, _qos(topic))
        if not publishers:
            raise BagError("no topic of the bag can be published", bag)
        playing = [t.name for t in chosen if t.name in publishers]
        clock = _Clock(node, clock_hz) if clock_hz is not None else None
        if wait_s > 0:
            # The clock is played too: nodes on use_sim_time subscribe to it.
            waited = dict(publishers, **({CLOCK_TOPIC: clock.publisher} if clock is not None else {}))
            report["unsubscribed_topics"] = _wait_for_subscribers(waited, list(waited), wait_s)
        time.sleep(delay_s)
        report.update(_publish(source, playing, publishers, clock, rate, quiet, _total(chosen, playing)))
        report["damage"] = [event.as_dict() for event in source.damage]
        # Let transient-local and reliable messages reach late subscribers before the node goes away.
        time.sleep(min(delay_s, 1.0))
    finally:
        node.destroy_node()
    return report


def _total(chosen: Sequence[TopicInfo], playing: Sequence[str]) -> Optional[int]:
    counts = [t.count for t in chosen if t.name in playing]
    return sum(counts) if counts and all(c is not None for c in counts) else None


def _publish(source: BagSource, playing: List[str], publishers: Dict[str, Any], clock: Optional[_Clock], rate: float,
             quiet: bool, total: Optional[int]) -> Dict[str, Any]:
    counts = {topic: 0 for topic in playing}
    # Lateness in a histogram (bounded memory however long the bag): quantiles within 0.12 %.
    lateness = LogHistogram(1e-3, 1e9)
    published = 0
    first_ns: Optional[int] = None
    start = 0.0
    cpu = time.process_time()
    senders = [publishers[topic].publish for topic in playing]
    _fine_timer_slack()
    with ProgressBar("play", total, enabled=not quiet) as bar:
        for batch in source.read(playing, batch=256):
            times = batch.bag_ns.tolist()
            late = np.zeros(len(times))
            if first_ns is None and times:
                first_ns, start = times[0], time.perf_counter()
            for i, (bag_ns, topic) in enumerate(zip(times, batch.topic.tolist())):
                if clock is not None:
                    for tick in clock.due(bag_ns):
                        _sleep_until(start + (tick - first_ns) * 1e-9 / rate)
                        clock.publish(tick)
                target = start + (bag_ns - first_ns) * 1e-9 / rate
                _sleep_until(target)
                senders[topic](batch.message(i))
                late[i] = time.perf_counter() - target
                counts[playing[topic]] += 1
            lateness.add(np.maximum(late * 1e6, 1e-3))
            published += len(times)
            bar.update(published)
    elapsed = time.perf_counter() - start if first_ns is not None else 0.0
    cpu = time.process_time() - cpu
    summary = {"p50": lateness.quantile(0.5), "p99": lateness.quantile(0.99), "max": lateness.max} if published else None
    return {"published": counts, "wall_s": elapsed, "lateness_us": summary, "cpu_s": cpu,
            "clock_messages": clock.count if clock is not None else 0}


def _wait_for_subscribers(publishers: Dict[str, Any], playing: List[str], wait_s: float) -> List[str]:
    """Wait until each played topic has a matched subscriber or ``wait_s`` passes; returns the topics still without."""
    deadline = time.monotonic() + wait_s
    waiting = list(playing)
    while waiting and time.monotonic() < deadline:
        waiting = [topic for topic in waiting if publishers[topic].get_subscription_count() == 0]
        if waiting:
            time.sleep(0.02)
    if waiting:
        print(f"{PROGRAM}: no subscriber after {wait_s} s on {sorted(waiting)}; playing anyway", file=sys.stderr)
    return sorted(waiting)


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
    parser.add_argument(
        "--clock", type=float, nargs="?", const=DEFAULT_CLOCK_HZ, default=None, metavar="HZ",
        help=f"publish the recording's time on /clock at HZ (default {DEFAULT_CLOCK_HZ:g}) for nodes with use_sim_time",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        report = play(args.bag, args.rate, args.topics, args.delay, args.quiet, wait_s=args.wait_for_subscribers,
                      clock_hz=args.clock)
    except RbdDerivError as err:
        print(f"{PROGRAM}: error: {err}", file=sys.stderr)
        return 2
    finally:
        if rclpy.ok():
            rclpy.shutdown()
    published = sum(report["published"].values())
    late = report["lateness_us"]
    timing = (f"lateness p50 {late['p50']:.0f} us, p99 {late['p99']:.0f} us, max {late['max']:.0f} us; "
              f"CPU {report['cpu_s']:.2f} s ({100 * report['cpu_s'] / max(report['wall_s'], 1e-9):.0f} % of one core)"
              if late is not None else "nothing to publish on the topics played")
    print(
        f"published {published} messages in {report['wall_s']:.2f} s "
        f"({', '.join(f'{t}: {n}' for t, n in report['published'].items())}); {timing}"
        + (f"; {report['clock_messages']} /clock messages" if report["clock_messages"] else "")
    )
    for event in report["damage"]:
        lost = event["lost"] if event["lost"] is not None else event["lost_rows"]
        print(f"{PROGRAM}: damaged bag: {event['what']}" + (f" ({lost} lost)" if lost is not None else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
