"""A cost: a residual, an activation and per-knot weights (Crocoddyl's CostModelResidual).

.. math::

    \\ell(x_k, u_k) = w_k\\, a\\big(r(x_k, u_k)\\big)

The optimal control problem (:mod:`rbd_deriv.control.ocp`) sums a list of costs over its running
knots and another over the terminal knot. Knot weights make a cost time-varying without a new
cost: a terminal factor, a swing-foot cost active only while the foot is in the air, a
contact-force cost active only while the foot is on the ground.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rbd_deriv.control.activation import Quadratic
from rbd_deriv.control.residuals import Derivatives, Knots, Residual, knot_factors
from rbd_deriv.exceptions import InputError


class Cost:
    """w_k a(r(x_k, u_k)) over K knots.

    Args:
        residual: The residual r.
        activation: The activation a (:mod:`rbd_deriv.control.activation`), of the same size.
        knot_weights: (K,) non-negative factors w_k, or None for 1 at every knot. Kept, not
            copied: writing into :attr:`knot_weights` changes the cost from the next evaluation.
        name: A label for reports.
    """

    def __init__(self, residual: Residual, activation: Any, knot_weights: np.ndarray | None = None,
                 name: str = "") -> None:
        if activation.nr != residual.nr:
            raise InputError(f"cost {name!r}: activation of size {activation.nr} for a residual "
                             f"of size {residual.nr}")
        if knot_weights is not None:
            knot_weights = np.asarray(knot_weights, dtype=float)
            if knot_weights.ndim != 1 or not np.isfinite(knot_weights).all() \
                    or (knot_weights < 0.0).any():
                raise InputError(f"cost {name!r}: knot_weights must be a vector of finite "
                                 "values >= 0")
        self.residual = residual
        self.activation = activation
        self.knot_weights = knot_weights
        self.name = name or type(residual).__name__

    def _weights(self, count: int) -> np.ndarray | None:
        if self.knot_weights is None:
            return None
        if self.knot_weights.shape[0] != count:
            raise InputError(f"cost {self.name!r} has {self.knot_weights.shape[0]} knot weights "
                             f"for {count} knots")
        return self.knot_weights

    def values(self, knots: Knots) -> np.ndarray:
        """(K,) cost of each knot."""
        values = self.activation.value(self.residual.value(knots))
        weights = self._weights(knots.count)
        return values if weights is None else weights * values

    def add_derivatives(self, knots: Knots, out: Derivatives) -> None:
        """Add the Gauss-Newton derivatives of the cost at the knots to ``out`` (a quadratic
        activation through the residual's one-pass :meth:`~Residual.add_quadratic` when it has one)."""
        weights = self._weights(knots.count)
        if isinstance(self.activation, Quadratic) and self.residual.add_quadratic(
                knots, self.activation.weights, weights, out):
            return
        add_identity = getattr(self.activation, "add_identity", None)
        identity = None if add_identity is None else self.residual.identity(knots, out)
        if identity is not None:
            add_identity(*identity, knot_factors(weights))
            return
        r = self.residual.value(knots)
        gradient, hessian = self.activation.derivatives(r)
        if weights is not None:
            gradient = weights[:, None] * gradient
            hessian = weights[:, None] * hessian
        self.residual.gauss_newton(knots, r, gradient, hessian, out)


def total(costs: Sequence[Cost], knots: Knots) -> float:
    """Sum of the costs over the knots."""
    return float(sum(np.sum(cost.values(knots)) for cost in costs))
