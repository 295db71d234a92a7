"""Tests of rbd_deriv.control.residuals and rbd_deriv.control.cost.

Oracles: the generic Gauss-Newton accumulation (dense Jacobians, numpy products) against the
residuals' structured ones, the state residual's Jacobian against finite differences on the
manifold, and the cost value against the activation of the residual by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.activation import Quadratic, QuadraticBarrier
from rbd_deriv.control.cost import Cost, total
from rbd_deriv.control.residuals import (ControlResidual, Derivatives, Knots, Residual,
                                         StateResidual)
from rbd_deriv.control.state_space import ConfigurationSpace, VectorSpace
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


@pytest.fixture(scope="module")
def solo():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)


def states(model, rng, count, spread=0.8):
    q = [rd.integrate(model, rd.neutral(model), rng.uniform(-spread, spread, model.nv))
         for _ in range(count)]
    return np.hstack([np.array(q), rng.uniform(-2, 2, (count, model.nv))])


def empty(K, ndx, nu):
    return Derivatives(np.zeros((K, ndx, ndx)), np.zeros((K, ndx)), np.zeros((K, nu, nu)),
                       np.zeros((K, nu, ndx)), np.zeros((K, nu)))


def test_state_residual_jacobian_matches_finite_differences(solo):
    rng = np.random.default_rng(0)
    space = ConfigurationSpace(solo)
    reference = states(solo, rng, 2)
    residual = StateResidual(space, reference)
    X = states(solo, rng, 2)
    J, none = residual.jacobians(Knots(X))
    assert none is None
    eps = 1e-6
    for k in range(2):
        for j in (0, 2, 4, 10, 20):
            step = np.zeros(36)
            step[j] = eps
            plus = space.integrate(X[k:k + 1], step[None], np.empty((1, 37)))
            minus = space.integrate(X[k:k + 1], -step[None], np.empty((1, 37)))
            numeric = (StateResidual(space, reference[k:k + 1]).value(Knots(plus))
                       - StateResidual(space, reference[k:k + 1]).value(Knots(minus))) / (2 * eps)
            np.testing.assert_allclose(J[k, :, j], numeric[0], atol=1e-7)


@pytest.mark.parametrize("floating", [False, True])
def test_structured_gauss_newton_equals_the_dense_products(solo, floating):
    rng = np.random.default_rng(1)
    model = solo if floating else rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]))
    space = ConfigurationSpace(model) if floating else VectorSpace(model.nv)
    K, nu = 3, 12
    X = states(model, rng, K)
    U = rng.standard_normal((K, nu))
    knots = Knots(X, U)
    for residual, activation in (
            (StateResidual(space, states(model, rng, K)), Quadratic(rng.uniform(0, 2, space.ndx), space.ndx)),
            (StateResidual(space, space.zero()),
             QuadraticBarrier(-0.3 * np.ones(space.ndx), 0.3 * np.ones(space.ndx), 5.0)),
            (ControlResidual(space, nu, rng.standard_normal(nu)), Quadratic(rng.uniform(0, 2, nu), nu))):
        r = residual.value(knots)
        gradient, hessian = activation.derivatives(r)
        weights = rng.uniform(0.5, 2.0, K)
        gradient, hessian = weights[:, None] * gradient, weights[:, None] * hessian
        structured, dense = empty(K, space.ndx, nu), empty(K, space.ndx, nu)
        residual.gauss_newton(knots, r, gradient, hessian, structured)
        Residual.gauss_newton(residual, knots, r, gradient, hessian, dense)
        for name in ("Lxx", "Lx", "Luu", "Lux", "Lu"):
            assert_close(getattr(structured, name), getattr(dense, name), what=name)


def test_cost_is_the_weighted_activation_of_the_residual(solo):
    rng = np.random.default_rng(2)
    space = ConfigurationSpace(solo)
    X = states(solo, rng, 4)
    reference = states(solo, rng, 4)
    weights = rng.uniform(0.1, 3.0, space.ndx)
    knot_weights = np.array([1.0, 0.0, 2.0, 0.5])
    cost = Cost(StateResidual(space, reference), Quadratic(weights, space.ndx), knot_weights)
    expected = [0.5 * knot_weights[k] * np.sum(weights * np.r_[
        rd.difference(solo, reference[k, :19], X[k, :19]), X[k, 19:] - reference[k, 19:]] ** 2)
        for k in range(4)]
    assert_close(cost.values(Knots(X)), expected)
    assert_close(total([cost, cost], Knots(X)), 2 * sum(expected))
    with pytest.raises(InputError, match="knot weights"):
        Cost(StateResidual(space, reference), Quadratic(1.0, space.ndx), np.ones(3)).values(Knots(X))
    with pytest.raises(InputError, match="activation of size"):
        Cost(StateResidual(space), Quadratic(1.0, 3))
    with pytest.raises(InputError, match="knot_weights"):
        Cost(StateResidual(space), Quadratic(1.0, space.ndx), np.array([1.0, -1.0]))
    with pytest.raises(InputError, match="knots"):
        StateResidual(space, reference).value(Knots(X[:2]))


@pytest.mark.parametrize("floating", [False, True])
def test_one_pass_quadratics_equal_the_general_path(solo, floating):
    """Cost.add_derivatives through the residuals' add_quadratic against value, activation and
    gauss_newton taken separately (the general path), with and without knot weights (one zero)."""
    from rbd_deriv.control.contact_force import ForceStackResidual
    rng = np.random.default_rng(3)
    model = solo if floating else rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]))
    space = ConfigurationSpace(model) if floating else VectorSpace(model.nv)
    K, nu, m = 4, 12, 6
    knots = Knots(states(model, rng, K), rng.standard_normal((K, nu)), rng.standard_normal((K, m)),
                  rng.standard_normal((K, m, space.ndx)), rng.standard_normal((K, m, nu)))
    residuals = (StateResidual(space, states(model, rng, K)), StateResidual(space, states(model, rng, 1)[0]),
                 ControlResidual(space, nu, rng.standard_normal(nu)),
                 ControlResidual(space, nu, rng.standard_normal((K, nu))),
                 ForceStackResidual(space, nu, rng.standard_normal((K, m))))
    for residual in residuals:
        for knot_weights in (None, np.array([1.0, 0.0, 2.5, 0.3])):
            activation = Quadratic(rng.uniform(0, 2, residual.nr), residual.nr)
            outs = []
            for fused in (True, False):
                out = Derivatives(*(np.zeros(shape) for shape in (
                    (K, space.ndx, space.ndx), (K, space.ndx), (K, nu, nu), (K, nu, space.ndx),
                    (K, nu), (K, m, m), (K, m))))
                if fused:
                    Cost(residual, activation, knot_weights).add_derivatives(knots, out)
                else:
                    r = residual.value(knots)
                    gradient, hessian = activation.derivatives(r)
                    factors = np.ones(K) if knot_weights is None else knot_weights
                    residual.gauss_newton(knots, r, factors[:, None] * gradient,
                                          factors[:, None] * hessian, out)
                outs.append(out)
            for name in ("Lxx", "Lx", "Luu", "Lux", "Lu", "Lff", "Lf"):
                assert_close(getattr(outs[0], name), getattr(outs[1], name),
                             what=f"{type(residual).__name__} {name}")
    # Both spaces have a one-pass form (a compiled kernel on the model's configuration space, the identity
    # Jacobian's on a plain vector space): the comparison above tested it against the general path.
    assert residuals[0].add_quadratic(knots, np.ones(space.ndx), None, empty(K, space.ndx, nu))
