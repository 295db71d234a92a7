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
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from nav_msgs.msg import Odometry
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

import rbd_deriv as rd
from rbd_deriv import bundled_urdf
from rbd_deriv.control import CommandSource, ControlLoop, FeedbackPolicy, LoopSettings, MPCProblem, Plan
from rbd_deriv.control.legged import LeggedMPC, LeggedWeights
from rbd_deriv.control.legged_loop import LeggedLoop, LeggedLoopSettings, LeggedSource, base_link, make_gait
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.messages import (feedback_policy_fields, fill_message, linearization_arrays, odometry_arrays, set_stamp,
                                stamp_to_ns)
from rbd_deriv.msg import FeedbackPolicy as FeedbackPolicyMessage
from rbd_deriv.msg import Linearization
from rbd_deriv.nodes.parameters import MPC_NODE, actuator_limits, declare_parameters, per_joint, updated_values
from rbd_deriv.nodes.spin import PolledSubscription, apply_newest, apply_newest_message, guard, run_node
from rbd_deriv.refusals import shorten
from rbd_deriv.threads import single_threaded_blas
from rbd_deriv.sim.ground import Ground, rest_on_floor

# The tick reads what arrived since the previous tick (PolledSubscription): no executor callback per
# 1 kHz joint_states message. The depth covers 100 ms of a 1 kHz topic split across several
# publishers; of the compensation, linearization and reference only the newest matters, the others are
# counted as superseded.
INPUT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
REFERENCE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)


class MpcNode(Node):
    """Parameters, subscriptions, publishers and the tick timer around the MPC's tick policy."""

    def __init__(self) -> None:
        super().__init__("mpc_node")
        p = self._p = declare_parameters(self, MPC_NODE)
        self.model = rd.load_urdf(p["robot_description"] or p["urdf_path"] or str(bundled_urdf("rbd_arm7")),
                                  floating_base=p["floating_base"])
        self.model.set_actuator_limits(actuator_limits(p["effort_limits"]))
        self._window_start = time.monotonic()
        self.legged = bool(p["floating_base"])
        if self.legged:
            self._start_legged(p)
            return
        problem = MPCProblem.from_model(
            self.model, horizon=p["horizon"], dt=p["dt"], position_weight=per_joint(p["position_weight"]),
            velocity_weight=per_joint(p["velocity_weight"]), torque_weight=per_joint(p["torque_weight"]),
            terminal_scale=p["terminal_scale"], limit_weight=p["limit_weight"], mode=p["mode"],
            max_iterations=p["max_iterations"], torque_margin=p["torque_margin"])
        settings = LoopSettings(
            rate_hz=p["rate_hz"], state_timeout=p["state_timeout"], linearization_timeout=p["linearization_timeout"],
            predict_delay=p["predict_delay"], command_delay=p["command_delay"],
            disturbance_time_constant=p["disturbance_time_constant"], disturbance_bound=p["disturbance_bound"],
            max_stamp_lead=p["max_stamp_lead"], policy_validity=p["policy_validity"],
            max_reference_error=p["max_reference_error"])
        self.loop = ControlLoop(self.model, problem, settings)
        self.loop.warm_up()
        self.joint_names = list(self.model.joint_names)
        self._joint_set = frozenset(self.model.actuated_joint_names)
        goal = np.asarray(p["goal_positions"], dtype=float)
        if goal.size == problem.nv:
            self.loop.set_goal(goal)

        self.command_publisher = self.create_publisher(Float64MultiArray, p["command_topic"], 10)
        self.plan_publisher = self.create_publisher(JointTrajectory, p["plan_topic"], 10)
        self.policy_publisher = (self.create_publisher(FeedbackPolicyMessage, p["policy_topic"], 10)
                                 if p["policy_topic"] else None)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.joint_states_input = PolledSubscription(self, JointState, p["joint_states_topic"], INPUT_QOS)
        self.odometry_input: Optional[PolledSubscription] = None
        # (kind, subscription, handler, judge of a superseded message or None: counted unread)
        self.newest_inputs = [("compensation", PolledSubscription(self, JointState, p["compensation_topic"],
                                                                  INPUT_QOS), self._on_compensation, None),
                              ("reference", PolledSubscription(self, JointTrajectory, p["reference_topic"],
                                                               REFERENCE_QOS), self._on_reference, None)]
        if self.loop.held:
            self.newest_inputs.append(("linearization", PolledSubscription(
                self, Linearization, p["linearization_topic"], INPUT_QOS), self._on_linearization, None))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._start_timers(self._tick)
        self.get_logger().info(
            f"MPC on {self.model.name!r}: {problem.nv} joints, N={problem.horizon}, "
            f"dt={problem.dt} s, mode {problem.mode.value}, {p['rate_hz']:g} Hz")

    def _start_legged(self, p: dict) -> None:
        """The floating-base mode: the legged MPC of each gait of ``gaits``, the loop, its inputs (joint_states
        and odometry) and outputs (the torque command, the feedback policy, /diagnostics)."""
        self.loop = legged_loop_from_parameters(self.model, p)
        self.loop.warm_up()
        self.joint_names = list(self.model.joint_names)
        self._joint_set = frozenset(self.model.actuated_joint_names)
        self.command_publisher = self.create_publisher(Float64MultiArray, p["command_topic"], 10)
        self.policy_publisher = (self.create_publisher(FeedbackPolicyMessage, p["policy_topic"], 10)
                                 if p["policy_topic"] else None)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.joint_states_input = PolledSubscription(self, JointState, p["joint_states_topic"], INPUT_QOS)
        self.odometry_input = PolledSubscription(self, Odometry, p["odom_topic"], INPUT_QOS)
        self.newest_inputs = []
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._start_timers(self._tick_legged)
        mpc = self.loop.mpc
        self.get_logger().info(
            f"legged MPC on {self.model.name!r}: nv={self.model.nv}, feet {list(self.loop.feet)} "
            f"({', '.join(self.loop.kinds)}), gaits {sorted(self.loop.mpcs)}, now {self.loop.gait!r}, "
            f"N={mpc.horizon}, dt={mpc.dt} s, mu={mpc.mu}, {p['rate_hz']:g} Hz")

    def _start_timers(self, tick: Callable) -> None:
        """The tick and diagnostics timers, on the steady clock: rclpy's timers run on the node's clock, which
        on simulated time (``use_sim_time``, settable at run time) stands still without ``/clock``; the tick
        must still run and send its safe command (the loop judges that clock: ``stale_clock``)."""
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(1.0 / self._p["rate_hz"], self._guard(tick), clock=steady)
        self.create_timer(self._p["diagnostics_period"], self._guard(self._publish_diagnostics), clock=steady)

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _guard(self, callback: Callable) -> Callable:
        """``callback`` with an unexpected error counted and logged instead of killing the node."""
        return guard(callback, lambda error: self._log(self.loop.refuse("internal_error", repr(error))))

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
            if problem is None and self.legged and names & {"gait", "base_velocity", "sway_amplitude",
                                                               "sway_period"}:
                problem = self._set_motion(updated, names)
            elif problem is None and any(parameter.name == "goal_positions" for parameter in parameters):
                try:
                    self.loop.set_goal(updated["goal_positions"])
                except RbdDerivError as error:
                    problem = f"goal_positions: {error}"
        except Exception as error:  # noqa: BLE001 - a request must be answered, never kill the node
            self._log(self.loop.refuse("internal_error", repr(error)))
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
        result = self.loop.tick(self._now_ns())
        if result is None:
            return  # nothing is known about the robot: no command is better than a guess
        self._log(result.trouble)
        if result.source is not CommandSource.PLAN and result.source is not result.previous_source:
            self.get_logger().warning(f"safe command (hold with gravity compensation): {result.source.value}")
        if self.policy_publisher is not None and result.policy is not None:
            self._publish_policy(result.policy)
        self.command_publisher.publish(Float64MultiArray(data=result.command.tolist()))
        if result.plan is not None and self.loop.ticks % self._p["plan_decimation"] == 0:
            self._publish_plan(result.plan, result.plan_start_ns)

    def _tick_legged(self) -> None:
        self._read_inputs()
        result = self.loop.tick(self._now_ns())
        if result is None:
            return  # the base or a joint never heard of: no command is better than a guess
        self._log(result.trouble)
        if result.source is not LeggedSource.PLAN and result.source is not result.previous_source:
            self.get_logger().warning(f"safe command (last good policy, else the statics of the measured "
                                      f"posture): {result.source.value}")
        if self.policy_publisher is not None:
            self._publish_policy(result.policy)
        self.command_publisher.publish(Float64MultiArray(data=result.command.tolist()))

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
        """Remove the polled subscriptions and their helper nodes, then the node."""
        self.joint_states_input.destroy()
        for _, subscription, _, _ in self.newest_inputs:
            subscription.destroy()
        self.newest_inputs = []
        if self.odometry_input is not None:
            self.odometry_input.destroy()
            self.odometry_input = None
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


def legged_loop_from_parameters(model: Any, p: dict) -> LeggedLoop:
    """The floating-base mode's loop from the node's parameters: the reference posture (the SRDF's
    ``posture``, else the neutral configuration) put on the floor the way the simulator puts the robot (point
    feet ``foot_radius`` above it, soles on it), one legged MPC per gait of ``gaits``.

    Raises:
        InputError: No foot, a foot the model lacks, an SRDF or posture that cannot be read, a gait that
            cannot be made (a trot without four feet, a pattern knot without contact), ``gait`` not in ``gaits``.
    """
    feet = list(p["contact_frames"])
    if not feet:
        raise InputError("floating_base needs contact_frames (the feet)", "contact_frames")
    kinds = list(p["contact_kinds"]) or ["point"] * len(feet)
    if len(kinds) != len(feet):
        raise InputError(f"{len(kinds)} contact_kinds for {len(feet)} contact_frames", "contact_kinds")
    posture = (reference_posture(model, p["srdf_path"], p["posture"], missing="neutral") if p["srdf_path"]
               else rd.neutral(model))
    posture = rest_on_floor(model, posture, Ground(tuple(feet), tuple(kinds), p["foot_radius"],
                                                   tuple(p["sole_size"])))
    weights = LeggedWeights(**{field: p[f"weight_{field}"] for field in LeggedWeights.__dataclass_fields__})
    mpcs = {}
    for name in dict.fromkeys(list(p["gaits"]) + [p["gait"]]):
        gait = make_gait(name, feet, kinds, p["swing_knots"], p["support_knots"], p["gait_pattern"])
        mpcs[name] = LeggedMPC(model, feet, gait, posture, horizon=p["horizon"], dt=p["dt"], mu=p["mu"],
                               weights=weights, swing_height=p["swing_height"])
    settings = LeggedLoopSettings(state_timeout=p["state_timeout"], policy_validity=p["policy_validity"],
                                  max_stamp_lead=p["max_stamp_lead"], latency=p["command_delay"],
                                  predict=p["predict_delay"], gain_knots=p["policy_gain_knots"],
                                  odom_frame=p["odom_frame"], base_frame=p["base_frame"] or base_link(model),
                                  jump_margin=p["odom_jump_margin"], jump_angle_margin=p["odom_jump_angle_margin"],
                                  max_base_speed=p["odom_max_speed"], max_base_rate=p["odom_max_rate"],
                                  motion_margin=p["motion_margin"])
    loop = LeggedLoop(model, mpcs, p["gait"], settings)
    loop.set_motion(p["base_velocity"], p["sway_amplitude"], p["sway_period"])
    return loop


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
