"""Tests of rbd_deriv.core.cholesky: the factor against its definition, the solves against numpy's, and the pivot
test that tells a lost rank (the contacts') from a matrix that is not positive definite (the stage QPs')."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.core.cholesky import cholesky, cholesky_solve, cholesky_solve_vector, substitute_lower
from rbd_deriv.testing import assert_close


@pytest.mark.parametrize("m", [1, 3, 7, 12])
def test_the_factor_and_its_solves(m):
    rng = np.random.default_rng(m)
    A = rng.standard_normal((m, m))
    G = A @ A.T + 0.1 * np.eye(m)
    work = np.zeros((m + 2, m + 2))  # the factor of the leading m x m block, in a larger array
    work[:m, :m] = G
    assert cholesky(work, m, 0.0) == -1
    C = np.tril(work[:m, :m])
    assert_close(C @ C.T, G, what="C C^T")
    X = rng.standard_normal((m, 3))
    expected = np.linalg.solve(G, X)
    cholesky_solve(work, m, X)
    assert_close(X, expected, what="matrix solve")
    b = np.r_[rng.standard_normal(m), 5.0]  # an entry past m is left alone
    expected = np.linalg.solve(G, b[:m])
    cholesky_solve_vector(work, m, b)
    assert_close(b[:m], expected, what="vector solve")
    assert b[m] == 5.0
    # Each substitution alone, on the leading rows of a right-hand side whose rows are strided.
    for transpose in (False, True):
        Y = rng.standard_normal((2 * m + 2, 3))
        rows, spare = Y[0:2 * m:2], Y[2 * m:].copy()
        expected = np.linalg.solve(C.T if transpose else C, rows)
        substitute_lower(work, m, rows, transpose)
        assert_close(Y[0:2 * m:2], expected, what=f"substitution, transpose={transpose}")
        assert np.array_equal(Y[2 * m:], spare)


def test_pivots_that_fail():
    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert cholesky(indefinite.copy(), 2, 0.0) == 1, "not positive definite at row 1"
    rank_one = np.outer([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) + 1e-14 * np.eye(3)
    assert cholesky(rank_one.copy(), 3, 0.0) == -1, "positive definite, barely"
    assert cholesky(rank_one.copy(), 3, 1e-10) == 1, "a relative tolerance sees the lost rank"
    assert cholesky(np.array([[np.nan]]), 1, 0.0) == 0, "NaN fails the pivot test"
