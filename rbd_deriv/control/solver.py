"""The multiple-shooting Riccati solver of an :class:`~rbd_deriv.control.ocp.OptimalControlProblem`.

One iteration (a Gauss-Newton step of the shooting problem, a real-time iteration when run once
per tick):

1. dynamics of every step at the nominal (X, U) from the provider (or set by the caller), and
   the gaps :math:`d_k = f(x_k, u_k) \\ominus x_{k+1}`;
2. Gauss-Newton derivatives of the costs at the nominal, and of the augmented-Lagrangian terms of the
   problem's constraints (:mod:`rbd_deriv.control.constraints`; their multipliers are updated for each
   full step at the next linearization of its nominal, shifted by a warm start, zeroed by a cold start);
3. the box-constrained Riccati backward pass: feedforward k, feedback K. Two kernels compute it: the
   structured pass (:func:`rbd_deriv.control.euler_riccati.backward_pass`) for semi-implicit Euler steps,
   which works on their velocity rows, and the dense pass (:func:`rbd_deriv.control.riccati.backward_pass`)
   for any other (A, B) (a held linearization of another integrator) on a plain vector space, and for
   robots under STRUCTURED_PASS_MIN_JOINTS joints without a free flyer, where its few large BLAS calls
   are faster than the structured pass's many small ones. The same problem either way, the same plan to
   round-off;
4. the rollout of the linear model with that policy, controls clamped to the box, giving the
   tangent deviations DX, then :math:`X \\oplus DX` (the gaps close in one step on the linear
   model, as in Crocoddyl's FDDP with a full step).

:class:`RiccatiSolver` owns every buffer: nothing is allocated per iteration but by the
provider's batched linearization and by the costs' residuals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional

import numpy as np

from rbd_deriv.control import euler_riccati, riccati
from rbd_deriv.control.constants import (CONTROL_STEP_TOLERANCE, LINE_SEARCH_MIN_STEP as MIN_STEP,
                                         MERIT_ROUND_OFF, STRUCTURED_PASS_MIN_JOINTS)
from rbd_deriv.control.cost import total
from rbd_deriv.control.dynamics import KnotDynamics
from rbd_deriv.control.ocp import OptimalControlProblem, check_state
from rbd_deriv.control.residuals import Derivatives, Knots, fold_force_derivatives
from rbd_deriv.exceptions import InputError


class SolveStatus(str, Enum):
    """Outcome of a solve, for every problem."""

    OK = "ok"
    NOT_CONVEX = "not_convex"
    NOT_FINITE = "not_finite"


#: The kernels' status codes (:mod:`rbd_deriv.control.riccati`) as :class:`SolveStatus`.
STATUS = {riccati.STATUS_OK: SolveStatus.OK, riccati.STATUS_NOT_CONVEX: SolveStatus.NOT_CONVEX,
          riccati.STATUS_NOT_FINITE: SolveStatus.NOT_FINITE}

#: The parts of a solve timed in its ``timings`` (seconds, summed over the iterations): the dynamics of the
#: horizon with the gaps and integrator blocks; the costs' and constraints' Gauss-Newton derivatives; the
#: Riccati backward and forward passes with the step's acceptance.
SOLVE_PARTS = ("linearization", "costs", "riccati")


@dataclass(frozen=True)
class SolveResult:
    """Outcome of :meth:`RiccatiSolver.solve`.

    Attributes:
        status: The :class:`SolveStatus`.
        iterations: Riccati passes done; qp_iterations: stage box-QP iterations in total.
        clamped: (knot, control) pairs on a bound at the last pass.
        largest_update: Largest control change of the last iteration.
        cost: The cost asked for (``cost_of``), with the constraints' augmented-Lagrangian terms, else NaN;
            force costs read the forces of the last linearization, taken before the last step.
    """

    status: SolveStatus
    iterations: int
    qp_iterations: int
    clamped: int
    largest_update: float
    cost: float

    @property
    def ok(self) -> bool:
        """True when every pass succeeded."""
        return self.status is SolveStatus.OK


class RiccatiSolver:
    """Buffers and iterations of the Riccati solver for one problem.

    Shapes use N = horizon, nx = nq + nv, ndx = 2 nv, nu controls, m force rows, b the size of
    the integrator's non-identity block (6 with a free flyer, else 0).

    Attributes:
        X, U: Nominal states (N+1, nx) and controls (N, nu): the warm start, then the solution.
        dynamics: :class:`KnotDynamics` of the N steps at the nominal.
        d: Gaps (N, ndx).
        Lxx, Lx: (N+1, ndx, ndx), (N+1, ndx); Luu, Lux, Lu: (N, nu, nu), (N, nu, ndx), (N, nu).
        K, k_ff: Feedback (N, nu, ndx) and feedforward (N, nu) of the last backward pass.
        free: (N, nu) controls not held by a bound at the last backward pass.
        multipliers_pending: A full step was taken whose multiplier update waits for the forces of its
            nominal (:meth:`update_multipliers` at the next linearization there).
        structured_pass: Whether Euler steps go through the structured pass (by default with a free flyer
            or from STRUCTURED_PASS_MIN_JOINTS controls); False sends every problem without a free flyer
            through the dense pass.
    """

    def __init__(self, ocp: OptimalControlProblem) -> None:
        self.ocp = ocp
        space = ocp.space
        N, nx, ndx, nu, m = ocp.horizon, space.nx, space.ndx, ocp.nu, ocp.force_rows
        self.space = space
        self.X = np.tile(space.zero(), (N + 1, 1))
        self.U = np.zeros((N, nu))
        self.X_new = self.X.copy()
        self.U_new = np.zeros((N, nu))
        self.DX = np.zeros((N + 1, ndx))
        self.dynamics = KnotDynamics(N, nx, ndx, nu, m)
        self.d = np.zeros((N, ndx))
        b = space.block
        self.Jq = np.tile(np.eye(b), (N, 1, 1))
        self.Jv = np.tile(np.eye(b), (N, 1, 1))
        self.Lxx = np.zeros((N + 1, ndx, ndx))
        self.Lx = np.zeros((N + 1, ndx))
        self.Luu = np.zeros((N, nu, nu))
        self.Lux = np.zeros((N, nu, ndx))
        self.Lu = np.zeros((N, nu))
        self.K = np.zeros((N, nu, ndx))
        self.k_ff = np.zeros((N, nu))
        self.free = np.ones((N, nu), dtype=np.bool_)
        self.control_lower = ocp.control_lower
        self.control_upper = ocp.control_upper
        # Kernel workspaces.
        self.P = np.zeros((ndx, ndx))
        self.p = np.zeros(ndx)
        self.Vx = np.zeros((N + 1, ndx))
        size = max(ndx, nu)
        self._work = np.zeros((12, size))
        self._matrices = np.zeros((4, ndx, ndx))
        self._flat = np.zeros(euler_riccati.flat_size(ndx, nu))
        self._index = np.zeros(nu, dtype=np.int64)
        self._forward_work = np.zeros((2, size))
        self.structured_pass = b > 0 or nu >= STRUCTURED_PASS_MIN_JOINTS
        if b == 0:  # the dense pass's workspaces (it needs a plain vector space)
            self._PA, self._PB = np.zeros((ndx, ndx)), np.zeros((ndx, nu))
            self._Qxx, self._Quu, self._Qux = np.zeros((ndx, ndx)), np.zeros((nu, nu)), np.zeros((nu, ndx))
            self._Qx, self._Qu, self._L = np.zeros(ndx), np.zeros(nu), np.zeros((nu, nu))
            self._dense_work = np.zeros((6, nu))
            self._vector, self._dx, self._dx_next = np.zeros(ndx), np.zeros(ndx), np.zeros(ndx)
        #: Force-space derivatives (N, m, m), (N, m) of the running costs (see Derivatives).
        self.Lff = np.zeros((N, m, m)) if m else None
        self.Lf = np.zeros((N, m)) if m else None
        self._running = Derivatives(self.Lxx[:N], self.Lx[:N], self.Luu, self.Lux, self.Lu,
                                    self.Lff, self.Lf)
        self._terminal = Derivatives(self.Lxx[N:], self.Lx[N:])
        self.multipliers_pending = False

    # ------------------------------------------------------------------------------ nominal
    def cold_start(self, x0: np.ndarray, U: np.ndarray | None = None) -> None:
        """Nominal = x0 held at every knot; controls U (N, nu) clamped to the box (default 0)."""
        x0 = check_state("x0", x0, self.space)
        self.X[:] = x0
        if U is None:
            self.U[:] = np.clip(0.0, self.control_lower, self.control_upper)
        else:
            np.clip(U, self.control_lower, self.control_upper, out=self.U)
        self.k_ff[:] = 0.0
        self.multipliers_pending = False
        for constraint in self.ocp.constraints:
            constraint.reset()

    def warm_start(self, elapsed: float, x0: np.ndarray) -> None:
        """Nominal = the current plan read ``elapsed`` [s] later (linear between knots), X[0] = x0;
        the constraints' multipliers read as much later."""
        x0 = check_state("x0", x0, self.space)
        riccati.shift_plan(self.X, self.U, float(elapsed), self.ocp.dt, x0, self.control_lower,
                           self.control_upper, self.X, self.U)
        self.space.normalize(self.X)
        for constraint in self.ocp.constraints:
            constraint.shift(elapsed, self.ocp.dt)

    # ------------------------------------------------------------------------------ pieces
    def linearize(self, X: np.ndarray | None = None, U: np.ndarray | None = None) -> None:
        """Dynamics of every step at (X, U) (default the nominal) from the problem's provider,
        then the gaps."""
        if self.ocp.dynamics is None:
            raise InputError("this problem has no dynamics provider: set the knot dynamics")
        X = self.X if X is None else X
        self.ocp.dynamics.linearize(X[:-1], self.U if U is None else U, self.dynamics)
        self.update_gaps(X)

    def update_gaps(self, X: np.ndarray | None = None) -> None:
        """Gaps d_k = X_next[k] (-) X[k+1] and the integrator blocks, from ``self.dynamics``."""
        X = self.X if X is None else X
        X_next = self.dynamics.X_next
        self.space.difference(X[1:], X_next, self.d)
        self.space.step_jacobian_blocks(X[:-1], X_next, self.ocp.dt, self.Jq, self.Jv)

    def running_knots(self, X: np.ndarray, U: np.ndarray) -> Knots:
        """The running knots of a trajectory, with the forces of the current dynamics."""
        N = self.ocp.horizon
        dynamics = self.dynamics
        if dynamics.force_rows:
            return Knots(X[:N], U, dynamics.F, dynamics.dF_dx, dynamics.dF_du)
        return Knots(X[:N], U)

    def cost_derivatives(self) -> None:
        """Gauss-Newton derivatives of every cost and of the constraints' augmented-Lagrangian terms
        at the nominal into Lxx ... Lu."""
        for array in (self.Lxx, self.Lx, self.Luu, self.Lux, self.Lu):
            array.fill(0.0)
        if self.Lff is not None:
            self.Lff.fill(0.0)
            self.Lf.fill(0.0)
        running = self.running_knots(self.X, self.U)
        for cost in self.ocp.running_costs:
            cost.add_derivatives(running, self._running)
        for constraint in self.ocp.constraints:
            constraint.add_derivatives(running, self._running)
        if self.Lff is not None:  # the fold skips the rows that carry no force cost
            fold_force_derivatives(running, self._running)
        terminal = Knots(self.X[-1:])
        for cost in self.ocp.terminal_costs:
            cost.add_derivatives(terminal, self._terminal)

    def cost(self, X: np.ndarray, U: np.ndarray) -> float:
        """Cost of a trajectory X (N+1, nx), U (N, nu), forces from the current dynamics, with the
        constraints' augmented-Lagrangian terms at their current multipliers."""
        running = self.running_knots(X, U)
        return (total(self.ocp.running_costs, running)
                + sum(constraint.value(running) for constraint in self.ocp.constraints)
                + total(self.ocp.terminal_costs, Knots(X[-1:])))

    def update_multipliers(self) -> None:
        """The constraints' multiplier update at the nominal, lambda <- max(0, lambda + rho g), the
        dynamics (forces) linearized there: after a full step, at the next linearization of its nominal
        (:attr:`multipliers_pending`; :meth:`solve` calls it)."""
        self.multipliers_pending = False
        if self.ocp.constraints:
            running = self.running_knots(self.X, self.U)
            for constraint in self.ocp.constraints:
                constraint.update(running)

    def dense(self) -> bool:
        """Whether the passes at the current dynamics are the dense ones (see the module docstring).

        Raises:
            InputError: Dynamics that are not Euler steps on a state space with a free flyer.
        """
        if self.dynamics.euler_step:
            return self.space.block == 0 and not self.structured_pass
        if self.space.block:
            raise InputError("the dynamics are not semi-implicit Euler steps: with a free flyer the "
                             "solver needs them")
        return True

    def backward(self) -> tuple[int, int, int]:
        """Riccati backward pass at the current derivatives: (status, QP iterations, clamped)."""
        dynamics = self.dynamics
        # The previous feedforward, read at the new nominal, is a good first guess of the QP: each stage's
        # QP clamps it into the box at the nominal, U + k in [lower, upper], first.
        if self.dense():
            return riccati.backward_pass(
                dynamics.A, dynamics.B, self.d, self.Lxx, self.Lx, self.Luu, self.Lux, self.Lu, self.U,
                self.control_lower, self.control_upper, self.K, self.k_ff, self.free, self.P, self.p, self._PA,
                self._PB, self._Qxx, self._Quu, self._Qux, self._Qx, self._Qu, self._index, self._L,
                self._dense_work, self._vector)
        return euler_riccati.backward_pass(
            dynamics.A, dynamics.B, self.d, self.Jq, self.Jv, self.ocp.dt, self.Lxx, self.Lux,
            self.Luu, self.Lx, self.Lu, self.U, self.control_lower, self.control_upper, self.K,
            self.k_ff, self.free, self.P, self.p, self.Vx, self._work, self._matrices, self._flat,
            self._index)

    def forward(self) -> float:
        """Rollout of the linear model with the last policy into X_new, U_new (DX the step); largest update."""
        dynamics = self.dynamics
        if self.dense():
            largest = riccati.forward_pass(dynamics.A, dynamics.B, self.d, self.K, self.k_ff, self.X, self.U,
                                           self.control_lower, self.control_upper, self.X_new, self.U_new,
                                           self._dx, self._dx_next)
            np.subtract(self.X_new, self.X, out=self.DX)
            if hasattr(self.space, "model"):  # a model's joints may wrap: X (+) DX on its configuration space
                self.space.integrate(self.X, self.DX, self.X_new)
            return largest
        largest = euler_riccati.forward_pass(
            dynamics.A, dynamics.B, self.d, self.Jq, self.Jv, self.ocp.dt, self.K, self.k_ff,
            self.U, self.control_lower, self.control_upper, self.DX, self.U_new,
            self._forward_work)
        self.space.integrate(self.X, self.DX, self.X_new)
        return largest

    def accept(self) -> None:
        """Make the last rollout the nominal trajectory."""
        self.X, self.X_new = self.X_new, self.X
        self.U, self.U_new = self.U_new, self.U

    # ------------------------------------------------------------------------------ solve
    def merit(self, X: np.ndarray, U: np.ndarray, weight: float) -> float:
        """l1 merit cost + weight * sum_k |d_k|_1 of a trajectory whose gaps are in ``d``."""
        return self.cost(X, U) + weight * float(np.abs(self.d).sum())

    def solve(self, x0: np.ndarray, max_iterations: int = 1,
              tolerance: float = CONTROL_STEP_TOLERANCE, line_search: bool = True,
              cost_of: Optional[str] = "solution", step_filter: Optional[Callable[["RiccatiSolver"], bool]] = None,
              timings: Optional[dict] = None) -> SolveResult:
        """Iterate from the current nominal with X[0] = x0 until the controls stop changing: the one
        Gauss-Newton loop of every problem (the fixed-base and the legged MPC run it once per tick, a real-time
        iteration, or a few from scratch).

        Each iteration relinearizes the dynamics at the nominal, takes the cost derivatives, the backward pass
        and the rollout. With ``line_search``, each step is scaled back (alpha = 1, 1/2, 1/4, ...) until it
        lowers the exact-penalty merit :math:`J + \\mu \\sum_k \\|d_k\\|_1` with :math:`\\mu` twice the
        largest value gradient of the pass (a bound on the multipliers of the dynamics, Nocedal and Wright,
        Numerical Optimization, sec. 15.4); without it every step is taken whole (what a real-time iteration
        does), once ``step_filter`` accepts it (a step it refuses fails the solve, the nominal kept).

        The constraints' multipliers are updated for each step taken whole (alpha = 1 of the line search, or as
        ``step_filter`` left it: the step's subproblem gives them only at its own solution) once the forces of its
        nominal are known, at the next linearization
        there: this solve's next iteration, or the next solve's first (after a warm start moved them with the
        plan).

        Args:
            x0: Measured state (nx,).
            max_iterations: Gauss-Newton iterations at most (1 is a real-time iteration).
            tolerance: Stop once the largest control update is below it (0: run them all).
            line_search: Scale the steps back until the merit decreases.
            cost_of: The cost the result gives: of the ``"solution"``, of the nominal it ``"start"``-ed from
                (read while the first iteration's kinematics are at hand), or None (NaN).
            step_filter: Called on a full step (X_new, U_new, DX beside X, U) before it is taken; it may scale
                it in place; False refuses it.
            timings: Add the seconds of each of :data:`SOLVE_PARTS` to this dictionary.

        Returns:
            The :class:`SolveResult`; the solution is in X, U, the policy in k_ff, K.

        Raises:
            InputError: x0 has a wrong shape or is not finite, or ``max_iterations`` is not a positive integer.
        """
        self.X[0] = check_state("x0", x0, self.space)
        if int(max_iterations) != max_iterations or max_iterations < 1:
            raise InputError(f"max_iterations must be a positive integer, got {max_iterations!r}", "max_iterations")
        clock = time.perf_counter
        spent = dict.fromkeys(SOLVE_PARTS, 0.0)
        status = euler_riccati.STATUS_OK
        iterations = qp_iterations = clamped = 0
        largest, cost = np.inf, np.nan
        start = clock()
        self.linearize()
        for iterations in range(1, max_iterations + 1):
            if self.multipliers_pending:
                self.update_multipliers()
            middle = clock()
            spent["linearization"] += middle - start
            self.cost_derivatives()
            if iterations == 1 and cost_of == "start":
                cost = self.cost(self.X, self.U)
            start = clock()
            spent["costs"] += start - middle
            status, stage_iterations, clamped = self.backward()
            qp_iterations += stage_iterations
            if status == euler_riccati.STATUS_OK:
                largest = self.forward()
                if line_search:
                    self.multipliers_pending = self._line_search() == 1.0
                elif step_filter is None or step_filter(self):
                    self.accept()
                    self.multipliers_pending = True
                else:
                    status = euler_riccati.STATUS_NOT_FINITE
            if status != euler_riccati.STATUS_OK:
                largest = np.inf
            middle = clock()
            spent["riccati"] += middle - start
            start = middle
            if status != euler_riccati.STATUS_OK or largest <= tolerance:
                break
            if not line_search and iterations < max_iterations:
                self.linearize()
        if status == euler_riccati.STATUS_OK and cost_of == "solution":
            cost = self.cost(self.X, self.U)
        if timings is not None:
            for part, seconds in spent.items():
                timings[part] = timings.get(part, 0.0) + seconds
        return SolveResult(STATUS[status], iterations, qp_iterations, clamped, largest, cost)

    def _line_search(self) -> float:
        """Take the largest step of the last pass (X_new, U_new) that lowers the merit.

        Leaves the nominal at the accepted point with its dynamics and gaps; returns alpha.
        Near a solution the merit changes by round-off only, so a step that raises it by less
        than MERIT_ROUND_OFF (relative) counts as a decrease.
        """
        weight = 2.0 * float(np.abs(self.Vx).max()) + 1.0
        start = self.merit(self.X, self.U, weight)
        start += MERIT_ROUND_OFF * max(1.0, abs(start))
        step_X, step_U = self.DX.copy(), self.U_new - self.U
        alpha = 1.0
        while True:
            if alpha < 1.0:
                self.space.integrate(self.X, alpha * step_X, self.X_new)
                np.add(self.U, alpha * step_U, out=self.U_new)
            self.linearize(self.X_new, self.U_new)
            if self.merit(self.X_new, self.U_new, weight) <= start or alpha <= MIN_STEP:
                self.accept()
                return alpha
            alpha *= 0.5
