"""Analytical derivatives of forward dynamics: dddq/dq, dddq/dv and dddq/dtau = M^-1.

Carpentier & Mansard (RSS 2018, sec. IV): since tau = ID(q, v, FD(q, v, tau)), differentiating gives

    dFD/dq = -M^-1 dID/dq |_(a = ddq),     dFD/dv = -M^-1 dID/dv |_(a = ddq),     dFD/dtau = M^-1

so one ABA (ddq), one IDSVA pass at a = ddq (:mod:`rbd_deriv.core.rnea_derivatives`) and the dedicated M^-1
algorithm (:mod:`rbd_deriv.core.minverse`, reusing ABA's articulated inertias, which do not depend on v or tau)
give all three. The product M^-1 [dID/dq, dID/dv] is one dense (nv x nv)(nv x 2nv) multiplication (DMM of
Singh et al.), through BLAS from BLAS_MIN_SIZE dofs and in plain loops below, where the call overhead of BLAS
would dominate. Their ABA-zero alternative (AZA, a tree sweep per column) is not implemented.
"""

from __future__ import annotations

import numpy as np
from numba import cfunc, njit, types

from rbd_deriv.core.aba import STATUS_SINGULAR, aba_into, raise_for_dynamics_status
from rbd_deriv.core.kinematics import (
    MAT_T,
    MF_T,
    MI_T,
    STATUS_WORKSPACE,
    VEC_T,
    acceleration_pass,
    call_kernel,
    check_inputs,
    foreign_workspace,
    motion_sets,
)
from rbd_deriv.core.minverse import minverse_from_articulated
from rbd_deriv.core.model import MI_NVTOT, Data, Model
from rbd_deriv.core.rnea_derivatives import rnea_derivatives_into
from rbd_deriv.core.calling import ENTRY_OPTIONS, ENTRY_SIG, STATUS_INTERNAL, dynamics_arrays, entry
from rbd_deriv.core.spatial import _NJIT, R_DDDQ, R_DDQ, R_DTAU, R_M, R_MINV, R_TAU, region1, region2

#: Below this size the product runs in plain loops; above, BLAS (its call overhead no longer dominates).
BLAS_MIN_SIZE = 16


@njit(**_NJIT)
def negative_product(A, B, out):
    """out = -A B for A (n, n), B (n, m)."""
    n, m = B.shape
    if n >= BLAS_MIN_SIZE:
        np.dot(A, B, out)
        for r in range(n):
            for c in range(m):
                out[r, c] = -out[r, c]
        return
    for r in range(n):
        for c in range(m):
            out[r, c] = 0.0
        for k in range(n):
            s = -A[r, k]
            for c in range(m):
                out[r, c] += s * B[k, c]


@njit(**_NJIT)
def aba_derivatives_into(mi, mf, ws, q, v, tau, fext):
    """ddq, M^-1 and [dddq/dq, dddq/dv] into their regions. Returns False on a singular inertia."""
    nv = mi[0, MI_NVTOT]
    ddq = region1(mi, ws, R_DDQ, nv)
    if not aba_into(mi, mf, ws, q, v, tau, fext, ddq):
        return False
    motion_sets(mi, ws)
    acceleration_pass(mi, mf, ws, ddq, True)
    dtau = region2(mi, ws, R_DTAU, nv, 2 * nv)
    rnea_derivatives_into(mi, ws, region1(mi, ws, R_TAU, nv), dtau, region2(mi, ws, R_M, nv, nv))
    Minv = region2(mi, ws, R_MINV, nv, nv)
    minverse_from_articulated(mi, ws, Minv)
    negative_product(Minv, dtau, region2(mi, ws, R_DDDQ, nv, 2 * nv))
    return True


_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T, VEC_T, VEC_T, MAT_T)


@njit(_SIG, **_NJIT)
def _aba_derivatives_kernel(mi, mf, ws, q, v, tau, fext):
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    status = check_inputs(mi, q, v, tau, fext)
    if status != 0:
        return status
    if not aba_derivatives_into(mi, mf, ws, q, v, tau, fext):
        return STATUS_SINGULAR
    return 0


@cfunc(ENTRY_SIG, **ENTRY_OPTIONS)
def _aba_derivatives_entry(data, dims):
    try:
        return _aba_derivatives_kernel(*dynamics_arrays(data, dims))
    except Exception:  # an exception inside a cfunc would come back as status 0
        return STATUS_INTERNAL


_aba_derivatives_call = entry(_aba_derivatives_kernel, _aba_derivatives_entry, "i2f2F1f1f1f1f2")


_NAMES = ("q", "v", "tau", "fext")


def aba_derivatives(model: Model, data: Data, q, v, tau, fext=None):
    """Partial derivatives of aba(q, v, tau, fext).

    Args:
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        tau: (nv,) joint torques/forces [N m, N].
        fext: (njoints, 6) external forces in the joint frames [N, N m], or None.

    Returns:
        (dddq_dq, dddq_dv, Minv): views data.dddq_dq, data.dddq_dv, data.Minv, each (nv, nv); dddq_dq is
        taken in the tangent space of q. data.ddq holds aba(q, v, tau, fext) as a by-product.
    """
    try:
        status = _aba_derivatives_call(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext)
    except (TypeError, AttributeError):
        status = call_kernel(_aba_derivatives_call, model, data, (q, v, tau, fext), _NAMES, (1, 1, 1, 2))
    if status:
        raise_for_dynamics_status(model, status, _NAMES)
    return data.dddq_dq, data.dddq_dv, data.Minv
