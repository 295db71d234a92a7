"""Bulk CDR encoding/decoding (rbd_deriv.replay.cdr) against rosbags' own serializer, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.replay import bagio, cdr

JOINT_STATE = "sensor_msgs/msg/JointState"


@pytest.fixture(scope="module")
def store():
    return bagio.package_typestore()


def _header(store, sec: int, nanosec: int, frame: str):
    types = store.types
    return types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame)


def _joint_state(store, names, values, frame="base", sec=1, nanosec=2, effort=True):
    n = len(names)
    return store.types[JOINT_STATE](
        header=_header(store, sec, nanosec, frame),
        name=list(names),
        position=values[:n],
        velocity=values[n : 2 * n],
        effort=values[2 * n : 3 * n] if effort else np.zeros(0),
    )


# Names and frames of odd lengths put every array at a different alignment.
SHAPES = [
    (["j1"], "b"),
    (["a", "bb", "ccc"], ""),
    (["shoulder_pan", "elbow", "wrist_3_joint", "x"], "odom_frame"),
]


@pytest.mark.parametrize("names, frame", SHAPES)
@pytest.mark.parametrize("effort", [True, False])
def test_joint_state_bulk_encoding_matches_rosbags(store, names, frame, effort):
    rng = np.random.default_rng(len(names))
    count, n = 6, len(names)
    layout = cdr.fixed_layout(store, _joint_state(store, names, np.zeros(3 * n), frame, effort=effort), JOINT_STATE)
    values = rng.normal(size=(count, 3 * n))
    sec = rng.integers(0, 2**31 - 1, count)
    nanosec = rng.integers(0, 10**9, count)
    fields = {
        ("header", "stamp", "sec"): sec,
        ("header", "stamp", "nanosec"): nanosec,
        ("position",): values[:, :n],
        ("velocity",): values[:, n : 2 * n],
    }
    if effort:
        fields[("effort",)] = values[:, 2 * n :]
    rows = cdr.encode_batch(layout, fields)
    for k in range(count):
        message = _joint_state(store, names, values[k], frame, int(sec[k]), int(nanosec[k]), effort)
        assert rows[k].tobytes() == bytes(store.serialize_cdr(message, JOINT_STATE, little_endian=True))


@pytest.mark.parametrize("typename", ["rbd_deriv/msg/Linearization", "rbd_deriv/msg/Matrix"])
def test_package_messages_bulk_encoding_matches_rosbags(store, typename):
    rng = np.random.default_rng(3)
    msg_type = store.types[typename]
    nv = 3

    def build(k, numbers):
        if typename.endswith("Matrix"):
            return msg_type(header=_header(store, k, k, "f"), name="M_inverse", names=["a", "bb", "ccc"], rows=nv, cols=nv, data=numbers[: nv * nv])
        return msg_type(
            header=_header(store, k, k, "f"),
            joint_names=["a", "bb", "ccc"],
            dt=float(numbers[0]),
            nx=2 * nv,
            nu=nv,
            nq=nv,
            nv=nv,
            x=numbers[:6],
            u=numbers[6:9],
            a=numbers[:36],
            b=numbers[36:54],
            x_next=numbers[54:60],
            nc=0,
            contact_forces=np.zeros(0),
            contact_frames=[],
            contact_kinds=[],
        )

    numbers = rng.normal(size=(4, 60))
    layout = cdr.fixed_layout(store, build(0, numbers[0]), typename)
    if typename.endswith("Matrix"):
        fields = {("data",): numbers[:, :9]}
    else:
        fields = {
            ("dt",): numbers[:, 0],
            ("x",): numbers[:, :6],
            ("u",): numbers[:, 6:9],
            ("a",): numbers[:, :36],
            ("b",): numbers[:, 36:54],
            ("x_next",): numbers[:, 54:60],
        }
    fields[("header", "stamp", "sec")] = np.arange(4)
    fields[("header", "stamp", "nanosec")] = np.arange(4)
    rows = cdr.encode_batch(layout, fields)
    for k in range(4):
        assert rows[k].tobytes() == bytes(store.serialize_cdr(build(k, numbers[k]), typename, little_endian=True))


def test_odometry_layout_reads_every_field(store):
    types = store.types
    vector = types["geometry_msgs/msg/Vector3"]
    message = types["nav_msgs/msg/Odometry"](
        header=_header(store, 5, 6, "odom"),
        child_frame_id="base_link",
        pose=types["geometry_msgs/msg/PoseWithCovariance"](
            pose=types["geometry_msgs/msg/Pose"](
                position=types["geometry_msgs/msg/Point"](x=1.0, y=2.0, z=3.0),
                orientation=types["geometry_msgs/msg/Quaternion"](x=0.1, y=0.2, z=0.3, w=0.9),
            ),
            covariance=np.arange(36.0),
        ),
        twist=types["geometry_msgs/msg/TwistWithCovariance"](
            twist=types["geometry_msgs/msg/Twist"](linear=vector(x=4.0, y=5.0, z=6.0), angular=vector(x=7.0, y=8.0, z=9.0)),
            covariance=np.zeros(36),
        ),
    )
    raw = bytes(store.serialize_cdr(message, "nav_msgs/msg/Odometry"))
    layout = cdr.layout_of_raw(store, raw, "nav_msgs/msg/Odometry")
    paths = [("pose", "pose", "orientation", "w"), ("twist", "twist", "angular", "y"), ("pose", "covariance"), ("header", "stamp", "nanosec")]
    matched, values = cdr.decode_batch(layout, [raw], paths)
    assert matched.tolist() == [True]
    assert values[paths[0]][0, 0] == 0.9
    assert values[paths[1]][0, 0] == 8.0
    np.testing.assert_array_equal(values[paths[2]][0], np.arange(36.0))
    assert values[paths[3]][0, 0] == 6


def test_decode_accepts_only_the_same_shape(store):
    names = ["a", "bb", "ccc"]
    first = bytes(store.serialize_cdr(_joint_state(store, names, np.arange(9.0)), JOINT_STATE))
    same = bytes(store.serialize_cdr(_joint_state(store, names, -np.arange(9.0), sec=7, nanosec=8), JOINT_STATE))
    # Same byte length, one letter of one name changed: must not be taken for the template's shape.
    renamed = bytes(store.serialize_cdr(_joint_state(store, ["a", "bb", "ccd"], np.arange(9.0)), JOINT_STATE))
    other = bytes(store.serialize_cdr(_joint_state(store, names[:2], np.arange(6.0)), JOINT_STATE))
    layout = cdr.layout_of_raw(store, first, JOINT_STATE)
    matched, values = cdr.decode_batch(layout, [first, renamed, same, other, b"\x00\x01"], [("position",), ("header", "stamp", "sec")])
    assert matched.tolist() == [True, False, True, False, False]
    np.testing.assert_array_equal(values[("position",)], [[0.0, 1.0, 2.0], [-0.0, -1.0, -2.0]])
    np.testing.assert_array_equal(values[("header", "stamp", "sec")].ravel(), [1, 7])


def test_recorded_padding_is_tolerated(store):
    # Some middlewares pad the message to 4 bytes and leave garbage in alignment gaps.
    message = _joint_state(store, ["a", "bb", "ccc"], np.arange(9.0), frame="x")
    raw = bytearray(store.serialize_cdr(message, JOINT_STATE))
    layout = cdr.fixed_layout(store, message, JOINT_STATE)
    gaps = [i for i in range(4, len(raw)) if not layout.structural[i] and not any(f.offset <= i < f.offset + f.nbytes for f in layout.fields)]
    assert gaps, "the test shape should have alignment padding"
    for i in gaps:
        raw[i] = 0xAB
    raw += b"\x00\x00"
    recorded = cdr.layout_of_raw(store, bytes(raw), JOINT_STATE)
    matched, values = cdr.decode_batch(recorded, [bytes(raw)], [("velocity",)])
    assert matched.tolist() == [True]
    np.testing.assert_array_equal(values[("velocity",)][0], [3.0, 4.0, 5.0])


def test_big_endian_and_bad_requests_are_refused(store):
    message = _joint_state(store, ["a"], np.arange(3.0))
    big = bytes(store.serialize_cdr(message, JOINT_STATE, little_endian=False))
    with pytest.raises(ValueError, match="little-endian"):
        cdr.layout_of_raw(store, big, JOINT_STATE)
    layout = cdr.fixed_layout(store, message, JOINT_STATE)
    with pytest.raises(KeyError, match="no numeric field"):
        layout.field("header", "frame_id")
    with pytest.raises(ValueError, match="rows"):
        cdr.encode_batch(layout, {("position",): np.zeros((2, 1)), ("velocity",): np.zeros((3, 1))})
    with pytest.raises(ValueError, match="at least one"):
        cdr.encode_batch(layout, {})
