"""Timing helpers shared by the benchmark commands.

A call is timed the way a user makes it from Python: ``timeit`` runs the call ``number`` times in a
block, a block gives one per-call time, and ``repeat`` blocks give the median, min and max. Several
cases (ours and Pinocchio's) are timed interleaved, block after block, so a slow drift of the machine
(another process, frequency scaling) touches every case alike instead of whichever ran last.

Nothing here asserts a speed: the benchmarks print and store numbers, the reader judges them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import timeit
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "Case",
    "Timing",
    "calibrate_number",
    "format_table",
    "machine_info",
    "make_timer",
    "ratio",
    "time_cases",
    "write_json",
]


@dataclass(frozen=True)
class Timing:
    """Per-call times of one case over ``repeat`` blocks of ``number`` calls.

    Attributes:
        median_us: Median over blocks of the mean time per call [us].
        min_us: Fastest block, per call [us].
        max_us: Slowest block, per call [us].
        number: Calls per block.
        repeat: Number of blocks.
    """

    median_us: float
    min_us: float
    max_us: float
    number: int
    repeat: int

    @classmethod
    def from_block_times(cls, block_seconds: Sequence[float], number: int) -> "Timing":
        """Build from the wall time of each block [s] of ``number`` calls."""
        if not block_seconds or number < 1:
            raise ValueError("at least one block of at least one call is needed")
        per_call_us = [1e6 * t / number for t in block_seconds]
        return cls(
            median_us=statistics.median(per_call_us),
            min_us=min(per_call_us),
            max_us=max(per_call_us),
            number=number,
            repeat=len(per_call_us),
        )

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)


@dataclass
class Case:
    """One call to time: ``function(*args)``.

    Attributes:
        name: Label of the case in results (unique within one :func:`time_cases` call).
        function: The callable, called with positional ``args`` exactly as a user writes it.
        args: Positional arguments, bound once so that building them is not timed.
    """

    name: str
    function: Callable[..., Any]
    args: Tuple[Any, ...] = ()


def make_timer(case: Case) -> timeit.Timer:
    """Return a ``timeit.Timer`` whose loop body is the bare call ``f(a0, a1, ...)``.

    The function and its arguments are bound as locals of timeit's inner function (through the
    setup statement), so each iteration costs the call itself and nothing else: no lambda wrapper,
    no global dictionary lookups. Every case pays the same, which keeps ratios honest.
    """
    names = [f"a{i}" for i in range(len(case.args))]
    namespace: Dict[str, Any] = {"_function": case.function}
    namespace.update({"_" + name: value for name, value in zip(names, case.args)})
    setup = "; ".join(["f = _function"] + [f"{name} = _{name}" for name in names])
    statement = f"f({', '.join(names)})"
    return timeit.Timer(statement, setup=setup, globals=namespace)


def calibrate_number(timer: timeit.Timer, block_seconds: float) -> int:
    """Return how many calls fill one block of about ``block_seconds`` [s] (at least 1).

    One untimed call comes first: a first call can compile its kernel (those compiled at their first call)
    or load it from numba's cache, and must not make the blocks one call long.
    """
    return _calibrate(timer, block_seconds)[0]


def _calibrate(timer: timeit.Timer, block_seconds: float) -> Tuple[int, float]:
    # Returns (calls per block, expected block duration [s]).
    timer.timeit(1)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= 0.2 * block_seconds or number >= 1 << 24:
            break
        number *= 10 if elapsed < 0.02 * block_seconds else 2
    per_call = elapsed / number
    if per_call <= 0:
        return number, elapsed
    calls = max(1, int(block_seconds / per_call))
    return calls, calls * per_call


def time_cases(
    cases: Sequence[Case],
    repeat: int,
    block_seconds: float,
    warmup_blocks: int = 1,
    seconds_per_case: Optional[float] = None,
    min_repeat: int = 5,
) -> Dict[str, Timing]:
    """Time several cases interleaved: block ``r`` of every case runs before block ``r + 1`` of any.

    Args:
        cases: Calls to time; names must be unique.
        repeat: Number of timed blocks per case (the most, when ``seconds_per_case`` is given).
        block_seconds: Target wall time of one block [s]; sets the calls per block of each case. A call
            longer than that makes a block of one call.
        warmup_blocks: Untimed blocks per case run before timing.
        seconds_per_case: Optional time budget of the timed blocks of one case [s]: slow calls get fewer
            blocks (never fewer than ``min_repeat``), so a whole benchmark keeps a bounded run time.
        min_repeat: Fewest blocks when a budget applies.

    Returns:
        Case name -> :class:`Timing`; all cases get the same number of blocks.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if len({case.name for case in cases}) != len(cases):
        raise ValueError("case names must be unique")
    timers = [make_timer(case) for case in cases]
    numbers = []
    longest_block = 0.0
    for timer in timers:
        number, block = _calibrate(timer, block_seconds)
        numbers.append(number)
        longest_block = max(longest_block, block)
    if seconds_per_case is not None and longest_block > 0:
        repeat = max(min(repeat, min_repeat), min(repeat, int(seconds_per_case / longest_block)))
    for _ in range(warmup_blocks):
        for timer, number in zip(timers, numbers):
            timer.timeit(number)
    blocks: List[List[float]] = [[] for _ in cases]
    order = list(range(len(cases)))
    for block in range(repeat):
        # Alternate the order so no case always runs right after the same neighbour.
        sequence = order if block % 2 == 0 else order[::-1]
        for index in sequence:
            blocks[index].append(timers[index].timeit(numbers[index]))
    return {
        case.name: Timing.from_block_times(times, number)
        for case, times, number in zip(cases, blocks, numbers)
    }


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or NaN when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else float("nan")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: Optional[str] = None) -> str:
    """Render rows as a plain-text table with columns padded to their widest cell.

    Floats are printed with 3 significant digits (enough to read a ratio, and timings are not more
    precise than that); everything else with ``str``.
    """

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if value != value:  # NaN
                return "-"
            return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.0f}"
        return str(value)

    text_rows = [[cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in text_rows:
        for column, text in enumerate(row):
            widths[column] = max(widths[column], len(text))
    lines = []
    if title:
        lines.append(title)
    lines.append(" | ".join(header.ljust(width) for header, width in zip(headers, widths)))
    lines.append("-+-".join("-" * width for width in widths))
    for row in text_rows:
        lines.append(" | ".join(text.ljust(width) for text, width in zip(row, widths)))
    return "\n".join(lines)


def machine_info(extra_modules: Sequence[str] = ("numpy", "numba", "pinocchio")) -> Dict[str, Any]:
    """Describe the machine and library versions a result was measured with."""
    info: Dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # Other work on the machine slows every timing; the 1-minute load tells how much there was.
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    for module_name in extra_modules:
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = __import__(module_name)
            except ImportError:
                info[module_name] = None
                continue
        info[module_name] = getattr(module, "__version__", "unknown")
    return info


def _cpu_model() -> str:
    # /proc/cpuinfo names the CPU on Linux; platform.processor() is often empty there.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path: "str | os.PathLike[str]", report: Mapping[str, Any]) -> Path:
    """Write ``report`` as indented JSON (NaN written as null) and return the path."""
    output = Path(path)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(_finite(report), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return output


def _finite(value: Any) -> Any:
    # Strict JSON has no NaN/inf; a missing measurement becomes null.
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, Mapping):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
