"""Tunable constants of the MPC solver, kept in one place.

Changing a value here changes every solver instance; per-problem choices (horizon, weights,
limits) live in :class:`rbd_deriv.control.problem.MPCProblem` instead.
"""

#: Iteration cap of the projected-Newton box QP solved at each stage of the backward pass.
BOX_QP_MAX_ITERATIONS = 30

#: Convergence threshold on the infinity norm of the projected gradient of a stage box QP.
BOX_QP_TOLERANCE = 1e-10

#: Sufficient-decrease constant of the Armijo search along the projected Newton direction.
BOX_QP_ARMIJO = 1e-4

#: Smallest step of the Armijo search before the stage QP gives up improving.
BOX_QP_MIN_STEP = 1e-10

#: Relative distance to a bound under which a torque counts as sitting on it.
BOUND_TOLERANCE = 1e-9

#: Iterations of one held-linearization solve stop once the largest torque update is below
#: this value [N m]; below it, further passes cannot change the command in any measurable way.
CONTROL_STEP_TOLERANCE = 1e-8

#: Largest magnitude a finite plan entry may reach before the solve is declared diverged.
DIVERGENCE_BOUND = 1e12
