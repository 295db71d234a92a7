"""A plain progress bar on stderr.

On a terminal the bar redraws in place at most ten times a second; into a file or a pipe (CI logs) it
prints one line per tenth of the work, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Progress of one stage of known (or unknown) size.

    Args:
        label: Stage name printed before the bar.
        total: Units of work, or None when unknown (the count alone is shown).
        stream: Where to draw; stderr by default.
        enabled: False makes every call a no-op (``--quiet``).
    """

    _WIDTH = 30
    _REDRAW_S = 0.1

    def __init__(self, label: str, total: Optional[int] = None, stream: Optional[TextIO] = None, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = 0.0
        self._last_tenth = -1
        self._interactive = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, done: int) -> None:
        """Set the amount of work done so far."""
        self.done = done
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._interactive:
            if now - self._last_draw >= self._REDRAW_S:
                self._last_draw = now
                self.stream.write("\r" + self._line(now))
                self.stream.flush()
        elif self.total:
            tenth = min(10, int(10 * done / self.total))
            if tenth > self._last_tenth:
                self._last_tenth = tenth
                self.stream.write(self._line(now) + "\n")
                self.stream.flush()

    def advance(self, amount: int = 1) -> None:
        self.update(self.done + amount)

    def close(self) -> None:
        """Draw the final state and end the line."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._interactive:
            self.stream.write("\r" + self._line(now) + "\n")
        elif not self.total or self._last_tenth < 10:
            self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self._start
        if self.total:
            fraction = min(1.0, self.done / self.total)
            filled = int(round(self._WIDTH * fraction))
            bar = "#" * filled + "-" * (self._WIDTH - filled)
            return f"{self.label:<10} [{bar}] {100 * fraction:5.1f}% {self.done}/{self.total} {elapsed:6.2f} s"
        return f"{self.label:<10} {self.done} {elapsed:6.2f} s"

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
