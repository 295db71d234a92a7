"""What the soaks share (:mod:`rbd_deriv.nodes.dynamics_soak`, :mod:`rbd_deriv.nodes.legged_soak`): the nodes'
resident memory watched from /proc, the counts of their /diagnostics taken apart by key, the balance of one
input topic, and the paced publishing loop.

Every soak checks one balance per input topic: each message it sent is accounted for by the node that takes the
topic, as used (an output, a pushed robot), refused under its reason, superseded by a newer one, or lost before
the node (:class:`rbd_deriv.nodes.spin.SequenceGaps`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator

from rbd_deriv.nodes.processes import resident_memory

__all__ = ["MemoryWatch", "TopicBalance", "counts_with_prefix", "differences", "paced"]


@dataclass
class MemoryWatch:
    """The resident memory [bytes] of process ``pid``: at :meth:`start`, at :meth:`end`, the largest sampled."""

    pid: int
    start: int = -1
    end: int = -1
    max: int = -1

    def sample(self) -> int:
        """Read it now; the largest so far is kept. -1 if the process is gone."""
        now = resident_memory(self.pid)
        self.max = max(self.max, now)
        return now

    def begin(self) -> None:
        """The start of the measurement (after the process's warm-up)."""
        self.start = self.max = resident_memory(self.pid)

    def finish(self) -> None:
        """The end of the measurement."""
        self.end = self.sample()


def counts_with_prefix(values: Dict[str, str], prefix: str) -> Dict[str, int]:
    """{key less ``prefix``: count} of the /diagnostics ``values`` whose key starts with ``prefix``."""
    return {key[len(prefix):]: int(value) for key, value in values.items() if key.startswith(prefix)}


def differences(after: Dict[str, int], before: Dict[str, int]) -> Dict[str, int]:
    """``after - before`` by key, the keys that changed only."""
    changed = {key: count - before.get(key, 0) for key, count in after.items()}
    return {key: count for key, count in changed.items() if count}


@dataclass
class TopicBalance:
    """Every message a soak sent on one input topic, and what the node that takes it made of them.

    ``exclusive``: the soak is the topic's only publisher, so the node's counts are all the soak's, and
    sent = used + refused + superseded + lost must hold exactly. Otherwise (the simulator's joint_states and
    odometry, the MPC's policies share the topic) the soak sends only broken messages there, each of a kind the
    node refuses under one reason, which no message of the other publishers gets; the node's losses are the
    topic's (whose messages they were is not known), so: refused under the soak's reasons <= sent <= that +
    lost.

    Attributes:
        sent: Messages the soak published; sent_bad: the broken ones by kind.
        reasons: The refusal key (``<input>/<reason>``) each broken kind must be counted under.
        used, refused, superseded, lost: The node's counts of the topic over the soak (refusals by key).
    """

    topic: str
    exclusive: bool
    reasons: Dict[str, str]
    sent: int = 0
    sent_bad: Dict[str, int] = field(default_factory=dict)
    used: int = 0
    refused: Dict[str, int] = field(default_factory=dict)
    superseded: int = 0
    lost: int = 0

    def send(self, kind: str = "") -> None:
        """Count one message sent; ``kind``: how it is broken ("" for a good one)."""
        self.sent += 1
        if kind:
            self.sent_bad[kind] = self.sent_bad.get(kind, 0) + 1

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def refused_as_sent(self) -> int:
        """Refusals under the reasons of the soak's broken kinds."""
        return sum(self.refused.get(reason, 0) for reason in set(self.reasons.values()))

    @property
    def balanced(self) -> bool:
        """Every message sent is accounted for (see the class's docstring)."""
        if self.exclusive:
            return self.sent == self.used + self.refused_total + self.superseded + self.lost
        return self.refused_as_sent <= self.sent <= self.refused_as_sent + self.lost

    @property
    def exact(self) -> bool:
        """The balance holds with nothing left to the losses' attribution."""
        return self.balanced and (self.exclusive or self.refused_as_sent == self.sent)


def paced(duration: float, rate: float, idle: Callable[[], None], nap: float = 1e-3) -> Iterator[float]:
    """The times [s] since the start of a loop at ``rate`` [Hz] for ``duration`` [s], each yielded when it is due;
    ``idle()`` runs meanwhile (take what arrived), with sleeps of at most ``nap`` [s] between calls."""
    period_ns, start, tick = int(1e9 / rate), time.monotonic_ns(), 0
    while True:
        due = start + tick * period_ns
        elapsed = (due - start) * 1e-9
        if elapsed >= duration:
            return
        while time.monotonic_ns() < due:
            idle()
            remaining = (due - time.monotonic_ns()) * 1e-9
            if remaining > 2e-4:
                time.sleep(min(remaining - 1e-4, nap))
        yield elapsed
        tick += 1
