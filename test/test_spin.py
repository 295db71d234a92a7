"""The node plumbing of rbd_deriv.nodes.spin: polled subscriptions, the choice of messages, and how a node process
ends on SIGINT and SIGTERM."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from rbd_deriv import bundled_urdf  # noqa: E402
from rbd_deriv.msg import Linearization  # noqa: E402
from rbd_deriv.nodes.spin import PolledSubscription, apply_newest, apply_newest_message, guard  # noqa: E402


def joint_state(names, positions) -> JointState:
    return JointState(name=list(names), position=[float(p) for p in positions])


class Recorder:
    """An ``apply`` for apply_newest: records what it is handed, refuses positions of 666 (a bad message)."""

    def __init__(self) -> None:
        self.handed, self.state = [], {}

    def __call__(self, message) -> bool:
        self.handed.append(list(message.name))
        if 666.0 in message.position:
            return False
        self.state.update(zip(message.name, message.position))
        return True


def run(burst, names) -> tuple:
    recorder = Recorder()
    superseded = apply_newest([serialize_message(m) for m in burst], JointState, frozenset(names), recorder)
    return recorder, superseded


def test_apply_newest_keeps_the_newest_value_of_every_joint():
    burst = [joint_state("ab", [1, 1]), joint_state("cd", [2, 2]), joint_state("ab", [3, 3]),
             joint_state("abcd", [4, 4, 4, 4]), joint_state("cd", [5, 5]), joint_state("ab", [6, 6])]
    recorder, superseded = run(burst, "abcd")
    # The two newest messages name every joint: nothing older is deserialized or applied.
    assert recorder.handed == [["c", "d"], ["a", "b"]] and superseded == 4
    assert recorder.state == {"a": 6, "b": 6, "c": 5, "d": 5}


def test_what_apply_newest_skips_is_handed_over_to_be_judged():
    burst = [joint_state("ab", [666, 1]), joint_state("ab", [2, 2]), joint_state("ab", [3, 3]),
             joint_state("ab", [666, 4])]
    skipped = []
    recorder = Recorder()
    superseded = apply_newest([serialize_message(m) for m in burst], JointState, frozenset("ab"), recorder,
                              lambda message: skipped.append(list(message.position)))
    # The newest is refused, the one before it taken; the two older ones are skipped, oldest first.
    assert recorder.state == {"a": 3, "b": 3} and superseded == 2 and skipped == [[666, 1], [2, 2]]


def test_apply_newest_message_takes_the_newest_accepted_one():
    burst = [joint_state("a", [1]), joint_state("a", [2]), joint_state("a", [666]), joint_state("a", [666])]
    skipped = []
    recorder = Recorder()
    superseded = apply_newest_message([serialize_message(m) for m in burst], JointState, recorder,
                                      lambda message: skipped.append(message.position[0]))
    assert recorder.handed == [["a"]] * 3 and recorder.state == {"a": 2}
    assert superseded == 1 and skipped == [1]
    assert apply_newest_message([], JointState, recorder) == 0


def test_apply_newest_hands_over_unknown_joints_and_partial_bursts():
    burst = [joint_state("a", [1]), joint_state("x", [9]), joint_state("a", [2])]
    recorder, superseded = run(burst, "ab")
    # b never came: every message that still matters is applied, the unknown joint for the caller to
    # refuse or ignore, the older value of a is not.
    assert recorder.handed == [["x"], ["a"]] and superseded == 1
    assert recorder.state == {"x": 9, "a": 2}
    recorder, superseded = run([], "ab")
    assert recorder.handed == [] and superseded == 0


def test_a_refused_message_never_hides_older_good_ones():
    # Newest a refused (stamped in the future, say): the newest good a is looked for among older messages.
    burst = [joint_state("a", [1]), joint_state("b", [2]), joint_state("a", [3]), joint_state("b", [666]),
             joint_state("a", [666])]
    recorder, superseded = run(burst, "ab")
    assert recorder.state == {"a": 3, "b": 2}
    assert recorder.handed == [["b"], ["a"], ["b"], ["a"]] and superseded == 1
    # Only bad messages: each newest one is refused in turn, nothing is applied, every one counted.
    recorder, superseded = run([joint_state("ab", [666, 666])] * 3, "ab")
    assert recorder.state == {} and len(recorder.handed) == 3 and superseded == 0


def test_polled_subscription_takes_every_message_once_with_remapping():
    context = rclpy.Context()
    # A rule for the owner only: the owner resolves the name, the helper node must not need it.
    rclpy.init(context=context, args=["--ros-args", "-r", "polled_owner:joint_states:=/polled_test/remapped"])
    try:
        owner = rclpy.create_node("polled_owner", context=context)
        sender = rclpy.create_node("polled_sender", context=context)
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        polled = PolledSubscription(owner, JointState, "joint_states", qos)
        assert polled.topic == "/polled_test/remapped"
        publisher = sender.create_publisher(JointState, "/polled_test/remapped", qos)
        deadline = time.monotonic() + 10.0
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        for k in range(5):
            publisher.publish(joint_state(["j"], [k]))
        received = []
        while len(received) < 5 and time.monotonic() < deadline:
            received += polled.take()
            time.sleep(0.01)
        assert [m.position[0] for m in received] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert polled.take() == []
        publisher.publish(joint_state(["j"], [7]))
        serialized = []
        while not serialized and time.monotonic() < deadline:
            serialized = polled.take(serialized=True)
            time.sleep(0.01)
        assert isinstance(serialized[0], bytes)
        recorder = Recorder()
        assert apply_newest(serialized, JointState, frozenset("j"), recorder) == 0 and recorder.state == {"j": 7.0}
        assert polled.lost == 0
        polled.destroy()
    finally:
        rclpy.shutdown(context=context)


def test_guard_hands_errors_over_and_passes_results_through():
    errors = []
    assert guard(lambda x: 2 * x, errors.append)(21) == 42
    assert guard(lambda: 1 / 0, errors.append)() is None
    assert len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)


def test_messages_lost_before_the_taker_are_counted_per_publisher():
    """A queue of 10 that 200 messages overflow between two takes: the 190 dropped are counted from the gaps
    in each publisher's sequence numbers (Fast DDS raises no message-lost event for them)."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=150 + os.getpid() % 50)
    try:
        owner = rclpy.create_node("lost_owner", context=context)
        sender = rclpy.create_node("lost_sender", context=context)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        polled = PolledSubscription(owner, JointState, "/lost_test", qos)
        publishers = [sender.create_publisher(JointState, "/lost_test", QoSProfile(
            depth=1000, reliability=ReliabilityPolicy.RELIABLE)) for _ in range(2)]
        deadline = time.monotonic() + 10.0
        while any(p.get_subscription_count() == 0 for p in publishers) and time.monotonic() < deadline:
            time.sleep(0.01)
        # The first message of each publisher is where counting starts.
        for publisher in publishers:
            publisher.publish(joint_state(["j"], [0]))
        received = []
        while len(received) < 2 and time.monotonic() < deadline:
            received += polled.take()
            time.sleep(0.01)
        for k in range(1, 101):
            for publisher in publishers:
                publisher.publish(joint_state(["j"], [k]))
        time.sleep(1.0)  # all delivered, 190 of them dropped by the queue of 10
        received = polled.take()
        assert len(received) == 10 and [m.position[0] for m in received][-1] == 100.0
        assert polled.lost == 190
        publishers[0].publish(joint_state(["j"], [101]))
        while not polled.take() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert polled.lost == 190  # no gap, nothing more
        polled.destroy()
    finally:
        rclpy.shutdown(context=context)


def _answering_dynamics_node(log_name: str):
    """A dynamics node process on the bundled arm (``python -m``, as a launch file or a terminal starts it),
    returned once it answers joint_states with a linearization: made, and spinning."""
    domain = random.randint(1, 200)
    environment = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                       PYTHONUNBUFFERED="1")
    stderr = tempfile.TemporaryFile("w+", prefix=log_name)
    process = subprocess.Popen([sys.executable, "-m", "rbd_deriv.nodes.dynamics_node", "--ros-args", "-p",
                                f"urdf_path:={bundled_urdf('rbd_arm7')}"], env=environment,
                               stdout=subprocess.DEVNULL, stderr=stderr)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        node = rclpy.create_node("signal_probe", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        received = []
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(Linearization, "linearization", received.append, qos)
        publisher = node.create_publisher(JointState, "joint_states", qos)
        names = [f"joint{k}" for k in range(1, 8)]
        deadline = time.monotonic() + 300.0
        while not received and process.poll() is None and time.monotonic() < deadline:
            message = JointState(name=names, position=[0.1] * 7, velocity=[0.0] * 7)
            message.header.stamp = node.get_clock().now().to_msg()
            publisher.publish(message)
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    if not received:
        process.kill()
        process.wait()
        stderr.seek(0)
        pytest.fail(f"the node never answered (exit code {process.returncode}):\n{stderr.read()[-3000:]}")
    return process, stderr


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_node_stopped_by_two_signals_exits_with_zero_and_no_traceback(name):
    """Ctrl-C under ``ros2 launch`` sends each node two SIGINTs (the terminal's and launch's); launch itself
    stops a node with SIGINT, then SIGTERM. The first ends the node, the second comes while it cleans up: exit
    code 0, no traceback. (A second signal while the interpreter exits: test_demo.py's reference process.)"""
    number = getattr(signal, name)
    process, stderr = _answering_dynamics_node(f"{name}-")
    try:
        assert process.poll() is None, "the node was running when signalled"
        process.send_signal(number)
        time.sleep(0.05)
        process.send_signal(number)
        code = process.wait(timeout=60.0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr.seek(0)
    output = stderr.read()
    stderr.close()
    assert "Traceback" not in output, output[-3000:]
    assert code == 0, output[-3000:]


@pytest.mark.parametrize("module", ["mpc_node", "dynamics_node", "sim_node"])
def test_a_node_started_with_a_bad_parameter_says_why_in_one_line(module):
    """A node started as a terminal or a launch file starts it, with a parameter outside its range: exit code 2
    and the refusal's reason on one line, no traceback (the managed nodes' clean-up used to raise an
    AttributeError on the half-made node, burying the reason under a second traceback)."""
    environment = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    run = subprocess.run([sys.executable, "-m", f"rbd_deriv.nodes.{module}", "--ros-args", "-p",
                          "diagnostics_period:=-1.0"], env=environment, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "invalid parameters: diagnostics_period must be in [0.01, 3600], got -1.0" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
