"""MPC node: whole-body torque MPC, fixed-base or legged, through one tick loop of :mod:`rbd_deriv.control`.

Fixed base (:class:`rbd_deriv.control.ControlLoop`): ``joint_states``, the dynamics node's stamped linearization
(mode ``held``) and compensation torques, a reference (trajectory_msgs/JointTrajectory, or ``goal_positions``;
without either the robot holds its first measured configuration). Legged (``floating_base: true``,
:class:`rbd_deriv.control.legged_loop.LeggedLoop` on ``contact_frames``): ``joint_states`` and the base's
nav_msgs/Odometry (``odom_topic``), the gait of ``gaits`` and the base motion set at run time.

Outputs every tick: the torque command (std_msgs/Float64MultiArray, the input of ros2_control's effort
forward-command controller), the feedback policy (rbd_deriv/msg/FeedbackPolicy: u = u_ff + K (x (-) x_ref) over
the plan's first knots, for a robot-side controller at its own rate; the safe command as a policy when the tick
does not plan), the plan (trajectory_msgs/JointTrajectory, decimated; fixed base) and ``/diagnostics`` (rates,
solve times, why each command was chosen, every input message counted once: used, refused by reason,
superseded or lost).

This node wires parameters, QoS, message conversion and timing; whatever goes wrong, the command is finite and
inside the effort limits, and a callback's unexpected error is counted (``internal_error``), never fatal. Ages are
measured on the node's clock (``use_sim_time`` works), the timers run on the steady clock (a node clock that
stands still gives the safe command ``stale_clock``). A managed (lifecycle) node: configure loads the model
(``robot_description``, ``urdf_path`` or the latched topic) and warms up, activate starts the commands,
deactivate sends one last hold; ``autostart`` walks both. docs/mpc.md ("Managed node", "Floating-base mode")
has the details.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock as ClockMessage
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

import rbd_deriv as rd
from rbd_deriv.control import CommandSource, FeedbackPolicy, Plan
from rbd_deriv.control.locked_joints import LockedJoints
from rbd_deriv.exceptions import InputError
from rbd_deriv.messages import feedback_policy_fields, fill_message, set_stamp, stamp_to_ns
from rbd_deriv.mpc_loops import control_loop, legged_loop, planning_model, soles_parameters
from rbd_deriv.msg import FeedbackPolicy as FeedbackPolicyMessage
from rbd_deriv.nodes.lifecycle import DESCRIPTION_QOS, FAILURE, SUCCESS, Autostart, destroy, waiting_notice
from rbd_deriv.nodes.mpc_inputs import MpcInputs
from rbd_deriv.nodes.parameters import MPC_NODE, actuator_limits, declare_parameters, updated_values
from rbd_deriv.nodes.spin import PolledSubscription, guard, run_node
from rbd_deriv.refusals import shorten
from rbd_deriv.threads import single_threaded_blas

#: Longest wait [s] for the robot side's acknowledgement of the last command (deactivate, Ctrl-C).
LAST_COMMAND_ACK_TIMEOUT = 1.0


class MpcNode(LifecycleNode):
    """Parameters, subscriptions, publishers and the tick timer around the MPC's tick policy, managed: the model,
    the loop and the topics exist from configure to cleanup, commands leave from activate to deactivate."""

    def __init__(self) -> None:
        super().__init__("mpc_node")
        try:
            p = self._p = declare_parameters(self, MPC_NODE)
        except InputError:
            LifecycleNode.destroy_node(self)  # nothing of its own made yet for destroy_node to remove
            raise
        self.loop: Any = None
        self.model: Any = None  # the model the MPC plans on
        self.robot: Any = None  # the robot's own (every joint): the same unless joints are locked
        self.locked: Optional[LockedJoints] = None  # writes the reduced model's policies for the robot
        self.active = False
        self.legged = bool(p["floating_base"])
        self._entities: list = []  # what configure made: publishers, timers
        self._clock_input: Optional[PolledSubscription] = None  # /clock, read at each tick on simulated time
        self._newest_clock_ns = 0
        self._window_start = time.monotonic()
        self._description: Optional[str] = None  # the newest usable text from the topic
        self._in_use: Optional[str] = None  # the description the configured model was loaded from
        self._say_waiting = waiting_notice(self)
        if not (p["robot_description"] or p["urdf_path"]):
            self.create_subscription(String, "robot_description", self.guarded(self._on_description),
                                     DESCRIPTION_QOS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        if p["autostart"]:
            self._autostart = Autostart(self, self._description_to_load, lambda: self.loop is not None,
                                        self._say_waiting, self.guarded)

    def _description_to_load(self) -> Optional[str]:
        """The parameter's description, else the file's path, else the topic's text; None while none is known."""
        return self._p["robot_description"] or self._p["urdf_path"] or self._description

    # ------------------------------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load the model, build and warm up the loop, make the topics; FAILURE (the node stays unconfigured) without
        a description or with one that cannot be used."""
        p = self._p
        text = self._description_to_load()
        if not text:
            self._say_waiting()
            return FAILURE
        try:
            self.robot = rd.load_urdf(text, floating_base=p["floating_base"])
            self.robot.set_actuator_limits(actuator_limits(p["effort_limits"]))
            if self.legged:
                p = soles_parameters(self.robot, text, p)
            self.model, self.locked = planning_model(self.robot, text, p)
            self.loop = legged_loop(self.model, p) if self.legged else control_loop(self.model, p)
            self.loop.warm_up()
        except Exception as error:  # noqa: BLE001 - a failed configure leaves the node unconfigured, alive
            self.get_logger().error(shorten(f"configure failed: {type(error).__name__}: {error}"))
            self.robot = self.model = self.loop = self.locked = None
            return FAILURE
        self._in_use = None if (p["robot_description"] or p["urdf_path"]) else text
        self._make_topics(p)
        self.get_logger().info(f"{self.loop.describe()}, {p['rate_hz']:g} Hz; configured, inactive; torques for "
                               f"{', '.join(self.loop.actuated_joint_names)}, in that order")
        return SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = True
        self.get_logger().info("active: commands and policies are published")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.active:
            self._stop()
        self._release()
        return SUCCESS

    def on_exit(self) -> None:
        """The process ends (Ctrl-C, SIGTERM, launch's stop): an active node sends its last command, as on
        deactivate, so that the robot side holds the measured posture rather than a plan made for later."""
        if self.active:
            self._stop()

    def _stop(self) -> None:
        """Publish the loop's last command (and its policy), then no more."""
        self.active = False
        try:
            stop = self.loop.stop_command(self.now_ns())
            if stop is not None:
                command, policy = stop
                if self.policy_publisher is not None:
                    self._publish_policy(policy)
                self.command_publisher.publish(Float64MultiArray(data=command.tolist()))
                # The last command must reach the robot side before the process ends (Ctrl-C): wait, a bounded
                # time, until every reliable subscriber has it. In CI the hold once went missing without this.
                for publisher in (self.policy_publisher, self.command_publisher):
                    if publisher is not None:
                        publisher.wait_for_all_acked(Duration(seconds=LAST_COMMAND_ACK_TIMEOUT))
        except Exception as error:  # noqa: BLE001 - the node stops commanding whatever happens
            self._internal_error(error)
            stop = None
        self.get_logger().info("inactive: one last command sent (hold the measured posture), no more"
                               if stop is not None else "inactive: no state was received, no command sent")

    def _make_topics(self, p: dict) -> None:
        """The publishers, the polled inputs and the timers of the configured loop."""
        self.command_publisher = self.create_publisher(Float64MultiArray, p["command_topic"], 10)
        self.plan_publisher = None if self.legged else self.create_publisher(JointTrajectory, p["plan_topic"], 10)
        self.policy_publisher = (self.create_publisher(FeedbackPolicyMessage, p["policy_topic"], 10)
                                 if p["policy_topic"] else None)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.joint_names = list(self.robot.joint_names)
        self.inputs = MpcInputs(self, p)
        self._clock_input = PolledSubscription(self, ClockMessage, "/clock",
                                               QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        self._newest_clock_ns = 0
        self._entities = [self.command_publisher, self.plan_publisher, self.policy_publisher,
                          self.diagnostics_publisher]
        self._start_timers(self._tick)

    def _release(self) -> None:
        """Remove what configure made; the node is then unconfigured."""
        self.active = False
        destroy(self, self._entities)
        self._entities = []
        if self.loop is not None:
            self.inputs.destroy()
        if self._clock_input is not None:
            self._clock_input.destroy()
            self._clock_input = None
        self.loop = self.model = self.robot = self.locked = None

    def _on_description(self, message: String) -> None:
        """A description from the topic: kept for configure; one that differs from the configured model's is
        refused and counted unless ``allow_robot_change`` (then kept for the next configure)."""
        text = message.data
        if not text.strip():
            self.get_logger().warning("robot_description topic: an empty description, ignored")
            return
        if self.loop is not None and text != self._in_use and not self._p["allow_robot_change"]:
            self.log_refusal(self.loop.refusals.count("robot_description/robot_change", "a new robot_description while "
                                               "configured: refused, the model in use stays (allow_robot_change)",
                                               time.monotonic()))
            return
        if self.loop is not None and text != self._in_use:
            self.get_logger().info("a new robot_description: taken at the next configure")
        self._description = text

    def _start_timers(self, tick: Callable) -> None:
        """The tick and diagnostics timers, on the steady clock: rclpy's timers run on the node's clock, which
        on simulated time (``use_sim_time``, settable at run time) stands still without ``/clock``; the tick
        must still run and send its safe command (the loop judges that clock: ``stale_clock``)."""
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._entities.append(self.create_timer(1.0 / self._p["rate_hz"], self.guarded(tick), clock=steady))
        self._entities.append(self.create_timer(self._p["diagnostics_period"], self.guarded(self._publish_diagnostics),
                                                clock=steady))

    def now_ns(self) -> int:
        """The node's clock [ns]. On simulated time, the newest /clock message taken now, when rclpy's own has not
        caught up: its clock moves in an executor callback, which a busy node runs after its overdue tick timer
        (the clock lagged the states by more than max_stamp_lead, and states were refused as from the future)."""
        clock = self.get_clock()
        now = clock.now().nanoseconds
        if self._clock_input is not None and clock.ros_time_is_active:
            for message in self._clock_input.take():
                self._newest_clock_ns = max(self._newest_clock_ns, stamp_to_ns(message.clock))
            now = max(now, self._newest_clock_ns)
        return now

    def guarded(self, callback: Callable) -> Callable:
        """``callback`` with an unexpected error counted (once configured) and logged instead of killing the node."""
        return guard(callback, self._internal_error)

    def _internal_error(self, error: Exception) -> None:
        self.log_refusal(repr(error) if self.loop is None else self.loop.refuse("internal_error", repr(error)))

    def log_refusal(self, line: str | None) -> None:
        if line:
            self.get_logger().warning(shorten(line))

    # ----------------------------------------------------------------------------- parameters
    def _on_set_parameters(self, parameters: list) -> SetParametersResult:
        try:
            updated, problem = updated_values(MPC_NODE, self._p, parameters)
            if problem is None and self.loop is not None:  # else taken by configure
                problem = self.loop.set_parameters(updated, {parameter.name for parameter in parameters})
        except Exception as error:  # noqa: BLE001 - a request must be answered, never kill the node
            self._internal_error(error)
            problem = f"internal error: {error}"
        if problem:
            return SetParametersResult(successful=False, reason=shorten(problem))
        self._p = updated
        return SetParametersResult(successful=True)

    # --------------------------------------------------------------------------------- tick
    def _tick(self) -> None:
        self.inputs.read()
        if not self.active:
            return
        result = self.loop.tick(self.now_ns())
        if result is None:
            return  # nothing is known about the robot yet: no command is better than a guess
        self.log_refusal(result.trouble)
        if result.source is not CommandSource.PLAN and result.source is not result.previous_source:
            self.get_logger().warning(f"safe command ({self.loop.SAFE_COMMAND}): {result.source.value}")
        policy, command = result.policy, result.command
        if self.locked is not None:  # the reduced model's plan, written for every joint of the robot
            policy = None if policy is None else self.locked.expand(policy)
            command = self.locked.expand_command(command)
        if self.policy_publisher is not None and policy is not None:
            self._publish_policy(policy)
        self.command_publisher.publish(Float64MultiArray(data=command.tolist()))
        decimation = self._p["plan_decimation"]
        if self.plan_publisher is not None and result.plan is not None and self.loop.ticks % decimation == 0:
            self._publish_plan(result.plan, result.plan_start_ns)

    def _publish_plan(self, plan: Plan, start_ns: int) -> None:
        if not (np.isfinite(plan.states).all() and np.isfinite(plan.torques).all()):
            self.log_refusal(self.loop.refuse("non_finite_plan", "a plan with NaN or inf: not published"))
            return
        nq, dt_ns = self.model.nq, self.loop.problem.dt * 1e9
        message = JointTrajectory(joint_names=self.joint_names)
        # The plan's first knot is the state the tick solved from (predicted to when it acts).
        set_stamp(message.header.stamp, start_ns)
        for k, state in enumerate(plan.states):
            point = JointTrajectoryPoint(positions=state[:nq].tolist(), velocities=state[nq:].tolist(),
                                         effort=plan.torques[min(k, len(plan.torques) - 1)].tolist())
            set_stamp(point.time_from_start, round(k * dt_ns))
            message.points.append(point)
        self.plan_publisher.publish(message)

    def _publish_policy(self, policy: FeedbackPolicy) -> None:
        if not (np.isfinite(policy.x_ref).all() and np.isfinite(policy.u_ff).all() and np.isfinite(policy.gain).all()):
            self.log_refusal(self.loop.refuse("non_finite_policy", "a policy with NaN or inf: not published"))
            return
        message = fill_message(FeedbackPolicyMessage(), feedback_policy_fields(
            self.robot.actuated_joint_names, self.joint_names, self.robot.nq, self.robot.nv, policy.knot_dt,
            policy.valid_for, policy.x_ref, policy.u_ff, policy.gain))
        set_stamp(message.header.stamp, policy.stamp_ns)
        self.policy_publisher.publish(message)

    def destroy_node(self) -> None:
        """Remove what configure made (the polled subscriptions and their helper nodes), then the node."""
        self._release()
        super().destroy_node()

    # -------------------------------------------------------------------------- diagnostics
    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        healthy, summary, values = self.loop.diagnostics(now - self._window_start)
        values.update(self.inputs.lost())
        values["lifecycle_state"] = "active" if self.active else "inactive"
        self._window_start = now
        if not self.active:  # configured, not commanding: nothing is wrong
            healthy, summary = True, "inactive: no command is sent"
        status = DiagnosticStatus(name=f"{self.get_name()}: MPC", hardware_id=self.model.name,
                                  level=DiagnosticStatus.OK if healthy else DiagnosticStatus.WARN, message=summary,
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_publisher.publish(array)


def main(args: list[str] | None = None) -> int:
    """Console entry point ``mpc_node``: spin until interrupted (SIGINT or SIGTERM). BLAS runs on one
    thread in this process: the Riccati passes' products are too small to gain from threads that wait for
    each other on cores the rest of the robot's stack shares (:mod:`rbd_deriv.threads`)."""
    if not single_threaded_blas():
        print("mpc_node: no BLAS library found to hold to one thread: products run on as many threads as BLAS "
              "chooses", file=sys.stderr)
    return run_node(MpcNode, args, cleanup=MpcNode.on_exit)


if __name__ == "__main__":
    sys.exit(main())
