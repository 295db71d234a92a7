"""The MPC node's floating-base mode in closed loop with the simulator node: solo12 standing, pushed.

Two real processes over DDS, as in ``./run demo --robot solo12`` (the same parameter files,
config/solo12.yaml): the simulator (MuJoCo, solo12 on four point feet) publishes joint_states and odometry
and applies the MPC node's feedback policy at 1 kHz; the MPC node runs the legged MPC standing. This test
pushes the base sideways and sends bad inputs (the refusals themselves are tested in test_legged_loop.py). Oracles: the simulator's own fall detector and odometry (the
push moves the base, which comes back), the URDF's effort limits, the MPC's counters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg")
pytest.importorskip("mujoco")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rcl_interfaces.srv import SetParameters  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.demo import config_folder  # noqa: E402
from rbd_deriv.msg import Push  # noqa: E402
from rbd_deriv.nodes.processes import ros_parameters, stop_processes  # noqa: E402
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf  # noqa: E402

SOLO = str(EXAMPLE_ROBOTS["solo12"])
STARTUP_TIMEOUT = 240.0
#: Names the ROS domain (its length does, as in the other node tests): no other node test uses this length.
NAME = "legged_mpc_node_with_the_simulator"


def start(node: str, overrides: dict, env: dict) -> subprocess.Popen:
    config = config_folder()
    arguments = ["--ros-args", "--params-file", str(config / f"{node}.yaml"), "--params-file",
                 str(config / "solo12.yaml")] + ros_parameters(overrides)[1:]
    return subprocess.Popen([sys.executable, "-m", f"rbd_deriv.nodes.{node}", *arguments], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_solo12_stands_through_a_push_and_bad_inputs():
    model = rd.load_urdf(SOLO, floating_base=True)
    names = list(model.actuated_joint_names)
    limit = np.asarray(model.effort_limit)[[model.idx_v[n] for n in names]]
    domain = 1 + (os.getpid() * 7 + len(NAME) * 13) % 200
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    processes = [start("sim_node", {"urdf_path": SOLO, "diagnostics_period": 0.2}, env),
                 start("mpc_node", {"urdf_path": SOLO, "srdf_path": str(example_robot_srdf("solo12")),
                                    "diagnostics_period": 0.2}, env)]
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node(f"test_client_{NAME}", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    seen = {"odom": [], "commands": [], "mpc": {}, "sim": {}}

    def on_diagnostics(message):
        for status in message.status:
            key = "mpc" if status.name.endswith(": MPC") else "sim"
            seen[key] = {kv.key: kv.value for kv in status.values}

    node.create_subscription(Odometry, "odom", lambda m: seen["odom"].append(
        np.array([m.pose.pose.position.x, m.pose.pose.position.y, m.pose.pose.position.z])), 100)
    node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                             lambda m: seen["commands"].append(np.array(m.data)), 100)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    pushes = node.create_publisher(Push, "push", 10)
    joint_states = node.create_publisher(JointState, "joint_states", 10)
    parameters = node.create_client(SetParameters, "/mpc_node/set_parameters")

    def spin(seconds, until=None, what=""):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.02)
            for process in processes:
                assert process.poll() is None, f"a node died: {process.stderr.read().decode()[-2000:]}"
            if until is not None and until():
                return
        assert until is None, f"timed out waiting for {what}: {seen['mpc']} {seen['sim']}"

    def count(key, which="mpc"):
        return int(seen[which].get(key, "0"))

    try:
        spin(STARTUP_TIMEOUT, lambda: count("commands_plan") > 0 and seen["odom"], "the MPC's first plans")
        spin(1.5)
        seen["commands"].clear()
        before, pushed_at = seen["odom"][-1], len(seen["odom"])
        pushes.publish(Push(force=np.array([0.0, 10.0, 0.0]), torque=np.zeros(3), duration=0.1))
        spin(10.0, lambda: count("pushes_applied", "sim") == 1, "the push applied")
        spin(0.3)
        # The farthest the base went sideways after the push (the MPC brings it back within tenths of a second).
        pushed = max(seen["odom"][pushed_at:], key=lambda p: abs(p[1] - before[1]))
        # A bad joint state (NaN; superseded, unread, when the simulator's next message arrives before the
        # tick, refused and counted otherwise) and an unknown gait (refused): the loop goes on.
        joint_states.publish(JointState(name=names, position=[float("nan")] * 12, velocity=[0.0] * 12))
        future = parameters.call_async(SetParameters.Request(
            parameters=[Parameter("gait", value="trot_backwards").to_parameter_msg()]))
        spin(10.0, lambda: future.done(), "the parameter answer")
        assert not future.result().results[0].successful
        spin(3.0)
        after = seen["odom"][-1]
        plans = count("commands_plan")
        spin(10.0, lambda: count("commands_plan") > plans + 10, "plans after the push")
    finally:
        stop_processes(processes, timeout=10.0)
        for process in processes:
            process.stderr.close()
        node.destroy_node()
        rclpy.shutdown(context=context)

    assert seen["sim"]["fell"] == "false"
    assert abs(pushed[1] - before[1]) > 2e-3, (before, pushed)
    assert abs(after[1] - before[1]) < 0.5 * abs(pushed[1] - before[1]), (before, pushed, after)
    commands = np.array(seen["commands"])
    assert len(commands) > 50 and np.isfinite(commands).all()
    assert (np.abs(commands) <= limit).all()
    mpc = seen["mpc"]
    assert int(mpc.get("refused_joint_states/non_finite", "0")) <= 1
    assert int(mpc["commands_plan"]) > 0.8 * sum(int(v) for k, v in mpc.items() if k.startswith("commands_")), mpc
    assert int(seen["sim"]["friction_cone_violations"]) == 0
    assert "refused_internal_error" not in mpc
