"""The closed-loop demo: ``python -m rbd_deriv.demo`` (``--help`` for options).

Starts three processes talking over DDS, as on a robot: the simulated 7-dof arm
(:mod:`rbd_deriv.nodes.sim_node`, MuJoCo with joint damping and friction the controller does not
know), the dynamics node (linearizations at every joint_states message) and the MPC node (torque
commands). This process publishes a reference that moves every joint, records joint_states,
commands and diagnostics for a fixed time, then prints the achieved MPC rate, solve-time
percentiles, the dynamics latency seen by the MPC, the tracking error per joint, the torque
use and how the simulator actuated the arm (steps from the MPC's feedback policy, from its held
torque command, braked), and writes a PNG (reference vs actual, torques vs limits) and, with
``--json``, a summary. No display is needed.

The nodes' parameters come from the package's ``config/``: each node's own file, then ``demo.yaml``, which
``ros2 launch rbd_deriv demo.launch.py`` reads too (the same loop for ROS users). ``--mode`` and ``--rate``
override it.

Unless ROS_DOMAIN_ID is set, a random domain keeps the demo apart from other ROS traffic.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rbd_deriv.nodes.processes import ros_parameters, stop_processes

#: Joint motion of the demo: centre [rad] (away from singularities and limits), amplitude [rad],
#: frequency [Hz]. Peak speeds a * 2 pi f stay below each joint's URDF velocity limit.
DEMO_CENTER = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])
DEMO_AMPLITUDE = np.array([0.6, 0.35, 0.6, 0.4, 0.7, 0.5, 0.8])
DEMO_FREQUENCY = np.array([0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50])
DEMO_RAMP = 1.0

#: Joint damping [N m s/rad] and dry friction [N m] of the plant per unit of URDF effort limit:
#: 0.18 N m s/rad and 0.35 N m on the shoulder, 0.04 N m s/rad and 0.08 N m on the light wrist,
#: whose time constant (inertia / damping) stays above the 5 ms of a control tick. config/demo.yaml
#: lists the resulting values per joint of the bundled arm.
DAMPING_PER_EFFORT = 0.001
FRICTION_PER_EFFORT = 0.002

#: The demo's parameter file in the package's config/ folder (beside each node's own file).
DEMO_PARAMETERS = "demo.yaml"

#: Spacing of the points of the published reference trajectory [s].
REFERENCE_SPACING = 0.02

#: Seconds given to the three processes to start before giving up: a few once the kernels are compiled
#: (./run setup, colcon build); kernels without signatures (the MPC solver's) compile at their first use
#: unless their module has a precompile hook (rbd_deriv.precompile), then load from the cache.
STARTUP_TIMEOUT = 180.0


def config_folder() -> Path:
    """The package's config/ folder: beside the bundled robots' urdf/ folder, wherever the package found it
    (a source checkout, a colcon install's share folder, a pip install's prefix)."""
    from rbd_deriv import bundled_urdf

    return bundled_urdf("rbd_arm7").parent.parent / "config"


def demo_parameters() -> dict:
    """{node name: {parameter: value}} of config/demo.yaml."""
    import yaml

    with open(config_folder() / DEMO_PARAMETERS, encoding="utf-8") as stream:
        document = yaml.safe_load(stream)
    return {node: section["ros__parameters"] for node, section in document.items()}


def _start(node: str, overrides: dict, log: Path, parameters: str = DEMO_PARAMETERS) -> subprocess.Popen:
    """Start node ``node`` (rbd_deriv.nodes.<node>) with its own file, ``parameters`` (demo.yaml, or a legged
    robot's file; none if empty), then ``overrides``."""
    config = config_folder()
    files = [config / f"{node}.yaml"] + ([config / parameters] if parameters else [])
    arguments = ["--ros-args"] + [a for f in files for a in ("--params-file", str(f))] + ros_parameters(overrides)[1:]
    handle = open(log, "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, "-m", f"rbd_deriv.nodes.{node}"] + arguments,
                            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


class Recorder:
    """rclpy node of this process: publishes the reference, records what the loop does."""

    def __init__(self, joint_names: list[str], command_topic: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        import rclpy

        self.node = rclpy.create_node("rbd_deriv_demo")
        self.joint_names = joint_names
        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.commands: list[tuple[float, np.ndarray]] = []
        self.diagnostics: dict[str, dict[str, str]] = {}
        self.recording = False
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.reference_publisher = self.node.create_publisher(JointTrajectory,
                                                              "/mpc_node/reference", latched)
        from rbd_deriv.nodes.spin import PolledSubscription

        # 1 kHz: read in batches by poll(), not one executor callback per message.
        self.states_input = PolledSubscription(self.node, JointState, "joint_states",
                                               QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        self.node.create_subscription(Float64MultiArray, command_topic, self._on_command, 100)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def poll(self) -> None:
        """Record the joint_states received since the previous call."""
        for message in self.states_input.take():
            if self.recording and list(message.name) == self.joint_names:
                stamp = message.header.stamp.sec + message.header.stamp.nanosec * 1e-9
                self.states.append((stamp, np.array(message.position), np.array(message.velocity)))

    def _on_command(self, message: Any) -> None:
        if self.recording:
            self.commands.append((self.now(), np.array(message.data)))

    def _on_diagnostics(self, message: Any) -> None:
        for status in message.status:
            self.diagnostics[status.name] = {kv.key: kv.value for kv in status.values}

    def mpc_diagnostics(self) -> dict[str, str]:
        return self._diagnostics_of(": MPC")

    def sim_diagnostics(self) -> dict[str, str]:
        return self._diagnostics_of(": simulator")

    def _diagnostics_of(self, suffix: str) -> dict[str, str]:
        for name, values in self.diagnostics.items():
            if name.endswith(suffix):
                return values
        return {}

    def publish_reference(self, reference: Any, start: float, duration: float) -> None:
        from builtin_interfaces.msg import Duration
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

        from rclpy.time import Time

        times = np.arange(0.0, duration + 1.0, REFERENCE_SPACING)
        positions, velocities, _ = reference.sample(times)
        message = JointTrajectory()
        message.header.stamp = Time(nanoseconds=int(start * 1e9)).to_msg()
        message.joint_names = self.joint_names
        for t, q, v in zip(times, positions, velocities):
            whole = int(t)
            message.points.append(JointTrajectoryPoint(
                positions=q.tolist(), velocities=v.tolist(),
                time_from_start=Duration(sec=whole, nanosec=int(round((t - whole) * 1e9)))))
        self.reference_publisher.publish(message)


def _spin_until(recorder: Recorder, condition, timeout: float) -> bool:
    import rclpy

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rclpy.spin_once(recorder.node, timeout_sec=0.01)
        recorder.poll()
        if condition():
            return True
    return False


def summarize(recorder: Recorder, reference: Any, start: float, duration: float,
              effort_limit: np.ndarray) -> dict:
    """Tracking errors per joint, torque use and rates from what was recorded."""
    stamps = np.array([s[0] for s in recorder.states]) - start
    inside = (stamps >= 0.0) & (stamps <= duration)
    positions = np.array([s[1] for s in recorder.states])[inside]
    stamps = stamps[inside]
    expected = reference.sample(stamps)[0]
    error = positions - expected
    command_times = np.array([c[0] for c in recorder.commands]) - start
    torques = np.array([c[1] for c in recorder.commands])
    during = (command_times >= 0.0) & (command_times <= duration)
    return {
        "stamps": stamps, "positions": positions, "expected": expected,
        "rms": np.sqrt(np.mean(error ** 2, axis=0)), "max": np.abs(error).max(axis=0),
        "command_times": command_times, "torques": torques,
        "torque_ratio": np.abs(torques).max(axis=0) / effort_limit,
        "command_rate": during.sum() / duration,
        "state_rate": inside.sum() / duration,
    }


def plot(summary: dict, joint_names: list[str], effort_limit: np.ndarray, path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(joint_names)
    figure, axes = plt.subplots(count, 2, figsize=(13, 2.0 * count), sharex=True)
    for j, name in enumerate(joint_names):
        left, right = axes[j]
        left.plot(summary["stamps"], summary["expected"][:, j], "k--", lw=1.0, label="reference")
        left.plot(summary["stamps"], summary["positions"][:, j], "C0", lw=1.0, label="actual")
        left.set_ylabel(f"{name}\n[rad]")
        right.plot(summary["command_times"], summary["torques"][:, j], "C1", lw=0.8, label="command")
        for sign in (-1.0, 1.0):
            right.axhline(sign * effort_limit[j], color="r", lw=0.8, ls=":")
        right.set_ylabel("[N m]")
    axes[0][0].legend(loc="upper right", fontsize=8)
    axes[0][0].set_title("joint positions: reference vs actual")
    axes[0][1].set_title("torque commands vs effort limits (dotted)")
    axes[-1][0].set_xlabel("time [s]")
    axes[-1][1].set_xlabel("time [s]")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def wait_for_loop(recorder: Recorder, processes: Sequence[subprocess.Popen] = ()) -> bool:
    """Wait up to STARTUP_TIMEOUT for the MPC's first commands from its plan (the loop runs); False if they do
    not come, or one of ``processes`` exits meanwhile."""
    return _spin_until(
        recorder, lambda: int(recorder.mpc_diagnostics().get("commands_plan", "0")) > 0
        or any(p.poll() is not None for p in processes), STARTUP_TIMEOUT) and all(
        p.poll() is None for p in processes)


def publish_reference_only(duration: float) -> int:
    """For demo.launch.py: once the loop runs, publish the demo reference (starting 1 s later, as the script
    does) and stay until it ends. Returns 1 if the loop did not start within STARTUP_TIMEOUT."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    import rbd_deriv as rd
    from rbd_deriv.control import SinusoidReference
    from rbd_deriv import bundled_urdf
    from rbd_deriv.nodes.spin import StopRequested, StopSignals

    joint_names = list(rd.load_urdf(str(bundled_urdf("rbd_arm7"))).joint_names)
    # Ctrl-C under ros2 launch (two SIGINTs) or launch's own stop ends this process as it ends the nodes.
    signals = StopSignals()
    recorder = None
    try:
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO if signals.install() else None)
        recorder = Recorder(joint_names, demo_parameters()["mpc_node"]["command_topic"])
        print("waiting for the loop to run (the MPC's first commands) ...", flush=True)
        if not wait_for_loop(recorder):
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s", file=sys.stderr)
            return 1
        start = recorder.now() + 1.0
        recorder.publish_reference(
            SinusoidReference(DEMO_CENTER, DEMO_AMPLITUDE, DEMO_FREQUENCY, ramp=DEMO_RAMP),
            start, duration)
        print(f"tracking the reference for {duration:g} s ...", flush=True)
        # Stay alive: the reference is latched, a late subscriber still gets it from us.
        _spin_until(recorder, lambda: recorder.now() > start + duration, duration + 5.0)
    except (StopRequested, KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signals.raising = False
        if recorder is not None:
            recorder.states_input.destroy()
            recorder.node.destroy_node()
        rclpy.try_shutdown()
    return 0


def write_summary(path: Path, summary: dict, diagnostics: dict, simulator: dict, steps: dict, mode: str,
                  rate: float, joint_names: list[str]) -> None:
    """The run's figures as JSON: MPC rate and solve times, tracking errors and torque use per joint, the
    simulator's steps by actuation source and the refusals of both nodes."""
    import json

    def milliseconds(key: str) -> float | None:
        return float(diagnostics[key]) * 1e-3 if key in diagnostics else None

    document = {
        "mode": mode, "rate_asked_hz": rate, "mpc_rate_hz": summary["command_rate"],
        "solve_p50_ms": milliseconds("solve_time_p50_us"), "solve_p99_ms": milliseconds("solve_time_p99_us"),
        "joint_names": joint_names, "rms_error_rad": summary["rms"].tolist(), "max_error_rad": summary["max"].tolist(),
        "max_torque_ratio": float(summary["torque_ratio"].max()),
        "steps_policy": steps["policy"], "steps_command": steps["command"], "steps_brake": steps["brake"],
        "commands_by_source": {k[len("commands_"):]: int(v) for k, v in diagnostics.items()
                               if k.startswith("commands_")},
        "refused_mpc": {k[len("refused_"):]: int(v) for k, v in diagnostics.items() if k.startswith("refused_")},
        "refused_simulator": {k[len("refused_"):]: int(v) for k, v in simulator.items() if k.startswith("refused_")},
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------- legged
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
    import yaml

    with open(config_folder() / f"{robot}.yaml", encoding="utf-8") as stream:
        document = yaml.safe_load(stream)
    return {node: section["ros__parameters"] for node, section in document.items()}


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


class LeggedRecorder:
    """rclpy node of the legged demo: switches the gait, pushes the base, records what the loop does."""

    def __init__(self, command_topic: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from rcl_interfaces.srv import SetParameters
        from std_msgs.msg import Float64MultiArray

        import rclpy
        from rbd_deriv.msg import ContactForces, Push

        self.node = rclpy.create_node("rbd_deriv_legged_demo")
        self.base: list[tuple[float, np.ndarray]] = []
        self.commands: list[tuple[float, np.ndarray]] = []
        self.contacts: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.diagnostics: dict[str, dict[str, str]] = {}
        self.recording = False
        self.push_publisher = self.node.create_publisher(Push, "push", 10)
        self.parameters = self.node.create_client(SetParameters, "/mpc_node/set_parameters")
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from rbd_deriv.nodes.spin import PolledSubscription

        # The simulator's 1 kHz topics are taken in batches by poll() as CDR bytes and decoded after the
        # run (decode()): one executor callback per message would cost this process about half a core,
        # taken from the two nodes it watches.
        queue = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.inputs = ((PolledSubscription(self.node, Odometry, "odom", queue), []),
                       (PolledSubscription(self.node, ContactForces, "contact_forces", queue), []))
        self.node.create_subscription(Float64MultiArray, command_topic, self._on_command, 100)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

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

    _on_command = Recorder._on_command
    _on_diagnostics = Recorder._on_diagnostics
    mpc_diagnostics = Recorder.mpc_diagnostics
    sim_diagnostics = Recorder.sim_diagnostics
    _diagnostics_of = Recorder._diagnostics_of

    def set_parameters(self, values: dict) -> None:
        """Set the MPC node's parameters ``values`` (the gait, the base velocity, the sway; answered
        asynchronously, a refusal shows in its log)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()
                                                    for name, value in values.items()])
        self.parameters.call_async(request)

    def push(self, force: Sequence[float], duration: float) -> None:
        from rbd_deriv.msg import Push

        self.push_publisher.publish(Push(force=np.asarray(force, dtype=float), torque=np.zeros(3),
                                         duration=float(duration)))


def reference_path(base_times: np.ndarray, base: np.ndarray, motions: Sequence[tuple]) -> np.ndarray:
    """(K, 3) the base's reference at ``base_times`` [s]: its first position, moved as the MPC node was told
    (``motions``: (time [s], MPC parameters set then), in time order) along a
    :class:`~rbd_deriv.control.legged.BasePath`."""
    from rbd_deriv.control.legged import BasePath

    if not len(base):
        return np.zeros((0, 3))
    reference = np.tile(base[0, :3], (len(base), 1))
    path = BasePath(origin=tuple(base[0, :2]))
    boundaries = [at for at, _ in motions] + [np.inf]
    for (at, values), until in zip(motions, boundaries[1:]):
        path = path.moved(at, velocity=values.get("base_velocity"), amplitude=values.get("sway_amplitude"),
                          period=values.get("sway_period"))
        inside = (base_times >= at) & (base_times < until)
        reference[inside, :2] = path.at(base_times[inside])[0]
    return reference


def summarize_legged(recorder: LeggedRecorder, start: float, duration: float, effort_limit: np.ndarray,
                     mu: float, motions: Sequence[tuple] = ()) -> dict:
    """Base motion (against its reference: ``motions`` as for :func:`reference_path`), torque use, forces
    against their cones and the rates of a legged run."""
    base_times = np.array([b[0] for b in recorder.base]) - start
    base = np.array([b[1] for b in recorder.base])
    inside = (base_times >= 0.0) & (base_times <= duration)
    base_times, base = base_times[inside], base[inside]
    command_times = np.array([c[0] for c in recorder.commands]) - start
    torques = np.array([c[1] for c in recorder.commands])
    during = (command_times >= 0.0) & (command_times <= duration)
    contact_times = np.array([c[0] for c in recorder.contacts]) - start
    forces = np.array([c[1] for c in recorder.contacts])
    touching = np.array([c[2] for c in recorder.contacts])
    deviation = base[:, :3] - base[0, :3] if len(base) else np.zeros((0, 3))
    reference = reference_path(base_times, base, motions)
    error = base[:, :3] - reference if len(base) else np.zeros((0, 3))
    walking = [at for at, values in motions if any(values.get("base_velocity", [0.0]))]
    walked = base_times >= (walking[0] + 1.0 if walking else np.inf)  # one second to get going
    swaying = [at for at, values in motions if values.get("sway_amplitude")]
    swayed = base_times >= (swaying[0] + 1.0 if swaying else np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        cone_use = np.where(forces[..., 2] > 1e-6, np.hypot(forces[..., 0], forces[..., 1]) / forces[..., 2],
                            0.0) if len(forces) else np.zeros((0, 0))
    # Against the MPC's mu, which is under the floor's: the simulator's own count holds MuJoCo to MuJoCo's cone,
    # which it keeps by construction. The same tolerance as the simulator's (rbd_deriv.sim.ground.CONE_TOLERANCE).
    from rbd_deriv.sim.ground import CONE_TOLERANCE

    mpc_cone_violations, cone_use_max = 0, 0.0
    if len(forces):
        down = touching & ((contact_times >= 0.0) & (contact_times <= duration))[:, None]
        slack = mu * forces[..., 2] + CONE_TOLERANCE * np.maximum(1.0, np.linalg.norm(forces, axis=-1))
        mpc_cone_violations = int((down & (np.hypot(forces[..., 0], forces[..., 1]) > slack)).sum())
        loaded = down & (forces[..., 2] > 1e-6)
        cone_use_max = float(cone_use[loaded].max()) if loaded.any() else 0.0
    return {
        "base_times": base_times, "base": base, "deviation": deviation, "reference": reference - base[0, :3]
        if len(base) else reference,
        "base_position_rms": float(np.sqrt(np.mean(np.sum(error ** 2, axis=1)))) if len(base) else None,
        "walk_speed": (float(np.polyfit(base_times[walked], base[walked, 0], 1)[0])
                       if walked.sum() > 10 else None),
        "sway_amplitude": (float(0.5 * np.ptp(base[swayed, 1])) if swayed.sum() > 10 else None),
        "command_times": command_times, "torques": torques,
        "torque_ratio": (np.abs(torques).max(axis=0) / effort_limit) if len(torques) else np.zeros(1),
        "command_rate": during.sum() / duration,
        "contact_times": contact_times, "forces": forces, "touching": touching, "cone_use": cone_use, "mu": mu,
        "mpc_cone_violations": mpc_cone_violations, "cone_use_max": cone_use_max,
    }


def plot_legged(summary: dict, feet: Sequence[str], effort_limit: np.ndarray, events: dict, path: Path,
                title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(4, 1, figsize=(12, 13), sharex=True)
    trajectory, cones, torques, gait = axes
    for k, axis in enumerate("xyz"):
        trajectory.plot(summary["base_times"], summary["deviation"][:, k], lw=1.0, label=f"base {axis}",
                        color=f"C{k}")
        trajectory.plot(summary["base_times"], summary["reference"][:, k], lw=0.8, ls="--", color=f"C{k}")
    trajectory.set_ylabel("base - start [m] (dashed: reference)")
    trajectory.set_title("base trajectory (odometry)")
    for c, foot in enumerate(feet):
        if len(summary["cone_use"]):
            cones.plot(summary["contact_times"], summary["cone_use"][:, c], lw=0.8, label=foot)
    cones.axhline(summary["mu"], color="r", ls=":", lw=1.0, label="mu (MPC)")
    cones.set_ylabel("|f_t| / f_n")
    cones.set_title("contact forces against their friction cones (simulator)")
    if len(summary["torques"]):
        ratio = summary["torques"] / effort_limit
        torques.plot(summary["command_times"], ratio, lw=0.5)
    for sign in (-1.0, 1.0):
        torques.axhline(sign, color="r", ls=":", lw=1.0)
    torques.set_ylabel("torque / limit")
    torques.set_title("torque commands against the effort limits (one line per joint)")
    for c, foot in enumerate(feet):
        if len(summary["touching"]):
            down = summary["touching"][:, c]
            gait.fill_between(summary["contact_times"], c + 0.1, c + 0.9, where=down, step="post", color=f"C{c}")
    gait.set_yticks(np.arange(len(feet)) + 0.5)
    gait.set_yticklabels(feet)
    gait.set_title("gait: feet on the floor (simulator)")
    gait.set_xlabel("time [s]")
    for axis in axes:
        for name, at in events.items():
            axis.axvline(at, color="k", lw=0.8, ls="--")
    for name, at in events.items():
        trajectory.annotate(name, (at, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="top")
    trajectory.legend(loc="lower left", fontsize=8)
    cones.legend(loc="upper right", fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def legged_document(summary: dict, diagnostics: dict, simulator: dict, pushes: int, robot: str,
                    gait: str) -> dict:
    """The legged run's figures (the keys of ``--json``)."""
    def milliseconds(key: str) -> float | None:
        return float(diagnostics[key]) * 1e-3 if key in diagnostics else None

    fell = simulator.get("fell", "true") == "true"
    return {
        "robot": robot, "gait": gait, "mpc_rate_hz": summary["command_rate"],
        "solve_p50_ms": milliseconds("solve_time_p50_us"), "solve_p99_ms": milliseconds("solve_time_p99_us"),
        "fell": fell, "base_position_rms_m": summary["base_position_rms"],
        "walk_speed_mps": summary["walk_speed"], "sway_amplitude_m": summary["sway_amplitude"],
        "max_torque_ratio": float(summary["torque_ratio"].max()),
        "friction_cone_violations": int(simulator.get("friction_cone_violations", "-1")),
        "friction_cone_violations_mpc_mu": summary["mpc_cone_violations"], "max_cone_use": summary["cone_use_max"],
        "pushes_applied": int(simulator.get("pushes_applied", "0")),
        "pushes_survived": 0 if fell else int(simulator.get("pushes_applied", "0")),
        "pushes_sent": pushes,
        "simulator_lost_time_s": float(simulator.get("lost_time_s", "nan")),
        "commands_by_source": {k[len("commands_"):]: int(v) for k, v in diagnostics.items()
                               if k.startswith("commands_")},
        "refused_mpc": {k[len("refused_"):]: int(v) for k, v in diagnostics.items() if k.startswith("refused_")},
        "refused_simulator": {k[len("refused_"):]: int(v) for k, v in simulator.items() if k.startswith("refused_")},
    }


def legged_main(arguments: Any) -> int:
    """The legged demo: simulator and MPC node as processes, standing, the moving gait, a lateral push."""
    import json
    import tempfile

    import rclpy

    import rbd_deriv as rd

    urdf, parameter_file, sim_overrides, mpc_overrides = legged_setup(arguments)
    robot = arguments.robot or Path(urdf).stem
    files = legged_parameters(arguments.robot) if parameter_file else {"sim_node": {}, "mpc_node": {}}
    mpc_file = files["mpc_node"]
    model = rd.load_urdf(urdf, floating_base=True)
    from rbd_deriv.nodes.parameters import actuator_limits

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
    logs = Path(arguments.logs or tempfile.mkdtemp(prefix="rbd_deriv_demo_"))
    logs.mkdir(parents=True, exist_ok=True)
    command_topic = mpc_file.get("command_topic", "/effort_controller/commands")
    processes = [_start("sim_node", sim_overrides, logs / "sim_node.log", parameter_file),
                 _start("mpc_node", mpc_overrides, logs / "mpc_node.log", parameter_file)]
    rclpy.init()
    recorder = LeggedRecorder(command_topic)
    duration = arguments.duration
    events = {}
    motions = []
    pushes = 0
    try:
        print(f"starting sim_node and mpc_node for {robot} (logs in {logs}) ...", flush=True)
        if not wait_for_loop(recorder, processes):
            crashed = [p.args[2].rsplit(".", 1)[-1] for p in processes if p.poll() is not None]
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s (exited: {crashed or 'none'}); see the "
                  f"logs in {logs}", file=sys.stderr)
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
        _spin_until(recorder, lambda: False, 1.2)
        diagnostics, simulator = recorder.mpc_diagnostics(), recorder.sim_diagnostics()
        recorder.decode()
    finally:
        stop_processes(processes)
        recorder.node.destroy_node()
        rclpy.try_shutdown()

    mu = float(mpc_file.get("mu", 0.7))
    summary = summarize_legged(recorder, start, duration, effort_limit, mu,
                               [(at - start, values) for at, values in motions])
    document = legged_document(summary, diagnostics, simulator, pushes, robot, moving)
    title = (f"rbd_deriv legged demo: {model.name} (nv = {model.nv}), MuJoCo, MPC N={mpc_file.get('horizon', 20)}, "
             f"dt={mpc_file.get('dt', 0.02)} s, stand then {moving}, push {push_force:g} N"
             + (f", then {late_motion}" if late_motion else ""))
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
    output = Path(arguments.output)
    plot_legged(summary, feet, effort_limit, events, output, title)
    print(f"plot written to {output.resolve()}")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"summary written to {Path(arguments.json).resolve()}")
    return 0 if not document["fell"] and document["max_torque_ratio"] <= 1.0 + 1e-9 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="tracking time [s]")
    parser.add_argument("--mode", choices=["held", "relinearize"], default=None,
                        help="MPC mode (held: linearizations of the dynamics node); default: demo.yaml's")
    parser.add_argument("--rate", type=float, default=None,
                        help="MPC rate, and the dynamics node's in held mode [Hz]; default: demo.yaml's")
    parser.add_argument("--output", default="rbd_deriv_demo.png", help="PNG written at the end")
    parser.add_argument("--json", default=None, help="also write a JSON summary to this file")
    parser.add_argument("--logs", default=None, help="folder for the nodes' logs (default: temp)")
    parser.add_argument("--robot", choices=LEGGED_DEMOS, default=None,
                        help="a legged robot instead of the arm: stand, its moving gait, a lateral push")
    parser.add_argument("--urdf", default=None, help="any legged robot's URDF (with --feet)")
    parser.add_argument("--feet", default=None, help="its contact frames, F1,F2,... (a trot: FL,FR,HL,HR)")
    parser.add_argument("--contact", choices=["point", "frame"], default="point", help="contact kind of the feet")
    parser.add_argument("--srdf", default=None, help="SRDF holding the reference posture")
    parser.add_argument("--posture", default=None, help="name of the SRDF group_state of the reference posture")
    parser.add_argument("--gait", default=None, help="legged: the gait after standing (default: the robot file's)")
    parser.add_argument("--push", type=float, default=None, help="legged: lateral push [N] for 0.1 s mid-run")
    parser.add_argument("--reference-only", action="store_true",
                        help="only publish the reference once the loop runs, and stay until it ends "
                             "(for demo.launch.py)")
    arguments = parser.parse_args(argv)
    if arguments.reference_only:
        return publish_reference_only(arguments.duration)

    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(20, 99)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if arguments.robot or arguments.urdf:
        return legged_main(arguments)
    import tempfile

    import rclpy

    import rbd_deriv as rd
    from rbd_deriv.control import SinusoidReference
    from rbd_deriv import bundled_urdf

    urdf = str(bundled_urdf("rbd_arm7"))
    model = rd.load_urdf(urdf)
    parameters = demo_parameters()
    from rbd_deriv.nodes.parameters import actuator_limits

    model.set_actuator_limits(actuator_limits(parameters["sim_node"].get("effort_limits", [0.0])))
    joint_names = list(model.joint_names)
    effort_limit = np.asarray(model.effort_limit, dtype=float)
    reference = SinusoidReference(DEMO_CENTER, DEMO_AMPLITUDE, DEMO_FREQUENCY, ramp=DEMO_RAMP)
    logs = Path(arguments.logs or tempfile.mkdtemp(prefix="rbd_deriv_demo_"))
    logs.mkdir(parents=True, exist_ok=True)
    mpc = parameters["mpc_node"]
    mode = arguments.mode or mpc["mode"]
    rate = arguments.rate or float(mpc["rate_hz"])
    horizon, dt = mpc["horizon"], mpc["dt"]
    backend = parameters["sim_node"]["backend"]
    command_topic = mpc["command_topic"]
    processes = [
        _start("sim_node", {"urdf_path": urdf}, logs / "sim_node.log"),
        _start("mpc_node", {"urdf_path": urdf, "mode": mode, "rate_hz": rate}, logs / "mpc_node.log"),
    ]
    if mode == "held":
        processes.append(_start("dynamics_node", {"urdf_path": urdf, "rate": rate}, logs / "dynamics_node.log"))
    rclpy.init()
    recorder = Recorder(joint_names, command_topic)
    try:
        print(f"starting sim_node ({backend}), "
              f"{'dynamics_node, ' if mode == 'held' else ''}mpc_node "
              f"(logs in {logs}) ...", flush=True)
        ready = wait_for_loop(recorder, processes)
        crashed = [p.args[2].rsplit(".", 1)[-1] for p in processes if p.poll() is not None]
        if not ready:
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s "
                  f"(exited: {crashed or 'none'}); see the logs in {logs}", file=sys.stderr)
            return 1
        start = recorder.now() + 1.0
        recorder.publish_reference(reference, start, arguments.duration)
        recorder.recording = True
        print(f"tracking for {arguments.duration:g} s ...", flush=True)
        _spin_until(recorder, lambda: recorder.now() > start + arguments.duration + 0.2,
                    arguments.duration + 30.0)
        recorder.poll()
        recorder.recording = False
        # The simulator's last report covers the end of the run.
        _spin_until(recorder, lambda: False, 1.2)
        diagnostics = recorder.mpc_diagnostics()
        simulator = recorder.sim_diagnostics()
    finally:
        stop_processes(processes)
        recorder.states_input.destroy()
        recorder.node.destroy_node()
        rclpy.try_shutdown()

    summary = summarize(recorder, reference, start, arguments.duration, effort_limit)
    title = (f"rbd_deriv demo: {model.name} ({model.nv} joints), plant {backend} "
             f"(damping {DAMPING_PER_EFFORT:g} N m s/rad and friction {FRICTION_PER_EFFORT:g} N m per "
             f"N m of effort limit), MPC mode "
             f"{mode}, N={horizon}, dt={dt} s")
    print()
    print(title)
    print(f"MPC rate achieved:      {summary['command_rate']:.1f} Hz (asked {rate:g} Hz)")
    print(f"MPC solve time:         p50 {diagnostics.get('solve_time_p50_us', '-')} us, "
          f"p99 {diagnostics.get('solve_time_p99_us', '-')} us, "
          f"max {diagnostics.get('solve_time_max_us', '-')} us")
    if mode == "held":
        print(f"dynamics latency:       p50 {diagnostics.get('linearization_age_p50_ms', '-')} ms, "
              f"p99 {diagnostics.get('linearization_age_p99_ms', '-')} ms "
              "(joint_states stamp -> linearization at the MPC)")
    print(f"joint_states received:  {summary['state_rate']:.0f} Hz")
    sources = {k[len("commands_"):]: v for k, v in diagnostics.items() if k.startswith("commands_")}
    print("commands by source:     " + ", ".join(f"{k} {v}" for k, v in sources.items()))
    refused = {k: v for k, v in diagnostics.items() if k.startswith("refused_")}
    print(f"refused messages:       {refused or 'none'}")
    steps = {source: int(simulator.get(f"steps_{source}", "0")) for source in ("policy", "command", "brake")}
    print(f"simulator steps:        {steps['policy']} from the feedback policy, {steps['command']} from the held "
          f"torque command, {steps['brake']} braked (since it started)")
    print()
    print(f"{'joint':<8} {'rms error [rad]':>16} {'max error [rad]':>16} {'max |tau|/limit':>16}")
    for j, name in enumerate(joint_names):
        print(f"{name:<8} {summary['rms'][j]:>16.5f} {summary['max'][j]:>16.5f} "
              f"{summary['torque_ratio'][j]:>16.3f}")
    exceeded = bool((summary["torque_ratio"] > 1.0).any())
    print(f"torque limits exceeded: {'YES' if exceeded else 'never'}")
    output = Path(arguments.output)
    plot(summary, joint_names, effort_limit, output, title)
    print(f"plot written to {output.resolve()}")
    if arguments.json:
        write_summary(Path(arguments.json), summary, diagnostics, simulator, steps, mode, rate, joint_names)
        print(f"summary written to {Path(arguments.json).resolve()}")
    return 0 if not exceeded else 1


if __name__ == "__main__":
    sys.exit(main())
