"""Direct calls of the compiled kernels, past numba's dispatcher.

Each public function runs one kernel. Through numba's dispatcher a call costs about 0.1-0.2 us per array
argument to type and unbox, close to 1 us for a kernel of four arrays: more than the whole forward
kinematics of a six-joint arm, and what made the small robots' calls slower than Pinocchio's. So each
kernel also has a C entry (a numba ``cfunc`` of the one signature ``int64(void **data, int64 *dims)``),
and the small C extension ``rbd_deriv._kernelcall`` calls it: it checks each argument's dtype, number of
dimensions and layout against a spec, passes its data pointer and shape, and releases the GIL for the call.

A spec has one letter per argument: ``i``, ``f``, ``b`` for int64, float64 and bool arrays, ``F`` and ``I``
for a float64 and an int64 array the kernel writes (the workspace, an output; it must be writable), each
followed by the number of dimensions, ``d`` for a float and ``n`` for an int, e.g. ``"i2f2F1f1"`` for
``(mi, mf, ws, q)``. ``N`` followed by the position j of an earlier argument is a new float64 array of that
argument's shape, which the call makes and returns: ``"i2f1f1N1"`` for integrate's ``(mi, q, v, out)`` is
called with ``(mi, q, v)`` and returns out, or the kernel's status if that is not 0. Argument j may be an int
(``n``), the length of the new array; the entry skips it, and the numba kernel does not take it.

A read-only input that overlaps a written array (a result view of the same Data given back as an input) is
refused, so that the wrappers copy it. In the cfunc, :func:`arg_int2`, :func:`arg_float1`... rebuild argument
k as an array, :func:`arg_double` a float and :func:`arg_int` an int.

Batches: ``parallel(kernel, count, threads, *arguments)`` (from the extension) runs a kernel over ``count``
independent items on the calling thread and up to ``threads - 1`` worker threads; the kernel receives one
more argument, :func:`arg_items`: its workspace slot and the range of items to do. See rbd_deriv.core.batch.

Where the extension is not built (a source tree used without ``pip install``), or with the environment
variable ``RBD_DERIV_DISPATCHER=1``, :func:`entry` returns the numba kernel itself: same results, slower
calls. Both raise TypeError for arguments of the wrong type, which the wrappers catch to convert them.
"""

from __future__ import annotations

import os

import numpy as np
from numba import carray, njit, types

try:
    from rbd_deriv._kernelcall import Kernel, parallel, set_worker_wait, worker_count
except ImportError:  # not built: the numba dispatcher serves
    Kernel = parallel = set_worker_wait = worker_count = None

__all__ = [
    "DIRECT_CALLS", "ENTRY_OPTIONS", "ENTRY_SIG", "STATUS_INTERNAL", "arg_bool1", "arg_double", "arg_float1",
    "arg_float2", "arg_int", "arg_int1", "arg_int2", "arg_items", "direct_calls",
    "dynamics_arrays", "entry", "parallel", "position_arrays", "set_worker_wait",
    "worker_count",
]

ENTRY_SIG = types.int64(types.CPointer(types.voidptr), types.CPointer(types.int64))
"""The C signature of every kernel entry: int64 kernel(void **data, int64 *dims)."""

ENTRY_OPTIONS = dict(cache=True, nogil=True)

STATUS_INTERNAL = 7_000_000
"""Status of a C entry whose kernel raised (numba would otherwise report a cfunc's exception as status 0).
The kernels check their inputs and return statuses; this is for their internal guards (a workspace view out
of bounds, a batch's slot or rows that do not fit its arrays)."""


DIRECT_CALLS = Kernel is not None and os.environ.get("RBD_DERIV_DISPATCHER", "") in ("", "0")
"""Decided once, at import: the kernels' callables are built then."""


def direct_calls() -> bool:
    """True when kernels are called through the C extension (built, and not disabled at import)."""
    return DIRECT_CALLS


def entry(kernel, c_entry, spec: str):
    """The callable a public function runs: ``Kernel(c_entry.address, spec)``, or ``kernel`` (the numba
    dispatcher) when direct calls are off. Both take the same arguments and return the kernel's status.

    A spec with ``N<j>`` (a new array shaped like argument j, see the module's docstring): the callable takes
    the arguments without it and returns the new array when the kernel returns 0, the status otherwise."""
    if DIRECT_CALLS:
        return Kernel(c_entry.address, spec)
    if "N" not in spec:
        return kernel
    letters = [letter for letter in spec if letter.isalpha()]
    at = letters.index("N")
    like = int(spec[spec.index("N") + 1])
    if letters[like] == "n":  # a length for the extension only: the kernel does not take it

        def returning_new(*arguments):
            new = np.empty(arguments[like])
            status = kernel(*arguments[:like], *arguments[like + 1:at], new, *arguments[at:])
            return new if status == 0 else status

    else:

        def returning_new(*arguments):
            try:
                new = np.empty(np.shape(arguments[like]))
            except ValueError as err:  # a ragged list: refused like any argument of the wrong type
                raise TypeError(f"argument {like}: {err}") from err
            status = kernel(*arguments[:at], new, *arguments[at:])
            return new if status == 0 else status

    return returning_new


@njit(inline="always")
def arg_int2(data, dims, k):
    """Argument k as an int64 (d0, d1) array."""
    return carray(data[k], (dims[3 * k], dims[3 * k + 1]), np.int64)


@njit(inline="always")
def arg_int1(data, dims, k):
    """Argument k as an int64 (d0,) array."""
    return carray(data[k], (dims[3 * k],), np.int64)


@njit(inline="always")
def arg_float1(data, dims, k):
    """Argument k as a float64 (d0,) array."""
    return carray(data[k], (dims[3 * k],), np.float64)


@njit(inline="always")
def arg_float2(data, dims, k):
    """Argument k as a float64 (d0, d1) array."""
    return carray(data[k], (dims[3 * k], dims[3 * k + 1]), np.float64)


@njit(inline="always")
def arg_bool1(data, dims, k):
    """Argument k as a bool (d0,) array."""
    return carray(data[k], (dims[3 * k],), np.bool_)


@njit(inline="always")
def arg_double(data, dims, k):
    """Argument k, a float."""
    return carray(data[k], (1,), np.float64)[0]


@njit(inline="always")
def arg_int(data, dims, k):
    """Argument k, an int."""
    return carray(data[k], (1,), np.int64)[0]


@njit(inline="always")
def arg_items(data, dims, k):
    """The argument ``parallel`` appends after the k kernel arguments: (slot, begin, end), the workspace slot
    of the calling thread and the items [begin, end) it is to do."""
    items = carray(data[k], (3,), np.int64)
    return items[0], items[1], items[2]


@njit(inline="always")
def position_arrays(data, dims):
    """The arguments (mi, mf, ws, q) of the kernels that take a configuration only."""
    return arg_int2(data, dims, 0), arg_float2(data, dims, 1), arg_float1(data, dims, 2), arg_float1(data, dims, 3)


@njit(inline="always")
def dynamics_arrays(data, dims):
    """The arguments (mi, mf, ws, q, v, a or tau, fext) of the dynamics kernels."""
    return (arg_int2(data, dims, 0), arg_float2(data, dims, 1), arg_float1(data, dims, 2), arg_float1(data, dims, 3),
            arg_float1(data, dims, 4), arg_float1(data, dims, 5), arg_float2(data, dims, 6))
