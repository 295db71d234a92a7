"""The dynamics pipeline: a robot description and its state in, the dynamics node's outputs out (no ROS).

What :mod:`rbd_deriv.nodes.dynamics_node` computes, as a library that takes and returns arrays:

* :class:`DynamicsPipeline` turns one URDF into a model, its workspace and a
  :class:`~rbd_deriv.joint_state_map.JointStateMap`, refusing a description that does not load or cannot
  compute. :meth:`~DynamicsPipeline.outputs` gives, at a state (q, v), the bias torques RNEA(q, v, 0),
  M^-1(q) and the linearization x+ = f(x, u) with u the bias torques or the measured efforts;
  :meth:`~DynamicsPipeline.outputs_from_state` does the same at the state assembled from joint_states;
  :meth:`~DynamicsPipeline.derivatives` answers a derivatives request at any state. With a contact set
  (:meth:`~DynamicsPipeline.set_contacts`: the frames in contact with the ground), the linearization is the
  contact-constrained one and comes with the contact forces.
* :func:`contact_set` turns frame names and kinds (a parameter, a rbd_deriv/ContactSet message, a request)
  into :class:`rbd_deriv.Contact` objects.
* :func:`read_description` reads the description the parameters name; :func:`replace_robot` is the rule by
  which a new description replaces the running one.
* :func:`warm_up` runs every algorithm once before the first input (numba compilation, model check).

Every refusal raises an :class:`~rbd_deriv.exceptions.InputError` with a ``reason`` to count by:
:class:`PipelineError` here, :class:`~rbd_deriv.joint_state_map.JointStateError` for the state. Nothing
non-finite leaves the pipeline: inputs are checked for finite, physically plausible magnitudes
(:data:`~rbd_deriv.joint_state_map.PLAUSIBLE`), and every result is checked once more before it is handed
over (``non_finite_output``, with the input that caused it).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.core.contact import FORCE_ROWS
from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.joint_state_map import PLAUSIBLE, JointStateMap, describe, implausible, velocity_names

__all__ = ["CONTACT_KINDS", "DERIVATIVES", "LINEARIZATION_INPUTS", "DynamicsOutputs", "DynamicsPipeline",
           "OutputSelection", "PipelineError", "Throughput", "contact_set", "read_description", "replace_robot",
           "warm_up"]

#: What the linearization's input u can be: the bias torques RNEA(q, v, 0) (the input that keeps the
#: current velocity) or the efforts measured by the robot.
LINEARIZATION_INPUTS = ("bias", "effort")

#: What a derivatives request may ask for (the flags of rbd_deriv/srv/ComputeDerivatives).
DERIVATIVES = ("inverse_dynamics_derivatives", "forward_dynamics_derivatives", "mass_matrix",
               "mass_matrix_inverse", "linearization")

#: The kinds of a contact (:class:`rbd_deriv.Contact`): ``point`` holds a frame's origin still (3 force rows),
#: ``frame`` the whole frame (6 rows, [linear, angular]).
CONTACT_KINDS = tuple(FORCE_ROWS)


class PipelineError(InputError):
    """A description, a request or a result is refused.

    Attributes:
        reason: ``bad_description`` (empty, not XML, or an unusable URDF), ``robot_changed`` (a description
            with other joints while that is not allowed), ``bad_request`` (a derivatives request),
            ``bad_contacts`` (a contact set that does not fit the model),
            ``unusable_state`` (a state the library refuses to compute at) or ``non_finite_output`` (a
            result that is not finite: nothing of it may be sent).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, argument="request" if reason == "bad_request" else
                         "contacts" if reason == "bad_contacts" else
                         "state" if reason in ("unusable_state", "non_finite_output") else "robot_description")
        self.reason = reason


def contact_set(model: Any, frames: Sequence[str], kinds: Sequence[str] = (), data: Any = None) -> tuple:
    """The contacts of ``model`` at ``frames``, in that order (the order of the contact forces).

    Args:
        frames: Frame names (``model.frame_names``: links and joints), each on a different moving body.
        kinds: One of :data:`CONTACT_KINDS` per frame, or empty: every contact is a point contact.
        data: A workspace of ``model`` the set will be used on (its layout is made there, once); a new
            one if None.

    Returns:
        A tuple of :class:`rbd_deriv.Contact` (empty for no frame: the free tree).

    Raises:
        PipelineError: ``bad_contacts``: an unknown frame or kind, a frame fixed to the universe, a frame given
            twice or two contacts on one body, or as many kinds as frames not given.
    """
    frames, kinds = list(frames), list(kinds) or ["point"] * len(frames)
    if len(kinds) != len(frames):
        raise PipelineError(f"{len(frames)} contact frames but {len(kinds)} contact kinds: give one kind per frame "
                            f"({' or '.join(CONTACT_KINDS)}) or none", "bad_contacts")
    try:
        contacts = tuple(rd.Contact(model, str(frame), str(kind)) for frame, kind in zip(frames, kinds))
        if contacts:  # the set is checked as a whole (two contacts on one body...) when first used on a Data
            rd.contact_forces(model, model.create_data() if data is None else data, contacts)
    except InputError as error:
        raise PipelineError(f"contact set {describe(frames)}: {error}", "bad_contacts") from error
    return contacts


def warm_up(model: Any, data: Any = None, dt: float = 1e-3, batched: bool = False) -> float:
    """Run once, at the neutral configuration at rest, every algorithm the pipelines call.

    numba then compiles (or loads from its cache) each kernel now rather than at the first real input,
    and a model that loads but cannot compute is refused here.

    Args:
        model: The robot model.
        data: A workspace of ``model`` to use; a new one if None.
        dt: Step of the linearization [s].
        batched: Also the batched calls (K states at once), for those who use them.

    Returns:
        Time it took [s].

    Raises:
        RbdDerivError: The model cannot compute.
    """
    started = time.perf_counter()
    data = model.create_data() if data is None else data
    q, zero = rd.neutral(model), np.zeros(model.nv)
    rd.rnea(model, data, q, zero, zero)
    rd.gravity_torques(model, data, q)
    rd.crba(model, data, q)
    rd.minverse(model, data, q)
    rd.aba(model, data, q, zero, zero)
    rd.rnea_derivatives(model, data, q, zero, zero)
    rd.aba_derivatives(model, data, q, zero, zero)
    rd.linearize(model, data, q, zero, zero, dt)
    if batched:
        states, zeros = np.tile(q, (2, 1)), np.zeros((2, model.nv))
        rd.rnea_batch(model, states, zeros, zeros)
        rd.linearize_batch(model, states, zeros, zeros, dt)
    return time.perf_counter() - started


@dataclass(frozen=True)
class OutputSelection:
    """What :meth:`DynamicsPipeline.outputs` computes.

    Attributes:
        torques: The bias torques RNEA(q, v, 0).
        mass_matrix_inverse: M^-1(q).
        linearization: A, B and x+ of x+ = f(x, u).
        linearization_input: u: ``bias`` (the bias torques) or ``effort`` (the measured efforts).
        dt: Step of the linearization [s], in (0, ``PLAUSIBLE["step"]``].
    """

    torques: bool = True
    mass_matrix_inverse: bool = True
    linearization: bool = True
    linearization_input: str = "bias"
    dt: float = 1e-3

    def __post_init__(self) -> None:
        if self.linearization_input not in LINEARIZATION_INPUTS:
            raise InputError(f"linearization_input must be one of {', '.join(LINEARIZATION_INPUTS)}, got "
                             f"{self.linearization_input!r}", "linearization_input")
        if not (isinstance(self.dt, (int, float)) and 0.0 < self.dt <= PLAUSIBLE["step"]):
            raise InputError(f"dt must be in (0, {PLAUSIBLE['step']:g}] s, got {self.dt!r}", "dt")

    @classmethod
    def from_parameters(cls, p: Dict[str, Any]) -> "OutputSelection":
        """The selection that the dynamics node's parameters ``p`` (config/dynamics_node.yaml) make."""
        return cls(torques=p["publish_torques"], mass_matrix_inverse=p["publish_mass_matrix_inverse"],
                   linearization=p["publish_linearization"], linearization_input=p["linearization_input"],
                   dt=p["dt"])

    @property
    def needs_effort(self) -> bool:
        """The linearization takes the measured efforts."""
        return self.linearization and self.linearization_input == "effort"


class DynamicsOutputs(NamedTuple):
    """Outputs at one state, None where not asked; every array is finite.

    The arrays are views of the pipeline's output buffer, overwritten by its next :meth:`~DynamicsPipeline.outputs`:
    copy what you keep (the node packs them into its messages at once).

    Attributes:
        bias: RNEA(q, v, 0) (nv,) [N m or N], whenever the torques or a bias-input linearization were asked.
        torques: The bias torques of the actuated joints (``model.actuated_joint_names`` order).
        mass_matrix_inverse: M^-1(q) (nv, nv).
        linearization: ``{"dt", "x", "u", "A", "B", "x_next", "contact_frames", "contact_kinds",
            "contact_forces"}``, the keywords of :func:`rbd_deriv.messages.linearization_fields`: x = (q, v)
            (nq + nv,), u (nv,), A (2 nv, 2 nv), B (2 nv, nv), x_next (nq + nv,); under the contact set, its
            frames, kinds and forces (3 per point, 6 per frame contact [N, N m], on the robot, at each frame's
            origin along the world axes), empty without contacts.
    """

    bias: Optional[np.ndarray]
    torques: Optional[np.ndarray]
    mass_matrix_inverse: Optional[np.ndarray]
    linearization: Optional[Dict[str, Any]]


class DynamicsPipeline:
    """Everything derived from one robot description, built whole so that a user never sees a mix.

    Args:
        description: URDF XML text (or a file path, as :func:`rbd_deriv.load_urdf` takes).
        floating_base: Add a free-flyer base; its pose and twist come through
            :meth:`JointStateMap.update_base`.
        strict_joint_names: Refuse joint_states naming joints the model does not have.
        max_state_age: Staleness bound of the joint-state map [s]; 0 disables.
        max_stamp_lead: Largest lead of a stamp over the clock [s] the joint-state map accepts.
        contact_frames, contact_kinds: The contact set (:meth:`set_contacts`); empty: the free tree.

    Attributes:
        description: The text it was built from.
        model, data: The model and its workspace.
        state: The joint-state map of the model (the node feeds it, :meth:`outputs_from_state` reads it).
        joint_names: Movable joints in model order (the order of q and v).
        velocity_names: Name of each velocity coordinate (nv,) (rows and columns of the matrices).
        actuated_joint_names: Joints that joint_states reports and torques drive.
        lock: Held during every computation: the workspace serves one caller at a time.
        contacts: The contact set, a tuple of :class:`rbd_deriv.Contact`; contact_frames, contact_kinds:
            its frames and kinds.

    Raises:
        PipelineError: ``bad_description``: empty, not XML (a file is read by the caller, never named by a
            description), joint names that collide (a URDF joint named like the free flyer), or a model
            that cannot compute; ``bad_contacts``: a contact set that does not fit the model.
    """

    def __init__(self, description: str, floating_base: bool = False, strict_joint_names: bool = False,
                 max_state_age: float = 0.0, max_stamp_lead: float = math.inf, contact_frames: Sequence[str] = (),
                 contact_kinds: Sequence[str] = ()) -> None:
        if not isinstance(description, str) or not description.strip():
            raise PipelineError("the robot description is empty", "bad_description")
        # load_urdf also opens file paths: text from a topic or a parameter must never name a file.
        if not description.lstrip("\ufeff \t\r\n").startswith("<"):
            raise PipelineError(f"the robot description is not URDF XML (it starts with "
                                f"{description.strip()[:40]!r}); give a file in urdf_path", "bad_description")
        try:
            self.model = rd.load_urdf(description, floating_base=floating_base)
            names = list(self.model.joint_names)
            if len(set(names)) != len(names):
                repeated = sorted({n for n in names if names.count(n) > 1})
                raise PipelineError(
                    f"joint names collide: {describe(repeated)}" + (
                        f" ({rd.FREE_FLYER_JOINT!r} is the free flyer that floating_base adds; rename the URDF's "
                        "joint)" if rd.FREE_FLYER_JOINT in repeated else ""), "bad_description")
            self.data = self.model.create_data()
            self.state = JointStateMap(self.model, strict=strict_joint_names, max_age=max_state_age,
                                       max_lead=max_stamp_lead)
            warm_up(self.model, self.data)
        except PipelineError:
            raise
        except (RbdDerivError, ValueError) as error:
            raise PipelineError(f"the robot description is unusable: {error}", "bad_description") from error
        self.description = description
        self.joint_names = tuple(self.model.joint_names)
        self.velocity_names = velocity_names(self.model)
        self.actuated_joint_names = self.model.actuated_joint_names
        self._actuated_v = np.array([self.model.idx_v[n] for n in self.actuated_joint_names], dtype=np.int64)
        self._zero_v = np.zeros(self.model.nv)
        self.lock = threading.Lock()
        self.set_contacts(contact_frames, contact_kinds)
        self._buffer, self._out = _output_buffer(self.model.nq, self.model.nv, len(self.actuated_joint_names))
        self._zeros = np.zeros_like(self._buffer)
        # The actuated joints are the last coordinates (the free flyer, if any, comes first): their torques
        # are then a view of the bias, no copy needed.
        first = int(self._actuated_v[0]) if self._actuated_v.size else self.model.nv
        self._torques_copied = not np.array_equal(self._actuated_v, np.arange(first, self.model.nv))
        if not self._torques_copied:
            self._out = self._out._replace(torques=self._out.bias[first:])

    def set_contacts(self, frames: Sequence[str], kinds: Sequence[str] = ()) -> None:
        """Constrain the linearization by contacts at ``frames`` from the next output on (see
        :func:`contact_set`; empty ``frames``: the free tree). A refused set leaves the current one.

        Raises:
            PipelineError: ``bad_contacts``.
        """
        with self.lock:
            contacts = contact_set(self.model, frames, kinds, self.data)
            self.contacts = contacts
            self.contact_frames = tuple(c.frame for c in contacts)
            self.contact_kinds = tuple(c.kind for c in contacts)
            self._forces = np.zeros(sum(c.rows for c in contacts))

    def same_robot(self, other: "DynamicsPipeline") -> bool:
        """Same joints in the same order and the same configuration size: states carry over."""
        return self.joint_names == other.joint_names and self.model.nq == other.model.nq

    # ------------------------------------------------------------------------------------- outputs
    def outputs(self, q: Any, v: Any, selection: OutputSelection, effort: Any = None) -> DynamicsOutputs:
        """The outputs ``selection`` asks for at the state (q (nq,), v (nv,)), in the output buffer.

        Args:
            effort: Measured efforts (nv,) [N m or N], the linearization input when
                ``selection.linearization_input`` is ``effort``.

        Raises:
            InputError: A wrong shape, NaN or inf, a non-unit quaternion (nothing is computed), or no
                effort where one is needed.
            PipelineError: ``unusable_state``: the library refuses to compute there (an intermediate
                overflows, a singular mass matrix); ``non_finite_output``: a result is not finite (the
                message names the input).
        """
        out = self._out
        needs_effort = selection.needs_effort
        if needs_effort:
            if effort is None:
                raise InputError("the linearization input is the measured effort, but none was given", "effort")
            effort = np.asarray(effort, dtype=float)
            if effort.shape != (self.model.nv,):
                raise InputError(f"effort has shape {effort.shape}, the model needs ({self.model.nv},)", "effort")
        with self.lock:
            try:
                bias, linearization = self._compute(q, v, selection, effort if needs_effort else None)
            except RbdDerivError as error:
                self._buffer[:] = 0.0  # what is not recomputed next time must not fail its test
                raise PipelineError(f"the library refuses to compute at "
                                    f"{_quote(q=q, v=v, u=effort if needs_effort else None)}: {error}",
                                    "unusable_state") from error
            # One test for every output: NaN and inf times 0 are NaN, any finite value times 0 is 0; one
            # dot product (BLAS) is the cheapest numpy call that reads them all.
            if self._buffer.dot(self._zeros) != 0.0 or not np.isfinite(self._forces).all():
                self._buffer[:] = 0.0
                self._forces[:] = 0.0
                raise _non_finite("outputs", q=q, v=v, u=effort if needs_effort else None)
        return DynamicsOutputs(bias, out.torques if selection.torques else None,
                               out.mass_matrix_inverse if selection.mass_matrix_inverse else None, linearization)

    def _compute(self, q: Any, v: Any, selection: OutputSelection, effort: Optional[np.ndarray]):
        """Fill the output buffer; return the bias and the linearization's fields (None if not asked)."""
        model, data, out = self.model, self.data, self._out
        bias = None
        if selection.torques or (selection.linearization and effort is None):
            bias = out.bias
            bias[:] = rd.rnea(model, data, q, v, self._zero_v)
        # Each call overwrites data's results: each is copied to the buffer before the next call.
        if selection.torques and self._torques_copied:
            np.take(bias, self._actuated_v, out=out.torques)
        if selection.mass_matrix_inverse:
            out.mass_matrix_inverse[:] = rd.minverse(model, data, q)
        linearization = None
        if selection.linearization:
            x, u = out.x, bias
            if effort is not None:
                u = out.u
                u[:] = effort
            contacts = self.contacts
            if contacts:
                A, B = rd.linearize(model, data, q, v, u, selection.dt, contacts=contacts)
                self._forces[:] = rd.contact_forces(model, data, contacts)
            else:
                A, B = rd.linearize(model, data, q, v, u, selection.dt)
            x[: model.nq], x[model.nq :] = q, v
            out.A[:], out.B[:], out.x_next[:] = A, B, data.x_next
            linearization = {"dt": float(selection.dt), "x": x, "u": u, "A": out.A, "B": out.B,
                             "x_next": out.x_next, "contact_frames": self.contact_frames,
                             "contact_kinds": self.contact_kinds, "contact_forces": self._forces}
        return bias, linearization

    def outputs_from_state(self, selection: OutputSelection) -> DynamicsOutputs:
        """:meth:`outputs` at the state assembled in :attr:`state`, if it can be used as a whole.

        Raises:
            JointStateError: ``incomplete``, ``stale`` or ``missing_effort`` (see
                :meth:`JointStateMap.check_ready`).
        """
        state = self.state
        state.check_ready(need_effort=selection.needs_effort)
        return self.outputs(state.q, state.v, selection, state.effort if selection.needs_effort else None)

    # --------------------------------------------------------------------------------- derivatives
    def derivatives(self, q: Any, v: Any, a: Any = (), tau: Any = (), dt: float = 0.0,
                    wanted: Iterable[str] = (), contact_frames: Sequence[str] = (),
                    contact_kinds: Sequence[str] = ()) -> Dict[str, Any]:
        """Derivatives at any state, as the ComputeDerivatives service answers them.

        Args:
            q: Configuration (nq,); v: velocity (nv,).
            a: Acceleration (nv,), needed for the inverse-dynamics derivatives.
            tau: Torques (nv,), needed for the forward-dynamics derivatives and the linearization.
            dt: Step of the linearization [s], > 0 when it is asked.
            wanted: Names among :data:`DERIVATIVES`.
            contact_frames, contact_kinds: A contact set (:func:`contact_set`), independent of the pipeline's
                own: the forward-dynamics derivatives and the linearization are then those of the
                contact-constrained dynamics (the linearization with its contact forces).

        Returns:
            Per asked output: ``dtau_dq``, ``dtau_dv`` (inverse_dynamics_derivatives), ``dddq_dq``,
            ``dddq_dv`` (forward_dynamics_derivatives), ``mass_matrix``, ``mass_matrix_inverse``, each
            (nv, nv), and ``linearization`` (the keywords of
            :func:`rbd_deriv.messages.linearization_fields`). Arrays owned by the caller.

        Raises:
            PipelineError: ``bad_request``: nothing or something unknown asked, a contact set that does not fit
                the model, a vector of the wrong size,
                NaN, inf or an implausible magnitude (:data:`~rbd_deriv.joint_state_map.PLAUSIBLE`), dt
                not in (0, ``PLAUSIBLE["step"]``], or a state the library refuses (a non-unit quaternion...);
                ``non_finite_output``: a result is not finite.
        """
        wanted = set(wanted)
        if not wanted:
            raise PipelineError(f"nothing asked: set at least one of {', '.join(DERIVATIVES)}", "bad_request")
        unknown = wanted.difference(DERIVATIVES)
        if unknown:
            raise PipelineError(f"unknown outputs {sorted(unknown)}; choose among {', '.join(DERIVATIVES)}",
                                "bad_request")
        model, data = self.model, self.data
        q = _request_vector("q", q, model.nq, "nq", "position")
        v = _request_vector("v", v, model.nv, "nv", "velocity")
        needs_tau = bool(wanted & {"forward_dynamics_derivatives", "linearization"})
        a = _request_vector("a", a, model.nv, "nv, for inverse-dynamics derivatives", "acceleration") \
            if "inverse_dynamics_derivatives" in wanted else None
        tau = _request_vector("tau", tau, model.nv, "nv, for forward dynamics and linearization", "effort") \
            if needs_tau else None
        if "linearization" in wanted and not 0.0 < dt <= PLAUSIBLE["step"]:
            raise PipelineError(f"dt must be in (0, {PLAUSIBLE['step']:g}] s for the linearization, got {dt}",
                                "bad_request")
        answer: Dict[str, Any] = {}
        try:
            with self.lock:
                contacts = contact_set(model, contact_frames, contact_kinds, data)  # refused as a bad request
                # Each call overwrites data's results: copy each before the next call.
                if "inverse_dynamics_derivatives" in wanted:
                    dtau_dq, dtau_dv, _ = rd.rnea_derivatives(model, data, q, v, a)
                    answer.update(dtau_dq=dtau_dq.copy(), dtau_dv=dtau_dv.copy())
                if "forward_dynamics_derivatives" in wanted:
                    if contacts:
                        dddq_dq, dddq_dv = rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)[:2]
                    else:
                        dddq_dq, dddq_dv, _ = rd.aba_derivatives(model, data, q, v, tau)
                    answer.update(dddq_dq=dddq_dq.copy(), dddq_dv=dddq_dv.copy())
                if "mass_matrix" in wanted:
                    answer["mass_matrix"] = rd.crba(model, data, q).copy()
                if "mass_matrix_inverse" in wanted:
                    answer["mass_matrix_inverse"] = rd.minverse(model, data, q).copy()
                if "linearization" in wanted:
                    A, B = rd.linearize(model, data, q, v, tau, dt, contacts=contacts or None)
                    answer["linearization"] = {
                        "dt": float(dt), "x": np.concatenate((q, v)), "u": tau, "A": A.copy(), "B": B.copy(),
                        "x_next": data.x_next.copy(), "contact_frames": [c.frame for c in contacts],
                        "contact_kinds": [c.kind for c in contacts],
                        "contact_forces": rd.contact_forces(model, data, contacts).copy() if contacts else np.zeros(0)}
        except InputError as error:
            raise PipelineError(str(error), "bad_request") from error
        arrays = [x for value in answer.values() for x in (value.values() if isinstance(value, dict) else [value])
                  if isinstance(x, np.ndarray)]
        if not all(np.isfinite(x).all() for x in arrays):
            raise _non_finite("derivatives", q=q, v=v, a=a, tau=tau, dt=dt)
        return answer


class Throughput:
    """What a node did with its inputs, for its diagnostics (no ROS here).

    Counts per diagnostics period and since the start (for the balance inputs = outputs + refused + lost
    before the node), and the compute time and latency [s] of each output of the period.
    """

    def __init__(self) -> None:
        self.inputs = self.outputs = 0
        self.inputs_total = self.outputs_total = 0
        self.compute_times: List[float] = []
        self.latencies: List[float] = []

    def took(self, count: int = 1) -> None:
        """Count ``count`` inputs."""
        self.inputs += count
        self.inputs_total += count

    def sent(self, compute_time: float, latency: float) -> None:
        """Count one output, computed in ``compute_time`` [s], sent ``latency`` [s] after its input's stamp."""
        self.outputs += 1
        self.outputs_total += 1
        self.compute_times.append(compute_time)
        self.latencies.append(latency)

    def report(self, period: float) -> Dict[str, float]:
        """Rates over the last ``period`` [s], compute time and latency percentiles [ms], totals; then starts
        the next period."""
        values = {"input_rate_hz": self.inputs / period, "output_rate_hz": self.outputs / period}
        for label, samples in (("compute_time_ms", self.compute_times), ("latency_ms", self.latencies)):
            if samples:
                p50, p99 = np.percentile(samples, [50.0, 99.0])
                values.update({f"{label}_p50": 1e3 * p50, f"{label}_p99": 1e3 * p99,
                               f"{label}_max": 1e3 * max(samples)})
        values.update({"inputs_total": self.inputs_total, "outputs_total": self.outputs_total})
        self.inputs = self.outputs = 0
        self.compute_times, self.latencies = [], []
        return values


def _request_vector(name: str, values: Any, size: int, why: str, kind: str) -> np.ndarray:
    values = np.array(values, dtype=float).reshape(-1)
    if values.shape != (size,):
        raise PipelineError(f"{name} has {values.size} entries, the model needs {size} ({why})", "bad_request")
    if not np.isfinite(values).all():
        raise PipelineError(f"{name} contains NaN or inf", "bad_request")
    bad = np.flatnonzero(implausible(values, kind))
    if bad.size:
        raise PipelineError(f"{name}[{bad[0]}] = {values[bad[0]]:g} is beyond any physical {kind} (bound "
                            f"{PLAUSIBLE[kind]:g})", "bad_request")
    return values


class _OutputViews(NamedTuple):
    bias: np.ndarray
    torques: np.ndarray
    mass_matrix_inverse: np.ndarray
    x: np.ndarray
    u: np.ndarray
    A: np.ndarray
    B: np.ndarray
    x_next: np.ndarray


def _output_buffer(nq: int, nv: int, nu: int):
    """One float64 buffer for every output (so that one test covers them all) and its views."""
    shapes = _OutputViews(bias=(nv,), torques=(nu,), mass_matrix_inverse=(nv, nv), x=(nq + nv,), u=(nv,),
                          A=(2 * nv, 2 * nv), B=(2 * nv, nv), x_next=(nq + nv,))
    sizes = [int(np.prod(shape)) for shape in shapes]
    buffer = np.zeros(sum(sizes))
    ends = np.cumsum(sizes)
    views = [buffer[end - size : end].reshape(shape) for end, size, shape in zip(ends, sizes, shapes)]
    return buffer, _OutputViews(*views)


def _quote(**inputs: Any) -> str:
    """``name=values, ...`` of the inputs that are not None, for a refusal's message."""
    def values(x: Any) -> str:
        x = np.asarray(x, dtype=float).reshape(-1)
        return "[" + ", ".join(f"{e:.6g}" for e in x[:16]) + (f", ... {x.size - 16} more]" if x.size > 16 else "]")
    return ", ".join(f"{name}={values(value)}" for name, value in inputs.items() if value is not None)


def _non_finite(what: str, **inputs: Any) -> PipelineError:
    """The refusal of a non-finite result, quoting the input it was computed from."""
    return PipelineError(f"the {what} at {_quote(**inputs)} are not finite: nothing is sent", "non_finite_output")


def read_description(robot_description: str, urdf_path: str) -> str:
    """The robot description the parameters name: ``robot_description`` (the XML) if set, else the text of the
    file ``urdf_path``, else "" (none yet).

    Raises:
        PipelineError: ``bad_description`` when the file cannot be read.
    """
    if robot_description or not urdf_path:
        return robot_description
    try:
        with open(urdf_path, encoding="utf-8") as stream:
            return stream.read()
    except OSError as error:
        raise PipelineError(f"cannot read urdf_path {urdf_path!r}: {error}", "bad_description") from error


def replace_robot(current: Optional[DynamicsPipeline], candidate: DynamicsPipeline,
                  allow_change: bool) -> DynamicsPipeline:
    """The pipeline to use once ``candidate`` arrives while ``current`` runs.

    The same robot (new inertias, a recalibration) keeps the joint states already received: ``candidate``
    takes over ``current``'s state map. A robot with other joints is taken only when ``allow_change`` (or
    when nothing runs yet): consumers rely on the layout of the outputs.

    Returns:
        ``candidate``.

    Raises:
        PipelineError: ``robot_changed``.
    """
    if current is None:
        return candidate
    if candidate.same_robot(current):
        candidate.state = current.state
    elif not allow_change:
        raise PipelineError(
            f"the new description changes the robot ({len(current.joint_names)} -> {len(candidate.joint_names)} "
            f"joints, {list(current.joint_names[:3])}... -> {list(candidate.joint_names[:3])}...); set "
            "allow_robot_change to accept it", "robot_changed")
    return candidate
