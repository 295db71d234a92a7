"""Start the dynamics node on a robot that already publishes its description.

The node takes the URDF from the robot_description topic (transient local, as robot_state_publisher
publishes it) and rebuilds its model whenever a new description arrives. Same arguments as
dynamics.launch.py but ``urdf``.

    ros2 launch rbd_deriv dynamics_listen.launch.py
    ros2 launch rbd_deriv dynamics_listen.launch.py description_topic:=/my_robot/robot_description
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def generate_launch_description() -> LaunchDescription:
    # Arguments given to this file (params_file, floating_base, topics) reach the included one.
    dynamics = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dynamics.launch.py")
    return LaunchDescription([
        # Declared here first, so that --show-args lists what this file does with it (the included file's
        # declaration, the bundled arm's path, would be shown otherwise) and refuses any other value.
        DeclareLaunchArgument("urdf", default_value="", choices=[""],
                              description="always empty here: the URDF comes from description_topic"),
        IncludeLaunchDescription(PythonLaunchDescriptionSource(dynamics), launch_arguments={"urdf": ""}.items()),
    ])
