"""Soaks through real DDS for minutes, every message accounted for: the dynamics node (joint_states at 1 kHz) or the
legged loop (a robot trotting through the simulator and MPC nodes, broken inputs mixed in).

    python -m rbd_deriv.bench soak                         # 10 minutes at 1 kHz, the bundled 7-dof arm
    python -m rbd_deriv.bench soak --duration 60 --json soak.json
    python -m rbd_deriv.bench soak --robot solo12          # 10 minutes of solo12 trotting

Runs one :func:`rbd_deriv.nodes.dynamics_soak.run_soak` (the node as a process, broken messages and bursts
beyond its queue among the states) and prints what it measured: the node's resident memory at the start, at
the end and its largest; what was sent; the node's totals (inputs, outputs, refused by reason, lost before the
node); the balance sent = outputs + refused + lost; the outputs received back, lost on the way or not finite.
``--json`` writes the figures with the machine's description. The exit code is 1 if the balance does not hold,
an output was not finite or the node died.

With ``--robot``, one :func:`rbd_deriv.nodes.legged_soak.run_legged_soak` instead: it prints each node's resident
memory, the messages sent by topic and broken kind, the nodes' counts of each topic (used, refused by reason,
superseded, lost) and its balance, falls, the MPC's rate and commands. The exit code is 1 if a balance does not
hold, the robot fell or a node died.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Optional, Sequence

from rbd_deriv.bench.timing import machine_info, write_json
from rbd_deriv.nodes.dynamics_soak import SoakResult, run_soak
from rbd_deriv.nodes.legged_soak import LeggedSoakResult, run_legged_soak
from rbd_deriv.nodes.processes import CLOCKS
from rbd_deriv.nodes.soak_accounting import TopicBalance

__all__ = ["legged_report", "main", "report"]

_MIB = 2.0**-20


def memory_line(name: str, start: int, end: int, largest: int) -> str:
    """One process's resident memory [bytes] as a report line in [MiB]."""
    return f"  {name} RSS: start {start * _MIB:.1f} MiB, end {end * _MIB:.1f} MiB, max {largest * _MIB:.1f} MiB"


def listed(counts: dict) -> str:
    """``key count, ...`` sorted by key."""
    return ", ".join(f"{key} {count}" for key, count in sorted(counts.items()))


def report(result: SoakResult) -> str:
    """The soak's figures as text: memory in [MiB], counts of messages."""
    lines = [
        f"dynamics node soak: {result.duration_s:g} s at {result.rate_hz:g} Hz, node alive at the end: "
        f"{result.node_alive}",
        memory_line("node", result.rss_start, result.rss_end, result.rss_max),
        f"  sent {result.sent} joint_states ({sum(result.sent_bad.values())} broken: "
        + ", ".join(f"{kind} {count}" for kind, count in result.sent_bad.items()) + ")",
        f"  node: {result.inputs} taken, {result.outputs} answered with outputs, {result.refused_total} refused ("
        + listed(result.refused) + f"), {result.lost} lost before the node",
        f"  balance sent = outputs + refused + lost: {result.sent} = {result.outputs} + {result.refused_total} + "
        f"{result.lost}: {'holds' if result.balanced else 'DOES NOT HOLD'}",
        "  outputs received here: " + ", ".join(f"{topic} {count}" for topic, count in result.received.items())
        + f"; lost on the way back {result.received_lost}; with NaN or inf: {result.non_finite_outputs}",
    ]
    return "\n".join(lines)


def topic_line(topic: TopicBalance) -> str:
    """One input topic of a soak: sent, the node's counts, the balance."""
    holds = "holds" if topic.exact else "holds within the losses" if topic.balanced else "DOES NOT HOLD"
    if topic.exclusive:
        balance = (f"sent = used + refused + superseded + lost: {topic.sent} = {topic.used} + {topic.refused_total} + "
                   f"{topic.superseded} + {topic.lost}")
    else:
        balance = (f"broken sent = refused under their reasons (+ lost): {topic.sent} = {topic.refused_as_sent} "
                   f"(+ {topic.lost})")
    if not topic.exclusive and topic.refused_as_sent > topic.sent:
        holds += " (more refused under the soak's reasons than it sent: the other publishers' messages too)"
    return (f"  {topic.topic}: sent {topic.sent} ({listed(topic.sent_bad) or 'none broken'}); node: used {topic.used}, "
            f"refused {topic.refused_total} ({listed(topic.refused)}), superseded {topic.superseded}, lost "
            f"{topic.lost}; {balance}: {holds}")


def legged_report(result: LeggedSoakResult) -> str:
    """The legged soak's figures as text."""
    lines = [f"legged soak, {result.robot}: {result.duration_s:g} s on the {result.clock} clock "
             f"({result.simulated_s:.1f} s of it), nodes alive at the end: " + listed(result.alive)]
    lines += [memory_line(name, rss["start"], rss["end"], rss["max"]) for name, rss in result.rss.items()]
    lines += [topic_line(topic) for topic in result.topics.values()]
    lines += [
        f"  cmd_vel beyond the bounds: {result.beyond_limits} sent, {result.clamped} clamped (the others superseded); "
        f"small pushes applied: {result.pushes_applied}",
        f"  other refusals (not the soak's reasons): {listed(result.refused_other) or 'none'}",
        f"  fell: {result.fell}" + (f" after {result.fell_after_s:.1f} s" if result.fell_after_s is not None else "")
        + f"; walked {result.walked_m:.1f} m, turned {result.turned_rad:.1f} rad; the simulator behind the wall "
        f"clock for {result.sim_lost_time_s:.3f} s",
        f"  MPC: {result.mpc_rate_hz:.1f} Hz over the soak, lowest diagnostics window (read each second) "
        f"{result.mpc_rate_min_hz:.1f} Hz; "
        f"commands: {listed(result.commands)}",
        f"  balance on every topic: {'holds' if result.balanced else 'DOES NOT HOLD'}",
    ]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: run one soak, print its figures, optionally write them as JSON."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench soak", description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="publishing time [s]")
    parser.add_argument("--robot", default=None, help="soak the legged loop of this robot (solo12) instead")
    parser.add_argument("--logs", default=None, help="legged soak: keep the nodes' logs in this folder")
    parser.add_argument("--clock", choices=CLOCKS, default="simulated",
                        help="legged soak: the nodes' clock, as the demos' (simulated: the simulator's on /clock)")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate [Hz]")
    parser.add_argument("--bad-every", type=int, default=50, help="one broken message in this many (0: none)")
    parser.add_argument("--burst", type=int, default=200, help="messages sent at once in each burst (0: none)")
    parser.add_argument("--burst-period", type=float, default=20.0, help="time between bursts [s]")
    parser.add_argument("--urdf", default=None, help="URDF file (default: the bundled 7-dof arm)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    options = parser.parse_args(argv)
    if options.robot:
        legged = run_legged_soak(options.robot, options.duration, clock=options.clock, progress=True,
                                 logs=options.logs)
        print(legged_report(legged))
        if options.json:
            write_json(options.json, {"machine": machine_info(), **asdict(legged), "balanced": legged.balanced})
        return 0 if legged.balanced and all(legged.alive.values()) and not legged.fell else 1
    result = run_soak(options.duration, options.rate, options.bad_every, options.burst, options.burst_period,
                      options.urdf, progress=True)
    print(report(result))
    if options.json:
        write_json(options.json, {"machine": machine_info(), **asdict(result), "balanced": result.balanced})
    return 0 if result.balanced and result.node_alive and not result.non_finite_outputs else 1


if __name__ == "__main__":
    sys.exit(main())
