"""Articulated-body algorithm (forward dynamics), world frame.

Featherstone, RBDA sec. 7.3, written on the world-frame quantities of :mod:`rbd_deriv.core.kinematics`
(no frame changes between bodies):

    forward:   v_i, c_i = Sdot_i qd_i;  I^A_i = I_i;  p^A_i = v_i x* I_i v_i - f^ext_i
    backward:  U_i = I^A_i S_i;  D_i = S_i^T U_i + armature_i;  u_i = tau_i - S_i^T p^A_i
               I^A_lambda += I^A_i - U_i D_i^-1 U_i^T
               p^A_lambda += p^A_i + (I^A_i - U_i D_i^-1 U_i^T) c_i + U_i D_i^-1 u_i
    forward:   a'_i = a_lambda(i) + c_i  (a_0 = -g);  qdd_i = D_i^-1 (u_i - U_i^T a'_i);  a_i = a'_i + S_i qdd_i
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import STATUS_SINGULAR, check_length, check_state, register, status
from rbd_deriv.core.constants import JIT_OPTIONS, SINGULAR_INERTIA
from rbd_deriv.core.kinematics import FK_VELOCITY, forward_pass
from rbd_deriv.core.layout import (
    MF_ARMATURE,
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    NV_FREE_FLYER,
    R_C,
    R_DINV,
    R_FEXTW,
    R_IA,
    R_OA,
    R_OI,
    R_OV,
    R_PA,
    R_S,
    R_SCRATCH,
    R_U,
    R_UVEC,
    region1,
    region2,
    region3,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.spatial import dot6, dot_rows, force_cross_add, inertia_matrix, inertia_times, mat6_vec


@njit(**JIT_OPTIONS)
def spd_inverse(D, n, out):
    """out[:n, :n] = D[:n, :n]^-1 for a small symmetric positive-definite block (Cholesky), without
    allocating: D = L L^T with L in out's lower triangle, L inverted in place, then D^-1 = L^-T L^-1 formed
    in D (overwritten) and copied to out.

    Returns False when D is not positive definite (a pivot at or below SINGULAR_INERTIA)."""
    if n == 1:
        if not D[0, 0] > SINGULAR_INERTIA:
            return False
        out[0, 0] = 1.0 / D[0, 0]
        return True
    for r in range(n):
        for c in range(r + 1):
            s = D[r, c]
            for k in range(c):
                s -= out[r, k] * out[c, k]
            if r == c:
                if not s > SINGULAR_INERTIA:
                    return False
                out[r, r] = np.sqrt(s)
            else:
                out[r, c] = s / out[c, c]
    # L^-1 in place, column by column from the first, each from the diagonal down: X[r, c] needs L's row r
    # right of column c (columns not yet inverted) and X's column c above row r (just computed).
    for c in range(n):
        d = 1.0 / out[c, c]
        out[c, c] = d
        for r in range(c + 1, n):
            s = out[r, c] * d
            for k in range(c + 1, r):
                s += out[r, k] * out[k, c]
            out[r, c] = -s / out[r, r]
    for r in range(n):
        for c in range(r + 1):
            s = 0.0
            for k in range(r, n):
                s += out[k, r] * out[k, c]
            D[r, c] = s
            D[c, r] = s
    for r in range(n):
        for c in range(n):
            out[r, c] = D[r, c]
    return True


@njit(**JIT_OPTIONS)
def _one_dof_step(IA, pA, Dinv, S, U, u, c, i, iv, parent, with_bias, armature):
    """articulated_inertias for a one-dof joint: D, U and u are scalars or single 6-vectors."""
    D = dot_rows(S, iv, U, iv) + armature
    if not D > SINGULAR_INERTIA:
        return False
    dinv = 1.0 / D
    Dinv[i, 0, 0] = dinv
    if parent == 0:
        return True
    # U and c in scalars: IA, U and c share the workspace, so stores would otherwise force reloads.
    u0, u1, u2, u3, u4, u5 = U[iv, 0], U[iv, 1], U[iv, 2], U[iv, 3], U[iv, 4], U[iv, 5]
    Ii, Ip = IA[i], IA[parent]
    # I^A - U D^-1 U^T is symmetric: the upper triangle is computed, each entry stored on both sides.
    for r in range(6):
        ur = U[iv, r] * dinv
        for k in range(r, 6):
            x = Ii[r, k] - ur * U[iv, k]
            Ip[r, k] += x
            if k != r:
                Ip[k, r] += x
    if with_bias:
        # pa = pA + Ia c + U D^-1 u, with Ia c = IA c - U D^-1 (U^T c).
        c0, c1, c2, c3, c4, c5 = c[i, 0], c[i, 1], c[i, 2], c[i, 3], c[i, 4], c[i, 5]
        w = (u[iv] - (u0 * c0 + u1 * c1 + u2 * c2 + u3 * c3 + u4 * c4 + u5 * c5)) * dinv
        for r in range(6):
            pA[parent, r] += (pA[i, r] + U[iv, r] * w + Ii[r, 0] * c0 + Ii[r, 1] * c1 + Ii[r, 2] * c2
                              + Ii[r, 3] * c3 + Ii[r, 4] * c4 + Ii[r, 5] * c5)
    return True


@njit(**JIT_OPTIONS)
def articulated_inertias(mi, mf, ws, with_bias, tau):
    """ABA backward pass: U, D^-1, u and the articulated inertias (and bias forces when with_bias).

    Expects forward_pass (order >= 1 when with_bias) and IA = I, pA initialised by the caller.
    Returns 0, or the joint whose D (armature included) is singular: its subtree has no inertia along its
    motion (bodies without mass), and M is singular."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    IA = region3(mi, ws, R_IA, nj, 6, 6)
    pA = region2(mi, ws, R_PA, nj, 6)
    Dinv = region3(mi, ws, R_DINV, nj, 6, 6)
    S = region2(mi, ws, R_S, nv, 6)
    U = region2(mi, ws, R_U, nv, 6)
    u = region1(mi, ws, R_UVEC, nv)
    c = region2(mi, ws, R_C, nj, 6)
    scratch = region1(mi, ws, R_SCRATCH, 64)
    D = scratch[0:36].reshape((6, 6))
    w = scratch[36:42]
    for i in range(nj - 1, 0, -1):
        iv, nvj, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_PARENT]
        for d in range(nvj):
            mat6_vec(IA[i], S[iv + d], U[iv + d])
            if with_bias:
                u[iv + d] = tau[iv + d] - dot6(S[iv + d], pA[i])
        if nvj == 1:
            if not _one_dof_step(IA, pA, Dinv, S, U, u, c, i, iv, parent, with_bias, mf[i, MF_ARMATURE]):
                return i
            continue
        nvj = NV_FREE_FLYER  # the only joint of several dofs: loops of constant length, unrolled
        for r in range(nvj):
            for d in range(nvj):
                D[r, d] = dot6(S[iv + r], U[iv + d])
            D[r, r] += mf[i, MF_ARMATURE + r]
        if not spd_inverse(D, nvj, Dinv[i]):
            return i
        if parent == 0:
            continue
        # Ia = IA - U Dinv U^T, accumulated into the parent directly.
        for r in range(6):
            for k in range(6):
                s = IA[i, r, k]
                for d in range(nvj):
                    t = 0.0
                    for e in range(nvj):
                        t += Dinv[i, d, e] * U[iv + e, k]
                    s -= U[iv + d, r] * t
                IA[parent, r, k] += s
        if with_bias:
            # pa = pA + Ia c + U Dinv u, with Ia c = IA c - U Dinv (U^T c).
            for d in range(nvj):
                w[d] = u[iv + d] - dot6(U[iv + d], c[i])
            for r in range(6):
                s = pA[i, r]
                for k in range(6):
                    s += IA[i, r, k] * c[i, k]
                for d in range(nvj):
                    t = 0.0
                    for e in range(nvj):
                        t += Dinv[i, d, e] * w[e]
                    s += U[iv + d, r] * t
                pA[parent, r] += s
    return 0


@njit(**JIT_OPTIONS)
def aba_into(mi, mf, ws, q, v, tau, fext, ddq):
    """Full ABA into ddq (nv,), inputs already checked. Returns 0, or the joint whose articulated inertia is
    singular."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    forward_pass(mi, mf, ws, q, v, v, fext, FK_VELOCITY)
    oI = region2(mi, ws, R_OI, nj, 10)
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    IA = region3(mi, ws, R_IA, nj, 6, 6)
    pA = region2(mi, ws, R_PA, nj, 6)
    fext_world = region2(mi, ws, R_FEXTW, nj, 6)
    Dinv = region3(mi, ws, R_DINV, nj, 6, 6)
    S = region2(mi, ws, R_S, nv, 6)
    U = region2(mi, ws, R_U, nv, 6)
    u = region1(mi, ws, R_UVEC, nv)
    c = region2(mi, ws, R_C, nj, 6)
    h = region1(mi, ws, R_SCRATCH, 64)[42:48]
    w = region1(mi, ws, R_SCRATCH, 64)[48:54]
    for i in range(1, nj):
        inertia_matrix(oI[i], IA[i])
        # p^A = v x* I v - f^ext
        h[0], h[1], h[2], h[3], h[4], h[5] = inertia_times(oI[i], ov[i, 0], ov[i, 1], ov[i, 2], ov[i, 3], ov[i, 4],
                                                           ov[i, 5])
        for k in range(6):
            pA[i, k] = -fext_world[i, k]
        force_cross_add(ov[i], h, 1.0, pA[i])
    singular = articulated_inertias(mi, mf, ws, True, tau)
    if singular:
        return singular
    for k in range(6):
        oa[0, k] = -mf[0, k]
    for i in range(1, nj):
        iv, nvj, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_PARENT]
        for k in range(6):
            oa[i, k] = oa[parent, k] + c[i, k]
        for d in range(nvj):
            w[d] = u[iv + d] - dot6(U[iv + d], oa[i])
        for d in range(nvj):
            s = 0.0
            for e in range(nvj):
                s += Dinv[i, d, e] * w[e]
            ddq[iv + d] = s
        for d in range(nvj):
            for k in range(6):
                oa[i, k] += S[iv + d, k] * ddq[iv + d]
    return 0


@njit(**JIT_OPTIONS)
def _aba_kernel(mi, mf, ws, q, v, tau, fext, ddq):
    code = check_state(mi, ws, q, v, tau, fext)
    if code == 0:
        code = check_length(ddq, mi[0, MI_NVTOT], 7)
    if code == 0:
        singular = aba_into(mi, mf, ws, q, v, tau, fext, ddq)
        if singular:
            code = status(STATUS_SINGULAR, 0, singular)
    return code


ABA = register(_aba_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 tau:f1 fext:f2 ddq:F1")
_aba = ABA.call


def aba(model: Model, data: Data, q, v, tau, fext=None) -> np.ndarray:
    """Forward dynamics ddq = M(q)^-1 (tau - C(q, v) v - g(q) + sum_i J_i^T fext_i).

    Args:
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        tau: (nv,) joint torques/forces [N m, N].
        fext: (njoints, 6) external spatial forces [N, N m] in each joint's frame, or None.

    Returns:
        data.ddq (nv,) acceleration [rad/s^2, m/s^2].
    """
    try:
        code = _aba(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext, data._ddq)
    except (TypeError, AttributeError):
        code = ABA.call_converted(model, data, q, v, tau, fext)
    if code:
        raise ABA.error(model, code)
    return data.ddq


def aba_batch(model: Model, Q, V, TAU) -> np.ndarray:
    """aba at K states. Q (K, nq), V (K, nv), TAU (K, nv) -> ddq (K, nv) [rad/s^2, m/s^2]."""
    return run_batch(ABA, model, Q, V, TAU, None)[0]
