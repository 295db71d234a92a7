"""Batched evaluation: the dynamics, their derivatives or the linearization at K states in one call.

For MPC horizons and bag replay. The states are shared among the calling thread and worker threads, one
state at a time; each thread owns one workspace, so the per-state work is exactly that of the single-state
functions and the results are identical to them. Outputs are new arrays.

Threads: ``numba.get_num_threads()`` of them at most (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).
With the C extension (rbd_deriv.core.calling), the workers are the extension's: the caller takes part and the
states are handed out one by one, so a batch is never held up by a worker that is slow to wake. Idle
workers spin, then poll, then sleep (``constants.BATCH_WORKER_*``): batches that come back to back run on
all threads, and a lone batch (a controller's tick) does not pay for waking a worker. Without it, numba's ``prange``
serves, and only batches of at least ``constants.PARALLEL_MIN_WORK`` (states x dofs) go to its threads.

The extension's workers live as long as the process: after a batch, the process has threads, and
``os.fork()`` then warns on Python 3.12 and later (a child forked anyway runs its batches on its own).
"""

from __future__ import annotations

import bisect
import threading
import weakref

import numba
import numpy as np
from numba import cfunc, njit, prange

from rbd_deriv.core import constants
from rbd_deriv.core.aba import STATUS_SINGULAR, aba_into, raise_for_dynamics_status
from rbd_deriv.core.aba_derivatives import aba_derivatives_into
from rbd_deriv.exceptions import InputError
from rbd_deriv.core.kinematics import (
    FK_DERIVATIVES,
    STATUS_WORKSPACE,
    as_input_array,
    check_inputs,
    check_model,
    foreign_workspace,
    forward_pass,
)
from rbd_deriv.core.linearization import check_time_step, linearize_into
from rbd_deriv.core.model import MI_NJ, MI_NQTOT, MI_NVTOT, Data, Model
from rbd_deriv.core.calling import (
    DIRECT_CALLS,
    ENTRY_OPTIONS,
    ENTRY_SIG,
    STATUS_INTERNAL,
    Kernel,
    arg_double,
    arg_float2,
    arg_int,
    arg_int1,
    arg_int2,
    arg_items,
    parallel,
    set_worker_wait,
)
from rbd_deriv.core.rnea import rnea_into
from rbd_deriv.core.rnea_derivatives import rnea_derivatives_into
from rbd_deriv.core.spatial import (
    _NJIT,
    R_A,
    R_B,
    R_DDDQ,
    R_DTAU,
    R_M,
    R_MINV,
    R_TAU,
    R_XNEXT,
    R_ZERO_FEXT,
    region1,
    region2,
)

OP_RNEA, OP_ABA, OP_RNEA_DERIVATIVES, OP_ABA_DERIVATIVES, OP_LINEARIZE = range(5)


@njit(**_NJIT)
def _one_state(mi, mf, ws, q, v, x, dt, op, out1, out2, out3):
    """Run operation ``op`` on one state with workspace ws; copy its results into the flat out rows."""
    nj, nv, nq = mi[0, MI_NJ], mi[0, MI_NVTOT], mi[0, MI_NQTOT]
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    fext = region2(mi, ws, R_ZERO_FEXT, nj, 6)
    status = check_inputs(mi, q, v, x, fext)
    if status != 0:
        return status
    if op == OP_RNEA:
        rnea_into(mi, mf, ws, q, v, x, fext, out1)
        return 0
    if op == OP_ABA:
        if not aba_into(mi, mf, ws, q, v, x, fext, out1):
            return STATUS_SINGULAR
        return 0
    if op == OP_RNEA_DERIVATIVES:
        forward_pass(mi, mf, ws, q, v, x, fext, FK_DERIVATIVES)
        M = region2(mi, ws, R_M, nv, nv)
        dtau = region2(mi, ws, R_DTAU, nv, 2 * nv)
        rnea_derivatives_into(mi, ws, region1(mi, ws, R_TAU, nv), dtau, M)
        first, second, third = dtau[:, :nv], dtau[:, nv:], M
    elif op == OP_ABA_DERIVATIVES:
        if not aba_derivatives_into(mi, mf, ws, q, v, x, fext):
            return STATUS_SINGULAR
        dddq = region2(mi, ws, R_DDDQ, nv, 2 * nv)
        first, second, third = dddq[:, :nv], dddq[:, nv:], region2(mi, ws, R_MINV, nv, nv)
    else:
        if not linearize_into(mi, mf, ws, q, v, x, fext, dt):
            return STATUS_SINGULAR
        A = region2(mi, ws, R_A, 2 * nv, 2 * nv)
        B = region2(mi, ws, R_B, 2 * nv, nv)
        x_next = region1(mi, ws, R_XNEXT, nq + nv)
        out1[:] = A.reshape(4 * nv * nv)
        out2[:] = B.reshape(2 * nv * nv)
        out3[:] = x_next
        return 0
    for r in range(nv):
        for c in range(nv):
            out1[r * nv + c] = first[r, c]
            out2[r * nv + c] = second[r, c]
            out3[r * nv + c] = third[r, c]
    return 0


@njit(**_NJIT)
def _state_range(mi, mf, ws, Q, V, X, dt, op, out1, out2, out3, status, begin, end, step):
    """States begin, begin + step, ... before end; each one's status into status[k]. Returns the first
    nonzero status, or 0."""
    failed = 0
    for k in range(begin, end, step):
        status[k] = _one_state(mi, mf, ws, Q[k], V[k], X[k], dt, op, out1[k], out2[k], out3[k])
        if failed == 0:
            failed = status[k]
    return failed


@njit(parallel=True, cache=True)
def _batch_kernel(mi, mf, workspaces, Q, V, X, dt, op, out1, out2, out3, status):
    # Only without the extension: compiled at its first call, not at import (about half of this module's
    # compile time). The prange body only hands a thread its states: the work runs in an ordinary compiled
    # function, which the parallel transformation leaves alone (inlined into the parallel body it ran ~6x
    # slower).
    threads = workspaces.shape[0]
    for t in prange(threads):
        _state_range(mi, mf, workspaces[t], Q, V, X, dt, op, out1, out2, out3, status, t, Q.shape[0], threads)


@cfunc(ENTRY_SIG, **ENTRY_OPTIONS)
def _batch_entry(data, dims):
    # Arguments (mi, mf, workspaces, Q, V, X, dt, op, out1, out2, out3, status) and, from parallel(), the
    # workspace slot and the states [begin, end) of this call.
    try:
        mi, mf, workspaces = arg_int2(data, dims, 0), arg_float2(data, dims, 1), arg_float2(data, dims, 2)
        Q, V, X = arg_float2(data, dims, 3), arg_float2(data, dims, 4), arg_float2(data, dims, 5)
        dt, op = arg_double(data, dims, 6), arg_int(data, dims, 7)
        out1, out2, out3 = arg_float2(data, dims, 8), arg_float2(data, dims, 9), arg_float2(data, dims, 10)
        status = arg_int1(data, dims, 11)
        slot, begin, end = arg_items(data, dims, 12)
        K = Q.shape[0]
        if not (0 <= slot < workspaces.shape[0] and 0 <= begin <= end <= K and V.shape[0] == K
                and X.shape[0] == K and out1.shape[0] == K and out2.shape[0] == K and out3.shape[0] == K
                and status.shape[0] == K):
            return STATUS_INTERNAL
        return _state_range(mi, mf, workspaces[slot], Q, V, X, dt, op, out1, out2, out3, status, begin, end, 1)
    except Exception:  # an exception inside a cfunc would come back as status 0
        return STATUS_INTERNAL


_batch_call = Kernel(_batch_entry.address, "i2f2F2f2f2f2dnF2F2F2I1") if DIRECT_CALLS else None
if DIRECT_CALLS:
    set_worker_wait(constants.BATCH_WORKER_SPIN, constants.BATCH_WORKER_SPIN_MAX, constants.BATCH_WORKER_POLL,
                    constants.BATCH_WORKER_STEADY, constants.BATCH_WORKER_LINGER)


# Workspaces of finished batch calls, per model, for the next call: allocating (threads, workspace_size) zeros
# at every call cost page faults and zeroing out of proportion to a small robot's work (a quarter of the
# time per state on ur5). A call takes a set from the pool, or makes one, and gives it back when done, so
# concurrent calls never share one.
_POOLS: "weakref.WeakKeyDictionary[Model, list]" = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


_POOL_SIZE = 4
"""Sets kept per model: more than this many calls at once allocate their own and drop them after."""


def _take_workspaces(model: Model, threads: int) -> np.ndarray:
    with _POOLS_LOCK:
        free = _POOLS.get(model, ())
        for k, workspaces in enumerate(free):  # smallest first
            if len(workspaces) >= threads:
                return free.pop(k)
    workspaces = np.zeros((threads, model.workspace_size))
    for ws in workspaces:
        Data.initialize(model, ws)
    return workspaces


def _give_back_workspaces(model: Model, workspaces: np.ndarray) -> None:
    with _POOLS_LOCK:
        free = _POOLS.setdefault(model, [])
        if len(free) < _POOL_SIZE:
            bisect.insort(free, workspaces, key=len)


def _states(model: Model, Q, V, X, x_name: str):
    Q = as_input_array(Q, "Q", 2)
    V = as_input_array(V, "V", 2)
    X = as_input_array(X, x_name, 2)
    K = Q.shape[0]
    for array, name, width in ((Q, "Q", model.nq), (V, "V", model.nv), (X, x_name, model.nv)):
        if array.shape != (K, width):
            raise InputError(f"{name}: expected shape ({K}, {width}), got {array.shape}", name)
    return Q, V, X


def _float_arrays_of_shapes(model: Model, Q, V, X) -> bool:
    """True when Q, V, X are float64 arrays of shapes (K, nq), (K, nv), (K, nv): the extension then takes
    them as they are, or refuses them (TypeError) for their layout."""
    return (type(Q) is np.ndarray and type(V) is np.ndarray and type(X) is np.ndarray
            and Q.dtype == V.dtype == X.dtype == np.float64 and len(Q.shape) == 2
            and Q.shape[1] == model.nq and V.shape == X.shape == (Q.shape[0], model.nv))


def _run(model: Model, op: int, Q, V, X, x_name: str, dt: float, sizes):
    direct = DIRECT_CALLS and _float_arrays_of_shapes(model, Q, V, X)
    if not direct:
        Q, V, X = _states(model, Q, V, X, x_name)
    K = Q.shape[0]
    threads = max(1, min(numba.get_num_threads(), K))
    if not DIRECT_CALLS and K * model.nv < constants.PARALLEL_MIN_WORK:
        threads = 1
    outs = [np.empty((K, size)) for size in sizes]
    status = np.zeros(K, dtype=np.int64)
    workspaces = _take_workspaces(model, threads)
    try:
        if DIRECT_CALLS:
            arguments = [model.mi, model.mf, workspaces[:threads], Q, V, X, dt, op, *outs, status]
            try:
                failed = parallel(_batch_call, K, threads, *arguments)
            except TypeError:
                if not direct:
                    raise
                arguments[3:6] = _states(model, Q, V, X, x_name)  # strided, big-endian, read-only overlapping...
                failed = parallel(_batch_call, K, threads, *arguments)
        elif threads > 1:
            _batch_kernel(model.mi, model.mf, workspaces[:threads], Q, V, X, dt, op, *outs, status)
            failed = status.any()
        else:
            failed = _state_range(model.mi, model.mf, workspaces[0], Q, V, X, dt, op, *outs, status, 0, K, 1)
    finally:
        _give_back_workspaces(model, workspaces)
    if failed == STATUS_INTERNAL:
        raise_for_dynamics_status(model, failed, ())
    if failed:
        k = int(np.flatnonzero(status)[0])
        try:
            raise_for_dynamics_status(model, int(status[k]), ("Q", "V", x_name, "fext"))
        except InputError as err:
            raise InputError(f"state {k} of {K}: {err}", err.argument) from None
    return outs


def rnea_batch(model: Model, Q, V, A) -> np.ndarray:
    """rnea at K states. Q (K, nq), V (K, nv), A (K, nv) -> tau (K, nv) [N m, N]."""
    check_model(model)
    nv = model.nv
    return _run(model, OP_RNEA, Q, V, A, "A", 0.0, (nv, 1, 1))[0]


def aba_batch(model: Model, Q, V, TAU) -> np.ndarray:
    """aba at K states. Q (K, nq), V (K, nv), TAU (K, nv) -> ddq (K, nv) [rad/s^2, m/s^2]."""
    check_model(model)
    nv = model.nv
    return _run(model, OP_ABA, Q, V, TAU, "TAU", 0.0, (nv, 1, 1))[0]


def rnea_derivatives_batch(model: Model, Q, V, A):
    """rnea_derivatives at K states -> (dtau_dq, dtau_dv, M), each (K, nv, nv)."""
    check_model(model)
    nv = model.nv
    dtau_dq, dtau_dv, M = _run(model, OP_RNEA_DERIVATIVES, Q, V, A, "A", 0.0, (nv * nv,) * 3)
    return dtau_dq.reshape(-1, nv, nv), dtau_dv.reshape(-1, nv, nv), M.reshape(-1, nv, nv)


def aba_derivatives_batch(model: Model, Q, V, TAU):
    """aba_derivatives at K states -> (dddq_dq, dddq_dv, Minv), each (K, nv, nv)."""
    check_model(model)
    nv = model.nv
    dddq_dq, dddq_dv, Minv = _run(model, OP_ABA_DERIVATIVES, Q, V, TAU, "TAU", 0.0, (nv * nv,) * 3)
    return dddq_dq.reshape(-1, nv, nv), dddq_dv.reshape(-1, nv, nv), Minv.reshape(-1, nv, nv)


def linearize_batch(model: Model, Q, V, TAU, dt):
    """linearize at K states with time step dt [s] -> (A (K, 2nv, 2nv), B (K, 2nv, nv), X_next (K, nq + nv))."""
    check_model(model)
    nv, nq = model.nv, model.nq
    dt = check_time_step(dt)
    A, B, X_next = _run(model, OP_LINEARIZE, Q, V, TAU, "TAU", dt, (4 * nv * nv, 2 * nv * nv, nq + nv))
    return A.reshape(-1, 2 * nv, 2 * nv), B.reshape(-1, 2 * nv, nv), X_next
