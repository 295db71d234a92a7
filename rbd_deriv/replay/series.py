"""Recorded signals as arrays, and the book-keeping of messages that cannot be used.

A bag is read once into flat arrays, one row per recorded message, in recording order. A message that
cannot be used is not removed: its row stays, marked with the reason, so that counts, plots and the output
bag can all refer to the same message index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

__all__ = ["Rejections", "JointStateSeries", "OdometrySeries", "OK"]

OK = 0
"""Status code of a usable message."""


@dataclass
class Rejections:
    """Why each message was set aside, with a count and a first example per reason.

    Attributes:
        status: Status code of each message [K], :data:`OK` (0) when usable.
        reasons: Reason text of each non-zero code, in the order reasons were first met.
        examples: For each reason, a sentence describing its first occurrence.
    """

    status: np.ndarray
    reasons: List[str] = field(default_factory=list)
    examples: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_messages(cls, count: int) -> "Rejections":
        return cls(np.zeros(count, dtype=np.int16))

    def code(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1

    def reject(self, indices: np.ndarray, reason: str, example: str) -> None:
        """Mark the still-usable messages among ``indices`` (int or bool array) as rejected for ``reason``.

        A message keeps its first reason: a message with NaN and a duplicate stamp counts once.
        """
        indices = np.flatnonzero(indices) if np.asarray(indices).dtype == bool else np.asarray(indices)
        fresh = indices[self.status[indices] == OK]
        if fresh.size == 0:
            return
        self.status[fresh] = self.code(reason)
        self.examples.setdefault(reason, example)

    @property
    def usable(self) -> np.ndarray:
        """Boolean mask [K] of the messages still usable."""
        return self.status == OK

    def counts(self) -> Dict[str, int]:
        """Number of messages rejected for each reason (only reasons met)."""
        tally = np.bincount(self.status, minlength=len(self.reasons) + 1)
        return {reason: int(tally[i + 1]) for i, reason in enumerate(self.reasons) if tally[i + 1]}

    @property
    def rejected(self) -> int:
        return int(np.count_nonzero(self.status))


@dataclass
class JointStateSeries:
    """``sensor_msgs/JointState`` messages of one topic, mapped onto the model's joints.

    Attributes:
        topic: Topic name.
        joint_names: Model joints, the column order of the arrays below [J].
        stamp_ns: Header stamps [K] in [ns] (int64).
        bag_ns: Times the recorder received the messages [K] in [ns] (int64).
        position: Joint positions [K, J] in [rad] or [m]; NaN where the message gave none.
        velocity: Joint velocities [K, J] in [rad/s] or [m/s]; NaN where none.
        effort: Joint efforts [K, J] in [N m] or [N]; NaN where none.
        rejections: Status of every message.
        ignored_joints: Names found in the messages that the model does not have (sorted).
        frame_id: Header frame of the first decoded message.
    """

    topic: str
    joint_names: List[str]
    stamp_ns: np.ndarray
    bag_ns: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    rejections: Rejections
    ignored_joints: List[str] = field(default_factory=list)
    frame_id: str = ""

    def __len__(self) -> int:
        return int(self.stamp_ns.size)

    @property
    def has_effort(self) -> bool:
        """True when at least one usable message carries efforts."""
        usable = self.rejections.usable
        return bool(np.any(np.all(np.isfinite(self.effort[usable]), axis=1))) if usable.any() else False


@dataclass
class OdometrySeries:
    """``nav_msgs/Odometry`` of the floating base.

    Attributes:
        topic: Topic name.
        stamp_ns: Header stamps [N] in [ns].
        position: Base position in the odometry frame [N, 3] in [m].
        orientation: Base orientation quaternion (x, y, z, w) [N, 4].
        linear: Base linear velocity in the base frame (``child_frame_id``) [N, 3] in [m/s].
        angular: Base angular velocity in the base frame [N, 3] in [rad/s].
        child_frame_id: Frame of the twist, normally the URDF root link.
    """

    topic: str
    stamp_ns: np.ndarray
    position: np.ndarray
    orientation: np.ndarray
    linear: np.ndarray
    angular: np.ndarray
    child_frame_id: Optional[str] = None

    def __len__(self) -> int:
        return int(self.stamp_ns.size)
