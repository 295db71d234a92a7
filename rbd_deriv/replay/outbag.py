"""Writing what an evaluation computed into a new rosbag2, readable by ``ros2 bag`` and any rosbag2 tool.

Each evaluated joint_states message gives, stamped with its header and written at its recording time:

=========================  ===============================  ==========================================
topic (under ``/rbd_deriv``)  type                          content
=========================  ===============================  ==========================================
``linearization``          ``rbd_deriv/msg/Linearization``  ``A``, ``B``, ``x+`` at ``(q, v)``, ``u``
``mass_matrix_inverse``    ``rbd_deriv/msg/Matrix``         ``M^-1`` (name ``M_inverse``)
``bias_torques``           ``sensor_msgs/msg/JointState``   effort = ``RNEA(q, v, 0)``, with q and v
``torque_residual``        ``sensor_msgs/msg/JointState``   effort = ``RNEA(q, v, a) - recorded effort``
=========================  ===============================  ==========================================

The residual topic is written on request (``residual=True``); the JSON and PNG report it anyway.

``u`` is the recorded effort (zero on a floating base); where no effort was recorded, the inverse-dynamics
torque ``RNEA(q, v, a)`` of the estimated acceleration.

plus the robot description (``std_msgs/msg/String`` on ``/robot_description``, transient local).
The message types are registered in the bag from the package's ``msg/*.msg`` text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError

from rbd_deriv.messages import MATRIX_NAMES, linearization_fields, linearization_sizes, matrix_fields, ns_to_stamp
from rbd_deriv.replay import cdr
from rbd_deriv.replay.bagio import JOINT_STATE_TYPE, PACKAGE, STRING_TYPE, BagError
from rbd_deriv.replay.evaluate import Evaluation, actuated_joint_names

__all__ = ["LINEARIZATION_TYPE", "MATRIX_TYPE", "output_topics", "write_output_bag"]

LINEARIZATION_TYPE = f"{PACKAGE}/msg/Linearization"
MATRIX_TYPE = f"{PACKAGE}/msg/Matrix"

_ZERO_TIME = QosTime(0, 0)
_LATCHED = Qos(
    QosHistory.KEEP_LAST,
    1,
    QosReliability.RELIABLE,
    QosDurability.TRANSIENT_LOCAL,
    _ZERO_TIME,
    _ZERO_TIME,
    QosLiveliness.AUTOMATIC,
    _ZERO_TIME,
    False,
)


# Same leaf names as the dynamics node's outputs, so a bag of the node and this bag line up.
_TOPIC_NAMES = {
    "linearization": "linearization",
    "minv": "mass_matrix_inverse",
    "torques": "bias_torques",
    "residual": "torque_residual",
}


def output_topics(prefix: str = "/rbd_deriv") -> Dict[str, str]:
    """Topic of each output (keys ``linearization``, ``minv``, ``torques``, ``residual``) under ``prefix``."""
    prefix = prefix.rstrip("/")
    return {key: f"{prefix}/{name}" for key, name in _TOPIC_NAMES.items()}


def _header(store: Any, stamp_ns: int, frame_id: str) -> Any:
    sec, nanosec = ns_to_stamp(int(stamp_ns))
    time_type = store.types["builtin_interfaces/msg/Time"]
    return store.types["std_msgs/msg/Header"](stamp=time_type(sec=sec, nanosec=nanosec), frame_id=frame_id)


def _stamp_fields(stamp_ns: np.ndarray) -> Dict[Tuple[str, ...], np.ndarray]:
    sec, nanosec = ns_to_stamp(stamp_ns)
    return {("header", "stamp", "sec"): sec, ("header", "stamp", "nanosec"): nanosec}


class _Batch:
    """Messages of one topic, all of the first message's shape, encoded in bulk and checked against rosbags."""

    def __init__(self, store: Any, typename: str, build: Callable[[int], Any], values: Dict[Tuple[str, ...], np.ndarray]) -> None:
        first = build(0)
        layout = cdr.fixed_layout(store, first, typename)
        self.rows = cdr.encode_batch(layout, values)
        last = self.rows.shape[0] - 1
        # The bulk encoder must agree byte for byte with rosbags' own serializer; checked at both ends.
        for index in {0, last}:
            expected = bytes(store.serialize_cdr(build(index), typename, little_endian=True))
            if expected != self.rows[index].tobytes():
                raise AssertionError(f"bulk encoding of {typename} differs from rosbags at message {index}")


def write_output_bag(
    path: os.PathLike,
    evaluation: Evaluation,
    model: Any,
    robot_description: Optional[str],
    typestore: Any,
    storage: str = "mcap",
    prefix: str = "/rbd_deriv",
    progress: Optional[Callable[[int, int], None]] = None,
    residual: bool = False,
) -> Dict[str, int]:
    """Write the evaluation's outputs to a new bag at ``path``.

    Args:
        path: Bag folder to create; must not exist.
        evaluation: From :func:`rbd_deriv.replay.evaluate.evaluate`.
        model: The model evaluated (joint names and sizes).
        robot_description: URDF text stored on ``/robot_description``; None leaves it out.
        typestore: From :func:`rbd_deriv.replay.bagio.package_typestore`.
        storage: ``"mcap"`` or ``"sqlite3"``.
        prefix: Namespace of the output topics.
        progress: Called as ``progress(done, total)`` in messages.
        residual: Also write the torque residual topic (messages with recorded efforts only).

    Returns:
        Number of messages written per topic.

    Raises:
        BagError: The path exists, the storage is unknown, or writing fails.
    """
    target = Path(path)
    plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
    if storage not in plugins:
        raise BagError(f"unknown storage {storage!r}; use mcap or sqlite3", target)
    if target.exists():
        raise BagError(f"output bag {target} exists already; choose a new path or delete it", target)
    for typename in (LINEARIZATION_TYPE, MATRIX_TYPE):
        if typename not in typestore.fielddefs:
            raise BagError(f"message type {typename} is not registered (msg/*.msg not found)", target)
    batches = _encode(evaluation, model, typestore, residual)
    topics = output_topics(prefix)
    bag_ns = evaluation.series.bag_ns[evaluation.rows]
    residual_rows = np.flatnonzero(np.any(evaluation.effort_mask, axis=1)) if residual else np.zeros(0, dtype=np.int64)
    has_residual = np.zeros(evaluation.rows.size, dtype=bool)
    has_residual[residual_rows] = True
    residual_index = np.cumsum(has_residual) - 1
    counts: Dict[str, int] = {}
    try:
        writer = Writer(target, version=9, storage_plugin=plugins[storage])
        writer.open()
    except (WriterError, OSError) as err:
        raise BagError(f"cannot create output bag {target}: {err}", target) from err
    try:
        if robot_description is not None:
            description = writer.add_connection(
                "/robot_description", STRING_TYPE, typestore=typestore, offered_qos_profiles=[_LATCHED]
            )
            text = typestore.types[STRING_TYPE](data=robot_description)
            first_time = int(bag_ns[0]) if bag_ns.size else 0
            writer.write(description, first_time, typestore.serialize_cdr(text, STRING_TYPE))
        connections = {
            "linearization": writer.add_connection(topics["linearization"], LINEARIZATION_TYPE, typestore=typestore),
            "minv": writer.add_connection(topics["minv"], MATRIX_TYPE, typestore=typestore),
            "torques": writer.add_connection(topics["torques"], JOINT_STATE_TYPE, typestore=typestore),
        }
        if residual_rows.size:
            connections["residual"] = writer.add_connection(topics["residual"], JOINT_STATE_TYPE, typestore=typestore)
        total = evaluation.rows.size
        every_message = [(connections[key], batches[key].rows) for key in ("linearization", "minv", "torques")]
        write = writer.write
        for i in range(total):
            timestamp = int(bag_ns[i])
            for connection, rows in every_message:
                write(connection, timestamp, rows[i].data)
            if has_residual[i]:
                writer.write(connections["residual"], timestamp, batches["residual"].rows[residual_index[i]].data)
            if progress is not None and (i % 2048 == 0 or i == total - 1):
                progress(i + 1, total)
        counts.update({key: total for key in ("linearization", "minv", "torques")})
        if residual_rows.size:
            counts["residual"] = int(residual_rows.size)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return {topics[key]: count for key, count in counts.items()}


def _encode(evaluation: Evaluation, model: Any, store: Any, residual: bool) -> Dict[str, _Batch]:
    n = evaluation.rows.size
    if n == 0:
        raise BagError("nothing to write: no message was evaluated")
    nq, nv = model.nq, model.nv
    stamp_ns = np.where(
        evaluation.series.stamp_ns[evaluation.rows] != 0,
        evaluation.series.stamp_ns[evaluation.rows],
        evaluation.series.bag_ns[evaluation.rows],
    )
    frame_id = evaluation.series.frame_id
    x = np.hstack([evaluation.q, evaluation.v])
    joint_names = list(model.joint_names)
    actuated = actuated_joint_names(model)
    columns = [model.idx_v[name] for name in actuated]
    q_columns = [model.idx_q[name] for name in actuated]
    stamps = _stamp_fields(stamp_ns)
    batches: Dict[str, _Batch] = {}

    linearization = store.types[LINEARIZATION_TYPE]
    sizes = linearization_sizes(joint_names, nq, nv)
    every = linearization_fields(evaluation.dt, x, evaluation.tau, evaluation.a_matrix, evaluation.b_matrix, evaluation.x_next)
    batches["linearization"] = _Batch(
        store,
        LINEARIZATION_TYPE,
        lambda i: linearization(
            header=_header(store, int(stamp_ns[i]), frame_id),
            **sizes,
            **linearization_fields(evaluation.dt, x[i], evaluation.tau[i], evaluation.a_matrix[i], evaluation.b_matrix[i], evaluation.x_next[i]),
        ),
        {**stamps, **{(name,): value for name, value in every.items() if name != "dt"}},
    )

    matrix = store.types[MATRIX_TYPE]
    batches["minv"] = _Batch(
        store,
        MATRIX_TYPE,
        lambda i: matrix(
            header=_header(store, int(stamp_ns[i]), frame_id),
            **matrix_fields(evaluation.minv[i], MATRIX_NAMES["mass_matrix_inverse"], evaluation.velocity_names),
        ),
        {**stamps, ("data",): matrix_fields(evaluation.minv)["data"]},
    )

    joint_state = store.types[JOINT_STATE_TYPE]
    # Column selection can give a Fortran-ordered copy; rosbags needs contiguous rows.
    position = np.ascontiguousarray(evaluation.q[:, q_columns])
    velocity = np.ascontiguousarray(evaluation.v[:, columns])
    bias = np.ascontiguousarray(evaluation.tau_bias[:, columns])
    batches["torques"] = _Batch(
        store,
        JOINT_STATE_TYPE,
        lambda i: joint_state(
            header=_header(store, int(stamp_ns[i]), frame_id),
            name=actuated,
            position=position[i],
            velocity=velocity[i],
            effort=bias[i],
        ),
        {**stamps, ("position",): position, ("velocity",): velocity, ("effort",): bias},
    )

    with_effort = np.flatnonzero(np.any(evaluation.effort_mask, axis=1))
    if residual and with_effort.size:
        values = np.ascontiguousarray(np.nan_to_num(evaluation.residual[with_effort][:, columns], nan=0.0))
        residual_stamps = stamp_ns[with_effort]
        batches["residual"] = _Batch(
            store,
            JOINT_STATE_TYPE,
            lambda i: joint_state(
                header=_header(store, int(residual_stamps[i]), frame_id),
                name=actuated,
                position=np.zeros(0),
                velocity=np.zeros(0),
                effort=values[i],
            ),
            {**_stamp_fields(residual_stamps), ("effort",): values},
        )
    return batches
