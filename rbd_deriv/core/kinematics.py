"""Forward kinematics in the world frame: the first pass shared by every algorithm.

For each joint i (depth-first, parent lambda(i) before i), with 0X_i its placement in the world:

    0M_i    = 0M_lambda(i)  M_tree(i)  M_J(q_i)
    S_i     = 0X_i S_J                      motion subspace, one world-frame motion vector per dof
    I_i     = 0X_i^* I_i^body iX_0           body inertia in the world frame
    v_i     = v_lambda(i) + S_i qd_i
    a_i     = a_lambda(i) + S_i qdd_i + v_i x S_i qd_i,   a_0 = -g
    Sdot_i  = v_i x S_i,   Psid_i = v_lambda(i) x S_i,   Psidd_i = a_lambda(i) x S_i + v_lambda(i) x Psid_i

as in Algorithm 1 (lines 1-7) of Singh, Russell & Wensing (IDSVA). Every algorithm of the package works on
these world-frame quantities, which removes the frame changes of the body-frame formulation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rbd_deriv.core.calling import STATUS_SHAPE, check_position, register, status
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.layout import (
    MF_AXIS,
    MF_INERTIA,
    MF_POS,
    MF_ROT,
    MI_IDX_Q,
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    MI_TYPE,
    R_C,
    R_FEXTW,
    R_OA,
    R_OI,
    R_OMI,
    R_OV,
    R_PSID,
    R_PSIDD,
    R_S,
    R_SCRATCH,
    R_SDOT,
    region1,
    region2,
    region3,
    zero_forces,
    zero_velocity,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import act_force, inertia_to_world, motion_cross
from rbd_deriv.core.urdf import JOINT_FREEFLYER, JOINT_PRISMATIC, JOINT_REVOLUTE
from rbd_deriv.exceptions import InputError


@njit(**JIT_OPTIONS)
def joint_placement(mi, mf, q, i, oMp, out):
    """out (4x4) = 0M_i = 0M_parent M_tree M_J(q) for joint i, with 0M_parent given as oMp."""
    b = MF_ROT
    # R0 = R_parent R_tree, the joint frame orientation at zero motion.
    r00 = oMp[0, 0] * mf[i, b] + oMp[0, 1] * mf[i, b + 3] + oMp[0, 2] * mf[i, b + 6]
    r01 = oMp[0, 0] * mf[i, b + 1] + oMp[0, 1] * mf[i, b + 4] + oMp[0, 2] * mf[i, b + 7]
    r02 = oMp[0, 0] * mf[i, b + 2] + oMp[0, 1] * mf[i, b + 5] + oMp[0, 2] * mf[i, b + 8]
    r10 = oMp[1, 0] * mf[i, b] + oMp[1, 1] * mf[i, b + 3] + oMp[1, 2] * mf[i, b + 6]
    r11 = oMp[1, 0] * mf[i, b + 1] + oMp[1, 1] * mf[i, b + 4] + oMp[1, 2] * mf[i, b + 7]
    r12 = oMp[1, 0] * mf[i, b + 2] + oMp[1, 1] * mf[i, b + 5] + oMp[1, 2] * mf[i, b + 8]
    r20 = oMp[2, 0] * mf[i, b] + oMp[2, 1] * mf[i, b + 3] + oMp[2, 2] * mf[i, b + 6]
    r21 = oMp[2, 0] * mf[i, b + 1] + oMp[2, 1] * mf[i, b + 4] + oMp[2, 2] * mf[i, b + 7]
    r22 = oMp[2, 0] * mf[i, b + 2] + oMp[2, 1] * mf[i, b + 5] + oMp[2, 2] * mf[i, b + 8]
    t0, t1, t2 = mf[i, MF_POS], mf[i, MF_POS + 1], mf[i, MF_POS + 2]
    px = oMp[0, 3] + oMp[0, 0] * t0 + oMp[0, 1] * t1 + oMp[0, 2] * t2
    py = oMp[1, 3] + oMp[1, 0] * t0 + oMp[1, 1] * t1 + oMp[1, 2] * t2
    pz = oMp[2, 3] + oMp[2, 0] * t0 + oMp[2, 1] * t1 + oMp[2, 2] * t2
    out[3, 0], out[3, 1], out[3, 2], out[3, 3] = 0.0, 0.0, 0.0, 1.0
    jtype = mi[i, MI_TYPE]
    iq = mi[i, MI_IDX_Q]
    if jtype == JOINT_PRISMATIC:
        ax, ay, az = mf[i, MF_AXIS], mf[i, MF_AXIS + 1], mf[i, MF_AXIS + 2]
        x = q[iq]
        out[0, 3] = px + x * (r00 * ax + r01 * ay + r02 * az)
        out[1, 3] = py + x * (r10 * ax + r11 * ay + r12 * az)
        out[2, 3] = pz + x * (r20 * ax + r21 * ay + r22 * az)
        out[0, 0], out[0, 1], out[0, 2] = r00, r01, r02
        out[1, 0], out[1, 1], out[1, 2] = r10, r11, r12
        out[2, 0], out[2, 1], out[2, 2] = r20, r21, r22
        return
    if jtype == JOINT_REVOLUTE:
        # Rodrigues: Rj = c Id + s [a]x + (1 - c) a a^T
        ax, ay, az = mf[i, MF_AXIS], mf[i, MF_AXIS + 1], mf[i, MF_AXIS + 2]
        s, c = math.sin(q[iq]), math.cos(q[iq])
        t = 1.0 - c
        j00, j01, j02 = c + t * ax * ax, t * ax * ay - s * az, t * ax * az + s * ay
        j10, j11, j12 = t * ax * ay + s * az, c + t * ay * ay, t * ay * az - s * ax
        j20, j21, j22 = t * ax * az - s * ay, t * ay * az + s * ax, c + t * az * az
        out[0, 3], out[1, 3], out[2, 3] = px, py, pz
    else:
        x, y, z, w = q[iq + 3], q[iq + 4], q[iq + 5], q[iq + 6]
        n = math.sqrt(x * x + y * y + z * z + w * w)
        x, y, z, w = x / n, y / n, z / n, w / n
        j00, j01, j02 = 1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - z * w), 2.0 * (x * z + y * w)
        j10, j11, j12 = 2.0 * (x * y + z * w), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - x * w)
        j20, j21, j22 = 2.0 * (x * z - y * w), 2.0 * (y * z + x * w), 1.0 - 2.0 * (x * x + y * y)
        tx, ty, tz = q[iq], q[iq + 1], q[iq + 2]
        out[0, 3] = px + r00 * tx + r01 * ty + r02 * tz
        out[1, 3] = py + r10 * tx + r11 * ty + r12 * tz
        out[2, 3] = pz + r20 * tx + r21 * ty + r22 * tz
    out[0, 0] = r00 * j00 + r01 * j10 + r02 * j20
    out[0, 1] = r00 * j01 + r01 * j11 + r02 * j21
    out[0, 2] = r00 * j02 + r01 * j12 + r02 * j22
    out[1, 0] = r10 * j00 + r11 * j10 + r12 * j20
    out[1, 1] = r10 * j01 + r11 * j11 + r12 * j21
    out[1, 2] = r10 * j02 + r11 * j12 + r12 * j22
    out[2, 0] = r20 * j00 + r21 * j10 + r22 * j20
    out[2, 1] = r20 * j01 + r21 * j11 + r22 * j21
    out[2, 2] = r20 * j02 + r21 * j12 + r22 * j22


@njit(**JIT_OPTIONS)
def motion_subspace(mi, mf, i, oM, S):
    """Write the world-frame motion subspace columns of joint i into rows idx_v.. of S (nv, 6)."""
    jtype = mi[i, MI_TYPE]
    iv = mi[i, MI_IDX_V]
    px, py, pz = oM[0, 3], oM[1, 3], oM[2, 3]
    if jtype == JOINT_FREEFLYER:
        for k in range(3):
            ex, ey, ez = oM[0, k], oM[1, k], oM[2, k]
            S[iv + k, 0], S[iv + k, 1], S[iv + k, 2] = ex, ey, ez
            S[iv + k, 3], S[iv + k, 4], S[iv + k, 5] = 0.0, 0.0, 0.0
            S[iv + 3 + k, 0] = py * ez - pz * ey
            S[iv + 3 + k, 1] = pz * ex - px * ez
            S[iv + 3 + k, 2] = px * ey - py * ex
            S[iv + 3 + k, 3], S[iv + 3 + k, 4], S[iv + 3 + k, 5] = ex, ey, ez
        return
    axis = mf[i, MF_AXIS : MF_AXIS + 3]
    wx = oM[0, 0] * axis[0] + oM[0, 1] * axis[1] + oM[0, 2] * axis[2]
    wy = oM[1, 0] * axis[0] + oM[1, 1] * axis[1] + oM[1, 2] * axis[2]
    wz = oM[2, 0] * axis[0] + oM[2, 1] * axis[1] + oM[2, 2] * axis[2]
    if jtype == JOINT_REVOLUTE:
        S[iv, 0], S[iv, 1], S[iv, 2] = py * wz - pz * wy, pz * wx - px * wz, px * wy - py * wx
        S[iv, 3], S[iv, 4], S[iv, 5] = wx, wy, wz
    else:
        S[iv, 0], S[iv, 1], S[iv, 2] = wx, wy, wz
        S[iv, 3], S[iv, 4], S[iv, 5] = 0.0, 0.0, 0.0


# Levels of forward_pass: each includes the previous ones.
FK_POSITION, FK_VELOCITY, FK_ACCELERATION, FK_DERIVATIVES = 0, 1, 2, 3


@njit(**JIT_OPTIONS)
def forward_pass(mi, mf, ws, q, v, a, fext, level):
    """World-frame kinematics up to ``level``:

    FK_POSITION: placements oMi, motion subspaces S, body inertias oI (10 parameters each);
    FK_VELOCITY: + external forces in the world frame, velocities ov and c_i = v_i x (S_i qd_i);
    FK_ACCELERATION: + accelerations oa (a_0 = -g);
    FK_DERIVATIVES: + Sdot, Psid, Psidd, the motion sets of the derivative algorithms.
    """
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oMi = region3(mi, ws, R_OMI, nj, 4, 4)
    S = region2(mi, ws, R_S, nv, 6)
    oI = region2(mi, ws, R_OI, nj, 10)
    fext_world = region2(mi, ws, R_FEXTW, nj, 6)
    ov = region2(mi, ws, R_OV, nj, 6)
    c = region2(mi, ws, R_C, nj, 6)
    vJ = region1(mi, ws, R_SCRATCH, 64)[0:6]
    for k in range(6):
        ov[0, k] = 0.0
    for i in range(1, nj):
        parent = mi[i, MI_PARENT]
        joint_placement(mi, mf, q, i, oMi[parent], oMi[i])
        motion_subspace(mi, mf, i, oMi[i], S)
        inertia_to_world(oMi[i], mf[i, MF_INERTIA:], oI[i])
        if level == FK_POSITION:
            continue
        act_force(oMi[i], fext[i], fext_world[i])
        iv, nvj = mi[i, MI_IDX_V], mi[i, MI_NV]
        for k in range(6):
            s = 0.0
            for d in range(nvj):
                s += S[iv + d, k] * v[iv + d]
            vJ[k] = s
            ov[i, k] = ov[parent, k] + s
        motion_cross(ov[i], vJ, c[i])
    if level >= FK_DERIVATIVES:
        motion_sets(mi, ws)
    if level >= FK_ACCELERATION:
        acceleration_pass(mi, mf, ws, a, level >= FK_DERIVATIVES)


@njit(**JIT_OPTIONS)
def position_pass(mi, mf, ws, q):
    """forward_pass at FK_POSITION (placements, motion subspaces, inertias), which needs no velocity."""
    zero = zero_velocity(mi, ws)
    forward_pass(mi, mf, ws, q, zero, zero, zero_forces(mi, ws), FK_POSITION)


@njit(**JIT_OPTIONS)
def motion_sets(mi, ws):
    """Sdot_i = v_i x S_i and Psid_i = v_lambda(i) x S_i for every dof, once velocities are known."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    ov = region2(mi, ws, R_OV, nj, 6)
    S = region2(mi, ws, R_S, nv, 6)
    Sdot = region2(mi, ws, R_SDOT, nv, 6)
    Psid = region2(mi, ws, R_PSID, nv, 6)
    for i in range(1, nj):
        parent, iv = mi[i, MI_PARENT], mi[i, MI_IDX_V]
        for d in range(iv, iv + mi[i, MI_NV]):
            motion_cross(ov[i], S[d], Sdot[d])
            motion_cross(ov[parent], S[d], Psid[d])


@njit(**JIT_OPTIONS)
def acceleration_pass(mi, mf, ws, a, with_sets):
    """Accelerations a_i = a_lambda(i) + c_i + S_i qdd_i (a_0 = -g), once velocities are known;
    with_sets: also Psidd_i = a_lambda(i) x S_i + v_lambda(i) x Psid_i (needs motion_sets)."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    c = region2(mi, ws, R_C, nj, 6)
    S = region2(mi, ws, R_S, nv, 6)
    Psid = region2(mi, ws, R_PSID, nv, 6)
    Psidd = region2(mi, ws, R_PSIDD, nv, 6)
    tmp = region1(mi, ws, R_SCRATCH, 64)[18:24]
    for k in range(6):
        oa[0, k] = -mf[0, k]
    for i in range(1, nj):
        parent, iv, nvj = mi[i, MI_PARENT], mi[i, MI_IDX_V], mi[i, MI_NV]
        for k in range(6):
            acc = oa[parent, k] + c[i, k]
            for d in range(nvj):
                acc += S[iv + d, k] * a[iv + d]
            oa[i, k] = acc
        if not with_sets:
            continue
        for d in range(iv, iv + nvj):
            motion_cross(oa[parent], S[d], Psidd[d])
            motion_cross(ov[parent], Psid[d], tmp)
            for k in range(6):
                Psidd[d, k] += tmp[k]


@njit(**JIT_OPTIONS)
def _forward_kinematics_kernel(mi, mf, ws, q, oMi):
    code = check_position(mi, ws, q)
    if code == 0 and oMi.shape[0] != mi[0, MI_NJ]:
        code = status(STATUS_SHAPE, 4, 0)
    if code != 0:
        return code
    for r in range(4):
        for c in range(4):
            oMi[0, r, c] = 1.0 if r == c else 0.0
    for i in range(1, mi[0, MI_NJ]):
        joint_placement(mi, mf, q, i, oMi[mi[i, MI_PARENT]], oMi[i])
    return 0


FORWARD_KINEMATICS = register(_forward_kinematics_kernel, "mi:i2 mf:f2 data:W q:f1 oMi:F3", release_gil=False)
_forward_kinematics = FORWARD_KINEMATICS.call


def forward_kinematics(model: Model, data: Data, q) -> np.ndarray:
    """Placements of every joint frame in the world.

    Args:
        q: (nq,) configuration.

    Returns:
        data.oMi (njoints, 4, 4): homogeneous placements, row 0 the universe (identity).
    """
    try:
        code = _forward_kinematics(model.mi, model.mf, data.ws, q, data._oMi)
    except (TypeError, AttributeError):
        code = FORWARD_KINEMATICS.call_converted(model, data, q)
    if code:
        raise FORWARD_KINEMATICS.error(model, code)
    return data.oMi


def frame_placement(model: Model, data: Data, name: str) -> np.ndarray:
    """Placement (4, 4) of a link or joint frame in the world, from the last forward_kinematics on data."""
    try:
        parent, placement = model.frames[name]
    except KeyError:
        raise InputError(f"no frame named {name!r}; model.frame_names lists them", "name") from None
    return data.oMi[parent] @ placement
