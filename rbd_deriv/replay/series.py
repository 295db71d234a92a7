"""Recorded signals, one batch of messages at a time, and the book-keeping of messages that cannot be used.

A recording is read in batches of messages (in the order they were written). Each message keeps its number
on its topic (0, 1, 2... in file order) so that a rejection, a gap or a plot can name it; a message that
cannot be used is marked with a reason in its batch, counted, and its first occurrence described.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

__all__ = ["OK", "Rejections", "StateBatch", "OdometrySeries", "JointStateSeries"]

OK = 0
"""Status code of a usable message."""


@dataclass
class Rejections:
    """How many messages were set aside for each reason, with the first example of each.

    Attributes:
        reasons: Reason names in the order they were first met; reason ``reasons[c - 1]`` has code ``c``.
        tally: Number of messages per reason.
        examples: For each reason, a sentence describing its first occurrence.
    """

    reasons: List[str] = field(default_factory=list)
    tally: Dict[str, int] = field(default_factory=dict)
    examples: Dict[str, str] = field(default_factory=dict)

    def code(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1

    def reject(self, status: np.ndarray, which: np.ndarray, reason: str, example: str) -> np.ndarray:
        """Mark the still-usable messages among ``which`` (bool mask or indices into ``status``).

        A message keeps its first reason: a message with NaN and a duplicate stamp counts once.

        Returns:
            The indices newly rejected.
        """
        which = np.asarray(which)
        indices = np.flatnonzero(which) if which.dtype == bool else which.astype(np.int64)
        fresh = indices[status[indices] == OK]
        if fresh.size:
            status[fresh] = self.code(reason)
            self.tally[reason] = self.tally.get(reason, 0) + int(fresh.size)
            self.examples.setdefault(reason, example)
        return fresh

    def add(self, reason: str, count: int, example: str) -> None:
        """Count ``count`` messages set aside for ``reason`` outside any batch (held back, then refused)."""
        if count:
            self.code(reason)
            self.tally[reason] = self.tally.get(reason, 0) + int(count)
            self.examples.setdefault(reason, example)

    def counts(self) -> Dict[str, int]:
        """Messages rejected for each reason met."""
        return {reason: self.tally[reason] for reason in self.reasons if self.tally.get(reason)}

    @property
    def rejected(self) -> int:
        return int(sum(self.tally.values()))


@dataclass
class StateBatch:
    """``sensor_msgs/JointState`` messages of one batch, mapped onto the model's joints.

    Attributes:
        index: Number of each message on its topic, in file order [k].
        stamp_ns: Header stamps [k] in [ns] (int64).
        bag_ns: Times the recorder received the messages [k] in [ns] (int64).
        position: Joint positions [k, J] in [rad] or [m]; NaN where the message gave none.
        velocity: Joint velocities [k, J] in [rad/s] or [m/s]; NaN where none.
        effort: Joint efforts [k, J] in [N m] or [N]; NaN where none.
        status: :data:`OK` or the code of the reason each message was set aside [k].
    """

    index: np.ndarray
    stamp_ns: np.ndarray
    bag_ns: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    status: np.ndarray

    def __len__(self) -> int:
        return int(self.index.size)

    @property
    def usable(self) -> np.ndarray:
        """Boolean mask [k] of the messages still usable."""
        return self.status == OK

    def take(self, rows: np.ndarray) -> "StateBatch":
        return StateBatch(*(getattr(self, name)[rows] for name in self.__dataclass_fields__))

    @staticmethod
    def concatenate(batches: List["StateBatch"], joints: int) -> "StateBatch":
        if not batches:
            empty = np.zeros(0, dtype=np.int64)
            shape = np.zeros((0, joints))
            return StateBatch(empty, empty, empty, shape, shape, shape, np.zeros(0, dtype=np.int16))
        return StateBatch(*(np.concatenate([getattr(b, name) for b in batches]) for name in StateBatch.__dataclass_fields__))


@dataclass
class JointStateSeries:
    """A whole topic's joint states in memory: for tests and short recordings (the evaluation streams).

    Attributes:
        topic: Topic name.
        joint_names: Model joints, the column order of the arrays [J].
        states: Every message, in file order.
        rejections: Why messages were set aside while decoding.
        ignored_joints: Names found in the messages that the model does not have (sorted).
        frame_id: Header frame of the first decoded message.
    """

    topic: str
    joint_names: List[str]
    states: StateBatch
    rejections: Rejections
    ignored_joints: List[str] = field(default_factory=list)
    frame_id: str = ""

    def __len__(self) -> int:
        return len(self.states)


@dataclass
class OdometrySeries:
    """``nav_msgs/Odometry`` of the floating base, sorted by stamp.

    Attributes:
        stamp_ns: Header stamps [N] in [ns].
        position: Base position in the odometry frame [N, 3] in [m].
        orientation: Base orientation quaternion (x, y, z, w) [N, 4].
        linear: Base linear velocity in the base frame (``child_frame_id``) [N, 3] in [m/s].
        angular: Base angular velocity in the base frame [N, 3] in [rad/s].
        child_frame_id: Frame of the twist, normally the URDF root link.
    """

    stamp_ns: np.ndarray
    position: np.ndarray
    orientation: np.ndarray
    linear: np.ndarray
    angular: np.ndarray
    child_frame_id: Optional[str] = None

    def __len__(self) -> int:
        return int(self.stamp_ns.size)

    @staticmethod
    def empty() -> "OdometrySeries":
        return OdometrySeries(np.zeros(0, dtype=np.int64), np.zeros((0, 3)), np.zeros((0, 4)), np.zeros((0, 3)), np.zeros((0, 3)))

    def sorted(self) -> "OdometrySeries":
        order = np.argsort(self.stamp_ns, kind="stable")
        return OdometrySeries(self.stamp_ns[order], self.position[order], self.orientation[order], self.linear[order],
                              self.angular[order], self.child_frame_id)

    def append(self, other: "OdometrySeries") -> "OdometrySeries":
        return OdometrySeries(
            np.concatenate([self.stamp_ns, other.stamp_ns]),
            np.concatenate([self.position, other.position]),
            np.concatenate([self.orientation, other.orientation]),
            np.concatenate([self.linear, other.linear]),
            np.concatenate([self.angular, other.angular]),
            self.child_frame_id or other.child_frame_id,
        )

    def after(self, stamp_ns: int) -> "OdometrySeries":
        """The messages stamped at or after ``stamp_ns``."""
        keep = self.stamp_ns >= stamp_ns
        return OdometrySeries(self.stamp_ns[keep], self.position[keep], self.orientation[keep], self.linear[keep],
                              self.angular[keep], self.child_frame_id)
