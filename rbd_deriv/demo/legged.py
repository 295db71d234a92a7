"""The legged demo (``python -m rbd_deriv.demo --robot solo12|talos``, or ``--urdf`` with ``--feet``): the robot
stands, switches to its moving gait, takes a lateral push, then walks or sways.

Two processes: the simulator (MuJoCo, floating base on a floor) and the MPC node, with the robot's file of
config/. This process switches the gait and sets the motions through the MPC node's parameters, sends the push
to the simulator, records the odometry, contact forces and torque commands, then reports (the figures of
:mod:`rbd_deriv.demo.legged_summary`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rbd_deriv.demo.legged_summary import legged_document, summarize_legged
from rbd_deriv.demo.plots import plot_legged
from rbd_deriv.demo.processes import (STARTUP_TIMEOUT, LoopRecorder, exited, logs_folder, read_parameters,
                                      spin_until, start_node, wait_for_loop)
from rbd_deriv.nodes.processes import stop_processes

__all__ = ["GAIT_SWITCH", "LATE_MOTION", "LEGGED_DEMOS", "PUSH_AT", "PUSH_DURATION", "PUSH_FORCE",
           "LeggedRecorder", "legged_parameters", "legged_setup", "run"]

#: The legged robots with a parameter file in config/ (``<robot>.yaml``: the simulator's and the MPC node's
#: sections) and their URDF and SRDF in example-robot-data.
LEGGED_DEMOS = ("solo12", "talos")

#: The legged demo's script: the gait switches from standing to the robot's moving gait (when its file builds
#: one) at GAIT_SWITCH [s], the lateral push starts at PUSH_AT (a fraction of ``--duration``), then the robot's
#: LATE_MOTION: (a fraction of ``--duration``, MPC node parameters set then): solo12 walks forward at 0.2 m/s
#: (trotting), talos sways its base sideways.
GAIT_SWITCH = 2.0
PUSH_AT = 0.4
LATE_MOTION = {"solo12": (0.6, {"base_velocity": [0.2, 0.0]}),
               "talos": (0.6, {"sway_amplitude": 0.03, "sway_period": 4.0})}

#: Default lateral push per robot: force [N] along +y in the world frame for PUSH_DURATION [s].
PUSH_FORCE = {"solo12": 10.0, "talos": 150.0}
PUSH_DURATION = 0.1


def legged_parameters(robot: str) -> dict:
    """{node name: {parameter: value}} of config/<robot>.yaml."""
    return read_parameters(f"{robot}.yaml")


def _names(values: Sequence[str]) -> str:
    """A string-array parameter on a command line (``-p name:=[a, b]``)."""
    return "[" + ", ".join(values) + "]"


def legged_setup(arguments: Any) -> tuple[str, str, dict, dict]:
    """(urdf, parameter file or "", simulator overrides, MPC overrides) of the legged demo asked for: a robot of
    :data:`LEGGED_DEMOS` (its file, its example-robot-data URDF and SRDF), or ``--urdf`` with its feet (the
    simulator at the SRDF posture's joints, the MPC's parameters at their defaults)."""
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

    if arguments.urdf is None:
        urdf, srdf = str(EXAMPLE_ROBOTS[arguments.robot]), str(example_robot_srdf(arguments.robot))
        return urdf, f"{arguments.robot}.yaml", {"urdf_path": urdf}, {"urdf_path": urdf, "srdf_path": srdf}
    import rbd_deriv as rd
    from rbd_deriv.control.srdf import reference_posture

    if not arguments.feet:
        raise SystemExit("--urdf needs --feet F1,F2,...")
    feet = arguments.feet.split(",")
    kinds = _names([arguments.contact] * len(feet))
    shared = {"urdf_path": arguments.urdf, "floating_base": True, "contact_frames": _names(feet),
              "contact_kinds": kinds}
    sim = dict(shared)
    mpc = dict(shared, srdf_path=arguments.srdf or "", posture=arguments.posture or "", horizon=20, dt=0.02,
               rate_hz=50.0, state_timeout=0.1)
    if arguments.srdf and arguments.posture:
        model = rd.load_urdf(arguments.urdf, floating_base=True)
        posture = reference_posture(model, arguments.srdf, arguments.posture, missing="neutral")
        sim["initial_positions"] = posture[7:].tolist()
    return arguments.urdf, "", sim, mpc


class LeggedRecorder(LoopRecorder):
    """The legged demo's rclpy node: switches the gait, pushes the base, records what the loop does.

    Attributes:
        base: (stamp [s], base pose (7,): position [m], quaternion x, y, z, w) of each odometry message.
        contacts: (stamp [s], forces (feet, 3) [N], touching (feet,)) of each contact_forces message.
    """

    def __init__(self, command_topic: str) -> None:
        from nav_msgs.msg import Odometry
        from rcl_interfaces.srv import SetParameters
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from rbd_deriv.msg import ContactForces, Push
        from rbd_deriv.nodes.spin import PolledSubscription

        super().__init__("rbd_deriv_legged_demo", command_topic)
        self.base: list[tuple[float, np.ndarray]] = []
        self.contacts: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.push_publisher = self.node.create_publisher(Push, "push", 10)
        self.parameters = self.node.create_client(SetParameters, "/mpc_node/set_parameters")
        # The simulator's 1 kHz topics are taken in batches by poll() as CDR bytes and decoded after the
        # run (decode()): one executor callback per message would cost this process about half a core,
        # taken from the two nodes it watches.
        queue = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.inputs = ((PolledSubscription(self.node, Odometry, "odom", queue), []),
                       (PolledSubscription(self.node, ContactForces, "contact_forces", queue), []))

    def poll(self) -> None:
        """Keep the odometry and contact forces received since the previous call (while recording)."""
        for subscription, raw in self.inputs:
            taken = subscription.take(serialized=True)
            if self.recording:
                raw.extend(taken)

    def decode(self) -> None:
        """Fill :attr:`base` and :attr:`contacts` from what :meth:`poll` kept, at the messages' stamps [s]."""
        from rclpy.serialization import deserialize_message

        from rbd_deriv.messages import stamp_to_ns

        (odometry, raw_odometry), (contacts, raw_contacts) = self.inputs
        for raw in raw_odometry:
            message = deserialize_message(raw, odometry.message_type)
            p, o = message.pose.pose.position, message.pose.pose.orientation
            self.base.append((stamp_to_ns(message.header.stamp) * 1e-9,
                              np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w])))
        for raw in raw_contacts:
            message = deserialize_message(raw, contacts.message_type)
            self.contacts.append((stamp_to_ns(message.header.stamp) * 1e-9, np.array(message.forces).reshape(-1, 3),
                                  np.array(message.touching, dtype=bool)))
        raw_odometry.clear()
        raw_contacts.clear()

    def set_parameters(self, values: dict) -> None:
        """Set the MPC node's parameters ``values`` (the gait, the base velocity, the sway; answered
        asynchronously, a refusal shows in its log)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()
                                                    for name, value in values.items()])
        self.parameters.call_async(request)

    def push(self, force: Sequence[float], duration: float) -> None:
        """Push the base with ``force`` (3,) [N] in the world frame for ``duration`` [s] (the simulator's push)."""
        from rbd_deriv.msg import Push

        self.push_publisher.publish(Push(force=np.asarray(force, dtype=float), torque=np.zeros(3),
                                         duration=float(duration)))


def run(arguments: Any) -> int:
    """The legged demo: simulator and MPC node as processes, standing, the moving gait, a lateral push; 0 when
    the robot did not fall and no torque exceeded its limit."""
    import rclpy

    import rbd_deriv as rd
    from rbd_deriv.nodes.parameters import actuator_limits

    urdf, parameter_file, sim_overrides, mpc_overrides = legged_setup(arguments)
    robot = arguments.robot or Path(urdf).stem
    files = legged_parameters(arguments.robot) if parameter_file else {"sim_node": {}, "mpc_node": {}}
    mpc_file = files["mpc_node"]
    model = rd.load_urdf(urdf, floating_base=True)
    # The torques are measured against the limits the nodes were given (the robot's file), not the URDF's.
    model.set_actuator_limits(actuator_limits(files["sim_node"].get("effort_limits", [0.0])))
    effort_limit = np.asarray(model.effort_limit, dtype=float)[[model.idx_v[n] for n in model.actuated_joint_names]]
    gaits = list(mpc_file.get("gaits", ["stand"]))
    moving = arguments.gait or next((g for g in gaits if g != "stand"), "stand")
    if moving not in gaits:
        gaits.append(moving)
        mpc_overrides["gaits"] = _names(gaits)
    feet = list(mpc_file.get("contact_frames", arguments.feet.split(",") if arguments.feet else []))
    push_force = arguments.push if arguments.push is not None else PUSH_FORCE.get(robot, 0.0)
    late_at, late_motion = LATE_MOTION.get(robot, (None, {}))
    if arguments.gait == "stand":
        late_motion = {k: v for k, v in late_motion.items() if k != "base_velocity"}  # no walking on the spot
    logs = logs_folder(arguments.logs)
    processes = [start_node("sim_node", parameter_file, sim_overrides, logs / "sim_node.log"),
                 start_node("mpc_node", parameter_file, mpc_overrides, logs / "mpc_node.log")]
    rclpy.init()
    recorder = LeggedRecorder(mpc_file.get("command_topic", "/effort_controller/commands"))
    duration = arguments.duration
    events, motions, pushes = {}, [], 0
    try:
        print(f"starting sim_node and mpc_node for {robot} (logs in {logs}) ...", flush=True)
        if not wait_for_loop(recorder, processes):
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s (exited: {exited(processes) or 'none'}); "
                  f"see the logs in {logs}", file=sys.stderr)
            return 1
        start = recorder.now()
        recorder.recording = True
        switch_at = GAIT_SWITCH if moving != "stand" and duration > 2 * GAIT_SWITCH else None
        push_at = PUSH_AT * duration if push_force else None
        motion_at = late_at * duration if late_motion and duration > 2 * GAIT_SWITCH else None
        print(f"running {duration:g} s: stand" + (f", {moving} from {switch_at:g} s" if switch_at else "")
              + (f", push {push_force:g} N along y for {PUSH_DURATION:g} s at {push_at:g} s" if push_at else "")
              + (f", {late_motion} from {motion_at:g} s" if motion_at else "") + " ...", flush=True)
        while recorder.now() < start + duration:
            rclpy.spin_once(recorder.node, timeout_sec=0.01)
            recorder.poll()
            elapsed = recorder.now() - start
            if switch_at is not None and elapsed >= switch_at and "gait" not in events:
                recorder.set_parameters({"gait": moving})
                events["gait"] = elapsed
            # (Sent once the simulator's subscription is matched: a push published before discovery is lost.)
            if (push_at is not None and elapsed >= push_at and "push" not in events
                    and recorder.push_publisher.get_subscription_count() > 0):
                recorder.push([0.0, push_force, 0.0], PUSH_DURATION)
                pushes += 1
                events["push"] = elapsed
            if motion_at is not None and elapsed >= motion_at and "motion" not in events:
                recorder.set_parameters(late_motion)
                events["motion"] = elapsed
                motions.append((recorder.now(), late_motion))
            if any(p.poll() is not None for p in processes):
                print("a node exited during the run; see the logs", file=sys.stderr)
                break
        recorder.poll()
        recorder.recording = False
        # The last reports of both nodes cover the end of the run.
        spin_until(recorder, lambda: False, 1.2)
        diagnostics, simulator = recorder.mpc_diagnostics(), recorder.sim_diagnostics()
        recorder.decode()
    finally:
        stop_processes(processes)
        recorder.destroy()
        rclpy.try_shutdown()

    mu = float(mpc_file.get("mu", 0.7))
    summary = summarize_legged(recorder, start, duration, effort_limit, mu,
                               [(at - start, values) for at, values in motions])
    document = legged_document(summary, diagnostics, simulator, pushes, robot, moving)
    title = (f"rbd_deriv legged demo: {model.name} (nv = {model.nv}), MuJoCo, MPC N={mpc_file.get('horizon', 20)}, "
             f"dt={mpc_file.get('dt', 0.02)} s, stand then {moving}, push {push_force:g} N"
             + (f", then {late_motion}" if late_motion else ""))
    _print_report(title, document, mpc_file, late_motion, mu, pushes)
    output = Path(arguments.output)
    plot_legged(summary, feet, effort_limit, events, output, title)
    print(f"plot written to {output.resolve()}")
    if arguments.json:
        import json

        Path(arguments.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"summary written to {Path(arguments.json).resolve()}")
    return 0 if not document["fell"] and document["max_torque_ratio"] <= 1.0 + 1e-9 else 1


def _print_report(title: str, document: dict, mpc_file: dict, late_motion: dict, mu: float, pushes: int) -> None:
    print()
    print(title)
    print(f"MPC rate achieved:      {document['mpc_rate_hz']:.1f} Hz (asked {mpc_file.get('rate_hz', '-')} Hz)")
    print(f"MPC solve time:         p50 {document['solve_p50_ms']} ms, p99 {document['solve_p99_ms']} ms")
    print(f"fell:                   {document['fell']}")
    print(f"base position RMS:      {document['base_position_rms_m']} m (from its reference: the start, moved "
          f"as commanded)")
    if document["walk_speed_mps"] is not None:
        print(f"walking speed:          {document['walk_speed_mps']:.3f} m/s (asked {late_motion['base_velocity']})")
    if document["sway_amplitude_m"] is not None:
        print(f"sway amplitude:         {document['sway_amplitude_m']:.4f} m (asked {late_motion['sway_amplitude']})")
    print(f"max |torque| / limit:   {document['max_torque_ratio']:.3f}")
    print(f"friction cone violations (simulator foot-steps): {document['friction_cone_violations']} against the "
          f"floor's mu, {document['friction_cone_violations_mpc_mu']} samples against the MPC's mu {mu:g} "
          f"(max |f_t| / f_n {document['max_cone_use']:.3f})")
    print(f"pushes survived:        {document['pushes_survived']} of {pushes} sent "
          f"({document['pushes_applied']} applied)")
    print(f"commands by source:     {document['commands_by_source']}")
    print(f"refused:                MPC {document['refused_mpc'] or 'none'}, "
          f"simulator {document['refused_simulator'] or 'none'}")
