"""Time bases, gaps, and the acceleration estimated from recorded velocities.

Joint accelerations are not recorded; inverse dynamics needs them. They are estimated by fitting, around
each message, a quadratic in time to the recorded velocities of ``2 h + 1`` neighbouring messages (least
squares, at their real stamps) and taking its slope at the message's own stamp:

.. math:: v(t_j) \\approx c_0 + c_1 (t_j - t_i) + c_2 (t_j - t_i)^2, \\quad \\hat a_i = c_1

With ``h = 1`` the fit passes through the three points and is the second-order central difference on an
uneven grid; a larger ``h`` smooths noise (a Savitzky-Golay filter that tolerates uneven stamps). Near the
ends of a segment the window slides inward so that it always holds ``2 h + 1`` messages. The estimate is
exact whenever the velocity is a quadratic in time, which the tests use. Windows never span a gap: the
recording is cut into segments where the time step exceeds ``gap_factor`` times its median.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from rbd_deriv.replay.series import OdometrySeries, Rejections

__all__ = [
    "Segments",
    "drop_unordered_stamps",
    "split_segments",
    "fit_derivative",
    "estimate_acceleration",
    "interpolate_odometry",
]


@dataclass(frozen=True)
class Segments:
    """Runs of usable messages without a gap.

    Attributes:
        bounds: ``(start, stop)`` positions into the array of usable message indices, one per segment.
        median_step_ns: Median time between consecutive usable messages [ns].
        gaps: Number of gaps found (time step above the threshold).
    """

    bounds: List[Tuple[int, int]]
    median_step_ns: float
    gaps: int


def drop_unordered_stamps(stamp_ns: np.ndarray, rejections: Rejections) -> None:
    """Reject messages whose stamp repeats or goes back in time relative to an earlier usable message.

    The earlier message wins: a recorder that receives one state twice, or late, keeps the first copy.
    """
    rows = np.flatnonzero(rejections.usable)
    if rows.size < 2:
        return
    stamps = stamp_ns[rows]
    latest_before = np.maximum.accumulate(stamps)[:-1]
    later = stamps[1:]
    duplicate = rows[1:][later == latest_before]
    backward = rows[1:][later < latest_before]
    if duplicate.size:
        rejections.reject(
            duplicate, "duplicate_stamp", f"message {duplicate[0]} repeats stamp {stamp_ns[duplicate[0]]} ns"
        )
    if backward.size:
        rejections.reject(
            backward, "out_of_order", f"message {backward[0]} is stamped before an earlier message"
        )


def split_segments(
    stamp_ns: np.ndarray, rejections: Rejections, gap_factor: float, min_length: int
) -> Tuple[np.ndarray, Segments]:
    """Cut the usable messages into gap-free segments; reject segments shorter than ``min_length``.

    Args:
        stamp_ns: Stamps [K] in [ns], increasing over usable messages.
        rejections: Updated with ``short_segment`` rejections.
        gap_factor: A step larger than ``gap_factor`` times the median step starts a new segment.
        min_length: Fewest messages a segment needs (the derivative window).

    Returns:
        ``(rows, segments)``: the usable message indices after this step, and the segments over them.
    """
    rows = np.flatnonzero(rejections.usable)
    if rows.size == 0:
        return rows, Segments([], float("nan"), 0)
    steps = np.diff(stamp_ns[rows])
    median = float(np.median(steps)) if steps.size else float("nan")
    cuts = np.flatnonzero(steps > gap_factor * median) + 1 if steps.size else np.array([], dtype=int)
    edges = np.concatenate(([0], cuts, [rows.size]))
    short = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b - a < min_length]
    for a, b in short:
        rejections.reject(
            rows[a:b],
            "short_segment",
            f"messages {rows[a]}..{rows[b - 1]} lie between gaps, fewer than the {min_length} "
            "needed to estimate an acceleration",
        )
    kept_rows = np.flatnonzero(rejections.usable)
    position = {row: i for i, row in enumerate(kept_rows)} if short else None
    bounds = []
    for a, b in zip(edges[:-1], edges[1:]):
        if b - a >= min_length:
            if position is None:
                bounds.append((int(a), int(b)))
            else:
                bounds.append((position[rows[a]], position[rows[b - 1]] + 1))
    return kept_rows, Segments(bounds, median, int(cuts.size))


def fit_derivative(time_s: np.ndarray, values: np.ndarray, half_window: int) -> np.ndarray:
    """Slope at each sample of the local least-squares quadratic (see the module docstring).

    Args:
        time_s: Sample times [n] in [s], strictly increasing, ``n >= 2 half_window + 1``.
        values: Samples [n, d].
        half_window: ``h`` >= 1; the window holds ``2 h + 1`` samples.

    Returns:
        Derivative [n, d] in units of ``values`` per second.
    """
    n = time_s.size
    width = 2 * half_window + 1
    if half_window < 1 or n < width:
        raise ValueError(f"need at least {width} samples and half_window >= 1, got {n} and {half_window}")
    # Work in units of the typical step so the normal equations stay well conditioned at 1 kHz.
    scale = float(np.median(np.diff(time_s)))
    start = np.clip(np.arange(n) - half_window, 0, n - width)
    moments = np.zeros((n, 5))
    rhs = np.zeros((n, 3, values.shape[1]))
    for r in range(width):
        neighbour = start + r
        offset = (time_s[neighbour] - time_s) / scale
        powers = offset[:, None] ** np.arange(5)
        moments += powers
        rhs += powers[:, :3, None] * values[neighbour][:, None, :]
    hankel = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
    normal = moments[:, hankel]
    coefficients = np.linalg.solve(normal, rhs)
    return coefficients[:, 1, :] / scale


def estimate_acceleration(stamp_ns: np.ndarray, velocity: np.ndarray, segments: Segments, half_window: int) -> np.ndarray:
    """Accelerations [n, d] from velocities [n, d] at stamps [n] in [ns], segment by segment.

    Args:
        stamp_ns: Stamps of the usable messages (the ``rows`` of :func:`split_segments`), increasing.
        velocity: Their velocities.
        segments: Gap-free segments over those messages.
        half_window: See :func:`fit_derivative`.

    Returns:
        Accelerations; NaN outside every segment.
    """
    acceleration = np.full(velocity.shape, np.nan)
    for a, b in segments.bounds:
        time_s = (stamp_ns[a:b] - stamp_ns[a]) * 1e-9
        acceleration[a:b] = fit_derivative(time_s, velocity[a:b], half_window)
    return acceleration


def interpolate_odometry(odometry: OdometrySeries, stamp_ns: np.ndarray, max_gap_ns: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Base configuration and velocity at the given stamps, interpolated between odometry messages.

    Position and twist are interpolated linearly; the orientation by normalized linear interpolation of
    the quaternion along the shorter arc (within a few milliseconds of rotation the difference from slerp
    is far below sensor noise).

    Args:
        odometry: Recorded base states, sorted by stamp.
        stamp_ns: Query stamps [n] in [ns].
        max_gap_ns: Queries whose neighbouring odometry messages are further apart get no state.

    Returns:
        ``(q_base [n, 7] as x y z qx qy qz qw, v_base [n, 6] as linear then angular in the base frame,
        valid [n] bool)``. Rows with ``valid`` False are undefined.
    """
    times = odometry.stamp_ns
    n = stamp_ns.size
    q_base = np.zeros((n, 7))
    v_base = np.zeros((n, 6))
    if times.size == 0:
        return q_base, v_base, np.zeros(n, dtype=bool)
    upper = np.clip(np.searchsorted(times, stamp_ns, side="left"), 0, times.size - 1)
    lower = np.clip(upper - 1, 0, times.size - 1)
    exact = times[upper] == stamp_ns
    lower = np.where(exact, upper, lower)
    inside = (stamp_ns >= times[0]) & (stamp_ns <= times[-1])
    span = (times[upper] - times[lower]).astype(np.float64)
    valid = inside & (span <= max_gap_ns)
    weight = np.where(span > 0, (stamp_ns - times[lower]) / np.where(span > 0, span, 1.0), 0.0)[:, None]

    def blend(values: np.ndarray) -> np.ndarray:
        return (1.0 - weight) * values[lower] + weight * values[upper]

    q0 = odometry.orientation[lower]
    q1 = odometry.orientation[upper]
    q1 = np.where(np.sum(q0 * q1, axis=1, keepdims=True) < 0.0, -q1, q1)
    quaternion = (1.0 - weight) * q0 + weight * q1
    norm = np.linalg.norm(quaternion, axis=1, keepdims=True)
    # A recorded quaternion far from unit length is a broken message, not rounding.
    recorded_unit = np.abs(np.linalg.norm(odometry.orientation, axis=1) - 1.0) < 1e-3
    valid &= recorded_unit[lower] & recorded_unit[upper] & np.isfinite(norm[:, 0]) & (norm[:, 0] > 0.5)
    q_base[:, :3] = blend(odometry.position)
    q_base[:, 3:] = quaternion / np.where(norm > 0, norm, 1.0)
    v_base[:, :3] = blend(odometry.linear)
    v_base[:, 3:] = blend(odometry.angular)
    valid &= np.all(np.isfinite(q_base), axis=1) & np.all(np.isfinite(v_base), axis=1)
    return q_base, v_base, valid
