"""Decoding a bag's messages into arrays, batch by batch: joint states, odometry, the robot description.

The type store knows every standard ROS 2 message plus this package's own messages, registered from the
``msg/*.msg`` text that ships with the package, so the output bag can be read by any rosbag2 tool. The
bytes come from :mod:`rbd_deriv.replay.storage`; messages of one shape are decoded together
(:mod:`rbd_deriv.replay.cdr`), the rare others one by one through rosbags.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from rosbags.serde import SerdeError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.base import TypesysError

from rbd_deriv.core.urdf import package_data_folders
from rbd_deriv.replay import cdr
from rbd_deriv.replay.series import JointStateSeries, OdometrySeries, Rejections, StateBatch
from rbd_deriv.replay.storage import BagError, BagSource, RawBatch, TopicInfo

__all__ = [
    "BagError",
    "JOINT_STATE_TYPE",
    "ODOMETRY_TYPE",
    "STRING_TYPE",
    "PACKAGE",
    "find_msg_dir",
    "package_typestore",
    "require_topic",
    "read_robot_description",
    "JointStateDecoder",
    "OdometryDecoder",
    "read_joint_states",
    "read_odometry",
    "read_odometry_frames",
]

PACKAGE = "rbd_deriv"
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
STRING_TYPE = "std_msgs/msg/String"

# Distinct message shapes (joint name lists, frame ids) decoded in bulk; rarer shapes go one by one.
_MAX_LAYOUTS = 16

# No joint moves this far [rad or m] or this fast [rad/s or m/s], no actuator pushes this hard [N m or N]:
# such values are bytes overwritten in the file (garbage that keeps a message's layout), not data.
_PLAUSIBLE_STATE = 1e6
_PLAUSIBLE_EFFORT = 1e9


def find_msg_dir() -> Path:
    """Folder holding this package's ``*.msg`` files.

    Looks in ``msg/`` of each of :func:`rbd_deriv.core.urdf.package_data_folders` (a source checkout, the
    install space or prefix the package sits in, a sourced workspace, the Python prefix), then in
    ``share/rbd_deriv/msg`` of every ``AMENT_PREFIX_PATH`` entry.

    Raises:
        BagError: No such folder exists.
    """
    candidates = [folder / "msg" for folder in package_data_folders()]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / "msg")
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.glob("*.msg")):
            return candidate
    raise BagError(
        "cannot find the rbd_deriv msg/*.msg files (looked in " + ", ".join(str(c) for c in candidates) + ")"
    )


def package_typestore(msg_dir: Optional[Path] = None) -> Any:
    """A rosbags type store with the ROS 2 Kilted messages and this package's messages.

    Args:
        msg_dir: Folder of ``*.msg`` files registered as ``rbd_deriv/msg/<Name>``; found with
            :func:`find_msg_dir` when None.
    """
    store = get_typestore(Stores.ROS2_KILTED)
    folder = msg_dir if msg_dir is not None else find_msg_dir()
    types: Dict[str, Any] = {}
    for path in sorted(Path(folder).glob("*.msg")):
        name = f"{PACKAGE}/msg/{path.stem}"
        try:
            types.update(get_types_from_msg(path.read_text(), name))
        except (TypesysError, ValueError) as err:
            raise BagError(f"cannot parse message definition {path}: {err}") from err
    store.register(types)
    return store


def require_topic(source: BagSource, topic: str, msgtype: str) -> TopicInfo:
    """The topic ``topic``, checked to carry ``msgtype``.

    Raises:
        BagError: The topic is absent, or recorded with another type; the message lists what the bag has.
    """
    info = source.topics.get(topic)
    if info is None:
        available = ", ".join(f"{t.name} [{t.msgtype}]" for t in source.topics.values()) or "none"
        raise BagError(f"bag has no topic {topic!r}; topics in the bag: {available}", source.path, topic)
    if info.msgtype and info.msgtype != msgtype:
        raise BagError(f"topic {topic!r} has type {info.msgtype}, expected {msgtype}", source.path, topic)
    return info


def read_robot_description(source: BagSource, typestore: Any, topic: str = "/robot_description") -> str:
    """The first non-empty ``std_msgs/String`` on ``topic``: the URDF as robot_state_publisher sends it.

    Raises:
        BagError: No such topic or no readable message on it.
    """
    require_topic(source, topic, STRING_TYPE)
    problem = "no message"
    for batch in source.read([topic]):
        for i in range(len(batch)):
            try:
                text = typestore.deserialize_cdr(batch.message(i), STRING_TYPE).data
            except Exception as err:  # noqa: BLE001 - garbage bytes raise anything from SerdeError to IndexError
                problem = f"a corrupt message ({type(err).__name__}: {err})"
                continue
            if text.strip():
                return text
            problem = "only empty messages"
    raise BagError(f"topic {topic!r} has no usable robot description ({problem})", source.path, topic)


def _stamp_ns(sec: np.ndarray, nanosec: np.ndarray) -> np.ndarray:
    return sec.astype(np.int64).ravel() * 1_000_000_000 + nanosec.astype(np.int64).ravel()


class JointStateDecoder:
    """Decodes batches of ``sensor_msgs/JointState`` into the columns of the model's joints.

    A message is marked rejected, not dropped, when it cannot be decoded, lacks a model joint, has arrays
    whose lengths differ from its names, has no position or velocity, names a joint twice, or holds
    NaN/inf in the model joints' values. Messages may list joints in any order and extra joints (ignored).

    Args:
        typestore: From :func:`package_typestore`.
        topic: The topic (for messages).
        joint_names: Model joints (the columns), in model order.
        rejections: Where rejections are counted.

    Attributes:
        count: Messages decoded so far.
        ignored: Joint names met that the model does not have.
        seen: Model joints named by at least one message.
        frame_id: Header frame of the first decoded message, None before.
    """

    def __init__(self, typestore: Any, topic: str, joint_names: Sequence[str], rejections: Rejections) -> None:
        self.typestore = typestore
        self.topic = topic
        self.joint_names = list(joint_names)
        self.column = {name: j for j, name in enumerate(self.joint_names)}
        self.rejections = rejections
        self.count = 0
        self.ignored: Set[str] = set()
        self.seen: Set[str] = set()
        self.frame_id: Optional[str] = None
        self._layouts: List[Tuple[Any, Any, List[Tuple[str, ...]]]] = []
        self._refused_shapes = 0

    def decode(self, raw: RawBatch) -> StateBatch:
        """The messages of ``raw`` as arrays; their status says which are usable."""
        k = len(raw)
        joints = len(self.joint_names)
        states = StateBatch(
            index=self.count + np.arange(k, dtype=np.int64),
            stamp_ns=np.zeros(k, dtype=np.int64),
            bag_ns=raw.bag_ns.astype(np.int64),
            position=np.full((k, joints), np.nan),
            velocity=np.full((k, joints), np.nan),
            effort=np.full((k, joints), np.nan),
            status=np.zeros(k, dtype=np.int16),
        )
        self.count += k
        pending = np.arange(k)
        for layout, template, paths in self._layouts:
            pending = self._decode_layout(states, raw, pending, layout, template, paths)
        while pending.size and len(self._layouts) < _MAX_LAYOUTS and self._refused_shapes < _MAX_LAYOUTS:
            first = int(pending[0])
            try:
                message = raw.message(first)
                layout = cdr.layout_of_raw(self.typestore, message, JOINT_STATE_TYPE)
                template = self.typestore.deserialize_cdr(message, JOINT_STATE_TYPE)
            except (ValueError, SerdeError, IndexError, AssertionError, TypeError, KeyError):
                # Left to the one-by-one decoder, which names the problem.
                self._refused_shapes += 1
                break
            paths = [("header", "stamp", "sec"), ("header", "stamp", "nanosec")]
            paths += [(p,) for p in ("position", "velocity", "effort") if len(getattr(template, p))]
            self._layouts.append((layout, template, paths))
            before = pending.size
            pending = self._decode_layout(states, raw, pending, layout, template, paths)
            if pending.size == before:  # cannot happen for the message the layout was made from
                break
        for row in pending:
            self._decode_one(states, raw, int(row))
        self._reject_non_finite(states)
        return states

    def _decode_layout(self, states: StateBatch, raw: RawBatch, pending: np.ndarray, layout: Any, template: Any,
                       paths: List[Tuple[str, ...]]) -> np.ndarray:
        rows = pending[raw.size[pending] == layout.size]
        if rows.size == 0:
            return pending
        matched, values = cdr.decode_block(layout, raw.block(rows, layout.size), paths)
        rows = rows[matched]
        if rows.size == 0:
            return pending
        if self.frame_id is None:
            self.frame_id = template.header.frame_id
        present = [p[0] for p in paths[2:]]
        self._fill(
            states,
            rows,
            list(template.name),
            _stamp_ns(values[paths[0]], values[paths[1]]),
            *(values[(p,)] if p in present else None for p in ("position", "velocity", "effort")),
        )
        return np.setdiff1d(pending, rows, assume_unique=True)

    def _decode_one(self, states: StateBatch, raw: RawBatch, row: int) -> None:
        rows = np.array([row])
        try:
            message = self.typestore.deserialize_cdr(raw.message(row), JOINT_STATE_TYPE)
        except Exception as err:  # noqa: BLE001 - garbage bytes raise anything from SerdeError to IndexError
            self.rejections.reject(states.status, rows, "corrupt_message",
                                   f"message {states.index[row]}: {type(err).__name__}: {err}")
            return
        if self.frame_id is None:
            self.frame_id = message.header.frame_id

        def column(values: Any) -> Optional[np.ndarray]:
            array = np.asarray(values, dtype=np.float64)
            return array.reshape(1, -1) if array.size else None

        stamp = np.array([message.header.stamp.sec * 1_000_000_000 + message.header.stamp.nanosec], dtype=np.int64)
        self._fill(states, rows, list(message.name), stamp, column(message.position), column(message.velocity),
                   column(message.effort))

    def _fill(self, states: StateBatch, rows: np.ndarray, names: List[str], stamp_ns: np.ndarray,
              position: Optional[np.ndarray], velocity: Optional[np.ndarray], effort: Optional[np.ndarray]) -> None:
        """Store messages ``rows`` that all list joints ``names``; arrays are [len(rows), n] or None if empty."""
        states.stamp_ns[rows] = stamp_ns
        first = states.index[rows[0]]
        reject = self.rejections.reject
        present = [name for name in names if name in self.column]
        self.ignored.update(name for name in names if name not in self.column)
        width = len(names)
        for label, array in (("position", position), ("velocity", velocity), ("effort", effort)):
            if array is not None and array.shape[1] != width:
                reject(states.status, rows, "length_mismatch",
                       f"message {first}: {width} names but {array.shape[1]} {label} values")
                return
        self.seen.update(present)
        if position is None or velocity is None:
            missing = "position" if position is None else "velocity"
            reject(states.status, rows, f"missing_{missing}", f"message {first} has an empty {missing} array")
            return
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if names.count(name) > 1})
            reject(states.status, rows, "duplicate_joint", f"message {first} names {repeated} twice")
            return
        lacking = [name for name in self.joint_names if name not in names]
        if lacking:
            reject(states.status, rows, "incomplete", f"message {first} lacks model joints {lacking} (it lists {names})")
            return
        source = [names.index(name) for name in self.joint_names]
        states.position[rows] = position[:, source]
        states.velocity[rows] = velocity[:, source]
        if effort is not None:
            states.effort[rows] = effort[:, source]

    def _reject_non_finite(self, states: StateBatch) -> None:
        usable = states.usable
        if not usable.any():
            return
        bad_state = usable & ~np.all(np.isfinite(states.position) & np.isfinite(states.velocity), axis=1)
        if bad_state.any():
            self.rejections.reject(states.status, bad_state, "non_finite",
                                   f"message {states.index[np.argmax(bad_state)]} has NaN or inf in position or velocity")
        usable = states.usable
        def beyond(values: np.ndarray, bound: float) -> np.ndarray:
            # NaN and inf are reasons of their own (below, and in the check above).
            return np.any(np.where(np.isfinite(values), np.abs(values), 0.0) > bound, axis=1)

        wild = usable & (beyond(states.position, _PLAUSIBLE_STATE) | beyond(states.velocity, _PLAUSIBLE_STATE)
                         | beyond(states.effort, _PLAUSIBLE_EFFORT))
        if wild.any():
            self.rejections.reject(states.status, wild, "implausible",
                                   f"message {states.index[np.argmax(wild)]} holds values beyond "
                                   f"{_PLAUSIBLE_STATE:g} (position, velocity) or {_PLAUSIBLE_EFFORT:g} (effort)")
        usable = states.usable
        # An effort array that is present must be finite on every model joint; an absent one is fine.
        finite = np.isfinite(states.effort)
        partial = usable & np.any(finite, axis=1) & ~np.all(finite, axis=1)
        infinite = usable & np.any(np.isinf(states.effort), axis=1)
        bad_effort = partial | infinite
        if bad_effort.any():
            self.rejections.reject(states.status, bad_effort, "non_finite_effort",
                                   f"message {states.index[np.argmax(bad_effort)]} has NaN or inf in effort")

    def check_names(self, path: Optional[os.PathLike] = None) -> None:
        """After decoding everything: fail when the messages and the model have no joint in common, or
        when model joints never appear in any message (the messages are then all ``incomplete``).

        Raises:
            BagError: Naming the joints concerned.
        """
        if not self.seen and self.ignored:
            raise BagError(
                f"joint names on {self.topic!r} do not match the URDF: the messages name "
                f"{sorted(self.ignored)}, the model has {self.joint_names}", path, self.topic)
        never = [name for name in self.joint_names if name not in self.seen]
        if never and self.count:
            raise BagError(
                f"URDF joints {never} appear in no message on {self.topic!r} (messages name "
                f"{sorted(self.seen | self.ignored)}); record them, or give a URDF without them", path, self.topic)


def read_joint_states(source: BagSource, typestore: Any, topic: str, joint_names: Sequence[str]) -> JointStateSeries:
    """Every ``sensor_msgs/JointState`` on ``topic`` in memory, columns in the order of ``joint_names``.

    For tests and short recordings: the evaluation decodes batch by batch instead.

    Raises:
        BagError: Topic absent or without messages, or names that do not match the model.
    """
    require_topic(source, topic, JOINT_STATE_TYPE)
    rejections = Rejections()
    decoder = JointStateDecoder(typestore, topic, joint_names, rejections)
    batches = [decoder.decode(raw) for raw in source.read([topic])]
    if decoder.count == 0:
        raise BagError(f"topic {topic!r} has no messages", source.path, topic)
    decoder.check_names(source.path)
    return JointStateSeries(topic, list(joint_names), StateBatch.concatenate(batches, len(joint_names)), rejections,
                            sorted(decoder.ignored), decoder.frame_id or "")


_ODOMETRY_PATHS = {
    "sec": ("header", "stamp", "sec"),
    "nanosec": ("header", "stamp", "nanosec"),
    "px": ("pose", "pose", "position", "x"),
    "py": ("pose", "pose", "position", "y"),
    "pz": ("pose", "pose", "position", "z"),
    "qx": ("pose", "pose", "orientation", "x"),
    "qy": ("pose", "pose", "orientation", "y"),
    "qz": ("pose", "pose", "orientation", "z"),
    "qw": ("pose", "pose", "orientation", "w"),
    "vx": ("twist", "twist", "linear", "x"),
    "vy": ("twist", "twist", "linear", "y"),
    "vz": ("twist", "twist", "linear", "z"),
    "wx": ("twist", "twist", "angular", "x"),
    "wy": ("twist", "twist", "angular", "y"),
    "wz": ("twist", "twist", "angular", "z"),
}


class OdometryDecoder:
    """Decodes batches of ``nav_msgs/Odometry``; corrupt messages are left out and counted."""

    def __init__(self, typestore: Any) -> None:
        self.typestore = typestore
        self.layout: Optional[Any] = None
        self.child_frame_id: Optional[str] = None
        self.corrupt = 0

    def decode(self, raw: RawBatch) -> OdometrySeries:
        """The messages of ``raw`` in file order (not sorted)."""
        columns: Dict[str, List[np.ndarray]] = {key: [] for key in _ODOMETRY_PATHS}
        pending = np.arange(len(raw))
        if self.layout is None and len(raw):
            try:
                self.layout = cdr.layout_of_raw(self.typestore, raw.message(0), ODOMETRY_TYPE)
                self.child_frame_id = self.typestore.deserialize_cdr(raw.message(0), ODOMETRY_TYPE).child_frame_id
            except (ValueError, SerdeError, IndexError, AssertionError, TypeError, KeyError):
                self.layout = None
        if self.layout is not None:
            rows = pending[raw.size == self.layout.size]
            matched, values = cdr.decode_block(self.layout, raw.block(rows, self.layout.size), list(_ODOMETRY_PATHS.values()))
            for key, path in _ODOMETRY_PATHS.items():
                columns[key].append(values[path].ravel())
            pending = np.setdiff1d(pending, rows[matched], assume_unique=True)
        for row in pending:
            try:
                message = self.typestore.deserialize_cdr(raw.message(int(row)), ODOMETRY_TYPE)
            except Exception:  # noqa: BLE001 - garbage bytes raise anything; the message is skipped
                self.corrupt += 1
                continue
            self.child_frame_id = self.child_frame_id or message.child_frame_id
            for key, path in _ODOMETRY_PATHS.items():
                value = message
                for name in path:
                    value = getattr(value, name)
                columns[key].append(np.array([value], dtype=np.float64))
        flat = {key: np.concatenate(parts) if parts else np.zeros(0) for key, parts in columns.items()}

        def stack(*keys: str) -> np.ndarray:
            return np.column_stack([flat[k] for k in keys]) if flat["sec"].size else np.zeros((0, len(keys)))

        return OdometrySeries(
            stamp_ns=_stamp_ns(flat["sec"], flat["nanosec"]),
            position=stack("px", "py", "pz"),
            orientation=stack("qx", "qy", "qz", "qw"),
            linear=stack("vx", "vy", "vz"),
            angular=stack("wx", "wy", "wz"),
            child_frame_id=self.child_frame_id,
        )


def read_odometry_frames(source: BagSource, typestore: Any, topic: str) -> Tuple[str, str]:
    """(``header.frame_id``, ``child_frame_id``) of the first readable ``nav_msgs/Odometry`` on ``topic``: the
    frames of the base pose it carries (either may be empty, as the recorder wrote it).

    Raises:
        BagError: No readable message on the topic.
    """
    for batch in source.read([topic]):
        for i in range(len(batch)):
            try:
                message = typestore.deserialize_cdr(batch.message(i), ODOMETRY_TYPE)
            except Exception:  # noqa: BLE001 - garbage bytes raise anything; the next message may be good
                continue
            return message.header.frame_id, message.child_frame_id
    raise BagError(f"topic {topic!r} has no readable odometry message", source.path, topic)


def read_odometry(source: BagSource, typestore: Any, topic: str) -> OdometrySeries:
    """Every ``nav_msgs/Odometry`` on ``topic``, sorted by stamp; corrupt messages are left out.

    Raises:
        BagError: Topic absent or without a readable message.
    """
    require_topic(source, topic, ODOMETRY_TYPE)
    decoder = OdometryDecoder(typestore)
    series = OdometrySeries.empty()
    for raw in source.read([topic]):
        series = series.append(decoder.decode(raw))
    if len(series) == 0:
        raise BagError(f"no readable message on {topic!r}", source.path, topic)
    return series.sorted()
