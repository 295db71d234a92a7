"""The legged demo (``python -m rbd_deriv.demo --robot solo12|talos``, or ``--urdf`` with ``--feet``): the robot
follows its script (:mod:`rbd_deriv.demo.scenarios`): stands, then gaits and velocity commands, and pushes sized by
the velocity change they give its base.

Two processes: the simulator (MuJoCo, floating base on a floor) and the MPC node, with the robot's file of
config/. This process drives the MPC node as a user would, through ``cmd_vel`` (geometry_msgs/Twist, 20 Hz, as a
teleop does) and its run-time parameters (the gait), sends the pushes to the simulator, records the odometry,
contact forces, joint states and torque commands, then reports (the figures of
:mod:`rbd_deriv.demo.legged_summary`, per segment of the script) and renders the run's video
(:mod:`rbd_deriv.demo.video`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rbd_deriv.demo.legged_summary import foot_lift, legged_document, summarize_legged, tilt_and_heading
from rbd_deriv.demo.plots import plot_legged
from rbd_deriv.demo.processes import (STARTUP_TIMEOUT, LoopRecorder, clock_fields, exited, logs_folder,
                                      read_parameters, spin_until, start_node, wait_for_loop)
from rbd_deriv.demo.scenarios import MAX_PUSH_VELOCITY, PUSH_DURATION, SCENARIOS, Segment, generic_scenario, scaled
from rbd_deriv.demo.video import run_video, video_path
from rbd_deriv.nodes.processes import stop_processes

__all__ = ["LEGGED_DEMOS", "LeggedRecorder", "legged_parameters", "legged_setup", "run"]

#: The legged robots with a parameter file in config/ (``<robot>.yaml``: the simulator's and the MPC node's
#: sections) and their URDF and SRDF in example-robot-data.
LEGGED_DEMOS = ("solo12", "talos")

#: Rate [Hz] at which the velocity command is published, as a teleop or a navigation stack does.
CMD_VEL_RATE = 20.0


def _pose(odometry: Any) -> np.ndarray:
    """(7,) the base pose of a nav_msgs/Odometry: position [m], quaternion x, y, z, w."""
    from rbd_deriv.messages import odometry_arrays

    position, orientation, _, _ = odometry_arrays(odometry)
    return np.r_[position, orientation]


def legged_parameters(robot: str) -> dict:
    """{node name: {parameter: value}} of config/<robot>.yaml."""
    return read_parameters(f"{robot}.yaml")


def _names(values: Sequence[str]) -> str:
    """A string-array parameter on a command line (``-p name:=[a, b]``)."""
    return "[" + ", ".join(values) + "]"


def legged_setup(arguments: Any) -> tuple[str, str, dict, dict]:
    """(urdf, parameter file or "", simulator overrides, MPC overrides) of the legged demo asked for: a robot of
    :data:`LEGGED_DEMOS` (its file, its example-robot-data URDF and SRDF), or ``--urdf`` with its feet: on soles
    (``--contact frame``) config/humanoid.yaml's humanoid settings, on point feet config/quadruped.yaml's (the
    simulator at the SRDF posture's joints)."""
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    if arguments.urdf is None:
        urdf, srdf = str(EXAMPLE_ROBOTS[arguments.robot]), str(example_robot_srdf(arguments.robot))
        return urdf, f"{arguments.robot}.yaml", {"urdf_path": urdf}, {"urdf_path": urdf, "srdf_path": srdf}
    import rbd_deriv as rd
    from rbd_deriv.control.srdf import reference_posture

    if not arguments.feet:
        raise SystemExit("--urdf needs --feet F1,F2,...")
    if arguments.sole == "collision" and arguments.contact != "frame":
        raise SystemExit("--sole collision is for soles: add --contact frame")
    feet = arguments.feet.split(",")
    kinds = _names([arguments.contact] * len(feet))
    shared = {"urdf_path": arguments.urdf, "floating_base": True, "contact_frames": _names(feet),
              "contact_kinds": kinds, "sole_placement": arguments.sole}
    sim = dict(shared)
    mpc = dict(shared, srdf_path=arguments.srdf or "", posture=arguments.posture or "")
    if arguments.locked_joints:
        mpc["locked_joints"] = _names(arguments.locked_joints.split(","))
    if arguments.contact == "frame":
        # A humanoid: config/humanoid.yaml. It starts on straight legs, as talos does: the brakes, which hold the
        # robot until the first policy, lock a humanoid bent at its posture and throw it off the floor; the MPC
        # bends it to its posture over posture_ramp.
        return arguments.urdf, "humanoid.yaml", sim, mpc
    # A quadruped on point feet: config/quadruped.yaml (solo12's tuning, the weights per the robot). It starts at
    # the posture's joints.
    if arguments.srdf and arguments.posture:
        model = rd.load_urdf(arguments.urdf, floating_base=True)
        posture = reference_posture(model, arguments.srdf, arguments.posture, missing="neutral")
        sim["initial_positions"] = posture[7:].tolist()
    return arguments.urdf, "quadruped.yaml", sim, mpc


class LeggedRecorder(LoopRecorder):
    """The legged demo's rclpy node: switches the gait, pushes the base, records what the loop does.

    Attributes:
        base: (stamp [s], base pose (7,): position [m], quaternion x, y, z, w) of each odometry message.
        contacts: (stamp [s], forces (feet, 3) [N], touching (feet,)) of each contact_forces message.
        joints: (stamp [s], positions (nj,) [rad]) of each joint_states message, for the video.
        joint_names: The joints of :attr:`joints`' positions (those of the first message).
    """

    def __init__(self, command_topic: str, clock: str = "wall") -> None:
        from nav_msgs.msg import Odometry
        from rcl_interfaces.srv import SetParameters
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from rbd_deriv.msg import ContactForces, Push
        from rbd_deriv.nodes.spin import PolledSubscription

        super().__init__("rbd_deriv_legged_demo", command_topic, clock)
        self.base: list[tuple[float, np.ndarray]] = []
        self.contacts: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.joints: list[tuple[float, np.ndarray]] = []
        self.joint_names: list[str] = []
        from geometry_msgs.msg import Twist

        self.push_publisher = self.node.create_publisher(Push, "push", 10)
        self.cmd_vel_publisher = self.node.create_publisher(Twist, "cmd_vel", 10)
        self.parameters = self.node.create_client(SetParameters, "/mpc_node/set_parameters")
        # The simulator's 1 kHz topics are taken in batches by poll() as CDR bytes and decoded after the
        # run (decode()): one executor callback per message would cost this process about half a core,
        # taken from the two nodes it watches.
        queue = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        #: Indices of :attr:`inputs` that delivered at least one message.
        self.heard: set = set()
        self.inputs = ((PolledSubscription(self.node, Odometry, "odom", queue), []),
                       (PolledSubscription(self.node, ContactForces, "contact_forces", queue), []),
                       (PolledSubscription(self.node, JointState, "joint_states", queue), []))

    def poll(self) -> None:
        """Keep the odometry, contact forces and joint states received since the previous call (while
        recording); note which inputs have delivered anything (:attr:`heard`)."""
        for k, (subscription, raw) in enumerate(self.inputs):
            taken = subscription.take(serialized=True)
            if taken:
                self.heard.add(k)
            if self.recording:
                raw.extend(taken)

    def decode(self) -> None:
        """Fill :attr:`base`, :attr:`contacts` and :attr:`joints` from what :meth:`poll` kept, at the messages'
        stamps [s]."""
        from rclpy.serialization import deserialize_message

        from rbd_deriv.messages import stamp_to_ns

        (odometry, raw_odometry), (contacts, raw_contacts), (states, raw_states) = self.inputs
        for raw in raw_odometry:
            message = deserialize_message(raw, odometry.message_type)
            self.base.append((stamp_to_ns(message.header.stamp) * 1e-9, _pose(message)))
        for raw in raw_contacts:
            message = deserialize_message(raw, contacts.message_type)
            self.contacts.append((stamp_to_ns(message.header.stamp) * 1e-9, np.array(message.forces).reshape(-1, 3),
                                  np.array(message.touching, dtype=bool)))
        for raw in raw_states:
            message = deserialize_message(raw, states.message_type)
            self.joint_names = self.joint_names or list(message.name)
            if list(message.name) == self.joint_names:
                self.joints.append((stamp_to_ns(message.header.stamp) * 1e-9, np.array(message.position)))
        for _, raw in self.inputs:
            raw.clear()

    def set_parameters(self, values: dict) -> None:
        """Set the MPC node's parameters ``values`` (the gait, the base velocity, the sway; answered
        asynchronously, a refusal shows in its log)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()
                                                    for name, value in values.items()])
        self.parameters.call_async(request)

    def cmd_vel(self, command: Sequence[float]) -> None:
        """Publish the velocity command (vx, vy [m/s], wz [rad/s]) in the base frame."""
        from geometry_msgs.msg import Twist

        message = Twist()
        message.linear.x, message.linear.y, message.angular.z = (float(x) for x in command)
        self.cmd_vel_publisher.publish(message)

    def heading(self) -> float:
        """The base's yaw [rad] in the newest odometry received (0 before any)."""
        from rclpy.serialization import deserialize_message

        subscription, raw = self.inputs[0]
        if not raw:
            return 0.0
        _, heading = tilt_and_heading(_pose(deserialize_message(raw[-1], subscription.message_type))[None])
        return float(heading[0])

    def push(self, force: Sequence[float], duration: float) -> None:
        """Push the base with ``force`` (3,) [N] in the world frame for ``duration`` [s] (the simulator's push)."""
        from rbd_deriv.msg import Push

        self.push_publisher.publish(Push(force=np.asarray(force, dtype=float), torque=np.zeros(3),
                                         duration=float(duration)))


def run(arguments: Any) -> int:
    """The legged demo: simulator and MPC node as processes, the robot's script; 0 when the robot did not fall and
    no torque exceeded its limit."""
    import rclpy

    import rbd_deriv as rd
    from rbd_deriv.control.legged_settings import parse_gait_table
    from rbd_deriv.core.soles import feet_on_soles
    from rbd_deriv.nodes.parameters import actuator_limits

    urdf, parameter_file, sim_overrides, mpc_overrides = legged_setup(arguments)
    robot = arguments.robot or Path(urdf).stem
    files = read_parameters(parameter_file) if parameter_file else {"sim_node": {}, "mpc_node": {}}
    # What the MPC node runs with (its file, the robot's, then the numbers given on its command line).
    mpc_file = {**read_parameters("mpc_node.yaml")["mpc_node"], **files["mpc_node"],
                **{k: v for k, v in mpc_overrides.items() if isinstance(v, (int, float))}}
    model = rd.load_urdf(urdf, floating_base=True)
    # The torques are measured against the limits the nodes were given (the robot's file), not the URDF's.
    model.set_actuator_limits(actuator_limits(files["sim_node"].get("effort_limits", [0.0])))
    effort_limit = np.asarray(model.effort_limit, dtype=float)[[model.idx_v[n] for n in model.actuated_joint_names]]
    mass = float(model.inertias[:, 0].sum())
    segments = _script(arguments, robot)
    gaits = list(mpc_file.get("gaits", ["stand"]))
    asked = [str(s.parameters["gait"]) for s in segments if "gait" in s.parameters]
    missing = [g for g in dict.fromkeys(asked) if g not in gaits]
    if missing:
        mpc_overrides["gaits"] = _names(gaits + missing)
    feet = list(mpc_file.get("contact_frames") or arguments.feet.split(","))
    # The feet's frames as the nodes take them (--urdf: the command line's kinds and soles, not the files'): with
    # collision soles, the sole frames added to the model.
    if arguments.urdf is not None:
        kinds, placement = [arguments.contact] * len(feet), arguments.sole
    else:
        kinds, placement = list(mpc_file.get("contact_kinds") or ["point"] * len(feet)), mpc_file["sole_placement"]
    feet, _, _ = feet_on_soles(model, urdf, feet, kinds, placement, mpc_file["sole_size"])
    table = parse_gait_table(mpc_file.get("gait_table", []))
    unknown = [gait for gait in dict.fromkeys(asked) if gait != "stand" and gait not in table]
    if unknown:
        raise SystemExit(f"gait {', '.join(unknown)} is neither stand nor in the gait table "
                         f"({', '.join(table) or 'empty'}): add a row to the robot's gait_table")
    duration = sum(segment.duration for segment in segments)
    logs = logs_folder(arguments.logs)
    clock = arguments.clock
    processes = [start_node("sim_node", parameter_file, sim_overrides, logs / "sim_node.log", clock),
                 start_node("mpc_node", parameter_file, mpc_overrides, logs / "mpc_node.log", clock)]
    rclpy.init()
    recorder = LeggedRecorder(mpc_file.get("command_topic", "/effort_controller/commands"), clock)
    pushes: list = []
    try:
        print(f"starting sim_node and mpc_node for {robot} (logs in {logs}), on the {clock} clock ...", flush=True)
        loop_ok = wait_for_loop(recorder, processes)
        started = recorder.now()
        if not loop_ok:
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s (exited: {exited(processes) or 'none'}); "
                  f"see the logs in {logs}", file=sys.stderr)
            return 1
        # The script starts once this process hears the simulator's topics too (a 1 kHz topic's subscription may
        # match a second after the MPC's commands arrive): its first segment is then measured whole.
        if not spin_until(recorder, lambda: len(recorder.heard) == len(recorder.inputs), 30.0):
            print("the simulator's odometry, contact forces or joint states did not arrive within 30 s; the run "
                  "starts without them", file=sys.stderr)
        # And once the MPC has brought the robot to its posture from the simulator's start (posture_ramp after its
        # first plan): the first segment then shows the robot standing, not still bending to its posture.
        spin_until(recorder, lambda: recorder.now() >= started + float(mpc_file.get("posture_ramp", 1.0)), 60.0)
        print(f"running {duration:g} s: " + "; ".join(_describe(segment) for segment in segments), flush=True)
        start, wall_start = recorder.now(), time.monotonic()
        simulator_before = dict(recorder.sim_diagnostics())
        recorder.recording = True
        pushes = _play(recorder, segments, start, mass, processes)
        recorder.poll()
        recorder.recording = False
        pace = clock_fields(clock, recorder.now() - start, time.monotonic() - wall_start)
        # The last reports of both nodes cover the end of the run.
        spin_until(recorder, lambda: False, 1.2)
        diagnostics, simulator = recorder.mpc_diagnostics(), recorder.sim_diagnostics()
        recorder.decode()
    finally:
        stop_processes(processes)
        recorder.destroy()
        rclpy.try_shutdown()

    mu = float(mpc_file.get("mu", 0.7))
    periods = {name: spec.period for name, spec in table.items()}
    summary = summarize_legged(recorder, start, duration, effort_limit, mu, segments, periods)
    document = legged_document(summary, diagnostics, simulator, pushes, robot,
                               foot_lift(model, feet, recorder, start, duration), simulator_before)
    document.update(pace)
    title = (f"rbd_deriv legged demo: {model.name} (nv = {model.nv}), MuJoCo, MPC N={mpc_file.get('horizon', 20)}, "
             f"dt={mpc_file.get('dt', 0.02)} s, {mpc_file.get('rate_hz')} Hz asked")
    _print_report(title, document, mpc_file, mu)
    output = Path(arguments.output)
    plot_legged(summary, feet, effort_limit, {s["name"]: s["start_s"] for s in document["segments"]}, output, title)
    print(f"plot written to {output.resolve()}")
    run_video(video_path(arguments.video, output), urdf, recorder.joint_names, recorder.joints, start, duration,
              recorder.base)
    if arguments.json:
        import json

        Path(arguments.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"summary written to {Path(arguments.json).resolve()}")
    return 0 if not document["fell"] and document["max_torque_ratio"] <= 1.0 + 1e-9 else 1


def _script(arguments: Any, robot: str) -> tuple:
    """The segments asked for: the robot's script, or the generic one when a gait, a command or a push is given
    (always for ``--urdf``), scaled to ``--duration`` when given."""
    generic = arguments.urdf is not None or arguments.gait or arguments.cmd_vel or arguments.push_velocity is not None
    if not generic:
        return scaled(SCENARIOS[robot], arguments.duration)
    try:
        command = [float(x) for x in (arguments.cmd_vel or "0,0,0").split(",")]
    except ValueError:
        command = []
    if len(command) != 3 or not all(math.isfinite(x) for x in command):
        raise SystemExit(f"--cmd-vel needs VX,VY,WZ (three finite numbers), got {arguments.cmd_vel!r}")
    push = arguments.push_velocity if arguments.push_velocity is not None else 0.0
    if not (math.isfinite(push) and 0.0 <= push <= MAX_PUSH_VELOCITY):
        raise SystemExit(f"--push-velocity must be in [0, {MAX_PUSH_VELOCITY:g}] m/s, got {push!r}")
    return generic_scenario(arguments.gait or "trot", command, push,
                            arguments.duration if arguments.duration is not None else 10.0)


def _describe(segment: Segment) -> str:
    text = f"{segment.name} ({segment.duration:g} s"
    if segment.moving:
        text += f", cmd_vel {list(segment.cmd_vel)}"
    if segment.push:
        text += f", push {segment.push:g} m/s at +{segment.push_at:g} s"
    return text + ")"


def _play(recorder: LeggedRecorder, segments: Sequence[Segment], start: float, mass: float,
          processes: Sequence[Any]) -> list:
    """Run the script from ``start`` [s]: each segment's parameters at its start, its command at
    :data:`CMD_VEL_RATE`, its push (force DV m / PUSH_DURATION to the base's left, sent once the simulator listens).
    Returns the pushes sent: (time from start [s], DV [m/s], force (3,) [N])."""
    import rclpy

    begins = np.cumsum([0.0] + [segment.duration for segment in segments])
    current, next_command, pushes, pushed = -1, 0.0, [], set()
    while recorder.now() < start + begins[-1]:
        rclpy.spin_once(recorder.node, timeout_sec=0.005)
        recorder.poll()
        elapsed = recorder.now() - start
        index = min(int(np.searchsorted(begins, elapsed, side="right")) - 1, len(segments) - 1)
        segment = segments[index]
        if index != current:
            current = index
            if segment.parameters:
                recorder.set_parameters(dict(segment.parameters))
            next_command = elapsed
        if elapsed >= next_command:
            recorder.cmd_vel(segment.cmd_vel)
            next_command = elapsed + 1.0 / CMD_VEL_RATE
        if (segment.push and index not in pushed and elapsed >= begins[index] + segment.push_at
                and recorder.push_publisher.get_subscription_count() > 0):
            heading = recorder.heading()
            force = segment.push * mass / PUSH_DURATION * np.array([-math.sin(heading), math.cos(heading), 0.0])
            recorder.push(force, PUSH_DURATION)
            pushes.append((elapsed, segment.push, force.tolist()))
            pushed.add(index)
        if any(p.poll() is not None for p in processes):
            print("a node exited during the run; see the logs", file=sys.stderr)
            break
    return pushes


def _print_report(title: str, document: dict, mpc_file: dict, mu: float) -> None:
    print()
    print(title)
    print(f"clock:                  {document['clock']}, {document['real_time_factor']:.3f} of its seconds per wall "
          "second")
    print(f"MPC rate achieved:      {document['mpc_rate_hz']:.1f} Hz of the {document['clock']} clock (asked "
          f"{mpc_file.get('rate_hz', '-')} Hz)")
    p50, p99 = (document[f"solve_{p}_ms"] for p in ("p50", "p99"))
    print(f"MPC solve time:         p50 {p50 if p50 is None else f'{p50:.2f}'} ms, "
          f"p99 {p99 if p99 is None else f'{p99:.2f}'} ms")
    print(f"fell:                   {document['fell']}")
    print(f"distance, yaw change:   {document['distance_m']:.2f} m, {document['yaw_change_rad']:.2f} rad; gaits "
          f"{', '.join(document['gaits_run'])}")
    print(f"feet rose by:           {', '.join(f'{x:.3f}' for x in document['foot_lift_m'])} m")
    print(f"max |torque| / limit:   {document['max_torque_ratio']:.3f}")
    print(f"friction cone:          {document['cone_violations']} contact samples past the MPC's mu {mu:g} "
          f"(max |f_t| / f_n {document['max_cone_use']:.3f}); {document['friction_cone_violations']} past the "
          "floor's (simulator)")
    if "frame" in mpc_file.get("contact_kinds", ()):
        print(f"center of pressure:     {document['cop_edge_steps']} sole-steps with it on the sole's edge (carried by "
              "one edge or corner: tipping; simulator)")
    print(f"pushes survived:        {document['pushes_survived']} of {document['pushes_sent']} sent "
          f"({document['pushes_applied']} applied)")
    print(f"commands by source:     {document['commands_by_source']}")
    print(f"refused:                MPC {document['refused_mpc'] or 'none'}, "
          f"simulator {document['refused_simulator'] or 'none'}")
    print("segment                         cmd (vx, vy, wz)      velocity error RMS (vx, vy, wz)   height  tilt   "
          "cone  torque")
    for seg in document["segments"]:
        error = seg["cmd_vel_error_rms"]
        error = "-" if error is None else ", ".join(f"{x:.3f}" for x in error)
        print(f"{seg['name'][:30]:31s} {str(seg['cmd_vel']):21s} {error:33s} {seg['base_height_min_m']:.3f}  "
              f"{seg['max_tilt_rad']:.3f}  {seg['cone_violations']:4d}  {seg['max_torque_ratio']:.2f}")
