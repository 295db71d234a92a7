"""MPC node: whole-body torque MPC on the dynamics node's linearizations.

Inputs: ``joint_states`` (sensor_msgs/JointState), the dynamics node's stamped linearization
(rbd_deriv/msg/Linearization, mode ``held``) and compensation torques (sensor_msgs/JointState,
effort = RNEA(q, v, 0)), a reference (trajectory_msgs/JointTrajectory on a topic, or the
``goal_positions`` parameter; without either the robot holds its first measured configuration).

Outputs every tick: the torque command (std_msgs/Float64MultiArray, the input of ros2_control's
effort forward-command controller), the feedback policy (rbd_deriv/msg/FeedbackPolicy: the plan's first
knots and the Riccati gain, u = u_ff + K (x (-) x_ref), for a robot-side controller that applies it at its
own rate; the safe command as a policy without gain when the tick does not plan), the plan
(trajectory_msgs/JointTrajectory, decimated), and
``/diagnostics`` (solve time percentiles, iterations, cost, active torque bounds, why each
command was chosen, refused messages by reason).

The tick policy is :class:`rbd_deriv.control.ControlLoop`; this node wires parameters, QoS, message
conversion and timing. Whatever goes wrong, the command is finite and inside the URDF effort limits; a
plan or policy that is not finite is not sent. Every callback runs inside one guard (an unexpected error is counted
as ``internal_error``, the tick keeps its timer). Inputs stamped ahead of the clock by more than
``max_stamp_lead`` are refused. Every message is counted once under its input: used, refused (by reason),
superseded by a newer one before the tick, or lost before the node. Every age is measured on the node's clock,
so ``use_sim_time`` works; the timers run on the steady clock, and a node clock that stands still (simulated
time without ``/clock``) gives the safe command (``stale_clock``).

Floating-base mode (``floating_base: true``, a legged robot on ``contact_frames``): the state is joint_states
(the actuated joints) plus the base's nav_msgs/Odometry (``odom_topic``: pose in the world, twist in the base
frame), the tick policy is :class:`rbd_deriv.control.legged_loop.LeggedLoop` (the legged MPC along a gait of
``gaits``, ``gait`` switchable at run time; the safe command of a standing robot), and the outputs are the
torque command, the feedback policy and ``/diagnostics`` (rate, solve time percentiles, commands by source,
safe commands, cone refusals, refused inputs). Odometry naming other frames than ``odom_frame`` and
``base_frame``, or whose pose jumps farther than its twist explains, is refused; a base velocity and a sway the
robot cannot follow together are refused. No linearization, compensation or reference input there.

A managed (lifecycle) node: configure loads the model (``robot_description``, else ``urdf_path``, else the latched
``robot_description`` topic: configure fails, saying once that it waits, until one arrived; a different one later is
refused unless ``allow_robot_change``) and warms up; activate starts the commands; deactivate sends one last command
(the hold of the measured posture, as a policy valid for ``policy_validity``, after which the robot side's expiry
safe mode applies) and stops; cleanup and shutdown release. No command, policy or plan leaves while not active;
``autostart`` walks configure and activate. joint_states and odom are subscribed best effort by default
(``state_qos``), which matches reliable and best-effort publishers (REP 2003). docs/mpc.md, "Managed node", has the
details.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from nav_msgs.msg import Odometry
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

import rbd_deriv as rd
from rbd_deriv.control import CommandSource, FeedbackPolicy, Plan
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.messages import (feedback_policy_fields, fill_message, linearization_arrays, odometry_arrays, set_stamp,
                                stamp_to_ns)
from rbd_deriv.mpc_loops import control_loop, legged_loop
from rbd_deriv.msg import FeedbackPolicy as FeedbackPolicyMessage
from rbd_deriv.msg import Linearization
from rbd_deriv.nodes.parameters import MPC_NODE, actuator_limits, declare_parameters, updated_values
from rbd_deriv.nodes.spin import PolledSubscription, apply_newest, apply_newest_message, guard, run_node
from rbd_deriv.refusals import shorten
from rbd_deriv.threads import single_threaded_blas

# The tick reads what arrived since the previous tick (PolledSubscription): no executor callback per
# 1 kHz joint_states message. The depth covers 100 ms of a 1 kHz topic split across several
# publishers; of the compensation, linearization and reference only the newest matters, the others are
# counted as superseded.
INPUT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
REFERENCE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)
#: robot_state_publisher's: the last description is kept for late subscribers.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
STATE_RELIABILITY = {"best_effort": ReliabilityPolicy.BEST_EFFORT, "reliable": ReliabilityPolicy.RELIABLE}
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class MpcNode(LifecycleNode):
    """Parameters, subscriptions, publishers and the tick timer around the MPC's tick policy, managed: the model,
    the loop and the topics exist from configure to cleanup, commands leave from activate to deactivate."""

    def __init__(self) -> None:
        super().__init__("mpc_node")
        p = self._p = declare_parameters(self, MPC_NODE)
        self.loop: Any = None
        self.model: Any = None
        self.active = False
        self.legged = bool(p["floating_base"])
        self._entities: list = []  # what configure made: publishers, timers
        self._window_start = time.monotonic()
        self._description: Optional[str] = None  # the newest usable text from the topic
        self._in_use: Optional[str] = None  # the description the configured model was loaded from
        self._said_waiting = False
        self._failed: Optional[str] = None  # the description autostart failed to configure from
        if not (p["robot_description"] or p["urdf_path"]):
            self.create_subscription(String, "robot_description", self._guard(self._on_description),
                                     DESCRIPTION_QOS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        if p["autostart"]:
            # Now, and on a timer while the description may still come from the topic (the executor delivers it).
            steady = Clock(clock_type=ClockType.STEADY_TIME)
            self._autostart_timer = self.create_timer(0.1, self._guard(self._autostart), clock=steady)
            self._autostart()

    def _autostart(self) -> None:
        """Configure, then activate, once a description is known (a description that failed is not tried again);
        then the timer stops."""
        if self.loop is None:
            text = self._p["robot_description"] or self._p["urdf_path"] or self._description
            if text is None or text == self._failed:
                if text is None:
                    self._say_waiting()
                return
            if self.trigger_configure() != SUCCESS:
                self._failed = text
                return
        self.destroy_timer(self._autostart_timer)
        self.trigger_activate()

    # ------------------------------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load the model, build and warm up the loop, make the topics; FAILURE (the node stays unconfigured) without
        a description or with one that cannot be used."""
        p = self._p
        text = p["robot_description"] or p["urdf_path"] or self._description
        if not text:
            self._say_waiting()
            return FAILURE
        try:
            self.model = rd.load_urdf(text, floating_base=p["floating_base"])
            self.model.set_actuator_limits(actuator_limits(p["effort_limits"]))
            self.loop = legged_loop(self.model, p) if self.legged else control_loop(self.model, p)
            self.loop.warm_up()
        except Exception as error:  # noqa: BLE001 - a failed configure leaves the node unconfigured, alive
            self.get_logger().error(shorten(f"configure failed: {type(error).__name__}: {error}"))
            self.model = self.loop = None
            return FAILURE
        self._in_use = None if (p["robot_description"] or p["urdf_path"]) else text
        self._make_topics(p)
        if self.legged:
            loop, mpc = self.loop, self.loop.mpc
            what = (f"legged MPC on {self.model.name!r}: nv={self.model.nv}, feet {list(loop.feet)} "
                    f"({', '.join(loop.kinds)}), gaits {sorted(loop.mpcs)}, now {loop.gait!r}, N={mpc.horizon}, "
                    f"dt={mpc.dt} s, mu={mpc.mu}")
        else:
            problem = self.loop.problem
            what = (f"MPC on {self.model.name!r}: {problem.nv} joints, N={problem.horizon}, dt={problem.dt} s, "
                    f"mode {problem.mode.value}")
        self.get_logger().info(f"{what}, {p['rate_hz']:g} Hz; configured, inactive")
        return SUCCESS

    def _say_waiting(self) -> None:
        if not self._said_waiting:
            self.get_logger().info("no robot description yet: waiting on the robot_description topic")
            self._said_waiting = True

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

    def _stop(self) -> None:
        """Publish the loop's last command (and its policy), then no more."""
        self.active = False
        try:
            stop = self.loop.stop_command(self._now_ns())
            if stop is not None:
                command, policy = stop
                if self.policy_publisher is not None:
                    self._publish_policy(policy)
                self.command_publisher.publish(Float64MultiArray(data=command.tolist()))
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
        state_qos = QoSProfile(depth=INPUT_QOS.depth, reliability=STATE_RELIABILITY[p["state_qos"]])
        self.joint_states_input = PolledSubscription(self, JointState, p["joint_states_topic"], state_qos)
        self.odometry_input = (PolledSubscription(self, Odometry, p["odom_topic"], state_qos) if self.legged
                               else None)
        self.joint_names = list(self.model.joint_names)
        self._joint_set = frozenset(self.model.actuated_joint_names)
        # (kind, subscription, handler, judge of a superseded message or None: counted unread)
        self.newest_inputs = [] if self.legged else [
            ("compensation", PolledSubscription(self, JointState, p["compensation_topic"], INPUT_QOS),
             self._on_compensation, None),
            ("reference", PolledSubscription(self, JointTrajectory, p["reference_topic"], REFERENCE_QOS),
             self._on_reference, None)]
        if not self.legged and self.loop.held:
            self.newest_inputs.append(("linearization", PolledSubscription(
                self, Linearization, p["linearization_topic"], INPUT_QOS), self._on_linearization, None))
        self._entities = [self.command_publisher, self.plan_publisher, self.policy_publisher,
                          self.diagnostics_publisher]
        self._start_timers(self._tick)

    def _release(self) -> None:
        """Remove what configure made; the node is then unconfigured."""
        self.active = False
        for entity in self._entities:
            if entity is None:
                continue
            if hasattr(entity, "cancel"):
                self.destroy_timer(entity)
            else:
                self.destroy_publisher(entity)
        self._entities = []
        if self.loop is not None:
            self.joint_states_input.destroy()
            for _, subscription, _, _ in self.newest_inputs:
                subscription.destroy()
            self.newest_inputs = []
            if self.odometry_input is not None:
                self.odometry_input.destroy()
                self.odometry_input = None
        self.loop = self.model = None

    def _on_description(self, message: String) -> None:
        """A description from the topic: kept for configure; one that differs from the configured model's is
        refused and counted unless ``allow_robot_change`` (then kept for the next configure)."""
        text = message.data
        if not text.strip():
            self.get_logger().warning("robot_description topic: an empty description, ignored")
            return
        if self.loop is not None and text != self._in_use and not self._p["allow_robot_change"]:
            self._log(self.loop.refusals.count("robot_description/robot_change", "a new robot_description while "
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
        self._entities.append(self.create_timer(1.0 / self._p["rate_hz"], self._guard(tick), clock=steady))
        self._entities.append(self.create_timer(self._p["diagnostics_period"], self._guard(self._publish_diagnostics),
                                                clock=steady))

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _guard(self, callback: Callable) -> Callable:
        """``callback`` with an unexpected error counted (once configured) and logged instead of killing the node."""
        return guard(callback, self._internal_error)

    def _internal_error(self, error: Exception) -> None:
        self._log(repr(error) if self.loop is None else self.loop.refuse("internal_error", repr(error)))

    def _log(self, line: str | None) -> None:
        if line:
            self.get_logger().warning(shorten(line))

    def _take(self, kind: str, take: Callable, *args: Any) -> bool:
        """Hand one input to the loop; a refusal is counted there under ``kind`` and logged here.

        Returns:
            Whether the loop accepted it.
        """
        try:
            take(*args)
        except RbdDerivError as error:
            self._log(self.loop.refuse(kind, error))
            return False
        self.loop.refusals.used[kind] += 1
        return True

    def _judge(self, kind: str, check: Callable, *args: Any) -> None:
        """A message superseded by a newer one of its input before it could be used: counted as refused (under
        its reason, as ``_take`` would) if ``check`` refuses it, else as superseded."""
        try:
            check(*args)
        except RbdDerivError as error:
            self._log(self.loop.refuse(kind, error))
            return
        self.loop.refusals.superseded[kind] += 1

    # ----------------------------------------------------------------------------- parameters
    def _on_set_parameters(self, parameters: list) -> SetParametersResult:
        try:
            updated, problem = updated_values(MPC_NODE, self._p, parameters)
            names = {parameter.name for parameter in parameters}
            if self.loop is None:
                pass  # taken by configure
            elif problem is None and self.legged and names & {"gait", "base_velocity", "sway_amplitude",
                                                               "sway_period"}:
                problem = self._set_motion(updated, names)
            elif problem is None and any(parameter.name == "goal_positions" for parameter in parameters):
                try:
                    self.loop.set_goal(updated["goal_positions"])
                except RbdDerivError as error:
                    problem = f"goal_positions: {error}"
        except Exception as error:  # noqa: BLE001 - a request must be answered, never kill the node
            self._internal_error(error)
            problem = f"internal error: {error}"
        if problem:
            return SetParametersResult(successful=False, reason=shorten(problem))
        self._p = updated
        return SetParametersResult(successful=True)

    def _set_motion(self, p: dict, names: set) -> Optional[str]:
        """Hand the legged loop the gait, base velocity and sway of ``p`` that ``names`` changed; the problem,
        or None."""
        if "gait" in names and p["gait"] not in self.loop.mpcs:
            return f"gait {p['gait']!r} is not one of {sorted(self.loop.mpcs)}"
        try:
            # The motion is checked as a whole before anything changes; the gait is then known to be built.
            if names & {"base_velocity", "sway_amplitude", "sway_period"}:
                self.loop.set_motion(p["base_velocity"], p["sway_amplitude"], p["sway_period"])
            if "gait" in names:
                self.loop.set_gait(p["gait"])
        except RbdDerivError as error:
            return str(error)
        return None

    # ------------------------------------------------------------------------------- inputs
    def _on_joint_states(self, message: JointState) -> bool:
        return self._take("joint_states", self.loop.take_joint_states, message.name, message.position,
                          message.velocity, message.effort, stamp_to_ns(message.header.stamp), self._now_ns())

    def _judge_joint_states(self, message: JointState) -> None:
        self._judge("joint_states", self.loop.check_joint_states, message.name, message.position, message.velocity,
                    message.effort, stamp_to_ns(message.header.stamp), self._now_ns())

    def _on_odometry(self, message: Odometry) -> bool:
        return self._take("odom", self.loop.take_odometry, *odometry_arrays(message),
                          stamp_to_ns(message.header.stamp), self._now_ns(),
                          (message.header.frame_id, message.child_frame_id))

    def _on_compensation(self, message: JointState) -> bool:
        return self._take("compensation", self.loop.take_compensation, message.name, message.effort,
                          stamp_to_ns(message.header.stamp), self._now_ns())

    def _on_linearization(self, message: Linearization) -> bool:
        def take() -> None:
            arrays = linearization_arrays(message, self.model.nq, self.model.nv, self.joint_names)
            self.loop.take_linearization(arrays, stamp_to_ns(message.header.stamp), self._now_ns())
        return self._take("linearization", take)

    def _on_reference(self, message: JointTrajectory) -> bool:
        points = message.points
        names = list(message.joint_names)
        # A stamp of 0 means "from now".
        start_ns = stamp_to_ns(message.header.stamp) or self._now_ns()
        with_velocity = bool(points) and all(len(point.velocities) == len(names) for point in points)
        try:
            duration = self.loop.take_reference(
                names, start_ns, [stamp_to_ns(point.time_from_start) * 1e-9 for point in points],
                [point.positions for point in points],
                [point.velocities for point in points] if with_velocity else None)
        except RbdDerivError as error:
            self._log(self.loop.refuse("reference", error))
            return False
        self.loop.refusals.used["reference"] += 1
        self.get_logger().info(f"new reference: {len(points)} points over {duration:.2f} s")
        return True

    def _read_inputs(self) -> None:
        """Hand what arrived since the previous tick to the handlers: the newest accepted message of each
        joint (:func:`apply_newest`), of the compensation, linearization and reference
        (:func:`apply_newest_message`), every odometry message in order (:meth:`_read_odometry`). Every message is
        counted once: used, refused under its reason, or superseded (joint_states superseded are judged first: a
        bad one counts as refused)."""
        counts = self.loop.refusals
        apply_newest(self.joint_states_input.take(serialized=True), JointState, self._joint_set,
                     self._guard(self._on_joint_states), self._guard(self._judge_joint_states))
        for kind, subscription, handler, judge in self.newest_inputs:
            serialized = subscription.take(serialized=True)
            superseded = apply_newest_message(serialized, subscription.message_type, self._guard(handler),
                                              None if judge is None else self._guard(judge))
            if judge is None:
                counts.superseded[kind] += superseded
        if self.odometry_input is not None:
            self._read_odometry(self.odometry_input.take(serialized=True))

    def _read_odometry(self, serialized: list) -> None:
        """Every odometry message, oldest first: each pose is judged against the one accepted just before it (a
        millisecond earlier from a 1 kHz source, whatever the time since the previous tick), so that a second
        source or a jump is refused even after a stalled tick; all but the newest accepted are superseded."""
        take = self._guard(self._on_odometry)
        accepted = sum(1 for data in serialized if take(deserialize_message(data, Odometry)))
        if accepted > 1:
            counts = self.loop.refusals
            counts.used["odom"] -= accepted - 1
            counts.superseded["odom"] += accepted - 1

    # --------------------------------------------------------------------------------- tick
    def _tick(self) -> None:
        self._read_inputs()
        if not self.active:
            return
        result = self.loop.tick(self._now_ns())
        if result is None:
            return  # nothing is known about the robot yet: no command is better than a guess
        self._log(result.trouble)
        if result.source is not CommandSource.PLAN and result.source is not result.previous_source:
            self.get_logger().warning(f"safe command ({self.loop.SAFE_COMMAND}): {result.source.value}")
        if self.policy_publisher is not None and result.policy is not None:
            self._publish_policy(result.policy)
        self.command_publisher.publish(Float64MultiArray(data=result.command.tolist()))
        if (self.plan_publisher is not None and isinstance(result.plan, Plan)
                and self.loop.ticks % self._p["plan_decimation"] == 0):
            self._publish_plan(result.plan, result.plan_start_ns)

    def _publish_plan(self, plan: Plan, start_ns: int) -> None:
        if not (np.isfinite(plan.states).all() and np.isfinite(plan.torques).all()):
            self._log(self.loop.refuse("non_finite_plan", "a plan with NaN or inf: not published"))
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
            self._log(self.loop.refuse("non_finite_policy", "a policy with NaN or inf: not published"))
            return
        message = fill_message(FeedbackPolicyMessage(), feedback_policy_fields(
            self.loop.actuated_joint_names, self.joint_names, self.model.nq, self.model.nv, policy.knot_dt,
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
        values["lost_joint_states"] = str(self.joint_states_input.lost)
        for kind, subscription, _, _ in self.newest_inputs:
            values[f"lost_{kind}"] = str(subscription.lost)
        if self.odometry_input is not None:
            values["lost_odom"] = str(self.odometry_input.lost)
        self._window_start = now
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
    return run_node(MpcNode, args)


if __name__ == "__main__":
    sys.exit(main())
