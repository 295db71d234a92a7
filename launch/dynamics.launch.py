"""Start the dynamics node on a URDF file: the bundled 7-dof arm by default, or any given path.

    ros2 launch rbd_deriv dynamics.launch.py
    ros2 launch rbd_deriv dynamics.launch.py urdf:=/path/to/robot.urdf floating_base:=true

With ``urdf:=''`` the node takes its description from the robot_description topic instead
(dynamics_listen.launch.py does that).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("rbd_deriv")
    return LaunchDescription([
        DeclareLaunchArgument("urdf", default_value=os.path.join(share, "urdf", "rbd_arm7.urdf"),
                              description="URDF file of the robot; empty: listen on description_topic"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "dynamics_node.yaml"),
                              description="Parameter file of the dynamics node"),
        DeclareLaunchArgument("floating_base", default_value="false",
                              description="Free-flyer base (pose and twist from the odom topic)"),
        DeclareLaunchArgument("description_topic", default_value="robot_description",
                              description="Topic carrying the URDF (std_msgs/String, transient local)"),
        DeclareLaunchArgument("joint_states_topic", default_value="joint_states",
                              description="Topic carrying the joint states"),
        Node(
            package="rbd_deriv",
            executable="dynamics_node",
            name="dynamics_node",
            output="screen",
            parameters=[
                LaunchConfiguration("params_file"),
                {
                    # value_type keeps an empty path a string instead of a YAML null
                    "urdf_path": ParameterValue(LaunchConfiguration("urdf"), value_type=str),
                    "floating_base": ParameterValue(LaunchConfiguration("floating_base"), value_type=bool),
                },
            ],
            remappings=[
                ("robot_description", LaunchConfiguration("description_topic")),
                ("joint_states", LaunchConfiguration("joint_states_topic")),
            ],
        ),
    ])
