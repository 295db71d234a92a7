"""The dynamics node as a real process, driven over DDS from this test.

The node is started through its console entry point (``python -m rbd_deriv.nodes.dynamics_node`` when the
package is not installed), on a ROS domain of its own. Every output is compared entry by entry with the
library (and the torques with Pinocchio) at the state the test published; the service is called; each bad
input of the issue is sent to the running node, which must refuse it, count it, log it once per throttle
period, publish nothing for it, and keep serving good input.

Waits are generous (a loaded 2-core machine, first numba compilation); nothing asserts speed.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg", reason="rbd_deriv interfaces not built (pip install -e . or colcon build)")

from builtin_interfaces.msg import Time  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rcl_interfaces.msg import Parameter as ParameterMessage  # noqa: E402
from rcl_interfaces.msg import ParameterType, ParameterValue  # noqa: E402
from rcl_interfaces.srv import SetParameters  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.messages import contact_fields_arrays  # noqa: E402
from rbd_deriv.msg import ContactSet, Linearization, Matrix  # noqa: E402
from rbd_deriv.nodes import processes  # noqa: E402
from rbd_deriv.srv import ComputeDerivatives  # noqa: E402
from rbd_deriv.testing import assert_close  # noqa: E402
from rbd_deriv.testing.robots import bundled_urdf  # noqa: E402

ARM_URDF = bundled_urdf("rbd_arm7")
STARTUP_TIMEOUT = 900.0  # a cold numba cache compiles every kernel: minutes on a loaded machine
REPLY_TIMEOUT = 30.0
THROTTLE = 60.0  # the node logs each kind of fault at most once a minute in these tests


def node_command() -> List[str]:
    """The console entry point next to this interpreter, else the module."""
    return processes.node_command("dynamics_node", "rbd_deriv.nodes.dynamics_node")


def stamp_of(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def ns_of(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class NodeUnderTest:
    """A dynamics node process plus a client node in this process, on a private ROS domain."""

    def __init__(self, extra_parameters: Dict[str, str], name: str) -> None:
        self.domain = 1 + (os.getpid() * 7 + len(name) * 13) % 200
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(self.domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                        PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
        parameters = {"urdf_path": str(ARM_URDF), "log_throttle_period": str(THROTTLE), **extra_parameters}
        arguments = ["--ros-args"]
        for key, value in parameters.items():
            arguments += ["-p", f"{key}:={value}"]
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"{name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(node_command() + arguments, env=self.env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=self.domain)
        self.node = rclpy.create_node(f"test_client_{name}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.received: Dict[str, List] = {"linearization": [], "mass_matrix_inverse": [], "bias_torques": [],
                                          "diagnostics": []}
        reliable = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(Linearization, "linearization", self.received["linearization"].append,
                                      reliable)
        self.node.create_subscription(Matrix, "mass_matrix_inverse", self.received["mass_matrix_inverse"].append,
                                      reliable)
        self.node.create_subscription(JointState, "bias_torques", self.received["bias_torques"].append, reliable)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self.received["diagnostics"].append, 10)
        self.joint_states = self.node.create_publisher(JointState, "joint_states", reliable)
        self.second_joint_states = self.node.create_publisher(JointState, "joint_states", reliable)
        self.odom = self.node.create_publisher(Odometry, "odom", reliable)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.description = self.node.create_publisher(String, "robot_description", latched)
        self.contacts = self.node.create_publisher(ContactSet, "active_contacts", latched)
        self.service = self.node.create_client(ComputeDerivatives, "compute_derivatives")
        self.parameters = self.node.create_client(SetParameters, "/dynamics_node/set_parameters")

    # -------------------------------------------------------------------------------- plumbing
    def now_ns(self) -> int:
        return self.node.get_clock().now().nanoseconds

    def spin_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        # DDS's wait once missed its own 50 ms timeout in CI and stayed blocked (17 min, until the node under test
        # changed state): a helper thread wakes the executor every 0.5 s, and 10 s past the deadline stops the node,
        # so that a wait that never returns fails the test (node died) instead of hanging the suite. In a local
        # fresh-clone run the node under test was stuck as well and outlived SIGTERM for 20 min (the use_sim_time
        # test; both processes in Fast DDS's wait set): 20 s past the deadline it is killed.
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.5):
                self.executor.wake()
                late = time.monotonic() - deadline
                if late > 20.0 and self.process.poll() is None:
                    self.process.kill()
                elif late > 10.0 and self.process.poll() is None:
                    self.process.terminate()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            while not condition():
                assert self.process.poll() is None, f"node died while waiting for {what}:\n{self.log_text()}"
                assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}:\n{self.log_text()}"
                self.executor.spin_once(timeout_sec=0.05)
        finally:
            done.set()
            watcher.join()

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def wait_ready(self) -> None:
        self.spin_until(lambda: self.joint_states.get_subscription_count() > 0
                        and self.node.count_subscribers("robot_description") > 0, STARTUP_TIMEOUT, "discovery")
        self.spin_until(lambda: self.service.service_is_ready() and self.parameters.service_is_ready(),
                        STARTUP_TIMEOUT, "services")
        self.spin_until(lambda: bool(self.received["diagnostics"]), STARTUP_TIMEOUT, "first diagnostics")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
        self.log.close()
        os.unlink(self.log.name)

    # -------------------------------------------------------------------------------- traffic
    def publish_state(self, names, position, velocity, effort=(), stamp_ns: Optional[int] = None,
                      publisher=None) -> int:
        stamp_ns = self.now_ns() if stamp_ns is None else stamp_ns
        message = JointState(name=list(names), position=[float(x) for x in position],
                             velocity=[float(x) for x in velocity], effort=[float(x) for x in effort])
        message.header.stamp = stamp_of(stamp_ns)
        message.header.frame_id = "test_frame"
        (publisher or self.joint_states).publish(message)
        return stamp_ns

    def outputs_at(self, stamp_ns: int, topics=("linearization", "mass_matrix_inverse", "bias_torques")) -> Dict:
        found = {}
        for topic in topics:
            for message in self.received[topic]:
                if ns_of(message.header.stamp) == stamp_ns:
                    found[topic] = message
        return found

    def wait_outputs(self, stamp_ns: int, timeout: float = REPLY_TIMEOUT,
                     topics=("linearization", "mass_matrix_inverse", "bias_torques")) -> Dict:
        self.spin_until(lambda: len(self.outputs_at(stamp_ns, topics)) == len(topics), timeout,
                        f"outputs stamped {stamp_ns}")
        return self.outputs_at(stamp_ns, topics)

    def call(self, request) -> ComputeDerivatives.Response:
        future = self.service.call_async(request)
        self.spin_until(future.done, REPLY_TIMEOUT, "service reply")
        return future.result()

    def set_parameter(self, name: str, value) -> bool:
        if isinstance(value, bool):
            parameter_value = ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
        elif isinstance(value, float):
            parameter_value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
        elif isinstance(value, list):
            parameter_value = ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY, string_array_value=value)
        else:
            parameter_value = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
        request = SetParameters.Request(parameters=[ParameterMessage(name=name, value=parameter_value)])
        future = self.parameters.call_async(request)
        self.spin_until(future.done, REPLY_TIMEOUT, f"set_parameters {name}")
        return future.result().results[0].successful

    def latest_diagnostics(self, after_ns: int) -> Dict[str, str]:
        """Key/values of the first diagnostics published after ``after_ns``."""
        def fresh():
            return [m for m in self.received["diagnostics"] if ns_of(m.header.stamp) > after_ns
                    and any(s.name.endswith(": dynamics") for s in m.status)]
        self.spin_until(lambda: bool(fresh()), REPLY_TIMEOUT, "fresh diagnostics")
        status = next(s for s in fresh()[0].status if s.name.endswith(": dynamics"))
        return {kv.key: kv.value for kv in status.values}


@pytest.fixture(scope="module")
def arm_model():
    return rd.load_urdf(str(ARM_URDF))


@pytest.fixture(scope="module")
def arm_node():
    # Reliable: the tests count every message they send, a megabyte one included, which best effort (the node's
    # default) drops here when a fragment is lost (Fast DDS does not resend it).
    harness = NodeUnderTest({"state_qos": "reliable"}, "arm")
    try:
        harness.wait_ready()
        yield harness
    finally:
        harness.close()


def random_state(model, rng):
    q = rng.uniform(model.lower_position_limit, model.upper_position_limit)
    v = rng.uniform(-1.0, 1.0, model.nv)
    return q, v


def check_outputs_against_library(model, outputs, q, v, dt=0.001):
    """Every published number equals the library's at (q, v), and the torques equal Pinocchio's."""
    data = model.create_data()
    bias = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()

    torques = outputs["bias_torques"]
    assert list(torques.name) == list(model.actuated_joint_names)
    effort = np.array(torques.effort)
    assert_close(effort, bias[[model.idx_v[n] for n in torques.name]], what="bias torques")

    minv = outputs["mass_matrix_inverse"]
    assert (minv.rows, minv.cols, minv.name) == (model.nv, model.nv, "M_inverse")
    assert_close(np.array(minv.data).reshape(model.nv, model.nv), rd.minverse(model, data, q), what="M^-1")

    lin = outputs["linearization"]
    assert (lin.nx, lin.nu, lin.nq, lin.nv, lin.dt) == (2 * model.nv, model.nv, model.nq, model.nv, dt)
    assert list(lin.joint_names) == list(model.joint_names)
    np.testing.assert_array_equal(np.array(lin.x), np.concatenate((q, v)))
    assert_close(np.array(lin.u), bias, what="linearization input")
    a, b = rd.linearize(model, data, q, v, bias, dt)
    assert_close(np.array(lin.a).reshape(2 * model.nv, 2 * model.nv), a, what="A")
    assert_close(np.array(lin.b).reshape(2 * model.nv, model.nv), b, what="B")
    assert_close(np.array(lin.x_next), data.x_next, what="x+")
    for message in outputs.values():
        assert message.header.frame_id == "test_frame"


def test_outputs_match_library_at_published_state(arm_node, arm_model):
    model = arm_model
    rng = np.random.default_rng(3)
    # Before the state is complete nothing is published.
    partial = arm_node.publish_state(model.joint_names[:3], [0.1, 0.2, 0.3], [0, 0, 0])
    names = list(model.joint_names) + ["finger_joint"]
    for trial in range(3):
        q, v = random_state(model, rng)
        order = rng.permutation(len(names))
        position = np.append(q, 0.04)[order]
        velocity = np.append(v, 0.0)[order]
        stamp = arm_node.publish_state([names[i] for i in order], position, velocity)
        outputs = arm_node.wait_outputs(stamp, timeout=STARTUP_TIMEOUT if trial == 0 else REPLY_TIMEOUT)
        check_outputs_against_library(model, outputs, q, v)
    assert arm_node.outputs_at(partial) == {}

    import pinocchio

    pin_model = pinocchio.buildModelFromUrdf(str(ARM_URDF))
    pin_data = pin_model.createData()
    expected = pinocchio.rnea(pin_model, pin_data, q, v, np.zeros(model.nv))
    order = [pin_model.names[i + 1] for i in range(pin_model.nv)]
    published = dict(zip(outputs["bias_torques"].name, outputs["bias_torques"].effort))
    assert_close([published[n] for n in order], expected, what="bias torques vs Pinocchio")


def test_joints_split_across_publishers(arm_node, arm_model):
    model = arm_model
    rng = np.random.default_rng(5)
    q, v = random_state(model, rng)
    first, second = list(model.joint_names[:4]), list(model.joint_names[4:])
    stamp = arm_node.now_ns()
    arm_node.publish_state(first, q[:4], v[:4], stamp_ns=stamp)
    arm_node.wait_outputs(stamp)
    stamp2 = arm_node.publish_state(second[::-1], q[4:][::-1], v[4:][::-1], publisher=arm_node.second_joint_states)
    outputs = arm_node.wait_outputs(stamp2)
    check_outputs_against_library(model, outputs, q, v)


def test_service_answers_match_library(arm_node, arm_model):
    model = arm_model
    data = model.create_data()
    rng = np.random.default_rng(7)
    q, v = random_state(model, rng)
    a, tau = rng.uniform(-2, 2, model.nv), rng.uniform(-20, 20, model.nv)
    request = ComputeDerivatives.Request(q=q.tolist(), v=v.tolist(), a=a.tolist(), tau=tau.tolist(), dt=0.01,
                                         inverse_dynamics_derivatives=True, forward_dynamics_derivatives=True,
                                         mass_matrix=True, mass_matrix_inverse=True, linearization=True)
    response = arm_node.call(request)
    assert response.success, response.message
    assert list(response.joint_names) == list(model.joint_names)

    def matrix(message, rows, cols):
        assert (message.rows, message.cols) == (rows, cols)
        assert list(message.names) == list(model.joint_names)
        return np.array(message.data).reshape(rows, cols)

    nv = model.nv
    dtau_dq, dtau_dv, _ = rd.rnea_derivatives(model, data, q, v, a)
    assert_close(matrix(response.dtau_dq, nv, nv), dtau_dq, what="dtau/dq")
    assert_close(matrix(response.dtau_dv, nv, nv), dtau_dv, what="dtau/dv")
    dddq_dq, dddq_dv, _ = rd.aba_derivatives(model, data, q, v, tau)
    assert_close(matrix(response.dddq_dq, nv, nv), dddq_dq, what="dddq/dq")
    assert_close(matrix(response.dddq_dv, nv, nv), dddq_dv, what="dddq/dv")
    assert_close(matrix(response.mass_matrix, nv, nv), rd.crba(model, data, q), what="M")
    assert_close(matrix(response.mass_matrix_inverse, nv, nv), rd.minverse(model, data, q), what="M^-1")
    A, B = rd.linearize(model, data, q, v, tau, 0.01)
    assert_close(np.array(response.linearization.a).reshape(2 * nv, 2 * nv), A, what="A")
    assert_close(np.array(response.linearization.b).reshape(2 * nv, nv), B, what="B")
    assert_close(np.array(response.linearization.x_next), data.x_next, what="x+")

    # Only what was asked is filled.
    only_m = arm_node.call(ComputeDerivatives.Request(q=q.tolist(), v=v.tolist(), mass_matrix=True))
    assert only_m.success, only_m.message
    assert only_m.dtau_dq.rows == 0 and only_m.linearization.nx == 0 and only_m.mass_matrix.rows == nv


@pytest.mark.parametrize("change, expected", [
    (dict(q=[0.0] * 6), "q has 6 entries"),
    (dict(v=[0.0] * 9), "v has 9 entries"),
    (dict(tau=[]), "tau has 0 entries"),
    (dict(q=[math.nan] + [0.0] * 6), "NaN"),
    (dict(dt=0.0), "dt must be in (0, 1] s"),
    (dict(linearization=False, forward_dynamics_derivatives=False), "nothing asked"),
])
def test_service_refuses_bad_requests(arm_node, change, expected):
    fields = dict(q=[0.0] * 7, v=[0.0] * 7, tau=[0.0] * 7, dt=0.001, linearization=True,
                  forward_dynamics_derivatives=True)
    fields.update(change)
    response = arm_node.call(ComputeDerivatives.Request(**fields))
    assert not response.success
    assert expected in response.message
    assert response.linearization.nx == 0 and response.dddq_dq.rows == 0


def _broken_descriptions() -> Dict[str, str]:
    text = ARM_URDF.read_text()
    six_dof = text.replace('<joint name="joint7" type="revolute">', '<joint name="joint7" type="fixed">')
    assert six_dof != text
    return {
        "bad_description": "<robot name='broken'><link name='a'/><joint name='j' type='revolute'>",
        "empty": "   ",
        "robot_changed": six_dof,
    }


def test_bad_inputs_are_refused_counted_logged_once_and_the_node_keeps_serving(arm_node, arm_model):
    model = arm_model
    names = list(model.joint_names)
    rng = np.random.default_rng(11)
    q, v = random_state(model, rng)
    good = arm_node.publish_state(names, q, v)
    arm_node.wait_outputs(good)
    before = arm_node.now_ns()
    baseline = arm_node.latest_diagnostics(before)

    nan_q = q.copy()
    nan_q[2] = math.nan
    inf_v = v.copy()
    inf_v[5] = math.inf
    # A fresh accepted state just before: older stamps within max_state_age are out of order, not stale.
    last = arm_node.publish_state(names, q, v)
    bad_messages = {  # reason -> (names, position, velocity, effort, stamp)
        "unknown_joints": (["wheel_left", "wheel_right"], [0, 0], [0, 0], [], None),
        "length_mismatch": (names, q[:5], v, [], None),
        "non_finite": (names, nan_q, v, [], None),
        "non_finite_velocity": (names, q, inf_v, [], None),
        "duplicate_joint": (names + ["joint1"], np.append(q, 0), np.append(v, 0), [], None),
        "missing_velocity": (names, q, [], [], None),
        "stale": (names, q, v, [], last - 10 * 1_000_000_000),
        "out_of_order": (names, q, v, [], last - 1_000_000),
    }
    sent_stamps = []
    for reason, (n, p, w, e, stamp) in bad_messages.items():
        for _ in range(3):
            stamp_ns = arm_node.publish_state(n, p, w, e, stamp_ns=stamp)
            sent_stamps.append(stamp_ns)
            if stamp is None:
                time.sleep(0.001)  # distinct stamps
    for reason, description in _broken_descriptions().items():
        arm_node.description.publish(String(data=description))
        time.sleep(0.5)  # a latched topic keeps only the last message: let each one through
    assert not arm_node.set_parameter("dt", -1.0)
    assert not arm_node.set_parameter("publish_mode", "sometimes")
    assert not arm_node.set_parameter("robot_description", "<robot name='x'>")

    # The node still serves good input, with the original robot.
    q2, v2 = random_state(model, rng)
    after = arm_node.publish_state(list(reversed(names)), q2[::-1], v2[::-1])
    outputs = arm_node.wait_outputs(after)
    check_outputs_against_library(model, outputs, q2, v2)
    assert arm_node.process.poll() is None
    for stamp_ns in sent_stamps:
        assert arm_node.outputs_at(stamp_ns) == {}, "an output was published for a refused message"

    counts = arm_node.latest_diagnostics(arm_node.now_ns())
    def increase(reason):
        return int(counts.get(f"rejected_{reason}", 0)) - int(baseline.get(f"rejected_{reason}", 0))
    assert increase("unknown_joints") == 3
    assert increase("length_mismatch") == 3
    assert increase("non_finite") == 6
    assert increase("duplicate_joint") == 3
    assert increase("missing_velocity") == 3
    assert increase("stale") == 3
    assert increase("out_of_order") == 3
    assert increase("bad_description") >= 3  # broken topic message, empty one, broken parameter
    assert increase("robot_changed") == 1
    assert int(counts["rejected_total"]) > int(baseline.get("rejected_total", 0))

    # One log line per kind of fault within the throttle period, naming the fault.
    log = arm_node.log_text()
    for reason in ("unknown_joints", "length_mismatch", "non_finite", "duplicate_joint", "missing_velocity",
                   "stale", "out_of_order", "robot_changed"):
        lines = re.findall(rf"refused \[{reason}, ", log)
        assert len(lines) == 1, f"{reason}: {len(lines)} log lines\n{log}"
    assert "set allow_robot_change" in log


def test_parameters_change_outputs(arm_node, arm_model):
    model = arm_model
    rng = np.random.default_rng(13)
    assert arm_node.set_parameter("dt", 0.004)
    q, v = random_state(model, rng)
    stamp = arm_node.publish_state(model.joint_names, q, v)
    outputs = arm_node.wait_outputs(stamp)
    check_outputs_against_library(model, outputs, q, v, dt=0.004)

    # Timer mode publishes from the latest state without new joint_states.
    assert arm_node.set_parameter("max_state_age", 0.0)
    assert arm_node.set_parameter("publish_mode", "timer")
    count = len(arm_node.received["linearization"])
    arm_node.spin_until(lambda: len(arm_node.received["linearization"]) >= count + 3, REPLY_TIMEOUT,
                        "timer outputs")
    latest = arm_node.received["linearization"][-1]
    assert ns_of(latest.header.stamp) == stamp
    np.testing.assert_array_equal(np.array(latest.x), np.concatenate((q, v)))

    # The timer reads what arrived since its last tick: a burst split across two publishers leaves
    # the newest value of every joint, and the outputs are computed there.
    # (The mode change gave the node a new subscription: bursts are repeated until it is matched.)
    first = list(model.joint_names[:4])
    second = list(model.joint_names[4:])
    for attempt in range(40):
        for k in range(4):
            q, v = random_state(model, rng)
            arm_node.publish_state(first, q[:4], v[:4])
            stamp = arm_node.publish_state(second, q[4:], v[4:], publisher=arm_node.second_joint_states)
        deadline = time.monotonic() + 0.5
        while len(arm_node.outputs_at(stamp)) < 3 and time.monotonic() < deadline:
            arm_node.executor.spin_once(timeout_sec=0.05)
        if len(arm_node.outputs_at(stamp)) == 3:
            break
    check_outputs_against_library(model, arm_node.wait_outputs(stamp), q, v, dt=0.004)
    assert arm_node.set_parameter("publish_mode", "on_message")
    assert arm_node.set_parameter("max_state_age", 0.5)
    assert arm_node.set_parameter("dt", 0.001)


def test_diagnostics_report_rates_and_percentiles(arm_node, arm_model):
    model = arm_model
    start = arm_node.now_ns()
    for k in range(20):
        q, v = random_state(model, np.random.default_rng(100 + k))
        stamp = arm_node.publish_state(model.joint_names, q, v)
        time.sleep(0.01)
    arm_node.wait_outputs(stamp)
    values = arm_node.latest_diagnostics(start)
    for key in ("input_rate_hz", "output_rate_hz", "compute_time_ms_p50", "compute_time_ms_p99",
                "compute_time_ms_max", "latency_ms_p50", "latency_ms_p99", "latency_ms_max", "rejected_total"):
        assert key in values, key
    assert float(values["output_rate_hz"]) > 0
    assert 0 < float(values["latency_ms_p50"]) <= float(values["latency_ms_p99"]) <= float(values["latency_ms_max"])
    assert values["robot"] == "rbd_arm7" and values["nv"] == "7"


@pytest.fixture(scope="module")
def floating_node():
    harness = NodeUnderTest({"floating_base": "true"}, "floating")
    try:
        harness.wait_ready()
        yield harness
    finally:
        harness.close()


def test_floating_base_state_from_odometry(floating_node):
    model = rd.load_urdf(str(ARM_URDF), floating_base=True)
    rng = np.random.default_rng(17)
    joints = list(model.actuated_joint_names)
    q_joints = rng.uniform(-1, 1, len(joints))
    v_joints = rng.uniform(-1, 1, len(joints))
    quaternion = rng.normal(size=4)
    quaternion /= np.linalg.norm(quaternion)
    position, linear, angular = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)

    floating_node.spin_until(lambda: floating_node.odom.get_subscription_count() > 0, STARTUP_TIMEOUT, "odom")
    odom = Odometry()
    odom.pose.pose.position.x, odom.pose.pose.position.y, odom.pose.pose.position.z = position
    o = odom.pose.pose.orientation
    o.x, o.y, o.z, o.w = quaternion
    odom.twist.twist.linear.x, odom.twist.twist.linear.y, odom.twist.twist.linear.z = linear
    odom.twist.twist.angular.x, odom.twist.twist.angular.y, odom.twist.twist.angular.z = angular
    # Odometry and joint_states come on different topics: resend both until the node has both.
    def publish_both():
        odom.header.stamp = stamp_of(floating_node.now_ns())
        floating_node.odom.publish(odom)
        time.sleep(0.05)
        return floating_node.publish_state(joints, q_joints, v_joints)
    stamp = publish_both()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not floating_node.outputs_at(stamp) and time.monotonic() < deadline:
        floating_node.spin_until(lambda: True, 1.0, "spin")
        floating_node.executor.spin_once(timeout_sec=1.0)
        if not floating_node.outputs_at(stamp):
            stamp = publish_both()
    outputs = floating_node.wait_outputs(stamp)

    q, v = np.zeros(model.nq), np.zeros(model.nv)
    iq, iv = model.idx_q[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT]
    q[iq:iq + 3], q[iq + 3:iq + 7] = position, quaternion
    v[iv:iv + 3], v[iv + 3:iv + 6] = linear, angular
    for k, name in enumerate(joints):
        q[model.idx_q[name]], v[model.idx_v[name]] = q_joints[k], v_joints[k]
    check_outputs_against_library(model, outputs, q, v)

    # A non-unit quaternion is refused; the base keeps its last good pose.
    o.w = 5.0
    odom.header.stamp = stamp_of(floating_node.now_ns())
    floating_node.odom.publish(odom)
    time.sleep(0.05)
    stamp = floating_node.publish_state(joints, q_joints, v_joints)
    outputs = floating_node.wait_outputs(stamp)
    check_outputs_against_library(model, outputs, q, v)
    assert "refused [bad_base, " in floating_node.log_text()


def test_stamps_are_judged_on_the_node_clock_with_sim_time(arm_model):
    """With use_sim_time the node's clock follows /clock (a bag replay): states stamped in simulated time are
    fresh, and max_state_age counts simulated seconds."""
    from rosgraph_msgs.msg import Clock

    # The name sets the ROS domain: one apart from the module's other nodes, which are still running.
    harness = NodeUnderTest({"use_sim_time": "true"}, "sim_time_node")
    try:
        clock = harness.node.create_publisher(Clock, "/clock", 10)
        start_ns, started = 1_000 * 1_000_000_000, time.monotonic()

        def sim_now_ns() -> int:
            return start_ns + int((time.monotonic() - started) * 1e9)

        harness.node.create_timer(0.01, lambda: clock.publish(Clock(clock=stamp_of(sim_now_ns()))))
        harness.wait_ready()
        model = arm_model
        q, v = random_state(model, np.random.default_rng(19))
        # Far older than max_state_age on the wall clock, current on the simulated one.
        stamp = harness.publish_state(model.joint_names, q, v, stamp_ns=sim_now_ns())
        check_outputs_against_library(model, harness.wait_outputs(stamp, timeout=STARTUP_TIMEOUT), q, v)
        before = harness.latest_diagnostics(sim_now_ns())
        stale = harness.publish_state(model.joint_names, q, v, stamp_ns=sim_now_ns() - 10 * 1_000_000_000)
        fresh = harness.publish_state(model.joint_names, q, v, stamp_ns=sim_now_ns())
        harness.wait_outputs(fresh)
        assert harness.outputs_at(stale) == {}
        after = harness.latest_diagnostics(sim_now_ns())
        assert int(after.get("rejected_stale", 0)) - int(before.get("rejected_stale", 0)) == 1
    finally:
        harness.close()


# ------------------------------------------------------------------ reliability: one test per failure mode
def rejected(counts: Dict[str, str], baseline: Dict[str, str], reason: str) -> int:
    """How many more refusals of ``reason`` ``counts`` shows than ``baseline``."""
    return int(counts.get(f"rejected_{reason}", 0)) - int(baseline.get(f"rejected_{reason}", 0))


def serve_good_state(harness, model, rng, topics=("linearization", "mass_matrix_inverse", "bias_torques")):
    """A good state is answered, every output right: the node serves after whatever came before."""
    q, v = random_state(model, rng)
    stamp = harness.publish_state(model.joint_names, q, v)
    outputs = harness.wait_outputs(stamp, topics=topics)
    if len(topics) == 3:
        check_outputs_against_library(model, outputs, q, v, dt=float(outputs["linearization"].dt))
    return stamp


def test_stamps_from_the_future_are_refused_and_block_nothing(arm_node, arm_model):
    model = arm_model
    rng = np.random.default_rng(31)
    serve_good_state(arm_node, model, rng)
    baseline = arm_node.latest_diagnostics(arm_node.now_ns())
    q, v = random_state(model, rng)
    future = [arm_node.publish_state(model.joint_names, q, v, stamp_ns=arm_node.now_ns() + lead)
              for lead in (2 * 1_000_000_000, 3600 * 1_000_000_000)]
    # Every good message after them is served: they did not become the reference of the order check.
    for _ in range(5):
        serve_good_state(arm_node, model, rng)
    for stamp in future:
        assert arm_node.outputs_at(stamp) == {}
    counts = arm_node.latest_diagnostics(arm_node.now_ns())
    assert rejected(counts, baseline, "future") == 2 and rejected(counts, baseline, "out_of_order") == 0

    # Timer mode: publishes from the latest good state, never from the refused one (ages not judged here:
    # the timer repeats that state).
    assert arm_node.set_parameter("max_state_age", 0.0)
    assert arm_node.set_parameter("publish_mode", "timer")
    try:
        for attempt in range(40):  # the new subscription is matched after a moment: until a state gets in
            q, v = random_state(model, rng)
            good = arm_node.publish_state(model.joint_names, q, v)
            arm_node.publish_state(model.joint_names, q, v, stamp_ns=good + 3600 * 1_000_000_000)
            deadline = time.monotonic() + 0.5
            while not arm_node.outputs_at(good) and time.monotonic() < deadline:
                arm_node.executor.spin_once(timeout_sec=0.05)
            if arm_node.outputs_at(good):
                break
        count = len(arm_node.received["linearization"])
        arm_node.spin_until(lambda: len(arm_node.received["linearization"]) >= count + 3, REPLY_TIMEOUT, "timer")
        assert {ns_of(m.header.stamp) for m in arm_node.received["linearization"][count:]} == {good}
        np.testing.assert_array_equal(np.array(arm_node.received["linearization"][-1].x), np.concatenate((q, v)))
    finally:
        assert arm_node.set_parameter("publish_mode", "on_message")
        assert arm_node.set_parameter("max_state_age", 0.5)


def test_states_that_overflow_the_dynamics_publish_nothing(arm_node, arm_model):
    """Finite input whose dynamics overflow (v >= 1e155 squares to inf; 1e308 efforts) is refused at the
    door, whichever outputs are on; nothing non-finite is ever published."""
    model = arm_model
    rng = np.random.default_rng(32)
    serve_good_state(arm_node, model, rng)
    baseline = arm_node.latest_diagnostics(arm_node.now_ns())
    q, v = random_state(model, rng)
    refused = []
    for bad_v in (1e155, 1e307):
        w = v.copy()
        w[3] = bad_v
        refused.append(arm_node.publish_state(model.joint_names, q, w))
    assert arm_node.set_parameter("linearization_input", "effort")
    try:
        refused.append(arm_node.publish_state(model.joint_names, q, v, effort=np.full(model.nv, 1e308)))
        effort = rng.uniform(-5.0, 5.0, model.nv)
        stamp = arm_node.publish_state(model.joint_names, q, v, effort=effort)
        lin = arm_node.wait_outputs(stamp)["linearization"]
        np.testing.assert_array_equal(np.array(lin.u), effort)
    finally:
        assert arm_node.set_parameter("linearization_input", "bias")
    assert arm_node.set_parameter("publish_linearization", False)
    try:
        w = v.copy()
        w[0] = 1e200
        refused.append(arm_node.publish_state(model.joint_names, q, w))
        serve_good_state(arm_node, model, rng, topics=("mass_matrix_inverse", "bias_torques"))
    finally:
        assert arm_node.set_parameter("publish_linearization", True)
    serve_good_state(arm_node, model, rng)
    for stamp in refused:
        assert arm_node.outputs_at(stamp) == {}
    for topic in ("linearization", "mass_matrix_inverse", "bias_torques"):
        for message in arm_node.received[topic]:
            numbers = message.effort if topic == "bias_torques" else \
                message.data if topic == "mass_matrix_inverse" else list(message.a) + list(message.x_next)
            assert np.isfinite(numbers).all(), f"non-finite {topic} published"
    counts = arm_node.latest_diagnostics(arm_node.now_ns())
    assert rejected(counts, baseline, "implausible") == 4
    assert "refused [implausible, " in arm_node.log_text()


def test_the_service_never_answers_success_with_non_finite_numbers(arm_node, arm_model):
    model = arm_model
    baseline = arm_node.latest_diagnostics(arm_node.now_ns())
    fields = dict(q=[0.1] * 7, v=[0.0] * 7, a=[0.0] * 7, tau=[0.0] * 7, dt=0.001, linearization=True,
                  forward_dynamics_derivatives=True, inverse_dynamics_derivatives=True)
    for change, expected in ((dict(dt=1e300), "dt must be in"), (dict(v=[1e200] * 7), "velocity"),
                             (dict(tau=[1e308] * 7), "effort"), (dict(a=[1e308] * 7), "acceleration")):
        response = arm_node.call(ComputeDerivatives.Request(**{**fields, **change}))
        assert not response.success and expected in response.message
        assert response.linearization.nx == 0 and response.dddq_dq.rows == 0 and response.dtau_dq.rows == 0
    response = arm_node.call(ComputeDerivatives.Request(**fields))
    assert response.success
    data = model.create_data()
    A, _ = rd.linearize(model, data, np.full(7, 0.1), np.zeros(7), np.zeros(7), 0.001)
    assert_close(np.array(response.linearization.a).reshape(14, 14), A, what="A after refused requests")
    counts = arm_node.latest_diagnostics(arm_node.now_ns())
    assert rejected(counts, baseline, "bad_request") == 4


def test_fifty_concurrent_service_calls_are_all_answered(arm_node, arm_model):
    """The node queues 256 requests (rclpy's default keeps 10). The client must hold its replies as they come:
    a client queue of rclpy's default depth loses what arrives while it takes the others (docs/ros.md)."""
    client = arm_node.node.create_client(ComputeDerivatives, "compute_derivatives",
                                         qos_profile=QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
    arm_node.spin_until(client.service_is_ready, REPLY_TIMEOUT, "service")
    q = np.full(7, 0.2)
    data = arm_model.create_data()
    for burst in range(3):
        requests = [ComputeDerivatives.Request(q=(q + 0.01 * k).tolist(), v=[0.0] * 7, mass_matrix=True)
                    for k in range(50)]
        futures = [client.call_async(request) for request in requests]
        arm_node.spin_until(lambda: all(f.done() for f in futures), 60.0, f"50 answers (burst {burst})")
        for k, future in enumerate(futures):
            response = future.result()
            assert response.success
            assert_close(np.array(response.mass_matrix.data).reshape(7, 7), rd.crba(arm_model, data, q + 0.01 * k),
                         what=f"M of call {k}")
    arm_node.node.destroy_client(client)


def test_a_timer_rate_no_clock_can_hold_is_refused_and_the_node_serves_on(arm_node, arm_model):
    rng = np.random.default_rng(33)
    assert arm_node.set_parameter("publish_mode", "timer")
    try:
        for rate in (1e-12, 0.0, 1e9, math.inf):
            assert not arm_node.set_parameter("rate", rate)
        assert not arm_node.set_parameter("diagnostics_period", 1e-12)
        assert arm_node.process.poll() is None
        assert arm_node.set_parameter("rate", 50.0)
        count = len(arm_node.received["linearization"])
        for _ in range(40):
            serve_stamp = arm_node.publish_state(arm_model.joint_names, *random_state(arm_model, rng))
            arm_node.spin_until(lambda: True, 0.1, "spin")
            if arm_node.outputs_at(serve_stamp):
                break
        arm_node.spin_until(lambda: len(arm_node.received["linearization"]) >= count + 5, REPLY_TIMEOUT, "timer")
    finally:
        assert arm_node.set_parameter("rate", 100.0)
        assert arm_node.set_parameter("publish_mode", "on_message")
    serve_good_state(arm_node, arm_model, rng)


def test_strict_joint_names_apply_at_once_to_lists_seen_before(arm_node, arm_model):
    model = arm_model
    rng = np.random.default_rng(34)
    names = list(model.joint_names) + ["finger_joint"]
    q, v = random_state(model, rng)
    stamp = arm_node.publish_state(names, np.append(q, 0.0), np.append(v, 0.0))
    arm_node.wait_outputs(stamp)
    baseline = arm_node.latest_diagnostics(arm_node.now_ns())
    assert arm_node.set_parameter("strict_joint_names", True)
    try:
        refused = arm_node.publish_state(names, np.append(q, 0.0), np.append(v, 0.0))
        serve_good_state(arm_node, model, rng)
        assert arm_node.outputs_at(refused) == {}
        counts = arm_node.latest_diagnostics(arm_node.now_ns())
        assert rejected(counts, baseline, "unknown_joints") == 1
    finally:
        assert arm_node.set_parameter("strict_joint_names", False)
    stamp = arm_node.publish_state(names, np.append(q, 0.0), np.append(v, 0.0))
    arm_node.wait_outputs(stamp)


def test_the_description_topic_takes_xml_only(arm_node, arm_model):
    """A file path on the topic is refused, never opened (here, the robot's own URDF: opened, it would load)."""
    baseline = arm_node.latest_diagnostics(arm_node.now_ns())
    assert arm_node.set_parameter("log_throttle_period", 0.0)  # log every refusal
    try:
        arm_node.description.publish(String(data=str(ARM_URDF)))
        arm_node.spin_until(lambda: "not URDF XML" in arm_node.log_text(), REPLY_TIMEOUT, "the refusal")
    finally:
        assert arm_node.set_parameter("log_throttle_period", THROTTLE)
    counts = arm_node.latest_diagnostics(arm_node.now_ns())
    assert rejected(counts, baseline, "bad_description") == 1
    serve_good_state(arm_node, arm_model, np.random.default_rng(35))


def test_a_megabyte_joint_name_is_logged_cut(arm_node, arm_model):
    huge = "j" * 1_000_000
    assert arm_node.set_parameter("log_throttle_period", 0.0)  # log every refusal
    try:
        stamp = arm_node.publish_state([huge], [0.0], [0.0])
        arm_node.spin_until(lambda: "1000000 characters" in arm_node.log_text(), REPLY_TIMEOUT, "the refusal")
    finally:
        assert arm_node.set_parameter("log_throttle_period", THROTTLE)
    assert arm_node.outputs_at(stamp) == {}
    assert max(len(line) for line in arm_node.log_text().splitlines()) < 3000
    serve_good_state(arm_node, arm_model, np.random.default_rng(36))


def test_a_revolute_joint_named_like_the_free_flyer_is_an_ordinary_joint():
    text = ARM_URDF.read_text().replace('"joint1"', f'"{rd.FREE_FLYER_JOINT}"')
    model = rd.load_urdf(text)
    assert not model.has_floating_base
    with tempfile.NamedTemporaryFile("w", suffix=".urdf", delete=False) as urdf:
        urdf.write(text)
    harness = NodeUnderTest({"urdf_path": urdf.name}, "root_joint_named")
    try:
        harness.wait_ready()
        rng = np.random.default_rng(37)
        q, v = random_state(model, rng)
        # No odometry: the joint's position and velocity come from joint_states like any other's.
        stamp = harness.publish_state(model.joint_names, q, v)
        outputs = harness.wait_outputs(stamp, timeout=STARTUP_TIMEOUT)
        check_outputs_against_library(model, outputs, q, v)
        assert outputs["bias_torques"].name[0] == rd.FREE_FLYER_JOINT
    finally:
        harness.close()
        os.unlink(urdf.name)


def test_with_floating_base_a_urdf_joint_named_like_the_free_flyer_is_refused_clearly(floating_node):
    baseline = floating_node.latest_diagnostics(floating_node.now_ns())
    text = ARM_URDF.read_text().replace('"joint1"', f'"{rd.FREE_FLYER_JOINT}"')
    assert floating_node.set_parameter("log_throttle_period", 0.0)  # log every refusal
    try:
        floating_node.description.publish(String(data=text))
        floating_node.spin_until(lambda: "free flyer that floating_base adds" in floating_node.log_text(),
                                 REPLY_TIMEOUT, "the refusal")
    finally:
        assert floating_node.set_parameter("log_throttle_period", THROTTLE)
    counts = floating_node.latest_diagnostics(floating_node.now_ns())
    assert rejected(counts, baseline, "bad_description") == 1


def test_a_failure_while_applying_parameters_restores_them():
    """The set-parameters callback never raises: what fails while a change is applied (here the timer the
    new rate needs) is refused with the previous values in force. In this process, to make create_timer fail."""
    from rclpy.parameter import Parameter

    from rbd_deriv.nodes.dynamics_node import DynamicsNode

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=1 + os.getpid() % 200)
    try:
        node = DynamicsNode(context=context, parameter_overrides=[Parameter("urdf_path", value=str(ARM_URDF))])
        original = node.create_timer

        def refuse_timers(*args, **kwargs):
            raise RuntimeError("timer refused by the middleware")
        node.create_timer = refuse_timers
        result = node.set_parameters([Parameter("publish_mode", value="timer")])[0]
        assert not result.successful and "timer refused" in result.reason
        assert node.get_parameter("publish_mode").value == "on_message"
        assert node._p["publish_mode"] == "on_message" and node._timer is None
        assert node._refusals.counts["internal_error"] == 1
        node.create_timer = original
        assert node.set_parameters([Parameter("publish_mode", value="timer")])[0].successful
        assert node._timer is not None
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_contact_sets_from_parameters_topic_and_service(arm_model):
    """An arm with its end effector held (a point contact, then a frame contact): the linearization is the
    constrained one and carries the forces; the set follows the parameter, then the topic; a bad set is refused,
    counted, and the running set stays."""
    harness = NodeUnderTest({"contact_frames": "[ee_link]"}, "contact_set")  # a domain of its own
    model = arm_model
    rng = np.random.default_rng(31)

    def check(contacts, stamp, q, v):
        lin = harness.wait_outputs(stamp, topics=("linearization",))["linearization"]
        data = model.create_data()
        bias = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()
        expected = [rd.Contact(model, frame, kind) for frame, kind in contacts]
        a, _ = rd.linearize(model, data, q, v, bias, 0.001, contacts=expected or None)
        assert_close(np.array(lin.a).reshape(2 * model.nv, 2 * model.nv), a, what="constrained A")
        read = contact_fields_arrays(lin)
        assert list(zip(read["frames"], read["kinds"])) == contacts
        if expected:
            assert_close(read["forces"], rd.contact_forces(model, data, expected), what="contact forces")
        else:
            assert read["forces"].shape == (0,)

    def state_and_check(contacts):
        q, v = random_state(model, rng)
        check(contacts, harness.publish_state(model.joint_names, q, v), q, v)

    try:
        harness.wait_ready()
        state_and_check([("ee_link", "point")])
        harness.contacts.publish(ContactSet(frames=["link7"], kinds=["frame"]))
        harness.spin_until(lambda: harness.latest_diagnostics(harness.now_ns()).get("contacts") == "link7",
                           REPLY_TIMEOUT, "the topic's contact set")
        state_and_check([("link7", "frame")])
        # Refused: an unknown frame, two contacts on one body, a kind per frame missing; link7 stays.
        # (The topic keeps one message: each is sent once the previous one was counted.)
        for count, bad in enumerate((ContactSet(frames=["no_such_link"]), ContactSet(frames=["ee_link", "ee_joint"]),
                                     ContactSet(frames=["ee_link", "link5"], kinds=["point"])), start=1):
            harness.contacts.publish(bad)
            harness.spin_until(lambda: harness.latest_diagnostics(harness.now_ns()).get(
                "rejected_bad_contacts") == str(count), REPLY_TIMEOUT, f"{count} refused contact sets")
        state_and_check([("link7", "frame")])
        assert "no frame named 'no_such_link'" in harness.log_text()
        # The parameter replaces the topic's set; a bad value is refused whole.
        assert not harness.set_parameter("contact_frames", ["no_such_link"])
        assert harness.set_parameter("contact_frames", [])
        state_and_check([])
        # The service takes a set of its own.
        q, v = random_state(model, rng)
        tau = rng.uniform(-5.0, 5.0, model.nv)
        response = harness.call(ComputeDerivatives.Request(
            q=q.tolist(), v=v.tolist(), tau=tau.tolist(), dt=0.01, linearization=True,
            forward_dynamics_derivatives=True, contact_frames=["link6"], contact_kinds=["point"]))
        assert response.success, response.message
        data = model.create_data()
        contacts = [rd.Contact(model, "link6")]
        dddq_dq = rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)[0].copy()
        assert_close(np.array(response.dddq_dq.data).reshape(model.nv, model.nv), dddq_dq, what="dddq/dq")
        rd.linearize(model, data, q, v, tau, 0.01, contacts=contacts)
        read = contact_fields_arrays(response.linearization)
        assert read["frames"] == ["link6"]
        assert_close(read["forces"], rd.contact_forces(model, data, contacts), what="forces of the service")
        refused = harness.call(ComputeDerivatives.Request(q=q.tolist(), v=v.tolist(), tau=tau.tolist(), dt=0.01,
                                                          linearization=True, contact_frames=["nowhere"]))
        assert not refused.success and "nowhere" in refused.message
    finally:
        harness.close()


def test_a_best_effort_joint_states_publisher_is_served(arm_model):
    """A driver publishing joint_states best effort (REP 2003's sensor data profile) gets the outputs at its
    states: the node's state subscription is best effort by default, which matches it."""
    harness = NodeUnderTest({}, "best_effort")
    try:
        harness.wait_ready()
        best_effort = harness.node.create_publisher(JointState, "joint_states",
                                                    QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT))
        harness.spin_until(lambda: best_effort.get_subscription_count() > 0, REPLY_TIMEOUT, "a match")
        q, v = random_state(arm_model, np.random.default_rng(11))
        stamp = harness.publish_state(arm_model.joint_names, q, v, publisher=best_effort)
        check_outputs_against_library(arm_model, harness.wait_outputs(stamp, timeout=STARTUP_TIMEOUT), q, v)
    finally:
        harness.close()
