"""The floating base's state between MuJoCo's free joint and the library's free flyer (pure numpy).

Both describe the pose of the base link in the world and its velocity, in different conventions:

============  ===================================  ============================================
              library (Pinocchio's ``root_joint``)  MuJoCo free joint
============  ===================================  ============================================
position      q[0:3], the base origin in the world  qpos[0:3], the same
orientation   q[3:7] = (qx, qy, qz, qw)             qpos[3:7] = (qw, qx, qy, qz)
linear vel.   v[0:3] = R^T pdot, base frame         qvel[0:3] = pdot, world frame
angular vel.  v[3:6] = omega, base frame            qvel[3:6] = omega, base frame
============  ===================================  ============================================

with R the base's rotation (base to world) and pdot the world velocity of the base origin. The library's
(v_lin, omega) is the base's spatial velocity in its own frame, the twist that nav_msgs/Odometry reports in
its child frame.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np


def rotation_of(quaternion_xyzw: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a unit quaternion (x, y, z, w)."""
    x, y, z, w = quaternion_xyzw
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def from_mujoco(qpos: np.ndarray, qvel: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Library base state (q (7,), v (6,)) of a MuJoCo free joint's (qpos (7,), qvel (6,))."""
    w, x, y, z = qpos[3:7]
    quaternion = np.array([x, y, z, w]) / np.sqrt(w * w + x * x + y * y + z * z)
    q = np.concatenate([qpos[0:3], quaternion])
    v = np.concatenate([rotation_of(quaternion).T @ qvel[0:3], qvel[3:6]])
    return q, v


def to_mujoco(q: np.ndarray, v: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """MuJoCo free joint's (qpos (7,), qvel (6,)) of a library base state (q (7,), v (6,)); the quaternion is
    normalized (the library accepts norms within 1e-6 of 1)."""
    quaternion = np.asarray(q[3:7], dtype=float) / np.linalg.norm(q[3:7])
    x, y, z, w = quaternion
    qpos = np.concatenate([q[0:3], [w, x, y, z]])
    qvel = np.concatenate([rotation_of(quaternion) @ v[0:3], v[3:6]])
    return qpos, qvel


__all__ = ["from_mujoco", "rotation_of", "to_mujoco"]
