"""Analytical derivatives of forward dynamics: dddq/dq, dddq/dv and dddq/dtau = M^-1.

Carpentier & Mansard (RSS 2018, sec. IV): since tau = ID(q, v, FD(q, v, tau)), differentiating gives

    dFD/dq = -M^-1 dID/dq |_(a = ddq),     dFD/dv = -M^-1 dID/dv |_(a = ddq),     dFD/dtau = M^-1

so one ABA (ddq), one IDSVA pass at a = ddq (:mod:`rbd_deriv.core.rnea_derivatives`) and the dedicated M^-1
algorithm (:mod:`rbd_deriv.core.minverse`, reusing ABA's articulated inertias, which do not depend on v or tau)
give all three. The products M^-1 dID/dq and M^-1 dID/dv are dense (nv x nv) multiplications (DMM of Singh
et al.), through BLAS from BLAS_MIN_SIZE dofs and in plain loops below, where the call overhead of BLAS would
dominate. Their ABA-zero alternative (AZA, a tree sweep per column) is not implemented.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.aba import aba_into
from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import ARG_FEXT, STATUS_SINGULAR, check_state_matrices, register, status
from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING
from rbd_deriv.core.kinematics import acceleration_pass, motion_sets
from rbd_deriv.core.layout import MI_NVTOT, R_DDQ, R_DTAU_DQ, R_DTAU_DV, R_M, R_TAU, as_readonly, region1, region2
from rbd_deriv.core.minverse import minverse_from_articulated
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.rnea_derivatives import rnea_derivatives_into

#: Below this size the product runs in plain loops; above, BLAS (its call overhead no longer dominates).
BLAS_MIN_SIZE = 16


@njit(**JIT_OPTIONS_ALLOCATING)
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


@njit(**JIT_OPTIONS)
def aba_derivatives_into(mi, mf, ws, q, v, tau, fext, dddq_dq, dddq_dv, Minv):
    """ddq (into its region), [dddq/dq, dddq/dv] and M^-1. Returns 0, or the joint whose articulated inertia
    is singular."""
    nv = mi[0, MI_NVTOT]
    ddq = region1(mi, ws, R_DDQ, nv)
    singular = aba_into(mi, mf, ws, q, v, tau, fext, ddq)
    if singular:
        return singular
    motion_sets(mi, ws)
    acceleration_pass(mi, mf, ws, as_readonly(ddq), True)
    dtau_dq = region2(mi, ws, R_DTAU_DQ, nv, nv)
    dtau_dv = region2(mi, ws, R_DTAU_DV, nv, nv)
    rnea_derivatives_into(mi, mf, ws, as_readonly(ddq), region1(mi, ws, R_TAU, nv), dtau_dq, dtau_dv,
                          region2(mi, ws, R_M, nv, nv))
    minverse_from_articulated(mi, ws, Minv)
    negative_product(Minv, dtau_dq, dddq_dq)
    negative_product(Minv, dtau_dv, dddq_dv)
    return 0


@njit(**JIT_OPTIONS)
def _aba_derivatives_kernel(mi, mf, ws, q, v, tau, fext, dddq_dq, dddq_dv, Minv):
    code = check_state_matrices(mi, ws, q, v, tau, fext, ARG_FEXT + 1, dddq_dq, dddq_dv, Minv)
    if code == 0:
        singular = aba_derivatives_into(mi, mf, ws, q, v, tau, fext, dddq_dq, dddq_dv, Minv)
        if singular:
            code = status(STATUS_SINGULAR, 0, singular)
    return code


ABA_DERIVATIVES = register(_aba_derivatives_kernel,
                           "mi:i2 mf:f2 data:W q:f1 v:f1 tau:f1 fext:f2 dddq_dq:F2 dddq_dv:F2 Minv:F2")
_aba_derivatives = ABA_DERIVATIVES.call


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
        code = _aba_derivatives(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext,
                                    data._dddq_dq, data._dddq_dv, data._Minv)
    except (TypeError, AttributeError):
        code = ABA_DERIVATIVES.call_converted(model, data, q, v, tau, fext)
    if code:
        raise ABA_DERIVATIVES.error(model, code)
    return data.dddq_dq, data.dddq_dv, data.Minv


def aba_derivatives_batch(model: Model, Q, V, TAU):
    """aba_derivatives at K states -> (dddq_dq, dddq_dv, Minv), each (K, nv, nv)."""
    return tuple(run_batch(ABA_DERIVATIVES, model, Q, V, TAU, None))
