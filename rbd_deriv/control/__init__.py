"""Model predictive control on the package's rigid-body dynamics (no ROS in here).

- :mod:`~rbd_deriv.control.problem`: the fixed-base tracking problem, built as the one optimal control
  problem of :mod:`~rbd_deriv.control.ocp` and solved by :mod:`~rbd_deriv.control.solver`.
- :mod:`~rbd_deriv.control.riccati`: the numba box QP and dense box-constrained Riccati kernels.
- :mod:`~rbd_deriv.control.mpc`: the fixed-base facade, one ``solve`` per tick returning a plan.
- :mod:`~rbd_deriv.control.observer`: estimate of the joint torques the model misses.
- :mod:`~rbd_deriv.control.prediction`: the measured state carried over the loop's delay.
- :mod:`~rbd_deriv.control.reference`: reference trajectories and their feedforward torques.
- :mod:`~rbd_deriv.control.safety`: what is published when the plan cannot be trusted.
- :mod:`~rbd_deriv.control.policy`: the plan's feedback policy, and the robot side that applies it between
  MPC ticks.
- :mod:`~rbd_deriv.control.loop`: the tick policy around the solver (freshness, observer, prediction,
  solve, safe command, counters), what a controller node calls every tick.

Floating base and contacts (a problem assembled from small parts, as in Crocoddyl):

- :mod:`~rbd_deriv.control.state_space`: x = (q, v) on the manifold, deviations in the tangent space.
- :mod:`~rbd_deriv.control.residuals`, :mod:`~rbd_deriv.control.task_residuals`,
  :mod:`~rbd_deriv.control.orientation_residual`, :mod:`~rbd_deriv.control.contact_force`: residuals
  (state, control, frame position, center of mass, frame orientation, contact forces, friction cones),
  each with its compiled kernels, and the cone check of a plan.
- :mod:`~rbd_deriv.control.activation`, :mod:`~rbd_deriv.control.cost`: how a residual becomes a cost.
- :mod:`~rbd_deriv.control.dynamics`: the knots' dynamics, free or on the contacts of a schedule.
- :mod:`~rbd_deriv.control.schedule`, :mod:`~rbd_deriv.control.srdf`: gaits and reference postures.
- :mod:`~rbd_deriv.control.ocp`, :mod:`~rbd_deriv.control.solver`,
  :mod:`~rbd_deriv.control.euler_riccati`: the problem, its multiple-shooting Riccati solver and kernels.
- :mod:`~rbd_deriv.control.legged`: the whole-body MPC of a legged robot on a gait.
- :mod:`~rbd_deriv.control.blas`: the level-3 BLAS routines the kernels call (the process's BLAS threads:
  :func:`rbd_deriv.threads.single_threaded_blas`).
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
