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

Every input is checked; a bad one is refused as a whole, counted, and logged at most once per
``log_throttle_period`` per kind of fault. The model is replaced only by a description that loads and
computes; the last good one stays otherwise.
"""

from __future__ import annotations

import array
import math
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String

import rbd_deriv as rd
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.joint_state_map import JointStateError, JointStateMap, velocity_names
from rbd_deriv.msg import Linearization, Matrix
from rbd_deriv.nodes.spin import ListenerThread, PolledSubscription, newest_covering, run_node
from rbd_deriv.srv import ComputeDerivatives

NODE_NAME = "dynamics_node"

PUBLISH_MODES = ("on_message", "timer")
LINEARIZATION_INPUTS = ("bias", "effort")

# Same QoS as robot_state_publisher: a late subscriber still gets the last description.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)
# Reliable, so a reliable or best-effort publisher both match; the queue absorbs bursts at 1 kHz.
STATE_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# Timer mode takes what arrived since its last tick: the history (one for all publishers of the
# topic) must hold a slow publisher's last message over a tick, 1 s of a 1 kHz robot.
POLLED_STATE_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


def _positive(name: str, value) -> Optional[str]:
    return None if isinstance(value, float) and math.isfinite(value) and value > 0.0 else f"{name} must be > 0"


def _non_negative(name: str, value) -> Optional[str]:
    return None if isinstance(value, float) and math.isfinite(value) and value >= 0.0 else f"{name} must be >= 0"


def _one_of(choices: Sequence[str]) -> Callable[[str, object], Optional[str]]:
    def check(name: str, value) -> Optional[str]:
        return None if value in choices else f"{name} must be one of {', '.join(choices)}, got {value!r}"
    return check


# name -> (default, description, validator or None). The YAML in config/ lists the same names.
PARAMETERS: Dict[str, tuple] = {
    "robot_description": ("", "URDF XML of the robot. Empty: use urdf_path, or wait for the robot_description "
                          "topic. Setting it rebuilds the model (refused if the URDF is broken).", None),
    "urdf_path": ("", "Path of a URDF file, used when robot_description is empty.", None),
    "floating_base": (False, "Add a free-flyer root joint; its pose and twist come from the odom topic.", None),
    "allow_robot_change": (False, "Accept a new description whose joints differ from the running model's "
                           "(by default refused: consumers rely on the state layout).", None),
    "publish_mode": ("on_message", "on_message: compute on every joint_states message; timer: at 'rate' from "
                     "the latest state.", _one_of(PUBLISH_MODES)),
    "rate": (100.0, "Output rate in timer mode [Hz].", _positive),
    "dt": (0.001, "Time step of the published linearization [s].", _positive),
    "publish_linearization": (True, "Publish A, B, x+ on 'linearization'.", None),
    "publish_mass_matrix_inverse": (True, "Publish M^-1 on 'mass_matrix_inverse'.", None),
    "publish_torques": (True, "Publish RNEA(q, v, 0) as effort on 'bias_torques'.", None),
    "linearization_input": ("bias", "Input u of the linearization: bias = RNEA(q, v, 0) (holds the current "
                            "velocity), effort = measured effort from joint_states.", _one_of(LINEARIZATION_INPUTS)),
    "strict_joint_names": (False, "Refuse joint_states naming joints the model does not have (by default "
                           "they are ignored).", None),
    "max_state_age": (0.5, "Refuse states whose stamp is older than the clock by more than this, or whose "
                      "joints were updated this far apart [s]; 0 disables.", _non_negative),
    "diagnostics_period": (1.0, "Period of /diagnostics [s]; rates and percentiles cover one period.", _positive),
    "log_throttle_period": (5.0, "At most one log line per kind of fault per period [s].", _non_negative),
}

_MODEL_PARAMETERS = ("robot_description", "urdf_path", "floating_base")


def _stamp_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _floats(values: np.ndarray) -> array.array:
    # Message float64[] fields take array('d') without a per-element check: much faster than lists.
    return array.array("d", np.ascontiguousarray(values, dtype=np.float64).tobytes())


def matrix_message(header: Header, name: str, names: List[str], values: np.ndarray) -> Matrix:
    """Pack a (rows, cols) array into a rbd_deriv/Matrix, row-major."""
    message = Matrix(header=header, name=name, names=names)
    message.rows, message.cols = int(values.shape[0]), int(values.shape[1])
    message.data = _floats(values)
    return message


class Robot:
    """Everything derived from one description; replaced as a whole so callbacks never see a mix."""

    def __init__(self, description: str, floating_base: bool, strict: bool, max_age: float) -> None:
        self.description = description
        self.model = rd.load_urdf(description, floating_base=floating_base)
        self.data = self.model.create_data()
        self.state = JointStateMap(self.model, strict=strict, max_age=max_age)
        self.joint_names = list(self.model.joint_names)
        self.velocity_names = velocity_names(self.model)
        # bias_torques lists the actuated joints, without the free-flyer coordinates
        self.actuated_names = list(self.state.joint_names)
        self.actuated_set = frozenset(self.actuated_names)
        self.actuated_v = np.array([self.model.idx_v[n] for n in self.actuated_names], dtype=np.int64)
        self.zero_v = np.zeros(self.model.nv)
        header = Header()
        self.torques_message = JointState(header=header, name=self.actuated_names)
        self.minv_message = Matrix(header=header, name="M_inverse", names=self.velocity_names,
                                   rows=self.model.nv, cols=self.model.nv)
        self.linearization_message = self.new_linearization_message(header)
        # The listener thread and the executor (service) both compute in data: one at a time.
        self.lock = threading.Lock()
        self.warm_up()

    def new_linearization_message(self, header: Header) -> Linearization:
        """A Linearization with this robot's names and sizes filled, numbers empty."""
        model = self.model
        return Linearization(header=header, joint_names=self.joint_names, nx=2 * model.nv, nu=model.nv,
                             nq=model.nq, nv=model.nv)

    def warm_up(self) -> None:
        """Run every algorithm the node uses once: compiles the kernels before the first message and
        refuses a model that loads but cannot compute."""
        q = rd.neutral(self.model)
        rd.rnea(self.model, self.data, q, self.zero_v, self.zero_v)
        rd.minverse(self.model, self.data, q)
        rd.linearize(self.model, self.data, q, self.zero_v, self.zero_v, 1e-3)
        rd.rnea_derivatives(self.model, self.data, q, self.zero_v, self.zero_v)
        rd.aba_derivatives(self.model, self.data, q, self.zero_v, self.zero_v)
        rd.crba(self.model, self.data, q)

    def same_robot(self, other: "Robot") -> bool:
        return self.joint_names == other.joint_names and self.model.nq == other.model.nq


class DynamicsNode(Node):
    """Wires parameters, topics, timers and the service to the library; the work is in rbd_deriv."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, description, _) in PARAMETERS.items():
            descriptor = ParameterDescriptor(description=description)
            if isinstance(default, float):
                descriptor.floating_point_range = [FloatingPointRange(from_value=0.0, to_value=1e9)]
            self.declare_parameter(name, default, descriptor)
        self._p = {name: self.get_parameter(name).value for name in PARAMETERS}
        for name, (_, _, check) in PARAMETERS.items():
            problem = check(name, self._p[name]) if check else None
            if problem:
                raise ValueError(f"invalid parameter: {problem}")

        self._robot: Optional[Robot] = None
        self._refused: Dict[str, int] = {}
        self._log_state: Dict[str, tuple] = {}
        self._compute_times: List[float] = []
        self._latencies: List[float] = []
        self._inputs = 0
        self._outputs = 0
        self._last_diagnostics = time.monotonic()
        self._timer = None
        self._polled: list = []
        self._polled_mode = ""
        # The state handlers as the inputs call them, wrapped once rather than at every message.
        self._joint_states_input = self._guard(self._on_joint_states)
        self._odometry_input = self._guard(self._on_odometry)
        self._listener: Optional[ListenerThread] = None
        self._latest_frame = ""

        self._pub_linearization = self.create_publisher(Linearization, "linearization", OUTPUT_QOS)
        self._pub_minv = self.create_publisher(Matrix, "mass_matrix_inverse", OUTPUT_QOS)
        self._pub_torques = self.create_publisher(JointState, "bias_torques", OUTPUT_QOS)
        self._pub_diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

        initial = self._initial_description()
        if initial is not None:
            robot = self._build(initial, self._p["floating_base"], "parameter")
            if robot is not None:
                self._install(robot)

        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_subscription(String, "robot_description", self._guard(self._on_description), DESCRIPTION_QOS)
        self.create_service(ComputeDerivatives, "compute_derivatives", self._on_compute_derivatives)
        self._diagnostics_timer = self.create_timer(self._p["diagnostics_period"], self._guard(self._on_diagnostics))
        self._configure_inputs()
        if self._robot is None:
            self.get_logger().info("no robot description yet: waiting on the robot_description topic")

    # ------------------------------------------------------------------------------- faults and logs
    def _guard(self, callback: Callable) -> Callable:
        """Wrap a callback so that an unexpected error is counted and logged instead of killing the node."""
        def guarded(*args):
            try:
                return callback(*args)
            except Exception as error:  # noqa: BLE001 - the node must survive any single message
                self._refuse("internal_error", f"{type(error).__name__}: {error}", error=True)
        return guarded

    def _refuse(self, reason: str, text: str, error: bool = False) -> None:
        """Count a refused input under ``reason``; log it unless the same reason was logged recently."""
        self._refused[reason] = self._refused.get(reason, 0) + 1
        now = time.monotonic()
        last, suppressed = self._log_state.get(reason, (-math.inf, 0))
        if now - last < self._p["log_throttle_period"]:
            self._log_state[reason] = (last, suppressed + 1)
            return
        self._log_state[reason] = (now, 0)
        extra = f" ({suppressed} more since the last report)" if suppressed else ""
        line = f"refused [{reason}, {self._refused[reason]} so far]: {text}{extra}"
        # rclpy ties a severity to each call site: one site per severity.
        if error:
            self.get_logger().error(line)
        else:
            self.get_logger().warning(line)

    # ------------------------------------------------------------------------------------- the model
    def _initial_description(self) -> Optional[str]:
        if self._p["robot_description"]:
            return self._p["robot_description"]
        if self._p["urdf_path"]:
            return self._read_file(self._p["urdf_path"])
        return None

    def _read_file(self, path: str) -> Optional[str]:
        try:
            with open(path, encoding="utf-8") as stream:
                return stream.read()
        except OSError as error:
            self._refuse("bad_description", f"cannot read urdf_path {path!r}: {error}", error=True)
            return None

    def _build(self, description: str, floating_base: bool, source: str, parameters: Optional[dict] = None
               ) -> Optional[Robot]:
        """Load and try a description with ``parameters`` (default: the current ones); None (logged and
        counted) if it is unusable."""
        parameters = parameters or self._p
        if not description.strip():
            self._refuse("bad_description", f"empty robot description from {source}; keeping the current model")
            return None
        try:
            robot = Robot(description, floating_base, parameters["strict_joint_names"], parameters["max_state_age"])
        except (RbdDerivError, ValueError) as error:
            self._refuse("bad_description", f"robot description from {source} is unusable, keeping the current "
                         f"model: {error}", error=True)
            return None
        return robot

    def _install(self, robot: Robot, allow_change: bool = True) -> bool:
        current = self._robot
        if current is not None and not allow_change and not robot.same_robot(current):
            self._refuse("robot_changed", f"new description changes the robot ({len(current.joint_names)} -> "
                         f"{len(robot.joint_names)} joints, {current.joint_names[:3]}... -> "
                         f"{robot.joint_names[:3]}...); set allow_robot_change to accept it")
            return False
        if current is not None and robot.same_robot(current):
            # Same robot, new parameters (calibrated inertias...): keep the joints already received.
            robot.state = current.state
        self._robot = robot
        model = robot.model
        self.get_logger().info(f"robot {model.name!r}: nq={model.nq}, nv={model.nv}, "
                               f"floating base: {model.has_floating_base}")
        return True

    def _on_description(self, message: String) -> None:
        if self._robot is not None and message.data == self._robot.description:
            return
        robot = self._build(message.data, self._p["floating_base"], "topic")
        if robot is not None:
            self._install(robot, allow_change=self._p["allow_robot_change"] or self._robot is None)

    # ---------------------------------------------------------------------------------- parameters
    def _on_set_parameters(self, parameters: List[Parameter]) -> SetParametersResult:
        updated = dict(self._p)
        for parameter in parameters:
            if parameter.name not in PARAMETERS:
                continue
            default, _, check = PARAMETERS[parameter.name]
            if type(parameter.value) is not type(default):
                return SetParametersResult(successful=False, reason=f"{parameter.name} takes a "
                                           f"{type(default).__name__}, got {parameter.value!r}")
            problem = check(parameter.name, parameter.value) if check else None
            if problem:
                return SetParametersResult(successful=False, reason=problem)
            updated[parameter.name] = parameter.value

        robot = None
        if any(updated[n] != self._p[n] for n in _MODEL_PARAMETERS):
            description = updated["robot_description"]
            if not description and updated["urdf_path"]:
                description = self._read_file(updated["urdf_path"])
            elif not description and self._robot is not None:
                description = self._robot.description
            if description is None:
                return SetParametersResult(successful=False, reason="cannot read urdf_path")
            robot = self._build(description, updated["floating_base"], "parameter", updated)
            if robot is None:
                return SetParametersResult(successful=False, reason="robot description refused (see log)")

        self._p = updated
        if robot is not None:
            self._install(robot)  # an explicit parameter change may change the robot
        if self._robot is not None:
            self._robot.state.strict = self._p["strict_joint_names"]
            self._robot.state.max_age_ns = int(round(self._p["max_state_age"] * 1e9))
        self._configure_inputs()
        self._diagnostics_timer.timer_period_ns = int(self._p["diagnostics_period"] * 1e9)
        return SetParametersResult(successful=True)

    def _configure_inputs(self) -> None:
        """Set up the timer and the state inputs for the publish mode.

        Either way joint_states and odom are read without an executor callback per message, which
        costs a few hundred microseconds each at 1 kHz. on_message: a thread of their own answers
        every message (ListenerThread). timer: the timer takes what arrived since its previous tick
        (PolledSubscription).
        """
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        timer_mode = self._p["publish_mode"] == "timer"
        if self._polled_mode != self._p["publish_mode"]:
            self._remove_state_inputs()
            # Timer mode keeps a deep history for a slow publisher among fast ones; on_message takes
            # each message as it comes.
            self._polled = [
                PolledSubscription(self, JointState, "joint_states", POLLED_STATE_QOS if timer_mode else STATE_QOS),
                PolledSubscription(self, Odometry, "odom", STATE_QOS)]
            self._polled_mode = self._p["publish_mode"]
            if not timer_mode:
                self._listener = ListenerThread(self._polled, self._guard(self._on_state_messages),
                                                f"{NODE_NAME}_states")
        if timer_mode:
            self._timer = self.create_timer(1.0 / self._p["rate"], self._guard(self._on_timer))

    def _remove_state_inputs(self) -> None:
        """Stop the listener thread and remove the state subscriptions (shutdown, mode change)."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        for subscription in self._polled:
            subscription.destroy()
        self._polled, self._polled_mode = [], ""

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
        now_ns = self.get_clock().now().nanoseconds
        try:
            robot.state.update(message.name, message.position, message.velocity, message.effort,
                               _stamp_ns(message.header.stamp), now_ns)
        except JointStateError as error:
            self._refuse(error.reason, f"joint_states: {error}")
            return
        self._latest_frame = message.header.frame_id
        if self._p["publish_mode"] == "on_message":
            self._compute_and_publish(robot, message.header)

    def _on_odometry(self, message: Odometry) -> None:
        robot = self._robot
        if robot is None or not robot.state.floating_base:
            return  # a fixed-base robot has no use for odometry; nothing to refuse
        pose, twist = message.pose.pose, message.twist.twist
        try:
            robot.state.update_base(
                (pose.position.x, pose.position.y, pose.position.z),
                (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w),
                (twist.linear.x, twist.linear.y, twist.linear.z),
                (twist.angular.x, twist.angular.y, twist.angular.z),
                _stamp_ns(message.header.stamp), self.get_clock().now().nanoseconds)
        except JointStateError as error:
            self._refuse(error.reason, f"odom: {error}")

    def _on_state_messages(self) -> None:
        """on_message mode, in the listener thread: every message in arrival order, odometry first
        so that a joint_states message computes with the newest base."""
        joint_states, odometry = (subscription.take() for subscription in self._polled)
        for message in odometry:
            self._odometry_input(message)
        for message in joint_states:
            self._joint_states_input(message)

    def _read_polled(self) -> None:
        """Timer mode: apply what arrived since the previous tick, deserializing only the newest
        message of each joint (and of the odometry)."""
        joint_states, odometry = (subscription.take(serialized=True) for subscription in self._polled)
        robot = self._robot
        if joint_states:
            messages = newest_covering(joint_states, JointState, robot.actuated_set) if robot is not None \
                else [deserialize_message(joint_states[-1], JointState)]
            self._inputs += len(joint_states) - len(messages)  # the rest counted as they are applied
            for message in messages:
                self._joint_states_input(message)
        if odometry:
            self._odometry_input(deserialize_message(odometry[-1], Odometry))

    def _on_timer(self) -> None:
        self._read_polled()
        robot = self._robot
        if robot is None or robot.state.stamp_ns < 0:
            return
        now_ns = self.get_clock().now().nanoseconds
        max_age_ns = robot.state.max_age_ns
        if max_age_ns and now_ns - robot.state.stamp_ns > max_age_ns:
            self._refuse("stale", f"latest state is {(now_ns - robot.state.stamp_ns) * 1e-9:.3f} s old")
            return
        stamp = Time(sec=robot.state.stamp_ns // 1_000_000_000, nanosec=robot.state.stamp_ns % 1_000_000_000)
        self._compute_and_publish(robot, Header(stamp=stamp, frame_id=self._latest_frame))

    # ------------------------------------------------------------------------------------- outputs
    def _compute_and_publish(self, robot: Robot, header: Header) -> None:
        # One snapshot of the parameters per message: the executor thread may replace them meanwhile.
        p = self._p
        linearize = p["publish_linearization"]
        use_effort = p["linearization_input"] == "effort"
        try:
            robot.state.check_ready(need_effort=linearize and use_effort)
        except JointStateError as error:
            self._refuse(error.reason, str(error))
            return
        with robot.lock:
            self._compute_locked(robot, header, p, linearize, use_effort)

    def _compute_locked(self, robot: Robot, header: Header, p: dict, linearize: bool, use_effort: bool) -> None:
        started = time.perf_counter()
        model, data, q, v = robot.model, robot.data, robot.state.q, robot.state.v
        outputs = []
        bias = None
        if p["publish_torques"] or (linearize and not use_effort):
            bias = rd.rnea(model, data, q, v, robot.zero_v).copy()
        # The outgoing messages are kept per robot: filling names (checked string by string by the
        # generated setters) once instead of at every tick saves most of the packing time.
        if p["publish_torques"]:
            message = robot.torques_message
            message.header = header
            message.effort = _floats(bias[robot.actuated_v])
            outputs.append((self._pub_torques, message))
        if p["publish_mass_matrix_inverse"]:
            message = robot.minv_message
            message.header = header
            message.data = _floats(rd.minverse(model, data, q))
            outputs.append((self._pub_minv, message))
        if linearize:
            u = robot.state.effort.copy() if use_effort else bias
            message = self._fill_linearization(robot.linearization_message, robot, q, v, u, p["dt"])
            message.header = header
            outputs.append((self._pub_linearization, message))
        for publisher, message in outputs:
            publisher.publish(message)
        self._outputs += 1
        self._compute_times.append(time.perf_counter() - started)
        # Wall clock on both ends: the latency is meaningful only with the system clock anyway.
        self._latencies.append((time.time_ns() - _stamp_ns(header.stamp)) * 1e-9)

    @staticmethod
    def _fill_linearization(message: Linearization, robot: Robot, q, v, u, dt: float) -> Linearization:
        a, b = rd.linearize(robot.model, robot.data, q, v, u, dt)
        message.dt = float(dt)
        message.x = _floats(np.concatenate((q, v)))
        message.u = _floats(u)
        message.a = _floats(a)
        message.b = _floats(b)
        message.x_next = _floats(robot.data.x_next)
        return message

    # -------------------------------------------------------------------------------------- service
    def _on_compute_derivatives(self, request, response):
        try:
            robot = self._robot
            if robot is None:
                raise ValueError("no robot model loaded yet")
            with robot.lock:
                self._answer(robot, request, response)
            response.success, response.message = True, "ok"
        except (RbdDerivError, ValueError) as error:
            self._refuse("bad_request", f"compute_derivatives: {error}")
            response = ComputeDerivatives.Response(success=False, message=str(error))
        except Exception as error:  # noqa: BLE001 - answer, whatever happened
            self._refuse("internal_error", f"compute_derivatives: {type(error).__name__}: {error}", error=True)
            response = ComputeDerivatives.Response(success=False, message=f"internal error: {error}")
        return response

    def _answer(self, robot: Robot, request, response) -> None:
        model, data = robot.model, robot.data
        wanted = {
            "inverse_dynamics_derivatives": request.inverse_dynamics_derivatives,
            "forward_dynamics_derivatives": request.forward_dynamics_derivatives,
            "mass_matrix": request.mass_matrix,
            "mass_matrix_inverse": request.mass_matrix_inverse,
            "linearization": request.linearization,
        }
        if not any(wanted.values()):
            raise ValueError(f"nothing asked: set at least one of {', '.join(wanted)}")

        def vector(name: str, values, size: int, why: str) -> np.ndarray:
            values = np.asarray(values, dtype=float)
            if values.shape != (size,):
                raise ValueError(f"{name} has {values.size} entries, the model needs {size} ({why})")
            if not np.isfinite(values).all():
                raise ValueError(f"{name} contains NaN or inf")
            return values

        q = vector("q", request.q, model.nq, "nq")
        v = vector("v", request.v, model.nv, "nv")
        needs_tau = wanted["forward_dynamics_derivatives"] or wanted["linearization"]
        a = vector("a", request.a, model.nv, "nv, for inverse-dynamics derivatives") \
            if wanted["inverse_dynamics_derivatives"] else None
        tau = vector("tau", request.tau, model.nv, "nv, for forward dynamics and linearization") \
            if needs_tau else None
        if wanted["linearization"] and not (math.isfinite(request.dt) and request.dt > 0.0):
            raise ValueError(f"dt must be > 0 for the linearization, got {request.dt}")

        header = Header(stamp=self.get_clock().now().to_msg(), frame_id="")
        names = robot.velocity_names
        response.joint_names = robot.joint_names
        # Each library call overwrites data's outputs: pack every result before the next call.
        if wanted["inverse_dynamics_derivatives"]:
            dtau_dq, dtau_dv, _ = rd.rnea_derivatives(model, data, q, v, a)
            response.dtau_dq = matrix_message(header, "dtau_dq", names, dtau_dq)
            response.dtau_dv = matrix_message(header, "dtau_dv", names, dtau_dv)
        if wanted["forward_dynamics_derivatives"]:
            dddq_dq, dddq_dv, _ = rd.aba_derivatives(model, data, q, v, tau)
            response.dddq_dq = matrix_message(header, "dddq_dq", names, dddq_dq)
            response.dddq_dv = matrix_message(header, "dddq_dv", names, dddq_dv)
        if wanted["mass_matrix"]:
            response.mass_matrix = matrix_message(header, "M", names, rd.crba(model, data, q))
        if wanted["mass_matrix_inverse"]:
            response.mass_matrix_inverse = matrix_message(header, "M_inverse", names, rd.minverse(model, data, q))
        if wanted["linearization"]:
            response.linearization = self._fill_linearization(robot.new_linearization_message(header), robot,
                                                              q, v, tau, request.dt)

    # ---------------------------------------------------------------------------------- diagnostics
    def _on_diagnostics(self) -> None:
        now = time.monotonic()
        period = max(now - self._last_diagnostics, 1e-9)
        self._last_diagnostics = now
        robot = self._robot
        status = DiagnosticStatus(name=f"{self.get_fully_qualified_name()}: dynamics",
                                  hardware_id=robot.model.name if robot else "")
        values = {
            "robot": robot.model.name if robot else "",
            "nq": robot.model.nq if robot else 0,
            "nv": robot.model.nv if robot else 0,
            "input_rate_hz": self._inputs / period,
            "output_rate_hz": self._outputs / period,
        }
        for label, samples in (("compute_time_ms", self._compute_times), ("latency_ms", self._latencies)):
            if samples:
                p50, p99 = np.percentile(samples, [50.0, 99.0])
                values.update({f"{label}_p50": 1e3 * p50, f"{label}_p99": 1e3 * p99,
                               f"{label}_max": 1e3 * max(samples)})
        values["rejected_total"] = sum(self._refused.values())
        values.update({f"rejected_{reason}": count for reason, count in sorted(self._refused.items())})
        status.values = [KeyValue(key=k, value=f"{v:.6g}" if isinstance(v, float) else str(v))
                         for k, v in values.items()]
        if robot is None:
            status.level, status.message = DiagnosticStatus.ERROR, "no robot description"
        elif not robot.state.complete:
            status.level = DiagnosticStatus.WARN
            status.message = f"waiting for joints: {', '.join(robot.state.missing()[:5])}"
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
