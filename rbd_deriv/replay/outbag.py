"""Writing what an evaluation computes into a new rosbag2, chunk by chunk, readable by ``ros2 bag`` and rosbags.

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

Beside them, what a viewer (Foxglove, RViz with robot_state_publisher) needs to draw the robot, stamped and
written like the outputs:

=================  ==============================  ==============================================================
topic              type                            content
=================  ==============================  ==============================================================
``/joint_states``  ``sensor_msgs/msg/JointState``  position and velocity of the actuated joints as evaluated
``/tf``            ``tf2_msgs/msg/TFMessage``      with ``base_frames`` (a floating base): the base pose the
                                                   evaluation used, from the odometry's frame to the base frame
=================  ==============================  ==============================================================

plus the robot description (``std_msgs/msg/String`` on ``/robot_description``, transient local).
The message types are registered in the bag from the package's ``msg/*.msg`` text. Messages of one topic
all have the shape of the first, so each chunk is serialized in bulk (:mod:`rbd_deriv.replay.cdr`); the
first chunk is checked byte for byte against rosbags' own serializer. mcap bags are written a chunk at a
time (:mod:`rbd_deriv.replay.mcapwriter`), sqlite3 bags through rosbags' writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.rosbag2.metadata import dump_qos_v9

from rbd_deriv.joint_state_map import velocity_names
from rbd_deriv.messages import MATRIX_NAMES, linearization_fields, linearization_sizes, matrix_fields, ns_to_stamp
from rbd_deriv.replay import cdr
from rbd_deriv.replay.bagio import JOINT_STATE_TYPE, PACKAGE, STRING_TYPE
from rbd_deriv.replay.evaluate import Chunk
from rbd_deriv.replay.mcapwriter import McapBagWriter
from rbd_deriv.replay.storage import BagError

__all__ = ["LINEARIZATION_TYPE", "MATRIX_TYPE", "TF_TYPE", "VIEWER_TOPICS", "output_topics", "OutputBag"]

LINEARIZATION_TYPE = f"{PACKAGE}/msg/Linearization"
MATRIX_TYPE = f"{PACKAGE}/msg/Matrix"
TF_TYPE = "tf2_msgs/msg/TFMessage"
#: The topics a viewer reads the robot's state from (not under the outputs' prefix).
VIEWER_TOPICS = {"joint_states": "/joint_states", "tf": "/tf"}

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

_STAMP = (("header", "stamp", "sec"), ("header", "stamp", "nanosec"))


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
    return {_STAMP[0]: sec, _STAMP[1]: nanosec}


class _McapSink:
    """Output through :class:`~rbd_deriv.replay.mcapwriter.McapBagWriter`: one chunk per block."""

    def __init__(self, path: Path, typestore: Any) -> None:
        self.writer = McapBagWriter(path)
        self.typestore = typestore

    def add(self, topic: str, msgtype: str, latched: bool = False) -> int:
        return self.writer.add_connection(topic, msgtype, self.typestore, dump_qos_v9([_LATCHED]) if latched else ())

    def write(self, parts: Sequence[Tuple[int, np.ndarray]], times: np.ndarray) -> None:
        self.writer.write_block(parts, times)

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


class _RosbagsSink:
    """Output through rosbags' Writer (sqlite3), one message at a time."""

    def __init__(self, path: Path, typestore: Any, storage: str) -> None:
        plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
        self.writer = Writer(path, version=9, storage_plugin=plugins[storage])
        self.writer.open()
        self.typestore = typestore
        self.connections: List[Any] = []

    def add(self, topic: str, msgtype: str, latched: bool = False) -> int:
        self.connections.append(self.writer.add_connection(
            topic, msgtype, typestore=self.typestore, offered_qos_profiles=[_LATCHED] if latched else ()))
        return len(self.connections)

    def write(self, parts: Sequence[Tuple[int, np.ndarray]], times: np.ndarray) -> None:
        write = self.writer.write
        every = [(self.connections[channel - 1], rows) for channel, rows in parts]
        for i, timestamp in enumerate(np.asarray(times).tolist()):
            for connection, rows in every:
                write(connection, timestamp, rows[i].data)

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


class _Topic:
    """One output topic: its channel, the layout of its messages, and how many were written."""

    def __init__(self, store: Any, typename: str, channel: int) -> None:
        self.store = store
        self.typename = typename
        self.channel = channel
        self.layout: Optional[cdr.FixedLayout] = None
        self.count = 0

    def encode(self, message: Any, last: Any, values: Dict[Tuple[str, ...], np.ndarray]) -> np.ndarray:
        """Rows [K, size] of serialized messages; ``message`` and ``last`` are the first and last as rosbags
        messages, used to build the layout (and check it) at the first chunk."""
        checking = self.layout is None
        if checking:
            self.layout = cdr.fixed_layout(self.store, message, self.typename)
        rows = cdr.encode_batch(self.layout, values)
        if checking:
            # The bulk encoder must agree byte for byte with rosbags' own serializer; checked at both ends.
            for index, reference in ((0, message), (rows.shape[0] - 1, last)):
                expected = bytes(self.store.serialize_cdr(reference, self.typename, little_endian=True))
                if expected != rows[index].tobytes():
                    raise AssertionError(f"bulk encoding of {self.typename} differs from rosbags at message {index}")
        return rows


class OutputBag:
    """A new bag receiving the evaluation's outputs chunk by chunk (call it with each :class:`Chunk`).

    Args:
        path: Bag folder to create; must not exist.
        model: The model evaluated (joint names and sizes).
        typestore: From :func:`rbd_deriv.replay.bagio.package_typestore`.
        dt: Linearization step [s].
        frame_id: Header frame of the outputs (that of the joint_states messages).
        robot_description: URDF text stored on ``/robot_description``; None leaves it out.
        storage: ``"mcap"`` or ``"sqlite3"``.
        prefix: Namespace of the output topics.
        residual: Also write the torque residual topic (messages with recorded efforts only).
        base_frames: (parent, child) frames of the base pose on ``/tf``, e.g. the odometry's frame and child
            frame; a floating-base model only (the pose is the free flyer's q); None: no ``/tf``.

    Raises:
        BagError: The path exists, the storage is unknown, or the bag cannot be created.
    """

    def __init__(self, path: os.PathLike, model: Any, typestore: Any, dt: float, frame_id: str = "",
                 robot_description: Optional[str] = None, storage: str = "mcap", prefix: str = "/rbd_deriv",
                 residual: bool = False, base_frames: Optional[Tuple[str, str]] = None) -> None:
        self.path = Path(path)
        if storage not in ("mcap", "sqlite3"):
            raise BagError(f"unknown storage {storage!r}; use mcap or sqlite3", self.path)
        if self.path.exists():
            raise BagError(f"output bag {self.path} exists already; choose a new path or delete it", self.path)
        for typename in (LINEARIZATION_TYPE, MATRIX_TYPE):
            if typename not in typestore.fielddefs:
                raise BagError(f"message type {typename} is not registered (msg/*.msg not found)", self.path)
        if base_frames is not None and not model.has_floating_base:
            raise BagError("base frames for /tf were given for a fixed-base robot", self.path)
        self.model = model
        self.store = typestore
        self.dt = dt
        self.frame_id = frame_id
        self.description = robot_description
        self.topics = output_topics(prefix)
        self.joint_names = list(model.joint_names)
        self.actuated = list(model.actuated_joint_names)
        self.columns = np.array([model.idx_v[name] for name in self.actuated], dtype=np.int64)
        self.q_columns = np.array([model.idx_q[name] for name in self.actuated], dtype=np.int64)
        self.velocity_names = velocity_names(model)
        self.sizes = linearization_sizes(self.joint_names, model.nq, model.nv)
        try:
            self.sink = _McapSink(self.path, typestore) if storage == "mcap" else _RosbagsSink(self.path, typestore, storage)
        except (WriterError, OSError) as err:
            raise BagError(f"cannot create output bag {self.path}: {err}", self.path) from err
        add = self.sink.add
        self.outputs: Dict[str, _Topic] = {
            "linearization": _Topic(typestore, LINEARIZATION_TYPE, add(self.topics["linearization"], LINEARIZATION_TYPE)),
            "minv": _Topic(typestore, MATRIX_TYPE, add(self.topics["minv"], MATRIX_TYPE)),
            "torques": _Topic(typestore, JOINT_STATE_TYPE, add(self.topics["torques"], JOINT_STATE_TYPE)),
            "joint_states": _Topic(typestore, JOINT_STATE_TYPE, add(VIEWER_TOPICS["joint_states"], JOINT_STATE_TYPE)),
        }
        self.base_frames = base_frames
        if base_frames is not None:
            self.outputs["tf"] = _Topic(typestore, TF_TYPE, add(VIEWER_TOPICS["tf"], TF_TYPE))
        self.residual = residual
        self._residual_topic: Optional[_Topic] = None
        self._description_written = robot_description is None

    def __call__(self, chunk: Chunk) -> None:
        """Write the outputs of one chunk."""
        n = len(chunk)
        if n == 0:
            return
        if not self._description_written:
            channel = self.sink.add("/robot_description", STRING_TYPE, latched=True)
            text = self.store.serialize_cdr(self.store.types[STRING_TYPE](data=self.description), STRING_TYPE)
            self.sink.write([(channel, np.frombuffer(bytes(text), dtype=np.uint8)[None, :])], chunk.bag_ns[:1])
            self._description_written = True
        blocks = self._encode(chunk)
        self.sink.write([(self.outputs[key].channel, blocks[key]) for key in blocks], chunk.bag_ns)
        for key in blocks:
            self.outputs[key].count += n
        if self.residual:
            self._write_residual(chunk)

    def _messages(self, chunk: Chunk, rows: Sequence[int]) -> Dict[str, List[Any]]:
        """rosbags messages of the outputs at ``rows`` of the chunk (the layout templates and their check)."""
        types = self.store.types
        found: Dict[str, List[Any]] = {key: [] for key in self.outputs}
        x = np.hstack([chunk.q, chunk.v])
        for i in rows:
            header = _header(self.store, int(chunk.header_ns[i]), self.frame_id)
            fields = linearization_fields(self.dt, x[i], chunk.tau[i], chunk.a_matrix[i], chunk.b_matrix[i],
                                          chunk.x_next[i])
            found["linearization"].append(types[LINEARIZATION_TYPE](header=header, **self.sizes, **fields))
            found["minv"].append(types[MATRIX_TYPE](header=header, **matrix_fields(
                chunk.minv[i], MATRIX_NAMES["mass_matrix_inverse"], self.velocity_names)))
            found["torques"].append(types[JOINT_STATE_TYPE](
                header=header, name=self.actuated, position=np.ascontiguousarray(chunk.q[i, self.q_columns]),
                velocity=np.ascontiguousarray(chunk.v[i, self.columns]),
                effort=np.ascontiguousarray(chunk.tau_bias[i, self.columns])))
            found["joint_states"].append(types[JOINT_STATE_TYPE](
                header=header, name=self.actuated, position=np.ascontiguousarray(chunk.q[i, self.q_columns]),
                velocity=np.ascontiguousarray(chunk.v[i, self.columns]), effort=np.zeros(0)))
            if self.base_frames is not None:
                found["tf"].append(self._transform(chunk, i))
        return found

    def _transform(self, chunk: Chunk, i: int) -> Any:
        """The TFMessage of row ``i``: the free flyer's q, position then quaternion (x, y, z, w), as the pose of
        the child frame in the parent frame."""
        types = self.store.types
        parent, child = self.base_frames
        q = chunk.q[i]
        translation = types["geometry_msgs/msg/Vector3"](x=q[0], y=q[1], z=q[2])
        rotation = types["geometry_msgs/msg/Quaternion"](x=q[3], y=q[4], z=q[5], w=q[6])
        stamped = types["geometry_msgs/msg/TransformStamped"](
            header=_header(self.store, int(chunk.header_ns[i]), parent), child_frame_id=child,
            transform=types["geometry_msgs/msg/Transform"](translation=translation, rotation=rotation))
        return types[TF_TYPE](transforms=[stamped])

    def _encode(self, chunk: Chunk) -> Dict[str, np.ndarray]:
        n = len(chunk)
        first = self.outputs["linearization"].layout is None
        templates = self._messages(chunk, [0, n - 1]) if first else {key: [None, None] for key in self.outputs}
        stamps = _stamp_fields(chunk.header_ns)
        x = np.hstack([chunk.q, chunk.v])
        fields = linearization_fields(self.dt, x, chunk.tau, chunk.a_matrix, chunk.b_matrix, chunk.x_next)
        numeric = {(name,): fields[name] for name in ("x", "u", "a", "b", "x_next")}
        # Column selection can give a Fortran-ordered copy; rows must be contiguous.
        position = np.ascontiguousarray(chunk.q[:, self.q_columns])
        velocity = np.ascontiguousarray(chunk.v[:, self.columns])
        bias = np.ascontiguousarray(chunk.tau_bias[:, self.columns])
        blocks = {
            "linearization": self.outputs["linearization"].encode(*templates["linearization"], {**stamps, **numeric}),
            "minv": self.outputs["minv"].encode(*templates["minv"], {**stamps, ("data",): matrix_fields(chunk.minv)["data"]}),
            "torques": self.outputs["torques"].encode(
                *templates["torques"], {**stamps, ("position",): position, ("velocity",): velocity, ("effort",): bias}),
            "joint_states": self.outputs["joint_states"].encode(
                *templates["joint_states"], {**stamps, ("position",): position, ("velocity",): velocity}),
        }
        if self.base_frames is not None:
            transform = ("transforms", "0")
            sec, nanosec = ns_to_stamp(chunk.header_ns)
            values = {transform + _STAMP[0]: sec, transform + _STAMP[1]: nanosec}
            for part, names, columns in (("translation", "xyz", range(3)), ("rotation", "xyzw", range(3, 7))):
                for name, column in zip(names, columns):
                    values[transform + ("transform", part, name)] = chunk.q[:, column]
            blocks["tf"] = self.outputs["tf"].encode(*templates["tf"], values)
        return blocks

    def _write_residual(self, chunk: Chunk) -> None:
        with_effort = np.flatnonzero(np.any(chunk.effort_mask, axis=1))
        if with_effort.size == 0:
            return
        values = np.ascontiguousarray(np.nan_to_num(chunk.residual[with_effort][:, self.columns], nan=0.0))
        stamps = chunk.header_ns[with_effort]
        topic = self._residual_topic
        templates: List[Any] = [None, None]
        if topic is None:
            channel = self.sink.add(self.topics["residual"], JOINT_STATE_TYPE)
            topic = self._residual_topic = _Topic(self.store, JOINT_STATE_TYPE, channel)
            message = self.store.types[JOINT_STATE_TYPE]
            templates = [message(header=_header(self.store, int(stamps[i]), self.frame_id), name=self.actuated,
                                 position=np.zeros(0), velocity=np.zeros(0), effort=values[i])
                         for i in (0, values.shape[0] - 1)]
        rows = topic.encode(*templates, {**_stamp_fields(stamps), ("effort",): values})
        self.sink.write([(topic.channel, rows)], chunk.bag_ns[with_effort])
        topic.count += int(with_effort.size)

    def close(self) -> Dict[str, int]:
        """Finish the bag (index, metadata.yaml); returns the number of messages written per topic."""
        try:
            self.sink.close()
        except (WriterError, OSError) as err:
            raise BagError(f"cannot finish output bag {self.path}: {err}", self.path) from err
        names = {**self.topics, **VIEWER_TOPICS}
        counts = {names[key]: topic.count for key, topic in self.outputs.items()}
        if self._residual_topic is not None:
            counts[self.topics["residual"]] = self._residual_topic.count
        return counts

    def abort(self) -> None:
        """Stop without finishing the bag (after an error): what was written stays, without an index."""
        self.sink.abort()
