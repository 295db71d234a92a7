"""The inverse of the joint-space inertia matrix, without forming M (Carpentier & Mansard, RSS 2018, sec. IV-B).

M^-1 is ABA run on all unit torques at once with v = 0 and g = 0: column j of M^-1 is the acceleration
produced by tau = e_j. Written on world-frame quantities:

    backward (i = N..1):  U_i = I^A_i S_i,  D_i = S_i^T U_i
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
from numba import njit, types

from rbd_deriv.aba import STATUS_SINGULAR, articulated_inertias, raise_for_dynamics_status
from rbd_deriv.crba import symmetrize_upper
from rbd_deriv.kinematics import (
    FK_POSITION,
    MF_T,
    MI_T,
    VEC_T,
    call_kernel,
    check_position_call,
    forward_pass,
)
from rbd_deriv.model import MI_IDX_V, MI_NJ, MI_NV, MI_NVTOT, MI_PARENT, MI_SUBTREE_END, Data, Model
from rbd_deriv.spatial import (
    _NJIT,
    copy_6x6_set,
    R_DINV,
    R_F,
    R_IA,
    R_MINV,
    R_OI,
    R_S,
    R_SCRATCH,
    R_U,
    R_ZERO_FEXT,
    R_ZERO_NV,
    dot_rows,
    region1,
    region2,
    region3,
)


@njit(**_NJIT)
def minverse_into(mi, ws, Minv):
    """M^-1 into Minv (nv, nv) after forward_pass order 0. Returns False on a singular inertia."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    IA = region3(mi, ws, R_IA, nj, 6, 6)
    copy_6x6_set(region3(mi, ws, R_OI, nj, 6, 6), IA, nj)
    if not articulated_inertias(mi, ws, False, region1(mi, ws, R_ZERO_NV, nv)):
        return False
    minverse_from_articulated(mi, ws, Minv)
    return True


@njit(**_NJIT)
def minverse_from_articulated(mi, ws, Minv):
    """The force/acceleration-set sweeps of M^-1, once U and D^-1 are known (they do not depend on v or
    tau, so an ABA run at the same q provides them)."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    Dinv = region3(mi, ws, R_DINV, nj, 6, 6)
    S = region2(mi, ws, R_S, nv, 6)
    U = region2(mi, ws, R_U, nv, 6)
    F = region3(mi, ws, R_F, nj, nv, 6)
    W = region1(mi, ws, R_SCRATCH, 64)[0:36].reshape((6, 6))
    for i in range(nj - 1, 0, -1):
        iv, nvj, end, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_SUBTREE_END], mi[i, MI_PARENT]
        Fi = F[i]
        for d in range(nvj):
            for k in range(6):
                Fi[iv + d, k] = 0.0
            for e in range(nvj):
                Minv[iv + d, iv + e] = Dinv[i, d, e]
            for j in range(end, nv):
                Minv[iv + d, j] = 0.0
        # W = D^-1 S^T (nv_j x 6), so that each column costs one 6-vector product per dof.
        for d in range(nvj):
            for k in range(6):
                s = 0.0
                for e in range(nvj):
                    s += Dinv[i, d, e] * S[iv + e, k]
                W[d, k] = s
        for j in range(iv + nvj, end):
            for d in range(nvj):
                Minv[iv + d, j] = -dot_rows(W, d, Fi, j)
        if parent > 0:
            Fp = F[parent]
            for j in range(iv, end):
                for k in range(6):
                    s = Fi[j, k]
                    for d in range(nvj):
                        s += U[iv + d, k] * Minv[iv + d, j]
                    Fp[j, k] = s
    # Forward sweep: the acceleration sets A overwrite F.
    for i in range(1, nj):
        iv, nvj, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_PARENT]
        Fi = F[i]
        if parent > 0:
            Fp = F[parent]
            if nvj == 1:
                dinv = Dinv[i, 0, 0]
                for j in range(iv, nv):
                    Minv[iv, j] -= dinv * dot_rows(U, iv, Fp, j)
                    m = Minv[iv, j]
                    for k in range(6):
                        Fi[j, k] = Fp[j, k] + S[iv, k] * m
                continue
            for d in range(nvj):
                for k in range(6):
                    s = 0.0
                    for e in range(nvj):
                        s += Dinv[i, d, e] * U[iv + e, k]
                    W[d, k] = s
            for j in range(iv, nv):
                for d in range(nvj):
                    Minv[iv + d, j] -= dot_rows(W, d, Fp, j)
                for k in range(6):
                    s = Fp[j, k]
                    for d in range(nvj):
                        s += S[iv + d, k] * Minv[iv + d, j]
                    Fi[j, k] = s
        else:
            for j in range(iv, nv):
                for k in range(6):
                    s = 0.0
                    for d in range(nvj):
                        s += S[iv + d, k] * Minv[iv + d, j]
                    Fi[j, k] = s
    symmetrize_upper(Minv)


_MINV_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T)


@njit(_MINV_SIG, **_NJIT)
def _minverse_kernel(mi, mf, ws, q):
    status = check_position_call(mi, ws, q)
    if status != 0:
        return status
    nv = mi[0, MI_NVTOT]
    zero = region1(mi, ws, R_ZERO_NV, nv)
    fext = region2(mi, ws, R_ZERO_FEXT, mi[0, MI_NJ], 6)
    forward_pass(mi, mf, ws, q, zero, zero, fext, FK_POSITION)
    if not minverse_into(mi, ws, region2(mi, ws, R_MINV, nv, nv)):
        return STATUS_SINGULAR
    return 0


def minverse(model: Model, data: Data, q) -> np.ndarray:
    """Inverse of the joint-space inertia matrix M(q)^-1, full and symmetric, by the dedicated algorithm.

    Args:
        q: (nq,) configuration.

    Returns:
        data.Minv (nv, nv).
    """
    try:
        status = _minverse_kernel(model.mi, model.mf, data.ws, q)
    except (TypeError, AttributeError):
        status = call_kernel(_minverse_kernel, model, data, (q,), ("q",), (1,))
    if status:
        raise_for_dynamics_status(model, status, ("q",))
    return data.Minv
