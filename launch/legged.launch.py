"""Closed loop on a legged robot: the simulator and the MPC node in floating-base mode.

    ros2 launch rbd_deriv legged.launch.py [robot:=solo12|talos] [gait:=trot|pace|bound|crawl|stand]

The same nodes with the same parameters as ``./run demo --robot <robot>``: each node's file in config/, then
config/<robot>.yaml, then the robot's URDF and SRDF from example-robot-data. Drive it from ``cmd_vel``
(geometry_msgs/Twist in the base frame, as a teleop or a navigation stack sends it), for instance
``ros2 run teleop_twist_keyboard teleop_twist_keyboard``: solo12 stands while the command is zero and trots
where it is told (its file's ``gait`` and ``idle_gait``); switch the gait at run time
(``ros2 param set /mpc_node gait pace``, among the file's ``gaits``), push the base with an rbd_deriv/msg/Push on
``push``, and watch /diagnostics (``cmd_vel``, ``cmd_vel_clamped``), /odom and /contact_forces with ROS tools. The
launch runs until interrupted. On a real robot, leave out the simulator and give the MPC node the robot's
joint_states and a state estimator's odometry.
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

#: Robots with a parameter file in config/ (the demo's rbd_deriv.demo.legged.LEGGED_DEMOS).
ROBOTS = ("solo12", "talos")


def robot_files(robot: str) -> dict:
    """The robot's URDF and SRDF in example-robot-data (installed with the package's test extras)."""
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    return {"urdf_path": str(EXAMPLE_ROBOTS[robot]), "srdf_path": str(example_robot_srdf(robot))}


def nodes(context, *args, **kwargs) -> list:
    config = Path(get_package_share_directory("rbd_deriv")) / "config"
    robot = LaunchConfiguration("robot").perform(context)
    gait = LaunchConfiguration("gait").perform(context)
    files = robot_files(robot)
    mpc = dict(files)
    if gait:
        mpc["gait"] = gait

    def node(name: str, overrides: dict) -> Node:
        return Node(package="rbd_deriv", executable=name, name=name, output="screen",
                    parameters=[str(config / f"{name}.yaml"), str(config / f"{robot}.yaml"), overrides])

    return [node("sim_node", {"urdf_path": files["urdf_path"]}), node("mpc_node", mpc)]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="solo12", choices=list(ROBOTS),
                              description="the legged robot (its parameters: config/<robot>.yaml)"),
        DeclareLaunchArgument("gait", default_value="",
                              description="the gait to walk with, among the robot file's gaits (default: its gait)"),
        OpaqueFunction(function=nodes),
    ])
