"""Composite rigid-body algorithm: the joint-space inertia matrix M(q).

World-frame CRBA (Featherstone, RBDA sec. 6.2): with I^C_i the composite inertia of the subtree of i,

    for i = N..1:   F = I^C_i S_i;   M[j, i] = S_j^T F  for j = i, lambda(i), lambda(lambda(i)), ...;
                    I^C_lambda(i) += I^C_i

which fills the upper triangle (ancestors have smaller indices); the lower one is its mirror.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.calling import check_position_matrix, register
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.kinematics import position_pass
from rbd_deriv.core.layout import (
    MF_ARMATURE,
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    MI_SUBTREE_END,
    R_IC10,
    R_OI,
    R_S,
    region2,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import inertia_times


@njit(**JIT_OPTIONS)
def symmetrize_upper(M):
    """Copy the upper triangle of the square matrix M into its lower triangle."""
    n = M.shape[0]
    for r in range(n):
        for c in range(r):
            M[r, c] = M[c, r]


@njit(**JIT_OPTIONS)
def zero_outside_subtrees(mi, M):
    """M[r, k] = 0 for k past the subtree of r's joint: the entries of the upper triangle that the tree
    sweeps of M (and M^-1) leave unwritten, which are zero since neither dof moves the other's bodies."""
    nv = mi[0, MI_NVTOT]
    for i in range(1, mi[0, MI_NJ]):
        iv, end = mi[i, MI_IDX_V], mi[i, MI_SUBTREE_END]
        for r in range(iv, iv + mi[i, MI_NV]):
            for k in range(end, nv):
                M[r, k] = 0.0


@njit(**JIT_OPTIONS)
def crba_into(mi, mf, ws, M):
    """CRBA backward pass into M (nv, nv), after forward_pass order 0; the armature on the diagonal."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oI = region2(mi, ws, R_OI, nj, 10)
    IC = region2(mi, ws, R_IC10, nj, 10)
    S = region2(mi, ws, R_S, nv, 6)
    for i in range(nj):
        for k in range(10):
            IC[i, k] = oI[i, k]
    zero_outside_subtrees(mi, M)
    for i in range(nj - 1, 0, -1):
        iv = mi[i, MI_IDX_V]
        for c in range(iv, iv + mi[i, MI_NV]):
            f0, f1, f2, f3, f4, f5 = inertia_times(IC[i], S[c, 0], S[c, 1], S[c, 2], S[c, 3], S[c, 4], S[c, 5])
            j = i
            while j > 0:
                jv = mi[j, MI_IDX_V]
                for r in range(jv, jv + mi[j, MI_NV]):
                    M[r, c] = S[r, 0] * f0 + S[r, 1] * f1 + S[r, 2] * f2 + S[r, 3] * f3 + S[r, 4] * f4 + S[r, 5] * f5
                j = mi[j, MI_PARENT]
            M[c, c] += mf[i, MF_ARMATURE + c - iv]
        parent = mi[i, MI_PARENT]
        if parent > 0:
            for k in range(10):
                IC[parent, k] += IC[i, k]
    symmetrize_upper(M)


@njit(**JIT_OPTIONS)
def _crba_kernel(mi, mf, ws, q, M):
    code = check_position_matrix(mi, ws, q, M)
    if code == 0:
        position_pass(mi, mf, ws, q)
        crba_into(mi, mf, ws, M)
    return code


CRBA = register(_crba_kernel, "mi:i2 mf:f2 data:W q:f1 M:F2", release_gil=False)
_crba = CRBA.call


def crba(model: Model, data: Data, q) -> np.ndarray:
    """Joint-space inertia matrix M(q), full and symmetric.

    Args:
        q: (nq,) configuration.

    Returns:
        data.M (nv, nv) [kg m^2, kg m, kg].
    """
    try:
        code = _crba(model.mi, model.mf, data.ws, q, data._M)
    except (TypeError, AttributeError):
        code = CRBA.call_converted(model, data, q)
    if code:
        raise CRBA.error(model, code)
    return data.M
