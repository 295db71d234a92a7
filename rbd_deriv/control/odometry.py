"""The checks of the base's odometry before a legged loop takes it (nav_msgs/Odometry: pose in the world,
twist in the base frame).

A message names its frames (:func:`check_frames`), claims a twist a legged base can have (:func:`check_twist`)
and a pose its predecessor explains (:func:`check_jump`): a second source of odometry (another publisher, a stale
replay) cannot take the base over, and a twist a source may choose freely cannot explain any jump. Each raises
:class:`~rbd_deriv.exceptions.MessageError` with the reason (``frame``, ``twist``, ``jump``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np

from rbd_deriv.control.constants import JUMP_WINDOW
from rbd_deriv.exceptions import MessageError
from rbd_deriv.joint_state_map import describe

__all__ = ["check_frames", "check_jump", "check_twist"]


def check_frames(frames: Optional[Tuple[str, str]], odom_frame: str, base_frame: str) -> None:
    """Refuse (``frame``) odometry whose (``header.frame_id``, ``child_frame_id``) are not ``odom_frame`` and
    ``base_frame`` (an empty name accepts any; ``frames`` None skips the check)."""
    if frames is None:
        return
    for kind, expected, got in (("frame_id", odom_frame, frames[0]), ("child_frame_id", base_frame, frames[1])):
        if expected and got != expected:
            raise MessageError(f"odometry {kind} {describe([got])!r}, expected {expected!r}", "frame")


def check_twist(linear: Any, angular: Any, max_speed: float, max_rate: float) -> None:
    """Refuse (``twist``) a twist faster than ``max_speed`` [m/s] or turning faster than ``max_rate`` [rad/s]."""
    speed, rate = float(np.linalg.norm(linear)), float(np.linalg.norm(angular))
    if speed > max_speed or rate > max_rate:
        raise MessageError(f"odometry twist of {speed:.3g} m/s and {rate:.3g} rad/s, beyond the {max_speed:g} m/s "
                           f"and {max_rate:g} rad/s a base moves at", "twist")


def check_jump(position: Any, orientation: Any, stamp_ns: int, last_ns: Optional[int], last_pose: np.ndarray,
               last_twist: np.ndarray, margin: float, angle_margin: float) -> None:
    """Refuse (``jump``) a base pose that the last accepted one does not explain.

    A pose is judged against the last accepted one (stamped ``last_ns``, pose (7,) = position [m] and quaternion
    (x, y, z, w), twist (6,) [m/s, rad/s]) when that one is at most :data:`JUMP_WINDOW` apart (older, the robot's
    state was stale anyway and there is nothing recent to compare with): its distance must stay within
    :math:`|v| \\, |\\Delta t|` + ``margin`` [m] and its rotation within :math:`|\\omega| \\, |\\Delta t|` +
    ``angle_margin`` [rad]. A pose that is not a finite position and quaternion is left to the state's own
    checks to refuse.
    """
    if last_ns is None or abs(stamp_ns - last_ns) > JUMP_WINDOW * 1e9:
        return
    position, quaternion = np.asarray(position, dtype=float), np.asarray(orientation, dtype=float)
    norm = float(np.linalg.norm(quaternion)) if quaternion.shape == (4,) else 0.0
    if position.shape != (3,) or not (np.isfinite(position).all() and math.isfinite(norm) and norm > 0.0):
        return
    elapsed = abs(stamp_ns - last_ns) * 1e-9
    distance = float(np.linalg.norm(position - last_pose[:3]))
    reach = float(np.linalg.norm(last_twist[:3])) * elapsed + margin
    angle = 2.0 * math.acos(min(1.0, abs(float(quaternion @ last_pose[3:7])) / norm))
    turn = float(np.linalg.norm(last_twist[3:6])) * elapsed + angle_margin
    if distance > reach or angle > turn:
        raise MessageError(f"base pose {distance:.3g} m and {angle:.3g} rad from the last accepted one "
                           f"{elapsed * 1e3:.3g} ms apart, whose twist explains {reach:.3g} m and {turn:.3g} rad",
                           "jump")
