"""A slow, plain reference of the recursive Newton-Euler algorithm.

Written for reading, not speed: one loop forward, one loop backward, textbook
names (Featherstone, *Rigid Body Dynamics Algorithms*, 2008, table 5.1), 6-vectors
in Pinocchio's ``[linear, angular]`` order, everything in each joint's frame.
Every operation is analytic, so the same code runs on complex numbers and the
complex-step method gives its derivatives to machine precision:

.. math:: \\frac{\\partial f}{\\partial x_k} = \\frac{\\operatorname{Im} f(x + i h e_k)}{h},
   \\quad h = 10^{-30}.

The model is read through its public description (duck typed, see
:class:`TreeArrays`): ``parents``, ``joint_types``, ``joint_axes``,
``joint_placements``, ``inertias``, ``joint_names``, ``idx_q``, ``idx_v``,
``nq``, ``nv``, ``njoints``, ``gravity``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from rbd_deriv.core.urdf import JOINT_FREEFLYER, JOINT_PRISMATIC, JOINT_REVOLUTE

__all__ = [
    "COMPLEX_STEP",
    "TreeArrays",
    "complex_step_aba_derivatives",
    "complex_step_rnea_derivatives",
    "forward_dynamics",
    "integrate",
    "mass_matrix",
    "rnea",
]

COMPLEX_STEP = 1e-30
"""Imaginary step h: far below round-off, yet Im f / h has no cancellation."""


@dataclasses.dataclass
class TreeArrays:
    """The public description of a kinematic tree that the reference reads.

    Row 0 of every per-joint array is the universe.

    Attributes:
        joint_names: movable joints in model order (joint i + 1 is ``joint_names[i]``).
        parents: (njoints,) parent joint index, 0 the universe.
        joint_types: (njoints,) JOINT_REVOLUTE, JOINT_PRISMATIC or JOINT_FREEFLYER; -1 for the universe.
        joint_axes: (njoints, 3) unit axis in the joint frame.
        joint_placements: (njoints, 4, 4) joint frame in its parent joint frame at zero motion.
        inertias: (njoints, 10) [mass kg, com (3) m, Ixx Ixy Ixz Iyy Iyz Izz kg m^2 about the com].
        idx_q, idx_v: first configuration / velocity index of each joint, by name.
        nq, nv, njoints: sizes.
        gravity: (6,) spatial gravity [linear m/s^2, angular rad/s^2].
    """

    joint_names: List[str]
    parents: np.ndarray
    joint_types: np.ndarray
    joint_axes: np.ndarray
    joint_placements: np.ndarray
    inertias: np.ndarray
    idx_q: Dict[str, int]
    idx_v: Dict[str, int]
    nq: int
    nv: int
    njoints: int
    gravity: np.ndarray


# --------------------------------------------------------------- spatial algebra
def skew(w: np.ndarray) -> np.ndarray:
    """Matrix (3, 3) of the cross product w x ."""
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]], dtype=w.dtype)


def motion_transform(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Plucker transform (6, 6) taking motion vectors from child to parent coordinates,
    for a child frame at rotation R (3, 3) and origin p (3,) [m] in the parent."""
    X = np.zeros((6, 6), dtype=np.result_type(R, p))
    X[:3, :3] = R
    X[:3, 3:] = skew(p) @ R
    X[3:, 3:] = R
    return X


def inverse_motion_transform(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Plucker transform (6, 6) taking motion vectors from parent to child coordinates."""
    X = np.zeros((6, 6), dtype=np.result_type(R, p))
    X[:3, :3] = R.T
    X[:3, 3:] = -R.T @ skew(p)
    X[3:, 3:] = R.T
    return X


def crm(v: np.ndarray) -> np.ndarray:
    """Motion cross product matrix (6, 6): crm(v) m = v x m."""
    out = np.zeros((6, 6), dtype=v.dtype)
    out[:3, :3] = skew(v[3:])
    out[:3, 3:] = skew(v[:3])
    out[3:, 3:] = skew(v[3:])
    return out


def crf(v: np.ndarray) -> np.ndarray:
    """Force cross product matrix (6, 6): crf(v) f = v x* f = -crm(v)^T f."""
    return -crm(v).T


def spatial_inertia(row: np.ndarray) -> np.ndarray:
    """Spatial inertia (6, 6) about the joint origin from a 10-vector
    [mass, com (3), Ixx Ixy Ixz Iyy Iyz Izz about the com].

    Deliberately not shared with the library: an oracle must not reuse the code it checks.
    """
    mass, com = row[0], row[1:4]
    ixx, ixy, ixz, iyy, iyz, izz = row[4:10]
    inertia_com = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    c = skew(np.asarray(com, dtype=float))
    I = np.zeros((6, 6))
    I[:3, :3] = mass * np.eye(3)
    I[:3, 3:] = -mass * c
    I[3:, :3] = mass * c
    I[3:, 3:] = inertia_com - mass * c @ c
    return I


def rotation_about_axis(axis: np.ndarray, angle) -> np.ndarray:
    """Rodrigues' formula (3, 3) for a unit ``axis`` and an ``angle`` [rad], real or complex."""
    K = skew(np.asarray(axis, dtype=np.result_type(axis, angle)))
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def rotation_from_quaternion(x, y, z, w) -> np.ndarray:
    """Rotation (3, 3) of a unit quaternion; polynomial, so complex-safe."""
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


# --------------------------------------------------------------- model access
def _joint_slices(model: Any) -> List[Tuple[int, int, int]]:
    """(joint index, first q index, first v index) for each movable joint."""
    return [(i, int(model.idx_q[name]), int(model.idx_v[name])) for i, name in enumerate(model.joint_names, start=1)]


def _joint_transform(model: Any, i: int, q: np.ndarray, iq: int) -> Tuple[np.ndarray, np.ndarray]:
    """Placement (R, p) of joint frame i in its parent joint frame at configuration q."""
    placement = np.asarray(model.joint_placements[i])
    R0, p0 = placement[:3, :3], placement[:3, 3]
    kind = int(model.joint_types[i])
    axis = np.asarray(model.joint_axes[i], dtype=float)
    if kind == JOINT_REVOLUTE:
        return R0 @ rotation_about_axis(axis, q[iq]), p0.astype(q.dtype)
    if kind == JOINT_PRISMATIC:
        return R0.astype(q.dtype), p0 + R0 @ (axis * q[iq])
    if kind == JOINT_FREEFLYER:
        R = rotation_from_quaternion(*q[iq + 3:iq + 7])
        return R0 @ R, p0 + R0 @ q[iq:iq + 3]
    raise ValueError(f"unknown joint type {kind} for joint {i}")


def _motion_subspace(model: Any, i: int) -> np.ndarray:
    """S (6, nv_i) in the joint frame, [linear, angular] rows."""
    kind = int(model.joint_types[i])
    axis = np.asarray(model.joint_axes[i], dtype=float)
    if kind == JOINT_REVOLUTE:
        return np.concatenate([np.zeros(3), axis]).reshape(6, 1)
    if kind == JOINT_PRISMATIC:
        return np.concatenate([axis, np.zeros(3)]).reshape(6, 1)
    if kind == JOINT_FREEFLYER:
        # The free-flyer velocity is the body twist itself.
        return np.eye(6)
    raise ValueError(f"unknown joint type {kind} for joint {i}")


# --------------------------------------------------------------- algorithms
def rnea(model: Any, q: np.ndarray, v: np.ndarray, a: np.ndarray, fext: Optional[np.ndarray] = None) -> np.ndarray:
    """Inverse dynamics tau (nv,) by the recursive Newton-Euler algorithm.

    Args:
        model: tree description (see :class:`TreeArrays`).
        q: configuration (nq,), quaternions [x, y, z, w]; real or complex.
        v, a: joint velocity and acceleration (nv,).
        fext: external spatial forces (njoints, 6) [N, N m] in each joint frame.
    """
    dtype = np.result_type(q, v, a, float) if fext is None else np.result_type(q, v, a, fext, float)
    q, v, a = (np.asarray(x, dtype=dtype) for x in (q, v, a))
    njoints = int(model.njoints)
    Xup: List[np.ndarray] = [np.eye(6)] * njoints
    S: List[np.ndarray] = [np.zeros((6, 0))] * njoints
    vel = [np.zeros(6, dtype=dtype) for _ in range(njoints)]
    acc = [np.zeros(6, dtype=dtype) for _ in range(njoints)]
    f = [np.zeros(6, dtype=dtype) for _ in range(njoints)]
    # Gravity enters as a fictitious upward acceleration of the universe.
    acc[0] = -np.asarray(model.gravity, dtype=dtype)
    slices = _joint_slices(model)
    for i, iq, iv in slices:
        S[i] = _motion_subspace(model, i)
        nvi = S[i].shape[1]
        R, p = _joint_transform(model, i, q, iq)
        Xup[i] = inverse_motion_transform(R, p)
        lam = int(model.parents[i])
        qd, qdd = v[iv:iv + nvi], a[iv:iv + nvi]
        vJ = S[i] @ qd
        vel[i] = Xup[i] @ vel[lam] + vJ
        # Joints here have constant S in their own frame, so c_J = 0.
        acc[i] = Xup[i] @ acc[lam] + S[i] @ qdd + crm(vel[i]) @ vJ
        I = spatial_inertia(np.asarray(model.inertias[i], dtype=float))
        f[i] = I @ acc[i] + crf(vel[i]) @ (I @ vel[i])
        if fext is not None:
            f[i] = f[i] - np.asarray(fext[i], dtype=dtype)
    tau = np.zeros(int(model.nv), dtype=dtype)
    for i, iq, iv in reversed(slices):
        nvi = S[i].shape[1]
        tau[iv:iv + nvi] = S[i].T @ f[i]
        lam = int(model.parents[i])
        if lam > 0:
            f[lam] = f[lam] + Xup[i].T @ f[i]
    return tau


def mass_matrix(model: Any, q: np.ndarray) -> np.ndarray:
    """Joint-space inertia M (nv, nv) column by column from RNEA without gravity."""
    nv = int(model.nv)
    no_gravity = _without_gravity(model)
    zero = np.zeros(nv)
    columns = [rnea(no_gravity, q, zero, np.eye(nv)[k]) for k in range(nv)]
    M = np.stack(columns, axis=1)
    return 0.5 * (M + M.T)


def forward_dynamics(
    model: Any, q: np.ndarray, v: np.ndarray, tau: np.ndarray, fext: Optional[np.ndarray] = None
) -> np.ndarray:
    """ddq (nv,) = M(q)^-1 (tau - rnea(q, v, 0, fext)), by a dense solve (complex-safe)."""
    bias = rnea(model, q, v, np.zeros(int(model.nv)), fext)
    return np.linalg.solve(mass_matrix(model, q), np.asarray(tau) - bias)


def _without_gravity(model: Any) -> Any:
    class _NoGravity:
        def __getattr__(self, name):
            return getattr(model, name)

    shadow = _NoGravity()
    shadow.gravity = np.zeros(6)
    return shadow


# --------------------------------------------------------------- configuration space
def _exp_coefficients(theta_squared):
    """sin(t)/t, (1 - cos t)/t^2, (t - sin t)/t^3, cos(t/2), sin(t/2)/t as functions of t^2.

    Each is even in t, so it is analytic in t^2; the square root taken for large
    angles is the complex one (never abs), which keeps complex steps exact.
    """
    if abs(theta_squared) < 1e-6:
        t2 = theta_squared
        return (
            1 - t2 / 6 + t2 * t2 / 120,
            0.5 - t2 / 24 + t2 * t2 / 720,
            1 / 6 - t2 / 120 + t2 * t2 / 5040,
            1 - t2 / 8 + t2 * t2 / 384,
            0.5 - t2 / 48 + t2 * t2 / 3840,
        )
    theta = np.sqrt(theta_squared)
    return (
        np.sin(theta) / theta,
        (1 - np.cos(theta)) / theta_squared,
        (theta - np.sin(theta)) / (theta_squared * theta),
        np.cos(theta / 2),
        np.sin(theta / 2) / theta,
    )


def _quaternion_product(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Hamilton product p r of quaternions stored [x, y, z, w]."""
    pv, pw, rv, rw = p[:3], p[3], r[:3], r[3]
    vector = pw * rv + rw * pv + np.cross(pv, rv)
    return np.concatenate([vector, [pw * rw - pv @ rv]])


def integrate(model: Any, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q (+) v (nq,): angles and positions add; a free flyer moves by the body twist v
    for unit time (SE(3) exponential). Complex-safe."""
    dtype = np.result_type(q, v, float)
    q, v = np.asarray(q, dtype=dtype), np.asarray(v, dtype=dtype)
    out = q.copy()
    for i, iq, iv in _joint_slices(model):
        if int(model.joint_types[i]) != JOINT_FREEFLYER:
            out[iq] = q[iq] + v[iv]
            continue
        linear, angular = v[iv:iv + 3], v[iv + 3:iv + 6]
        sinc, cosc, sinc3, half_cos, half_sinc = _exp_coefficients(angular @ angular)
        W = skew(angular)
        V = np.eye(3) + cosc * W + sinc3 * W @ W
        quaternion = q[iq + 3:iq + 7]
        R = rotation_from_quaternion(*quaternion)
        out[iq:iq + 3] = q[iq:iq + 3] + R @ (V @ linear)
        delta = np.concatenate([half_sinc * angular, [half_cos]])
        out[iq + 3:iq + 7] = _quaternion_product(quaternion, delta)
    return out


# --------------------------------------------------------------- complex-step derivatives
def _complex_step_jacobians(function, model: Any, q, v, u, fext, step: float):
    """Jacobians (nv, nv) of ``function(model, q, v, u, fext)`` with respect to q (along
    ``integrate(q, i h e_k)``, the tangent space, as Pinocchio), v and u."""
    nv = int(model.nv)
    q, v, u = (np.asarray(x, dtype=float) for x in (q, v, u))
    d_dq, d_dv, d_du = (np.zeros((nv, nv)) for _ in range(3))
    for k in range(nv):
        e = np.zeros(nv, dtype=complex)
        e[k] = 1j * step
        d_dq[:, k] = function(model, integrate(model, q, e), v, u, fext).imag / step
        d_dv[:, k] = function(model, q, v + e, u, fext).imag / step
        d_du[:, k] = function(model, q, v, u + e, fext).imag / step
    return d_dq, d_dv, d_du


def complex_step_rnea_derivatives(
    model: Any, q: np.ndarray, v: np.ndarray, a: np.ndarray, fext: Optional[np.ndarray] = None,
    step: float = COMPLEX_STEP,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dtau_dq, dtau_dv, dtau_da) each (nv, nv) by complex steps on :func:`rnea`."""
    return _complex_step_jacobians(rnea, model, q, v, a, fext, step)


def complex_step_aba_derivatives(
    model: Any, q: np.ndarray, v: np.ndarray, tau: np.ndarray, fext: Optional[np.ndarray] = None,
    step: float = COMPLEX_STEP,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dddq_dq, dddq_dv, dddq_dtau) each (nv, nv) by complex steps on :func:`forward_dynamics`."""
    return _complex_step_jacobians(forward_dynamics, model, q, v, tau, fext, step)
