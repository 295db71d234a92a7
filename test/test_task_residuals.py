"""Tests of rbd_deriv.control.task_residuals on the core library's kinematics.

Oracles: positions from rd.frame_placement and their Jacobians by central differences on the
manifold (perturbations through rd.integrate), on a floating base too, and rd.frame_jacobian knot
by knot for the (knot, frame) pairs asked; frame velocities from rd.frame_velocity and their Jacobians by
central differences of it along the state space's tangent (dq through its integrate, dv); the center of mass as the
mass-weighted mean of the bodies' centers computed here from the URDF; a reaching problem solved
to convergence, checked by the gradient of single-shooting rollouts.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.activation import Quadratic
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import FreeDynamics
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.residuals import ControlResidual, Knots, StateResidual
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.control.state_space import state_space
from rbd_deriv.control.task_residuals import (CenterOfMassResidual, FramePositionResidual,
                                              FrameVelocityResidual, RobotKinematics)
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.finite_diff import central_difference
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


class FiniteDifferenceFrames:
    """Frame positions from rd.frame_placement; Jacobians by central differences (tests only)."""

    def __init__(self, model, eps=1e-6):
        self.model, self.data, self.eps = model, model.create_data(), eps

    def _position(self, q, frame):
        rd.forward_kinematics(self.model, self.data, q)
        return rd.frame_placement(self.model, self.data, frame)[:3, 3].copy()

    def frame_position(self, X, frame):
        model = self.model
        positions = np.zeros((X.shape[0], 3))
        jacobians = np.zeros((X.shape[0], 3, model.nv))
        for k, x in enumerate(X):
            q = x[:model.nq]
            positions[k] = self._position(q, frame)
            for j in range(model.nv):
                step = np.zeros(model.nv)
                step[j] = self.eps
                jacobians[k, :, j] = (self._position(rd.integrate(model, q, step), frame)
                                      - self._position(rd.integrate(model, q, -step), frame)) / (2 * self.eps)
        return positions, jacobians


@pytest.fixture(scope="module")
def ur5():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["ur5"]))


def test_frame_residual_reads_the_provider_on_its_axes(ur5):
    rng = np.random.default_rng(0)
    space = state_space(ur5)
    frames = RobotKinematics(ur5)
    X = np.hstack([rng.uniform(-1, 1, (3, 6)), rng.uniform(-1, 1, (3, 6))])
    reference = rng.uniform(-0.5, 0.5, (3, 2))
    residual = FramePositionResidual(space, frames, "tool0", reference, axes=(2, 0))
    positions, jacobians = FiniteDifferenceFrames(ur5).frame_position(X, "tool0")
    assert_close(residual.value(Knots(X)), positions[:, [2, 0]] - reference)
    Rx, Ru = residual.jacobians(Knots(X))
    assert Ru is None
    assert_close(Rx[:, :, :6], jacobians[:, [2, 0], :], rtol=1e-8)
    assert_close(Rx[:, :, 6:], np.zeros((3, 2, 6)), what="no dependence on v")
    with pytest.raises(InputError, match="axes"):
        FramePositionResidual(space, frames, "tool0", axes=(0, 3))
    with pytest.raises(InputError, match="reference"):
        FramePositionResidual(space, frames, "tool0", np.zeros(3), axes=(2,))


def test_kinematics_of_a_floating_base_against_finite_differences():
    """Frame Jacobians in the tangent space of q (free flyer included) and a second frame asked
    at the same states (served from the kept results) against central differences."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    rng = np.random.default_rng(3)
    X = np.array([np.r_[rd.integrate(model, rd.neutral(model), rng.uniform(-0.5, 0.5, 18)),
                        np.zeros(18)] for _ in range(3)])
    kinematics, oracle = RobotKinematics(model), FiniteDifferenceFrames(model)
    for frame in ("FL_FOOT", "HR_FOOT", "FL_FOOT"):
        positions, jacobians = kinematics.frame_position(X, frame)
        expected, expected_jacobians = oracle.frame_position(X, frame)
        assert_close(positions, expected, what=frame)
        assert_close(jacobians, expected_jacobians, rtol=1e-8, what=frame)
    with pytest.raises(InputError, match="no frame named"):
        kinematics.frame_position(X, "NO_FOOT")


def _com_from_urdf(model, q, links):
    """Mass-weighted mean of the bodies' centers (URDF inertials placed by rd.frame_placement)."""
    data = model.create_data()
    rd.forward_kinematics(model, data, q)
    total, weighted = 0.0, np.zeros(3)
    for link, (mass, origin) in links.items():
        placement = rd.frame_placement(model, data, link)
        weighted += mass * (placement[:3, :3] @ origin + placement[:3, 3])
        total += mass
    return weighted / total


def test_com_residual_on_the_model():
    import xml.etree.ElementTree as ElementTree
    path = EXAMPLE_ROBOTS["solo12"]
    model = rd.load_urdf(str(path), floating_base=True)
    links = {}
    for link in ElementTree.parse(path).getroot().iter("link"):
        inertial = link.find("inertial")
        if inertial is not None:
            origin = inertial.find("origin")
            xyz = [0.0, 0.0, 0.0] if origin is None else [float(x) for x in origin.get("xyz").split()]
            links[link.get("name")] = (float(inertial.find("mass").get("value")), np.array(xyz))
    space = state_space(model)
    rng = np.random.default_rng(4)
    X = np.array([np.r_[rd.integrate(model, rd.neutral(model), rng.uniform(-0.5, 0.5, 18)),
                        np.zeros(18)] for _ in range(2)])
    residual = CenterOfMassResidual(space, RobotKinematics(model), np.array([0.1, -0.2]), axes=(0, 1))
    expected = np.array([_com_from_urdf(model, x[:model.nq], links) for x in X])
    assert_close(residual.value(Knots(X)), expected[:, :2] - [0.1, -0.2])
    Rx, _ = residual.jacobians(Knots(X))
    eps = 1e-6
    for j in range(model.nv):
        step = np.zeros(model.nv)
        step[j] = eps
        difference = (_com_from_urdf(model, rd.integrate(model, X[0, :model.nq], step), links)
                      - _com_from_urdf(model, rd.integrate(model, X[0, :model.nq], -step), links))
        assert_close(Rx[0, :, j], difference[:2] / (2 * eps), rtol=1e-7)
    assert not Rx[:, :, model.nv:].any()


def reaching_costs(space, frames, gravity, target):
    running = [Cost(ControlResidual(space, 6, gravity), Quadratic(1e-3, 6), name="torque"),
               Cost(StateResidual(space, np.zeros(12)),
                    Quadratic(np.r_[np.zeros(6), np.full(6, 1e-2)], 12), name="velocity")]
    terminal = [Cost(FramePositionResidual(space, frames, "tool0", target), Quadratic(1e3, 3),
                     name="reach"),
                Cost(StateResidual(space, np.zeros(12)), Quadratic(np.r_[np.zeros(6), np.ones(6)], 12),
                     name="stop")]
    return running, terminal


def shooting_cost(model, ocp, x0, U):
    """Cost of the rollout of U from x0 through the model's own Euler steps (single shooting)."""
    data = model.create_data()
    X = [x0]
    for u in U:
        rd.linearize(model, data, X[-1][:model.nq], X[-1][model.nq:], u, ocp.dt)
        X.append(data.x_next.copy())
    X = np.array(X)
    return (sum(np.sum(c.values(Knots(X[:-1], U))) for c in ocp.running_costs)
            + sum(np.sum(c.values(Knots(X[-1:]))) for c in ocp.terminal_costs))


def test_reaching_problem_converges_to_a_stationary_point(ur5):
    """Oracle: the gradient of the single-shooting cost, by central differences of rollouts of
    the model, vanishes at the solution (no torque bound is active)."""
    space = state_space(ur5)
    frames = RobotKinematics(ur5)
    N, dt = 12, 0.05
    q0 = np.array([0.3, -1.2, 1.4, -0.5, 0.8, 0.1])
    target = frames.frame_position(np.r_[q0 + 0.3, np.zeros(6)][None], "tool0")[0][0]
    gravity = rd.gravity_torques(ur5, ur5.create_data(), q0).copy()
    running, terminal = reaching_costs(space, frames, gravity, target)
    effort = np.full(6, 1e3)
    ocp = OptimalControlProblem(space, N, dt, -effort, effort, running, terminal,
                                FreeDynamics(ur5, dt))
    solver = RiccatiSolver(ocp)
    x0 = np.r_[q0, np.zeros(6)]
    U0 = np.tile(gravity, (N, 1))
    solver.cold_start(x0, U0)
    # Gauss-Newton converges linearly where residuals stay non-zero at the optimum (the torque
    # cost): 1e-5 N m of update is far below what the gradient check resolves.
    result = solver.solve(x0, max_iterations=200, tolerance=1e-5)
    assert result.ok and result.largest_update <= 1e-5 and result.clamped == 0
    solver.linearize()
    assert np.abs(solver.d).max() < 1e-8
    assert_close(shooting_cost(ur5, ocp, x0, solver.U), result.cost, rtol=1e-7,
                 what="cost of the rollout of the plan")

    def gradient(U):
        return central_difference(lambda u: shooting_cost(ur5, ocp, x0, u.reshape(U.shape)),
                                  U.ravel(), 1e-5)

    start, final = np.abs(gradient(U0)).max(), np.abs(gradient(solver.U)).max()
    assert final <= 1e-4 * start, (final, start)


def _floating_states(model, rng, count):
    return np.array([np.r_[rd.integrate(model, rd.neutral(model), rng.uniform(-0.5, 0.5, 18)),
                           np.zeros(18)] for _ in range(count)])


def _check_structured_products(residual, X, rng):
    """The residual's own Gauss-Newton products against the generic dense ones; returns r."""
    from rbd_deriv.control.residuals import Derivatives, Residual
    K = X.shape[0]
    r = residual.value(Knots(X))
    gradient, hessian = rng.uniform(-1, 1, r.shape), rng.uniform(0, 2, r.shape)
    results = []
    for method in (residual.gauss_newton, lambda *a: Residual.gauss_newton(residual, *a)):
        out = Derivatives(np.zeros((K, 36, 36)), np.zeros((K, 36)))
        method(Knots(X), r, gradient, hessian, out)
        results.append(out)
    assert_close(results[0].Lxx, results[1].Lxx, what="Lxx")
    assert_close(results[0].Lx, results[1].Lx, what="Lx")
    return r, results[0]


@pytest.mark.parametrize("masked", [False, True])
def test_structured_gauss_newton_equals_the_dense_products(masked):
    """The frame residual's products on the q columns of its computed knots against the
    generic dense products of its full Jacobians."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    rng = np.random.default_rng(6)
    X = _floating_states(model, rng, 5)
    knots = np.array([True, False, True, True, False]) if masked else None
    residual = FramePositionResidual(state_space(model), RobotKinematics(model), "HL_FOOT",
                                     rng.uniform(-0.3, 0.3, (5, 3)), knots=knots)
    r, derivatives = _check_structured_products(residual, X, rng)
    if masked:
        assert not derivatives.Lx[~knots].any() and not r[~knots].any()


def test_several_frames_are_the_frames_one_by_one():
    """One residual on two feet with their own masks against one residual per foot, and its
    structured products against the dense ones."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    space = state_space(model)
    rng = np.random.default_rng(8)
    X = _floating_states(model, rng, 4)
    mask = np.array([[True, False], [True, True], [False, True], [False, False]])
    reference = rng.uniform(-0.3, 0.3, (4, 6))
    kinematics = RobotKinematics(model)
    both = FramePositionResidual(space, kinematics, ("FL_FOOT", "HR_FOOT"), reference, knots=mask)
    single = [FramePositionResidual(space, kinematics, foot, reference[:, 3 * i:3 * i + 3],
                                    knots=mask[:, i].copy())
              for i, foot in enumerate(("FL_FOOT", "HR_FOOT"))]
    r, _ = _check_structured_products(both, X, rng)
    assert_close(r, np.hstack([one.value(Knots(X)) for one in single]))
    assert_close(both.jacobians(Knots(X))[0],
                 np.concatenate([one.jacobians(Knots(X))[0] for one in single], axis=1))


def test_one_pass_quadratic_equals_the_general_path():
    """Cost.add_derivatives through add_quadratic (frames with a (knot, frame) mask, the center of
    mass) against value, activation and gauss_newton taken separately, with and without knot
    weights (one zero)."""
    from rbd_deriv.control.residuals import Derivatives
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    space = state_space(model)
    rng = np.random.default_rng(9)
    X = _floating_states(model, rng, 4)
    X[:, model.nq:] = rng.uniform(-1.0, 1.0, (4, model.nv))
    kinematics = RobotKinematics(model)
    mask = np.array([[True, False], [True, True], [False, True], [False, False]])
    residuals = (FramePositionResidual(space, kinematics, ("FL_FOOT", "HR_FOOT"),
                                       rng.uniform(-0.3, 0.3, (4, 6)), knots=mask),
                 FramePositionResidual(space, kinematics, "HL_FOOT", rng.uniform(-0.3, 0.3, 2),
                                       axes=(0, 2)),
                 CenterOfMassResidual(space, kinematics, rng.uniform(-0.1, 0.1, 2), axes=(0, 1)),
                 FrameVelocityResidual(space, kinematics, ("FL_FOOT", "HR_FOOT"), rng.uniform(-0.3, 0.3, 4),
                                       axes=(0, 1), knots=mask))
    for residual in residuals:
        for knot_weights in (None, np.array([1.0, 0.0, 2.5, 0.3])):
            activation = Quadratic(rng.uniform(0, 2, residual.nr), residual.nr)
            outs = [Derivatives(np.zeros((4, 36, 36)), np.zeros((4, 36))) for _ in range(2)]
            Cost(residual, activation, knot_weights).add_derivatives(Knots(X), outs[0])
            r = residual.value(Knots(X))
            gradient, hessian = activation.derivatives(r)
            factors = np.ones(4) if knot_weights is None else knot_weights
            residual.gauss_newton(Knots(X), r, factors[:, None] * gradient,
                                  factors[:, None] * hessian, outs[1])
            assert_close(outs[0].Lx, outs[1].Lx, what="Lx")
            assert_close(outs[0].Lxx, outs[1].Lxx, what="Lxx")
            assert outs[0].Lx.any()


def test_frame_kinematics_are_the_core_frame_functions():
    """Positions and Jacobian rows at the asked knots and frames only, against rd.frame_placement
    and rd.frame_jacobian; the others zero; nothing recomputed at the same states."""
    solo = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    rng = np.random.default_rng(3)
    X = np.array([np.r_[rd.random_configuration(solo, rng), np.zeros(18)] for _ in range(4)])
    feet = ("FL_FOOT", "HR_FOOT")
    wanted = np.array([[True, False], [True, True], [False, False], [False, True]])
    kinematics = RobotKinematics(solo)
    positions, jacobians = kinematics.frame_positions(X, feet, wanted)
    oracle = solo.create_data()
    for k in range(4):
        for p, foot in enumerate(feet):
            if not wanted[k, p]:
                assert not positions[k, p].any() and not jacobians[k, p].any()
                continue
            rd.forward_kinematics(solo, oracle, X[k, :19])
            assert_close(positions[k, p], rd.frame_placement(solo, oracle, foot)[:3, 3])
            assert_close(jacobians[k, p], rd.frame_jacobian(solo, oracle, X[k, :19], foot)[:3])
    positions[1, 0] = -1.0
    again, _ = kinematics.frame_positions(X.copy(), feet, wanted)
    assert (again[1, 0] == -1.0).all()


def test_frame_velocity_against_the_core_and_finite_differences():
    """A frame origin's world velocity J(q) v against rd.frame_velocity (linear rows, LOCAL_WORLD_ALIGNED) at states
    with a moving floating base, its Jacobian against central differences of rd.frame_velocity along each tangent
    direction of the state space ((q (+) dq, v) and (q, v + dv)); the knots and frames left out of the mask zero;
    its structured products against the dense ones."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    space = state_space(model)
    rng = np.random.default_rng(11)
    K, nq, nv = 3, model.nq, model.nv
    X = np.array([np.r_[rd.random_configuration(model, rng), rng.uniform(-2.0, 2.0, nv)] for _ in range(K)])
    feet = ("FL_FOOT", "HR_FOOT")
    mask = np.array([[True, True], [False, True], [True, False]])
    reference = rng.uniform(-0.5, 0.5, (K, 6))
    residual = FrameVelocityResidual(space, RobotKinematics(model), feet, reference, knots=mask)
    data = model.create_data()

    def velocities(x):
        return np.concatenate([rd.frame_velocity(model, data, x[:nq], x[nq:], foot)[:3] for foot in feet])

    r = residual.value(Knots(X))
    Rx, Ru = residual.jacobians(Knots(X))
    assert Ru is None and Rx.shape == (K, 6, 2 * nv)
    eps = 1e-6
    for k in range(K):
        expected = velocities(X[k]) - reference[k]
        columns = []
        for j in range(2 * nv):
            step = np.zeros((1, 2 * nv))
            step[0, j] = eps
            ahead, behind = (space.integrate(X[k:k + 1], sign * step, np.empty((1, space.nx)))[0] for sign in (1, -1))
            columns.append((velocities(ahead) - velocities(behind)) / (2 * eps))
        expected_jacobian = np.array(columns).T
        for p in range(2):
            rows = slice(3 * p, 3 * p + 3)
            if mask[k, p]:
                assert_close(r[k, rows], expected[rows], what=f"velocity {k} {feet[p]}")
                assert_close(Rx[k, rows], expected_jacobian[rows], rtol=1e-6, what=f"jacobian {k} {feet[p]}")
                assert np.abs(expected_jacobian[rows, :nv]).max() > 0.1, "the q block is not zero: it is tested"
            else:
                assert not r[k, rows].any() and not Rx[k, rows].any()
    _check_structured_products(residual, X, rng)
