"""The simulator node with a floating-base robot (solo12 on its four feet), started as a real process.

Real DDS traffic: this test reads the node's joint_states, odom and /diagnostics, sends it pushes (good and
bad) and a feedback policy for the 12 actuated joints of an 18-dof robot. The oracles are the library's
kinematics (the odometry and the joint states together put the feet on the floor) and the push's direction.
(The fixed-base simulator node is tested in test_mpc_node.py.)
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg")
pytest.importorskip("mujoco")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.messages import feedback_policy_fields, fill_message, odometry_arrays, set_stamp  # noqa: E402
from rbd_deriv.msg import ContactForces, FeedbackPolicy, Push  # noqa: E402
from rbd_deriv.nodes.processes import ros_parameters, stop_processes  # noqa: E402
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_data_dir  # noqa: E402

SOLO = str(EXAMPLE_ROBOTS["solo12"])
FEET = ["FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"]
STARTUP_TIMEOUT = 240.0
#: Names the ROS domain (its length does, as in the dynamics node's tests): none of the other node tests uses
#: a name of this length.
NAME = "floating_base_simulator_node"


def standing_joints(model):
    """solo12's SRDF ``standing`` posture for the actuated joints, in model order."""
    srdf = example_robot_data_dir() / "solo_description/srdf/solo.srdf"
    state = next(s for s in ElementTree.parse(srdf).getroot().iter("group_state") if s.get("name") == "standing")
    values = {j.get("name"): float(j.get("value").split()[0]) for j in state.iter("joint")}
    return np.array([values[name] for name in model.actuated_joint_names])


def mpc_mu() -> float:
    """The friction coefficient the MPC plans solo12 with (config/solo12.yaml), under the floor's."""
    import yaml

    from rbd_deriv.demo import config_folder

    files = yaml.safe_load((config_folder() / "solo12.yaml").read_text())
    mu = float(files["mpc_node"]["ros__parameters"]["mu"])
    assert mu < float(files["sim_node"]["ros__parameters"]["ground_friction"])
    return mu


class Simulator:
    """The simulator node's process and a client node in this process, on a domain of their own."""

    def __init__(self, parameters: dict, environment: dict | None = None) -> None:
        """``environment``: the node's (default: this process's) before the test's domain is set."""
        domain = 1 + (os.getpid() * 7 + len(NAME) * 13) % 200
        env = dict(environment or os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        self.env = env
        self.process = subprocess.Popen([sys.executable, "-m", "rbd_deriv.nodes.sim_node",
                                         *ros_parameters(parameters)], env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node(f"test_client_{NAME}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.odometry = None
        self.speeds: list = []  # [m/s] the base's, from every odometry message
        self.joint_states = None
        self.diagnostics: dict = {}
        self.contact_forces = None
        self.contact_history: list = []  # (forces (nc, 3) [N], touching (nc,)) of every contact_forces message
        self.node.create_subscription(ContactForces, "contact_forces", self._on_contact_forces, 10)
        self.node.create_subscription(Odometry, "odom", self._on_odometry, 10)
        self.node.create_subscription(JointState, "joint_states", self._on_joint_states, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.pushes = self.node.create_publisher(Push, "push", 10)
        self.policies = self.node.create_publisher(FeedbackPolicy, "feedback_policy", 10)

    def _on_odometry(self, message) -> None:
        self.odometry = message
        linear = message.twist.twist.linear
        self.speeds.append(float(np.linalg.norm([linear.x, linear.y, linear.z])))

    def _on_contact_forces(self, message) -> None:
        self.contact_forces = message
        self.contact_history.append((np.reshape(message.forces, (-1, 3)), np.array(message.touching)))

    def _on_joint_states(self, message) -> None:
        self.joint_states = message

    def _on_diagnostics(self, message) -> None:
        for status in message.status:
            if status.name.endswith(": simulator"):
                self.diagnostics = {kv.key: kv.value for kv in status.values}

    def spin_until(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"the node died waiting for {what}: {self.process.stderr.read()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}; diagnostics {self.diagnostics}"
            self.executor.spin_once(timeout_sec=0.02)

    def spin(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.02)

    def count(self, key: str) -> int:
        return int(self.diagnostics.get(key, "0"))

    def state(self):
        """(q (nq,), v (nv,)) of the robot from the latest odometry and joint states."""
        position, orientation, linear, angular = odometry_arrays(self.odometry)
        return (np.r_[position, orientation, self.joint_states.position],
                np.r_[linear, angular, self.joint_states.velocity])

    def push(self, force, torque, duration) -> None:
        self.pushes.publish(Push(force=np.asarray(force, dtype=float), torque=np.asarray(torque, dtype=float),
                                 duration=float(duration)))

    def close(self) -> None:
        stop_processes([self.process], timeout=10.0)
        self.process.stderr.close()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.fixture(scope="module")
def solo():
    model = rd.load_urdf(SOLO, floating_base=True)
    return model, model.create_data()


def test_legged_simulator_publishes_odometry_takes_pushes_and_applies_a_policy(solo):
    model, data = solo
    standing = standing_joints(model)
    sim = Simulator({"urdf_path": SOLO, "floating_base": True, "contact_frames": "[" + ", ".join(FEET) + "]",
                     "initial_positions": standing.tolist(), "damping": [0.0], "friction": [0.0],
                     "diagnostics_period": 0.1})
    try:
        sim.spin_until(lambda: sim.odometry is not None and sim.joint_states is not None and sim.diagnostics,
                       STARTUP_TIMEOUT, "odom, joint_states and diagnostics")
        assert sim.joint_states.name == list(model.actuated_joint_names)
        assert sim.odometry.header.frame_id == "odom" and sim.odometry.child_frame_id == "base_link"
        # Brakes on: it stands on its locked legs. Odometry and joint states put its feet on the floor.
        sim.spin(0.5)
        q, v = sim.state()
        rd.forward_kinematics(model, data, q)
        heights = np.array([rd.frame_placement(model, data, foot)[2, 3] for foot in FEET])
        assert np.abs(heights - 0.02).max() < 2e-3, heights
        assert np.abs(q[7:] - standing).max() < 5e-3 and np.abs(v).max() < 0.05
        assert sim.diagnostics["fell"] == "false" and sim.diagnostics["feet_touching"] == "1111"
        assert sim.diagnostics["actuation"] == "brake"
        # The floor carries the robot's weight, shared by its feet.
        contact = sim.contact_forces
        assert list(contact.frames) == FEET and list(contact.touching) == [True] * 4
        forces = np.reshape(contact.forces, (4, 3))
        weight = rd.crba(model, data, q)[0, 0] * 9.81
        assert forces[:, 2].sum() == pytest.approx(weight, rel=0.02)
        assert (forces[:, 2] > 0.15 * weight).all() and contact.header.frame_id == "odom"

        # A policy for the 12 actuated joints of the 18-dof robot: PD on the joints around the standing posture
        # (K has zero columns for the base), from the simulator's own state at every step.
        names = list(model.actuated_joint_names)
        x_ref = np.r_[q, np.zeros(model.nv)]
        gain = np.zeros((12, 2 * model.nv))
        gain[:, 6:18] = -8.0 * np.eye(12)
        gain[:, 24:36] = -0.2 * np.eye(12)
        # Feedforward: the static stance torques, g(q) = S^T tau + sum_i J_i^T f_i with f_i = (0, 0, m g / 4).
        tau = rd.gravity_torques(model, data, q)[6:].copy()
        for foot in FEET:
            tau -= rd.frame_jacobian(model, data, q, foot, "local_world_aligned")[:3, 6:].T @ [0, 0, weight / 4]
        fields = feedback_policy_fields(names, list(model.joint_names), model.nq, model.nv, 0.01, 30.0,
                                        x_ref[None, :], tau[None, :], gain)
        message = fill_message(FeedbackPolicy(), fields)
        set_stamp(message.header.stamp, sim.node.get_clock().now().nanoseconds)
        sim.policies.publish(message)
        sim.spin_until(lambda: sim.diagnostics.get("actuation") == "policy", 10.0, "the policy in use")
        sim.contact_history.clear()
        sim.spin(0.5)
        q_policy, _ = sim.state()
        assert np.abs(q_policy[7:] - standing).max() < 0.01 and sim.diagnostics["fell"] == "false"
        # Standing on the policy, every foot's force inside the cone of the MPC's mu (config/solo12.yaml), under
        # the floor's: the simulator's own count only holds MuJoCo to MuJoCo's cone, which it keeps anyway.
        mu = mpc_mu()
        assert len(sim.contact_history) > 20
        for forces, touching in sim.contact_history:
            assert touching.all() and (np.hypot(forces[:, 0], forces[:, 1]) <= mu * forces[:, 2]).all(), forces

        # A push along +x for 0.1 s, stronger than friction can hold: the base slides along +x.
        before, _ = sim.state()
        sim.push([40.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.1)
        sim.spin_until(lambda: sim.count("pushes_applied") == 1, 10.0, "the push applied")
        sim.spin(0.5)
        after, _ = sim.state()
        moved = after[:3] - before[:3]
        assert moved[0] > 0.005 and abs(moved[1]) < 0.5 * moved[0], moved

        # Bad pushes: refused and counted, nothing applied, the node alive.
        sim.push([float("nan"), 0.0, 0.0], [0.0, 0.0, 0.0], 0.1)
        sim.push([1.0, 0.0, 0.0], [0.0, 0.0, 0.0], -1.0)
        sim.push([1e6, 0.0, 0.0], [0.0, 0.0, 0.0], 0.1)
        sim.spin_until(lambda: sim.count("refused_push") == 3, 10.0, "three refused pushes")
        assert sim.count("pushes_applied") == 1 and sim.process.poll() is None
        assert sim.count("refused_internal_error") == 0
    finally:
        sim.close()


def test_a_flood_of_pushes_is_held_to_the_push_budget(solo):
    """A thousand pushes of 2 N for 0.1 s within a second, each acceptable alone: only those that fit the budget
    (mass x push_budget of momentum per second) are applied, the others are refused and counted; those the
    subscription's queue could not hold are counted lost; the robot, braked on its legs, is not thrown."""
    model, data = solo
    standing = standing_joints(model)
    budget = 0.4  # [m/s]
    sim = Simulator({"urdf_path": SOLO, "floating_base": True, "contact_frames": "[" + ", ".join(FEET) + "]",
                     "initial_positions": standing.tolist(), "damping": [0.0], "friction": [0.0],
                     "diagnostics_period": 0.1, "push_budget": budget})
    try:
        sim.spin_until(lambda: sim.odometry is not None and sim.diagnostics and sim.pushes.get_subscription_count(),
                       STARTUP_TIMEOUT, "odom, diagnostics and the push subscription")
        sim.spin(0.5)
        # One bad push taken first: losses are counted from the first message the node has seen of a publisher
        # (a reliable writer may overwrite its first ones before the reader has joined).
        sim.push([float("nan"), 0.0, 0.0], [0.0, 0.0, 0.0], 0.1)
        sim.spin_until(lambda: sim.count("refused_push") == 1, 10.0, "the first push refused")
        mass = rd.crba(model, data, sim.state()[0])[0, 0]
        sim.speeds.clear()
        started = time.monotonic()
        for k in range(1000):
            sim.push([0.0, 2.0, 0.0], [0.0, 0.0, 0.0], 0.1)
            if k % 20 == 19:
                sim.executor.spin_once(timeout_sec=0.0)
        sent_for = time.monotonic() - started
        sim.spin(2.0)
        applied, refused, lost = sim.count("pushes_applied"), sim.count("refused_push/budget"), sim.count("lost_push")
        fell, speed = sim.diagnostics["fell"], max(sim.speeds)
    finally:
        sim.close()
    # Within any second the pushes may add mass x budget of momentum, 0.2 N s each; sent over sent_for seconds (a
    # few tenths, more on a loaded machine) they span that many windows at most. (Measured: 5 applied, 60 refused of
    # the 65 the subscription's queue kept, the base at 0.005 m/s; before the budget, 82 applied and 5.3 m/s.)
    windows = math.floor(sent_for) + 1
    assert 1 <= applied <= windows * mass * budget / 0.2 + 1e-9 and refused >= 10, (applied, refused, sent_for)
    assert fell == "false" and speed < windows * budget + 0.1, (fell, speed)
    # Every push sent is accounted for: applied, refused or lost before the node (no middleware event tells of
    # those: the gaps in the publisher's sequence numbers do).
    assert applied + refused + lost == 1000 and lost > 0, (applied, refused, lost)


#: A process that listens to /tf and the odometry for argv[1] seconds (from the first transform) and prints both
#: as JSON: the transforms as [stamp [ns], parent, child, x, y, z, qx, qy, qz, qw], the poses by stamp.
TF_LISTENER = """
import json, sys, time
import rclpy
from nav_msgs.msg import Odometry
from tf2_msgs.msg import TFMessage
rclpy.init()
node = rclpy.create_node("tf_listener")
transforms, poses = [], {}
def ns(stamp):
    return stamp.sec * 10**9 + stamp.nanosec
def on_tf(message):
    for t in message.transforms:
        p, r = t.transform.translation, t.transform.rotation
        transforms.append([ns(t.header.stamp), t.header.frame_id, t.child_frame_id, p.x, p.y, p.z, r.x, r.y, r.z, r.w])
def on_odometry(message):
    p, r = message.pose.pose.position, message.pose.pose.orientation
    poses[str(ns(message.header.stamp))] = [p.x, p.y, p.z, r.x, r.y, r.z, r.w]
node.create_subscription(TFMessage, "/tf", on_tf, 1000)
node.create_subscription(Odometry, "odom", on_odometry, 1000)
deadline = time.monotonic() + 120.0
while not transforms and time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.01)
transforms.clear()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.01)
print(json.dumps({"transforms": transforms, "poses": poses}))
"""


def test_the_base_pose_goes_out_on_tf(solo, tmp_path_factory):
    """Where tf2_msgs is installed (here: built for the test from its one-line definition, the same type a ROS
    installation has), the simulator puts the base's pose on /tf every tf_period: odom -> base_link, the same pose
    as the odometry of the same stamp. A process with tf2_msgs reads it, as RViz would."""
    import json

    from rbd_deriv.testing.interfaces import build_interfaces, environment_with

    prefix = build_interfaces("tf2_msgs", {"TFMessage": "geometry_msgs/TransformStamped[] transforms\n"},
                              ["geometry_msgs"], tmp_path_factory.mktemp("tf2_msgs"))
    model, _ = solo
    sim = Simulator({"urdf_path": SOLO, "floating_base": True, "contact_frames": "[" + ", ".join(FEET) + "]",
                     "initial_positions": standing_joints(model).tolist(), "tf_period": 0.02},
                    environment_with(prefix))
    try:
        listened = subprocess.run([sys.executable, "-c", TF_LISTENER, "2.0"], env=sim.env, capture_output=True,
                                  text=True, timeout=STARTUP_TIMEOUT)
    finally:
        sim.close()
    assert listened.returncode == 0, listened.stderr[-3000:]
    heard = json.loads(listened.stdout)
    transforms, poses = heard["transforms"], heard["poses"]
    # 2 s at one transform per 0.02 s: about 100 (a loaded machine may drop some; the listener may also take a few
    # that were waiting in its queue when its 2 s began: 110 once in CI, their stamps 20 ms apart).
    assert len(transforms) >= 60, len(transforms)
    assert {(t[1], t[2]) for t in transforms} == {("odom", "base_link")}
    stamps = np.array([t[0] for t in transforms])
    # One per tf_period: never two closer, and most within a physics step (1 ms) of it (none dropped between them).
    steps = np.diff(stamps)
    assert (steps >= 0.02e9 - 1).all() and np.median(steps) <= 0.021e9 + 1e5, (steps.min(), np.median(steps))
    matched = [(t[3:], poses[str(t[0])]) for t in transforms if str(t[0]) in poses]
    assert len(matched) >= 0.5 * len(transforms), (len(matched), len(transforms))
    for transform, pose in matched:
        assert transform == pose


def test_the_robot_from_the_robot_description_topic():
    """Without urdf_path nor robot_description, the simulator waits for the latched robot_description topic (no
    joint_states before it, no bundled robot), then simulates that robot: a description that cannot be built is
    refused and the node waits on; the next good one starts it."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from rbd_deriv import bundled_urdf

    urdf = bundled_urdf("rbd_arm7")
    expected = list(rd.load_urdf(str(urdf)).joint_names)
    sim = Simulator({"diagnostics_period": 0.2})
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    description = sim.node.create_publisher(String, "robot_description", latched)
    try:
        sim.spin_until(lambda: description.get_subscription_count() > 0, STARTUP_TIMEOUT, "the description input")
        sim.spin(1.0)
        assert sim.joint_states is None and sim.process.poll() is None
        description.publish(String(data="<robot name='broken'><link name='a'/><joint name='j' type='revolute'/>"))
        sim.spin(1.0)
        assert sim.joint_states is None and sim.process.poll() is None
        description.publish(String(data=urdf.read_text(encoding="utf-8")))
        sim.spin_until(lambda: sim.joint_states is not None, STARTUP_TIMEOUT, "joint_states of the topic's robot")
        names = list(sim.joint_states.name)
    finally:
        sim.close()
    assert names == expected
