"""Numba kernels of the box-constrained Riccati recursion (the solver core).

The tick problem, once linearized around a nominal trajectory :math:`(\\bar x, \\bar u)`, is the
linear-quadratic problem in the deviations :math:`\\delta x_k, \\delta u_k`

.. math::

    \\delta x_{k+1} = A_k \\delta x_k + B_k \\delta u_k + d_k, \\quad \\delta x_0 = 0, \\quad
    \\tau_{lo} \\le \\bar u_k + \\delta u_k \\le \\tau_{hi},

with the stage Hessians of the costs (Gauss-Newton). The backward pass is the discrete Riccati recursion with the gap
:math:`d_k` (multiple shooting, as in Crocoddyl's FDDP) and, at every stage, the torque box
handled by a projected-Newton QP (Bertsekas 1982; Tassa, Mansard and Todorov, ICRA 2014, the
"BoxDDP" of Crocoddyl): the feedback gain acts on the free torques only. The forward pass rolls
the affine model out with the feedback law and clamps torques to the box.

This is the dense pass: any (A, B), every product of size nx. The solver
(:class:`rbd_deriv.control.solver.RiccatiSolver`) takes it for dynamics that are not semi-implicit Euler steps
(a held linearization of another integrator) and for small arms, where it is the faster one; the structured
pass of :mod:`rbd_deriv.control.euler_riccati` serves the rest. Both share the stage box QP (:func:`box_qp`)
and the warm start (:func:`shift_plan`) defined here.

All kernels take plain contiguous float64 arrays and write into preallocated outputs; the solver owns every
buffer. The backward pass's O(nx^3) products are BLAS calls (numba's ``np.dot`` into preallocated outputs, no
allocation); the rest are loops whose inner index is contiguous.
"""

from __future__ import annotations

from numba import njit
import numpy as np

from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING
from rbd_deriv.core.cholesky import cholesky, cholesky_solve_vector
from rbd_deriv.control.constants import (BOUND_TOLERANCE, BOX_QP_ARMIJO, BOX_QP_MAX_ITERATIONS,
                                         BOX_QP_MIN_STEP, BOX_QP_TOLERANCE)

#: Status codes shared by the kernels and the Python side.
STATUS_OK = 0
STATUS_NOT_CONVEX = 1
STATUS_NOT_FINITE = 2


@njit(**JIT_OPTIONS)
def _free_set(H, g_lin, x, lower, upper, free, gradient):
    """Gradient H x + g_lin and the free set: a variable on a bound pushed outward is clamped.

    Returns the infinity norm of the gradient restricted to the free set (the projected gradient).
    """
    n = x.shape[0]
    norm = 0.0
    for i in range(n):
        s = g_lin[i]
        for j in range(n):
            s += H[i, j] * x[j]
        gradient[i] = s
        tol_low = BOUND_TOLERANCE * (1.0 + abs(lower[i]))
        tol_up = BOUND_TOLERANCE * (1.0 + abs(upper[i]))
        at_lower = x[i] <= lower[i] + tol_low and s > 0.0
        at_upper = x[i] >= upper[i] - tol_up and s < 0.0
        free[i] = not (at_lower or at_upper)
        if free[i] and abs(s) > norm:
            norm = abs(s)
    return norm


@njit(**JIT_OPTIONS)
def _factor_free_set(H, free, index, L):
    """List the free variables in index[:m] and factor H on them; returns (m, positive definite)."""
    m = 0
    for i in range(free.shape[0]):
        if free[i]:
            index[m] = i
            m += 1
    for a in range(m):
        for b in range(a + 1):
            L[a, b] = H[index[a], index[b]]
    return m, cholesky(L, m, 0.0) < 0


@njit(**JIT_OPTIONS)
def _same_free_set(free, index, m):
    """True if the free variables are exactly index[:m] (listed in increasing order)."""
    count = 0
    for i in range(free.shape[0]):
        if free[i]:
            if count >= m or index[count] != i:
                return False
            count += 1
    return count == m


@njit(**JIT_OPTIONS)
def _quadratic(H, g_lin, x):
    value = 0.0
    n = x.shape[0]
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += H[i, j] * x[j]
        value += x[i] * (0.5 * s + g_lin[i])
    return value


@njit(**JIT_OPTIONS)
def box_qp(H, g_lin, lower, upper, x, free, index, L, work):
    """Minimise 0.5 x^T H x + g_lin^T x subject to lower <= x <= upper by projected Newton.

    Args:
        H: Symmetric Hessian (n, n), positive definite on every free subset.
        g_lin: Linear term (n,).
        lower, upper: Bounds (n,), lower <= upper.
        x: Warm start on entry, solution on exit (n,).
        free: Output mask of the variables not held by a bound (n,) bool.
        index: Integer workspace (n,); on exit index[:m] lists the free variables.
        L: Workspace (n, n); on exit L[:m, :m] is the Cholesky factor of H on the free set.
        work: Workspace (4, n) at least; rows 0 to 3 are overwritten.

    Returns:
        (iterations, m, status) with m the size of the free set and status a STATUS_* code.
    """
    n = x.shape[0]
    gradient = work[0]
    step = work[1]
    trial = work[2]
    for i in range(n):
        x[i] = min(max(x[i], lower[i]), upper[i])
    value = _quadratic(H, g_lin, x)
    iterations = 0
    m = 0
    factored = False
    current = False  # whether free and gradient are those of x
    for iterations in range(1, BOX_QP_MAX_ITERATIONS + 1):
        norm = _free_set(H, g_lin, x, lower, upper, free, gradient)
        current = True
        if not np.isfinite(norm):
            return iterations, 0, STATUS_NOT_FINITE
        if norm <= BOX_QP_TOLERANCE:
            break
        m, convex = _factor_free_set(H, free, index, L)
        factored = convex
        if not convex:
            return iterations, m, STATUS_NOT_CONVEX
        # Newton step on the free variables, the clamped ones stay on their bound.
        rhs = work[3]
        for a in range(m):
            rhs[a] = -gradient[index[a]]
        cholesky_solve_vector(L, m, rhs)
        for i in range(n):
            step[i] = 0.0
        for a in range(m):
            step[index[a]] = rhs[a]
        alpha = 1.0
        improved = False
        while alpha >= BOX_QP_MIN_STEP:
            for i in range(n):
                trial[i] = min(max(x[i] + alpha * step[i], lower[i]), upper[i])
            trial_value = _quadratic(H, g_lin, trial)
            predicted = 0.0
            for i in range(n):
                predicted += gradient[i] * (trial[i] - x[i])
            if trial_value - value <= BOX_QP_ARMIJO * predicted:
                improved = True
                break
            alpha *= 0.5
        if not improved:
            break
        for i in range(n):
            x[i] = trial[i]
        value = trial_value
        current = False
    # The feedback gain needs the factor of the free set at the returned point: the last one
    # if the set has not changed since it was factored.
    if not current:
        _free_set(H, g_lin, x, lower, upper, free, gradient)
    if factored and _same_free_set(free, index, m):
        return iterations, m, STATUS_OK
    m, convex = _factor_free_set(H, free, index, L)
    return iterations, m, STATUS_OK if convex else STATUS_NOT_CONVEX


@njit(**JIT_OPTIONS_ALLOCATING)
def backward_pass(A, B, d, Lxx, Lx, Luu, Lux, Lu, U, torque_lower, torque_upper, K, k_ff, free, P, p, PA, PB, Qxx, Quu,
                  Qux, Qx, Qu, index, L, work, vector):
    """Box-constrained Riccati recursion from knot N down to 0, on dense (A, B).

    Args:
        A: (N, nx, nx), B: (N, nx, nu), d: (N, nx) affine dynamics of the deviations.
        Lxx, Lx: (N+1, nx, nx), (N+1, nx) state Hessians and gradients of the cost; Luu, Lux, Lu: (N, nu, nu),
            (N, nu, nx), (N, nu) its control Hessians, cross terms and gradients (Gauss-Newton, at the nominal).
        U: (N, nu) nominal torques (inside the box).
        torque_lower, torque_upper: (nu,) torque box.
        K: Output feedback gains (N, nu, nx); k_ff: output feedforward (N, nu), also the warm start
            of each stage QP on entry; free: output free masks (N, nu).
        P, p, PA, PB, Qxx, Quu, Qux, Qx, Qu, index, L, vector: workspaces; work: (6, nu).

    Returns:
        (status, total stage-QP iterations, number of clamped torques over the horizon).
    """
    horizon = U.shape[0]
    nx = A.shape[1]
    nu = B.shape[2]
    # Value function at the last knot.
    for i in range(nx):
        for j in range(nx):
            P[i, j] = Lxx[horizon, i, j]
        p[i] = Lx[horizon, i]
    qp_iterations = 0
    clamped = 0
    lower = work[4]
    upper = work[5]
    for k in range(horizon - 1, -1, -1):
        Ak = A[k]
        Bk = B[k]
        # vector = p + P d_k: gradient of the next value at the predicted gap.
        for i in range(nx):
            s = p[i]
            for j in range(nx):
                s += P[i, j] * d[k, j]
            vector[i] = s
        # PA = P A_k, PB = P B_k; Qxx = Lxx + A^T P A, Qux = Lux + B^T P A, Quu = Luu + B^T P B, Qx, Qu: BLAS
        # products (the O(nx^3) part of the tick).
        np.dot(P, Ak, PA)
        np.dot(P, Bk, PB)
        np.dot(Ak.T, PA, Qxx)
        np.dot(Bk.T, PA, Qux)
        np.dot(Bk.T, PB, Quu)
        np.dot(Ak.T, vector, Qx)
        np.dot(Bk.T, vector, Qu)
        for i in range(nx):
            Qx[i] += Lx[k, i]
            for j in range(nx):
                Qxx[i, j] += Lxx[k, i, j]
        for i in range(nu):
            Qu[i] += Lu[k, i]
            # A control cost with Luu > 0 keeps Quu positive definite with no regularization, which would
            # otherwise bias the plan; an indefinite Quu is reported by the stage QP.
            for j in range(nu):
                Quu[i, j] += Luu[k, i, j]
            for j in range(nx):
                Qux[i, j] += Lux[k, i, j]
        # An overflow upstream shows here first; it is not a convexity problem.
        for i in range(nu):
            if not np.isfinite(Qu[i]):
                return STATUS_NOT_FINITE, qp_iterations, clamped
            for j in range(nu):
                if not np.isfinite(Quu[i, j]):
                    return STATUS_NOT_FINITE, qp_iterations, clamped
        # Torque box in deviation coordinates.
        for i in range(nu):
            lower[i] = torque_lower[i] - U[k, i]
            upper[i] = torque_upper[i] - U[k, i]
        iterations, m, status = box_qp(Quu, Qu, lower, upper, k_ff[k], free[k], index, L, work)
        qp_iterations += iterations
        if status != STATUS_OK:
            return status, qp_iterations, clamped
        clamped += nu - m
        # K on the free rows: -Quu_FF^{-1} Qux_F; clamped rows get no feedback.
        for i in range(nu):
            for j in range(nx):
                K[k, i, j] = 0.0
        column = work[3]
        for j in range(nx):
            for a in range(m):
                column[a] = -Qux[index[a], j]
            cholesky_solve_vector(L, m, column)
            for a in range(m):
                K[k, index[a], j] = column[a]
        # Value update: P = Qxx + Qux^T K (K^T Quu K and K^T Qux cancel for this K),
        # p = Qx + K^T (Quu k + Qu) + Qux^T k.
        quu_k = work[2]
        for i in range(nu):
            s = Qu[i]
            for j in range(nu):
                s += Quu[i, j] * k_ff[k, j]
            quu_k[i] = s
        for i in range(nx):
            s = Qx[i]
            for a in range(nu):
                s += K[k, a, i] * quu_k[a] + Qux[a, i] * k_ff[k, a]
            p[i] = s
        np.dot(Qux.T, K[k], P)
        for i in range(nx):
            for j in range(nx):
                P[i, j] += Qxx[i, j]
        # Round-off breaks the symmetry of P over a long horizon if left alone.
        for i in range(nx):
            for j in range(i):
                s = 0.5 * (P[i, j] + P[j, i])
                P[i, j] = s
                P[j, i] = s
    for i in range(nx):
        if not np.isfinite(p[i]):
            return STATUS_NOT_FINITE, qp_iterations, clamped
    return STATUS_OK, qp_iterations, clamped


@njit(**JIT_OPTIONS)
def forward_pass(A, B, d, K, k_ff, X, U, torque_lower, torque_upper, X_out, U_out, dx, dx_next):
    """Roll the affine model out with u = U + k + K dx, clamped to the torque box.

    Args:
        A, B, d: Affine dynamics of the deviations (see :func:`backward_pass`).
        K, k_ff: Gains from :func:`backward_pass`.
        X, U: Nominal (N+1, nx), (N, nu); X[0] is the measured state.
        torque_lower, torque_upper: Torque box (nu,).
        X_out, U_out: Outputs (N+1, nx), (N, nu).
        dx, dx_next: Workspaces (nx,).

    Returns:
        Largest torque update max |U_out - U| over the horizon, or inf if not finite.
    """
    horizon = U.shape[0]
    nx = X.shape[1]
    nu = U.shape[1]
    largest = 0.0
    for i in range(nx):
        dx[i] = 0.0
        X_out[0, i] = X[0, i]
    for k in range(horizon):
        for a in range(nu):
            s = U[k, a] + k_ff[k, a]
            for j in range(nx):
                s += K[k, a, j] * dx[j]
            s = min(max(s, torque_lower[a]), torque_upper[a])
            U_out[k, a] = s
            change = abs(s - U[k, a])
            if not change <= largest:  # NaN propagates as an infinite update
                largest = change if np.isfinite(change) else np.inf
        for i in range(nx):
            s = d[k, i]
            for j in range(nx):
                s += A[k, i, j] * dx[j]
            for a in range(nu):
                s += B[k, i, a] * (U_out[k, a] - U[k, a])
            dx_next[i] = s
        for i in range(nx):
            dx[i] = dx_next[i]
            X_out[k + 1, i] = X[k + 1, i] + dx[i]
    return largest


@njit(**JIT_OPTIONS)
def shift_plan(X_prev, U_prev, elapsed, dt, x0, torque_lower, torque_upper, X, U):
    """Warm start: the previous plan read ``elapsed`` seconds later, linear between knots.

    Knots past the end of the previous plan hold its last value. X[0] is then replaced by the
    measured state x0 and torques are clamped to the box so that zero is a feasible update.
    """
    horizon = U_prev.shape[0]
    nx = X_prev.shape[1]
    nu = U_prev.shape[1]
    for k in range(horizon + 1):
        s = elapsed / dt + k
        if s < 0.0:
            s = 0.0
        base = int(np.floor(s))
        frac = s - base
        for i in range(nx):
            if base >= horizon:
                X[k, i] = X_prev[horizon, i]
            else:
                X[k, i] = (1.0 - frac) * X_prev[base, i] + frac * X_prev[base + 1, i]
        if k < horizon:
            for a in range(nu):
                if base >= horizon - 1:
                    value = U_prev[horizon - 1, a]
                else:
                    value = (1.0 - frac) * U_prev[base, a] + frac * U_prev[base + 1, a]
                U[k, a] = min(max(value, torque_lower[a]), torque_upper[a])
    for i in range(nx):
        X[0, i] = x0[i]
