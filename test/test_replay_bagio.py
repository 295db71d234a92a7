"""Decoding bags into arrays (rbd_deriv.replay.bagio): both storages, joint mapping, bad messages, bad bags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rbd_deriv.replay import bagio, synthetic
from rbd_deriv.replay.storage import BagSource

JOINTS = ["joint1", "joint2", "joint3"]
STORAGES = ["mcap", "sqlite3"]


@pytest.fixture(scope="module")
def store():
    return bagio.package_typestore()


def _message(store, names, position, velocity, effort, stamp_ns, frame=""):
    types = store.types
    msg = types["sensor_msgs/msg/JointState"](
        header=types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=int(stamp_ns // 10**9), nanosec=int(stamp_ns % 10**9)), frame_id=frame
        ),
        name=list(names),
        position=np.asarray(position, dtype=float),
        velocity=np.asarray(velocity, dtype=float),
        effort=np.asarray(effort, dtype=float),
    )
    return bytes(store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))


def _read(path: Path, store, joints=JOINTS, topic="/joint_states"):
    return bagio.read_joint_states(BagSource(path), store, topic, joints)


@pytest.mark.parametrize("storage", STORAGES)
def test_values_and_stamps_round_trip(tmp_path, store, storage):
    rng = np.random.default_rng(1)
    count = 300
    stamps = 5_000_000_000 + np.arange(count) * 1_000_000
    values = rng.normal(size=(count, 9))
    rows = synthetic.joint_state_rows(store, JOINTS, stamps, values[:, :3], values[:, 3:6], values[:, 6:], frame_id="base")
    synthetic.write_recording(tmp_path / "bag", store, storage, [(int(t) + 7, r.tobytes()) for t, r in zip(stamps, rows)])
    series = _read(tmp_path / "bag", store)
    states = series.states
    assert len(series) == count and series.rejections.rejected == 0
    np.testing.assert_array_equal(states.index, np.arange(count))
    np.testing.assert_array_equal(states.stamp_ns, stamps)
    np.testing.assert_array_equal(states.bag_ns, stamps + 7)
    np.testing.assert_array_equal(states.position, values[:, :3])
    np.testing.assert_array_equal(states.velocity, values[:, 3:6])
    np.testing.assert_array_equal(states.effort, values[:, 6:])
    assert series.frame_id == "base"


def test_any_order_extra_joints_and_split_publishers(tmp_path, store):
    # Publisher A: joint3, gripper, joint1 ... but joint2 comes alone from publisher B: both incomplete.
    # Publisher C: full state in another order with an extra joint.
    raws = [
        (1, _message(store, ["joint3", "gripper", "joint1"], [3, 9, 1], [30, 90, 10], [], 1_000)),
        (2, _message(store, ["joint2"], [2], [20], [], 1_000)),
        (3, _message(store, ["joint2", "joint3", "gripper", "joint1"], [2, 3, 9, 1], [20, 30, 90, 10], [0.2, 0.3, 0.9, 0.1], 2_000)),
        (4, _message(store, ["joint2", "joint3", "gripper", "joint1"], [2.5, 3.5, 9, 1.5], [25, 35, 90, 15], [0.2, 0.3, 0.9, 0.1], 3_000)),
    ]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", raws)
    series = _read(tmp_path / "bag", store)
    assert series.rejections.counts() == {"incomplete": 2}
    assert "joint2" in series.rejections.examples["incomplete"]
    np.testing.assert_array_equal(series.states.position[2:], [[1, 2, 3], [1.5, 2.5, 3.5]])
    np.testing.assert_array_equal(series.states.velocity[3], [15, 25, 35])
    np.testing.assert_array_equal(series.states.effort[2], [0.1, 0.2, 0.3])
    assert series.ignored_joints == ["gripper"]


def test_bad_messages_are_counted_not_fatal(tmp_path, store):
    good = lambda k: _message(store, JOINTS, [k, k, k], [0, 0, 0], [1, 1, 1], 1_000 * (k + 1))  # noqa: E731
    raws = [(k, good(k)) for k in range(10)]
    raws[2] = (2, _message(store, JOINTS, [0, np.nan, 0], [0, 0, 0], [1, 1, 1], 3_000))
    raws[3] = (3, _message(store, JOINTS, [0, 0, 0], [0, np.inf, 0], [1, 1, 1], 4_000))
    raws[4] = (4, _message(store, JOINTS, [0, 0], [0, 0, 0], [1, 1, 1], 5_000))
    raws[5] = (5, _message(store, JOINTS, [0, 0, 0], [], [1, 1, 1], 6_000))
    raws[6] = (6, b"\x00\x01\x00\x00\xff\xff")
    raws[7] = (7, _message(store, JOINTS, [0, 0, 0], [0, 0, 0], [1, np.nan, 1], 8_000))
    raws[8] = (8, _message(store, ["joint1", "joint1", "joint2", "joint3"], [0, 0, 0, 0], [0, 0, 0, 0], [], 9_000))
    synthetic.write_recording(tmp_path / "bag", store, "sqlite3", raws)
    series = _read(tmp_path / "bag", store)
    assert series.rejections.counts() == {
        "non_finite": 2,
        "length_mismatch": 1,
        "missing_velocity": 1,
        "corrupt_message": 1,
        "non_finite_effort": 1,
        "duplicate_joint": 1,
    }
    assert np.flatnonzero(series.states.usable).tolist() == [0, 1, 9]


def test_messages_without_effort_are_usable(tmp_path, store):
    raws = [(k, _message(store, JOINTS, [k] * 3, [0] * 3, [], 1000 * (k + 1))) for k in range(5)]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", raws)
    series = _read(tmp_path / "bag", store)
    assert series.rejections.rejected == 0
    assert np.isnan(series.states.effort).all()


def test_robot_description_and_package_types(tmp_path, store):
    raws = [(10, _message(store, JOINTS, [0] * 3, [0] * 3, [], 1000))]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", raws, robot_description="<robot name='r'/>")
    assert bagio.read_robot_description(BagSource(tmp_path / "bag"), store) == "<robot name='r'/>"
    assert "rbd_deriv/msg/Linearization" in store.fielddefs
    assert "rbd_deriv/msg/Matrix" in store.fielddefs
    fields = [name for name, _ in store.fielddefs["rbd_deriv/msg/Linearization"][1]]
    assert fields[:2] == ["header", "joint_names"] and "x_next" in fields


def test_missing_topic_names_what_the_bag_has(tmp_path, store):
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(1, _message(store, JOINTS, [0] * 3, [0] * 3, [], 1))])
    with pytest.raises(bagio.BagError, match=r"no topic '/states'.*/joint_states \[sensor_msgs/msg/JointState\]"):
        _read(tmp_path / "bag", store, topic="/states")
    source = BagSource(tmp_path / "bag")
    with pytest.raises(bagio.BagError, match="no topic '/robot_description'"):
        bagio.read_robot_description(source, store)
    with pytest.raises(bagio.BagError, match="has type sensor_msgs/msg/JointState, expected nav_msgs/msg/Odometry"):
        bagio.read_odometry(source, store, "/joint_states")


def test_joint_names_that_do_not_match_the_urdf(tmp_path, store):
    raws = [(k, _message(store, ["a", "b", "c"], [0] * 3, [0] * 3, [], 1000 * (k + 1))) for k in range(3)]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", raws)
    with pytest.raises(bagio.BagError, match=r"do not match the URDF.*\['a', 'b', 'c'\].*joint1"):
        _read(tmp_path / "bag", store)


def test_missing_and_corrupt_bags(tmp_path, store):
    with pytest.raises(bagio.BagError, match="bag not found"):
        _read(tmp_path / "nothing", store)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.yaml").write_text("rosbag2_bagfile_information: [not: valid")
    with pytest.raises(bagio.BagError, match="cannot read .*metadata.yaml"):
        _read(broken, store)
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"\x89MCAP0\r\n" + b"\x00" * 64)
    with pytest.raises(bagio.BagError):
        _read(garbage, store)


def test_a_joint_of_the_model_that_no_message_names_is_named(tmp_path, store):
    raws = [(k, _message(store, ["joint1", "joint3"], [0] * 2, [0] * 2, [], 1000 * (k + 1))) for k in range(3)]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", raws)
    with pytest.raises(bagio.BagError, match=r"URDF joints \['joint2'\] appear in no message"):
        _read(tmp_path / "bag", store)


def test_a_cut_mcap_gives_the_messages_before_the_cut(tmp_path, store):
    stamps = np.arange(2000) * 1_000_000 + 1
    position = np.arange(2000.0)[:, None] * np.ones(3)
    rows = synthetic.joint_state_rows(store, JOINTS, stamps, position, np.zeros((2000, 3)), None)
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(t), r.tobytes()) for t, r in zip(stamps, rows)])
    data_file = next((tmp_path / "bag").glob("*.mcap"))
    content = data_file.read_bytes()
    cut = len(content) // 2
    data_file.write_bytes(content[:cut])
    # Every message whose bytes lie wholly before the cut (the file is not compressed).
    whole = sum(content.find(r.tobytes()) + r.size <= cut for r in rows)
    series = _read(tmp_path / "bag", store)
    assert len(series) == whole and 0 < whole < 2000 and series.rejections.rejected == 0
    np.testing.assert_array_equal(series.states.position[:, 0], np.arange(whole))


def test_odometry_round_trip(tmp_path, store):
    stamps = np.array([1_000, 2_000, 3_000])
    # The middle message has another child frame name, so another shape: decoded one by one.
    raws = [
        (
            int(t),
            synthetic.odometry_message(
                store, int(t), np.array([k, 0, 0, 0, 0, 0, 1.0]), np.arange(6.0) + k, child="base_link" if k != 1 else "trunk"
            ),
        )
        for k, t in enumerate(stamps)
    ]
    joint = [(1, _message(store, JOINTS, [0] * 3, [0] * 3, [], 1000))]
    synthetic.write_recording(tmp_path / "bag", store, "sqlite3", joint, odometry=raws[::-1])
    odometry = bagio.read_odometry(BagSource(tmp_path / "bag"), store, "/odom")
    np.testing.assert_array_equal(odometry.stamp_ns, stamps)
    np.testing.assert_array_equal(odometry.position[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(odometry.orientation[:, 3], [1, 1, 1])
    np.testing.assert_array_equal(odometry.angular[2], [5, 6, 7])
    assert odometry.child_frame_id == "base_link"
