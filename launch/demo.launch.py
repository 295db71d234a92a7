"""Closed loop on the bundled 7-dof arm: simulator, dynamics node, MPC node, reference.

    ros2 launch rbd_deriv demo.launch.py [mode:=held|relinearize] [duration:=20.0] [use_sim_time:=true]

The same loop as ``python -m rbd_deriv.demo`` (``./run demo``): the same nodes with the same parameters
(each node's file in config/, then config/demo.yaml, which the script reads too) and the same reference,
published by ``python -m rbd_deriv.demo --reference-only``. The launch ends when the reference does,
``duration`` seconds after it starts; watch it meanwhile with ROS tools (rqt_plot of /joint_states and
/effort_controller/commands, /diagnostics, the plan on /mpc_node/plan). The script adds the report and the
plot. To drive a real robot instead, leave out the simulator and point the MPC's command_topic at the robot's
effort forward-command controller (see config/mpc_node.yaml). With ``use_sim_time`` (the default, as the script's
``--clock simulated``) the simulator publishes its time on /clock and every node runs on it; false: the wall clock.
"""

import sys
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, ExecuteProcess, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import EqualsSubstitution, LaunchConfiguration, PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description() -> LaunchDescription:
    share = Path(get_package_share_directory("rbd_deriv"))
    urdf = str(share / "urdf" / "rbd_arm7.urdf")
    config = share / "config"
    mode = LaunchConfiguration("mode")
    sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)

    def node(name: str, overrides: dict, **options) -> Node:
        clock = {"publish_clock": sim_time} if name == "sim_node" else {"use_sim_time": sim_time}
        return Node(package="rbd_deriv", executable=name, name=name, output="screen",
                    parameters=[str(config / f"{name}.yaml"), str(config / "demo.yaml"),
                                {"urdf_path": urdf, **clock, **overrides}], **options)

    clock = PythonExpression(["'simulated' if '", LaunchConfiguration("use_sim_time"),
                              "'.lower() == 'true' else 'wall'"])
    reference = ExecuteProcess(
        cmd=[sys.executable, "-m", "rbd_deriv.demo", "--reference-only", "--duration",
             LaunchConfiguration("duration"), "--clock", clock],
        name="reference", output="screen")
    return LaunchDescription([
        DeclareLaunchArgument("mode", default_value="held", choices=["held", "relinearize"],
                              description="MPC mode: held (the dynamics node's linearizations) or relinearize"),
        DeclareLaunchArgument("duration", default_value="20.0",
                              description="length of the reference motion [s]; the launch ends with it"),
        DeclareLaunchArgument("use_sim_time", default_value="true", choices=["true", "false"],
                              description="the simulator's time on /clock for every node (false: the wall clock)"),
        node("sim_node", {}),
        node("dynamics_node", {}, condition=IfCondition(EqualsSubstitution(mode, "held"))),
        node("mpc_node", {"mode": mode}),
        reference,
        RegisterEventHandler(OnProcessExit(
            target_action=reference,
            on_exit=[EmitEvent(event=Shutdown(reason="the reference motion is over"))])),
    ])
