"""Run the dynamics pipeline over a recorded trajectory and measure how well the model explains it.

At every usable joint_states message, with the state ``x = (q, v)`` and the recorded effort ``tau``:

- the discrete linearization ``A, B, x+`` (semi-implicit Euler, step ``dt``),
- the inverse joint-space inertia ``M^-1`` and the condition number of ``M``,
- the gravity and Coriolis torques ``RNEA(q, v, 0)``, as the dynamics node publishes them,
- the inverse dynamics ``RNEA(q, v, a)`` with ``a`` estimated from the recorded velocities
  (:mod:`rbd_deriv.replay.signals`), and the residual ``RNEA(q, v, a) - tau`` on the joints that
  report an effort.

The recording is read twice, batch by batch, and never held in memory:

1. :func:`survey` decodes every message once to choose the time base and find the median step (the
   gap threshold and the default ``dt``), and fails early on joint names that do not fit the model.
2. :func:`evaluate` decodes again and computes with the batched API, chunk by chunk; each computed
   :class:`Chunk` goes to the consumers (the output bag writer) and into running statistics
   (:mod:`rbd_deriv.replay.stats`), then is dropped. A sample of messages is also computed one call at a
   time, the way the dynamics node does it, to give the per-message latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import velocity_names
from rbd_deriv.replay.bagio import JOINT_STATE_TYPE, ODOMETRY_TYPE, JointStateDecoder, OdometryDecoder, require_topic
from rbd_deriv.replay.progress import StageClock
from rbd_deriv.replay.series import Rejections
from rbd_deriv.replay.signals import ACCELERATION_METHODS, AccelerationStream, BaseStateJoiner, Gap, StampOrder, StepSample
from rbd_deriv.replay.stats import Envelope, LogHistogram, Moments
from rbd_deriv.replay.storage import BagError, BagSource, Damage, RawBatch

__all__ = [
    "EvaluationConfig",
    "Survey",
    "Chunk",
    "Evaluation",
    "survey",
    "evaluate",
    "actuated_joint_names",
    "residual_statistics",
]


@dataclass
class EvaluationConfig:
    """Settings of an evaluation.

    Attributes:
        dt: Linearization step [s]; None takes the median time between messages.
        acceleration: ``"central"`` (quadratic fit over ``2 h + 1`` messages) or ``"forward"``
            (``(v[i+1] - v[i]) / dt``, exact for data from a semi-implicit Euler integrator).
        half_window: Half-width ``h`` of the central fit; 1 is the central difference.
        gap_factor: A time step larger than this many median steps is a gap.
        stamps: ``"header"``, ``"bag"`` (receive time) or ``"auto"`` (header unless all are zero).
        chunk: Messages per batched call; one compute-time sample per chunk.
        latency_samples: Messages also computed one call at a time to measure the per-message latency.
        odometry_max_gap: Largest odometry spacing [s] across which the base state is interpolated.
    """

    dt: Optional[float] = None
    acceleration: str = "central"
    half_window: int = 1
    gap_factor: float = 5.0
    stamps: str = "auto"
    chunk: int = 1024
    latency_samples: int = 1000
    odometry_max_gap: float = 0.1

    def validate(self) -> None:
        if self.dt is not None and not (np.isfinite(self.dt) and self.dt > 0):
            raise InputError(f"dt must be a positive number of seconds, got {self.dt}", "dt")
        if self.acceleration not in ACCELERATION_METHODS:
            raise InputError(f"acceleration must be one of {ACCELERATION_METHODS}, got {self.acceleration!r}", "acceleration")
        if self.half_window < 1:
            raise InputError(f"half_window must be >= 1, got {self.half_window}", "half_window")
        if not self.gap_factor > 1:
            raise InputError(f"gap_factor must be > 1, got {self.gap_factor}", "gap_factor")
        if self.stamps not in ("header", "bag", "auto"):
            raise InputError(f"stamps must be header, bag or auto, got {self.stamps!r}", "stamps")
        if self.chunk < 1 or self.latency_samples < 0:
            raise InputError("chunk must be >= 1 and latency_samples >= 0", "chunk")


def actuated_joint_names(model: "rd.Model") -> List[str]:
    """The joints joint_states reports: every movable joint but the free flyer (model order)."""
    return list(model.actuated_joint_names)


# ------------------------------------------------------------------------------------------- pass 1


@dataclass
class Survey:
    """What the first pass over the joint states found.

    Attributes:
        messages: Messages on the topic.
        usable: Messages that decode and are in order, in the chosen time base.
        stamp_source: ``"header"`` or ``"bag"``.
        median_step_ns: Median step between those messages [ns] (NaN with fewer than two).
        median_exact: False when the median comes from a sample of the steps (more than 65,536).
        dt: Linearization step [s].
        first_stamp_ns: Stamp of the first usable message [ns], the origin of the report's time axis.
        frame_id: Header frame of the first decoded message.
    """

    messages: int
    usable: int
    stamp_source: str
    median_step_ns: float
    median_exact: bool
    dt: float
    first_stamp_ns: Optional[int]
    frame_id: str = ""


def survey(
    source: BagSource,
    typestore: Any,
    topic: str,
    joint_names: Sequence[str],
    config: EvaluationConfig,
    progress: Optional[Callable[[int], None]] = None,
) -> Survey:
    """First pass: decode every joint_states message, order them in both time bases, sample the steps.

    Raises:
        BagError: Topic absent or empty, or joint names that do not fit the model.
    """
    require_topic(source, topic, JOINT_STATE_TYPE)
    decoder = JointStateDecoder(typestore, topic, joint_names, Rejections())
    bases = ("header", "bag")
    orders = {base: StampOrder(Rejections()) for base in bases}
    samples = {base: StepSample() for base in bases}
    usable = {base: 0 for base in bases}
    first: Dict[str, Optional[int]] = {base: None for base in bases}
    any_header = False
    for raw in source.read([topic]):
        states = decoder.decode(raw)
        any_header |= bool(np.any(states.stamp_ns[states.usable] != 0))
        for base in bases:
            stamps = states.stamp_ns if base == "header" else states.bag_ns
            status = states.status.copy()
            orders[base].apply(stamps, status, states.index)
            good = stamps[status == 0]
            samples[base].add_stamps(good)
            usable[base] += good.size
            if first[base] is None and good.size:
                first[base] = int(good[0])
        if progress is not None:
            progress(decoder.count)
    if decoder.count == 0:
        raise BagError(f"topic {topic!r} has no readable message", source.path, topic)
    decoder.check_names(source.path)
    base = "bag" if config.stamps == "bag" or (config.stamps == "auto" and not any_header) else "header"
    median = samples[base].median()
    dt = config.dt if config.dt is not None else (median * 1e-9 if np.isfinite(median) and median > 0 else 1e-3)
    return Survey(decoder.count, usable[base], base, median, samples[base].exact, float(dt), first[base],
                  decoder.frame_id or "")


# ------------------------------------------------------------------------------------------- pass 2


@dataclass
class Chunk:
    """The outputs at one chunk of evaluated messages; row ``i`` is message ``index[i]`` of the topic.

    Attributes:
        index: Message numbers on the topic [n].
        stamp_ns: Stamps in the evaluation's time base [n] in [ns].
        header_ns: Header stamps [n] (the bag time where the header stamp is zero).
        bag_ns: Times the recorder received the messages [n] in [ns].
        q, v: States [n, nq], [n, nv].
        acceleration: Estimated accelerations [n, nv].
        tau: Input of the linearization [n, nv]: the recorded effort, the inverse-dynamics torque where
            none was recorded, zero on a floating base.
        effort_mask: [n, nv] True where a recorded effort is compared with the model.
        tau_model: ``RNEA(q, v, a)`` [n, nv] in [N m] or [N].
        tau_bias: ``RNEA(q, v, 0)`` [n, nv].
        a_matrix, b_matrix, x_next: Linearization [n, 2nv, 2nv], [n, 2nv, nv], [n, nq + nv].
        minv: ``M^-1`` [n, nv, nv].
        condition: 2-norm condition number of ``M`` [n].
        compute_s: Wall time of the batched calls [s].
    """

    index: np.ndarray
    stamp_ns: np.ndarray
    header_ns: np.ndarray
    bag_ns: np.ndarray
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
    compute_s: float

    def __len__(self) -> int:
        return int(self.index.size)

    @property
    def residual(self) -> np.ndarray:
        """``RNEA(q, v, a) - tau_recorded`` [n, nv]; NaN where no effort was recorded."""
        return np.where(self.effort_mask, self.tau_model - self.tau, np.nan)


@dataclass
class Evaluation:
    """What an evaluation found, as running statistics (nothing per message).

    Attributes:
        survey: The first pass.
        config: The settings.
        topic: The joint_states topic.
        velocity_names: Names of the velocity coordinates (the columns of residuals and matrices).
        actuated: Columns that joint_states reports [nv] bool.
        messages: Messages on the topic; ``evaluated``: those computed.
        rejections: Why the others were set aside.
        ignored_joints: Joint names in the messages that the model does not have.
        frame_id: Header frame of the first message.
        segments: Gap-free runs; ``gaps``: the first gaps found, ``gap_count``: all of them.
        first_ns, last_ns: First and last evaluated stamps [ns].
        dt: Linearization step [s].
        batched_us: Batched compute time per message, one sample per chunk [us].
        chunk_us: The same along the recording (envelope over time [s] from the first usable stamp).
        latency_us, latency_t: Compute time of the messages computed one call at a time [us], and their
            time [s].
        residual, effort: Moments of ``RNEA(q, v, a) - effort`` and of the recorded effort per column.
        residual_magnitude: Quantiles of ``|residual|`` over all columns (the plot's scale).
        residual_curve: Envelope of the residual per column along the recording.
        condition: Quantiles of cond(M); ``condition_min``, ``condition_max`` and ``condition_max_t`` [s].
        condition_curve: Envelope of cond(M).
        damage: Damaged stretches of the bag; ``lost``: joint_states messages the bag lists but that could
            not be read (None when the bag does not say how many it holds).
        wall_s: Wall time per stage of the computation pass [s].
    """

    survey: Survey
    velocity_names: List[str]
    actuated: np.ndarray
    config: EvaluationConfig
    topic: str = ""
    messages: int = 0
    evaluated: int = 0
    rejections: Rejections = field(default_factory=Rejections)
    ignored_joints: List[str] = field(default_factory=list)
    frame_id: str = ""
    segments: int = 0
    gaps: List[Gap] = field(default_factory=list)
    gap_count: int = 0
    first_ns: Optional[int] = None
    last_ns: Optional[int] = None
    dt: float = 0.0
    batched_us: LogHistogram = field(default_factory=lambda: LogHistogram(1e-3, 1e7))
    chunk_us: Envelope = field(default_factory=lambda: Envelope(1))
    latency_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    latency_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    residual: Optional[Moments] = None
    effort: Optional[Moments] = None
    residual_magnitude: LogHistogram = field(default_factory=lambda: LogHistogram(1e-16, 1e9, 100))
    residual_curve: Optional[Envelope] = None
    condition: LogHistogram = field(default_factory=lambda: LogHistogram(1.0, 1e20))
    condition_min: float = float("inf")
    condition_max: float = float("-inf")
    condition_max_t: float = float("nan")
    condition_curve: Envelope = field(default_factory=lambda: Envelope(1))
    damage: List[Damage] = field(default_factory=list)
    lost: Optional[int] = None
    wall_s: Dict[str, float] = field(default_factory=dict)

    def seconds(self, stamp_ns: np.ndarray) -> np.ndarray:
        """Stamps [ns] as seconds from the first usable message."""
        origin = self.survey.first_stamp_ns or 0
        return (np.asarray(stamp_ns, dtype=np.int64) - origin) * 1e-9

    def add(self, chunk: Chunk) -> None:
        """Fold one computed chunk into the statistics."""
        n = len(chunk)
        if n == 0:
            return
        t = self.seconds(chunk.stamp_ns)
        self.evaluated += n
        self.first_ns = int(chunk.stamp_ns[0]) if self.first_ns is None else self.first_ns
        self.last_ns = int(chunk.stamp_ns[-1])
        per_message = 1e6 * chunk.compute_s / n
        self.batched_us.add(np.array([per_message]))
        self.chunk_us.add(np.array([[per_message]]), t[:1])
        residual = chunk.residual
        recorded = np.where(chunk.effort_mask, chunk.tau, np.nan)
        self.residual.add(residual, t)
        self.effort.add(recorded, t)
        self.residual_magnitude.add(np.abs(residual[chunk.effort_mask]))
        self.residual_curve.add(residual, t)
        condition = chunk.condition
        self.condition.add(condition)
        self.condition_curve.add(condition[:, None], t)
        worst = int(np.argmax(condition))
        if condition[worst] > self.condition_max:
            self.condition_max, self.condition_max_t = float(condition[worst]), float(t[worst])
        self.condition_min = min(self.condition_min, float(condition.min()))


class _Calculator:
    """The per-chunk computation, batched, plus the one-call-at-a-time latency sample."""

    def __init__(self, model: "rd.Model", dt: float, latency_stride: int, latency_samples: int) -> None:
        self.model = model
        self.dt = dt
        nv = model.nv
        self.unactuated = slice(model.idx_v[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT] + 6) \
            if model.has_floating_base else slice(0, 0)
        self.data = model.create_data()
        self.zero_v = np.zeros(nv)
        self.stride = max(1, latency_stride)
        self.samples = latency_samples
        self.done = 0
        self.latency_us: List[float] = []
        self.latency_t: List[float] = []

    def compute(self, payload: Dict[str, np.ndarray], acceleration: np.ndarray, t_s: np.ndarray, clock: StageClock) -> Chunk:
        model, dt = self.model, self.dt
        q, v, effort = payload["q"], payload["velocity"], payload["effort"]
        n, nv = v.shape
        tic = time.perf_counter()
        tau_model = rd.rnea_batch(model, q, v, acceleration)
        tau_bias = rd.rnea_batch(model, q, v, np.zeros((n, nv)))
        # Linearize at the recorded effort; where none was recorded, at the torque that explains the motion;
        # an unactuated floating base gets no input.
        tau = np.where(np.isfinite(effort), effort, tau_model)
        tau[:, self.unactuated] = 0.0
        a_matrix, b_matrix, x_next = rd.linearize_batch(model, q, v, tau, dt)
        # v+ = v + dt M^-1 (tau - h) makes the velocity rows of B exactly dt M^-1: no second pass needed.
        minv = b_matrix[:, nv:, :] / dt
        compute_s = time.perf_counter() - tic
        clock.add("compute", compute_s)
        with clock.stage("condition"):
            eigenvalues = np.linalg.eigvalsh(minv)
            condition = eigenvalues[:, -1] / eigenvalues[:, 0]
        with clock.stage("latency_sample"):
            self._sample(q, v, acceleration, tau, t_s)
        return Chunk(payload["index"], payload["stamp_ns"], payload["header_ns"], payload["bag_ns"], q, v, acceleration,
                     tau, np.isfinite(effort), tau_model, tau_bias, a_matrix, b_matrix, x_next, minv, condition, compute_s)

    def _sample(self, q: np.ndarray, v: np.ndarray, acceleration: np.ndarray, tau: np.ndarray, t_s: np.ndarray) -> None:
        """Time, at every ``stride``-th message, the work the dynamics node does per message."""
        n = q.shape[0]
        ordinals = self.done + np.arange(n)
        self.done += n
        picks = np.flatnonzero(ordinals % self.stride == 0)[: max(0, self.samples - len(self.latency_us))]
        model, data, dt, zero = self.model, self.data, self.dt, self.zero_v
        clock = time.perf_counter_ns
        for i in picks:
            tic = clock()
            rd.rnea(model, data, q[i], v[i], acceleration[i])
            rd.rnea(model, data, q[i], v[i], zero)
            rd.linearize(model, data, q[i], v[i], tau[i], dt)
            rd.minverse(model, data, q[i])
            self.latency_us.append((clock() - tic) * 1e-3)
            self.latency_t.append(float(t_s[i]))


class _SecondPass:
    """The per-batch stages of :func:`evaluate`, with what they carry from one batch to the next."""

    def __init__(self, model: "rd.Model", topic: str, typestore: Any, config: EvaluationConfig, first_pass: Survey,
                 result: Evaluation, consumers: Sequence[Callable[[Chunk], None]], clock: StageClock) -> None:
        self.model = model
        self.config = config
        self.result = result
        self.consumers = consumers
        self.clock = clock
        joints = actuated_joint_names(model)
        self.q_slots = np.array([model.idx_q[name] for name in joints], dtype=np.int64)
        self.v_slots = np.array([model.idx_v[name] for name in joints], dtype=np.int64)
        self.rejections = Rejections()
        self.decoder = JointStateDecoder(typestore, topic, joints, self.rejections)
        self.odometry = OdometryDecoder(typestore)
        self.order = StampOrder(self.rejections)
        self.use_header = first_pass.stamp_source == "header"
        median = first_pass.median_step_ns if np.isfinite(first_pass.median_step_ns) else 1e6
        self.stream = AccelerationStream(config.acceleration, config.half_window, config.gap_factor * median, median)
        self.joiner = BaseStateJoiner(config.odometry_max_gap * 1e9) if model.has_floating_base else None
        if self.joiner is not None:
            self.base_q = slice(model.idx_q[rd.FREE_FLYER_JOINT], model.idx_q[rd.FREE_FLYER_JOINT] + 7)
            self.base_v = slice(model.idx_v[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT] + 6)
        stride = first_pass.usable // config.latency_samples if config.latency_samples else 1
        self.calculator = _Calculator(model, first_pass.dt, stride, config.latency_samples)
        self.pending: List[Any] = []  # (payload, accelerations) estimated, not yet computed
        self.pending_count = 0

    def decode(self, raw: RawBatch) -> Dict[str, np.ndarray]:
        """The usable joint states of a batch, in the model's coordinates (odometry goes to the joiner)."""
        model = self.model
        if self.joiner is not None:
            base = raw.select(raw.topic == 1)
            if len(base):
                self.joiner.add_odometry(self.odometry.decode(base))
            raw = raw.select(raw.topic == 0)
        states = self.decoder.decode(raw)
        stamps = states.stamp_ns if self.use_header else states.bag_ns
        self.order.apply(stamps, states.status, states.index)
        rows = np.flatnonzero(states.usable)
        q = np.zeros((rows.size, model.nq))
        v = np.zeros((rows.size, model.nv))
        effort = np.full((rows.size, model.nv), np.nan)
        q[:, self.q_slots] = states.position[rows]
        v[:, self.v_slots] = states.velocity[rows]
        effort[:, self.v_slots] = states.effort[rows]
        header = np.where(states.stamp_ns[rows] != 0, states.stamp_ns[rows], states.bag_ns[rows])
        return {"index": states.index[rows], "stamp_ns": stamps[rows], "header_ns": header,
                "bag_ns": states.bag_ns[rows], "q": q, "velocity": v, "effort": effort}

    def estimate(self, payload: Dict[str, np.ndarray], final: bool = False) -> None:
        """Base state (floating base), gaps and accelerations; what is ready joins the pending chunk."""
        config = self.config
        with self.clock.stage("estimate"):
            if self.joiner is not None:
                payload, q_base, v_base, valid = self.joiner.push(payload, final)
                if (~valid).any():
                    self.rejections.add("bad_base", int((~valid).sum()),
                                        f"no valid odometry within {config.odometry_max_gap} s around message "
                                        f"{payload['index'][np.argmax(~valid)]}")
                payload = {key: value[valid] for key, value in payload.items()}
                payload["q"][:, self.base_q] = q_base[valid]
                payload["velocity"][:, self.base_v] = v_base[valid]
            parts = [self.stream.push(payload)]
            if final:
                parts.append(self.stream.finish())
            for out, acceleration, refused in parts:
                for reason, value in refused.items():
                    self.rejections.add(reason, value["index"].size, _refusal_example(reason, value, config))
                if out["stamp_ns"].size:
                    self.pending.append((out, acceleration))
                    self.pending_count += out["stamp_ns"].size
        self._flush(final)

    def _flush(self, final: bool) -> None:
        """Compute every full chunk pending (and the last, partial one at the end)."""
        chunk = self.config.chunk
        while self.pending_count >= chunk or (final and self.pending_count):
            payload = {key: np.concatenate([p[key] for p, _ in self.pending]) for key in self.pending[0][0]}
            acceleration = np.concatenate([a for _, a in self.pending])
            size = min(chunk, self.pending_count)
            self._compute({key: value[:size] for key, value in payload.items()}, acceleration[:size])
            rest = self.pending_count - size
            self.pending = [({key: value[size:] for key, value in payload.items()}, acceleration[size:])] if rest else []
            self.pending_count = rest

    def _compute(self, payload: Dict[str, np.ndarray], acceleration: np.ndarray) -> None:
        chunk = self.calculator.compute(payload, acceleration, self.result.seconds(payload["stamp_ns"]), self.clock)
        with self.clock.stage("statistics"):
            self.result.add(chunk)
        with self.clock.stage("write"):
            for consumer in self.consumers:
                consumer(chunk)


def evaluate(
    model: "rd.Model",
    source: BagSource,
    typestore: Any,
    topic: str,
    config: EvaluationConfig,
    first_pass: Survey,
    odometry_topic: Optional[str] = None,
    consumers: Sequence[Callable[[Chunk], None]] = (),
    progress: Optional[Callable[[int], None]] = None,
    clock: Optional[StageClock] = None,
) -> Evaluation:
    """Second pass: evaluate the model at every usable message, chunk by chunk.

    Args:
        model: The robot; a floating-base model needs ``odometry_topic``.
        source: The bag.
        typestore: From :func:`rbd_deriv.replay.bagio.package_typestore`.
        topic: The joint_states topic.
        config: Settings (validated).
        first_pass: From :func:`survey` with the same settings.
        odometry_topic: ``nav_msgs/Odometry`` of a floating base.
        consumers: Called with each computed :class:`Chunk`, in order (e.g. the output bag writer).
        progress: Called with the number of messages read so far.
        clock: Where the stage times go (read, decode, estimate, compute, condition, statistics,
            consumers under ``write``).

    Raises:
        InputError: A floating base without odometry, a joint with several coordinates, or no message left
            to evaluate.
        BagError: The topics are absent.
    """
    config.validate()
    clock = clock if clock is not None else StageClock()
    if model.has_floating_base and odometry_topic is None:
        raise InputError("the model has a floating base: give the odometry topic of the base", "odometry")
    for name in actuated_joint_names(model):
        if model.nq_joint[name] != 1 or model.nv_joint[name] != 1:
            raise InputError(f"joint {name} has several coordinates; joint_states cannot describe it", "joint_states")
    topics = [topic]
    if model.has_floating_base:
        require_topic(source, odometry_topic, ODOMETRY_TYPE)
        topics.append(odometry_topic)
    result = Evaluation(first_pass, velocity_names(model), np.zeros(model.nv, dtype=bool), config, topic=topic,
                        dt=first_pass.dt, residual=Moments(model.nv), effort=Moments(model.nv),
                        residual_curve=Envelope(model.nv))
    stages = _SecondPass(model, topic, typestore, config, first_pass, result, consumers, clock)
    result.actuated[stages.v_slots] = True

    reading = source.read(topics)
    while True:
        with clock.stage("read"):
            raw = next(reading, None)
        if raw is None:
            break
        with clock.stage("decode"):
            payload = stages.decode(raw)
        if payload["index"].size or stages.joiner is not None:
            stages.estimate(payload)
        if progress is not None:
            progress(stages.decoder.count)
    stages.estimate(_empty_payload(model), final=True)

    decoder = stages.decoder
    result.messages = decoder.count
    result.rejections = stages.rejections
    result.ignored_joints = sorted(decoder.ignored)
    result.frame_id = decoder.frame_id or ""
    result.segments = stages.stream.segments
    result.gaps, result.gap_count = stages.stream.gaps, stages.stream.gap_count
    result.latency_us = np.array(stages.calculator.latency_us)
    result.latency_t = np.array(stages.calculator.latency_t)
    result.damage = list(source.damage)
    result.lost = source.lost(topic, decoder.count)
    unknown = [event for event in result.damage if event.lost is None and event.lost_rows is None]
    if result.lost is not None and len(unknown) == 1:
        # One stretch whose loss the file does not count (a cut end): the rest of what the bag lists.
        unknown[0].lost = result.lost - sum(event.lost for event in result.damage if event.lost is not None)
    if result.evaluated == 0:
        raise InputError(f"no usable joint_states message left; rejected: {stages.rejections.counts()}", "joint_states")
    result.wall_s = clock.stages
    return result


def _empty_payload(model: "rd.Model") -> Dict[str, np.ndarray]:
    empty = np.zeros(0, dtype=np.int64)
    return {"index": empty, "stamp_ns": empty, "header_ns": empty, "bag_ns": empty, "q": np.zeros((0, model.nq)),
            "velocity": np.zeros((0, model.nv)), "effort": np.zeros((0, model.nv))}


def _refusal_example(reason: str, payload: Dict[str, np.ndarray], config: EvaluationConfig) -> str:
    first, last = int(payload["index"][0]), int(payload["index"][-1])
    if reason == "segment_end":
        return f"message {first} ends a segment: the forward difference needs the next message"
    width = 2 * config.half_window + 1 if config.acceleration == "central" else 2
    return f"messages {first}..{last} lie between gaps, fewer than the {width} needed to estimate an acceleration"


def residual_statistics(evaluation: Evaluation) -> Dict[str, Dict[str, float]]:
    """Per joint with recorded efforts: residual RMS, mean, std, max, effort RMS, the share of effort explained.

    ``explained = 1 - sum(r^2) / sum(tau^2)`` is the share of the recorded effort's energy that the model
    accounts for (1 is perfect, 0 is no better than predicting zero torque); ``r2 = 1 - sum(r^2) /
    sum((tau - mean tau)^2)`` is the usual coefficient of determination. Rows use [N m] or [N].
    """
    stats: Dict[str, Dict[str, float]] = {}
    residual, effort = evaluation.residual, evaluation.effort
    if residual is None or effort is None:
        return stats
    for column, name in enumerate(evaluation.velocity_names):
        count = int(residual.count[column])
        if count == 0:
            continue
        squares = float(residual.sum_squares[column])
        energy = float(effort.sum_squares[column])
        spread = float(effort.m2[column])
        stats[name] = {
            "samples": count,
            "residual_rms": float(np.sqrt(squares / count)),
            "residual_mean": float(residual.mean[column]),
            "residual_std": float(residual.std[column]),
            "residual_max_abs": float(residual.max_abs[column]),
            "residual_max_at_s": float(residual.max_at[column]),
            "effort_rms": float(np.sqrt(energy / count)),
            "explained": 1.0 - squares / energy if energy > 0 else float("nan"),
            "r2": 1.0 - squares / spread if spread > 0 else float("nan"),
        }
    return stats
