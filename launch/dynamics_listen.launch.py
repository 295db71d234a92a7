"""Start the dynamics node on a robot that already publishes its description.

The node takes the URDF from the robot_description topic (transient local, as robot_state_publisher
publishes it) and rebuilds its model whenever a new description arrives. Same arguments as
dynamics.launch.py but ``urdf``.

    ros2 launch rbd_deriv dynamics_listen.launch.py
    ros2 launch rbd_deriv dynamics_listen.launch.py description_topic:=/my_robot/robot_description
"""

import os

from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def generate_launch_description() -> LaunchDescription:
    # Arguments given to this file (params_file, floating_base, topics) reach the included one.
    dynamics = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dynamics.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(dynamics), launch_arguments={"urdf": ""}.items()),
    ])
