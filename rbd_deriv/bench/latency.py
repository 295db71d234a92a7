"""End-to-end latency of the dynamics node: joint_states published -> linearization received.

    python -m rbd_deriv.bench latency                 # arm at 1 kHz, then talos (free flyer) at 200 Hz
    python -m rbd_deriv.bench latency --robot arm --duration 10 --json latency.json

For each robot the benchmark starts the dynamics node as a separate process (its console entry point,
or ``python -m rbd_deriv.nodes.dynamics_node``) on a private ROS domain, waits until it answers, warms
up for a second, then publishes joint_states (and, for a floating base, odometry) at a fixed rate for
``duration`` seconds, each stamped with the time it was sent. Latency is the time between that stamp
and the arrival of the linearization carrying it, on the same clock. Reported: p50, p99 and max
latency [ms], throughput [Hz] and drops (states sent whose linearization never came back within a
grace period after the run).

Targets from the issue: the arm at 1 kHz with p99 <= 1 ms and no drops; talos at 200 Hz with p99 <= 5 ms.
They are printed next to the result; nothing here fails on them.

The reference row ``echo`` measures the floor of the machine in the same run: a node that only
copies each joint_states header into an empty Linearization, reading its input the same way as the
dynamics node (a listener thread), driven by the same client at the arm's rate. What the dynamics node adds is its row minus this one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.nodes.processes import stop_processes

__all__ = ["Scenario", "LatencyResult", "SCENARIOS", "first_linearization", "run_scenario", "main"]


@dataclass(frozen=True)
class Scenario:
    """One robot at one rate, with the issue's latency target."""

    name: str
    urdf: str  # "bundled:<name>" or "example:<name>"
    floating_base: bool
    rate_hz: float
    target_p99_ms: float
    echo: bool = False  # the reference node instead of the dynamics node


SCENARIOS: Dict[str, Scenario] = {
    "echo": Scenario("echo", "bundled:rbd_arm7", False, 1000.0, float("nan"), echo=True),
    "arm": Scenario("arm", "bundled:rbd_arm7", False, 1000.0, 1.0),
    "talos": Scenario("talos", "example:talos", True, 200.0, 5.0),
}


@dataclass
class LatencyResult:
    """What one run measured; latencies in [ms], rates in [Hz]."""

    scenario: str
    nv: int
    rate_hz: float
    duration_s: float
    sent: int
    received: int
    drops: int
    throughput_hz: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    target_p99_ms: float

    @property
    def meets_target(self) -> bool:
        return self.drops == 0 and self.p99_ms <= self.target_p99_ms


def _urdf_path(spec: str) -> str:
    from rbd_deriv.testing.robots import bundled_urdf, example_robot_urdf

    kind, name = spec.split(":", 1)
    return str(bundled_urdf(name) if kind == "bundled" else example_robot_urdf(name))


def _node_command(echo: bool = False) -> List[str]:
    if echo:
        return [sys.executable, "-m", "rbd_deriv.bench.latency", "--serve-echo"]
    script = shutil.which("dynamics_node", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "rbd_deriv.nodes.dynamics_node"]


def serve_echo(args: Optional[Sequence[str]] = None) -> int:
    """The reference node: each joint_states header goes out at once in an empty Linearization,
    read the way the dynamics node reads its input (a listener thread, no executor callback)."""
    from sensor_msgs.msg import JointState

    from rbd_deriv.msg import Linearization
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from rbd_deriv.nodes.dynamics_node import OUTPUT_QOS, STATE_DEPTH
    from rbd_deriv.nodes.spin import ListenerThread, PolledSubscription, run_node

    def make_node():
        from rclpy.node import Node

        node = Node("latency_echo")
        publisher = node.create_publisher(Linearization, "linearization", OUTPUT_QOS)
        # The dynamics node's state subscription with state_qos: reliable, as the publisher measured here.
        states = PolledSubscription(node, JointState, "joint_states",
                                    QoSProfile(depth=STATE_DEPTH, reliability=ReliabilityPolicy.RELIABLE))
        output = Linearization()

        def echo() -> None:
            for message in states.take():
                output.header = message.header
                publisher.publish(output)

        node.echo_listener = ListenerThread([states], echo, "latency_echo_states")
        return node

    return run_node(make_node, args, cleanup=lambda node: node.echo_listener.stop())


def run_scenario(scenario: Scenario, duration: float, outputs: str, domain: int,
                 startup_timeout: float = 900.0) -> LatencyResult:
    """Start a node for ``scenario``, drive it for ``duration`` [s], and measure.

    Args:
        outputs: ``all`` (the node's defaults: linearization, M^-1 and torques) or ``linearization``.
        domain: ROS_DOMAIN_ID shared by the node and this process.
    """
    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    import rbd_deriv as rd
    from rbd_deriv.msg import Linearization

    urdf = _urdf_path(scenario.urdf)
    model = rd.load_urdf(urdf, floating_base=scenario.floating_base)
    joints = [n for n in model.joint_names if n != "root_joint"]
    q = rd.neutral(model)
    position = np.array([q[model.idx_q[n]] for n in joints])

    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    arguments = ["--ros-args", "-p", f"urdf_path:={urdf}", "-p", "max_state_age:=0.0",
                 "-p", f"floating_base:={str(scenario.floating_base).lower()}"]
    if outputs == "linearization":
        arguments += ["-p", "publish_mass_matrix_inverse:=false", "-p", "publish_torques:=false"]
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(_node_command(scenario.echo) + arguments, env=env, stdout=log,
                               stderr=subprocess.STDOUT)

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("latency_benchmark", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    arrivals: Dict[int, int] = {}

    def on_linearization(message: Linearization) -> None:
        arrivals[message.header.stamp.sec * 1_000_000_000 + message.header.stamp.nanosec] = time.time_ns()

    node.create_subscription(Linearization, "linearization", on_linearization, qos)
    joint_pub = node.create_publisher(JointState, "joint_states", qos)
    odom_pub = node.create_publisher(Odometry, "odom", qos)
    joint_message = JointState(name=joints, position=position.tolist(), velocity=[0.0] * len(joints))
    odom_message = Odometry()
    odom_message.pose.pose.orientation.w = 1.0

    def send(now_ns: int) -> None:
        stamp = joint_message.header.stamp
        stamp.sec, stamp.nanosec = divmod(now_ns, 1_000_000_000)
        if scenario.floating_base:
            odom_message.header.stamp = stamp
            odom_pub.publish(odom_message)
        joint_pub.publish(joint_message)

    def drive(seconds: float) -> List[int]:
        """Publish at the scenario rate for ``seconds``, draining replies between ticks."""
        period_ns = int(1e9 / scenario.rate_hz)
        start = time.monotonic_ns()
        sent = []
        tick = 0
        while True:
            due = start + tick * period_ns
            if due - start >= seconds * 1e9:
                return sent
            while time.monotonic_ns() < due:
                executor.spin_once(timeout_sec=max(0.0, (due - time.monotonic_ns()) * 1e-9))
            now_ns = time.time_ns()
            send(now_ns)
            sent.append(now_ns)
            tick += 1

    try:
        deadline = time.monotonic() + startup_timeout
        while not arrivals:
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"dynamics node did not answer for {scenario.name}:\n{log.read()[-3000:]}")
            send(time.time_ns())
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
        drive(1.0)  # warm up: DDS buffers, caches, the node's first allocations
        arrivals.clear()
        sent = drive(duration)
        grace = time.monotonic() + 1.0
        while time.monotonic() < grace:
            executor.spin_once(timeout_sec=0.05)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        # SIGTERM: a benchmark run from a background job passes an ignored SIGINT on to its child.
        stop_processes([process], timeout=20.0, first_signal=signal.SIGTERM)
        log.close()

    latencies = np.array([arrivals[s] - s for s in sent if s in arrivals], dtype=float) * 1e-6
    received = int(latencies.size)
    p50, p99 = np.percentile(latencies, [50.0, 99.0]) if received else (float("nan"),) * 2
    return LatencyResult(
        scenario=scenario.name, nv=model.nv, rate_hz=scenario.rate_hz, duration_s=duration, sent=len(sent),
        received=received, drops=len(sent) - received, throughput_hz=received / duration,
        p50_ms=float(p50), p99_ms=float(p99), max_ms=float(latencies.max()) if received else float("nan"),
        target_p99_ms=scenario.target_p99_ms)


def first_linearization(command: List[str], env: Dict[str, str], joints: Sequence[str],
                        timeout: float = 600.0) -> float:
    """Start a dynamics node (``command``, environment ``env`` with its ROS_DOMAIN_ID) and publish joint_states
    of ``joints`` (all at 0.1 rad, at rest) every 50 ms from the start; return the seconds from starting the
    process to the first linearization received, then stop the node (start-up time as a user sees it).

    Raises:
        RuntimeError: No linearization within ``timeout`` [s], or the node exited; with the node's output.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from rbd_deriv.msg import Linearization

    domain = int(env["ROS_DOMAIN_ID"])
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("startup_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    received: List[float] = []
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(Linearization, "linearization", lambda message: received.append(time.monotonic()),
                             qos)
    publisher = node.create_publisher(JointState, "joint_states", qos)
    message = JointState(name=list(joints), position=[0.1] * len(joints), velocity=[0.0] * len(joints))
    log = tempfile.TemporaryFile("w+")
    start = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while not received:
            if process.poll() is not None or time.monotonic() - start > timeout:
                log.seek(0)
                raise RuntimeError(f"no linearization from {command[0]} within {time.monotonic() - start:.0f} s"
                                   f" (exit code {process.poll()}):\n{log.read()[-3000:]}")
            message.header.stamp = node.get_clock().now().to_msg()
            publisher.publish(message)
            executor.spin_once(timeout_sec=0.05)
        return received[0] - start
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        stop_processes([process], timeout=20.0, first_signal=signal.SIGTERM)
        log.close()


def _target_text(result: LatencyResult) -> str:
    if SCENARIOS.get(result.scenario, SCENARIOS["arm"]).echo:
        return "reference: rclpy echo, no computation"
    return f"p99 <= {result.target_p99_ms:g} ms, 0 drops: {'met' if result.meets_target else 'NOT met'}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: run the chosen scenarios, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench latency", description=__doc__.split("\n")[0])
    parser.add_argument("--robot", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per robot [s]")
    parser.add_argument("--rate", type=float, default=None, help="override the publishing rate [Hz]")
    parser.add_argument("--outputs", choices=("all", "linearization"), default="all",
                        help="node outputs: its defaults (linearization, M^-1, torques) or the linearization only")
    parser.add_argument("--domain", type=int, default=100 + os.getpid() % 100, help="ROS_DOMAIN_ID to use")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    options, ros_arguments = parser.parse_known_args(argv)
    if options.serve_echo:
        return serve_echo(ros_arguments)
    if ros_arguments:
        parser.error(f"unrecognized arguments: {' '.join(ros_arguments)}")

    names = list(SCENARIOS) if options.robot == "all" else [options.robot]
    results = []
    for name in names:
        scenario = SCENARIOS[name]
        if options.rate:
            scenario = Scenario(scenario.name, scenario.urdf, scenario.floating_base, options.rate,
                                scenario.target_p99_ms, scenario.echo)
        print(f"{name}: {scenario.rate_hz:g} Hz for {options.duration:g} s ...", flush=True)
        results.append(run_scenario(scenario, options.duration, options.outputs, options.domain))

    rows = [[r.scenario, r.nv, r.rate_hz, r.sent, r.received, r.drops, r.throughput_hz, r.p50_ms, r.p99_ms,
             r.max_ms, _target_text(r)] for r in results]
    print(format_table(["robot", "nv", "rate [Hz]", "sent", "received", "drops", "throughput [Hz]",
                        "p50 [ms]", "p99 [ms]", "max [ms]", "target"], rows,
                       title=f"dynamics node end-to-end latency (outputs: {options.outputs})"))
    if options.json:
        write_json(options.json, {"machine": machine_info(), "outputs": options.outputs,
                                  "results": [asdict(r) for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
