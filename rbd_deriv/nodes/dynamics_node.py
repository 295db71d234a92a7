"""The dynamics node: robot state in; stamped linearizations, M^-1 and bias torques out; derivatives on demand.

Topics (names relative, remap as needed):

* in  ``robot_description`` (std_msgs/String, transient local) - URDF; also the ``robot_description``
  and ``urdf_path`` parameters.
* in  ``joint_states`` (sensor_msgs/JointState) - by name, any order, extra joints ignored, may be split
  across publishers.
* in  ``odom`` (nav_msgs/Odometry) - floating-base pose and twist (twist in the base frame).
* in  ``active_contacts`` (rbd_deriv/ContactSet) - the frames in contact; replaces the ``contact_frames`` and
  ``contact_kinds`` parameters' set. With contacts the linearization is the contact-constrained one and
  carries the contact forces.
* out ``linearization`` (rbd_deriv/Linearization), ``mass_matrix_inverse`` (rbd_deriv/Matrix),
  ``bias_torques`` (sensor_msgs/JointState, effort = RNEA(q, v, 0)), all stamped like the input.
* out ``/diagnostics`` (diagnostic_msgs/DiagnosticArray).
* service ``compute_derivatives`` (rbd_deriv/ComputeDerivatives).

A managed (lifecycle) node, driven by the standard services (``ros2 lifecycle set /dynamics_node <transition>``):

* configure: the model (``robot_description``, else ``urdf_path``, else the topic's newest description; without
  one configure fails, saying it waits), its kernels run once (compiled or loaded now), then the outputs, the
  state and contact subscriptions, the service and the timers are made. Inactive, the node reads its inputs,
  publishes no output and the service answers ``success: false`` saying the node is inactive.
* activate: outputs are published, the service answers. deactivate: no more outputs (none is sent last: this
  node commands no torque, unlike the MPC node). cleanup, shutdown: all configure made is released.
* ``autostart`` (true in config/dynamics_node.yaml) walks configure and activate at start, once a description is
  known. ``/diagnostics`` is published from configure on, with the ``lifecycle_state``.

The work is in :mod:`rbd_deriv.pipeline`; this node wires parameters, QoS, message conversion
(:mod:`rbd_deriv.messages`) and timing. Every input is checked; a bad one is refused as a whole, counted,
and logged (cut to a bounded length) at most once per ``log_throttle_period`` per kind of fault. Nothing
non-finite is ever sent: the pipeline tests every output and every service answer last. Every callback
runs inside one guard: an unexpected error is counted (``internal_error``), the node keeps serving.
Messages lost before the node (a queue overflow, the middleware) are counted from the gaps in each
publisher's sequence numbers. While configured, the model is replaced only by a description that loads and
computes (the topic's: the same robot, or another with ``allow_robot_change``); the last good one stays
otherwise. Ages and leads of stamps are measured on the node's clock, so ``use_sim_time`` works.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, List, NamedTuple, Optional, Sequence

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String

from rbd_deriv.dynamics_status import dynamics_status
from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.messages import (DynamicsMessages, answer_fields, fill_message, ns_to_seconds, odometry_arrays,
                                set_stamp, stamp_to_ns)
from rbd_deriv.msg import ContactSet, Linearization, Matrix
from rbd_deriv.nodes.parameters import DYNAMICS_NODE as PARAMETERS
from rbd_deriv.nodes.lifecycle import DESCRIPTION_QOS, FAILURE, SUCCESS, Autostart, destroy, waiting_notice
from rbd_deriv.nodes.parameters import declare_parameters, updated_values
from rbd_deriv.nodes.spin import STATE_RELIABILITY, StateInputs, guard, run_node
from rbd_deriv.pipeline import (DERIVATIVES, DynamicsPipeline, OutputSelection, PipelineError, Throughput,
                                contact_set, read_description, replace_robot)
from rbd_deriv.refusals import Refusals, shorten
from rbd_deriv.srv import ComputeDerivatives

NODE_NAME = "dynamics_node"

# The state subscriptions' depths: the queue absorbs bursts at 1 kHz; timer mode takes what arrived since its last
# tick, so its history (one for all publishers of the topic) must hold a slow publisher's last message over a tick,
# 1 s of a 1 kHz robot. Their reliability is the parameter state_qos: best effort (the default) matches reliable and
# best-effort publishers both, reliable only reliable ones (REP 2003: drivers publish sensor data best effort).
STATE_DEPTH, POLLED_STATE_DEPTH = 50, 1000
OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# rclpy's default service QoS keeps 10 requests: of 50 concurrent calls, 40 were never answered. The
# requests wait here while the executor answers them one by one, and the replies wait likewise.
SERVICE_QOS = QoSProfile(depth=256, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)

_MODEL_PARAMETERS = ("robot_description", "urdf_path", "floating_base")
_CONTACT_PARAMETERS = ("contact_frames", "contact_kinds")


class _Robot(NamedTuple):
    """A pipeline and its outgoing messages, replaced together so that callbacks never see a mix."""

    pipeline: DynamicsPipeline
    messages: DynamicsMessages

    @classmethod
    def of(cls, pipeline: DynamicsPipeline) -> "_Robot":
        return cls(pipeline, DynamicsMessages.make((JointState, Matrix, Linearization), pipeline.actuated_joint_names,
                                                   pipeline.joint_names, pipeline.velocity_names,
                                                   pipeline.model.nq, pipeline.model.nv))


class DynamicsNode(LifecycleNode):
    """Wires parameters, topics, timers and the service to the dynamics pipeline, managed: the model, the outputs,
    the state inputs and the service exist from configure to cleanup; outputs leave, and the service answers, from
    activate to deactivate."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        try:
            self._p = declare_parameters(self, PARAMETERS)
        except InputError:
            LifecycleNode.destroy_node(self)  # nothing of its own made yet for destroy_node to remove
            raise
        self._selection = OutputSelection.from_parameters(self._p)
        self._robot: Optional[_Robot] = None
        self._refusals = Refusals(self._p["log_throttle_period"])
        self._throughput = Throughput()
        self._lost_before = (0, 0)  # by state inputs already replaced (a publish-mode change)
        self._last_diagnostics = time.monotonic()
        self._timer = None
        self._state_inputs: Optional[StateInputs] = None
        self._state_inputs_mode = ""
        self._latest_frame = ""
        self._contacts = self._parameter_contacts(self._p)  # the active set
        self._active = False
        # Taken by an output before it computes and by deactivate: once deactivate returns, nothing more leaves
        # (on_message mode computes on the listener thread).
        self._publishing = threading.Lock()
        self._topic_description: Optional[str] = None  # the newest text from the topic, for configure
        self._entities: list = []  # what configure made (publishers, subscription, service, diagnostics timer)
        self._output_publishers: dict = {}
        self._say_waiting = waiting_notice(self)

        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_subscription(String, "robot_description", self._guard(self._on_description), DESCRIPTION_QOS)
        if self._p["autostart"]:
            self._autostart = Autostart(self, self._description_to_load, lambda: self._robot is not None,
                                        self._say_waiting, self._guard)

    @staticmethod
    def _parameter_contacts(p: dict) -> tuple:
        return tuple(p["contact_frames"]), tuple(p["contact_kinds"])

    # ------------------------------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Build the model (its pipeline runs every kernel once: numba compiles now, not at the first state) from
        the parameters, else from the topic's newest description; make the outputs, the state inputs, the
        contacts' subscription, the service and the timers. FAILURE (the node stays unconfigured; counted and
        logged) without a description or with one that does not load and compute."""
        text, source = self._description(self._p), "parameter"
        if text == "":
            text, source = self._topic_description or "", "topic"
        if text == "":
            self._say_waiting()
            return FAILURE
        pipeline = None if text is None else self._build(text, source, self._p)
        if pipeline is None or not self._install(pipeline, allow_change=True):
            return FAILURE
        self._output_publishers = {topic: self.create_publisher(message_type, topic, OUTPUT_QOS) for topic, message_type
                                   in (("linearization", Linearization), ("mass_matrix_inverse", Matrix),
                                       ("bias_torques", JointState))}
        self._pub_diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diagnostics_timer = self.create_timer(self._p["diagnostics_period"], self._guard(self._on_diagnostics))
        self._entities = [*self._output_publishers.values(), self._pub_diagnostics, self._diagnostics_timer,
                          self.create_subscription(ContactSet, "active_contacts", self._guard(self._on_contacts),
                                                   DESCRIPTION_QOS),
                          self.create_service(ComputeDerivatives, "compute_derivatives", self._on_compute_derivatives,
                                              qos_profile=SERVICE_QOS)]
        self._configure_inputs()
        self.get_logger().info("configured, inactive: no outputs, the service refuses, until activate")
        return SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        self.get_logger().info("active: outputs are published, the service answers")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """No more outputs, the service refuses; the state inputs stay read. Nothing is sent last: this node
        commands no torque (the MPC node sends its last safe command when it is deactivated)."""
        with self._publishing:
            self._active = False
        self.get_logger().info("inactive: no outputs, the service refuses")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return SUCCESS

    def _release(self) -> None:
        """Remove what configure made (the listener thread stopped first: it publishes); the node is then
        unconfigured, with the parameters' contact set."""
        with self._publishing:
            self._active = False
        self._remove_state_inputs()
        destroy(self, [self._timer, *self._entities])
        self._timer, self._entities, self._output_publishers = None, [], {}
        self._robot = None
        self._contacts = self._parameter_contacts(self._p)

    def _description_to_load(self) -> Optional[str]:
        """What configure would load: the parameter's description, else the file's path, else the topic's text;
        None while none is known."""
        return self._p["robot_description"] or self._p["urdf_path"] or self._topic_description

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
        """The description the parameters name (:func:`read_description`); None (counted, logged) if unreadable."""
        try:
            return read_description(p["robot_description"], p["urdf_path"])
        except PipelineError as error:
            self._refuse(error.reason, str(error), error=True)
            return None

    def _build(self, description: str, source: str, p: dict, contacts: Optional[tuple] = None
               ) -> Optional[DynamicsPipeline]:
        """A pipeline of ``description`` with the parameters ``p`` and the contact set ``contacts`` (frames,
        kinds; by default the active one); None (logged and counted) if unusable."""
        try:
            return DynamicsPipeline(description, p["floating_base"], p["strict_joint_names"], p["max_state_age"],
                                    p["max_stamp_lead"], *(contacts or self._contacts))
        except PipelineError as error:
            kept = "keeping the current model" if self._robot is not None else "no model"
            self._refuse(error.reason, f"robot description from {source}, {kept}: {error}", error=True)
            return None

    def _install(self, pipeline: DynamicsPipeline, allow_change: bool) -> bool:
        """Use ``pipeline`` from now on, if :func:`replace_robot` allows it; whether it did (else counted)."""
        current = None if self._robot is None else self._robot.pipeline
        try:
            pipeline = replace_robot(current, pipeline, allow_change)
        except PipelineError as error:
            self._refuse(error.reason, str(error))
            return False
        self._robot = _Robot.of(pipeline)
        model = pipeline.model
        self.get_logger().info(shorten(f"robot {model.name!r}: nq={model.nq}, nv={model.nv}, "
                                       f"floating base: {model.has_floating_base}"))
        return True

    def _on_description(self, message: String) -> None:
        """A description from the topic: unconfigured, kept for configure (which checks it); configured, the model
        is rebuilt from it if it loads and computes and is the same robot (or allow_robot_change), else refused
        and counted, the model in use stays."""
        if self._robot is None:
            self._topic_description = message.data
            return
        if message.data == self._robot.pipeline.description:
            return
        pipeline = self._build(message.data, "topic", self._p)
        if pipeline is not None and self._install(pipeline, allow_change=self._p["allow_robot_change"]):
            self._topic_description = message.data

    def _on_contacts(self, message: ContactSet) -> None:
        robot, contacts = self._robot, (tuple(message.frames), tuple(message.kinds))
        if robot is None:
            self._contacts = contacts  # checked against the model when one comes
            return
        try:
            robot.pipeline.set_contacts(*contacts)
        except PipelineError as error:
            self._refuse(error.reason, f"active_contacts, keeping {list(robot.pipeline.contact_frames)}: {error}")
            return
        self._contacts = contacts

    # ---------------------------------------------------------------------------------- parameters
    def _on_set_parameters(self, parameters: List[Parameter]) -> SetParametersResult:
        """Check a ``ros2 param set`` request and apply it at once, or refuse it whole: whatever fails while
        it is applied (a timer the middleware refuses...) restores the previous values and is reported."""
        try:
            updated, problem = updated_values(PARAMETERS, self._p, parameters)
            if problem:
                return SetParametersResult(successful=False, reason=problem)
            pipeline = None
            new_contacts = any(updated[n] != self._p[n] for n in _CONTACT_PARAMETERS)
            # Unconfigured, the model's parameters are taken (and checked) by configure.
            if self._robot is not None and any(updated[n] != self._p[n] for n in _MODEL_PARAMETERS):
                description = self._description(updated)
                if description == "":
                    description = self._robot.pipeline.description
                if description is None:
                    return SetParametersResult(successful=False, reason="cannot read urdf_path")
                pipeline = self._build(description, "parameter", updated, (
                    tuple(updated["contact_frames"]), tuple(updated["contact_kinds"])) if new_contacts else None)
                if pipeline is None:
                    return SetParametersResult(successful=False, reason="robot description refused (see log)")
            elif new_contacts and self._robot is not None:
                contact_set(self._robot.pipeline.model, updated["contact_frames"], updated["contact_kinds"])
        except PipelineError as error:
            return SetParametersResult(successful=False, reason=shorten(str(error)))
        except Exception as error:  # noqa: BLE001 - a request must be answered, never kill the node
            self._internal_error(error)
            return SetParametersResult(successful=False, reason=shorten(f"internal error: {error}"))
        previous = self._p
        try:
            self._apply(updated, pipeline)
        except Exception as error:  # noqa: BLE001 - same
            self._internal_error(error)
            self._apply(previous, None)
            return SetParametersResult(successful=False, reason=shorten(f"cannot apply it: {error}"))
        return SetParametersResult(successful=True)

    def _apply(self, p: dict, pipeline: Optional[DynamicsPipeline]) -> None:
        """Use the parameter values ``p`` from now on (and ``pipeline`` if not None)."""
        if any(p[n] != self._p[n] for n in _CONTACT_PARAMETERS):
            self._contacts = self._parameter_contacts(p)
            if pipeline is None and self._robot is not None:
                self._robot.pipeline.set_contacts(*self._contacts)
        self._p, self._selection = p, OutputSelection.from_parameters(p)
        self._refusals.log_period = p["log_throttle_period"]
        if pipeline is not None:
            self._install(pipeline, allow_change=True)  # an explicit parameter change may change the robot
        if self._robot is not None:  # configured; else configure reads them
            self._robot.pipeline.state.set_checks(p["strict_joint_names"], p["max_state_age"], p["max_stamp_lead"])
            self._configure_inputs()
            self._diagnostics_timer.timer_period_ns = int(p["diagnostics_period"] * 1e9)

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
            reliability = STATE_RELIABILITY[self._p["state_qos"]]
            state_qos, polled_qos = (QoSProfile(depth=depth, reliability=reliability, history=HistoryPolicy.KEEP_LAST)
                                     for depth in (STATE_DEPTH, POLLED_STATE_DEPTH))
            self._state_inputs = StateInputs(self, not timer_mode, polled_qos if timer_mode else state_qos,
                                             state_qos, self._guard(self._on_joint_states),
                                             self._guard(self._on_odometry), f"{NODE_NAME}_states",
                                             self._internal_error)
            self._state_inputs_mode = self._p["publish_mode"]
        if timer_mode:
            self._timer = self.create_timer(1.0 / self._p["rate"], self._guard(self._on_timer))

    def _remove_state_inputs(self) -> None:
        """Stop the listener thread and remove the state subscriptions (shutdown, mode change)."""
        if self._state_inputs is not None:
            self._state_inputs.destroy()
            self._lost_before = self._lost()
        self._state_inputs, self._state_inputs_mode = None, ""

    def _lost(self) -> tuple:
        """Messages lost before the node since it started: (joint_states, odom)."""
        current = (0, 0) if self._state_inputs is None else self._state_inputs.lost
        return tuple(a + b for a, b in zip(self._lost_before, current))

    def destroy_node(self) -> None:
        """Remove what configure made (the listener thread stopped first), then the node."""
        self._release()
        super().destroy_node()

    # ---------------------------------------------------------------------------------- robot state
    def _on_joint_states(self, message: JointState) -> bool:
        """Take one joint_states message (and in on_message mode, if active, answer it); return whether it was
        accepted."""
        self._throughput.took()
        robot = self._robot
        if robot is None:
            self._refuse("no_model", "joint_states before any robot description")
            return False
        now_ns = self._now_ns()  # one clock read per message: it costs as much as the checks of the state
        try:
            robot.pipeline.state.update(message.name, message.position, message.velocity, message.effort,
                                        stamp_to_ns(message.header.stamp), now_ns)
        except InputError as error:
            self._refuse(getattr(error, "reason", "bad_message"), f"joint_states: {error}")
            return False
        self._latest_frame = message.header.frame_id
        if self._p["publish_mode"] == "on_message":
            self._compute_and_publish(robot, message.header, now_ns)
        return True

    def _on_odometry(self, message: Odometry) -> None:
        robot = self._robot
        if robot is None or not robot.pipeline.state.floating_base:
            return  # a fixed-base robot has no use for odometry; nothing to refuse
        try:
            robot.pipeline.state.update_base(*odometry_arrays(message), stamp_to_ns(message.header.stamp),
                                             self._now_ns())
        except InputError as error:
            self._refuse(getattr(error, "reason", "bad_message"), f"odom: {error}")

    def _on_timer(self) -> None:
        robot = self._robot
        # Superseded messages are counted as inputs here, the others as they are applied.
        skipped = self._state_inputs.poll(None if robot is None else frozenset(robot.pipeline.actuated_joint_names))
        self._throughput.took(skipped)
        robot = self._robot
        if robot is None or robot.pipeline.state.stamp_ns < 0 or not self._active:
            return
        header = Header(stamp=set_stamp(Time(), robot.pipeline.state.stamp_ns), frame_id=self._latest_frame)
        self._compute_and_publish(robot, header, self._now_ns(), check_age=True)

    # ------------------------------------------------------------------------------------- outputs
    def _compute_and_publish(self, robot: _Robot, header: Header, now_ns: int, check_age: bool = False) -> None:
        """Outputs at the assembled state, published stamped ``header``; ``now_ns`` is when the input arrived (or
        the timer's tick, when the state must not be older than max_state_age: ``check_age``). Nothing while
        inactive."""
        with self._publishing:
            if not self._active:
                return
            started = time.perf_counter()
            try:
                if check_age:
                    robot.pipeline.state.check_fresh(now_ns)
                outputs = robot.pipeline.outputs_from_state(self._selection)
            except InputError as error:  # incomplete or stale state; non-finite results, with their input
                self._refuse(error.reason, str(error), error=error.reason == "non_finite_output")
                return
            # The pipeline's arrays go straight into the kept messages' numbers (views of their fields).
            for topic, message in robot.messages.write_outputs(outputs, header):
                self._output_publishers[topic].publish(message)
            elapsed = time.perf_counter() - started
            self._throughput.sent(elapsed, ns_to_seconds(now_ns, stamp_to_ns(header.stamp)) + elapsed)

    # -------------------------------------------------------------------------------------- service
    def _on_compute_derivatives(self, request, response):
        """The derivatives the request asks for at its state; while inactive, success false and why (the service
        exists from configure to cleanup)."""
        try:
            if not self._active:
                raise PipelineError("the node is inactive: no derivatives until it is activated (ros2 lifecycle set "
                                    f"{self.get_fully_qualified_name()} activate)", "inactive")
            pipeline = self._robot.pipeline
            answer = pipeline.derivatives(request.q, request.v, request.a, request.tau, request.dt,
                                          [name for name in DERIVATIVES if getattr(request, name)],
                                          request.contact_frames, request.contact_kinds)
            header = Header(stamp=self.get_clock().now().to_msg())
            for field, fields in answer_fields(answer, pipeline.joint_names, pipeline.velocity_names,
                                               pipeline.model.nq, pipeline.model.nv).items():
                message_type = Linearization if field == "linearization" else Matrix
                setattr(response, field, fill_message(message_type(header=header), fields))
            response.joint_names = list(pipeline.joint_names)
            response.success, response.message = True, "ok"
        except (RbdDerivError, ValueError) as error:  # the answer was checked finite last, in the pipeline
            reason = getattr(error, "reason", "bad_request")
            self._refuse(reason, f"compute_derivatives: {error}", error=reason == "non_finite_output")
            response = ComputeDerivatives.Response(success=False, message=shorten(str(error)))
        except Exception as error:  # noqa: BLE001 - answer, whatever happened
            self._refuse("internal_error", f"compute_derivatives: {type(error).__name__}: {error}", error=True)
            response = ComputeDerivatives.Response(success=False, message=shorten(f"internal error: {error}"))
        return response

    # ---------------------------------------------------------------------------------- diagnostics
    def _on_diagnostics(self) -> None:
        now = time.monotonic()
        period = max(now - self._last_diagnostics, 1e-9)
        self._last_diagnostics = now
        level, text, values = dynamics_status(None if self._robot is None else self._robot.pipeline,
                                              self._throughput.report(period), self._lost(), self._refusals)
        values["lifecycle_state"] = "active" if self._active else "inactive"
        status = DiagnosticStatus(name=f"{self.get_fully_qualified_name()}: dynamics", hardware_id=values["robot"],
                                  level=bytes((level,)), message=text,
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        self._pub_diagnostics.publish(DiagnosticArray(header=Header(stamp=self.get_clock().now().to_msg()),
                                                      status=[status]))


def main(args: Optional[Sequence[str]] = None) -> int:
    """Console entry point ``dynamics_node``: spin until interrupted (SIGINT or SIGTERM)."""
    # rclpy.experimental.EventsExecutor would cut the per-message overhead, but in the Kilted wheels
    # it delivers no subscription messages: run_node keeps the default executor.
    return run_node(DynamicsNode, args)


if __name__ == "__main__":
    sys.exit(main())
