"""Composite rigid-body algorithm: the joint-space inertia matrix M(q).

World-frame CRBA (Featherstone, RBDA sec. 6.2): with I^C_i the composite inertia of the subtree of i,

    for i = N..1:   F = I^C_i S_i;   M[j, i] = S_j^T F  for j = i, lambda(i), lambda(lambda(i)), ...;
                    I^C_lambda(i) += I^C_i

which fills the upper triangle (ancestors have smaller indices); the lower one is its mirror.
"""

from __future__ import annotations

import numpy as np
from numba import cfunc, njit, types

from rbd_deriv.core.kinematics import (
    FK_POSITION,
    MF_T,
    MI_T,
    VEC_T,
    call_kernel,
    check_position_call,
    forward_pass,
    raise_for_status,
)
from rbd_deriv.core.model import MI_IDX_V, MI_NJ, MI_NV, MI_NVTOT, MI_PARENT, Data, Model
from rbd_deriv.core.calling import ENTRY_OPTIONS, ENTRY_SIG, STATUS_INTERNAL, entry, position_arrays
from rbd_deriv.core.spatial import (
    _NJIT,
    copy_6x6_set,
    R_IC,
    R_M,
    R_OI,
    R_S,
    R_SCRATCH,
    R_ZERO_FEXT,
    R_ZERO_NV,
    dot6,
    mat6_vec,
    region1,
    region2,
    region3,
)


@njit(**_NJIT)
def symmetrize_upper(M):
    """Copy the upper triangle of the square matrix M into its lower triangle."""
    n = M.shape[0]
    for r in range(n):
        for c in range(r):
            M[r, c] = M[c, r]


@njit(**_NJIT)
def crba_into(mi, ws, M):
    """CRBA backward pass into M (nv, nv), after forward_pass order 0."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oI = region3(mi, ws, R_OI, nj, 6, 6)
    IC = region3(mi, ws, R_IC, nj, 6, 6)
    S = region2(mi, ws, R_S, nv, 6)
    F = region1(mi, ws, R_SCRATCH, 64)[30:36]
    copy_6x6_set(oI, IC, nj)
    for i in range(nj - 1, 0, -1):
        iv = mi[i, MI_IDX_V]
        for d in range(mi[i, MI_NV]):
            mat6_vec(IC[i], S[iv + d], F)
            j = i
            while j > 0:
                jv = mi[j, MI_IDX_V]
                for e in range(mi[j, MI_NV]):
                    M[jv + e, iv + d] = dot6(S[jv + e], F)
                j = mi[j, MI_PARENT]
        parent = mi[i, MI_PARENT]
        if parent > 0:
            for r in range(6):
                for k in range(6):
                    IC[parent, r, k] += IC[i, r, k]
    symmetrize_upper(M)


_CRBA_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T)


@njit(_CRBA_SIG, **_NJIT)
def _crba_kernel(mi, mf, ws, q):
    status = check_position_call(mi, ws, q)
    if status != 0:
        return status
    nv = mi[0, MI_NVTOT]
    zero = region1(mi, ws, R_ZERO_NV, nv)
    fext = region2(mi, ws, R_ZERO_FEXT, mi[0, MI_NJ], 6)
    forward_pass(mi, mf, ws, q, zero, zero, fext, FK_POSITION)
    crba_into(mi, ws, region2(mi, ws, R_M, nv, nv))
    return 0


@cfunc(ENTRY_SIG, **ENTRY_OPTIONS)
def _crba_entry(data, dims):
    try:
        return _crba_kernel(*position_arrays(data, dims))
    except Exception:  # an exception inside a cfunc would come back as status 0
        return STATUS_INTERNAL


_crba_call = entry(_crba_kernel, _crba_entry, "i2f2F1f1")


def crba(model: Model, data: Data, q) -> np.ndarray:
    """Joint-space inertia matrix M(q), full and symmetric.

    Args:
        q: (nq,) configuration.

    Returns:
        data.M (nv, nv) [kg m^2, kg m, kg].
    """
    try:
        status = _crba_call(model.mi, model.mf, data.ws, q)
    except (TypeError, AttributeError):
        status = call_kernel(_crba_call, model, data, (q,), ("q",), (1,))
    if status:
        raise_for_status(model, status)
    return data.M
