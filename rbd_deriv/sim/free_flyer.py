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

import math
from typing import Tuple

import numpy as np

from rbd_deriv.core.configuration import rotation_of  # the library's quaternion convention, re-exported


def rotate(quaternion_xyzw: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """R v (3,) for the rotation R of a unit quaternion (x, y, z, w): v + w t + u x t with t = 2 u x v, u the
    quaternion's vector part. Scalar arithmetic: a plant reads its state at every step, and forming R costs
    more from Python."""
    x, y, z, w = (float(c) for c in quaternion_xyzw)
    vx, vy, vz = (float(c) for c in vector)
    tx, ty, tz = 2.0 * (y * vz - z * vy), 2.0 * (z * vx - x * vz), 2.0 * (x * vy - y * vx)
    return np.array([vx + w * tx + y * tz - z * ty, vy + w * ty + z * tx - x * tz, vz + w * tz + x * ty - y * tx])


def pose_from_mujoco(qpos: np.ndarray) -> np.ndarray:
    """Library base configuration q (7,) of a MuJoCo free joint's qpos (7,), the quaternion normalized."""
    w, x, y, z = qpos[3:7]
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    return np.array([qpos[0], qpos[1], qpos[2], x / norm, y / norm, z / norm, w / norm])


def twist_from_mujoco(qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """Library base velocity v (6,) (base frame) of a MuJoCo free joint's (qpos (7,), qvel (6,))."""
    w, x, y, z = qpos[3:7]
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    # R^T is the rotation of the conjugate quaternion.
    linear = rotate((-x / norm, -y / norm, -z / norm, w / norm), qvel[0:3])
    return np.concatenate([linear, qvel[3:6]])


def from_mujoco(qpos: np.ndarray, qvel: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Library base state (q (7,), v (6,)) of a MuJoCo free joint's (qpos (7,), qvel (6,))."""
    return pose_from_mujoco(qpos), twist_from_mujoco(qpos, qvel)


def to_mujoco(q: np.ndarray, v: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """MuJoCo free joint's (qpos (7,), qvel (6,)) of a library base state (q (7,), v (6,)); the quaternion is
    normalized (the library accepts norms within 1e-6 of 1)."""
    quaternion = np.asarray(q[3:7], dtype=float) / np.linalg.norm(q[3:7])
    x, y, z, w = quaternion
    qpos = np.concatenate([q[0:3], [w, x, y, z]])
    qvel = np.concatenate([rotation_of(quaternion) @ v[0:3], v[3:6]])
    return qpos, qvel


__all__ = ["from_mujoco", "pose_from_mujoco", "rotate", "rotation_of", "to_mujoco", "twist_from_mujoco"]
