"""Tests of rbd_deriv.control.residuals and rbd_deriv.control.cost.

Oracles: the generic Gauss-Newton accumulation (dense Jacobians, numpy products) against the
residuals' structured ones, the state residual's Jacobian against finite differences on the
manifold and its free-flyer block against numpy's inverse of the core's rd.dintegrate_dv, the fold
of the force-space derivatives against the products written out with einsum on every row of the
stack, and the cost value against the activation of the residual by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.activation import Quadratic, QuadraticBarrier
from rbd_deriv.control.cost import Cost, total
from rbd_deriv.control.residuals import (ControlResidual, Derivatives, Knots, Residual,
                                         StateResidual, fold_force_derivatives)
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



@pytest.mark.parametrize("ndx, nu, m", [(8, 2, 6), (36, 12, 12), (100, 44, 12)])
def test_fold_is_the_dense_product_with_the_idle_rows_left_out(ndx, nu, m):
    """F^T L_ff F and F^T L_f at knots with rows of no force (past the closed contacts) and rows of
    no cost, against the products over every row."""
    rng = np.random.default_rng(ndx)
    K = 4
    Fx, Fu = rng.standard_normal((K, m, ndx)), rng.standard_normal((K, m, nu))
    Fx[1, m // 2:] = Fu[1, m // 2:] = 0.0            # a knot with half the contacts open
    G = rng.standard_normal((K, m, m))
    Lff = G @ G.transpose(0, 2, 1)
    Lf = rng.standard_normal((K, m))
    Lff[2, :3], Lff[2, :, :3], Lf[2, :3] = 0.0, 0.0, 0.0  # rows without cost
    Lff[3], Lf[3] = 0.0, 0.0                              # a knot without force cost
    start = [rng.standard_normal(shape) for shape in ((K, ndx, ndx), (K, ndx), (K, nu, nu), (K, nu, ndx),
                                                      (K, nu))]
    out = Derivatives(*(a.copy() for a in start), Lff, Lf)
    fold_force_derivatives(Knots(np.zeros((K, ndx)), dF_dx=Fx, dF_du=Fu), out)
    assert_close(out.Lx, start[1] + np.einsum("kmi,km->ki", Fx, Lf), what="Lx")
    assert_close(out.Lxx, start[0] + np.einsum("kri,krs,ksj->kij", Fx, Lff, Fx), what="Lxx")
    assert_close(out.Lu, start[4] + np.einsum("kma,km->ka", Fu, Lf), what="Lu")
    assert_close(out.Luu, start[2] + np.einsum("kra,krs,ksb->kab", Fu, Lff, Fu), what="Luu")
    assert_close(out.Lux, start[3] + np.einsum("kra,krs,ksj->kaj", Fu, Lff, Fx), what="Lux")


def test_state_products_with_a_hessian_shared_or_per_knot(solo):
    """L_x += J^T a', L_xx += J^T diag(a'') J with J the identity but the free-flyer block (the
    inverse right Jacobian), a'' given once or per knot; knots with zero derivatives on the block
    untouched there."""
    rng = np.random.default_rng(2)
    K, ndx = 4, 36
    r = rng.uniform(-1, 1, (K, ndx))
    gradient = rng.uniform(-1, 1, (K, ndx))
    gradient[1, :6] = 0.0
    J = np.tile(np.eye(ndx), (K, 1, 1))
    for k in range(K):
        right = rd.dintegrate_dv(solo, rd.neutral(solo), r[k, :18])[:6, :6]
        J[k, :6, :6] = np.linalg.inv(right)
    residual = StateResidual(ConfigurationSpace(solo))
    for hessian in (rng.uniform(0, 2, (1, ndx)), rng.uniform(0, 2, (K, ndx))):
        hessian = hessian.copy()
        if hessian.shape[0] == K:
            hessian[1, :6] = 0.0
        out = Derivatives(np.zeros((K, ndx, ndx)), np.zeros((K, ndx)))
        residual.gauss_newton(Knots(states(solo, rng, K)), r, gradient, hessian, out)
        H = np.broadcast_to(hessian, (K, ndx))
        assert_close(out.Lx, np.einsum("kri,kr->ki", J, gradient), what="Lx")
        assert_close(out.Lxx, np.einsum("kri,kr,krj->kij", J, H, J), what="Lxx")
