"""The tick problem's matrices, allocated once per controller and updated in place (the *how*).

A :class:`RiccatiWorkspace` holds the nominal trajectory (warm start), the reference, the affine
dynamics of the deviations for every knot, the cost derivatives, the gains and every scratch
buffer of the Riccati kernels. Nothing is allocated per tick except by the batched linearization
of the core library in re-linearization mode.

Two backward and forward passes solve the same problem. When the dynamics are semi-implicit Euler
steps (always in re-linearization mode, where ``rd.linearize_batch`` gives them; in held mode when
the linearization has that structure, :func:`is_euler_step`) and the robot has
STRUCTURED_PASS_MIN_JOINTS joints or more, the structured pass of
:mod:`rbd_deriv.control.euler_riccati` runs, with no free-flyer block: its products have nv rows
instead of nx. Any other (A, B), and small arms, go through the dense pass of
:mod:`rbd_deriv.control.riccati`.
"""

from __future__ import annotations

import numpy as np

from rbd_deriv.control import euler_riccati, riccati
from rbd_deriv.control.constants import EULER_STEP_TOLERANCE, STRUCTURED_PASS_MIN_JOINTS
from rbd_deriv.control.problem import MPCProblem
from rbd_deriv.exceptions import InputError


def is_euler_step(A: np.ndarray, B: np.ndarray, dt: float) -> bool:
    """True if (A, B) is a semi-implicit Euler step of a vector space to EULER_STEP_TOLERANCE.

    With v+ = v + dt a and q+ = q + dt v+, the position rows are A_q = [I, 0] + dt A_v and
    B_q = dt B_v (A_v, B_v the velocity rows); see :func:`rbd_deriv.control.euler_riccati.is_euler_step`.

    Args:
        A: (nx, nx) state Jacobian, nx = 2 nv; B: (nx, nu) input Jacobian; dt: step [s].
    """
    return bool(euler_riccati.is_euler_step(A, B, float(dt), EULER_STEP_TOLERANCE))


class RiccatiWorkspace:
    """Buffers of one MPC problem. Shapes use N = horizon, nx = 2 nv, nu = nv.

    Attributes:
        X, U: Nominal states (N+1, nx) and torques (N, nu): the warm start, then the plan.
        X_ref, U_ref: Reference states (N+1, nx) and torques (N, nu).
        A, B, d: Affine dynamics of the deviations, (N, nx, nx), (N, nx, nu), (N, nx).
        K, k_ff: Feedback (N, nu, nx) and feedforward (N, nu) of the last backward pass.
        free: (N, nu) torques not held by a bound at the last backward pass.
        euler_step: True when the dynamics set last are semi-implicit Euler steps.
        structured_pass: Whether Euler steps go through the structured pass (by default from
            STRUCTURED_PASS_MIN_JOINTS joints); False keeps the dense pass for every (A, B).
    """

    def __init__(self, problem: MPCProblem) -> None:
        self.problem = problem
        horizon, nx, nu = problem.horizon, problem.nx, problem.nv
        self.X = np.zeros((horizon + 1, nx))
        self.U = np.zeros((horizon, nu))
        self.X_new = np.zeros((horizon + 1, nx))
        self.U_new = np.zeros((horizon, nu))
        self.X_ref = np.zeros((horizon + 1, nx))
        self.U_ref = np.zeros((horizon, nu))
        self.A = np.zeros((horizon, nx, nx))
        self.B = np.zeros((horizon, nx, nu))
        self.d = np.zeros((horizon, nx))
        self.Wx = np.zeros((horizon + 1, nx))
        self.gx = np.zeros((horizon + 1, nx))
        self.gu = np.zeros((horizon, nu))
        self.K = np.zeros((horizon, nu, nx))
        self.k_ff = np.zeros((horizon, nu))
        self.free = np.ones((horizon, nu), dtype=np.bool_)
        self.state_weight = np.concatenate([problem.position_weight, problem.velocity_weight])
        self.torque_weight = np.array(problem.torque_weight)
        self.torque_lower = np.array(problem.torque_lower)
        self.torque_upper = np.array(problem.torque_upper)
        self.state_lower = np.array(problem.state_lower)
        self.state_upper = np.array(problem.state_upper)
        self._P = np.zeros((nx, nx))
        self._p = np.zeros(nx)
        self._PA = np.zeros((nx, nx))
        self._PB = np.zeros((nx, nu))
        self._Qxx = np.zeros((nx, nx))
        self._Quu = np.zeros((nu, nu))
        self._Qux = np.zeros((nu, nx))
        self._Qx = np.zeros(nx)
        self._Qu = np.zeros(nu)
        # Contiguous copies of the knots for the batched linearization.
        self.Q_knots = np.zeros((horizon, nu))
        self.V_knots = np.zeros((horizon, nu))
        self._index = np.zeros(nu, dtype=np.int64)
        self._L = np.zeros((nu, nu))
        self._work = np.zeros((6, nu))
        self._vector = np.zeros(nx)
        self._dx = np.zeros(nx)
        self._dx_next = np.zeros(nx)
        # The structured pass: dense cost Hessians (diagonal here), no free-flyer block.
        self.euler_step = False
        self.structured_pass = nu >= STRUCTURED_PASS_MIN_JOINTS
        self._Lxx = np.zeros((horizon + 1, nx, nx))
        self._Lxx_diagonal = np.einsum("kii->ki", self._Lxx)  # a writable view of the diagonals
        self._Lux = np.zeros((horizon, nu, nx))
        self._Luu = np.zeros((horizon, nu, nu))
        self._Luu[:, np.arange(nu), np.arange(nu)] = self.torque_weight
        self._no_block = np.zeros((horizon, 0, 0))
        self._dt = float(problem.dt)
        self._Vx = np.zeros((horizon + 1, nx))
        self._euler_work = np.zeros((12, nx))
        self._matrices = np.zeros((5, nx, nx))
        self._flat = np.zeros(euler_riccati.flat_size(nx, nu))
        self._DX = np.zeros((horizon + 1, nx))
        self._forward_work = np.zeros((2, nx))

    def warm_start(self, X_prev: np.ndarray, U_prev: np.ndarray, elapsed: float,
                   x0: np.ndarray) -> None:
        """Nominal = previous plan advanced by ``elapsed`` [s], first knot = measured x0 (nx,)."""
        p = self.problem
        riccati.shift_plan(X_prev, U_prev, float(elapsed), p.dt, x0, self.torque_lower,
                           self.torque_upper, self.X, self.U)

    def cold_start(self, x0: np.ndarray) -> None:
        """Nominal = x0 held at every knot, torques = reference torques clamped to the box."""
        self.X[:] = x0
        np.clip(self.U_ref, self.torque_lower, self.torque_upper, out=self.U)

    def set_held_dynamics(self, A: np.ndarray, B: np.ndarray, x_lin: np.ndarray,
                          u_lin: np.ndarray, x_plus: np.ndarray) -> None:
        """Every knot uses x' = x+ + A (x - x_lin) + B (u - u_lin) (mode 1)."""
        riccati.held_dynamics(A, B, x_lin, u_lin, x_plus, self.X, self.U, self.A, self.B, self.d)
        self.euler_step = is_euler_step(A, B, self.problem.dt)

    def set_knot_dynamics(self, A: np.ndarray, B: np.ndarray, X_next: np.ndarray) -> None:
        """Knot k uses its own (A_k, B_k) and f(X_k, U_k) = X_next[k] (mode 2); shapes (N, ...).

        A and B must be ``rd.linearize_batch``'s semi-implicit Euler steps at the problem's dt:
        the structured pass reads only their velocity rows. They are kept, not copied (copying
        both is a few hundred microseconds for a humanoid): the caller hands them over.
        """
        if A.shape != self.A.shape or B.shape != self.B.shape:
            raise InputError(f"knot dynamics must have shapes {self.A.shape} and {self.B.shape}, "
                             f"got {A.shape} and {B.shape}")
        self.A = np.ascontiguousarray(A, dtype=float)
        self.B = np.ascontiguousarray(B, dtype=float)
        np.subtract(X_next, self.X[1:], out=self.d)
        self.euler_step = True

    def cost(self, X: np.ndarray, U: np.ndarray) -> float:
        """MPC cost of a trajectory X (N+1, nx), U (N, nu) against the stored reference."""
        p = self.problem
        return riccati.trajectory_cost(X, U, self.X_ref, self.U_ref, self.state_weight,
                                       self.torque_weight, p.terminal_scale, self.state_lower,
                                       self.state_upper, p.limit_weight)

    def iterate(self) -> tuple[int, int, int, float]:
        """One Riccati pass and linear rollout around the nominal; the result goes to X_new, U_new.

        Returns:
            (status, stage-QP iterations, clamped torques, largest torque update [N m]).
        """
        p = self.problem
        riccati.stage_cost_derivatives(self.X, self.U, self.X_ref, self.U_ref, self.state_weight,
                                       self.torque_weight, p.terminal_scale, self.state_lower,
                                       self.state_upper, p.limit_weight, self.Wx, self.gx, self.gu)
        # The previous feedforward, read at the new nominal, is a good first guess of the QP.
        np.clip(self.k_ff, self.torque_lower - self.U, self.torque_upper - self.U, out=self.k_ff)
        if self.euler_step and self.structured_pass:
            return self._iterate_euler()
        status, qp_iterations, clamped = riccati.backward_pass(
            self.A, self.B, self.d, self.Wx, self.gx, self.torque_weight, self.gu, self.U,
            self.torque_lower, self.torque_upper, self.K, self.k_ff,
            self.free, self._P, self._p, self._PA, self._PB, self._Qxx, self._Quu, self._Qux,
            self._Qx, self._Qu, self._index, self._L, self._work, self._vector)
        if status != riccati.STATUS_OK:
            return status, qp_iterations, clamped, np.inf
        largest = riccati.forward_pass(self.A, self.B, self.d, self.K, self.k_ff, self.X, self.U,
                                       self.torque_lower, self.torque_upper, self.X_new,
                                       self.U_new, self._dx, self._dx_next)
        return status, qp_iterations, clamped, largest

    def _iterate_euler(self) -> tuple[int, int, int, float]:
        """:meth:`iterate` through the structured kernels (dynamics that are Euler steps)."""
        np.copyto(self._Lxx_diagonal, self.Wx)
        status, qp_iterations, clamped = euler_riccati.backward_pass(
            self.A, self.B, self.d, self._no_block, self._no_block, self._dt, self._Lxx,
            self._Lux, self._Luu, self.gx, self.gu, self.U, self.torque_lower, self.torque_upper,
            self.K, self.k_ff, self.free, self._P, self._p, self._Vx, self._euler_work,
            self._matrices, self._flat, self._index)
        if status != riccati.STATUS_OK:
            return status, qp_iterations, clamped, np.inf
        largest = euler_riccati.forward_pass(
            self.A, self.B, self.d, self._no_block, self._no_block, self._dt, self.K,
            self.k_ff, self.U, self.torque_lower, self.torque_upper, self._DX, self.U_new,
            self._forward_work)
        np.add(self.X, self._DX, out=self.X_new)
        return status, qp_iterations, clamped, largest

    def accept(self) -> None:
        """Make the last rollout the nominal trajectory."""
        self.X, self.X_new = self.X_new, self.X
        self.U, self.U_new = self.U_new, self.U
