"""Integration tests of the MPC node and the simulator node, started as real processes.

Real DDS traffic between processes, as on a robot. Two set-ups:

- the MPC node alone, fed by this test with joint_states, linearizations and compensation
  torques it computes with the library: the safety rules are driven one by one (stale inputs,
  solver failure, bad messages) and the command is checked against the library entry by entry;
- the simulator node alone, fed by this test with feedback policies and torque commands: the policy
  applied at every physics step, bad policies refused and counted, the fallback when a policy expires;
- the closed loop: the simulator node (MuJoCo, with damping and friction the model does not know)
  applying the MPC node's feedback policy, the MPC in re-linearization mode tracking a reference trajectory.

Each test runs in its own random ROS domain, limited to this machine.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg")

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.control import SinusoidReference  # noqa: E402
from rbd_deriv.demo.arm import demo_parameters  # noqa: E402
from rbd_deriv.messages import feedback_policy_arrays, feedback_policy_fields, fill_message, set_stamp, stamp_to_ns  # noqa: E402,E501
from rbd_deriv.nodes.spin import PolledSubscription  # noqa: E402
from rbd_deriv.testing.robots import bundled_urdf  # noqa: E402

URDF = str(bundled_urdf("rbd_arm7"))

#: Seconds a node may take to start on a loaded machine (first numba compilation included).
STARTUP_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def arm():
    model = rd.load_urdf(URDF)
    return model, model.create_data()


class Listener:
    """Keeps the commands, the latest feedback policy and the latest diagnostics of the MPC node and of the
    simulator node."""

    def __init__(self, node) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import Float64MultiArray

        from trajectory_msgs.msg import JointTrajectory

        from rbd_deriv.msg import FeedbackPolicy

        self.node = node
        self.commands: list[np.ndarray] = []
        self.policy = None
        self.policies: dict[int, object] = {}  # by stamp [ns], the latest 100
        self.plans: dict[int, object] = {}     # the MPC's ~/plan by stamp [ns], the latest 100
        self.diagnostics: dict[str, str] = {}
        self.simulator: dict[str, str] = {}
        node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                                 lambda m: self.commands.append(np.array(m.data)), 100)
        node.create_subscription(FeedbackPolicy, "feedback_policy", self._on_policy, 10)
        node.create_subscription(JointTrajectory, "/mpc_node/plan", lambda m: self._keep(self.plans, m), 10)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def _on_policy(self, message) -> None:
        self.policy = message
        self._keep(self.policies, message)

    @staticmethod
    def _keep(by_stamp: dict, message) -> None:
        by_stamp[stamp_to_ns(message.header.stamp)] = message
        while len(by_stamp) > 100:
            del by_stamp[next(iter(by_stamp))]

    def _on_diagnostics(self, message) -> None:
        for status in message.status:
            if status.name.endswith(": MPC"):
                self.diagnostics = {kv.key: kv.value for kv in status.values}
            elif status.name.endswith(": simulator"):
                self.simulator = {kv.key: kv.value for kv in status.values}

    def spin(self, seconds: float, every=None, until=None) -> bool:
        """Spin for ``seconds`` (calling ``every()`` each 10 ms) or until ``until()`` holds."""
        deadline = time.monotonic() + seconds
        next_call = time.monotonic()
        while time.monotonic() < deadline:
            if every is not None and time.monotonic() >= next_call:
                every()
                next_call += 0.01
            rclpy.spin_once(self.node, timeout_sec=0.002)
            if until is not None and until():
                return True
        return until is None

    def source(self) -> str:
        return self.diagnostics.get("command_source", "")


def check_commands(commands: list[np.ndarray], model) -> None:
    """Every command finite and inside the URDF effort limits."""
    limit = np.asarray(model.effort_limit)
    assert commands, "no command received"
    stacked = np.array(commands)
    assert np.isfinite(stacked).all()
    assert (np.abs(stacked) <= limit + 1e-12).all()


#: [s] How long after the diagnostics name a new command source the commands are judged: until then the listener
#: may still hold commands sent before the switch (its subscription keeps 100, 1 s at the node's 100 Hz, and it
#: takes one message per subscription per wait, so it can fall behind on a loaded machine).
SETTLE = 1.2


def commands_after_switch(listener: Listener, seconds: float, every=None) -> list[np.ndarray]:
    """The commands received over ``seconds`` [s] once :data:`SETTLE` has passed (spinning, ``every()`` called
    each 10 ms as in :meth:`Listener.spin`); at least one."""
    listener.spin(SETTLE, every)
    listener.commands.clear()
    listener.spin(seconds, every)
    assert listener.commands, "no command received"
    return list(listener.commands)


def assert_all_hold(commands: list[np.ndarray], expected: np.ndarray, listener: Listener) -> None:
    """Every command equal to ``expected`` (nu,) to 1e-9; a failure names which of how many, and the MPC's
    last diagnostics."""
    held = [bool(np.allclose(command, expected, rtol=1e-9, atol=1e-9)) for command in commands]
    assert all(held), (f"commands {[i for i, h in enumerate(held) if not h]} of {len(commands)} are not the hold "
                       f"{expected.tolist()}: first {commands[held.index(False)].tolist()}; {listener.diagnostics}")


class FakeDynamics:
    """Publishes what the sim and the dynamics node would, at a fixed state, from the library."""

    def __init__(self, node, model, data, q: np.ndarray, dt: float) -> None:
        from sensor_msgs.msg import JointState

        from rbd_deriv.msg import Linearization

        self.node, self.model, self.data = node, model, data
        self.states = node.create_publisher(JointState, "joint_states", 10)
        self.torques = node.create_publisher(JointState, "bias_torques", 10)
        self.linearizations = node.create_publisher(Linearization, "linearization", 10)
        self.q, self.v, self.dt = q, np.zeros(model.nv), dt
        self.scale_A = 1.0
        self.joint_state_positions = None  # overrides the published positions (bad input)
        self.joint_state_velocities = None  # overrides the published velocities (bad input)
        self.stamp_offset_ns = 0           # added to the joint_states stamp (bad input)
        self.compensation = None           # overrides the published compensation torques (bad input)
        self.linearization_size = None     # overrides the length of x (bad input)
        self.gravity = rd.gravity_torques(model, data, q).copy()

    def publish(self) -> None:
        from builtin_interfaces.msg import Time
        from sensor_msgs.msg import JointState

        from rbd_deriv.msg import Linearization

        now_ns = self.node.get_clock().now().nanoseconds
        stamp = Time(sec=now_ns // 10**9, nanosec=now_ns % 10**9)
        names = list(self.model.joint_names)
        positions = self.q if self.joint_state_positions is None else self.joint_state_positions
        velocities = self.v if self.joint_state_velocities is None else self.joint_state_velocities
        state = JointState(name=names, position=list(positions), velocity=list(velocities))
        state_ns = now_ns + self.stamp_offset_ns
        state.header.stamp = Time(sec=state_ns // 10**9, nanosec=state_ns % 10**9)
        self.states.publish(state)
        bias = rd.rnea(self.model, self.data, self.q, self.v, np.zeros(self.model.nv)).copy()
        torques = JointState(name=names, effort=list(bias if self.compensation is None else self.compensation))
        torques.header.stamp = stamp
        self.torques.publish(torques)
        A, B = rd.linearize(self.model, self.data, self.q, self.v, bias, self.dt)
        nv = self.model.nv
        message = Linearization(joint_names=names, dt=self.dt, nx=2 * nv, nu=nv, nq=nv, nv=nv)
        message.header.stamp = stamp
        x = np.r_[self.q, self.v]
        message.x = list(x if self.linearization_size is None else x[:self.linearization_size])
        message.u = list(bias)
        message.a = list((self.scale_A * A).reshape(-1))
        message.b = list(B.reshape(-1))
        message.x_next = list(self.data.x_next)
        self.linearizations.publish(message)


def test_safety_rules_of_the_running_node(ros, arm):
    node, start, processes = ros
    model, data = arm
    q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])
    goal = q + 0.05
    log = start("rbd_deriv.nodes.mpc_node", {
        "urdf_path": URDF, "mode": "held", "rate_hz": 100.0, "dt": 0.01,
        "state_timeout": 0.2, "linearization_timeout": 0.2, "diagnostics_period": 0.2,
        "disturbance_time_constant": 0.0, "goal_positions": goal.tolist()})
    listener = Listener(node)
    fake = FakeDynamics(node, model, data, q, 0.01)
    limit = np.asarray(model.effort_limit)

    # Fresh, good inputs: the MPC plans.
    assert listener.spin(STARTUP_TIMEOUT, fake.publish, lambda: listener.source() == "plan"), \
        log.read_text()[-3000:] if processes[0].poll() is not None else "no plan"
    listener.commands.clear()
    listener.spin(1.0, fake.publish)
    check_commands(listener.commands, model)
    # Moving towards a goal 0.05 rad above on every joint, from rest: not gravity hold.
    assert np.abs(listener.commands[-1] - fake.gravity).max() > 1.0
    # Every tick also sends the plan's feedback policy: 11 knots over its 0.1 s, the Riccati gain, the knots
    # of the plan published with the same stamp on ~/plan.
    stamp = max(set(listener.policies) & set(listener.plans))
    message, plan = listener.policies[stamp], listener.plans[stamp]
    policy = feedback_policy_arrays(message)
    assert message.knots == 11 and message.valid_for == 0.1 and message.knot_dt == 0.01
    assert policy["state_joint_names"] == policy["joint_names"] == list(model.joint_names)
    for k in range(11):
        point = plan.points[k]
        np.testing.assert_array_equal(policy["x_ref"][k], np.r_[point.positions, point.velocities])
        np.testing.assert_array_equal(policy["u_ff"][k], point.effort)
    assert np.isfinite(policy["K"]).all() and np.abs(policy["K"]).max() > 1.0
    assert (np.abs(policy["u_ff"]) <= limit).all() and np.abs(policy["u_ff"][0] - fake.gravity).max() > 1.0
    age = node.get_clock().now().nanoseconds - stamp_to_ns(listener.policy.header.stamp)
    assert -0.1e9 < age < 0.5e9

    # Inputs stop: after the timeout, the command is gravity compensation at the last state,
    # computed by the node itself (the compensation torques are stale as well).
    assert listener.spin(5.0, None, lambda: listener.source() == "stale_state")
    expected = np.clip(rd.gravity_torques(model, data, q), -limit, limit)
    assert_all_hold(commands_after_switch(listener, 0.3), expected, listener)
    # The policy says the same: that torque, without gain.
    policy = feedback_policy_arrays(listener.policy)
    assert listener.policy.knots == 1 and not policy["K"].any()
    np.testing.assert_allclose(policy["u_ff"][0], expected, rtol=1e-9, atol=1e-9)

    # A linearization that makes the Riccati recursion overflow: the solver fails, the node
    # holds with the compensation torques it receives, and keeps running.
    fake.scale_A = 1e150
    assert listener.spin(10.0, fake.publish, lambda: listener.source() == "solver_failure")
    assert_all_hold(commands_after_switch(listener, 0.3, fake.publish), np.clip(fake.gravity, -limit, limit), listener)
    assert int(listener.diagnostics.get("refused_solver_failure", "0")) > 0

    # Back to good inputs: back to planning.
    fake.scale_A = 1.0
    assert listener.spin(10.0, fake.publish, lambda: listener.source() == "plan")

    # Bad messages are refused and counted; the last good ones stay in use.
    fake.joint_state_positions = np.full(model.nv, np.nan)
    fake.linearization_size = 3
    listener.spin(1.0, fake.publish)
    assert int(listener.diagnostics.get("refused_joint_states/non_finite", "0")) > 0
    assert int(listener.diagnostics.get("refused_linearization/size", "0")) > 0
    fake.joint_state_positions, fake.linearization_size = None, None
    assert listener.spin(10.0, fake.publish, lambda: listener.source() == "plan")
    assert all(process.poll() is None for process in processes)
    check_commands(listener.commands, model)


@pytest.mark.parametrize("mode", ["held", "relinearize"])
def test_absurd_and_future_inputs_never_stop_the_controller(ros, arm, mode):
    """Finite but absurd velocities (1e307: the observer's finite difference overflows), a state stamped an
    hour ahead, compensation torques of 1e308: each is refused and counted, every command stays finite and
    inside the limits, and good input is planned on at once."""
    node, start, processes = ros
    model, data = arm
    q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])
    log = start("rbd_deriv.nodes.mpc_node", {
        "urdf_path": URDF, "mode": mode, "rate_hz": 100.0, "dt": 0.01, "state_timeout": 0.2,
        "linearization_timeout": 0.2, "diagnostics_period": 0.2, "goal_positions": (q + 0.05).tolist()})
    listener = Listener(node)
    fake = FakeDynamics(node, model, data, q, 0.01)
    limit = np.asarray(model.effort_limit)

    def refused(key: str) -> int:
        return int(listener.diagnostics.get(f"refused_{key}", "0"))

    def planned() -> int:
        return int(listener.diagnostics.get("commands_plan", "0"))

    assert listener.spin(STARTUP_TIMEOUT, fake.publish, lambda: listener.source() == "plan"), \
        log.read_text()[-3000:] if processes[0].poll() is not None else "no plan"

    fake.joint_state_velocities = np.full(model.nv, 1e307)
    assert listener.spin(10.0, fake.publish, lambda: refused("joint_states/implausible") >= 5)
    fake.joint_state_velocities = None
    assert listener.spin(10.0, fake.publish, lambda: listener.source() == "plan")

    # One state from an hour ahead, then good ones: they are planned on (before, 977 of 1000 were refused).
    fake.stamp_offset_ns = 3600 * 10**9
    fake.publish()
    fake.stamp_offset_ns = 0
    assert listener.spin(10.0, None, lambda: refused("joint_states/future") == 1)
    before = planned()
    listener.spin(1.0, fake.publish)
    assert planned() - before >= 50 and refused("joint_states/out_of_order") == 0

    # Compensation torques of 1e308 are refused: the hold, once the state stops, is gravity, not the limits.
    fake.compensation = np.full(model.nv, 1e308)
    assert listener.spin(10.0, fake.publish, lambda: refused("compensation/implausible") >= 5)
    assert listener.spin(5.0, None, lambda: listener.source() == "stale_state")
    assert_all_hold(commands_after_switch(listener, 0.3), np.clip(rd.gravity_torques(model, data, q), -limit, limit),
                    listener)
    fake.compensation = None
    assert listener.spin(10.0, fake.publish, lambda: listener.source() == "plan")
    assert all(process.poll() is None for process in processes)
    assert int(listener.diagnostics.get("refused_internal_error", "0")) == 0
    check_commands(listener.commands, model)


def test_simulator_applies_policies_refuses_bad_ones_and_falls_back(ros, arm):
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from rbd_deriv.msg import FeedbackPolicy

    node, start, processes = ros
    model, data = arm
    center = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])
    start("rbd_deriv.nodes.sim_node", {"urdf_path": URDF, "damping": [0.0], "friction": [0.0],
                                       "initial_positions": center.tolist(), "command_timeout": 0.3,
                                       "diagnostics_period": 0.1})
    listener = Listener(node)
    policies = node.create_publisher(FeedbackPolicy, "feedback_policy", 10)
    commands = node.create_publisher(Float64MultiArray, "/effort_controller/commands", 10)
    states = PolledSubscription(node, JointState, "joint_states", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    names = list(model.joint_names)

    def latest_state():
        taken = states.take()
        return (np.array(taken[-1].position), np.array(taken[-1].velocity)) if taken else None

    def steps(source):
        return int(listener.simulator.get(f"steps_{source}", "0"))

    def refused(reason):
        return int(listener.simulator.get(f"refused_policy/{reason}", "0"))

    def send(q_ref, valid_for, change=None):
        # A PD law around q_ref, critically damped per joint, with gravity compensation at q_ref.
        kp = 100.0
        kd = 2.0 * np.sqrt(kp * np.diag(rd.crba(model, data, q_ref)))
        fields = feedback_policy_fields(names, names, model.nv, model.nv, 0.01, valid_for,
                                        np.r_[q_ref, np.zeros(model.nv)][None, :],
                                        rd.gravity_torques(model, data, q_ref)[None, :],
                                        np.hstack([-kp * np.eye(model.nv), -np.diag(kd)]))
        message = fill_message(FeedbackPolicy(), {**fields, **(change or {})})
        set_stamp(message.header.stamp, node.get_clock().now().nanoseconds)
        policies.publish(message)

    # Brakes until the first input.
    assert listener.spin(STARTUP_TIMEOUT, None, lambda: steps("brake") > 0), "the simulator did not start"
    # A policy valid for 10 s brings the arm to its reference, 0.1 rad away on every joint, in a few tenths
    # of a second: the simulator applies it from its own state at every step.
    target = center + 0.1
    send(target, 10.0)
    assert listener.spin(10.0, None, lambda: listener.simulator.get("actuation") == "policy")
    listener.spin(2.0)
    q, v = latest_state()
    assert np.abs(q - target).max() < 0.01 and np.abs(v).max() < 0.05, (q - target, v)
    assert steps("policy") > 1500

    # Bad policies: refused, counted by reason, the good one stays in use.
    bad = [({"joint_names": names[:6] + ["elbow_of_another_robot"]}, "joints"),
           ({"x_ref": np.zeros(5)}, "size"),
           ({"k": np.full(model.nv * 2 * model.nv, np.nan)}, "non_finite"),
           ({"nv": 6, "nx": 12, "k": np.zeros(7 * 12), "x_ref": np.zeros(13)}, "size")]
    for change, _ in bad:
        send(target, 10.0, change)
    assert listener.spin(5.0, None, lambda: refused("joints") == 1 and refused("non_finite") == 1
                         and refused("size") == 2), listener.simulator
    assert listener.simulator["actuation"] == "policy" and processes[0].poll() is None

    # A policy that expires after 0.3 s, no torque command: the brakes hold the arm where it is.
    send(center, 0.3)
    assert listener.spin(5.0, None, lambda: listener.simulator.get("actuation") == "brake")
    braked = steps("brake")
    listener.spin(0.3)
    latest_state()
    listener.spin(0.1)
    q, v = latest_state()
    assert steps("brake") > braked + 200 and not v.any()
    # A torque command is held until command_timeout, then the brakes again.
    commands.publish(Float64MultiArray(data=rd.gravity_torques(model, data, q).tolist()))
    assert listener.spin(5.0, None, lambda: listener.simulator.get("actuation") == "command")
    assert listener.spin(5.0, None, lambda: listener.simulator.get("actuation") == "brake")
    commands.publish(Float64MultiArray(data=[1.0, 2.0]))
    assert listener.spin(5.0, None, lambda: int(listener.simulator.get("refused_command/size", "0")) == 1)
    assert int(listener.simulator.get("refused_internal_error", "0")) == 0 and processes[0].poll() is None
    states.destroy()


def test_closed_loop_tracking_on_the_simulator(ros, arm):
    from builtin_interfaces.msg import Duration
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.time import Time
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    node, start, processes = ros
    model, _ = arm
    center = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])
    reference = SinusoidReference(center, 0.3, np.linspace(0.2, 0.5, 7), ramp=1.0)
    from rclpy.parameter import Parameter

    plant = demo_parameters()["sim_node"]  # the demo's plant: damping and friction of config/demo.yaml
    # On the simulator's clock, as the demo runs (each node with use_sim_time, this client too): a machine busy
    # with the rest of the test suite slows the simulated time (and the simulator waits for a late policy,
    # wait_for_policy) instead of leaving the arm behind a clock its controller cannot keep up with. On the wall
    # clock this test measured 0.15-0.17 rad at load averages of 5-8.
    node.set_parameters([Parameter("use_sim_time", value=True)])
    start("rbd_deriv.nodes.sim_node", {
        "urdf_path": URDF, "backend": "mujoco", "damping": list(plant["damping"]),
        "friction": list(plant["friction"]), "initial_positions": center.tolist(), "publish_clock": True})
    start("rbd_deriv.nodes.mpc_node", {"urdf_path": URDF, "mode": "relinearize", "rate_hz": 200.0,
                                       "diagnostics_period": 0.5, "use_sim_time": True})
    listener = Listener(node)
    states: list[tuple[float, np.ndarray]] = []
    # The states are taken every 10 ms, not through one executor callback per 1 kHz message: this process
    # must not take the cores the loop under test needs.
    polled = PolledSubscription(node, JointState, "joint_states",
                                QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))

    def take_states() -> None:
        for message in polled.take():
            stamp = message.header.stamp.sec + message.header.stamp.nanosec * 1e-9
            states.append((stamp, np.array(message.position)))
    assert listener.spin(STARTUP_TIMEOUT, None,
                         lambda: listener.source() == "plan" and node.get_clock().now().nanoseconds > 0)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    publisher = node.create_publisher(JointTrajectory, "/mpc_node/reference", latched)
    begin = node.get_clock().now().nanoseconds * 1e-9 + 0.5
    duration = 6.0
    message = JointTrajectory(joint_names=list(model.joint_names))
    message.header.stamp = Time(nanoseconds=int(begin * 1e9)).to_msg()
    for t in np.arange(0.0, duration + 1.0, 0.02):
        q, v, _ = reference.sample(np.array([t]))
        message.points.append(JointTrajectoryPoint(
            positions=q[0].tolist(), velocities=v[0].tolist(),
            time_from_start=Duration(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))))
    publisher.publish(message)
    listener.commands.clear()
    take_states()
    states.clear()
    assert listener.spin(4.0 * (duration + 0.6), take_states,
                         lambda: node.get_clock().now().nanoseconds * 1e-9 > begin + duration + 0.6)
    take_states()
    polled.destroy()
    check_commands(listener.commands, model)
    stamps = np.array([s[0] for s in states]) - begin
    inside = (stamps >= 0.0) & (stamps <= duration)
    assert inside.sum() > 100
    error = np.array([s[1] for s in states])[inside] - reference.sample(stamps[inside])[0]
    # Offline, the same loop at 200 Hz with the command one tick late stays within 0.03 rad
    # (0.008 rad on all but the light last joint). Through DDS on a machine shared with the rest
    # of the test suite the loop runs later and less regularly, so the bound is 0.15 rad: half
    # the 0.3 rad amplitude, which a loop that does not track (wrong sign, stale plans) exceeds.
    why = (f"error per joint {np.abs(error).max(axis=0).round(3)}, node's diagnostics {listener.diagnostics}, "
           f"simulator's {listener.simulator}")
    assert np.abs(error).max() < 0.15, why
    assert np.sqrt(np.mean(error ** 2)) < 0.05, why
    assert int(listener.diagnostics.get("commands_plan", "0")) > 100
    # The simulator applied the MPC's feedback policy, not its held torque. A policy that is never valid on
    # arrival (a wrong stamp, a wrong validity) gives no policy steps at all; on the wall clock a loaded CI
    # machine that stalled the MPC past a policy's validity (0.1 s) gave a few hundred command steps in 9 s (232
    # of 8597 seen).
    policy_steps = int(listener.simulator.get("steps_policy", "0"))
    assert policy_steps > 5000 and int(listener.simulator.get("steps_command", "0")) < 0.1 * policy_steps, \
        listener.simulator


def test_one_future_state_then_good_ones_at_250_hz_are_planned_on(ros, arm):
    """The arm in relinearize mode with the node's own defaults (200 Hz): one joint_states message stamped an
    hour ahead amid good ones at 250 Hz is refused, and the good ones that follow are planned on at once."""
    from sensor_msgs.msg import JointState

    node, start, processes = ros
    model, _ = arm
    q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])
    log = start("rbd_deriv.nodes.mpc_node", {"urdf_path": URDF, "mode": "relinearize", "diagnostics_period": 0.2,
                                       "goal_positions": q.tolist()})
    listener = Listener(node)
    states = node.create_publisher(JointState, "joint_states", 10)
    names = list(model.joint_names)

    def publish(offset_ns: int = 0) -> None:
        message = JointState(name=names, position=q.tolist(), velocity=[0.0] * model.nv)
        set_stamp(message.header.stamp, node.get_clock().now().nanoseconds + offset_ns)
        states.publish(message)

    def at_250_hz(seconds: float, until=None) -> bool:
        deadline, next_send = time.monotonic() + seconds, time.monotonic()
        while time.monotonic() < deadline:
            if time.monotonic() >= next_send:
                publish()
                next_send += 0.004
            rclpy.spin_once(node, timeout_sec=0.001)
            if until is not None and until():
                return True
        return until is None

    def count(key: str) -> int:
        return int(listener.diagnostics.get(key, "0"))

    assert at_250_hz(STARTUP_TIMEOUT, lambda: listener.source() == "plan"), \
        log.read_text()[-3000:] if processes[0].poll() is not None else "no plan"
    at_250_hz(0.5)
    publish(3600 * 10**9)
    assert at_250_hz(5.0, lambda: count("refused_joint_states/future") == 1), listener.diagnostics
    stale, planned = count("commands_stale_state"), count("commands_plan")
    at_250_hz(1.0)
    # The ticks on a plan (200 a second on an idle machine, 36 measured on a loaded one); the regression this
    # guards against held the safe command for a stale state for seconds. A loaded machine (load 7-8) that
    # delays this test's own publishing gives a few stale ticks (8 seen once), never most.
    planned_after = count("commands_plan") - planned
    assert planned_after > 20, listener.diagnostics
    assert count("commands_stale_state") - stale <= 0.2 * planned_after, listener.diagnostics
    assert listener.source() == "plan", listener.diagnostics
    assert count("refused_joint_states/out_of_order") == 0 and processes[0].poll() is None


def set_parameters(node, values: dict, node_name: str = "/mpc_node") -> list:
    """Set parameters of a running node through its service; the results (successful, reason) per value."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    client = node.create_client(SetParameters, f"{node_name}/set_parameters")
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(SetParameters.Request(
        parameters=[Parameter(name, value=value).to_parameter_msg() for name, value in values.items()]))
    rclpy.spin_until_future_complete(node, future, timeout_sec=10.0)
    node.destroy_client(client)
    return [(result.successful, result.reason) for result in future.result().results]


def test_every_message_is_counted_and_a_clock_that_stands_still_gives_the_safe_command(ros, arm):
    """joint_states at 1 kHz, one in three NaN, and compensation torques at 1 kHz, one in five implausible, into
    the arm's MPC ticking at 100 Hz: every NaN message counted as refused (superseded or not), and for each
    input sent = used + refused + superseded + lost. Then ``use_sim_time`` set at run time with no /clock: the
    node keeps commanding, the gravity hold under the reason ``stale_clock``, and plans again once it is unset."""
    from sensor_msgs.msg import JointState

    node, start, processes = ros
    model, data = arm
    q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])
    log = start("rbd_deriv.nodes.mpc_node", {"urdf_path": URDF, "mode": "relinearize", "rate_hz": 100.0,
                                       "diagnostics_period": 0.2, "goal_positions": q.tolist()})
    listener = Listener(node)
    states = node.create_publisher(JointState, "joint_states", 1000)
    torques = node.create_publisher(JointState, "bias_torques", 1000)
    names = list(model.joint_names)
    gravity = rd.gravity_torques(model, data, q).copy()
    sent = {"joint_states": 0, "compensation": 0, "nan": 0}

    def publish(bad_states: bool = False, bad_torques: bool = False) -> None:
        now_ns = node.get_clock().now().nanoseconds
        state = JointState(name=names, position=[float("nan")] * model.nv if bad_states else q.tolist(),
                           velocity=[0.0] * model.nv)
        set_stamp(state.header.stamp, now_ns)
        states.publish(state)
        torque = JointState(name=names, effort=(gravity * (1e9 if bad_torques else 1.0)).tolist())
        set_stamp(torque.header.stamp, now_ns)
        torques.publish(torque)
        sent["joint_states"] += 1
        sent["compensation"] += 1
        sent["nan"] += bad_states

    def count(key: str) -> int:
        return int(listener.diagnostics.get(key, "0"))

    def balance(kind: str) -> int:
        refused = sum(int(v) for k, v in listener.diagnostics.items() if k.startswith(f"refused_{kind}/"))
        return count(f"used_{kind}") + refused + count(f"superseded_{kind}") + count(f"lost_{kind}")

    assert listener.spin(STARTUP_TIMEOUT, publish, lambda: listener.source() == "plan"), \
        log.read_text()[-3000:] if processes[0].poll() is not None else "no plan"
    # What the node counted of the messages sent before it had subscribed is not known: the balance is taken
    # from here, once the totals have stopped moving.
    listener.spin(0.6)
    start_sent, start_counted = dict(sent), {kind: balance(kind) for kind in ("joint_states", "compensation")}
    for k in range(1500):
        publish(bad_states=k % 3 == 0, bad_torques=k % 5 == 0)
        deadline = time.monotonic() + 0.001
        while time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.0005)
    # Every message taken and reported: sent = used + refused + superseded + lost, input by input.
    assert listener.spin(10.0, None, lambda: all(
        balance(kind) - start_counted[kind] == sent[kind] - start_sent[kind] for kind in start_counted)), \
        str((sent, start_sent, start_counted, {kind: balance(kind) for kind in start_counted}, listener.diagnostics))
    refused_nan = count("refused_joint_states/non_finite")
    assert 500 - count("lost_joint_states") <= refused_nan <= 500, listener.diagnostics
    assert count("superseded_joint_states") > 500 and count("superseded_compensation") > 500, listener.diagnostics
    assert count("used_joint_states") > 100 and count("refused_compensation/implausible") > 0, listener.diagnostics

    # Simulated time set at run time, no /clock: the clock reads 0 and stands still. The node keeps commanding
    # at its rate: the gravity hold at the measured posture, counted as stale_clock.
    assert listener.spin(10.0, publish, lambda: listener.source() == "plan")
    assert set_parameters(node, {"use_sim_time": True}) == [(True, "")]
    commands = commands_after_switch(listener, 1.0, publish)
    # 100 a second measured (the node's rate; a loaded machine slows it, a stopped timer gives none).
    assert len(commands) > 20, f"{len(commands)} commands in 1 s on simulated time"
    assert listener.source() == "stale_clock" and count("commands_stale_clock") > 20, listener.diagnostics
    limit = np.asarray(model.effort_limit)
    assert_all_hold(commands, np.clip(gravity, -limit, limit), listener)
    assert set_parameters(node, {"use_sim_time": False}) == [(True, "")]
    assert listener.spin(10.0, publish, lambda: listener.source() == "plan"), listener.diagnostics
    assert processes[0].poll() is None and count("refused_internal_error") == 0
