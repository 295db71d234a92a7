"""launch_testing checks of launch/demo.launch.py: the simulator, the dynamics node and the MPC node close the
loop on the bundled arm (joint_states from the simulator, torque commands from the MPC, inside the arm's limits),
the reference ends by itself when its motion is over, the launch with it, and every process exits with 0 (the
nodes on the SIGINT launch sends them).

Needs launch_testing and launch_ros (a ROS 2 installation, not PyPI) and MuJoCo (the ``[sim]`` extra); skipped
where they are missing. Run with ``launch_test test/launch/test_demo_launch.py`` in a sourced workspace.
"""

import os
import time
import unittest

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")
pytest.importorskip("mujoco")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

import rbd_deriv as rd  # noqa: E402

LAUNCH_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "launch")
ARM_URDF = os.path.join(os.path.dirname(__file__), "..", "..", "urdf", "rbd_arm7.urdf")
ARM_JOINTS = [f"joint{k}" for k in range(1, 8)]
#: Length of the reference motion [s]: the launch ends that long after the reference starts.
DURATION = 10.0


@pytest.mark.launch_test
def generate_test_description():
    demo = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(LAUNCH_DIR, "demo.launch.py")),
        launch_arguments={"duration": str(DURATION)}.items())
    return launch.LaunchDescription([demo, launch_testing.actions.ReadyToTest()])


class TestDemoLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("demo_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_the_mpc_drives_the_simulated_arm_until_the_reference_ends(self, proc_info):
        states, commands = [], []
        self.node.create_subscription(JointState, "joint_states", states.append, 10)
        self.node.create_subscription(Float64MultiArray, "/effort_controller/commands", commands.append, 10)
        deadline = time.monotonic() + 300.0  # the nodes' start (a first start without compiled kernels is slower)
        while (len(commands) < 50 or not states) and time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.1)
        self.assertGreaterEqual(len(commands), 50, "fewer than 50 torque commands from the MPC")
        self.assertTrue(states, "no joint_states from the simulator")
        self.assertEqual(list(states[-1].name)[:7], ARM_JOINTS)
        limits = rd.load_urdf(ARM_URDF).effort_limit
        for command in commands:
            self.assertEqual(len(command.data), 7)
            for torque, limit in zip(command.data, limits):
                self.assertLessEqual(abs(torque), limit + 1e-9)
        # The reference ends DURATION seconds after it starts, and the launch with it (demo.launch.py's
        # Shutdown on its exit), which launch_testing would otherwise do once this test returns.
        proc_info.assertWaitForShutdown(process="reference", timeout=DURATION + 120.0)


@launch_testing.post_shutdown_test()
class TestDemoLaunchShutdown(unittest.TestCase):
    def test_every_process_exits_with_zero(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
