"""MPC node: whole-body torque MPC on the dynamics node's linearizations.

Inputs: ``joint_states`` (sensor_msgs/JointState), the dynamics node's stamped linearization
(rbd_deriv/msg/Linearization, mode ``held``) and compensation torques (sensor_msgs/JointState,
effort = RNEA(q, v, 0)), a reference (trajectory_msgs/JointTrajectory on a topic, or the
``goal_positions`` parameter; without either the robot holds its first measured configuration).

Outputs every tick: the torque command (std_msgs/Float64MultiArray, the input of ros2_control's
effort forward-command controller), the plan (trajectory_msgs/JointTrajectory, decimated), and
``/diagnostics`` (solve time percentiles, iterations, cost, active torque bounds, why each
command was chosen, refused messages by reason).

All the work is in :mod:`rbd_deriv.control`; this node only wires it. Whatever goes wrong, the
command is finite and inside the URDF effort limits (:func:`rbd_deriv.control.select_command`).
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from rclpy.time import Time
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

import rbd_deriv as rd
from rbd_deriv.control import (CommandHistory, CommandSource, DisturbanceObserver, HeldLinearization, Mode,
                               ModelPredictiveController, MPCProblem, TrajectoryReference,
                               horizon_reference, is_stale, predict_state, select_command)
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.joint_state_map import JointStateError, JointStateMap
from rbd_deriv.msg import Linearization
from rbd_deriv.nodes.spin import PolledSubscription, newest_covering, run_node
from rbd_deriv import bundled_urdf

#: Solve times kept for the percentiles of the diagnostics.
STATISTICS_WINDOW = 2000


def _stamp_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _duration_msg(seconds: float) -> Duration:
    whole = int(np.floor(seconds))
    return Duration(sec=whole, nanosec=int(round((seconds - whole) * 1e9)) % 1_000_000_000)


class MpcNode(Node):
    """Parameters, subscriptions, publishers and the tick timer around the MPC facade."""

    def __init__(self) -> None:
        super().__init__("mpc_node")
        fixed = dict(read_only=True)
        declare = self.declare_parameter
        declare("urdf_path", "", ParameterDescriptor(
            description="URDF file of the robot; empty: the bundled 7-dof arm", **fixed))
        declare("robot_description", "", ParameterDescriptor(
            description="URDF text; used instead of urdf_path when not empty", **fixed))
        declare("mode", "held", ParameterDescriptor(description=(
            "held: linearization from the dynamics node held over the horizon; relinearize: "
            "in-process re-linearization along the prediction (one Gauss-Newton step per tick)"),
            **fixed))
        declare("horizon", 20, ParameterDescriptor(description="horizon steps N", **fixed))
        declare("dt", 0.01, ParameterDescriptor(
            description="horizon step [s]; must equal the dynamics node's dt in held mode", **fixed))
        declare("rate_hz", 200.0, ParameterDescriptor(description="tick rate [Hz]", **fixed))
        declare("max_iterations", 1, ParameterDescriptor(
            description="Riccati passes per tick at most", **fixed))
        declare("position_weight", [1000.0], ParameterDescriptor(
            description="W on positions [1/rad^2], one value or one per joint", **fixed))
        declare("velocity_weight", [1.0], ParameterDescriptor(
            description="W on velocities [s^2/rad^2], one value or one per joint", **fixed))
        declare("torque_weight", [0.001], ParameterDescriptor(
            description="R on torque deviations from inverse dynamics [1/(N m)^2]", **fixed))
        declare("terminal_scale", 10.0, ParameterDescriptor(description="W factor at knot N", **fixed))
        declare("limit_weight", 10000.0, ParameterDescriptor(
            description="weight of the soft position and velocity limits", **fixed))
        declare("torque_margin", 1.0, ParameterDescriptor(
            description="fraction of the URDF effort limit the MPC may use, in (0, 1]", **fixed))
        declare("disturbance_time_constant", 0.01, ParameterDescriptor(description=(
            "filter time constant [s] of the estimate of the torques the model misses "
            "(friction, damping), added to the model; 0 disables"), **fixed))
        declare("disturbance_bound", 0.2, ParameterDescriptor(description=(
            "largest disturbance estimate, as a fraction of each joint's effort limit, in (0, 1]"),
            **fixed))
        declare("predict_delay", True, ParameterDescriptor(description=(
            "solve from the measured state carried forward by the model to the time the command "
            "acts (the state's age plus command_delay), with the torques sent meanwhile"),
            **fixed))
        declare("command_delay", 0.0, ParameterDescriptor(description=(
            "expected time [s] from publishing a command to its effect at the actuators, >= 0"),
            **fixed))
        declare("state_timeout", 0.05, ParameterDescriptor(
            description="joint_states older than this [s] trigger the safe command", **fixed))
        declare("linearization_timeout", 0.05, ParameterDescriptor(
            description="a linearization older than this [s] triggers the safe command", **fixed))
        declare("goal_positions", [0.0], ParameterDescriptor(description=(
            "goal configuration [rad] in model order, one value per joint; settable at run time "
            "(replaces the reference); the default [0.0] means none")))
        declare("plan_decimation", 5, ParameterDescriptor(
            description="publish the plan every this many ticks", **fixed))
        declare("diagnostics_period", 1.0, ParameterDescriptor(
            description="period of /diagnostics [s]", **fixed))
        declare("command_topic", "/effort_controller/commands", ParameterDescriptor(
            description="std_msgs/Float64MultiArray torque command output", **fixed))
        declare("joint_states_topic", "joint_states", ParameterDescriptor(
            description="sensor_msgs/JointState input", **fixed))
        declare("linearization_topic", "linearization", ParameterDescriptor(
            description="rbd_deriv/msg/Linearization input (held mode)", **fixed))
        declare("compensation_topic", "bias_torques", ParameterDescriptor(
            description="sensor_msgs/JointState with effort = RNEA(q, v, 0), for the safe command",
            **fixed))
        declare("reference_topic", "~/reference", ParameterDescriptor(
            description="trajectory_msgs/JointTrajectory reference input", **fixed))
        declare("plan_topic", "~/plan", ParameterDescriptor(
            description="trajectory_msgs/JointTrajectory planned motion output", **fixed))
        value = lambda name: self.get_parameter(name).value  # noqa: E731

        description = value("robot_description")
        urdf_path = value("urdf_path") or str(bundled_urdf("rbd_arm7"))
        self.model = rd.load_urdf(description if description else str(Path(urdf_path)))
        self.data = self.model.create_data()
        nv = self.model.nv
        self.problem = MPCProblem.from_model(
            self.model, horizon=int(value("horizon")), dt=float(value("dt")),
            position_weight=self._per_joint("position_weight"),
            velocity_weight=self._per_joint("velocity_weight"),
            torque_weight=self._per_joint("torque_weight"),
            terminal_scale=float(value("terminal_scale")), limit_weight=float(value("limit_weight")),
            mode=value("mode"), max_iterations=int(value("max_iterations")),
            torque_margin=float(value("torque_margin")))
        self.controller = ModelPredictiveController(self.problem, self.model)
        self.X_ref = np.zeros((self.problem.horizon + 1, 2 * nv))
        self.U_ref = np.zeros((self.problem.horizon, nv))
        self._warm_up()
        self.held = self.problem.mode is Mode.HELD
        time_constant = float(value("disturbance_time_constant"))
        rate = float(value("rate_hz"))
        if not rate > 0.0:
            raise RbdDerivError(f"rate_hz must be > 0, got {rate}")
        bound = float(value("disturbance_bound"))
        if not 0.0 < bound <= 1.0:
            raise RbdDerivError(f"disturbance_bound must be in (0, 1], got {bound}")
        # It learns from states up to four ticks (at least 20 ms) apart; a longer gap means a stall.
        self.observer = (DisturbanceObserver(self.model, time_constant,
                                             bound * self.problem.torque_upper,
                                             max_gap=max(4.0 / rate, 0.02))
                         if time_constant > 0.0 else None)
        self.last_command: np.ndarray | None = None
        self.lower, self.upper = self.problem.torque_lower, self.problem.torque_upper
        self.joint_names = list(self.model.joint_names)
        self.joint_set = frozenset(self.joint_names)
        self.states = JointStateMap(self.model)
        self.state_timeout = float(value("state_timeout"))
        self.predict = bool(value("predict_delay"))
        self.command_delay = float(value("command_delay"))
        if not (np.isfinite(self.command_delay) and 0.0 <= self.command_delay < self.state_timeout):
            raise RbdDerivError(f"command_delay must be in [0, state_timeout), got {self.command_delay}")
        # Enough commands to cover the longest prediction (a state as old as state_timeout).
        self.solve_from = 0.0  # time [s] since epoch of the state the last plan starts from
        self.history = CommandHistory(
            int(np.ceil((self.state_timeout + self.command_delay) * rate)) + 4)
        self.linearization_timeout = float(value("linearization_timeout"))
        self.plan_decimation = max(1, int(value("plan_decimation")))
        # Reference times are kept relative to the node's start: float seconds since the epoch
        # would lose microseconds.
        self.epoch_ns = self.get_clock().now().nanoseconds
        self.reference: Any = None
        self.linearization: HeldLinearization | None = None
        self.linearization_stamp_ns: int | None = None
        self.compensation: np.ndarray | None = None
        self.compensation_stamp_ns: int | None = None
        self._compensation_layout: dict[tuple[str, ...], np.ndarray] = {}

        self.solve_times: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        self.tick_times: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        # Age of each linearization when it arrives: the latency of joint_states -> dynamics
        # node -> here, which is what the plan is late by.
        self.linearization_ages: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        self.sources: collections.Counter = collections.Counter()
        self.refused: collections.Counter = collections.Counter()
        self.last_source = CommandSource.NO_STATE
        self.last_plan = None
        self.ticks = 0
        self.window_ticks = 0
        self.window_start = time.monotonic()

        self.command_publisher = self.create_publisher(Float64MultiArray, value("command_topic"), 10)
        self.plan_publisher = self.create_publisher(JointTrajectory, value("plan_topic"), 10)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # The tick reads what arrived since the previous tick (PolledSubscription): no executor
        # callback per 1 kHz joint_states message. The depth covers 100 ms of a 1 kHz topic split
        # across several publishers; only the newest compensation and linearization matter.
        inputs = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        newest = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.joint_states_input = PolledSubscription(self, JointState, value("joint_states_topic"), inputs)
        self.newest_inputs = [
            (PolledSubscription(self, JointState, value("compensation_topic"), newest), self._on_compensation)]
        if self.held:
            self.newest_inputs.append((PolledSubscription(self, Linearization, value("linearization_topic"),
                                                          newest), self._on_linearization))

        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.create_subscription(JointTrajectory, value("reference_topic"), self._on_reference,
                                 latched)
        goal = np.asarray(value("goal_positions"), dtype=float)
        if goal.size == nv:
            self.reference = TrajectoryReference([0.0], goal[None, :])
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_timer(1.0 / rate, self._tick)
        self.create_timer(float(value("diagnostics_period")), self._publish_diagnostics)
        self.get_logger().info(
            f"MPC on {self.model.name!r}: {nv} joints, N={self.problem.horizon}, "
            f"dt={self.problem.dt} s, mode {self.problem.mode.value}, {rate:g} Hz")

    def _warm_up(self) -> None:
        """Solve once at the neutral configuration so that numba compiles (or loads its cache)
        before the first message rather than during the first ticks."""
        nv = self.model.nv
        q, v = rd.neutral(self.model), np.zeros(nv)
        u = rd.gravity_torques(self.model, self.data, q).copy()
        A, B = rd.linearize(self.model, self.data, q, v, u, self.problem.dt)
        linearization = HeldLinearization(A.copy(), B.copy(), np.r_[q, v], u,
                                          self.data.x_next.copy(), self.problem.dt)
        reference = TrajectoryReference([0.0], q[None, :])
        horizon_reference(reference, 0.0, self.problem.horizon, self.problem.dt, self.model,
                          self.problem.torque_lower, self.problem.torque_upper, self.X_ref,
                          self.U_ref, self.data)
        self.controller.set_reference(self.X_ref, self.U_ref)
        held = self.problem.mode is Mode.HELD
        self.controller.solve(np.r_[q, v], 0.0, linearization if held else None)
        self.controller.reset()

    # ----------------------------------------------------------------------------- parameters
    def _per_joint(self, name: str) -> np.ndarray:
        values = np.asarray(self.get_parameter(name).value, dtype=float)
        if values.size == 1:
            return np.full(self.model.nv, float(values[0]))
        return values  # MPCProblem refuses a wrong length with a clear message

    def _on_set_parameters(self, parameters: list) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name != "goal_positions":
                continue
            goal = np.asarray(parameter.value, dtype=float)
            if goal.shape != (self.model.nv,) or not np.isfinite(goal).all():
                return SetParametersResult(successful=False, reason=(
                    f"goal_positions needs {self.model.nv} finite values in the order "
                    f"{self.joint_names}"))
            self.reference = TrajectoryReference([0.0], goal[None, :])
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------------------- inputs
    def _refuse(self, reason: str, message: str) -> None:
        self.refused[reason] += 1
        self.get_logger().warning(f"refused {reason}: {message} ({self.refused[reason]} so far)",
                               throttle_duration_sec=1.0)

    def _on_joint_states(self, message: JointState) -> None:
        try:
            # Efforts only feed the observer: a message whose efforts are not all finite (ros2_control
            # fills NaN for joints without an effort interface) still gives positions and velocities.
            effort = message.effort if np.isfinite(message.effort).all() else []
            self.states.update(message.name, message.position, message.velocity, effort,
                               _stamp_ns(message.header.stamp))
        except JointStateError as error:
            self._refuse(f"joint_states/{error.reason}", str(error))

    def _on_compensation(self, message: JointState) -> None:
        names = tuple(message.name)
        layout = self._compensation_layout.get(names)
        if layout is None:
            if sorted(names) != sorted(self.joint_names):
                self._refuse("compensation/joints", f"joints {list(names)} != {self.joint_names}")
                return
            layout = np.array([names.index(n) for n in self.joint_names], dtype=np.int64)
            self._compensation_layout[names] = layout
        effort = np.asarray(message.effort, dtype=float)
        if effort.shape != (len(names),) or not np.isfinite(effort).all():
            self._refuse("compensation/effort", f"{effort.size} efforts, need {len(names)} finite")
            return
        self.compensation = effort[layout]
        self.compensation_stamp_ns = _stamp_ns(message.header.stamp)

    def _on_linearization(self, message: Linearization) -> None:
        nv, nx = self.model.nv, 2 * self.model.nv
        if list(message.joint_names) != self.joint_names:
            self._refuse("linearization/joints",
                         f"joints {list(message.joint_names)} != {self.joint_names}")
            return
        sizes = (message.nx, message.nu, len(message.a), len(message.b), len(message.x),
                 len(message.u), len(message.x_next))
        if sizes != (nx, nv, nx * nx, nx * nv, nx, nv, nx):
            self._refuse("linearization/size", f"nx, nu and array sizes {sizes} do not match nv={nv}")
            return
        try:
            linearization = HeldLinearization(
                A=np.asarray(message.a, dtype=float).reshape(nx, nx),
                B=np.asarray(message.b, dtype=float).reshape(nx, nv),
                x=np.asarray(message.x, dtype=float), u=np.asarray(message.u, dtype=float),
                x_next=np.asarray(message.x_next, dtype=float), dt=float(message.dt))
            # Validated here so that a bad message never replaces a good one.
            self.controller.check_linearization(linearization)
        except RbdDerivError as error:
            self._refuse("linearization/values", str(error))
            return
        self.linearization = linearization
        self.linearization_stamp_ns = _stamp_ns(message.header.stamp)
        self.linearization_ages.append(
            (self.get_clock().now().nanoseconds - self.linearization_stamp_ns) * 1e-9)

    def _on_reference(self, message: JointTrajectory) -> None:
        names = list(message.joint_names)
        missing = [n for n in self.joint_names if n not in names]
        if missing or not message.points:
            self._refuse("reference", f"needs points for every joint; missing {missing}")
            return
        columns = [names.index(n) for n in self.joint_names]
        start_ns = _stamp_ns(message.header.stamp) or self.get_clock().now().nanoseconds
        try:
            times = [(start_ns - self.epoch_ns) * 1e-9 + p.time_from_start.sec
                     + p.time_from_start.nanosec * 1e-9 for p in message.points]
            positions = [np.asarray(p.positions, dtype=float)[columns] for p in message.points]
            with_velocity = all(len(p.velocities) == len(names) for p in message.points)
            velocities = ([np.asarray(p.velocities, dtype=float)[columns] for p in message.points]
                          if with_velocity else None)
            self.reference = TrajectoryReference(times, positions, velocities)
        except (RbdDerivError, IndexError) as error:
            self._refuse("reference", str(error))
            return
        self.get_logger().info(f"new reference: {len(times)} points over "
                               f"{times[-1] - times[0]:.2f} s")

    # --------------------------------------------------------------------------------- tick
    def _read_inputs(self) -> None:
        """Hand what arrived since the previous tick to the handlers: the newest message of each
        joint, compensation and linearization (only those are deserialized)."""
        serialized = self.joint_states_input.take(serialized=True)
        for message in newest_covering(serialized, JointState, self.joint_set):
            self._on_joint_states(message)
        for subscription, handler in self.newest_inputs:
            serialized = subscription.take(serialized=True)
            if serialized:
                handler(deserialize_message(serialized[-1], subscription.message_type))

    def _tick(self) -> None:
        start = time.perf_counter()
        self._read_inputs()
        if not self.states.complete:
            self.sources[CommandSource.NO_STATE] += 1
            self.last_source = CommandSource.NO_STATE
            return  # nothing is known about the robot: no command is better than a guess
        now_ns = self.get_clock().now().nanoseconds
        q, v = self.states.q.copy(), self.states.v.copy()
        state_fresh = not is_stale(self.states.stamp_ns * 1e-9, now_ns * 1e-9, self.state_timeout)
        linearization_fresh = not self.held or (
            self.linearization is not None and not is_stale(
                self.linearization_stamp_ns * 1e-9, now_ns * 1e-9, self.linearization_timeout))
        if self.reference is None:
            self.reference = TrajectoryReference([0.0], q[None, :])
        plan = None
        state_time = (self.states.stamp_ns - self.epoch_ns) * 1e-9
        disturbance = None
        if self.observer is not None:
            if state_fresh:
                # The measured joint torques when the robot reports them (they include the delay
                # between this node and the actuators), else the last command.
                applied = self.states.effort if self.states.has_effort else self.last_command
                disturbance = self.observer.update(q, v, state_time, applied)
            else:
                self.observer.reset()
        if state_fresh and linearization_fresh:
            try:
                x0, solve_time = self._initial_state(q, v, state_time, now_ns, disturbance)
                self.solve_from = solve_time
                horizon_reference(self.reference, solve_time, self.problem.horizon,
                                  self.problem.dt, self.model, self.lower, self.upper,
                                  self.X_ref, self.U_ref, self.data)
                self.controller.set_reference(self.X_ref, self.U_ref)
                plan = self.controller.solve(x0, solve_time,
                                             self.linearization if self.held else None,
                                             disturbance)
            except RbdDerivError as error:
                self._refuse("solve_input", str(error))
            if plan is not None:
                self.solve_times.append(plan.solve_time)
                self.last_plan = plan
                if not plan.ok:
                    self._refuse("solver_failure", f"solver status {plan.status.value}")
        command, source = select_command(
            None if plan is None else plan.torque, plan is not None and plan.ok, state_fresh,
            linearization_fresh, self._gravity(q, now_ns), self.lower, self.upper)
        if source is not CommandSource.PLAN and source is not self.last_source:
            self.get_logger().warning(f"safe command (hold with gravity compensation): {source.value}")
        self.command_publisher.publish(Float64MultiArray(data=command.tolist()))
        self.history.record((now_ns - self.epoch_ns) * 1e-9, command)
        self.last_command = command
        self.sources[source] += 1
        self.last_source = source
        self.ticks += 1
        self.window_ticks += 1
        if plan is not None and plan.ok and self.ticks % self.plan_decimation == 0:
            self._publish_plan(plan)
        self.tick_times.append(time.perf_counter() - start)

    def _initial_state(self, q: np.ndarray, v: np.ndarray, state_time: float, now_ns: int,
                       disturbance: np.ndarray | None) -> tuple[np.ndarray, float]:
        """The state the tick solves from and its time [s]: the measurement, or (predict_delay)
        the measurement carried forward to when this tick's command acts."""
        if not self.predict:
            return np.concatenate([q, v]), state_time
        target = (now_ns - self.epoch_ns) * 1e-9 + self.command_delay
        q_next, v_next, reached = predict_state(self.model, self.data, q, v, state_time, target,
                                                self.history, self.command_delay, disturbance)
        return np.concatenate([q_next, v_next]), reached

    def destroy_node(self) -> None:
        """Remove the polled subscriptions and their helper nodes, then the node."""
        self.joint_states_input.destroy()
        for subscription, _ in self.newest_inputs:
            subscription.destroy()
        self.newest_inputs = []
        super().destroy_node()

    def _gravity(self, q: np.ndarray, now_ns: int) -> np.ndarray:
        """Compensation torque of the dynamics node if fresh, else gravity computed here."""
        if self.compensation is not None and not is_stale(
                self.compensation_stamp_ns * 1e-9, now_ns * 1e-9, self.state_timeout):
            return self.compensation
        return rd.gravity_torques(self.model, self.data, q).copy()

    def _publish_plan(self, plan: Any) -> None:
        nv = self.model.nv
        message = JointTrajectory()
        # The plan's first knot is the state the tick solved from (predicted to when it acts).
        message.header.stamp = Time(nanoseconds=self.epoch_ns + int(round(self.solve_from * 1e9))).to_msg()
        message.joint_names = self.joint_names
        for k, state in enumerate(plan.states):
            point = JointTrajectoryPoint()
            point.positions = state[:nv].tolist()
            point.velocities = state[nv:].tolist()
            point.effort = plan.torques[min(k, len(plan.torques) - 1)].tolist()
            point.time_from_start = _duration_msg(k * self.problem.dt)
            message.points.append(point)
        self.plan_publisher.publish(message)

    # -------------------------------------------------------------------------- diagnostics
    def _publish_diagnostics(self) -> None:
        elapsed = time.monotonic() - self.window_start
        rate = self.window_ticks / elapsed if elapsed > 0 else 0.0
        self.window_ticks, self.window_start = 0, time.monotonic()
        status = DiagnosticStatus(name=f"{self.get_name()}: MPC", hardware_id=self.model.name)
        healthy = self.last_source is CommandSource.PLAN
        status.level = DiagnosticStatus.OK if healthy else DiagnosticStatus.WARN
        status.message = ("tracking" if healthy else
                          f"safe command (hold with gravity compensation): {self.last_source.value}")
        values = {"rate_hz": f"{rate:.1f}", "mode": self.problem.mode.value,
                  "horizon": str(self.problem.horizon), "command_source": self.last_source.value}
        if self.solve_times:
            times = np.asarray(self.solve_times) * 1e6
            values.update({"solve_time_p50_us": f"{np.percentile(times, 50):.1f}",
                           "solve_time_p99_us": f"{np.percentile(times, 99):.1f}",
                           "solve_time_max_us": f"{times.max():.1f}"})
        if self.linearization_ages:
            ages = np.asarray(self.linearization_ages) * 1e3
            values.update({"linearization_age_p50_ms": f"{np.percentile(ages, 50):.3f}",
                           "linearization_age_p99_ms": f"{np.percentile(ages, 99):.3f}"})
        if self.tick_times:
            values["tick_time_p99_us"] = f"{np.percentile(np.asarray(self.tick_times) * 1e6, 99):.1f}"
        if self.last_plan is not None:
            plan = self.last_plan
            values.update({"status": plan.status.value, "iterations": str(plan.iterations),
                           "qp_iterations": str(plan.qp_iterations), "cost": f"{plan.cost:.6g}",
                           "active_torque_bounds": str(plan.clamped)})
        for source in CommandSource:
            values[f"commands_{source.value}"] = str(self.sources[source])
        for reason, count in sorted(self.refused.items()):
            values[f"refused_{reason}"] = str(count)
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_publisher.publish(array)


def main(args: list[str] | None = None) -> int:
    """Console entry point ``mpc_node``: spin until interrupted (SIGINT or SIGTERM)."""
    return run_node(MpcNode, args)


if __name__ == "__main__":
    sys.exit(main())
