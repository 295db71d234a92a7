"""Activations: how a residual r (nr entries per knot) becomes a cost a(r).

Every activation here is a sum over the residual's entries, so its gradient and Hessian with
respect to r are a vector and a diagonal; the Gauss-Newton cost Hessian is then
:math:`R_x^T \\mathrm{diag}(a'') R_x`. Batched over K knots: ``value(r)`` (K,),
``derivatives(r)`` ((K, nr), (K, nr) or (nr,) when it is the same at every knot).

- :class:`Quadratic`: :math:`\\tfrac12 \\sum_i w_i r_i^2` (tracking, regularization);
- :class:`QuadraticBarrier`: :math:`\\tfrac12 \\sum_i w_i (\\max(0, r_i - r_{hi,i}) +
  \\min(0, r_i - r_{lo,i}))^2`, zero inside the bounds (soft limits; Crocoddyl's
  ActivationModelQuadraticBarrier);
- :class:`RelaxedLogBarrier`: :math:`-w \\ln(r_i)` for :math:`r_i \\ge \\delta`, continued below
  :math:`\\delta` by the quadratic that matches its value, slope and curvature (Feller and
  Ebenbauer, "Relaxed logarithmic barrier function based model predictive control of linear
  systems", IEEE TAC 2017). It keeps inequalities :math:`r \\ge 0` strictly satisfied as long as
  the relaxation is not reached, and stays finite (and convex) everywhere, which a Gauss-Newton
  step needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.exceptions import InputError


def _weights(name: str, value: Any, size: int) -> np.ndarray:
    array = np.array(value, dtype=float)
    if array.ndim == 0:
        array = np.full(size, float(array))
    if array.shape != (size,):
        raise InputError(f"{name} must be a scalar or have shape ({size},), got {array.shape}")
    if not np.isfinite(array).all() or (array < 0.0).any():
        raise InputError(f"{name} must be finite and >= 0")
    array.setflags(write=False)
    return array


class Quadratic:
    """a(r) = 0.5 sum_i w_i r_i^2.

    Args:
        weights: Scalar or (nr,) non-negative weights.
        nr: Residual size.
    """

    def __init__(self, weights: Any, nr: int) -> None:
        self.nr = nr
        self.weights = _weights("weights", weights, nr)

    def value(self, r: np.ndarray) -> np.ndarray:
        """(K,) cost of the residuals r (K, nr)."""
        return 0.5 * (r * r) @ self.weights

    def derivatives(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient w r (K, nr) and Hessian diagonal w (nr,), the same at every knot."""
        return r * self.weights, self.weights


class QuadraticBarrier:
    """a(r) = 0.5 sum_i w_i (max(0, r_i - upper_i) + min(0, r_i - lower_i))^2: zero inside.

    Args:
        lower, upper: (nr,) bounds, -inf / +inf where absent, lower <= upper.
        weights: Scalar or (nr,) non-negative weights.
    """

    def __init__(self, lower: Any, upper: Any, weights: Any) -> None:
        lower = np.array(lower, dtype=float)
        upper = np.array(upper, dtype=float)
        if lower.ndim != 1 or lower.shape != upper.shape:
            raise InputError(f"lower and upper must be vectors of one size, got {lower.shape} "
                             f"and {upper.shape}")
        if np.isnan(lower).any() or np.isnan(upper).any() or (lower > upper).any():
            raise InputError("bounds must satisfy lower <= upper (NaN refused)")
        self.nr = lower.size
        self.lower, self.upper = lower, upper
        self.lower.setflags(write=False)
        self.upper.setflags(write=False)
        self.weights = _weights("weights", weights, self.nr)

    def _evaluate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r = np.ascontiguousarray(r, dtype=float)
        if r.ndim != 2 or r.shape[1] != self.nr:
            raise InputError(f"residuals must be (K, {self.nr}), got {r.shape}")
        value, gradient, hessian = np.empty(r.shape[0]), np.empty(r.shape), np.empty(r.shape)
        _quadratic_barrier(r, self.lower, self.upper, self.weights, value, gradient, hessian)
        return value, gradient, hessian

    def value(self, r: np.ndarray) -> np.ndarray:
        """(K,) cost of the residuals r (K, nr)."""
        return self._evaluate(r)[0]

    def derivatives(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient w * excess and Hessian diagonal w where a bound is passed (else 0), (K, nr)."""
        return self._evaluate(r)[1:]

    def add_identity(self, Y: np.ndarray, reference: np.ndarray, gradient: np.ndarray, hessian: np.ndarray,
                     knot_weights: np.ndarray) -> None:
        """Add the derivatives of the barrier of r = Y - reference (Y (K, nr), reference of 1 or K rows) to
        gradient (K, nr) and the diagonals of hessian (K, nr, nr), times the knot weights ((K,), empty for 1): a
        residual whose Jacobian is the identity (:meth:`~rbd_deriv.control.residuals.Residual.identity`)."""
        _barrier_identity(Y, reference, self.lower, self.upper, self.weights, knot_weights, gradient, hessian)


@njit(**JIT_OPTIONS)
def _barrier_identity(Y, reference, lower, upper, weights, knot_weights, gradient, hessian):
    """:meth:`QuadraticBarrier.add_identity`'s pass over the knots."""
    shared = reference.shape[0] == 1
    for k in range(Y.shape[0]):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        ref = reference[0] if shared else reference[k]
        for i in range(Y.shape[1]):
            r = Y[k, i] - ref[i]
            excess = max(0.0, r - upper[i]) + min(0.0, r - lower[i])
            if excess != 0.0 and factor != 0.0:
                w = factor * weights[i]
                gradient[k, i] += w * excess
                hessian[k, i, i] += w


@njit(**JIT_OPTIONS)
def _quadratic_barrier(r, lower, upper, weights, value, gradient, hessian):
    """:class:`QuadraticBarrier` on r (K, nr) in one pass: value (K,), gradient and Hessian diagonal (K, nr)."""
    for k in range(r.shape[0]):
        total = 0.0
        for i in range(r.shape[1]):
            excess = max(0.0, r[k, i] - upper[i]) + min(0.0, r[k, i] - lower[i])
            gradient[k, i] = weights[i] * excess
            hessian[k, i] = weights[i] if excess != 0.0 else 0.0
            total += weights[i] * excess * excess
        value[k] = 0.5 * total


@njit(**JIT_OPTIONS)
def _relaxed_log_barrier(r, weight, delta, gradient, hessian):
    """gradient, hessian (K, nr) = w b'(r), w b''(r) of the relaxed logarithmic barrier: -ln s for
    s >= delta, its quadratic continuation below (see :class:`RelaxedLogBarrier`)."""
    for k in range(r.shape[0]):
        for i in range(r.shape[1]):
            s = r[k, i]
            if s >= delta:
                gradient[k, i] = -weight / s
                hessian[k, i] = weight / (s * s)
            else:
                gradient[k, i] = weight * (s - 2.0 * delta) / (delta * delta)
                hessian[k, i] = weight / (delta * delta)


class RelaxedLogBarrier:
    """a(r) = sum_i w b(r_i) with b(s) = -ln s for s >= delta, its quadratic continuation below.

    The continuation :math:`b(s) = -\\ln\\delta - (s - \\delta)/\\delta
    + (s - \\delta)^2 / (2 \\delta^2)` matches value, slope and curvature at delta.

    Args:
        weight: Barrier weight w > 0 (a smaller weight biases the solution less towards the
            interior).
        delta: Relaxation threshold > 0, in the residual's units.
        nr: Residual size.
    """

    def __init__(self, weight: float, delta: float, nr: int) -> None:
        if not (np.isfinite(weight) and weight > 0.0):
            raise InputError(f"barrier weight must be > 0, got {weight!r}")
        if not (np.isfinite(delta) and delta > 0.0):
            raise InputError(f"barrier delta must be > 0, got {delta!r}")
        self.nr = nr
        self.weight = float(weight)
        self.delta = float(delta)

    def value(self, r: np.ndarray) -> np.ndarray:
        """(K,) cost of the residuals r (K, nr)."""
        delta = self.delta
        inside = r >= delta
        shifted = (r - delta) / delta
        relaxed = -np.log(delta) - shifted + 0.5 * shifted * shifted
        barrier = np.where(inside, -np.log(np.where(inside, r, 1.0)), relaxed)
        return self.weight * barrier.sum(axis=1)

    def derivatives(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and Hessian diagonal, (K, nr); the Hessian is positive everywhere
        (:func:`_relaxed_log_barrier`)."""
        r = np.ascontiguousarray(r, dtype=float)
        if r.ndim != 2:
            raise InputError(f"residuals must be (K, nr), got {r.shape}")
        gradient, hessian = np.empty(r.shape), np.empty(r.shape)
        _relaxed_log_barrier(r, self.weight, self.delta, gradient, hessian)
        return gradient, hessian


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the barriers pass (the package's
    build runs it)."""
    RelaxedLogBarrier(1.0, 0.1, 2).derivatives(np.ones((2, 2)))
    barrier = QuadraticBarrier(-np.ones(2), np.ones(2), 1.0)
    barrier.derivatives(np.ones((2, 2)))
    barrier.add_identity(np.ones((2, 2)), np.zeros((1, 2)), np.zeros((2, 2)), np.zeros((2, 2, 2)), np.zeros(0))
