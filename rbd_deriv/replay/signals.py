"""Stamps, gaps, and the acceleration estimated from recorded velocities, over a stream of messages.

Joint accelerations are not recorded; inverse dynamics needs them. Two estimates are offered:

- ``central`` (default): around each message, a quadratic in time is fitted by least squares to the
  recorded velocities of ``2 h + 1`` neighbouring messages, at their real stamps, and its slope at the
  message's own stamp is the estimate:

  .. math:: v(t_j) \\approx c_0 + c_1 (t_j - t_i) + c_2 (t_j - t_i)^2, \\quad \\hat a_i = c_1

  With ``h = 1`` the fit passes through the three points: the second-order central difference on an
  uneven grid, whose error on a smooth motion is about :math:`v''' \\Delta t^2 / 6`. A larger
  ``h`` smooths noise (a Savitzky-Golay filter that tolerates uneven stamps). Near the ends of a segment
  the window slides inward so that it always holds ``2 h + 1`` messages. The estimate is exact whenever
  the velocity is a quadratic in time.
- ``forward``: :math:`\\hat a_i = (v_{i+1} - v_i) / (t_{i+1} - t_i)`. A simulator stepping with
  semi-implicit Euler (MuJoCo's default, :math:`v_{i+1} = v_i + \\Delta t\\, \\ddot q(q_i, v_i, \\tau_i)`)
  records exactly this acceleration, so the estimate is exact for such data; the last message of each
  segment has no successor and is set aside (``segment_end``).

Windows never span a gap: the recording is cut into segments where the time step exceeds ``gap_factor``
times the median step. Everything here works on batches of messages as they are read, keeping only the
few messages a window still needs, so memory does not depend on the recording's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from rbd_deriv.replay.series import OdometrySeries, Rejections

__all__ = [
    "ACCELERATION_METHODS",
    "Gap",
    "StampOrder",
    "StepSample",
    "AccelerationStream",
    "fit_derivative",
    "interpolate_odometry",
    "BaseStateJoiner",
]

ACCELERATION_METHODS = ("central", "forward")


@dataclass(frozen=True)
class Gap:
    """A step between two consecutive usable messages longer than the gap threshold.

    Attributes:
        after_ns: Stamp of the message before the gap [ns].
        before_ns: Stamp of the message after it [ns].
    """

    after_ns: int
    before_ns: int


class StampOrder:
    """Rejects messages whose stamp repeats or goes back in time relative to an earlier usable message.

    The earlier message wins: a recorder that receives one state twice, or late, keeps the first copy.
    The latest stamp is carried from batch to batch.
    """

    def __init__(self, rejections: Rejections) -> None:
        self.rejections = rejections
        self.latest: Optional[int] = None

    def apply(self, stamp_ns: np.ndarray, status: np.ndarray, index: np.ndarray) -> None:
        """Check the usable messages of one batch (``status`` updated in place).

        Args:
            stamp_ns: Stamps [k] in [ns] in the chosen time base.
            status: Status codes [k] (:class:`~rbd_deriv.replay.series.StateBatch`).
            index: Message numbers [k], for the examples.
        """
        rows = np.flatnonzero(status == 0)
        if rows.size == 0:
            return
        stamps = stamp_ns[rows]
        running = np.maximum.accumulate(stamps)
        before = np.concatenate(([self.latest if self.latest is not None else np.iinfo(np.int64).min], running[:-1]))
        if self.latest is not None:
            before = np.maximum(before, self.latest)
        duplicate = rows[stamps == before]
        backward = rows[stamps < before]
        if duplicate.size:
            self.rejections.reject(status, duplicate, "duplicate_stamp",
                                   f"message {index[duplicate[0]]} repeats stamp {stamp_ns[duplicate[0]]} ns")
        if backward.size:
            self.rejections.reject(status, backward, "out_of_order",
                                   f"message {index[backward[0]]} is stamped before an earlier message")
        self.latest = int(max(running[-1], self.latest if self.latest is not None else running[-1]))


class StepSample:
    """A uniform sample, of bounded size, of the time steps between consecutive usable messages.

    Up to ``capacity`` steps every step is kept, so the median is exact; beyond, reservoir sampling keeps
    a uniform random sample of ``capacity`` of them (seeded: the same bag gives the same result).
    """

    def __init__(self, capacity: int = 65536, seed: int = 0) -> None:
        self.capacity = capacity
        self.values = np.zeros(capacity, dtype=np.int64)
        self.seen = 0
        self.rng = np.random.default_rng(seed)
        self.last: Optional[int] = None

    def add_stamps(self, stamp_ns: np.ndarray) -> None:
        """Add the steps of increasing stamps [k] that follow the stamps added before."""
        if stamp_ns.size == 0:
            return
        previous = np.concatenate(([self.last], stamp_ns[:-1])) if self.last is not None else stamp_ns[:-1]
        following = stamp_ns if self.last is not None else stamp_ns[1:]
        self.last = int(stamp_ns[-1])
        self.add(following - previous)

    def add(self, steps: np.ndarray) -> None:
        steps = np.asarray(steps, dtype=np.int64)
        room = max(0, min(steps.size, self.capacity - self.seen))
        self.values[self.seen : self.seen + room] = steps[:room]
        rest = steps[room:]
        if rest.size:
            # Algorithm R: the n-th step replaces a random slot with probability capacity / n.
            numbers = self.seen + room + np.arange(1, rest.size + 1)
            slots = (self.rng.random(rest.size) * numbers).astype(np.int64)
            keep = slots < self.capacity
            self.values[slots[keep]] = rest[keep]
        self.seen += steps.size

    @property
    def exact(self) -> bool:
        return self.seen <= self.capacity

    def median(self) -> float:
        """Median step [ns]; NaN when no step was added."""
        size = min(self.seen, self.capacity)
        return float(np.median(self.values[:size])) if size else float("nan")


def _window_slopes(stamp_ns: np.ndarray, values: np.ndarray, at: np.ndarray, start: np.ndarray, width: int,
                   scale_ns: float) -> np.ndarray:
    """Slope at ``stamp_ns[at]`` of the quadratic fitted to samples ``start .. start + width - 1`` [per s]."""
    moments = np.zeros((at.size, 5))
    rhs = np.zeros((at.size, 3, values.shape[1]))
    for r in range(width):
        neighbour = start + r
        # Integer differences of the stamps, then in units of the typical step: exact and well conditioned.
        offset = (stamp_ns[neighbour] - stamp_ns[at]) / scale_ns
        powers = offset[:, None] ** np.arange(5)
        moments += powers
        rhs += powers[:, :3, None] * values[neighbour][:, None, :]
    hankel = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
    coefficients = np.linalg.solve(moments[:, hankel], rhs)
    return coefficients[:, 1, :] * (1e9 / scale_ns)


def fit_derivative(stamp_ns: np.ndarray, values: np.ndarray, half_window: int) -> np.ndarray:
    """The ``central`` estimate over one whole segment (see the module docstring).

    Args:
        stamp_ns: Sample stamps [n] in [ns] (int64), strictly increasing, ``n >= 2 half_window + 1``.
        values: Samples [n, d].
        half_window: ``h`` >= 1; the window holds ``2 h + 1`` samples.

    Returns:
        Derivative [n, d] in units of ``values`` per second.
    """
    stamp_ns = np.asarray(stamp_ns, dtype=np.int64)
    n = stamp_ns.size
    width = 2 * half_window + 1
    if half_window < 1 or n < width:
        raise ValueError(f"need at least {width} samples and half_window >= 1, got {n} and {half_window}")
    scale = float(np.median(np.diff(stamp_ns)))
    at = np.arange(n)
    return _window_slopes(stamp_ns, values, at, np.clip(at - half_window, 0, n - width), width, scale)


Payload = Dict[str, np.ndarray]


def _join(parts: List[Payload]) -> Payload:
    if len(parts) == 1:
        return parts[0]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def _slice(payload: Payload, rows: slice) -> Payload:
    return {key: value[rows] for key, value in payload.items()}


class AccelerationStream:
    """The acceleration estimate over messages arriving in batches, segment by segment.

    Messages go in with :meth:`push` (stamps increasing) and come out, with their acceleration, as soon as
    their window is complete; :meth:`finish` flushes the end. Messages of a segment too short for the
    window come out as rejected (``short_segment``), and with the ``forward`` estimate the last message
    of each segment too (``segment_end``).

    Args:
        method: ``"central"`` or ``"forward"``.
        half_window: ``h`` of the central estimate.
        gap_ns: A step longer than this [ns] ends a segment.
        scale_ns: Typical step [ns] (the median), the unit of the fit's time offsets.
        max_gaps: Gaps kept in :attr:`gaps` (all are counted in :attr:`gap_count`).

    Every payload is a dict of arrays whose first dimension is the message; it must hold ``"stamp_ns"``
    (int64) and ``"velocity"`` ([k, d]).
    """

    def __init__(self, method: str, half_window: int, gap_ns: float, scale_ns: float, max_gaps: int = 1000) -> None:
        if method not in ACCELERATION_METHODS:
            raise ValueError(f"unknown acceleration estimate {method!r}")
        self.method = method
        self.half = half_window if method == "central" else 0
        self.width = 2 * half_window + 1 if method == "central" else 2
        self.lookahead = half_window if method == "central" else 1
        self.gap_ns = gap_ns
        self.scale_ns = scale_ns
        self.max_gaps = max_gaps
        self.gaps: List[Gap] = []
        self.gap_count = 0
        self.segments = 0
        self._buffer: Optional[Payload] = None  # the open segment's messages not yet out
        self._context: Optional[Payload] = None  # its last messages already out, that windows still use
        self._done = 0  # messages of the open segment already out
        self._last: Optional[int] = None

    # -------------------------------------------------------------------------------------- interface
    def push(self, payload: Payload) -> Tuple[Payload, np.ndarray, Dict[str, Payload]]:
        """Add messages; returns ``(messages out, their accelerations [m, d], rejected by reason)``."""
        out: List[Tuple[Payload, np.ndarray]] = []
        rejected: Dict[str, List[Payload]] = {}
        stamps = payload["stamp_ns"]
        if stamps.size == 0:
            return self._collect(out, rejected, payload)
        previous = np.concatenate(([self._last if self._last is not None else stamps[0]], stamps[:-1]))
        cuts = np.flatnonzero(stamps - previous > self.gap_ns)
        self._last = int(stamps[-1])
        edges = np.concatenate(([0], cuts, [stamps.size]))
        for piece, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
            if piece > 0:
                self._gap(int(previous[a]), int(stamps[a]))
                self._close(out, rejected)
            if a < b:
                self._append(_slice(payload, slice(a, b)))
        self._release(out)
        return self._collect(out, rejected, payload)

    def finish(self) -> Tuple[Payload, np.ndarray, Dict[str, Payload]]:
        """Flush the open segment at the end of the recording."""
        out: List[Tuple[Payload, np.ndarray]] = []
        rejected: Dict[str, List[Payload]] = {}
        template = self._buffer
        self._close(out, rejected)
        return self._collect(out, rejected, template)

    # -------------------------------------------------------------------------------------- internals
    def _gap(self, after_ns: int, before_ns: int) -> None:
        self.gap_count += 1
        if len(self.gaps) < self.max_gaps:
            self.gaps.append(Gap(after_ns, before_ns))

    def _append(self, part: Payload) -> None:
        if self._buffer is None:
            self.segments += self._done == 0
            self._buffer = part
        else:
            self._buffer = _join([self._buffer, part])

    def _length(self) -> int:
        return self._done + (self._buffer["stamp_ns"].size if self._buffer is not None else 0)

    def _release(self, out: List[Tuple[Payload, np.ndarray]]) -> None:
        """Let out the open segment's messages whose window can no longer change."""
        if self._buffer is None or self._length() < self.width:
            return
        ready = self._buffer["stamp_ns"].size - self.lookahead
        if ready > 0:
            self._emit(out, ready, closed_length=None)

    def _close(self, out: List[Tuple[Payload, np.ndarray]], rejected: Dict[str, List[Payload]]) -> None:
        """End the open segment: let out all its messages (or reject them when it is too short)."""
        buffer = self._buffer
        if buffer is not None:
            if self._length() < self.width:
                rejected.setdefault("short_segment", []).append(buffer)
            else:
                count = buffer["stamp_ns"].size
                if self.method == "forward":
                    rejected.setdefault("segment_end", []).append(_slice(buffer, slice(count - 1, count)))
                    count -= 1
                if count > 0:
                    self._emit(out, count, closed_length=self._length())
        self._buffer = None
        self._context = None
        self._done = 0

    def _emit(self, out: List[Tuple[Payload, np.ndarray]], count: int, closed_length: Optional[int]) -> None:
        buffer = self._buffer
        assert buffer is not None
        if self.method == "forward":
            t = buffer["stamp_ns"]
            v = buffer["velocity"]
            steps = (t[1 : count + 1] - t[:count]) * 1e-9
            acceleration = (v[1 : count + 1] - v[:count]) / steps[:, None]
        else:
            context = self._context if self._context is not None else _slice(buffer, slice(0, 0))
            c = context["stamp_ns"].size
            stamps = np.concatenate([context["stamp_ns"], buffer["stamp_ns"]])
            velocity = np.concatenate([context["velocity"], buffer["velocity"]])
            first = self._done - c  # segment position of stamps[0]
            position = self._done + np.arange(count)
            upper = (closed_length - self.width) if closed_length is not None else np.iinfo(np.int64).max
            start = np.clip(position - self.half, 0, upper) - first
            acceleration = _window_slopes(stamps, velocity, c + np.arange(count), start, self.width, self.scale_ns)
        emitted = _slice(buffer, slice(0, count))
        out.append((emitted, acceleration))
        self._done += count
        if self.half:
            # A window near the end of a segment slides back over up to 2 h messages already out.
            keep = _join([self._context, emitted]) if self._context is not None else emitted
            self._context = _slice(keep, slice(max(0, keep["stamp_ns"].size - 2 * self.half), None))
        rest = buffer["stamp_ns"].size - count
        self._buffer = _slice(buffer, slice(count, None)) if rest else None

    @staticmethod
    def _collect(out: List[Tuple[Payload, np.ndarray]], rejected: Dict[str, List[Payload]],
                 template: Optional[Payload]) -> Tuple[Payload, np.ndarray, Dict[str, Payload]]:
        if out:
            payload = _join([p for p, _ in out])
            acceleration = np.concatenate([a for _, a in out])
        else:
            base = template if template is not None else {"stamp_ns": np.zeros(0, dtype=np.int64), "velocity": np.zeros((0, 0))}
            payload = _slice(base, slice(0, 0))
            acceleration = np.zeros((0,) + base["velocity"].shape[1:])
        return payload, acceleration, {reason: _join(parts) for reason, parts in rejected.items()}


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


class BaseStateJoiner:
    """Pairs joint states with the odometry around their stamps while both topics are read together.

    A joint state waits until odometry stamped ``max_gap_ns`` after it has arrived (or the recording
    ended), so that its interpolation uses the same neighbours as if all odometry were at hand. Odometry
    older than any state still to come can no longer be a neighbour and is dropped. When the odometry
    stops (or lags more than ``max_waiting`` joint states behind), the waiting states go out with what
    odometry there is, so memory stays bounded.

    Args:
        max_gap_ns: Odometry messages further apart than this [ns] give no base state.
        max_waiting: Most joint states held back.
    """

    def __init__(self, max_gap_ns: float, max_waiting: int = 10_000) -> None:
        self.max_gap_ns = max_gap_ns
        self.max_waiting = max_waiting
        self.odometry = OdometrySeries.empty()
        self._waiting: Optional[Payload] = None
        self._floor: Optional[int] = None  # no state to come is stamped before this

    def add_odometry(self, odometry: OdometrySeries) -> None:
        if len(odometry):
            self.odometry = self.odometry.append(odometry).sorted()
            self._prune()

    def _prune(self) -> None:
        if self._floor is not None and len(self.odometry) and self.odometry.stamp_ns[0] < self._floor - self.max_gap_ns:
            # Keep the last message before the floor too: it may be a lower neighbour within max_gap.
            keep_from = max(0, int(np.searchsorted(self.odometry.stamp_ns, self._floor - self.max_gap_ns, side="left")) - 1)
            self.odometry = self.odometry.after(int(self.odometry.stamp_ns[keep_from]))

    def push(self, payload: Payload, final: bool = False) -> Tuple[Payload, np.ndarray, np.ndarray, np.ndarray]:
        """Add states (``payload["stamp_ns"]`` increasing); returns those ready with ``(q_base, v_base, valid)``."""
        waiting = payload if self._waiting is None else _join([self._waiting, payload])
        stamps = waiting["stamp_ns"]
        horizon = int(self.odometry.stamp_ns.max()) if len(self.odometry) else None
        if final:
            count = stamps.size
        else:
            count = int(np.searchsorted(stamps, horizon - self.max_gap_ns, side="right")) if horizon is not None else 0
            count = max(count, stamps.size - self.max_waiting)
        ready = _slice(waiting, slice(0, count))
        self._waiting = _slice(waiting, slice(count, None)) if count < stamps.size else None
        q_base, v_base, valid = interpolate_odometry(self.odometry, ready["stamp_ns"], self.max_gap_ns)
        if stamps.size:
            self._floor = int(stamps[count]) if count < stamps.size else int(stamps[-1])
            self._prune()
        return ready, q_base, v_base, valid
