"""The inverse of the joint-space inertia matrix, without forming M (Carpentier & Mansard, RSS 2018, sec. IV-B).

M^-1 is ABA run on all unit torques at once with v = 0 and g = 0: column j of M^-1 is the acceleration
produced by tau = e_j. Written on world-frame quantities:

    backward (i = N..1):  U_i = I^A_i S_i,  D_i = S_i^T U_i + armature_i
        M^-1[i, i]        = D_i^-1
        M^-1[i, nu(i)]    = -D_i^-1 S_i^T F_i[:, nu(i)]         nu(i): the strict subtree of i
        I^A_lambda       += I^A_i - U_i D_i^-1 U_i^T
        F_lambda[:, subtree(i)] = F_i[:, subtree(i)] + U_i M^-1[i, subtree(i)]
    forward (i = 1..N), columns j >= i only (upper triangle):
        M^-1[i, j:]      -= D_i^-1 U_i^T A_lambda[:, j:]
        A_i[:, j:]        = A_lambda[:, j:] + S_i M^-1[i, j:]

F_i is the bias-force set of ABA (one 6-vector per unit torque, nonzero only on the subtree of i), A_i the
acceleration set; both share the (njoints, nv, 6) region ``F``. The lower triangle is the mirror.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.aba import articulated_inertias
from rbd_deriv.core.calling import STATUS_SINGULAR, check_position_matrix, register, status
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.crba import symmetrize_upper, zero_outside_subtrees
from rbd_deriv.core.kinematics import position_pass
from rbd_deriv.core.layout import (
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    MI_SUBTREE_END,
    NV_FREE_FLYER,
    R_DINV,
    R_F,
    R_IA,
    R_OI,
    R_S,
    R_SCRATCH,
    R_U,
    region1,
    region2,
    region3,
    zero_velocity,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import inertia_matrix


@njit(**JIT_OPTIONS)
def minverse_into(mi, mf, ws, Minv):
    """M^-1 into Minv (nv, nv) after forward_pass order 0. Returns 0, or the joint whose articulated inertia
    is singular."""
    nj = mi[0, MI_NJ]
    IA = region3(mi, ws, R_IA, nj, 6, 6)
    oI = region2(mi, ws, R_OI, nj, 10)
    for i in range(1, nj):
        inertia_matrix(oI[i], IA[i])
    singular = articulated_inertias(mi, mf, ws, False, zero_velocity(mi, ws))
    if singular == 0:
        minverse_from_articulated(mi, ws, Minv)
    return singular


@njit(**JIT_OPTIONS)
def minverse_from_articulated(mi, ws, Minv):
    """The force/acceleration-set sweeps of M^-1, once U and D^-1 are known (they do not depend on v or
    tau, so an ABA run at the same q provides them).

    Each step keeps the 6-vector of the column at hand in scalars (and, for a one-dof joint, S, U and D^-1 S
    too), so that a column costs one read of F's row and one write, whatever the stores into M^-1 and F might
    alias for the compiler."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    Dinv = region3(mi, ws, R_DINV, nj, 6, 6)
    S = region2(mi, ws, R_S, nv, 6)
    U = region2(mi, ws, R_U, nv, 6)
    F = region3(mi, ws, R_F, nj, nv, 6)
    W = region1(mi, ws, R_SCRATCH, 64)[0:36].reshape((6, 6))
    zero_outside_subtrees(mi, Minv)
    for i in range(nj - 1, 0, -1):
        iv, nvj, end, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_SUBTREE_END], mi[i, MI_PARENT]
        Fi = F[i]
        if nvj == 1:
            _backward_one_dof(Minv, Dinv[i, 0, 0], S[iv], U[iv], Fi, F[parent], iv, end, parent > 0)
        else:
            _backward_multi_dof(Minv, Dinv[i], S, U, Fi, F[parent], W, iv, end, parent > 0)
    # Forward sweep: the acceleration sets A overwrite F. Only children read A_i: a leaf joint skips it.
    for i in range(1, nj):
        iv, nvj, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_PARENT]
        Fi = F[i]
        if nvj == 1:
            has_children = mi[i, MI_SUBTREE_END] > iv + 1
            _forward_one_dof(Minv, Dinv[i, 0, 0], S[iv], U[iv], Fi, F[parent], iv, nv, parent > 0, has_children)
        else:
            _forward_multi_dof(Minv, Dinv[i], S, U, Fi, F[parent], W, iv, nv, parent > 0)
    symmetrize_upper(Minv)


@njit(**JIT_OPTIONS)
def _dinv_times(Dinv, V, iv, W):
    """W = D^-1 V[iv:iv + 6] (6 x 6): a free flyer's D^-1 times its S or U."""
    nvj = NV_FREE_FLYER
    for d in range(nvj):
        for k in range(6):
            s = 0.0
            for e in range(nvj):
                s += Dinv[d, e] * V[iv + e, k]
            W[d, k] = s


@njit(**JIT_OPTIONS)
def _add_rows_times_column(V, Minv, iv, j, f0, f1, f2, f3, f4, f5):
    """(f0..f5) + sum_d V[iv + d] M^-1[iv + d, j]: a free flyer's 6-vectors (S or U, rows iv..iv+6 of V)
    times column j of its rows of M^-1, added to a 6-vector held in scalars."""
    nvj = NV_FREE_FLYER
    for d in range(nvj):
        m = Minv[iv + d, j]
        f0 += V[iv + d, 0] * m
        f1 += V[iv + d, 1] * m
        f2 += V[iv + d, 2] * m
        f3 += V[iv + d, 3] * m
        f4 += V[iv + d, 4] * m
        f5 += V[iv + d, 5] * m
    return f0, f1, f2, f3, f4, f5


@njit(**JIT_OPTIONS)
def _backward_multi_dof(Minv, Dinv, S, U, Fi, Fp, W, iv, end, has_parent):
    """Backward step of a free flyer (nvj = NV_FREE_FLYER dofs): rows iv..iv+nvj of M^-1 on its subtree,
    and the parent's force set F_lambda[j] = F_i[j] + U M^-1[rows, j]. Each column's 6-vector is held in
    scalars while the rows are formed (W = D^-1 S^T, nvj x 6, is scratch)."""
    nvj = NV_FREE_FLYER
    for d in range(nvj):
        for k in range(6):
            Fi[iv + d, k] = 0.0
        for e in range(nvj):
            Minv[iv + d, iv + e] = Dinv[d, e]
    _dinv_times(Dinv, S, iv, W)
    for j in range(iv + nvj, end):
        f0, f1, f2, f3, f4, f5 = Fi[j, 0], Fi[j, 1], Fi[j, 2], Fi[j, 3], Fi[j, 4], Fi[j, 5]
        for d in range(nvj):
            Minv[iv + d, j] = -(W[d, 0] * f0 + W[d, 1] * f1 + W[d, 2] * f2
                                + W[d, 3] * f3 + W[d, 4] * f4 + W[d, 5] * f5)
    if not has_parent:
        return
    for j in range(iv, end):
        f0, f1, f2, f3, f4, f5 = _add_rows_times_column(U, Minv, iv, j, Fi[j, 0], Fi[j, 1], Fi[j, 2],
                                                        Fi[j, 3], Fi[j, 4], Fi[j, 5])
        Fp[j, 0], Fp[j, 1], Fp[j, 2], Fp[j, 3], Fp[j, 4], Fp[j, 5] = f0, f1, f2, f3, f4, f5


@njit(**JIT_OPTIONS)
def _forward_multi_dof(Minv, Dinv, S, U, Fi, Fp, W, iv, nv, has_parent):
    """Forward step of a free flyer on the columns j >= iv (W = D^-1 U^T is scratch):

        M^-1[rows, j] -= D^-1 U^T A_lambda[j],   A_i[j] = A_lambda[j] + S M^-1[rows, j]   (A_lambda = 0 at the root)
    """
    nvj = NV_FREE_FLYER
    if has_parent:
        _dinv_times(Dinv, U, iv, W)
    for j in range(iv, nv):
        f0 = f1 = f2 = f3 = f4 = f5 = 0.0
        if has_parent:
            f0, f1, f2, f3, f4, f5 = Fp[j, 0], Fp[j, 1], Fp[j, 2], Fp[j, 3], Fp[j, 4], Fp[j, 5]
            for d in range(nvj):
                Minv[iv + d, j] -= (W[d, 0] * f0 + W[d, 1] * f1 + W[d, 2] * f2
                                    + W[d, 3] * f3 + W[d, 4] * f4 + W[d, 5] * f5)
        f0, f1, f2, f3, f4, f5 = _add_rows_times_column(S, Minv, iv, j, f0, f1, f2, f3, f4, f5)
        Fi[j, 0], Fi[j, 1], Fi[j, 2], Fi[j, 3], Fi[j, 4], Fi[j, 5] = f0, f1, f2, f3, f4, f5


@njit(**JIT_OPTIONS)
def _backward_one_dof(Minv, dinv, s, u, Fi, Fp, iv, end, has_parent):
    """Backward step of a one-dof joint: row iv of M^-1 on its subtree, and the parent's force set.

        M^-1[iv, iv] = D^-1,   M^-1[iv, j] = -D^-1 S^T F_i[j]   (j in the strict subtree)
        F_lambda[j] = F_i[j] + U M^-1[iv, j]                    (F_i[iv] = 0)
    """
    Minv[iv, iv] = dinv
    w0, w1, w2, w3, w4, w5 = dinv * s[0], dinv * s[1], dinv * s[2], dinv * s[3], dinv * s[4], dinv * s[5]
    u0, u1, u2, u3, u4, u5 = u[0], u[1], u[2], u[3], u[4], u[5]
    if not has_parent:
        for j in range(iv + 1, end):
            Minv[iv, j] = -(w0 * Fi[j, 0] + w1 * Fi[j, 1] + w2 * Fi[j, 2]
                            + w3 * Fi[j, 3] + w4 * Fi[j, 4] + w5 * Fi[j, 5])
        return
    Fp[iv, 0], Fp[iv, 1], Fp[iv, 2] = u0 * dinv, u1 * dinv, u2 * dinv
    Fp[iv, 3], Fp[iv, 4], Fp[iv, 5] = u3 * dinv, u4 * dinv, u5 * dinv
    for j in range(iv + 1, end):
        f0, f1, f2, f3, f4, f5 = Fi[j, 0], Fi[j, 1], Fi[j, 2], Fi[j, 3], Fi[j, 4], Fi[j, 5]
        m = -(w0 * f0 + w1 * f1 + w2 * f2 + w3 * f3 + w4 * f4 + w5 * f5)
        Minv[iv, j] = m
        Fp[j, 0], Fp[j, 1], Fp[j, 2] = f0 + u0 * m, f1 + u1 * m, f2 + u2 * m
        Fp[j, 3], Fp[j, 4], Fp[j, 5] = f3 + u3 * m, f4 + u4 * m, f5 + u5 * m


@njit(**JIT_OPTIONS)
def _forward_one_dof(Minv, dinv, s, u, Fi, Fp, iv, nv, has_parent, has_children):
    """Forward step of a one-dof joint on the columns j >= iv:

        M^-1[iv, j] -= D^-1 U^T A_lambda[j],   A_i[j] = A_lambda[j] + S M^-1[iv, j]   (A_lambda = 0 at the root)

    A_i only when the joint has children."""
    s0, s1, s2, s3, s4, s5 = s[0], s[1], s[2], s[3], s[4], s[5]
    if not has_parent:
        for j in range(iv, nv):
            m = Minv[iv, j]
            Fi[j, 0], Fi[j, 1], Fi[j, 2] = s0 * m, s1 * m, s2 * m
            Fi[j, 3], Fi[j, 4], Fi[j, 5] = s3 * m, s4 * m, s5 * m
        return
    w0, w1, w2, w3, w4, w5 = dinv * u[0], dinv * u[1], dinv * u[2], dinv * u[3], dinv * u[4], dinv * u[5]
    if not has_children:
        for j in range(iv, nv):
            Minv[iv, j] -= (w0 * Fp[j, 0] + w1 * Fp[j, 1] + w2 * Fp[j, 2]
                            + w3 * Fp[j, 3] + w4 * Fp[j, 4] + w5 * Fp[j, 5])
        return
    for j in range(iv, nv):
        f0, f1, f2, f3, f4, f5 = Fp[j, 0], Fp[j, 1], Fp[j, 2], Fp[j, 3], Fp[j, 4], Fp[j, 5]
        m = Minv[iv, j] - (w0 * f0 + w1 * f1 + w2 * f2 + w3 * f3 + w4 * f4 + w5 * f5)
        Minv[iv, j] = m
        Fi[j, 0], Fi[j, 1], Fi[j, 2] = f0 + s0 * m, f1 + s1 * m, f2 + s2 * m
        Fi[j, 3], Fi[j, 4], Fi[j, 5] = f3 + s3 * m, f4 + s4 * m, f5 + s5 * m


@njit(**JIT_OPTIONS)
def _minverse_kernel(mi, mf, ws, q, Minv):
    code = check_position_matrix(mi, ws, q, Minv)
    if code == 0:
        position_pass(mi, mf, ws, q)
        singular = minverse_into(mi, mf, ws, Minv)
        if singular:
            code = status(STATUS_SINGULAR, 0, singular)
    return code


MINVERSE = register(_minverse_kernel, "mi:i2 mf:f2 data:W q:f1 Minv:F2")
_minverse = MINVERSE.call


def minverse(model: Model, data: Data, q) -> np.ndarray:
    """Inverse of the joint-space inertia matrix M(q)^-1, full and symmetric, by the dedicated algorithm.

    Args:
        q: (nq,) configuration.

    Returns:
        data.Minv (nv, nv).
    """
    try:
        code = _minverse(model.mi, model.mf, data.ws, q, data._Minv)
    except (TypeError, AttributeError):
        code = MINVERSE.call_converted(model, data, q)
    if code:
        raise MINVERSE.error(model, code)
    return data.Minv
