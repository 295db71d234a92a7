"""Tests of rbd_deriv.control.activation: values against their formulas, derivatives against
central differences of the values, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.control.activation import Quadratic, QuadraticBarrier, RelaxedLogBarrier
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close


def numeric_derivatives(activation, r, eps=1e-4):
    """Central differences of the value entry by entry (activations are sums over entries);
    truncation below 1e-6 for these functions away from their kinks."""
    gradient = np.zeros_like(r)
    hessian = np.zeros_like(r)
    for i in range(r.shape[1]):
        step = np.zeros_like(r)
        step[:, i] = eps
        plus, zero, minus = (activation.value(r + step), activation.value(r),
                             activation.value(r - step))
        gradient[:, i] = (plus - minus) / (2 * eps)
        hessian[:, i] = (plus - 2 * zero + minus) / eps ** 2
    return gradient, hessian


@pytest.mark.parametrize("make", [
    lambda: Quadratic([1.0, 2.0, 0.5, 3.0], 4),
    lambda: QuadraticBarrier([-0.5, -np.inf, 0.0, -1.0], [0.5, 1.0, np.inf, 1.0], [2.0, 1.0, 3.0, 0.5]),
    lambda: RelaxedLogBarrier(0.3, 0.2, 4),
])
def test_derivatives_match_finite_differences(make):
    activation = make()
    rng = np.random.default_rng(0)
    # Away from the kinks of the barrier (where the Hessian jumps).
    r = rng.uniform(-2.0, 2.0, (6, 4))
    r[np.abs(r - 0.2) < 0.05] += 0.1
    for bound in (-0.5, 0.5, 0.0, -1.0, 1.0):
        r[np.abs(r - bound) < 0.01] += 0.03
    gradient, hessian = activation.derivatives(r)
    numeric_gradient, numeric_hessian = numeric_derivatives(activation, r)
    np.testing.assert_allclose(gradient, numeric_gradient, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.broadcast_to(hessian, r.shape), numeric_hessian, rtol=1e-5, atol=1e-5)


def test_values_follow_their_formulas():
    r = np.array([[0.3, -2.0, 1.5]])
    assert_close(Quadratic([1.0, 2.0, 4.0], 3).value(r), [0.5 * (0.09 + 8.0 + 9.0)])
    barrier = QuadraticBarrier([0.0, -1.0, -np.inf], [1.0, 1.0, 1.0], 2.0)
    assert_close(barrier.value(r), [0.5 * 2.0 * (1.0 + 0.25)])
    log = RelaxedLogBarrier(0.5, 0.1, 3)
    inside = 0.5 * (-np.log(0.3) - np.log(1.5))
    s = (-2.0 - 0.1) / 0.1
    relaxed = 0.5 * (-np.log(0.1) - s + 0.5 * s * s)
    assert_close(log.value(r), [inside + relaxed])
    # The relaxation joins the logarithm smoothly: value and slope agree at delta.
    at = np.array([[0.1 - 1e-12], [0.1 + 1e-12]])
    one = RelaxedLogBarrier(1.0, 0.1, 1)
    assert_close(one.value(at)[0], one.value(at)[1], rtol=1e-9)
    assert_close(one.derivatives(at)[0][0], one.derivatives(at)[0][1], rtol=1e-9)


def test_bad_parameters_are_refused():
    with pytest.raises(InputError):
        Quadratic([1.0, -1.0], 2)
    with pytest.raises(InputError):
        Quadratic([1.0, 1.0, 1.0], 2)
    with pytest.raises(InputError):
        QuadraticBarrier([1.0], [0.0], 1.0)
    with pytest.raises(InputError):
        QuadraticBarrier([np.nan], [0.0], 1.0)
    with pytest.raises(InputError):
        RelaxedLogBarrier(0.0, 0.1, 2)
    with pytest.raises(InputError):
        RelaxedLogBarrier(1.0, -0.1, 2)


def test_barrier_on_an_identity_residual_adds_what_the_general_path_adds():
    """QuadraticBarrier.add_identity (a state residual on a vector space, a reference per knot or shared, knot
    weights with a zero) against value, derivatives and the residual's gauss_newton taken separately."""
    from rbd_deriv.control.cost import Cost
    from rbd_deriv.control.residuals import Derivatives, Knots, StateResidual
    from rbd_deriv.control.state_space import VectorSpace
    rng = np.random.default_rng(5)
    space, K = VectorSpace(3), 5
    X = rng.uniform(-2.0, 2.0, (K, 6))
    lower, upper = -np.ones(6), np.r_[np.ones(3), np.full(3, np.inf)]
    for reference in (rng.uniform(-0.5, 0.5, (K, 6)), rng.uniform(-0.5, 0.5, 6)):
        for knot_weights in (None, np.array([1.0, 0.0, 2.0, 0.5, 3.0])):
            residual = StateResidual(space, reference)
            barrier = QuadraticBarrier(lower, upper, rng.uniform(1.0, 3.0, 6))
            fast = Derivatives(np.zeros((K, 6, 6)), np.zeros((K, 6)))
            Cost(residual, barrier, knot_weights).add_derivatives(Knots(X), fast)
            general = Derivatives(np.zeros((K, 6, 6)), np.zeros((K, 6)))
            r = residual.value(Knots(X))
            gradient, hessian = barrier.derivatives(r)
            factors = np.ones(K) if knot_weights is None else knot_weights
            residual.gauss_newton(Knots(X), r, factors[:, None] * gradient, factors[:, None] * hessian, general)
            assert np.abs(general.Lx).max() > 0.0, "some entries pass their bounds"
            assert_close(fast.Lx, general.Lx, what="gradient")
            assert_close(fast.Lxx, general.Lxx, what="Hessian")
