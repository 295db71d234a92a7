"""Model predictive control on the package's rigid-body dynamics (no ROS in here).

- :mod:`~rbd_deriv.control.problem`: the optimal control problem (what is solved).
- :mod:`~rbd_deriv.control.workspace`: its matrices, built once and updated each tick (how).
- :mod:`~rbd_deriv.control.riccati`: the numba box-constrained Riccati kernels.
- :mod:`~rbd_deriv.control.mpc`: the facade, one ``solve`` per tick returning a plan.
- :mod:`~rbd_deriv.control.observer`: estimate of the joint torques the model misses.
- :mod:`~rbd_deriv.control.prediction`: the measured state carried over the loop's delay.
- :mod:`~rbd_deriv.control.reference`: reference trajectories and their feedforward torques.
- :mod:`~rbd_deriv.control.safety`: what is published when the plan cannot be trusted.
- :mod:`~rbd_deriv.control.policy`: the plan's feedback policy, and the robot side that applies it between
  MPC ticks.
- :mod:`~rbd_deriv.control.loop`: the tick policy around the solver (freshness, observer, prediction,
  solve, safe command, counters), what a controller node calls every tick.
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
from rbd_deriv.control.loop import ControlLoop, LoopSettings, TickResult

__all__ = ["CommandHistory", "predict_state", "DisturbanceObserver", "HeldLinearization",
           "ModelPredictiveController", "Plan", "SolveStatus", "Mode", "MPCProblem", "SinusoidReference",
           "TrajectoryReference", "horizon_reference", "CommandSource", "clamp_torque", "hold_command",
           "is_stale", "select_command", "Actuation", "FeedbackPolicy", "PolicyExecutor", "constant_policy",
           "policy_from_plan", "ControlLoop", "LoopSettings", "TickResult"]
