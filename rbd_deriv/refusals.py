"""Refused inputs, counted by reason, and which of them are worth a log line (no ROS here).

A node fed at 1 kHz must not log every bad message: :class:`Refusals` counts each refusal under its
reason (the counts go to ``/diagnostics``) and hands back a log line at most once per period per reason,
saying how many were refused meanwhile, with the input quoted to a bounded length. Beside the refusals it
counts, per input, the messages used and those superseded (dropped unused because a newer one of the same input
came first), so that every message a node takes is accounted for: taken = used + refused + superseded.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Dict, Optional, Tuple

__all__ = ["LOG_TEXT_LIMIT", "Refusals", "shorten"]

#: Most characters of a refusal's text in a log line: the text quotes the input, which a hostile or broken
#: publisher may make megabytes long.
LOG_TEXT_LIMIT = 1000


def shorten(text: str, limit: int = LOG_TEXT_LIMIT) -> str:
    """``text``, cut to ``limit`` characters with a note of how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class Refusals:
    """Counts of refused inputs by reason, with a log line per reason at most once per ``log_period``.

    Args:
        log_period: Shortest time [s] between two log lines of one reason; 0 logs every refusal.

    Attributes:
        counts: Refusals so far by reason (a ``collections.Counter``): ``<input>/<reason>`` for a refused message.
        used: Messages used so far, by input.
        superseded: Messages dropped unused so far because a newer one of the same input came first, by input.
    """

    def __init__(self, log_period: float = 5.0) -> None:
        self.log_period = float(log_period)
        self.counts: collections.Counter = collections.Counter()
        self.used: collections.Counter = collections.Counter()
        self.superseded: collections.Counter = collections.Counter()
        self._logged: Dict[str, Tuple[float, int]] = {}

    @property
    def total(self) -> int:
        """Refusals of every reason."""
        return sum(self.counts.values())

    def count(self, reason: str, text: str, now: float) -> Optional[str]:
        """Count one refusal; return the line to log, or None if ``reason`` was logged less than
        ``log_period`` before ``now`` [s, any monotonic clock]."""
        self.counts[reason] += 1
        last, suppressed = self._logged.get(reason, (-math.inf, 0))
        if now - last < self.log_period:
            self._logged[reason] = (last, suppressed + 1)
            return None
        self._logged[reason] = (now, 0)
        extra = f" ({suppressed} more since the last report)" if suppressed else ""
        return f"refused [{reason}, {self.counts[reason]} so far]: {shorten(str(text))}{extra}"

    def count_error(self, kind: str, error: Any) -> Optional[str]:
        """:meth:`count` of a refused input (or a failed step) of ``kind``, now, under ``kind/reason`` when
        ``error`` has a ``reason``, else under ``kind``; ``error`` (an exception or a text) is the text."""
        reason = getattr(error, "reason", None)
        return self.count(f"{kind}/{reason}" if reason else kind, str(error), time.monotonic())

    def refused(self, kind: str) -> int:
        """Refusals of input ``kind`` (every reason)."""
        return sum(count for key, count in self.counts.items() if key == kind or key.startswith(kind + "/"))

    def report(self) -> Dict[str, str]:
        """The counts for /diagnostics: ``refused_<reason>``, ``used_<input>``, ``superseded_<input>``."""
        values = {f"refused_{reason}": str(count) for reason, count in sorted(self.counts.items())}
        values.update((f"used_{kind}", str(count)) for kind, count in sorted(self.used.items()))
        values.update((f"superseded_{kind}", str(count)) for kind, count in sorted(self.superseded.items()))
        return values
