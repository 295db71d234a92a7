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
    # On the simulated clock the simulator publishes /clock and every other node runs on it.
    for node, clock_parameter in (("sim_node", "publish_clock:=true"), ("mpc_node", "use_sim_time:=true"),
                                  ("dynamics_node", "use_sim_time:=true")):
        processes.start_node(node, arm.DEMO_PARAMETERS, {"urdf_path": "/robot.urdf"}, tmp_path / "log", "simulated")
        assert started[-1][1:3] == ["-m", f"rbd_deriv.nodes.{node}"]
        assert started[-1][8:] == ["-p", "urdf_path:=/robot.urdf", "-p", clock_parameter], started[-1]


def test_launch_file_gives_the_nodes_the_same_files():
    tree = ast.parse(LAUNCH.read_text(encoding="utf-8"))
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert {"demo.yaml", "sim_node", "dynamics_node", "mpc_node", "--reference-only", "--clock", "use_sim_time",
            "publish_clock"} <= strings
    # Each node gets [its own file, demo.yaml, overrides], in that order, like the script.
    assert 'parameters=[str(config / f"{name}.yaml"), str(config / "demo.yaml")' in LAUNCH.read_text()


def test_json_summary_reports_the_simulators_steps_by_source(tmp_path):
    import json

    summary = {"command_rate": 198.5, "rms": np.array([0.001, 0.002]), "max": np.array([0.01, 0.03]),
               "torque_ratio": np.array([0.4, 0.9])}
    diagnostics = {"solve_time_p50_us": "600.0", "solve_time_p99_us": "2500.0", "commands_plan": "3970",
                   "commands_stale_state": "2", "refused_joint_states/non_finite": "1", "rate_hz": "199.0"}
    simulator = {"steps_policy": "19800", "refused_policy/size": "3", "actuation": "policy", "lost_time_s": "0.25"}
    path = tmp_path / "demo.json"
    arm.write_summary(path, summary, diagnostics, simulator, {"policy": 19800, "command": 12, "brake": 3000},
                       "held", 200.0, ["j1", "j2"], processes.clock_fields("simulated", 9.0, 10.0))
    document = json.loads(path.read_text())
    assert document["clock"] == "simulated" and document["real_time_factor"] == 0.9
    assert document["mpc_rate_hz"] == 198.5 and document["rate_asked_hz"] == 200.0
    assert document["solve_p50_ms"] == 0.6 and document["solve_p99_ms"] == 2.5
    assert document["max_torque_ratio"] == 0.9 and document["max_error_rad"] == [0.01, 0.03]
    assert (document["steps_policy"], document["steps_command"], document["steps_brake"]) == (19800, 12, 3000)
    assert document["commands_by_source"] == {"plan": 3970, "stale_state": 2}
    assert document["refused_mpc"] == {"joint_states/non_finite": 1}
    assert document["refused_simulator"] == {"policy/size": 3} and document["simulator_lost_time_s"] == 0.25


def test_main_job_tracks_through_the_three_nodes(tmp_path):
    """``./run demo`` for a few seconds, as the README gives it: the simulator, the dynamics node and the MPC
    node in held mode over DDS. On a quiet machine it measures RMS 0.3-4 mrad per joint, 20 mrad at most on the
    light wrist, 185-196 Hz of the 200 asked (0.3-3.4 mrad with two busy loops beside it); with other work on
    both cores (load 6-7) a tick or input now and then comes late and the arm drifts for a moment: 83 mrad at
    most, seen once in five runs. One CI run measured RMS 12-52 mrad on every joint, in proportion to each
    joint's amplitude times its frequency: the arm about 25 ms behind its reference throughout. The bounds leave
    room for that; an arm that lost its reference is off by its amplitudes (RMS 0.25-0.57 rad here)."""
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
    # On the simulator's clock (the default), at most as fast as the wall clock (a busy machine slows it).
    assert document["clock"] == "simulated" and 0.2 < document["real_time_factor"] < 1.05, document
    assert document["mpc_rate_hz"] > 120.0, document
    assert max(document["rms_error_rad"]) < 0.1, document
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
    assert {"sim_node", "mpc_node", "robot", "gait", "urdf_path", "srdf_path", "use_sim_time", "publish_clock",
            "robot_state_publisher"} <= strings
    # Each node gets [its own file, the robot's file, overrides], like the demo script.
    assert 'parameters=[str(config / f"{name}.yaml"), str(config / f"{robot}.yaml"), overrides]' in \
        LEGGED_LAUNCH.read_text()


def test_legged_setup_of_any_robot(tmp_path):
    import argparse

    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    arguments = argparse.Namespace(robot=None, urdf=str(EXAMPLE_ROBOTS["solo12"]), feet="FL_FOOT,FR_FOOT,HL_FOOT,HR_FOOT",
                                   contact="point", srdf=str(example_robot_srdf("solo12")), posture="standing",
                                   locked_joints=None, sole="frame")
    urdf, parameter_file, sim, mpc = legged.legged_setup(arguments)
    assert urdf == arguments.urdf and parameter_file == "quadruped.yaml"
    assert sim["contact_frames"] == mpc["contact_frames"] == "[FL_FOOT, FR_FOOT, HL_FOOT, HR_FOOT]"
    assert sim["floating_base"] is True and mpc["posture"] == "standing" and "locked_joints" not in mpc
    robot_file = legged.legged_parameters("solo12")
    np.testing.assert_allclose(sim["initial_positions"], robot_file["sim_node"]["initial_positions"], atol=1e-6)
    # A humanoid on its soles: straight legs to start (as config/talos.yaml), its upper body locked for the MPC.
    humanoid = argparse.Namespace(robot=None, urdf=str(EXAMPLE_ROBOTS["talos"]),
                                  feet="leg_left_sole_fix_joint,leg_right_sole_fix_joint", contact="frame",
                                  srdf=str(example_robot_srdf("talos")), posture="half_sitting",
                                  locked_joints="head_1_joint,head_2_joint", sole="frame")
    _, parameter_file, sim, mpc = legged.legged_setup(humanoid)
    assert "initial_positions" not in sim and mpc["locked_joints"] == "[head_1_joint, head_2_joint]"
    assert parameter_file == "humanoid.yaml" and sim["sole_placement"] == mpc["sole_placement"] == "frame"
    # config/humanoid.yaml holds talos's tuned values wherever talos.yaml sets the same parameter, and
    # config/quadruped.yaml solo12's.
    from rbd_deriv.nodes.parameters import MPC_NODE, SIM_NODE, _problem

    for generic_file, robot in (("humanoid.yaml", "talos"), ("quadruped.yaml", "solo12")):
        generic, tuned = legged.read_parameters(generic_file), legged.legged_parameters(robot)
        for node, table in (("sim_node", SIM_NODE), ("mpc_node", MPC_NODE)):
            for name, value in generic[node].items():
                assert name in table and _problem(name, table[name], value) is None, (node, name, value)
        for node, values in generic.items():
            shared = {key: value for key, value in values.items() if key in tuned[node]}
            assert shared == {key: tuned[node][key] for key in shared} and len(shared) >= 10, (generic_file, node)
            # Nothing of the robot itself: its feet, posture and actuators come from the command line and its URDF.
            assert not {"contact_frames", "posture", "effort_limits"} & set(values), node
    with pytest.raises(SystemExit, match="--contact frame"):
        legged.legged_setup(argparse.Namespace(**dict(vars(arguments), sole="collision")))


def test_legged_document_of_a_summary_and_the_nodes_diagnostics():
    summary = {"command_rate": 99.5, "cmd_vel_error_rms": [0.01, 0.02, 0.03], "distance": 1.5, "yaw_change": 0.4,
               "gaits_run": ["stand", "trot"], "torque_ratio": np.array([0.2, 0.7]), "mpc_cone_violations": 3,
               "cone_use_max": 0.65, "segments": [{"name": "stand"}]}
    diagnostics = {"solve_time_p50_us": "4000.0", "commands_plan": "400", "refused_odom/stale": "2",
                   "cmd_vel_clamped": "2"}
    simulator = {"fell": "false", "pushes_applied": "1", "friction_cone_violations": "0", "lost_time_s": "0.5"}
    pushes = [(3.0, 0.8, [0.0, 20.0, 0.0])]
    document = legged_summary.legged_document(summary, diagnostics, simulator, pushes, "solo12")
    assert document["solve_p50_ms"] == 4.0 and document["solve_p99_ms"] is None
    assert document["fell"] is False and document["pushes_survived"] == 1 == document["pushes_sent"]
    assert document["pushes"] == [{"at_s": 3.0, "velocity_change_mps": 0.8, "force_n": [0.0, 20.0, 0.0]}]
    assert document["max_torque_ratio"] == 0.7 and document["simulator_lost_time_s"] == 0.5
    assert document["cone_violations"] == 3 and document["cmd_vel_clamped"] == 2
    assert document["commands_by_source"] == {"plan": 400} and document["refused_mpc"] == {"odom/stale": 2}
    assert document["refused_simulator"] == {}
    # A simulator that never reported counts as fallen: nothing survived.
    assert legged_summary.legged_document(summary, diagnostics, {}, pushes, "solo12")["pushes_survived"] == 0
    assert legged_summary.legged_document(summary, diagnostics, {}, pushes, "solo12", [0.05, 0.0])["foot_lift_m"] \
        == [0.05, 0.0]
    # The simulator's contact counts are the run's: those of its report before the run taken off; -1 if none.
    counted = dict(simulator, friction_cone_violations="7", cop_edge_steps="40")
    before = {"friction_cone_violations": "2", "cop_edge_steps": "15"}
    document = legged_summary.legged_document(summary, diagnostics, counted, pushes, "talos", (), before)
    assert document["friction_cone_violations"] == 5 and document["cop_edge_steps"] == 25
    assert legged_summary.legged_document(summary, diagnostics, simulator, pushes, "solo12", (), before)[
        "cop_edge_steps"] == -1


def test_foot_lift_is_how_high_each_foot_rose():
    """solo12's recorded states: the joints still, the base rising 4 cm then back (every foot rises 4 cm with it:
    the oracle is the base's own motion), then one knee bent, which lifts that foot only (its height from Pinocchio's
    frame placement at the bent knee against the posture's); the samples of another message's joints are skipped
    for lack of a matching time, those past the run ignored."""
    from types import SimpleNamespace

    from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

    source = str(EXAMPLE_ROBOTS["solo12"])
    model = rd.load_urdf(source, floating_base=True)
    feet = ["FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"]
    names = list(model.actuated_joint_names)
    posture = np.array([0.0, 0.8, -1.6] * 4)
    times = np.arange(0.0, 1.0, 0.001)
    lift = np.where(times < 0.5, 0.04 * np.sin(np.pi * times / 0.5), 0.0)
    joints = [(t, posture.copy()) for t in times]
    for k in np.flatnonzero(times >= 0.6):
        joints[k][1][2] = -2.2  # FL's knee
    base = [(t, np.r_[0.0, 0.0, 0.3 + h, 0.0, 0.0, 0.0, 1.0]) for t, h in zip(times, lift)]
    recorder = SimpleNamespace(joints=joints, base=base, joint_names=names)
    lifts = legged_summary.foot_lift(model, feet, recorder, 0.0, 0.9)
    bridge = PinocchioBridge(source, floating_base=True)
    q = np.r_[0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 1.0, posture]
    q_bent = q.copy()
    q_bent[7 + 2] = -2.2
    rise = bridge.frame_placement(q_bent, "FL_FOOT")[2, 3] - bridge.frame_placement(q, "FL_FOOT")[2, 3]
    assert rise > 0.04
    np.testing.assert_allclose(lifts, [rise, 0.04, 0.04, 0.04], atol=1e-4)
    assert np.isnan(legged_summary.foot_lift(model, feet, SimpleNamespace(joints=[], base=base, joint_names=names),
                                             0.0, 0.9)).all()


def test_the_cycle_averaged_velocity_of_a_base_that_walks_turns_and_bobs():
    """A base on an arc at 0.3 m/s and 0.5 rad/s, bobbing sideways at its step rate (0.4 s cycles): averaged over
    one cycle, its velocity in its heading frame is the command's; tilt and heading read from the quaternion."""
    times = np.arange(0.0, 6.0, 0.001)
    heading = 0.5 * times
    lateral = 0.01 * np.sin(2 * np.pi * times / 0.4)
    x = 0.3 / 0.5 * np.sin(heading) - lateral * np.sin(heading)
    y = 0.3 / 0.5 * (1 - np.cos(heading)) + lateral * np.cos(heading)
    base = np.c_[x, y, np.full_like(x, 0.23), np.zeros_like(x), np.zeros_like(x), np.sin(heading / 2),
                 np.cos(heading / 2)]
    velocity = legged_summary.cycle_velocity(times, base, np.full(len(times), 0.4))
    inside = ~np.isnan(velocity[:, 0])
    assert inside.sum() > 5000 and np.isnan(velocity[:100]).all()
    # (Within 0.01: the bob turning with the heading leaves its amplitude times the yaw rate, 5 mm/s, in the mean.)
    np.testing.assert_allclose(velocity[inside], np.tile([0.3, 0.0, 0.5], (inside.sum(), 1)), atol=0.01)
    assert np.abs(velocity[inside].mean(axis=0) - [0.3, 0.0, 0.5]).max() < 2e-3
    tilt, yaw = legged_summary.tilt_and_heading(base)
    np.testing.assert_allclose(tilt, 0.0, atol=1e-7)
    np.testing.assert_allclose(yaw, heading, atol=1e-9)


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


#: Bounds of the short legged runs, from measured ones with a margin for a loaded CI machine. Per case: the MPC rate
#: as a fraction of the file's rate_hz; the cycle-averaged velocity error (vx, vy [m/s], wz [rad/s]) of the moving
#: segment from 1 s after its start (the second after a push left out); the base's height range [m] and largest
#: tilt [rad]; contact-force samples (10 ms apart, per foot) outside the MPC's own cone. Measured 2026-11-27 on the
#: 2 shared cores, full runs of ./run demo (docs/mpc.md, "Locomotion through the nodes"): solo12 at 199 of 200 Hz
#: idle and 127 Hz beside a CPU hog, velocity errors within 0.002 m/s and 0.004 rad/s walking, turning,
#: side-stepping, pacing, bounding and crawling, 0.027 m/s sideways around the 0.8 m/s push; base 0.192-0.236 m
#: high (the crawl's lowest), tilt under 0.033 rad; 0-19 samples past mu per 3-4 s segment (touchdowns). talos at
#: 100 of 100 Hz: 0-1 samples past mu, base 1.015-1.019 m high, tilt 0.007 rad through its 0.2 m/s push; walking
#: at 0.15 m/s (three full runs of its script): velocity errors within 0.005 m/s, base 1.013-1.019 m high, tilt
#: 0.023 rad, 1-14 samples past mu per 5 s segment (touchdowns and lift-offs). Where given, the soles' steps on an
#: edge (2026-11-28, the stand and push case: 53 and 57).
LEGGED_CASES = {
    "solo12 trot, walk, turn, push": (["--robot", "solo12", "--gait", "trot", "--cmd-vel", "0.3,0.0,0.5",
                                       "--push-velocity", "0.8", "--duration", "7"],
                                      {"rate": 0.5, "error": (0.05, 0.05, 0.1), "height": (0.2, 0.29),
                                       "tilt": 0.15, "cone_samples": 60}),
    "solo12 pace sideways": (["--robot", "solo12", "--gait", "pace", "--cmd-vel", "0.0,0.15,0.0", "--duration", "5"],
                             {"rate": 0.5, "error": (0.05, 0.05, 0.1), "height": (0.2, 0.30), "tilt": 0.15,
                              "cone_samples": 60}),
    "solo12 bound": (["--robot", "solo12", "--gait", "bound", "--cmd-vel", "0.2,0.0,0.0", "--duration", "5"],
                     {"rate": 0.5, "error": (0.05, 0.05, 0.1), "height": (0.2, 0.30), "tilt": 0.15,
                      "cone_samples": 60}),
    "solo12 crawl": (["--robot", "solo12", "--gait", "crawl", "--cmd-vel", "0.1,0.0,0.0", "--duration", "5"],
                     {"rate": 0.5, "error": (0.05, 0.05, 0.1), "height": (0.17, 0.29), "tilt": 0.15,
                      "cone_samples": 60}),
    "talos stand, push": (["--robot", "talos", "--gait", "stand", "--push-velocity", "0.2", "--duration", "5"],
                          {"rate": 0.5, "error": None, "height": (0.98, 1.05), "tilt": 0.05, "cone_samples": 3,
                           "cop_edge_steps": 120}),
    "talos walk": (["--robot", "talos", "--gait", "walk", "--cmd-vel", "0.15,0.0,0.0", "--duration", "7"],
                   {"rate": 0.5, "error": (0.05, 0.05, 0.1), "height": (0.98, 1.05), "tilt": 0.08,
                    "cone_samples": 30}),
}


@pytest.mark.parametrize("case", list(LEGGED_CASES))
def test_legged_demo_json_on_a_short_run(tmp_path, case):
    """``./run demo`` on a legged robot for a few seconds through both nodes, driven by cmd_vel and its gait: it
    does not fall, survives its push, follows the command within the bounds, keeps its height and stays upright,
    its feet inside the MPC's cone, its torques within the actuators' limits."""
    import json
    import os
    import sys

    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    arguments, bounds = LEGGED_CASES[case]
    robot = arguments[1]
    path = tmp_path / "legged.json"
    env = dict(os.environ)
    env.pop("ROS_DOMAIN_ID", None)
    # One case renders its video (the rendering is tested in test_video.py; each GIF costs CI 5-15 s).
    video = [] if case == next(iter(LEGGED_CASES)) else ["--video", "none"]
    run = subprocess.run([sys.executable, "-m", "rbd_deriv.demo", *arguments, "--json", str(path),
                          "--output", str(tmp_path / "legged.png"), "--logs", str(tmp_path / "logs"), *video],
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    document = json.loads(path.read_text())
    asked = legged.legged_parameters(robot)["mpc_node"]["rate_hz"]
    assert document["clock"] == "simulated" and 0.2 < document["real_time_factor"] < 1.05, document
    assert document["fell"] is False and document["pushes_survived"] == document["pushes_sent"] == \
        document["pushes_applied"] >= (1 if "push" in case else 0), document
    # Torques against the actuators' limits the robot file gives both nodes (2.7 N m on solo12, not the URDF's 1000).
    assert 0.0 < document["max_torque_ratio"] <= 1.0
    # Forces against the MPC's own cone (its mu, under the floor's): MuJoCo's cone holds by construction.
    assert document["cone_violations"] <= bounds["cone_samples"], document
    # Soles on their edges (the simulator's sole-steps of 1 ms, tipping): talos's 0.2 m/s push gave 53 and 57 with
    # the plan's center of pressure kept within 70 % of the sole (cop_margin 0.3), 282 and 298 planned to the edge.
    if "cop_edge_steps" in bounds:
        assert 0 <= document["cop_edge_steps"] <= bounds["cop_edge_steps"], document
    assert document["mpc_rate_hz"] > bounds["rate"] * asked and document["solve_p99_ms"] >= document["solve_p50_ms"] > 0
    low, high = bounds["height"]
    for segment in document["segments"]:
        assert low < segment["base_height_min_m"] <= segment["base_height_max_m"] < high, segment
        assert segment["max_tilt_rad"] < bounds["tilt"], segment
    moving = [segment for segment in document["segments"] if any(segment["cmd_vel"])]
    if bounds["error"] is not None:
        assert moving and all(segment["cmd_vel_error_rms"] is not None for segment in moving)
        for segment in moving:
            assert (np.array(segment["cmd_vel_error_rms"]) < bounds["error"]).all(), segment
            # It went where it was told: the mean velocity is the command's, not a standing robot's.
            np.testing.assert_allclose(segment["velocity_mean"], segment["cmd_vel"], atol=0.05)
        assert document["distance_m"] > 0.5 * sum(np.hypot(*s["cmd_vel"][:2]) * (s["duration_s"] - 1.0)
                                                  for s in moving)
    # Foot clearance: a stepping foot rose by most of its swing (5 cm on talos, 5 cm trotting, 3 cm pacing on
    # solo12); a standing one stays down, talos's soles through its 0.2 m/s push too (without the MPC's
    # center-of-pressure cost the push rolled the right sole onto an edge: 3.7 cm, 31 degrees).
    lifts = np.array(document["foot_lift_m"])
    assert lifts.shape == (len(legged.legged_parameters(robot)["mpc_node"]["contact_frames"]),)
    assert (lifts > 0.015).all() if bounds["error"] is not None else (lifts < 0.01).all(), lifts
    assert (tmp_path / "legged.png").stat().st_size > 10_000
    # The video beside the plot, or one line saying why not (no offscreen OpenGL here): the run's result stands.
    assert not video or not (tmp_path / "legged.gif").exists()
    assert video or (tmp_path / "legged.gif").is_file() or "video not written" in run.stdout, run.stdout[-2000:]


#: A standing posture for Unitree's G1 (example-robot-data ships no SRDF for it): knees bent, arms off the body.
G1_SRDF = """<?xml version="1.0"?>
<robot name="g1_29dof_rev_1_0">
  <group_state name="standing" group="all">
    <joint name="left_hip_pitch_joint" value="-0.3"/><joint name="left_knee_joint" value="0.6"/>
    <joint name="left_ankle_pitch_joint" value="-0.3"/><joint name="right_hip_pitch_joint" value="-0.3"/>
    <joint name="right_knee_joint" value="0.6"/><joint name="right_ankle_pitch_joint" value="-0.3"/>
    <joint name="left_shoulder_roll_joint" value="0.2"/><joint name="right_shoulder_roll_joint" value="-0.2"/>
    <joint name="left_elbow_joint" value="0.5"/><joint name="right_elbow_joint" value="0.5"/>
  </group_state>
</robot>
"""


def test_any_humanoid_walks_from_its_urdf(tmp_path):
    """Unitree's G1 from its URDF alone (no sole frame: the soles come from its feet's collision spheres; no robot
    file: config/humanoid.yaml), its arms locked for the MPC, walks 0.15 m/s forward through both nodes: no fall,
    the command followed, its feet lifted, every command from a plan, its torques within the URDF's limits."""
    import json
    import os
    import sys

    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    from rbd_deriv.testing.robots import example_robot_data_dir

    urdf = example_robot_data_dir() / "g1_description" / "urdf" / "g1_29dof_rev_1_0.urdf"
    srdf = tmp_path / "g1.srdf"
    srdf.write_text(G1_SRDF)
    arms = [f"{side}_{joint}_joint" for side in ("left", "right") for joint in
            ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")]
    path = tmp_path / "g1.json"
    env = dict(os.environ)
    env.pop("ROS_DOMAIN_ID", None)
    run = subprocess.run([sys.executable, "-m", "rbd_deriv.demo", "--urdf", str(urdf), "--feet",
                          "left_ankle_roll_link,right_ankle_roll_link", "--contact", "frame", "--sole", "collision",
                          "--srdf", str(srdf), "--posture", "standing", "--locked-joints", ",".join(arms),
                          "--gait", "walk", "--cmd-vel", "0.15,0.0,0.0", "--duration", "6", "--json", str(path),
                          "--output", str(tmp_path / "g1.png"), "--logs", str(tmp_path / "logs"), "--video", "none"],
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    document = json.loads(path.read_text())
    assert document["fell"] is False and 0.0 < document["max_torque_ratio"] <= 1.0, document
    assert document["mpc_rate_hz"] > 50.0, document
    # Every command a plan's but the few before the first state arrived: no cone refusal, no failed solve (a late
    # touchdown used to give both, every step).
    sources = document["commands_by_source"]
    assert sources["plan"] > 300 and sources["cone_refusal"] == sources["solver_failure"] == 0, sources
    assert document["cone_violations"] <= 30, document
    walk = document["segments"][-1]
    np.testing.assert_allclose(walk["velocity_mean"], [0.15, 0.0, 0.0], atol=0.05)
    assert (np.array(walk["cmd_vel_error_rms"]) < [0.05, 0.05, 0.1]).all(), walk
    for segment in document["segments"]:
        assert 0.6 < segment["base_height_min_m"] <= segment["base_height_max_m"] < 0.85, segment
        assert segment["max_tilt_rad"] < 0.08, segment
    assert (np.array(document["foot_lift_m"]) > 0.015).all(), document["foot_lift_m"]
    mpc_log = (tmp_path / "logs" / "mpc_node.log").read_text()
    assert "feet ['left_ankle_roll_link_sole', 'right_ankle_roll_link_sole'] (frame, frame)" in mpc_log


def test_any_quadruped_trots_from_its_urdf(tmp_path):
    """ANYmal B (30 kg, 80 N m actuators: twelve times solo12's mass, thirty times its torques) from its URDF and
    SRDF (config/quadruped.yaml: solo12's tuning) trots forward at 0.3 m/s through both nodes: the torque and force
    weights are per the robot (weight_scale robot); the MPC's default weights in absolute units had its plans trot
    backwards at 0.27 m/s. No fall, the command followed, its feet lifted, its torques within the URDF's limits."""
    import json
    import os
    import sys

    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    from rbd_deriv.testing.robots import example_robot_data_dir

    folder = example_robot_data_dir() / "anymal_b_simple_description"
    path = tmp_path / "anymal.json"
    env = dict(os.environ)
    env.pop("ROS_DOMAIN_ID", None)
    run = subprocess.run([sys.executable, "-m", "rbd_deriv.demo", "--urdf", str(folder / "robots" / "anymal.urdf"),
                          "--feet", "LF_FOOT,RF_FOOT,LH_FOOT,RH_FOOT", "--srdf", str(folder / "srdf" / "anymal.srdf"),
                          "--posture", "standing", "--gait", "trot", "--cmd-vel", "0.3,0.0,0.0", "--duration", "5",
                          "--json", str(path), "--output", str(tmp_path / "anymal.png"), "--logs",
                          str(tmp_path / "logs"), "--video", "none"],
                         env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    document = json.loads(path.read_text())
    assert document["fell"] is False and 0.0 < document["max_torque_ratio"] <= 1.0, document
    trot = document["segments"][-1]
    np.testing.assert_allclose(trot["velocity_mean"], [0.3, 0.0, 0.0], atol=0.05)
    assert (np.array(trot["cmd_vel_error_rms"]) < [0.05, 0.05, 0.1]).all(), trot
    assert 0.45 < trot["base_height_min_m"] <= trot["base_height_max_m"] < 0.56 and trot["max_tilt_rad"] < 0.05, trot
    assert (np.array(document["foot_lift_m"]) > 0.03).all(), document["foot_lift_m"]


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


@pytest.mark.parametrize("arguments, match", [
    (["--gait", "gallop"], "neither stand nor in the gait table"),
    (["--gait", "trot", "--cmd-vel", "1,nan,0"], "three finite numbers"),
    (["--gait", "trot", "--cmd-vel", "1,0"], "three finite numbers"),
    (["--gait", "trot", "--push-velocity", "50"], "push-velocity must be in"),
    (["--gait", "trot", "--push-velocity", "-1"], "push-velocity must be in"),
])
def test_the_legged_demo_refuses_a_bad_request_before_it_starts_anything(arguments, match):
    from rbd_deriv.demo.__main__ import main

    with pytest.raises(SystemExit, match=match):
        main(["--robot", "solo12", *arguments])


def test_a_script_scaled_to_a_duration_keeps_its_proportions():
    from rbd_deriv.demo.scenarios import SCENARIOS, generic_scenario, scaled

    script = SCENARIOS["solo12"]
    half = scaled(script, 0.5 * sum(s.duration for s in script))
    assert [s.duration for s in half] == pytest.approx([0.5 * s.duration for s in script])
    assert [s.push_at for s in half] == pytest.approx([0.5 * s.push_at for s in script])
    assert scaled(script, None) == script
    stand, walk = generic_scenario("pace", (0.2, 0.0, 0.0), 0.5, 10.0)
    assert stand.duration == 2.0 and walk.duration == 8.0 and walk.parameters == {"gait": "pace"}
    assert 2.0 + walk.push_at == pytest.approx(6.0) and walk.push == 0.5 and walk.moving and not stand.moving
