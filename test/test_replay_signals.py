"""Stamps, gaps, acceleration estimates and odometry over a stream of batches (rbd_deriv.replay.signals).

The streaming classes are checked against the whole-array computation on the same data split into batches
at random places: the result must not depend on where a batch ends.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest

from rbd_deriv.replay import signals
from rbd_deriv.replay.series import OdometrySeries, Rejections

STEP_NS = 1_000_000


def _uneven_stamps(count: int, jitter: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.round((np.arange(count) + rng.uniform(-jitter, jitter, count)) * STEP_NS).astype(np.int64) + 10**18


def _batches(count: int, seed: int) -> List[slice]:
    rng = np.random.default_rng(seed)
    edges = np.unique(np.concatenate(([0, count], rng.integers(0, count, size=max(1, count // 40)))))
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


@pytest.mark.parametrize("half_window", [1, 2, 4])
def test_fit_is_exact_for_quadratic_velocity_on_uneven_stamps(half_window):
    stamps = _uneven_stamps(400, 0.3, half_window)
    t = (stamps - stamps[0]) * 1e-9
    c = np.array([[0.3, -1.2], [2.0, 0.5], [-4.0, 7.0]])  # v = c0 + c1 t + c2 t^2, two signals
    v = c[0] + c[1] * t[:, None] + c[2] * t[:, None] ** 2
    exact = c[1] + 2 * c[2] * t[:, None]
    estimate = signals.fit_derivative(stamps, v, half_window)
    np.testing.assert_allclose(estimate, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max())


def test_central_difference_formula_for_three_points():
    # With h = 1 the fit through three points is the uneven-grid central difference.
    stamps = np.array([0, 1_000_000, 3_500_000])
    v = np.array([[1.0], [1.7], [0.2]])
    h1, h2 = 1e-3, 2.5e-3
    central = (h1**2 * v[2] - h2**2 * v[0] + (h2**2 - h1**2) * v[1]) / (h1 * h2 * (h1 + h2))
    assert signals.fit_derivative(stamps, v, 1)[1, 0] == pytest.approx(central[0], rel=1e-12)


def test_wider_window_reduces_noise_and_keeps_the_signal():
    rng = np.random.default_rng(0)
    stamps = np.arange(5000) * STEP_NS
    t = stamps * 1e-9
    omega = 2 * np.pi * 0.5
    v = np.sin(omega * t)[:, None]
    noisy = v + rng.normal(0, 1e-3, v.shape)
    exact = omega * np.cos(omega * t)[:, None]
    error_narrow = np.sqrt(np.mean((signals.fit_derivative(stamps, noisy, 1) - exact) ** 2))
    error_wide = np.sqrt(np.mean((signals.fit_derivative(stamps, noisy, 10) - exact) ** 2))
    assert error_wide < error_narrow / 10
    # Without noise only the smoothing bias remains: about omega^3 (h dt)^2 / 3 inside, larger at the
    # ends where the window is one-sided.
    clean_error = np.abs(signals.fit_derivative(stamps, v, 10) - exact)[:, 0]
    assert clean_error[10:-10].max() < 2e-4 * omega
    assert clean_error.max() < 1e-3 * omega


def test_fit_refuses_too_few_samples():
    with pytest.raises(ValueError, match="at least 5"):
        signals.fit_derivative(np.arange(4) * STEP_NS, np.zeros((4, 1)), 2)


def test_duplicate_and_backward_stamps_are_rejected_first_copy_kept_across_batches():
    stamps = np.array([10, 20, 20, 30, 25, 40, 40, 50, 35, 60])
    for cut in range(len(stamps) + 1):
        rejections = Rejections()
        order = signals.StampOrder(rejections)
        status = np.zeros(stamps.size, dtype=np.int16)
        for part in (slice(0, cut), slice(cut, None)):
            order.apply(stamps[part], status[part], np.arange(stamps.size)[part])
        assert rejections.counts() == {"duplicate_stamp": 2, "out_of_order": 2}, cut
        assert np.flatnonzero(status == 0).tolist() == [0, 1, 3, 5, 7, 9]


def test_rejected_messages_do_not_take_part_in_ordering():
    stamps = np.array([10, 90, 20, 30])
    rejections = Rejections()
    status = np.zeros(4, dtype=np.int16)
    rejections.reject(status, np.array([1]), "non_finite", "message 1")
    signals.StampOrder(rejections).apply(stamps, status, np.arange(4))
    assert rejections.counts() == {"non_finite": 1}


def test_step_sample_median():
    sample = signals.StepSample(capacity=1000)
    for part in np.array_split(np.arange(800), 7):
        sample.add_stamps(part * 3)
    assert sample.exact and sample.median() == 3.0 and sample.seen == 799
    # Beyond its capacity it keeps a uniform sample: the median of 200,000 steps, half 1 ms and half
    # 1.2 ms with a few outliers, stays within the middle of the distribution.
    rng = np.random.default_rng(1)
    steps = np.where(rng.random(200_000) < 0.5, 1_000_000, 1_200_000)
    steps[rng.random(200_000) < 0.01] = 50_000_000
    large = signals.StepSample(capacity=4096, seed=2)
    for part in np.array_split(steps, 13):
        large.add(part)
    assert not large.exact and large.median() in (1_000_000, 1_100_000, 1_200_000)
    again = signals.StepSample(capacity=4096, seed=2)
    for part in np.array_split(steps, 5):
        again.add(part)
    assert again.median() == large.median()


def _recording(seed: int, count: int = 1500) -> Dict[str, np.ndarray]:
    """Stamps with jitter, gaps and short runs between gaps; velocities of a smooth motion; message numbers."""
    rng = np.random.default_rng(seed)
    steps = np.full(count - 1, STEP_NS) + rng.integers(-200_000, 200_000, count - 1)
    for position, length in ((300, 20), (302, 30), (700, 8), (701, 9), (1100, 40)):
        steps[position] = length * STEP_NS  # gaps; 300..302 and 700..701 leave runs of 1-2 messages
    stamps = 10**18 + np.concatenate(([0], np.cumsum(steps)))
    t = (stamps - stamps[0]) * 1e-9
    velocity = np.column_stack([np.sin(3 * t), t**3 - t])
    return {"index": np.arange(count), "stamp_ns": stamps, "velocity": velocity}


def _reference(recording: Dict[str, np.ndarray], method: str, half_window: int, gap_ns: float):
    """Whole-array estimate: segments split at gaps, too-short ones out, the estimate per segment."""
    stamps, velocity = recording["stamp_ns"], recording["velocity"]
    cuts = np.flatnonzero(np.diff(stamps) > gap_ns) + 1
    rows, accelerations, refused = [], [], {}
    width = 2 * half_window + 1 if method == "central" else 2
    for segment in np.split(np.arange(stamps.size), cuts):
        if segment.size < width:
            refused.setdefault("short_segment", []).extend(segment.tolist())
            continue
        if method == "central":
            accelerations.append(signals.fit_derivative(stamps[segment], velocity[segment], half_window))
            rows.extend(segment.tolist())
        else:
            steps = np.diff(stamps[segment]) * 1e-9
            accelerations.append(np.diff(velocity[segment], axis=0) / steps[:, None])
            rows.extend(segment[:-1].tolist())
            refused.setdefault("segment_end", []).append(int(segment[-1]))
    return np.array(rows), np.concatenate(accelerations), refused, cuts.size


@pytest.mark.parametrize("method, half_window", [("central", 1), ("central", 3), ("forward", 1)])
@pytest.mark.parametrize("seed", [0, 1])
def test_stream_estimate_matches_the_whole_recording_however_it_is_split(method, half_window, seed):
    recording = _recording(seed)
    gap_ns = 5.0 * STEP_NS
    rows, expected, refused, gaps = _reference(recording, method, half_window, gap_ns)
    stream = signals.AccelerationStream(method, half_window, gap_ns, STEP_NS)
    got_rows, got, got_refused = [], [], {}
    for part in _batches(len(recording["index"]), seed):
        out, acceleration, rejected = stream.push({key: value[part] for key, value in recording.items()})
        got_rows.extend(out["index"].tolist())
        got.append(acceleration)
        for reason, payload in rejected.items():
            got_refused.setdefault(reason, []).extend(payload["index"].tolist())
    out, acceleration, rejected = stream.finish()
    got_rows.extend(out["index"].tolist())
    got.append(acceleration)
    for reason, payload in rejected.items():
        got_refused.setdefault(reason, []).extend(payload["index"].tolist())
    assert got_rows == rows.tolist()
    np.testing.assert_allclose(np.concatenate(got), expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())
    assert {k: sorted(v) for k, v in got_refused.items()} == {k: sorted(v) for k, v in refused.items()}
    assert stream.gap_count == gaps == 5
    assert [(g.after_ns, g.before_ns) for g in stream.gaps][0] == (recording["stamp_ns"][300], recording["stamp_ns"][301])


def test_forward_difference_is_exact_for_semi_implicit_euler_data():
    # v[k+1] = v[k] + dt[k] a[k] with arbitrary accelerations and uneven steps: the forward estimate
    # recovers a[k] exactly (up to rounding).
    rng = np.random.default_rng(3)
    count = 500
    steps = rng.integers(900_000, 1_100_000, count - 1)
    stamps = 10**18 + np.concatenate(([0], np.cumsum(steps)))
    a = rng.normal(size=(count, 3)) * 10
    velocity = np.zeros((count, 3))
    for k in range(count - 1):
        velocity[k + 1] = velocity[k] + steps[k] * 1e-9 * a[k]
    stream = signals.AccelerationStream("forward", 1, 5 * STEP_NS, STEP_NS)
    out, estimate, _ = stream.push({"index": np.arange(count), "stamp_ns": stamps, "velocity": velocity})
    tail, tail_estimate, refused = stream.finish()
    estimate = np.concatenate([estimate, tail_estimate])
    assert np.concatenate([out["index"], tail["index"]]).tolist() == list(range(count - 1))
    np.testing.assert_allclose(estimate, a[:-1], rtol=1e-9, atol=1e-9 * np.abs(a).max())
    assert refused["segment_end"]["index"].tolist() == [count - 1]


def _odometry(stamps, angles, speeds):
    count = stamps.size
    orientation = np.column_stack([np.zeros(count), np.zeros(count), np.sin(angles / 2), np.cos(angles / 2)])
    return OdometrySeries(
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


@pytest.mark.parametrize("max_waiting", [10_000, 7])
def test_joined_base_states_match_interpolation_over_all_odometry(max_waiting):
    # Joint states at 1 kHz, odometry at 200 Hz with jitter, arriving a little out of order and stopping
    # before the joint states do; both are handed over in batches as a reader would.
    rng = np.random.default_rng(4)
    states = 10**18 + np.arange(2000) * STEP_NS
    odometry_stamps = 10**18 - 20 * STEP_NS + np.arange(300) * 5 * STEP_NS + rng.integers(-500_000, 500_000, 300)
    odometry = _odometry(odometry_stamps, np.linspace(0, 1, 300), np.linspace(1, 2, 300))
    shuffled = np.argsort(odometry_stamps + rng.integers(-3, 3, 300) * STEP_NS)
    full = odometry.sorted()
    q_ref, v_ref, valid_ref = signals.interpolate_odometry(full, states, 0.1e9)
    joiner = signals.BaseStateJoiner(0.1e9, max_waiting=max_waiting)
    got_rows, got_q, got_valid = [], [], []
    odometry_parts = np.array_split(shuffled, 17)
    for k, part in enumerate(np.array_split(np.arange(states.size), 17)):
        order = odometry_parts[k]
        joiner.add_odometry(OdometrySeries(odometry.stamp_ns[order], odometry.position[order], odometry.orientation[order],
                                           odometry.linear[order], odometry.angular[order]))
        ready, q, v, valid = joiner.push({"stamp_ns": states[part], "index": part})
        got_rows.extend(ready["index"].tolist())
        got_q.append(q)
        got_valid.append(valid)
    ready, q, v, valid = joiner.push({"stamp_ns": states[:0], "index": np.arange(0)}, final=True)
    got_rows.extend(ready["index"].tolist())
    got_q.append(q)
    got_valid.append(valid)
    valid = np.concatenate(got_valid)
    assert got_rows == list(range(states.size))
    if max_waiting == 10_000:
        assert valid.tolist() == valid_ref.tolist()
        np.testing.assert_allclose(np.concatenate(got_q)[valid], q_ref[valid], rtol=1e-12, atol=1e-12)
    else:
        # Released before their odometry arrived: fewer states get a base, never a different one.
        assert not (valid & ~valid_ref).any() and valid.sum() < valid_ref.sum()
        np.testing.assert_allclose(np.concatenate(got_q)[valid], q_ref[valid], rtol=1e-12, atol=1e-12)
    assert valid_ref[:100].all() and not valid_ref[-100:].any()
