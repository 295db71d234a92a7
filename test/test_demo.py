"""Tests of rbd_deriv.demo (the package: its command line, arm, legged, legged_summary, processes and plots
modules): one parameter file for the script and demo.launch.py, and short runs of each demo.

The main job's loop runs here for a few seconds through its three nodes (and in relinearize mode in
test_mpc_node.py); besides: config/demo.yaml holds the plant's damping and friction (per unit of effort limit,
the same for every joint) and the start posture the demo's constants say, the held mode's steps agree, and
the script starts each node with its own file and demo.yaml, the files the launch file gives it.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv import demo
from rbd_deriv.demo import arm, legged, legged_summary, processes

LAUNCH = Path(__file__).resolve().parents[1] / "launch" / "demo.launch.py"


def test_demo_yaml_holds_the_plant_and_the_start_posture():
    parameters = arm.demo_parameters()
    limits = np.asarray(rd.load_urdf(str(rd.bundled_urdf("rbd_arm7"))).effort_limit, dtype=float)
    sim = parameters["sim_node"]
    damping, friction = arm.plant_per_effort(limits, parameters)
    # One damping and one friction per N m of effort limit for every joint: the title names them so.
    np.testing.assert_allclose(damping, damping[0], rtol=1e-12)
    np.testing.assert_allclose(friction, friction[0], rtol=1e-12)
    assert arm._one_value(damping) == "0.001" and arm._one_value(np.array([0.1, 0.2])) == "0.1-0.2"
    np.testing.assert_allclose(damping * limits, sim["damping"], rtol=1e-12)
    np.testing.assert_allclose(friction * limits, sim["friction"], rtol=1e-12)
    np.testing.assert_allclose(sim["initial_positions"], arm.DEMO_CENTER, rtol=0, atol=0)
    assert sim["backend"] == "mujoco"
    assert parameters["dynamics_node"]["dt"] == parameters["mpc_node"]["dt"], "held mode needs one step"
    assert parameters["dynamics_node"]["rate"] == parameters["mpc_node"]["rate_hz"]
    for node in parameters:
        assert (processes.config_folder() / f"{node}.yaml").is_file()


def test_script_starts_each_node_with_its_file_then_demo_yaml(tmp_path, monkeypatch):
    started = []

    class Recorded:
        def __init__(self, command, **options):
            started.append(command)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    processes.start_node("mpc_node", arm.DEMO_PARAMETERS, {"urdf_path": "/robot.urdf", "mode": "held"},
                         tmp_path / "log")
    command = started[0]
    config = processes.config_folder()
    assert command[1:3] == ["-m", "rbd_deriv.nodes.mpc_node"]
    assert command[3:8] == ["--ros-args", "--params-file", str(config / "mpc_node.yaml"), "--params-file",
                            str(config / "demo.yaml")]
    assert command[8:] == ["-p", "urdf_path:=/robot.urdf", "-p", "mode:=held"]


def test_launch_file_gives_the_nodes_the_same_files():
    tree = ast.parse(LAUNCH.read_text(encoding="utf-8"))
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert {"demo.yaml", "sim_node", "dynamics_node", "mpc_node", "--reference-only"} <= strings
    # Each node gets [its own file, demo.yaml, overrides], in that order, like the script.
    assert 'parameters=[str(config / f"{name}.yaml"), str(config / "demo.yaml")' in LAUNCH.read_text()


def test_json_summary_reports_the_simulators_steps_by_source(tmp_path):
    import json

    summary = {"command_rate": 198.5, "rms": np.array([0.001, 0.002]), "max": np.array([0.01, 0.03]),
               "torque_ratio": np.array([0.4, 0.9])}
    diagnostics = {"solve_time_p50_us": "600.0", "solve_time_p99_us": "2500.0", "commands_plan": "3970",
                   "commands_stale_state": "2", "refused_joint_states/non_finite": "1", "rate_hz": "199.0"}
    simulator = {"steps_policy": "19800", "refused_policy/size": "3", "actuation": "policy"}
    path = tmp_path / "demo.json"
    arm.write_summary(path, summary, diagnostics, simulator, {"policy": 19800, "command": 12, "brake": 3000},
                       "held", 200.0, ["j1", "j2"])
    document = json.loads(path.read_text())
    assert document["mpc_rate_hz"] == 198.5 and document["rate_asked_hz"] == 200.0
    assert document["solve_p50_ms"] == 0.6 and document["solve_p99_ms"] == 2.5
    assert document["max_torque_ratio"] == 0.9 and document["max_error_rad"] == [0.01, 0.03]
    assert (document["steps_policy"], document["steps_command"], document["steps_brake"]) == (19800, 12, 3000)
    assert document["commands_by_source"] == {"plan": 3970, "stale_state": 2}
    assert document["refused_mpc"] == {"joint_states/non_finite": 1}
    assert document["refused_simulator"] == {"policy/size": 3}


def test_main_job_tracks_through_the_three_nodes(tmp_path):
    """``./run demo`` for a few seconds, as the README gives it: the simulator, the dynamics node and the MPC
    node in held mode over DDS. On a quiet machine it measures RMS 0.3-4 mrad per joint, 20 mrad at most on the
    light wrist, 185-196 Hz of the 200 asked; with other work on both cores (load 6-7) a tick or input now and
    then comes late and the arm drifts for a moment: 83 mrad at most, seen once in five runs. The bounds leave
    room for that; an arm that lost its reference is off by tenths of a radian to radians."""
    import json
    import os
    import sys

    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    path = tmp_path / "demo.json"
    env = dict(os.environ)
    env.pop("ROS_DOMAIN_ID", None)
    run = subprocess.run([sys.executable, "-m", "rbd_deriv.demo", "--duration", "4", "--json", str(path),
                          "--output", str(tmp_path / "demo.png"), "--logs", str(tmp_path / "logs")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    document = json.loads(path.read_text())
    assert document["mode"] == "held" and document["rate_asked_hz"] == 200.0
    assert document["mpc_rate_hz"] > 120.0, document
    assert max(document["rms_error_rad"]) < 0.03, document["rms_error_rad"]
    assert max(document["max_error_rad"]) < 0.25, document["max_error_rad"]
    assert 0.0 < document["max_torque_ratio"] <= 1.0
    sources = document["commands_by_source"]
    # Ticks before the first state (no_state) depend on how fast the nodes start, not on the loop.
    assert sources["plan"] >= 0.9 * (sum(sources.values()) - sources.get("no_state", 0)), sources
    assert document["steps_policy"] > 0.8 * (document["steps_policy"] + document["steps_command"]
                                             + document["steps_brake"]), document
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    # The video beside the plot, or one line saying why not (no offscreen OpenGL here): the run's result stands.
    assert (tmp_path / "demo.gif").is_file() or "video not written" in run.stdout, run.stdout[-2000:]


# ------------------------------------------------------------------------------------------------- legged
LEGGED_LAUNCH = LAUNCH.parent / "legged.launch.py"


@pytest.mark.parametrize("robot", legged.LEGGED_DEMOS)
def test_legged_robot_files_name_existing_parameters_with_good_values(robot):
    """config/<robot>.yaml: every parameter is one of the node's, its value passes the node's check, the
    simulator starts at the SRDF posture the MPC takes as reference, the feet are frames of the robot."""
    from rbd_deriv.control.srdf import reference_posture
    from rbd_deriv.nodes.parameters import MPC_NODE, SIM_NODE, _problem
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    parameters = legged.legged_parameters(robot)
    assert set(parameters) == {"sim_node", "mpc_node"}
    for node, table in (("sim_node", SIM_NODE), ("mpc_node", MPC_NODE)):
        for name, value in parameters[node].items():
            assert name in table, f"{node}: {name} is not a parameter"
            assert _problem(name, table[name], value) is None, (node, name, value)
    sim, mpc = parameters["sim_node"], parameters["mpc_node"]
    assert sim["floating_base"] and mpc["floating_base"]
    assert sim["contact_frames"] == mpc["contact_frames"] and sim["contact_kinds"] == mpc["contact_kinds"]
    assert mpc["gait"] in mpc["gaits"]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[robot]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf(robot), mpc["posture"], missing="neutral")
    start = np.asarray(sim["initial_positions"], dtype=float)
    if start.size == 1:  # one value for every joint: the neutral configuration, from which the MPC moves it
        np.testing.assert_array_equal(np.full(model.nq - 7, start[0]), rd.neutral(model)[7:])
    else:  # the simulator starts at the MPC's reference posture
        np.testing.assert_allclose(start, posture[7:], rtol=0, atol=1e-6)
    data = model.create_data()
    for foot in mpc["contact_frames"]:
        rd.frame_placement(model, data, foot)  # raises for a frame the robot does not have
    for key in ("foot_radius", "sole_size"):
        if key in mpc or key in sim:
            assert mpc.get(key, MPC_NODE[key].default) == sim.get(key, SIM_NODE[key].default), key


def test_legged_launch_file_gives_the_nodes_the_demo_files():
    tree = ast.parse(LEGGED_LAUNCH.read_text(encoding="utf-8"))
    robots = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", "") == "ROBOTS")
    assert tuple(ast.literal_eval(robots)) == legged.LEGGED_DEMOS
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert {"sim_node", "mpc_node", "robot", "gait", "urdf_path", "srdf_path"} <= strings
    # Each node gets [its own file, the robot's file, overrides], like the demo script.
    assert 'parameters=[str(config / f"{name}.yaml"), str(config / f"{robot}.yaml"), overrides]' in \
        LEGGED_LAUNCH.read_text()


def test_legged_setup_of_any_robot(tmp_path):
    import argparse

    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    arguments = argparse.Namespace(robot=None, urdf=str(EXAMPLE_ROBOTS["solo12"]), feet="FL_FOOT,FR_FOOT,HL_FOOT,HR_FOOT",
                                   contact="point", srdf=str(example_robot_srdf("solo12")), posture="standing")
    urdf, parameter_file, sim, mpc = legged.legged_setup(arguments)
    assert urdf == arguments.urdf and parameter_file == ""
    assert sim["contact_frames"] == mpc["contact_frames"] == "[FL_FOOT, FR_FOOT, HL_FOOT, HR_FOOT]"
    assert sim["floating_base"] is True and mpc["posture"] == "standing"
    robot_file = legged.legged_parameters("solo12")
    np.testing.assert_allclose(sim["initial_positions"], robot_file["sim_node"]["initial_positions"], atol=1e-6)


def test_legged_document_of_a_summary_and_the_nodes_diagnostics():
    summary = {"command_rate": 49.5, "base_position_rms": 0.008, "walk_speed": 0.19, "sway_amplitude": None,
               "torque_ratio": np.array([0.2, 0.7]), "mpc_cone_violations": 3, "cone_use_max": 0.65}
    diagnostics = {"solve_time_p50_us": "4000.0", "commands_plan": "400", "refused_odom/stale": "2"}
    simulator = {"fell": "false", "pushes_applied": "1", "friction_cone_violations": "0", "lost_time_s": "0.5"}
    document = legged_summary.legged_document(summary, diagnostics, simulator, 1, "solo12", "trot")
    assert document["solve_p50_ms"] == 4.0 and document["solve_p99_ms"] is None
    assert document["fell"] is False and document["pushes_survived"] == 1 == document["pushes_sent"]
    assert document["max_torque_ratio"] == 0.7 and document["simulator_lost_time_s"] == 0.5
    assert document["commands_by_source"] == {"plan": 400} and document["refused_mpc"] == {"odom/stale": 2}
    assert document["refused_simulator"] == {}
    # A simulator that never reported counts as fallen: nothing survived.
    assert legged_summary.legged_document(summary, diagnostics, {}, 1, "solo12", "trot")["pushes_survived"] == 0


def test_base_reference_follows_the_motions_sent_to_the_mpc():
    times = np.arange(0.0, 4.0, 0.01)
    base = np.tile([1.0, 2.0, 0.3, 0.0, 0.0, 0.0, 1.0], (len(times), 1))
    reference = legged_summary.reference_path(times, base, [(2.0, {"base_velocity": [0.2, 0.0]})])
    standing = times < 2.0
    np.testing.assert_allclose(reference[standing], np.tile([1.0, 2.0, 0.3], (standing.sum(), 1)))
    np.testing.assert_allclose(reference[~standing, 0], 1.0 + 0.2 * (times[~standing] - 2.0), atol=1e-9)
    np.testing.assert_allclose(reference[:, 1:], np.tile([2.0, 0.3], (len(times), 1)))
    assert legged_summary.reference_path(times[:0], base[:0], []).shape == (0, 3)


def test_logs_folder_and_the_nodes_that_exited(tmp_path):
    assert processes.logs_folder(str(tmp_path / "a" / "b")).is_dir()
    made = processes.logs_folder(None)
    assert made.is_dir() and made.name.startswith("rbd_deriv_demo_")
    made.rmdir()

    class Process:
        def __init__(self, node, code):
            self.args, self.code = ["python", "-m", f"rbd_deriv.nodes.{node}"], code

        def poll(self):
            return self.code

    assert processes.exited([Process("sim_node", None), Process("mpc_node", 1)]) == ["mpc_node"]


#: Bounds of the short legged runs, from measured ones with a margin for a loaded CI machine: the MPC rate as a
#: fraction of the file's rate_hz, the base's RMS distance from its reference [m], contact-force samples (10 ms
#: apart, per foot) outside the MPC's cone. Measured on 2 shared cores (load 4-5): solo12 (8 s) RMS 8.7 mm, 50 of
#: 50 Hz, 16 samples outside mu; talos (4 s) RMS 8.2 mm, 25 of 25 Hz, none outside mu. solo12's trot puts 64
#: samples of a 20 s run outside mu = 0.7 (up to the floor's 1.0: feet that slip), as many with the URDF's
#: 1000 N m as with its 2.7 N m. talos's push at 1.6 s takes a foot to 0.36-0.65 of mu on an idle machine
#: (two runs); in 2 of 6 CI runs of 2026-11-27 (the cone a constraint of the problem, the machine compiling
#: and testing beside it) one sample of 800 passed mu: a few are allowed, a leak lasting longer is not.
LEGGED_BOUNDS = {"solo12": {"rate": 0.6, "base_rms": 0.015, "cone_samples": 50},
                 "talos": {"rate": 0.6, "base_rms": 0.02, "cone_samples": 3}}


@pytest.mark.parametrize("robot, arguments", [
    ("solo12", ["--duration", "8"]),    # stands, trots from 2 s, pushed at 3.2 s, walks at 0.2 m/s from 4.8 s
    ("talos", ["--duration", "4"]),     # stands, pushed (150 N) at 1.6 s
])
def test_legged_demo_json_on_a_short_run(tmp_path, robot, arguments):
    """``./run demo --robot R`` for a few seconds through both nodes: it does not fall, survives its push, and
    the summary has its fields."""
    import json
    import os
    import sys

    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    path = tmp_path / "legged.json"
    env = dict(os.environ)
    env.pop("ROS_DOMAIN_ID", None)
    run = subprocess.run([sys.executable, "-m", "rbd_deriv.demo", "--robot", robot, *arguments, "--json", str(path),
                          "--output", str(tmp_path / "legged.png"), "--logs", str(tmp_path / "logs")],
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    document = json.loads(path.read_text())
    for key in ("mpc_rate_hz", "solve_p50_ms", "solve_p99_ms", "fell", "base_position_rms_m", "max_torque_ratio",
                "friction_cone_violations_mpc_mu", "pushes_survived"):
        assert document[key] is not None, key
    bounds = LEGGED_BOUNDS[robot]
    asked = legged.legged_parameters(robot)["mpc_node"]["rate_hz"]
    assert document["fell"] is False and document["pushes_survived"] == 1 == document["pushes_sent"]
    # Torques against the actuators' limits the robot file gives both nodes (2.7 N m on solo12, not the URDF's 1000).
    assert 0.0 < document["max_torque_ratio"] <= 1.0
    # Forces against the MPC's own cone (its mu, under the floor's): MuJoCo's cone holds by construction.
    assert document["friction_cone_violations_mpc_mu"] <= bounds["cone_samples"], document
    assert document["mpc_rate_hz"] > bounds["rate"] * asked and document["solve_p99_ms"] >= document["solve_p50_ms"] > 0
    assert 0.0 < document["base_position_rms_m"] < bounds["base_rms"], document
    if robot == "solo12":
        assert document["gait"] == "trot" and abs(document["walk_speed_mps"] - 0.2) < 0.02, document
    assert (tmp_path / "legged.png").stat().st_size > 10_000
    # The video beside the plot, or one line saying why not (no offscreen OpenGL here): the run's result stands.
    assert (tmp_path / "legged.gif").is_file() or "video not written" in run.stdout, run.stdout[-2000:]


def test_the_reference_process_of_the_launch_file_ends_cleanly_on_two_sigints(tmp_path):
    """demo.launch.py's reference process (``--reference-only``), interrupted while it waits for the loop, as
    Ctrl-C under ros2 launch does it (the terminal's SIGINT, then launch's): exit code 0, no traceback."""
    import os
    import random
    import signal
    import sys
    import time

    environment = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(1, 200)),
                       ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1")
    with open(tmp_path / "stdout", "w+") as stdout, open(tmp_path / "stderr", "w+") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "rbd_deriv.demo", "--reference-only", "--duration", "5"],
                                   env=environment, stdout=stdout, stderr=stderr)
        try:
            deadline = time.monotonic() + 120.0
            while "waiting for the loop" not in (tmp_path / "stdout").read_text() and time.monotonic() < deadline:
                assert process.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=60.0)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    errors = (tmp_path / "stderr").read_text()
    assert "Traceback" not in errors, errors[-3000:]
    assert code == 0, errors[-3000:]
