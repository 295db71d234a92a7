"""The message layouts and stamps (rbd_deriv.messages), for rclpy messages and rosbags messages alike.

Round trips go through the real serializers: a Linearization and a Matrix packed from arrays, serialized
(rclpy's CDR and rosbags' CDR), read back and unpacked must give the same arrays bit for bit, and each
library must read the message the other one wrote.
"""

from __future__ import annotations

import array
import types

import numpy as np
import pytest

from rbd_deriv.messages import (MATRIX_NAMES, DynamicsMessages, MessageError, answer_fields, contact_fields_arrays,
                                feedback_policy_arrays, feedback_policy_fields, fill_message, linearization_arrays,
                                linearization_fields,
                                linearization_sizes, linearization_views, matrix_array, matrix_fields, matrix_view,
                                ns_to_seconds, ns_to_stamp, odometry_arrays, seconds_to_stamp, set_stamp,
                                stamp_to_ns)

NQ, NV = 9, 8  # the sizes of a model with one free flyer and two revolute joints
NAMES = ["root_joint", "j1", "j2"]


def random_linearization(rng, nq=NQ, nv=NV):
    nx = 2 * nv
    return {"dt": 0.002, "x": rng.normal(size=nq + nv), "u": rng.normal(size=nv), "A": rng.normal(size=(nx, nx)),
            "B": rng.normal(size=(nx, nv)) * 1e-300, "x_next": rng.normal(size=nq + nv)}


def test_stamps():
    for ns in (0, 1, 999_999_999, 1_000_000_000, 1_763_900_123_456_789_012, -1, -1_500_000_000):
        sec, nanosec = ns_to_stamp(ns)
        assert 0 <= nanosec < 10**9 and sec * 10**9 + nanosec == ns
        stamp = set_stamp(types.SimpleNamespace(sec=0, nanosec=0), ns)
        assert (stamp.sec, stamp.nanosec) == (sec, nanosec) and stamp_to_ns(stamp) == ns
    sec, nanosec = ns_to_stamp(np.array([5, 2_000_000_001], dtype=np.int64))
    np.testing.assert_array_equal(sec, [0, 2])
    np.testing.assert_array_equal(nanosec, [5, 1])
    assert seconds_to_stamp(1.25) == (1, 250_000_000) and seconds_to_stamp(0.0200000001) == (0, 20_000_000)
    # Differences of large stamps are exact to the nanosecond.
    assert ns_to_seconds(1_763_900_000_000_000_001, 1_763_900_000_000_000_000) == 1e-9


def test_linearization_round_trip_through_a_duck_typed_message():
    rng = np.random.default_rng(0)
    arrays = random_linearization(rng)
    message = types.SimpleNamespace(**linearization_sizes(NAMES, NQ, NV), **linearization_fields(**arrays))
    assert (message.nx, message.nu, message.nq, message.nv) == (2 * NV, NV, NQ, NV)
    assert message.a.shape == (4 * NV * NV,) and message.b.shape == (2 * NV * NV,)
    back = linearization_arrays(message, NQ, NV, NAMES)
    for key, value in arrays.items():
        np.testing.assert_array_equal(back[key], value)
    # Row-major: entry (i, j) is a[i * nx + j].
    assert message.a[3 * 2 * NV + 5] == arrays["A"][3, 5]


def test_fields_of_many_messages_at_once():
    rng = np.random.default_rng(1)
    one = random_linearization(rng)
    many = {key: np.stack([value] * 3) if key != "dt" else value for key, value in one.items()}
    fields = linearization_fields(**many)
    assert fields["a"].shape == (3, 4 * NV * NV) and fields["x"].shape == (3, NQ + NV)
    np.testing.assert_array_equal(fields["b"][2], linearization_fields(**one)["b"])
    matrices = matrix_fields(np.stack([one["A"]] * 2))
    assert matrices["data"].shape == (2, 4 * NV * NV) and (matrices["rows"], matrices["cols"]) == (2 * NV, 2 * NV)


@pytest.mark.parametrize("change, reason", [
    (dict(joint_names=["root_joint", "j2", "j1"]), "joints"),
    (dict(nx=3), "size"),
    (dict(nq=NV), "size"),
    (dict(x=np.zeros(NQ + NV - 1)), "size"),
    (dict(b=np.zeros(5)), "size"),
])
def test_a_linearization_that_does_not_fit_is_refused(change, reason):
    rng = np.random.default_rng(2)
    fields = {**linearization_sizes(NAMES, NQ, NV), **linearization_fields(**random_linearization(rng)), **change}
    with pytest.raises(MessageError) as caught:
        linearization_arrays(types.SimpleNamespace(**fields), NQ, NV, NAMES)
    assert caught.value.reason == reason


def random_policy(rng, knots=3, nu=2):
    return {"joint_names": NAMES[1:], "state_joint_names": NAMES, "nq": NQ, "nv": NV, "knot_dt": 0.01,
            "valid_for": 0.1, "x_ref": rng.normal(size=(knots, NQ + NV)), "u_ff": rng.normal(size=(knots, nu)),
            "K": rng.normal(size=(nu, 2 * NV))}


def test_feedback_policy_round_trip_through_a_duck_typed_message():
    rng = np.random.default_rng(4)
    arrays = random_policy(rng)
    message = types.SimpleNamespace(**feedback_policy_fields(**arrays))
    assert (message.nx, message.nu, message.knots) == (2 * NV, 2, 3)
    # Row-major: K's entry (i, j) is k[i * nx + j]; knot i's state starts at x_ref[i * (nq + nv)].
    assert message.k[1 * 2 * NV + 5] == arrays["K"][1, 5] and message.x_ref[2 * (NQ + NV)] == arrays["x_ref"][2, 0]
    back = feedback_policy_arrays(message)
    for key in ("x_ref", "u_ff", "K"):
        np.testing.assert_array_equal(back[key], arrays[key])
    assert back["joint_names"] == NAMES[1:] and back["state_joint_names"] == NAMES
    assert (back["knot_dt"], back["valid_for"]) == (0.01, 0.1)



def test_feedback_policy_with_a_gain_per_knot_round_trip():
    rng = np.random.default_rng(6)
    arrays = {**random_policy(rng, knots=4), "K": rng.normal(size=(3, 2, 2 * NV))}   # gains of knots 0-2
    message = types.SimpleNamespace(**feedback_policy_fields(**arrays))
    # (G, nu, nx) row-major: gain g's entry (i, j) is k[(g * nu + i) * nx + j].
    assert len(message.k) == 3 * 2 * 2 * NV and message.k[(2 * 2 + 1) * 2 * NV + 3] == arrays["K"][2, 1, 3]
    np.testing.assert_array_equal(feedback_policy_arrays(message)["K"], arrays["K"])
    # More gains than knots, or a k that is not whole gains, does not fit.
    for k in (np.zeros(5 * 2 * 2 * NV), np.zeros(2 * 2 * 2 * NV + 1)):
        with pytest.raises(MessageError) as caught:
            feedback_policy_arrays(types.SimpleNamespace(**{**vars(message), "k": k}))
        assert caught.value.reason == "size"

@pytest.mark.parametrize("change, reason", [
    (dict(nx=2 * NV - 1), "size"),
    (dict(knots=0, x_ref=np.zeros(0), u_ff=np.zeros(0)), "size"),
    (dict(knots=4), "size"),
    (dict(nu=3), "size"),
    (dict(joint_names=NAMES), "size"),
    (dict(k=np.zeros(5)), "size"),
    (dict(nq=NV), "size"),
])
def test_a_feedback_policy_whose_sizes_disagree_is_refused(change, reason):
    fields = {**feedback_policy_fields(**random_policy(np.random.default_rng(5))), **change}
    with pytest.raises(MessageError) as caught:
        feedback_policy_arrays(types.SimpleNamespace(**fields))
    assert caught.value.reason == reason


def test_matrix_round_trip_and_refusal():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(4, 3))
    message = types.SimpleNamespace(**matrix_fields(values, MATRIX_NAMES["mass_matrix"], ["a", "b", "c", "d"]))
    assert message.name == "M" and message.names == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(matrix_array(message), values)
    with pytest.raises(MessageError, match="expected 3 x 3"):
        matrix_array(message, shape=(3, 3))
    message.data = message.data[:-1]
    with pytest.raises(MessageError) as caught:
        matrix_array(message)
    assert caught.value.reason == "size"
    # Only the numbers: a kept message's name and names are left as they are.
    assert set(matrix_fields(values)) == {"rows", "cols", "data"}


def test_rclpy_and_rosbags_messages_carry_the_same_bytes():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    serialization = pytest.importorskip("rclpy.serialization")
    bagio = pytest.importorskip("rbd_deriv.replay.bagio")
    store = bagio.package_typestore()
    rng = np.random.default_rng(4)
    arrays = random_linearization(rng)
    stamp_ns = 1_763_900_000_123_456_789

    ros = msg.Linearization(**linearization_sizes(NAMES, NQ, NV))
    fill_message(ros, linearization_fields(**arrays))
    assert isinstance(ros.a, array.array)  # the generated setters' fast path
    set_stamp(ros.header.stamp, stamp_ns)
    ros.header.frame_id = "base"
    raw = bytes(serialization.serialize_message(ros))

    sec, nanosec = ns_to_stamp(stamp_ns)
    header = store.types["std_msgs/msg/Header"](stamp=store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
                                                frame_id="base")
    bag = store.types["rbd_deriv/msg/Linearization"](header=header, **linearization_sizes(NAMES, NQ, NV),
                                                     **linearization_fields(**arrays))
    # Padding bytes may differ (Fast DDS leaves them unset): each side reads the other's bytes instead.
    bag_raw = bytes(store.serialize_cdr(bag, "rbd_deriv/msg/Linearization", little_endian=True))
    assert len(bag_raw) == len(raw)
    assert serialization.deserialize_message(bag_raw, msg.Linearization) == ros

    for received in (serialization.deserialize_message(raw, msg.Linearization),
                     store.deserialize_cdr(raw, "rbd_deriv/msg/Linearization")):
        assert stamp_to_ns(received.header.stamp) == stamp_ns
        back = linearization_arrays(received, NQ, NV, NAMES)
        for key, value in arrays.items():
            np.testing.assert_array_equal(back[key], value)

    matrix = fill_message(msg.Matrix(), matrix_fields(arrays["A"], MATRIX_NAMES["mass_matrix_inverse"], ["v"] * 2 * NV))
    received = serialization.deserialize_message(serialization.serialize_message(matrix), msg.Matrix)
    np.testing.assert_array_equal(matrix_array(received, shape=(2 * NV, 2 * NV)), arrays["A"])
    assert received.name == "M_inverse"


def test_numbers_written_through_the_views_are_what_the_message_sends():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    serialization = pytest.importorskip("rclpy.serialization")
    rng = np.random.default_rng(5)
    message = msg.Linearization(**linearization_sizes(NAMES, NQ, NV))
    views = linearization_views(message, NQ, NV)
    matrix = msg.Matrix(name=MATRIX_NAMES["mass_matrix_inverse"])
    data = matrix_view(matrix, NV, NV)
    # Written twice, as a node does at every state: each serialization carries the values of its time.
    for _ in range(2):
        arrays = random_linearization(rng)
        for key, view in views.items():
            view[...] = arrays[key]
        message.dt = arrays["dt"]
        values = rng.normal(size=(NV, NV))
        data[...] = values
        received = serialization.deserialize_message(serialization.serialize_message(message), msg.Linearization)
        back = linearization_arrays(received, NQ, NV, NAMES)
        for key, value in arrays.items():
            np.testing.assert_array_equal(back[key], value)
        received = serialization.deserialize_message(serialization.serialize_message(matrix), msg.Matrix)
        np.testing.assert_array_equal(matrix_array(received, shape=(NV, NV)), values)
    assert set(views) == {"x", "u", "A", "B", "x_next"}


def test_answer_fields_pack_each_message_of_a_derivatives_answer():
    rng = np.random.default_rng(9)
    linearization = random_linearization(rng)
    dtau_dq = rng.normal(size=(NV, NV))
    velocity_names = [f"v{i}" for i in range(NV)]
    fields = answer_fields({"linearization": linearization, "dtau_dq": dtau_dq}, NAMES, velocity_names, NQ, NV)
    assert set(fields) == {"linearization", "dtau_dq"}
    back = linearization_arrays(types.SimpleNamespace(**fields["linearization"]), NQ, NV, NAMES)
    for key, value in linearization.items():
        np.testing.assert_array_equal(back[key], value)
    matrix = types.SimpleNamespace(**fields["dtau_dq"])
    np.testing.assert_array_equal(matrix_array(matrix, shape=(NV, NV)), dtau_dq)
    assert matrix.name == MATRIX_NAMES["dtau_dq"] and matrix.names == velocity_names


def test_dynamics_messages_send_what_is_written_in_place():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    sensor_msgs = pytest.importorskip("sensor_msgs.msg")
    serialization = pytest.importorskip("rclpy.serialization")
    velocity_names = [f"v{i}" for i in range(NV)]
    messages = DynamicsMessages.make((sensor_msgs.JointState, msg.Matrix, msg.Linearization), NAMES[1:], NAMES,
                                     velocity_names, NQ, NV)
    rng = np.random.default_rng(11)
    effort, minv = rng.normal(size=2), rng.normal(size=(NV, NV))
    messages.effort[:] = effort
    messages.minv_data[:] = minv
    received = serialization.deserialize_message(serialization.serialize_message(messages.torques),
                                                 sensor_msgs.JointState)
    assert list(received.name) == NAMES[1:]
    np.testing.assert_array_equal(received.effort, effort)
    received = serialization.deserialize_message(serialization.serialize_message(messages.minv), msg.Matrix)
    np.testing.assert_array_equal(matrix_array(received, shape=(NV, NV)), minv)
    assert received.name == MATRIX_NAMES["mass_matrix_inverse"] and list(received.names) == velocity_names
    assert set(messages.linearization_arrays) == {"x", "u", "A", "B", "x_next"}
    assert messages.linearization.nq == NQ and list(messages.linearization.joint_names) == NAMES


def test_dynamics_messages_write_the_outputs_computed_in_the_order_sent():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    sensor_msgs = pytest.importorskip("sensor_msgs.msg")
    std_msgs = pytest.importorskip("std_msgs.msg")
    messages = DynamicsMessages.make((sensor_msgs.JointState, msg.Matrix, msg.Linearization), NAMES[1:], NAMES,
                                     [f"v{i}" for i in range(NV)], NQ, NV)
    rng = np.random.default_rng(12)
    torques, minv = rng.normal(size=2), rng.normal(size=(NV, NV))
    linearization = {**random_linearization(rng), "contact_frames": [], "contact_kinds": [],
                     "contact_forces": np.zeros(0)}
    header = std_msgs.Header(frame_id="base")
    outputs = types.SimpleNamespace(torques=torques, mass_matrix_inverse=minv, linearization=linearization)
    written = messages.write_outputs(outputs, header)
    assert [topic for topic, _ in written] == ["bias_torques", "mass_matrix_inverse", "linearization"]
    assert [message for _, message in written] == [messages.torques, messages.minv, messages.linearization]
    assert all(message.header.frame_id == "base" for _, message in written)
    np.testing.assert_array_equal(messages.torques.effort, torques)
    np.testing.assert_array_equal(matrix_array(messages.minv, shape=(NV, NV)), minv)
    np.testing.assert_array_equal(messages.linearization_arrays["A"], linearization["A"])
    only = types.SimpleNamespace(torques=None, mass_matrix_inverse=minv, linearization=None)
    assert [topic for topic, _ in messages.write_outputs(only, header)] == ["mass_matrix_inverse"]


def test_odometry_arrays_read_pose_and_twist():
    nav_msgs = pytest.importorskip("nav_msgs.msg")
    message = nav_msgs.Odometry()
    message.pose.pose.position.x, message.pose.pose.position.z = 1.5, -2.0
    message.pose.pose.orientation.y, message.pose.pose.orientation.w = 0.6, 0.8
    message.twist.twist.linear.y, message.twist.twist.angular.x = 0.25, -3.0
    assert odometry_arrays(message) == ((1.5, 0.0, -2.0), (0.0, 0.6, 0.0, 0.8), (0.0, 0.25, 0.0), (-3.0, 0.0, 0.0))


CONTACTS = {"contact_frames": ["left_sole", "hand"], "contact_kinds": ["frame", "point"],
            "contact_forces": np.arange(9.0) - 4.5}


def test_contact_fields_in_both_serializers_and_read_back():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    serialization = pytest.importorskip("rclpy.serialization")
    bagio = pytest.importorskip("rbd_deriv.replay.bagio")
    store = bagio.package_typestore()
    fields = linearization_fields(**random_linearization(np.random.default_rng(12)), **CONTACTS)
    ros = fill_message(msg.Linearization(**linearization_sizes(NAMES, NQ, NV)), fields)
    raw = bytes(serialization.serialize_message(ros))
    bag = store.types["rbd_deriv/msg/Linearization"](header=store.types["std_msgs/msg/Header"](
        stamp=store.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id=""),
        **linearization_sizes(NAMES, NQ, NV), **fields)
    assert serialization.deserialize_message(
        bytes(store.serialize_cdr(bag, "rbd_deriv/msg/Linearization", little_endian=True)), msg.Linearization) == ros
    for received in (serialization.deserialize_message(raw, msg.Linearization),
                     store.deserialize_cdr(raw, "rbd_deriv/msg/Linearization")):
        back = contact_fields_arrays(received)
        assert back["frames"] == CONTACTS["contact_frames"] and back["kinds"] == CONTACTS["contact_kinds"]
        np.testing.assert_array_equal(back["forces"], CONTACTS["contact_forces"])
    # Without contacts: empty fields, read back as an empty set.
    empty = contact_fields_arrays(types.SimpleNamespace(**linearization_fields(**random_linearization(
        np.random.default_rng(13)))))
    assert empty["frames"] == [] and empty["kinds"] == [] and empty["forces"].shape == (0,)


@pytest.mark.parametrize("change", [
    {"contact_kinds": ["frame"]},
    {"nc": 3},
    {"contact_kinds": ["frame", "edge"]},
    {"contact_forces": np.zeros(8)},
    {"contact_forces": np.zeros(12)},
])
def test_contact_fields_that_do_not_fit_are_refused(change):
    fields = {"nc": 2, **CONTACTS, **change}
    with pytest.raises(MessageError, match="do not fit") as caught:
        contact_fields_arrays(types.SimpleNamespace(**fields))
    assert caught.value.reason == "size"


def test_write_linearization_fills_numbers_and_contacts_in_place():
    msg = pytest.importorskip("rbd_deriv.msg", reason="interfaces not built")
    sensor_msgs = pytest.importorskip("sensor_msgs.msg")
    std_msgs = pytest.importorskip("std_msgs.msg")
    serialization = pytest.importorskip("rclpy.serialization")
    messages = DynamicsMessages.make((sensor_msgs.JointState, msg.Matrix, msg.Linearization), NAMES[1:], NAMES,
                                     [f"v{i}" for i in range(NV)], NQ, NV)
    rng = np.random.default_rng(14)
    for contacts in (CONTACTS, {"contact_frames": (), "contact_kinds": (), "contact_forces": np.zeros(0)}, CONTACTS):
        arrays = random_linearization(rng)
        header = std_msgs.Header(frame_id="base")
        message = messages.write_linearization({**arrays, **contacts}, header)
        assert message is messages.linearization
        received = serialization.deserialize_message(serialization.serialize_message(message), msg.Linearization)
        back = linearization_arrays(received, NQ, NV, NAMES)
        for key, value in arrays.items():
            np.testing.assert_array_equal(back[key], value)
        read = contact_fields_arrays(received)
        assert read["frames"] == list(contacts["contact_frames"]) and read["kinds"] == list(contacts["contact_kinds"])
        np.testing.assert_array_equal(read["forces"], contacts["contact_forces"])
        assert received.header.frame_id == "base"
