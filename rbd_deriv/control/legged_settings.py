"""The legged tick loop's configuration: its settings, the gaits it can be asked for by name, the base's frame.

:class:`LeggedLoopSettings` holds how :class:`~rbd_deriv.control.legged_loop.LeggedLoop` treats time and its inputs
(timeouts, latency, prediction, the odometry checks, the motion margin); :func:`make_gait` builds the
:class:`~rbd_deriv.control.schedule.Gait` a configuration names (:data:`GAITS`); :func:`base_link` names the frame
odometry must have as its child.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.schedule import Gait
from rbd_deriv.exceptions import InputError

__all__ = ["GAITS", "LeggedLoopSettings", "base_link", "make_gait"]


#: Gait names a configuration may ask for: the patterns of :class:`~rbd_deriv.control.schedule.Gait`, and
#: ``pattern``, one period spelt knot by knot.
GAITS = ("stand", "trot", "walk", "pattern")


def make_gait(name: str, feet: Sequence[str], kinds: Sequence[str], swing: int = 8, support: int = 2,
              pattern: Sequence[str] = ()) -> Gait:
    """The gait called ``name`` on ``feet``.

    Args:
        name: One of :data:`GAITS`.
        feet: Contact frames (a trot takes FL, FR, HL, HR in that order; a walk swings them in order).
        kinds: ``"point"`` or ``"frame"`` per foot.
        swing, support: Knots a foot stays in the air, knots with every foot down between two swings.
        pattern: For ``pattern``: one string per knot of the period, a ``1`` per closed foot and ``0`` per
            open one (``["1111", "0110", ...]``).

    Raises:
        InputError: An unknown name, a trot without four feet, bad knot counts, a pattern of the wrong
            shape or with a knot where no foot touches the ground (the robot cannot fly).
    """
    kinds = tuple(kinds)
    if name == "stand":
        return Gait.standing(feet, kinds)
    if name == "trot":
        return Gait.trot(feet, swing, support, kinds)
    if name == "walk":
        return Gait.walk(feet, swing, support, kinds)
    if name != "pattern":
        raise InputError(f"gait {name!r} is not one of {', '.join(GAITS)}", "gait")
    rows = [str(row) for row in pattern]
    if not rows or any(len(row) != len(feet) or set(row) - {"0", "1"} for row in rows):
        raise InputError(f"a gait pattern needs one string of {len(feet)} characters 0 or 1 per knot, got "
                         f"{rows[:4]!r}", "pattern")
    table = np.array([[c == "1" for c in row] for row in rows])
    flying = np.flatnonzero(~table.any(axis=1))
    if flying.size:
        raise InputError(f"knots {flying.tolist()} of the gait pattern have no foot on the ground", "pattern")
    return Gait(tuple(feet), table, kinds)


def base_link(model: Any) -> str:
    """The URDF's root link of a floating-base model: the base, the frame a simulator's or an estimator's
    odometry names as its child frame."""
    names = list(model.frame_names)
    return names[names.index(rd.FREE_FLYER_JOINT) + 1]


@dataclass(frozen=True)
class LeggedLoopSettings:
    """How the loop treats time.

    Attributes:
        state_timeout: Joint states or a base state older than this [s] give the safe command, > 0.
        policy_validity: How long [s] after its first knot the robot side may apply a plan's policy, > 0;
            the safe command holds the last good policy as long.
        max_stamp_lead: Inputs stamped ahead of the clock by more than this [s] are refused, >= 0.
        start_iterations: Gauss-Newton iterations of a plan started from scratch (the first tick of a
            gait, after a failed solve), >= 1; every other tick runs one (a real-time iteration).
        latency: Time [s] from the end of a tick to the robot side holding its policy (transport), >= 0.
        adaptive_latency: Add the 90th percentile of the recent ticks' durations to ``latency`` when
            choosing the knot a plan starts at.
        predict: Carry the measured state to the plan's first knot (:meth:`LeggedLoop.predict`); False:
            plan from the measured state, from the first knot at or after its time (a standing robot,
            whose contacts do not switch, with joints too light to integrate its feedback explicitly).
        gain_knots: The policy carries the Riccati gains of its first this many knots (1: knot 0's gain for
            every knot), >= 1. A robot side left on one policy for several knots (a tick that stalls) then
            applies at each knot the feedback of that knot's contacts, not that of knot 0's.
        odom_frame, base_frame: The frames odometry must name (``header.frame_id``, ``child_frame_id``); an
            empty name accepts any.
        jump_margin, jump_angle_margin: A base pose farther [m] or turned more [rad] from the last accepted
            one than its twist explains over the time between them, by more than these, is refused (``jump``),
            > 0.
        max_base_speed, max_base_rate: Odometry whose twist claims a faster base [m/s], or a faster turn
            [rad/s], is refused (``twist``), > 0: no legged robot moves so, and a twist a source may choose
            freely would let it explain any jump.
        motion_margin: The fraction, in (0, 1], of the robot's bounds (:meth:`LeggedLoop.motion_bounds`) that
            a base velocity and a sway may use together.
    """

    state_timeout: float = 0.05
    policy_validity: float = 0.1
    max_stamp_lead: float = 0.1
    start_iterations: int = 3
    latency: float = 0.002
    adaptive_latency: bool = True
    predict: bool = True
    gain_knots: int = 1
    odom_frame: str = ""
    base_frame: str = ""
    jump_margin: float = 0.05
    jump_angle_margin: float = 0.2
    max_base_speed: float = 10.0
    max_base_rate: float = 20.0
    motion_margin: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.motion_margin, (int, float)) and 0.0 < self.motion_margin <= 1.0):
            raise InputError(f"motion_margin must be in (0, 1], got {self.motion_margin!r}", "motion_margin")
        for name in ("state_timeout", "policy_validity", "jump_margin", "jump_angle_margin", "max_base_speed",
                     "max_base_rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0.0):
                raise InputError(f"{name} must be > 0, got {value!r}", name)
        for name in ("start_iterations", "gain_knots"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise InputError(f"{name} must be an integer >= 1, got {value!r}", name)
        for name in ("max_stamp_lead", "latency"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0.0):
                raise InputError(f"{name} must be >= 0, got {value!r}", name)
