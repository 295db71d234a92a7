"""Tests of rbd_deriv.control.state_space: batched difference/integrate on the manifold and the
Jacobian blocks the solver uses.

Oracles: rd.difference / rd.integrate knot by knot (the definitions), finite differences of the
difference and of the Euler step's integrator taken on the manifold (perturbations through
rd.integrate), the inverse of the right Jacobian of SE(3) by numpy's inverse of the core's
rd.dintegrate_dv, and the identity X0 (+) (X1 (-) X0) == X1.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.state_space import ConfigurationSpace, VectorSpace, state_space
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, bundled_urdf


@pytest.fixture(scope="module")
def solo():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)


def random_states(model, rng, count):
    q = [rd.integrate(model, rd.neutral(model), rng.uniform(-0.8, 0.8, model.nv))
         for _ in range(count)]
    return np.hstack([np.array(q), rng.uniform(-2, 2, (count, model.nv))])


def test_the_space_follows_the_model(solo):
    arm = rd.load_urdf(str(bundled_urdf("rbd_arm7")))
    assert type(state_space(arm)) is VectorSpace
    space = state_space(solo)
    assert isinstance(space, ConfigurationSpace)
    assert (space.nq, space.nv, space.nx, space.ndx, space.block) == (19, 18, 37, 36, 6)
    with pytest.raises(InputError):
        VectorSpace(0)


def test_difference_and_integrate_are_the_core_functions_knot_by_knot(solo):
    rng = np.random.default_rng(0)
    space = ConfigurationSpace(solo)
    X0, X1 = random_states(solo, rng, 4), random_states(solo, rng, 4)
    D = space.difference(X0, X1, np.empty((4, 36)))
    for k in range(4):
        assert_close(D[k, :18], rd.difference(solo, X0[k, :19], X1[k, :19]))
        assert_close(D[k, 18:], X1[k, 19:] - X0[k, 19:])
    back = space.integrate(X0, D, np.empty((4, 37)))
    assert_close(back, X1, what="X0 (+) (X1 (-) X0)")
    # One reference for every knot.
    shared = space.difference(X0[0], X1, np.empty((4, 36)))
    assert_close(shared[2, :18], rd.difference(solo, X0[0, :19], X1[2, :19]))


def test_difference_and_integrate_refuse_what_the_core_functions_refuse(solo):
    rng = np.random.default_rng(4)
    space = ConfigurationSpace(solo)
    X0, X1 = random_states(solo, rng, 3), random_states(solo, rng, 3)
    bad = X1.copy()
    bad[2, 3:7] *= 1.1
    with pytest.raises(InputError, match="X1: the quaternion of state 2"):
        space.difference(X0, bad, np.empty((3, 36)))
    with pytest.raises(InputError, match="X0: the quaternion of state 2"):
        space.difference(bad, X1, np.empty((3, 36)))
    with pytest.raises(InputError, match="X: the quaternion of state 2"):
        space.integrate(bad, np.zeros((3, 36)), np.empty((3, 37)))
    with pytest.raises(InputError, match="difference of states"):
        space.difference(X0, X1, np.empty((3, 35)))
    with pytest.raises(InputError, match="integrate of states"):
        space.integrate(X0, np.zeros((2, 36)), np.empty((3, 37)))


def test_difference_jacobian_block_matches_finite_differences(solo):
    rng = np.random.default_rng(1)
    space = ConfigurationSpace(solo)
    X0, X1 = random_states(solo, rng, 3), random_states(solo, rng, 3)
    D = space.difference(X0, X1, np.empty((3, 36)))
    blocks = space.difference_jacobian_blocks(X0, D)
    eps = 1e-6
    for k in range(3):
        numeric = np.zeros((6, 6))
        for j in range(6):
            step = np.zeros(18)
            step[j] = eps
            plus = rd.difference(solo, X0[k, :19], rd.integrate(solo, X1[k, :19], step))
            minus = rd.difference(solo, X0[k, :19], rd.integrate(solo, X1[k, :19], -step))
            numeric[:, j] = (plus - minus)[:6] / (2 * eps)
        np.testing.assert_allclose(blocks[k], numeric, atol=1e-7)


def test_step_jacobian_blocks_are_the_euler_integrator_derivatives(solo):
    rng = np.random.default_rng(2)
    space = ConfigurationSpace(solo)
    X, X_next = random_states(solo, rng, 2), random_states(solo, rng, 2)
    dt = 0.01
    Jq, Jv = np.zeros((2, 6, 6)), np.zeros((2, 6, 6))
    space.step_jacobian_blocks(X, X_next, dt, Jq, Jv)
    eps = 1e-6
    for k in range(2):
        q, w = X[k, :19], dt * X_next[k, 19:]
        base = rd.integrate(solo, q, w)
        for j in range(6):
            step = np.zeros(18)
            step[j] = eps
            dq = (rd.difference(solo, base, rd.integrate(solo, rd.integrate(solo, q, step), w))
                  - rd.difference(solo, base, rd.integrate(solo, rd.integrate(solo, q, -step), w)))
            dw = (rd.difference(solo, base, rd.integrate(solo, q, w + step))
                  - rd.difference(solo, base, rd.integrate(solo, q, w - step)))
            np.testing.assert_allclose(Jq[k][:, j], dq[:6] / (2 * eps), atol=1e-7)
            np.testing.assert_allclose(Jv[k][:, j], dw[:6] / (2 * eps), atol=1e-7)


def test_normalize_restores_unit_quaternions(solo):
    rng = np.random.default_rng(3)
    space = ConfigurationSpace(solo)
    X = random_states(solo, rng, 3)
    X[:, 3:7] *= 0.97
    space.normalize(X)
    assert_close(np.linalg.norm(X[:, 3:7], axis=1), np.ones(3))


@pytest.mark.parametrize("scale", [0.0, 1e-6, 0.005, 0.0101, 0.05, 0.29, 0.31, 3.0])
def test_step_jacobian_blocks_are_the_core_integrate_jacobians(solo, scale):
    """The batched free-flyer blocks (near zero rotation and across the core's series thresholds
    too) against rd.dintegrate_dv / rd.dintegrate_dq of the whole model, knot by knot."""
    rng = np.random.default_rng(7)
    twists = rng.uniform(-1, 1, (4, 6))
    twists[:, 3:] *= scale / np.linalg.norm(twists[:, 3:], axis=1, keepdims=True)
    twists[0, 3:] *= 30.0  # one knot on the other side of the series threshold than the others
    space = ConfigurationSpace(solo)
    X = random_states(solo, rng, 4)
    X_next = random_states(solo, rng, 4)
    X_next[:, 19:25] = twists / 0.01
    Jq, Jv = np.zeros((4, 6, 6)), np.zeros((4, 6, 6))
    space.step_jacobian_blocks(X, X_next, 0.01, Jq, Jv)
    for k in range(4):
        v = np.r_[twists[k], rng.uniform(-1, 1, 12)]
        assert_close(Jv[k], rd.dintegrate_dv(solo, X[k, :19], v)[:6, :6], rtol=1e-13, what="J_r")
        assert_close(Jq[k], rd.dintegrate_dq(solo, X[k, :19], v)[:6, :6], rtol=1e-13, what="Ad")


def test_difference_blocks_invert_the_right_jacobian(solo):
    """Near zero rotation and just under the series threshold too."""
    rng = np.random.default_rng(1)
    D = np.zeros((5, 36))
    D[:, :6] = rng.uniform(-1.5, 1.5, (5, 6))
    D[0, 3:6] *= 1e-9
    D[1, 3:6] *= 0.009 / np.linalg.norm(D[1, 3:6])
    blocks = ConfigurationSpace(solo).difference_jacobian_blocks(random_states(solo, rng, 5), D)
    q = rd.neutral(solo)
    for k in range(5):
        right = rd.dintegrate_dv(solo, q, D[k, :18])[:6, :6]
        assert_close(blocks[k], np.linalg.inv(right), rtol=1e-12, what=f"knot {k}")
