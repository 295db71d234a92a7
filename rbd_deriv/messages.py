"""The package's message layouts and ROS time stamps, converted to and from arrays (no ROS import).

One place for what ``msg/Linearization.msg``, ``msg/Matrix.msg``, ``msg/FeedbackPolicy.msg`` and
builtin_interfaces/Time look like
as numbers. The functions are duck-typed on the messages' field names, so the same code serves the
generated rclpy messages of the nodes and the rosbags messages of :mod:`rbd_deriv.replay`:

* packing builds a ``{field: value}`` dict: ``Type(**fields)`` makes a message of either kind, and
  :func:`fill_message` writes the dict into an existing one; a node that sends the same message at every
  state instead writes numbers straight into it, through numpy views of its fields
  (:func:`linearization_views`, :func:`matrix_view`, :func:`float_views`);
* unpacking reads a received message into arrays, checking its sizes against the model, and raises
  :class:`MessageError` (with a ``reason`` to count by) when they do not fit.

Matrices and the Jacobians A and B travel row-major in flat float64 sequences.
"""

from __future__ import annotations

import array
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from rbd_deriv.core.contact import FORCE_ROWS
from rbd_deriv.exceptions import MessageError
from rbd_deriv.stamps import NS_PER_S, ns_to_seconds, ns_to_stamp, seconds_to_stamp, set_stamp, stamp_to_ns

__all__ = [
    "MATRIX_NAMES", "DynamicsMessages", "MessageError", "answer_fields", "contact_fields_arrays",
    "feedback_policy_arrays", "feedback_policy_fields", "fill_message", "float_views",
    "linearization_arrays", "linearization_fields", "linearization_sizes", "linearization_views", "matrix_array",
    "matrix_fields", "matrix_view", "ns_to_seconds", "ns_to_stamp", "odometry_arrays", "seconds_to_stamp",
    "set_stamp", "stamp_to_ns",
]

#: The ``name`` of each rbd_deriv/Matrix the package sends, by what it holds (the ComputeDerivatives
#: response fields and the dynamics node's ``mass_matrix_inverse`` topic).
MATRIX_NAMES: Dict[str, str] = {
    "dtau_dq": "dtau_dq",
    "dtau_dv": "dtau_dv",
    "dddq_dq": "dddq_dq",
    "dddq_dv": "dddq_dv",
    "mass_matrix": "M",
    "mass_matrix_inverse": "M_inverse",
}


# ------------------------------------------------------------------------------------------ values
def _vector(values: Any) -> np.ndarray:
    """Contiguous float64 values; the last axis is one message's sequence."""
    return np.ascontiguousarray(values, dtype=np.float64)


def _flat(values: Any) -> np.ndarray:
    """Contiguous float64 values, the last two axes (one message's matrix) flattened row-major (a view of
    a contiguous matrix, a copy otherwise)."""
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(values.shape[:-2] + (-1,), order="C")


def fill_message(message: Any, fields: Dict[str, Any]) -> Any:
    """Write ``fields`` into ``message`` and return it.

    A float64[] field of a generated rclpy message holds an ``array.array('d')`` and takes one
    without checking every element; numpy values go into such a field as one, into any other (a
    rosbags message) as they are.
    """
    for name, value in fields.items():
        if isinstance(value, np.ndarray) and isinstance(getattr(message, name), array.array):
            value = array.array("d", value.astype(np.float64, order="C", copy=False).tobytes())
        setattr(message, name, value)
    return message


def float_views(message: Any, shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, np.ndarray]:
    """Numpy views, one per float64[] field of a generated rclpy ``message`` named in ``shapes``, each of
    that shape (row-major), to write the message's numbers in place.

    Each field is given zeroed storage (an ``array.array('d')``, what the generated message holds) that the
    view shares: writing a view writes the message, and publishing it sends what was written, with no
    packing per message. The field must not be assigned afterwards (the view would then write the old
    storage).
    """
    views = {}
    for name, shape in shapes.items():
        setattr(message, name, array.array("d", bytes(8 * int(np.prod(shape)))))
        # The field's own storage: a setter may keep a copy of what it is given.
        views[name] = np.frombuffer(getattr(message, name), dtype=np.float64).reshape(shape)
    return views


def _field(message: Any, name: str) -> np.ndarray:
    return np.asarray(getattr(message, name), dtype=np.float64)


# ------------------------------------------------------------------------------------ Linearization
def linearization_sizes(joint_names: Sequence[str], nq: int, nv: int) -> Dict[str, Any]:
    """The fields of a rbd_deriv/Linearization that depend on the model only: ``joint_names`` (model
    order), ``nx`` = 2 nv, ``nu`` = nv, ``nq``, ``nv``."""
    return {"joint_names": list(joint_names), "nx": 2 * int(nv), "nu": int(nv), "nq": int(nq), "nv": int(nv)}


def linearization_fields(dt: float, x: Any, u: Any, A: Any, B: Any, x_next: Any,
                         contact_frames: Sequence[str] = (), contact_kinds: Sequence[str] = (),
                         contact_forces: Any = ()) -> Dict[str, Any]:
    """The fields of a rbd_deriv/Linearization but its header and sizes (:func:`linearization_sizes`).

    Args:
        dt: Integration step [s].
        x: State (q, v) (nq + nv,) at which A and B were taken.
        u: Input torques (nv,) [N m or N].
        A: (2 nv, 2 nv) state Jacobian; B: (2 nv, nv) input Jacobian. Sent row-major.
        x_next: f(x, u) (nq + nv,).
        contact_frames, contact_kinds: The contacts the step was constrained by (empty: none).
        contact_forces: Their forces (3 per point, 6 per frame contact) [N, N m].

    Every array but the contact forces may carry leading axes (K states at once, for a batched encoder
    without contacts): the last one or two axes make one message. ``dt`` is the one number of the message.
    """
    return {"dt": float(dt), "x": _vector(x), "u": _vector(u), "a": _flat(A), "b": _flat(B),
            "x_next": _vector(x_next), "nc": len(contact_frames), "contact_forces": _vector(contact_forces),
            "contact_frames": list(contact_frames), "contact_kinds": list(contact_kinds)}


def linearization_views(message: Any, nq: int, nv: int) -> Dict[str, np.ndarray]:
    """Writable views (:func:`float_views`) of a rclpy rbd_deriv/Linearization's numbers, keyed like the
    arrays of :func:`linearization_fields`: ``x`` (nq + nv,), ``u`` (nv,), ``A`` (2 nv, 2 nv), ``B``
    (2 nv, nv), ``x_next`` (nq + nv,). ``dt`` is a plain field, set as such."""
    nx = 2 * nv
    views = float_views(message, {"x": (nq + nv,), "u": (nv,), "a": (nx, nx), "b": (nx, nv), "x_next": (nq + nv,)})
    views["A"], views["B"] = views.pop("a"), views.pop("b")
    return views


def linearization_arrays(message: Any, nq: int, nv: int,
                         joint_names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """A received rbd_deriv/Linearization as arrays, if it fits a model with ``nq``, ``nv``.

    Returns:
        ``{"A": (2 nv, 2 nv), "B": (2 nv, nv), "x": (nq + nv,), "u": (nv,), "x_next": (nq + nv,),
        "dt": float}`` (the keywords of :func:`linearization_fields` and of
        :class:`rbd_deriv.control.HeldLinearization`). The arrays may share memory with the message.

    Raises:
        MessageError: ``joints`` (another joint list than ``joint_names``, when given) or ``size``
            (``nx``, ``nu``, ``nq``, ``nv`` or an array length that does not fit). Values are not
            checked here: NaN passes. The contact fields are not read here (:func:`contact_fields_arrays`).
    """
    if joint_names is not None and list(message.joint_names) != list(joint_names):
        raise MessageError(f"joints {list(message.joint_names)[:8]} differ from the model's {list(joint_names)[:8]}",
                           "joints")
    nx = 2 * nv
    arrays = {name: _field(message, name) for name in ("x", "u", "a", "b", "x_next")}
    found = (message.nx, message.nu, message.nq, message.nv) + tuple(a.size for a in arrays.values())
    wanted = (nx, nv, nq, nv, nq + nv, nv, nx * nx, nx * nv, nq + nv)
    if found != wanted:
        raise MessageError(f"nx, nu, nq, nv and the sizes of x, u, a, b, x_next are {found}, the model needs "
                           f"{wanted}", "size")
    return {"A": arrays["a"].reshape(nx, nx), "B": arrays["b"].reshape(nx, nv), "x": arrays["x"],
            "u": arrays["u"], "x_next": arrays["x_next"], "dt": float(message.dt)}


def contact_fields_arrays(message: Any) -> Dict[str, Any]:
    """The contact set and forces of a received rbd_deriv/Linearization: ``{"frames": [...], "kinds": [...],
    "forces": (m,)}``.

    Raises:
        MessageError: ``size``: not one kind per frame, or not 3 forces per point and 6 per frame contact.
    """
    frames, kinds = list(message.contact_frames), list(message.contact_kinds)
    forces = _field(message, "contact_forces")
    rows = FORCE_ROWS
    if not message.nc == len(kinds) == len(frames) or any(k not in rows for k in kinds) or \
            forces.size != sum(rows[k] for k in kinds):
        raise MessageError(f"nc = {message.nc}, {len(frames)} contact frames, kinds {kinds[:8]} and {forces.size} "
                           "contact forces do not fit (nc frames, one kind per frame, point or frame; 3 forces per "
                           "point, 6 per frame)", "size")
    return {"frames": frames, "kinds": kinds, "forces": forces}


# ----------------------------------------------------------------------------------- FeedbackPolicy
def feedback_policy_fields(joint_names: Sequence[str], state_joint_names: Sequence[str], nq: int, nv: int,
                           knot_dt: float, valid_for: float, x_ref: Any, u_ff: Any, K: Any) -> Dict[str, Any]:
    """The fields of a rbd_deriv/FeedbackPolicy but its header (whose stamp is the time of knot 0).

    Args:
        joint_names: The controlled joints, order of u_ff's entries and K's rows (nu).
        state_joint_names: The model's joints in model order (order of q and v in x_ref).
        nq, nv: The model's dimensions.
        knot_dt: Knot spacing [s]; valid_for: validity from the stamp [s].
        x_ref: (knots, nq + nv) reference states; u_ff: (knots, nu) torques [N m]; K: (nu, 2 nv) gain, or
            (G, nu, 2 nv) the gains of the first G knots.
    """
    u_ff = np.asarray(u_ff, dtype=np.float64)
    return {"joint_names": list(joint_names), "state_joint_names": list(state_joint_names), "nq": int(nq),
            "nv": int(nv), "nx": 2 * int(nv), "nu": int(u_ff.shape[-1]), "knots": int(u_ff.shape[0]),
            "knot_dt": float(knot_dt), "valid_for": float(valid_for), "x_ref": _flat(x_ref), "u_ff": _flat(u_ff),
            "k": np.asarray(K, dtype=np.float64).ravel()}


def feedback_policy_arrays(message: Any) -> Dict[str, Any]:
    """A received rbd_deriv/FeedbackPolicy as arrays, if its sizes agree with one another.

    Returns:
        ``{"joint_names", "state_joint_names": lists, "knot_dt", "valid_for": float, "x_ref": (knots, nq + nv),
        "u_ff": (knots, nu), "K": (nu, nx) or (G, nu, nx)}`` (what :meth:`rbd_deriv.control.PolicyExecutor.check_policy`
        takes). Whether they fit a model, and their values, are not checked here.

    Raises:
        MessageError: ``size``: nx != 2 nv, no knot, a joint list or an array whose length does not fit the
            message's own nq, nv, nu and knots (k: G nu nx values, 1 <= G <= knots).
    """
    nq, nv, nx, nu, knots = (int(message.nq), int(message.nv), int(message.nx), int(message.nu),
                             int(message.knots))
    arrays = {name: _field(message, name) for name in ("x_ref", "u_ff", "k")}
    found = (nx, len(message.joint_names)) + tuple(a.size for a in arrays.values())
    gains = arrays["k"].size // max(1, nu * nx)
    wanted = (2 * nv, nu, knots * (nq + nv), knots * nu, max(1, min(gains, knots)) * nu * nx)
    if knots < 1 or found != wanted:
        raise MessageError(f"nx, len(joint_names) and the sizes of x_ref, u_ff, k are {found} with {knots} knots; "
                           f"nq = {nq}, nv = {nv}, nu = {nu} need {wanted} and at least one knot", "size")
    return {"joint_names": list(message.joint_names), "state_joint_names": list(message.state_joint_names),
            "knot_dt": float(message.knot_dt), "valid_for": float(message.valid_for),
            "x_ref": arrays["x_ref"].reshape(knots, nq + nv), "u_ff": arrays["u_ff"].reshape(knots, nu),
            "K": arrays["k"].reshape((gains, nu, nx) if gains > 1 else (nu, nx))}


# ------------------------------------------------------------------------------------------- Matrix
def matrix_fields(values: Any, name: Optional[str] = None, names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The fields of a rbd_deriv/Matrix but its header.

    Args:
        values: (rows, cols), sent row-major; leading axes allowed as in :func:`linearization_fields`.
        name: What the matrix is (see :data:`MATRIX_NAMES`); left out when None (a message that has it).
        names: One name per velocity coordinate; left out when None.
    """
    values = np.asarray(values, dtype=np.float64)
    fields: Dict[str, Any] = {"rows": int(values.shape[-2]), "cols": int(values.shape[-1]), "data": _flat(values)}
    if name is not None:
        fields["name"] = name
    if names is not None:
        fields["names"] = list(names)
    return fields


def matrix_view(message: Any, rows: int, cols: int) -> np.ndarray:
    """A writable (rows, cols) view (:func:`float_views`) of a rclpy rbd_deriv/Matrix's ``data``; sets
    ``rows`` and ``cols``."""
    message.rows, message.cols = int(rows), int(cols)
    return float_views(message, {"data": (rows, cols)})["data"]


def matrix_array(message: Any, shape: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """A received rbd_deriv/Matrix as a (rows, cols) array.

    Raises:
        MessageError: ``size``: ``data`` does not hold rows x cols entries, or the matrix is not of
            ``shape`` when one is given.
    """
    data = _field(message, "data")
    rows, cols = int(message.rows), int(message.cols)
    if data.size != rows * cols or (shape is not None and (rows, cols) != tuple(shape)):
        raise MessageError(f"matrix {message.name!r} is {rows} x {cols} with {data.size} entries"
                           + (f", expected {shape[0]} x {shape[1]}" if shape is not None else ""), "size")
    return data.reshape(rows, cols)


# ------------------------------------------------------------------------------ what the nodes send
def answer_fields(answer: Dict[str, Any], joint_names: Sequence[str], velocity_names: Sequence[str], nq: int,
                  nv: int) -> Dict[str, Dict[str, Any]]:
    """The fields (but the header) of each message of a derivatives answer (``DynamicsPipeline.derivatives``):
    the entry ``linearization`` as a rbd_deriv/Linearization, every other one as a rbd_deriv/Matrix named
    after it (:data:`MATRIX_NAMES`) with the model's velocity names."""
    return {field: {**linearization_sizes(joint_names, nq, nv), **linearization_fields(**value)}
            if field == "linearization" else matrix_fields(value, MATRIX_NAMES[field], velocity_names)
            for field, value in answer.items()}


class DynamicsMessages(NamedTuple):
    """The messages a dynamics node sends at every state, made once per model and written in place.

    Their names are filled once (the generated setters check them string by string) and their numbers are
    written through views (:func:`float_views`): no packing per message, which is most of what a message
    costs beyond the dynamics.
    """

    torques: Any  #: sensor_msgs/JointState, effort = bias torques of the actuated joints
    minv: Any  #: rbd_deriv/Matrix ``mass_matrix_inverse``
    linearization: Any  #: rbd_deriv/Linearization
    effort: np.ndarray  #: view of ``torques.effort`` (nu,)
    minv_data: np.ndarray  #: view of ``minv.data`` (nv, nv)
    linearization_arrays: Dict[str, np.ndarray]  #: views of ``linearization``'s numbers (:func:`linearization_views`)

    @classmethod
    def make(cls, types: Tuple[Any, Any, Any], actuated_names: Sequence[str], joint_names: Sequence[str],
             velocity_names: Sequence[str], nq: int, nv: int) -> "DynamicsMessages":
        """The messages of a model, from ``types`` = (JointState, Matrix, Linearization) message classes."""
        joint_state_type, matrix_type, linearization_type = types
        torques = joint_state_type(name=list(actuated_names))
        minv = matrix_type(name=MATRIX_NAMES["mass_matrix_inverse"], names=list(velocity_names))
        linearization = linearization_type(**linearization_sizes(joint_names, nq, nv))
        return cls(torques, minv, linearization, float_views(torques, {"effort": (len(actuated_names),)})["effort"],
                   matrix_view(minv, nv, nv), linearization_views(linearization, nq, nv))

    def write_outputs(self, outputs: Any, header: Any) -> List[Tuple[str, Any]]:
        """Write a pipeline's outputs (``DynamicsOutputs``: those not None) and ``header`` into the kept messages;
        return (topic, message) of each, in the order a dynamics node sends them: ``bias_torques``,
        ``mass_matrix_inverse``, ``linearization``."""
        written = []
        if outputs.torques is not None:
            self.effort[:] = outputs.torques
            self.torques.header = header
            written.append(("bias_torques", self.torques))
        if outputs.mass_matrix_inverse is not None:
            self.minv_data[:] = outputs.mass_matrix_inverse
            self.minv.header = header
            written.append(("mass_matrix_inverse", self.minv))
        if outputs.linearization is not None:
            written.append(("linearization", self.write_linearization(outputs.linearization, header)))
        return written

    def write_linearization(self, fields: Dict[str, Any], header: Any) -> Any:
        """Write a pipeline's linearization (``DynamicsOutputs.linearization``) and ``header`` into the kept
        message; return it. The contact names are assigned only when the contact set changed."""
        message = self.linearization
        for key, view in self.linearization_arrays.items():
            view[...] = fields[key]
        message.dt, message.header = fields["dt"], header
        frames, kinds = fields["contact_frames"], fields["contact_kinds"]
        if list(message.contact_frames) != list(frames) or list(message.contact_kinds) != list(kinds):
            message.contact_frames, message.contact_kinds = list(frames), list(kinds)
            message.nc = len(frames)
        fill_message(message, {"contact_forces": fields["contact_forces"]})
        return message


def odometry_arrays(message: Any) -> Tuple[Tuple[float, ...], ...]:
    """A nav_msgs/Odometry's base state: position (3,) [m], orientation quaternion (x, y, z, w), linear and
    angular velocity (3,) each [m/s, rad/s] in the child (base) frame."""
    pose, twist = message.pose.pose, message.twist.twist
    return ((pose.position.x, pose.position.y, pose.position.z),
            (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w),
            (twist.linear.x, twist.linear.y, twist.linear.z), (twist.angular.x, twist.angular.y, twist.angular.z))
