"""Run the dynamics pipeline over a recorded trajectory and measure how well the model explains it.

At every usable joint_states message, with the state ``x = (q, v)`` and the recorded effort ``tau``:

- the discrete linearization ``A, B, x+`` (semi-implicit Euler, step ``dt``),
- the inverse joint-space inertia ``M^-1`` and the condition number of ``M``,
- the gravity and Coriolis torques ``RNEA(q, v, 0)``, as the dynamics node publishes them,
- the inverse dynamics ``RNEA(q, v, a)`` with ``a`` estimated from the recorded velocities
  (:mod:`rbd_deriv.replay.signals`), and the residual ``RNEA(q, v, a) - tau`` on the joints that
  report an effort.

Everything is computed with the batched API, chunk by chunk, so that the time per chunk gives a
per-message compute time distribution along the recording. A sample of messages is also computed one
call at a time, the way the dynamics node does it, to give the per-message latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import velocity_names
from rbd_deriv.replay.series import JointStateSeries, OdometrySeries
from rbd_deriv.replay.signals import (
    Segments,
    drop_unordered_stamps,
    estimate_acceleration,
    interpolate_odometry,
    split_segments,
)

__all__ = ["EvaluationConfig", "Evaluation", "evaluate", "residual_statistics", "percentiles"]


@dataclass
class EvaluationConfig:
    """Settings of an evaluation.

    Attributes:
        dt: Linearization step [s]; None takes the median time between messages.
        half_window: Acceleration fit half-width ``h`` (window of ``2 h + 1`` messages); 1 is the central
            difference.
        gap_factor: A time step larger than this many median steps is a gap.
        stamps: ``"header"``, ``"bag"`` (receive time) or ``"auto"`` (header unless all are zero).
        chunk: Messages per batched call; one compute-time sample per chunk.
        latency_samples: Messages also computed one call at a time to measure the per-message latency.
        odometry_max_gap: Largest odometry spacing [s] across which the base state is interpolated.
    """

    dt: Optional[float] = None
    half_window: int = 1
    gap_factor: float = 5.0
    stamps: str = "auto"
    chunk: int = 1024
    latency_samples: int = 1000
    odometry_max_gap: float = 0.1

    def validate(self) -> None:
        if self.dt is not None and not (np.isfinite(self.dt) and self.dt > 0):
            raise InputError(f"dt must be a positive number of seconds, got {self.dt}", "dt")
        if self.half_window < 1:
            raise InputError(f"half_window must be >= 1, got {self.half_window}", "half_window")
        if not self.gap_factor > 1:
            raise InputError(f"gap_factor must be > 1, got {self.gap_factor}", "gap_factor")
        if self.stamps not in ("header", "bag", "auto"):
            raise InputError(f"stamps must be header, bag or auto, got {self.stamps!r}", "stamps")
        if self.chunk < 1 or self.latency_samples < 0:
            raise InputError("chunk must be >= 1 and latency_samples >= 0", "chunk")


@dataclass
class Evaluation:
    """Everything computed over a recording; row ``i`` of each array is message ``rows[i]``.

    Attributes:
        series: The recorded joint states (with the status of every message).
        rows: Indices of the evaluated messages [n].
        stamp_ns: Their stamps [n] in [ns] (the time base chosen by ``config.stamps``).
        stamp_source: ``"header"`` or ``"bag"``.
        segments: Gap-free runs over ``rows``.
        dt: Linearization step [s].
        q, v: States [n, nq], [n, nv].
        acceleration: Estimated accelerations [n, nv] in [rad/s^2] or [m/s^2].
        tau: Input of the linearization [n, nv]: the recorded effort, the inverse-dynamics torque where
            none was recorded, zero on a floating base.
        effort_mask: [n, nv] True where a recorded effort is compared with the model.
        tau_model: ``RNEA(q, v, a)`` [n, nv] in [N m] or [N].
        tau_bias: ``RNEA(q, v, 0)`` [n, nv].
        a_matrix, b_matrix, x_next: Linearization [n, 2nv, 2nv], [n, 2nv, nv], [n, nq + nv].
        minv: ``M^-1`` [n, nv, nv].
        condition: 2-norm condition number of ``M`` [n].
        chunk_rows: First row of each chunk [c]; chunk_us: batched compute time per message per chunk [c]
            in [us].
        latency_rows: Rows computed one call at a time [s]; latency_us: their compute time [us].
        wall_s: Wall time of each stage [s].
    """

    series: JointStateSeries
    rows: np.ndarray
    stamp_ns: np.ndarray
    stamp_source: str
    segments: Segments
    dt: float
    q: np.ndarray
    v: np.ndarray
    acceleration: np.ndarray
    tau: np.ndarray
    effort_mask: np.ndarray
    tau_model: np.ndarray
    tau_bias: np.ndarray
    a_matrix: np.ndarray
    b_matrix: np.ndarray
    x_next: np.ndarray
    minv: np.ndarray
    condition: np.ndarray
    chunk_rows: np.ndarray
    chunk_us: np.ndarray
    latency_rows: np.ndarray
    latency_us: np.ndarray
    velocity_names: List[str]
    wall_s: Dict[str, float] = field(default_factory=dict)

    @property
    def residual(self) -> np.ndarray:
        """``RNEA(q, v, a) - tau_recorded`` [n, nv]; NaN where no effort was recorded."""
        return np.where(self.effort_mask, self.tau_model - self.tau, np.nan)


def _choose_stamps(series: JointStateSeries, source: str) -> tuple:
    usable = series.rejections.usable
    if source == "bag" or (source == "auto" and not np.any(series.stamp_ns[usable] != 0)):
        return series.bag_ns, "bag"
    return series.stamp_ns, "header"


def _slots(model: "rd.Model", names: List[str]) -> tuple:
    q_slots = np.array([model.idx_q[name] for name in names], dtype=np.int64)
    v_slots = np.array([model.idx_v[name] for name in names], dtype=np.int64)
    for name in names:
        if model.nq_joint[name] != 1 or model.nv_joint[name] != 1:
            raise InputError(f"joint {name} has several coordinates; joint_states cannot describe it", "joint_states")
    return q_slots, v_slots


def actuated_joint_names(model: "rd.Model") -> List[str]:
    """Joints that joint_states reports: every movable joint but a floating base."""
    return list(model.actuated_joint_names)


def evaluate(
    model: "rd.Model",
    series: JointStateSeries,
    odometry: Optional[OdometrySeries] = None,
    config: Optional[EvaluationConfig] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Evaluation:
    """Evaluate the model over a recording.

    The messages set aside here (repeated or backward stamps, no base state, too short between gaps) are
    marked in ``series.rejections``, next to those the reader set aside.

    Args:
        model: The robot; a floating-base model needs ``odometry``.
        series: joint_states read with :func:`rbd_deriv.replay.bagio.read_joint_states` for
            :func:`actuated_joint_names` of ``model``.
        odometry: Base pose and twist for a floating-base model.
        config: Settings; defaults when None.
        progress: Called as ``progress(done, total)`` in messages while computing.

    Raises:
        InputError: Bad settings, a floating base without odometry, or no usable message left.
    """
    config = config or EvaluationConfig()
    config.validate()
    wall: Dict[str, float] = {}
    start = time.perf_counter()
    if model.has_floating_base and odometry is None:
        raise InputError("the model has a floating base: give the odometry topic of the base", "odometry")
    joints = actuated_joint_names(model)
    if list(series.joint_names) != joints:
        raise InputError("series columns must be the model's joints in model order", "series")
    q_slots, v_slots = _slots(model, joints)
    rejections = series.rejections
    stamp_ns, stamp_source = _choose_stamps(series, config.stamps)
    drop_unordered_stamps(stamp_ns, rejections)

    base_q = base_v = None
    if model.has_floating_base:
        candidates = np.flatnonzero(rejections.usable)
        q_b, v_b, ok = interpolate_odometry(odometry, stamp_ns[candidates], config.odometry_max_gap * 1e9)
        rejections.reject(
            candidates[~ok],
            "bad_base",
            f"no valid odometry within {config.odometry_max_gap} s around message "
            f"{candidates[~ok][0] if (~ok).any() else -1}",
        )
        base_q = np.zeros((len(series), 7))
        base_v = np.zeros((len(series), 6))
        base_q[candidates[ok]] = q_b[ok]
        base_v[candidates[ok]] = v_b[ok]

    window = 2 * config.half_window + 1
    rows, segments = split_segments(stamp_ns, rejections, config.gap_factor, window)
    if rows.size == 0:
        raise InputError(f"no usable joint_states message left; rejected: {rejections.counts()}", "joint_states")

    n = rows.size
    q = np.zeros((n, model.nq))
    v = np.zeros((n, model.nv))
    q[:, q_slots] = series.position[rows]
    v[:, v_slots] = series.velocity[rows]
    if model.has_floating_base:
        base_q_slot = model.idx_q[rd.FREE_FLYER_JOINT]
        base_v_slot = model.idx_v[rd.FREE_FLYER_JOINT]
        q[:, base_q_slot : base_q_slot + 7] = base_q[rows]
        v[:, base_v_slot : base_v_slot + 6] = base_v[rows]
    acceleration = estimate_acceleration(stamp_ns[rows], v, segments, config.half_window)
    effort = np.full((n, model.nv), np.nan)
    effort[:, v_slots] = series.effort[rows]
    effort_mask = np.isfinite(effort)
    steps = np.diff(stamp_ns[rows])
    dt = config.dt if config.dt is not None else float(np.median(steps) * 1e-9) if steps.size else 1e-3
    wall["prepare"] = time.perf_counter() - start

    outputs = _compute(model, q, v, acceleration, effort, dt, config.chunk, progress)
    wall["compute"] = outputs.pop("wall")

    start = time.perf_counter()
    eigenvalues = np.linalg.eigvalsh(outputs["minv"])
    condition = eigenvalues[:, -1] / eigenvalues[:, 0]
    wall["condition"] = time.perf_counter() - start

    start = time.perf_counter()
    latency_rows, latency_us = _single_call_latency(model, q, v, acceleration, outputs["tau"], dt, config.latency_samples)
    wall["latency_sample"] = time.perf_counter() - start

    return Evaluation(
        series=series,
        rows=rows,
        stamp_ns=stamp_ns[rows],
        stamp_source=stamp_source,
        segments=segments,
        dt=dt,
        q=q,
        v=v,
        acceleration=acceleration,
        effort_mask=effort_mask,
        condition=condition,
        latency_rows=latency_rows,
        latency_us=latency_us,
        velocity_names=velocity_names(model),
        wall_s=wall,
        **outputs,
    )


def _compute(
    model: "rd.Model",
    q: np.ndarray,
    v: np.ndarray,
    acceleration: np.ndarray,
    effort: np.ndarray,
    dt: float,
    chunk: int,
    progress: Optional[Callable[[int, int], None]],
) -> Dict[str, np.ndarray]:
    n, nv = v.shape
    out = {
        "tau": np.empty((n, nv)),
        "tau_model": np.empty((n, nv)),
        "tau_bias": np.empty((n, nv)),
        "a_matrix": np.empty((n, 2 * nv, 2 * nv)),
        "b_matrix": np.empty((n, 2 * nv, nv)),
        "x_next": np.empty((n, model.nq + nv)),
        "minv": np.empty((n, nv, nv)),
    }
    zero = np.zeros((min(chunk, n), nv))
    unactuated = slice(model.idx_v[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT] + 6) if model.has_floating_base else slice(0, 0)
    starts = np.arange(0, n, chunk)
    chunk_us = np.empty(starts.size)
    wall = 0.0
    for k, first in enumerate(starts):
        part = slice(first, min(first + chunk, n))
        size = part.stop - part.start
        q_c, v_c, a_c = q[part], v[part], acceleration[part]
        tic = time.perf_counter()
        tau_model = rd.rnea_batch(model, q_c, v_c, a_c)
        tau_bias = rd.rnea_batch(model, q_c, v_c, zero[:size])
        # Linearize at the recorded effort; where none was recorded, at the torque that explains the motion;
        # an unactuated floating base gets no input.
        tau = np.where(np.isfinite(effort[part]), effort[part], tau_model)
        tau[:, unactuated] = 0.0
        a_mat, b_mat, x_next = rd.linearize_batch(model, q_c, v_c, tau, dt)
        # v+ = v + dt M^-1 (tau - h) makes the velocity rows of B exactly dt M^-1: no second pass needed.
        minv = b_mat[:, nv:, :] / dt
        toc = time.perf_counter()
        chunk_us[k] = 1e6 * (toc - tic) / size
        wall += toc - tic
        out["tau"][part] = tau
        out["tau_model"][part] = tau_model
        out["tau_bias"][part] = tau_bias
        out["a_matrix"][part] = a_mat
        out["b_matrix"][part] = b_mat
        out["x_next"][part] = x_next
        out["minv"][part] = minv
        if progress is not None:
            progress(part.stop, n)
    out["chunk_rows"] = starts
    out["chunk_us"] = chunk_us
    out["wall"] = wall
    return out


def _single_call_latency(
    model: "rd.Model",
    q: np.ndarray,
    v: np.ndarray,
    acceleration: np.ndarray,
    tau: np.ndarray,
    dt: float,
    samples: int,
) -> tuple:
    """Compute time [us] of the per-message work done one call at a time, at evenly spread messages."""
    n = q.shape[0]
    if samples == 0 or n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    picks = np.unique(np.linspace(0, n - 1, min(samples, n)).astype(np.int64))
    data = model.create_data()
    zero = np.zeros(model.nv)
    elapsed = np.empty(picks.size)
    clock = time.perf_counter_ns
    for k, i in enumerate(picks):
        tic = clock()
        rd.rnea(model, data, q[i], v[i], acceleration[i])
        rd.rnea(model, data, q[i], v[i], zero)
        rd.linearize(model, data, q[i], v[i], tau[i], dt)
        rd.minverse(model, data, q[i])
        elapsed[k] = (clock() - tic) * 1e-3
    return picks, elapsed


def percentiles(values: np.ndarray) -> Dict[str, float]:
    """p50, p90, p99, max and mean of ``values`` (NaN when empty)."""
    if values.size == 0:
        return {key: float("nan") for key in ("p50", "p90", "p99", "max", "mean")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(values.max()), "mean": float(values.mean())}


def residual_statistics(evaluation: Evaluation) -> Dict[str, Dict[str, float]]:
    """Per joint with recorded efforts: residual RMS, mean, max, effort RMS, and the share of effort explained.

    ``explained = 1 - sum(r^2) / sum(tau^2)`` is the share of the recorded effort's energy that the model
    accounts for (1 is perfect, 0 is no better than predicting zero torque); ``r2 = 1 - sum(r^2) /
    sum((tau - mean tau)^2)`` is the usual coefficient of determination. Rows use [N m] or [N].
    """
    stats: Dict[str, Dict[str, float]] = {}
    residual = evaluation.residual
    for column, name in enumerate(evaluation.velocity_names):
        mask = evaluation.effort_mask[:, column]
        if not mask.any():
            continue
        r = residual[mask, column]
        tau = evaluation.tau[mask, column]
        energy = float(np.sum(tau**2))
        spread = float(np.sum((tau - tau.mean()) ** 2))
        stats[name] = {
            "samples": int(mask.sum()),
            "residual_rms": float(np.sqrt(np.mean(r**2))),
            "residual_mean": float(r.mean()),
            "residual_std": float(r.std()),
            "residual_max_abs": float(np.abs(r).max()),
            "effort_rms": float(np.sqrt(np.mean(tau**2))),
            "explained": 1.0 - float(np.sum(r**2)) / energy if energy > 0 else float("nan"),
            "r2": 1.0 - float(np.sum(r**2)) / spread if spread > 0 else float("nan"),
        }
    return stats
