"""Recursive Newton-Euler algorithm (inverse dynamics), nonlinear effects and generalized gravity.

RNEA (Featherstone, RBDA sec. 5.3; the RNEA write-up in the project's references):

    forward:   v_i = v_lambda(i) + S_i qd_i,   a_i = a_lambda(i) + S_i qdd_i + v_i x S_i qd_i   (a_0 = -g)
    body:      f_i = I_i a_i + v_i x* I_i v_i - f_i^ext
    backward:  f_lambda(i) += f_i,     tau_i = S_i^T f_i

in the joint frames for rnea itself (:func:`rnea_into`), and on the world-frame quantities of
:mod:`rbd_deriv.core.kinematics` for the derivative algorithms (:func:`body_forces`).

External forces f^ext are given per joint in the joint's local frame, [linear, angular], row 0 the
universe (ignored), as Pinocchio's ``fext``; they act on the body carried by the joint.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import ARG_V, check_length, check_position, check_state, check_vector, register
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.kinematics import joint_placement
from rbd_deriv.core.layout import (
    MF_ARMATURE,
    MF_AXIS,
    MF_INERTIA,
    MI_IDX_V,
    MI_NJ,
    MI_NVTOT,
    MI_PARENT,
    MI_TYPE,
    R_FEXTW,
    R_LIMI,
    R_OA,
    R_OF,
    R_OI,
    R_OMI,
    R_OV,
    R_SCRATCH,
    region1,
    region2,
    region3,
    zero_forces,
    zero_velocity,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import force_cross_add, inertia_times, motion_cross
from rbd_deriv.core.urdf import JOINT_PRISMATIC, JOINT_REVOLUTE


@njit(**JIT_OPTIONS)
def body_forces(mi, ws):
    """of_i = I_i a_i + v_i x* I_i v_i - f_i^ext for every body (world frame), before accumulation."""
    nj = mi[0, MI_NJ]
    oI = region2(mi, ws, R_OI, nj, 10)
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    of = region2(mi, ws, R_OF, nj, 6)
    fext_world = region2(mi, ws, R_FEXTW, nj, 6)
    h = region1(mi, ws, R_SCRATCH, 64)[24:30]
    for k in range(6):
        of[0, k] = 0.0
    for i in range(1, nj):
        I = oI[i]
        f0, f1, f2, f3, f4, f5 = inertia_times(I, oa[i, 0], oa[i, 1], oa[i, 2], oa[i, 3], oa[i, 4], oa[i, 5])
        of[i, 0], of[i, 1], of[i, 2] = f0 - fext_world[i, 0], f1 - fext_world[i, 1], f2 - fext_world[i, 2]
        of[i, 3], of[i, 4], of[i, 5] = f3 - fext_world[i, 3], f4 - fext_world[i, 4], f5 - fext_world[i, 5]
        h[0], h[1], h[2], h[3], h[4], h[5] = inertia_times(I, ov[i, 0], ov[i, 1], ov[i, 2], ov[i, 3], ov[i, 4],
                                                           ov[i, 5])
        force_cross_add(ov[i], h, 1.0, of[i])


@njit(**JIT_OPTIONS)
def rnea_into(mi, mf, ws, q, v, a, fext, out):
    """RNEA into ``out`` (nv,), inputs already checked.

    Plain inverse dynamics needs no world-frame inertia, so it runs in the joint frames (Featherstone's
    body-frame form, as Pinocchio does), which costs fewer operations than the world-frame pass the
    derivative algorithms share. With M = (R, p) the placement of joint i in its parent:

        v_i = M^-1 v_lambda + S qd,   a_i = M^-1 a_lambda + S qdd + v_i x S qd,   (a_0 = -g, world = universe)
        f_i = I_i a_i + v_i x* I_i v_i - f^ext_i,   tau_i = S^T f_i + armature_i qdd_i,   f_lambda += M f_i

    It also leaves the world placements in data.oMi and the local ones in the liMi region.
    """
    nj = mi[0, MI_NJ]
    oMi = region3(mi, ws, R_OMI, nj, 4, 4)
    liMi = region3(mi, ws, R_LIMI, nj, 4, 4)
    vl = region2(mi, ws, R_OV, nj, 6)  # joint-frame velocities (the ov region, reused)
    al = region2(mi, ws, R_OA, nj, 6)  # joint-frame accelerations
    fl = region2(mi, ws, R_OF, nj, 6)  # joint-frame forces
    for k in range(6):
        vl[0, k] = 0.0
        al[0, k] = -mf[0, k]
    for i in range(1, nj):
        parent = mi[i, MI_PARENT]
        joint_placement(mi, mf, q, i, oMi[0], liMi[i])
        M = liMi[i]
        # World placement: 0M_i = 0M_parent M.
        for r in range(3):
            for c in range(4):
                oMi[i, r, c] = (oMi[parent, r, 0] * M[0, c] + oMi[parent, r, 1] * M[1, c]
                                + oMi[parent, r, 2] * M[2, c] + (oMi[parent, r, 3] if c == 3 else 0.0))
        _motion_to_child(M, vl[parent], vl[i])
        _motion_to_child(M, al[parent], al[i])
        jtype, iv = mi[i, MI_TYPE], mi[i, MI_IDX_V]
        ax, ay, az = mf[i, MF_AXIS], mf[i, MF_AXIS + 1], mf[i, MF_AXIS + 2]
        # vJ = S qd in the joint frame; a_i += S qdd + v_i x vJ (v_i before adding vJ gives the same cross).
        if jtype == JOINT_REVOLUTE:
            w, dw = v[iv], a[iv]
            jx, jy, jz = ax * w, ay * w, az * w
            vx, vy, vz = vl[i, 0], vl[i, 1], vl[i, 2]
            wx, wy, wz = vl[i, 3], vl[i, 4], vl[i, 5]
            al[i, 0] += vy * jz - vz * jy
            al[i, 1] += vz * jx - vx * jz
            al[i, 2] += vx * jy - vy * jx
            al[i, 3] += wy * jz - wz * jy + ax * dw
            al[i, 4] += wz * jx - wx * jz + ay * dw
            al[i, 5] += wx * jy - wy * jx + az * dw
            vl[i, 3] += jx
            vl[i, 4] += jy
            vl[i, 5] += jz
        elif jtype == JOINT_PRISMATIC:
            w, dw = v[iv], a[iv]
            jx, jy, jz = ax * w, ay * w, az * w
            wx, wy, wz = vl[i, 3], vl[i, 4], vl[i, 5]
            al[i, 0] += wy * jz - wz * jy + ax * dw
            al[i, 1] += wz * jx - wx * jz + ay * dw
            al[i, 2] += wx * jy - wy * jx + az * dw
            vl[i, 0] += jx
            vl[i, 1] += jy
            vl[i, 2] += jz
        else:
            # Free flyer: S = identity in the joint frame.
            scratch = region1(mi, ws, R_SCRATCH, 64)
            vJ = scratch[0:6]
            cross = scratch[6:12]
            for k in range(6):
                vJ[k] = v[iv + k]
            motion_cross(vl[i], vJ, cross)
            for k in range(6):
                vl[i, k] += v[iv + k]
                al[i, k] += a[iv + k] + cross[k]
        _body_force(mf, i, vl[i], al[i], fext[i], fl[i])
    for i in range(nj - 1, 0, -1):
        jtype, iv = mi[i, MI_TYPE], mi[i, MI_IDX_V]
        if jtype == JOINT_REVOLUTE:
            out[iv] = (mf[i, MF_AXIS] * fl[i, 3] + mf[i, MF_AXIS + 1] * fl[i, 4] + mf[i, MF_AXIS + 2] * fl[i, 5]
                       + mf[i, MF_ARMATURE] * a[iv])
        elif jtype == JOINT_PRISMATIC:
            out[iv] = (mf[i, MF_AXIS] * fl[i, 0] + mf[i, MF_AXIS + 1] * fl[i, 1] + mf[i, MF_AXIS + 2] * fl[i, 2]
                       + mf[i, MF_ARMATURE] * a[iv])
        else:
            for k in range(6):
                out[iv + k] = fl[i, k] + mf[i, MF_ARMATURE + k] * a[iv + k]
        parent = mi[i, MI_PARENT]
        if parent > 0:
            _force_to_parent_add(liMi[i], fl[i], fl[parent])


@njit(**JIT_OPTIONS)
def _motion_to_child(M, m, out):
    """out = M^-1 m: a motion given in the parent frame, expressed in the child frame of placement M."""
    wx, wy, wz = m[3], m[4], m[5]
    px, py, pz = M[0, 3], M[1, 3], M[2, 3]
    # linear part at the child origin: v + w x p
    lx = m[0] + wy * pz - wz * py
    ly = m[1] + wz * px - wx * pz
    lz = m[2] + wx * py - wy * px
    for k in range(3):
        out[k] = M[0, k] * lx + M[1, k] * ly + M[2, k] * lz
        out[3 + k] = M[0, k] * wx + M[1, k] * wy + M[2, k] * wz


@njit(**JIT_OPTIONS)
def _force_to_parent_add(M, f, out):
    """out += M f: a force given in the child frame of placement M, expressed in the parent frame."""
    fx = M[0, 0] * f[0] + M[0, 1] * f[1] + M[0, 2] * f[2]
    fy = M[1, 0] * f[0] + M[1, 1] * f[1] + M[1, 2] * f[2]
    fz = M[2, 0] * f[0] + M[2, 1] * f[1] + M[2, 2] * f[2]
    px, py, pz = M[0, 3], M[1, 3], M[2, 3]
    out[0] += fx
    out[1] += fy
    out[2] += fz
    out[3] += M[0, 0] * f[3] + M[0, 1] * f[4] + M[0, 2] * f[5] + py * fz - pz * fy
    out[4] += M[1, 0] * f[3] + M[1, 1] * f[4] + M[1, 2] * f[5] + pz * fx - px * fz
    out[5] += M[2, 0] * f[3] + M[2, 1] * f[4] + M[2, 2] * f[5] + px * fy - py * fx


@njit(**JIT_OPTIONS)
def _body_force(mf, i, v, a, fext, out):
    """out = I a + v x* (I v) - fext in the joint frame, I from its 10 parameters (mass, h = m c, Io)."""
    b = MF_INERTIA
    m, hx, hy, hz = mf[i, b], mf[i, b + 1], mf[i, b + 2], mf[i, b + 3]
    i00, i01, i02, i11, i12, i22 = mf[i, b + 4], mf[i, b + 5], mf[i, b + 6], mf[i, b + 7], mf[i, b + 8], mf[i, b + 9]
    # I m = (m v - h x w, Io w + h x v)
    vx, vy, vz, wx, wy, wz = v[0], v[1], v[2], v[3], v[4], v[5]
    fx = m * vx - (hy * wz - hz * wy)
    fy = m * vy - (hz * wx - hx * wz)
    fz = m * vz - (hx * wy - hy * wx)
    nx = i00 * wx + i01 * wy + i02 * wz + hy * vz - hz * vy
    ny = i01 * wx + i11 * wy + i12 * wz + hz * vx - hx * vz
    nz = i02 * wx + i12 * wy + i22 * wz + hx * vy - hy * vx
    ux, uy, uz, ox, oy, oz = a[0], a[1], a[2], a[3], a[4], a[5]
    out[0] = m * ux - (hy * oz - hz * oy) + wy * fz - wz * fy - fext[0]
    out[1] = m * uy - (hz * ox - hx * oz) + wz * fx - wx * fz - fext[1]
    out[2] = m * uz - (hx * oy - hy * ox) + wx * fy - wy * fx - fext[2]
    out[3] = (i00 * ox + i01 * oy + i02 * oz + hy * uz - hz * uy
              + wy * nz - wz * ny + vy * fz - vz * fy - fext[3])
    out[4] = (i01 * ox + i11 * oy + i12 * oz + hz * ux - hx * uz
              + wz * nx - wx * nz + vz * fx - vx * fz - fext[4])
    out[5] = (i02 * ox + i12 * oy + i22 * oz + hx * uy - hy * ux
              + wx * ny - wy * nx + vx * fy - vy * fx - fext[5])


@njit(**JIT_OPTIONS)
def _rnea_kernel(mi, mf, ws, q, v, a, fext, tau):
    code = check_state(mi, ws, q, v, a, fext)
    if code == 0:
        code = check_length(tau, mi[0, MI_NVTOT], 7)
    if code == 0:
        rnea_into(mi, mf, ws, q, v, a, fext, tau)
    return code


RNEA = register(_rnea_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 a:f1 fext:f2 tau:F1", release_gil=False)
_rnea = RNEA.call


def rnea(model: Model, data: Data, q, v, a, fext=None) -> np.ndarray:
    """Inverse dynamics tau = M(q) a + C(q, v) v + g(q) - sum_i J_i^T fext_i.

    Args:
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        a: (nv,) acceleration [rad/s^2, m/s^2].
        fext: (njoints, 6) external spatial forces [N, N m] in each joint's frame, or None.

    Returns:
        data.tau (nv,) joint torques/forces [N m, N].
    """
    try:
        code = _rnea(model.mi, model.mf, data.ws, q, v, a, data._zero_fext if fext is None else fext, data._tau)
    except (TypeError, AttributeError):
        code = RNEA.call_converted(model, data, q, v, a, fext)
    if code:
        raise RNEA.error(model, code)
    return data.tau


def rnea_batch(model: Model, Q, V, A) -> np.ndarray:
    """rnea at K states. Q (K, nq), V (K, nv), A (K, nv) -> tau (K, nv) [N m, N]."""
    return run_batch(RNEA, model, Q, V, A, None)[0]


@njit(**JIT_OPTIONS)
def _nle_kernel(mi, mf, ws, q, v, nle):
    code = check_position(mi, ws, q)
    if code == 0:
        code = check_vector(v, mi[0, MI_NVTOT], ARG_V)
    if code == 0:
        code = check_length(nle, mi[0, MI_NVTOT], 5)
    if code == 0:
        rnea_into(mi, mf, ws, q, v, zero_velocity(mi, ws), zero_forces(mi, ws), nle)
    return code


NONLINEAR_EFFECTS = register(_nle_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 nle:F1", lazy=True, release_gil=False)
_nonlinear_effects = NONLINEAR_EFFECTS.call


def nonlinear_effects(model: Model, data: Data, q, v) -> np.ndarray:
    """Coriolis, centrifugal and gravity torques h = C(q, v) v + g(q) = rnea(q, v, 0).

    Returns:
        data.nle (nv,) [N m, N].
    """
    try:
        code = _nonlinear_effects(model.mi, model.mf, data.ws, q, v, data._nle)
    except (TypeError, AttributeError):
        code = NONLINEAR_EFFECTS.call_converted(model, data, q, v)
    if code:
        raise NONLINEAR_EFFECTS.error(model, code)
    return data.nle


@njit(**JIT_OPTIONS)
def _gravity_kernel(mi, mf, ws, q, g):
    code = check_position(mi, ws, q)
    if code == 0:
        code = check_length(g, mi[0, MI_NVTOT], 4)
    if code == 0:
        zero = zero_velocity(mi, ws)
        rnea_into(mi, mf, ws, q, zero, zero, zero_forces(mi, ws), g)
    return code


GRAVITY = register(_gravity_kernel, "mi:i2 mf:f2 data:W q:f1 g:F1", release_gil=False)
_gravity = GRAVITY.call


def gravity_torques(model: Model, data: Data, q) -> np.ndarray:
    """Generalized gravity g(q) = rnea(q, 0, 0).

    Returns:
        data.g (nv,) [N m, N].
    """
    try:
        code = _gravity(model.mi, model.mf, data.ws, q, data._g)
    except (TypeError, AttributeError):
        code = GRAVITY.call_converted(model, data, q)
    if code:
        raise GRAVITY.error(model, code)
    return data.g
