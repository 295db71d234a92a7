"""Batched evaluation: the dynamics, their derivatives or the linearization at K states in one call.

For MPC horizons and bag replay. Large batches are shared among numba threads (``prange``), small ones run
on the calling thread (constants.PARALLEL_MIN_WORK); each thread owns one workspace, so the per-state work is
exactly that of the single-state functions and the results are identical to them. Outputs are new arrays.
"""

from __future__ import annotations

import threading
import weakref

import numba
import numpy as np
from numba import njit, prange, types

from rbd_deriv import constants
from rbd_deriv.aba import STATUS_SINGULAR, aba_into, raise_for_dynamics_status
from rbd_deriv.aba_derivatives import aba_derivatives_into
from rbd_deriv.exceptions import InputError
from rbd_deriv.kinematics import (
    FK_DERIVATIVES,
    MAT_T,
    MF_T,
    MI_T,
    STATUS_WORKSPACE,
    as_input_array,
    check_inputs,
    check_model,
    foreign_workspace,
    forward_pass,
)
from rbd_deriv.linearization import check_time_step, linearize_into
from rbd_deriv.model import MI_NJ, MI_NQTOT, MI_NVTOT, Data, Model
from rbd_deriv.rnea import rnea_into
from rbd_deriv.rnea_derivatives import rnea_derivatives_into
from rbd_deriv.spatial import (
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


_BATCH_SIG = types.void(MI_T, MF_T, MAT_T, MAT_T, MAT_T, MAT_T, types.float64, types.int64, MAT_T, MAT_T, MAT_T,
                        types.Array(types.int64, 1, "C"))


@njit(**_NJIT)
def _states_of_thread(mi, mf, ws, Q, V, X, dt, op, out1, out2, out3, status, t, threads):
    for k in range(t, Q.shape[0], threads):
        status[k] = _one_state(mi, mf, ws, Q[k], V[k], X[k], dt, op, out1[k], out2[k], out3[k])


@njit(_BATCH_SIG, parallel=True, cache=True)
def _batch_kernel(mi, mf, workspaces, Q, V, X, dt, op, out1, out2, out3, status):
    # The prange body only hands a thread its states: the work runs in an ordinary compiled function,
    # which the parallel transformation leaves alone (inlined into the parallel body it ran ~6x slower).
    threads = workspaces.shape[0]
    for t in prange(threads):
        _states_of_thread(mi, mf, workspaces[t], Q, V, X, dt, op, out1, out2, out3, status, t, threads)


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
        free = _POOLS.setdefault(model, [])
        fitting = [k for k, workspaces in enumerate(free) if workspaces.shape[0] >= threads]
        if fitting:
            return free.pop(min(fitting, key=lambda k: free[k].shape[0]))
    workspaces = np.zeros((threads, model.workspace_size))
    for ws in workspaces:
        Data.initialize(model, ws)
    return workspaces


def _give_back_workspaces(model: Model, workspaces: np.ndarray) -> None:
    with _POOLS_LOCK:
        free = _POOLS.setdefault(model, [])
        if len(free) < _POOL_SIZE:
            free.append(workspaces)


def _states(model: Model, Q, V, X, x_name: str):
    Q = as_input_array(Q, "Q", 2)
    V = as_input_array(V, "V", 2)
    X = as_input_array(X, x_name, 2)
    K = Q.shape[0]
    for array, name, width in ((Q, "Q", model.nq), (V, "V", model.nv), (X, x_name, model.nv)):
        if array.shape != (K, width):
            raise InputError(f"{name}: expected shape ({K}, {width}), got {array.shape}", name)
    return Q, V, X


def _run(model: Model, op: int, Q, V, X, x_name: str, dt: float, sizes):
    Q, V, X = _states(model, Q, V, X, x_name)
    K = Q.shape[0]
    # Waking the worker threads costs hundreds of microseconds on a busy machine: small batches run on
    # the calling thread, where they still save the Python call of every state.
    parallel = K * model.nv >= constants.PARALLEL_MIN_WORK
    threads = max(1, min(numba.get_num_threads(), K)) if parallel else 1
    outs = [np.empty((K, size)) for size in sizes]
    status = np.zeros(K, dtype=np.int64)
    workspaces = _take_workspaces(model, threads)
    try:
        if parallel:
            _batch_kernel(model.mi, model.mf, workspaces[:threads], Q, V, X, dt, op, *outs, status)
        else:
            _states_of_thread(model.mi, model.mf, workspaces[0], Q, V, X, dt, op, *outs, status, 0, 1)
    finally:
        _give_back_workspaces(model, workspaces)
    bad = np.flatnonzero(status)
    if bad.size:
        k = int(bad[0])
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
    outs = _run(model, OP_RNEA_DERIVATIVES, Q, V, A, "A", 0.0, (nv * nv,) * 3)
    return tuple(out.reshape(-1, nv, nv) for out in outs)


def aba_derivatives_batch(model: Model, Q, V, TAU):
    """aba_derivatives at K states -> (dddq_dq, dddq_dv, Minv), each (K, nv, nv)."""
    check_model(model)
    nv = model.nv
    outs = _run(model, OP_ABA_DERIVATIVES, Q, V, TAU, "TAU", 0.0, (nv * nv,) * 3)
    return tuple(out.reshape(-1, nv, nv) for out in outs)


def linearize_batch(model: Model, Q, V, TAU, dt):
    """linearize at K states with time step dt [s] -> (A (K, 2nv, 2nv), B (K, 2nv, nv), X_next (K, nq + nv))."""
    check_model(model)
    nv, nq = model.nv, model.nq
    dt = check_time_step(dt)
    A, B, X_next = _run(model, OP_LINEARIZE, Q, V, TAU, "TAU", dt, (4 * nv * nv, 2 * nv * nv, nq + nv))
    return A.reshape(-1, 2 * nv, 2 * nv), B.reshape(-1, 2 * nv, nv), X_next
