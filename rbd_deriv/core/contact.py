"""Rigid contacts: constrained forward dynamics, impulses, and their analytical derivatives.

A point contact (3D) holds the classical acceleration of a frame's origin p at zero; a frame contact (6D) holds
the frame's spatial acceleration at zero. Forces are stacked in the order of the contacts, 3 per point and 6 per
frame ([linear, angular]), expressed LOCAL_WORLD_ALIGNED (world axes, origin p), and act on the robot:

    M ddq + b(q, v) = tau + J^T f,        J ddq + gamma = 0

with J the LWA Jacobian of the contacts (:mod:`rbd_deriv.core.frames`) and gamma the contact acceleration at
ddq = 0 (plus the Baumgarte terms when gains are given: kd v_p + kp (p - p_ref) for a point, kd (v_p, w) +
kp R log6(ref^-1 oMc) for a frame, see :func:`frames.placement_error`). These are Pinocchio's
conventions (constraintDynamics with LOCAL_WORLD_ALIGNED contact models and zero corrector gains).

Forward dynamics (the KKT system solved through M's factorization, Featherstone RBDA sec. 6.5):

    M = L^T D L                      (LTDL: L has the sparsity of the tree, factored in place, O(sum of depths))
    ddq_free = M^-1 (tau - b),   Y = M^-1 J^T,   G = J Y = Lambda^-1     (the m x m Delassus matrix)
    f = -G^-1 (J ddq_free + gamma),   ddq = ddq_free + Y f

For the contact counts of legged robots (m = 6..24) against nv = 18..50, applying M^-1 to the m columns of
J^T by the tree-sparse LTDL costs O(m * sum of depths), and the Cholesky of the small G O(m^3); the
alternative through ABA's articulated inertias and the operational-space inertia needs a sweep per contact
row as well, with more arithmetic per joint. The factorization is reused by every derivative.

Derivatives (the KKT recipe of Carpentier & Mansard's constrained extension, as Crocoddyl does): with
R_x = d ID(q, v, a, f)/dx at (a = ddq, f), ID(q, v, a, f) = M a + b - J^T f, and D_x = d(contact
acceleration)/dx at a = ddq, for x in {q, v}:

    df/dx = G^-1 (J M^-1 R_x - D_x),     dddq/dx = M^-1 (J^T df/dx - R_x) = Y df/dx - M^-1 R_x
    df/dtau = -G^-1 Y^T,                  dddq/dtau = M^-1 + Y df/dtau

R_x comes from the IDSVA derivatives (:mod:`rbd_deriv.core.rnea_derivatives`) with the contact forces as
external forces. Those treat an external force as fixed in its joint frame (turning with the body); an LWA force
keeps its world direction while its point moves with the body, so

    R_q = dID/dq (forces fixed in the joint frames) - sum_c (J_c,lin^T [f_c]x J_c,ang + J_c,ang^T [n_c]x J_c,ang)

(the correction lies in the range of J^T: it moves df/dq only). D_x: :func:`frames.lwa_motion_derivatives`.

Impulses (touchdown with restitution e): M (v+ - v) = J^T P, J v+ = -e J v, so P = -(1 + e) G^-1 J v and
v+ = v + Y P. Their derivatives follow the same recipe with R_q = dID/dq at (v = 0, a = v+ - v, no gravity,
external forces P) and the q-derivative of J w at w = v+ + e v in place of D_q; dP/dv = -(1 + e) G^-1 J.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Optional, Sequence

import numpy as np
from numba import njit

from rbd_deriv.core import constants
from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import (
    STATUS_SHAPE,
    STATUS_SINGULAR,
    check_length,
    check_matrix,
    check_position,
    check_shape,
    check_state,
    check_vector,
    check_model,
    decode,
    define_status,
    register,
    status,
)
from rbd_deriv.core import linearization
from rbd_deriv.core.cholesky import cholesky, cholesky_solve
from rbd_deriv.core.constants import JIT_OPTIONS, UINT
from rbd_deriv.core.crba import crba_into
from rbd_deriv.core.frames import (
    FRAME_COLS,
    FRAME_POS,
    frame_origin,
    lwa_jacobian_into,
    lwa_motion,
    lwa_motion_derivatives,
    lwa_velocity_derivative,
    placement_error,
    placement_error_jacobian,
)
from rbd_deriv.core.kinematics import FK_ACCELERATION, FK_DERIVATIVES, forward_pass, position_pass
from rbd_deriv.core.layout import (
    MI_IDX_V,
    MI_SUBTREE_END,
    MI_NJ,
    MI_NQTOT,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    R_DDDQ_DQ,
    R_DDDQ_DV,
    R_DDQ,
    R_DTAU_DQ,
    R_DTAU_DV,
    R_FEXTW,
    R_M,
    R_OA,
    R_OF,
    R_PSIDD,
    R_S,
    R_TAU,
    as_readonly,
    region1,
    region2,
    zero_forces,
    zero_velocity,
)
from rbd_deriv.core.linearization import check_time_step, euler_step_into
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.rnea import body_forces
from rbd_deriv.core.rnea_derivatives import rnea_derivatives_into
from rbd_deriv.core.spatial import dot_rows
from rbd_deriv.exceptions import InputError

# --- how a contact set reaches the kernels ----------------------------------------------------------------
# ci (ncontacts, CI_COLS) int64: kind (POINT 3, FRAME 6: its number of force rows; 0 an unused slot of a
# batch), the joint of its body. cf (ncontacts, CF_COLS) float64: the frame's placement in that joint frame
# (frames.FRAME_COLS numbers), the Baumgarte gains kp, kd and the reference placement (world; FRAME_COLS numbers:
# rotation row-major, then the position p_ref, which is all a point contact reads).
CI_KIND, CI_JOINT, CI_COLS = 0, 1, 2

CF_KP, CF_KD, CF_REF = FRAME_COLS, FRAME_COLS + 1, FRAME_COLS + 2
CF_REF_POS = CF_REF + FRAME_POS
CF_COLS = CF_REF + FRAME_COLS
KIND_POINT, KIND_FRAME = 3, 6

CONTACT_RANK_TOLERANCE = 1e-10
"""A pivot of the Cholesky of the Delassus matrix below this fraction of its diagonal entry means the contact
Jacobian has lost rank: that contact's rows depend on the earlier contacts' (redundant contacts)."""


def _rank_error(model: Model, name: str, index: int) -> Exception:
    return InputError(f"{name}: redundant contacts: the rows of contact {index} depend on the earlier contacts'"
                      " (the contact Jacobian loses rank)", name)


def _contact_error(model: Model, name: str, index: int) -> Exception:
    return InputError(f"{name}: contact {index} names no moving joint of this model", name)


STATUS_CONTACT_RANK = define_status(21, _rank_error)
STATUS_CONTACT_JOINT = define_status(22, _contact_error)


# --- the workspace of a contact set -------------------------------------------------------------------------


@njit(**JIT_OPTIONS)
def _offsets(nv, m):
    """Offsets of the contact workspace's parts: L (nv, nv), J (m, nv), Z = L^-T J^T (nv, m), G (m, m),
    rhs (max(m, nv),), bias (nv,), w (nv,), then for the derivatives X (nv, 3nv), D (m, 3nv), F (m, 3nv), and
    dddq_dtau (nv, nv) and df_dq, df_dv, df_dtau (3, m, nv) (contact_dynamics_derivatives' results); then the
    scratch of the frame position gain, K (6, 6) and T (8, 3, 3); and the total size."""
    o_L = 0
    o_J = o_L + nv * nv
    o_Z = o_J + m * nv
    o_G = o_Z + nv * m
    o_rhs = o_G + m * m
    o_bias = o_rhs + max(m, nv)
    o_w = o_bias + nv
    o_X = o_w + nv
    o_D3 = o_X + 3 * nv * nv
    o_F3 = o_D3 + 3 * m * nv
    o_T = o_F3 + 3 * m * nv
    o_F = o_T + nv * nv
    return o_L, o_J, o_Z, o_G, o_rhs, o_bias, o_w, o_X, o_D3, o_F3, o_T, o_F, o_F + 3 * m * nv + 108


@functools.lru_cache(maxsize=256)
def workspace_size(nv: int, m: int) -> int:
    """Size of the float64 workspace of a contact set with m force rows on a model of nv dofs."""
    return int(_offsets(nv, m)[-1])


@njit(**JIT_OPTIONS)
def check_contacts(mi, ci, cf, cws, argument, cws_argument):
    """(status, m): 0 and the number of force rows, or the status of a contact description (ci at position
    ``argument``, cf next) or of its workspace cws (at ``cws_argument``) that does not fit the model."""
    nc = ci.shape[0]
    if ci.shape[1] != CI_COLS:
        return status(STATUS_SHAPE, argument, 0), 0
    code = check_matrix(cf, nc, CF_COLS, argument + 1)
    if code:
        return code, 0
    m = 0
    for c in range(nc):
        kind, joint = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind != 0 and kind != KIND_POINT and kind != KIND_FRAME:
            return status(STATUS_CONTACT_JOINT, argument, c), 0
        if kind != 0 and not 0 < joint < mi[0, MI_NJ]:
            return status(STATUS_CONTACT_JOINT, argument, c), 0
        m += kind
    if cws.shape[0] < _offsets(mi[0, MI_NVTOT], 6 * nc)[-1]:
        return status(STATUS_SHAPE, cws_argument, 0), 0
    return 0, m


# --- dense and tree-sparse linear algebra -----------------------------------------------------------------------


# The dof tree of Featherstone's LTDL: the ancestors of dof k are the earlier dofs of its joint, then the dofs
# of each joint up the chain, each joint's dofs a contiguous range; the descendants of k (its subtree) are the dofs
# from k to the end of its joint's subtree (MI_SUBTREE_END), a contiguous range in the depth-first order. The
# loops below walk the chain through the model's parent array and run their innermost loops over such ranges.


@njit(**JIT_OPTIONS)
def ltdl_factor(mi, H, t):
    """H = L^T D L in place (Featherstone, RBDA Table 6.3), L unit lower triangular with the sparsity of the tree,
    computed in the dot-product order (that of Pinocchio's cholesky::decompose): from the leaves up, for dof k
    with subtree C (the dofs after k in its subtree, a contiguous range),

        D_k = H_kk - sum_{c in C} L_ck^2 D_c,    L_ki = (H_ik - sum_{c in C} L_ci D_c L_ck) / D_k  (i ancestor of k)

    the sums read along rows of the upper triangle. L_ki is written to both H[k, i] and H[i, k], D on the
    diagonal; only the entries between a dof and its ancestors are read or written. t (nv,) scratch. Returns 0,
    or the joint at whose dof the pivot vanishes (M singular)."""
    for jk in range(mi[0, MI_NJ] - 1, 0, -1):
        ivk, end = mi[jk, MI_IDX_V], mi[jk, MI_SUBTREE_END]
        for k in range(ivk + mi[jk, MI_NV] - 1, ivk - 1, -1):
            d = H[k, k]
            Hk = H[k]
            for c in range(UINT(k + 1), UINT(end)):
                t[c] = H[c, c] * Hk[c]
                d -= Hk[c] * t[c]
            if not d > constants.SINGULAR_INERTIA:
                return jk
            H[k, k] = d
            inverse = 1.0 / d
            ji, top = jk, k
            while ji > 0:
                ivi = mi[ji, MI_IDX_V]
                for i in range(ivi, top):
                    Hi = H[i]
                    acc = Hi[k]
                    for c in range(UINT(k + 1), UINT(end)):
                        acc -= Hi[c] * t[c]
                    acc *= inverse
                    H[i, k] = acc
                    H[k, i] = acc
                ji = mi[ji, MI_PARENT]
                top = mi[ji, MI_IDX_V] + mi[ji, MI_NV] if ji > 0 else 0
    return 0


@njit(inline="always", **JIT_OPTIONS)
def _to_ancestors(mi, H, X, ji, i, col0, ncols):
    """X[j, col0:col0 + ncols] -= L_ij X[i, col0:col0 + ncols] for every ancestor j of dof i (of joint ji)."""
    jj, top, Xi = ji, i, X[i]
    while jj > 0:
        ivj = mi[jj, MI_IDX_V]
        for j in range(ivj, top):
            l = H[i, j]
            Xj = X[j]
            for col in range(UINT(col0), UINT(col0 + ncols)):
                Xj[col] -= l * Xi[col]
        jj = mi[jj, MI_PARENT]
        top = mi[jj, MI_IDX_V] + mi[jj, MI_NV] if jj > 0 else 0


@njit(**JIT_OPTIONS)
def ltdl_forward(mi, H, X):
    """X (nv, c) <- L^-T X, the first sweep of a solve with M = L^T D L factored in H (row updates from the
    leaves up: row i, final, updates the rows of its ancestors)."""
    for ji in range(mi[0, MI_NJ] - 1, 0, -1):
        ivi = mi[ji, MI_IDX_V]
        for i in range(ivi + mi[ji, MI_NV] - 1, ivi - 1, -1):
            _to_ancestors(mi, H, X, ji, i, 0, X.shape[1])


@njit(**JIT_OPTIONS)
def ltdl_backward(mi, H, X):
    """X (nv, c) <- L^-1 D^-1 X, the rest of the solve after :func:`ltdl_forward` (from the root down)."""
    nj, nv, c = mi[0, MI_NJ], X.shape[0], X.shape[1]
    for i in range(nv):
        d = 1.0 / H[i, i]
        Xi = X[i]
        for col in range(UINT(0), UINT(c)):
            Xi[col] *= d
    for ji in range(1, nj):
        ivi = mi[ji, MI_IDX_V]
        for i in range(ivi, ivi + mi[ji, MI_NV]):
            Xi = X[i]
            jj, top = ji, i
            while jj > 0:
                ivj = mi[jj, MI_IDX_V]
                for j in range(ivj, top):
                    l = H[i, j]
                    Xj = X[j]
                    for col in range(UINT(0), UINT(c)):
                        Xi[col] -= l * Xj[col]
                jj = mi[jj, MI_PARENT]
                top = mi[jj, MI_IDX_V] + mi[jj, MI_NV] if jj > 0 else 0


@njit(**JIT_OPTIONS)
def ltdl_forward_chain(mi, H, X, b, col0, ncols):
    """:func:`ltdl_forward` for the columns col0..col0+ncols of X that are zero outside the dofs supporting body b
    (the rows of J^T of a contact on b): L^-T only moves a row towards the root, so they stay so, and only the
    chain's rows are swept."""
    ji = b
    while ji > 0:
        ivi = mi[ji, MI_IDX_V]
        for i in range(ivi + mi[ji, MI_NV] - 1, ivi - 1, -1):
            _to_ancestors(mi, H, X, ji, i, col0, ncols)
        ji = mi[ji, MI_PARENT]


@njit(**JIT_OPTIONS)
def ltdl_solve(mi, H, X):
    """X (nv, c) <- M^-1 X with M = L^T D L factored in H: L^-T, D^-1, L^-1, each a sweep of row updates."""
    ltdl_forward(mi, H, X)
    ltdl_backward(mi, H, X)


@njit(**JIT_OPTIONS)
def _contact_row(ci, row):
    """The contact whose force rows include ``row``."""
    first = 0
    for c in range(ci.shape[0]):
        first += ci[c, CI_KIND]
        if row < first:
            return c
    return ci.shape[0] - 1


# --- the shared steps -----------------------------------------------------------------------------------------


@njit(**JIT_OPTIONS)
def bias_forces(mi, ws, out):
    """out (nv,) = S^T of the subtree forces: the RNEA torques of the forward pass's accelerations (with a = 0,
    b(q, v) = C v + g - J^T fext), in the world frame."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    S = region2(mi, ws, R_S, nv, 6)
    of = region2(mi, ws, R_OF, nj, 6)
    body_forces(mi, ws)
    for i in range(nj - 1, 0, -1):
        iv = mi[i, MI_IDX_V]
        for k in range(iv, iv + mi[i, MI_NV]):
            out[k] = dot_rows(S, k, of, i)
        parent = mi[i, MI_PARENT]
        if parent > 0:
            for k in range(6):
                of[parent, k] += of[i, k]


@njit(**JIT_OPTIONS)
def _factor_and_jacobian(mi, mf, ws, ci, cf, cws, m, with_motion, argument):
    """After a forward pass: M, its LTDL, the contact Jacobian J, Z = L^-T J^T (Y = M^-1 J^T = L^-1 D^-1 Z is
    never formed: the solves and the derivatives use Z), the Cholesky of G = J M^-1 J^T = Z^T D^-1 Z, and
    (with_motion) the contact accelerations at ddq = 0 with their Baumgarte terms in rhs.
    Returns 0 or a status."""
    nv = mi[0, MI_NVTOT]
    o_L, o_J, o_Z, o_G, o_rhs, _, o_w, _, _, _, _, _, _ = _offsets(nv, m)
    L = cws[o_L:o_L + nv * nv].reshape((nv, nv))
    J = cws[o_J:o_J + m * nv].reshape((m, nv))
    Z = cws[o_Z:o_Z + nv * m].reshape((nv, m))
    G = cws[o_G:o_G + m * m].reshape((m, m))
    rhs = cws[o_rhs:o_rhs + m]
    dinv = cws[o_w:o_w + nv]
    crba_into(mi, mf, ws, L)  # M, factored in place in the contact workspace
    singular = ltdl_factor(mi, L, dinv)
    if singular:
        return status(STATUS_SINGULAR, 0, singular)
    for k in range(nv):
        dinv[k] = 1.0 / L[k, k]
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        px, py, pz = frame_origin(mi, ws, b, cf[c])
        lwa_jacobian_into(mi, ws, b, px, py, pz, kind, J, row)
        if with_motion:
            kp = cf[c, CF_KP]
            lwa_motion(mi, mf, ws, b, px, py, pz, kind, cf[c, CF_KD], rhs, row)
            if kind == KIND_POINT:
                rhs[row] += kp * (px - cf[c, CF_REF_POS])
                rhs[row + 1] += kp * (py - cf[c, CF_REF_POS + 1])
                rhs[row + 2] += kp * (pz - cf[c, CF_REF_POS + 2])
            elif kp != 0.0:
                ax, ay, az, bx, by, bz, _, _ = placement_error(mi, ws, b, cf[c], px, py, pz, cf[c, CF_REF:])
                rhs[row] += kp * ax
                rhs[row + 1] += kp * ay
                rhs[row + 2] += kp * az
                rhs[row + 3] += kp * bx
                rhs[row + 4] += kp * by
                rhs[row + 5] += kp * bz
        row += kind
    for k in range(nv):
        for r in range(m):
            Z[k, r] = J[r, k]
    # Z = L^-T J^T and G = Z^T D^-1 Z contact by contact: contact c's columns of Z are zero outside the dofs
    # supporting its body, so G[r, s] (s in an earlier contact or c's own rows) sums over that chain only.
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        ltdl_forward_chain(mi, L, Z, b, row, kind)
        for r in range(row, row + kind):
            for s in range(r + 1):
                G[r, s] = 0.0
        j = b
        while j > 0:
            iv = mi[j, MI_IDX_V]
            for k in range(iv, iv + mi[j, MI_NV]):
                for r in range(row, row + kind):
                    a = Z[k, r] * dinv[k]
                    for s in range(r + 1):
                        G[r, s] += a * Z[k, s]
            j = mi[j, MI_PARENT]
        for r in range(row, row + kind):
            for s in range(r):
                G[s, r] = G[r, s]
        row += kind
    failed = cholesky(G, m, CONTACT_RANK_TOLERANCE)
    if failed >= 0:
        return status(STATUS_CONTACT_RANK, argument, _contact_row(ci, failed))
    return 0


@njit(**JIT_OPTIONS)
def contact_forward(mi, mf, ws, q, v, tau, fext, ci, cf, cws, m, ddq, forces):
    """ddq (nv,) and the contact forces (m,) of the KKT system. Returns 0 or a status."""
    nv = mi[0, MI_NVTOT]
    o_L, _, o_Z, o_G, o_rhs, o_bias, o_w, _, _, _, _, _, _ = _offsets(nv, m)
    forward_pass(mi, mf, ws, q, v, zero_velocity(mi, ws), fext, FK_ACCELERATION)
    bias = cws[o_bias:o_bias + nv]
    bias_forces(mi, ws, bias)
    code = _factor_and_jacobian(mi, mf, ws, ci, cf, cws, m, True, ARG_CI)
    if code:
        return code
    L = cws[o_L:o_L + nv * nv].reshape((nv, nv))
    Z = cws[o_Z:o_Z + nv * m].reshape((nv, m))
    G = cws[o_G:o_G + m * m].reshape((m, m))
    rhs = cws[o_rhs:o_rhs + m]
    dinv = cws[o_w:o_w + nv]
    # With w = L^-T (tau - b): J ddq_free = Z^T D^-1 w, and ddq = M^-1 (tau - b + J^T f) = L^-1 D^-1 (w + Z f).
    for k in range(nv):
        ddq[k] = tau[k] - bias[k]
    ltdl_forward(mi, L, ddq.reshape((nv, 1)))
    for k in range(nv):
        bias[k] = ddq[k] * dinv[k]  # D^-1 w (b is used no more)
    for r in range(m):
        acc = rhs[r]
        for k in range(nv):
            acc += Z[k, r] * bias[k]
        forces[r] = -acc
    cholesky_solve(G, m, forces[:m].reshape((m, 1)))
    for k in range(nv):
        acc = 0.0
        for r in range(m):
            acc += Z[k, r] * forces[r]
        ddq[k] += acc
    ltdl_backward(mi, L, ddq.reshape((nv, 1)))
    return 0


@njit(**JIT_OPTIONS)
def _add_contact_forces(mi, ws, ci, cf, forces):
    """fext_world of each contact's body += its force, moved from the LWA frame at p to the world origin."""
    fw = region2(mi, ws, R_FEXTW, mi[0, MI_NJ], 6)
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        px, py, pz = frame_origin(mi, ws, b, cf[c])
        fx, fy, fz = forces[row], forces[row + 1], forces[row + 2]
        fw[b, 0] += fx
        fw[b, 1] += fy
        fw[b, 2] += fz
        fw[b, 3] += py * fz - pz * fy
        fw[b, 4] += pz * fx - px * fz
        fw[b, 5] += px * fy - py * fx
        if kind == KIND_FRAME:
            fw[b, 3] += forces[row + 3]
            fw[b, 4] += forces[row + 4]
            fw[b, 5] += forces[row + 5]
        row += kind


@njit(**JIT_OPTIONS)
def _world_force_correction(mi, ws, ci, cf, forces, J, Rq):
    """Rq -= sum_c J_c,lin^T [f_c]x J_c,ang (+ J_c,ang^T [n_c]x J_c,ang for a frame): from forces fixed in the
    joint frames to forces fixed in the world (LWA). Only the dofs supporting each contact are touched."""
    nv = mi[0, MI_NVTOT]
    S = region2(mi, ws, R_S, nv, 6)
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        fx, fy, fz = forces[row], forces[row + 1], forces[row + 2]
        nx = ny = nz = 0.0
        if kind == KIND_FRAME:
            nx, ny, nz = forces[row + 3], forces[row + 4], forces[row + 5]
        j = b
        while j > 0:
            iv = mi[j, MI_IDX_V]
            for k in range(iv, iv + mi[j, MI_NV]):
                tx, ty, tz = S[k, 3], S[k, 4], S[k, 5]
                ux, uy, uz = fy * tz - fz * ty, fz * tx - fx * tz, fx * ty - fy * tx  # f x S_ang
                mx, my, mz = ny * tz - nz * ty, nz * tx - nx * tz, nx * ty - ny * tx  # n x S_ang
                i = b
                while i > 0:
                    jv = mi[i, MI_IDX_V]
                    for r in range(jv, jv + mi[i, MI_NV]):
                        Rq[r, k] -= (J[row, r] * ux + J[row + 1, r] * uy + J[row + 2, r] * uz
                                     + S[r, 3] * mx + S[r, 4] * my + S[r, 5] * mz)
                    i = mi[i, MI_PARENT]
            j = mi[j, MI_PARENT]
        row += kind


@njit(**JIT_OPTIONS)
def _chain_products(mi, ci, L, Z, X, dF, transposed):
    """transposed: dF (m, c) += Z^T D^-1 X; otherwise X (nv, c) += Z dF. Contact c's columns of Z are zero outside
    the dofs supporting its body, so each product walks that chain only, three force rows at a time (a contact
    has 3 or 6), each row of X read or written once for the three."""
    cols = X.shape[1]
    row = 0
    for c in range(ci.shape[0]):
        kind, j = ci[c, CI_KIND], ci[c, CI_JOINT]
        while kind != 0 and j > 0:
            iv = mi[j, MI_IDX_V]
            for k in range(iv, iv + mi[j, MI_NV]):
                Xk = X[k]
                for r in range(row, row + kind, 3):
                    F0, F1, F2 = dF[r], dF[r + 1], dF[r + 2]
                    if transposed:
                        dk = 1.0 / L[k, k]
                        a0, a1, a2 = Z[k, r] * dk, Z[k, r + 1] * dk, Z[k, r + 2] * dk
                        for col in range(UINT(0), UINT(cols)):
                            u = Xk[col]
                            F0[col] += a0 * u
                            F1[col] += a1 * u
                            F2[col] += a2 * u
                    else:
                        z0, z1, z2 = Z[k, r], Z[k, r + 1], Z[k, r + 2]
                        for col in range(UINT(0), UINT(cols)):
                            Xk[col] += z0 * F0[col] + z1 * F1[col] + z2 * F2[col]
            j = mi[j, MI_PARENT]
        row += kind


@njit(**JIT_OPTIONS)
def _kkt_derivative(mi, ci, L, Z, G, m, D, X, dF):
    """dF (m, c) = G^-1 (J M^-1 R - D) and X (nv, c) = M^-1 (J^T dF - R) = Y dF - M^-1 R, for R given in X: the KKT
    inverse applied to the c columns of [-R; -D], through the Z = L^-T J^T of the forward step. With U = L^-T R:

        J M^-1 R = Z^T D^-1 U,        M^-1 (J^T dF - R) = L^-1 D^-1 (Z dF - U)

    (Y = M^-1 J^T, dense, is never formed; the products with Z walk the contacts' chains)."""
    cols = X.shape[1]
    ltdl_forward(mi, L, X)  # U
    for r in range(m):
        dFr, Dr = dF[r], D[r]
        for col in range(UINT(0), UINT(cols)):
            dFr[col] = -Dr[col]
    _chain_products(mi, ci, L, Z, X, dF, True)
    cholesky_solve(G, m, dF)
    for k in range(X.shape[0]):
        Xk = X[k]
        for col in range(UINT(0), UINT(cols)):
            Xk[col] = -Xk[col]
    _chain_products(mi, ci, L, Z, X, dF, False)
    ltdl_backward(mi, L, X)


@njit(**JIT_OPTIONS)
def contact_derivatives(mi, mf, ws, q, v, fext, ci, cf, cws, m, ddq, forces):
    """The derivatives of ddq and the forces after :func:`contact_forward` (same state, same cws), left in cws:
    X (nv, 3nv) = [dddq/dq, dddq/dv, dddq/dtau] and F (m, 3nv) = [df/dq, df/dv, df/dtau] (see :func:`_offsets`)."""
    nv = mi[0, MI_NVTOT]
    o_L, o_J, o_Z, o_G, _, _, _, o_X, o_D3, o_F3, _, _, o_end = _offsets(nv, m)
    L = cws[o_L:o_L + nv * nv].reshape((nv, nv))
    J = cws[o_J:o_J + m * nv].reshape((m, nv))
    Z = cws[o_Z:o_Z + nv * m].reshape((nv, m))
    G = cws[o_G:o_G + m * m].reshape((m, m))
    # One KKT solve for the 3 nv columns [R_q, R_v, -I] (dID/dtau = -I) against [D_q, D_v, 0]: one sweep over
    # the factorizations with rows three times longer. R and D are written in place, in their column blocks.
    X = cws[o_X:o_X + 3 * nv * nv].reshape((nv, 3 * nv))
    D3 = cws[o_D3:o_D3 + 3 * m * nv].reshape((m, 3 * nv))
    F3 = cws[o_F3:o_F3 + 3 * m * nv].reshape((m, 3 * nv))
    Rq, Rv, Dq, Dv = X[:, :nv], X[:, nv:2 * nv], D3[:, :nv], D3[:, nv:2 * nv]
    forward_pass(mi, mf, ws, q, v, as_readonly(ddq), fext, FK_DERIVATIVES)
    _add_contact_forces(mi, ws, ci, cf, forces)
    rnea_derivatives_into(mi, mf, ws, as_readonly(ddq), region1(mi, ws, R_TAU, nv), Rq, Rv,
                          region2(mi, ws, R_M, nv, nv))
    _world_force_correction(mi, ws, ci, cf, forces, J, Rq)
    for r in range(nv):
        for c in range(2 * nv, 3 * nv):
            X[r, c] = 0.0
        X[r, 2 * nv + r] = -1.0
    for r in range(m):
        for c in range(2 * nv, 3 * nv):
            D3[r, c] = 0.0
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        px, py, pz = frame_origin(mi, ws, b, cf[c])
        kp = cf[c, CF_KP]
        lwa_motion_derivatives(mi, mf, ws, b, px, py, pz, kind, kp if kind == KIND_POINT else 0.0, cf[c, CF_KD], Dq,
                               Dv, row)
        if kind == KIND_FRAME and kp != 0.0:
            # kp (a, b) moves with the frame: its q-derivative is kp K J_c (K: frames.placement_error_jacobian)
            K = cws[o_end - 108:o_end - 72].reshape((6, 6))
            ax, ay, az, bx, by, bz, theta, k = placement_error(mi, ws, b, cf[c], px, py, pz, cf[c, CF_REF:])
            placement_error_jacobian(ax, ay, az, bx, by, bz, theta, k, K, cws[o_end - 72:o_end].reshape((8, 3, 3)))
            for r in range(6):
                for col in range(nv):
                    acc = 0.0
                    for s in range(6):
                        acc += K[r, s] * J[row + s, col]
                    Dq[row + r, col] += kp * acc
        row += kind
    _kkt_derivative(mi, ci, L, Z, G, m, D3, X, F3)


@njit(**JIT_OPTIONS)
def _zero_padding(forces, m):
    """Zero the entries of a batch's force row past the state's m rows (written only once a call succeeded)."""
    for r in range(m, forces.shape[0]):
        forces[r] = 0.0


# --- kernels ------------------------------------------------------------------------------------------------------

# One kernel per family serves the dynamics, their derivatives and the linearization, chosen by ``mode``: each
# registered kernel links its own copy of everything it calls (RNEA derivatives, the factorizations, the frame
# kernels), so separate kernels would compile that code once each.
MODE_DYNAMICS, MODE_DERIVATIVES, MODE_LINEARIZE, MODE_LINEARIZE_FORCES = 0, 1, 2, 3

# Positions of the contact kernel's arguments: mi mf data q v tau fext ci cf dt mode cws A B x_next forces
# dforces_dx dforces_du.
ARG_CI = 7
ARG_CWS = ARG_CI + 4


@njit(**JIT_OPTIONS)
def _split_columns(X, first, second, third):
    """first, second, third (rows, n) = the three column blocks of X (rows, 3n)."""
    n = first.shape[1]
    for r in range(X.shape[0]):
        for c in range(n):
            first[r, c] = X[r, c]
            second[r, c] = X[r, n + c]
            third[r, c] = X[r, 2 * n + c]


@njit(**JIT_OPTIONS)
def _copy_force_derivatives(nv, m, F3, dforces_dx, dforces_du):
    """dforces_dx = [dF_dq, dF_dv] (rows, 2nv) and dforces_du = dF_dtau (rows, nv) from F3 = [dF_dq, dF_dv, dF_dtau]
    (m, 3nv), zero in the rows past m (a batch's padding)."""
    for r in range(m):
        for c in range(2 * nv):
            dforces_dx[r, c] = F3[r, c]
        for c in range(nv):
            dforces_du[r, c] = F3[r, 2 * nv + c]
    for r in range(m, dforces_dx.shape[0]):
        dforces_dx[r, :] = 0.0
        dforces_du[r, :] = 0.0


@njit(**JIT_OPTIONS)
def _contact_kernel(mi, mf, ws, q, v, tau, fext, ci, cf, dt, mode, cws, A, B, x_next, forces, dforces_dx,
                    dforces_du):
    """MODE_DYNAMICS: ddq (data.ddq) and the forces; MODE_DERIVATIVES: also dddq/dq, dddq/dv (data.dddq_dq,
    data.dddq_dv), dddq/dtau and dforces/d(q, v, tau) (in cws, see :func:`_offsets`); MODE_LINEARIZE: ddq, the
    forces and the Euler step's A, B and x_next, from the derivatives where the KKT solve leaves them (dt is read
    in these modes only); MODE_LINEARIZE_FORCES: also the forces' derivatives copied into dforces_dx (>= m, 2nv)
    and dforces_du (>= m, nv), so that a batch can give every thread one workspace cws (the other modes leave
    them untouched: (0, 2nv) and (0, nv) arrays do)."""
    nv, nq = mi[0, MI_NVTOT], mi[0, MI_NQTOT]
    code = check_state(mi, ws, q, v, tau, fext)
    m = 0
    if code == 0:
        code, m = check_contacts(mi, ci, cf, cws, ARG_CI, ARG_CWS)
    if code == 0 and forces.shape[0] < m:
        code = status(STATUS_SHAPE, ARG_CWS + 4, 0)
    if code == 0 and mode >= MODE_LINEARIZE:
        code = check_shape(A, 2 * nv, 2 * nv, ARG_CWS + 1)
        if code == 0:
            code = check_shape(B, 2 * nv, nv, ARG_CWS + 2)
        if code == 0:
            code = check_length(x_next, nq + nv, ARG_CWS + 3)
    if code == 0 and mode == MODE_LINEARIZE_FORCES:
        if dforces_dx.shape[0] < m or dforces_dx.shape[1] != 2 * nv:
            code = status(STATUS_SHAPE, ARG_CWS + 5, 0)
        elif dforces_du.shape[0] != dforces_dx.shape[0] or dforces_du.shape[1] != nv:
            code = status(STATUS_SHAPE, ARG_CWS + 6, 0)
    if code != 0:
        return code
    ddq = region1(mi, ws, R_DDQ, nv)
    code = contact_forward(mi, mf, ws, q, v, tau, fext, ci, cf, cws, m, ddq, forces)
    if code:
        return code
    _zero_padding(forces, m)
    if mode == MODE_DYNAMICS:
        return 0
    contact_derivatives(mi, mf, ws, q, v, fext, ci, cf, cws, m, ddq, forces)
    _, _, _, _, _, _, _, o_X, _, o_F3, o_T, o_F, _ = _offsets(nv, m)
    X = cws[o_X:o_X + 3 * nv * nv].reshape((nv, 3 * nv))
    F3 = cws[o_F3:o_F3 + 3 * m * nv].reshape((m, 3 * nv))
    if mode == MODE_DERIVATIVES:
        _split_columns(X, region2(mi, ws, R_DDDQ_DQ, nv, nv), region2(mi, ws, R_DDDQ_DV, nv, nv),
                       cws[o_T:o_T + nv * nv].reshape((nv, nv)))
        dF = cws[o_F:o_F + 3 * m * nv].reshape((3, m, nv))
        _split_columns(F3, dF[0], dF[1], dF[2])
        return 0
    # The Euler step reads the derivatives where the KKT solve left them (data.dddq_dq and data.dddq_dv are not
    # written in these modes).
    euler_step_into(mi, ws, q, v, dt, ddq, X[:, :nv], X[:, nv:2 * nv], X[:, 2 * nv:], A, B, x_next)
    if mode == MODE_LINEARIZE_FORCES:
        _copy_force_derivatives(nv, m, F3, dforces_dx, dforces_du)
    return 0


CONTACT = register(
    _contact_kernel,
    "mi:i2 mf:f2 data:W q:f1 v:f1 tau:f1 fext:f2 ci:i2 cf:f2 dt:d mode:n cws:W A:F2 B:F2 x_next:F1 forces:F1"
    " dforces_dx:F2 dforces_du:F2")
_contact = CONTACT.call


@njit(**JIT_OPTIONS)
def impulse_forward(mi, mf, ws, q, v, e, ci, cf, cws, m, v_plus, impulses):
    """v+ (nv,) and the impulses P (m,) of a touchdown with restitution e. Returns 0 or a status."""
    nv = mi[0, MI_NVTOT]
    o_L, o_J, o_Z, o_G, _, _, _, _, _, _, _, _, _ = _offsets(nv, m)
    position_pass(mi, mf, ws, q)
    code = _factor_and_jacobian(mi, mf, ws, ci, cf, cws, m, False, ARG_IMPULSE_CI)
    if code:
        return code
    J = cws[o_J:o_J + m * nv].reshape((m, nv))
    Z = cws[o_Z:o_Z + nv * m].reshape((nv, m))
    G = cws[o_G:o_G + m * m].reshape((m, m))
    for r in range(m):
        acc = 0.0
        for k in range(nv):
            acc += J[r, k] * v[k]
        impulses[r] = -(1.0 + e) * acc
    cholesky_solve(G, m, impulses[:m].reshape((m, 1)))
    # v+ = v + M^-1 J^T P = v + L^-1 D^-1 (Z P)
    for k in range(nv):
        acc = 0.0
        for r in range(m):
            acc += Z[k, r] * impulses[r]
        v_plus[k] = acc
    ltdl_backward(mi, cws[o_L:o_L + nv * nv].reshape((nv, nv)), v_plus.reshape((nv, 1)))
    for k in range(nv):
        v_plus[k] += v[k]
    return 0


@njit(**JIT_OPTIONS)
def _remove_gravity(mi, mf, ws):
    """Take the base acceleration -g out of a forward pass (FK_DERIVATIVES, v = 0): it enters every oa_i and,
    through a_lambda x S, every Psidd, linearly."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oa = region2(mi, ws, R_OA, nj, 6)
    S = region2(mi, ws, R_S, nv, 6)
    Psidd = region2(mi, ws, R_PSIDD, nv, 6)
    gx, gy, gz, hx, hy, hz = mf[0, 0], mf[0, 1], mf[0, 2], mf[0, 3], mf[0, 4], mf[0, 5]
    for i in range(nj):
        for k in range(6):
            oa[i, k] += mf[0, k]
    for d in range(nv):
        sx, sy, sz, tx, ty, tz = S[d, 0], S[d, 1], S[d, 2], S[d, 3], S[d, 4], S[d, 5]
        Psidd[d, 0] += hy * sz - hz * sy + gy * tz - gz * ty
        Psidd[d, 1] += hz * sx - hx * sz + gz * tx - gx * tz
        Psidd[d, 2] += hx * sy - hy * sx + gx * ty - gy * tx
        Psidd[d, 3] += hy * tz - hz * ty
        Psidd[d, 4] += hz * tx - hx * tz
        Psidd[d, 5] += hx * ty - hy * tx


@njit(**JIT_OPTIONS)
def impulse_derivatives(mi, mf, ws, q, v, e, ci, cf, cws, m, v_plus, impulses, dv_dq, dv_dv, dP_dq, dP_dv):
    """The derivatives of v+ and P after :func:`impulse_forward` (same state, same cws)."""
    nv = mi[0, MI_NVTOT]
    o_L, o_J, o_Z, o_G, _, _, o_w, o_X, o_D3, o_F3, _, _, _ = _offsets(nv, m)
    L = cws[o_L:o_L + nv * nv].reshape((nv, nv))
    J = cws[o_J:o_J + m * nv].reshape((m, nv))
    Z = cws[o_Z:o_Z + nv * m].reshape((nv, m))
    G = cws[o_G:o_G + m * m].reshape((m, m))
    w = cws[o_w:o_w + nv]
    # One KKT solve for the 2 nv columns [R_q, 0] against [d(J w)/dq, (1 + e) J]: the v columns give
    # dP/dv = -(1 + e) G^-1 J and Y dP/dv = dv+/dv - I.
    X = cws[o_X:o_X + 2 * nv * nv].reshape((nv, 2 * nv))
    D2 = cws[o_D3:o_D3 + 2 * m * nv].reshape((m, 2 * nv))
    F2 = cws[o_F3:o_F3 + 2 * m * nv].reshape((m, 2 * nv))
    Rq = region2(mi, ws, R_DTAU_DQ, nv, nv)
    for k in range(nv):
        w[k] = v_plus[k] - v[k]
    forward_pass(mi, mf, ws, q, zero_velocity(mi, ws), as_readonly(w), zero_forces(mi, ws), FK_DERIVATIVES)
    _remove_gravity(mi, mf, ws)
    _add_contact_forces(mi, ws, ci, cf, impulses)
    rnea_derivatives_into(mi, mf, ws, as_readonly(w), region1(mi, ws, R_TAU, nv), Rq,
                          region2(mi, ws, R_DTAU_DV, nv, nv), region2(mi, ws, R_M, nv, nv))
    _world_force_correction(mi, ws, ci, cf, impulses, J, Rq)
    for k in range(nv):
        w[k] = v_plus[k] + e * v[k]
    row = 0
    for c in range(ci.shape[0]):
        kind, b = ci[c, CI_KIND], ci[c, CI_JOINT]
        if kind == 0:
            continue
        px, py, pz = frame_origin(mi, ws, b, cf[c])
        lwa_velocity_derivative(mi, ws, b, px, py, pz, kind, w, J, D2[:, :nv], row)
        row += kind
    for r in range(m):
        for k in range(nv):
            D2[r, nv + k] = (1.0 + e) * J[r, k]
    for r in range(nv):
        for c in range(nv):
            X[r, c] = Rq[r, c]
            X[r, nv + c] = 0.0
    _kkt_derivative(mi, ci, L, Z, G, m, D2, X, F2)
    for r in range(nv):
        for c in range(nv):
            dv_dq[r, c] = X[r, c]
            dv_dv[r, c] = X[r, nv + c]
        dv_dv[r, r] += 1.0
    for r in range(m):
        for c in range(nv):
            dP_dq[r, c] = F2[r, c]
            dP_dv[r, c] = F2[r, nv + c]


# The impulse kernel: mi mf data q v e ci cf cws mode v_plus impulses dv_plus_dq dv_plus_dv dimpulses_dq
# dimpulses_dv (the derivatives written in MODE_DERIVATIVES only).
ARG_IMPULSE_CI = 6


@njit(**JIT_OPTIONS)
def _impulse_kernel(mi, mf, ws, q, v, e, ci, cf, cws, mode, v_plus, impulses, dv_dq, dv_dv, dP_dq, dP_dv):
    nv = mi[0, MI_NVTOT]
    code = check_position(mi, ws, q)
    if code == 0:
        code = check_vector(v, nv, 4)
    m = 0
    if code == 0:
        code, m = check_contacts(mi, ci, cf, cws, ARG_IMPULSE_CI, ARG_IMPULSE_CI + 2)
    first = ARG_IMPULSE_CI + 4
    if code == 0:
        code = check_length(v_plus, nv, first)
    if code == 0 and impulses.shape[0] < m:
        code = status(STATUS_SHAPE, first + 1, 0)
    if code == 0 and mode != MODE_DYNAMICS:
        code = check_shape(dv_dq, nv, nv, first + 2)
        if code == 0:
            code = check_shape(dv_dv, nv, nv, first + 3)
        if code == 0:
            code = check_shape(dP_dq, m, nv, first + 4)
        if code == 0:
            code = check_shape(dP_dv, m, nv, first + 5)
    if code == 0:
        code = impulse_forward(mi, mf, ws, q, v, e, ci, cf, cws, m, v_plus, impulses)
    if code == 0:
        _zero_padding(impulses, m)
        if mode != MODE_DYNAMICS:
            impulse_derivatives(mi, mf, ws, q, v, e, ci, cf, cws, m, v_plus, impulses, dv_dq, dv_dv, dP_dq, dP_dv)
    return code


IMPULSE = register(
    _impulse_kernel,
    "mi:i2 mf:f2 data:W q:f1 v:f1 e:d ci:i2 cf:f2 cws:W mode:n v_plus:F1 impulses:F1 dv_plus_dq:F2 dv_plus_dv:F2"
    " dimpulses_dq:F2 dimpulses_dv:F2")
_impulse = IMPULSE.call


# --- Python API ------------------------------------------------------------------------------------------------

#: The contact kinds and their force rows, the one place the package keeps them: a point contact carries a force
#: (3 rows), a frame contact a wrench (6 rows, [linear, angular]).
FORCE_ROWS = {"point": KIND_POINT, "frame": KIND_FRAME}
_REFERENCE_KIND = {"point": "world position", "frame": "world placement"}

ROTATION_TOLERANCE = 1e-9
"""Largest entry of R^T R - I accepted in a frame contact's reference placement."""


class Contact:
    """A rigid contact of a frame of the model with the environment.

    Args:
        model: The model.
        frame: A frame name (``model.frame_names``: links and joints) on a moving body.
        kind: ``"point"`` (3D: the classical acceleration of the frame's origin is zero; 3 force rows) or
            ``"frame"`` (6D: the frame's spatial acceleration is zero; 6 force rows, [linear, angular]).
        baumgarte: Optional gains (kp [1/s^2], kd [1/s]) of the drift correction (Pinocchio's corrector), LOCAL_WORLD
            _ALIGNED: a point's acceleration is held at -kp (p - p_ref) - kd v_p instead of zero; a frame's spatial
            acceleration at -kp R log6(ref^-1 oMc) - kd (v_p, w), with oMc = (R, p) the frame's placement, log6 its
            error against the reference placement (linear, angular) in the frame's axes, turned to the world's.
            kp needs ``reference``.
        reference: The target of kp, settable: for a point, its world position p_ref (3,) [m]; for a frame, its
            world placement (4, 4) (a rotation and a position [m]).

    Raises:
        InputError: an unknown frame, a frame fixed to the universe (it cannot move: no contact force acts on
            the robot through it), an unknown kind, gains that are not two finite non-negative numbers, kp on a
            reference that is not a position (point) or a placement (frame).
    """

    __slots__ = ("model", "frame", "kind", "joint", "rows", "_baumgarte", "_row_i", "_row_f")

    def __init__(self, model: Model, frame: str, kind: str = "point", baumgarte=None, reference=None) -> None:
        check_model(model)
        if kind not in FORCE_ROWS:
            raise InputError(f"kind: expected 'point' or 'frame', got {kind!r}", "kind")
        try:
            joint, placement = model.frames[frame]
        except (KeyError, TypeError):
            raise InputError(f"frame: no frame named {frame!r}; model.frame_names lists them", "frame") from None
        if joint == 0:
            raise InputError(f"frame: {frame!r} is fixed to the universe: it cannot move, so no contact there acts"
                             " on the robot", "frame")
        kp, kd = 0.0, 0.0
        if baumgarte is not None:
            try:
                kp, kd = (float(g) for g in baumgarte)
            except (TypeError, ValueError):
                raise InputError(f"baumgarte: expected (kp, kd), got {baumgarte!r}", "baumgarte") from None
            if not (math.isfinite(kp) and math.isfinite(kd) and kp >= 0.0 and kd >= 0.0):
                raise InputError(f"baumgarte: gains must be finite and non-negative, got {baumgarte!r}", "baumgarte")
        self.model, self.frame, self.kind, self.joint = model, frame, kind, int(joint)
        self.rows = FORCE_ROWS[kind]
        self._baumgarte = (kp, kd)
        self._row_i = np.array([self.rows, joint], dtype=np.int64)
        self._row_f = np.zeros(CF_COLS)
        self._row_f[:9] = placement[:3, :3].ravel()
        self._row_f[9:12] = placement[:3, 3]
        self._row_f[CF_KP], self._row_f[CF_KD] = kp, kd
        self._row_f[CF_REF:CF_REF + 9] = np.eye(3).ravel()
        if reference is not None:
            self.reference = reference
        elif kp > 0.0:
            raise InputError(f"reference: a position gain kp needs a reference {_REFERENCE_KIND[kind]}", "reference")

    @property
    def baumgarte(self) -> tuple:
        """(kp, kd), fixed at construction (make another Contact for other gains)."""
        return self._baumgarte

    @property
    def reference(self) -> np.ndarray:
        """The target of kp: (3,) world position [m] for a point, (4, 4) world placement for a frame (a copy)."""
        if self.kind == "point":
            return self._row_f[CF_REF_POS:CF_REF_POS + 3].copy()
        placement = np.eye(4)
        placement[:3, :3] = self._row_f[CF_REF:CF_REF + 9].reshape(3, 3)
        placement[:3, 3] = self._row_f[CF_REF_POS:CF_REF_POS + 3]
        return placement

    @reference.setter
    def reference(self, value) -> None:
        shape = (3,) if self.kind == "point" else (4, 4)
        try:
            x = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            x = None
        if x is None or x.shape != shape or not np.all(np.isfinite(x)):
            raise InputError(f"reference: expected a {_REFERENCE_KIND[self.kind]}, {shape} finite numbers, got"
                             f" {value!r}", "reference")
        if self.kind == "point":
            self._row_f[CF_REF_POS:CF_REF_POS + 3] = x
            return
        R = x[:3, :3]
        if (np.abs(x[3] - [0.0, 0.0, 0.0, 1.0]).max() > 0.0 or np.abs(R.T @ R - np.eye(3)).max() > ROTATION_TOLERANCE
                or np.linalg.det(R) < 0.0):
            raise InputError("reference: a placement's rotation must be orthonormal with determinant 1 (within"
                             f" {ROTATION_TOLERANCE}) and its last row [0, 0, 0, 1]", "reference")
        self._row_f[CF_REF:CF_REF + 9] = R.ravel()
        self._row_f[CF_REF_POS:CF_REF_POS + 3] = x[:3, 3]

    def __repr__(self) -> str:
        return f"Contact({self.frame!r}, kind={self.kind!r}, baumgarte={self.baumgarte})"


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class ContactData:
    """The workspace and results of one contact set on one Data (made by the contact functions, kept on the
    Data): ``forces`` (m,), ``dforces_dq``, ``dforces_dv``, ``dforces_dtau`` (m, nv), ``dddq_dtau`` (nv, nv),
    ``v_plus`` (nv,), ``impulses`` (m,), ``dv_plus_dq``, ``dv_plus_dv`` (nv, nv), ``dimpulses_dq``,
    ``dimpulses_dv`` (m, nv). Public arrays are read-only views, overwritten by the next call."""

    def __init__(self, model: Model, contacts: tuple) -> None:
        nv = model.nv
        self.contacts = contacts
        self.m = m = sum(c.rows for c in contacts)
        # An empty set (a flight phase) is one unused slot: the kernels then solve M ddq + b = tau.
        self.ci = np.array([c._row_i for c in contacts] or [np.zeros(CI_COLS, dtype=np.int64)])
        self.cf = np.array([c._row_f for c in contacts] or [np.zeros(CF_COLS)])
        self.with_reference = any(c.baumgarte[0] > 0.0 for c in contacts)
        self.cws = np.zeros(workspace_size(nv, 6 * len(self.ci)))
        for name, shape in (("forces", (m,)), ("v_plus", (nv,)), ("impulses", (m,)), ("dv_plus_dq", (nv, nv)),
                            ("dv_plus_dv", (nv, nv)), ("dimpulses_dq", (m, nv)), ("dimpulses_dv", (m, nv))):
            array = np.zeros(shape)
            setattr(self, "_" + name, array)
            setattr(self, name, _readonly(array))
        # The contact kernel leaves dddq/dtau and the force derivatives in the workspace (see _offsets).
        offsets = _offsets(nv, m)
        o_T, o_F = offsets[10], offsets[11]
        self.dddq_dtau = _readonly(self.cws[o_T:o_T + nv * nv].reshape(nv, nv))
        self.dforces = _readonly(self.cws[o_F:o_F + 3 * m * nv].reshape(3, m, nv))
        self.dforces_dq, self.dforces_dv, self.dforces_dtau = self.dforces
        # The kernel arguments this set holds, by name (the slow path's call_converted takes them as they are).
        # The batch's copies of the force derivatives: none here (they stay in cws).
        self._dforces_dx, self._dforces_du = np.zeros((0, 2 * nv)), np.zeros((0, nv))
        self.bound = {"ci": self.ci, "cf": self.cf, "cws": self.cws, "dforces_dx": self._dforces_dx,
                      "dforces_du": self._dforces_du}
        self.bound.update((name, getattr(self, "_" + name)) for name in (
            "forces", "v_plus", "impulses", "dv_plus_dq", "dv_plus_dv", "dimpulses_dq", "dimpulses_dv"))

    def refresh(self) -> None:
        """Copy the contacts' reference placements (settable) into the kernels' description."""
        for k, contact in enumerate(self.contacts):
            self.cf[k, CF_REF:] = contact._row_f[CF_REF:]


_CACHE_SIZE = 32
"""Contact sets whose workspace a Data keeps (the oldest is dropped past this)."""


def _check_contact_set(model: Model, contacts) -> tuple:
    try:
        key = tuple(contacts)
    except TypeError:
        raise InputError("contacts: expected a sequence of rbd_deriv.Contact", "contacts") from None
    for c in key:
        if not isinstance(c, Contact):
            raise InputError(f"contacts: expected rbd_deriv.Contact items, got {type(c).__name__}", "contacts")
        if c.model is not model:
            raise InputError(f"contacts: {c!r} belongs to another model", "contacts")
    # Two contacts on one rigid body are always redundant: a frame contact fixes the body, and two points
    # of a body keep their distance, so their accelerations along the line joining them are dependent.
    bodies = {}
    for c in key:
        if c.joint in bodies:
            other = bodies[c.joint]
            raise InputError(f"contacts: redundant contacts: {other!r} and {c!r} are on the same rigid body (joint"
                             f" {model.joint_names[c.joint - 1]!r}); one point or one frame contact per body",
                             "contacts")
        bodies[c.joint] = c
    return key


def contact_data(model: Model, data: Data, contacts) -> ContactData:
    """The :class:`ContactData` of ``contacts`` on ``data`` (made at the first call with this set)."""
    try:
        cache = data._contact_sets
    except AttributeError:
        if not isinstance(data, Data):
            raise InputError("data: not a workspace of this model (use model.create_data())", "data") from None
        cache = data._contact_sets = {}
    key = contacts if type(contacts) is tuple else None
    try:
        state = cache[key if key is not None else tuple(contacts)]
    except (KeyError, TypeError):
        check_model(model)
        key = _check_contact_set(model, contacts)
        state = cache.get(key)
        if state is None:
            state = ContactData(model, key)
            if len(cache) >= _CACHE_SIZE:
                del cache[next(iter(cache))]
            cache[key] = state
    if state.contacts and state.contacts[0].model is not model:
        raise InputError("contacts: they belong to another model", "contacts")
    if state.with_reference:
        state.refresh()
    return state


def _raise(registered, model: Model, code: int, contacts) -> None:
    raise _error(registered, model, code, contacts)


def _error(registered, model: Model, code: int, contacts, names: Optional[Sequence[str]] = None) -> Exception:
    """The exception of a nonzero status of a contact kernel run with ``contacts``: a contact at fault is named
    by its index and its frame (``names``: the argument names, as in Registered.error)."""
    kind, argument, index = decode(code)
    if kind in (STATUS_CONTACT_RANK, STATUS_CONTACT_JOINT) and index < len(contacts):
        contact = contacts[index]
        if kind == STATUS_CONTACT_JOINT:
            return InputError(f"contacts: contact {index} ({contact.frame!r}, {contact.kind}) names no moving joint"
                              " of this model", "contacts")
        earlier = ", ".join(repr(c.frame) for c in contacts[:index])
        where = (f"depend on those of {earlier}" if earlier else
                 "are dependent by themselves (the frame cannot move along every constrained direction here)")
        return InputError(f"contacts: redundant contacts: the rows of contact {index} ({contact.frame!r},"
                          f" {contact.kind}) {where}: the contact Jacobian loses rank", "contacts")
    return registered.error(model, code, names)


def _run_contact(model: Model, data: Data, state: ContactData, q, v, tau, fext, dt: float, mode: int) -> int:
    """The contact kernel's status for one state (arguments of other types converted, or refused)."""
    try:
        return _contact(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext, state.ci,
                        state.cf, dt, mode, state.cws, data._A, data._B, data._x_next, state._forces, state._dforces_dx,
                        state._dforces_du)
    except (TypeError, AttributeError):
        return CONTACT.call_converted(model, data, q, v, tau, fext, dt, mode, bound=state.bound)


def _run_impulse(model: Model, data: Data, state: ContactData, q, v, e: float, mode: int) -> int:
    """The impulse kernel's status (arguments of other types converted, or refused)."""
    try:
        return _impulse(model.mi, model.mf, data.ws, q, v, e, state.ci, state.cf, state.cws, mode, state._v_plus,
                        state._impulses, state._dv_plus_dq, state._dv_plus_dv, state._dimpulses_dq,
                        state._dimpulses_dv)
    except (TypeError, AttributeError):
        return IMPULSE.call_converted(model, data, q, v, e, mode, bound=state.bound)


def contact_dynamics(model: Model, data: Data, contacts, q, v, tau, fext=None):
    """Forward dynamics under rigid contacts: M ddq + b(q, v) = tau + J^T f with the contacts held (KKT).

    Args:
        contacts: A sequence of :class:`Contact` of this model (forces stacked in this order).
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        tau: (nv,) joint torques/forces [N m, N].
        fext: (njoints, 6) other external forces in the joint frames [N, N m], or None.

    Returns:
        (ddq, forces): data.ddq (nv,) [rad/s^2, m/s^2] and the contact forces (m,) [N, N m], LWA at each
        frame's origin, acting on the robot; read-only views.

    Raises:
        InputError: bad contacts (another model's, redundant), wrong shapes, NaN or inf.
        ModelError: M singular at this configuration.
    """
    state = contact_data(model, data, contacts)
    code = _run_contact(model, data, state, q, v, tau, fext, 0.0, MODE_DYNAMICS)
    if code:
        _raise(CONTACT, model, code, state.contacts)
    return data.ddq, state.forces


def contact_dynamics_derivatives(model: Model, data: Data, contacts, q, v, tau, fext=None):
    """Partial derivatives of :func:`contact_dynamics` (same arguments).

    Returns:
        (dddq_dq, dddq_dv, dddq_dtau, dforces_dq, dforces_dv, dforces_dtau): (nv, nv) three times (data.dddq_dq,
        data.dddq_dv and the contact set's dddq_dtau), then (m, nv) three times; derivatives with respect to q
        are in the tangent space. data.ddq and the contact set's forces hold the dynamics as a by-product.
    """
    state = contact_data(model, data, contacts)
    code = _run_contact(model, data, state, q, v, tau, fext, 0.0, MODE_DERIVATIVES)
    if code:
        _raise(CONTACT, model, code, state.contacts)
    return (data.dddq_dq, data.dddq_dv, state.dddq_dtau, state.dforces_dq, state.dforces_dv, state.dforces_dtau)


def _check_restitution(restitution) -> float:
    try:
        e = float(restitution)
    except (TypeError, ValueError):
        raise InputError(f"restitution: expected a number, got {restitution!r}", "restitution") from None
    if not (math.isfinite(e) and 0.0 <= e <= 1.0):
        raise InputError(f"restitution: must be in [0, 1], got {e}", "restitution")
    return e


def impulse_dynamics(model: Model, data: Data, contacts, q, v, restitution: float = 0.0):
    """Velocity after an impact at the contacts: M (v+ - v) = J^T P with J v+ = -e J v.

    Args:
        contacts: A sequence of :class:`Contact` (Baumgarte gains are ignored here).
        q: (nq,) configuration.
        v: (nv,) velocity before the impact [rad/s, m/s].
        restitution: e in [0, 1] (0: the contacts stop dead).

    Returns:
        (v_plus, impulses): (nv,) velocity after the impact and the impulses (m,) [N s, N m s], LWA; read-only
        views of the contact set's ContactData.
    """
    state = contact_data(model, data, contacts)
    code = _run_impulse(model, data, state, q, v, _check_restitution(restitution), MODE_DYNAMICS)
    if code:
        _raise(IMPULSE, model, code, state.contacts)
    return state.v_plus, state.impulses


def impulse_dynamics_derivatives(model: Model, data: Data, contacts, q, v, restitution: float = 0.0):
    """Partial derivatives of :func:`impulse_dynamics` (same arguments).

    Returns:
        (dv_plus_dq, dv_plus_dv, dimpulses_dq, dimpulses_dv): (nv, nv) twice, (m, nv) twice; with respect to q
        in the tangent space. v_plus and impulses are computed as a by-product.
    """
    state = contact_data(model, data, contacts)
    code = _run_impulse(model, data, state, q, v, _check_restitution(restitution), MODE_DERIVATIVES)
    if code:
        _raise(IMPULSE, model, code, state.contacts)
    return state.dv_plus_dq, state.dv_plus_dv, state.dimpulses_dq, state.dimpulses_dv


def linearize_contacts(model: Model, data: Data, contacts, q, v, tau, dt, fext=None):
    """:func:`rbd_deriv.linearize` under contacts: semi-implicit Euler on the manifold with the contact
    dynamics, v+ = v + dt ddq, q+ = q (+) dt v+ (Crocoddyl's IntegratedActionModelEuler over its contact
    forward dynamics). Returns (A, B) as data.A, data.B; data.x_next holds x+, the contact set's ``forces``
    the contact forces of the step."""
    dt = check_time_step(dt)
    state = contact_data(model, data, contacts)
    code = _run_contact(model, data, state, q, v, tau, fext, dt, MODE_LINEARIZE)
    if code:
        _raise(CONTACT, model, code, state.contacts)
    return data.A, data.B


def contact_forces(model: Model, data: Data, contacts) -> np.ndarray:
    """The forces (m,) of the last contact_dynamics, its derivatives or linearize with these contacts on data."""
    return contact_data(model, data, contacts).forces


def _set_key(contacts, state: Optional[int]) -> tuple:
    """A contact set as a tuple (the key of its layout); InputError naming the state if it is no sequence."""
    try:
        return contacts if type(contacts) is tuple else tuple(contacts)
    except TypeError:
        where = "contacts" if state is None else f"contacts: the set of state {state}"
        raise InputError(f"{where} is not a sequence of rbd_deriv.Contact", "contacts") from None


_SET_LAYOUTS: "weakref.WeakKeyDictionary[Model, dict]" = weakref.WeakKeyDictionary()
"""Per model, the batch layout of each contact set met (at most _CACHE_SIZE, the oldest dropped past that)."""


def _set_layout(model: Model, key: tuple) -> tuple:
    """(ci (n, CI_COLS), cf (n, CF_COLS), force rows) of a contact set for the batch kernel, checked and laid out
    at its first batch on this model; the reference placements (settable) are copied again at each call when a
    position gain reads them."""
    layouts = _SET_LAYOUTS.get(model)
    if layouts is None:
        layouts = _SET_LAYOUTS.setdefault(model, {})
    try:
        layout = layouts.get(key)
    except TypeError:  # an unhashable item: not a Contact
        layout = None
    if layout is None:
        contacts = _check_contact_set(model, key)
        n = len(contacts)
        layout = (np.array([c._row_i for c in contacts], dtype=np.int64).reshape(n, CI_COLS),
                  np.array([c._row_f for c in contacts]).reshape(n, CF_COLS), sum(c.rows for c in contacts),
                  any(c.baumgarte[0] > 0.0 for c in contacts))
        if len(layouts) >= _CACHE_SIZE:
            del layouts[next(iter(layouts))]
        layouts[key] = layout
    ci, cf, rows, with_reference = layout
    if with_reference:
        cf = np.array([c._row_f for c in key]).reshape(len(key), CF_COLS)
    return ci, cf, rows


_BATCH_LAYOUTS: "weakref.WeakKeyDictionary[Model, dict]" = weakref.WeakKeyDictionary()
"""Per model, the batch description of each tuple of contact sets met (a controller's schedules, given again at
every tick), by the tuple's identity: (the tuple, CI, CF, force rows, distinct sets, each state's set), at most
_CACHE_SIZE, the oldest dropped past that."""


def _batch_layout(model: Model, contacts, count: int) -> tuple:
    """(CI (K, width, CI_COLS), CF (K, width, CF_COLS), force rows of the largest set, the distinct sets, the
    index (K,) of each state's among them) of ``contacts`` as :func:`linearize_contacts_batch` takes them.

    A horizon repeats few contact sets (the phases of a gait): each distinct set (the same contacts in the same
    order, whichever sequence holds them) is checked and laid out once per model (:func:`_set_layout`), and the
    states' descriptions are gathered from those layouts. A tuple of tuples (immutable) whose sets read no
    reference placement is described once: the description is kept with the tuple itself and found again by its
    identity."""
    cache = _BATCH_LAYOUTS.get(model)
    found = None if cache is None else cache.get(id(contacts))
    if found is not None and found[0] is contacts:
        return found[1:]
    if not len(contacts) or isinstance(contacts[0], Contact):
        given = [_set_key(contacts, None)]
        index = np.zeros(count, dtype=np.intp)
    else:
        if len(contacts) != count:
            raise InputError(f"contacts: {len(contacts)} contact sets for {count} states", "contacts")
        given, order, seen, by_object = [], [], {}, {}
        for k, s in enumerate(contacts):
            j = by_object.get(id(s))  # a gait often gives the same sequence object to many states
            if j is None:
                key = _set_key(s, k)
                j = seen.get(key)
                if j is None:
                    j = seen[key] = len(given)
                    given.append(key)
                by_object[id(s)] = j
            order.append(j)
        index = np.array(order, dtype=np.intp)
    layouts = [_set_layout(model, key) for key in given]
    width = max([1] + [len(ci) for ci, _, _ in layouts])
    layout_i = np.zeros((len(layouts), width, CI_COLS), dtype=np.int64)
    layout_f = np.zeros((len(layouts), width, CF_COLS))
    for k, (ci, cf, _) in enumerate(layouts):
        layout_i[k, :len(ci)] = ci
        layout_f[k, :len(cf)] = cf
    description = (layout_i[index], layout_f[index], max(r for _, _, r in layouts) if count else 0, given, index)
    fixed = type(contacts) is tuple and all(type(s) is tuple for s in contacts) \
        and not any(c.baumgarte[0] > 0.0 for key in given for c in key)
    if fixed:
        if cache is None:
            cache = _BATCH_LAYOUTS.setdefault(model, {})
        if len(cache) >= _CACHE_SIZE:
            del cache[next(iter(cache))]
        cache[id(contacts)] = (contacts,) + description
    return description


def linearize_contacts_batch(model: Model, Q, V, TAU, dt, contacts, force_derivatives: bool = False, out=None):
    """linearize_contacts at K states, one contact set per state.

    Args:
        contacts: K sequences of :class:`Contact` (one per state; they may differ: a gait), or one sequence
            for all states.
        force_derivatives: Also return the derivatives of each state's forces.
        out: The arrays to write the results into (a controller's buffers), as they are returned: (A, B, X_next,
            forces), then (dforces_dx, dforces_du) with ``force_derivatives``; the forces' arrays may have more
            rows than m_max (padded with zeros too). See :func:`rbd_deriv.core.batch.run_batch`.

    Returns:
        (A (K, 2nv, 2nv), B (K, 2nv, nv), X_next (K, nq + nv), forces (K, m_max)): each state's forces first,
        padded with zeros to the largest number of force rows of a state. With ``force_derivatives``, two more:
        dforces_dx (K, m_max, 2nv) = [dforces/dq, dforces/dv] (q in the tangent space) and dforces_du
        (K, m_max, nv) = dforces/dtau, zero in the padding rows.
    """
    check_model(model)
    dt = check_time_step(dt)
    try:
        count = len(Q)
    except TypeError:
        raise InputError("Q: expected K configurations", "Q") from None
    CI, CF, rows, distinct, index = _batch_layout(model, contacts, count)
    width = CI.shape[1]
    nv = model.nv
    derivative_rows = rows if force_derivatives else 0
    if out is not None and not force_derivatives:
        out = tuple(out) + (np.zeros((count, 0, 2 * nv)), np.zeros((count, 0, nv)))
    outputs = run_batch(
        CONTACT, model, Q, V, TAU, None, CI, CF, dt, MODE_LINEARIZE_FORCES if force_derivatives else MODE_LINEARIZE,
        workspace_size(nv, 6 * width),
        shapes={"forces": (rows,), "dforces_dx": (derivative_rows, 2 * nv), "dforces_du": (derivative_rows, nv)},
        explain=lambda k, code, names: _error(CONTACT, model, code, distinct[index[k]], names), out=out)
    return tuple(outputs) if force_derivatives else tuple(outputs[:4])


def linearize(model: Model, data: Data, q, v, tau, dt, fext=None, contacts=None):
    """Linearize one semi-implicit Euler step x+ = f(x, tau) of duration dt, free or under contacts.

    Args:
        q, v, tau, dt, fext: As :func:`rbd_deriv.core.linearization.linearize` takes them.
        contacts: A sequence of :class:`Contact`: the step runs the contact dynamics (:func:`contact_dynamics`)
            instead of ABA (:func:`linearize_contacts`); the forces of the step are then
            ``contact_forces(model, data, contacts)``. None: :func:`rbd_deriv.core.linearization.linearize`.

    Returns:
        (A, B): views data.A (2nv, 2nv) and data.B (2nv, nv), in the tangent space of x = (q, v).
        data.x_next (nq + nv,) holds x+ = (q+, v+).
    """
    if contacts is None:
        return linearization.linearize(model, data, q, v, tau, dt, fext)
    return linearize_contacts(model, data, contacts, q, v, tau, dt, fext)


def linearize_batch(model: Model, Q, V, TAU, dt, contacts=None, force_derivatives: bool = False, out=None):
    """linearize at K states with time step dt [s] -> (A (K, 2nv, 2nv), B (K, 2nv, nv), X_next (K, nq + nv)).

    With ``contacts`` (K sequences of :class:`Contact`, one per state, or one for all): the contact step at each
    state, and a fourth result, the forces (K, m_max) padded with zeros (m_max: the most force rows of a state).
    With ``force_derivatives`` too, two more: the forces' derivatives dforces_dx (K, m_max, 2nv) (with respect
    to q in the tangent space, then v) and dforces_du (K, m_max, nv) (:func:`linearize_contacts_batch`).
    ``out``: arrays to write the results into, as they are returned (:func:`linearize_contacts_batch`)."""
    if contacts is not None:
        return linearize_contacts_batch(model, Q, V, TAU, dt, contacts, force_derivatives, out)
    if force_derivatives:
        raise InputError("force_derivatives: there are forces only with contacts", "force_derivatives")
    return linearization.linearize_batch(model, Q, V, TAU, dt, out)
