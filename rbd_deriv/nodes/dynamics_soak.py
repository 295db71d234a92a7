"""A soak run of the dynamics node: joint_states at 1 kHz through real DDS for minutes, every message accounted for.

The benchmark that runs it, prints its figures and writes them as JSON is :mod:`rbd_deriv.bench.soak`
(``./run bench soak``); this module holds the run itself, which talks to the node through rclpy.

The dynamics node runs as a process of its own (its console entry point, or ``python -m
rbd_deriv.nodes.dynamics_node``) on a private ROS domain, in ``on_message`` mode with its default outputs.
This process publishes joint_states at ``rate`` along a smooth motion, each stamped with the time it is sent;
one message in ``bad_every`` is broken in one of the ways of :data:`BAD_KINDS` (NaN, a velocity no robot
reaches, a stamp an hour ahead, unknown joints, mismatched lengths), and every ``burst_period`` seconds
``burst`` messages go out at once, more than the node's queue holds, so that some are lost before the node.
It reads back every output the node publishes and checks each number, and reads the node's /diagnostics.

Measured (:class:`SoakResult`): the node's resident memory at the start, at the end and its largest; what was
sent; the node's totals (inputs, outputs, refused by reason, lost before the node); and the balance, which must
hold exactly: sent = outputs + refused + lost. Outputs that are not finite, and a node that died, are measured
too. Nothing here fails on a figure: the caller judges them (the test suite runs a short soak and asserts
the balance).
"""

from __future__ import annotations

import array
import math
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

from rbd_deriv.nodes.processes import node_command, stop_processes
from rbd_deriv.nodes.soak_accounting import MemoryWatch, counts_with_prefix, differences, paced

__all__ = ["BAD_KINDS", "OUTPUT_TOPICS", "SoakResult", "run_soak"]

#: The broken messages the soak sends, by the reason under which the node must refuse each.
BAD_KINDS = ("non_finite", "implausible", "future", "unknown_joints", "length_mismatch")

#: Output topics of the dynamics node and whether their messages hold numbers to check.
OUTPUT_TOPICS = ("linearization", "mass_matrix_inverse", "bias_torques")

_NS = 1_000_000_000


@dataclass
class SoakResult:
    """What one soak measured. Memory in [bytes], times in [s].

    Attributes:
        sent: joint_states messages published; sent_bad: the broken ones by kind.
        inputs, outputs, refused, lost: the node's totals from /diagnostics: messages it took, states it
            published outputs for, refusals by reason, messages lost before it.
        received: Output messages that reached this process, by topic; received_lost: output messages lost
            on the way back (gaps in the node's sequence numbers); non_finite_outputs: received messages with
            a NaN or inf.
        rss_start, rss_end, rss_max: The node's resident memory after its warm-up, at the end, at most.
        node_alive: The node was still running at the end.
    """

    duration_s: float
    rate_hz: float
    sent: int = 0
    sent_bad: Dict[str, int] = field(default_factory=dict)
    inputs: int = -1
    outputs: int = -1
    refused: Dict[str, int] = field(default_factory=dict)
    lost: int = -1
    received: Dict[str, int] = field(default_factory=dict)
    received_lost: int = 0
    non_finite_outputs: int = 0
    rss_start: int = -1
    rss_end: int = -1
    rss_max: int = -1
    node_alive: bool = True

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def balanced(self) -> bool:
        """Every message sent is an output, a counted refusal or a counted loss."""
        return self.sent == self.outputs + self.refused_total + self.lost and self.inputs == \
            self.outputs + self.refused_total


class _Publisher:
    """joint_states along a smooth motion of the model's joints, with broken messages mixed in."""

    def __init__(self, node, model, bad_every: int) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        self.joints = list(model.actuated_joint_names)
        self._lower = np.nan_to_num(np.asarray(model.lower_position_limit, dtype=float), neginf=-1.0)
        self._upper = np.nan_to_num(np.asarray(model.upper_position_limit, dtype=float), posinf=1.0)
        self._publisher = node.create_publisher(JointState, "joint_states",
                                                QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        self._message_type = JointState
        self.bad_every = bad_every
        self.sent = 0
        self.sent_bad = {kind: 0 for kind in BAD_KINDS}

    def matched(self) -> bool:
        return self._publisher.get_subscription_count() > 0

    def publish(self, t: float, stamp_ns: int) -> None:
        """The state at time ``t`` [s] of the motion (or a broken message), stamped ``stamp_ns``."""
        center, amplitude = (self._lower + self._upper) / 2, (self._upper - self._lower) / 4
        phase = 2 * math.pi * 0.2 * t + np.arange(len(self.joints))
        position, velocity = center + amplitude * np.sin(phase), 2 * math.pi * 0.2 * amplitude * np.cos(phase)
        names = self.joints
        self.sent += 1
        if self.bad_every and self.sent % self.bad_every == 0:
            kind = BAD_KINDS[(self.sent // self.bad_every) % len(BAD_KINDS)]
            self.sent_bad[kind] += 1
            if kind == "non_finite":
                position[0] = math.nan
            elif kind == "implausible":
                velocity[0] = 1e307
            elif kind == "future":
                stamp_ns += 3600 * _NS
            elif kind == "unknown_joints":
                names = ["soak_unknown_joint"]
                position, velocity = position[:1], velocity[:1]
            else:
                position = position[:-1]
        message = self._message_type(name=names, position=array.array("d", position.tobytes()),
                                     velocity=array.array("d", velocity.tobytes()))
        message.header.stamp.sec, message.header.stamp.nanosec = divmod(stamp_ns, _NS)
        self._publisher.publish(message)


class _Outputs:
    """The node's outputs and diagnostics, taken when asked (no executor), every number checked."""

    def __init__(self, node) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from rbd_deriv.msg import Linearization, Matrix
        from rbd_deriv.nodes.spin import PolledSubscription

        qos = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE)
        types = {"linearization": Linearization, "mass_matrix_inverse": Matrix, "bias_torques": JointState}
        self._outputs = {topic: PolledSubscription(node, types[topic], topic, qos) for topic in OUTPUT_TOPICS}
        self._diagnostics = PolledSubscription(node, DiagnosticArray, "/diagnostics", qos)
        self.received = {topic: 0 for topic in OUTPUT_TOPICS}
        self.non_finite = 0
        self.totals: Dict[str, str] = {}

    @property
    def lost(self) -> int:
        return sum(subscription.lost for subscription in self._outputs.values())

    def take(self) -> None:
        for topic, subscription in self._outputs.items():
            for message in subscription.take():
                self.received[topic] += 1
                numbers = {"linearization": ("x", "u", "a", "b", "x_next"), "mass_matrix_inverse": ("data",),
                           "bias_torques": ("effort",)}[topic]
                if not all(np.isfinite(np.asarray(getattr(message, name))).all() for name in numbers):
                    self.non_finite += 1
        for message in self._diagnostics.take():
            for status in message.status:
                if status.name.endswith(": dynamics"):
                    self.totals = {kv.key: kv.value for kv in status.values}

    def count(self, key: str) -> int:
        return int(self.totals.get(key, -1))

    def destroy(self) -> None:
        for subscription in (*self._outputs.values(), self._diagnostics):
            subscription.destroy()


def run_soak(duration: float = 600.0, rate: float = 1000.0, bad_every: int = 50, burst: int = 200,
             burst_period: float = 20.0, urdf: Optional[str] = None, domain: Optional[int] = None,
             startup_timeout: float = 900.0, progress: bool = False) -> SoakResult:
    """Run one soak (see the module's docstring) and return what it measured.

    Args:
        duration: Publishing time [s]. rate: joint_states rate [Hz].
        bad_every: One message in this many is broken (0: none).
        burst, burst_period: ``burst`` messages at once every ``burst_period`` [s] (0: none).
        urdf: The robot (default: the bundled 7-dof arm). domain: ROS_DOMAIN_ID (default: one of this
            process's own).
    """
    import rclpy

    import rbd_deriv as rd

    urdf = urdf or str(rd.bundled_urdf("rbd_arm7"))
    model = rd.load_urdf(urdf)
    domain = 100 + os.getpid() % 100 if domain is None else domain
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(node_command("dynamics_node", "rbd_deriv.nodes.dynamics_node")
                               + ["--ros-args", "-p", f"urdf_path:={urdf}"], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("soak", context=context)
    publisher, outputs = _Publisher(node, model, bad_every), _Outputs(node)
    result = SoakResult(duration_s=duration, rate_hz=rate)
    try:
        # Ready: the node answers a good state (what was sent meanwhile is not part of the soak).
        deadline = time.monotonic() + startup_timeout
        while not outputs.received["bias_torques"]:
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"the dynamics node did not answer:\n{log.read()[-3000:]}")
            if publisher.matched():
                publisher.publish(0.0, time.time_ns())
            time.sleep(0.2)
            outputs.take()
        time.sleep(1.0)
        outputs.take()
        outputs.totals = {}
        while outputs.count("outputs_total") < 0:  # fresh diagnostics: the counts before the soak
            time.sleep(0.1)
            outputs.take()
        before = {key: outputs.count(key) for key in ("inputs_total", "outputs_total", "lost_joint_states")}
        refused_before = rejections(outputs.totals)
        received_before = dict(outputs.received)
        publisher.sent, publisher.sent_bad = 0, {kind: 0 for kind in BAD_KINDS}
        memory = MemoryWatch(process.pid)
        memory.begin()

        next_burst, next_sample = burst_period, 1.0
        for elapsed in paced(duration, rate, outputs.take):
            publisher.publish(elapsed, time.time_ns())
            if burst and burst_period and elapsed >= next_burst:
                for _ in range(burst):
                    publisher.publish(elapsed, time.time_ns())
                next_burst += burst_period
            if elapsed >= next_sample:
                memory.sample()
                next_sample += 1.0
                if progress and int(elapsed) % 60 == 0:
                    print(f"  {elapsed:.0f} s: {publisher.sent} sent, node RSS {memory.max / 2**20:.1f} MiB",
                          flush=True)

        # Until the node's totals account for everything sent (or they stop moving).
        settle = time.monotonic() + 30.0
        while time.monotonic() < settle:
            time.sleep(0.2)
            outputs.take()
            taken = outputs.count("inputs_total") - before["inputs_total"]
            lost = outputs.count("lost_joint_states") - before["lost_joint_states"]
            if taken + lost >= publisher.sent:
                break
        time.sleep(1.5)  # one more diagnostics period
        outputs.take()
        memory.finish()
        result.rss_start, result.rss_end, result.rss_max = memory.start, memory.end, memory.max
        result.node_alive = process.poll() is None
        result.sent, result.sent_bad = publisher.sent, dict(publisher.sent_bad)
        result.inputs = outputs.count("inputs_total") - before["inputs_total"]
        result.outputs = outputs.count("outputs_total") - before["outputs_total"]
        result.lost = outputs.count("lost_joint_states") - before["lost_joint_states"]
        result.refused = differences(rejections(outputs.totals), refused_before)
        result.received = {topic: count - received_before[topic] for topic, count in outputs.received.items()}
        result.received_lost = outputs.lost
        result.non_finite_outputs = outputs.non_finite
    finally:
        outputs.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)
        # SIGTERM: a soak run from a background job passes an ignored SIGINT on to its child.
        stop_processes([process], timeout=20.0, first_signal=signal.SIGTERM)
        log.close()
    return result


def rejections(totals: Dict[str, str]) -> Dict[str, int]:
    """The dynamics node's refusals by reason, of its /diagnostics values (``rejected_<reason>``, not the total)."""
    counts = counts_with_prefix(totals, "rejected_")
    counts.pop("total", None)
    return counts
