"""launch_testing checks of launch/dynamics_listen.launch.py: the node waits for a description on the
robot_description topic, builds the model from it, then answers joint_states.

Needs launch_testing and launch_ros (a ROS 2 installation, not PyPI); skipped where they are missing.
Run with ``launch_test test/launch/test_dynamics_listen_launch.py`` in a sourced workspace.
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
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rbd_deriv.msg import Matrix  # noqa: E402

HERE = os.path.dirname(__file__)
LAUNCH_DIR = os.path.join(HERE, "..", "..", "launch")
ARM_URDF = os.path.join(HERE, "..", "..", "urdf", "rbd_arm7.urdf")
ARM_JOINTS = [f"joint{k}" for k in range(1, 8)]


@pytest.mark.launch_test
def generate_test_description():
    listen = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(LAUNCH_DIR, "dynamics_listen.launch.py")))
    return launch.LaunchDescription([listen, launch_testing.actions.ReadyToTest()])


class TestDynamicsListenLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("dynamics_listen_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_model_from_topic(self, proc_output):
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        description = self.node.create_publisher(String, "robot_description", latched)
        with open(ARM_URDF, encoding="utf-8") as stream:
            description.publish(String(data=stream.read()))
        proc_output.assertWaitFor("robot 'rbd_arm7'", timeout=600)

        received = []
        self.node.create_subscription(Matrix, "mass_matrix_inverse", received.append, 10)
        publisher = self.node.create_publisher(JointState, "joint_states", 10)
        deadline = time.monotonic() + 120.0
        while not received and time.monotonic() < deadline:
            message = JointState(name=ARM_JOINTS, position=[0.2] * 7, velocity=[0.0] * 7)
            message.header.stamp = self.node.get_clock().now().to_msg()
            publisher.publish(message)
            rclpy.spin_once(self.node, timeout_sec=0.5)
        self.assertTrue(received, "no M^-1 from the launched node")
        self.assertEqual((received[-1].rows, received[-1].cols), (7, 7))


@launch_testing.post_shutdown_test()
class TestDynamicsListenLaunchShutdown(unittest.TestCase):
    def test_exit_code(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
