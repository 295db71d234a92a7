"""Tests of rbd_deriv.control: the fixed-base problem, Riccati kernels, facade, reference, safety.

Oracles:
- the dense KKT system of the equality-constrained LQ problem (numpy solve, obviously correct);
- enumeration of every active set of a small box QP (exact global optimum of a strictly convex QP);
- the KKT conditions of the full box-constrained problem, with the gradient computed densely;
- a test-side numpy transcription of the cost and its derivatives;
- complex-step derivatives for the sinusoid reference;
- the plans of the fixed-base MPC before it became a builder of the package's one problem and solver,
  recorded tick by tick with their inputs (test/data/record_fixed_base_plans.py, run on 8350ccc).
Tolerances follow :func:`rbd_deriv.testing.assert_close` (1e-9 relative to the largest entry).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control import (CommandSource, HeldLinearization, Mode, ModelPredictiveController,
                               MPCProblem, SinusoidReference, SolveStatus, TrajectoryReference,
                               clamp_torque, hold_command, horizon_reference, is_stale,
                               select_command)
from rbd_deriv.control.reference import bound_reference_error
from rbd_deriv.control import riccati
from rbd_deriv.control.observer import DisturbanceObserver
from rbd_deriv.control.prediction import CommandHistory, predict_state
from rbd_deriv.control.dynamics import is_euler_step
from rbd_deriv.control.problem import tracking_problem
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.exceptions import InputError, ModelError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import bundled_urdf


@pytest.fixture(scope="module")
def arm():
    model = rd.load_urdf(str(bundled_urdf("rbd_arm7")))
    return model, model.create_data()


def random_problem(rng, nv=2, horizon=6, box=1e6, state_box=np.inf, limit_weight=0.0,
                   max_iterations=1):
    names = tuple(f"j{i}" for i in range(nv))
    return MPCProblem(
        joint_names=names, horizon=horizon, dt=0.05,
        torque_lower=-box * rng.uniform(0.5, 1.0, nv), torque_upper=box * rng.uniform(0.5, 1.0, nv),
        state_lower=np.full(2 * nv, -state_box), state_upper=np.full(2 * nv, state_box),
        position_weight=rng.uniform(1.0, 10.0, nv), velocity_weight=rng.uniform(0.1, 1.0, nv),
        torque_weight=rng.uniform(0.05, 0.5, nv), terminal_scale=3.0, limit_weight=limit_weight,
        mode=Mode.HELD, max_iterations=max_iterations)


def random_linearization(rng, nv, dt=0.05):
    nx = 2 * nv
    A = np.eye(nx) + 0.1 * rng.standard_normal((nx, nx))
    B = 0.3 * rng.standard_normal((nx, nv))
    return HeldLinearization(A=A, B=B, x=rng.standard_normal(nx), u=rng.standard_normal(nv),
                             x_next=rng.standard_normal(nx), dt=dt)


def dense_problem(problem, lin, x0, X_ref, U_ref):
    """Condensed form: X = S x0 + c + G U (all knots 1..N), cost 0.5 U^T H U + g^T U + const."""
    N, nx, nu = problem.horizon, problem.nx, problem.nv
    A, B = lin.A, lin.B
    offset = lin.x_next - A @ lin.x - B @ lin.u
    G = np.zeros((N * nx, N * nu))
    free = np.zeros(N * nx)
    x = x0.copy()
    for k in range(N):
        x = A @ x + offset
        free[k * nx:(k + 1) * nx] = x
        for j in range(k + 1):
            block = np.linalg.matrix_power(A, k - j) @ B
            G[k * nx:(k + 1) * nx, j * nu:(j + 1) * nu] = block
    w = np.concatenate([problem.position_weight, problem.velocity_weight])
    W = np.diag(np.concatenate([np.tile(w, N - 1), problem.terminal_scale * w]))
    R = np.diag(np.tile(problem.torque_weight, N))
    x_target = X_ref[1:].reshape(-1)
    H = G.T @ W @ G + R
    g = G.T @ W @ (free - x_target) - R @ U_ref.reshape(-1)
    return H, g, G, free


def test_unconstrained_plan_matches_dense_kkt_solution():
    rng = np.random.default_rng(0)
    problem = random_problem(rng, nv=3, horizon=7)
    lin = random_linearization(rng, 3)
    x0 = rng.standard_normal(6)
    X_ref, U_ref = rng.standard_normal((8, 6)), rng.standard_normal((7, 3))
    controller = ModelPredictiveController(problem)
    controller.set_reference(X_ref, U_ref)
    plan = controller.solve(x0, 0.0, lin)
    assert plan.ok and plan.clamped == 0
    H, g, G, free = dense_problem(problem, lin, x0, X_ref, U_ref)
    U_star = np.linalg.solve(H, -g)
    assert_close(plan.torques.reshape(-1), U_star, what="torques")
    assert_close(plan.states[1:].reshape(-1), free + G @ U_star, what="states")
    assert_close(plan.states[0], x0, what="first knot")


def enumerate_box_qp(H, q, lower, upper):
    """Global minimiser of a strictly convex box QP by trying every active set."""
    n = q.size
    best, best_value = None, np.inf
    for assignment in itertools.product((0, 1, 2), repeat=n):
        x = np.zeros(n)
        fixed = np.array([a != 0 for a in assignment])
        for i, a in enumerate(assignment):
            x[i] = lower[i] if a == 1 else upper[i] if a == 2 else 0.0
        f = ~fixed
        if f.any():
            x[f] = np.linalg.solve(H[np.ix_(f, f)], -(q[f] + H[np.ix_(f, fixed)] @ x[fixed]))
        if (x < lower - 1e-12).any() or (x > upper + 1e-12).any():
            continue
        value = 0.5 * x @ H @ x + q @ x
        if value < best_value:
            best, best_value = x, value
    return best


@pytest.mark.parametrize("seed", range(20))
def test_box_qp_finds_the_global_minimiser(seed):
    rng = np.random.default_rng(seed)
    n = 4
    M = rng.standard_normal((n, n))
    H = M @ M.T + 0.1 * np.eye(n)
    q = 3.0 * rng.standard_normal(n)
    lower, upper = -rng.uniform(0.1, 1.0, n), rng.uniform(0.1, 1.0, n)
    x = rng.uniform(lower, upper)
    free = np.zeros(n, dtype=np.bool_)
    index = np.zeros(n, dtype=np.int64)
    L = np.zeros((n, n))
    iterations, m, status = riccati.box_qp(H, q, lower, upper, x, free, index, L, np.zeros((4, n)))
    assert status == riccati.STATUS_OK
    expected = enumerate_box_qp(H, q, lower, upper)
    assert_close(x, expected, what="box QP solution")
    # The returned factor is the Cholesky factor of H on the free set.
    chosen = index[:m]
    assert_close(L[:m, :m] @ L[:m, :m].T, H[np.ix_(chosen, chosen)], what="free-set factor")
    assert m == int(free.sum())


def test_box_qp_reports_an_indefinite_hessian():
    H = np.array([[1.0, 0.0], [0.0, -1.0]])
    x = np.zeros(2)
    _, _, status = riccati.box_qp(H, np.array([1.0, 1.0]), -np.ones(2), np.ones(2), x,
                                  np.zeros(2, dtype=np.bool_), np.zeros(2, dtype=np.int64),
                                  np.zeros((2, 2)), np.zeros((4, 2)))
    assert status == riccati.STATUS_NOT_CONVEX


@pytest.mark.parametrize("seed", range(6))
def test_held_mode_converges_to_the_box_constrained_optimum(seed):
    rng = np.random.default_rng(100 + seed)
    problem = random_problem(rng, nv=2, horizon=3, box=0.4, max_iterations=60)
    lin = random_linearization(rng, 2)
    x0 = 2.0 * rng.standard_normal(4)
    X_ref, U_ref = 2.0 * rng.standard_normal((4, 4)), rng.standard_normal((3, 2))
    controller = ModelPredictiveController(problem)
    controller.set_reference(X_ref, U_ref)
    plan = controller.solve(x0, 0.0, lin)
    assert plan.ok
    H, g, _, _ = dense_problem(problem, lin, x0, X_ref, U_ref)
    lower = np.tile(problem.torque_lower, problem.horizon)
    upper = np.tile(problem.torque_upper, problem.horizon)
    expected = enumerate_box_qp(H, g, lower, upper)
    assert plan.clamped > 0, "the test is meant to exercise active torque bounds"
    assert_close(plan.torques.reshape(-1), expected, what="box-constrained torques")


def reference_cost(problem, X, U, X_ref, U_ref):
    w = np.concatenate([problem.position_weight, problem.velocity_weight])
    scale = np.ones(problem.horizon + 1)
    scale[-1] = problem.terminal_scale
    excess = np.maximum(0, X - problem.state_upper) + np.maximum(0, problem.state_lower - X)
    return (0.5 * np.sum(scale[:, None] * w * (X - X_ref) ** 2)
            + 0.5 * problem.limit_weight * np.sum(excess ** 2)
            + 0.5 * np.sum(problem.torque_weight * (U - U_ref) ** 2))


def held_solver(problem, lin=None, X_ref=None, U_ref=None):
    """The fixed-base problem's solver in held mode, references given, linearization held."""
    controller = ModelPredictiveController(problem)
    if X_ref is not None:
        controller.X_ref[:], controller.U_ref[:] = X_ref, U_ref
    if lin is not None:
        controller.dynamics.hold(lin.A, lin.B, lin.x, lin.u, lin.x_next)
    return controller.solver


def test_cost_and_derivatives_with_soft_state_limits():
    rng = np.random.default_rng(7)
    problem = random_problem(rng, nv=3, horizon=5, state_box=0.8, limit_weight=50.0)
    X_ref, U_ref = rng.standard_normal((6, 6)), rng.standard_normal((5, 3))
    solver = held_solver(problem, X_ref=X_ref, U_ref=U_ref)
    X, U = rng.standard_normal((6, 6)), rng.standard_normal((5, 3))
    assert_close(solver.cost(X, U), reference_cost(problem, X, U, X_ref, U_ref), what="cost")
    solver.X[:], solver.U[:] = X, U
    solver.cost_derivatives()
    weights = np.concatenate([problem.position_weight, problem.velocity_weight])
    scale = np.r_[np.ones(5), problem.terminal_scale][:, None]
    outside = (X > 0.8) | (X < -0.8)
    assert outside.any() and (~outside).any()
    assert_close(solver.Lxx, np.einsum("ki,ij->kij", scale * weights + problem.limit_weight * outside, np.eye(6)),
                 what="state Hessians")
    gradient = scale * weights * (X - X_ref) + problem.limit_weight * (
        np.maximum(0, X - 0.8) - np.maximum(0, -0.8 - X))
    assert_close(solver.Lx, gradient, what="state gradient")
    assert_close(solver.Lu, problem.torque_weight * (U - U_ref), what="torque gradient")
    assert_close(solver.Luu, np.einsum("i,ij->ij", problem.torque_weight, np.eye(3))[None].repeat(5, 0),
                 what="torque Hessians")
    assert not solver.Lux.any()


def test_shift_by_one_step_moves_the_plan_one_knot():
    rng = np.random.default_rng(3)
    problem = random_problem(rng, nv=2, horizon=5)
    solver = held_solver(problem)
    X_prev, U_prev = rng.standard_normal((6, 4)), rng.uniform(-0.1, 0.1, (5, 2))
    x0 = rng.standard_normal(4)
    solver.X[:], solver.U[:] = X_prev, U_prev
    solver.warm_start(problem.dt, x0)
    assert_close(solver.X[0], x0)
    assert_close(solver.X[1:5], X_prev[2:6])
    assert_close(solver.X[5], X_prev[5])
    assert_close(solver.U[:4], U_prev[1:])
    assert_close(solver.U[4], U_prev[4])
    # Half a step later every knot is the mean of its two neighbours.
    solver.X[:], solver.U[:] = X_prev, U_prev
    solver.warm_start(0.5 * problem.dt, x0)
    assert_close(solver.X[1:5], 0.5 * (X_prev[1:5] + X_prev[2:6]))


def euler_linearization(rng, nv, dt):
    """A random held linearization with the semi-implicit Euler step's structure (rd.linearize's):
    position rows [I, 0] + dt times the velocity rows."""
    Fx = np.hstack([0.3 * rng.standard_normal((nv, nv)), np.eye(nv) + 0.1 * rng.standard_normal((nv, nv))])
    Fu = 0.5 * rng.standard_normal((nv, nv))
    A = np.vstack([np.hstack([np.eye(nv), np.zeros((nv, nv))]) + dt * Fx, Fx])
    return HeldLinearization(A=A, B=np.vstack([dt * Fu, Fu]), x=rng.standard_normal(2 * nv),
                             u=rng.standard_normal(nv), x_next=rng.standard_normal(2 * nv), dt=dt)


@pytest.mark.parametrize("seed", range(4))
def test_structured_and_dense_passes_give_the_same_iteration(seed):
    rng = np.random.default_rng(300 + seed)
    box = 0.3 if seed % 2 else 1e6
    problem = random_problem(rng, nv=5, horizon=8, box=box, state_box=1.0, limit_weight=20.0)
    lin = euler_linearization(rng, 5, problem.dt)
    x0 = rng.standard_normal(10)
    X_ref, U_ref = rng.standard_normal((9, 10)), rng.standard_normal((8, 5))
    results, solvers = [], []
    for structured in (True, False):
        solver = held_solver(problem, lin, X_ref, U_ref)
        solver.cold_start(x0)
        solver.k_ff[:] = 0.1
        solver.linearize()
        assert solver.dynamics.euler_step, "an Euler-structured linearization is recognized"
        solver.structured_pass = structured
        assert solver.dense() is not structured
        solver.cost_derivatives()
        status, qp_iterations, clamped = solver.backward()
        results.append((status, qp_iterations, clamped, solver.forward()))
        solvers.append(solver)
    (status, _, clamped, largest), (status_dense, _, clamped_dense, largest_dense) = results
    assert status == status_dense == riccati.STATUS_OK and clamped == clamped_dense
    assert (clamped > 0) == (box < 1.0), "bounds active exactly in the boxed cases"
    structured, dense = solvers
    np.testing.assert_array_equal(structured.free, dense.free)
    assert_close(structured.K, dense.K, 1e-10, what="gains")
    assert_close(structured.k_ff, dense.k_ff, 1e-10, what="feedforward")
    assert_close(structured.U_new, dense.U_new, 1e-10, what="torques")
    assert_close(structured.X_new, dense.X_new, 1e-10, what="states")
    assert_close(structured.DX, dense.DX, 1e-10, what="steps")
    assert largest == pytest.approx(largest_dense, rel=1e-9)


def test_euler_structure_is_recognized(arm):
    model, data = arm
    rng = np.random.default_rng(13)
    q, v, u = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7), rng.uniform(-5, 5, 7)
    A, B = rd.linearize(model, data, q, v, u, 0.01)
    assert is_euler_step(A, B, 0.01)
    assert not is_euler_step(A, B, 0.02), "another step"
    lin = random_linearization(rng, 7, 0.01)
    assert not is_euler_step(lin.A, lin.B, 0.01)
    shifted = B.copy()
    shifted[0, 0] += 1e-6
    assert not is_euler_step(A, shifted, 0.01)
    broken = A.copy()
    broken[3, 9] = np.nan
    assert not is_euler_step(broken, B, 0.01)
    # Re-linearization mode always has Euler steps; held mode when the message has them. The
    # 7-joint arm stays on the dense pass (below STRUCTURED_PASS_MIN_JOINTS).
    problem = MPCProblem.from_model(model, horizon=4, dt=0.01, mode=Mode.RELINEARIZE)
    controller = ModelPredictiveController(problem, model)
    controller.set_reference(np.tile(np.r_[q, v], (5, 1)), np.tile(u, (4, 1)))
    assert controller.solve(np.r_[q, v], 0.0).ok and controller.solver.dynamics.euler_step
    assert not controller.solver.structured_pass and controller.solver.dense()
    held = ModelPredictiveController(MPCProblem.from_model(model, horizon=4, dt=0.01))
    held.set_reference(np.tile(np.r_[q, v], (5, 1)), np.tile(u, (4, 1)))
    held.solve(np.r_[q, v], 0.0, HeldLinearization(lin.A, lin.B, lin.x, lin.u, lin.x_next, 0.01))
    assert not held.solver.dynamics.euler_step and held.solver.dense()


def rollout(model, q, v, U, dt):
    """Semi-implicit Euler of the model under torques U (N, nv): states (N+1, 2 nv)."""
    data = model.create_data()
    X = [np.r_[q, v]]
    for u in U:
        v = v + dt * rd.aba(model, data, q, v, u)
        q = q + dt * v
        X.append(np.r_[q, v])
    return np.array(X)


def test_relinearization_of_a_consistent_rollout_has_no_gaps(arm):
    model, data = arm
    problem = MPCProblem.from_model(model, horizon=8, dt=0.01, mode=Mode.RELINEARIZE)
    controller = ModelPredictiveController(problem, model)
    rng = np.random.default_rng(11)
    q, v = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7)
    U = np.array([rd.gravity_torques(model, data, q) for _ in range(8)]) + rng.uniform(-2, 2, (8, 7))
    solver = controller.solver
    solver.X[:] = rollout(model, q, v, U, 0.01)
    solver.U[:] = U
    solver.linearize()
    assert_close(solver.d, np.zeros_like(solver.d), what="gaps of a consistent rollout")
    for k in (0, 7):
        A, B = rd.linearize(model, data, solver.X[k, :7], solver.X[k, 7:], U[k], 0.01)
        assert_close(solver.dynamics.A[k], A, what=f"A at knot {k}")
        assert_close(solver.dynamics.B[k], B, what=f"B at knot {k}")


def test_both_modes_agree_on_a_one_step_horizon(arm):
    model, data = arm
    rng = np.random.default_rng(12)
    q, v = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7)
    x0 = np.r_[q, v]
    plans = {}
    for mode in Mode:
        problem = MPCProblem.from_model(model, horizon=1, dt=0.01, mode=mode)
        controller = ModelPredictiveController(problem, model)
        U_ref = rd.gravity_torques(model, data, q)[None, :]
        controller.set_reference(np.tile(x0 + 0.05, (2, 1)), U_ref)
        # Cold start: the nominal torque is U_ref, so linearize there.
        A, B = rd.linearize(model, data, q, v, U_ref[0], 0.01)
        lin = HeldLinearization(A.copy(), B.copy(), x0, U_ref[0], data.x_next.copy(), 0.01)
        plans[mode] = controller.solve(x0, 0.0, lin)
    assert_close(plans[Mode.HELD].torques, plans[Mode.RELINEARIZE].torques, what="one-step plans")
    assert_close(plans[Mode.HELD].states, plans[Mode.RELINEARIZE].states, what="one-step states")


def test_plan_respects_torque_limits_and_tracks_in_closed_loop(arm):
    """Mode 2 on the model itself (no plant mismatch) tracks a demanding sinusoid."""
    model, data = arm
    problem = MPCProblem.from_model(model, horizon=20, dt=0.01, mode=Mode.RELINEARIZE)
    controller = ModelPredictiveController(problem, model)
    reference = SinusoidReference(np.zeros(7), 0.4, np.linspace(0.3, 0.6, 7), ramp=0.5)
    X_ref, U_ref = np.zeros((21, 14)), np.zeros((20, 7))
    q, v, t = np.zeros(7), np.zeros(7), 0.0
    errors = []
    for _ in range(200):
        horizon_reference(reference, t, 20, 0.01, model, problem.torque_lower,
                          problem.torque_upper, X_ref, U_ref)
        controller.set_reference(X_ref, U_ref)
        plan = controller.solve(np.r_[q, v], t, None)
        assert plan.ok
        assert (plan.torques >= problem.torque_lower).all()
        assert (plan.torques <= problem.torque_upper).all()
        for _ in range(5):
            v = v + 1e-3 * rd.aba(model, data, q, v, plan.torque)
            q = q + 1e-3 * v
        t += 0.005
        errors.append(q - reference.sample(np.array([t]))[0][0])
    # Without model mismatch, the remaining error comes from the 10 ms prediction step against
    # the 1 ms plant and from the torque cost; 0.01 rad is 2.5 % of the 0.4 rad amplitude.
    assert np.abs(errors).max() < 0.01


def test_a_diverging_linearization_is_reported_and_survived():
    rng = np.random.default_rng(5)
    problem = random_problem(rng, nv=2, horizon=5)
    controller = ModelPredictiveController(problem)
    controller.set_reference(np.zeros((6, 4)), np.zeros((5, 2)))
    lin = random_linearization(rng, 2)
    huge = HeldLinearization(A=lin.A * 1e150, B=lin.B * 1e150, x=lin.x, u=lin.u,
                             x_next=lin.x_next, dt=lin.dt)
    bad = controller.solve(np.ones(4), 0.0, huge)
    assert not bad.ok and bad.status is SolveStatus.NOT_FINITE
    good = controller.solve(np.ones(4), 0.01, lin)
    assert good.ok and np.isfinite(good.torques).all()


def test_bad_inputs_are_refused(arm):
    rng = np.random.default_rng(6)
    problem = random_problem(rng, nv=2, horizon=4)
    controller = ModelPredictiveController(problem)
    lin = random_linearization(rng, 2)
    with pytest.raises(InputError, match="x0"):
        controller.solve(np.array([0.0, np.nan, 0.0, 0.0]), 0.0, lin)
    with pytest.raises(InputError, match="x0"):
        controller.solve(np.zeros(3), 0.0, lin)
    with pytest.raises(InputError, match="needs a linearization"):
        controller.solve(np.zeros(4), 0.0, None)
    with pytest.raises(InputError, match="dt"):
        controller.solve(np.zeros(4), 0.0, HeldLinearization(lin.A, lin.B, lin.x, lin.u,
                                                             lin.x_next, 0.02))
    with pytest.raises(InputError, match="A"):
        controller.solve(np.zeros(4), 0.0, HeldLinearization(lin.A[:3], lin.B, lin.x, lin.u,
                                                             lin.x_next, lin.dt))
    with pytest.raises(InputError, match="U_ref"):
        controller.set_reference(np.zeros((5, 4)), np.full((4, 2), np.inf))
    with pytest.raises(InputError, match="horizon"):
        random_problem(rng, horizon=0)
    with pytest.raises(InputError, match="torque_weight"):
        MPCProblem(joint_names=("a",), horizon=3, dt=0.01, torque_lower=-1, torque_upper=1,
                   state_lower=-np.inf, state_upper=np.inf, position_weight=1,
                   velocity_weight=1, torque_weight=0)
    with pytest.raises(InputError, match="exceeds"):
        MPCProblem(joint_names=("a",), horizon=3, dt=0.01, torque_lower=1, torque_upper=-1,
                   state_lower=-np.inf, state_upper=np.inf, position_weight=1,
                   velocity_weight=1, torque_weight=1)
    model, _ = arm
    with pytest.raises(ModelError, match="needs the robot model"):
        ModelPredictiveController(MPCProblem.from_model(model, mode="relinearize"))


def test_problem_from_model_takes_the_urdf_limits(arm):
    model, _ = arm
    problem = MPCProblem.from_model(model, horizon=20, torque_margin=0.9)
    assert problem.horizon == 20 and problem.nx == 14
    assert_close(problem.torque_upper, 0.9 * np.asarray(model.effort_limit))
    assert_close(problem.torque_lower, -0.9 * np.asarray(model.effort_limit))
    assert_close(problem.state_upper[:7], model.upper_position_limit)
    assert_close(problem.state_upper[7:], model.velocity_limit)


def test_floating_base_is_refused():
    model = rd.load_urdf(str(bundled_urdf("rbd_arm7")), floating_base=True)
    with pytest.raises(ModelError, match="fixed base"):
        MPCProblem.from_model(model)


def test_sinusoid_derivatives_match_complex_step():
    center, amplitude = np.array([0.1, -0.2]), np.array([0.5, 0.3])
    frequency, phase, ramp = np.array([0.4, 0.7]), np.array([0.3, -1.0]), 0.8
    reference = SinusoidReference(center, amplitude, frequency, phase, ramp)

    def position(t):
        s = t / ramp if t.real < ramp else 1.0 + 0j * t
        r = s ** 3 * (10 - 15 * s + 6 * s * s)
        return center + amplitude * r * np.sin(2 * np.pi * frequency * t + phase)

    times = np.array([0.05, 0.3, 0.79, 1.2, 2.5])
    q, v, a = reference.sample(times)
    h = 1e-30
    for i, t in enumerate(times):
        assert_close(q[i], position(complex(t)).real, what="position")
        assert_close(v[i], position(complex(t, h)).imag / h, what="velocity")
        # Fourth-order central difference of the velocity: truncation ~ step^4 |v^(5)| < 1e-9.
        step = 1e-3
        samples = reference.sample(t + step * np.array([-2.0, -1.0, 1.0, 2.0]))[1]
        derivative = (samples[0] - 8 * samples[1] + 8 * samples[2] - samples[3]) / (12 * step)
        np.testing.assert_allclose(a[i], derivative, atol=1e-8)
    q0, v0, _ = reference.sample(np.array([0.0]))
    assert_close(q0[0], center)
    assert_close(v0[0], np.zeros(2))


def test_trajectory_reference_interpolates_and_holds():
    times = np.array([1.0, 2.0, 4.0])
    positions = np.array([[0.0, 1.0], [1.0, 1.0], [3.0, -1.0]])
    reference = TrajectoryReference(times, positions)
    q, v, a = reference.sample(np.array([0.0, 1.5, 3.0, 5.0]))
    assert_close(q, [[0.0, 1.0], [0.5, 1.0], [2.0, 0.0], [3.0, -1.0]])
    assert_close(v, [[0.0, 0.0], [1.0, 0.0], [1.0, -1.0], [0.0, 0.0]])
    assert_close(a, np.zeros((4, 2)))
    with_velocity = TrajectoryReference(times, positions, velocities=[[0, 0], [2, 0], [0, 0]])
    _, v, a = with_velocity.sample(np.array([1.5, 3.0]))
    assert_close(v, [[1.0, 0.0], [1.0, 0.0]])
    assert_close(a, [[2.0, 0.0], [-1.0, 0.0]])
    single = TrajectoryReference([0.0], [[0.3, 0.4]])
    assert_close(single.sample(np.array([7.0]))[0], [[0.3, 0.4]])
    with pytest.raises(InputError, match="increasing"):
        TrajectoryReference([1.0, 1.0], [[0.0], [1.0]])


def test_horizon_reference_feedforward_is_inverse_dynamics(arm):
    model, data = arm
    reference = SinusoidReference(np.full(7, 0.2), 0.3, 0.5, ramp=0.2)
    lower, upper = -np.asarray(model.effort_limit), np.asarray(model.effort_limit)
    X_ref, U_ref = np.zeros((11, 14)), np.zeros((10, 7))
    horizon_reference(reference, 0.5, 10, 0.02, model, lower, upper, X_ref, U_ref)
    q, v, a = reference.sample(np.array([0.5 + 0.02 * 3]))
    assert_close(X_ref[3], np.r_[q[0], v[0]])
    assert_close(U_ref[3], rd.rnea(model, data, q[0], v[0], a[0]))


def test_bound_reference_error_shifts_the_whole_horizon_and_keeps_its_shape():
    model = rd.load_urdf("""<robot name="two"><link name="base"/><link name="a"><inertial><mass value="1"/>
        <inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>
        <link name="b"><inertial><mass value="1"/><inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/>
        </inertial></link>
        <joint name="hinge" type="revolute"><parent link="base"/><child link="a"/><axis xyz="0 0 1"/>
        <limit lower="-3" upper="3" effort="10" velocity="5"/></joint>
        <joint name="wheel" type="continuous"><parent link="a"/><child link="b"/><axis xyz="1 0 0"/>
        <limit effort="10" velocity="5"/></joint></robot>""")
    rng = np.random.default_rng(3)
    X = np.hstack([np.cumsum(rng.normal(0, 0.05, (6, 2)), axis=0), rng.normal(size=(6, 2))])
    q0 = np.array([-0.5, 0.0])
    # The first knot 0.5 rad and (the short way round the wheel) 0.3 rad off; the wheel's reference is written
    # one turn away, where its difference wraps.
    X[:, 0] += q0[0] + 0.5 - X[0, 0]
    X[:, 1] += 2 * np.pi + 0.3 - X[0, 1]
    shifted = X.copy()
    assert bound_reference_error(model, q0, shifted, 0.1)
    error = np.array([rd.difference(model, q0, shifted[0, :2])])[0]
    assert_close(error, [0.1, 0.1])
    # Every knot moved by the same amount, velocities untouched: the reference keeps its shape.
    moved = shifted[:, :2] - X[:, :2]
    assert_close(moved - moved[0], np.zeros_like(moved))
    assert_close(moved[0], [-0.4, -0.2])
    assert_close(shifted[:, 2:], X[:, 2:])
    within = shifted.copy()
    assert not bound_reference_error(model, q0, within, 0.1) and (within == shifted).all()
    assert not bound_reference_error(model, q0, X.copy(), 0.0)


def test_safety_rules():
    lower, upper = np.array([-1.0, -2.0, 0.5]), np.array([1.0, 2.0, 3.0])
    assert_close(clamp_torque(np.array([np.nan, 5.0, np.inf]), lower, upper), [0.0, 2.0, 0.5])
    assert_close(hold_command(np.array([0.5, -9.0, 1.0]), lower, upper), [0.5, -2.0, 1.0])
    assert_close(hold_command(None, lower, upper), [0.0, 0.0, 0.5])
    gravity = np.array([0.2, 0.3, 1.0])
    plan = np.array([0.9, 3.0, 2.0])
    cases = [
        ((plan, True, None, True), CommandSource.NO_STATE),
        ((plan, True, False, True), CommandSource.STALE_STATE),
        ((plan, True, True, False), CommandSource.STALE_LINEARIZATION),
        ((plan, False, True, True), CommandSource.SOLVER_FAILURE),
        ((None, True, True, True), CommandSource.SOLVER_FAILURE),
        ((np.array([np.nan, 0, 1]), True, True, True), CommandSource.NOT_FINITE),
    ]
    for arguments, source in cases:
        command, chosen = select_command(*arguments, gravity, lower, upper)
        assert chosen is source
        assert_close(command, gravity)
    command, chosen = select_command(plan, True, True, True, gravity, lower, upper)
    assert chosen is CommandSource.PLAN
    assert_close(command, [0.9, 2.0, 2.0])
    assert is_stale(None, 10.0, 0.1) and is_stale(9.8, 10.0, 0.1) and is_stale(10.5, 10.0, 0.1)
    assert not is_stale(9.95, 10.0, 0.1) and not is_stale(10.05, 10.0, 0.1)


def test_disturbance_observer_recovers_a_constant_unknown_torque(arm):
    """The plant gets command + d; the observer, told only the command, must find d."""
    model, data = arm
    d_true = np.array([3.0, -2.0, 1.0, 0.5, -0.2, 0.1, 0.05])
    observer = DisturbanceObserver(model, time_constant=0.01, bound=np.full(7, 100.0))
    q, v, dt = np.full(7, 0.2), np.zeros(7), 1e-3
    command = rd.gravity_torques(model, data, q).copy()
    observer.update(q, v, 0.0, None)
    gain = dt / (0.01 + dt)
    for step in range(1, 400):
        # Semi-implicit Euler, as the inverse-dynamics residual assumes: exact up to round-off.
        v = v + dt * rd.aba(model, data, q, v, command + d_true)
        q = q + dt * v
        estimate = observer.update(q, v, step * dt, command).copy()
        if step == 1:
            assert_close(estimate, gain * d_true, what="first filtered residual")
    assert_close(estimate, d_true * (1.0 - (1.0 - gain) ** 399), what="converged estimate")
    # A bound caps what a fault could make the MPC add.
    capped = DisturbanceObserver(model, time_constant=1e-6, bound=np.full(7, 0.1))
    capped.update(np.zeros(7), np.zeros(7), 0.0, None)
    assert np.abs(capped.update(np.zeros(7), np.ones(7), 1e-3, np.zeros(7))).max() <= 0.1


def test_the_plan_compensates_a_known_disturbance(arm):
    """Planning with disturbance d gives torques d lower than without, in the unconstrained case."""
    model, data = arm
    problem = MPCProblem.from_model(model, horizon=10, dt=0.01, mode=Mode.RELINEARIZE)
    rng = np.random.default_rng(21)
    q, v = rng.uniform(-0.5, 0.5, 7), rng.uniform(-0.5, 0.5, 7)
    X_ref = np.tile(np.r_[q + 0.02, np.zeros(7)], (11, 1))
    U_ref = np.tile(rd.gravity_torques(model, data, q), (10, 1))
    d = rng.uniform(-1.0, 1.0, 7)
    plans = []
    for disturbance in (None, d):
        controller = ModelPredictiveController(problem, model)
        controller.set_reference(X_ref, U_ref)
        plans.append(controller.solve(np.r_[q, v], 0.0, None, disturbance))
    assert plans[0].clamped == 0 and plans[1].clamped == 0
    assert_close(plans[1].torques, plans[0].torques - d, what="compensated torques")
    assert_close(plans[1].states, plans[0].states, what="same predicted motion")


def test_prediction_matches_an_independent_engine_under_delayed_commands(arm):
    """predict_state against MuJoCo (its own model and integrator) fed the same delayed commands."""
    pytest.importorskip("mujoco")
    from rbd_deriv.sim import make_plant

    model, data = arm
    rng = np.random.default_rng(31)
    q0 = np.array([0.2, -0.4, 0.3, -1.0, 0.5, 0.6, -0.2])
    v0 = rng.uniform(-0.5, 0.5, 7)
    history = CommandHistory()
    gravity = rd.gravity_torques(model, data, q0).copy()
    for sent in (-0.02, -0.01, -0.005, 0.0, 0.005, 0.01):
        history.record(sent, gravity + rng.uniform(-2.0, 2.0, 7))
    delay, span = 0.003, 0.015
    plant = make_plant("mujoco", str(bundled_urdf("rbd_arm7")), model=model)
    plant.reset(q0, v0)
    for k in range(15):
        plant.step(history.torque_at(k * 1e-3 - delay))
    q, v, reached = predict_state(model, data, q0, v0, 0.0, span, history, delay)
    assert reached == span
    assert_close(q, plant.q, what="predicted positions")
    assert_close(v, plant.v, what="predicted velocities")
    # A disturbance acts like extra torque; nothing known to predict with leaves the state as is.
    d = rng.uniform(-1.0, 1.0, 7)
    shifted = CommandHistory()
    for sent in (-0.02, -0.01, -0.005, 0.0, 0.005, 0.01):
        shifted.record(sent, history.torque_at(sent) + d)
    assert_close(predict_state(model, data, q0, v0, 0.0, span, history, delay, d)[1],
                 predict_state(model, data, q0, v0, 0.0, span, shifted, delay)[1], what="with d")
    for empty in (CommandHistory(), history):
        start = 0.0 if empty is not history else -1.0  # before the first command
        q_same, v_same, reached = predict_state(model, data, q0, v0, start, span, empty, delay)
        assert reached == start
        np.testing.assert_array_equal(q_same, q0)
        np.testing.assert_array_equal(v_same, v0)
    np.testing.assert_array_equal(predict_state(model, data, q0, v0, 0.0, 0.0, history)[0], q0)
    # The torque acting at a time is the last one sent at or before it.
    first, last = history.torque_at(-0.02), history.torque_at(0.01)
    np.testing.assert_array_equal(history.torque_at(-0.015), first)
    np.testing.assert_array_equal(history.torque_at(1.0), last)
    assert history.torque_at(-0.0201) is None
    short = CommandHistory(capacity=2)
    for sent in (0.0, 1.0, 2.0):
        short.record(sent, np.full(7, sent))
    assert short.torque_at(0.5) is None and short.torque_at(1.5)[0] == 1.0


def test_observer_does_not_learn_across_a_gap(arm):
    """A stalled loop sees two states far apart: their difference says nothing about the torque."""
    model, _ = arm
    observer = DisturbanceObserver(model, time_constant=0.01, bound=np.full(7, 100.0), max_gap=0.02)
    observer.update(np.zeros(7), np.zeros(7), 0.0, None)
    assert np.abs(observer.update(np.zeros(7), np.ones(7), 0.05, np.zeros(7))).max() == 0.0
    assert np.abs(observer.update(np.zeros(7), np.full(7, 1.01), 0.051, np.zeros(7))).max() > 0.0
    with pytest.raises(InputError, match="max_gap"):
        DisturbanceObserver(model, time_constant=0.01, bound=np.full(7, 1.0), max_gap=0.0)


PLANS = Path(__file__).resolve().parent / "data" / "fixed_base_plans"


@pytest.mark.parametrize("case", sorted(path.stem for path in PLANS.glob("*.npz")))
def test_the_same_plans_as_the_fixed_base_stack_it_replaces(case):
    """Tick by tick, the recorded inputs give the recorded plans (1e-9 relative to each array's largest
    entry) with the same statuses, iteration counts and clamped torques: a closed loop's warm starts (late
    ticks read the previous plan between knots), both modes, both Riccati passes, binding boxes,
    disturbances, three iterations per tick. Every recorded tick solved: the failures are the subject of
    the tests above (an indefinite Hessian, a diverging linearization)."""
    sys.path.insert(0, str(PLANS.parent))
    try:
        from record_fixed_base_plans import load
    finally:
        sys.path.pop(0)
    recorded = np.load(PLANS / f"{case}.npz")
    robot, mode, horizon, margin, iterations = (str(value) for value in recorded["case"])
    model = load(robot)
    problem = MPCProblem.from_model(model, horizon=int(horizon), dt=0.01, mode=Mode(mode),
                                    torque_margin=float(margin), max_iterations=int(iterations),
                                    default_effort=10.0)
    controller = ModelPredictiveController(problem, model)
    ticks = len(recorded["time"])
    assert ticks >= 6
    for t in range(ticks):
        linearization = None
        if "A" in recorded:
            linearization = HeldLinearization(recorded["A"][t], recorded["B"][t], recorded["x_lin"][t],
                                              recorded["u_lin"][t], recorded["x_next"][t], 0.01)
        controller.set_reference(recorded["X_ref"][t], recorded["U_ref"][t])
        plan = controller.solve(recorded["x0"][t], float(recorded["time"][t]), linearization,
                                recorded["disturbance"][t], evaluate_cost=True)
        status = str(recorded["status"][t])
        assert plan.status.value == status, f"tick {t}"
        assert (plan.iterations, plan.clamped) == (recorded["iterations"][t], recorded["clamped"][t]), f"tick {t}"
        if status == "ok":
            for name in ("states", "torques", "gain"):
                assert_close(getattr(plan, name), recorded[name][t], what=f"{name} at tick {t}")
            assert plan.cost == pytest.approx(float(recorded["cost"][t]), rel=1e-9)
