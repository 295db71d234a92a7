"""The dynamics pipeline: a robot description and its state in, the dynamics node's outputs out (no ROS).

What :mod:`rbd_deriv.nodes.dynamics_node` computes, as a library that takes and returns arrays:

* :class:`DynamicsPipeline` turns one URDF into a model, its workspace and a
  :class:`~rbd_deriv.joint_state_map.JointStateMap`, refusing a description that does not load or cannot
  compute. :meth:`~DynamicsPipeline.outputs` gives, at a state (q, v), the bias torques RNEA(q, v, 0),
  M^-1(q) and the linearization x+ = f(x, u) with u the bias torques or the measured efforts;
  :meth:`~DynamicsPipeline.outputs_from_state` does the same at the state assembled from joint_states;
  :meth:`~DynamicsPipeline.derivatives` answers a derivatives request at any state.
* :func:`replace_robot` is the rule by which a new description replaces the running one.
* :func:`warm_up` runs every algorithm once before the first input (numba compilation, model check).

Every refusal raises an :class:`~rbd_deriv.exceptions.InputError` with a ``reason`` to count by:
:class:`PipelineError` here, :class:`~rbd_deriv.joint_state_map.JointStateError` for the state.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, NamedTuple, Optional

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.joint_state_map import JointStateMap, velocity_names

__all__ = ["DERIVATIVES", "LINEARIZATION_INPUTS", "DynamicsOutputs", "DynamicsPipeline", "OutputSelection",
           "PipelineError", "replace_robot", "warm_up"]

#: What the linearization's input u can be: the bias torques RNEA(q, v, 0) (the input that keeps the
#: current velocity) or the efforts measured by the robot.
LINEARIZATION_INPUTS = ("bias", "effort")

#: What a derivatives request may ask for (the flags of rbd_deriv/srv/ComputeDerivatives).
DERIVATIVES = ("inverse_dynamics_derivatives", "forward_dynamics_derivatives", "mass_matrix",
               "mass_matrix_inverse", "linearization")


class PipelineError(InputError):
    """A description or a request is refused.

    Attributes:
        reason: ``bad_description`` (empty, unreadable or unusable URDF), ``robot_changed`` (a description
            with other joints while that is not allowed) or ``bad_request`` (a derivatives request).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, argument="robot_description" if reason != "bad_request" else "request")
        self.reason = reason


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
        dt: Step of the linearization [s], > 0.
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
        if not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0.0):
            raise InputError(f"dt must be > 0, got {self.dt!r}", "dt")

    @property
    def needs_effort(self) -> bool:
        """The linearization takes the measured efforts."""
        return self.linearization and self.linearization_input == "effort"


class DynamicsOutputs(NamedTuple):
    """Outputs at one state; arrays owned by this object, None where not asked.

    Attributes:
        bias: RNEA(q, v, 0) (nv,) [N m or N], whenever the torques or a bias-input linearization were asked.
        torques: The bias torques of the actuated joints (``model.actuated_joint_names`` order).
        mass_matrix_inverse: M^-1(q) (nv, nv).
        linearization: ``{"dt", "x", "u", "A", "B", "x_next"}``, the keywords of
            :func:`rbd_deriv.messages.linearization_fields`: x = (q, v) (nq + nv,), u (nv,),
            A (2 nv, 2 nv), B (2 nv, nv), x_next (nq + nv,).
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

    Attributes:
        description: The text it was built from.
        model, data: The model and its workspace.
        state: The joint-state map of the model (the node feeds it, :meth:`outputs_from_state` reads it).
        joint_names: Movable joints in model order (the order of q and v).
        velocity_names: Name of each velocity coordinate (nv,) (rows and columns of the matrices).
        actuated_joint_names: Joints that joint_states reports and torques drive.
        lock: Held during every computation: the workspace serves one caller at a time.

    Raises:
        PipelineError: ``bad_description``: empty, unreadable, or a model that cannot compute.
    """

    def __init__(self, description: str, floating_base: bool = False, strict_joint_names: bool = False,
                 max_state_age: float = 0.0) -> None:
        if not isinstance(description, str) or not description.strip():
            raise PipelineError("the robot description is empty", "bad_description")
        try:
            self.model = rd.load_urdf(description, floating_base=floating_base)
            self.data = self.model.create_data()
            self.state = JointStateMap(self.model, strict=strict_joint_names, max_age=max_state_age)
            warm_up(self.model, self.data)
        except (RbdDerivError, ValueError) as error:
            raise PipelineError(f"the robot description is unusable: {error}", "bad_description") from error
        self.description = description
        self.joint_names = tuple(self.model.joint_names)
        self.velocity_names = velocity_names(self.model)
        self.actuated_joint_names = self.model.actuated_joint_names
        self._actuated_v = np.array([self.model.idx_v[n] for n in self.actuated_joint_names], dtype=np.int64)
        self._zero_v = np.zeros(self.model.nv)
        self.lock = threading.Lock()

    def same_robot(self, other: "DynamicsPipeline") -> bool:
        """Same joints in the same order and the same configuration size: states carry over."""
        return self.joint_names == other.joint_names and self.model.nq == other.model.nq

    # ------------------------------------------------------------------------------------- outputs
    def outputs(self, q: Any, v: Any, selection: OutputSelection, effort: Any = None) -> DynamicsOutputs:
        """The outputs ``selection`` asks for at the state (q (nq,), v (nv,)).

        Args:
            effort: Measured efforts (nv,) [N m or N], the linearization input when
                ``selection.linearization_input`` is ``effort``.

        Raises:
            InputError: A wrong shape, NaN or inf, a non-unit quaternion (nothing is computed), or no
                effort where one is needed.
        """
        model, data = self.model, self.data
        needs_effort = selection.needs_effort
        if needs_effort and effort is None:
            raise InputError("the linearization input is the measured effort, but none was given", "effort")
        with self.lock:
            bias = None
            if selection.torques or (selection.linearization and not needs_effort):
                bias = rd.rnea(model, data, q, v, self._zero_v).copy()
            # Each call overwrites data's results: copy each before the next call.
            minv = rd.minverse(model, data, q).copy() if selection.mass_matrix_inverse else None
            linearization = None
            if selection.linearization:
                u = np.array(effort, dtype=float) if needs_effort else bias
                A, B = rd.linearize(model, data, q, v, u, selection.dt)
                linearization = {"dt": float(selection.dt), "x": np.concatenate((q, v)), "u": u, "A": A.copy(),
                                 "B": B.copy(), "x_next": data.x_next.copy()}
        torques = bias[self._actuated_v] if selection.torques else None
        return DynamicsOutputs(bias, torques, minv, linearization)

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
                    wanted: Iterable[str] = ()) -> Dict[str, Any]:
        """Derivatives at any state, as the ComputeDerivatives service answers them.

        Args:
            q: Configuration (nq,); v: velocity (nv,).
            a: Acceleration (nv,), needed for the inverse-dynamics derivatives.
            tau: Torques (nv,), needed for the forward-dynamics derivatives and the linearization.
            dt: Step of the linearization [s], > 0 when it is asked.
            wanted: Names among :data:`DERIVATIVES`.

        Returns:
            Per asked output: ``dtau_dq``, ``dtau_dv`` (inverse_dynamics_derivatives), ``dddq_dq``,
            ``dddq_dv`` (forward_dynamics_derivatives), ``mass_matrix``, ``mass_matrix_inverse``, each
            (nv, nv), and ``linearization`` (the keywords of
            :func:`rbd_deriv.messages.linearization_fields`). Arrays owned by the caller.

        Raises:
            PipelineError: ``bad_request``: nothing or something unknown asked, a vector of the wrong size,
                NaN or inf, dt not > 0, or a state the library refuses (a non-unit quaternion...).
        """
        wanted = set(wanted)
        if not wanted:
            raise PipelineError(f"nothing asked: set at least one of {', '.join(DERIVATIVES)}", "bad_request")
        unknown = wanted.difference(DERIVATIVES)
        if unknown:
            raise PipelineError(f"unknown outputs {sorted(unknown)}; choose among {', '.join(DERIVATIVES)}",
                                "bad_request")
        model, data = self.model, self.data
        q = _request_vector("q", q, model.nq, "nq")
        v = _request_vector("v", v, model.nv, "nv")
        needs_tau = bool(wanted & {"forward_dynamics_derivatives", "linearization"})
        a = _request_vector("a", a, model.nv, "nv, for inverse-dynamics derivatives") \
            if "inverse_dynamics_derivatives" in wanted else None
        tau = _request_vector("tau", tau, model.nv, "nv, for forward dynamics and linearization") \
            if needs_tau else None
        if "linearization" in wanted and not (math.isfinite(dt) and dt > 0.0):
            raise PipelineError(f"dt must be > 0 for the linearization, got {dt}", "bad_request")
        answer: Dict[str, Any] = {}
        try:
            with self.lock:
                # Each call overwrites data's results: copy each before the next call.
                if "inverse_dynamics_derivatives" in wanted:
                    dtau_dq, dtau_dv, _ = rd.rnea_derivatives(model, data, q, v, a)
                    answer.update(dtau_dq=dtau_dq.copy(), dtau_dv=dtau_dv.copy())
                if "forward_dynamics_derivatives" in wanted:
                    dddq_dq, dddq_dv, _ = rd.aba_derivatives(model, data, q, v, tau)
                    answer.update(dddq_dq=dddq_dq.copy(), dddq_dv=dddq_dv.copy())
                if "mass_matrix" in wanted:
                    answer["mass_matrix"] = rd.crba(model, data, q).copy()
                if "mass_matrix_inverse" in wanted:
                    answer["mass_matrix_inverse"] = rd.minverse(model, data, q).copy()
                if "linearization" in wanted:
                    A, B = rd.linearize(model, data, q, v, tau, dt)
                    answer["linearization"] = {"dt": float(dt), "x": np.concatenate((q, v)), "u": tau,
                                               "A": A.copy(), "B": B.copy(), "x_next": data.x_next.copy()}
        except InputError as error:
            raise PipelineError(str(error), "bad_request") from error
        return answer


def _request_vector(name: str, values: Any, size: int, why: str) -> np.ndarray:
    values = np.array(values, dtype=float).reshape(-1)
    if values.shape != (size,):
        raise PipelineError(f"{name} has {values.size} entries, the model needs {size} ({why})", "bad_request")
    if not np.isfinite(values).all():
        raise PipelineError(f"{name} contains NaN or inf", "bad_request")
    return values


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
