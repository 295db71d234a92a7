"""Tunable constants of the MPC: the solver's and the tick loops', kept in one place.

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

# --- The fixed-base tick loop (rbd_deriv.control.loop) ---------------------------------------------------

#: Samples kept for the percentiles of the tick loops' diagnostics (solve times, tick times, linearization ages).
STATISTICS_WINDOW = 2000

#: Distinct joint-name lists of compensation messages whose column order is remembered.
LAYOUT_CACHE_SIZE = 16

#: Largest compensation torque taken, as a multiple of each joint's effort limit: gravity may exceed what
#: the drives give (the hold then saturates), but not by orders of magnitude.
COMPENSATION_BOUND = 10.0

# --- The robot side's policies (rbd_deriv.control.policy) ------------------------------------------------

#: Policies the robot side keeps (the one in use and those waiting for their stamp; one per MPC tick, each
#: at most ``max_stamp_lead`` ahead of the clock: a few are enough, the oldest is dropped past this).
MAX_TAKEN = 8

# --- The delay prediction (rbd_deriv.control.prediction) -------------------------------------------------

#: Largest integration step of the prediction [s].
PREDICTION_STEP = 1e-3

# --- The legged tick loop (rbd_deriv.control.legged_loop) ------------------------------------------------

#: Recent ticks whose durations give the adaptive latency (their 90th percentile).
LATENCY_WINDOW = 20

#: Largest base speed [m/s] and sway amplitude [m] a loop accepts (a command beyond is a mistake).
MAX_BASE_SPEED = 2.0
MAX_SWAY_AMPLITUDE = 0.5

#: Gravity [m/s^2], for the speeds and accelerations a robot on its legs can follow.
GRAVITY = 9.81

#: Longest time [s] between a base pose and the last accepted one over which the jump between them is judged:
#: a tick that stalls for a few tenths of a second still judges its first odometry (a second source cannot take
#: the base over then); after a longer gap the base's state was stale anyway, and its next pose is taken as is.
JUMP_WINDOW = 1.0

#: A previous plan older than this fraction of the horizon when the next tick starts (a stalled tick) warm-starts
#: ``start_iterations`` Gauss-Newton iterations instead of one.
STALE_PLAN_FRACTION = 0.25

#: After a failed solve, the legged loop restarts from its last good plan (shifted to the tick) this many times in a
#: row before it starts from scratch (the posture's statics): a robot mid-motion (talos bending from its brakes'
#: straight legs, a pushed quadruped) is far from the statics, whose cold start failed tick after tick and let it
#: fall.
RESTORE_ATTEMPTS = 3

#: A gait that starts while the base moves faster than this [m/s] starts where its first lift-off takes the feet
#: most behind the motion (LeggedLoop._trailing_start); slower, at its first knot.
TRAILING_SPEED = 0.05

# --- The legged MPC's real-time steps (rbd_deriv.control.legged) -----------------------------------------

#: A real-time iteration's full step that changes a joint's velocity along the plan by more than this many times
#: its URDF velocity limit, or the base's by more than :data:`STEP_BASE_SPEED` [m/s or rad/s], is halved until it
#: does not, at most :data:`STEP_HALVINGS` times; a step still beyond (or not finite) is not taken and the solve
#: fails. Far from the plan (a robot pushed, or moving after a stall) the full step of the linearized contact
#: dynamics can overshoot by orders of magnitude; taken, its nominal overflows, the next linearization fails (as a
#: mass matrix singular at some joint: the configuration is no longer finite there), and so does every later tick.
STEP_VELOCITY_FACTOR = 10.0
STEP_BASE_SPEED = 20.0
STEP_HALVINGS = 8
