"""launch_testing checks of launch/dynamics.launch.py: the node starts on the bundled arm, answers
joint_states with a linearization, and exits cleanly on shutdown.

Needs launch_testing and launch_ros (a ROS 2 installation, not PyPI); skipped where they are missing.
Run with ``launch_test test/launch/test_dynamics_launch.py`` in a sourced workspace.
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
from sensor_msgs.msg import JointState  # noqa: E402

from rbd_deriv.msg import Linearization  # noqa: E402

LAUNCH_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "launch")
ARM_JOINTS = [f"joint{k}" for k in range(1, 8)]


@pytest.mark.launch_test
def generate_test_description():
    dynamics = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(LAUNCH_DIR, "dynamics.launch.py")))
    return launch.LaunchDescription([dynamics, launch_testing.actions.ReadyToTest()])


class TestDynamicsLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("dynamics_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_linearization_answers_joint_states(self):
        received = []
        self.node.create_subscription(Linearization, "linearization", received.append, 10)
        publisher = self.node.create_publisher(JointState, "joint_states", 10)
        deadline = time.monotonic() + 600.0  # first start compiles the kernels
        while not received and time.monotonic() < deadline:
            message = JointState(name=ARM_JOINTS, position=[0.1] * 7, velocity=[0.0] * 7)
            message.header.stamp = self.node.get_clock().now().to_msg()
            publisher.publish(message)
            rclpy.spin_once(self.node, timeout_sec=0.5)
        self.assertTrue(received, "no linearization from the launched node")
        self.assertEqual(list(received[-1].joint_names), ARM_JOINTS)
        self.assertEqual((received[-1].nx, received[-1].nu), (14, 7))


@launch_testing.post_shutdown_test()
class TestDynamicsLaunchShutdown(unittest.TestCase):
    def test_exit_code(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
