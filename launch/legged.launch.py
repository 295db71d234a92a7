"""Closed loop on a legged robot: the simulator and the MPC node in floating-base mode.

    ros2 launch rbd_deriv legged.launch.py [robot:=solo12|talos] [gait:=trot|pace|bound|crawl|stand] \
        [use_sim_time:=true] [robot_state_publisher:=auto]

The same nodes with the same parameters as ``./run demo --robot <robot>``: each node's file in config/, then
config/<robot>.yaml, then the robot's URDF and SRDF from example-robot-data. Drive it from ``cmd_vel``
(geometry_msgs/Twist in the base frame, as a teleop or a navigation stack sends it), for instance
``ros2 run teleop_twist_keyboard teleop_twist_keyboard``: solo12 stands while the command is zero and trots
where it is told (its file's ``gait`` and ``idle_gait``); switch the gait at run time
(``ros2 param set /mpc_node gait pace``, among the file's ``gaits``), push the base with an rbd_deriv/msg/Push on
``push``, and watch /diagnostics (``cmd_vel``, ``cmd_vel_clamped``), /odom and /contact_forces with ROS tools. The
launch runs until interrupted. With ``use_sim_time`` (the default) the simulator publishes its time on /clock and
every node runs on it. The simulator puts the base's pose on /tf (where tf2_msgs is installed) and, with
``robot_state_publisher`` (``auto``: where it is installed), the links follow from joint_states, so RViz shows the
robot (fixed frame ``odom``). On a real robot, leave out the simulator and give the MPC node the robot's
joint_states and a state estimator's odometry.
"""

from pathlib import Path
from typing import Optional

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
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


def state_publisher(urdf_path: str, sim_time: bool, wanted: str) -> Optional[Node]:
    """robot_state_publisher on the robot's URDF (its links' poses on /tf from joint_states): ``wanted`` true, or
    auto where it is installed; None otherwise."""
    if wanted == "false":
        return None
    try:
        get_package_share_directory("robot_state_publisher")
    except PackageNotFoundError:
        if wanted == "true":
            raise RuntimeError("robot_state_publisher:=true, but robot_state_publisher is not installed") from None
        print("[legged.launch.py] robot_state_publisher is not installed: no link poses on /tf")
        return None
    return Node(package="robot_state_publisher", executable="robot_state_publisher", output="screen",
                parameters=[{"robot_description": Path(urdf_path).read_text(encoding="utf-8"),
                             "use_sim_time": sim_time}])


def nodes(context, *args, **kwargs) -> list:
    config = Path(get_package_share_directory("rbd_deriv")) / "config"
    robot = LaunchConfiguration("robot").perform(context)
    gait = LaunchConfiguration("gait").perform(context)
    sim_time = LaunchConfiguration("use_sim_time").perform(context).lower() == "true"
    files = robot_files(robot)
    mpc = dict(files, use_sim_time=sim_time)
    if gait:
        mpc["gait"] = gait

    def node(name: str, overrides: dict) -> Node:
        return Node(package="rbd_deriv", executable=name, name=name, output="screen",
                    parameters=[str(config / f"{name}.yaml"), str(config / f"{robot}.yaml"), overrides])

    launched = [node("sim_node", {"urdf_path": files["urdf_path"], "publish_clock": sim_time}), node("mpc_node", mpc)]
    publisher = state_publisher(files["urdf_path"], sim_time,
                                LaunchConfiguration("robot_state_publisher").perform(context).lower())
    return launched + ([publisher] if publisher is not None else [])


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="solo12", choices=list(ROBOTS),
                              description="the legged robot (its parameters: config/<robot>.yaml)"),
        DeclareLaunchArgument("gait", default_value="",
                              description="the gait to walk with, among the robot file's gaits (default: its gait)"),
        DeclareLaunchArgument("use_sim_time", default_value="true", choices=["true", "false"],
                              description="the simulator's time on /clock for every node (false: the wall clock)"),
        DeclareLaunchArgument("robot_state_publisher", default_value="auto", choices=["auto", "true", "false"],
                              description="start robot_state_publisher for the links on /tf (auto: if installed)"),
        OpaqueFunction(function=nodes),
    ])
