"""Stamps, gaps, acceleration estimate and odometry interpolation (rbd_deriv.replay.signals)."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.replay import signals
from rbd_deriv.replay.series import OdometrySeries, Rejections


def _uneven_times(count: int, step: float, jitter: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.arange(count) * step + rng.uniform(-jitter, jitter, count) * step


@pytest.mark.parametrize("half_window", [1, 2, 4])
def test_fit_is_exact_for_quadratic_velocity_on_uneven_stamps(half_window):
    t = _uneven_times(400, 1e-3, 0.3, half_window)
    c = np.array([[0.3, -1.2], [2.0, 0.5], [-4.0, 7.0]])  # v = c0 + c1 t + c2 t^2, two signals
    v = c[0] + c[1] * t[:, None] + c[2] * t[:, None] ** 2
    exact = c[1] + 2 * c[2] * t[:, None]
    estimate = signals.fit_derivative(t, v, half_window)
    np.testing.assert_allclose(estimate, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max())


def test_central_difference_formula_for_three_points():
    # With h = 1 the fit through three points is the uneven-grid central difference.
    t = np.array([0.0, 0.001, 0.0035])
    v = np.array([[1.0], [1.7], [0.2]])
    h1, h2 = t[1] - t[0], t[2] - t[1]
    central = (h1**2 * v[2] - h2**2 * v[0] + (h2**2 - h1**2) * v[1]) / (h1 * h2 * (h1 + h2))
    assert signals.fit_derivative(t, v, 1)[1, 0] == pytest.approx(central[0], rel=1e-12)


def test_wider_window_reduces_noise_and_keeps_the_signal():
    rng = np.random.default_rng(0)
    t = np.arange(5000) * 1e-3
    omega = 2 * np.pi * 0.5
    v = np.sin(omega * t)[:, None]
    noisy = v + rng.normal(0, 1e-3, v.shape)
    exact = omega * np.cos(omega * t)[:, None]
    error_narrow = np.sqrt(np.mean((signals.fit_derivative(t, noisy, 1) - exact) ** 2))
    error_wide = np.sqrt(np.mean((signals.fit_derivative(t, noisy, 10) - exact) ** 2))
    assert error_wide < error_narrow / 10
    # Without noise only the smoothing bias remains: about omega^3 (h dt)^2 / 3 inside, larger at the
    # ends where the window is one-sided.
    clean_error = np.abs(signals.fit_derivative(t, v, 10) - exact)[:, 0]
    assert clean_error[10:-10].max() < 2e-4 * omega
    assert clean_error.max() < 1e-3 * omega


def test_fit_refuses_too_few_samples():
    with pytest.raises(ValueError, match="at least 5"):
        signals.fit_derivative(np.arange(4.0), np.zeros((4, 1)), 2)


def test_duplicate_and_backward_stamps_are_rejected_first_copy_kept():
    stamps = np.array([10, 20, 20, 30, 25, 40, 40, 50])
    rejections = Rejections.for_messages(stamps.size)
    signals.drop_unordered_stamps(stamps, rejections)
    assert rejections.counts() == {"duplicate_stamp": 2, "out_of_order": 1}
    assert np.flatnonzero(rejections.usable).tolist() == [0, 1, 3, 5, 7]


def test_rejected_messages_do_not_take_part_in_ordering():
    stamps = np.array([10, 90, 20, 30])
    rejections = Rejections.for_messages(4)
    rejections.reject(np.array([1]), "non_finite", "message 1")
    signals.drop_unordered_stamps(stamps, rejections)
    assert rejections.counts() == {"non_finite": 1}


def test_gaps_split_segments_and_short_segments_are_rejected():
    stamps = np.concatenate([np.arange(0, 10), np.arange(100, 102), np.arange(200, 205)]) * 1_000_000
    rejections = Rejections.for_messages(stamps.size)
    rows, segments = signals.split_segments(stamps, rejections, gap_factor=5.0, min_length=3)
    assert segments.gaps == 2
    assert rejections.counts() == {"short_segment": 2}
    assert rows.tolist() == list(range(10)) + list(range(12, 17))
    assert segments.bounds == [(0, 10), (10, 15)]
    assert segments.median_step_ns == 1_000_000


def test_acceleration_does_not_span_gaps():
    # Two segments with different constant accelerations; a window across the gap would blend them.
    t1 = np.arange(20) * 1e-3
    t2 = 1.0 + np.arange(20) * 1e-3
    v = np.concatenate([2.0 * t1, 5.0 - 3.0 * t2])[:, None]
    stamps = np.round(np.concatenate([t1, t2]) * 1e9).astype(np.int64)
    rejections = Rejections.for_messages(stamps.size)
    rows, segments = signals.split_segments(stamps, rejections, 5.0, 3)
    a = signals.estimate_acceleration(stamps[rows], v[rows], segments, 1)
    np.testing.assert_allclose(a[:20, 0], 2.0, rtol=1e-9)
    np.testing.assert_allclose(a[20:, 0], -3.0, rtol=1e-9)


def _odometry(stamps, angles, speeds):
    count = stamps.size
    orientation = np.column_stack([np.zeros(count), np.zeros(count), np.sin(angles / 2), np.cos(angles / 2)])
    return OdometrySeries(
        "/odom",
        stamps,
        np.column_stack([speeds, 2 * speeds, np.zeros(count)]),
        orientation,
        np.column_stack([speeds, np.zeros(count), np.zeros(count)]),
        np.zeros((count, 3)),
    )


def test_odometry_interpolation():
    stamps = np.array([0, 10, 20], dtype=np.int64) * 1_000_000
    odometry = _odometry(stamps, np.array([0.0, 0.2, 0.4]), np.array([1.0, 2.0, 4.0]))
    query = np.array([0, 5, 10, 15, 20, 25, -1], dtype=np.int64) * 1_000_000
    q, v, valid = signals.interpolate_odometry(odometry, query, max_gap_ns=1e9)
    assert valid.tolist() == [True, True, True, True, True, False, False]
    np.testing.assert_allclose(v[:5, 0], [1.0, 1.5, 2.0, 3.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(q[:5, 1], [2.0, 3.0, 4.0, 6.0, 8.0], rtol=1e-12)
    # At recorded stamps the quaternion is the recorded one; halfway, within nlerp's error of slerp.
    np.testing.assert_allclose(q[2, 3:], odometry.orientation[1], atol=1e-15)
    halfway = np.array([0, 0, np.sin(0.05), np.cos(0.05)])
    np.testing.assert_allclose(q[1, 3:], halfway, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(q[:5, 3:], axis=1), 1.0, rtol=1e-12)


def test_odometry_interpolation_refuses_broken_quaternions_and_wide_gaps():
    stamps = np.array([0, 10, 200], dtype=np.int64) * 1_000_000
    odometry = _odometry(stamps, np.zeros(3), np.ones(3))
    odometry.orientation[0] = [0.0, 0.0, 0.0, 2.0]
    _, _, valid = signals.interpolate_odometry(odometry, np.array([5, 12, 100], dtype=np.int64) * 1_000_000, max_gap_ns=50e6)
    assert valid.tolist() == [False, False, False]
    _, _, valid = signals.interpolate_odometry(odometry, np.array([10], dtype=np.int64) * 1_000_000, max_gap_ns=50e6)
    assert valid.tolist() == [True]
