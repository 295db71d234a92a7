"""The dynamics node: robot state in; stamped linearizations, M^-1 and bias torques out; derivatives on demand.

Topics (names relative, remap as needed):

* in  ``robot_description`` (std_msgs/String, transient local) - URDF; also the ``robot_description``
  and ``urdf_path`` parameters.
* in  ``joint_states`` (sensor_msgs/JointState) - by name, any order, extra joints ignored, may be split
  across publishers.
* in  ``odom`` (nav_msgs/Odometry) - floating-base pose and twist (twist in the base frame).
* out ``linearization`` (rbd_deriv/Linearization), ``mass_matrix_inverse`` (rbd_deriv/Matrix),
  ``bias_torques`` (sensor_msgs/JointState, effort = RNEA(q, v, 0)), all stamped like the input.
* out ``/diagnostics`` (diagnostic_msgs/DiagnosticArray).
* service ``compute_derivatives`` (rbd_deriv/ComputeDerivatives).

The work is in :mod:`rbd_deriv.pipeline`; this node wires parameters, QoS, message conversion
(:mod:`rbd_deriv.messages`) and timing. Every input is checked; a bad one is refused as a whole, counted,
and logged at most once per ``log_throttle_period`` per kind of fault. The model is replaced only by a
description that loads and computes; the last good one stays otherwise. Ages are measured on the node's
clock, so ``use_sim_time`` works.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, List, NamedTuple, Optional, Sequence

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String

from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.joint_state_map import JointStateError
from rbd_deriv.messages import (MATRIX_NAMES, fill_message, linearization_fields, linearization_sizes,
                                matrix_fields, ns_to_seconds, set_stamp, stamp_to_ns)
from rbd_deriv.msg import Linearization, Matrix
from rbd_deriv.nodes.parameters import DYNAMICS_NODE as PARAMETERS
from rbd_deriv.nodes.parameters import declare_parameters, updated_values
from rbd_deriv.nodes.spin import StateInputs, guard, run_node
from rbd_deriv.pipeline import DERIVATIVES, DynamicsPipeline, OutputSelection, PipelineError, replace_robot
from rbd_deriv.refusals import Refusals
from rbd_deriv.srv import ComputeDerivatives

NODE_NAME = "dynamics_node"

# Same QoS as robot_state_publisher: a late subscriber still gets the last description.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)
# Reliable, so a reliable or best-effort publisher both match; the queue absorbs bursts at 1 kHz.
STATE_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# Timer mode takes what arrived since its last tick: the history (one for all publishers of the
# topic) must hold a slow publisher's last message over a tick, 1 s of a 1 kHz robot.
POLLED_STATE_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)

_MODEL_PARAMETERS = ("robot_description", "urdf_path", "floating_base")


def _selection(p: dict) -> OutputSelection:
    return OutputSelection(torques=p["publish_torques"], mass_matrix_inverse=p["publish_mass_matrix_inverse"],
                           linearization=p["publish_linearization"],
                           linearization_input=p["linearization_input"], dt=p["dt"])


class _Robot(NamedTuple):
    """A pipeline and its outgoing messages, replaced together so that callbacks never see a mix.

    The messages are kept: filling the names (checked string by string by the generated setters) once
    instead of at every tick saves most of the packing time.
    """

    pipeline: DynamicsPipeline
    torques: JointState
    minv: Matrix
    linearization: Linearization

    @classmethod
    def of(cls, pipeline: DynamicsPipeline) -> "_Robot":
        model = pipeline.model
        return cls(pipeline, JointState(name=list(pipeline.actuated_joint_names)),
                   Matrix(name=MATRIX_NAMES["mass_matrix_inverse"], names=pipeline.velocity_names,
                          rows=model.nv, cols=model.nv),
                   Linearization(**linearization_sizes(pipeline.joint_names, model.nq, model.nv)))


class DynamicsNode(Node):
    """Wires parameters, topics, timers and the service to the dynamics pipeline."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._p = declare_parameters(self, PARAMETERS)
        self._selection = _selection(self._p)
        self._robot: Optional[_Robot] = None
        self._refusals = Refusals(self._p["log_throttle_period"])
        self._compute_times: List[float] = []
        self._latencies: List[float] = []
        self._inputs = self._outputs = 0
        self._last_diagnostics = time.monotonic()
        self._timer = None
        self._state_inputs: Optional[StateInputs] = None
        self._state_inputs_mode = ""
        self._latest_frame = ""

        self._pub_linearization = self.create_publisher(Linearization, "linearization", OUTPUT_QOS)
        self._pub_minv = self.create_publisher(Matrix, "mass_matrix_inverse", OUTPUT_QOS)
        self._pub_torques = self.create_publisher(JointState, "bias_torques", OUTPUT_QOS)
        self._pub_diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

        initial = self._description(self._p)
        if initial:
            pipeline = self._build(initial, "parameter", self._p)
            if pipeline is not None:
                self._install(pipeline, allow_change=True)

        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_subscription(String, "robot_description", self._guard(self._on_description), DESCRIPTION_QOS)
        self.create_service(ComputeDerivatives, "compute_derivatives", self._on_compute_derivatives)
        self._diagnostics_timer = self.create_timer(self._p["diagnostics_period"], self._guard(self._on_diagnostics))
        self._configure_inputs()
        if self._robot is None:
            self.get_logger().info("no robot description yet: waiting on the robot_description topic")

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    # ------------------------------------------------------------------------------- faults and logs
    def _guard(self, callback: Callable) -> Callable:
        """``callback`` with an unexpected error counted and logged instead of killing the node."""
        return guard(callback, self._internal_error)

    def _internal_error(self, error: Exception) -> None:
        self._refuse("internal_error", f"{type(error).__name__}: {error}", error=True)

    def _refuse(self, reason: str, text: str, error: bool = False) -> None:
        """Count a refused input under ``reason``; log it unless the same reason was logged recently."""
        line = self._refusals.count(reason, text, time.monotonic())
        # rclpy ties a severity to each call site: one site per severity.
        if line and error:
            self.get_logger().error(line)
        elif line:
            self.get_logger().warning(line)

    # ------------------------------------------------------------------------------------- the model
    def _description(self, p: dict) -> Optional[str]:
        """The description the parameters name: the XML, else the file's text (None if unreadable), else ""."""
        if p["robot_description"] or not p["urdf_path"]:
            return p["robot_description"]
        try:
            with open(p["urdf_path"], encoding="utf-8") as stream:
                return stream.read()
        except OSError as error:
            self._refuse("bad_description", f"cannot read urdf_path {p['urdf_path']!r}: {error}", error=True)
            return None

    def _build(self, description: str, source: str, p: dict) -> Optional[DynamicsPipeline]:
        """A pipeline of ``description`` with the parameters ``p``; None (logged and counted) if unusable."""
        try:
            return DynamicsPipeline(description, p["floating_base"], p["strict_joint_names"], p["max_state_age"])
        except PipelineError as error:
            self._refuse(error.reason, f"robot description from {source}, keeping the current model: {error}",
                         error=True)
            return None

    def _install(self, pipeline: DynamicsPipeline, allow_change: bool) -> None:
        current = None if self._robot is None else self._robot.pipeline
        try:
            pipeline = replace_robot(current, pipeline, allow_change)
        except PipelineError as error:
            self._refuse(error.reason, str(error))
            return
        self._robot = _Robot.of(pipeline)
        model = pipeline.model
        self.get_logger().info(f"robot {model.name!r}: nq={model.nq}, nv={model.nv}, "
                               f"floating base: {model.has_floating_base}")

    def _on_description(self, message: String) -> None:
        if self._robot is not None and message.data == self._robot.pipeline.description:
            return
        pipeline = self._build(message.data, "topic", self._p)
        if pipeline is not None:
            self._install(pipeline, allow_change=self._p["allow_robot_change"])

    # ---------------------------------------------------------------------------------- parameters
    def _on_set_parameters(self, parameters: List[Parameter]) -> SetParametersResult:
        updated, problem = updated_values(PARAMETERS, self._p, parameters)
        if problem:
            return SetParametersResult(successful=False, reason=problem)
        pipeline = None
        if any(updated[n] != self._p[n] for n in _MODEL_PARAMETERS):
            description = self._description(updated)
            if description == "" and self._robot is not None:
                description = self._robot.pipeline.description
            if description is None:
                return SetParametersResult(successful=False, reason="cannot read urdf_path")
            pipeline = self._build(description, "parameter", updated)
            if pipeline is None:
                return SetParametersResult(successful=False, reason="robot description refused (see log)")

        self._p, self._selection = updated, _selection(updated)
        self._refusals.log_period = self._p["log_throttle_period"]
        if pipeline is not None:
            self._install(pipeline, allow_change=True)  # an explicit parameter change may change the robot
        if self._robot is not None:
            self._robot.pipeline.state.strict = self._p["strict_joint_names"]
            self._robot.pipeline.state.max_age_ns = int(round(self._p["max_state_age"] * 1e9))
        self._configure_inputs()
        self._diagnostics_timer.timer_period_ns = int(self._p["diagnostics_period"] * 1e9)
        return SetParametersResult(successful=True)

    def _configure_inputs(self) -> None:
        """Set up the timer and the state inputs (:class:`StateInputs`) for the publish mode: on_message
        answers every message from a thread of its own; timer takes what arrived since its last tick,
        with a deep history for a slow publisher among fast ones."""
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        timer_mode = self._p["publish_mode"] == "timer"
        if self._state_inputs_mode != self._p["publish_mode"]:
            self._remove_state_inputs()
            self._state_inputs = StateInputs(self, not timer_mode, POLLED_STATE_QOS if timer_mode else STATE_QOS,
                                             STATE_QOS, self._guard(self._on_joint_states),
                                             self._guard(self._on_odometry), f"{NODE_NAME}_states",
                                             self._internal_error)
            self._state_inputs_mode = self._p["publish_mode"]
        if timer_mode:
            self._timer = self.create_timer(1.0 / self._p["rate"], self._guard(self._on_timer))

    def _remove_state_inputs(self) -> None:
        """Stop the listener thread and remove the state subscriptions (shutdown, mode change)."""
        if self._state_inputs is not None:
            self._state_inputs.destroy()
        self._state_inputs, self._state_inputs_mode = None, ""

    def destroy_node(self) -> None:
        """Stop the listener thread and remove the state inputs, then the node."""
        self._remove_state_inputs()
        super().destroy_node()

    # ---------------------------------------------------------------------------------- robot state
    def _on_joint_states(self, message: JointState) -> None:
        self._inputs += 1
        robot = self._robot
        if robot is None:
            self._refuse("no_model", "joint_states before any robot description")
            return
        try:
            robot.pipeline.state.update(message.name, message.position, message.velocity, message.effort,
                                        stamp_to_ns(message.header.stamp), self._now_ns())
        except JointStateError as error:
            self._refuse(error.reason, f"joint_states: {error}")
            return
        self._latest_frame = message.header.frame_id
        if self._p["publish_mode"] == "on_message":
            self._compute_and_publish(robot, message.header)

    def _on_odometry(self, message: Odometry) -> None:
        robot = self._robot
        if robot is None or not robot.pipeline.state.floating_base:
            return  # a fixed-base robot has no use for odometry; nothing to refuse
        pose, twist = message.pose.pose, message.twist.twist
        try:
            robot.pipeline.state.update_base(
                (pose.position.x, pose.position.y, pose.position.z),
                (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w),
                (twist.linear.x, twist.linear.y, twist.linear.z),
                (twist.angular.x, twist.angular.y, twist.angular.z),
                stamp_to_ns(message.header.stamp), self._now_ns())
        except JointStateError as error:
            self._refuse(error.reason, f"odom: {error}")

    def _on_timer(self) -> None:
        robot = self._robot
        # Superseded messages are counted as inputs here, the others as they are applied.
        self._inputs += self._state_inputs.poll(
            None if robot is None else frozenset(robot.pipeline.actuated_joint_names))
        robot = self._robot
        if robot is None or robot.pipeline.state.stamp_ns < 0:
            return
        state = robot.pipeline.state
        age_ns = self._now_ns() - state.stamp_ns
        if state.max_age_ns and age_ns > state.max_age_ns:
            self._refuse("stale", f"latest state is {age_ns * 1e-9:.3f} s old")
            return
        self._compute_and_publish(robot, Header(stamp=set_stamp(Time(), state.stamp_ns), frame_id=self._latest_frame))

    # ------------------------------------------------------------------------------------- outputs
    def _compute_and_publish(self, robot: _Robot, header: Header) -> None:
        started = time.perf_counter()
        try:
            outputs = robot.pipeline.outputs_from_state(self._selection)
        except JointStateError as error:
            self._refuse(error.reason, str(error))
            return
        published = []
        if outputs.torques is not None:
            published.append((self._pub_torques, fill_message(robot.torques, {"effort": outputs.torques})))
        if outputs.mass_matrix_inverse is not None:
            published.append((self._pub_minv, fill_message(robot.minv, matrix_fields(outputs.mass_matrix_inverse))))
        if outputs.linearization is not None:
            published.append((self._pub_linearization,
                              fill_message(robot.linearization, linearization_fields(**outputs.linearization))))
        for publisher, message in published:
            message.header = header
            publisher.publish(message)
        self._outputs += 1
        self._compute_times.append(time.perf_counter() - started)
        self._latencies.append(ns_to_seconds(self._now_ns(), stamp_to_ns(header.stamp)))

    # -------------------------------------------------------------------------------------- service
    def _on_compute_derivatives(self, request, response):
        try:
            robot = self._robot
            if robot is None:
                raise PipelineError("no robot model loaded yet", "bad_request")
            pipeline = robot.pipeline
            answer = pipeline.derivatives(request.q, request.v, request.a, request.tau, request.dt,
                                          [name for name in DERIVATIVES if getattr(request, name)])
            header = Header(stamp=self.get_clock().now().to_msg())
            for field, value in answer.items():
                if field == "linearization":
                    sizes = linearization_sizes(pipeline.joint_names, pipeline.model.nq, pipeline.model.nv)
                    fields = {**sizes, **linearization_fields(**value)}
                    response.linearization = fill_message(Linearization(header=header), fields)
                else:
                    fields = matrix_fields(value, MATRIX_NAMES[field], pipeline.velocity_names)
                    setattr(response, field, fill_message(Matrix(header=header), fields))
            response.joint_names = list(pipeline.joint_names)
            response.success, response.message = True, "ok"
        except (RbdDerivError, ValueError) as error:
            self._refuse("bad_request", f"compute_derivatives: {error}")
            response = ComputeDerivatives.Response(success=False, message=str(error))
        except Exception as error:  # noqa: BLE001 - answer, whatever happened
            self._refuse("internal_error", f"compute_derivatives: {type(error).__name__}: {error}", error=True)
            response = ComputeDerivatives.Response(success=False, message=f"internal error: {error}")
        return response

    # ---------------------------------------------------------------------------------- diagnostics
    def _on_diagnostics(self) -> None:
        now = time.monotonic()
        period = max(now - self._last_diagnostics, 1e-9)
        self._last_diagnostics = now
        robot = self._robot
        model = robot.pipeline.model if robot else None
        status = DiagnosticStatus(name=f"{self.get_fully_qualified_name()}: dynamics",
                                  hardware_id=model.name if model else "")
        values = {
            "robot": model.name if model else "",
            "nq": model.nq if model else 0,
            "nv": model.nv if model else 0,
            "input_rate_hz": self._inputs / period,
            "output_rate_hz": self._outputs / period,
        }
        for label, samples in (("compute_time_ms", self._compute_times), ("latency_ms", self._latencies)):
            if samples:
                p50, p99 = np.percentile(samples, [50.0, 99.0])
                values.update({f"{label}_p50": 1e3 * p50, f"{label}_p99": 1e3 * p99,
                               f"{label}_max": 1e3 * max(samples)})
        values["rejected_total"] = self._refusals.total
        values.update({f"rejected_{reason}": count for reason, count in sorted(self._refusals.counts.items())})
        status.values = [KeyValue(key=k, value=f"{v:.6g}" if isinstance(v, float) else str(v))
                         for k, v in values.items()]
        if robot is None:
            status.level, status.message = DiagnosticStatus.ERROR, "no robot description"
        elif not robot.pipeline.state.complete:
            status.level = DiagnosticStatus.WARN
            status.message = f"waiting for joints: {', '.join(robot.pipeline.state.missing()[:5])}"
        else:
            status.level, status.message = DiagnosticStatus.OK, "running"
        self._pub_diagnostics.publish(DiagnosticArray(header=Header(stamp=self.get_clock().now().to_msg()),
                                                      status=[status]))
        self._inputs = self._outputs = 0
        self._compute_times, self._latencies = [], []


def main(args: Optional[Sequence[str]] = None) -> int:
    """Console entry point ``dynamics_node``: spin until interrupted (SIGINT or SIGTERM)."""
    # rclpy.experimental.EventsExecutor would cut the per-message overhead, but in the Kilted wheels
    # it delivers no subscription messages: run_node keeps the default executor.
    return run_node(DynamicsNode, args)


if __name__ == "__main__":
    sys.exit(main())
