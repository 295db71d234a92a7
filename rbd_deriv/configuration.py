"""Configuration space: neutral, integrate, difference, random configurations and the Jacobians of integrate.

The configuration manifold is the product of the joints' spaces: R for revolute, continuous (one angle) and
prismatic joints, SE(3) for the free flyer, with q = [x y z qx qy qz qw] and tangent v = [linear, angular]
in the body frame. As in Pinocchio, integrate composes on the right:

    integrate(q, v) = q (+) v:   M(q) exp6(v)          (free flyer)
    difference(q0, q1) = log6(M(q0)^-1 M(q1))

and the Jacobians of integrate are, for the free flyer, d/dq = Ad(exp6(v))^-1 and d/dv = Jr(v), the right
Jacobian of exp6 (Barfoot, State Estimation for Robotics, sec. 7.1.5, in its [rho; phi] = [linear; angular]
ordering); identity for one-dof joints.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from rbd_deriv import constants
from rbd_deriv.exceptions import InputError
from rbd_deriv.kinematics import MF_T, MI_T, VEC_T, raise_for_status, check_inputs
from rbd_deriv.model import MI_IDX_Q, MI_IDX_V, MI_NJ, MI_NQTOT, MI_NVTOT, MI_TYPE, Model
from rbd_deriv.spatial import _NJIT
from rbd_deriv.urdf import JOINT_FREEFLYER

_SMALL = 1e-2  # below this angle [rad], exp3 coefficients use their Taylor series
_SMALL_Q = 0.3  # the Q(rho, phi) coefficients cancel more: Taylor series up to this angle


@njit(**_NJIT)
def _exp3_coefficients(theta2):
    """sin(t)/t, (1 - cos t)/t^2, (t - sin t)/t^3 for t^2 = theta2."""
    if theta2 < _SMALL * _SMALL:
        return (1.0 - theta2 / 6.0 + theta2 * theta2 / 120.0,
                0.5 - theta2 / 24.0 + theta2 * theta2 / 720.0,
                1.0 / 6.0 - theta2 / 120.0 + theta2 * theta2 / 5040.0)
    t = math.sqrt(theta2)
    s, c = math.sin(t), math.cos(t)
    return s / t, (1.0 - c) / theta2, (t - s) / (theta2 * t)


@njit(**_NJIT)
def _skew(w, out):
    out[0, 0], out[0, 1], out[0, 2] = 0.0, -w[2], w[1]
    out[1, 0], out[1, 1], out[1, 2] = w[2], 0.0, -w[0]
    out[2, 0], out[2, 1], out[2, 2] = -w[1], w[0], 0.0


@njit(**_NJIT)
def _so3_series(w, ca, cb, out):
    """out = I + ca [w]x + cb [w]x^2 (3x3)."""
    W = np.empty((3, 3))
    _skew(w, W)
    W2 = W @ W
    for r in range(3):
        for c in range(3):
            out[r, c] = (1.0 if r == c else 0.0) + ca * W[r, c] + cb * W2[r, c]


@njit(**_NJIT)
def _quat_multiply(a, b, out):
    """out = a b for quaternions stored (x, y, z, w)."""
    ax, ay, az, aw = a[0], a[1], a[2], a[3]
    bx, by, bz, bw = b[0], b[1], b[2], b[3]
    out[0] = aw * bx + ax * bw + ay * bz - az * by
    out[1] = aw * by - ax * bz + ay * bw + az * bx
    out[2] = aw * bz + ax * by - ay * bx + az * bw
    out[3] = aw * bw - ax * bx - ay * by - az * bz


@njit(**_NJIT)
def _quat_to_rotation(x, y, z, w):
    R = np.empty((3, 3))
    R[0, 0], R[0, 1], R[0, 2] = 1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)
    R[1, 0], R[1, 1], R[1, 2] = 2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)
    R[2, 0], R[2, 1], R[2, 2] = 2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)
    return R


@njit(**_NJIT)
def integrate_into(mi, q, v, out):
    """out (nq,) = q (+) v."""
    nj = mi[0, MI_NJ]
    for i in range(1, nj):
        iq, iv = mi[i, MI_IDX_Q], mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            out[iq] = q[iq] + v[iv]
            continue
        w = v[iv + 3 : iv + 6]
        theta2 = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
        sa, cb, cc = _exp3_coefficients(theta2)
        V = np.empty((3, 3))
        _so3_series(w, cb, cc, V)
        n = math.sqrt(q[iq + 3] ** 2 + q[iq + 4] ** 2 + q[iq + 5] ** 2 + q[iq + 6] ** 2)
        q0 = np.empty(4)
        for k in range(4):
            q0[k] = q[iq + 3 + k] / n
        R0 = _quat_to_rotation(q0[0], q0[1], q0[2], q0[3])
        dp = V @ v[iv : iv + 3]
        for r in range(3):
            out[iq + r] = q[iq + r] + R0[r, 0] * dp[0] + R0[r, 1] * dp[1] + R0[r, 2] * dp[2]
        # exp3 as a quaternion: (sin(t/2) w / t, cos(t/2)), with sin(t/2)/t = (sin t / t) / (2 cos(t/2)).
        half = np.empty(4)
        t = math.sqrt(theta2)
        if t < _SMALL:
            s_over_t = 0.5 - theta2 / 48.0 + theta2 * theta2 / 3840.0
        else:
            s_over_t = math.sin(0.5 * t) / t
        half[0], half[1], half[2], half[3] = s_over_t * w[0], s_over_t * w[1], s_over_t * w[2], math.cos(0.5 * t)
        q1 = np.empty(4)
        _quat_multiply(q0, half, q1)
        n1 = math.sqrt(q1[0] ** 2 + q1[1] ** 2 + q1[2] ** 2 + q1[3] ** 2)
        for k in range(4):
            out[iq + 3 + k] = q1[k] / n1


@njit(**_NJIT)
def _log3_quaternion(x, y, z, w, out):
    """Rotation vector (3,) of the unit quaternion (x, y, z, w), angle in [0, pi]."""
    if w < 0.0:
        x, y, z, w = -x, -y, -z, -w
    s = math.sqrt(x * x + y * y + z * z)
    t = 2.0 * math.atan2(s, w)
    if s < 1e-12:
        scale = 2.0 / w  # t / s -> 2 / w as s -> 0
    else:
        scale = t / s
    out[0], out[1], out[2] = scale * x, scale * y, scale * z


@njit(**_NJIT)
def difference_into(mi, continuous, q0, q1, out):
    """out (nv,) = q1 (-) q0 (continuous joints wrap to (-pi, pi])."""
    nj = mi[0, MI_NJ]
    for i in range(1, nj):
        iq, iv = mi[i, MI_IDX_Q], mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            d = q1[iq] - q0[iq]
            if continuous[i]:
                d = math.atan2(math.sin(d), math.cos(d))
            out[iv] = d
            continue
        a = np.empty(4)
        b = np.empty(4)
        na = math.sqrt(q0[iq + 3] ** 2 + q0[iq + 4] ** 2 + q0[iq + 5] ** 2 + q0[iq + 6] ** 2)
        nb = math.sqrt(q1[iq + 3] ** 2 + q1[iq + 4] ** 2 + q1[iq + 5] ** 2 + q1[iq + 6] ** 2)
        for k in range(3):
            a[k] = -q0[iq + 3 + k] / na  # conjugate of q0
            b[k] = q1[iq + 3 + k] / nb
        a[3], b[3] = q0[iq + 6] / na, q1[iq + 6] / nb
        rel = np.empty(4)
        _quat_multiply(a, b, rel)
        w = np.empty(3)
        _log3_quaternion(rel[0], rel[1], rel[2], rel[3], w)
        R0 = _quat_to_rotation(-a[0], -a[1], -a[2], a[3])
        dp = np.empty(3)
        for r in range(3):
            dp[r] = (R0[0, r] * (q1[iq] - q0[iq]) + R0[1, r] * (q1[iq + 1] - q0[iq + 1])
                     + R0[2, r] * (q1[iq + 2] - q0[iq + 2]))
        # V^-1 = I - [w]x / 2 + (1/t^2 - (1 + cos t) / (2 t sin t)) [w]x^2
        theta2 = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
        if theta2 < _SMALL * _SMALL:
            cw = 1.0 / 12.0 + theta2 / 720.0 + theta2 * theta2 / 30240.0
        else:
            t = math.sqrt(theta2)
            cw = 1.0 / theta2 - (1.0 + math.cos(t)) / (2.0 * t * math.sin(t))
        Vinv = np.empty((3, 3))
        _so3_series(w, -0.5, cw, Vinv)
        lin = Vinv @ dp
        for k in range(3):
            out[iv + k] = lin[k]
            out[iv + 3 + k] = w[k]


@njit(**_NJIT)
def _q_coefficients(theta2):
    """(t - sin t)/t^3, (t^2 + 2 cos t - 2)/(2 t^4), (2t - 3 sin t + t cos t)/(2 t^5)."""
    if theta2 < _SMALL_Q * _SMALL_Q:
        t2, t4, t6 = theta2, theta2 * theta2, theta2 * theta2 * theta2
        return (1.0 / 6.0 - t2 / 120.0 + t4 / 5040.0 - t6 / 362880.0,
                1.0 / 24.0 - t2 / 720.0 + t4 / 40320.0 - t6 / 3628800.0,
                1.0 / 120.0 - t2 / 2520.0 + t4 / 120960.0 - t6 / 9979200.0)
    t = math.sqrt(theta2)
    s, c = math.sin(t), math.cos(t)
    return ((t - s) / (theta2 * t), (theta2 + 2.0 * c - 2.0) / (2.0 * theta2 * theta2),
            (2.0 * t - 3.0 * s + t * c) / (2.0 * theta2 * theta2 * t))


@njit(**_NJIT)
def _left_jacobian_se3(rho, phi, out):
    """out (6x6) = Jl(xi) of exp6 for xi = [rho; phi] (Barfoot eq. 7.85-7.86)."""
    theta2 = phi[0] ** 2 + phi[1] ** 2 + phi[2] ** 2
    sa, cb, cc = _exp3_coefficients(theta2)
    J3 = np.empty((3, 3))
    _so3_series(phi, cb, cc, J3)
    P = np.empty((3, 3))
    Rh = np.empty((3, 3))
    _skew(phi, P)
    _skew(rho, Rh)
    k1, k2, k3 = _q_coefficients(theta2)
    PR = P @ Rh
    RP = Rh @ P
    PRP = PR @ P
    PPR = P @ PR
    RPP = RP @ P
    Q = 0.5 * Rh + k1 * (PR + RP + PRP) + k2 * (PPR + RPP - 3.0 * PRP) + k3 * (PRP @ P + P @ PRP)
    for r in range(6):
        for c in range(6):
            out[r, c] = 0.0
    for r in range(3):
        for c in range(3):
            out[r, c] = J3[r, c]
            out[3 + r, 3 + c] = J3[r, c]
            out[r, 3 + c] = Q[r, c]


@njit(**_NJIT)
def dintegrate_into(mi, v, Jq, Jv):
    """Jq = d(q (+) v)/dq and Jv = d(q (+) v)/dv (nv, nv), tangent space; block diagonal per joint."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    for r in range(nv):
        for c in range(nv):
            Jq[r, c] = 0.0
            Jv[r, c] = 0.0
    for i in range(1, nj):
        iv = mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            Jq[iv, iv] = 1.0
            Jv[iv, iv] = 1.0
            continue
        rho = -v[iv : iv + 3]
        phi = -v[iv + 3 : iv + 6]
        J = np.empty((6, 6))
        _left_jacobian_se3(rho, phi, J)  # Jr(v) = Jl(-v)
        # exp6(v)^-1 = exp6(-v) = (R^T, -R^T p): Ad = [[R^T, -R^T [p]x], [0, R^T]]
        theta2 = phi[0] ** 2 + phi[1] ** 2 + phi[2] ** 2
        sa, cb, cc = _exp3_coefficients(theta2)
        Rt = np.empty((3, 3))
        _so3_series(phi, sa, cb, Rt)  # exp3(-w) = R^T
        Vm = np.empty((3, 3))
        _so3_series(phi, cb, cc, Vm)  # translation of exp6(-v) is V(-w)(-rho_v) = -R^T p
        t = Vm @ rho  # t = -R^T p
        T = np.empty((3, 3))
        _skew(t, T)
        TR = T @ Rt  # [-R^T p]x R^T = -R^T [p]x
        for r in range(6):
            for c in range(6):
                Jv[iv + r, iv + c] = J[r, c]
        for r in range(3):
            for c in range(3):
                Jq[iv + r, iv + c] = Rt[r, c]
                Jq[iv + 3 + r, iv + 3 + c] = Rt[r, c]
                Jq[iv + r, iv + 3 + c] = TR[r, c]


# --- public API -----------------------------------------------------------------------------------------

_INT_SIG = types.int64(MI_T, VEC_T, VEC_T, VEC_T)


@njit(_INT_SIG, **_NJIT)
def _integrate_kernel(mi, q, v, out):
    status = check_inputs(mi, q, v, np.zeros(mi[0, MI_NVTOT]), np.zeros((mi[0, MI_NJ], 6)))
    if status != 0:
        return status
    integrate_into(mi, q, v, out)
    return 0


_DIFF_SIG = types.int64(MI_T, types.Array(types.boolean, 1, "C", readonly=True), VEC_T, VEC_T, VEC_T)


@njit(_DIFF_SIG, **_NJIT)
def _difference_kernel(mi, continuous, q0, q1, out):
    zero_v = np.zeros(mi[0, MI_NVTOT])
    fext = np.zeros((mi[0, MI_NJ], 6))
    status = check_inputs(mi, q0, zero_v, zero_v, fext)
    if status != 0:
        return status
    status = check_inputs(mi, q1, zero_v, zero_v, fext)
    if status != 0:
        return status + 1  # detail 1 names q1
    difference_into(mi, continuous, q0, q1, out)
    return 0


_DINT_SIG = types.int64(MI_T, VEC_T, VEC_T, types.Array(types.float64, 2, "C"), types.Array(types.float64, 2, "C"))


@njit(_DINT_SIG, **_NJIT)
def _dintegrate_kernel(mi, q, v, Jq, Jv):
    status = check_inputs(mi, q, v, np.zeros(mi[0, MI_NVTOT]), np.zeros((mi[0, MI_NJ], 6)))
    if status != 0:
        return status
    dintegrate_into(mi, v, Jq, Jv)
    return 0


def _vector(x, name: str) -> np.ndarray:
    from rbd_deriv.kinematics import as_input_array

    return as_input_array(x, name, 1)


def neutral(model: Model) -> np.ndarray:
    """Neutral configuration (nq,): zero joint positions, identity free-flyer placement."""
    q = np.zeros(model.nq)
    for i in range(1, model.njoints):
        if model.mi[i, MI_TYPE] == JOINT_FREEFLYER:
            q[model.mi[i, MI_IDX_Q] + 6] = 1.0
    return q


def integrate(model: Model, q, v) -> np.ndarray:
    """q (+) v: the configuration reached from q by the velocity v held for one unit of time.

    Args:
        q: (nq,) configuration.
        v: (nv,) tangent vector [rad, m].

    Returns:
        (nq,) new array.
    """
    q, v = _vector(q, "q"), _vector(v, "v")
    out = np.empty(model.nq)
    status = _integrate_kernel(model.mi, q, v, out)
    if status:
        raise_for_status(model, status)
    return out


def difference(model: Model, q0, q1) -> np.ndarray:
    """q1 (-) q0: the tangent vector v (nv,) such that integrate(q0, v) == q1 (continuous joints wrap)."""
    q0, q1 = _vector(q0, "q0"), _vector(q1, "q1")
    out = np.empty(model.nv)
    status = _difference_kernel(model.mi, model.continuous, q0, q1, out)
    if status:
        raise_for_status(model, status, names=("q0", "q1", "q1", "q1"))
    return out


def dintegrate_dq(model: Model, q, v) -> np.ndarray:
    """Jacobian (nv, nv) of integrate(q, v) with respect to q, in the tangent spaces."""
    return _dintegrate(model, q, v)[0]


def dintegrate_dv(model: Model, q, v) -> np.ndarray:
    """Jacobian (nv, nv) of integrate(q, v) with respect to v, in the tangent spaces."""
    return _dintegrate(model, q, v)[1]


def _dintegrate(model: Model, q, v):
    q, v = _vector(q, "q"), _vector(v, "v")
    Jq = np.empty((model.nv, model.nv))
    Jv = np.empty((model.nv, model.nv))
    status = _dintegrate_kernel(model.mi, q, v, Jq, Jv)
    if status:
        raise_for_status(model, status)
    return Jq, Jv


def random_configuration(model: Model, rng: np.random.Generator | None = None) -> np.ndarray:
    """A configuration drawn uniformly within the position limits (nq,).

    Where the URDF gives no limit, continuous joints draw in [-pi, pi], prismatic joints and the free-flyer
    translation in [-1, 1] m (constants.RANDOM_TRANSLATION_BOUND); the free-flyer orientation is a uniform
    random unit quaternion.

    Args:
        rng: numpy Generator (default: a new unseeded one).
    """
    if rng is None:
        rng = np.random.default_rng()
    elif not isinstance(rng, np.random.Generator):
        raise InputError("rng: expected a numpy.random.Generator (np.random.default_rng(seed))", "rng")
    bound = constants.RANDOM_TRANSLATION_BOUND
    q = np.empty(model.nq)
    for i in range(1, model.njoints):
        iq = model.mi[i, MI_IDX_Q]
        if model.mi[i, MI_TYPE] == JOINT_FREEFLYER:
            q[iq : iq + 3] = rng.uniform(-bound, bound, 3)
            quat = rng.normal(size=4)
            q[iq + 3 : iq + 7] = quat / np.linalg.norm(quat)
            continue
        lo, hi = model.lower_position_limit[iq], model.upper_position_limit[iq]
        default = math.pi if model.continuous[i] else bound
        lo = lo if math.isfinite(lo) else -default
        hi = hi if math.isfinite(hi) else default
        q[iq] = rng.uniform(lo, hi)
    return q
