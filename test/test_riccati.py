"""Tests of rbd_deriv.control.riccati's stage box QP (the fixed-base pass itself is tested through the
controller in test_mpc.py, against the dense KKT system).

Oracles: numpy's Cholesky factor of the Hessian on the free set, and the projected-gradient optimality
conditions of the box QP (zero gradient on the free variables, gradient pointing outward on the clamped
ones).
"""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.control import riccati
from rbd_deriv.testing import assert_close


def solve(H, g, lower, upper, x):
    n = g.size
    free, index, L = np.zeros(n, np.bool_), np.zeros(n, np.int64), np.zeros((n, n))
    iterations, m, status = riccati.box_qp(H, g, lower, upper, x, free, index, L, np.zeros((4, n)))
    return iterations, m, status, free, index, L


@pytest.mark.parametrize("seed", range(40))
def test_box_qp_returns_the_factor_of_its_final_free_set(seed):
    """Whether the last factorization is reused or redone, L is the Cholesky factor of H on the free
    set of the returned point, and that point satisfies the optimality conditions."""
    rng = np.random.default_rng(seed)
    n = 12
    M = rng.standard_normal((n, n))
    H = M @ M.T / n + 0.05 * np.eye(n)
    g = 2.0 * rng.standard_normal(n)
    lower, upper = -rng.uniform(0.05, 1.0, n), rng.uniform(0.05, 1.0, n)
    x = rng.uniform(lower, upper)
    _, m, status, free, index, L = solve(H, g, lower, upper, x)
    assert status == riccati.STATUS_OK
    chosen = index[:m]
    np.testing.assert_array_equal(chosen, np.flatnonzero(free))
    assert_close(L[:m, :m], np.linalg.cholesky(H[np.ix_(chosen, chosen)]), what="free-set factor")
    gradient = H @ x + g
    assert np.abs(gradient[free]).max(initial=0.0) < 1e-8
    clamped = ~free
    assert np.all((np.isclose(x[clamped], lower[clamped]) & (gradient[clamped] >= 0))
                  | (np.isclose(x[clamped], upper[clamped]) & (gradient[clamped] <= 0)))
    # Warm-started at its own solution the QP takes no step and still returns the factor.
    again = x.copy()
    _, m_again, status, free_again, index_again, L_again = solve(H, g, lower, upper, again)
    assert status == riccati.STATUS_OK and m_again == m
    np.testing.assert_array_equal(again, x)
    np.testing.assert_array_equal(free_again, free)
    np.testing.assert_array_equal(L_again[:m, :m], L[:m, :m])
