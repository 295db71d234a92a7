"""Times as integer nanoseconds, and builtin_interfaces/Time stamps (anything with ``sec`` and ``nanosec``).

The clock arithmetic that the controllers, the nodes and the replay share (no ROS import): a time is an
``int`` of nanoseconds, converted to seconds only as a difference, where a float keeps its precision.
"""

from __future__ import annotations

from typing import Any, Tuple

__all__ = ["NS_PER_S", "Throttle", "ns_to_seconds", "ns_to_stamp", "seconds_to_stamp", "set_stamp", "stamp_to_ns"]

NS_PER_S = 1_000_000_000


def stamp_to_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time (anything with ``sec`` and ``nanosec``)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns):
    """(sec, nanosec) of a time in [ns]; works element-wise on integer arrays.

    Floor division keeps ``nanosec`` in [0, 1e9) for times before the epoch, as ROS does.
    """
    return ns // NS_PER_S, ns % NS_PER_S


def set_stamp(stamp: Any, ns: int) -> Any:
    """Write a time in [ns] into a builtin_interfaces/Time (or Duration) in place; return it."""
    stamp.sec, stamp.nanosec = (int(part) for part in ns_to_stamp(int(ns)))
    return stamp


def ns_to_seconds(ns: int, origin_ns: int = 0) -> float:
    """Seconds from ``origin_ns`` to ``ns``. Differences are taken in integers first: a float of the
    seconds since 1970 keeps only about 0.2 us."""
    return (int(ns) - int(origin_ns)) * 1e-9


def seconds_to_stamp(seconds: float) -> Tuple[int, int]:
    """(sec, nanosec) of a duration or time in [s], rounded to the nanosecond."""
    return ns_to_stamp(int(round(seconds * NS_PER_S)))


class Throttle:
    """At most one event per ``period`` [s] of a clock read in [ns]: :meth:`due` is True at its first call,
    then at the first call ``period`` or more after the last True (a publisher throttled to a rate).

    Args:
        period: [s], >= 0 (0: always due).
    """

    def __init__(self, period: float) -> None:
        self.period_ns = int(round(period * NS_PER_S))
        self._next_ns: int | None = None

    def due(self, now_ns: int) -> bool:
        """Whether the event is due at ``now_ns`` [ns]; if so, the next one is due ``period`` later."""
        if self._next_ns is not None and now_ns < self._next_ns:
            return False
        self._next_ns = int(now_ns) + self.period_ns
        return True
