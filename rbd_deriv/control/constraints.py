"""Inequality constraints of the optimal control problem, kept by an augmented Lagrangian across the
real-time iterations.

A constraint of the running knots is :math:`g(x_k, u_k, f_k) \\le 0`, nr rows per knot, made from a
residual (:mod:`rbd_deriv.control.residuals`) that must stay non-negative: :math:`g = -r`, so that its
Jacobians are the residual's, negated, and its Gauss-Newton products go through the residual's own
(through the force space for a residual of the contact forces). The friction cone is the one the legged
MPC has (:class:`FrictionConeConstraint`): for each closed contact the four faces of the pyramid inscribed
in the cone and the unilateral normal force of
:class:`~rbd_deriv.control.contact_force.FrictionConeResidual`,

.. math::

    g = \\big[f_{t1} - \\mu' f_n,\\; -f_{t1} - \\mu' f_n,\\; f_{t2} - \\mu' f_n,\\; -f_{t2} - \\mu' f_n,\\;
    f_{min} - f_n\\big] \\le 0 \\quad [N], \\qquad \\mu' = \\mu / \\sqrt 2,

rows of open contacts absent (their multipliers held at 0).

**Method: an augmented Lagrangian (Powell-Hestenes-Rockafellar) whose multipliers live across ticks.**
With multipliers :math:`\\lambda_k \\ge 0` (N, nr) [1/N: cost per newton] and a penalty
:math:`\\rho > 0` [1/N^2], each running knot's cost gets

.. math::

    \\phi(g; \\lambda, \\rho) = \\frac{1}{2\\rho} \\sum_i \\big(\\max(0, \\lambda_i + \\rho g_i)^2
    - \\lambda_i^2\\big),

whose gradient :math:`\\max(0, \\lambda + \\rho g)^T G` is exact and whose Gauss-Newton Hessian is
:math:`\\rho\\, G_{\\mathcal A}^T G_{\\mathcal A}` on the rows :math:`\\mathcal A` where
:math:`\\lambda_i + \\rho g_i > 0` (G = dg/d(dx, du) = -C dF/d(dx, du), C the pyramid). After each
Gauss-Newton step, at the new nominal, :math:`\\lambda \\leftarrow \\min(\\lambda_{max}, \\max(0, \\lambda
+ \\rho g))` (Nocedal and Wright, Numerical Optimization, sec. 17.4; Birgin and Martinez, Practical
Augmented Lagrangian Methods, 2014, for the bound :math:`\\lambda_{max}`) on the rows the step's
quadratic model had active, and :math:`\\lambda \\leftarrow 0` on the others: that is the multiplier of
the step's own subproblem, whose model of :math:`\\phi` is flat on a row inactive at its linearization.
A row the step pushed from inside to outside was not penalized by it; the plain update would turn its
whole unpenalized violation into a multiplier (:math:`\\rho g`, far beyond the constraint's true
multiplier), and the next steps would swing from face to face. The step after sees that row active and
penalizes it first. At a fixed point of this update
:math:`g \\le 0` and :math:`\\lambda_i g_i = 0`: the plan meets the constraint exactly, complementarity
holds, and the penalty stays finite; the stationarity of the step's cost is then that of the Lagrangian
of the constrained problem, so :math:`\\lambda` is the constraint's KKT multiplier. The warm start reads the
multipliers later as it reads the plan (:meth:`InequalityConstraint.shift`), a cold start zeroes them. The
real-time iteration does to the multipliers what it does to the primal plan: one cheap step per tick
toward the KKT point that the receding horizon tracks, from the previous tick's.

Why not the alternatives:

- a penalty or a barrier alone (what the legged MPC had: a relaxed log barrier): a quadratic penalty leaves
  a violation of order (cost gradient) / weight that vanishes only as the weight grows without bound (and
  the Riccati pass's conditioning with it); a barrier keeps the forces inside but biases the optimum by its
  duality gap and pushes the forces away from the faces even when the task needs friction there;
- a projection: the forces are not decision variables but outputs of the contact dynamics (functions of x
  and u); projecting them changes nothing the robot does, and projecting u onto the torques whose forces
  meet the pyramid is a QP with general linear constraints per knot;
- a box on the linearized pyramid: the pyramid is linear in f but general in (dx, du) through dF/dx and
  dF/du, while the stage QP of the Riccati pass (:mod:`rbd_deriv.control.euler_riccati`) is a box QP on the
  torques; general constraints would mean another stage QP (or a condensed QP) and another cost per tick.

The augmented Lagrangian keeps the stage QP a box QP on the torques (the torque box stays hard, as
before), costs the residual's value and the same force-space products as the barrier did (folded once
through dF/dx, dF/du with the other force costs), and leaves no bias at convergence.
"""

from __future__ import annotations

import math

import numpy as np

from rbd_deriv.control.contact_force import CONE_ROWS, FrictionConeResidual
from rbd_deriv.control.residuals import Derivatives, Knots, Residual
from rbd_deriv.exceptions import InputError


class InequalityConstraint:
    """g = -r(x, u, f) <= 0 on the N running knots, with its augmented-Lagrangian multipliers.

    Args:
        residual: The residual r that must stay >= 0 (nr rows, in the constraint's unit).
        horizon: Number of running knots N.
        penalty: rho > 0 [1 / unit^2].
        largest_multiplier: lambda_max [1 / unit], the multipliers' upper bound (inf: none); it keeps them
            finite when the constraint cannot be met (then the plan violates it by about lambda_max / rho).
        name: A label for reports.

    Attributes:
        multipliers: (N, nr) lambda >= 0 [1 / unit], kept between solves.
    """

    def __init__(self, residual: Residual, horizon: int, penalty: float,
                 largest_multiplier: float = math.inf, name: str = "") -> None:
        if not (math.isfinite(penalty) and penalty > 0.0):
            raise InputError(f"penalty must be > 0, got {penalty!r}", "penalty")
        if not largest_multiplier > 0.0:
            raise InputError(f"largest_multiplier must be > 0, got {largest_multiplier!r}",
                             "largest_multiplier")
        if int(horizon) != horizon or horizon < 1:
            raise InputError(f"horizon must be a positive integer, got {horizon!r}", "horizon")
        self.residual = residual
        self.nr = residual.nr
        self.penalty = float(penalty)
        self.largest_multiplier = float(largest_multiplier)
        self.multipliers = np.zeros((int(horizon), self.nr))
        #: (N, nr) rows active in the last derivatives (the step's model), those the update moves.
        self.modelled = np.zeros((int(horizon), self.nr), dtype=bool)
        self.name = name or type(residual).__name__

    # ------------------------------------------------------------------------------ rows
    def rows(self) -> np.ndarray | None:
        """(N, nr) True where a row exists at a knot, or None when every row always does."""
        return None

    def values(self, knots: Knots) -> np.ndarray:
        """g (K, nr) at the knots, -inf on the absent rows."""
        g = -self.residual.value(knots)
        rows = self.rows()
        return g if rows is None else np.where(rows, g, -np.inf)

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray | None]:
        """dg/dx (K, nr, ndx) and dg/du (K, nr, nu) (None if r does not depend on u)."""
        Rx, Ru = self.residual.jacobians(knots)
        return -Rx, None if Ru is None else -Ru

    def violation(self, knots: Knots) -> np.ndarray:
        """(K,) largest g_i of each knot, 0 when every row holds [unit]."""
        return np.maximum(self.values(knots).max(axis=1, initial=-np.inf), 0.0)

    # ------------------------------------------------------------------------------ Lagrangian
    def _trial(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """(r, lambda + rho g) at the knots, 0 on the absent rows."""
        self._check(knots)
        r = self.residual.value(knots)
        trial = self.multipliers - self.penalty * r
        rows = self.rows()
        if rows is not None:
            trial[~rows] = 0.0
        return r, trial

    def value(self, knots: Knots) -> float:
        """sum over knots and rows of phi(g; lambda, rho) (see the module docstring)."""
        _, trial = self._trial(knots)
        active = np.maximum(trial, 0.0)
        return float(((active * active).sum() - (self.multipliers * self.multipliers).sum())
                     / (2.0 * self.penalty))

    def add_derivatives(self, knots: Knots, out: Derivatives) -> None:
        """Add phi's gradient and Gauss-Newton Hessian to ``out`` through the residual (dphi/dr =
        -max(0, lambda + rho g), d2phi/dr2 = rho on the active rows)."""
        r, trial = self._trial(knots)
        active = trial > 0.0
        self.modelled[:] = active
        gradient = -np.where(active, trial, 0.0)
        hessian = np.where(active, self.penalty, 0.0)
        self.residual.gauss_newton(knots, r, gradient, hessian, out)

    def update(self, knots: Knots) -> None:
        """lambda <- min(lambda_max, max(0, lambda + rho g)) at the knots (the nominal after a step) on the
        rows active in the last derivatives, 0 on the others (see the module docstring)."""
        _, trial = self._trial(knots)
        np.clip(trial, 0.0, self.largest_multiplier, out=self.multipliers)
        self.multipliers[~self.modelled] = 0.0

    def shift(self, elapsed: float, dt: float) -> None:
        """The multipliers read ``elapsed`` [s] later, linear between knots (past the end: the last
        knot's), as the warm start reads the plan; the absent rows of the new knots zeroed."""
        N = self.multipliers.shape[0]
        position = np.maximum(float(elapsed) / float(dt) + np.arange(N), 0.0)
        base = np.minimum(np.floor(position).astype(np.int64), N - 1)
        fraction = np.where(base >= N - 1, 0.0, position - base)[:, None]
        following = np.minimum(base + 1, N - 1)
        previous = self.multipliers
        self.multipliers = (1.0 - fraction) * previous[base] + fraction * previous[following]
        self.modelled = self.modelled[base] | ((fraction > 0.0) & self.modelled[following])
        rows = self.rows()
        if rows is not None:
            self.multipliers[~rows] = 0.0
            self.modelled &= rows

    def reset(self) -> None:
        """Multipliers to zero (a cold start)."""
        self.multipliers[:] = 0.0
        self.modelled[:] = False

    def _check(self, knots: Knots) -> None:
        if knots.count != self.multipliers.shape[0]:
            raise InputError(f"constraint {self.name!r} has multipliers for "
                             f"{self.multipliers.shape[0]} knots, {knots.count} given", "knots")


class FrictionConeConstraint(InequalityConstraint):
    """The friction pyramid and unilaterality of every contact as a constraint (module docstring).

    Args:
        residual: The contacts' :class:`~rbd_deriv.control.contact_force.FrictionConeResidual` (its
            offsets (N, nc) say which contacts are closed at each knot).
        penalty: rho [1/N^2].
        largest_multiplier: lambda_max [1/N].
    """

    def __init__(self, residual: FrictionConeResidual, penalty: float,
                 largest_multiplier: float = math.inf, name: str = "friction cone") -> None:
        offsets = np.asarray(residual.offsets)
        super().__init__(residual, offsets.shape[0], penalty, largest_multiplier, name)

    def rows(self) -> np.ndarray:
        """(N, 5 nc) the rows of the contacts closed at each knot."""
        return np.repeat(np.asarray(self.residual.offsets) >= 0, CONE_ROWS, axis=1)

    def stack_violation(self, forces: np.ndarray, knot: int = 0) -> float:
        """Largest g_i [N] of one force stack (m,) laid out as at knot ``knot``, 0 inside the pyramid
        (the check of a plan's first knot at its exact forces)."""
        offsets = np.asarray(self.residual.offsets)[knot]
        closed = offsets >= 0
        if not closed.any():
            return 0.0
        forces = np.asarray(forces, dtype=float)
        f = forces[offsets[closed][:, None] + np.arange(3)]
        g = self.residual.shift - np.einsum("cij,cj->ci", self.residual.cones[closed], f)
        largest = float(g.max())
        return max(0.0, largest) if math.isfinite(largest) else math.inf

