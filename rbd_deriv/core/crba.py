"""Composite rigid-body algorithm: the joint-space inertia matrix M(q).

World-frame CRBA (Featherstone, RBDA sec. 6.2): with I^C_i the composite inertia of the subtree of i,

    for i = N..1:   F = I^C_i S_i;   M[j, i] = S_j^T F  for j = i, lambda(i), lambda(lambda(i)), ...;
                    I^C_lambda(i) += I^C_i

which fills the upper triangle (ancestors have smaller indices); the lower one is its mirror.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.calling import check_position, check_shape, register
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.kinematics import FK_POSITION, forward_pass
from rbd_deriv.core.layout import (
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    MI_SUBTREE_END,
    R_IC,
    R_OI,
    R_S,
    R_SCRATCH,
    region1,
    region2,
    region3,
    zero_forces,
    zero_velocity,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import copy_6x6_set, dot6, mat6_vec


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
def crba_into(mi, ws, M):
    """CRBA backward pass into M (nv, nv), after forward_pass order 0."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    zero_outside_subtrees(mi, M)
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


@njit(**JIT_OPTIONS)
def _crba_kernel(mi, mf, ws, q, M):
    nv = mi[0, MI_NVTOT]
    code = check_position(mi, ws, q)
    if code == 0:
        code = check_shape(M, nv, nv, 4)
    if code == 0:
        zero = zero_velocity(mi, ws)
        forward_pass(mi, mf, ws, q, zero, zero, zero_forces(mi, ws), FK_POSITION)
        crba_into(mi, ws, M)
    return code


CRBA = register(_crba_kernel, "mi:i2 mf:f2 data:W q:f1 M:F2")


def crba(model: Model, data: Data, q) -> np.ndarray:
    """Joint-space inertia matrix M(q), full and symmetric.

    Args:
        q: (nq,) configuration.

    Returns:
        data.M (nv, nv) [kg m^2, kg m, kg].
    """
    try:
        code = CRBA.call(model.mi, model.mf, data.ws, q, data._M)
    except (TypeError, AttributeError):
        code = CRBA.call_converted(model, data, q)
    if code:
        raise CRBA.error(model, code)
    return data.M
