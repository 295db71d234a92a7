"""The package's message layouts and ROS time stamps, converted to and from arrays (no ROS import).

One place for what ``msg/Linearization.msg``, ``msg/Matrix.msg`` and builtin_interfaces/Time look like
as numbers. The functions are duck-typed on the messages' field names, so the same code serves the
generated rclpy messages of the nodes and the rosbags messages of :mod:`rbd_deriv.replay`:

* packing builds a ``{field: value}`` dict: ``Type(**fields)`` makes a message of either kind, and
  :func:`fill_message` writes the dict into an existing one (a node's preallocated message);
* unpacking reads a received message into arrays, checking its sizes against the model, and raises
  :class:`MessageError` (with a ``reason`` to count by) when they do not fit.

Matrices and the Jacobians A and B travel row-major in flat float64 sequences.
"""

from __future__ import annotations

import array
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from rbd_deriv.exceptions import InputError

__all__ = [
    "MATRIX_NAMES", "MessageError", "fill_message", "linearization_arrays", "linearization_fields",
    "linearization_sizes", "matrix_array", "matrix_fields", "ns_to_seconds", "ns_to_stamp",
    "seconds_to_stamp", "set_stamp", "stamp_to_ns",
]

NS_PER_S = 1_000_000_000

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


class MessageError(InputError):
    """A received message does not fit the model: wrong joints, sizes or values.

    Attributes:
        reason: A short key to count refusals by (``joints``, ``size``, ``values``...).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, argument="message")
        self.reason = reason


# ------------------------------------------------------------------------------------------ stamps
def stamp_to_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time (anything with ``sec`` and ``nanosec``)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns):
    """(sec, nanosec) of a time in [ns]; works element-wise on integer arrays.

    Floor division keeps ``nanosec`` in [0, 1e9) for times before the epoch, as ROS does.
    """
    return ns // NS_PER_S, ns % NS_PER_S


def set_stamp(stamp: Any, ns: int) -> Any:
    """Write a time in [ns] into a builtin_interfaces/Time (or Duration) in place; return it."""
    stamp.sec, stamp.nanosec = (int(part) for part in ns_to_stamp(int(ns)))
    return stamp


def ns_to_seconds(ns: int, origin_ns: int = 0) -> float:
    """Seconds from ``origin_ns`` to ``ns``. Differences are taken in integers first: a float of the
    seconds since 1970 keeps only about 0.2 us."""
    return (int(ns) - int(origin_ns)) * 1e-9


def seconds_to_stamp(seconds: float) -> Tuple[int, int]:
    """(sec, nanosec) of a duration or time in [s], rounded to the nanosecond."""
    return ns_to_stamp(int(round(seconds * NS_PER_S)))


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


def _field(message: Any, name: str) -> np.ndarray:
    return np.asarray(getattr(message, name), dtype=np.float64)


# ------------------------------------------------------------------------------------ Linearization
def linearization_sizes(joint_names: Sequence[str], nq: int, nv: int) -> Dict[str, Any]:
    """The fields of a rbd_deriv/Linearization that depend on the model only: ``joint_names`` (model
    order), ``nx`` = 2 nv, ``nu`` = nv, ``nq``, ``nv``."""
    return {"joint_names": list(joint_names), "nx": 2 * int(nv), "nu": int(nv), "nq": int(nq), "nv": int(nv)}


def linearization_fields(dt: float, x: Any, u: Any, A: Any, B: Any, x_next: Any) -> Dict[str, Any]:
    """The numeric fields of a rbd_deriv/Linearization.

    Args:
        dt: Integration step [s].
        x: State (q, v) (nq + nv,) at which A and B were taken.
        u: Input torques (nv,) [N m or N].
        A: (2 nv, 2 nv) state Jacobian; B: (2 nv, nv) input Jacobian. Sent row-major.
        x_next: f(x, u) (nq + nv,).

    Every array may carry leading axes (K states at once, for a batched encoder): the last one or two
    axes make one message. ``dt`` is the one number of the message.
    """
    return {"dt": float(dt), "x": _vector(x), "u": _vector(u), "a": _flat(A), "b": _flat(B),
            "x_next": _vector(x_next)}


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
            checked here: NaN passes.
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
