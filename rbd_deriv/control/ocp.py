"""The optimal control problem over a horizon (the *what* the Riccati solver solves).

.. math::

    \\min_{x, u} \\sum_{k=0}^{N-1} \\sum_{c \\in \\mathcal R} \\ell_c(x_k, u_k)
    + \\sum_{c \\in \\mathcal T} \\ell_c(x_N)
    \\quad \\text{s.t.} \\quad x_{k+1} = f_k(x_k, u_k), \\; x_0 = \\hat x, \\;
    u_{lo} \\le u_k \\le u_{hi}, \\; g_c(x_k, u_k, f_k) \\le 0 \\; (c \\in \\mathcal C)

with x = (q, v) on the robot's state space (:mod:`rbd_deriv.control.state_space`), u the
torques of the actuated joints, :math:`\\mathcal R` and :math:`\\mathcal T` lists of costs
(:mod:`rbd_deriv.control.cost`) and :math:`f_k` the step of a dynamics provider
(:mod:`rbd_deriv.control.dynamics`): a held linearization (the fixed-base MPC's held mode), the free
dynamics, the contact dynamics of a schedule with an impulse at a touchdown. :math:`\\mathcal C` is a list of inequality constraints of the running
knots (:mod:`rbd_deriv.control.constraints`: the friction cone), which the solver keeps by an
augmented Lagrangian whose multipliers the constraints hold. Built once; its references, weights and
knot weights are arrays that the caller updates in place between ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from rbd_deriv.control.constraints import InequalityConstraint
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import DynamicsProvider
from rbd_deriv.control.euler_riccati import all_finite
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError


@dataclass
class OptimalControlProblem:
    """Horizon, costs, dynamics and control box.

    Attributes:
        space: The state space.
        horizon: Number of steps N.
        dt: Step [s] (the Euler step's, also the integrator of the Riccati pass).
        control_lower, control_upper: (nu,) control box, finite.
        running_costs: Costs of the knots 0 to N-1 (knot weights, if any, of length N).
        terminal_costs: Costs of the knot N (no control; knot weights of length 1).
        dynamics: The dynamics provider (the solver needs one to solve; None builds a problem whose knot
            dynamics a caller sets itself, as the kernels' tests do).
        constraints: Inequality constraints of the knots 0 to N-1
            (:class:`~rbd_deriv.control.constraints.InequalityConstraint`, multipliers for N knots).
    """

    space: VectorSpace
    horizon: int
    dt: float
    control_lower: np.ndarray
    control_upper: np.ndarray
    running_costs: Sequence[Cost] = field(default_factory=list)
    terminal_costs: Sequence[Cost] = field(default_factory=list)
    dynamics: DynamicsProvider | None = None
    constraints: Sequence[InequalityConstraint] = field(default_factory=list)

    def __post_init__(self) -> None:
        if int(self.horizon) != self.horizon or self.horizon < 1:
            raise InputError(f"horizon must be a positive integer, got {self.horizon!r}")
        if not np.isfinite(self.dt) or self.dt <= 0.0:
            raise InputError(f"dt must be a positive number of seconds, got {self.dt!r}")
        self.control_lower = np.array(self.control_lower, dtype=float)
        self.control_upper = np.array(self.control_upper, dtype=float)
        if self.control_lower.ndim != 1 or self.control_lower.shape != self.control_upper.shape:
            raise InputError("control_lower and control_upper must be vectors of one size")
        if not (np.isfinite(self.control_lower).all() and np.isfinite(self.control_upper).all()):
            raise InputError("the control box must be finite")
        if (self.control_lower > self.control_upper).any():
            raise InputError("control_lower exceeds control_upper")
        for cost in self.terminal_costs:
            if cost.residual.uses_control:
                raise InputError(f"terminal cost {cost.name!r} depends on the control")
        self.running_costs = list(self.running_costs)
        self.constraints = list(self.constraints)
        for constraint in self.constraints:
            if constraint.multipliers.shape[0] != self.horizon:
                raise InputError(f"constraint {constraint.name!r} has multipliers for "
                                 f"{constraint.multipliers.shape[0]} knots, the horizon is {self.horizon}")
        self.terminal_costs = list(self.terminal_costs)

    @property
    def nu(self) -> int:
        """Number of controls."""
        return self.control_lower.size

    @property
    def nx(self) -> int:
        """State size nq + nv."""
        return self.space.nx

    @property
    def ndx(self) -> int:
        """Tangent size 2 nv."""
        return self.space.ndx

    @property
    def force_rows(self) -> int:
        """Force rows per step of the dynamics (0 without contacts or provider)."""
        return 0 if self.dynamics is None else self.dynamics.force_rows


def check_state(name: str, value: Any, space: VectorSpace) -> np.ndarray:
    """value as a float (nx,) state without NaN or inf, or InputError naming it."""
    array = np.asarray(value, dtype=float)
    if array.shape != (space.nx,):
        raise InputError(f"{name} must have shape ({space.nx},), got {array.shape}", name)
    if not all_finite(array):  # a compiled loop: np.isfinite(array).all() takes a microsecond
        raise InputError(f"{name} contains NaN or inf", name)
    return array

