"""Reading rosbag2 recordings (mcap and sqlite3) into arrays, through ``rosbags``.

The type store knows every standard ROS 2 message plus this package's own messages, registered from the
``msg/*.msg`` text that ships with the package, so the output bag can be read by any rosbag2 tool.
"""

from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from rosbags.rosbag2 import Reader, ReaderError
from rosbags.serde import SerdeError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.base import TypesysError

from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.replay import cdr
from rbd_deriv.replay.series import JointStateSeries, OdometrySeries, Rejections

__all__ = [
    "BagError",
    "JOINT_STATE_TYPE",
    "ODOMETRY_TYPE",
    "STRING_TYPE",
    "PACKAGE",
    "find_msg_dir",
    "package_typestore",
    "open_bag",
    "topic_connections",
    "read_robot_description",
    "read_joint_states",
    "read_odometry",
]

PACKAGE = "rbd_deriv"
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
STRING_TYPE = "std_msgs/msg/String"

# Distinct message shapes (joint name lists, frame ids) decoded in bulk; rarer shapes go one by one.
_MAX_LAYOUTS = 16

Progress = Optional[Callable[[int], None]]


class BagError(RbdDerivError):
    """A bag cannot be used: missing, corrupt, or without the topic asked for.

    Attributes:
        path: The bag path.
        topic: The topic concerned, or None.
    """

    def __init__(self, message: str, path: Optional[os.PathLike] = None, topic: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
        self.topic = topic


def find_msg_dir() -> Path:
    """Folder holding this package's ``*.msg`` files.

    Looks in the source tree next to the Python package (checkout and editable install), then in
    ``share/rbd_deriv/msg`` of the Python prefix and of every ``AMENT_PREFIX_PATH`` entry (pip and colcon
    installs).

    Raises:
        BagError: No such folder exists.
    """
    here = Path(__file__).resolve().parent.parent  # rbd_deriv/
    candidates = [here.parent / "msg", Path(sys.prefix) / "share" / PACKAGE / "msg"]
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


@contextmanager
def open_bag(path: os.PathLike) -> Iterator[Reader]:
    """Open a rosbag2 recording (a folder with metadata.yaml, or a single .mcap/.db3 file).

    Raises:
        BagError: The path does not exist or is not a readable bag.
    """
    bag = Path(path)
    if not bag.exists():
        raise BagError(f"bag not found: {bag}", bag)
    try:
        reader = Reader(bag)
        reader.open()
    except (ReaderError, FileNotFoundError, OSError, ValueError, KeyError) as err:
        raise BagError(f"cannot open bag {bag}: {err}", bag) from err
    except Exception as err:  # noqa: BLE001 - storage plugins raise their own exception types on corrupt files
        raise BagError(f"cannot open bag {bag} (corrupt?): {type(err).__name__}: {err}", bag) from err
    try:
        yield reader
    finally:
        reader.close()


def topic_connections(reader: Reader, topic: str, msgtype: str) -> List[Any]:
    """The connections recording ``topic`` with type ``msgtype``.

    Raises:
        BagError: The topic is absent, or recorded with another type; the message lists what the bag has.
    """
    found = [c for c in reader.connections if c.topic == topic]
    if not found:
        available = ", ".join(f"{c.topic} [{c.msgtype}]" for c in reader.connections) or "none"
        raise BagError(f"bag has no topic {topic!r}; topics in the bag: {available}", reader.path, topic)
    typed = [c for c in found if c.msgtype == msgtype]
    if not typed:
        raise BagError(
            f"topic {topic!r} has type {found[0].msgtype}, expected {msgtype}", reader.path, topic
        )
    return typed


def read_robot_description(reader: Reader, typestore: Any, topic: str = "/robot_description") -> str:
    """The first ``std_msgs/String`` published on ``topic``: the URDF as robot_state_publisher sends it.

    Raises:
        BagError: No such topic or no readable message on it.
    """
    connections = topic_connections(reader, topic, STRING_TYPE)
    for _, _, raw in reader.messages(connections):
        try:
            text = typestore.deserialize_cdr(raw, STRING_TYPE).data
        except (SerdeError, ValueError, IndexError) as err:
            raise BagError(f"corrupt message on {topic}: {err}", reader.path, topic) from err
        if text.strip():
            return text
    raise BagError(f"topic {topic!r} has no non-empty robot description", reader.path, topic)


def _read_raw(reader: Reader, connections: Sequence[Any], progress: Progress) -> Tuple[List[bytes], np.ndarray]:
    raws: List[bytes] = []
    times: List[int] = []
    try:
        for _, timestamp, raw in reader.messages(connections):
            raws.append(raw)
            times.append(timestamp)
            if progress is not None and len(raws) % 4096 == 0:
                progress(len(raws))
    except Exception as err:  # noqa: BLE001 - a truncated storage file fails inside the storage plugin
        raise BagError(
            f"bag {reader.path} is corrupt after {len(raws)} messages: {type(err).__name__}: {err}", reader.path
        ) from err
    if progress is not None:
        progress(len(raws))
    return raws, np.asarray(times, dtype=np.int64)


class _JointStateTable:
    """Arrays being filled while joint_states messages are decoded, shape after shape."""

    def __init__(self, count: int, joint_names: Sequence[str]) -> None:
        self.joint_names = list(joint_names)
        self.column = {name: j for j, name in enumerate(self.joint_names)}
        self.stamp_ns = np.zeros(count, dtype=np.int64)
        shape = (count, len(self.joint_names))
        self.position = np.full(shape, np.nan)
        self.velocity = np.full(shape, np.nan)
        self.effort = np.full(shape, np.nan)
        self.rejections = Rejections.for_messages(count)
        self.ignored: set = set()
        self.matched_any_joint = False
        self.frame_id: Optional[str] = None

    def fill(
        self,
        rows: np.ndarray,
        names: Sequence[str],
        stamp_ns: np.ndarray,
        position: Optional[np.ndarray],
        velocity: Optional[np.ndarray],
        effort: Optional[np.ndarray],
    ) -> None:
        """Store messages ``rows`` that all list joints ``names``; arrays are [len(rows), n] or None if empty."""
        self.stamp_ns[rows] = stamp_ns
        present = [name for name in names if name in self.column]
        self.ignored.update(name for name in names if name not in self.column)
        self.matched_any_joint |= bool(present)
        width = len(names)
        for label, array in (("position", position), ("velocity", velocity), ("effort", effort)):
            if array is not None and array.shape[1] != width:
                self.rejections.reject(
                    rows,
                    "length_mismatch",
                    f"message {rows[0]}: {len(names)} names but {array.shape[1]} {label} values",
                )
                return
        if position is None or velocity is None:
            missing = "position" if position is None else "velocity"
            self.rejections.reject(rows, f"missing_{missing}", f"message {rows[0]} has an empty {missing} array")
            return
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if list(names).count(name) > 1})
            self.rejections.reject(rows, "duplicate_joint", f"message {rows[0]} names {repeated} twice")
            return
        lacking = [name for name in self.joint_names if name not in names]
        if lacking:
            self.rejections.reject(
                rows,
                "incomplete",
                f"message {rows[0]} lacks model joints {lacking} (it lists {list(names)})",
            )
            return
        source = [names.index(name) for name in self.joint_names]
        self.position[rows] = position[:, source]
        self.velocity[rows] = velocity[:, source]
        if effort is not None:
            self.effort[rows] = effort[:, source]


def _stamp_ns(sec: np.ndarray, nanosec: np.ndarray) -> np.ndarray:
    return sec.astype(np.int64).ravel() * 1_000_000_000 + nanosec.astype(np.int64).ravel()


def _decode_joint_states_in_bulk(
    table: _JointStateTable, raws: List[bytes], typestore: Any, pending: np.ndarray
) -> np.ndarray:
    """Decode every message sharing one of the first shapes met; returns the rows left undecoded."""
    for _ in range(_MAX_LAYOUTS):
        if pending.size == 0:
            break
        first = int(pending[0])
        try:
            layout = cdr.layout_of_raw(typestore, raws[first], JOINT_STATE_TYPE)
            template = typestore.deserialize_cdr(raws[first], JOINT_STATE_TYPE)
        except (ValueError, SerdeError, IndexError, AssertionError, TypeError):
            # Left to the one-by-one decoder, which names the problem.
            return pending
        paths = [("header", "stamp", "sec"), ("header", "stamp", "nanosec")]
        arrays = [p for p in ("position", "velocity", "effort") if len(getattr(template, p))]
        matched, values = cdr.decode_batch(
            layout, [raws[i] for i in pending], paths + [(p,) for p in arrays]
        )
        rows = pending[matched]
        table.frame_id = table.frame_id if table.frame_id is not None else template.header.frame_id
        table.fill(
            rows,
            list(template.name),
            _stamp_ns(values[paths[0]], values[paths[1]]),
            *(values[(p,)] if p in arrays else None for p in ("position", "velocity", "effort")),
        )
        pending = pending[~matched]
    return pending


def _decode_joint_state(table: _JointStateTable, raws: List[bytes], typestore: Any, row: int) -> None:
    rows = np.array([row])
    try:
        msg = typestore.deserialize_cdr(raws[row], JOINT_STATE_TYPE)
    except Exception as err:  # noqa: BLE001 - garbage bytes raise anything from SerdeError to IndexError
        table.rejections.reject(rows, "corrupt_message", f"message {row}: {type(err).__name__}: {err}")
        return
    table.frame_id = table.frame_id if table.frame_id is not None else msg.header.frame_id

    def column(values: Any) -> Optional[np.ndarray]:
        array = np.asarray(values, dtype=np.float64)
        return array.reshape(1, -1) if array.size else None

    table.fill(
        rows,
        list(msg.name),
        np.array([msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec], dtype=np.int64),
        column(msg.position),
        column(msg.velocity),
        column(msg.effort),
    )


def read_joint_states(
    reader: Reader,
    typestore: Any,
    topic: str,
    joint_names: Sequence[str],
    progress: Progress = None,
) -> JointStateSeries:
    """Read every ``sensor_msgs/JointState`` on ``topic`` into arrays in the order of ``joint_names``.

    Messages may list joints in any order and extra joints (ignored). A message is marked rejected, not
    dropped, when it cannot be decoded, lacks a model joint, has arrays whose lengths differ from its
    names, has no position or velocity, or holds NaN/inf in the model joints' values.

    Args:
        reader: Open bag.
        typestore: From :func:`package_typestore`.
        topic: The joint_states topic.
        joint_names: Model joints (``model.joint_names`` less a floating base).
        progress: Called with the number of messages read so far.

    Raises:
        BagError: Topic absent, or no message names any joint of the model.
    """
    connections = topic_connections(reader, topic, JOINT_STATE_TYPE)
    raws, bag_ns = _read_raw(reader, connections, progress)
    if not raws:
        raise BagError(f"topic {topic!r} has no messages", reader.path, topic)
    table = _JointStateTable(len(raws), joint_names)
    pending = _decode_joint_states_in_bulk(table, raws, typestore, np.arange(len(raws)))
    for row in pending:
        _decode_joint_state(table, raws, typestore, int(row))
    if not table.matched_any_joint and table.ignored:
        raise BagError(
            f"joint names on {topic!r} do not match the URDF: the messages name "
            f"{sorted(table.ignored)}, the model has {list(joint_names)}",
            reader.path,
            topic,
        )
    if not table.matched_any_joint:
        counts = table.rejections.counts()
        raise BagError(f"no usable message on {topic!r}: {counts}", reader.path, topic)

    usable = table.rejections.usable
    bad_state = usable & ~np.all(np.isfinite(table.position) & np.isfinite(table.velocity), axis=1)
    table.rejections.reject(
        bad_state, "non_finite", f"message {int(np.argmax(bad_state))} has NaN or inf in position or velocity"
    )
    usable = table.rejections.usable
    partial_effort = usable & np.any(np.isnan(table.effort), axis=1) & ~np.all(np.isnan(table.effort), axis=1)
    infinite_effort = usable & np.any(np.isinf(table.effort), axis=1)
    table.rejections.reject(
        partial_effort | infinite_effort,
        "non_finite_effort",
        f"message {int(np.argmax(partial_effort | infinite_effort))} has NaN or inf in effort",
    )
    return JointStateSeries(
        topic=topic,
        joint_names=list(joint_names),
        stamp_ns=table.stamp_ns,
        bag_ns=bag_ns,
        position=table.position,
        velocity=table.velocity,
        effort=table.effort,
        rejections=table.rejections,
        ignored_joints=sorted(table.ignored),
        frame_id=table.frame_id or "",
    )


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


def _odometry_row(msg: Any) -> Dict[str, float]:
    return {key: functools.reduce(getattr, path, msg) for key, path in _ODOMETRY_PATHS.items()}


def read_odometry(reader: Reader, typestore: Any, topic: str, progress: Progress = None) -> OdometrySeries:
    """Read every ``nav_msgs/Odometry`` on ``topic``; corrupt messages are left out (they carry no index).

    Raises:
        BagError: Topic absent or without a readable message.
    """
    connections = topic_connections(reader, topic, ODOMETRY_TYPE)
    raws, _ = _read_raw(reader, connections, progress)
    if not raws:
        raise BagError(f"topic {topic!r} has no messages", reader.path, topic)
    columns: Dict[str, List[np.ndarray]] = {key: [] for key in _ODOMETRY_PATHS}
    child_frame: Optional[str] = None
    pending = np.arange(len(raws))
    try:
        layout = cdr.layout_of_raw(typestore, raws[0], ODOMETRY_TYPE)
        child_frame = typestore.deserialize_cdr(raws[0], ODOMETRY_TYPE).child_frame_id
        matched, values = cdr.decode_batch(layout, raws, list(_ODOMETRY_PATHS.values()))
        for key, path in _ODOMETRY_PATHS.items():
            columns[key].append(values[path].ravel())
        pending = pending[~matched]
    except (ValueError, SerdeError, IndexError, AssertionError, TypeError):
        pass
    for row in pending:
        try:
            msg = typestore.deserialize_cdr(raws[int(row)], ODOMETRY_TYPE)
        except Exception:  # noqa: BLE001 - garbage bytes raise anything; the message is skipped
            continue
        child_frame = child_frame or msg.child_frame_id
        for key, value in _odometry_row(msg).items():
            columns[key].append(np.array([value], dtype=np.float64))
    if not columns["sec"]:
        raise BagError(f"no readable message on {topic!r}", reader.path, topic)
    flat = {key: np.concatenate(parts) for key, parts in columns.items()}
    stamp = _stamp_ns(flat["sec"].astype(np.int64), flat["nanosec"].astype(np.int64))
    order = np.argsort(stamp, kind="stable")

    def stack(*keys: str) -> np.ndarray:
        return np.column_stack([flat[k] for k in keys])[order]

    return OdometrySeries(
        topic=topic,
        stamp_ns=stamp[order],
        position=stack("px", "py", "pz"),
        orientation=stack("qx", "qy", "qz", "qw"),
        linear=stack("vx", "vy", "vz"),
        angular=stack("wx", "wy", "wz"),
        child_frame_id=child_frame,
    )
