"""Discrete-time linearization of the dynamics for control.

One step of semi-implicit Euler on the configuration manifold, as Crocoddyl's IntegratedActionModelEuler:

    ddq = FD(q, v, tau),    v+ = v + dt ddq,    q+ = q (+) dt v+

With x = (q, v) and its tangent-space variation dx = (dq, dv) in R^2nv, the Jacobians are

    A = dx+/dx = [[Jq + Jv dt^2 dFD/dq,   Jv dt (I + dt dFD/dv)],        B = dx+/dtau = [[Jv dt^2 M^-1],
                  [dt dFD/dq,             I + dt dFD/dv        ]]                         [dt M^-1     ]]

where Jq, Jv are the Jacobians of integrate at (q, dt v+) (identity but for a free flyer).
"""

from __future__ import annotations

import math

from numba import cfunc, njit, types

from rbd_deriv.core.aba import STATUS_SINGULAR, raise_for_dynamics_status
from rbd_deriv.core.aba_derivatives import aba_derivatives_into
from rbd_deriv.core.configuration import dintegrate_into, integrate_into
from rbd_deriv.exceptions import InputError
from rbd_deriv.core.kinematics import (
    MAT_T,
    MF_T,
    MI_T,
    STATUS_WORKSPACE,
    VEC_T,
    call_kernel,
    check_inputs,
    foreign_workspace,
)
from rbd_deriv.core.model import MI_IDX_V, MI_NJ, MI_NQTOT, MI_NVTOT, MI_TYPE, Data, Model
from rbd_deriv.core.calling import ENTRY_OPTIONS, ENTRY_SIG, STATUS_INTERNAL, arg_double, dynamics_arrays, entry
from rbd_deriv.core.spatial import (
    _NJIT,
    R_A,
    R_B,
    R_DDDQ,
    R_DDQ,
    R_JQ,
    R_JV,
    R_MINV,
    R_STEP,
    R_VNEXT,
    R_XNEXT,
    region1,
    region2,
)
from rbd_deriv.core.urdf import JOINT_FREEFLYER


@njit(**_NJIT)
def _apply_integrate_jacobian(mi, J, X, scale, out):
    """out = scale * J X for the block-diagonal integrate Jacobian J (identity outside free-flyer blocks)."""
    nj = mi[0, MI_NJ]
    cols = X.shape[1]
    for i in range(1, nj):
        iv = mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            for c in range(cols):
                out[iv, c] = scale * X[iv, c]
            continue
        for r in range(6):
            for c in range(cols):
                s = 0.0
                for k in range(6):
                    s += J[iv + r, iv + k] * X[iv + k, c]
                out[iv + r, c] = scale * s


@njit(**_NJIT)
def linearize_into(mi, mf, ws, q, v, tau, fext, dt):
    """A, B, x+ into their regions. Returns False on a singular inertia."""
    nv, nq = mi[0, MI_NVTOT], mi[0, MI_NQTOT]
    if not aba_derivatives_into(mi, mf, ws, q, v, tau, fext):
        return False
    ddq = region1(mi, ws, R_DDQ, nv)
    dddq = region2(mi, ws, R_DDDQ, nv, 2 * nv)
    Minv = region2(mi, ws, R_MINV, nv, nv)
    v_next = region1(mi, ws, R_VNEXT, nv)
    step = region1(mi, ws, R_STEP, nv)
    x_next = region1(mi, ws, R_XNEXT, nq + nv)
    Jq = region2(mi, ws, R_JQ, nv, nv)
    Jv = region2(mi, ws, R_JV, nv, nv)
    A = region2(mi, ws, R_A, 2 * nv, 2 * nv)
    B = region2(mi, ws, R_B, 2 * nv, nv)
    for k in range(nv):
        v_next[k] = v[k] + dt * ddq[k]
        step[k] = dt * v_next[k]
        x_next[nq + k] = v_next[k]
    integrate_into(mi, q, step, x_next[:nq])
    dintegrate_into(mi, step, Jq, Jv)
    # Bottom rows: [dt dFD/dq, I + dt dFD/dv] and dt M^-1.
    for r in range(nv):
        for c in range(2 * nv):
            A[nv + r, c] = dt * dddq[r, c]
        A[nv + r, nv + r] += 1.0
        for c in range(nv):
            B[nv + r, c] = dt * Minv[r, c]
    # Top rows: Jv dt times the bottom rows, plus Jq on the dq block.
    _apply_integrate_jacobian(mi, Jv, A[nv:, :], dt, A[:nv, :])
    _apply_integrate_jacobian(mi, Jv, B[nv:, :], dt, B[:nv, :])
    for r in range(nv):
        for c in range(nv):
            A[r, c] += Jq[r, c]
    return True


_SIG = types.int64(MI_T, MF_T, VEC_T, VEC_T, VEC_T, VEC_T, MAT_T, types.float64)


@njit(_SIG, **_NJIT)
def _linearize_kernel(mi, mf, ws, q, v, tau, fext, dt):
    if foreign_workspace(mi, ws):
        return STATUS_WORKSPACE
    status = check_inputs(mi, q, v, tau, fext)
    if status != 0:
        return status
    if not linearize_into(mi, mf, ws, q, v, tau, fext, dt):
        return STATUS_SINGULAR
    return 0


@cfunc(ENTRY_SIG, **ENTRY_OPTIONS)
def _linearize_entry(data, dims):
    try:
        mi, mf, ws, q, v, tau, fext = dynamics_arrays(data, dims)
        return _linearize_kernel(mi, mf, ws, q, v, tau, fext, arg_double(data, dims, 7))
    except Exception:  # an exception inside a cfunc would come back as status 0
        return STATUS_INTERNAL


_linearize_call = entry(_linearize_kernel, _linearize_entry, "i2f2F1f1f1f1f2d")


_NAMES = ("q", "v", "tau", "fext")


def check_time_step(dt) -> float:
    """The time step as a float, or InputError unless it is finite and positive."""
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise InputError(f"dt: expected a number of seconds, got {dt!r}", "dt") from None
    if not (math.isfinite(dt) and dt > 0.0):
        raise InputError(f"dt: must be finite and positive, got {dt}", "dt")
    return dt


def linearize(model: Model, data: Data, q, v, tau, dt, fext=None):
    """Linearize one semi-implicit Euler step x+ = f(x, tau) of duration dt.

    Args:
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        tau: (nv,) joint torques/forces [N m, N].
        dt: Integration time step in [s].
        fext: (njoints, 6) external forces in the joint frames [N, N m], or None.

    Returns:
        (A, B): views data.A (2nv, 2nv) and data.B (2nv, nv), in the tangent space of x = (q, v).
        data.x_next (nq + nv,) holds x+ = (q+, v+).
    """
    dt = check_time_step(dt)
    try:
        status = _linearize_call(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext, dt)
    except (TypeError, AttributeError):
        status = call_kernel(lambda mi, mf, ws, *arrays: _linearize_call(mi, mf, ws, *arrays, dt), model, data,
                             (q, v, tau, fext), _NAMES, (1, 1, 1, 2))
    if status:
        raise_for_dynamics_status(model, status, _NAMES)
    return data.A, data.B
