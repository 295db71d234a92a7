"""Compiled kernels of the costs: each residual family's value and Gauss-Newton products over every knot
of the horizon in one call, and the batched state-space operations around them.

The costs of :mod:`rbd_deriv.control.cost` are small products repeated at every knot (a 3 x nv frame
Jacobian, a 6 x 6 free-flyer block, a 3 x 3 friction-cone block, the force Jacobians' rank-m update):
done with numpy, one call per product and per cost, the calls, not the arithmetic, take the time. Each
kernel here loops over the knots and writes into the solver's buffers in place; the Python classes
(:mod:`rbd_deriv.control.residuals`, :mod:`~rbd_deriv.control.task_residuals`,
:mod:`~rbd_deriv.control.contact_force`, :mod:`~rbd_deriv.control.state_space`) check their inputs and
hand these kernels plain arrays. Their products are those of the residuals' docstrings:

.. math::

    L_x \\mathrel{+}= R_x^T a', \\qquad L_{xx} \\mathrel{+}= R_x^T \\mathrm{diag}(a'') R_x

with the structure of each Jacobian used: the identity but the free-flyer block for a state residual
(the block is the inverse of the right Jacobian of SE(3) at the residual, Barfoot, "State Estimation for
Robotics", sec. 7.1.5), the q columns of a frame's or the center of mass's Jacobian, the 3 force rows of
a contact for the friction pyramid, and for the force costs the fold
:math:`L_{xx} \\mathrel{+}= F_x^T L_{ff} F_x` on the rows of the closed contacts only. The kinematics reuse
the core's joint placements and motion subspaces (``joint_placement``, ``motion_subspace``: its forward
pass without the inertias), frame origin and LOCAL_WORLD_ALIGNED Jacobian (``frame_origin``,
``lwa_jacobian_into``); the state space its ``difference_into`` and ``integrate_into``. The free
flyer's 6 x 6 blocks (the Jacobians of the Euler step's integration and of the difference) are written
out on 3 x 3 blocks with the core's series coefficients, without allocation: the Riccati pass and the
state costs need them at every knot of every tick.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rbd_deriv.core.calling import check_quaternions
from rbd_deriv.core.configuration import (exp3_coefficients, q_coefficients, difference_into,
                                          integrate_into)
from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING, SMALL_ANGLE, UINT
from rbd_deriv.core.frames import product3, skew_into, frame_origin, lwa_jacobian_into
from rbd_deriv.core.kinematics import joint_placement, motion_subspace
from rbd_deriv.core.layout import MI_NJ, MI_NVTOT, MI_PARENT, R_OMI, R_S, region2, region3

#: Size of the free flyer's tangent block.
BLOCK = 6


# --- state space -------------------------------------------------------------------------------------------

@njit(**JIT_OPTIONS)
def difference_batch(mi, continuous, X0, X1, nq, out):
    """out[k] (ndx,) = X1[k] (-) X0[k] (X0 of one row: the same for every k): the core's difference on q,
    a subtraction on v. Returns -1, or the first row k of X1 (then K + k of X0) whose quaternion is not of
    unit norm (nothing written from there on)."""
    nv = out.shape[1] - (X1.shape[1] - nq)
    shared = X0.shape[0] == 1
    K = X1.shape[0]
    for k in range(K):
        k0 = 0 if shared else k
        if check_quaternions(mi, X1[k], 1) != 0:
            return k
        if check_quaternions(mi, X0[k0], 1) != 0:
            return K + k0
        difference_into(mi, continuous, X0[k0], X1[k], out[k])
        for j in range(X1.shape[1] - nq):
            out[k, nv + j] = X1[k, nq + j] - X0[k0, nq + j]
    return -1


@njit(**JIT_OPTIONS)
def integrate_batch(mi, X, DX, nq, out):
    """out[k] = X[k] (+) DX[k]: the core's integrate on q, an addition on v. Returns -1, or the first row
    of X whose quaternion is not of unit norm (nothing written from there on)."""
    nv = DX.shape[1] - (X.shape[1] - nq)
    for k in range(X.shape[0]):
        if check_quaternions(mi, X[k], 1) != 0:
            return k
        integrate_into(mi, X[k], DX[k], out[k])
        for j in range(X.shape[1] - nq):
            out[k, nq + j] = X[k, nq + j] + DX[k, nv + j]
    return -1


@njit(**JIT_OPTIONS)
def _series(a, b, W, WW, out):
    """out (3, 3) = I + a W + b W^2."""
    for r in range(3):
        for c in range(3):
            out[r, c] = (1.0 if r == c else 0.0) + a * W[r, c] + b * WW[r, c]


@njit(**JIT_OPTIONS)
def _right_jacobian_corner(xi, work, Q):
    """Q (3, 3), the upper-right block of the right Jacobian of SE(3) at xi = [nu, w] (Barfoot eq.
    7.86 at -xi): -V/2 + k1 (WV + VW - WVW) - k2 (WWV + VWW - 3 WVW) + k3 (WVWW + WWVW), with
    W = [w]x, V = [nu]x. work (8, 3, 3): W, W^2 on entry; scratch."""
    W, WW, V, WV, VW, WVW, A, B = (work[0], work[1], work[2], work[3], work[4], work[5], work[6],
                                   work[7])
    theta2 = xi[3] * xi[3] + xi[4] * xi[4] + xi[5] * xi[5]
    k1, k2, k3 = q_coefficients(theta2)
    skew_into(xi[0], xi[1], xi[2], V)
    product3(W, V, WV)
    product3(V, W, VW)
    product3(WV, W, WVW)
    product3(W, WV, A)      # W W V
    product3(VW, W, B)      # V W W
    for r in range(3):
        for c in range(3):
            Q[r, c] = (-0.5 * V[r, c] + k1 * (WV[r, c] + VW[r, c] - WVW[r, c])
                       - k2 * (A[r, c] + B[r, c] - 3.0 * WVW[r, c]))
    product3(WVW, W, A)     # W V W W
    product3(W, WVW, B)     # W W V W
    for r in range(3):
        for c in range(3):
            Q[r, c] += k3 * (A[r, c] + B[r, c])


@njit(**JIT_OPTIONS)
def _integrate_block(xi, work, Jq, Jv):
    """Jq, Jv (6, 6) = d(M exp6(xi))/dM = Ad(exp6(-xi)) = [[R^T, -R^T [t]x], [0, R^T]] and
    d(M exp6(xi))/dxi = Jr(xi) = [[Jr3, Q], [0, Jr3]], with R = exp3(w), t = V(w) nu the translation of
    exp6(xi) and Jr3 = I - b W + c W^2 (Barfoot, sec. 7.1.5). work (10, 3, 3) scratch."""
    W, WW, R, T = work[0], work[1], work[8], work[9]
    theta2 = xi[3] * xi[3] + xi[4] * xi[4] + xi[5] * xi[5]
    a, b, c = exp3_coefficients(theta2)
    skew_into(xi[3], xi[4], xi[5], W)
    product3(W, W, WW)
    _series(-b, c, W, WW, R)
    for r in range(3):
        for s in range(3):
            Jv[r, s] = Jv[3 + r, 3 + s] = R[r, s]
            Jv[3 + r, s] = 0.0
    _right_jacobian_corner(xi, work, T)
    for r in range(3):
        for s in range(3):
            Jv[r, 3 + s] = T[r, s]
    _series(b, c, W, WW, T)
    tx = T[0, 0] * xi[0] + T[0, 1] * xi[1] + T[0, 2] * xi[2]
    ty = T[1, 0] * xi[0] + T[1, 1] * xi[1] + T[1, 2] * xi[2]
    tz = T[2, 0] * xi[0] + T[2, 1] * xi[1] + T[2, 2] * xi[2]
    _series(a, b, W, WW, R)
    skew_into(tx, ty, tz, T)
    for r in range(3):
        for s in range(3):
            Jq[r, s] = Jq[3 + r, 3 + s] = R[s, r]
            Jq[3 + r, s] = 0.0
            Jq[r, 3 + s] = -(R[0, r] * T[0, s] + R[1, r] * T[1, s] + R[2, r] * T[2, s])


@njit(**JIT_OPTIONS)
def _difference_block(d, work, out):
    """out (6, 6) = Jr(d)^-1, the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) d. With
    Jr = [[A, Q], [0, A]], its inverse is [[A^-1, -A^-1 Q A^-1], [0, A^-1]], and
    A^-1 = Jr3^-1 = I + W/2 + e W^2, e = 1/t^2 - (1 + cos t) / (2 t sin t) (Barfoot eq. 7.77 at -w).
    work (10, 3, 3) scratch."""
    W, WW, Ai, Q = work[0], work[1], work[8], work[9]
    theta2 = d[3] * d[3] + d[4] * d[4] + d[5] * d[5]
    if theta2 < SMALL_ANGLE * SMALL_ANGLE:
        e = 1.0 / 12.0 + theta2 / 720.0 + theta2 * theta2 / 30240.0
    else:
        t = math.sqrt(theta2)
        e = 1.0 / theta2 - (1.0 + math.cos(t)) / (2.0 * t * math.sin(t))
    skew_into(d[3], d[4], d[5], W)
    product3(W, W, WW)
    _series(0.5, e, W, WW, Ai)
    _right_jacobian_corner(d, work, Q)
    A = work[2]
    product3(Ai, Q, A)
    product3(A, Ai, Q)
    for r in range(3):
        for c in range(3):
            out[r, c] = out[3 + r, 3 + c] = Ai[r, c]
            out[3 + r, c] = 0.0
            out[r, 3 + c] = -Q[r, c]


@njit(**JIT_OPTIONS_ALLOCATING)
def integrate_blocks(X, column, scale, Jq, Jv):
    """Jq[k], Jv[k] (6, 6) = d(M exp6(xi))/dM and d(M exp6(xi))/dxi at xi = scale X[k, column:column + 6]."""
    work = np.empty((10, 3, 3))
    xi = np.empty(BLOCK)
    for k in range(X.shape[0]):
        for j in range(BLOCK):
            xi[j] = scale * X[k, column + j]
        _integrate_block(xi, work, Jq[k], Jv[k])


@njit(**JIT_OPTIONS_ALLOCATING)
def difference_blocks(D, out):
    """out[k] (6, 6) = the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) D[k]."""
    work = np.empty((10, 3, 3))
    for k in range(D.shape[0]):
        _difference_block(D[k], work, out[k])


# --- state residual ----------------------------------------------------------------------------------------

@njit(**JIT_OPTIONS)
def _state_knot(block, r, g, h, work, J, Lx, Lxx):
    """One knot of :func:`state_gauss_newton`: r, g, h (ndx,), Lx (ndx,), Lxx (ndx, ndx)."""
    for i in range(block, r.shape[0]):
        Lx[i] += g[i]
        Lxx[i, i] += h[i]
    if block == 0:
        return
    active = False
    for i in range(BLOCK):
        if g[i] != 0.0 or h[i] != 0.0:
            active = True
    if not active:
        return
    _difference_block(r, work, J)
    for j in range(BLOCK):
        s = 0.0
        for i in range(BLOCK):
            s += J[i, j] * g[i]
        Lx[j] += s
    for a in range(BLOCK):
        for b in range(BLOCK):
            s = 0.0
            for i in range(BLOCK):
                s += J[i, a] * h[i] * J[i, b]
            Lxx[a, b] += s


@njit(**JIT_OPTIONS_ALLOCATING)
def state_gauss_newton(block, r, gradient, hessian, Lx, Lxx):
    """Gauss-Newton products of r = X (-) X_ref at K knots, gradient a' (K, ndx), Hessian diagonal a''
    (K or 1, ndx): the identity rows past the free-flyer block (``block`` = 6 or 0) add a' and a''
    directly; the block's rows J = Jr(r[:6])^-1 add J^T a' and J^T diag(a'') J, at knots where a' or a''
    is not zero there."""
    shared = hessian.shape[0] == 1
    work, J = np.empty((10, 3, 3)), np.empty((BLOCK, BLOCK))
    for k in range(r.shape[0]):
        _state_knot(block, r[k], gradient[k], hessian[0] if shared else hessian[k], work, J, Lx[k],
                    Lxx[k])


@njit(**JIT_OPTIONS_ALLOCATING)
def state_quadratic(mi, continuous, reference, X, nq, block, weights, knot_weights, r, Lx, Lxx):
    """:func:`difference_batch` into r (r = X (-) reference), then :func:`state_gauss_newton` of the
    activation 0.5 sum_i w_i r_i^2 times the knot weight (knot_weights (K,), or empty for 1): a' = w r,
    a'' = w, in one pass. Returns what :func:`difference_batch` returns."""
    bad = difference_batch(mi, continuous, reference, X, nq, r)
    if bad >= 0:
        return bad
    ndx = r.shape[1]
    work, J = np.empty((10, 3, 3)), np.empty((BLOCK, BLOCK))
    g, h = np.empty(ndx), np.empty(ndx)
    for k in range(r.shape[0]):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        for i in range(ndx):
            h[i] = factor * weights[i]
            g[i] = h[i] * r[k, i]
        _state_knot(block, r[k], g, h, work, J, Lx[k], Lxx[k])
    return -1


@njit(**JIT_OPTIONS)
def identity_quadratic(Y, reference, weights, knot_weights, gradient, hessian):
    """Gauss-Newton derivatives of 0.5 sum_i w_i r_i^2 (times the knot weight, knot_weights (K,) or empty
    for 1) of r = Y - reference (reference of 1 or K rows), a residual whose Jacobian is the identity on
    the variable it reads (controls, forces): gradient (K, nr) += w r, the diagonals of hessian
    (K, nr, nr) += w."""
    shared = reference.shape[0] == 1
    for k in range(Y.shape[0]):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        y, ref = Y[k], reference[0] if shared else reference[k]
        for i in range(Y.shape[1]):
            w = factor * weights[i]
            gradient[k, i] += w * (y[i] - ref[i])
            hessian[k, i, i] += w


# --- frame positions and the center of mass ----------------------------------------------------------------

@njit(**JIT_OPTIONS)
def _placements(mi, mf, ws, q):
    """The joint placements oMi and motion subspaces S of the core's forward pass at q into ws, without
    the body inertias, which frame positions and Jacobians do not need."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oMi = region3(mi, ws, R_OMI, nj, 4, 4)
    S = region2(mi, ws, R_S, nv, 6)
    for i in range(1, nj):
        joint_placement(mi, mf, q, i, oMi[mi[i, MI_PARENT]], oMi[i])
        motion_subspace(mi, mf, i, oMi[i], S)


@njit(**JIT_OPTIONS)
def frame_kinematics(mi, mf, ws, X, joints, placements, wanted, positions, jacobians, done):
    """For every knot k with a frame p such that wanted[k, p] and not done[k, p]: one forward pass at q_k,
    then each such frame's origin positions[k, p] (3,) in the world and the linear rows of its
    LOCAL_WORLD_ALIGNED Jacobian jacobians[k, p] (3, nv); done[k, p] set. ws: a Data workspace of the
    model (its placements are overwritten). A frame p is fixed to joint
    joints[p] at placements[p] (12,: rotation row-major, translation)."""
    K, P = wanted.shape
    for k in range(K):
        needed = False
        for p in range(P):
            if wanted[k, p] and not done[k, p]:
                needed = True
        if not needed:
            continue
        _placements(mi, mf, ws, X[k])
        for p in range(P):
            if not wanted[k, p] or done[k, p]:
                continue
            px, py, pz = frame_origin(mi, ws, joints[p], placements[p])
            positions[k, p, 0], positions[k, p, 1], positions[k, p, 2] = px, py, pz
            lwa_jacobian_into(mi, ws, joints[p], px, py, pz, 3, jacobians[k, p], 0)
            done[k, p] = True


@njit(**JIT_OPTIONS)
def _add_row(J, g, w, Lx, Lxx):
    """One residual row of Jacobian J (nv,) on the q columns: Lx[:nv] += g J, Lxx[:nv, :nv] += w J J^T."""
    nv = J.shape[0]
    if g != 0.0:
        for i in range(nv):
            Lx[i] += g * J[i]
    if w == 0.0:
        return
    for i in range(nv):
        c = w * J[i]
        if c == 0.0:
            continue
        row = Lxx[i]
        for j in range(UINT(0), UINT(nv)):
            row[j] += c * J[j]


@njit(**JIT_OPTIONS)
def position_gauss_newton(jacobians, axes, mask, gradient, hessian, Lx, Lxx):
    """Gauss-Newton products of r = p_i(q)[axes] - reference for P points (rows point-major, len(axes)
    per point) at the knots and points where mask (K, P) holds: with J the point's Jacobian rows (nv,),
    L_x[:nv] += J a' and L_xx[:nv, :nv] += a'' J J^T, row by row. hessian is (K or 1, nr)."""
    K, P = mask.shape
    width = axes.shape[0]
    shared = hessian.shape[0] == 1
    for k in range(K):
        h = hessian[0] if shared else hessian[k]
        for p in range(P):
            if not mask[k, p]:
                continue
            for a in range(width):
                row = p * width + a
                _add_row(jacobians[k, p, axes[a]], gradient[k, row], h[row], Lx[k], Lxx[k])


@njit(**JIT_OPTIONS)
def relaxed_log_barrier(r, weight, delta, gradient, hessian):
    """gradient, hessian (K, nr) = w b'(r), w b''(r) of the relaxed logarithmic barrier: -ln s for
    s >= delta, its quadratic continuation below (see :class:`~rbd_deriv.control.activation.RelaxedLogBarrier`)."""
    for k in range(r.shape[0]):
        for i in range(r.shape[1]):
            s = r[k, i]
            if s >= delta:
                gradient[k, i] = -weight / s
                hessian[k, i] = weight / (s * s)
            else:
                gradient[k, i] = weight * (s - 2.0 * delta) / (delta * delta)
                hessian[k, i] = weight / (delta * delta)


@njit(**JIT_OPTIONS)
def position_quadratic(positions, jacobians, axes, mask, reference, weights, knot_weights, Lx, Lxx):
    """:func:`position_gauss_newton` of the activation 0.5 sum_i w_i r_i^2 (times the knot weight,
    knot_weights (K,) or empty for 1) with its residual r = positions[k, p, axes] - reference (reference
    of 1 or K rows, nr = P len(axes) entries) formed on the way: a' = w r, a'' = w."""
    K, P = mask.shape
    width = axes.shape[0]
    shared = reference.shape[0] == 1
    for k in range(K):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        ref = reference[0] if shared else reference[k]
        for p in range(P):
            if not mask[k, p]:
                continue
            for a in range(width):
                row = p * width + a
                w = factor * weights[row]
                if w == 0.0:
                    continue
                _add_row(jacobians[k, p, axes[a]], w * (positions[k, p, axes[a]] - ref[row]), w,
                         Lx[k], Lxx[k])


# --- contact forces ------------------------------------------------------------------------------------

@njit(**JIT_OPTIONS)
def cone_residual(F, offsets, cones, shift, r):
    """r[k] (5 nc) = C_c f_c - shift for each contact c closed at knot k (f_c its 3 force rows from
    offsets[k, c]), 1 for an open one."""
    K, contacts = offsets.shape
    rows = cones.shape[1]
    for k in range(K):
        for c in range(contacts):
            o = offsets[k, c]
            for i in range(rows):
                if o < 0:
                    r[k, c * rows + i] = 1.0
                    continue
                C = cones[c, i]
                r[k, c * rows + i] = C[0] * F[k, o] + C[1] * F[k, o + 1] + C[2] * F[k, o + 2] - shift[i]


@njit(**JIT_OPTIONS)
def cone_force_derivatives(offsets, cones, gradient, hessian, Lf, Lff):
    """The friction pyramid's a' (K, 5 nc) and a'' (K or 1, 5 nc) turned into the force stack's
    derivatives: for each closed contact, Lf[rows] += C^T a' and Lff[rows, rows] += C^T diag(a'') C on
    its 3 force rows."""
    K, contacts = offsets.shape
    rows = cones.shape[1]
    shared = hessian.shape[0] == 1
    for k in range(K):
        h = hessian[0] if shared else hessian[k]
        for c in range(contacts):
            o = offsets[k, c]
            if o < 0:
                continue
            C = cones[c]
            for i in range(rows):
                g, w = gradient[k, c * rows + i], h[c * rows + i]
                for a in range(3):
                    Lf[k, o + a] += C[i, a] * g
                    wa = w * C[i, a]
                    for b in range(3):
                        Lff[k, o + a, o + b] += wa * C[i, b]


@njit(**JIT_OPTIONS_ALLOCATING)
def fold_force_derivatives(Fx, Fu, Lff, Lf, Lx, Lxx, Lu, Luu, Lux):
    """Force-space derivatives through the forces' Jacobians at every knot: with F = [F_x, F_u] (m, ndx
    + nu), L_x += F_x^T L_f, L_u += F_u^T L_f and the blocks of F^T L_ff F into L_xx, L_ux, L_uu.

    Only the rows r of the stack that carry something enter the products: L_f[r] or a row of L_ff not
    zero, and a row of F not zero (the rows past a knot's closed contacts carry nothing). The product is
    a rank-c update of the derivatives' rows (c the rows kept), row by row."""
    K, m, ndx = Fx.shape
    nu = Fu.shape[2]
    n = ndx + nu
    used = np.empty(m, dtype=np.int64)
    F = np.empty((m, n))
    GF = np.empty((m, n))
    for k in range(K):
        count = 0
        for r in range(m):
            carries = Lf[k, r] != 0.0
            for s in range(m):
                if Lff[k, r, s] != 0.0:
                    carries = True
            if not carries:
                continue
            moves = False
            for j in range(ndx):
                if Fx[k, r, j] != 0.0:
                    moves = True
            for j in range(nu):
                if Fu[k, r, j] != 0.0:
                    moves = True
            if moves:
                used[count] = r
                count += 1
        for a in range(count):
            r = used[a]
            F[a, :ndx] = Fx[k, r]
            F[a, ndx:] = Fu[k, r]
            gradient = Lf[k, r]
            if gradient != 0.0:
                for j in range(UINT(0), UINT(ndx)):
                    Lx[k, j] += gradient * Fx[k, r, j]
                for j in range(UINT(0), UINT(nu)):
                    Lu[k, j] += gradient * Fu[k, r, j]
        # GF = L_ff F on the kept rows.
        for a in range(count):
            GF[a, :] = 0.0
            for b in range(count):
                w = Lff[k, used[a], used[b]]
                if w != 0.0:
                    for j in range(UINT(0), UINT(n)):
                        GF[a, j] += w * F[b, j]
        # Row i of F^T GF is sum_a F[a, i] GF[a]: x rows into L_xx, u rows into L_ux and L_uu.
        for i in range(ndx):
            _add_combination(F, count, i, GF, 0, ndx, Lxx[k, i])
        for u in range(nu):
            _add_combination(F, count, ndx + u, GF, 0, ndx, Lux[k, u])
            _add_combination(F, count, ndx + u, GF, ndx, n, Luu[k, u])


@njit(**JIT_OPTIONS)
def _add_combination(F, count, i, G, start, stop, row):
    """row += sum_a F[a, i] G[a, start:stop] over the first count rows, four rows of G per pass over
    row (one load and store of row for four multiply-adds). G is taken whole and sliced row by row
    here, so that the rows are contiguous to the compiler and the inner loop vectorizes."""
    a = 0
    while a + 4 <= count:
        c0, c1, c2, c3 = F[a, i], F[a + 1, i], F[a + 2, i], F[a + 3, i]
        g0, g1 = G[a, start:stop], G[a + 1, start:stop]
        g2, g3 = G[a + 2, start:stop], G[a + 3, start:stop]
        for j in range(UINT(0), UINT(stop - start)):
            row[j] += c0 * g0[j] + c1 * g1[j] + c2 * g2[j] + c3 * g3[j]
        a += 4
    while a < count:
        c0, g0 = F[a, i], G[a, start:stop]
        for j in range(UINT(0), UINT(stop - start)):
            row[j] += c0 * g0[j]
        a += 1


@njit(**JIT_OPTIONS)
def cone_violations(forces, offsets, normals, mu, absolute_tolerance, relative_tolerance, out):
    """out[c] = max(0, |f_t| - mu f_n, -f_n) [N] of each closed contact's force f (its 3 rows from
    offsets[c]) against the cone of unit normal normals[c]; 0 for an open contact, inf for a force that is
    not finite. Returns whether every violation is at most absolute_tolerance + relative_tolerance |f|."""
    within = True
    for c in range(offsets.shape[0]):
        o = offsets[c]
        if o < 0:
            out[c] = 0.0
            continue
        nx, ny, nz = normals[c, 0], normals[c, 1], normals[c, 2]
        fx, fy, fz = forces[o], forces[o + 1], forces[o + 2]
        if not (math.isfinite(fx) and math.isfinite(fy) and math.isfinite(fz)):
            out[c] = math.inf
            within = False
            continue
        normal = fx * nx + fy * ny + fz * nz
        tx, ty, tz = fx - normal * nx, fy - normal * ny, fz - normal * nz
        out[c] = max(0.0, math.sqrt(tx * tx + ty * ty + tz * tz) - mu * normal, -normal)
        if out[c] > absolute_tolerance + relative_tolerance * math.sqrt(fx * fx + fy * fy + fz * fz):
            within = False
    return within


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the control classes pass (the
    package's build runs it): on the bundled arm with a floating base, two knots."""
    import rbd_deriv as rd
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    nq, nv = model.nq, model.nv
    ndx, K = 2 * nv, 2
    X = np.tile(np.r_[rd.neutral(model), np.zeros(nv)], (K, 1))
    D = np.zeros((K, ndx))
    difference_batch(model.mi, model.continuous, X, X, nq, D)
    integrate_batch(model.mi, X, D, nq, X.copy())
    blocks = np.zeros((2, K, BLOCK, BLOCK))
    integrate_blocks(X, nq, 0.01, blocks[0], blocks[1])
    difference_blocks(D, blocks[0])
    Lx, Lxx = np.zeros((K, ndx)), np.zeros((K, ndx, ndx))
    state_gauss_newton(BLOCK, D, D, np.ones((1, ndx)), Lx, Lxx)
    weights = np.ones(ndx)
    weights.setflags(write=False)  # as an activation keeps them
    for knot_weights in (np.zeros(0), np.ones(K)):
        state_quadratic(model.mi, model.continuous, X[:1], X, nq, BLOCK, weights, knot_weights, D,
                        Lx, Lxx)
        identity_quadratic(D, D[:1], weights, knot_weights, Lx, Lxx)
    relaxed_log_barrier(D, 1.0, 0.1, Lx, Lx.copy())
    data = model.create_data()
    frame = model.frame_names[-1]
    joint, placement = model.frames[frame]
    wanted = np.ones((K, 1), dtype=np.bool_)
    positions, jacobians = np.zeros((K, 1, 3)), np.zeros((K, 1, 3, nv))
    frame_kinematics(model.mi, model.mf, data.ws, X, np.array([joint], dtype=np.int64),
                     np.r_[placement[:3, :3].ravel(), placement[:3, 3]][None], wanted, positions,
                     jacobians, np.zeros((K, 1), dtype=np.bool_))
    position_gauss_newton(jacobians, np.arange(3), wanted, np.zeros((K, 3)), np.ones((1, 3)), Lx, Lxx)
    weights = np.ones(3)
    weights.setflags(write=False)
    for knot_weights in (np.zeros(0), np.ones(K)):
        position_quadratic(positions, jacobians, np.arange(3), wanted, np.zeros((1, 3)), weights,
                           knot_weights, Lx, Lxx)
    offsets = np.zeros((K, 1), dtype=np.int64)
    cones = np.zeros((1, 5, 3))
    F, Lf, Lff = np.zeros((K, 3)), np.zeros((K, 3)), np.zeros((K, 3, 3))
    cone_residual(F, offsets, cones, np.zeros(5), np.zeros((K, 5)))
    cone_force_derivatives(offsets, cones, np.zeros((K, 5)), np.ones((1, 5)), Lf, Lff)
    nu = nv - BLOCK
    fold_force_derivatives(np.zeros((K, 3, ndx)), np.zeros((K, 3, nu)), Lff, Lf, Lx, Lxx,
                           np.zeros((K, nu)), np.zeros((K, nu, nu)), np.zeros((K, nu, ndx)))
    cone_violations(F[0], offsets[0], np.array([[0.0, 0.0, 1.0]]), 0.5, 0.0, 0.0, np.zeros(1))
