"""Closed loop on the bundled 7-dof arm: simulator, dynamics node, MPC node, reference.

    ros2 launch rbd_deriv demo.launch.py [mode:=held|relinearize] [backend:=mujoco|builtin]
                                         [duration:=60.0]

The same loop as ``python -m rbd_deriv.demo``, left running for ROS tools (rqt_plot of
/joint_states and /effort_controller/commands, /diagnostics, the plan on /mpc_node/plan).
To drive a real robot instead, leave out the simulator and point the MPC's command_topic at the
robot's effort forward-command controller (see config/mpc_node.yaml).
"""

import sys
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.conditions import LaunchConfigurationEquals
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from rbd_deriv.demo import DEMO_CENTER


def generate_launch_description() -> LaunchDescription:
    share = Path(get_package_share_directory("rbd_deriv"))
    urdf = str(share / "urdf" / "rbd_arm7.urdf")
    config = share / "config"
    mode = LaunchConfiguration("mode")
    # The MPC and the dynamics node must use the same step in held mode.
    horizon_step = 0.01
    return LaunchDescription([
        DeclareLaunchArgument("mode", default_value="held",
                              description="MPC mode: held or relinearize"),
        DeclareLaunchArgument("backend", default_value="mujoco",
                              description="simulator backend: mujoco or builtin"),
        DeclareLaunchArgument("duration", default_value="60.0",
                              description="length of the reference trajectory [s]"),
        Node(package="rbd_deriv", executable="sim_node", name="sim_node", output="screen",
             parameters=[str(config / "sim_node.yaml"), {
                 "urdf_path": urdf, "backend": LaunchConfiguration("backend"),
                 "initial_positions": DEMO_CENTER.tolist()}]),
        Node(package="rbd_deriv", executable="dynamics_node", name="dynamics_node",
             output="screen", condition=LaunchConfigurationEquals("mode", "held"),
             parameters=[str(config / "dynamics_node.yaml"), {
                 "urdf_path": urdf, "dt": horizon_step,
                 "publish_mass_matrix_inverse": False}]),
        Node(package="rbd_deriv", executable="mpc_node", name="mpc_node", output="screen",
             parameters=[str(config / "mpc_node.yaml"), {
                 "urdf_path": urdf, "mode": mode, "dt": horizon_step}]),
        ExecuteProcess(cmd=[sys.executable, "-m", "rbd_deriv.demo", "--reference-only",
                            "--duration", LaunchConfiguration("duration")], output="screen"),
    ])
