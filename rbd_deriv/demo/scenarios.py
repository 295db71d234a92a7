"""The legged demo's scripts: what a robot is asked to do, segment after segment.

A :class:`Segment` lasts a while and holds one request: a gait (the MPC node's ``gait`` and ``idle_gait``
parameters), a velocity command (``cmd_vel``, the base frame's vx, vy [m/s] and yaw rate [rad/s]), a sway, and
optionally a lateral push sized by the velocity change it gives the base. :data:`SCENARIOS` holds each bundled
robot's script; :func:`generic_scenario` is the one of any robot given on the command line: stand 2 s, then the
gait on the command, a push at 60 % of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

__all__ = ["MAX_PUSH_VELOCITY", "PUSH_DURATION", "SCENARIOS", "Segment", "generic_scenario", "scaled"]

#: A push lasts this long [s]: a velocity change DV of the base is the force DV m / PUSH_DURATION.
PUSH_DURATION = 0.1

#: The largest velocity change [m/s] the command line accepts for a push (the simulator bounds them too).
MAX_PUSH_VELOCITY = 5.0


@dataclass(frozen=True)
class Segment:
    """One part of a script.

    Attributes:
        name: What it shows (the report's and the plot's label).
        duration: Its length [s].
        cmd_vel: (vx, vy [m/s], wz [rad/s]) published on cmd_vel throughout, in the base frame.
        parameters: MPC node parameters set at its start (``gait``, ``idle_gait``, ``sway_amplitude``...).
        push: Lateral velocity change [m/s] given to the base (to its left, in its heading frame) ``push_at`` [s]
            into the segment; 0: none.
        push_at: When the push starts, from the segment's start [s].
    """

    name: str
    duration: float
    cmd_vel: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    parameters: Dict[str, object] = field(default_factory=dict)
    push: float = 0.0
    push_at: float = 1.0

    @property
    def moving(self) -> bool:
        """Whether it commands a motion."""
        return any(self.cmd_vel)


#: The bundled robots' scripts (``./run demo --robot NAME``).
SCENARIOS: Dict[str, Tuple[Segment, ...]] = {
    "solo12": (
        Segment("stand", 2.0, parameters={"gait": "trot", "idle_gait": "stand"}),
        Segment("trot in place", 2.0, parameters={"idle_gait": ""}),
        Segment("walk 0.3 m/s", 3.0, (0.3, 0.0, 0.0)),
        Segment("turn 0.5 rad/s walking", 3.0, (0.3, 0.0, 0.5)),
        Segment("step sideways", 3.0, (0.0, 0.2, 0.0)),
        Segment("pace", 3.0, (0.2, 0.0, 0.0), {"gait": "pace"}),
        Segment("bound", 3.0, (0.2, 0.0, 0.0), {"gait": "bound"}),
        Segment("crawl", 3.0, (0.1, 0.0, 0.0), {"gait": "crawl"}),
        Segment("trot, pushed 0.8 m/s", 4.0, (0.3, 0.0, 0.0), {"gait": "trot"}, push=0.8, push_at=1.5),
    ),
    "talos": (
        Segment("stand", 2.0, parameters={"gait": "walk", "idle_gait": "stand"}),
        Segment("standing push 0.2 m/s", 3.0, push=0.2, push_at=0.5),
        Segment("sway", 4.0, parameters={"sway_amplitude": 0.03, "sway_period": 4.0}),
        Segment("walk 0.15 m/s", 5.0, (0.15, 0.0, 0.0), {"sway_amplitude": 0.0}),
        Segment("turn 0.3 rad/s walking", 5.0, (0.1, 0.0, 0.3)),
        Segment("step sideways", 5.0, (0.0, 0.1, 0.0)),
        Segment("walk, pushed 0.2 m/s", 5.0, (0.1, 0.0, 0.0), push=0.2, push_at=2.0),
        Segment("stop", 3.0),
    ),
}


def generic_scenario(gait: str, cmd_vel: Sequence[float], push: float, duration: float) -> Tuple[Segment, ...]:
    """Stand 2 s, then ``gait`` on ``cmd_vel`` (vx, vy, wz) for the rest of ``duration`` [s], a lateral push of
    ``push`` [m/s] at 60 % of the run."""
    rest = max(duration - 2.0, 0.0)
    return (Segment("stand", min(duration, 2.0), parameters={"gait": "stand", "idle_gait": ""}),
            Segment(f"{gait} on cmd_vel", rest, tuple(float(x) for x in cmd_vel), {"gait": gait},
                    push=push, push_at=max(0.0, 0.6 * duration - 2.0)))


def scaled(segments: Sequence[Segment], duration: Optional[float]) -> Tuple[Segment, ...]:
    """The script cut or stretched to ``duration`` [s] (None: as written): each segment in proportion, a push at
    the same fraction of its segment."""
    total = sum(segment.duration for segment in segments)
    if duration is None or total <= 0.0:
        return tuple(segments)
    factor = duration / total
    return tuple(Segment(s.name, s.duration * factor, s.cmd_vel, dict(s.parameters), s.push, s.push_at * factor)
                 for s in segments)
