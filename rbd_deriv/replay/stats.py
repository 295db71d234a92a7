"""Statistics gathered chunk by chunk, in memory that does not grow with the recording.

- :class:`Moments`: count, mean, variance (Chan et al.'s pairwise update), sum of squares and the largest
  magnitude with where it occurred, per column; exact.
- :class:`LogHistogram`: quantiles of a positive quantity from a histogram with logarithmic bins; each
  quantile is within half a bin (``10 ** (0.5 / bins_per_decade)``, 0.12 % by default) of the exact one.
- :class:`Envelope`: a curve thinned for plotting to at most ``buckets`` buckets, keeping each bucket's
  minimum and maximum per column (and their times), so that spikes and the extent of every excursion
  stay visible; buckets merge pairwise as the recording grows.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

__all__ = ["Moments", "LogHistogram", "Envelope"]


class Moments:
    """Running moments of ``d`` columns, NaN entries left out.

    Attributes:
        count: Samples per column [d].
        mean: Mean per column [d].
        m2: Sum of squared deviations from the mean per column [d].
        sum_squares: Sum of squares per column [d].
        max_abs: Largest magnitude per column [d]; ``max_at`` its time [d] (the ``time`` given to
            :meth:`add`).
    """

    def __init__(self, columns: int) -> None:
        self.count = np.zeros(columns, dtype=np.int64)
        self.mean = np.zeros(columns)
        self.m2 = np.zeros(columns)
        self.sum_squares = np.zeros(columns)
        self.max_abs = np.full(columns, -np.inf)
        self.max_at = np.full(columns, np.nan)

    def add(self, values: np.ndarray, time: np.ndarray) -> None:
        """Add samples ``values`` [n, d] (NaN: no sample) taken at ``time`` [n]."""
        if values.shape[0] == 0:
            return
        present = np.isfinite(values)
        count = present.sum(axis=0)
        filled = np.where(present, values, 0.0)
        total = filled.sum(axis=0)
        chunk_mean = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
        chunk_m2 = np.where(present, (values - chunk_mean) ** 2, 0.0).sum(axis=0)
        combined = self.count + count
        delta = chunk_mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            self.mean = np.where(combined > 0, self.mean + delta * count / np.maximum(combined, 1), self.mean)
            self.m2 = self.m2 + chunk_m2 + delta**2 * self.count * count / np.maximum(combined, 1)
        self.count = combined
        self.sum_squares += (filled**2).sum(axis=0)
        magnitude = np.where(present, np.abs(values), -np.inf)
        row = np.argmax(magnitude, axis=0)
        largest = magnitude[row, np.arange(values.shape[1])]
        better = largest > self.max_abs
        self.max_abs = np.where(better, largest, self.max_abs)
        self.max_at = np.where(better, time[row], self.max_at)

    @property
    def rms(self) -> np.ndarray:
        return np.sqrt(self.sum_squares / np.maximum(self.count, 1))

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / np.maximum(self.count, 1))


class LogHistogram:
    """Quantiles of a positive quantity from logarithmic bins between ``low`` and ``high``.

    Values outside the range count in the first or last bin; the exact minimum and maximum are kept.
    """

    def __init__(self, low: float, high: float, bins_per_decade: int = 1000) -> None:
        self.low = np.log10(low)
        self.bins_per_decade = bins_per_decade
        self.bins = int(np.ceil((np.log10(high) - self.low) * bins_per_decade))
        self.counts = np.zeros(self.bins, dtype=np.int64)
        self.total = 0
        self.sum = 0.0
        self.min = np.inf
        self.max = -np.inf

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64).ravel()
        values = values[np.isfinite(values) & (values > 0)]
        if values.size == 0:
            return
        position = np.floor((np.log10(values) - self.low) * self.bins_per_decade).astype(np.int64)
        self.counts += np.bincount(np.clip(position, 0, self.bins - 1), minlength=self.bins)
        self.total += values.size
        self.sum += float(values.sum())
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))

    def quantile(self, fraction: float) -> float:
        """The value below which ``fraction`` of the samples lie (bin centre, clamped to min and max)."""
        if self.total == 0:
            return float("nan")
        rank = fraction * (self.total - 1)
        position = int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))
        centre = 10 ** (self.low + (min(position, self.bins - 1) + 0.5) / self.bins_per_decade)
        return float(min(max(centre, self.min), self.max))

    def percentiles(self) -> Dict[str, float]:
        """p50, p90, p99, max and mean (NaN when empty)."""
        if self.total == 0:
            return {key: float("nan") for key in ("p50", "p90", "p99", "max", "mean")}
        return {"p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99), "max": self.max,
                "mean": self.sum / self.total}


class Envelope:
    """Per-bucket minimum and maximum of ``d`` columns along time, at most ``buckets`` buckets.

    Sample ``k`` (counting from 0) falls in bucket ``k // width``; when the samples would need more
    buckets than allowed, neighbouring buckets merge and the width doubles. NaN samples are left out (a
    bucket of only NaN stays NaN).
    """

    def __init__(self, columns: int, buckets: int = 1000) -> None:
        self.columns = columns
        self.capacity = buckets + buckets % 2
        self.width = 1
        self.count = 0
        shape = (self.capacity, columns)
        self.low = np.full(shape, np.nan)
        self.high = np.full(shape, np.nan)
        self.low_at = np.full(shape, np.nan)
        self.high_at = np.full(shape, np.nan)

    @property
    def used(self) -> int:
        return -(-self.count // self.width)

    def add(self, values: np.ndarray, time: np.ndarray) -> None:
        """Add samples [n, d] taken at ``time`` [n] (increasing)."""
        n = len(time)
        if n == 0:
            return
        values = np.asarray(values, dtype=np.float64).reshape(n, self.columns)
        while -(-(self.count + n) // self.width) > self.capacity:
            self._merge()
        bucket = (self.count + np.arange(n)) // self.width
        starts = np.flatnonzero(np.diff(bucket, prepend=-1))
        target = bucket[starts]
        rows = np.arange(n)[:, None]
        for reduce, extreme, extreme_at, better in ((np.fmin, self.low, self.low_at, np.less),
                                                    (np.fmax, self.high, self.high_at, np.greater)):
            found = reduce.reduceat(values, starts, axis=0)
            group = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
            first = np.minimum.reduceat(np.where(values == found[group], rows, n), starts, axis=0)
            found_at = time[np.minimum(first, n - 1)]
            current = extreme[target]
            take = ~np.isnan(found) & (np.isnan(current) | better(found, current))
            extreme[target] = np.where(take, found, current)
            extreme_at[target] = np.where(take, found_at, extreme_at[target])
        self.count += n

    def _merge(self) -> None:
        half = self.capacity // 2
        for target, target_at, pick in ((self.low, self.low_at, np.fmin), (self.high, self.high_at, np.fmax)):
            first, second = target[0::2].copy(), target[1::2].copy()
            first_at, second_at = target_at[0::2].copy(), target_at[1::2].copy()
            merged = pick(first, second)
            use_second = ~np.isnan(second) & (np.isnan(first) | (merged != first))
            target[:half] = merged
            target_at[:half] = np.where(use_second, second_at, first_at)
            target[half:] = np.nan
            target_at[half:] = np.nan
        self.width *= 2

    def curve(self, column: int) -> Tuple[np.ndarray, np.ndarray]:
        """Times and values of column ``column``: each bucket's minimum and maximum in time order."""
        used = slice(0, self.used)
        times = np.stack([self.low_at[used, column], self.high_at[used, column]], axis=1).ravel()
        values = np.stack([self.low[used, column], self.high[used, column]], axis=1).ravel()
        keep = ~np.isnan(values)
        times, values = times[keep], values[keep]
        order = np.argsort(times, kind="stable")
        return times[order], values[order]
