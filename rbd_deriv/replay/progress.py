"""Progress on stderr, and the wall time of each stage of a command.

On a terminal a bar redraws in place at most ten times a second; into a file or a pipe (CI logs) it prints
one line per tenth of the work, and at least one line every ``heartbeat`` seconds, so a log never goes
silent for long and stays short.

:class:`StageClock` adds up the wall time spent in named stages, even when they interleave (read a batch,
compute it, write it, read the next...); what no stage claimed is reported as ``other``, so the stages
add up to the wall time.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, TextIO

__all__ = ["ProgressBar", "StageClock"]


class ProgressBar:
    """Progress of one stage of known (or unknown) size.

    Args:
        label: Stage name printed before the bar.
        total: Units of work, or None when unknown (the count alone is shown).
        stream: Where to draw; stderr by default.
        enabled: False makes every call a no-op (``--quiet``).
        heartbeat: Into a log, print a line at least this often [s] while work goes on.
    """

    _WIDTH = 30
    _REDRAW_S = 0.1

    def __init__(self, label: str, total: Optional[int] = None, stream: Optional[TextIO] = None, enabled: bool = True,
                 heartbeat: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.heartbeat = heartbeat
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = self._start
        self._last_tenth = -1
        self._interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        if enabled and not self._interactive:
            self._write(self._line(self._start))
            self._last_tenth = 0 if total else -1

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
            return
        tenth = min(10, int(10 * done / self.total)) if self.total else -1
        if tenth > self._last_tenth or now - self._last_draw >= self.heartbeat:
            self._last_tenth = max(tenth, self._last_tenth)
            self._write(self._line(now))

    def advance(self, amount: int = 1) -> None:
        self.update(self.done + amount)

    def close(self) -> None:
        """Draw the final state and end the line."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._interactive:
            self.stream.write("\r" + self._line(now) + "\n")
            self.stream.flush()
        elif not self.total or self._last_tenth < 10 or self.done != self.total:
            self._write(self._line(now))

    def _write(self, line: str) -> None:
        self._last_draw = time.perf_counter()
        self.stream.write(line + "\n")
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


class StageClock:
    """Wall time per stage [s], from one start to :meth:`total`.

    Stages do not nest: time measured inside a stage belongs to it alone.
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: Dict[str, float] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        tic = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - tic)

    def total(self) -> float:
        return time.perf_counter() - self.started

    def breakdown(self) -> Dict[str, float]:
        """Every stage, then ``other`` (the rest of the wall time) and ``total``."""
        total = self.total()
        result = dict(self.stages)
        result["other"] = max(0.0, total - sum(self.stages.values()))
        result["total"] = total
        return result
