"""Tests of rbd_deriv.control.solver and its kernels (rbd_deriv.control.euler_riccati).

Oracles:
- the dense KKT system of the equality-constrained LQ problem (numpy solve), with dense stage
  Hessians (cross terms included), gaps, and the Euler step's structure with free-flyer blocks;
  its sensitivity to the initial deviation gives the feedback gains;
- rd.linearize: its A, B have the structure the backward pass assumes;
- single shooting through rd.linearize on a floating-base problem (solo12 in zero gravity,
  posture and torque costs): the converged plan closes its gaps, costs what its rollout costs,
  and the central-difference gradient of the rollout's cost vanishes there.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control import euler_riccati
from rbd_deriv.control.activation import Quadratic
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import FreeDynamics
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.residuals import ControlResidual, Knots, StateResidual
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.control.state_space import ConfigurationSpace, VectorSpace, state_space
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.finite_diff import central_difference
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


def euler_step(Fx, Fu, Jq, Jv, dt):
    """Dense A, B of the step v+ = Fx dx + Fu du, dx+ = [Jq dq + dt Jv dv+; dv+]."""
    nv = Fx.shape[0]
    b = Jq.shape[0]
    Jq_full, Jv_full = np.eye(nv), np.eye(nv)
    Jq_full[:b, :b], Jv_full[:b, :b] = Jq, Jv
    T = np.block([[Jq_full, dt * Jv_full], [np.zeros((nv, nv)), np.eye(nv)]])
    A_bar = np.vstack([np.hstack([np.eye(nv), np.zeros((nv, nv))]), Fx])
    B_bar = np.vstack([np.zeros((nv, Fu.shape[1])), Fu])
    return T @ A_bar, T @ B_bar


def dense_lq(A, B, d, Lxx, Lux, Luu, Lx, Lu, dx0):
    """Solve the LQ problem over (dx_1..N, du_0..N-1) with dx_0 given, by its KKT system."""
    N, nx, nu = B.shape[0], B.shape[1], B.shape[2]
    nz = N * nu + N * nx
    H = np.zeros((nz, nz))
    g = np.zeros(nz)
    u = lambda k: slice(k * nu, (k + 1) * nu)                      # noqa: E731
    x = lambda k: slice(N * nu + (k - 1) * nx, N * nu + k * nx)    # noqa: E731, k >= 1
    for k in range(N):
        H[u(k), u(k)] += Luu[k]
        g[u(k)] += Lu[k]
        if k == 0:
            g[u(0)] += Lux[0] @ dx0
        else:
            H[x(k), x(k)] += Lxx[k]
            H[u(k), x(k)] += Lux[k]
            H[x(k), u(k)] += Lux[k].T
            g[x(k)] += Lx[k]
    H[x(N), x(N)] += Lxx[N]
    g[x(N)] += Lx[N]
    C = np.zeros((N * nx, nz))
    c = np.zeros(N * nx)
    for k in range(N):
        rows = slice(k * nx, (k + 1) * nx)
        C[rows, x(k + 1)] = np.eye(nx)
        C[rows, u(k)] = -B[k]
        if k == 0:
            c[rows] = A[0] @ dx0 + d[0]
        else:
            C[rows, x(k)] = -A[k]
            c[rows] = d[k]
    kkt = np.block([[H, C.T], [C, np.zeros((N * nx, N * nx))]])
    z = np.linalg.solve(kkt, np.concatenate([-g, c]))[:nz]
    return z[:N * nu].reshape(N, nu), np.vstack([dx0, z[N * nu:].reshape(N, nx)])


def random_spd(rng, n, floor=0.1):
    M = rng.standard_normal((n, n))
    return M @ M.T / n + floor * np.eye(n)


@pytest.mark.parametrize("block", [0, 6])
def test_riccati_pass_solves_the_dense_lq_problem(block):
    rng = np.random.default_rng(block)
    N, nv, nu, dt = 5, 8, 5, 0.05
    nx = 2 * nv
    Fx = np.hstack([rng.standard_normal((nv, nv)), np.eye(nv) + 0.1 * rng.standard_normal((nv, nv))])
    Jq = np.eye(block) + 0.2 * rng.standard_normal((N, block, block))
    Jv = np.eye(block) + 0.2 * rng.standard_normal((N, block, block))
    A, B = np.zeros((N, nx, nx)), np.zeros((N, nx, nu))
    for k in range(N):
        Fu = rng.standard_normal((nv, nu))
        A[k], B[k] = euler_step(Fx + 0.1 * rng.standard_normal(Fx.shape), Fu, Jq[k], Jv[k], dt)
    d = 0.1 * rng.standard_normal((N, nx))
    # Dense stage Hessians with cross terms, jointly positive definite.
    Lxx, Lux, Luu = np.zeros((N + 1, nx, nx)), np.zeros((N, nu, nx)), np.zeros((N, nu, nu))
    for k in range(N):
        joint = random_spd(rng, nx + nu)
        Lxx[k], Lux[k], Luu[k] = joint[:nx, :nx], joint[nx:, :nx], joint[nx:, nx:]
    Lxx[N] = random_spd(rng, nx)
    Lx, Lu = rng.standard_normal((N + 1, nx)), rng.standard_normal((N, nu))
    U = np.zeros((N, nu))
    lower, upper = np.full(nu, -1e9), np.full(nu, 1e9)
    K, k_ff, free = np.zeros((N, nu, nx)), np.zeros((N, nu)), np.ones((N, nu), bool)
    size = max(nx, nu)
    status, _, clamped = euler_riccati.backward_pass(
        A, B, d, Jq, Jv, dt, Lxx, Lux, Luu, Lx, Lu, U, lower, upper, K, k_ff, free,
        np.zeros((nx, nx)), np.zeros(nx), np.zeros((N + 1, nx)), np.zeros((12, size)),
        np.zeros((4, nx, nx)),
        np.zeros(euler_riccati.flat_size(nx, nu)), np.zeros(nu, np.int64))
    assert status == euler_riccati.STATUS_OK and clamped == 0
    DX, U_out = np.zeros((N + 1, nx)), np.zeros((N, nu))
    euler_riccati.forward_pass(A, B, d, Jq, Jv, dt, K, k_ff, U, lower, upper, DX, U_out,
                         np.zeros((2, size)))
    U_star, X_star = dense_lq(A, B, d, Lxx, Lux, Luu, Lx, Lu, np.zeros(nx))
    assert_close(U_out, U_star, what="controls")
    assert_close(DX, X_star, what="state deviations")
    # Feedback: the first control's sensitivity to the initial deviation.
    for j in (0, 3, nx - 1):
        dx0 = np.zeros(nx)
        dx0[j] = 1.0
        shifted, _ = dense_lq(A, B, d, Lxx, Lux, Luu, Lx, Lu, dx0)
        assert_close(K[0] @ dx0, shifted[0] - U_star[0], what=f"K column {j}")


@pytest.fixture(scope="module")
def solo_zero_gravity():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True, gravity=[0.0, 0.0, 0.0])


def test_linearize_has_the_euler_structure_the_solver_reads(solo_zero_gravity):
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    data = model.create_data()
    space = ConfigurationSpace(model)
    rng = np.random.default_rng(4)
    q = rd.integrate(model, rd.neutral(model), rng.uniform(-0.5, 0.5, 18))
    v, tau = rng.uniform(-1, 1, 18), rng.uniform(-2, 2, 18)
    dt = 0.01
    A, B = rd.linearize(model, data, q, v, tau, dt)
    X_next = data.x_next.copy()[None]
    Jq, Jv = np.zeros((1, 6, 6)), np.zeros((1, 6, 6))
    space.step_jacobian_blocks(np.r_[q, v][None], X_next, dt, Jq, Jv)
    A_rebuilt, B_rebuilt = euler_step(A[18:], B[18:], Jq[0], Jv[0], dt)
    assert_close(A_rebuilt, A, what="A from its velocity rows")
    assert_close(B_rebuilt, B, what="B from its velocity rows")


def posture_problem(model, horizon=20, dt=0.02):
    """Reach a posture of the free-floating solo12 (no gravity): state and torque costs."""
    space = state_space(model)
    rng = np.random.default_rng(1)
    target = rd.integrate(model, rd.neutral(model),
                          np.r_[0.1, -0.05, 0.02, 0.2, -0.1, 0.3, rng.uniform(-0.5, 0.5, 12)])
    x_ref = np.r_[target, np.zeros(18)]
    state_weight = np.r_[np.full(6, 100.0), np.full(12, 10.0), np.full(18, 0.1)]
    running = [Cost(StateResidual(space, x_ref), Quadratic(state_weight, 36), name="posture"),
               Cost(ControlResidual(space, 12), Quadratic(1.0, 12), name="torque")]
    terminal = [Cost(StateResidual(space, x_ref), Quadratic(10.0 * state_weight, 36), name="final")]
    effort = np.full(12, 1e3)
    ocp = OptimalControlProblem(space, horizon, dt, -effort, effort, running, terminal,
                                FreeDynamics(model, dt))
    x0 = np.r_[rd.integrate(model, rd.neutral(model), rng.uniform(-0.2, 0.2, 18)),
               rng.uniform(-0.5, 0.5, 18)]
    return ocp, x0


def shooting_cost(model, ocp, x0, U):
    """Cost of the rollout of U (actuated torques) from x0 through rd.linearize's Euler steps."""
    data = model.create_data()
    X = [x0]
    for u in U:
        rd.linearize(model, data, X[-1][:model.nq], X[-1][model.nq:], np.r_[np.zeros(6), u], ocp.dt)
        X.append(data.x_next.copy())
    X = np.array(X)
    return (sum(np.sum(c.values(Knots(X[:-1], U))) for c in ocp.running_costs)
            + sum(np.sum(c.values(Knots(X[-1:]))) for c in ocp.terminal_costs))


def test_floating_base_posture_problem_converges_to_a_stationary_point(solo_zero_gravity):
    """Oracles: the converged plan closes its gaps, its cost is the rollout's, and the gradient of
    the single-shooting cost (central differences of rollouts of rd.linearize) vanishes there."""
    model = solo_zero_gravity
    ocp, x0 = posture_problem(model, horizon=8)
    solver = RiccatiSolver(ocp)
    solver.cold_start(x0)
    U0 = solver.U.copy()
    result = solver.solve(x0, max_iterations=200, tolerance=1e-11)
    assert result.ok and result.largest_update <= 1e-11 and result.clamped == 0
    solver.linearize()
    assert np.abs(solver.d).max() < 1e-12, "the converged plan is dynamically consistent"
    assert_close(shooting_cost(model, ocp, x0, solver.U), result.cost, rtol=1e-9)

    def gradient(U):
        return central_difference(lambda u: shooting_cost(model, ocp, x0, u.reshape(U.shape)),
                                  U.ravel(), 1e-6)

    start, final = np.abs(gradient(U0)).max(), np.abs(gradient(solver.U)).max()
    assert final <= 1e-6 * start, (final, start)


def test_solver_refuses_bad_input(solo_zero_gravity):
    model = solo_zero_gravity
    ocp, x0 = posture_problem(model, horizon=3)
    solver = RiccatiSolver(ocp)
    with pytest.raises(InputError, match="x0"):
        solver.solve(np.r_[x0[:-1], np.nan])
    with pytest.raises(InputError, match="x0"):
        solver.cold_start(x0[:5])
    for count in (0, 1.5):  # no iteration would leave the nominal unsolved behind an "ok"
        with pytest.raises(InputError, match="max_iterations"):
            solver.solve(x0, max_iterations=count)
    bare = OptimalControlProblem(VectorSpace(2), 3, 0.1, -np.ones(2), np.ones(2))
    with pytest.raises(InputError, match="no dynamics provider"):
        RiccatiSolver(bare).solve(np.zeros(4))
    space = VectorSpace(2)
    with pytest.raises(InputError, match="terminal cost"):
        OptimalControlProblem(space, 3, 0.1, -np.ones(2), np.ones(2),
                              terminal_costs=[Cost(ControlResidual(space, 2), Quadratic(1.0, 2))])
    with pytest.raises(InputError, match="control box"):
        OptimalControlProblem(space, 3, 0.1, -np.ones(2), np.array([1.0, np.inf]))
    with pytest.raises(InputError, match="reference"):
        StateResidual(space, np.zeros(3))


def test_force_costs_folded_once_equal_their_own_products():
    """The solver collects the force costs' derivatives in force space and folds them once
    through dF/dx, dF/du: the same derivatives as each force cost's own products (solo12 on a
    trot, force regularization and the friction cone's augmented Lagrangian)."""
    from rbd_deriv.control.legged import LeggedMPC
    from rbd_deriv.control.residuals import Derivatives
    from rbd_deriv.control.schedule import Gait
    from rbd_deriv.control.srdf import reference_posture
    from rbd_deriv.testing.robots import LEGGED_ROBOTS, example_robot_srdf
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    feet = LEGGED_ROBOTS["solo12"]["feet"]
    q = reference_posture(model, example_robot_srdf("solo12"), "standing")
    mpc = LeggedMPC(model, feet, Gait.trot(feet, swing=4, support=1), q, horizon=8)
    mpc.solve(np.r_[q, np.zeros(18)], phase=3)
    solver = mpc.solver
    solver.linearize()
    solver.cost_derivatives()
    folded = [getattr(solver, name).copy() for name in ("Lxx", "Lx", "Luu", "Lux", "Lu")]
    assert np.abs(solver.Lff).max() > 0.0, "the force costs went through force space"
    N = mpc.horizon
    own = Derivatives(np.zeros_like(solver.Lxx[:N]), np.zeros_like(solver.Lx[:N]),
                      np.zeros_like(solver.Luu), np.zeros_like(solver.Lux), np.zeros_like(solver.Lu))
    running = solver.running_knots(solver.X, solver.U)
    for cost in mpc.ocp.running_costs:
        cost.add_derivatives(running, own)
    for constraint in mpc.ocp.constraints:
        constraint.add_derivatives(running, own)
    terminal = Derivatives(np.zeros_like(solver.Lxx[N:]), np.zeros_like(solver.Lx[N:]))
    for cost in mpc.ocp.terminal_costs:
        cost.add_derivatives(Knots(solver.X[-1:]), terminal)
    expected = [np.concatenate([own.Lxx, terminal.Lxx]), np.concatenate([own.Lx, terminal.Lx]),
                own.Luu, own.Lux, own.Lu]
    for name, a, b in zip(("Lxx", "Lx", "Luu", "Lux", "Lu"), folded, expected):
        assert_close(a, b, what=name)
