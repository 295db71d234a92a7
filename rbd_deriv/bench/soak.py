"""Soak of the dynamics node: joint_states at 1 kHz through real DDS for minutes, every message accounted for.

    python -m rbd_deriv.bench soak                         # 10 minutes at 1 kHz, the bundled 7-dof arm
    python -m rbd_deriv.bench soak --duration 60 --json soak.json

Runs one :func:`rbd_deriv.nodes.dynamics_soak.run_soak` (the node as a process, broken messages and bursts
beyond its queue among the states) and prints what it measured: the node's resident memory at the start, at
the end and its largest; what was sent; the node's totals (inputs, outputs, refused by reason, lost before the
node); the balance sent = outputs + refused + lost; the outputs received back, lost on the way or not finite.
``--json`` writes the figures with the machine's description. The exit code is 1 if the balance does not hold,
an output was not finite or the node died.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Optional, Sequence

from rbd_deriv.bench.timing import machine_info, write_json
from rbd_deriv.nodes.dynamics_soak import SoakResult, run_soak

__all__ = ["main", "report"]


def report(result: SoakResult) -> str:
    """The soak's figures as text: memory in [MiB], counts of messages."""
    mib = 2.0**-20
    lines = [
        f"dynamics node soak: {result.duration_s:g} s at {result.rate_hz:g} Hz, node alive at the end: "
        f"{result.node_alive}",
        f"  node RSS: start {result.rss_start * mib:.1f} MiB, end {result.rss_end * mib:.1f} MiB, "
        f"max {result.rss_max * mib:.1f} MiB",
        f"  sent {result.sent} joint_states ({sum(result.sent_bad.values())} broken: "
        + ", ".join(f"{kind} {count}" for kind, count in result.sent_bad.items()) + ")",
        f"  node: {result.inputs} taken, {result.outputs} answered with outputs, {result.refused_total} refused ("
        + ", ".join(f"{reason} {count}" for reason, count in sorted(result.refused.items())) + f"), "
        f"{result.lost} lost before the node",
        f"  balance sent = outputs + refused + lost: {result.sent} = {result.outputs} + {result.refused_total} + "
        f"{result.lost}: {'holds' if result.balanced else 'DOES NOT HOLD'}",
        "  outputs received here: " + ", ".join(f"{topic} {count}" for topic, count in result.received.items())
        + f"; lost on the way back {result.received_lost}; with NaN or inf: {result.non_finite_outputs}",
    ]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: run one soak, print its figures, optionally write them as JSON."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench soak", description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="publishing time [s]")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate [Hz]")
    parser.add_argument("--bad-every", type=int, default=50, help="one broken message in this many (0: none)")
    parser.add_argument("--burst", type=int, default=200, help="messages sent at once in each burst (0: none)")
    parser.add_argument("--burst-period", type=float, default=20.0, help="time between bursts [s]")
    parser.add_argument("--urdf", default=None, help="URDF file (default: the bundled 7-dof arm)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    options = parser.parse_args(argv)
    result = run_soak(options.duration, options.rate, options.bad_every, options.burst, options.burst_period,
                      options.urdf, progress=True)
    print(report(result))
    if options.json:
        write_json(options.json, {"machine": machine_info(), **asdict(result), "balanced": result.balanced})
    return 0 if result.balanced and result.node_alive and not result.non_finite_outputs else 1


if __name__ == "__main__":
    sys.exit(main())
