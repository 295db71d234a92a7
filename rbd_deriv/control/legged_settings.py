"""The legged tick loop's configuration: its settings, the gaits it can be asked for by name, the base's frame.

:class:`LeggedLoopSettings` holds how :class:`~rbd_deriv.control.legged_loop.LeggedLoop` treats time and its inputs
(timeouts, latency, prediction, the odometry checks, the motion margin, the velocity command's limits); the gait
table (:class:`GaitSpec`, :func:`parse_gait_table`): gaits as data, each a period, a duty factor and a phase
offset per foot, which :func:`make_gait` turns into the :class:`~rbd_deriv.control.schedule.Gait` of an MPC's
step; :func:`base_link` names the frame odometry must have as its child.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.schedule import Gait
from rbd_deriv.exceptions import InputError

__all__ = ["STAND", "GaitSpec", "LeggedLoopSettings", "base_link", "built_gaits", "make_gait", "parse_gait_table",
           "swing_height"]


#: The gait every legged robot has without a table row: every foot on the ground.
STAND = "stand"


@dataclass(frozen=True)
class GaitSpec:
    """One row of a robot's gait table: a periodic gait in seconds, independent of the MPC's step.

    Attributes:
        name: The gait's name (what the ``gait`` parameter asks for).
        period: Duration of one cycle [s], > 0.
        duty: Duty factor in (0, 1]: the share of the cycle each foot spends on the ground.
        offsets: (nc,) the phase in [0, 1) of the cycle at which each foot lands, in the feet's order.
        swing_height: Apex of a swing foot above the ground for this gait [m] (None: the robot's).
    """

    name: str
    period: float
    duty: float
    offsets: Tuple[float, ...]
    swing_height: Optional[float] = None

    def knots(self, dt: float) -> int:
        """Knots of one cycle at step ``dt`` [s]. Raises InputError unless the period is a whole number of them."""
        knots = self.period / dt
        if abs(knots - round(knots)) > 1e-6 * max(1.0, knots) or round(knots) < 1:
            raise InputError(f"gait {self.name!r}: its period {self.period:g} s is not a whole number of the MPC's "
                             f"steps of {dt:g} s", "gait_table")
        return int(round(knots))

    def gait(self, feet: Sequence[str], kinds: Sequence[str], dt: float) -> Gait:
        """The knot pattern of this gait on ``feet`` at step ``dt`` [s].

        Raises:
            InputError: Offsets for another number of feet, a period that is not a whole number of steps, a
                knot where no foot is on the ground (the robot cannot fly), a foot without swing or stance.
        """
        if len(self.offsets) != len(feet):
            raise InputError(f"gait {self.name!r} has {len(self.offsets)} phase offsets for {len(feet)} feet "
                             f"({', '.join(feet)})", "gait_table")
        try:
            gait = Gait.from_phases(feet, self.knots(dt), self.duty, self.offsets, tuple(kinds))
        except InputError as error:
            raise InputError(f"gait {self.name!r}: {error}", "gait_table") from error
        flying = np.flatnonzero(~gait.pattern.any(axis=1))
        if flying.size:
            raise InputError(f"gait {self.name!r} leaves the robot with no foot on the ground at "
                             f"{(flying * dt).round(6).tolist()} s of its cycle", "gait_table")
        return gait


def parse_gait_table(rows: Sequence[str]) -> Dict[str, GaitSpec]:
    """The gaits of a configuration's ``gait_table``: one string per gait,
    ``"NAME: period=T duty=B offsets=O1,O2,... [swing_height=H]"`` (T [s], B in (0, 1], one phase offset in
    [0, 1) per foot in the feet's order, H [m]).

    Raises:
        InputError: A row that does not parse, a repeated name, a name of ``stand`` (every robot's standing
            gait is built in), a value out of its range.
    """
    table: Dict[str, GaitSpec] = {}
    for row in rows:
        name, colon, rest = str(row).partition(":")
        name = name.strip()
        fields: Dict[str, str] = {}
        for item in rest.split():
            key, equals, value = item.partition("=")
            if not equals or key in fields:
                fields = {}
                break
            fields[key] = value
        if not (colon and name and set(fields) >= {"period", "duty", "offsets"}
                and set(fields) <= {"period", "duty", "offsets", "swing_height"}):
            raise InputError(f"gait table row {row!r} is not \"NAME: period=T duty=B offsets=O1,O2,... "
                             "[swing_height=H]\"", "gait_table")
        if name == STAND or name in table:
            raise InputError(f"gait table row {row!r}: the name {name!r} is "
                             f"{'built in' if name == STAND else 'repeated'}", "gait_table")
        try:
            period, duty = float(fields["period"]), float(fields["duty"])
            offsets = tuple(float(x) for x in fields["offsets"].split(","))
            height = float(fields["swing_height"]) if "swing_height" in fields else None
        except ValueError as error:
            raise InputError(f"gait table row {row!r}: {error}", "gait_table") from error
        if not (math.isfinite(period) and period > 0.0):
            raise InputError(f"gait {name!r}: the period must be > 0 s, got {period!r}", "gait_table")
        if not (math.isfinite(duty) and 0.0 < duty <= 1.0):
            raise InputError(f"gait {name!r}: the duty factor must be in (0, 1], got {duty!r}", "gait_table")
        if not all(math.isfinite(x) and 0.0 <= x < 1.0 for x in offsets):
            raise InputError(f"gait {name!r}: phase offsets must be in [0, 1), got {list(offsets)}", "gait_table")
        if height is not None and not (math.isfinite(height) and 0.0 <= height <= 1.0):
            raise InputError(f"gait {name!r}: swing_height must be in [0, 1] m, got {height!r}", "gait_table")
        table[name] = GaitSpec(name, period, duty, offsets, height)
    return table


def make_gait(name: str, feet: Sequence[str], kinds: Sequence[str], table: Mapping[str, GaitSpec],
              dt: float) -> Gait:
    """The gait called ``name`` on ``feet`` at step ``dt`` [s]: :data:`STAND`, or a row of ``table``
    (:func:`parse_gait_table`).

    Raises:
        InputError: An unknown name (``gait``), or what :meth:`GaitSpec.gait` raises.
    """
    if name == STAND:
        return Gait.standing(feet, tuple(kinds))
    if name not in table:
        raise InputError(f"gait {name!r} is neither {STAND!r} nor in the gait table ({', '.join(table) or 'empty'})",
                         "gait")
    return table[name].gait(feet, kinds, dt)


def built_gaits(parameters: Mapping[str, Any]) -> list:
    """The names of the gaits a legged configuration builds (an MPC each): its ``gaits``, then its ``gait`` and
    ``idle_gait`` when they are not among them (an empty ``idle_gait`` left out)."""
    names = list(parameters["gaits"]) + [parameters["gait"], parameters["idle_gait"]]
    return [name for name in dict.fromkeys(names) if name]


def swing_height(table: Mapping[str, GaitSpec], name: str, default: float) -> float:
    """The swing apex [m] of gait ``name``: its table row's, else ``default`` (the robot's)."""
    spec = table.get(name)
    return default if spec is None or spec.swing_height is None else spec.swing_height


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
        max_velocity: The velocity command's bounds (vx, vy [m/s] in the base's heading frame, wz [rad/s]), each
            > 0: a command beyond is clamped to them (and to the robot's speed, ``motion_margin``) and counted.
        max_acceleration: How fast the base's reference velocity follows the command (ax, ay [m/s^2], yaw
            [rad/s^2]), each > 0.
        path_slack, heading_slack: The base's reference is kept within this distance [m] and heading [rad] of
            the measured base at each plan's first knot (a pushed robot goes on from where it is instead of
            walking back), > 0.
        idle_gait: The gait followed while the velocity command is zero (a robot that stops stepping), else the
            asked gait; empty: the asked gait always (a zero command steps in place).
        posture_ramp: The first plans reach the reference posture's joints and base height from the robot's
            configuration at its first plan over this long [s] (:meth:`LeggedMPC.ramp_from
            <rbd_deriv.control.legged.LeggedMPC.ramp_from>`), >= 0; 0: at once.
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
    max_velocity: Tuple[float, float, float] = (0.5, 0.3, 1.0)
    max_acceleration: Tuple[float, float, float] = (1.0, 1.0, 2.0)
    path_slack: float = 0.1
    heading_slack: float = 0.2
    idle_gait: str = ""
    posture_ramp: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.motion_margin, (int, float)) and 0.0 < self.motion_margin <= 1.0):
            raise InputError(f"motion_margin must be in (0, 1], got {self.motion_margin!r}", "motion_margin")
        for name in ("max_velocity", "max_acceleration"):
            value = np.asarray(getattr(self, name), dtype=float)
            if value.shape != (3,) or not (np.isfinite(value).all() and (value > 0.0).all()):
                raise InputError(f"{name} must be three numbers > 0 (x, y, yaw), got {getattr(self, name)!r}", name)
            object.__setattr__(self, name, tuple(float(x) for x in value))
        for name in ("state_timeout", "policy_validity", "jump_margin", "jump_angle_margin", "max_base_speed",
                     "max_base_rate", "path_slack", "heading_slack"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0.0):
                raise InputError(f"{name} must be > 0, got {value!r}", name)
        for name in ("start_iterations", "gain_knots"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise InputError(f"{name} must be an integer >= 1, got {value!r}", name)
        for name in ("max_stamp_lead", "latency", "posture_ramp"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0.0):
                raise InputError(f"{name} must be >= 0, got {value!r}", name)
