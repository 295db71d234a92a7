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
before), costs the residual's value and the same force-space products as a barrier (folded once
through dF/dx, dF/du with the other force costs), and leaves no bias at convergence. Its limit: the
Gauss-Newton model of phi is flat on a row inactive at the linearization, so one real-time step does not
see a face it is about to cross (the violation is corrected from the next step on); the legged MPC keeps
a light relaxed log barrier beside the constraint for that anticipation (:mod:`rbd_deriv.control.legged`
says when it matters).

The rows of a contact open at a knot are absent: the residual's neutral value there (1, with zero
Jacobians) leaves them inactive as long as their multipliers are 0, which the warm start ensures when it
moves the multipliers onto the new schedule. The kernels below (the terms' derivatives, value and update,
the shift, a force stack's pyramid violation) each run over every knot in one call, on the solver's
tick; the classes check their inputs and hand them plain arrays.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rbd_deriv.control.contact_force import CONE_ROWS, FrictionConeResidual
from rbd_deriv.control.residuals import Derivatives, Knots, Residual
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.exceptions import InputError


# --- kernels -----------------------------------------------------------------------------------------------

@njit(**JIT_OPTIONS)
def lagrangian_derivatives(r, multipliers, penalty, gradient, hessian, modelled):
    """With trial = lambda + rho g = lambda - rho r at every row (K, nr): where trial > 0, dphi/dr = -trial,
    d2phi/dr2 = rho and the row is modelled (active); elsewhere 0, 0 and not modelled. Returns the number of
    active rows."""
    K, nr = r.shape
    active = 0
    for k in range(K):
        for i in range(nr):
            trial = multipliers[k, i] - penalty * r[k, i]
            if trial > 0.0:
                gradient[k, i] = -trial
                hessian[k, i] = penalty
                modelled[k, i] = True
                active += 1
            else:
                gradient[k, i] = 0.0
                hessian[k, i] = 0.0
                modelled[k, i] = False
    return active


@njit(**JIT_OPTIONS)
def lagrangian_value(r, multipliers, penalty):
    """sum over the rows (K, nr) of (max(0, lambda - rho r)^2 - lambda^2) / (2 rho)."""
    K, nr = r.shape
    total = 0.0
    for k in range(K):
        for i in range(nr):
            trial = multipliers[k, i] - penalty * r[k, i]
            if trial > 0.0:
                total += trial * trial
            total -= multipliers[k, i] * multipliers[k, i]
    return total / (2.0 * penalty)


@njit(**JIT_OPTIONS)
def update_multipliers(r, penalty, largest, modelled, multipliers):
    """lambda <- min(largest, max(0, lambda - rho r)) on the modelled rows (K, nr), 0 on the others."""
    K, nr = r.shape
    for k in range(K):
        for i in range(nr):
            value = 0.0
            if modelled[k, i]:
                value = min(max(multipliers[k, i] - penalty * r[k, i], 0.0), largest)
            multipliers[k, i] = value


@njit(**JIT_OPTIONS)
def shift_multipliers(previous, previous_modelled, knots, rows, multipliers, modelled):
    """multipliers[k] = previous read ``knots`` knots later, linear between knots, the last one held past the
    end (the warm start's reading of the plan); a row modelled if it was at either knot read; both zero or
    False where ``rows`` (N, nr) is False."""
    N, nr = previous.shape
    for k in range(N):
        position = max(knots + k, 0.0)
        base = min(int(math.floor(position)), N - 1)
        fraction = 0.0 if base >= N - 1 else position - base
        following = min(base + 1, N - 1)
        for i in range(nr):
            if not rows[k, i]:
                multipliers[k, i] = 0.0
                modelled[k, i] = False
                continue
            multipliers[k, i] = (1.0 - fraction) * previous[base, i] + fraction * previous[following, i]
            modelled[k, i] = previous_modelled[base, i] or (fraction > 0.0
                                                            and previous_modelled[following, i])


@njit(**JIT_OPTIONS)
def largest_pyramid_violation(forces, offsets, cones, shift):
    """max(0, largest g = shift - C_c f_c) over the contacts closed in ``offsets`` (nc,) of one force stack
    (m,) [N]; inf if a force is not finite."""
    largest = 0.0
    for c in range(offsets.shape[0]):
        o = offsets[c]
        if o < 0:
            continue
        fx, fy, fz = forces[o], forces[o + 1], forces[o + 2]
        if not (math.isfinite(fx) and math.isfinite(fy) and math.isfinite(fz)):
            return math.inf
        for i in range(cones.shape[1]):
            C = cones[c, i]
            g = shift[i] - (C[0] * fx + C[1] * fy + C[2] * fz)
            if g > largest:
                largest = g
    return largest


# --- constraints -------------------------------------------------------------------------------------------

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
        modelled: (N, nr) the rows active in the last derivatives (the step's model): those the update
            moves.
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
        N = int(horizon)
        self.residual = residual
        self.nr = residual.nr
        self.penalty = float(penalty)
        self.largest_multiplier = float(largest_multiplier)
        self.multipliers = np.zeros((N, self.nr))
        self.modelled = np.zeros((N, self.nr), dtype=np.bool_)
        self.name = name or type(residual).__name__
        self._previous = np.zeros((N, self.nr))
        self._previous_modelled = np.zeros((N, self.nr), dtype=np.bool_)
        self._gradient = np.zeros((N, self.nr))
        self._hessian = np.zeros((N, self.nr))
        self._every_row = np.ones((N, self.nr), dtype=np.bool_)

    # ------------------------------------------------------------------------------ rows
    def rows(self) -> np.ndarray:
        """(N, nr) True where a row exists at a knot (here every row at every knot)."""
        return self._every_row

    def values(self, knots: Knots) -> np.ndarray:
        """g (K, nr) at the knots, -inf on the absent rows."""
        return np.where(self.rows(), -self.residual.value(knots), -np.inf)

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray | None]:
        """dg/dx (K, nr, ndx) and dg/du (K, nr, nu) (None if r does not depend on u)."""
        Rx, Ru = self.residual.jacobians(knots)
        return -Rx, None if Ru is None else -Ru

    def violation(self, knots: Knots) -> np.ndarray:
        """(K,) largest g_i of each knot, 0 when every row holds [unit]."""
        return np.maximum(self.values(knots).max(axis=1, initial=-np.inf), 0.0)

    # ------------------------------------------------------------------------------ Lagrangian
    def _residual(self, knots: Knots) -> np.ndarray:
        if knots.count != self.multipliers.shape[0]:
            raise InputError(f"constraint {self.name!r} has multipliers for "
                             f"{self.multipliers.shape[0]} knots, {knots.count} given", "knots")
        return np.ascontiguousarray(self.residual.value(knots), dtype=float)

    def value(self, knots: Knots) -> float:
        """sum over knots and rows of phi(g; lambda, rho) (see the module docstring)."""
        return float(lagrangian_value(self._residual(knots), self.multipliers, self.penalty))

    def add_derivatives(self, knots: Knots, out: Derivatives) -> None:
        """Add phi's gradient and Gauss-Newton Hessian to ``out`` through the residual (dphi/dr =
        -max(0, lambda + rho g), d2phi/dr2 = rho on the active rows, which become the modelled ones; nothing
        to add when none is: the commonest tick, every force inside with zero multipliers)."""
        r = self._residual(knots)
        if lagrangian_derivatives(r, self.multipliers, self.penalty, self._gradient, self._hessian,
                                  self.modelled):
            self.residual.gauss_newton(knots, r, self._gradient, self._hessian, out)

    def update(self, knots: Knots) -> None:
        """lambda <- min(lambda_max, max(0, lambda + rho g)) at the knots (the nominal after a step) on the
        modelled rows, 0 on the others (see the module docstring)."""
        if not self.modelled.any():
            self.multipliers.fill(0.0)
            return
        update_multipliers(self._residual(knots), self.penalty, self.largest_multiplier, self.modelled,
                           self.multipliers)

    def shift(self, elapsed: float, dt: float) -> None:
        """The multipliers (and modelled rows) read ``elapsed`` [s] later, linear between knots (past the
        end: the last knot's), as the warm start reads the plan; the absent rows of the new knots zeroed
        (nothing to move while every multiplier is 0 and no row modelled, the commonest tick)."""
        if not (self.modelled.any() or self.multipliers.any()):
            return
        self._previous[:] = self.multipliers
        self._previous_modelled[:] = self.modelled
        shift_multipliers(self._previous, self._previous_modelled, float(elapsed) / float(dt), self.rows(),
                          self.multipliers, self.modelled)

    def reset(self) -> None:
        """Multipliers to zero (a cold start)."""
        self.multipliers[:] = 0.0
        self.modelled[:] = False


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
        """Largest g_i [N] of one force stack (m,) laid out as at knot ``knot``, 0 inside the pyramid, inf
        for a force that is not finite (the check of a plan's first knot at its exact forces)."""
        offsets = np.ascontiguousarray(np.asarray(self.residual.offsets)[knot], dtype=np.int64)
        forces = np.ascontiguousarray(forces, dtype=float)
        if forces.ndim != 1 or (offsets.size and offsets.max() + 3 > forces.size):
            raise InputError(f"a force stack of shape {forces.shape} for offsets {offsets.tolist()}",
                             "forces")
        return float(largest_pyramid_violation(forces, offsets, self.residual.cones, self.residual.shift))


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the classes pass."""
    K, nr = 2, CONE_ROWS
    r, multipliers = np.ones((K, nr)), np.zeros((K, nr))
    modelled = np.zeros((K, nr), dtype=np.bool_)
    lagrangian_derivatives(r, multipliers, 1.0, np.zeros((K, nr)), np.zeros((K, nr)), modelled)
    lagrangian_value(r, multipliers, 1.0)
    update_multipliers(r, 1.0, math.inf, modelled, multipliers)
    shift_multipliers(multipliers.copy(), modelled.copy(), 1.0, np.ones((K, nr), dtype=np.bool_),
                      multipliers, modelled)
    largest_pyramid_violation(np.zeros(3), np.zeros(1, dtype=np.int64), np.zeros((1, nr, 3)), np.zeros(nr))
