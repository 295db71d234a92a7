"""launch_testing checks of launch/legged.launch.py: solo12 (the default robot) on the simulator and the
floating-base MPC node stands: odometry and torque commands flow, the simulator's diagnostics never report a
fall over the watched seconds and the base stays above half the height it started at; interrupted, every
process exits with 0.

Needs launch_testing and launch_ros (a ROS 2 installation, not PyPI), MuJoCo and example-robot-data (the
``[legged]`` extra); skipped where they are missing. Run with ``launch_test test/launch/test_legged_launch.py``
in a sourced workspace.
"""

import os
import time
import unittest

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")
pytest.importorskip("mujoco")

from rbd_deriv.testing.robots import RobotDataNotFoundError, example_robot_data_dir  # noqa: E402

try:
    example_robot_data_dir()
except RobotDataNotFoundError as missing:
    pytest.skip(f"legged.launch.py needs example-robot-data: {missing}", allow_module_level=True)

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

LAUNCH_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "launch")
#: Seconds the robot is watched once the MPC commands it.
WATCHED = 10.0


@pytest.mark.launch_test
def generate_test_description():
    legged = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(LAUNCH_DIR, "legged.launch.py")),
        launch_arguments={"robot": "solo12"}.items())
    return launch.LaunchDescription([legged, launch_testing.actions.ReadyToTest()])


class TestLeggedLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("legged_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_solo12_stands(self):
        odometry, commands, reports, falls = [], [], [], []

        def diagnostics(message):
            for status in message.status:
                values = {pair.key: pair.value for pair in status.values}
                if "fell" in values:
                    reports.append(values["fell"])
                if values.get("fell") == "true":
                    falls.append(status.message)

        self.node.create_subscription(Odometry, "odom", odometry.append, 10)
        self.node.create_subscription(Float64MultiArray, "/effort_controller/commands", commands.append, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", diagnostics, 10)
        deadline = time.monotonic() + 300.0  # the nodes' start (a first start without compiled kernels is slower)
        while not (commands and odometry) and time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.1)
        self.assertTrue(commands, "no torque command from the MPC")
        self.assertTrue(odometry, "no odometry from the simulator")
        start_height = odometry[0].pose.pose.position.z
        end = time.monotonic() + WATCHED
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.1)
        self.assertGreater(len(commands), 10 * WATCHED, "the MPC commanded at under 10 Hz")
        self.assertTrue(reports, "no diagnostics from the simulator saying whether the robot fell")
        self.assertEqual(falls, [], "the simulator reported a fall")
        lowest = min(message.pose.pose.position.z for message in odometry)
        self.assertGreater(lowest, 0.5 * start_height)


@launch_testing.post_shutdown_test()
class TestLeggedLaunchShutdown(unittest.TestCase):
    def test_every_process_exits_with_zero(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
