"""Recordings of a known motion, for tests, benchmarks and trying the evaluation without a robot.

The motion is analytic, so positions, velocities and accelerations are exact; the efforts are the
model's inverse dynamics at those exact accelerations, plus Gaussian noise of known standard deviation.
An evaluation of such a bag must find a torque residual whose RMS is the noise level (up to the error of
the acceleration estimate, which is tiny at 1 kHz for slow sinusoids, and zero for a polynomial motion
whose velocity is quadratic in time).
"""

from __future__ import annotations

import heapq
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from rosbags.rosbag2 import StoragePlugin, Writer

import rbd_deriv as rd
from rbd_deriv.replay import cdr
from rbd_deriv.replay.bagio import JOINT_STATE_TYPE, ODOMETRY_TYPE, STRING_TYPE

__all__ = [
    "Motion",
    "SinusoidMotion",
    "sinusoid_motion",
    "quadratic_velocity_motion",
    "joint_state_rows",
    "odometry_message",
    "write_recording",
    "write_noisy_recording",
]


@dataclass
class Motion:
    """Exact joint motion sampled at ``stamp_ns``.

    Attributes:
        stamp_ns: Sample stamps [K] in [ns].
        position, velocity, acceleration: [K, J] in [rad], [rad/s], [rad/s^2] (or metres).
    """

    stamp_ns: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray


def _stamps(duration_s: float, rate_hz: float, start_ns: int) -> np.ndarray:
    count = int(round(duration_s * rate_hz))
    return start_ns + np.round(np.arange(count) * (1e9 / rate_hz)).astype(np.int64)


class SinusoidMotion:
    """Each joint a sum of two sinusoids (0.1 to 0.8 Hz) around a random offset, within +-(offset + 2 amplitude).

    Args:
        joints: Number of joints J.
        seed: Random phases, frequencies and offsets.
        amplitude: Amplitude of each sinusoid [rad].
    """

    def __init__(self, joints: int, seed: int = 0, amplitude: float = 0.5) -> None:
        rng = np.random.default_rng(seed)
        self.offset = rng.uniform(-0.3, 0.3, joints)
        self.terms = []
        for _ in range(2):
            omega = 2 * np.pi * rng.uniform(0.1, 0.8, joints)
            self.terms.append((omega, rng.uniform(0, 2 * np.pi, joints)))
        self.amplitude = amplitude

    def sample(self, stamp_ns: np.ndarray, start_ns: int) -> Motion:
        """The motion at ``stamp_ns`` [K], time counted from ``start_ns``."""
        t = ((stamp_ns - start_ns) * 1e-9)[:, None]
        position = self.offset + np.zeros_like(t)
        velocity = np.zeros((t.size, self.offset.size))
        acceleration = np.zeros((t.size, self.offset.size))
        for omega, phase in self.terms:
            angle = omega * t + phase
            position = position + self.amplitude * np.sin(angle)
            velocity += self.amplitude * omega * np.cos(angle)
            acceleration -= self.amplitude * omega**2 * np.sin(angle)
        return Motion(stamp_ns, position, velocity, acceleration)


def sinusoid_motion(
    joints: int, duration_s: float, rate_hz: float, seed: int = 0, amplitude: float = 0.5, start_ns: int = 1_700_000_000_000_000_000
) -> Motion:
    """:class:`SinusoidMotion` sampled at ``rate_hz`` for ``duration_s`` from ``start_ns`` [ns]."""
    stamp_ns = _stamps(duration_s, rate_hz, start_ns)
    return SinusoidMotion(joints, seed, amplitude).sample(stamp_ns, start_ns)


def quadratic_velocity_motion(
    joints: int, duration_s: float, rate_hz: float, seed: int = 0, jitter: float = 0.0, start_ns: int = 1_700_000_000_000_000_000
) -> Motion:
    """Cubic positions, so velocities are quadratic and the local quadratic fit recovers ``a`` exactly.

    Args:
        jitter: Random stamp jitter as a fraction of the period (uneven sampling, still increasing).
    """
    rng = np.random.default_rng(seed)
    stamp_ns = _stamps(duration_s, rate_hz, start_ns)
    if jitter:
        stamp_ns = stamp_ns + np.round(rng.uniform(-jitter, jitter, stamp_ns.size) * 1e9 / rate_hz).astype(np.int64)
    t = ((stamp_ns - stamp_ns[0]) * 1e-9)[:, None] - duration_s / 2
    c0, c1, c2, c3 = (rng.uniform(-1, 1, joints) * s for s in (0.5, 0.8, 0.6, 0.4))
    position = c0 + c1 * t + c2 * t**2 + c3 * t**3
    velocity = c1 + 2 * c2 * t + 3 * c3 * t**2
    acceleration = 2 * c2 + 6 * c3 * t
    return Motion(stamp_ns, position, velocity, acceleration)


def joint_state_rows(
    typestore: Any,
    names: Sequence[str],
    stamp_ns: np.ndarray,
    position: np.ndarray,
    velocity: np.ndarray,
    effort: Optional[np.ndarray],
    frame_id: str = "",
) -> np.ndarray:
    """Serialized ``sensor_msgs/JointState`` messages [K, size] (uint8), one per row of the arrays."""
    msg_type = typestore.types[JOINT_STATE_TYPE]
    time_type = typestore.types["builtin_interfaces/msg/Time"]
    header_type = typestore.types["std_msgs/msg/Header"]
    width = len(names)
    template = msg_type(
        header=header_type(stamp=time_type(sec=0, nanosec=0), frame_id=frame_id),
        name=list(names),
        position=np.zeros(width),
        velocity=np.zeros(width),
        effort=np.zeros(width if effort is not None else 0),
    )
    layout = cdr.fixed_layout(typestore, template, JOINT_STATE_TYPE)
    values = {
        ("header", "stamp", "sec"): stamp_ns // 1_000_000_000,
        ("header", "stamp", "nanosec"): stamp_ns % 1_000_000_000,
        ("position",): position,
        ("velocity",): velocity,
    }
    if effort is not None:
        values[("effort",)] = effort
    return cdr.encode_batch(layout, values)


def odometry_message(typestore: Any, stamp_ns: int, q_base: np.ndarray, v_base: np.ndarray, frame: str = "odom", child: str = "base_link") -> bytes:
    """One serialized ``nav_msgs/Odometry``: pose ``q_base`` (x y z qx qy qz qw), twist ``v_base`` (linear, angular)."""
    types = typestore.types
    point = types["geometry_msgs/msg/Point"](x=float(q_base[0]), y=float(q_base[1]), z=float(q_base[2]))
    quaternion = types["geometry_msgs/msg/Quaternion"](
        x=float(q_base[3]), y=float(q_base[4]), z=float(q_base[5]), w=float(q_base[6])
    )
    vector = types["geometry_msgs/msg/Vector3"]
    twist = types["geometry_msgs/msg/Twist"](
        linear=vector(x=float(v_base[0]), y=float(v_base[1]), z=float(v_base[2])),
        angular=vector(x=float(v_base[3]), y=float(v_base[4]), z=float(v_base[5])),
    )
    message = types[ODOMETRY_TYPE](
        header=types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=int(stamp_ns // 10**9), nanosec=int(stamp_ns % 10**9)), frame_id=frame
        ),
        child_frame_id=child,
        pose=types["geometry_msgs/msg/PoseWithCovariance"](pose=types["geometry_msgs/msg/Pose"](position=point, orientation=quaternion), covariance=np.zeros(36)),
        twist=types["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)),
    )
    return bytes(typestore.serialize_cdr(message, ODOMETRY_TYPE))


def write_recording(
    path: os.PathLike,
    typestore: Any,
    storage: str,
    joint_states: Iterable[tuple],
    robot_description: Optional[str] = None,
    odometry: Iterable[tuple] = (),
    topic: str = "/joint_states",
    odometry_topic: str = "/odom",
    first_time_ns: Optional[int] = None,
) -> None:
    """Write a bag as a robot recorder would, with rosbags' writer.

    The messages may come from generators (a long recording need not fit in memory); each topic's must be
    in recording order, and the topics are interleaved by time.

    Args:
        path: New bag folder.
        typestore: A rosbags type store.
        storage: ``"mcap"`` or ``"sqlite3"``.
        joint_states: ``(receive_time_ns, raw_bytes)`` per joint_states message, in recording order.
        robot_description: URDF text written once on ``/robot_description`` before the first message.
        odometry: ``(receive_time_ns, raw_bytes)`` per odometry message.
        first_time_ns: Receive time of the description; 1 ns before the first joint_states message when
            None (which then must be a sequence).
    """
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    with Writer(Path(path), version=9, storage_plugin=plugin) as writer:
        streams = []
        if robot_description is not None:
            connection = writer.add_connection("/robot_description", STRING_TYPE, typestore=typestore)
            if first_time_ns is None:
                states = list(joint_states)
                joint_states = states
                first_time_ns = states[0][0] - 1 if states else 0
            raw = typestore.serialize_cdr(typestore.types[STRING_TYPE](data=robot_description), STRING_TYPE)
            streams.append([(first_time_ns, 0, connection, raw)])
        states_connection = writer.add_connection(topic, JOINT_STATE_TYPE, typestore=typestore)
        streams.append((t, 1, states_connection, raw) for t, raw in joint_states)
        odometry = iter(odometry)
        first_odometry = next(odometry, None)
        if first_odometry is not None:
            base = writer.add_connection(odometry_topic, ODOMETRY_TYPE, typestore=typestore)
            streams.append((t, 2, base, raw) for t, raw in itertools.chain([first_odometry], odometry))
        # A recorder writes in arrival order: interleave the topics by time (stable within a topic).
        for timestamp, _, connection, raw in heapq.merge(*streams, key=lambda record: (record[0], record[1])):
            writer.write(connection, int(timestamp), raw)


def write_noisy_recording(
    path: os.PathLike,
    typestore: Any,
    urdf: str,
    seconds: float,
    rate_hz: float,
    noise: float,
    seed: int = 0,
    start_ns: int = 1_700_000_000_000_000_000,
    storage: str = "mcap",
    piece_s: float = 10.0,
) -> int:
    """A recording of a robot following a :class:`SinusoidMotion`, with efforts = its inverse dynamics + noise.

    Generated ``piece_s`` seconds at a time, so a long recording does not have to fit in memory. The
    description is recorded on ``/robot_description`` first; receive times trail the stamps by 0.2 ms.

    Args:
        path: New bag folder.
        typestore: A rosbags type store (:func:`rbd_deriv.replay.bagio.package_typestore`).
        urdf: The robot's URDF text (fixed base, one coordinate per joint).
        seconds: Length [s]; ``rate_hz``: joint_states rate [Hz].
        noise: Standard deviation of the Gaussian noise added to every effort [N m or N].
        seed: Motion and noise.
        start_ns: Stamp of the first message [ns since the epoch].
        storage: ``"mcap"`` or ``"sqlite3"``.

    Returns:
        The number of joint_states messages.
    """
    model = rd.load_urdf(urdf)
    motion = SinusoidMotion(model.nv, seed=seed)
    rng = np.random.default_rng(seed)
    count = int(round(seconds * rate_hz))
    per_piece = max(1, int(round(piece_s * rate_hz)))

    def records() -> Iterable[tuple]:
        for first in range(0, count, per_piece):
            stamps = start_ns + np.round(np.arange(first, min(count, first + per_piece)) * (1e9 / rate_hz)).astype(np.int64)
            sample = motion.sample(stamps, start_ns)
            effort = rd.rnea_batch(model, sample.position, sample.velocity, sample.acceleration)
            effort += rng.normal(0.0, noise, effort.shape)
            rows = joint_state_rows(typestore, model.joint_names, stamps, sample.position, sample.velocity, effort)
            # Receive times trail the stamps by a fixed transport delay, as on a real recorder.
            for t, row in zip(stamps.tolist(), rows):
                yield t + 200_000, row.data

    write_recording(path, typestore, storage, records(), robot_description=urdf, first_time_ns=start_ns)
    return count
