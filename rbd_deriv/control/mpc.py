"""The fixed-base controller facade: one call per tick returning a :class:`Plan`.

The problem is :func:`rbd_deriv.control.problem.tracking_problem`'s, solved by the package's one solver
(:class:`rbd_deriv.control.solver.RiccatiSolver`) with real-time iterations warm-started from the previous
plan; its dynamics are the dynamics node's held linearization (:class:`~rbd_deriv.control.dynamics.HeldDynamics`)
or the free dynamics relinearized at every knot (:class:`~rbd_deriv.control.dynamics.FreeDynamics`).

Typical use::

    problem = MPCProblem.from_model(model, horizon=20, dt=0.01)
    controller = ModelPredictiveController(problem, model)
    controller.set_reference(X_ref, U_ref)
    plan = controller.solve(x0, time, linearization)   # mode 1
    plan = controller.solve(x0, time)                  # mode 2
    if plan.ok: send(plan.torque)
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rbd_deriv.control.constants import DIVERGENCE_BOUND
from rbd_deriv.control.dynamics import FreeDynamics, HeldDynamics
from rbd_deriv.control.plan import Plan
from rbd_deriv.control.problem import Mode, MPCProblem, tracking_problem
from rbd_deriv.control.solver import RiccatiSolver, SolveStatus
from rbd_deriv.exceptions import InputError, ModelError


@dataclass(frozen=True)
class HeldLinearization:
    """One linearization x+ + A (x - x_lin) + B (u - u_lin), as the dynamics node publishes it.

    Attributes:
        A: (nx, nx) state Jacobian of the discrete dynamics in [-] / [s] / [1/s] blocks.
        B: (nx, nu) input Jacobian.
        x: (nx,) state at which it was taken; u: (nu,) torques [N m] at which it was taken.
        x_next: (nx,) f(x, u).
        dt: Step [s] it was computed with; must equal the horizon step.
    """

    A: np.ndarray
    B: np.ndarray
    x: np.ndarray
    u: np.ndarray
    x_next: np.ndarray
    dt: float


def _checked(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(value, dtype=float)
    if array.shape != shape:
        raise InputError(f"{name} must have shape {shape}, got {array.shape}")
    if not np.isfinite(array).all():
        raise InputError(f"{name} contains NaN or inf")
    return array


class ModelPredictiveController:
    """Box-constrained Riccati MPC of a fixed-base robot, warm-started from its previous plan.

    Args:
        problem: Horizon, weights and limits.
        model: Robot model from :func:`rbd_deriv.load_urdf`; required in
            :attr:`Mode.RELINEARIZE`, unused in :attr:`Mode.HELD`.

    Attributes:
        solver: The :class:`~rbd_deriv.control.solver.RiccatiSolver` of the problem (its X, U, K are the
            last plan's).

    Raises:
        ModelError: Re-linearization mode without a model, or a model that does not match.
    """

    def __init__(self, problem: MPCProblem, model: Any = None) -> None:
        if problem.mode is Mode.RELINEARIZE:
            if model is None:
                raise ModelError("re-linearization mode needs the robot model")
            if tuple(model.joint_names) != problem.joint_names or model.nq != model.nv:
                raise ModelError("model joints differ from the problem's joints")
            self.dynamics = FreeDynamics(model, problem.dt)
        else:
            self.dynamics = HeldDynamics(problem.dt)
        self.problem = problem
        self.model = model
        N, nv = problem.horizon, problem.nv
        #: (N+1, nx) reference states and (N, nu) torques in command terms (the model's minus the disturbance).
        self.X_ref = np.zeros((N + 1, problem.nx))
        self.U_ref = np.zeros((N, nv))
        self.solver = RiccatiSolver(tracking_problem(problem, self.X_ref, self.U_ref, self.dynamics))
        self._last_time: float | None = None
        self._U_ref_model = np.zeros((N, nv))
        self._no_disturbance = np.zeros(nv)
        self._u_lin = np.zeros(nv)

    def reset(self) -> None:
        """Forget the previous plan: the next tick starts cold."""
        self._last_time = None

    def set_reference(self, X_ref: np.ndarray, U_ref: np.ndarray) -> None:
        """Reference states (N+1, nx) [rad, rad/s] and the torques (N, nu) [N m] the model needs."""
        self.X_ref[:] = _checked("X_ref", X_ref, self.X_ref.shape)
        self._U_ref_model[:] = _checked("U_ref", U_ref, self.U_ref.shape)

    def solve(self, x0: np.ndarray, time: float,
              linearization: HeldLinearization | None = None,
              disturbance: np.ndarray | None = None, evaluate_cost: bool = False) -> Plan:
        """Solve the tick problem from the measured state.

        Args:
            x0: Measured state (nx,) = (q [rad], v [rad/s]).
            time: Time stamp of x0 in [s]; the warm start is the previous plan read at this time.
            linearization: Required in :attr:`Mode.HELD`, ignored otherwise.
            disturbance: (nu,) torque [N m] acting on the joints besides the command, held over
                the horizon (see :class:`rbd_deriv.control.observer.DisturbanceObserver`);
                the plan's torques are the commands that achieve the motion despite it.
            evaluate_cost: Give the plan its cost (else NaN).

        Returns:
            The plan. A solver failure is reported in ``plan.status``, never raised; the next
            tick then starts cold.

        Raises:
            InputError: x0 or the linearization has a wrong shape, NaN or inf, or a wrong dt.
        """
        start = _time.perf_counter()
        p = self.problem
        solver = self.solver
        x0 = _checked("x0", x0, (p.nx,))
        if not np.isfinite(time):
            raise InputError(f"time must be finite, got {time!r}")
        if p.mode is Mode.HELD:
            linearization = self.check_linearization(linearization)
        disturbance = (self._no_disturbance if disturbance is None
                       else _checked("disturbance", disturbance, (p.nv,)))
        # The model sees command + disturbance: in command terms, its reference torque and its
        # linearization point move by -disturbance.
        np.subtract(self._U_ref_model, disturbance, out=self.U_ref)
        if p.mode is Mode.HELD:
            np.subtract(linearization.u, disturbance, out=self._u_lin)
            self.dynamics.hold(linearization.A, linearization.B, linearization.x, self._u_lin,
                               linearization.x_next)
        else:
            self.dynamics.bias[:] = disturbance
        if self._last_time is None:
            solver.cold_start(x0, self.U_ref)
        else:
            solver.warm_start(max(0.0, time - self._last_time), x0)
        result = solver.solve(x0, p.max_iterations, line_search=False,
                              cost_of="solution" if evaluate_cost else None)
        status = result.status
        if status is SolveStatus.OK and not (
                np.isfinite(solver.U).all() and np.isfinite(solver.X).all()
                and np.abs(solver.X).max() < DIVERGENCE_BOUND):
            status = SolveStatus.NOT_FINITE
        if status is SolveStatus.OK:
            self._last_time = float(time)
        else:
            self.reset()
        return Plan.of(solver, replace(result, status=status, cost=result.cost if status is SolveStatus.OK else np.nan),
                       _time.perf_counter() - start)

    def cost(self, plan: Plan) -> float:
        """The cost of a plan's states and torques under the current references and disturbance (those of
        the last solve until the next :meth:`set_reference` and :meth:`solve`)."""
        return self.solver.cost(plan.states, plan.torques)

    def check_linearization(self, linearization: HeldLinearization | None) -> HeldLinearization:
        """The linearization with float arrays, if its shapes, values and dt fit the problem.

        Raises:
            InputError: It is missing, has a wrong shape, NaN or inf, or another dt.
        """
        p = self.problem
        if linearization is None:
            raise InputError("held-linearization mode needs a linearization every tick")
        if not np.isclose(linearization.dt, p.dt, rtol=1e-9, atol=0.0):
            raise InputError(f"linearization dt {linearization.dt} s differs from the horizon "
                             f"step {p.dt} s")
        return HeldLinearization(
            A=_checked("A", linearization.A, (p.nx, p.nx)),
            B=_checked("B", linearization.B, (p.nx, p.nv)),
            x=_checked("linearization x", linearization.x, (p.nx,)),
            u=_checked("linearization u", linearization.u, (p.nv,)),
            x_next=_checked("linearization x_next", linearization.x_next, (p.nx,)),
            dt=float(linearization.dt))


def precompile_kernels() -> None:
    """Compile the solver's kernels (rbd_deriv.control.riccati, rbd_deriv.control.euler_riccati,
    rbd_deriv.control.dynamics' held steps) into the
    kernel cache; the package's build (rbd_deriv.precompile) runs it, so that an MPC node's first tick loads
    them instead of compiling.

    Two ticks of a 2-joint problem in held-linearization mode, cold then warm-started, with a linearization
    that is not an Euler step (the dense pass) then with one that is (the structured pass), call every
    kernel with the argument types a tick passes (the solver's arrays, Python floats and ints)."""
    nv, nx = 2, 4
    problem = MPCProblem(
        joint_names=("a", "b"), horizon=3, dt=0.05, torque_lower=-np.ones(nv), torque_upper=np.ones(nv),
        state_lower=np.full(nx, -1.0), state_upper=np.full(nx, 1.0), position_weight=np.ones(nv),
        velocity_weight=np.ones(nv), torque_weight=np.ones(nv), mode=Mode.HELD)
    controller = ModelPredictiveController(problem)
    controller.set_reference(np.zeros((problem.horizon + 1, nx)), np.zeros((problem.horizon, nv)))
    dt, identity = problem.dt, np.eye(nv)
    dense = HeldLinearization(A=np.eye(nx), B=np.vstack([np.zeros((nv, nv)), dt * identity]),
                              x=np.zeros(nx), u=np.zeros(nv), x_next=np.zeros(nx), dt=dt)
    euler = HeldLinearization(A=np.block([[identity, dt * identity], [0 * identity, identity]]),
                              B=np.vstack([dt * dt * identity, dt * identity]), x=np.zeros(nx),
                              u=np.zeros(nv), x_next=np.zeros(nx), dt=dt)
    controller.solver.structured_pass = True
    for held in (dense, euler):
        controller.reset()
        for time in (0.0, dt / 2):
            controller.solve(np.full(nx, 0.1), time, held)
