"""Recursive Newton-Euler algorithm (inverse dynamics), nonlinear effects and generalized gravity.

World-frame RNEA (Featherstone, RBDA sec. 5.3; the RNEA write-up in the project's references):

    forward:   v_i, a_i as in :mod:`rbd_deriv.kinematics` (a_0 = -g)
    body:      f_i = I_i a_i + v_i x* I_i v_i - f_i^ext
    backward:  f_lambda(i) += f_i,     tau_i = S_i^T f_i

External forces f^ext are given per joint in the joint's local frame, [linear, angular], row 0 the
universe (ignored), as Pinocchio's ``fext``; they act on the body carried by the joint.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from rbd_deriv.kinematics import (
    STATUS_WORKSPACE,
    foreign_workspace,
    MAT_T,
    MF_T,
    MI_T,
    VEC_T,
    call_kernel,
    check_inputs,
    FK_ACCELERATION,
    forward_pass,
    raise_for_status,
)
from rbd_deriv.model import MI_IDX_V, MI_NJ, MI_NV, MI_NVTOT, MI_PARENT, Data, Model
from rbd_deriv.spatial import (
    _NJIT,
    R_FEXTW,
    R_G,
    R_NLE,
    R_OA,
    R_OF,
    R_OI,
    R_OV,
    R_S,
    R_SCRATCH,
    R_TAU,
    R_ZERO_FEXT,
    R_ZERO_NV,
    dot6,
    force_cross_add,
    mat6_vec,
    region1,
    region2,
    region3,
)


@njit(**_NJIT)
def body_forces(mi, ws):
    """of_i = I_i a_i + v_i x* I_i v_i - f_i^ext for every body (world frame), before accumulation."""
    nj = mi[0, MI_NJ]
    oI = region3(mi, ws, R_OI, nj, 6, 6)
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    of = region2(mi, ws, R_OF, nj, 6)
    fext_world = region2(mi, ws, R_FEXTW, nj, 6)
    h = region1(mi, ws, R_SCRATCH, 64)[24:30]
    for k in range(6):
        of[0, k] = 0.0
    for i in range(1, nj):
        mat6_vec(oI[i], oa[i], of[i])
        mat6_vec(oI[i], ov[i], h)
        force_cross_add(ov[i], h, 1.0, of[i])
        for k in range(6):
            of[i, k] -= fext_world[i, k]


@njit(**_NJIT)
def rnea_backward(mi, ws, out):
    """Accumulate the body forces toward the root and project them: out_i = S_i^T f_i^C."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    of = region2(mi, ws, R_OF, nj, 6)
    S = region2(mi, ws, R_S, nv, 6)
    for i in range(nj - 1, 0, -1):
        iv = mi[i, MI_IDX_V]
        for d in range(mi[i, MI_NV]):
            out[iv + d] = dot6(S[iv + d], of[i])
        parent = mi[i, MI_PARENT]
        if parent > 0:
            for k in range(6):
                of[parent, k] += of[i, k]


@njit(**_NJIT)
def rnea_into(mi, mf, ws, q, v, a, fext, out):
    """Full RNEA into ``out`` (nv,), inputs already checked."""
    forward_pass(mi, mf, ws, q, v, a, fext, FK_ACCELERATION)
    body_forces(mi, ws)
    rnea_backward(mi, ws, out)


_RNEA_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T, VEC_T, VEC_T, MAT_T)


@njit(_RNEA_SIG, **_NJIT)
def _rnea_kernel(mi, mf, ws, q, v, a, fext):
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    status = check_inputs(mi, q, v, a, fext)
    if status != 0:
        return status
    rnea_into(mi, mf, ws, q, v, a, fext, region1(mi, ws, R_TAU, mi[0, MI_NVTOT]))
    return 0


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
    if fext is None:
        fext = data.zero_fext
    try:
        status = _rnea_kernel(model.mi, model.mf, data.ws, q, v, a, fext)
    except TypeError:
        status = call_kernel(_rnea_kernel, model, data, (q, v, a, fext), ("q", "v", "a", "fext"), (1, 1, 1, 2))
    if status:
        raise_for_status(model, status)
    return data.tau


_NLE_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T, VEC_T)


@njit(_NLE_SIG, **_NJIT)
def _nle_kernel(mi, mf, ws, q, v):
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    nv = mi[0, MI_NVTOT]
    zero = region1(mi, ws, R_ZERO_NV, nv)
    fext = region2(mi, ws, R_ZERO_FEXT, mi[0, MI_NJ], 6)
    status = check_inputs(mi, q, v, zero, fext)
    if status != 0:
        return status
    rnea_into(mi, mf, ws, q, v, zero, fext, region1(mi, ws, R_NLE, nv))
    return 0


def nonlinear_effects(model: Model, data: Data, q, v) -> np.ndarray:
    """Coriolis, centrifugal and gravity torques h = C(q, v) v + g(q) = rnea(q, v, 0).

    Returns:
        data.nle (nv,) [N m, N].
    """
    try:
        status = _nle_kernel(model.mi, model.mf, data.ws, q, v)
    except TypeError:
        status = call_kernel(_nle_kernel, model, data, (q, v), ("q", "v"), (1, 1))
    if status:
        raise_for_status(model, status)
    return data.nle


_G_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T)


@njit(_G_SIG, **_NJIT)
def _gravity_kernel(mi, mf, ws, q):
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    nv = mi[0, MI_NVTOT]
    zero = region1(mi, ws, R_ZERO_NV, nv)
    fext = region2(mi, ws, R_ZERO_FEXT, mi[0, MI_NJ], 6)
    status = check_inputs(mi, q, zero, zero, fext)
    if status != 0:
        return status
    rnea_into(mi, mf, ws, q, zero, zero, fext, region1(mi, ws, R_G, nv))
    return 0


def gravity_torques(model: Model, data: Data, q) -> np.ndarray:
    """Generalized gravity g(q) = rnea(q, 0, 0).

    Returns:
        data.g (nv,) [N m, N].
    """
    try:
        status = _gravity_kernel(model.mi, model.mf, data.ws, q)
    except TypeError:
        status = call_kernel(_gravity_kernel, model, data, (q,), ("q",), (1,))
    if status:
        raise_for_status(model, status)
    return data.g
