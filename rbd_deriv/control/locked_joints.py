"""Locked joints: an MPC that plans on a reduced model and a robot that runs every joint.

A humanoid's walking MPC need not plan its arms, grippers and head: locked at their posture (the reduced model of
:func:`rbd_deriv.load_urdf`'s ``locked_joints``, Pinocchio's ``buildReducedModel``), the problem has 20 velocity
rows instead of 50 on talos. The robot still has those joints, and something must hold them. Here the robot side
does, through the very feedback policy it executes: :meth:`LockedJoints.expand` writes the reduced plan's policy
for the full robot, each locked joint held at its position by

    tau_j = g_j(q_k) - kp_j (q_j - q_j^lock) - kd_j v_j,

g(q_k) (nv,) [N m] the full model's gravity torques at knot k's configuration (the locked joints at their
positions, zero velocity): what holds a still arm against gravity whatever the base does below it, since a
joint's torque only carries the bodies past it. The gains put each locked joint's own inertia (the diagonal of
the full model's M at the locked posture) on a critically damped spring of natural frequency ``frequency``:
kp_j = M_jj w^2, kd_j = 2 zeta M_jj w, w = 2 pi frequency, a fingertip and a shoulder both settle in about the same
time (1 / w), and a 1 kHz physics step stays stable (w dt << 1).

What the MPC does not see: the locked joints' small motion under their springs (they are rigid in its model) and
the torques the base's own acceleration asks of them (the springs take it).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.policy import FeedbackPolicy
from rbd_deriv.exceptions import InputError

__all__ = ["LockedJoints", "locked_positions"]


def locked_positions(model: Any, names: list, q: np.ndarray) -> dict:
    """{joint: position} of the joints ``names`` of ``model`` in its configuration ``q`` (nq,): what
    :func:`rbd_deriv.load_urdf` takes as ``locked_joints``.

    Raises:
        InputError: A name that is not an actuated joint of the model (a free flyer cannot be locked), or one
            named twice.
    """
    actuated = set(model.actuated_joint_names)
    unknown = [name for name in names if name not in actuated]
    if unknown:
        raise InputError(f"locked_joints: {unknown[:5]} are not actuated joints of the robot", "locked_joints")
    if len(set(names)) != len(names):
        raise InputError("locked_joints names a joint twice", "locked_joints")
    return {name: float(q[model.idx_q[name]]) for name in names}


class LockedJoints:
    """The full robot's side of a reduced model: which of its rows the reduced model's fill, and the springs of the
    locked joints (see the module).

    Args:
        full: The robot's model (every joint).
        reduced: The same URDF loaded with ``locked_joints=positions``.
        positions: {joint: position [rad or m]} of the locked joints.
        frequency: [Hz] natural frequency of each locked joint's spring, > 0.
        damping_ratio: zeta of the springs, > 0 (1: critically damped).

    Attributes:
        names: The locked joints, in the full model's order.
        full: The full model; its ``joint_names`` and ``actuated_joint_names`` name a policy's state and rows.
        positions: (L,) where they are locked [rad or m], in the order of ``names``.
        kp, kd: (L,) the springs' gains [N m/rad, N m s/rad], in the same order.

    Raises:
        InputError: A frequency or damping ratio that is not finite and > 0; models that are not the full and
            reduced forms of one robot.
    """

    def __init__(self, full: Any, reduced: Any, positions: Mapping[str, float], frequency: float = 10.0,
                 damping_ratio: float = 1.0) -> None:
        for label, value in (("frequency", frequency), ("damping_ratio", damping_ratio)):
            if not (math.isfinite(value) and value > 0.0):
                raise InputError(f"locked joints: {label} must be finite and > 0, got {value}", label)
        kept = [name for name in full.joint_names if name not in positions]
        if list(reduced.joint_names) != kept:
            raise InputError("the reduced model's joints are not the full model's less the locked ones",
                             "locked_joints")
        self.full, self.reduced = full, reduced
        self.names = tuple(name for name in full.actuated_joint_names if name in positions)
        self._q_rows = np.concatenate([np.arange(full.idx_q[n], full.idx_q[n] + full.nq_joint[n]) for n in kept])
        self._v_rows = np.concatenate([np.arange(full.idx_v[n], full.idx_v[n] + full.nv_joint[n]) for n in kept])
        full_u = {name: row for row, name in enumerate(full.actuated_joint_names)}
        self._u_rows = np.array([full_u[name] for name in reduced.actuated_joint_names], dtype=np.int64)
        self._locked_q = np.array([full.idx_q[n] for n in self.names], dtype=np.int64)
        self._locked_v = np.array([full.idx_v[n] for n in self.names], dtype=np.int64)
        self._locked_u = np.array([full_u[n] for n in self.names], dtype=np.int64)
        self.positions = np.array([positions[n] for n in self.names], dtype=float)
        #: The full velocity columns of the reduced gain's, [v rows, nv + v rows].
        self._columns = np.concatenate([self._v_rows, full.nv + self._v_rows])
        q = rd.neutral(full)
        q[self._locked_q] = self.positions
        data = full.create_data()
        inertia = np.diag(rd.crba(full, data, q))[self._locked_v]
        w = 2.0 * math.pi * frequency
        self.kp = inertia * w * w
        self.kd = 2.0 * damping_ratio * inertia * w
        #: (L,) [N m] the locked joints' torques in a command: the gravity torques of the last policy expanded
        #: (at first, of the locked posture on a level base).
        self.hold = rd.gravity_torques(full, data, q)[self._locked_v].copy()

    def full_states(self, x: np.ndarray) -> np.ndarray:
        """(K, nq_r + nv_r) reduced states -> (K, nq + nv) full ones: the locked joints at their positions, still."""
        x = np.atleast_2d(x)
        full, reduced = self.full, self.reduced
        out = np.zeros((x.shape[0], full.nq + full.nv))
        out[:, self._q_rows] = x[:, :reduced.nq]
        out[:, self._locked_q] = self.positions
        out[:, full.nq + self._v_rows] = x[:, reduced.nq:]
        return out

    def expand(self, policy: FeedbackPolicy) -> FeedbackPolicy:
        """The reduced model's ``policy`` written for the full robot: its states, torques and gains in the full
        model's rows, each locked joint held by its spring on top of its gravity torque (see the module)."""
        full, nv = self.full, self.full.nv
        x_ref = self.full_states(policy.x_ref)
        still = np.zeros((len(x_ref), nv))
        gravity = rd.rnea_batch(full, x_ref[:, :full.nq], still, still)
        u_ff = np.zeros((policy.knots, len(full.actuated_joint_names)))
        u_ff[:, self._u_rows] = policy.u_ff
        u_ff[:, self._locked_u] = gravity[:, self._locked_v]
        gains = policy.gains
        gain = np.zeros((gains.shape[0], u_ff.shape[1], 2 * nv))
        gain[:, self._u_rows[:, None], self._columns[None, :]] = gains
        gain[:, self._locked_u, self._locked_v] = -self.kp
        gain[:, self._locked_u, nv + self._locked_v] = -self.kd
        self.hold = u_ff[0, self._locked_u].copy()
        return FeedbackPolicy(policy.stamp_ns, policy.knot_dt, policy.valid_for, x_ref, u_ff,
                              gain if policy.gain.ndim == 3 else gain[0])

    def expand_command(self, command: np.ndarray) -> np.ndarray:
        """(nu_r,) a torque command of the reduced model [N m] -> (nu,) the full robot's, the locked joints at
        :attr:`hold`."""
        out = np.empty(len(self.full.actuated_joint_names))
        out[self._u_rows] = command
        out[self._locked_u] = self.hold
        return out
