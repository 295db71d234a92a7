"""Live replay (rbd_deriv.replay.live): ``bag-play`` started as a process, its messages received over DDS,
and played into a running dynamics node that takes its time from the recording (``/clock``)."""

from __future__ import annotations

import os
import shutil
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

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.replay import bagio, synthetic  # noqa: E402
from rbd_deriv.testing.robots import bundled_urdf  # noqa: E402

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
    received, out, _ = _subscribe_and_play(recording, [("/joint_states", JointState), ("/robot_description", String)],
                                           "--wait-for-subscribers", "60", "--delay", "0.5")
    assert "published 301 messages" in out
    assert [m.data for m, _ in received["/robot_description"]] == ["<robot name='r'/>"]
    states = received["/joint_states"]
    assert len(states) == COUNT
    np.testing.assert_array_equal([m.position[0] for m, _ in states], np.arange(COUNT))
    # Recorded pace 2 ms: the whole playback spans about 0.6 s (loose bounds: a shared CI machine).
    span = states[-1][1] - states[0][1]
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


def _subscribe_and_play(bag: Path, topics, *play_arguments: str, publishers_first=()):
    """Subscribe to ``topics`` here, run bag-play; returns ``(message, arrival time)`` per topic, its stdout
    and stderr. ``publishers_first``: topics whose publisher (a node under test) must be matched with the
    subscription here before playing starts."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    node = rclpy.create_node("replay_listener", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    received = {topic: [] for topic, _ in topics}
    for topic, kind in topics:
        if topic == "/robot_description":
            qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        else:
            best_effort = ReliabilityPolicy.BEST_EFFORT if topic == "/clock" else ReliabilityPolicy.RELIABLE
            qos = QoSProfile(depth=1000, reliability=best_effort)
        subscription = node.create_subscription(
            kind, topic, lambda m, into=received[topic]: into.append((m, time.perf_counter())), qos)
        if topic in publishers_first:
            deadline = time.monotonic() + TIMEOUT_S
            while subscription.get_publisher_count() == 0 and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
    player = subprocess.Popen(
        [sys.executable, "-m", "rbd_deriv.replay.live", str(bag), "--quiet", *play_arguments],
        env=dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while player.poll() is None and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        for _ in range(50):
            executor.spin_once(timeout_sec=0.01)
        out, err = player.communicate(timeout=10)
    finally:
        if player.poll() is None:
            player.kill()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert player.returncode == 0, err
    return received, out, err


def test_clock_carries_the_recorded_time(recording):
    from rosgraph_msgs.msg import Clock

    received, out, _ = _subscribe_and_play(recording, [("/clock", Clock), ("/joint_states", JointState)],
                                           "--clock", "50", "--wait-for-subscribers", "60", "--delay", "0.5",
                                           "--topics", "/joint_states")
    clock = np.array([m.clock.sec * 10**9 + m.clock.nanosec for m, _ in received["/clock"]])
    # 300 messages 2 ms apart from t = 1 s: ticks every 20 ms of recorded time, from the first message.
    expected = 10**9 + np.arange(0, (COUNT - 1) * 2_000_000 + 1, 20_000_000)
    assert "30 /clock messages" in out
    np.testing.assert_array_equal(clock, expected)
    assert len(received["/joint_states"]) == COUNT


def test_waits_only_for_the_topics_it_plays(tmp_path):
    store = bagio.package_typestore()
    stamps = 10**9 + np.arange(20) * 1_000_000
    rows = synthetic.joint_state_rows(store, JOINTS, stamps, np.zeros((20, 2)), np.zeros((20, 2)), None)
    # A second topic nobody listens to, recorded but not played.
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(t), r.tobytes()) for t, r in zip(stamps, rows)],
                              odometry=[(int(stamps[0]), synthetic.odometry_message(store, int(stamps[0]), np.array([0, 0, 0, 0, 0, 0, 1.0]), np.zeros(6)))])
    start = time.monotonic()
    received, out, err = _subscribe_and_play(tmp_path / "bag", [("/joint_states", JointState)], "--topics",
                                             "/joint_states", "--wait-for-subscribers", "120", "--delay", "0.2")
    assert len(received["/joint_states"]) == 20 and "no subscriber" not in err
    assert time.monotonic() - start < 100  # it did not wait out its 120 s for /odom
    # Played, /odom has no subscriber: said so after the wait, and played anyway.
    received, out, err = _subscribe_and_play(tmp_path / "bag", [("/joint_states", JointState)],
                                             "--wait-for-subscribers", "1", "--delay", "0.2")
    # (/joint_states may be listed too when discovery takes longer than the second on a loaded machine.)
    warning = [line for line in err.splitlines() if "no subscriber after 1.0 s on" in line]
    assert len(warning) == 1 and "'/odom'" in warning[0] and "/odom: 1" in out


def test_an_empty_topic_plays_nothing_and_says_so(tmp_path):
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = bagio.package_typestore()
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.add_connection("/joint_states", bagio.JOINT_STATE_TYPE, typestore=store)
    result = _play(tmp_path / "bag", "--delay", "0")
    assert result.returncode == 0, result.stderr
    assert "published 0 messages" in result.stdout and "nothing to publish" in result.stdout
    assert "nan" not in result.stdout


def _start_dynamics_node(use_sim_time: bool, log: Path) -> subprocess.Popen:
    script = shutil.which("dynamics_node", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "rbd_deriv.nodes.dynamics_node"]
    # Default parameters but the URDF and the clock.
    command += ["--ros-args", "-p", f"urdf_path:={ARM}", "-p", f"use_sim_time:={'true' if use_sim_time else 'false'}"]
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
    return subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _play_into_node(bag: Path, use_sim_time: bool, tmp_path: Path, *play_arguments: str):
    """Start a dynamics node, play the bag into it, return the linearizations it published and its log."""
    from rbd_deriv.msg import Linearization

    log = tmp_path / f"node_{use_sim_time}.log"
    process = _start_dynamics_node(use_sim_time, log)
    try:
        # bag-play waits until the node subscribes to /joint_states, which it does once its model is built.
        received, out, err = _subscribe_and_play(bag, [("/linearization", Linearization)], "--topics", "/joint_states",
                                                 "--wait-for-subscribers", str(TIMEOUT_S), "--delay", "2",
                                                 *play_arguments, publishers_first=("/linearization",))
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return [m for m, _ in received["/linearization"]], out, log.read_text(errors="replace")


ARM = bundled_urdf("rbd_arm7")


def test_live_replay_into_the_dynamics_node_on_recorded_time(tmp_path):
    # A recording made long ago: against the wall clock every state is stale. With --clock and
    # use_sim_time the node compares stamps with the recording's time and computes at every message.
    store = bagio.package_typestore()
    model = rd.load_urdf(str(ARM))
    motion = synthetic.sinusoid_motion(7, 1.0, 200.0, seed=5, start_ns=1_600_000_000_000_000_000)
    effort = rd.rnea_batch(model, motion.position, motion.velocity, motion.acceleration)
    rows = synthetic.joint_state_rows(store, model.joint_names, motion.stamp_ns, motion.position, motion.velocity, effort)
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(t) + 300_000, r.tobytes()) for t, r in zip(motion.stamp_ns, rows)])
    count = motion.stamp_ns.size

    outputs, out, log = _play_into_node(tmp_path / "bag", True, tmp_path, "--clock")
    assert f"published {count} messages" in out
    stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in outputs]
    assert stamps == motion.stamp_ns.tolist(), log
    data = model.create_data()
    for k in (0, count // 2, count - 1):
        message = outputs[k]
        q, v = np.asarray(message.x[:7]), np.asarray(message.x[7:])
        np.testing.assert_array_equal(q, motion.position[k])
        a, b = rd.linearize(model, data, q, v, np.asarray(message.u), message.dt)
        np.testing.assert_allclose(np.reshape(message.a, (14, 14)), a, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.reshape(message.b, (14, 7)), b, rtol=1e-9, atol=1e-12)

    # The same node on the wall clock refuses every message as stale, as the issue found.
    outputs, out, log = _play_into_node(tmp_path / "bag", False, tmp_path)
    assert f"published {count} messages" in out
    assert outputs == [] and "stale" in log


def test_message_class_lookup():
    from rbd_deriv.replay.live import message_class

    assert message_class("sensor_msgs/msg/JointState") is JointState
    with pytest.raises(bagio.BagError, match="not installed"):
        message_class("no_such_pkg/msg/Thing")
    with pytest.raises(bagio.BagError, match="unexpected message type name"):
        message_class("JointState")


def test_play_benchmark_reports_cpu_and_lateness_beside_a_sleep_loop(capsys):
    from rbd_deriv.bench import bag_play

    assert bag_play.main(["--seconds", "1", "--rate", "200", "--clock", "50"]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.strip().startswith("1 ")][0].replace("|", " ").replace("%", " ").split()
    cpu, p50, p99, worst, ref50, ref99, ref_max = (float(x) for x in row[2:9])
    assert 0 <= cpu <= 100 and 0 < p50 <= p99 <= worst and 0 < ref50 <= ref99 <= ref_max
    assert "targets on an idle machine" in out
