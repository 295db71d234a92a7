"""Tests of rbd_deriv.control.blas: the level-3 routines on blocks of larger arrays."""

from __future__ import annotations

import numpy as np

from rbd_deriv.control import blas


def test_level3_routines_equal_numpy_on_blocks_of_larger_arrays():
    """gemm, syrk_lower and solve_lower on row-major blocks with strided rows, as the Riccati
    kernels call them, against numpy's products and solves."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((12, 14))
    for transpose_a, transpose_b in ((False, False), (True, False), (False, True), (True, True)):
        A = big[1:6, 2:9] if not transpose_a else big[2:9, 1:6]        # op(A): 5 x 7
        B = rng.standard_normal((7, 4) if not transpose_b else (4, 7))  # op(B): 7 x 4
        C = rng.standard_normal((8, 9))
        block = C[2:7, 3:7]
        before = C.copy()
        opA = A.T if transpose_a else A
        opB = B.T if transpose_b else B
        blas.gemm(2.0, A, transpose_a, B, transpose_b, 0.5, block)
        np.testing.assert_allclose(block, 2.0 * opA @ opB + 0.5 * before[2:7, 3:7], rtol=1e-13, atol=1e-13)
        outside = np.ones(C.shape, bool)
        outside[2:7, 3:7] = False
        np.testing.assert_array_equal(C[outside], before[outside])
    for transpose in (False, True):
        A = big[:4, :6] if transpose else big[:6, :4]                   # X: 6 x 4
        X = A.T if transpose else A
        C = rng.standard_normal((6, 6))
        before = C.copy()
        blas.syrk_lower(-1.0, A, transpose, 1.0, C)
        lower = np.tril(np.ones((6, 6), bool))
        np.testing.assert_allclose(C[lower], (before - X @ X.T)[lower], rtol=1e-13, atol=1e-13)
        np.testing.assert_array_equal(C[~lower], before[~lower])
    L = np.tril(rng.standard_normal((9, 9))) + 4.0 * np.eye(9)
    block = L[2:7, 2:7]                                                  # 5 x 5, strided rows
    garbage = block.copy()
    garbage[np.triu_indices(5, 1)] = np.nan                             # never read
    for transpose in (False, True):
        X = rng.standard_normal((5, 3))
        solution = X.copy()
        blas.solve_lower(garbage, transpose, -2.0, solution)
        triangle = np.tril(block).T if transpose else np.tril(block)
        np.testing.assert_allclose(triangle @ solution, -2.0 * X, rtol=1e-12, atol=1e-12)
