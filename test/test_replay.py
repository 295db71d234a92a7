"""Offline bag evaluation end to end (rbd_deriv.replay.cli, evaluate, report, outbag).

Bags are made here from a known motion of the bundled 7-dof arm, with efforts from the library's
inverse dynamics at the exact accelerations plus noise of known values. The evaluation must recover the
injected noise as its residual, count exactly the bad messages injected, keep what a damaged bag still
holds, and write an output bag whose values agree with Pinocchio at the recorded states. Memory must not
grow with the length of the recording.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

import rbd_deriv as rd
from rbd_deriv.replay import bagio, cli, outbag, report, synthetic
from rbd_deriv.replay.evaluate import Chunk, EvaluationConfig, actuated_joint_names, evaluate, survey
from rbd_deriv.replay.storage import BagSource
from rbd_deriv.testing.finite_diff import semi_implicit_euler_step
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.robots import bundled_urdf

ARM = bundled_urdf("rbd_arm7")
RATE_HZ = 1000.0
# A different noise level per joint [N m], so that a column mix-up would show.
NOISE = np.array([0.05, 0.08, 0.03, 0.06, 0.02, 0.01, 0.005])


@pytest.fixture(scope="module")
def store():
    return bagio.package_typestore()


@pytest.fixture(scope="module")
def arm():
    return rd.load_urdf(str(ARM))


@pytest.fixture(scope="module")
def oracle():
    return PinocchioBridge(str(ARM))


def _write_arm_bag(path: Path, store, model, motion, effort, storage="mcap", description=True, raw_edit=None):
    rows = synthetic.joint_state_rows(store, model.joint_names, motion.stamp_ns, motion.position, motion.velocity, effort)
    records = [(int(t) + 150_000, row.tobytes()) for t, row in zip(motion.stamp_ns, rows)]
    if raw_edit is not None:
        records = raw_edit(records)
    synthetic.write_recording(path, store, storage, records, robot_description=ARM.read_text() if description else None)


def _noisy_recording(store, model, path: Path, storage: str, seconds: float = 3.0):
    motion = synthetic.sinusoid_motion(7, seconds, RATE_HZ, seed=11)
    exact = rd.rnea_batch(model, motion.position, motion.velocity, motion.acceleration)
    noise = np.random.default_rng(5).normal(size=exact.shape) * NOISE
    effort = exact + noise
    _write_arm_bag(path, store, model, motion, effort, storage)
    return motion, effort, noise


def _run(argv: List[str], capsys) -> tuple:
    status = cli.main(argv + ["--quiet"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _evaluate(path: Path, model, config: Optional[EvaluationConfig] = None, odometry: Optional[str] = None):
    """Both passes in this process; returns the evaluation and every computed output, concatenated."""
    store = bagio.package_typestore()
    config = config or EvaluationConfig(latency_samples=0)
    source = BagSource(path)
    first = survey(source, store, "/joint_states", actuated_joint_names(model), config)
    chunks: List[Chunk] = []
    evaluation = evaluate(model, source, store, "/joint_states", config, first, odometry, [chunks.append])
    joined = {name: np.concatenate([getattr(c, name) for c in chunks]) for name in Chunk.__dataclass_fields__
              if name != "compute_s"}
    outputs = SimpleNamespace(**joined)
    outputs.residual = np.where(outputs.effort_mask, outputs.tau_model - outputs.tau, np.nan)
    return evaluation, outputs


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_evaluation_recovers_the_injected_noise(tmp_path, store, arm, oracle, storage, capsys):
    bag = tmp_path / "recording"
    motion, effort, noise = _noisy_recording(store, arm, bag, storage)
    status, out, err = _run([str(bag), "--out-dir", str(tmp_path / "eval"), "--latency-samples", "200"], capsys)
    assert status == 0, err
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())

    count = motion.stamp_ns.size
    assert summary["messages"] == {
        "total": count,
        "evaluated": count,
        "rejected": 0,
        "rejected_by_reason": {},
        "first_of_each_reason": {},
        "lost_to_damage": 0,
    }
    assert summary["damage"] == {"events": [], "lost_messages": 0}
    assert summary["robot"] == "rbd_arm7" and summary["nv"] == 7
    assert summary["dt_s"] == pytest.approx(1e-3, rel=1e-9)
    # residual = RNEA(q, v, a_est) - (RNEA(q, v, a) + noise) = -noise + (error of a_est, ~1e-5 N m here).
    per_joint = summary["residual"]["per_joint"]
    for j, name in enumerate(arm.joint_names):
        stats = per_joint[name]
        assert stats["samples"] == count
        assert stats["residual_rms"] == pytest.approx(np.sqrt(np.mean(noise[:, j] ** 2)), rel=2e-3)
        assert stats["residual_mean"] == pytest.approx(-noise[:, j].mean(), abs=2e-3 * NOISE[j])
        assert stats["residual_max_abs"] == pytest.approx(np.abs(noise[:, j]).max(), rel=5e-3)
        assert stats["effort_rms"] == pytest.approx(np.sqrt(np.mean(effort[:, j] ** 2)), rel=1e-12)
        explained = 1 - np.sum(noise[:, j] ** 2) / np.sum(effort[:, j] ** 2)
        assert stats["explained"] == pytest.approx(explained, abs=1e-3 * (1 - explained) + 1e-9)
    overall = summary["residual"]["overall"]
    assert overall["residual_rms"] == pytest.approx(np.sqrt(np.mean(noise**2)), rel=2e-3)

    timing = summary["timing"]
    for key in ("batched_compute_per_message_us", "single_call_latency_us"):
        assert 0 < timing[key]["p50"] <= timing[key]["p99"] <= timing[key]["max"]
    assert timing["single_call_samples"] == 200
    # Every stage of the run is timed, and with what no stage claimed ("other") they make the wall time.
    wall = timing["wall_s"]
    assert {"open", "jit_warmup", "scan", "read", "decode", "estimate", "compute", "condition", "statistics", "write",
            "plot", "other", "total"} <= set(wall)
    assert sum(v for k, v in wall.items() if k != "total") == pytest.approx(wall["total"], rel=1e-9)
    condition = summary["mass_matrix_condition"]
    assert 1 < condition["min"] <= condition["p50"] <= condition["max"]

    png = tmp_path / "eval" / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "compute per message" in out and "torque residual RMS" in out and "p99" in out


@pytest.fixture(scope="module")
def evaluated_bag(tmp_path_factory, store, arm):
    """A short noisy recording evaluated by the command; the output bag checked by the tests below."""
    folder = tmp_path_factory.mktemp("outbag")
    motion, effort, noise = _noisy_recording(store, arm, folder / "recording", "mcap", seconds=0.5)
    command = [str(folder / "recording"), "--out-dir", str(folder / "eval"), "--quiet", "--latency-samples", "10", "--residual-topic"]
    assert cli.main(command) == 0
    return folder / "eval" / "outputs", motion, effort, noise


def _read_back(path: Path) -> Dict[str, list]:
    # AnyReader builds its types from the definitions stored in the bag: what any rosbag2 tool sees.
    messages: Dict[str, list] = {}
    with AnyReader([path]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        for connection, timestamp, raw in reader.messages():
            messages.setdefault(connection.topic, []).append((timestamp, reader.deserialize(raw, connection.msgtype)))
    messages["__types__"] = types
    return messages


def _stamp_ns(header) -> int:
    return header.stamp.sec * 10**9 + header.stamp.nanosec


def _assert_joint_states_as_recorded(written, stamps_ns, position, velocity) -> None:
    """The output's /joint_states: one message per recorded one, its stamp, the arm's joints, its values."""
    assert len(written) == stamps_ns.size
    np.testing.assert_array_equal([_stamp_ns(m.header) for _, m in written], stamps_ns)
    for k, (_, message) in enumerate(written):
        assert list(message.name) == [f"joint{j}" for j in range(1, 8)]
        np.testing.assert_array_equal(message.position, position[k])
        np.testing.assert_array_equal(message.velocity, velocity[k])
        assert len(message.effort) == 0


def test_output_bag_has_the_package_types_and_all_messages(evaluated_bag):
    path, motion, _, _ = evaluated_bag
    messages = _read_back(path)
    topics = outbag.output_topics()
    # The dynamics node's topic names, under /rbd_deriv.
    assert topics == {
        "linearization": "/rbd_deriv/linearization",
        "minv": "/rbd_deriv/mass_matrix_inverse",
        "torques": "/rbd_deriv/bias_torques",
        "residual": "/rbd_deriv/torque_residual",
    }
    # A fixed base: joint states for a viewer, no /tf.
    assert messages["__types__"] == {
        "/robot_description": "std_msgs/msg/String",
        topics["linearization"]: "rbd_deriv/msg/Linearization",
        topics["minv"]: "rbd_deriv/msg/Matrix",
        topics["torques"]: "sensor_msgs/msg/JointState",
        topics["residual"]: "sensor_msgs/msg/JointState",
        "/joint_states": "sensor_msgs/msg/JointState",
    }
    count = motion.stamp_ns.size
    for key in ("linearization", "minv", "torques", "residual"):
        assert len(messages[topics[key]]) == count
    _assert_joint_states_as_recorded(messages["/joint_states"], motion.stamp_ns, motion.position, motion.velocity)
    assert messages["/robot_description"][0][1].data == ARM.read_text()
    # Written at the recording's receive times, stamped with the joint_states header stamps.
    times = np.array([t for t, _ in messages[topics["minv"]]])
    stamps = np.array([m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m in messages[topics["minv"]]])
    np.testing.assert_array_equal(stamps, motion.stamp_ns)
    np.testing.assert_array_equal(times, motion.stamp_ns + 150_000)


def test_output_bag_values_agree_with_pinocchio(evaluated_bag, arm, oracle):
    path, motion, effort, noise = evaluated_bag
    messages = _read_back(path)
    topics = outbag.output_topics()
    nv = arm.nv
    picks = np.linspace(0, motion.stamp_ns.size - 1, 25).astype(int)
    for k in picks:
        q, v, tau = motion.position[k], motion.velocity[k], effort[k]
        lin = messages[topics["linearization"]][k][1]
        minv = messages[topics["minv"]][k][1]
        torques = messages[topics["torques"]][k][1]
        residual = messages[topics["residual"]][k][1]
        dt = lin.dt
        assert (lin.nx, lin.nu, lin.nq, lin.nv) == (2 * nv, nv, nv, nv)
        assert list(lin.joint_names) == arm.joint_names
        np.testing.assert_array_equal(lin.x, np.concatenate([q, v]))
        np.testing.assert_array_equal(lin.u, tau)

        # Oracle: semi-implicit Euler on Pinocchio's ABA and its derivatives.
        ddq = oracle.aba(q, v, tau)
        v_next = v + dt * ddq
        q_next = oracle.integrate(q, dt * v_next)
        dddq_dq, dddq_dv, minv_pin = oracle.aba_derivatives(q, v, tau)
        jq = oracle.dintegrate_dq(q, dt * v_next)
        jv = oracle.dintegrate_dv(q, dt * v_next)
        eye = np.eye(nv)
        a_ref = np.block([[jq + dt * dt * jv @ dddq_dq, dt * jv @ (eye + dt * dddq_dv)], [dt * dddq_dq, eye + dt * dddq_dv]])
        b_ref = np.vstack([dt * dt * jv @ minv_pin, dt * minv_pin])
        scale = lambda ref: 1e-9 * max(1.0, np.abs(ref).max())  # noqa: E731
        np.testing.assert_allclose(lin.x_next, np.concatenate([q_next, v_next]), rtol=1e-9, atol=scale(v_next))
        np.testing.assert_allclose(np.reshape(lin.a, (2 * nv, 2 * nv)), a_ref, rtol=1e-9, atol=scale(a_ref))
        np.testing.assert_allclose(np.reshape(lin.b, (2 * nv, nv)), b_ref, rtol=1e-9, atol=scale(b_ref))

        assert (minv.rows, minv.cols, minv.name) == (nv, nv, "M_inverse")
        np.testing.assert_allclose(np.reshape(minv.data, (nv, nv)), minv_pin, rtol=1e-9, atol=scale(minv_pin))

        bias = oracle.rnea(q, v, np.zeros(nv))
        assert list(torques.name) == arm.joint_names
        np.testing.assert_allclose(torques.effort, bias, rtol=1e-9, atol=scale(bias))
        np.testing.assert_array_equal(torques.position, q)
        # The residual is minus the injected noise, up to the acceleration estimate's error (larger at
        # the two ends, where the difference is one-sided).
        at_end = k in (0, motion.stamp_ns.size - 1)
        np.testing.assert_allclose(residual.effort, -noise[k], atol=2e-3 if at_end else 5e-4)


def test_polynomial_motion_is_explained_exactly(tmp_path, store, arm):
    # Quadratic velocities on jittered stamps: the acceleration estimate is exact, so is the residual.
    motion = synthetic.quadratic_velocity_motion(7, 1.0, RATE_HZ, seed=2, jitter=0.2)
    effort = rd.rnea_batch(arm, motion.position, motion.velocity, motion.acceleration)
    _write_arm_bag(tmp_path / "bag", store, arm, motion, effort, "sqlite3")
    for half_window in (1, 3):
        # Small chunks: the windows of the estimate span many of them.
        evaluation, outputs = _evaluate(tmp_path / "bag", arm, EvaluationConfig(half_window=half_window, chunk=97,
                                                                                 latency_samples=0))
        np.testing.assert_array_equal(outputs.index, np.arange(motion.stamp_ns.size))
        np.testing.assert_allclose(outputs.acceleration, motion.acceleration, rtol=1e-9, atol=1e-9)
        scale = np.abs(effort).max()
        assert np.abs(outputs.residual).max() < 1e-9 * scale
        assert evaluation.residual.max_abs.max() < 1e-9 * scale


def test_forward_difference_explains_semi_implicit_euler_data_exactly(tmp_path, store, arm):
    # A simulator stepping with semi-implicit Euler (as MuJoCo does by default) records v[k+1] = v[k] +
    # dt ABA(q[k], v[k], tau[k]): the forward difference recovers that acceleration, the central one does not.
    dt, count = 1e-3, 1500
    data = arm.create_data()
    rng = np.random.default_rng(7)
    q, v, tau = np.zeros((count, 7)), np.zeros((count, 7)), np.zeros((count, 7))
    home = rd.neutral(arm) + 0.3
    q[0] = home
    phase = rng.uniform(0, 6, 7)
    zero = np.zeros(7)
    for k in range(count):
        # Computed torque towards home plus a sinusoidal excitation (both through M, as the wrist is far
        # lighter than the shoulder): a stable motion of every joint.
        wanted = 25.0 * (home - q[k]) - 10.0 * v[k] + 20.0 * np.sin(2 * np.pi * 0.7 * k * dt + phase)
        tau[k] = rd.gravity_torques(arm, data, q[k]) + rd.crba(arm, data, q[k]) @ wanted
        if k + 1 < count:
            q[k + 1], v[k + 1] = semi_implicit_euler_step(arm, data, q[k], v[k], tau[k], dt)
    assert np.abs(v).max() > 0.1
    stamps = 1_700_000_000_000_000_000 + np.arange(count) * 1_000_000
    motion = synthetic.Motion(stamps, q, v, np.zeros_like(q))
    _write_arm_bag(tmp_path / "bag", store, arm, motion, tau, "mcap")
    evaluation, outputs = _evaluate(tmp_path / "bag", arm, EvaluationConfig(acceleration="forward", latency_samples=0))
    assert evaluation.rejections.counts() == {"segment_end": 1} and evaluation.evaluated == count - 1
    scale = np.abs(tau).max()
    assert np.abs(outputs.residual).max() < 1e-9 * scale
    central, _ = _evaluate(tmp_path / "bag", arm, EvaluationConfig(acceleration="central", latency_samples=0))
    assert central.residual.rms.max() > 1e3 * evaluation.residual.rms.max()


def _inject_bad_messages(store, model):
    """Edit a clean recording: duplicates, out-of-order, NaN, a corrupt message, a gap, extra joints."""

    def edit(records):
        records = list(records)
        nan_message = synthetic.joint_state_rows(
            store, model.joint_names, np.array([0]), np.full((1, 7), np.nan), np.zeros((1, 7)), np.zeros((1, 7))
        )[0].tobytes()
        for k in (100, 200, 300, 400):  # NaN position (stamp 0: also unordered, counted once as NaN)
            records[k] = (records[k][0], nan_message)
        records[500] = (records[500][0], b"\x00\x01\x00\x00\x01")
        for k in (600, 601, 602):  # stamped before their predecessor: a late copy of an old state
            records[k] = (records[k][0], records[k - 50][1])
        duplicates = [(records[k][0] + 10, records[k][1]) for k in (700, 710, 720, 730, 740)]
        del records[850:1050]  # a 200 ms gap
        return records[:701] + duplicates[:1] + records[701:711] + duplicates[1:2] + records[711:721] + duplicates[2:3] + records[721:731] + duplicates[3:4] + records[731:741] + duplicates[4:] + records[741:]

    return edit


def test_bad_messages_are_skipped_and_counted(tmp_path, store, arm, capsys):
    motion = synthetic.sinusoid_motion(7, 1.5, RATE_HZ, seed=4)
    effort = rd.rnea_batch(arm, motion.position, motion.velocity, motion.acceleration)
    _write_arm_bag(tmp_path / "bag", store, arm, motion, effort, raw_edit=_inject_bad_messages(store, arm))
    status, out, err = _run([str(tmp_path / "bag"), "--out-dir", str(tmp_path / "eval"), "--latency-samples", "10"], capsys)
    assert status == 0, err
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    messages = summary["messages"]
    expected = {"non_finite": 4, "corrupt_message": 1, "out_of_order": 3, "duplicate_stamp": 5}
    assert messages["rejected_by_reason"] == expected
    assert messages["total"] == 1500 - 200 + 5
    assert messages["evaluated"] == messages["total"] - sum(expected.values())
    assert summary["gaps"] == 1 and summary["segments"] == 2
    assert "rejected" in out and "duplicate_stamp" in out
    # Around gaps and holes the estimate is one-sided or wider, still far below any real residual.
    assert summary["residual"]["overall"]["residual_rms"] < 1e-3 * summary["residual"]["overall"]["effort_rms"]


def test_floating_base_from_odometry(tmp_path, store):
    model = rd.load_urdf(str(ARM), floating_base=True)
    joints = synthetic.quadratic_velocity_motion(7, 0.6, RATE_HZ, seed=8)
    count = joints.stamp_ns.size
    t = (joints.stamp_ns - joints.stamp_ns[0]) * 1e-9
    # Base spinning about z at a constant rate (body and world z agree), linear body velocity quadratic.
    yaw_rate = 0.4
    q_base = np.zeros((count, 7))
    q_base[:, 5], q_base[:, 6] = np.sin(yaw_rate * t / 2), np.cos(yaw_rate * t / 2)
    q_base[:, 0] = 0.1 * t
    v_base = np.zeros((count, 6))
    v_base[:, 0] = 0.3 + 0.5 * t - 0.8 * t**2
    v_base[:, 1] = -0.2 * t
    v_base[:, 5] = yaw_rate
    a_base = np.zeros((count, 6))
    a_base[:, 0] = 0.5 - 1.6 * t
    a_base[:, 1] = -0.2
    q = np.hstack([q_base, joints.position])
    v = np.hstack([v_base, joints.velocity])
    a = np.hstack([a_base, joints.acceleration])
    effort = rd.rnea_batch(model, q, v, a)[:, 6:]
    rows = synthetic.joint_state_rows(store, actuated_joint_names(model), joints.stamp_ns, joints.position, joints.velocity, effort)
    odometry = [(int(s), synthetic.odometry_message(store, int(s), q_base[k], v_base[k], frame="map", child="base_link"))
                for k, s in enumerate(joints.stamp_ns)]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(s), r.tobytes()) for s, r in zip(joints.stamp_ns, rows)], odometry=odometry)

    evaluation, outputs = _evaluate(tmp_path / "bag", model, odometry="/odom")
    np.testing.assert_allclose(outputs.acceleration, a, rtol=1e-9, atol=1e-9)
    assert not outputs.effort_mask[:, :6].any() and outputs.effort_mask[:, 6:].all()
    assert np.abs(outputs.residual[:, 6:]).max() < 1e-9 * np.abs(effort).max()
    # The base is not actuated: the linearization input is zero there.
    assert not outputs.tau[:, :6].any()

    status = cli.main([str(tmp_path / "bag"), "--urdf", str(ARM), "--odom", "/odom", "--out-dir", str(tmp_path / "eval"), "--quiet", "--no-png"])
    assert status == 0
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["floating_base"] and summary["nv"] == 13
    assert set(summary["residual"]["per_joint"]) == set(arm_joint for arm_joint in actuated_joint_names(model))
    messages = _read_back(tmp_path / "eval" / "outputs")
    assert messages["__types__"][outbag.output_topics()["minv"]] == "rbd_deriv/msg/Matrix"
    assert list(messages[outbag.output_topics()["minv"]][0][1].names)[:6] == [f"root_joint_{a}" for a in ("vx", "vy", "vz", "wx", "wy", "wz")]
    # What a viewer draws the robot from: the base pose on /tf in the odometry's frames, the joints on
    # /joint_states, one of each per recorded joint_states message, stamped like it.
    assert summary["messages"]["evaluated"] == count
    assert messages["__types__"]["/tf"] == "tf2_msgs/msg/TFMessage"
    _assert_joint_states_as_recorded(messages["/joint_states"], joints.stamp_ns, joints.position, joints.velocity)
    tf = messages["/tf"]
    assert len(tf) == count
    np.testing.assert_array_equal([t for t, _ in tf], joints.stamp_ns)  # written at the recording's times
    for k, (_, message) in enumerate(tf):
        assert len(message.transforms) == 1
        transform = message.transforms[0]
        assert (transform.header.frame_id, transform.child_frame_id) == ("map", "base_link")
        assert _stamp_ns(transform.header) == joints.stamp_ns[k]
        translation, rotation = transform.transform.translation, transform.transform.rotation
        np.testing.assert_allclose([translation.x, translation.y, translation.z], q_base[k, :3], rtol=0, atol=1e-12)
        np.testing.assert_allclose([rotation.x, rotation.y, rotation.z, rotation.w], q_base[k, 3:], rtol=0, atol=1e-12)


def test_base_frames_default_to_odom_and_the_urdf_root_link():
    # The bundled arm's URDF begins with its link base_link.
    model = rd.load_urdf(str(ARM), floating_base=True)
    assert cli._base_frames(model, "", "") == ("odom", "base_link")
    assert cli._base_frames(model, "map", "trunk") == ("map", "trunk")


def test_odometry_gaps_reject_joint_states(tmp_path, store):
    model = rd.load_urdf(str(ARM), floating_base=True)
    joints = synthetic.sinusoid_motion(7, 0.5, RATE_HZ, seed=1)
    rows = synthetic.joint_state_rows(store, actuated_joint_names(model), joints.stamp_ns, joints.position, joints.velocity, None)
    identity = np.array([0, 0, 0, 0, 0, 0, 1.0])
    # Odometry only over the first half.
    odometry = [(int(s), synthetic.odometry_message(store, int(s), identity, np.zeros(6))) for s in joints.stamp_ns[:250:10]]
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(s), r.tobytes()) for s, r in zip(joints.stamp_ns, rows)], odometry=odometry)
    evaluation, outputs = _evaluate(tmp_path / "bag", model, odometry="/odom")
    assert evaluation.rejections.counts() == {"bad_base": 500 - 241}
    assert evaluation.evaluated == 241 and outputs.index.tolist() == list(range(241))
    assert not outputs.effort_mask.any()


@pytest.mark.parametrize(
    "case, pattern",
    [
        ("missing_bag", "bag not found"),
        ("missing_topic", "no topic '/other'"),
        ("wrong_names", "do not match the URDF"),
        ("joint_never_recorded", "URDF joints ['joint7'] appear in no message"),
        ("no_description", "no topic '/robot_description'"),
        ("missing_urdf", "URDF file not found"),
        ("broken_urdf", "bag-eval: error:"),
        ("bad_dt", "dt must be a positive"),
        ("floating_without_odometry_topic", "no topic '/odom'"),
    ],
)
def test_unusable_input_exits_2_with_a_clear_message(tmp_path, store, arm, capsys, case, pattern):
    motion = synthetic.sinusoid_motion(7, 0.05, RATE_HZ, seed=3)
    effort = np.zeros((motion.stamp_ns.size, 7))
    bag = tmp_path / "bag"
    args = [str(bag), "--out-dir", str(tmp_path / "eval")]
    if case == "wrong_names":
        rows = synthetic.joint_state_rows(store, [f"j{k}" for k in range(7)], motion.stamp_ns, motion.position, motion.velocity, effort)
        synthetic.write_recording(bag, store, "mcap", [(int(s), r.tobytes()) for s, r in zip(motion.stamp_ns, rows)], robot_description=ARM.read_text())
    elif case == "joint_never_recorded":
        rows = synthetic.joint_state_rows(store, arm.joint_names[:6], motion.stamp_ns, motion.position[:, :6], motion.velocity[:, :6], effort[:, :6])
        synthetic.write_recording(bag, store, "mcap", [(int(s), r.tobytes()) for s, r in zip(motion.stamp_ns, rows)], robot_description=ARM.read_text())
    elif case == "broken_urdf":
        rows = synthetic.joint_state_rows(store, arm.joint_names, motion.stamp_ns, motion.position, motion.velocity, effort)
        synthetic.write_recording(bag, store, "mcap", [(int(s), r.tobytes()) for s, r in zip(motion.stamp_ns, rows)], robot_description="<robot name='x'><link")
    elif case != "missing_bag":
        _write_arm_bag(bag, store, arm, motion, effort, description=case != "no_description")
    if case == "missing_bag":
        args[0] = str(tmp_path / "absent")
    elif case == "missing_topic":
        args += ["--topic", "/other"]
    elif case == "missing_urdf":
        args += ["--urdf", str(tmp_path / "absent.urdf")]
    elif case == "bad_dt":
        args += ["--dt", "-1"]
    elif case == "floating_without_odometry_topic":
        args += ["--odom", "/odom"]
    status, out, err = _run(args, capsys)
    assert status == 2
    assert pattern in err
    assert "Traceback" not in err


def test_existing_output_bag_is_not_overwritten(tmp_path, store, arm, capsys):
    motion = synthetic.sinusoid_motion(7, 0.05, RATE_HZ, seed=3)
    _write_arm_bag(tmp_path / "bag", store, arm, motion, np.zeros((motion.stamp_ns.size, 7)))
    (tmp_path / "eval" / "outputs").mkdir(parents=True)
    status, _, err = _run([str(tmp_path / "bag"), "--out-dir", str(tmp_path / "eval")], capsys)
    assert status == 2 and "exists already" in err


def test_recording_without_efforts_still_evaluates(tmp_path, store, arm, capsys):
    motion = synthetic.sinusoid_motion(7, 0.2, RATE_HZ, seed=9)
    _write_arm_bag(tmp_path / "bag", store, arm, motion, None)
    status, out, err = _run([str(tmp_path / "bag"), "--out-dir", str(tmp_path / "eval"), "--no-png"], capsys)
    assert status == 0, err
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["residual"] is None and "no efforts recorded" in out
    messages = _read_back(tmp_path / "eval" / "outputs")
    assert outbag.output_topics()["residual"] not in messages["__types__"]
    # Linearized at the inverse-dynamics torque of the estimated acceleration.
    lin = messages[outbag.output_topics()["linearization"]][50][1]
    expected = rd.rnea(arm, arm.create_data(), motion.position[50], motion.velocity[50], motion.acceleration[50])
    np.testing.assert_allclose(lin.u, expected, atol=1e-3)


def test_bad_settings_are_refused(arm):
    for config, argument in [
        (EvaluationConfig(dt=0.0), "dt"),
        (EvaluationConfig(half_window=0), "half_window"),
        (EvaluationConfig(stamps="wall"), "stamps"),
        (EvaluationConfig(gap_factor=1.0), "gap_factor"),
        (EvaluationConfig(acceleration="backward"), "acceleration"),
    ]:
        with pytest.raises(rd.InputError) as failure:
            config.validate()
        assert failure.value.argument == argument


def test_missing_optional_package_is_named(tmp_path, monkeypatch, capsys):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else real(name))
    status, _, err = _run([str(tmp_path / "any"), "--out-dir", str(tmp_path / "eval")], capsys)
    assert status == 2 and "needs the Python package 'matplotlib'" in err and "--no-png" in err


def test_zero_header_stamps_fall_back_to_receive_times(tmp_path, store, arm):
    motion = synthetic.sinusoid_motion(7, 0.2, RATE_HZ, seed=6)
    effort = rd.rnea_batch(arm, motion.position, motion.velocity, motion.acceleration)
    rows = synthetic.joint_state_rows(store, arm.joint_names, np.zeros_like(motion.stamp_ns), motion.position, motion.velocity, effort)
    synthetic.write_recording(tmp_path / "bag", store, "mcap", [(int(t), r.tobytes()) for t, r in zip(motion.stamp_ns, rows)])
    evaluation, outputs = _evaluate(tmp_path / "bag", arm)
    assert evaluation.survey.stamp_source == "bag" and evaluation.rejections.rejected == 0
    np.testing.assert_array_equal(outputs.stamp_ns, motion.stamp_ns)
    assert np.abs(outputs.residual).max() < 1e-3
    # Forcing header stamps: every message after the first repeats stamp 0.
    with pytest.raises(rd.InputError, match="no usable joint_states"):
        _evaluate(tmp_path / "bag", arm, EvaluationConfig(stamps="header", latency_samples=0))


def _damage(path: Path, kind: str) -> None:
    data = next(p for p in path.iterdir() if p.suffix in (".mcap", ".db3"))
    content = data.read_bytes()
    if kind == "cut":
        data.write_bytes(content[: len(content) // 2])
    else:
        middle = len(content) // 2 + 1234
        data.write_bytes(content[:middle] + np.random.default_rng(9).bytes(4096) + content[middle + 4096 :])


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("kind", ["cut", "garbage"])
def test_damaged_bags_are_evaluated_before_and_after_the_damage(tmp_path, store, arm, capsys, storage, kind):
    bag = tmp_path / "recording"
    motion, effort, noise = _noisy_recording(store, arm, bag, storage, seconds=4.0)
    _damage(bag, kind)
    source = BagSource(bag)
    readable = sum(len(batch) for batch in source.read(["/joint_states"]))
    count = motion.stamp_ns.size
    status, out, err = _run([str(bag), "--out-dir", str(tmp_path / "eval"), "--latency-samples", "10", "--no-png"], capsys)
    assert status == 0, err
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    messages = summary["messages"]
    assert messages["total"] == readable and messages["lost_to_damage"] == count - readable > 0
    # A hole in the recording is a gap; around it the acceleration estimate works on each side.
    assert messages["evaluated"] == readable - sum(messages["rejected_by_reason"].values())
    assert set(messages["rejected_by_reason"]) <= {"short_segment", "corrupt_message", "non_finite", "non_finite_effort"}
    events = summary["damage"]["events"]
    assert events and summary["damage"]["lost_messages"] == count - readable
    if kind == "garbage":
        assert summary["gaps"] >= 1 and summary["segments"] >= 2  # messages after the damage were evaluated
        assert any(event["before_ns"] is not None for event in events)
    else:
        assert events[-1]["before_ns"] is None
    assert "damaged bag" in out
    # What was evaluated is still explained: residual = the injected noise.
    assert summary["residual"]["overall"]["residual_rms"] == pytest.approx(np.sqrt(np.mean(noise**2)), rel=0.05)
    written = _read_back(tmp_path / "eval" / "outputs")
    assert len(written[outbag.output_topics()["linearization"]]) == messages["evaluated"]


def test_residual_plot_is_scaled_to_the_bulk_and_marks_gaps(tmp_path, store, arm):
    motion = synthetic.sinusoid_motion(7, 2.0, RATE_HZ, seed=12)
    exact = rd.rnea_batch(arm, motion.position, motion.velocity, motion.acceleration)
    noise = np.random.default_rng(1).normal(0, 0.02, exact.shape)
    effort = exact + noise
    effort[0, 3] += 400.0  # one wild sample at t = 0

    def with_gap(records):
        return records[:600] + records[700:]  # 100 ms without data

    _write_arm_bag(tmp_path / "bag", store, arm, motion, effort, raw_edit=with_gap)
    evaluation, _ = _evaluate(tmp_path / "bag", arm)
    assert evaluation.gap_count == 1 and evaluation.residual.max_abs[3] == pytest.approx(400.0, rel=1e-3)
    limit = report.residual_limit(evaluation)
    assert limit is not None and 3 * 0.02 < limit < 0.5
    figure = report.plot(evaluation, tmp_path / "report.png")
    residual_axis = figure.axes[0]
    assert residual_axis.get_ylim()[1] == pytest.approx(1.05 * limit)
    gap = evaluation.gaps[0]
    start, stop = evaluation.seconds(np.array([gap.after_ns, gap.before_ns]))
    assert stop - start == pytest.approx(0.101, abs=1e-6)
    shaded = [patch for patch in residual_axis.patches if patch.get_x() == pytest.approx(start)]
    assert len(shaded) == 1 and shaded[0].get_width() == pytest.approx(stop - start)
    summary = report.summarize(evaluation, arm, tmp_path / "bag")
    assert summary["gap_list"] == [{"after_s": pytest.approx(start), "before_s": pytest.approx(stop),
                                    "length_s": pytest.approx(0.101)}]
    # Without the spike the natural scale is kept.
    effort[0, 3] -= 400.0
    _write_arm_bag(tmp_path / "clean", store, arm, motion, effort)
    clean, _ = _evaluate(tmp_path / "clean", arm)
    assert report.residual_limit(clean) is None


def test_progress_goes_to_stderr_stage_by_stage(tmp_path, store, arm, capsys):
    _noisy_recording(store, arm, tmp_path / "bag", "mcap", seconds=0.5)
    status = cli.main([str(tmp_path / "bag"), "--out-dir", str(tmp_path / "eval"), "--latency-samples", "10"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    stages = [line.split()[0] for line in captured.err.splitlines()]
    assert stages[0] == "scan" and "evaluate" in stages and stages[-2:] == ["write", "plot"]
    assert "500/500" in captured.err


def _vm_peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


TWO_LINK = """<robot name="two_link">
  <link name="base"/>
  <link name="upper"><inertial><origin xyz="0 0 0.2"/><mass value="2"/>
    <inertia ixx="0.03" ixy="0" ixz="0" iyy="0.03" iyz="0" izz="0.004"/></inertial></link>
  <link name="lower"><inertial><origin xyz="0 0 0.15"/><mass value="1"/>
    <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.002"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="50" velocity="5"/></joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="lower"/><origin xyz="0 0 0.4"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="30" velocity="5"/></joint>
</robot>"""


def _long_recording(path: Path, store, model, count: int) -> None:
    motion = synthetic.SinusoidMotion(2, seed=3)
    start = 1_700_000_000_000_000_000

    def records():
        for first in range(0, count, 20_000):
            stamps = start + np.arange(first, min(count, first + 20_000)) * 1_000_000
            sample = motion.sample(stamps, start)
            effort = rd.rnea_batch(model, sample.position, sample.velocity, sample.acceleration)
            rows = synthetic.joint_state_rows(store, model.joint_names, stamps, sample.position, sample.velocity, effort)
            yield from zip((stamps + 100_000).tolist(), rows)

    synthetic.write_recording(path, store, "mcap", records(), robot_description=TWO_LINK, first_time_ns=start)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory is read from /proc/self (Linux)")
def test_memory_does_not_grow_with_the_number_of_messages(tmp_path, store, capsys):
    # The same evaluation (output bag and PNG included) of 30,000 and of 200,000 messages, in this
    # process: the peak resident memory of each run is measured from a reset of the high-water mark.
    # Holding anything per message (the bytes read, the states, the outputs: about 400 bytes of outputs
    # alone for this robot) would add tens of megabytes per 100,000 messages; here the peaks must differ
    # by less than 30 MB.
    model = rd.load_urdf(TWO_LINK)
    peaks = {}
    for count in (30_000, 30_000, 200_000):  # the first run loads what stays loaded (matplotlib, kernels)
        bag = tmp_path / f"bag_{count}_{len(peaks)}"
        _long_recording(bag, store, model, count)
        clear_refs = Path("/proc/self/clear_refs")
        try:
            clear_refs.write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        except OSError as err:
            pytest.skip(f"cannot reset the peak RSS here: {err}")
        status = cli.main([str(bag), "--out-dir", str(tmp_path / f"eval_{count}_{len(peaks)}"), "--quiet",
                           "--latency-samples", "10"])
        assert status == 0, capsys.readouterr().err
        summary = json.loads((tmp_path / f"eval_{count}_{len(peaks)}" / "summary.json").read_text())
        assert summary["messages"]["evaluated"] == count
        peaks[len(peaks)] = _vm_peak_kib() / 1024.0
    assert peaks[2] - peaks[1] < 30.0, peaks


def test_benchmark_prints_wall_time_and_peak_memory_per_recording(tmp_path, capsys):
    from rbd_deriv.bench import bag_eval

    assert bag_eval.main(["--seconds", "0.6", "--rate", "500", "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("0.6s")]
    assert len(lines) == 1 and lines[0][1] == "300"
    evaluation_s, process_s, rss_mb = float(lines[0][2]), float(lines[0][4]), float(lines[0][6])
    assert 0 < evaluation_s <= process_s and rss_mb > 50
    assert "max RSS" in out and "targets:" in out
    assert (tmp_path / "report_0.6s" / "outputs" / "metadata.yaml").exists()
