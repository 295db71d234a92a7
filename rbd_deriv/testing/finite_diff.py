"""Central finite differences, on the configuration manifold where it matters.

A configuration is never perturbed by ``q + eps``: a free-flyer quaternion
would leave the unit sphere and the derivative would be taken along a
direction the model does not have. It moves by ``integrate(q, eps e_k)``, so
each column is a derivative along one tangent direction, the convention of
Pinocchio and of :mod:`rbd_deriv`. Outputs that are configurations are
compared with ``difference`` at the nominal point.

Central differences have truncation error O(eps^2) and round-off
O(machine eps * |f| / eps). For RNEA ``eps = 1e-6`` keeps both below 1e-8
relative on the robots tested. Forward dynamics carries more round-off (it
factors the articulated inertias, and light free-floating robots have large
accelerations), which the 1e-6 step amplifies to about 5e-7: ABA and the
linearization use ``eps = 1e-5``, where the worst case measured is 8e-8.
Hence the 1e-6 relative tolerance of the tests against finite differences.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np

__all__ = [
    "DEFAULT_STEP",
    "FORWARD_DYNAMICS_STEP",
    "aba_derivatives",
    "central_difference",
    "linearization",
    "manifold_difference",
    "rnea_derivatives",
]

DEFAULT_STEP = 1e-6
FORWARD_DYNAMICS_STEP = 1e-5

Vector = np.ndarray


def central_difference(function: Callable[[Vector], Vector], x: Vector, eps: float = DEFAULT_STEP) -> np.ndarray:
    """Jacobian (m, n) of ``function`` at ``x`` (n,) by central differences in a vector space."""
    x = np.asarray(x, dtype=float)
    columns = []
    for k in range(x.size):
        step = np.zeros_like(x)
        step[k] = eps
        forward = np.array(function(x + step), dtype=float)
        backward = np.array(function(x - step), dtype=float)
        columns.append((forward - backward) / (2.0 * eps))
    return np.stack(columns, axis=-1)


def manifold_difference(
    function: Callable[[Vector], Vector],
    q: Vector,
    integrate: Callable[[Vector, Vector], Vector],
    nv: int,
    eps: float = DEFAULT_STEP,
    output_difference: Optional[Callable[[Vector, Vector], Vector]] = None,
) -> np.ndarray:
    """Jacobian (m, nv) of ``function`` at configuration ``q`` along tangent directions.

    Args:
        function: maps a configuration to a vector, or to a configuration when
            ``output_difference`` is given.
        q: nominal configuration (nq,).
        integrate: ``integrate(q, dq)`` moving a configuration by a tangent vector (nv,).
        nv: dimension of the tangent space.
        eps: step along each tangent direction.
        output_difference: ``difference(y0, y1)`` giving the tangent vector from y0
            to y1; the Jacobian then maps to the tangent space at ``function(q)``.
    """
    q = np.asarray(q, dtype=float)
    nominal = np.array(function(q), dtype=float) if output_difference is not None else None
    columns = []
    for k in range(nv):
        step = np.zeros(nv)
        step[k] = eps
        forward = np.array(function(integrate(q, step)), dtype=float)
        backward = np.array(function(integrate(q, -step)), dtype=float)
        if output_difference is not None:
            forward = np.asarray(output_difference(nominal, forward), dtype=float)
            backward = np.asarray(output_difference(nominal, backward), dtype=float)
        columns.append((forward - backward) / (2.0 * eps))
    return np.stack(columns, axis=-1)


def _rd():
    import rbd_deriv

    return rbd_deriv


def rnea_derivatives(
    model: Any, data: Any, q: Vector, v: Vector, a: Vector, fext: Optional[np.ndarray] = None,
    eps: float = DEFAULT_STEP,
) -> Tuple[np.ndarray, np.ndarray]:
    """(dtau_dq, dtau_dv), each (nv, nv), from ``rd.rnea`` by central differences."""
    rd = _rd()

    def tau_of_q(qq):
        return rd.rnea(model, data, qq, v, a, fext).copy()

    def tau_of_v(vv):
        return rd.rnea(model, data, q, vv, a, fext).copy()

    dtau_dq = manifold_difference(tau_of_q, q, lambda qq, dq: rd.integrate(model, qq, dq), model.nv, eps)
    dtau_dv = central_difference(tau_of_v, v, eps)
    return dtau_dq, dtau_dv


def aba_derivatives(
    model: Any, data: Any, q: Vector, v: Vector, tau: Vector, fext: Optional[np.ndarray] = None,
    eps: float = FORWARD_DYNAMICS_STEP,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dddq_dq, dddq_dv, dddq_dtau), each (nv, nv), from ``rd.aba`` by central differences."""
    rd = _rd()

    def ddq_of_q(qq):
        return rd.aba(model, data, qq, v, tau, fext).copy()

    def ddq_of_v(vv):
        return rd.aba(model, data, q, vv, tau, fext).copy()

    def ddq_of_tau(tt):
        return rd.aba(model, data, q, v, tt, fext).copy()

    dddq_dq = manifold_difference(ddq_of_q, q, lambda qq, dq: rd.integrate(model, qq, dq), model.nv, eps)
    return dddq_dq, central_difference(ddq_of_v, v, eps), central_difference(ddq_of_tau, tau, eps)


def semi_implicit_euler_step(model: Any, data: Any, q: Vector, v: Vector, tau: Vector, dt: float,
                             contacts: Any = None):
    """x+ = (q+, v+) with ddq = aba(q, v, tau), v+ = v + dt ddq, q+ = integrate(q, dt v+).

    Written from the three library calls, independently of ``rbd_deriv.linearize``. With ``contacts``, ddq is
    ``contact_dynamics(q, v, tau)`` instead of ABA.
    """
    rd = _rd()
    if contacts is None:
        ddq = rd.aba(model, data, q, v, tau).copy()
    else:
        ddq = rd.contact_dynamics(model, data, contacts, q, v, tau)[0].copy()
    v_next = np.asarray(v, dtype=float) + dt * ddq
    return rd.integrate(model, q, dt * v_next).copy(), v_next


def linearization(
    model: Any, data: Any, q: Vector, v: Vector, tau: Vector, dt: float, eps: float = FORWARD_DYNAMICS_STEP,
    contacts: Any = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """(A (2nv, 2nv), B (2nv, nv)) of :func:`semi_implicit_euler_step` by central differences.

    The state x = (q, v) is perturbed in the tangent space (q through
    ``integrate``), and q+ is read back through ``difference`` at the nominal q+.
    """
    rd = _rd()
    nv = model.nv
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    tau = np.asarray(tau, dtype=float)
    q_next, v_next = semi_implicit_euler_step(model, data, q, v, tau, dt, contacts)

    def tangent_of_step(qq, vv, tt):
        q_plus, v_plus = semi_implicit_euler_step(model, data, qq, vv, tt, dt, contacts)
        return np.concatenate([rd.difference(model, q_next, q_plus), v_plus - v_next])

    A = np.zeros((2 * nv, 2 * nv))
    B = np.zeros((2 * nv, nv))
    for k in range(nv):
        step = np.zeros(nv)
        step[k] = eps
        A[:, k] = (
            tangent_of_step(rd.integrate(model, q, step), v, tau)
            - tangent_of_step(rd.integrate(model, q, -step), v, tau)
        ) / (2 * eps)
        A[:, nv + k] = (tangent_of_step(q, v + step, tau) - tangent_of_step(q, v - step, tau)) / (2 * eps)
        B[:, k] = (tangent_of_step(q, v, tau + step) - tangent_of_step(q, v, tau - step)) / (2 * eps)
    return A, B
