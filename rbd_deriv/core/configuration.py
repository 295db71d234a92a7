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
from numba import njit

from rbd_deriv.core import constants
from rbd_deriv.core.calling import check_length, check_model, check_quaternions, check_shape, check_vector, register
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.layout import MI_IDX_Q, MI_IDX_V, MI_NJ, MI_NQTOT, MI_NVTOT, MI_TYPE
from rbd_deriv.core.model import Model
from rbd_deriv.core.urdf import JOINT_FREEFLYER
from rbd_deriv.exceptions import InputError

_SMALL = constants.SMALL_ANGLE
_SMALL_Q = constants.SMALL_ANGLE_JACOBIAN


@njit(**JIT_OPTIONS)
def exp3_coefficients(theta2):
    """sin(t)/t, (1 - cos t)/t^2, (t - sin t)/t^3 for t^2 = theta2."""
    if theta2 < _SMALL * _SMALL:
        return (1.0 - theta2 / 6.0 + theta2 * theta2 / 120.0,
                0.5 - theta2 / 24.0 + theta2 * theta2 / 720.0,
                1.0 / 6.0 - theta2 / 120.0 + theta2 * theta2 / 5040.0)
    t = math.sqrt(theta2)
    s, c = math.sin(t), math.cos(t)
    return s / t, (1.0 - c) / theta2, (t - s) / (theta2 * t)


@njit(inline="always", **JIT_OPTIONS)
def _skew3(x, y, z):
    """[w]x as a row-major 9-tuple."""
    return (0.0, -z, y, z, 0.0, -x, -y, x, 0.0)


@njit(inline="always", **JIT_OPTIONS)
def _product3(a, b):
    """The product of two 3x3 matrices given as row-major 9-tuples (a tuple: the kernels allocate nothing)."""
    return (a[0] * b[0] + a[1] * b[3] + a[2] * b[6], a[0] * b[1] + a[1] * b[4] + a[2] * b[7],
            a[0] * b[2] + a[1] * b[5] + a[2] * b[8],
            a[3] * b[0] + a[4] * b[3] + a[5] * b[6], a[3] * b[1] + a[4] * b[4] + a[5] * b[7],
            a[3] * b[2] + a[4] * b[5] + a[5] * b[8],
            a[6] * b[0] + a[7] * b[3] + a[8] * b[6], a[6] * b[1] + a[7] * b[4] + a[8] * b[7],
            a[6] * b[2] + a[7] * b[5] + a[8] * b[8])


@njit(**JIT_OPTIONS)
def _so3_series(wx, wy, wz, ca, cb, out, r0, c0):
    """out[r0:r0 + 3, c0:c0 + 3] = I + ca [w]x + cb [w]x^2, with [w]x^2 = w w^T - |w|^2 I."""
    w = (wx, wy, wz)
    W = _skew3(wx, wy, wz)
    diagonal = 1.0 - cb * (wx * wx + wy * wy + wz * wz)
    for r in range(3):
        for c in range(3):
            out[r0 + r, c0 + c] = (diagonal if r == c else 0.0) + ca * W[3 * r + c] + cb * w[r] * w[c]


@njit(**JIT_OPTIONS)
def integrate_into(mi, q, v, out):
    """out (nq,) = q (+) v."""
    nj = mi[0, MI_NJ]
    for i in range(1, nj):
        iq, iv = mi[i, MI_IDX_Q], mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            out[iq] = q[iq] + v[iv]
            continue
        ux, uy, uz = v[iv], v[iv + 1], v[iv + 2]
        wx, wy, wz = v[iv + 3], v[iv + 4], v[iv + 5]
        theta2 = wx * wx + wy * wy + wz * wz
        sa, cb, cc = exp3_coefficients(theta2)
        # dp = V(w) u = u + cb w x u + cc w x (w x u): the translation of exp6(v) in the body frame.
        cx, cy, cz = wy * uz - wz * uy, wz * ux - wx * uz, wx * uy - wy * ux
        ccx, ccy, ccz = wy * cz - wz * cy, wz * cx - wx * cz, wx * cy - wy * cx
        dx, dy, dz = ux + cb * cx + cc * ccx, uy + cb * cy + cc * ccy, uz + cb * cz + cc * ccz
        n = math.sqrt(q[iq + 3] ** 2 + q[iq + 4] ** 2 + q[iq + 5] ** 2 + q[iq + 6] ** 2)
        ax, ay, az, aw = q[iq + 3] / n, q[iq + 4] / n, q[iq + 5] / n, q[iq + 6] / n
        # Rotate dp by the quaternion: x' = x + aw t + a x t with t = 2 a x x.
        tx, ty, tz = 2.0 * (ay * dz - az * dy), 2.0 * (az * dx - ax * dz), 2.0 * (ax * dy - ay * dx)
        out[iq] = q[iq] + dx + aw * tx + ay * tz - az * ty
        out[iq + 1] = q[iq + 1] + dy + aw * ty + az * tx - ax * tz
        out[iq + 2] = q[iq + 2] + dz + aw * tz + ax * ty - ay * tx
        # exp3(w) as a quaternion (sin(t/2) w / t, cos(t/2)), then q0 * exp3(w).
        t = math.sqrt(theta2)
        if t < _SMALL:
            s_over_t = 0.5 - theta2 / 48.0 + theta2 * theta2 / 3840.0
        else:
            s_over_t = math.sin(0.5 * t) / t
        bx, by, bz, bw = s_over_t * wx, s_over_t * wy, s_over_t * wz, math.cos(0.5 * t)
        rx = aw * bx + ax * bw + ay * bz - az * by
        ry = aw * by - ax * bz + ay * bw + az * bx
        rz = aw * bz + ax * by - ay * bx + az * bw
        rw = aw * bw - ax * bx - ay * by - az * bz
        n1 = math.sqrt(rx * rx + ry * ry + rz * rz + rw * rw)
        out[iq + 3], out[iq + 4], out[iq + 5], out[iq + 6] = rx / n1, ry / n1, rz / n1, rw / n1


@njit(**JIT_OPTIONS)
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
        na = math.sqrt(q0[iq + 3] ** 2 + q0[iq + 4] ** 2 + q0[iq + 5] ** 2 + q0[iq + 6] ** 2)
        nb = math.sqrt(q1[iq + 3] ** 2 + q1[iq + 4] ** 2 + q1[iq + 5] ** 2 + q1[iq + 6] ** 2)
        ax, ay, az, aw = q0[iq + 3] / na, q0[iq + 4] / na, q0[iq + 5] / na, q0[iq + 6] / na
        bx, by, bz, bw = q1[iq + 3] / nb, q1[iq + 4] / nb, q1[iq + 5] / nb, q1[iq + 6] / nb
        # Relative rotation conj(a) b, taken on the short way (w >= 0), and its rotation vector.
        rx = aw * bx - ax * bw - ay * bz + az * by
        ry = aw * by + ax * bz - ay * bw - az * bx
        rz = aw * bz - ax * by + ay * bx - az * bw
        rw = aw * bw + ax * bx + ay * by + az * bz
        if rw < 0.0:
            rx, ry, rz, rw = -rx, -ry, -rz, -rw
        sn = math.sqrt(rx * rx + ry * ry + rz * rz)
        scale = 2.0 / rw if sn < 1e-12 else 2.0 * math.atan2(sn, rw) / sn
        wx, wy, wz = scale * rx, scale * ry, scale * rz
        # Translation in the frame of q0: dp = R(a)^T (p1 - p0) = p + aw t - a x t with t = 2 (-a) x p.
        px, py, pz = q1[iq] - q0[iq], q1[iq + 1] - q0[iq + 1], q1[iq + 2] - q0[iq + 2]
        tx, ty, tz = -2.0 * (ay * pz - az * py), -2.0 * (az * px - ax * pz), -2.0 * (ax * py - ay * px)
        dx = px + aw * tx - (ay * tz - az * ty)
        dy = py + aw * ty - (az * tx - ax * tz)
        dz = pz + aw * tz - (ax * ty - ay * tx)
        # V(w)^-1 dp = dp - (w x dp) / 2 + cw w x (w x dp), cw = 1/t^2 - (1 + cos t) / (2 t sin t)
        theta2 = wx * wx + wy * wy + wz * wz
        if theta2 < _SMALL * _SMALL:
            cw = 1.0 / 12.0 + theta2 / 720.0 + theta2 * theta2 / 30240.0
        else:
            t = math.sqrt(theta2)
            cw = 1.0 / theta2 - (1.0 + math.cos(t)) / (2.0 * t * math.sin(t))
        cx, cy, cz = wy * dz - wz * dy, wz * dx - wx * dz, wx * dy - wy * dx
        ccx, ccy, ccz = wy * cz - wz * cy, wz * cx - wx * cz, wx * cy - wy * cx
        out[iv] = dx - 0.5 * cx + cw * ccx
        out[iv + 1] = dy - 0.5 * cy + cw * ccy
        out[iv + 2] = dz - 0.5 * cz + cw * ccz
        out[iv + 3], out[iv + 4], out[iv + 5] = wx, wy, wz


@njit(**JIT_OPTIONS)
def q_coefficients(theta2):
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


@njit(**JIT_OPTIONS)
def _left_jacobian_se3(rx, ry, rz, px, py, pz, out, r0):
    """out[r0:r0 + 6, r0:r0 + 6] = Jl(xi) of exp6 for xi = [rho; phi] (Barfoot eq. 7.85-7.86):
    [[J3, Q], [0, J3]] with J3 the left Jacobian of exp3 at phi and Q the coupling block."""
    theta2 = px * px + py * py + pz * pz
    sa, cb, cc = exp3_coefficients(theta2)
    P = _skew3(px, py, pz)
    Rh = _skew3(rx, ry, rz)
    k1, k2, k3 = q_coefficients(theta2)
    PR = _product3(P, Rh)
    RP = _product3(Rh, P)
    PRP = _product3(PR, P)
    PPR = _product3(P, PR)
    RPP = _product3(RP, P)
    PRPP = _product3(PRP, P)
    PPRP = _product3(P, PRP)
    _so3_series(px, py, pz, cb, cc, out, r0, r0)
    for r in range(3):
        for c in range(3):
            k = 3 * r + c
            out[r0 + 3 + r, r0 + 3 + c] = out[r0 + r, r0 + c]
            out[r0 + 3 + r, r0 + c] = 0.0
            out[r0 + r, r0 + 3 + c] = (0.5 * Rh[k] + k1 * (PR[k] + RP[k] + PRP[k])
                                       + k2 * (PPR[k] + RPP[k] - 3.0 * PRP[k]) + k3 * (PRPP[k] + PPRP[k]))


@njit(**JIT_OPTIONS)
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
        rx, ry, rz = -v[iv], -v[iv + 1], -v[iv + 2]
        px, py, pz = -v[iv + 3], -v[iv + 4], -v[iv + 5]
        _left_jacobian_se3(rx, ry, rz, px, py, pz, Jv, iv)  # Jr(v) = Jl(-v)
        # exp6(v)^-1 = exp6(-v) = (R^T, -R^T p): Ad = [[R^T, -R^T [p]x], [0, R^T]]
        sa, cb, cc = exp3_coefficients(px * px + py * py + pz * pz)
        _so3_series(px, py, pz, sa, cb, Jq, iv, iv)  # exp3(-w) = R^T
        # t = -R^T p, the translation of exp6(-v): V(-w) rho with V(-w) = I + cb [phi]x + cc [phi]x^2
        ux, uy, uz = py * rz - pz * ry, pz * rx - px * rz, px * ry - py * rx
        tx = rx + cb * ux + cc * (py * uz - pz * uy)
        ty = ry + cb * uy + cc * (pz * ux - px * uz)
        tz = rz + cb * uz + cc * (px * uy - py * ux)
        for c in range(3):
            ax, ay, az = Jq[iv, iv + c], Jq[iv + 1, iv + c], Jq[iv + 2, iv + c]
            Jq[iv + 3, iv + 3 + c], Jq[iv + 4, iv + 3 + c], Jq[iv + 5, iv + 3 + c] = ax, ay, az
            # [t]x R^T = -R^T [p]x, column by column: t x (column c of R^T)
            Jq[iv, iv + 3 + c] = ty * az - tz * ay
            Jq[iv + 1, iv + 3 + c] = tz * ax - tx * az
            Jq[iv + 2, iv + 3 + c] = tx * ay - ty * ax


# --- public API -----------------------------------------------------------------------------------------


@njit(**JIT_OPTIONS)
def check_configuration(mi, q, v):
    """The checks of a kernel (mi, q, v, ...): q (shape, finite, quaternions) and the tangent vector v."""
    code = check_vector(q, mi[0, MI_NQTOT], 1)
    if code == 0:
        code = check_vector(v, mi[0, MI_NVTOT], 2)
    if code == 0:
        code = check_quaternions(mi, q, 1)
    return code


@njit(**JIT_OPTIONS)
def _integrate_kernel(mi, q, v, q_next):
    code = check_configuration(mi, q, v)
    if code == 0:
        integrate_into(mi, q, v, q_next)
    return code


INTEGRATE = register(_integrate_kernel, "mi:i2 q:f1 v:f1 q_next:N(q)", release_gil=False)
_integrate = INTEGRATE.call


@njit(**JIT_OPTIONS)
def _difference_kernel(mi, continuous, q0, q1, nv, v):
    nq = mi[0, MI_NQTOT]
    code = check_vector(q0, nq, 2)
    if code == 0:
        code = check_vector(q1, nq, 3)
    if code == 0:
        code = check_quaternions(mi, q0, 2)
    if code == 0:
        code = check_quaternions(mi, q1, 3)
    if code == 0:
        code = check_length(v, mi[0, MI_NVTOT], 5)
    if code == 0:
        difference_into(mi, continuous, q0, q1, v)
    return code


DIFFERENCE = register(_difference_kernel, "mi:i2 continuous:b1 q0:f1 q1:f1 nv:n v:N(nv)", release_gil=False)
_difference = DIFFERENCE.call


@njit(**JIT_OPTIONS)
def _dintegrate_kernel(mi, q, v, Jq, Jv):
    nv = mi[0, MI_NVTOT]
    code = check_configuration(mi, q, v)
    if code == 0:
        code = check_shape(Jq, nv, nv, 3)
    if code == 0:
        code = check_shape(Jv, nv, nv, 4)
    if code == 0:
        dintegrate_into(mi, v, Jq, Jv)
    return code


DINTEGRATE = register(_dintegrate_kernel, "mi:i2 q:f1 v:f1 Jq:F2 Jv:F2", release_gil=False)
_dintegrate = DINTEGRATE.call


def neutral(model: Model) -> np.ndarray:
    """Neutral configuration (nq,): zero joint positions, identity free-flyer placement. A new array."""
    return model.neutral_configuration.copy()


def integrate(model: Model, q, v) -> np.ndarray:
    """q (+) v: the configuration reached from q by the velocity v held for one unit of time.

    Args:
        q: (nq,) configuration.
        v: (nv,) tangent vector [rad, m].

    Returns:
        (nq,) new array.
    """
    try:
        result = _integrate(model.mi, q, v)
    except (TypeError, AttributeError):
        result = INTEGRATE.call_converted(model, None, q, v)
    if type(result) is int:  # the kernel's status
        raise INTEGRATE.error(model, result)
    return result


def rotation_of(quaternion_xyzw: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a unit quaternion (x, y, z, w), the free flyer's q[3:7]: base to world."""
    x, y, z, w = quaternion_xyzw
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def difference(model: Model, q0, q1) -> np.ndarray:
    """q1 (-) q0: the tangent vector v (nv,) such that integrate(q0, v) == q1 (continuous joints wrap)."""
    try:
        result = _difference(model.mi, model.continuous, q0, q1, model.nv)
    except (TypeError, AttributeError):
        result = DIFFERENCE.call_converted(model, None, q0, q1)
    if type(result) is int:  # the kernel's status
        raise DIFFERENCE.error(model, result)
    return result


def dintegrate_dq(model: Model, q, v) -> np.ndarray:
    """Jacobian (nv, nv) of integrate(q, v) with respect to q, in the tangent spaces."""
    return _integrate_jacobians(model, q, v)[0]


def dintegrate_dv(model: Model, q, v) -> np.ndarray:
    """Jacobian (nv, nv) of integrate(q, v) with respect to v, in the tangent spaces."""
    return _integrate_jacobians(model, q, v)[1]


def _integrate_jacobians(model: Model, q, v):
    check_model(model)
    Jq, Jv = np.empty((model.nv, model.nv)), np.empty((model.nv, model.nv))
    try:
        code = _dintegrate(model.mi, q, v, Jq, Jv)
    except TypeError:
        code = DINTEGRATE.call_converted(model, None, q, v, Jq, Jv)
    if code:
        raise DINTEGRATE.error(model, code)
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
