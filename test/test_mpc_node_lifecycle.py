"""The MPC node on a robot, started as a real process: managed (lifecycle) states driven through the standard
lifecycle services, the model taken from the latched robot_description topic, a best-effort joint_states
publisher served.

Each test runs in its own random ROS domain, limited to this machine, and feeds the node a fixed state of the
bundled arm: commands are checked against the library (the hold is gravity compensation at that state).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg")
lifecycle_msgs = pytest.importorskip("lifecycle_msgs")

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.messages import feedback_policy_arrays  # noqa: E402
from rbd_deriv.nodes.processes import stop_processes  # noqa: E402
from rbd_deriv.testing.robots import bundled_urdf  # noqa: E402

URDF = str(bundled_urdf("rbd_arm7"))
#: Seconds a node may take to start on a loaded machine (first numba compilation included).
STARTUP_TIMEOUT = 240.0
Q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])
#: Far enough that a plan's first torque is far from the hold at Q.
GOAL = Q + 0.5
MODULE = "rbd_deriv.nodes.mpc_node"
#: The MPC alone (no dynamics node): it linearizes in process. A state_timeout far above the publishing period, so
#: that a loaded machine does not make the active node send its safe command (the hold the last command is told by).
PARAMETERS = {"mode": "relinearize", "rate_hz": 100.0, "dt": 0.01, "state_timeout": 1.0,
              "diagnostics_period": 0.2, "disturbance_time_constant": 0.0, "goal_positions": GOAL.tolist()}


class Robot:
    """Publishes the arm's joint_states at Q (at rest), keeps the MPC's commands, policies and diagnostics."""

    def __init__(self, node, reliability=None) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray

        from rbd_deriv.msg import FeedbackPolicy

        self.node = node
        self.model = rd.load_urdf(URDF)
        qos = QoSProfile(depth=10, reliability=reliability or ReliabilityPolicy.RELIABLE)
        self.states = node.create_publisher(JointState, "joint_states", qos)
        self.commands: list[np.ndarray] = []
        self.policies: list = []
        self.diagnostics: dict[str, str] = {}
        node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                                 lambda m: self.commands.append(np.array(m.data)), 100)
        node.create_subscription(FeedbackPolicy, "feedback_policy", self.policies.append, 100)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        data = self.model.create_data()
        limit = np.asarray(self.model.effort_limit)
        self.hold = np.clip(rd.gravity_torques(self.model, data, Q), -limit, limit)

    def _on_diagnostics(self, message) -> None:
        for status in message.status:
            if status.name.endswith(": MPC"):
                self.diagnostics = {kv.key: kv.value for kv in status.values}

    def publish(self) -> None:
        from sensor_msgs.msg import JointState

        state = JointState(name=list(self.model.joint_names), position=Q.tolist(), velocity=[0.0] * self.model.nv)
        state.header.stamp = self.node.get_clock().now().to_msg()
        self.states.publish(state)

    def spin(self, seconds: float, until=None, publishing: bool = True) -> bool:
        """Spin for ``seconds`` (publishing the state every 10 ms) or until ``until()`` holds."""
        deadline = time.monotonic() + seconds
        next_state = time.monotonic()
        while time.monotonic() < deadline:
            if publishing and time.monotonic() >= next_state:
                self.publish()
                next_state += 0.01
            rclpy.spin_once(self.node, timeout_sec=0.002)
            if until is not None and until():
                return True
        return until is None

    def is_hold(self, command: np.ndarray) -> bool:
        return bool(np.allclose(command, self.hold, rtol=1e-9, atol=1e-9))


class Lifecycle:
    """The standard lifecycle services of a node (/mpc_node by default), called as `ros2 lifecycle` calls them.

    Args:
        robot: Has the client ``node`` and ``spin(seconds, until)``.
        name: The managed node's full name.
    """

    def __init__(self, robot: Robot, name: str = "/mpc_node") -> None:
        from lifecycle_msgs.srv import ChangeState, GetState

        self.robot = robot
        self.get = robot.node.create_client(GetState, f"{name}/get_state")
        self.change = robot.node.create_client(ChangeState, f"{name}/change_state")

    def _call(self, client, request, seconds: float = 120.0):
        assert client.wait_for_service(timeout_sec=STARTUP_TIMEOUT), f"no service {client.srv_name}"
        future = client.call_async(request)
        assert self.robot.spin(seconds, future.done), f"{client.srv_name}: no answer"
        return future.result()

    def state(self) -> str:
        from lifecycle_msgs.srv import GetState

        return self._call(self.get, GetState.Request()).current_state.label

    def set(self, transition: int) -> bool:
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.id = transition
        return self._call(self.change, request).success


def test_managed_node_commands_only_while_active(ros):
    """autostart false: nothing before activate (unconfigured, then configured with the state flowing); commands
    once active; on deactivate exactly one more command, the hold at the measured state with its policy (no gain),
    then none while the state still flows; activate again plans again."""
    from lifecycle_msgs.msg import Transition

    node, start, processes = ros
    start(MODULE, {"urdf_path": URDF, "autostart": False, **PARAMETERS})
    robot = Robot(node)
    lifecycle = Lifecycle(robot)
    assert lifecycle.state() == "unconfigured"
    robot.spin(1.0)
    assert lifecycle.set(Transition.TRANSITION_CONFIGURE)
    assert lifecycle.state() == "inactive"
    robot.spin(2.0)
    assert robot.commands == [] and robot.policies == [], "a command or policy before activate"
    assert processes[0].poll() is None

    assert lifecycle.set(Transition.TRANSITION_ACTIVATE)
    assert lifecycle.state() == "active"
    assert robot.spin(30.0, lambda: len(robot.commands) >= 50), "no command once active"
    planned = [command for command in robot.commands if not robot.is_hold(command)]
    assert len(planned) >= 40, "the active node sends the hold, not its plans"

    assert lifecycle.set(Transition.TRANSITION_DEACTIVATE)
    assert lifecycle.state() == "inactive"
    robot.spin(2.0)
    holds = [k for k, command in enumerate(robot.commands) if robot.is_hold(command)]
    assert holds == [len(robot.commands) - 1], f"hold commands at {holds} of {len(robot.commands)}"
    last = feedback_policy_arrays(robot.policies[-1])
    np.testing.assert_allclose(last["u_ff"][0], robot.hold, rtol=1e-9, atol=1e-9)
    assert not np.any(last["K"])
    sent = len(robot.commands), len(robot.policies)
    robot.spin(2.0)
    assert (len(robot.commands), len(robot.policies)) == sent, "a command or policy after deactivate"

    assert lifecycle.set(Transition.TRANSITION_ACTIVATE)
    assert robot.spin(30.0, lambda: len(robot.commands) >= sent[0] + 50), "no command after activating again"
    assert not robot.is_hold(robot.commands[-1])
    assert int(robot.diagnostics.get("refused_internal_error", "0")) == 0
    assert processes[0].poll() is None


def test_model_from_the_robot_description_topic(ros):
    """No robot_description parameter, no urdf_path: the node waits (saying so once), commands nothing, and
    controls the arm once a latched description is published; a different description later is refused and
    counted, the model in use stays."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    node, start, processes = ros
    log = start(MODULE, PARAMETERS)
    robot = Robot(node)
    robot.spin(5.0)
    assert robot.commands == [], "commands without a robot description"
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    description = node.create_publisher(String, "robot_description", latched)
    description.publish(String(data=Path(URDF).read_text()))
    assert robot.spin(STARTUP_TIMEOUT, lambda: len(robot.commands) >= 50), "no command from the topic's model"
    assert not robot.is_hold(robot.commands[-1])

    other = Path(URDF).read_text().replace("</robot>", "<!-- another revision --></robot>")
    description.publish(String(data=other))
    assert robot.spin(10.0, lambda: robot.diagnostics.get("refused_robot_description/robot_change") == "1"), \
        robot.diagnostics
    count = len(robot.commands)
    assert robot.spin(10.0, lambda: len(robot.commands) >= count + 50), "the model in use stopped"
    assert processes[0].poll() is None
    stop_processes(processes, timeout=10.0)
    text = log.read_text()
    assert text.count("waiting on the robot_description topic") == 1, text[-3000:]


def test_best_effort_joint_states_are_served(ros):
    """A driver publishing joint_states best effort (REP 2003's sensor data profile): the node plans from it."""
    from rclpy.qos import ReliabilityPolicy

    node, start, processes = ros
    start(MODULE, {"urdf_path": URDF, **PARAMETERS})
    robot = Robot(node, ReliabilityPolicy.BEST_EFFORT)
    assert robot.spin(STARTUP_TIMEOUT, lambda: len(robot.commands) >= 50), "no command from best-effort states"
    assert robot.spin(10.0, lambda: robot.diagnostics.get("command_source") == "plan"), robot.diagnostics
    assert int(robot.diagnostics.get("used_joint_states", "0")) > 0
    assert processes[0].poll() is None
