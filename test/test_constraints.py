"""Tests of rbd_deriv.control.constraints: the friction cone as a constraint kept by an augmented Lagrangian.

Oracles:
- central differences on the manifold (states moved by ``integrate``) of the constraint g(x, u) through the
  exact contact forces of ``ContactDynamics.forces`` (solo12's point feet on a trot with a touchdown knot,
  talos's 6D soles standing), for g's Jacobians and the augmented Lagrangian's gradient, 1e-6 relative as the
  contact dynamics' own derivatives (test_dynamics); its Gauss-Newton Hessian against rho G_A^T G_A of the
  differenced Jacobians;
- the constrained optimum of a point mass pushed beyond its friction, computed by SciPy's SLSQP with the
  pyramid as hard constraints (test_contact_force's problem);
- the multipliers read later by hand (warm start), zeroed by a cold start.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.activation import Quadratic
from rbd_deriv.control.constants import CONE_ABSOLUTE_TOLERANCE
from rbd_deriv.control.constraints import FrictionConeConstraint, InequalityConstraint
from rbd_deriv.control.contact_force import FrictionConeResidual, pyramid
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.legged import LeggedMPC, LeggedWeights
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.residuals import ControlResidual, Knots, StateResidual
from rbd_deriv.control.schedule import ContactSchedule, Gait
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf
from test_contact_force import GRAVITY, MASS, PointMassOnContact, pyramid_optimum, rollout_cost

#: Central-difference step: that of the contact dynamics' own derivative tests (test_dynamics).
STEP = 1e-6


def legged(name, gait, **options):
    info = LEGGED_ROBOTS[name]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf(name), info["posture"], missing="neutral")
    feet = info["feet"]
    weights = LeggedWeights(**{**dict(info.get("weights", {})), **options.pop("weights", {})})
    gait = Gait.trot(feet, swing=2, support=1) if gait == "trot" else Gait.standing(feet, info["kind"])
    return model, posture, LeggedMPC(model, feet, gait, posture, weights=weights, **options)


def _nominal(mpc, model, posture, rng):
    """A nominal around the posture (moved, moving, torques off the static ones), linearized."""
    solver = mpc.solver
    N = mpc.horizon
    for k in range(N + 1):
        solver.X[k] = np.r_[rd.integrate(model, posture, rng.uniform(-0.02, 0.02, model.nv)),
                            rng.uniform(-0.1, 0.1, model.nv)]
    solver.U[:] = mpc.u_static + rng.uniform(-0.05, 0.05, (N, mpc.dynamics.nu)) * np.abs(mpc.u_static).max()
    solver.linearize()
    return solver.running_knots(solver.X, solver.U)


def _knot_function(mpc, knots, k, function):
    """(x, u) -> function(knots with knot k's state, control and exact forces replaced)."""
    def evaluate(x, u):
        F = knots.F.copy()
        F[k] = mpc.dynamics.forces(x, u, k)
        X, U = knots.X.copy(), knots.U.copy()
        X[k], U[k] = x, u
        return function(Knots(X, U, F, knots.dF_dx, knots.dF_du))
    return evaluate


def _differences(function, x, u, space):
    """Central differences of function(x (+) dx, u + du) in (dx, du): (..., ndx), (..., nu)."""
    columns_x, columns_u = [], []
    for j in range(space.ndx):
        step = np.zeros((1, space.ndx))
        step[0, j] = STEP
        plus = space.integrate(x[None], step, np.empty((1, space.nx)))[0]
        minus = space.integrate(x[None], -step, np.empty((1, space.nx)))[0]
        columns_x.append((function(plus, u) - function(minus, u)) / (2 * STEP))
    for a in range(u.size):
        delta = np.zeros(u.size)
        delta[a] = STEP
        columns_u.append((function(x, u + delta) - function(x, u - delta)) / (2 * STEP))
    return np.stack(columns_x, axis=-1), np.stack(columns_u, axis=-1)


def _close(actual, expected, what):
    np.testing.assert_allclose(actual, expected, atol=1e-6 * np.abs(expected).max(), rtol=0.0,
                               err_msg=what)


CASES = [("solo12", "trot"), ("talos", "stand")]


@pytest.mark.parametrize("name, gait", CASES)
def test_constraint_and_lagrangian_derivatives_against_finite_differences(name, gait):
    """g's Jacobians, the augmented Lagrangian's gradient (exact) and Gauss-Newton Hessian at a knot with
    multipliers making some rows active and others not; solo12 at a touchdown knot (the impulse composed)."""
    model, posture, mpc = legged(name, gait, horizon=6, dt=0.02)
    rng = np.random.default_rng(4)
    knots = _nominal(mpc, model, posture, rng)
    constraint = mpc.cone_constraint
    rows = constraint.rows()
    touchdowns = np.flatnonzero(mpc.dynamics.touchdown)
    k = int(touchdowns[0]) if gait == "trot" else 2
    assert rows[k].any()
    present = rows[k]
    # Multipliers around rho |g|: about half the rows active; none at a kink of max(0, .).
    g = constraint.values(knots)
    constraint.multipliers[:] = np.where(rows, rng.uniform(0.0, 2.0, rows.shape) * constraint.penalty
                                         * np.abs(np.where(rows, g, 0.0)), 0.0)
    trial = constraint.multipliers[k] + constraint.penalty * g[k]
    active = present & (trial > 0.0)
    assert active.any() and (present & ~active).any()
    assert np.abs(trial[present]).min() > 1e-3 * np.abs(trial[present]).max(), "no row at its kink"

    space = mpc.space
    x, u = knots.X[k], knots.U[k]
    Gx, Gu = constraint.jacobians(knots)
    Gx_fd, Gu_fd = _differences(_knot_function(mpc, knots, k, lambda kn: constraint.values(kn)[k][present]),
                                x, u, space)
    _close(Gx[k][present], Gx_fd, "dg/dx")
    _close(Gu[k][present], Gu_fd, "dg/du")

    # The gradient of the knot's term, through the solver's force-space fold as in a tick.
    solver = mpc.solver
    solver.cost_derivatives()
    with_constraint = [solver.Lx[k].copy(), solver.Lu[k].copy(), solver.Lxx[k].copy(), solver.Luu[k].copy()]
    solver.ocp.constraints = []
    solver.cost_derivatives()
    solver.ocp.constraints = [constraint]
    Lx, Lu, Lxx, Luu = (a - b for a, b in zip(with_constraint, (solver.Lx[k], solver.Lu[k], solver.Lxx[k],
                                                                 solver.Luu[k])))
    Lx_fd, Lu_fd = _differences(_knot_function(mpc, knots, k, lambda kn: np.array(constraint.value(kn))),
                                x, u, space)
    _close(Lx, Lx_fd, "dphi/dx")
    _close(Lu, Lu_fd, "dphi/du")
    G = np.hstack([Gx_fd, Gu_fd])[active[present]]
    H = constraint.penalty * G.T @ G
    _close(Lxx, H[:space.ndx, :space.ndx], "Gauss-Newton Lxx")
    _close(Luu, H[space.ndx:, space.ndx:], "Gauss-Newton Luu")


def push_problem(dt, N, penalty):
    """test_contact_force's push: a resting mass asked to reach 3 m/s along x, beyond what friction
    (mu = 0.5) allows; the cone as a constraint."""
    space = VectorSpace(3)
    schedule = ContactSchedule(("foot",), np.ones((N, 1)))
    target = np.r_[np.zeros(3), 3.0, 0.0, 0.0]
    weights = np.r_[0.0, 0.0, 10.0, 1.0, 1.0, 1.0]
    running = [Cost(StateResidual(space, target), Quadratic(weights, 6), name="push"),
               Cost(ControlResidual(space, 3, -MASS * GRAVITY), Quadratic(1e-3, 3), name="force")]
    terminal = [Cost(StateResidual(space, target), Quadratic(weights, 6), name="push")]
    cone = FrictionConeConstraint(FrictionConeResidual(space, 3, schedule.force_offsets(), 0.5), penalty)
    return OptimalControlProblem(space, N, dt, np.full(3, -1e3), np.full(3, 1e3), running, terminal,
                                 PointMassOnContact(dt), [cone]), cone


#: Pyramid violation [N] allowed after the iterations, 0.1 % of the weight (19.6 N) the mass rests on: the
#: augmented Lagrangian's multiplier update contracts the violation geometrically, 60 updates take it
#: to round-off (measured: 1e-12 N).
PUSH_VIOLATION = 2e-2


def test_augmented_lagrangian_reaches_the_constrained_optimum():
    """Iterations with the multipliers updated after each step end on the pyramid, at the cost of the
    constrained optimum (SLSQP with the pyramid as hard constraints), where the penalty alone leaves it."""
    pytest.importorskip("scipy.optimize")
    dt, N = 0.05, 10
    x0 = np.zeros(6)
    C = pyramid(0.5)
    violations = {}
    for constrained in (False, True):
        ocp, cone = push_problem(dt, N, penalty=1.0)
        if not constrained:
            ocp.constraints = []
        solver = RiccatiSolver(ocp)
        solver.cold_start(x0, np.tile(-MASS * GRAVITY, (N, 1)))
        assert solver.solve(x0, max_iterations=60, tolerance=0.0).ok
        violations[constrained] = -(solver.U @ C.T).min()
    assert violations[False] > 10.0, violations
    assert violations[True] < PUSH_VIOLATION, violations
    assert np.isfinite(cone.multipliers).all() and (cone.multipliers >= 0.0).all()
    assert cone.multipliers.max() > 0.0
    reference = pyramid_optimum(ocp, x0, 0.5)
    assert reference.success
    ours = rollout_cost(ocp, x0, solver.U)
    assert ours == pytest.approx(reference.fun, rel=1e-4), (ours, reference.fun)
    np.testing.assert_allclose(solver.U, reference.x.reshape(N, 3), atol=1e-3 * MASS * 9.81, rtol=0.0,
                               err_msg="the optimal forces")


#: Pyramid violation [N] at the first knot after 40 real-time ticks: CONE_ABSOLUTE_TOLERANCE, the
#: round-off the first-knot check forgives (about 2 % of a foot's share of solo12's weight).
TICK_VIOLATION = CONE_ABSOLUTE_TOLERANCE


def test_real_time_ticks_bring_demanded_friction_back_into_the_cone():
    """solo12 standing, its force regularization (weight 1) asking each foot for an outward horizontal force
    of 0.8 times its normal force (internal forces, which the legs can hold) on a cone of mu = 0.5 (faces at
    0.35): without the constraint (the light barrier alone) the first knot's forces leave the pyramid by
    1.5 N and the plans are refused; with it the ticks (one real-time iteration each, the multipliers
    updated and moved with the plan) bring them back within the check's tolerance (measured: 0.1 N at the
    second tick, 0.017 N from the fifth) and the plans are sent."""
    violations = {}
    for constrained in (False, True):
        model, posture, mpc = legged("solo12", "stand", horizon=10, dt=0.02, mu=0.5,
                                     weights={"force": 1.0})
        if not constrained:
            mpc.ocp.constraints = []
        stance = mpc.stance[:, :2] - mpc.stance[:, :2].mean(axis=0)
        outward = 0.8 * mpc.weight / 4 * stance / np.linalg.norm(stance, axis=1, keepdims=True)
        mpc.force_reference[:, 0::3] = outward[:, 0]
        mpc.force_reference[:, 1::3] = outward[:, 1]
        x = np.r_[posture, np.zeros(model.nv)]
        first = []
        for tick in range(40):
            plan = mpc.solve(x, elapsed=None if tick == 0 else mpc.dt)
            assert plan.ok
            first.append(plan.constraint_violation)
            x = mpc.solver.X[1].copy()
        violations[constrained] = first
        assert plan.sendable == constrained
        multipliers = mpc.cone_constraint.multipliers
        assert np.isfinite(multipliers).all() and (multipliers >= 0.0).all()
        assert (multipliers.max() > 0.0) == constrained
    assert min(violations[False][-10:]) > 1.0, violations[False]
    assert max(violations[True][-10:]) < TICK_VIOLATION, violations[True]


def test_multipliers_move_with_the_plan():
    """Warm start: the multipliers read elapsed later, linear between knots, the last knot's held past the
    end, rows of the contacts open at the new knots zeroed; cold start: zero."""
    N, dt = 4, 0.1
    space = VectorSpace(3)
    schedule = ContactSchedule(("a", "b"), [[1, 1], [1, 0], [1, 1], [1, 1]])
    offsets = schedule.force_offsets().copy()
    cone = FrictionConeConstraint(FrictionConeResidual(space, 3, offsets, 0.5), penalty=1.0)
    ocp = OptimalControlProblem(space, N, dt, -np.ones(3), np.ones(3), dynamics=PointMassOnContact(dt),
                                constraints=[cone])
    solver = RiccatiSolver(ocp)
    pattern = np.arange(1.0, N + 1)[:, None] * np.ones(10)
    cone.multipliers[:] = pattern
    solver.warm_start(dt, np.zeros(6))
    expected = np.array([pattern[1], pattern[2], pattern[3], pattern[3]])
    expected[1, 5:] = 0.0  # contact b is open at knot 1
    assert_close(cone.multipliers, expected, what="one knot later")
    cone.multipliers[:] = pattern
    solver.warm_start(0.5 * dt, np.zeros(6))
    expected = np.array([1.5, 2.5, 3.5, 4.0])[:, None] * np.ones(10)
    expected[1, 5:] = 0.0
    assert_close(cone.multipliers, expected, what="half a knot later")
    solver.cold_start(np.zeros(6))
    assert not cone.multipliers.any()


def test_update_is_the_projected_step_and_bounded():
    """lambda <- min(lambda_max, max(0, lambda + rho g)) on the rows the last derivatives had active, 0 on
    the others and on the absent rows."""
    space = VectorSpace(3)
    schedule = ContactSchedule(("a", "b"), [[1, 1], [1, 0]])
    residual = FrictionConeResidual(space, 3, schedule.force_offsets(), 0.5)
    cone = FrictionConeConstraint(residual, penalty=5.0, largest_multiplier=5.0)
    F = np.array([[1.0, 0.0, 1.0, 0.0, 0.0, 10.0], [0.0, 0.0, -1.0, 0.0, 0.0, 0.0]])
    knots = Knots(np.zeros((2, 6)), np.zeros((2, 3)), F, np.zeros((2, 6, 6)), np.zeros((2, 6, 3)))
    cone.multipliers[:] = 1.0
    cone.modelled[:] = True
    cone.modelled[0, 1] = False
    g = -residual.value(knots)
    cone.update(knots)
    expected = np.clip(1.0 + 5.0 * g, 0.0, 5.0)
    expected[1, 5:] = 0.0
    expected[0, 1] = 0.0
    assert expected[0, 0] > 0.0 and expected[1, 4] == 5.0
    assert_close(cone.multipliers, expected)
    assert_close(cone.violation(knots), [1.0 - 0.5 / np.sqrt(2.0), 1.0])
    assert cone.stack_violation(F[0]) == pytest.approx(1.0 - 0.5 / np.sqrt(2.0))
    assert cone.stack_violation(F[1], knot=1) == pytest.approx(1.0)
    assert cone.stack_violation(np.r_[0.0, 0.0, 1.0, 0.0, 0.0, 1.0]) == 0.0
    with pytest.raises(InputError, match="penalty"):
        InequalityConstraint(residual, 2, penalty=0.0)
    with pytest.raises(InputError, match="knots"):
        cone.update(Knots(np.zeros((1, 6)), np.zeros((1, 3)), F[:1], np.zeros((1, 6, 6)),
                          np.zeros((1, 6, 3))))
    with pytest.raises(InputError, match="horizon"):
        OptimalControlProblem(space, 3, 0.1, -np.ones(3), np.ones(3), constraints=[cone])
