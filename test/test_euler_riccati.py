"""Tests of rbd_deriv.control.euler_riccati, the Riccati kernels on the Euler step's structure.

Oracle: a plain numpy transcription of the box-constrained Riccati recursion with the dense A and B
(Qxx = Lxx + A^T P A, Qux = Lux + B^T P A, Quu = Luu + B^T P B, Qx = Lx + A^T (p + P d),
Qu = Lu + B^T (p + P d), the stage box QP, K_F = -Quu_FF^-1 Qux_F, P = Qxx + Qux_F^T K_F,
p = Qx + K^T (Quu k + Qu) + Qux^T k), and the rollout dx+ = A dx + B du + d with the controls
clamped. The kernels read only the velocity rows of A and B and the integrator's blocks; they must
give the same gains, feedforward, free sets and value functions to round-off (1e-10 relative), on
random problems with and without a free-flyer block, with and without active bounds, and on free
sets small enough for the substitutions and large enough for the explicit inverse of the factor.
"""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.control import euler_riccati, riccati
from rbd_deriv.control.constants import SMALL_PRODUCT
from rbd_deriv.testing import assert_close
from test_solver import euler_step  # the dense A, B of an Euler step, shared with the solver's tests

TOLERANCE = 1e-10


def random_problem(seed, nv, nu, block, horizon=6, dt=0.05, box=None):
    """Random Euler-step dynamics, gaps, dense stage Hessians (cross terms included), a torque box."""
    rng = np.random.default_rng(seed)
    nx = 2 * nv
    Jq = np.eye(block) + 0.2 * rng.standard_normal((horizon, block, block))
    Jv = np.eye(block) + 0.2 * rng.standard_normal((horizon, block, block))
    A, B = np.zeros((horizon, nx, nx)), np.zeros((horizon, nx, nu))
    for k in range(horizon):
        Fx = np.hstack([0.3 * rng.standard_normal((nv, nv)),
                        np.eye(nv) + 0.1 * rng.standard_normal((nv, nv))])
        A[k], B[k] = euler_step(Fx, rng.standard_normal((nv, nu)), Jq[k], Jv[k], dt)
    Lxx, Lux, Luu = np.zeros((horizon + 1, nx, nx)), np.zeros((horizon, nu, nx)), np.zeros((horizon, nu, nu))
    for k in range(horizon):
        M = rng.standard_normal((nx + nu, nx + nu))
        joint = M @ M.T / (nx + nu) + 0.1 * np.eye(nx + nu)
        Lxx[k], Lux[k], Luu[k] = joint[:nx, :nx], joint[nx:, :nx], joint[nx:, nx:]
    M = rng.standard_normal((nx, nx))
    Lxx[horizon] = M @ M.T / nx + 0.1 * np.eye(nx)
    U = rng.standard_normal((horizon, nu))
    if box is None:
        lower, upper = np.full(nu, -1e9), np.full(nu, 1e9)
    else:
        lower, upper = -box * rng.uniform(0.5, 1.0, nu), box * rng.uniform(0.5, 1.0, nu)
        U = np.clip(U, lower, upper)
    return dict(A=A, B=B, d=0.1 * rng.standard_normal((horizon, nx)), Jq=Jq, Jv=Jv, dt=dt, Lxx=Lxx,
                Lux=Lux, Luu=Luu, Lx=rng.standard_normal((horizon + 1, nx)),
                Lu=rng.standard_normal((horizon, nu)), U=U, lower=lower, upper=upper,
                k_start=0.1 * rng.standard_normal((horizon, nu)))


def reference_backward(problem):
    """The recursion on dense A, B in numpy; returns K, k, free, P_0, p_0, Vx."""
    A, B, d = problem["A"], problem["B"], problem["d"]
    N, nx, nu = B.shape
    P, p = problem["Lxx"][N].copy(), problem["Lx"][N].copy()
    K, k_ff, free = np.zeros((N, nu, nx)), problem["k_start"].copy(), np.zeros((N, nu), bool)
    Vx = np.zeros((N + 1, nx))
    Vx[N] = p
    for k in range(N - 1, -1, -1):
        vector = p + P @ d[k]
        Qxx = problem["Lxx"][k] + A[k].T @ P @ A[k]
        Qux = problem["Lux"][k] + B[k].T @ P @ A[k]
        Quu = problem["Luu"][k] + B[k].T @ P @ B[k]
        Quu = 0.5 * (Quu + Quu.T)
        Qx = problem["Lx"][k] + A[k].T @ vector
        Qu = problem["Lu"][k] + B[k].T @ vector
        lower = problem["lower"] - problem["U"][k]
        upper = problem["upper"] - problem["U"][k]
        index = np.zeros(nu, np.int64)
        _, m, status = riccati.box_qp(Quu, Qu, lower, upper, k_ff[k], free[k], index,
                                      np.zeros((nu, nu)), np.zeros((4, nu)))
        assert status == riccati.STATUS_OK
        F = free[k]
        K[k][np.ix_(F, np.ones(nx, bool))] = -np.linalg.solve(Quu[np.ix_(F, F)], Qux[F])
        P = Qxx + Qux.T @ K[k]
        P = 0.5 * (P + P.T)
        p = Qx + K[k].T @ (Quu @ k_ff[k] + Qu) + Qux.T @ k_ff[k]
        Vx[k] = p
    return K, k_ff, free, P, p, Vx


def kernel_backward(problem):
    A, B = problem["A"], problem["B"]
    N, nx, nu = B.shape
    K, k_ff, free = np.zeros((N, nu, nx)), problem["k_start"].copy(), np.zeros((N, nu), bool)
    P, p, Vx = np.zeros((nx, nx)), np.zeros(nx), np.zeros((N + 1, nx))
    size = max(nx, nu)
    status, _, clamped = euler_riccati.backward_pass(
        A, B, problem["d"], problem["Jq"], problem["Jv"], problem["dt"], problem["Lxx"],
        problem["Lux"], problem["Luu"], problem["Lx"], problem["Lu"], problem["U"], problem["lower"],
        problem["upper"], K, k_ff, free, P, p, Vx, np.zeros((12, size)), np.zeros((4, nx, nx)),
        np.zeros(euler_riccati.flat_size(nx, nu)), np.zeros(nu, np.int64))
    assert status == euler_riccati.STATUS_OK
    return K, k_ff, free, P, p, Vx, clamped


CASES = [
    # (nv, nu, block, box): substitutions on small free sets, the explicit inverse on large ones.
    (7, 7, 0, None),
    (7, 4, 6, None),
    (7, 7, 0, 0.3),
    (9, 5, 6, 0.3),
    (30, 30, 0, None),
    (30, 24, 6, None),
    (30, 30, 0, 0.3),
    (30, 24, 6, 0.3),
]


@pytest.mark.parametrize("nv, nu, block, box", CASES)
def test_backward_pass_equals_the_dense_recursion(nv, nu, block, box):
    problem = random_problem(nv * 100 + nu + block, nv, nu, block, box=box)
    K, k_ff, free, P, p, Vx, clamped = kernel_backward(problem)
    K_ref, k_ref, free_ref, P_ref, p_ref, Vx_ref = reference_backward(problem)
    np.testing.assert_array_equal(free, free_ref)
    if box is None:
        assert clamped == 0
    else:
        assert clamped > 0, "the case is meant to exercise active bounds"
    if nv == 30 and box is None:
        assert nu * nu * 2 * nv > 16 * SMALL_PRODUCT, "every control free: the explicit inverse"
    assert_close(K, K_ref, TOLERANCE, what="feedback gains")
    assert_close(k_ff, k_ref, TOLERANCE, what="feedforward")
    assert_close(P, P_ref, TOLERANCE, what="value Hessian at knot 0")
    assert_close(p, p_ref, TOLERANCE, what="value gradient at knot 0")
    assert_close(Vx, Vx_ref, TOLERANCE, what="value gradients")
    np.testing.assert_array_equal(P, P.T)


@pytest.mark.parametrize("nv, nu, block, box", [(7, 4, 6, 0.3), (30, 30, 0, 0.3)])
def test_forward_pass_equals_the_dense_rollout(nv, nu, block, box):
    problem = random_problem(nv + nu + block, nv, nu, block, box=box)
    K, k_ff, *_ = kernel_backward(problem)
    A, B, d, U = problem["A"], problem["B"], problem["d"], problem["U"]
    N, nx, _ = B.shape
    DX, U_out = np.zeros((N + 1, nx)), np.zeros((N, nu))
    largest = euler_riccati.forward_pass(A, B, d, problem["Jq"], problem["Jv"], problem["dt"], K,
                                         k_ff, U, problem["lower"], problem["upper"], DX, U_out,
                                         np.zeros((2, max(nx, nu))))
    dx, U_ref, DX_ref = np.zeros(nx), np.zeros((N, nu)), np.zeros((N + 1, nx))
    for k in range(N):
        U_ref[k] = np.clip(U[k] + k_ff[k] + K[k] @ dx, problem["lower"], problem["upper"])
        dx = A[k] @ dx + B[k] @ (U_ref[k] - U[k]) + d[k]
        DX_ref[k + 1] = dx
    assert_close(U_out, U_ref, TOLERANCE, what="controls")
    assert_close(DX, DX_ref, TOLERANCE, what="deviations")
    assert largest == pytest.approx(np.abs(U_ref - U).max(), rel=1e-9)
    assert (U_out >= problem["lower"]).all() and (U_out <= problem["upper"]).all()
    assert ((U_out == problem["lower"]) | (U_out == problem["upper"])).any()


def test_backward_pass_reports_non_finite_input():
    problem = random_problem(3, 5, 5, 0)
    problem["Lu"][2, 1] = np.nan
    A, B = problem["A"], problem["B"]
    N, nx, nu = B.shape
    status, _, _ = euler_riccati.backward_pass(
        A, B, problem["d"], problem["Jq"], problem["Jv"], problem["dt"], problem["Lxx"],
        problem["Lux"], problem["Luu"], problem["Lx"], problem["Lu"], problem["U"], problem["lower"],
        problem["upper"], np.zeros((N, nu, nx)), np.zeros((N, nu)), np.zeros((N, nu), bool),
        np.zeros((nx, nx)), np.zeros(nx), np.zeros((N + 1, nx)), np.zeros((12, nx)),
        np.zeros((4, nx, nx)), np.zeros(euler_riccati.flat_size(nx, nu)), np.zeros(nu, np.int64))
    assert status == euler_riccati.STATUS_NOT_FINITE
