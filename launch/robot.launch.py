"""The MPC on a robot: the dynamics node and the MPC node (both managed, not active), the robot from its
robot_description topic.

    ros2 launch rbd_deriv robot.launch.py [namespace:=my_robot] [use_sim_time:=false] \
        [command_topic:=/effort_controller/commands] [joint_states_topic:=joint_states] [odom_topic:=odom] \
        [description_topic:=robot_description] [dt:=0.01] [rate:=200.0] [autostart:=false]

The robot's side publishes ``robot_description`` (robot_state_publisher: std_msgs/String, transient local) and
``joint_states``; both nodes take the model from that topic. Both start unconfigured and publish nothing until
``ros2 lifecycle set /dynamics_node configure`` then ``activate`` (its linearization and compensation), and the
same for ``/mpc_node`` (its commands); the MPC's ``deactivate`` sends one last command (the hold of the measured
posture) and stops, the dynamics node's stops its outputs. ``autostart:=true`` walks both through configure and
activate by themselves. docs/hardware.md walks through it. The nodes' parameter files are
config/dynamics_node.yaml and config/mpc_node.yaml (``dynamics_params_file:=``, ``mpc_params_file:=`` for
others); the MPC runs in held mode on the dynamics node's linearization, which runs on a timer at ``rate`` with the
MPC's ``dt``.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.parameter_descriptions import ParameterValue

#: Launch argument, default, description.
ARGUMENTS = (
    ("namespace", "", "namespace of both nodes (a robot's own, with several robots)"),
    ("use_sim_time", "false", "both nodes on /clock (a simulated or replayed robot)"),
    ("autostart", "false", "configure and activate both nodes at start (true: the MPC commands as soon as it can)"),
    ("description_topic", "robot_description", "the robot's URDF (std_msgs/String, transient local)"),
    ("joint_states_topic", "joint_states", "the robot's joint states (sensor_msgs/JointState)"),
    ("odom_topic", "odom", "the base's odometry (nav_msgs/Odometry), floating base only"),
    ("command_topic", "/effort_controller/commands", "the torque command (std_msgs/Float64MultiArray)"),
    ("policy_topic", "feedback_policy", "the feedback policy (rbd_deriv/msg/FeedbackPolicy); empty: not sent"),
    ("dt", "0.01", "the MPC's step and the linearization's [s]"),
    ("rate", "200.0", "the MPC's tick rate and the dynamics node's [Hz]"),
)


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory("rbd_deriv")
    config = os.path.join(share, "config")
    arg = LaunchConfiguration
    namespace, sim_time = arg("namespace"), ParameterValue(arg("use_sim_time"), value_type=bool)
    autostart = ParameterValue(arg("autostart"), value_type=bool)
    dt, rate = ParameterValue(arg("dt"), value_type=float), ParameterValue(arg("rate"), value_type=float)
    state_remappings = [("robot_description", arg("description_topic")), ("joint_states", arg("joint_states_topic")),
                        ("odom", arg("odom_topic"))]
    return LaunchDescription([
        *(DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS),
        DeclareLaunchArgument("dynamics_params_file", default_value=os.path.join(config, "dynamics_node.yaml"),
                              description="parameter file of the dynamics node"),
        DeclareLaunchArgument("mpc_params_file", default_value=os.path.join(config, "mpc_node.yaml"),
                              description="parameter file of the MPC node"),
        LifecycleNode(package="rbd_deriv", executable="dynamics_node", name="dynamics_node", namespace=namespace,
                      output="screen", remappings=state_remappings,
                      parameters=[arg("dynamics_params_file"),
                                  {"urdf_path": "", "robot_description": "", "use_sim_time": sim_time,
                                   "autostart": autostart, "dt": dt, "publish_mode": "timer", "rate": rate}]),
        LifecycleNode(package="rbd_deriv", executable="mpc_node", name="mpc_node", namespace=namespace,
                      output="screen", remappings=state_remappings,
                      parameters=[arg("mpc_params_file"),
                                  {"urdf_path": "", "robot_description": "", "use_sim_time": sim_time,
                                   "autostart": autostart, "dt": dt, "rate_hz": rate, "mode": "held",
                                   "command_topic": ParameterValue(arg("command_topic"), value_type=str),
                                   "joint_states_topic": ParameterValue(arg("joint_states_topic"), value_type=str),
                                   "odom_topic": ParameterValue(arg("odom_topic"), value_type=str),
                                   "policy_topic": ParameterValue(arg("policy_topic"), value_type=str)}]),
    ])
