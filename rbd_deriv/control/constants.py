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

#: Multiply-adds under which a matrix product of the dense Riccati pass runs in plain loops rather
#: than through BLAS, whose call costs about as much as that many loop iterations.
SMALL_PRODUCT = 2048

#: Regularization of a stage Hessian Quu that round-off left indefinite: first shift, relative
#: to its largest diagonal entry, growth factor between attempts, and number of attempts.
REGULARIZATION_START = 1e-12
REGULARIZATION_GROWTH = 100.0
REGULARIZATION_ATTEMPTS = 6

#: A held linearization is taken as a semi-implicit Euler step (position rows = [I, 0] + dt times
#: the velocity rows, as rd.linearize computes them) when its position rows differ from that by at
#: most this, relative to the largest entry of A or B (or 1); the fixed-base MPC then runs the
#: structured Riccati pass (rbd_deriv.control.euler_riccati), else the dense one.
EULER_STEP_TOLERANCE = 1e-12

#: Joints from which the fixed-base MPC runs the structured pass on Euler steps: below, its ten
#: small BLAS calls per knot cost more than the dense pass's products (measured crossover between
#: 7 and 9 joints, docs/mpc.md).
STRUCTURED_PASS_MIN_JOINTS = 8

#: Relative distance to a bound under which a torque counts as sitting on it.
BOUND_TOLERANCE = 1e-9

#: Iterations of one held-linearization solve stop once the largest torque update is below
#: this value [N m]; below it, further passes cannot change the command in any measurable way.
CONTROL_STEP_TOLERANCE = 1e-8

#: Largest magnitude a finite plan entry may reach before the solve is declared diverged.
DIVERGENCE_BOUND = 1e12

#: Smallest step of the solver's line search on the merit function; a step that still does not
#: lower the merit is taken at this length (the next iteration starts from there).
LINE_SEARCH_MIN_STEP = 1.0 / 1024.0

#: Relative change of the merit function that the line search ignores (round-off of a cost
#: summed over the horizon).
MERIT_ROUND_OFF = 1e-12

#: A plan is not sent when a first-knot contact force leaves the exact friction cone by more
#: than CONE_ABSOLUTE_TOLERANCE [N] + CONE_RELATIVE_TOLERANCE * |f|: the barrier and the
#: constraint keep planned forces inside the inscribed pyramid (the constraint's augmented
#: Lagrangian reaches it from outside), so anything beyond means the plan counts on friction or
#: pull the ground cannot give.
CONE_ABSOLUTE_TOLERANCE = 0.1
CONE_RELATIVE_TOLERANCE = 0.01
