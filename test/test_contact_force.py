"""Tests of rbd_deriv.control.contact_force on synthetic data.

A point mass pushed by a contact force f = u (3 controls) under gravity stands in for a foot:
its dynamics provider returns the forces and their Jacobians as the contact dynamics will.
Oracles: the residuals' rows by hand, their Jacobians against the force Jacobians they read,
the exact cone by hand, and the constrained optimum of the same problem computed by SciPy's
SLSQP with the pyramid as hard constraints.
"""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.control.activation import Quadratic, QuadraticBarrier, RelaxedLogBarrier
from rbd_deriv.control.contact_force import (ContactForceResidual, ForceStackResidual,
                                             FrictionConeResidual,
                                             cone_violation, forces_within_cone, pyramid)
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import KnotDynamics
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.residuals import ControlResidual, Knots, StateResidual
from rbd_deriv.control.schedule import ContactSchedule
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close

MASS, GRAVITY = 2.0, np.array([0.0, 0.0, -9.81])


class PointMassOnContact:
    """v+ = v + dt (f / m + g), q+ = q + dt v+, with the contact force f = u (3 rows)."""

    force_rows = 3

    def __init__(self, dt):
        self.dt = dt

    def linearize(self, X, U, out):
        dt = self.dt
        v_next = X[:, 3:] + dt * (U / MASS + GRAVITY)
        out.X_next[:] = np.hstack([X[:, :3] + dt * v_next, v_next])
        Fx = np.hstack([np.zeros((3, 3)), np.eye(3)])
        Fu = dt / MASS * np.eye(3)
        out.A[:] = np.vstack([np.hstack([np.eye(3), np.zeros((3, 3))]) + dt * Fx, Fx])
        out.B[:] = np.vstack([dt * Fu, Fu])
        out.F[:] = U
        out.dF_dx[:] = 0.0
        out.dF_du[:] = np.eye(3)


def test_force_residual_reads_its_contact_rows():
    space = VectorSpace(3)
    schedule = ContactSchedule(("left", "right"), [[1, 1], [0, 1], [1, 0]])
    offsets = schedule.force_offsets()
    rng = np.random.default_rng(0)
    F = rng.standard_normal((3, 6))
    dF_dx, dF_du = rng.standard_normal((3, 6, 6)), rng.standard_normal((3, 6, 2))
    knots = Knots(np.zeros((3, 6)), np.zeros((3, 2)), F, dF_dx, dF_du)
    right = ContactForceResidual(space, 2, offsets, contact=1, reference=np.array([0, 0, 1.0]))
    expected = np.array([F[0, 3:6], F[1, 0:3], np.zeros(3)]) - [[0, 0, 1], [0, 0, 1], [0, 0, 0]]
    assert_close(right.value(knots), expected)
    Rx, Ru = right.jacobians(knots)
    assert_close(Rx[1], dF_dx[1, 0:3])
    assert_close(Ru[0], dF_du[0, 3:6])
    assert_close(Rx[2], np.zeros((3, 6)), what="open contact")
    with pytest.raises(InputError, match="forces"):
        right.value(Knots(np.zeros((3, 6)), np.zeros((3, 2))))
    with pytest.raises(InputError, match="contact index"):
        ContactForceResidual(space, 2, offsets, contact=2)


def test_friction_cone_rows_and_exact_cone_check():
    space = VectorSpace(3)
    schedule = ContactSchedule(("a", "b"), [[1, 1], [1, 0]])
    offsets = schedule.force_offsets()
    mu = 0.8
    F = np.array([[1.0, -2.0, 10.0, 0.0, 9.0, 4.0], [3.0, 0.0, -1.0, 0.0, 0.0, 0.0]])
    dF = np.random.default_rng(1).standard_normal((2, 6, 6))
    knots = Knots(np.zeros((2, 6)), np.zeros((2, 3)), F, dF, dF[:, :, :3])
    cone = FrictionConeResidual(space, 3, offsets, mu, min_normal_force=0.5)
    m = mu / np.sqrt(2.0)
    r = cone.value(knots)
    assert_close(r[0, :5], [m * 10 - 1, m * 10 + 1, m * 10 + 2, m * 10 - 2, 10 - 0.5])
    assert_close(r[0, 5:], [4 * m - 0, 4 * m + 0, 4 * m - 9, 4 * m + 9, 4 - 0.5])
    assert_close(r[1, 5:], np.ones(5), what="open contact")
    Rx, Ru = cone.jacobians(knots)
    C = pyramid(mu)
    assert_close(Rx[0, 5:], C @ dF[0, 3:6])
    assert_close(Ru[1, :5], C @ dF[1, 0:3, :3])
    assert_close(Rx[1, 5:], np.zeros((5, 6)))
    # Exact cone: contact b at knot 0 has |f_t| = 9 > mu f_n = 3.2.
    assert_close(cone_violation(F[0], offsets[0], mu), [0.0, 9.0 - 0.8 * 4.0])
    assert_close(cone_violation(F[1], offsets[1], mu), [np.hypot(3.0, 0.0) + 0.8, 0.0])
    ok, worst = forces_within_cone(F[0], offsets[0], mu)
    assert not ok and worst == pytest.approx(5.8)
    inside = np.array([1.0, 1.0, 10.0, 0.0, 0.0, 4.0])
    assert forces_within_cone(inside, offsets[0], mu) == (True, 0.0)
    # A violation within the stated tolerance passes; NaN never does.
    slightly = np.array([8.0 + 0.05, 0.0, 10.0, 0.0, 0.0, 4.0])
    assert forces_within_cone(slightly, offsets[0], mu)[0]
    assert not forces_within_cone(np.full(6, np.nan), offsets[0], mu)[0]
    with pytest.raises(InputError, match="friction"):
        pyramid(0.0)
    with pytest.raises(InputError, match="too short"):
        cone_violation(F[0, :4], offsets[0], mu)


def push_problem(dt, N, activation):
    """Push a resting mass sideways as fast as the friction allows: a velocity target of 3 m/s
    along x that friction (mu = 0.5) cannot reach within the horizon."""
    space = VectorSpace(3)
    schedule = ContactSchedule(("foot",), np.ones((N, 1)))
    target = np.r_[np.zeros(3), 3.0, 0.0, 0.0]
    weights = np.r_[0.0, 0.0, 10.0, 1.0, 1.0, 1.0]
    running = [Cost(StateResidual(space, target), Quadratic(weights, 6), name="push"),
               Cost(ControlResidual(space, 3, -MASS * GRAVITY), Quadratic(1e-3, 3), name="force"),
               Cost(FrictionConeResidual(space, 3, schedule.force_offsets(), 0.5), activation,
                    name="cone")]
    terminal = [Cost(StateResidual(space, target), Quadratic(weights, 6), name="push")]
    return OptimalControlProblem(space, N, dt, np.full(3, -1e3), np.full(3, 1e3), running,
                                 terminal, PointMassOnContact(dt)), schedule


def rollout_cost(ocp, x0, U, without="cone"):
    out = KnotDynamics(ocp.horizon, 6, 6, 3, 3)
    X = [x0]
    for k in range(ocp.horizon):
        ocp.dynamics.linearize(X[-1][None], U[k:k + 1], _one(out, k))
        X.append(out.X_next[k].copy())
    X = np.array(X)
    knots = Knots(X[:-1], U, U, np.zeros((ocp.horizon, 3, 6)), np.tile(np.eye(3), (ocp.horizon, 1, 1)))
    running = sum(np.sum(c.values(knots)) for c in ocp.running_costs if c.name != without)
    return running + sum(np.sum(c.values(Knots(X[-1:]))) for c in ocp.terminal_costs)


def pyramid_optimum(ocp, x0, mu):
    """SciPy's SLSQP minimum of the rollout's cost (the cone's cost left out) over the controls, the pyramid
    of mu as hard constraints, from the resting force."""
    optimize = pytest.importorskip("scipy.optimize")
    N, C = ocp.horizon, pyramid(mu)
    return optimize.minimize(
        lambda u: rollout_cost(ocp, x0, u.reshape(N, 3)), np.tile(-MASS * GRAVITY, N),
        constraints=[{"type": "ineq", "fun": lambda u: (u.reshape(N, 3) @ C.T).ravel()}],
        method="SLSQP", options={"ftol": 1e-12, "maxiter": 500})


def _one(out, k):
    view = KnotDynamics(1, 6, 6, 3, 3)
    view.A, view.B, view.X_next = out.A[k:k + 1], out.B[k:k + 1], out.X_next[k:k + 1]
    view.F, view.dF_dx, view.dF_du = out.F[k:k + 1], out.dF_dx[k:k + 1], out.dF_du[k:k + 1]
    return view


def test_barrier_keeps_planned_forces_in_the_cone_near_the_constrained_optimum():
    pytest.importorskip("scipy.optimize")
    dt, N = 0.05, 10
    x0 = np.zeros(6)
    ocp, schedule = push_problem(dt, N, RelaxedLogBarrier(1e-2, 1e-4, 5))
    solver = RiccatiSolver(ocp)
    solver.cold_start(x0, np.tile(-MASS * GRAVITY, (N, 1)))
    result = solver.solve(x0, max_iterations=100, tolerance=1e-9)
    assert result.ok
    C = pyramid(0.5)
    margins = solver.U @ C.T
    assert (margins > 0.0).all(), "every planned force strictly inside the pyramid"
    ok, _ = forces_within_cone(solver.U[0], schedule.force_offsets()[0], 0.5)
    assert ok
    # The same problem with the pyramid as hard constraints (SLSQP on the rollout's controls).
    reference = pyramid_optimum(ocp, x0, 0.5)
    assert reference.success
    ours = rollout_cost(ocp, x0, solver.U)
    # A log barrier of weight w on m inequalities ends within m w of the constrained optimum
    # (the duality gap of the central path; Boyd and Vandenberghe, sec. 11.2.2).
    assert reference.fun <= ours <= reference.fun + 1e-2 * 5 * N
    # The penalty alternative leaves the pyramid (the push is worth more than the penalty).
    penalty, _ = push_problem(dt, N, QuadraticBarrier(np.zeros(5), np.full(5, np.inf), 1.0))
    soft = RiccatiSolver(penalty)
    soft.cold_start(x0, np.tile(-MASS * GRAVITY, (N, 1)))
    assert soft.solve(x0, max_iterations=100, tolerance=1e-9).ok
    assert (soft.U @ C.T).min() < 0.0


def test_force_stack_residual_is_the_sum_of_the_contacts_residuals():
    """Regularizing the whole stack at once against one ContactForceResidual per contact, on a
    schedule whose stack layout changes (a frame contact and two points)."""
    from rbd_deriv.control.residuals import Derivatives
    rng = np.random.default_rng(8)
    space = VectorSpace(4)
    schedule = ContactSchedule(("a", "b", "c"), np.array([[1, 1, 1], [0, 1, 1], [1, 0, 1]], bool),
                               kinds=("point", "frame", "point"))
    offsets, m, K = schedule.force_offsets(), schedule.force_rows, 3
    rows_of = [schedule.contacts_at(k) for k in range(K)]
    F = np.zeros((K, m))
    dF_dx, dF_du = np.zeros((K, m, 8)), np.zeros((K, m, 2))
    per_contact = [rng.uniform(-5, 5, (K, rows)) for rows in (3, 6, 3)]
    stack_reference = np.zeros((K, m))
    for k in range(K):
        used = sum({"a": 3, "b": 6, "c": 3}[name] for name in rows_of[k])
        F[k, :used] = rng.uniform(-10, 10, used)
        dF_dx[k, :used] = rng.uniform(-1, 1, (used, 8))
        dF_du[k, :used] = rng.uniform(-1, 1, (used, 2))
        for c, rows in enumerate((3, 6, 3)):
            if offsets[k, c] >= 0:
                stack_reference[k, offsets[k, c]:offsets[k, c] + rows] = per_contact[c][k]
    knots = Knots(rng.uniform(-1, 1, (K, 8)), rng.uniform(-1, 1, (K, 2)), F, dF_dx, dF_du)
    stack = Cost(ForceStackResidual(space, 2, stack_reference), Quadratic(0.3, m))
    contacts = [Cost(ContactForceResidual(space, 2, offsets, c, kind, per_contact[c]),
                     Quadratic(0.3, rows))
                for c, (kind, rows) in enumerate((("point", 3), ("frame", 6), ("point", 3)))]

    def derivatives(costs):
        out = Derivatives(np.zeros((K, 8, 8)), np.zeros((K, 8)), np.zeros((K, 2, 2)),
                          np.zeros((K, 2, 8)), np.zeros((K, 2)))
        for cost in costs:
            cost.add_derivatives(knots, out)
        return out, sum(cost.values(knots) for cost in costs)

    (one, value_one), (many, value_many) = derivatives([stack]), derivatives(contacts)
    assert_close(value_one, value_many, what="cost")
    for name in ("Lxx", "Lx", "Luu", "Lux", "Lu"):
        assert_close(getattr(one, name), getattr(many, name), what=name)


def test_cone_gauss_newton_through_the_forces_equals_the_dense_products():
    """The cone's products folded into the force stack against the generic dense products of
    its Jacobians, on knots with open and closed contacts."""
    from rbd_deriv.control.residuals import Derivatives, Residual
    rng = np.random.default_rng(9)
    space = VectorSpace(4)
    schedule = ContactSchedule(("a", "b", "c"), np.array([[1, 1, 1], [0, 1, 1], [1, 0, 0]], bool))
    offsets, m, K = schedule.force_offsets(), schedule.force_rows, 3
    F = rng.uniform(-10, 10, (K, m))
    knots = Knots(rng.uniform(-1, 1, (K, 8)), rng.uniform(-1, 1, (K, 2)), F,
                  rng.uniform(-1, 1, (K, m, 8)), rng.uniform(-1, 1, (K, m, 2)))
    residual = FrictionConeResidual(space, 2, offsets, 0.6, min_normal_force=0.5,
                                    normals=[[0.0, 0.0, 1.0], [0.1, 0.0, 1.0], [0.0, -0.2, 1.0]])
    r = residual.value(knots)
    gradient, hessian = rng.uniform(-1, 1, r.shape), rng.uniform(0, 2, r.shape)
    results = []
    for method in (residual.gauss_newton, lambda *a: Residual.gauss_newton(residual, *a)):
        out = Derivatives(np.zeros((K, 8, 8)), np.zeros((K, 8)), np.zeros((K, 2, 2)),
                          np.zeros((K, 2, 8)), np.zeros((K, 2)))
        method(knots, r, gradient, hessian, out)
        results.append(out)
    for name in ("Lxx", "Lx", "Luu", "Lux", "Lu"):
        assert_close(getattr(results[0], name), getattr(results[1], name), what=name)


def _yaw(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def test_center_of_pressure_rows_are_the_distances_to_the_soles_edges():
    """A sole's wrench made from a chosen center of pressure p (in the sole's axes, on a sole turned by its yaw) and
    force f: tau = (R p) x f at the sole's center. The four rows are f_z times the distance from p to each edge
    (l - p_x, l + p_x, w - p_y, w + p_y, in the sole's frame: written out, not from the code), an open sole and a
    point contact give 1, and the rows are linear in the stack (r = A F: a Jacobian through random dF/dx, dF/du
    is A times them)."""
    from rbd_deriv.control.contact_force import CenterOfPressureResidual

    rng = np.random.default_rng(4)
    space = VectorSpace(4)
    # Contacts: a sole (6 rows), a point (3 rows), a second sole; knots: all closed, the first sole open.
    schedule = ContactSchedule(("left", "point", "right"), np.array([[1, 1, 1], [0, 1, 1]], bool),
                               ("frame", "point", "frame"))
    offsets, m, K = schedule.force_offsets(), schedule.force_rows, 2
    half = (0.1, 0.05)
    yaws = {0: np.array([_yaw(0.3), _yaw(0.3)]), 2: np.array([_yaw(-1.2), _yaw(2.0)])}
    residual = CenterOfPressureResidual(space, 2, offsets, yaws, half)
    F = np.zeros((K, m))
    expected = np.ones((K, 8))
    for k in range(K):
        for s, c in enumerate((0, 2)):
            o = offsets[k, c]
            if o < 0:
                continue
            p = np.array([rng.uniform(-0.15, 0.15), rng.uniform(-0.08, 0.08), 0.0])  # in or out of the sole
            f = np.array([rng.uniform(-20, 20), rng.uniform(-20, 20), rng.uniform(100, 300)])
            R = yaws[c][k]
            F[k, o:o + 3], F[k, o + 3:o + 6] = f, np.cross(R @ p, f)
            fz = f[2]
            expected[k, 4 * s:4 * s + 4] = fz * np.array([half[0] - p[0], half[0] + p[0], half[1] - p[1],
                                                          half[1] + p[1]])
        F[k, offsets[k, 1]:offsets[k, 1] + 3] = rng.uniform(-50, 50, 3)  # the point contact's force: ignored
    knots = Knots(rng.uniform(-1, 1, (K, 8)), rng.uniform(-1, 1, (K, 2)), F,
                  rng.uniform(-1, 1, (K, m, 8)), rng.uniform(-1, 1, (K, m, 2)))
    assert_close(residual.value(knots), expected, what="rows")
    Rx, Ru = residual.jacobians(knots)
    for k in range(K):
        for s, c in enumerate((0, 2)):
            o = offsets[k, c]
            if o < 0:
                assert not Rx[k, 4 * s:4 * s + 4].any() and not Ru[k, 4 * s:4 * s + 4].any()
                continue
            # A by finite differences of the (linear) value in each of the sole's six rows.
            A = np.empty((4, 6))
            for j in range(6):
                moved = F.copy()
                moved[k, o + j] += 1.0
                A[:, j] = (residual.value(Knots(knots.X, knots.U, moved, knots.dF_dx, knots.dF_du))
                           - residual.value(knots))[k, 4 * s:4 * s + 4]
            assert_close(Rx[k, 4 * s:4 * s + 4], A @ knots.dF_dx[k, o:o + 6], what="dr/dx")
            assert_close(Ru[k, 4 * s:4 * s + 4], A @ knots.dF_du[k, o:o + 6], what="dr/du")
    with pytest.raises(InputError, match="half_size"):
        CenterOfPressureResidual(space, 2, offsets, yaws, (0.1, 0.0))
    with pytest.raises(InputError, match="soles"):
        CenterOfPressureResidual(space, 2, offsets, {5: yaws[0]}, half)


def test_center_of_pressure_gauss_newton_through_the_forces_equals_the_dense_products():
    """Its products folded into the force stack, and folded through the forces' Jacobians, against the generic
    dense products of its Jacobians, with an open sole."""
    from rbd_deriv.control.contact_force import CenterOfPressureResidual
    from rbd_deriv.control.residuals import Derivatives, Residual, fold_force_derivatives

    rng = np.random.default_rng(5)
    space = VectorSpace(4)
    schedule = ContactSchedule(("left", "right"), np.array([[1, 1], [0, 1], [1, 0]], bool), ("frame", "frame"))
    offsets, m, K = schedule.force_offsets(), schedule.force_rows, 3
    soles = {0: np.array([_yaw(a) for a in (0.1, 0.2, 0.3)]), 1: np.array([_yaw(a) for a in (-0.5, 0.0, 1.0)])}
    residual = CenterOfPressureResidual(space, 2, offsets, soles, (0.1, 0.06))
    knots = Knots(rng.uniform(-1, 1, (K, 8)), rng.uniform(-1, 1, (K, 2)), rng.uniform(-10, 10, (K, m)),
                  rng.uniform(-1, 1, (K, m, 8)), rng.uniform(-1, 1, (K, m, 2)))
    r = residual.value(knots)
    gradient, hessian = rng.uniform(-1, 1, r.shape), rng.uniform(0, 2, r.shape)

    def empty(forces=False):
        return Derivatives(np.zeros((K, 8, 8)), np.zeros((K, 8)), np.zeros((K, 2, 2)), np.zeros((K, 2, 8)),
                           np.zeros((K, 2)), np.zeros((K, m, m)) if forces else None,
                           np.zeros((K, m)) if forces else None)

    dense, folded, in_forces = empty(), empty(), empty(forces=True)
    Residual.gauss_newton(residual, knots, r, gradient, hessian, dense)
    residual.gauss_newton(knots, r, gradient, hessian, folded)
    residual.gauss_newton(knots, r, gradient, hessian, in_forces)
    fold_force_derivatives(knots, in_forces)
    for name in ("Lxx", "Lx", "Luu", "Lux", "Lu"):
        assert_close(getattr(folded, name), getattr(dense, name), what=name)
        assert_close(getattr(in_forces, name), getattr(dense, name), what=name)
