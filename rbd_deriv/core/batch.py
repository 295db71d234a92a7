"""Batched evaluation: one registered kernel at K states in one call, for MPC horizons and bag replay.

A batch runs the very kernel of the single-state function (its C entry) once per state, so every state's
results are those of the single call, byte for byte. An algorithm module gets its batch function from
:func:`run_batch` and its registration alone:

    def rnea_batch(model, Q, V, A):
        return run_batch(RNEA, model, Q, V, A, None)[0]

Each input array is given with one more leading dimension, one row per state (Q (K, nq) for q (nq,)); None
stands for the zero external forces; scalars (dt) are shared by all states. The outputs are new arrays, one
row per state.

With the C extension (:mod:`rbd_deriv.core.calling`), the states are shared among the calling thread and the
extension's worker threads, ``numba.get_num_threads()`` threads in all, one state at a time, each thread
with its own workspace. The caller takes part, so a batch is never held up by a worker that is slow to
wake. Idle workers spin, then poll, then sleep (``constants.BATCH_WORKER_*``): batches that come back to back
run on all threads, and a lone batch (a controller's tick) does not pay for waking a worker. A caller held up
by a worker that other work descheduled in the middle of a state runs its next few batches alone (see
``rbd_deriv/_kernelcall.c``). The workers
live as long as the process: after a batch the process has threads, and ``os.fork()`` then warns on Python
3.12 and later (a forked child runs its batches on its own). Without the extension, a batch runs on the
calling thread.
"""

from __future__ import annotations

import bisect
import operator
import threading
import weakref
from typing import Callable, Dict, List, Optional, Sequence

import numba
import numpy as np

from rbd_deriv.core import constants
from rbd_deriv.core.calling import (
    DIRECT_CALLS,
    Registered,
    as_input_array,
    check_model,
    convert,
    parallel,
    set_worker_wait,
)
from rbd_deriv.core.layout import region_shape
from rbd_deriv.core.model import Data, Model
from rbd_deriv.exceptions import InputError

if DIRECT_CALLS:
    set_worker_wait(constants.BATCH_WORKER_SPIN, constants.BATCH_WORKER_SPIN_MAX, constants.BATCH_WORKER_POLL,
                    constants.BATCH_WORKER_STEADY, constants.BATCH_WORKER_LINGER)


# Workspaces of finished batch calls, per model and row size, for the next call: allocating (threads, size) zeros
# at every call costs page faults and zeroing out of proportion to a small robot's work. A call takes a set
# from the pool, or makes one, and gives it back when done, so concurrent calls never share one. The Data
# workspaces and a kernel's scratch workspaces (its other ``W`` arguments) are pooled alike.
_POOLS: "weakref.WeakKeyDictionary[Model, Dict[Optional[int], list]]" = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()

_POOL_SIZE = 4
"""Sets kept per model and size: more than this many calls at once allocate their own and drop them after."""


def _take_workspaces(model: Model, threads: int, size: Optional[int] = None) -> np.ndarray:
    """(threads or more, size) workspaces: the model's Data workspaces (size None), initialized, or scratch."""
    with _POOLS_LOCK:
        free = _POOLS.get(model, {}).get(size, ())
        for k, workspaces in enumerate(free):  # smallest first
            if len(workspaces) >= threads:
                return free.pop(k)
    workspaces = np.zeros((threads, model.workspace_size if size is None else size))
    if size is None:
        for ws in workspaces:
            Data.initialize(model, ws)
    return workspaces


def _give_back_workspaces(model: Model, workspaces: np.ndarray, size: Optional[int] = None) -> None:
    with _POOLS_LOCK:
        free = _POOLS.setdefault(model, {}).setdefault(size, [])
        if len(free) < _POOL_SIZE:
            bisect.insort(free, workspaces, key=len)


def _batch_name(name: str) -> str:
    """How errors name a per-state argument: in capitals (Q for the rows of q)."""
    return name.upper()


class _Plan:
    """What a batch needs from a kernel's spec, worked out at its first batch."""

    def __init__(self, registered: Registered) -> None:
        arguments = registered.arguments
        letters = "".join(a.letter for a in arguments)
        self.inputs = list(arguments[3:len(letters.rstrip("IF"))])
        self.outputs = [a.name for a in arguments[len(self.inputs) + 3:]]
        if [a.name for a in arguments[:2]] != ["mi", "mf"] or letters[2] != "W" or any(
                a.letter in "IFN" for a in self.inputs):
            raise TypeError(f"{registered.name}: a batch needs the arguments (mi, mf, data, inputs..., outputs...)")
        self.arrays = [a.letter in "ifb" for a in self.inputs]
        #: Positions among the inputs of scratch workspaces (``W`` past data): one row per thread, given by size.
        self.scratch = [k for k, a in enumerate(self.inputs) if a.letter == "W"]
        self.names = [_batch_name(a.name) if a.letter in "ifb" and a.name not in ("mi", "mf") else a.name
                      for a in arguments]


_PLANS: Dict[str, _Plan] = {}
_DTYPES = {"i": np.int64, "f": np.float64, "b": np.bool_}
"""The array type of each spec letter of an input."""
_ZERO_FORCES: "weakref.WeakKeyDictionary[Model, np.ndarray]" = weakref.WeakKeyDictionary()


def _zero_forces(model: Model) -> np.ndarray:
    """No external force at any state: one read-only (njoints, 6) zero array per model, shared by the states."""
    zero = _ZERO_FORCES.get(model)
    if zero is None:
        zero = np.zeros((model.njoints, 6))
        zero.setflags(write=False)
        _ZERO_FORCES[model] = zero
    return zero


def run_batch(registered: Registered, model: Model, *inputs, shapes: Optional[Dict[str, tuple]] = None,
              explain: Optional[Callable[[int, int, Sequence[str]], Exception]] = None,
              out: Optional[Sequence[np.ndarray]] = None) -> List[np.ndarray]:
    """Run a registered kernel at K states; return its outputs, each (K, ...).

    Args:
        registered: A kernel whose spec starts with (mi, mf, data) and ends with its outputs.
        model: The model.
        inputs: The kernel's inputs in spec order: arrays with one row per state, None for zero external
            forces, scalars shared by all states, and for a scratch workspace (a ``W`` argument past data) its
            size: each thread gets one, reused by its states and from call to call (pooled like the Data
            workspaces), so a state's intermediates stay in the cache of the core that made them.
        shapes: One state's shape of an output that is not a Data region of the same name.
        explain: The exception of state k's nonzero status, given (k, status, argument names), for errors
            that depend on the state's own arguments (a contact set's frames); default ``registered.error``.
        out: The outputs to write, in spec order, instead of new arrays (a controller's buffers, written at
            every tick): each a C-contiguous, writable float64 array of K rows and one state's number of
            dimensions (the kernel checks the rest of its shape).

    Raises:
        InputError: an input that is not an array of K rows, an ``out`` array that does not fit, or the first
            failing state's error, prefixed with "state k of K".
    """
    check_model(model)
    if not registered.compiled:
        registered.compile()
    plan = _PLANS.get(registered.name)
    if plan is None:
        plan = _PLANS[registered.name] = _Plan(registered)
    if len(inputs) != len(plan.inputs):
        raise TypeError(f"{registered.name}: {len(plan.inputs)} inputs expected, got {len(inputs)}")
    values, per_state, count, direct = [], [], None, DIRECT_CALLS
    for value, argument, array in zip(inputs, plan.inputs, plan.arrays):
        if argument.letter == "W":
            value = operator.index(value)  # the size; the scratch is taken below, once threads are known
        elif value is None and argument.name == "fext":
            value, array = _zero_forces(model), False
        elif not array:
            value = convert(value, argument)
        elif type(value) is not np.ndarray or value.dtype != _DTYPES[argument.letter] \
                or value.ndim != argument.ndim + 1:
            direct = False  # converted (or refused) below; one state's array alone would be shared by all
        elif count is None:
            count = value.shape[0]
        values.append(value)
        per_state.append(array)
    if not direct or count is None:
        count = _convert_states(values, plan.inputs, per_state)
    if out is None:
        outputs = [np.empty((count,) + _state_shape(model, name, shapes)) for name in plan.outputs]
    else:
        outputs = _given_outputs(out, count, model, plan.outputs, shapes)
    codes = np.zeros(count, dtype=np.int64)
    threads = max(1, min(numba.get_num_threads(), count))
    workspaces = _take_workspaces(model, threads)
    scratch = {k: _take_workspaces(model, threads, values[k]) for k in plan.scratch}
    for k, array in scratch.items():
        values[k] = array[:threads] if DIRECT_CALLS else array[0]
    try:
        if DIRECT_CALLS:
            try:
                failed = parallel(registered.call, count, threads, codes, model.mi, model.mf, workspaces[:threads],
                                  *values, *outputs)
            except TypeError:
                if not direct:
                    raise
                # Strided, big-endian, read-only overlapping...: converted, then the same call.
                count = _convert_states(values, plan.inputs, per_state)
                failed = parallel(registered.call, count, threads, codes, model.mi, model.mf, workspaces[:threads],
                                  *values, *outputs)
        else:  # one thread, one workspace
            arguments = [model.mi, model.mf, workspaces[0], *values, *outputs]
            rows = [False] * 3 + per_state + [True] * len(outputs)
            failed = _run_on_calling_thread(registered.call, count, codes, arguments, rows)
    finally:
        _give_back_workspaces(model, workspaces)
        for array in scratch.values():
            _give_back_workspaces(model, array, array.shape[1])
    if failed:
        k = int(np.flatnonzero(codes)[0])
        error = (registered.error(model, int(codes[k]), plan.names) if explain is None
                 else explain(k, int(codes[k]), plan.names))
        if isinstance(error, InputError):
            raise InputError(f"state {k} of {count}: {error}", error.argument) from None
        raise error
    return outputs


def _convert_states(values: list, taken: Sequence, per_state: Sequence[bool]) -> int:
    """Convert the per-state inputs in place to C-contiguous arrays of one more dimension than one state's,
    all of the same number of rows; return that number (InputError naming the first that does not fit)."""
    count = None
    for k, (argument, rows) in enumerate(zip(taken, per_state)):
        if not rows:
            continue
        name = _batch_name(argument.name)
        dtype = {"i": np.int64, "f": np.float64, "b": np.bool_}[argument.letter]
        array = as_input_array(values[k], name, argument.ndim + 1, dtype)
        if count is None:
            count = array.shape[0]
        elif array.shape[0] != count:
            raise InputError(f"{name}: {array.shape[0]} states, the other arguments have {count}", name)
        values[k] = array if array.flags.writeable else array.copy()
    return count


def _given_outputs(out: Sequence[np.ndarray], count: int, model: Model, names: Sequence[str],
                   shapes: Optional[Dict[str, tuple]]) -> List[np.ndarray]:
    """The ``out`` arrays of :func:`run_batch` as a list, after checking that each can take its output (K rows,
    one state's number of dimensions, float64, C-contiguous, writable); InputError naming the first that cannot."""
    if len(out) != len(names):
        raise InputError(f"out: {len(out)} arrays for the {len(names)} outputs {list(names)}", "out")
    for array, name in zip(out, names):
        ndim = 1 + len(_state_shape(model, name, shapes))
        if type(array) is not np.ndarray or array.dtype != np.float64 or array.ndim != ndim \
                or array.shape[0] != count or not array.flags.c_contiguous or not array.flags.writeable:
            raise InputError(f"out: {name} must be a writable C-contiguous float64 array of {count} rows and "
                             f"{ndim} dimensions", "out")
    return list(out)


def _state_shape(model: Model, name: str, shapes: Optional[Dict[str, tuple]]) -> tuple:
    if shapes and name in shapes:
        return tuple(shapes[name])
    return region_shape(name, model.njoints, model.nv, model.nq)


def _run_on_calling_thread(kernel, count: int, codes: np.ndarray, full: list, rows: Sequence[bool]) -> int:
    """The batch through numba's dispatcher, state after state (the same kernel as the single call, so the
    same results). Returns the first nonzero status, or 0."""
    failed = 0
    for k in range(count):
        codes[k] = kernel(*[x[k] if by_state else x for x, by_state in zip(full, rows)])
        failed = failed or int(codes[k])
    return failed
