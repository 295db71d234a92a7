"""BLAS for the Riccati kernels: one thread for the process, the level-3 routines numba does not
expose, and the triangular solve.

**Threads.** SciPy's BLAS, which the Riccati pass calls (numba's ``np.dot`` and the routines below), and
NumPy's, which the costs' batched products call, split a product over every core; on shared cores that costs
several times the product (figures in docs/mpc.md). A controller process holds them to one thread with
:func:`rbd_deriv.threads.single_threaded_blas`, as the MPC node and the benchmarks do.

**Routines.** numba's ``np.dot`` is dgemm on whole contiguous arrays, without accumulation. The
kernels also need a product accumulated into its output, on blocks of a larger matrix (rows
strided), the symmetric rank-k update (dsyrk: half the work of the product it replaces) and the
triangular solve. :func:`gemm` and :func:`syrk_lower` call SciPy's Fortran BLAS
(``scipy.linalg.cython_blas``, the library numba's ``np.dot`` uses) on row-major arrays whose columns
are contiguous; their addresses are registered with LLVM under ``rbd_deriv_<routine>`` when this module
is imported, so compiled kernels name them and load from the kernel cache like any other.
:func:`solve_lower` is a compiled substitution along the rows of its right-hand side: at the Riccati
pass's sizes dtrsm's call took more than the solve (solo12's L of 12 x 12 and 36 right-hand sides, the two
solves of a knot: 1.5 us through dtrsm, 0.85 us here, each with a copy of X; talos's 44 x 44 and 100: 18.8
and 18.9 us).
"""

from __future__ import annotations

import llvmlite.binding as llvm_binding
import numba as nb
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import get_cython_function_address, intrinsic

from rbd_deriv.core.cholesky import substitute_lower
from rbd_deriv.core.constants import JIT_OPTIONS_ALLOCATING, UINT


# ------------------------------------------------------------------------------ level-3 routines
for _routine in ("dgemm", "dsyrk"):
    llvm_binding.add_symbol(f"rbd_deriv_{_routine}",
                            get_cython_function_address("scipy.linalg.cython_blas", _routine))

_DOUBLE = ir.DoubleType()


def _fortran_call(context, builder, signature, args, routine, kinds):
    """Call the Fortran ``routine`` with every argument by reference: ``kinds`` says, per argument,
    c (a character code), i (an integer), d (a float) or a (an array: its data pointer)."""
    values = []
    for kind, value, value_type in zip(kinds, args, signature.args):
        if kind == "a":
            data = context.make_array(value_type)(context, builder, value).data
            values.append(builder.bitcast(data, _DOUBLE.as_pointer()))
            continue
        if kind == "d":
            value = context.cast(builder, value, value_type, types.float64)
        else:
            value = builder.trunc(value, ir.IntType(8 if kind == "c" else 32))
        slot = cgutils.alloca_once(builder, value.type)
        builder.store(value, slot)
        values.append(slot)
    function_type = ir.FunctionType(ir.VoidType(), [value.type for value in values])
    function = cgutils.get_or_insert_function(builder.module, function_type, f"rbd_deriv_{routine}")
    builder.call(function, values)
    return context.get_dummy_value()


@intrinsic
def _dgemm(typingctx, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    def codegen(context, builder, signature, args):
        return _fortran_call(context, builder, signature, args, "dgemm", "cciiidaiaidai")
    return types.void(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), codegen


@intrinsic
def _dsyrk(typingctx, uplo, trans, n, k, alpha, a, lda, beta, c, ldc):
    def codegen(context, builder, signature, args):
        return _fortran_call(context, builder, signature, args, "dsyrk", "cciidaidai")
    return types.void(uplo, trans, n, k, alpha, a, lda, beta, c, ldc), codegen


@nb.njit(**JIT_OPTIONS_ALLOCATING)
def _leading(a):
    """Row stride of a row-major array in elements (BLAS's leading dimension of its transpose)."""
    return max(1, a.strides[0] // a.itemsize)


_NO = ord("N")
_YES = ord("T")


@nb.njit(**JIT_OPTIONS_ALLOCATING)
def gemm(alpha, A, transpose_a, B, transpose_b, beta, C):
    """C = alpha op(A) op(B) + beta C (dgemm), op(X) = X.T if transpose_x else X.

    Row-major float64 arrays with contiguous columns (rows may be strided: blocks of a larger
    matrix); shapes as the product needs, C (m, n). With beta = 0, C's entries are not read.
    """
    m, n = C.shape
    k = A.shape[0] if transpose_a else A.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        for i in range(m):
            for j in range(n):
                C[i, j] = beta * C[i, j] if beta != 0.0 else 0.0
        return
    # A row-major C is the column-major C^T = op(B)^T op(A)^T.
    _dgemm(_YES if transpose_b else _NO, _YES if transpose_a else _NO, n, m, k, alpha, B,
           _leading(B), A, _leading(A), beta, C, _leading(C))


@nb.njit(**JIT_OPTIONS_ALLOCATING)
def syrk_lower(alpha, A, transpose, beta, C):
    """Lower triangle of C = alpha X X^T + beta C (dsyrk), X = A.T if transpose else A.

    C (n, n) and A as for :func:`gemm`; the strict upper triangle of C is neither read nor written.
    """
    n = C.shape[0]
    k = A.shape[0] if transpose else A.shape[1]
    if n == 0:
        return
    if k == 0:
        for i in range(n):
            for j in range(i + 1):
                C[i, j] = beta * C[i, j] if beta != 0.0 else 0.0
        return
    # C's lower triangle is the upper triangle of the column-major C^T; A^T A is, column-major,
    # A_f A_f^T ("N") with A_f = A^T, and A A^T is A_f^T A_f ("T").
    _dsyrk(ord("U"), _NO if transpose else _YES, n, k, alpha, A, _leading(A), beta, C, _leading(C))


@nb.njit(**JIT_OPTIONS_ALLOCATING)
def solve_lower(L, transpose, alpha, X):
    """X = alpha L^-1 X, or alpha L^-T X if transpose, in place, by substitution
    (:func:`rbd_deriv.core.cholesky.substitute_lower`).

    L (m, m) lower triangular (its strict upper triangle is not read), X (m, r) with contiguous columns
    (rows may be strided).
    """
    m, r = X.shape
    if alpha != 1.0:
        for i in range(m):
            Xi = X[i]
            for col in range(UINT(0), UINT(r)):
                Xi[col] *= alpha
    substitute_lower(L, m, X, transpose)
