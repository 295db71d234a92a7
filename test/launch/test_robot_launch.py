"""launch_testing checks of launch/robot.launch.py on the bundled arm, this test standing in for the robot (a
latched robot_description, joint_states at 100 Hz): with the launch's defaults (autostart false) both nodes wait
unconfigured and nothing is commanded, nor once they are configured; activated through the standard lifecycle
services (the dynamics node first: the MPC runs on its linearization), linearizations and torque commands flow;
deactivated, the commands stop; interrupted, every process exits with 0.

Needs launch_testing and launch_ros (a ROS 2 installation, not PyPI); skipped where they are missing. Run with
``launch_test test/launch/test_robot_launch.py`` in a sourced workspace.
"""

import os
import time
import unittest

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.msg import Linearization  # noqa: E402
from rbd_deriv.testing.robots import bundled_urdf  # noqa: E402

LAUNCH_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "launch")
URDF = bundled_urdf("rbd_arm7")
#: The arm's configuration, at rest.
Q = [0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1]
#: Seconds for the nodes to start (their lifecycle services up) and to configure (the kernels loaded).
START = 240.0
#: Seconds of joint_states during which nothing may be commanded.
QUIET = 3.0


@pytest.mark.launch_test
def generate_test_description():
    robot = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(LAUNCH_DIR, "robot.launch.py")))
    return launch.LaunchDescription([robot, launch_testing.actions.ReadyToTest()])


class TestRobotLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("robot_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def setUp(self):
        self.joint_names = list(rd.load_urdf(str(URDF)).joint_names)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.node.create_publisher(String, "robot_description", latched).publish(String(data=URDF.read_text()))
        self.states = self.node.create_publisher(JointState, "joint_states", 10)
        self.commands, self.linearizations = [], []
        self.node.create_subscription(Float64MultiArray, "/effort_controller/commands", self.commands.append, 100)
        self.node.create_subscription(Linearization, "linearization", self.linearizations.append, 100)
        self.next_state = time.monotonic()

    def spin(self, seconds, until=lambda: False):
        """Spin for ``seconds`` (publishing the state every 10 ms) or until ``until()`` holds; whether it held."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if time.monotonic() >= self.next_state:
                state = JointState(name=self.joint_names, position=Q, velocity=[0.0] * len(Q))
                state.header.stamp = self.node.get_clock().now().to_msg()
                self.states.publish(state)
                self.next_state += 0.01
            rclpy.spin_once(self.node, timeout_sec=0.002)
            if until():
                return True
        return False

    def call(self, service_type, name, request):
        client = self.node.create_client(service_type, name)
        self.assertTrue(client.wait_for_service(timeout_sec=START), f"no service {name}")
        future = client.call_async(request)
        self.assertTrue(self.spin(START, future.done), f"{name}: no answer")
        self.node.destroy_client(client)
        return future.result()

    def state(self, node):
        return self.call(GetState, f"/{node}/get_state", GetState.Request()).current_state.label

    def transition(self, node, transition):
        request = ChangeState.Request()
        request.transition.id = transition
        self.assertTrue(self.call(ChangeState, f"/{node}/change_state", request).success,
                        f"{node}: transition {transition} refused")

    def test_nothing_is_commanded_until_both_nodes_are_active(self):
        nodes = ("dynamics_node", "mpc_node")
        for node in nodes:
            self.assertEqual(self.state(node), "unconfigured")
        self.spin(QUIET)
        self.assertEqual((len(self.commands), len(self.linearizations)), (0, 0), "outputs from unconfigured nodes")

        for node in nodes:
            self.transition(node, Transition.TRANSITION_CONFIGURE)
            self.assertEqual(self.state(node), "inactive")
        self.spin(QUIET)
        self.assertEqual((len(self.commands), len(self.linearizations)), (0, 0), "outputs from inactive nodes")

        for node in nodes:
            self.transition(node, Transition.TRANSITION_ACTIVATE)
        self.assertTrue(self.spin(60.0, lambda: len(self.commands) >= 50), "no torque command once active")
        self.assertTrue(self.linearizations, "no linearization from the active dynamics node")

        self.transition("mpc_node", Transition.TRANSITION_DEACTIVATE)
        self.spin(0.5)  # what was in flight at the reply
        sent = len(self.commands)
        self.spin(QUIET)
        self.assertEqual(len(self.commands), sent, "commands after the MPC was deactivated")


@launch_testing.post_shutdown_test()
class TestRobotLaunchShutdown(unittest.TestCase):
    def test_every_process_exits_with_zero(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
