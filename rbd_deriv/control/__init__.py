"""Model predictive control on the package's rigid-body dynamics (no ROS in here): one optimal control problem,
one solver, one tick-loop base, for arms and robots on their feet.

The problem and its solver (composed as Crocoddyl composes one):

- :mod:`~rbd_deriv.control.ocp`: the optimal control problem: per knot a dynamics model, costs (residual x
  activation x weight), constraints, and the torque box.
- :mod:`~rbd_deriv.control.state_space`: x = (q, v) on the manifold, deviations in the tangent space.
- :mod:`~rbd_deriv.control.residuals`, :mod:`~rbd_deriv.control.task_residuals`,
  :mod:`~rbd_deriv.control.orientation_residual`, :mod:`~rbd_deriv.control.contact_force`: residuals
  (state, control, frame position, center of mass, frame orientation, contact forces, friction cones),
  each with its compiled kernels, and the cone check of a plan.
- :mod:`~rbd_deriv.control.activation`, :mod:`~rbd_deriv.control.cost`: how a residual becomes a cost.
- :mod:`~rbd_deriv.control.constraints`: how a residual becomes an inequality constraint of the problem (the
  friction cone), kept by an augmented Lagrangian whose multipliers live across the real-time iterations.
- :mod:`~rbd_deriv.control.dynamics`: the knots' dynamics: a held linearization, the free dynamics, the
  contact dynamics of a schedule.
- :mod:`~rbd_deriv.control.solver`: the one solver, Gauss-Newton with the box-constrained Riccati pass, whose
  kernels are :mod:`~rbd_deriv.control.euler_riccati` (structured) and :mod:`~rbd_deriv.control.riccati`
  (dense, the stage box QP, the warm start); :mod:`~rbd_deriv.control.blas` the level-3 BLAS routines they
  call (the process's BLAS threads: :func:`rbd_deriv.threads.single_threaded_blas`).

Its two builders and facades:

- :mod:`~rbd_deriv.control.problem`, :mod:`~rbd_deriv.control.mpc`: the fixed-base tracking problem and its
  facade, one ``solve`` per tick returning a plan (:mod:`~rbd_deriv.control.plan`, the plan of every MPC).
- :mod:`~rbd_deriv.control.legged`: the whole-body MPC of a legged robot along a gait
  (:mod:`~rbd_deriv.control.schedule`, :mod:`~rbd_deriv.control.srdf`: gaits and reference postures;
  :mod:`~rbd_deriv.control.statics`: a posture's static torques and forces on its contacts).

The tick loops, what a controller node calls every tick:

- :mod:`~rbd_deriv.control.tick_loop`: what every loop shares (joint states, clock, refusals, commands by
  source, the report); :mod:`~rbd_deriv.control.safety`: the command sources, the clock watch, the safe
  command of a fixed base.
- :mod:`~rbd_deriv.control.loop`: the fixed-base loop (freshness, observer, prediction, reference, solve,
  safe command), with :mod:`~rbd_deriv.control.observer`, :mod:`~rbd_deriv.control.prediction`,
  :mod:`~rbd_deriv.control.reference`.
- :mod:`~rbd_deriv.control.legged_loop`: the legged loop (gait phase, prediction on the contacts, solve,
  safe command of a standing robot), with :mod:`~rbd_deriv.control.legged_settings`,
  :mod:`~rbd_deriv.control.odometry`, :mod:`~rbd_deriv.control.base_motion`.
- :mod:`~rbd_deriv.control.policy`: the plan's feedback policy, and the robot side that applies it between
  MPC ticks.
- :mod:`~rbd_deriv.control.constants`: every tunable of the solver and the loops.
"""

from rbd_deriv.control.mpc import HeldLinearization, ModelPredictiveController, Plan, SolveStatus
from rbd_deriv.control.observer import DisturbanceObserver
from rbd_deriv.control.prediction import CommandHistory, predict_state
from rbd_deriv.control.problem import Mode, MPCProblem
from rbd_deriv.control.reference import (SinusoidReference, TrajectoryReference,
                                         horizon_reference)
from rbd_deriv.control.safety import (CommandSource, clamp_torque, hold_command, is_stale,
                                      select_command)
from rbd_deriv.control.policy import (Actuation, FeedbackPolicy, PolicyExecutor, constant_policy,
                                      policy_from_plan)
from rbd_deriv.control.loop import ControlLoop, LoopSettings
from rbd_deriv.control.tick_loop import TickResult

__all__ = ["CommandHistory", "predict_state", "DisturbanceObserver", "HeldLinearization",
           "ModelPredictiveController", "Plan", "SolveStatus", "Mode", "MPCProblem", "SinusoidReference",
           "TrajectoryReference", "horizon_reference", "CommandSource", "clamp_torque", "hold_command",
           "is_stale", "select_command", "Actuation", "FeedbackPolicy", "PolicyExecutor", "constant_policy",
           "policy_from_plan", "ControlLoop", "LoopSettings", "TickResult"]
