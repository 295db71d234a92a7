"""Live replay (rbd_deriv.replay.live): ``bag-play`` started as a process, its messages received over DDS."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rbd_deriv.replay import bagio, synthetic  # noqa: E402

# A domain of its own keeps other tests' /joint_states traffic out.
DOMAIN_ID = 73
JOINTS = ["joint1", "joint2"]
COUNT = 300
RATE_HZ = 500.0


# Generous: a process importing rbd_deriv on a cold numba cache compiles the core first.
TIMEOUT_S = 300.0


def _play(bag: Path, *extra: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID))
    command = [sys.executable, "-m", "rbd_deriv.replay.live", str(bag), "--quiet", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def recording(tmp_path):
    store = bagio.package_typestore()
    stamps = 10**9 + np.arange(COUNT) * int(1e9 / RATE_HZ)
    position = np.column_stack([np.arange(COUNT), -np.arange(COUNT)]).astype(float)
    rows = synthetic.joint_state_rows(store, JOINTS, stamps, position, np.zeros((COUNT, 2)), None)
    synthetic.write_recording(
        tmp_path / "bag", store, "mcap", [(int(t), r.tobytes()) for t, r in zip(stamps, rows)], robot_description="<robot name='r'/>"
    )
    return tmp_path / "bag"


def test_play_publishes_every_message_with_recorded_timing(recording):
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    node = rclpy.create_node("replay_listener", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    received, arrival, descriptions = [], [], []
    node.create_subscription(
        JointState, "/joint_states", lambda m: (received.append(list(m.position)), arrival.append(time.perf_counter())), COUNT
    )
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(String, "/robot_description", lambda m: descriptions.append(m.data), latched)
    player = subprocess.Popen(
        [sys.executable, "-m", "rbd_deriv.replay.live", str(recording), "--quiet", "--wait-for-subscribers", "60", "--delay", "0.5"],
        env=dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while player.poll() is None and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        for _ in range(50):  # drain what is still in flight
            executor.spin_once(timeout_sec=0.01)
        out, err = player.communicate(timeout=10)
    finally:
        if player.poll() is None:
            player.kill()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert player.returncode == 0, err
    assert "published 301 messages" in out
    assert descriptions == ["<robot name='r'/>"]
    assert len(received) == COUNT
    np.testing.assert_array_equal(np.array(received)[:, 0], np.arange(COUNT))
    # Recorded pace 2 ms: the whole playback spans about 0.6 s (loose bounds: a shared CI machine).
    span = arrival[-1] - arrival[0]
    assert 0.4 < span < 3.0


def test_rate_factor_speeds_playback(recording):
    start = time.perf_counter()
    result = _play(recording, "--rate", "4", "--delay", "0.2", "--topics", "/joint_states")
    assert result.returncode == 0, result.stderr
    assert "published 300 messages" in result.stdout and "/robot_description" not in result.stdout
    words = result.stdout.split()
    played_s = float(words[words.index("in") + 1])
    recorded_s = (COUNT - 1) / RATE_HZ
    # Never early; late only by scheduling delays, which a loaded machine stretches: clearly faster than 1x.
    assert recorded_s / 4 <= played_s < 0.75 * recorded_s
    assert time.perf_counter() - start < TIMEOUT_S


def test_bad_input_exits_2_with_a_clear_message(tmp_path, recording):
    missing = _play(tmp_path / "absent", "--delay", "0")
    assert missing.returncode == 2 and "bag not found" in missing.stderr
    unknown = _play(recording, "--topics", "/nope", "--delay", "0")
    assert unknown.returncode == 2 and "no topic ['/nope']" in unknown.stderr
    from rbd_deriv.replay.live import play

    # Refused before any ROS context is created, so it can run in this process.
    with pytest.raises(bagio.BagError, match="--rate must be > 0"):
        play(recording, rate=0.0)


def test_message_class_lookup():
    from rbd_deriv.replay.live import message_class

    assert message_class("sensor_msgs/msg/JointState") is JointState
    with pytest.raises(bagio.BagError, match="not installed"):
        message_class("no_such_pkg/msg/Thing")
    with pytest.raises(bagio.BagError, match="unexpected message type name"):
        message_class("JointState")
