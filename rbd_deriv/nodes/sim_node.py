"""Simulated torque-controlled robot: a feedback policy or effort commands in, joint_states out at 1 kHz.

The physics (:mod:`rbd_deriv.sim`) runs in its own thread paced on the wall clock, so the
joint_states rate does not depend on the executor; inputs arrive through the executor and are
picked up at the next physics step. Two inputs, as on a robot:

- the MPC's feedback policy (rbd_deriv/msg/FeedbackPolicy on ``policy_topic``): while the newest one
  is valid, every physics step applies u = clamp(u_ff(t) + K (x (-) x_ref(t))) from the simulated
  robot's own state, the robot side of a whole-body MPC (:class:`rbd_deriv.control.PolicyExecutor`);
  once it has expired (the MPC stalled or died), its last knot under its gain for ``expiry_hold``;
- torque commands (std_msgs/Float64MultiArray, like ros2_control's effort forward-command controller,
  ``/<controller>/commands``): the last one is applied while no policy is valid, for at most
  ``command_timeout`` after it arrived.

With neither (before the first input, or both stale) joint damping (``expiry_damping``) once a policy has
expired, else the brakes hold the joints where they are. Torques saturate at ``effort_limits`` (the
actuators' limits; the URDF's by default).

The robot: ``robot_description`` (URDF text) or ``urdf_path``; with neither, the latched ``robot_description``
topic (robot_state_publisher's), and the simulation starts when the first description arrives (said once while
it waits).

A floating-base robot (``floating_base``; a legged robot) stands on a floor with a foot sphere or a sole at each
of ``contact_frames`` (:class:`rbd_deriv.sim.Ground`). Besides the actuated joints' states it publishes the
base's ground-truth odometry at the joint_states rate (nav_msgs/Odometry on ``odom_topic``: the pose of the base
link in ``odom_frame_id``, the twist in the base link's own frame, as nav_msgs specifies for
``child_frame_id``; the same pose on ``/tf`` every ``tf_period`` where tf2_msgs is installed, so RViz and
Foxglove place the robot, with robot_state_publisher for its links) and the floor's force on each foot
(rbd_deriv/msg/ContactForces on ``contact_forces_topic``, every ``contact_forces_period``); it takes pushes
(rbd_deriv/msg/Push on ``push_topic``: a wrench on the base for a while; the pushes accepted within a second may
change the base's momentum by at most its mass times ``push_budget``, those beyond are refused as
``push/budget``). Its brakes lock the joints and the robot keeps
standing (or falling) on them. ``/diagnostics`` adds ``fell`` (the base below half its initial height, or a trunk
or limb on the floor), ``pushes_applied``, ``friction_cone_violations`` (foot-steps whose contact force left the
friction cone) and ``cop_edge_steps`` (sole-steps whose center of pressure reached the sole's edge: tipping).

Time: by default the physics is paced on the wall clock and stamps with the node's clock; a machine too busy
to keep up for more than MAX_CATCH_UP_STEPS steps leaves the simulated robot behind that clock (``lost_time_s``).
With ``publish_clock`` the simulator owns the time, as a simulator on a ROS graph does: its time starts at the wall
clock's at start-up, advances by one step per physics step, goes out on ``/clock`` (rosgraph_msgs/Clock, every
``clock_period`` of it) and stamps every output; the other nodes run on it with ``use_sim_time``. It is paced at
``real_time_factor`` simulated seconds per wall-clock second, and a machine too busy to keep up slows it down
(``/diagnostics``: ``real_time_factor`` measured) instead of leaving the robot behind its own clock; it also waits
for a controller it has not heard from for ``wait_for_policy`` of its time.

A bad input (wrong sizes, unknown joints, NaN or inf, a policy from the future or already expired) is
refused, counted by reason in ``/diagnostics`` and logged at most once a second per reason; the last
good one stays. ``/diagnostics`` also counts the physics steps by source (``steps_policy``,
``steps_command``, ``steps_brake``) and the wall-clock time the physics could not catch up with
(``lost_time_s``: more than MAX_CATCH_UP_STEPS steps behind, the simulated robot slows down).
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import rclpy
from builtin_interfaces.msg import Time as StampMessage
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import TransformStamped, Vector3
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

import rbd_deriv as rd
from rbd_deriv.control import Actuation, PolicyExecutor
from rbd_deriv.core.soles import feet_on_soles
from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.messages import feedback_policy_arrays, set_stamp, stamp_to_ns
from rbd_deriv.msg import ContactForces, FeedbackPolicy, Push
from rbd_deriv.nodes.lifecycle import DESCRIPTION_QOS
from rbd_deriv.nodes.parameters import SIM_NODE, actuator_limits, declare_parameters, per_joint
from rbd_deriv.nodes.spin import SequenceGaps, guard, run_node
from rbd_deriv.refusals import shorten
from rbd_deriv.stamps import Throttle
from rbd_deriv.sim import Ground, make_plant
from rbd_deriv.sim.ground import initial_configuration

#: Largest number of physics steps taken at once to catch up with the wall clock (each at its own time);
#: beyond it the simulation slows down instead of jumping. A quarter of a second: a process starved of
#: the CPU for tens of milliseconds (a loaded machine) must not leave the simulated robot behind the
#: clock, whose time the policies are indexed by (a gait's touchdowns fall at given times).
MAX_CATCH_UP_STEPS = 250

#: While catching up, the state is published every this many steps (stamped with its step's time): a
#: controller must not wait for the end of a long burst to see the robot.
CATCH_UP_PUBLISH_STEPS = 10

#: With ``publish_clock``: the most steps taken at once to keep up with the wall clock (an operating system's
#: scheduling jitter, a few milliseconds); beyond, the simulated time slows down. Small: a controller starved of
#: the CPU with the simulator must not see the simulated time run on in bursts without it.
SIM_CLOCK_CATCH_UP_STEPS = 5

#: With ``wait_for_policy``: the longest wait [s of the wall clock] for a policy before the simulated time goes on
#: without one (the controller died or stalled: the robot side's expiry then applies, as on a robot).
WAIT_FOR_POLICY_MAX = 1.0


class SimNode(Node):
    """Wires the plant to ROS: parameters, policy, command and push subscriptions, joint_states, odometry and
    contact-force publishers, diagnostics."""

    def __init__(self) -> None:
        # rclpy destroys a context's nodes at shutdown, this one too when the rest of __init__ fails (MuJoCo
        # missing, a bad URDF): stop() must then find no thread rather than no attribute.
        self._running = False
        self._thread: threading.Thread | None = None
        super().__init__("sim_node")
        self._p = p = declare_parameters(self, SIM_NODE)
        self._description_input = None
        if not (p["robot_description"] or p["urdf_path"]):
            self._description_input = self.create_subscription(String, "robot_description", self._on_description,
                                                               DESCRIPTION_QOS)
            self.get_logger().info("no robot_description nor urdf_path parameter: waiting on the robot_description "
                                   "topic")
            return
        self._start(p["robot_description"] or p["urdf_path"])

    def _on_description(self, message: String) -> None:
        """The robot from the topic: the first description starts the simulation; later ones are ignored (a
        simulated robot does not change)."""
        if self._running or not message.data.strip():
            return
        try:
            self._start(message.data)
        except Exception as error:  # noqa: BLE001 - a description MuJoCo cannot build: say why, wait for another
            self.get_logger().error(shorten(f"robot_description topic: {type(error).__name__}: {error}; waiting "
                                            "for another one"))
            return
        self.destroy_subscription(self._description_input)

    def _start(self, description: str) -> None:
        """Build the plant of ``description`` (URDF text or file path), its inputs and outputs, and start the
        physics thread."""
        p = self._p
        rate = p["physics_rate_hz"]
        self.model = rd.load_urdf(description, floating_base=p["floating_base"])
        self.model.set_actuator_limits(actuator_limits(p["effort_limits"]))
        ground = None
        if p["floating_base"] and p["contact_frames"]:
            frames, size, soles = feet_on_soles(self.model, description, p["contact_frames"], p["contact_kinds"],
                                                p["sole_placement"], p["sole_size"])
            ground = Ground(frames, p["contact_kinds"], p["foot_radius"], size, p["ground_friction"], soles)
        self.plant = make_plant(p["backend"], description, dt=1.0 / rate, damping=per_joint(p["damping"]),
                                friction=per_joint(p["friction"]), model=self.model, ground=ground,
                                push_budget=p["push_budget"])
        self.plant.reset(initial_configuration(self.model, p["initial_positions"], p["initial_base_pose"], ground))
        self.nv = self.model.nv
        self._q_rows = np.array([self.model.idx_q[name] for name in self.plant.joint_names], dtype=np.int64)
        self._v_rows = np.array([self.model.idx_v[name] for name in self.plant.joint_names], dtype=np.int64)
        self._applied: np.ndarray | None = None
        # The executor's state is shared by the subscriptions (executor thread) and the physics thread.
        self._lock = threading.Lock()
        # Damping a light joint (a finger) harder than one physics step allows would blow the simulation up.
        damping = np.minimum(p["expiry_damping"], self.plant.damping_bound)
        self.robot_side = PolicyExecutor(self.model, p["command_timeout"], p["max_stamp_lead"],
                                         expiry_hold=p["expiry_hold"], expiry_damping=damping)
        self.actuation = Actuation.BRAKE
        self.lost_time = 0.0  # [s] of the wall clock the physics could not catch up with
        # Simulated time (publish_clock): its time [ns] now, its pace, its /clock; None: the wall clock.
        self._sim_ns: int | None = None
        self._real_time_factor = 1.0
        self.clock_publisher = None
        if p["publish_clock"]:
            self._sim_ns = time.time_ns()
            self._real_time_factor = p["real_time_factor"]  # on the wall clock the physics keeps its pace
            self._clock_due = Throttle(p["clock_period"])
            self._wait_ns = int(round(p["wait_for_policy"] * 1e9))
            self._clock_message = Clock()
            self.clock_publisher = self.create_publisher(Clock, "/clock", 10)
        self._steps_taken = 0  # physics steps since the start (the brakes' included)
        self._policy_heard_ns: int | None = None  # simulated time [ns] the last policy message came at
        self.policy_waits = 0  # times the simulated time stopped for the next policy (wait_for_policy)
        self.policy_wait_time = 0.0  # [s] of the wall clock it stood still for them
        self._pace = (time.monotonic(), 0)  # (wall clock [s], steps taken) at the last diagnostics
        self.measured_real_time_factor = float("nan")
        self._published_ns = 0  # stamp of the last state published (the next must be later)
        self._message = JointState()
        self._message.name = list(self.plant.joint_names)
        self._message.header.frame_id = p["frame_id"]
        self.publisher = self.create_publisher(JointState, p["joint_states_topic"], 10)
        self.odometry_publisher = None
        # Pushes and policies dropped before the node (beyond their queue) are told by no middleware event: counted
        # from the gaps in their publishers' sequence numbers (lost_push, lost_policy).
        self.input_gaps = {"push": SequenceGaps(), "policy": SequenceGaps()}
        if self.model.has_floating_base:
            self._odometry = Odometry()
            self._odometry.header.frame_id = p["odom_frame_id"]
            self._odometry.child_frame_id = self.plant.base_link
            self.odometry_publisher = self.create_publisher(Odometry, p["odom_topic"], 10)
            self.create_subscription(Push, p["push_topic"],
                                     self.input_gaps["push"].counting(self._guard(self._on_push)), 10)
        self.tf_publisher = None
        if self.model.has_floating_base and p["tf_period"] > 0.0:
            self._make_tf_publisher(p["tf_period"])
        self.contact_forces_publisher = None
        if ground is not None and p["contact_forces_topic"]:
            self._contact_forces = ContactForces(frames=list(ground.contact_frames))
            self._contact_forces.header.frame_id = p["odom_frame_id"]
            self._contact_forces_due = Throttle(p["contact_forces_period"])
            self.contact_forces_publisher = self.create_publisher(ContactForces, p["contact_forces_topic"], 10)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Float64MultiArray, p["command_topic"], self._guard(self._on_command), 10)
        if p["policy_topic"]:
            self.create_subscription(FeedbackPolicy, p["policy_topic"],
                                     self.input_gaps["policy"].counting(self._guard(self._on_policy)), 10)
        self.create_timer(p["diagnostics_period"], self._guard(self._publish_diagnostics))
        self._running = True
        self._thread = threading.Thread(target=self._physics_loop, daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{p['backend']} plant of {self.model.name!r} ({self.nv} dof"
            f"{', floating base' if self.model.has_floating_base else ''}"
            f"{', feet ' + ' '.join(ground.contact_frames) if ground is not None else ''}) at {rate:g} Hz, "
            f"policies on {p['policy_topic'] or '(none)'}, commands on {p['command_topic']}")
        visuals = getattr(self.plant, "visuals", None)
        if visuals is not None and visuals.note:
            self.get_logger().info(visuals.note)

    def _make_tf_publisher(self, period: float) -> None:
        """/tf (tf2_msgs/TFMessage): the base in the odometry's frame every ``period`` [s], where tf2_msgs is
        installed (every ROS installation); a pip-only install has no tf2_msgs, which is said once."""
        try:
            from tf2_msgs.msg import TFMessage
        except ImportError:
            self.get_logger().info("no /tf: tf2_msgs is not installed (a ROS installation has it; the PyPI wheels "
                                   "do not); the base's pose is on the odometry topic")
            return
        self._transform = TransformStamped()
        self._transform.header.frame_id = self._odometry.header.frame_id
        self._transform.child_frame_id = self._odometry.child_frame_id
        self._tf_message = TFMessage(transforms=[self._transform])
        self._tf_due = Throttle(period)
        self.tf_publisher = self.create_publisher(TFMessage, "/tf", 100)

    def _guard(self, callback):
        return guard(callback, lambda error: self._refused("internal_error", error))

    def _refused(self, kind: str, error: object) -> None:
        with self._lock:
            line = self.robot_side.refuse(kind, error)
        if line:
            self.get_logger().warning(shorten(line))

    def _now_ns(self) -> int:
        """The simulator's time [ns]: its own with ``publish_clock``, else the node's clock."""
        if self._sim_ns is not None:
            return self._sim_ns
        return self.get_clock().now().nanoseconds

    def _on_command(self, message: Float64MultiArray) -> None:
        try:
            with self._lock:
                self.robot_side.take_command(message.data, self._now_ns())
        except RbdDerivError as error:
            self._refused("command", error)

    def _on_policy(self, message: FeedbackPolicy) -> None:
        # The controller answered (whatever the message holds): the simulated time may run on (wait_for_policy).
        self._policy_heard_ns = self._sim_ns
        try:
            fields = feedback_policy_arrays(message)
            with self._lock:
                self.robot_side.take_policy(fields, stamp_to_ns(message.header.stamp), self._now_ns())
        except RbdDerivError as error:
            self._refused("policy", error)

    def _on_push(self, message: Push) -> None:
        try:
            with self._lock:
                self.plant.push(np.array(message.force), np.array(message.torque), message.duration)
        except RbdDerivError as error:
            self._refused("push", error)

    def _physics_loop(self) -> None:
        period_ns = int(round(self.plant.dt * 1e9))
        wall_period = self.plant.dt / self._real_time_factor  # [s] of the wall clock per step
        simulated = self._sim_ns is not None
        catch_up = SIM_CLOCK_CATCH_UP_STEPS if simulated else MAX_CATCH_UP_STEPS
        next_time = time.monotonic()
        waiting_since = None  # [s] wall clock since which the simulated time waits for a policy
        given_up_on = None  # when [ns, simulated] the last policy before a wait that ran out was heard
        while self._running and rclpy.ok():
            now = time.monotonic()
            steps = min(catch_up, max(1, int((now - next_time) / wall_period) + 1))
            if simulated and self._wait_ns > 0:
                allowed, heard_ns = self._steps_before_waiting(steps, period_ns)
                if allowed == 0 and heard_ns != given_up_on:
                    if waiting_since is None:
                        waiting_since = now
                        self.policy_waits += 1
                    if now - waiting_since < WAIT_FOR_POLICY_MAX:
                        time.sleep(0.0002)
                        continue
                    given_up_on = heard_ns  # no policy came: time goes on (an expired policy meets the safe mode)
                if waiting_since is not None:
                    self.policy_wait_time += now - waiting_since
                    waiting_since, next_time = None, now
                    steps = 1
                elif allowed > 0:
                    steps = allowed
            # The time of the last of these steps: the simulated time moves on by them, the wall clock has.
            end_ns = self._sim_ns + steps * period_ns if simulated else self._now_ns()
            for step in range(steps):
                # Each step is evaluated at its own time: a policy moves along its knots.
                step_ns = end_ns - (steps - 1 - step) * period_ns
                with self._lock:
                    torque, actuation = self.robot_side.torque(self.plant.q, self.plant.v, step_ns)
                    if torque is None:
                        self.plant.hold()
                        self._applied = None
                    else:
                        self._applied = self.plant.step(torque)
                    if simulated:
                        self._sim_ns = step_ns
                    self._steps_taken += 1
                self.actuation = actuation
                if (step < steps - 1 and step % CATCH_UP_PUBLISH_STEPS == CATCH_UP_PUBLISH_STEPS - 1
                        and step_ns > self._published_ns):
                    self._publish(step_ns)
            next_time += steps * wall_period
            if now - next_time > catch_up * wall_period:
                # Too far behind: slow down rather than jump. On the wall clock the simulated robot then lags
                # the clock; on its own clock the simulated time runs slower.
                if not simulated:
                    self.lost_time += now - next_time
                next_time = now
            try:
                self._publish(end_ns if simulated else None)
            except Exception:  # noqa: BLE001 - Ctrl-C shut the context down between ok() and publish
                if rclpy.ok():
                    raise
                return
            delay = next_time - time.monotonic()
            if delay > 0.0:
                time.sleep(delay)

    def _steps_before_waiting(self, steps: int, period_ns: int) -> tuple[int, int | None]:
        """How many of ``steps`` the simulated time may take before it waits for the controller's next policy
        (``wait_for_policy`` of simulated time after the last one was heard; all of them before the first), and
        when [ns] that last one was heard. Any policy message is an answer, a safe command or a refused one too.
        Waiting instead for a plan stamped later than the newest froze the simulated time on every refused plan
        (the controller re-solved one state until its solver diverged), and with 20 ms knots it paused the
        simulation at almost every knot: talos fell turning in 5 of 8 demo runs that way, in none of 5 on the wall
        clock."""
        heard_ns = self._policy_heard_ns
        if heard_ns is None:
            return steps, None
        return max(0, min(steps, (heard_ns + self._wait_ns - self._sim_ns) // period_ns)), heard_ns

    def _publish(self, stamp_ns: int | None = None) -> None:
        """joint_states, odometry (and contact forces) of the plant's state, stamped ``stamp_ns`` (default:
        now)."""
        message = self._message
        if stamp_ns is None:
            stamp = self.get_clock().now().to_msg()
        else:
            stamp = set_stamp(StampMessage(), stamp_ns)
            if self.clock_publisher is not None and self._clock_due.due(stamp_ns):
                # The clock first: a node on it then finds the state no newer than its time.
                self._clock_message.clock = stamp
                self.clock_publisher.publish(self._clock_message)
        with self._lock:
            q, v, applied = self.plant.q, self.plant.v, self._applied
            if self.contact_forces_publisher is not None:
                forces, touching = self.plant.contact_forces.copy(), self.plant.touching.copy()
        message.header.stamp = stamp
        self._published_ns = Time.from_msg(stamp).nanoseconds
        message.position = q[self._q_rows].tolist()
        message.velocity = v[self._v_rows].tolist()
        # The torque the drives actually applied (saturated), as a real robot reports it.
        message.effort = [] if applied is None else applied.tolist()
        self.publisher.publish(message)
        if self.odometry_publisher is not None:
            odometry = self._odometry
            odometry.header.stamp = stamp
            pose, twist = odometry.pose.pose, odometry.twist.twist
            pose.position.x, pose.position.y, pose.position.z = q[0:3].tolist()
            pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = q[3:7].tolist()
            # The library's base velocity is already the twist in the base frame (nav_msgs' child frame).
            twist.linear.x, twist.linear.y, twist.linear.z = v[0:3].tolist()
            twist.angular.x, twist.angular.y, twist.angular.z = v[3:6].tolist()
            self.odometry_publisher.publish(odometry)
        now_ns = Time.from_msg(stamp).nanoseconds
        if self.tf_publisher is not None and self._tf_due.due(now_ns):
            transform = self._transform
            transform.header.stamp = stamp
            transform.transform.translation = Vector3(x=pose.position.x, y=pose.position.y, z=pose.position.z)
            transform.transform.rotation = pose.orientation
            self.tf_publisher.publish(self._tf_message)
        if self.contact_forces_publisher is not None and self._contact_forces_due.due(now_ns):
            contact = self._contact_forces
            contact.header.stamp = stamp
            contact.forces = forces.ravel().tolist()
            contact.touching = touching.tolist()
            self.contact_forces_publisher.publish(contact)

    def _publish_diagnostics(self) -> None:
        with self._lock:
            steps = dict(self.robot_side.steps)
            refused = dict(self.robot_side.refusals.counts)
            policy = self.robot_side.policy
        values = {"actuation": self.actuation.value}
        values.update({f"steps_{source.value}": str(steps.get(source, 0)) for source in Actuation})
        values["policy_stamp"] = "" if policy is None else f"{policy.stamp_ns * 1e-9:.6f}"
        values["lost_time_s"] = f"{self.lost_time:.3f}"
        wall, steps_taken = time.monotonic(), self._steps_taken
        if wall > self._pace[0]:
            # Simulated seconds per wall-clock second since the last diagnostics: below 1 on the wall clock, the
            # physics lost time; on its own clock, it ran slower.
            self.measured_real_time_factor = (steps_taken - self._pace[1]) * self.plant.dt / (wall - self._pace[0])
        self._pace = (wall, steps_taken)
        values["clock"] = "simulated" if self._sim_ns is not None else "wall"
        values["real_time_factor"] = f"{self.measured_real_time_factor:.3f}"
        if self._sim_ns is not None and self._wait_ns > 0:
            values["policy_waits"] = str(self.policy_waits)
            values["policy_wait_time_s"] = f"{self.policy_wait_time:.3f}"
        plant = self.plant
        if self.model.has_floating_base:
            with self._lock:
                values.update(fell=str(plant.fell).lower(), pushes_applied=str(plant.pushes_applied),
                              friction_cone_violations=str(plant.cone_violations),
                              cop_edge_steps=str(plant.cop_edge_steps),
                              feet_touching="".join("1" if t else "0" for t in plant.touching),
                              base_height_m=f"{plant.q[2]:.4f}")
        values.update({f"refused_{reason}": str(count) for reason, count in sorted(refused.items())})
        values.update((f"lost_{kind}", str(gaps.lost)) for kind, gaps in self.input_gaps.items())
        healthy = self.actuation is Actuation.POLICY
        fell = self.model.has_floating_base and plant.fell
        level = DiagnosticStatus.ERROR if fell else DiagnosticStatus.OK if healthy else DiagnosticStatus.WARN
        status = DiagnosticStatus(name=f"{self.get_name()}: simulator", hardware_id=self.model.name, level=level,
                                  message=f"actuation: {self.actuation.value}" + (", fell" if fell else ""),
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        set_stamp(array.header.stamp, self._now_ns())
        self.diagnostics_publisher.publish(array)

    def stop(self) -> None:
        """Stop the physics thread."""
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def destroy_node(self) -> None:
        """Stop the physics thread, then the node."""
        self.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """Console entry point ``sim_node``: spin until interrupted (SIGINT or SIGTERM)."""
    return run_node(SimNode, args)


if __name__ == "__main__":
    sys.exit(main())
