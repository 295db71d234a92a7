r"""The Cholesky factorization of a small dense symmetric matrix, in place, and its solve: the package's one.

Two users: the Delassus matrix of the contacts (:mod:`rbd_deriv.core.contact`, m x m with m the contact rows,
where a small pivot means the contact Jacobian has lost rank) and the stage QPs of the Riccati passes
(:mod:`rbd_deriv.control.riccati`, the free controls' Hessian, where a pivot <= 0 means it is not convex).

Row-oriented, :math:`G = C C^T` with

.. math::

    C_{rc} = \Big(G_{rc} - \sum_{k<c} C_{rk} C_{ck}\Big) / C_{cc}, \qquad
    C_{rr} = \sqrt{G_{rr} - \sum_{k<r} C_{rk}^2},

written over G's lower triangle; the solve is the forward then backward substitution, a row update over the
right-hand side's columns at a time (:func:`substitute_lower`, which the Riccati passes' triangular solves call
too; :func:`cholesky_solve`), or on one vector (:func:`cholesky_solve_vector`, the
stage QPs' Newton steps and gain columns, a few entries each, many times per pass).
"""

from __future__ import annotations

import math

from numba import njit

from rbd_deriv.core.constants import JIT_OPTIONS, UINT


@njit(**JIT_OPTIONS)
def cholesky(G, m, tolerance):
    """G[:m, :m] = C C^T in place (C in the lower triangle; G's lower triangle is read). Returns -1, or the
    first row whose pivot is not above ``tolerance`` times its diagonal entry (0: not positive definite; a
    relative tolerance: G loses rank there); NaN fails it."""
    for r in range(m):
        for c in range(r + 1):
            s = G[r, c]
            for k in range(c):
                s -= G[r, k] * G[c, k]
            if r == c:
                if not s > tolerance * G[r, r]:
                    return r
                G[r, r] = math.sqrt(s)
            else:
                G[r, c] = s / G[c, c]
    return -1


@njit(**JIT_OPTIONS)
def substitute_lower(C, m, X, transpose):
    """X[:m] (m, c) <- C^-1 X[:m], or C^-T X[:m] if transpose, in place, C[:m, :m] lower triangular (its strict
    upper triangle is not read): forward substitution X_r = (X_r - sum_{k<r} C_rk X_k) / C_rr, or backward
    X_r = (X_r - sum_{k>r} C_kr X_k) / C_rr, each a row update over the columns (rows of X may be strided)."""
    c = X.shape[1]
    for step in range(m):
        r = m - 1 - step if transpose else step
        first, end = (r + 1, m) if transpose else (0, r)
        Xr = X[r]
        for k in range(first, end):
            g = C[k, r] if transpose else C[r, k]
            Xk = X[k]
            for col in range(UINT(0), UINT(c)):
                Xr[col] -= g * Xk[col]
        d = 1.0 / C[r, r]
        for col in range(UINT(0), UINT(c)):
            Xr[col] *= d


@njit(**JIT_OPTIONS)
def cholesky_solve(G, m, X):
    """X (m, c) <- G^-1 X for G = C C^T factored by :func:`cholesky`: C^-T C^-1 X."""
    substitute_lower(G, m, X, False)
    substitute_lower(G, m, X, True)


@njit(**JIT_OPTIONS)
def cholesky_solve_vector(G, m, b):
    """b (m or more,) <- G^-1 b on its first m entries, for G = C C^T factored by :func:`cholesky`."""
    for r in range(m):
        s = b[r]
        for k in range(r):
            s -= G[r, k] * b[k]
        b[r] = s / G[r, r]
    for r in range(m - 1, -1, -1):
        s = b[r]
        for k in range(r + 1, m):
            s -= G[k, r] * b[k]
        b[r] = s / G[r, r]
