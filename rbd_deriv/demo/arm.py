"""The fixed-base demo (the default of ``python -m rbd_deriv.demo``): the bundled 7-dof arm tracks a sinusoid on
every joint.

Three processes: the simulator (MuJoCo, with the joint damping and friction of config/demo.yaml, which the
controller does not know), the dynamics node (in held mode) and the MPC node. This process publishes the
reference, records joint_states and torque commands, then reports the MPC rate, solve times, dynamics latency,
tracking error per joint, torque use and the simulator's steps by actuation source.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rbd_deriv.demo.plots import plot_arm
from rbd_deriv.demo.processes import (STARTUP_TIMEOUT, LoopRecorder, clock_fields, exited, logs_folder, loop_counts,
                                      read_parameters, solve_times, spin_until, start_node, wait_for_loop)
from rbd_deriv.demo.video import run_video, video_path
from rbd_deriv.nodes.processes import stop_processes

__all__ = ["DEMO_AMPLITUDE", "DEMO_CENTER", "DEMO_FREQUENCY", "DEMO_PARAMETERS", "DEMO_RAMP", "ArmRecorder",
           "demo_parameters", "demo_reference", "plant_per_effort", "publish_reference_only", "run", "summarize",
           "write_summary"]

#: Joint motion of the demo: centre [rad] (away from singularities and limits), amplitude [rad],
#: frequency [Hz], ramp [s]. Peak speeds a * 2 pi f stay below each joint's URDF velocity limit.
DEMO_CENTER = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])
DEMO_AMPLITUDE = np.array([0.6, 0.35, 0.6, 0.4, 0.7, 0.5, 0.8])
DEMO_FREQUENCY = np.array([0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50])
DEMO_RAMP = 1.0

#: The demo's parameter file in the package's config/ folder (beside each node's own file).
DEMO_PARAMETERS = "demo.yaml"

#: Spacing of the points of the published reference trajectory [s].
REFERENCE_SPACING = 0.02


def demo_parameters() -> dict:
    """{node name: {parameter: value}} of config/demo.yaml."""
    return read_parameters(DEMO_PARAMETERS)


def demo_reference() -> Any:
    """The reference the arm tracks: :class:`~rbd_deriv.control.SinusoidReference` of the DEMO_ constants."""
    from rbd_deriv.control import SinusoidReference

    return SinusoidReference(DEMO_CENTER, DEMO_AMPLITUDE, DEMO_FREQUENCY, ramp=DEMO_RAMP)


def plant_per_effort(effort_limit: np.ndarray, parameters: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The simulator's joint damping [N m s/rad] and dry friction [N m] of config/demo.yaml (or of
    ``parameters``, as :func:`demo_parameters` gives them) per N m of ``effort_limit`` (nv,) [N m]."""
    sim = (parameters or demo_parameters())["sim_node"]
    limit = np.asarray(effort_limit, dtype=float)
    return np.asarray(sim["damping"], dtype=float) / limit, np.asarray(sim["friction"], dtype=float) / limit


def _one_value(ratios: np.ndarray) -> str:
    """``ratios`` as one number when they are the same for every joint, else their range."""
    low, high = float(np.min(ratios)), float(np.max(ratios))
    return f"{low:g}" if np.isclose(low, high, rtol=1e-9, atol=0.0) else f"{low:g}-{high:g}"


class ArmRecorder(LoopRecorder):
    """The arm demo's rclpy node: publishes the reference, records joint_states and the torque commands."""

    def __init__(self, joint_names: list[str], command_topic: str, clock: str = "wall") -> None:
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from trajectory_msgs.msg import JointTrajectory

        from rbd_deriv.nodes.spin import PolledSubscription

        super().__init__("rbd_deriv_demo", command_topic, clock)
        self.joint_names = joint_names
        self.states: list[tuple[float, np.ndarray, np.ndarray]] = []
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.reference_publisher = self.node.create_publisher(JointTrajectory, "/mpc_node/reference", latched)
        # 1 kHz: read in batches by poll(), not one executor callback per message.
        self.states_input = PolledSubscription(self.node, JointState, "joint_states",
                                               QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))

    def poll(self) -> None:
        """Record the joint_states received since the previous call: (stamp [s], q, v)."""
        for message in self.states_input.take():
            if self.recording and list(message.name) == self.joint_names:
                stamp = message.header.stamp.sec + message.header.stamp.nanosec * 1e-9
                self.states.append((stamp, np.array(message.position), np.array(message.velocity)))

    def publish_reference(self, reference: Any, start: float, duration: float) -> None:
        """Publish ``reference`` sampled every REFERENCE_SPACING from ``start`` [s, node clock] for
        ``duration`` + 1 s as a latched JointTrajectory."""
        from builtin_interfaces.msg import Duration
        from rclpy.time import Time
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

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

    def destroy(self) -> None:
        """Remove the joint_states subscription, then the node."""
        self.states_input.destroy()
        super().destroy()


def summarize(recorder: ArmRecorder, reference: Any, start: float, duration: float,
              effort_limit: np.ndarray) -> dict:
    """Tracking errors per joint [rad], torque use (against ``effort_limit`` (nv,) [N m]) and rates [Hz] of
    what was recorded between ``start`` and ``start + duration`` [s]."""
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


def write_summary(path: Path, summary: dict, diagnostics: dict, simulator: dict, steps: dict, mode: str,
                  rate: float, joint_names: list[str], clock: dict) -> None:
    """The run's figures as JSON: MPC rate and solve times, tracking errors and torque use per joint, the
    simulator's steps by actuation source, the wall-clock time its physics could not catch up with, the refusals
    of both nodes and the clock (``clock`` of :func:`clock_fields`)."""
    import json

    document = {
        "mode": mode, "rate_asked_hz": rate, "mpc_rate_hz": summary["command_rate"], **solve_times(diagnostics),
        "joint_names": joint_names, "rms_error_rad": summary["rms"].tolist(), "max_error_rad": summary["max"].tolist(),
        "max_torque_ratio": float(summary["torque_ratio"].max()),
        "steps_policy": steps["policy"], "steps_command": steps["command"], "steps_brake": steps["brake"],
        "simulator_lost_time_s": float(simulator.get("lost_time_s", "nan")), **clock,
        **loop_counts(diagnostics, simulator),
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def publish_reference_only(duration: float, clock: str = "wall") -> int:
    """For demo.launch.py: once the loop runs, publish the demo reference (starting 1 s later, as the script
    does) and stay until it ends, on ``clock`` (one of CLOCKS, the nodes'). Returns 1 if the loop did not start
    within STARTUP_TIMEOUT."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    import rbd_deriv as rd
    from rbd_deriv import bundled_urdf
    from rbd_deriv.nodes.spin import StopRequested, StopSignals

    joint_names = list(rd.load_urdf(str(bundled_urdf("rbd_arm7"))).joint_names)
    # Ctrl-C under ros2 launch (two SIGINTs) or launch's own stop ends this process as it ends the nodes.
    signals = StopSignals()
    recorder = None
    try:
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO if signals.install() else None)
        recorder = ArmRecorder(joint_names, demo_parameters()["mpc_node"]["command_topic"], clock)
        print("waiting for the loop to run (the MPC's first commands) ...", flush=True)
        if not wait_for_loop(recorder):
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s", file=sys.stderr)
            return 1
        start = recorder.now() + 1.0
        recorder.publish_reference(demo_reference(), start, duration)
        print(f"tracking the reference for {duration:g} s ...", flush=True)
        # Stay alive: the reference is latched, a late subscriber still gets it from us.
        spin_until(recorder, lambda: recorder.now() > start + duration, duration + 5.0)
    except (StopRequested, KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signals.raising = False
        if recorder is not None:
            recorder.destroy()
        rclpy.try_shutdown()
    return 0


def run(arguments: Any) -> int:
    """The arm demo of the command line's ``arguments`` (duration, mode, rate, output, json, logs); 0 when
    no torque exceeded its limit."""
    import rclpy

    import rbd_deriv as rd
    from rbd_deriv import bundled_urdf
    from rbd_deriv.nodes.parameters import actuator_limits

    urdf = str(bundled_urdf("rbd_arm7"))
    model = rd.load_urdf(urdf)
    parameters = demo_parameters()
    damping, friction = plant_per_effort(model.effort_limit, parameters)  # per N m of the URDF's limits
    model.set_actuator_limits(actuator_limits(parameters["sim_node"].get("effort_limits", [0.0])))
    joint_names = list(model.joint_names)
    effort_limit = np.asarray(model.effort_limit, dtype=float)
    reference = demo_reference()
    logs = logs_folder(arguments.logs)
    mpc = parameters["mpc_node"]
    mode = arguments.mode or mpc["mode"]
    rate = arguments.rate or float(mpc["rate_hz"])
    backend = parameters["sim_node"]["backend"]
    clock = arguments.clock
    processes = [
        start_node("sim_node", DEMO_PARAMETERS, {"urdf_path": urdf}, logs / "sim_node.log", clock),
        start_node("mpc_node", DEMO_PARAMETERS, {"urdf_path": urdf, "mode": mode, "rate_hz": rate},
                   logs / "mpc_node.log", clock),
    ]
    if mode == "held":
        processes.append(start_node("dynamics_node", DEMO_PARAMETERS, {"urdf_path": urdf, "rate": rate},
                                    logs / "dynamics_node.log", clock))
    rclpy.init()
    recorder = ArmRecorder(joint_names, mpc["command_topic"], clock)
    try:
        print(f"starting sim_node ({backend}), "
              f"{'dynamics_node, ' if mode == 'held' else ''}mpc_node "
              f"(logs in {logs}), on the {clock} clock ...", flush=True)
        if not wait_for_loop(recorder, processes):
            print(f"the loop did not start within {STARTUP_TIMEOUT:g} s "
                  f"(exited: {exited(processes) or 'none'}); see the logs in {logs}", file=sys.stderr)
            return 1
        start = recorder.now() + 1.0
        recorder.publish_reference(reference, start, arguments.duration)
        recorder.recording = True
        paced = (recorder.now(), time.monotonic())
        print(f"tracking for {arguments.duration:g} s ...", flush=True)
        spin_until(recorder, lambda: recorder.now() > start + arguments.duration + 0.2, arguments.duration + 30.0)
        recorder.poll()
        recorder.recording = False
        pace = clock_fields(clock, recorder.now() - paced[0], time.monotonic() - paced[1])
        # The simulator's last report covers the end of the run.
        spin_until(recorder, lambda: False, 1.2)
        diagnostics, simulator = recorder.mpc_diagnostics(), recorder.sim_diagnostics()
    finally:
        stop_processes(processes)
        recorder.destroy()
        rclpy.try_shutdown()

    summary = summarize(recorder, reference, start, arguments.duration, effort_limit)
    title = (f"rbd_deriv demo: {model.name} ({model.nv} joints), plant {backend} "
             f"(damping {_one_value(damping)} N m s/rad and friction {_one_value(friction)} N m per "
             f"N m of effort limit), MPC mode {mode}, N={mpc['horizon']}, dt={mpc['dt']} s")
    steps = {source: int(simulator.get(f"steps_{source}", "0")) for source in ("policy", "command", "brake")}
    _print_report(title, summary, diagnostics, steps, mode, rate, joint_names, pace)
    exceeded = bool((summary["torque_ratio"] > 1.0).any())
    print(f"torque limits exceeded: {'YES' if exceeded else 'never'}")
    output = Path(arguments.output)
    plot_arm(summary, joint_names, effort_limit, output, title)
    print(f"plot written to {output.resolve()}")
    run_video(video_path(arguments.video, output), urdf, joint_names, recorder.states, start, arguments.duration)
    if arguments.json:
        write_summary(Path(arguments.json), summary, diagnostics, simulator, steps, mode, rate, joint_names, pace)
        print(f"summary written to {Path(arguments.json).resolve()}")
    return 0 if not exceeded else 1


def _print_report(title: str, summary: dict, diagnostics: dict, steps: dict, mode: str, rate: float,
                  joint_names: list[str], pace: dict) -> None:
    print()
    print(title)
    print(f"clock:                  {pace['clock']}, {pace['real_time_factor']:.3f} of its seconds per wall second")
    print(f"MPC rate achieved:      {summary['command_rate']:.1f} Hz of the {pace['clock']} clock "
          f"(asked {rate:g} Hz)")
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
    print(f"simulator steps:        {steps['policy']} from the feedback policy, {steps['command']} from the held "
          f"torque command, {steps['brake']} braked (since it started)")
    print()
    print(f"{'joint':<8} {'rms error [rad]':>16} {'max error [rad]':>16} {'max |tau|/limit':>16}")
    for j, name in enumerate(joint_names):
        print(f"{name:<8} {summary['rms'][j]:>16.5f} {summary['max'][j]:>16.5f} "
              f"{summary['torque_ratio'][j]:>16.3f}")
