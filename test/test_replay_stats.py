"""Statistics gathered chunk by chunk (rbd_deriv.replay.stats), against numpy over the whole data."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.replay.stats import Envelope, LogHistogram, Moments


def _chunks(count: int, seed: int):
    rng = np.random.default_rng(seed)
    edges = np.unique(np.concatenate(([0, count], rng.integers(0, count, 30))))
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def test_moments_match_numpy_with_missing_samples():
    rng = np.random.default_rng(0)
    values = rng.normal(3.0, 2.0, size=(5000, 3)) * np.array([1.0, 1e-3, 1e3])
    values[rng.random(values.shape) < 0.2] = np.nan
    values[:, 2] = np.nan  # a column without samples
    time = np.arange(5000) * 1e-3
    values[1234, 0] = -50.0  # the largest magnitude
    moments = Moments(3)
    for part in _chunks(5000, 1):
        moments.add(values[part], time[part])
    for column in range(2):
        present = values[~np.isnan(values[:, column]), column]
        assert moments.count[column] == present.size
        assert moments.mean[column] == pytest.approx(present.mean(), rel=1e-12)
        assert moments.std[column] == pytest.approx(present.std(), rel=1e-10)
        assert moments.sum_squares[column] == pytest.approx(np.sum(present**2), rel=1e-12)
        assert moments.rms[column] == pytest.approx(np.sqrt(np.mean(present**2)), rel=1e-12)
    assert moments.max_abs[0] == 50.0 and moments.max_at[0] == pytest.approx(1.234)
    assert moments.count[2] == 0 and moments.max_abs[2] == -np.inf


def test_log_histogram_quantiles_within_their_resolution():
    rng = np.random.default_rng(2)
    values = np.exp(rng.normal(8.0, 1.5, 100_000))
    histogram = LogHistogram(1.0, 1e12)
    for part in _chunks(values.size, 3):
        histogram.add(values[part])
    resolution = 10 ** (1 / 1000)  # one bin
    for fraction in (0.01, 0.5, 0.9, 0.99):
        exact = np.quantile(values, fraction)
        assert exact / resolution <= histogram.quantile(fraction) <= exact * resolution
    stats = histogram.percentiles()
    assert stats["max"] == values.max() and stats["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert LogHistogram(1.0, 10.0).percentiles()["p50"] != LogHistogram(1.0, 10.0).percentiles()["p50"]  # NaN


def _reference_envelope(values, time, width):
    points = []
    for start in range(0, len(time), width):
        segment, stamps = values[start : start + width], time[start : start + width]
        if np.all(np.isnan(segment)):
            continue
        low, high = np.nanargmin(segment), np.nanargmax(segment)
        points += [(stamps[low], segment[low]), (stamps[high], segment[high])]
    points.sort(key=lambda p: p[0])
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


@pytest.mark.parametrize("count", [150, 12_345])
def test_envelope_keeps_every_bucket_extreme(count):
    rng = np.random.default_rng(4)
    values = rng.normal(size=(count, 2))
    values[rng.random(values.shape) < 0.1] = np.nan
    values[count // 3, 1] = 1e6  # a spike stays visible however long the recording
    time = np.arange(count) * 1e-3
    envelope = Envelope(2, buckets=100)
    for part in _chunks(count, 5):
        envelope.add(values[part], time[part])
    assert envelope.used <= 100
    for column in range(2):
        t, v = envelope.curve(column)
        expected_t, expected_v = _reference_envelope(values[:, column], time, envelope.width)
        np.testing.assert_array_equal(t, expected_t)
        np.testing.assert_array_equal(v, expected_v)
    assert 1e6 in envelope.curve(1)[1]
