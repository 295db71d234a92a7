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

from numba import njit

from rbd_deriv.core.aba_derivatives import aba_derivatives_into
from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import STATUS_SINGULAR, check_length, check_shape, check_state, register, status
from rbd_deriv.core.configuration import dintegrate_into, integrate_into
from rbd_deriv.core.constants import JIT_OPTIONS, UINT
from rbd_deriv.core.layout import (
    MI_IDX_V,
    MI_NJ,
    MI_NQTOT,
    MI_NVTOT,
    MI_TYPE,
    R_DDDQ_DQ,
    R_DDDQ_DV,
    R_DDQ,
    R_JQ,
    R_JV,
    R_MINV,
    R_STEP,
    R_VNEXT,
    as_readonly,
    region1,
    region2,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.urdf import JOINT_FREEFLYER
from rbd_deriv.exceptions import InputError


@njit(**JIT_OPTIONS)
def _apply_integrate_jacobian(mi, J, X, scale):
    """The top nv rows of X (2nv, cols) = scale * J times its bottom nv rows, for the block-diagonal integrate
    Jacobian J (identity outside free-flyer blocks). Whole rows of X are taken (a slice of rows would be typed
    as strided and its loops left unvectorized)."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    cols = X.shape[1]
    for i in range(1, nj):
        iv = mi[i, MI_IDX_V]
        if mi[i, MI_TYPE] != JOINT_FREEFLYER:
            top, bottom = X[iv], X[nv + iv]
            for c in range(UINT(0), UINT(cols)):
                top[c] = scale * bottom[c]
            continue
        b = nv + iv  # the free flyer's bottom rows
        b0, b1, b2, b3, b4, b5 = X[b], X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5]
        for r in range(iv, iv + 6):
            top = X[r]
            s0, s1, s2 = scale * J[r, iv], scale * J[r, iv + 1], scale * J[r, iv + 2]
            s3, s4, s5 = scale * J[r, iv + 3], scale * J[r, iv + 4], scale * J[r, iv + 5]
            for c in range(UINT(0), UINT(cols)):
                top[c] = s0 * b0[c] + s1 * b1[c] + s2 * b2[c] + s3 * b3[c] + s4 * b4[c] + s5 * b5[c]


@njit(**JIT_OPTIONS)
def linearize_into(mi, mf, ws, q, v, tau, fext, dt, A, B, x_next):
    """A, B and x+. Returns 0, or the joint whose articulated inertia is singular."""
    nv = mi[0, MI_NVTOT]
    dddq_dq = region2(mi, ws, R_DDDQ_DQ, nv, nv)
    dddq_dv = region2(mi, ws, R_DDDQ_DV, nv, nv)
    Minv = region2(mi, ws, R_MINV, nv, nv)
    singular = aba_derivatives_into(mi, mf, ws, q, v, tau, fext, dddq_dq, dddq_dv, Minv)
    if singular:
        return singular
    euler_step_into(mi, ws, q, v, dt, region1(mi, ws, R_DDQ, nv), dddq_dq, dddq_dv, Minv, A, B, x_next)
    return 0


@njit(**JIT_OPTIONS)
def euler_step_into(mi, ws, q, v, dt, ddq, dddq_dq, dddq_dv, dddq_dtau, A, B, x_next):
    """x+ and the Jacobians A, B of the Euler step, given ddq and its derivatives (dddq_dtau is M^-1 without
    contacts; under contacts the three are column blocks of one matrix)."""
    nv, nq = mi[0, MI_NVTOT], mi[0, MI_NQTOT]
    v_next = region1(mi, ws, R_VNEXT, nv)
    step = region1(mi, ws, R_STEP, nv)
    Jq = region2(mi, ws, R_JQ, nv, nv)
    Jv = region2(mi, ws, R_JV, nv, nv)
    for k in range(nv):
        v_next[k] = v[k] + dt * ddq[k]
        step[k] = dt * v_next[k]
        x_next[nq + k] = v_next[k]
    integrate_into(mi, q, as_readonly(step), x_next[:nq])
    dintegrate_into(mi, as_readonly(step), Jq, Jv)
    # Bottom rows: [dt dFD/dq, I + dt dFD/dv] and dt dFD/dtau.
    for r in range(nv):
        dq, dv, dtau, Ar, Br = dddq_dq[r], dddq_dv[r], dddq_dtau[r], A[nv + r], B[nv + r]
        for c in range(UINT(0), UINT(nv)):
            Ar[c] = dt * dq[c]
            Br[c] = dt * dtau[c]
        for c in range(nv):
            Ar[nv + c] = dt * dv[c]
        Ar[nv + r] += 1.0
    # Top rows: Jv dt times the bottom rows, plus Jq on the dq block.
    _apply_integrate_jacobian(mi, Jv, A, dt)
    _apply_integrate_jacobian(mi, Jv, B, dt)
    for r in range(nv):
        for c in range(nv):
            A[r, c] += Jq[r, c]


@njit(**JIT_OPTIONS)
def _linearize_kernel(mi, mf, ws, q, v, tau, fext, dt, A, B, x_next):
    nv, nq = mi[0, MI_NVTOT], mi[0, MI_NQTOT]
    code = check_state(mi, ws, q, v, tau, fext)
    if code == 0:
        code = check_shape(A, 2 * nv, 2 * nv, 8)
    if code == 0:
        code = check_shape(B, 2 * nv, nv, 9)
    if code == 0:
        code = check_length(x_next, nq + nv, 10)
    if code == 0:
        singular = linearize_into(mi, mf, ws, q, v, tau, fext, dt, A, B, x_next)
        if singular:
            code = status(STATUS_SINGULAR, 0, singular)
    return code


LINEARIZE = register(_linearize_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 tau:f1 fext:f2 dt:d A:F2 B:F2 x_next:F1")
_linearize = LINEARIZE.call


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
    """Linearize one semi-implicit Euler step x+ = f(x, tau) of duration dt, without contacts
    (:func:`rbd_deriv.linearize`, in :mod:`rbd_deriv.core.contact`, adds ``contacts=``).

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
        code = _linearize(model.mi, model.mf, data.ws, q, v, tau, data._zero_fext if fext is None else fext, dt,
                              data._A, data._B, data._x_next)
    except (TypeError, AttributeError):
        code = LINEARIZE.call_converted(model, data, q, v, tau, fext, dt)
    if code:
        raise LINEARIZE.error(model, code)
    return data.A, data.B


def linearize_batch(model: Model, Q, V, TAU, dt, out=None):
    """linearize at K states with time step dt [s] -> (A (K, 2nv, 2nv), B (K, 2nv, nv), X_next (K, nq + nv)),
    without contacts (:func:`rbd_deriv.linearize_batch` adds ``contacts=``); written into ``out`` (A, B, X_next)
    when given (:func:`rbd_deriv.core.batch.run_batch`)."""
    return tuple(run_batch(LINEARIZE, model, Q, V, TAU, None, check_time_step(dt), out=out))
