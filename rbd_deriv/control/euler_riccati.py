"""Numba kernels of the Riccati recursion on the semi-implicit Euler step, with dense stage Hessians.

Around a nominal trajectory :math:`(\\bar x, \\bar u)` the optimal control problem becomes the
linear-quadratic problem in the deviations :math:`\\delta x_k` (tangent space, ndx entries) and
:math:`\\delta u_k` (nu entries)

.. math::

    \\min \\sum_{k<N} \\tfrac12 \\begin{bmatrix}\\delta x_k\\\\ \\delta u_k\\end{bmatrix}^T
    \\begin{bmatrix}L_{xx} & L_{ux}^T\\\\ L_{ux} & L_{uu}\\end{bmatrix}_k
    \\begin{bmatrix}\\delta x_k\\\\ \\delta u_k\\end{bmatrix} + L_{x,k}^T \\delta x_k
    + L_{u,k}^T \\delta u_k \\;+\\; \\tfrac12 \\delta x_N^T L_{xx,N} \\delta x_N + L_{x,N}^T \\delta x_N

    \\delta x_{k+1} = A_k \\delta x_k + B_k \\delta u_k + d_k, \\quad \\delta x_0 = 0, \\quad
    u_{lo} \\le \\bar u_k + \\delta u_k \\le u_{hi},

with dense stage Hessians (Gauss-Newton products of residual Jacobians) and the gaps
:math:`d_k` of multiple shooting (Crocoddyl's FDDP, Mastalli et al., ICRA 2020). The backward pass
is the discrete Riccati recursion

.. math::

    Q_{xx} = L_{xx} + A^T P A, \\; Q_{ux} = L_{ux} + B^T P A, \\; Q_{uu} = L_{uu} + B^T P B, \\;
    Q_x = L_x + A^T (p + P d), \\; Q_u = L_u + B^T (p + P d),

with, at every stage, the torque box handled by a projected-Newton QP on
:math:`(Q_{uu}, Q_u)` (Bertsekas 1982; Tassa, Mansard and Todorov, ICRA 2014, Crocoddyl's
BoxDDP): feedforward :math:`k`, and a feedback :math:`K_F = -Q_{uu,FF}^{-1} Q_{ux,F}` on the free
controls F only. The value function follows as :math:`P = Q_{xx} + Q_{ux,F}^T K_F`,
:math:`p = Q_x + K^T (Q_{uu} k + Q_u) + Q_{ux}^T k`. The forward pass rolls the affine model out
with the feedback law, controls clamped to the box.

The matrix products are level-3 BLAS calls (:mod:`rbd_deriv.control.blas`: dgemm accumulating
into its output and reading blocks in place, the symmetric rank-k update dsyrk; its triangular solve is a
compiled substitution, faster than dtrsm at these sizes); matrix-vector products go to BLAS through ``np.dot`` once they are large enough to be worth
a call (``SMALL_PRODUCT`` multiply-adds), and everything of size nu^2 or less stays in plain loops.
All kernels take plain contiguous float64 arrays and write into preallocated outputs owned by
:mod:`rbd_deriv.control.solver` (the fixed-base MPC's linearizations have the same structure with an
empty free-flyer block). The stage box QP and the warm start are
:mod:`rbd_deriv.control.riccati`'s.
"""

from __future__ import annotations

from numba import njit
import numpy as np

from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING
from rbd_deriv.control.constants import (REGULARIZATION_ATTEMPTS, REGULARIZATION_GROWTH,
                                         REGULARIZATION_START, SMALL_PRODUCT)
from rbd_deriv.control.blas import gemm, solve_lower, syrk_lower
from rbd_deriv.control.riccati import STATUS_NOT_CONVEX, STATUS_NOT_FINITE, STATUS_OK, box_qp

__all__ = ["STATUS_OK", "STATUS_NOT_CONVEX", "STATUS_NOT_FINITE", "all_finite", "flat_size", "backward_pass",
           "forward_pass", "is_euler_step"]


def flat_size(nx: int, nu: int) -> int:
    """Length of the ``flat`` workspace of :func:`backward_pass` for ndx = nx and nu controls."""
    nv = nx // 2
    return nv * nu + nu * nx + nu * nu + 2 * nu * nx


@njit(**JIT_OPTIONS)
def is_euler_step(A, B, dt, tolerance):
    """True if (A, B) is a semi-implicit Euler step of a vector space, the structure
    :func:`backward_pass` reads with no free-flyer block.

    With v+ = v + dt a and q+ = q + dt v+, the position rows are A_q = [I, 0] + dt A_v and
    B_q = dt B_v (A_v, B_v the velocity rows); they must hold to ``tolerance`` times the largest
    entry of A and B (or 1). A: (nx, nx) with nx = 2 nv, B: (nx, nu), dt: step [s]. NaN fails.
    """
    nv = A.shape[0] // 2
    scale = 1.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            scale = max(scale, abs(A[i, j]))
        for j in range(B.shape[1]):
            scale = max(scale, abs(B[i, j]))
    bound = tolerance * scale
    for i in range(nv):
        for j in range(2 * nv):
            expected = dt * A[nv + i, j] + (1.0 if i == j else 0.0)
            if not abs(A[i, j] - expected) <= bound:
                return False
        for j in range(B.shape[1]):
            if not abs(B[i, j] - dt * B[nv + i, j]) <= bound:
                return False
    return True


@njit(**JIT_OPTIONS_ALLOCATING)
def _block(flat, offset, rows, cols):
    """The (rows, cols) C-contiguous view of ``flat`` at ``offset``, and the offset just after it."""
    end = offset + rows * cols
    return flat[offset:end].reshape((rows, cols)), end


@njit(**JIT_OPTIONS_ALLOCATING)
def _mv(A, x, out):
    """out = A @ x: BLAS for products worth its call, plain loops for small ones."""
    n, m = A.shape
    if n * m > SMALL_PRODUCT:
        np.dot(A, x, out)
        return
    for i in range(n):
        s = 0.0
        for p in range(m):
            s += A[i, p] * x[p]
        out[i] = s


@njit(**JIT_OPTIONS_ALLOCATING)
def _mv_transposed(A, x, out):
    """out (m,) = A^T x for A (n, m) and x (n,), as the combination sum_p x[p] A[p] of A's rows (contiguous: the
    loop over a row vectorizes, where a dot product down a column of A would stride)."""
    n, m = A.shape
    for i in range(m):
        out[i] = 0.0
    for p in range(n):
        c = x[p]
        for i in range(m):
            out[i] += c * A[p, i]


@njit(**JIT_OPTIONS_ALLOCATING)
def all_finite(a):
    """Whether every entry of the array ``a`` is finite (NaN and inf are not)."""
    for value in a.ravel():
        if not np.isfinite(value):
            return False
    return True


@njit(**JIT_OPTIONS_ALLOCATING)
def _transport_gradient(w, Jq, Jv, dt, out):
    """out = T^T w for the Euler step's T (vectors of ndx)."""
    nv = w.shape[0] // 2
    b = Jq.shape[0]
    for i in range(nv):
        out[i] = w[i]
        out[nv + i] = dt * w[i] + w[nv + i]
    for i in range(b):
        sq = 0.0
        sv = 0.0
        for r in range(b):
            sq += Jq[r, i] * w[r]
            sv += Jv[r, i] * w[r]
        out[i] = sq
        out[nv + i] = dt * sv + w[nv + i]


@njit(**JIT_OPTIONS_ALLOCATING)
def _apply_step(Jq, Jv, dt, dq, dv_next, out):
    """out = T [dq; dv+] = [Jq dq + dt Jv dv+; dv+], the tangent deviation after the Euler step.

    dv_next may be out[nv:] itself: each entry is read before its row of out is written."""
    nv = dq.shape[0]
    b = Jq.shape[0]
    for i in range(nv):
        out[i] = dq[i] + dt * dv_next[i]
        out[nv + i] = dv_next[i]
    for i in range(b):
        sq = 0.0
        sv = 0.0
        for r in range(b):
            sq += Jq[i, r] * dq[r]
            sv += Jv[i, r] * dv_next[r]
        out[i] = sq + dt * sv


@njit(**JIT_OPTIONS_ALLOCATING)
def _transport_matrix(P, Jq, Jv, dt, S, out):
    """out = T^T P T for the Euler step's T = [[Jq, dt Jv], [0, I]] (see :func:`backward_pass`).

    Jq and Jv are the identity but for their leading (b, b) block, given as Jq, Jv (b, b); S is a
    workspace like P, and out's first 2 b rows serve as one before out is written (2 b <= ndx with a free
    flyer). Costs O(ndx^2 b) instead of two dense products.
    """
    nx = P.shape[0]
    nv = nx // 2
    b = Jq.shape[0]
    if b == 0:
        # T = [[I, dt I], [0, I]]: one pass over the blocks of P.
        for i in range(nv):
            for j in range(nv):
                p11 = P[i, j]
                p12 = P[i, nv + j]
                p21 = P[nv + i, j]
                s12 = dt * p11 + p12
                s22 = dt * p21 + P[nv + i, nv + j]
                out[i, j] = p11
                out[i, nv + j] = s12
                out[nv + i, j] = dt * p11 + p21
                out[nv + i, nv + j] = dt * s12 + s22
        return
    # S = P T, column blocks [P_:q Jq, dt P_:q Jv + P_:v]. Past the first b columns of each block, copies; the first
    # b columns of each are, P being symmetric, combinations of rows of P: formed as rows (contiguous, vectorized)
    # in out's first 2 b rows, a scratch until out is written below, then written into S's columns.
    for i in range(nx):
        for j in range(nv):
            S[i, j] = P[i, j]
            S[i, nv + j] = dt * P[i, j] + P[i, nv + j]
    for j in range(b):
        for i in range(nx):
            out[j, i] = 0.0
            out[b + j, i] = P[nv + j, i]
        for r in range(b):
            cq = Jq[r, j]
            cv = dt * Jv[r, j]
            for i in range(nx):
                out[j, i] += cq * P[r, i]
                out[b + j, i] += cv * P[r, i]
    for i in range(nx):
        for j in range(b):
            S[i, j] = out[j, i]
            S[i, nv + j] = out[b + j, i]
    # out = T^T S, row blocks: [Jq^T S_q:, dt Jv^T S_q: + S_v:].
    for i in range(nv):
        for j in range(nx):
            out[i, j] = S[i, j]
            out[nv + i, j] = dt * S[i, j] + S[nv + i, j]
    for i in range(b):
        for j in range(nx):
            out[i, j] = 0.0
            out[nv + i, j] = S[nv + i, j]
        for r in range(b):
            cq = Jq[r, i]
            cv = dt * Jv[r, i]
            for j in range(nx):
                out[i, j] += cq * S[r, j]
                out[nv + i, j] += cv * S[r, j]


@njit(**JIT_OPTIONS_ALLOCATING)
def backward_pass(A, B, d, Jq, Jv, dt, Lxx, Lux, Luu, Lx, Lu, U, control_lower, control_upper,
                  K, k_ff, free, P, p, Vx, work, matrices, flat, index):
    """Box-constrained Riccati recursion from knot N down to 0.

    The dynamics are a semi-implicit Euler step (the package's linearize, with or without
    contacts): the velocity rows of A and B, :math:`\\delta v^+ = F_x \\delta x + F_u \\delta u`,
    carry the dynamics and the position rows follow from the integrator,
    :math:`\\delta x^+ = T [\\delta q; \\delta v^+]` with
    :math:`T = [[J_q, \\Delta t J_v], [0, I]]` (Jacobians of :math:`q \\oplus \\Delta t v^+`).
    With :math:`\\tilde P = T^T P T`, :math:`\\bar A = [[I, 0], [F_x]]`,
    :math:`\\bar B = [[0], [F_u]]` and :math:`E = [I, 0]`:

    .. math::

        M_x = \\tilde P \\bar A = \\tilde P_{:,v} F_x + [\\tilde P_{:,q}, 0], \\quad
        Q_{xx} = L_{xx} + E^T M_{x,q} + F_x^T M_{x,v}, \\quad
        Q_{ux} = L_{ux} + F_u^T M_{x,v}, \\quad
        Q_{uu} = L_{uu} + F_u^T \\tilde P_{vv} F_u,

    products with nv rows. Only the lower triangle of :math:`Q_{xx}` is formed (its rows q on the
    columns q, its rows v whole, so only those blocks of :math:`M_{x,q}`): 10 nv^3 multiply-adds
    for nu = nv, where dense A and B take 26 nv^3. It is formed in P itself, which the knot has read by
    then (into :math:`\tilde P` and the gradient).
    The value update, with :math:`Q_{uu,FF} = L L^T` on the free controls F and
    :math:`W = L^{-1} Q_{ux,F}` (a triangular solve), is :math:`K_F = -L^{-T} W` (another) and
    :math:`P = Q_{xx} - W^T W` (a symmetric rank-m update): 4 nv^3.

    Args:
        A: (N, ndx, ndx), B: (N, ndx, nu) Jacobians of the step (only rows nv: are read);
        d: (N, ndx) gaps.
        Jq, Jv: (N, b, b) leading blocks of the integrator's Jacobians, identity elsewhere
            (b = 6 with a free flyer at velocity index 0, b = 0 for vector spaces); dt: step [s].
        Lxx: (N+1, ndx, ndx), Lux: (N, nu, ndx), Luu: (N, nu, nu) cost Hessians;
        Lx: (N+1, ndx), Lu: (N, nu) cost gradients at the nominal.
        U: (N, nu) nominal controls (inside the box).
        control_lower, control_upper: (nu,) control box.
        K: Output feedback gains (N, nu, ndx); k_ff: output feedforward (N, nu), also the warm
            start of each stage QP on entry; free: output free masks (N, nu).
        P: (ndx, ndx), p: (ndx,): on return, the value function at knot 0.
        Vx: Output (N+1, ndx) value gradients p_k at every knot (the multipliers of the
            dynamics at the solution of the LQ problem, up to P_k dx_k).
        work: (12, max(ndx, nu)) vectors; matrices: (4, ndx, ndx) workspace;
        flat: (:func:`flat_size`,) workspace; index: int (nu,).

    Returns:
        (status, total stage-QP iterations, number of clamped controls over the horizon).
    """
    horizon = U.shape[0]
    nx = A.shape[1]
    nv = nx // 2
    nu = B.shape[2]
    P[:, :] = Lxx[horizon]
    p[:] = Lx[horizon]
    Vx[horizon] = p
    qp_iterations = 0
    clamped = 0
    Pt = matrices[0]
    Mx = matrices[1]
    S = matrices[2]
    L = matrices[3]
    vector = work[0, :nx]
    g = work[1, :nx]
    Qx = work[2, :nx]
    Qu = work[3, :nu]
    lower = work[4, :nu]
    upper = work[5, :nu]
    quu_k = work[6, :nu]
    Mu, offset = _block(flat, 0, nv, nu)
    Qux, offset = _block(flat, offset, nu, nx)
    Quu, offset = _block(flat, offset, nu, nu)
    start_free = offset
    for k in range(horizon - 1, -1, -1):
        # Rows nv: of A_k and B_k, [F_x F_u], are C-contiguous views: no copy.
        Fx = A[k, nv:]
        Fu = B[k, nv:]
        # Value at knot k+1 seen through the integrator: Pt = T^T P T, g = T^T (p + P d).
        _mv(P, d[k], vector)
        vector += p
        _transport_gradient(vector, Jq[k], Jv[k], dt, g)
        _transport_matrix(P, Jq[k], Jv[k], dt, S, Pt)
        # Mx = Pt_:v Fx + [Pt_:q, 0]: its rows v, and its rows q on the columns q (all that the
        # lower triangle of Qxx reads).
        Mx_v = Mx[nv:]
        gemm(1.0, Pt[nv:, nv:], False, Fx, False, 0.0, Mx_v)
        gemm(1.0, Pt[:nv, nv:], False, Fx[:, :nv], False, 0.0, Mx[:nv, :nv])
        for i in range(nx):
            for j in range(nv):
                Mx[i, j] += Pt[i, j]
        # Lower block rows of Qxx = Lxx + E^T Mx_q + Fx^T Mx_v, in P (read above, for the last time);
        # Qux = Lux + Fu^T Mx_v, Quu = Luu + Fu^T Pt_vv Fu.
        Qxx = P
        Lxx_k = Lxx[k]
        for i in range(nv):
            for j in range(nv):
                Qxx[i, j] = Lxx_k[i, j] + Mx[i, j]
        Qxx[nv:, :] = Lxx_k[nv:]
        gemm(1.0, Fx[:, :nv], True, Mx_v[:, :nv], False, 1.0, Qxx[:nv, :nv])
        gemm(1.0, Fx[:, nv:], True, Mx_v, False, 1.0, Qxx[nv:])
        Qux[:, :] = Lux[k]
        gemm(1.0, Fu, True, Mx_v, False, 1.0, Qux)
        gemm(1.0, Pt[nv:, nv:], False, Fu, False, 0.0, Mu)
        Quu[:, :] = Luu[k]
        gemm(1.0, Fu, True, Mu, False, 1.0, Quu)
        # Qx = E^T g_q + Fx^T g_v + Lx, Qu = Fu^T g_v + Lu.
        g_v = g[nv:]
        _mv_transposed(Fx, g_v, Qx)
        for i in range(nv):
            Qx[i] += g[i]
        Qx += Lx[k]
        _mv_transposed(Fu, g_v, Qu)
        Qu += Lu[k]
        # An overflow upstream shows here first; it is not a convexity problem.
        if not (all_finite(Qu) and all_finite(Quu)):
            return STATUS_NOT_FINITE, qp_iterations, clamped
        for i in range(nu):
            lower[i] = control_lower[i] - U[k, i]
            upper[i] = control_upper[i] - U[k, i]
        # Quu is symmetric up to round-off; the factorization reads one triangle.
        for i in range(nu):
            for j in range(i):
                s = 0.5 * (Quu[i, j] + Quu[j, i])
                Quu[i, j] = s
                Quu[j, i] = s
        iterations, m, status = box_qp(Quu, Qu, lower, upper, k_ff[k], free[k], index, L,
                                       work[8:12, :nu])
        qp_iterations += iterations
        # A nearly singular Quu (a light link behind a stiff cost) can lose its positive
        # definiteness to round-off: the smallest multiple of the identity that restores it,
        # from REGULARIZATION_START of its largest diagonal entry up, is added.
        scale = 0.0
        for i in range(nu):
            scale = max(scale, abs(Quu[i, i]))
        shift = REGULARIZATION_START * max(scale, 1.0)
        attempt = 0
        while status == STATUS_NOT_CONVEX and attempt < REGULARIZATION_ATTEMPTS:
            for i in range(nu):
                Quu[i, i] += shift
            shift *= REGULARIZATION_GROWTH
            attempt += 1
            iterations, m, status = box_qp(Quu, Qu, lower, upper, k_ff[k], free[k], index, L,
                                           work[8:12, :nu])
            qp_iterations += iterations
        if status != STATUS_OK:
            return status, qp_iterations, clamped
        clamped += nu - m
        # P from the lower triangle of Qxx (the only one computed, already in P), made symmetric below.
        # With Quu_FF = L L^T and W = L^-1 Qux_F: K_F = -L^-T W and P = Qxx - W^T W, which is
        # Qxx + Qux^T K (K^T Quu K and K^T Qux cancel for this K). Clamped rows get no feedback.
        if m == nu:
            # Every control free (index[:m] is 0, 1, ..., nu - 1): K_F is K_k.
            W, _ = _block(flat, start_free, nu, nx)
            W[:, :] = Qux
            solve_lower(L[:m, :m], False, 1.0, W)
            syrk_lower(-1.0, W, True, 1.0, P)
            K[k, :, :] = W
            solve_lower(L[:m, :m], True, -1.0, K[k])
        else:
            K[k, :, :] = 0.0
            if m > 0:
                W, used = _block(flat, start_free, m, nx)
                K_F, _ = _block(flat, used, m, nx)
                for a in range(m):
                    W[a, :] = Qux[index[a], :]
                solve_lower(L[:m, :m], False, 1.0, W)
                syrk_lower(-1.0, W, True, 1.0, P)
                K_F[:, :] = W
                solve_lower(L[:m, :m], True, -1.0, K_F)
                for a in range(m):
                    K[k, index[a], :] = K_F[a, :]
        for i in range(nx):
            for j in range(i):
                P[j, i] = P[i, j]
        # p = Qx + K^T (Quu k + Qu) + Qux^T k.
        _mv(Quu, k_ff[k], quu_k)
        quu_k += Qu
        _mv_transposed(K[k], quu_k, p)
        p += Qx
        _mv_transposed(Qux, k_ff[k], vector)
        p += vector
        Vx[k] = p
    if not all_finite(p):
        return STATUS_NOT_FINITE, qp_iterations, clamped
    return STATUS_OK, qp_iterations, clamped


@njit(**JIT_OPTIONS_ALLOCATING)
def forward_pass(A, B, d, Jq, Jv, dt, K, k_ff, U, control_lower, control_upper, DX, U_out,
                 work):
    """Roll the affine model out with u = U + k + K dx, clamped to the control box.

    Args:
        A, B, d, Jq, Jv, dt: Dynamics of the deviations (see :func:`backward_pass`).
        K, k_ff: Gains from :func:`backward_pass`.
        U: Nominal controls (N, nu).
        control_lower, control_upper: Control box (nu,).
        DX: Output deviations (N+1, ndx) in the tangent spaces of the nominal states (DX[0] = 0).
        U_out: Output controls (N, nu).
        work: Workspace (2, max(ndx, nu)).

    Returns:
        Largest control update max |U_out - U| over the horizon, or inf if not finite.
    """
    horizon = U.shape[0]
    nx = DX.shape[1]
    nv = nx // 2
    nu = U.shape[1]
    du = work[0, :nu]
    control_part = work[1, :nv]
    largest = 0.0
    DX[0, :] = 0.0
    for k in range(horizon):
        _mv(K[k], DX[k], du)
        for a in range(nu):
            s = min(max(U[k, a] + k_ff[k, a] + du[a], control_lower[a]), control_upper[a])
            U_out[k, a] = s
            du[a] = s - U[k, a]
            change = abs(du[a])
            if not change <= largest:  # NaN propagates as an infinite update
                largest = change if np.isfinite(change) else np.inf
        # dv+ = F_x dx + F_u du, written where _apply_step puts it (it reads each entry first).
        dv_next = DX[k + 1, nv:]
        _mv(A[k, nv:], DX[k], dv_next)
        _mv(B[k, nv:], du, control_part)
        dv_next += control_part
        _apply_step(Jq[k], Jv[k], dt, DX[k, :nv], dv_next, DX[k + 1])
        for i in range(nx):
            DX[k + 1, i] += d[k, i]
    return largest


def precompile_kernels() -> None:
    """Compile :func:`backward_pass` and :func:`forward_pass` into the kernel cache with the argument
    types :class:`rbd_deriv.control.solver.RiccatiSolver` passes (the package's build runs it): one pass
    of a one-joint problem on a vector space, then with a 6 x 6 integrator block; and :func:`all_finite` for every
    float vector a state may come as to :func:`rbd_deriv.control.ocp.check_state`: contiguous or strided, writable
    or read-only (a message's buffer), and for a rollout's states (N + 1, nx) (the legged MPC's step bounds), so that
    no node compiles it at its first tick."""
    for vector in (np.zeros(2), np.zeros(4)[::2]):
        all_finite(vector)
        vector.setflags(write=False)
        all_finite(vector)
    all_finite(np.zeros((2, 2)))
    for nv, block in ((1, 0), (6, 6)):
        N, nx, nu = 2, 2 * nv, nv
        A = np.tile(np.eye(nx), (N, 1, 1))
        B = np.zeros((N, nx, nu))
        B[:, nv:, :] = np.eye(nv)
        Jq = np.tile(np.eye(block), (N, 1, 1))
        Lxx = np.tile(np.eye(nx), (N + 1, 1, 1))
        Luu = np.tile(np.eye(nu), (N, 1, 1))
        K, k_ff, U = np.zeros((N, nu, nx)), np.zeros((N, nu)), np.zeros((N, nu))
        lower, upper = -np.ones(nu), np.ones(nu)
        size = max(nx, nu)
        backward_pass(A, B, np.zeros((N, nx)), Jq, Jq.copy(), 0.01, Lxx, np.zeros((N, nu, nx)), Luu,
                      np.zeros((N + 1, nx)), np.zeros((N, nu)), U, lower, upper, K, k_ff,
                      np.ones((N, nu), dtype=np.bool_), np.zeros((nx, nx)), np.zeros(nx),
                      np.zeros((N + 1, nx)), np.zeros((12, size)), np.zeros((4, nx, nx)),
                      np.zeros(flat_size(nx, nu)), np.zeros(nu, dtype=np.int64))
        forward_pass(A, B, np.zeros((N, nx)), Jq, Jq.copy(), 0.01, K, k_ff, U, lower, upper,
                     np.zeros((N + 1, nx)), np.zeros((N, nu)), np.zeros((2, size)))
