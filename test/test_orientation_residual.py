"""Tests of rbd_deriv.control.orientation_residual: a frame's orientation error log3(R_ref^T R(q)).

Oracles: the value from rd.frame_placement and SciPy's rotation vector (``Rotation.as_rotvec``), its
Jacobian by central differences on the manifold (perturbations through rd.integrate) on solo12 and
talos with their free flyer, the generic dense Gauss-Newton products of residuals.Residual, and a
small problem on the UR5 whose solution turns the tool to the reference orientation.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import rbd_deriv as rd
from rbd_deriv.control.activation import Quadratic
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import FreeDynamics
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.orientation_residual import FrameOrientationResidual
from rbd_deriv.control.residuals import ControlResidual, Derivatives, Knots, Residual, StateResidual
from rbd_deriv.control.solver import RiccatiSolver
from rbd_deriv.control.state_space import state_space
from rbd_deriv.control.task_residuals import RobotKinematics
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.finite_diff import manifold_difference
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

#: Each robot with frames at the root, in the middle and at the end of its tree.
FRAMES = {"solo12": ("base_link", "FL_UPPER_LEG", "HR_FOOT"),
          "talos": ("base_link", "torso_2_link", "arm_left_7_link", "leg_right_6_link")}


@pytest.fixture(scope="module", params=list(FRAMES))
def robot(request):
    return request.param, rd.load_urdf(str(EXAMPLE_ROBOTS[request.param]), floating_base=True)


def orientation(model, q, frame):
    data = model.create_data()
    rd.forward_kinematics(model, data, q)
    return rd.frame_placement(model, data, frame)[:3, :3]


def log3(R):
    return Rotation.from_matrix(R).as_rotvec()


def random_states(model, rng, count, spread=0.6):
    q = [rd.integrate(model, rd.neutral(model), rng.uniform(-spread, spread, model.nv)) for _ in range(count)]
    return np.hstack([np.array(q), rng.uniform(-1, 1, (count, model.nv))])


def test_value_is_the_rotation_vector_of_the_error(robot):
    """Per-knot and shared references, against SciPy's log3 of R_ref^T R."""
    name, model = robot
    rng = np.random.default_rng(1)
    X = random_states(model, rng, 3)
    space, kinematics = state_space(model), RobotKinematics(model)
    for frame in FRAMES[name]:
        actual = np.array([orientation(model, x[:model.nq], frame) for x in X])
        references = Rotation.from_rotvec(rng.uniform(-0.8, 0.8, (3, 3))).as_matrix() @ actual
        per_knot = FrameOrientationResidual(space, kinematics, frame, references)
        assert_close(per_knot.value(Knots(X)),
                     [log3(R0.T @ R) for R0, R in zip(references, actual)], rtol=1e-12, what=frame)
        shared = FrameOrientationResidual(space, kinematics, frame, references[0])
        assert_close(shared.value(Knots(X)), [log3(references[0].T @ R) for R in actual],
                     rtol=1e-12, what=frame)


def test_jacobian_against_finite_differences_on_the_manifold(robot):
    """dr/dq against central differences along every tangent direction (free flyer included), to
    1e-6 relative; errors from small to 2.5 rad; dr/dv = 0."""
    name, model = robot
    rng = np.random.default_rng(2)
    space, kinematics = state_space(model), RobotKinematics(model)
    X = random_states(model, rng, 4)
    worst = 0.0
    for frame in FRAMES[name]:
        turns = rng.standard_normal((4, 3))
        turns *= (np.array([1e-7, 0.3, 1.5, 2.5]) / np.linalg.norm(turns, axis=1))[:, None]
        references = np.array([orientation(model, x[:model.nq], frame) for x in X]) \
            @ Rotation.from_rotvec(turns).as_matrix()
        residual = FrameOrientationResidual(space, kinematics, frame, references)
        Rx, Ru = residual.jacobians(Knots(X))
        assert Ru is None and not Rx[:, :, model.nv:].any()
        for k, x in enumerate(X):
            expected = manifold_difference(
                lambda q: log3(references[k].T @ orientation(model, q, frame)), x[:model.nq],
                lambda q, dq: rd.integrate(model, q, dq), model.nv)
            assert_close(Rx[k, :, :model.nv], expected, rtol=1e-6, what=f"{frame} at knot {k}")
            worst = max(worst, np.abs(Rx[k, :, :model.nv] - expected).max() / np.abs(expected).max())
    print(f"{name}: largest error relative to the largest entry {worst:.1e}")


def test_structured_products_equal_the_dense_ones(robot):
    """add_quadratic (through a cost, with and without knot weights) and gauss_newton against the
    generic dense products of the full Jacobians."""
    name, model = robot
    rng = np.random.default_rng(3)
    space = state_space(model)
    K, ndx = 3, space.ndx
    X = random_states(model, rng, K)
    residual = FrameOrientationResidual(space, RobotKinematics(model), FRAMES[name][1],
                                        Rotation.random(K, random_state=4).as_matrix())
    r = residual.value(Knots(X))
    gradient, hessian = rng.uniform(-1, 1, r.shape), rng.uniform(0, 2, r.shape)
    outs = [Derivatives(np.zeros((K, ndx, ndx)), np.zeros((K, ndx))) for _ in range(2)]
    residual.gauss_newton(Knots(X), r, gradient, hessian, outs[0])
    Residual.gauss_newton(residual, Knots(X), r, gradient, hessian, outs[1])
    assert_close(outs[0].Lx, outs[1].Lx, what="Lx")
    assert_close(outs[0].Lxx, outs[1].Lxx, what="Lxx")
    for knot_weights in (None, np.array([1.0, 0.0, 2.5])):
        activation = Quadratic(rng.uniform(0, 2, 3), 3)
        outs = [Derivatives(np.zeros((K, ndx, ndx)), np.zeros((K, ndx))) for _ in range(2)]
        Cost(residual, activation, knot_weights).add_derivatives(Knots(X), outs[0])
        gradient, hessian = activation.derivatives(r)
        factors = np.ones(K) if knot_weights is None else knot_weights
        Residual.gauss_newton(residual, Knots(X), r, factors[:, None] * gradient,
                              factors[:, None] * hessian, outs[1])
        assert_close(outs[0].Lx, outs[1].Lx, what="Lx")
        assert_close(outs[0].Lxx, outs[1].Lxx, what="Lxx")
        assert outs[0].Lx.any()


def test_bad_input():
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    space, kinematics = state_space(model), RobotKinematics(model)
    with pytest.raises(InputError, match="no frame named"):
        FrameOrientationResidual(space, kinematics, "NO_FRAME")
    with pytest.raises(InputError, match="rotation"):
        FrameOrientationResidual(space, kinematics, "base_link", 2.0 * np.eye(3))
    with pytest.raises(InputError, match="rotation"):
        FrameOrientationResidual(space, kinematics, "base_link", np.diag([1.0, 1.0, -1.0]))
    with pytest.raises(InputError, match="reference must be"):
        FrameOrientationResidual(space, kinematics, "base_link", np.eye(4))
    residual = FrameOrientationResidual(space, kinematics, "base_link", np.tile(np.eye(3), (2, 1, 1)))
    X = random_states(model, np.random.default_rng(5), 3)
    with pytest.raises(InputError, match="reference of 2 knots"):
        residual.value(Knots(X))
    with pytest.raises(InputError, match="states must be"):
        residual.value(Knots(X[:, :model.nq]))


def test_a_terminal_orientation_cost_turns_the_tool_to_the_reference():
    """The UR5's tool, 0.6 rad away from the reference, turned to it by the solution of a small
    problem (torques regularized, the arm stopped at the end): the plan's final orientation within
    1e-3 rad of the reference, the solver converged."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["ur5"]))
    space, kinematics = state_space(model), RobotKinematics(model)
    N, dt = 12, 0.05
    q0 = np.array([0.3, -1.2, 1.4, -0.5, 0.8, 0.1])
    start = orientation(model, q0, "tool0")
    target = start @ Rotation.from_rotvec([0.3, -0.4, 0.3]).as_matrix()
    gravity = rd.gravity_torques(model, model.create_data(), q0).copy()
    running = [Cost(ControlResidual(space, 6, gravity), Quadratic(1e-3, 6), name="torque"),
               Cost(StateResidual(space, np.zeros(12)), Quadratic(np.r_[np.zeros(6), np.full(6, 1e-2)], 12),
                    name="velocity")]
    terminal = [Cost(FrameOrientationResidual(space, kinematics, "tool0", target), Quadratic(1e3, 3),
                     name="orientation"),
                Cost(StateResidual(space, np.zeros(12)), Quadratic(np.r_[np.zeros(6), np.ones(6)], 12),
                     name="stop")]
    effort = np.full(6, 1e3)
    solver = RiccatiSolver(OptimalControlProblem(space, N, dt, -effort, effort, running, terminal,
                                                 FreeDynamics(model, dt)))
    x0 = np.r_[q0, np.zeros(6)]
    solver.cold_start(x0, np.tile(gravity, (N, 1)))
    result = solver.solve(x0, max_iterations=200, tolerance=1e-6)
    assert result.ok and result.clamped == 0
    assert np.linalg.norm(log3(target.T @ start)) > 0.5
    final = orientation(model, solver.X[-1, :6], "tool0")
    assert np.linalg.norm(log3(target.T @ final)) < 1e-3
