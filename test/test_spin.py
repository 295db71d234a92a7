"""The node plumbing of rbd_deriv.nodes.spin: polled subscriptions and the choice of messages."""

from __future__ import annotations

import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from rbd_deriv.nodes.spin import PolledSubscription, guard, newest_covering  # noqa: E402


def joint_state(names, positions) -> JointState:
    return JointState(name=list(names), position=[float(p) for p in positions])


def apply_in_order(messages) -> dict:
    """What a joint-state map holds after applying ``messages`` in order."""
    state = {}
    for message in messages:
        state.update(zip(message.name, message.position))
    return state


def test_newest_covering_keeps_the_newest_value_of_every_joint():
    names = frozenset(["a", "b", "c", "d"])
    burst = [joint_state("ab", [1, 1]), joint_state("cd", [2, 2]), joint_state("ab", [3, 3]),
             joint_state("abcd", [4, 4, 4, 4]), joint_state("cd", [5, 5]), joint_state("ab", [6, 6])]
    serialized = [serialize_message(m) for m in burst]
    kept = newest_covering(serialized, JointState, names)
    # The two newest messages name every joint: nothing older is deserialized or applied.
    assert [list(m.name) for m in kept] == [["c", "d"], ["a", "b"]]
    assert apply_in_order(kept) == apply_in_order(burst) == {"a": 6, "b": 6, "c": 5, "d": 5}


def test_newest_covering_hands_over_unknown_joints_and_partial_bursts():
    names = frozenset(["a", "b"])
    burst = [joint_state("a", [1]), joint_state("x", [9]), joint_state("a", [2])]
    kept = newest_covering([serialize_message(m) for m in burst], JointState, names)
    # b never came: every message that still matters is kept, the unknown joint for the caller
    # to refuse or ignore, the older value of a is not.
    assert [list(m.name) for m in kept] == [["x"], ["a"]]
    assert apply_in_order(kept) == {"x": 9, "a": 2}
    assert newest_covering([], JointState, names) == []


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
        assert newest_covering(serialized, JointState, frozenset("j"))[0].position[0] == 7.0
        polled.destroy()
    finally:
        rclpy.shutdown(context=context)


def test_guard_hands_errors_over_and_passes_results_through():
    errors = []
    assert guard(lambda x: 2 * x, errors.append)(21) == 42
    assert guard(lambda: 1 / 0, errors.append)() is None
    assert len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)
