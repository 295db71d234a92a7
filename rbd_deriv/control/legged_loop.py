"""The legged MPC's tick policy: what a controller of a robot on its feet does at every tick (no ROS).

A :class:`LeggedLoop` takes the robot's inputs with their stamps [ns], the actuated joints' states
(joint_states) and the base's pose and twist (odometry: pose in the world, twist in the base frame,
the free flyer's v), and at every :meth:`~LeggedLoop.tick` at the clock's time:

1. assembles x = (q, v) (:class:`~rbd_deriv.joint_state_map.JointStateMap`) and checks that the
   joint states and the base state are both younger than ``state_timeout``;
2. puts the plan on the gait's grid of knots, ahead of the tick: the first knot of the grid at or after
   the time the plan can reach the robot, :math:`t_g = t_0 + n\\,dt` with
   :math:`n = \\lceil (t_{now} + \\ell - t_0) / dt \\rceil` (t_0 the gait's start, the latency
   :math:`\\ell` the ``latency`` setting plus, with ``adaptive_latency``, the 90th percentile of the recent
   ticks' durations), gives the phase :math:`n \\bmod P` (P the period) and the plan's stamp t_g. The
   measured state is carried to t_g (:func:`~rbd_deriv.control.prediction.predict_on_contacts`: the contact
   dynamics of the feet the gait has down, the policies already sent applied as the robot side applies
   them, :func:`~rbd_deriv.control.policy.policy_in_use`), the previous plan is shifted by the knots
   between them (warm start), and the MPC solves from that state
   (:meth:`~rbd_deriv.control.legged.LeggedMPC.solve`). The robot side keeps the previous policy until
   t_g, so the plan's contact switches and the robot's fall at the same millisecond whatever the tick
   rate and its jitter; a plan solved from the state of its own tick's time would be late by the solve
   and off the grid by up to dt, each touchdown moving from one tick to the next;
3. sends the plan when it is sendable (solved, first knot's forces inside the friction cone): the
   first torque and the feedback policy u = u_ff + K (x (-) x_ref) of its first knots
   (:func:`~rbd_deriv.control.policy.policy_from_plan`);
4. otherwise (a stale input, a refused state, a failed solve, a cone refusal) the safe command of a
   standing robot: the last good policy while it is valid (evaluated at the measured state), else
   the torques that hold the measured posture on the feet the gait has on the ground
   (:func:`~rbd_deriv.control.statics.static_torques`; none where they need more than the effort limits) under
   the last good plan's final gain, both inside the effort limits, never NaN.

Refused inputs raise :class:`~rbd_deriv.exceptions.InputError` subclasses, counted as every loop counts them
(:class:`~rbd_deriv.control.tick_loop.TickLoop`) beside ``solve_input``, ``solver_failure``, ``cone_refusal``.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.base_motion import BasePath, checked_motion, motion_bounds, sway_peak_speed
from rbd_deriv.control.constants import (LATENCY_WINDOW, MAX_TAKEN, RESTORE_ATTEMPTS, STALE_PLAN_FRACTION,
                                        STATISTICS_WINDOW, TRAILING_SPEED)
from rbd_deriv.control.legged import LeggedMPC
from rbd_deriv.control.policy import (FeedbackPolicy, constant_policy, keep_taken, policy_from_plan,
                                      policy_in_use)
from rbd_deriv.control.prediction import predict_on_contacts
from rbd_deriv.control.legged_settings import LeggedLoopSettings
from rbd_deriv.control.odometry import check_frames, check_jump, check_twist
from rbd_deriv.control.safety import ClockWatch, CommandSource, clamp_torque, hold_command, is_stale
from rbd_deriv.control.statics import static_torques
from rbd_deriv.control.tick_loop import TickLoop, TickResult
from rbd_deriv.core.configuration import rotation_of
from rbd_deriv.exceptions import InputError, MessageError, RbdDerivError

__all__ = ["LeggedLoop"]

class LeggedLoop(TickLoop):
    """The tick policy of a legged MPC: state assembly, freshness, gait phase, solve, safe command.

    Args:
        model: The floating-base model the MPCs were built on.
        mpcs: The legged MPCs by gait name (built once: a gait change switches between them).
        gait: The gait the loop starts with, a key of ``mpcs``.
        settings: Timeouts and validity.
        log_period: Shortest time [s] between two log lines of one refusal reason.

    Raises:
        InputError: A fixed-base model, no MPC, an unknown gait, MPCs on other feet or another model's size.
    """

    #: The sources of its commands (:class:`~rbd_deriv.control.safety.CommandSource`) and what its safe command is.
    SOURCES = (CommandSource.PLAN, CommandSource.NO_STATE, CommandSource.STALE_STATE, CommandSource.STALE_CLOCK,
               CommandSource.SOLVER_FAILURE, CommandSource.CONE_REFUSAL)
    SAFE_COMMAND = "last good policy, else the statics of the measured posture"

    def __init__(self, model: Any, mpcs: Mapping[str, LeggedMPC], gait: str,
                 settings: LeggedLoopSettings = LeggedLoopSettings(), log_period: float = 1.0) -> None:
        if not model.has_floating_base:
            raise InputError("a legged loop needs a model with a floating base", "model")
        if not mpcs:
            raise InputError("a legged loop needs at least one MPC", "mpcs")
        first = next(iter(mpcs.values()))
        for name, mpc in mpcs.items():
            if mpc.model.nv != model.nv or mpc.feet != first.feet:
                raise InputError(f"the MPC of gait {name!r} is on other feet or another model", "mpcs")
        self._start(model, settings.max_stamp_lead, settings.state_timeout, log_period)
        #: The robot's clock (its states' stamps), watched like the node's: see :meth:`tick`.
        self.robot_clock = ClockWatch(settings.state_timeout)
        self.mpcs, self.settings = dict(mpcs), settings
        self.feet, self.kinds = first.feet, first.kinds
        self.actuated = first.dynamics.actuated
        self.upper = np.asarray(first.ocp.control_upper, dtype=float).copy()
        self.lower = np.asarray(first.ocp.control_lower, dtype=float).copy()
        self._base_q, self._base_v = model.idx_q[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT]
        self._joints_ns: Optional[int] = None
        self._base_ns: Optional[int] = None
        self.gait = ""
        self.mpc = first
        self._gait_start: Optional[float] = None
        self._first_knot = 0  # the knot of its pattern the gait in use started at (_trailing_start)
        self._last_knot: Optional[int] = None
        self._sent_ns: Optional[int] = None  # stamp of the last policy sent
        # The policies sent that the robot side may still apply, as it keeps them (policy_in_use), and the
        # gaits by start time [s]: what the robot does until a new plan's first knot.
        self._sent: collections.deque = collections.deque(maxlen=MAX_TAKEN)
        self._first_policy: Optional[float] = None
        self._timeline: collections.deque = collections.deque(maxlen=3)
        self._contact_sets: Dict[Tuple[bool, ...], tuple] = {}
        self._data = model.create_data()
        self.tick_times: collections.deque = collections.deque(maxlen=LATENCY_WINDOW)
        #: The base's planar reference on the loop's clock (seconds from its first stamp): the velocity command and
        #: the sway move it from the next plan's first knot (:meth:`_follow_command`).
        self.path = BasePath(origin=tuple(first.x_ref[:2]))
        self._sway = (self.path.amplitude, self.path.period)
        self.max_speed, self.max_sway_acceleration = self.motion_bounds(first)
        #: (3,) the velocity command (vx, vy [m/s] in the heading frame, wz [rad/s]) asked, within its bounds, and
        #: the one the base's reference follows, ramped toward it at ``max_acceleration``.
        self.command_target = np.zeros(3)
        self.command = np.zeros(3)
        self._command_time: Optional[float] = None
        #: Velocity commands clamped to their bounds (or held at zero by a gait that does not step).
        self.clamped_commands = 0
        self._heading_of = rotation_of(first.x_ref[3:7])
        self.asked_gait = ""
        #: The gait followed while the command is zero ("": the asked one); settable (:meth:`set_parameters`).
        self.idle_gait = settings.idle_gait
        if self.idle_gait and self.idle_gait not in self.mpcs:
            raise InputError(f"idle gait {self.idle_gait!r} is not one of {sorted(self.mpcs)}", "idle_gait")
        self.set_gait(gait)
        self.good_policy: Optional[FeedbackPolicy] = None
        #: (MPC, gait start, X, U, knot) of the last plan sent, and the failed solves since (_restore).
        self._good_plan: Optional[tuple] = None
        self._failures_in_row = 0
        self.cone_violations: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        self.held_policy_ticks = 0

    # ------------------------------------------------------------------------------------- inputs
    def take_joint_states(self, names: Sequence[str], position: Any, velocity: Any, effort: Any,
                          stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """:meth:`TickLoop.take_joint_states <rbd_deriv.control.tick_loop.TickLoop.take_joint_states>` of the
        actuated joints, the newest stamp kept for the state's age."""
        super().take_joint_states(names, position, velocity, effort, stamp_ns, now_ns)
        self._joints_ns = int(stamp_ns) if self._joints_ns is None else max(self._joints_ns, int(stamp_ns))

    def take_odometry(self, position: Any, orientation: Any, linear: Any, angular: Any, stamp_ns: int,
                      now_ns: Optional[int] = None, frames: Optional[Tuple[str, str]] = None) -> None:
        """The base's pose in the world (position (3,) [m], quaternion (x, y, z, w)) and twist in the base
        frame (linear, angular (3,) [m/s], [rad/s]): nav_msgs/Odometry with the base as child frame.

        Args:
            frames: The message's (``header.frame_id``, ``child_frame_id``), checked against the settings'
                ``odom_frame`` and ``base_frame``; None skips that check.

        Raises:
            JointStateError: ``bad_base`` (shapes, NaN, a quaternion that is not unit), ``out_of_order``,
                ``future``.
            MessageError: ``frame`` (another frame than the settings'), ``twist`` (faster than
                ``max_base_speed`` or ``max_base_rate``), ``jump`` (a pose its twist does not explain,
                :func:`~rbd_deriv.control.odometry.check_jump`).
        """
        self.check_odometry(position, orientation, linear, angular, stamp_ns, now_ns, frames)
        self.state.update_base(position, orientation, linear, angular, stamp_ns, now_ns)
        self._base_ns = int(stamp_ns)

    def check_odometry(self, position: Any, orientation: Any, linear: Any, angular: Any, stamp_ns: int,
                       now_ns: Optional[int] = None, frames: Optional[Tuple[str, str]] = None) -> None:
        """Raise what :meth:`take_odometry` would for this base state but for the order of its stamp; nothing
        is stored. The message itself first (frames, values, twist), then its pose against the last accepted
        (:mod:`rbd_deriv.control.odometry`)."""
        settings = self.settings
        check_frames(frames, settings.odom_frame, settings.base_frame)
        self.state.check_base(position, orientation, linear, angular, stamp_ns, now_ns)
        check_twist(linear, angular, settings.max_base_speed, settings.max_base_rate)
        if self._base_ns is None or stamp_ns > self._base_ns:  # an older one is out of order, not a jump
            iq, iv = self._base_q, self._base_v
            check_jump(position, orientation, stamp_ns, self._base_ns, self.state.q[iq:iq + 7],
                       self.state.v[iv:iv + 6], settings.jump_margin, settings.jump_angle_margin)

    def set_gait(self, gait: str) -> None:
        """Follow ``gait`` (a key of the loop's MPCs; while the velocity command is zero, the ``idle_gait`` setting
        when it is set), from its first knot, or on the move from where the feet behind the motion lift first
        (:meth:`_trailing_start`). The switch waits for a knot of the gait in use where every foot is on the ground
        (it happens now when the gait in use stands, or before the first plan).

        Raises:
            InputError: an unknown gait; the gait in use stays.
        """
        if gait not in self.mpcs:
            raise InputError(f"gait {gait!r} is not one of {sorted(self.mpcs)}", "gait")
        self.asked_gait = gait
        if not self.gait or self._sent_ns is None or self.mpc.gait.pattern.all():
            self._switch(self._wanted_gait())

    def _wanted_gait(self) -> str:
        """The asked gait, or the idle one while the command is zero and the base's reference at rest."""
        idle = self.idle_gait
        if idle and not (self.command_target.any() or self.command.any()):
            return idle
        return self.asked_gait

    def _switch(self, gait: str) -> None:
        if gait != self.gait:
            self.gait, self.mpc = gait, self.mpcs[gait]
            self._gait_start = None
            self._first_knot = self._trailing_start(self.mpc.gait.pattern)
            self._last_knot = None  # its plan is not this robot's recent past: start it from scratch

    def _trailing_start(self, pattern: np.ndarray) -> int:
        """The knot a gait of ``pattern`` (P, nc) starts at when the robot moves: the first knot of one of its
        stretches with every foot down, the one whose next lift-off lifts the feet most behind the base's measured
        planar motion (their mean position along it from the base), so that the feet the motion leaves go first; 0
        at rest (under :data:`TRAILING_SPEED`), before the state is known, or for a gait without such stretches.
        Switching from a sideways trot to the pace, solo12 lifted its leading pair first and rolled onto it, its
        other pair unloaded to 1 N: 105 contact samples past mu in half a second, none when the trailing pair
        lifts first."""
        starts = [k for k in range(len(pattern)) if pattern[k].all() and not pattern[k - 1].all()]
        if len(starts) < 2 or not self.state.complete:
            return 0
        q, v = self.state.q, self.state.v
        iq, iv = self._base_q, self._base_v
        motion = (rotation_of(q[iq + 3:iq + 7]) @ v[iv:iv + 3])[:2]
        speed = float(np.hypot(*motion))
        if not speed >= TRAILING_SPEED:
            return 0
        rd.forward_kinematics(self.model, self._data, q)
        ahead = np.array([rd.frame_placement(self.model, self._data, foot)[:2, 3] - q[iq:iq + 2]
                          for foot in self.feet]) @ (motion / speed)
        scores = []
        for start in starts:
            lift = next(k for k in range(start + 1, start + len(pattern)) if not pattern[k % len(pattern)].all())
            scores.append(float(ahead[~pattern[lift % len(pattern)]].mean()))
        return starts[int(np.argmin(scores))]

    def _follow_gait(self, now: float) -> None:
        """Switch to the wanted gait (:meth:`_wanted_gait`) if the gait in use has every foot down at the knot the
        plan of a tick at ``now`` [s] would start at, or never has them all down."""
        wanted = self._wanted_gait()
        if wanted == self.gait:
            return
        pattern = self.mpc.gait.pattern
        if (self._gait_start is None or not pattern.all(axis=1).any()
                or pattern[self.knot(now + self.latency()) % len(pattern)].all()):
            self._switch(wanted)

    def take_cmd_vel(self, linear_x: float, linear_y: float, angular_z: float) -> bool:
        """The velocity command (geometry_msgs/Twist in the base frame, REP 103: ``linear.x`` forward, ``linear.y``
        left [m/s], ``angular.z`` [rad/s]), followed from the next plan's first knot, ramped at
        ``max_acceleration``. Each component is clamped to ``max_velocity``, the planar speed to what the robot
        can follow with its sway (:meth:`motion_bounds`); a gait that does not step holds the base still. Returns
        whether it was clamped (counted in :attr:`clamped_commands`).

        Raises:
            MessageError: a value that is not finite (``not_finite``); the command in use stays.
        """
        value = np.array([linear_x, linear_y, angular_z], dtype=float)
        if not np.isfinite(value).all():
            raise MessageError(f"cmd_vel {value.tolist()} is not finite", "not_finite")
        bound = np.asarray(self.settings.max_velocity)
        target = np.clip(value, -bound, bound)
        speed = max(0.0, self.max_speed - sway_peak_speed(*self._sway))
        planar = float(np.hypot(*target[:2]))
        if planar > speed:
            target[:2] *= speed / planar
        clamped = bool(np.abs(target - value).max() > 1e-9 * max(1.0, float(np.abs(value).max())))
        self.clamped_commands += clamped
        self.command_target = target
        return clamped

    def _follow_command(self, start: float, q0: np.ndarray) -> None:
        """Move the base's reference at the plan's first knot ``start`` [s]: the command ramped toward its target
        since the previous plan, the sway, and the reference kept within ``path_slack`` and ``heading_slack`` of
        the robot's state q0 (nq,) there."""
        settings = self.settings
        if self._command_time is not None:
            step = np.asarray(settings.max_acceleration) * max(0.0, start - self._command_time)
            self.command += np.clip(self.command_target - self.command, -step, step)
        self._command_time = start
        if self.mpc.gait.pattern.all():   # no foot ever steps: the base cannot walk
            self.clamped_commands += bool(self.command_target.any())
            self.command[:] = 0.0
            self.command_target[:] = 0.0
        path = self.path
        position, _, heading = path.poses(np.array([start]))
        iq = self._base_q
        base = q0[iq:iq + 2]
        turned = rotation_of(q0[iq + 3:iq + 7]) @ self._heading_of.T
        yaw = math.atan2(turned[1, 0], turned[0, 0])
        origin = course = None
        gap = position[0] - base
        distance = float(np.hypot(*gap))
        if distance > settings.path_slack:
            origin = base + gap * (settings.path_slack / distance)
        turn = math.remainder(float(heading[0]) - yaw, 2.0 * math.pi)
        if abs(turn) > settings.heading_slack:
            course = yaw + math.copysign(settings.heading_slack, turn)
        velocity, rate = (float(self.command[0]), float(self.command[1])), float(self.command[2])
        if (origin is not None or course is not None
                or (velocity, rate, *self._sway) != (path.velocity, path.yaw_rate, path.amplitude, path.period)):
            self.path = path.moved(start, velocity, *self._sway, yaw_rate=rate, origin=origin, heading=course)

    def motion_bounds(self, mpc: LeggedMPC) -> Tuple[float, float]:
        """The base speed [m/s] and sway acceleration [m/s^2] the robot can follow in ``mpc``'s reference posture,
        times ``motion_margin`` (:func:`~rbd_deriv.control.base_motion.motion_bounds`)."""
        return motion_bounds(self.model, self._data, mpc.x_ref[: self.model.nq], self.feet, self.settings.motion_margin)

    def set_sway(self, amplitude: float, period: float) -> None:
        """Sway the base's reference sideways (the heading frame's y) by ``amplitude`` [m] sin(2 pi t / ``period``
        [s]) from the next plan's first knot (0: no sway), if the robot can follow it with the velocity command
        asked: the command's speed plus the sway's peak speed :math:`2 \\pi A / T` within :attr:`max_speed`, the
        sway's peak acceleration :math:`4 \\pi^2 A / T^2` within :attr:`max_sway_acceleration`
        (:meth:`motion_bounds`).

        Raises:
            InputError: a value out of its range (``sway_amplitude``, ``sway_period``) or a motion the robot cannot
                follow (``motion``); nothing changes.
        """
        _, amplitude, period = checked_motion(self.command_target[:2], amplitude, period, self.max_speed,
                                              self.max_sway_acceleration, self.settings.motion_margin)
        self._sway = (amplitude, period)

    def set_parameters(self, values: Mapping[str, Any], names: set) -> Optional[str]:
        """Take the run-time parameters among ``names`` (changed) from ``values`` (all the node's): ``gait``,
        ``idle_gait``, ``sway_amplitude``, ``sway_period``, the sway checked with the velocity command before anything changes.
        Returns why they are refused, or None."""
        if "goal_positions" in names:
            return "goal_positions: a parameter of a fixed-base robot; a legged one moves by its base motion and gait"
        for name in names & {"gait", "idle_gait"}:
            if values[name] not in self.mpcs and not (name == "idle_gait" and values[name] == ""):
                return f"{name} {values[name]!r} is not one of {sorted(self.mpcs)}"
        try:
            if names & {"sway_amplitude", "sway_period"}:
                self.set_sway(values["sway_amplitude"], values["sway_period"])
            if "idle_gait" in names:
                self.idle_gait = values["idle_gait"]
            if names & {"gait", "idle_gait"}:
                self.set_gait(values["gait"] if "gait" in names else self.asked_gait)
        except RbdDerivError as error:
            return str(error)
        return None

    def describe(self) -> str:
        """One line on what the loop controls and how, for the node's log."""
        mpc = self.mpc
        return (f"legged MPC on {self.model.name!r}: nv={self.model.nv}, feet {list(self.feet)} "
                f"({', '.join(self.kinds)}), gaits {sorted(self.mpcs)}, now {self.gait!r}, N={mpc.horizon}, "
                f"dt={mpc.dt} s, mu={mpc.mu}")

    # --------------------------------------------------------------------------------------- tick
    def knot(self, when: float) -> int:
        """The first knot of the gait's grid at or after ``when`` [s] (counted from the gait's start, not
        wrapped: the phase is this modulo the period), and not before the last policy sent. The first call
        of a gait starts it there (at the last policy's stamp if that is later)."""
        if self._sent_ns is not None:
            when = max(when, self._seconds(self._sent_ns))
        if self._gait_start is None:
            self._gait_start = when - self._first_knot * self.mpc.dt
            self._timeline.append((when, self.mpc.gait, self.mpc.dt, self._first_knot))
        return math.ceil((when - self._gait_start) / self.mpc.dt - 1e-6)

    def latency(self) -> float:
        """Time [s] from a tick's start to the robot side holding its policy: the ``latency`` setting, plus the
        90th percentile of the recent ticks' durations with ``adaptive_latency``; at most ``max_stamp_lead``
        less one knot."""
        latency = self.settings.latency
        if self.settings.adaptive_latency and self.tick_times:
            latency += float(np.quantile(np.asarray(self.tick_times), 0.9))
        # The plan is stamped up to a knot later still, and the robot side refuses a policy stamped more than
        # max_stamp_lead ahead of its clock.
        return min(latency, max(0.0, self.settings.max_stamp_lead - self.mpc.dt))

    def contacts_at(self, time: float) -> tuple:
        """The contacts (:class:`rbd_deriv.Contact`) the gait in force at ``time`` [s] has closed (every foot
        before the first gait)."""
        down = (True,) * len(self.feet)
        for start, gait, dt, first in self._timeline:
            if start <= time:
                down = tuple(gait.pattern[(math.floor((time - start) / dt + 1e-6) + first) % gait.period])
        contacts = self._contact_sets.get(down)
        if contacts is None:
            contacts = self._contact_sets[down] = tuple(
                rd.Contact(self.model, foot, kind) for foot, kind, on in zip(self.feet, self.kinds, down) if on)
        return contacts

    def predict(self, q: np.ndarray, v: np.ndarray, start: float, end: float) -> Tuple[np.ndarray, np.ndarray]:
        """The state at ``end`` [s] from the one measured at ``start`` [s]: the contact dynamics of the gait's
        feet under the policies sent, as the robot side applies them (the measured state when none was sent).
        """
        if not self._sent:
            return q, v
        # Until its first policy the robot is held still (the brakes): it starts moving at that stamp.
        start = max(start, self._first_policy)
        if end <= start:
            return q, v
        epoch, model, lower, upper = self._epoch_ns, self.model, self.lower, self.upper

        def torque(q: np.ndarray, v: np.ndarray, elapsed: float) -> np.ndarray:
            now_ns = epoch + int(round((start + elapsed) * 1e9))
            policy = policy_in_use(self._sent, now_ns)
            return policy.torque(model, q, v, now_ns, lower, upper)

        return predict_on_contacts(model, self._data, q, v, end - start, torque,
                                   lambda elapsed: self.contacts_at(start + elapsed), self.actuated)

    def tick(self, now_ns: int, monotonic_ns: Optional[int] = None) -> Optional[TickResult]:
        """Decide the command at ``now_ns`` [ns] (the caller's clock).

        Args:
            monotonic_ns: A monotonic clock [ns] (``time.monotonic_ns()`` when None), against which the
                caller's clock must advance: one that stands still (simulated time without ``/clock``) gives
                the safe command ``stale_clock``. While the robot's own clock (its states' stamps) still
                advances, that command is a plan to stand down: the velocity command set to zero (the idle gait
                follows where there is one), planned on the states' clock; otherwise the held policy, then the
                statics of the posture.

        Returns:
            None before the base and every joint have been received, or before any plan was good enough to send
            (no command is better than a guess: the robot stays held as it was), else the command, its policy and
            why. Never raises for a bad state or a failed solve.
        """
        previous = self.last_source
        if not self.state.complete:
            self._count(CommandSource.NO_STATE)
            return None
        q, v = self.state.q.copy(), self.state.v.copy()
        monotonic_ns = time.monotonic_ns() if monotonic_ns is None else monotonic_ns
        clock = self.clock.advancing(now_ns, monotonic_ns)
        # The robot's own clock: the newest state's stamp, which a live robot moves on with.
        robot_clock = self.robot_clock.advancing(max(self._joints_ns, self._base_ns), monotonic_ns)
        standing_down = not clock and robot_clock
        if not clock:
            # No age can be measured on a clock that stands still: the time is the newest state's (the robot's
            # clock as last heard). While that clock moves on, the robot is told to stand down, planned on it: a
            # trotting robot held on its last policy, then on the statics of four feet, falls.
            now_ns = max(self._joints_ns, self._base_ns)
            if standing_down:
                self.command_target[:] = 0.0
        now = self._seconds(now_ns)
        timeout = self.settings.state_timeout
        state_ns = min(self._joints_ns, self._base_ns)
        fresh = (clock or standing_down) and not (is_stale(self._seconds(self._joints_ns), now, timeout)
                                                  or is_stale(self._seconds(self._base_ns), now, timeout))
        plan, trouble, source = None, None, CommandSource.STALE_STATE if clock else CommandSource.STALE_CLOCK
        plan_start_ns = 0
        if fresh:
            state_time = self._seconds(state_ns)
            if self._sent:
                self._follow_gait(now)
            mpc = self.mpc
            try:
                started = time.perf_counter()
                if self._sent and not self.settings.predict:
                    knot = self.knot(state_time)
                    start_time, q0, v0 = self._gait_start + knot * mpc.dt, q, v
                elif self._sent:
                    knot = self.knot(now + self.latency())
                    start_time = self._gait_start + knot * mpc.dt
                    q0, v0 = self.predict(q, v, state_time, start_time)
                    if not (np.isfinite(q0).all() and np.isfinite(v0).all()):
                        raise InputError("the state predicted at the plan's first knot is not finite", "prediction")
                else:
                    # Nothing sent yet: the robot is held still (the brakes) until its first policy, which
                    # therefore starts when its solve (from scratch, the slowest) is done, from the state
                    # measured; the gait starts there.
                    knot, start_time, q0, v0 = None, now + self.latency(), q, v
                    for each in self.mpcs.values():   # from where the robot is to its posture
                        each.ramp_from(q0, start_time, self.settings.posture_ramp)
                self._follow_command(start_time, q0)
                mpc.set_path(self.path, start_time)
                iterations = 1
                restored = self._restore(mpc, knot)
                if self._last_knot is None:
                    # No previous plan to start from: a few Gauss-Newton steps from the posture's statics
                    # instead of the one real-time iteration, whose first plan may be far from converged.
                    mpc.solver.cold_start(np.r_[q0, v0], np.tile(mpc.u_static, (mpc.horizon, 1)))
                    elapsed, iterations = 0.0, self.settings.start_iterations
                elif knot is None:
                    # A first plan again (the previous one was refused, nothing was sent): refine it, from the
                    # robot still held where it was.
                    elapsed, iterations = 0.0, self.settings.start_iterations
                else:
                    elapsed = max(0, knot - self._last_knot) * mpc.dt  # a previous plan: something was sent
                    if restored or elapsed > STALE_PLAN_FRACTION * mpc.horizon * mpc.dt:
                        # A stalled tick: the previous plan, shifted this far, covers little of the new
                        # horizon; one real-time iteration from it lands the robot on a rough plan.
                        iterations = self.settings.start_iterations
                solve_started = time.perf_counter()
                plan = mpc.solve(np.r_[q0, v0], phase=0 if knot is None else knot % mpc.gait.period,
                                 elapsed=elapsed, iterations=iterations)
                self.solve_times.append(time.perf_counter() - solve_started)
                if knot is None:
                    knot = self.knot(now + time.perf_counter() - started + self.latency())
                    start_time = self._gait_start
                if iterations == 1:  # a plan from scratch is slower than the ticks that follow it
                    self.tick_times.append(time.perf_counter() - started)
                self._last_knot = knot
            except RbdDerivError as error:
                trouble, source = self.refuse("solve_input", error), CommandSource.SOLVER_FAILURE
            except Exception as error:  # noqa: BLE001 - a controller must still send a safe command
                trouble = self.refuse("internal_error", f"{type(error).__name__}: {error}")
                source = CommandSource.SOLVER_FAILURE
            if plan is not None:
                self.last_plan = plan
                plan_start_ns = self._epoch_ns + int(round(start_time * 1e9))
                self.cone_violations.append(plan.cone_violation)
                if not plan.ok:
                    trouble = self.refuse("solver_failure", f"solver status {plan.status.value}")
                    source = CommandSource.SOLVER_FAILURE
                elif not plan.cone_ok:
                    trouble = self.refuse("cone_refusal", f"first knot's forces {plan.cone_violation:.3g} N "
                                          f"outside the friction cone")
                    source = CommandSource.CONE_REFUSAL
                else:
                    policy = self._plan_policy(mpc, plan_start_ns)
                    if policy is not None:
                        source = CommandSource.PLAN
                        command = clamp_torque(plan.torque, self.lower, self.upper)
                        if standing_down:  # a good plan, sent as the safe command it is (and counted so)
                            self._keep_good(policy)
                            source = CommandSource.STALE_CLOCK
                            self._remember(policy)
                            self._count(source, command)
                            return TickResult(command, source, previous, plan, plan_start_ns, trouble, policy)
                    else:
                        trouble = self.refuse("solver_failure", "a plan with NaN or inf")
                        source = CommandSource.SOLVER_FAILURE
        if source is not CommandSource.PLAN:
            if source is CommandSource.SOLVER_FAILURE:
                # A failed iteration may leave NaN or a diverged nominal behind: warm-started from it, every
                # later solve would fail too. The next tick starts from the last good plan (_restore).
                self._last_knot = None
                self._failures_in_row += 1
            if not self._sent:
                # No plan was ever good: the robot is still held as it was before the controller (the brakes, its
                # own controller), which is safer than the statics of a posture without feedback (a humanoid's
                # first plan refused and the brakes released on them: it falls). The gait starts with the first
                # plan sent.
                self._gait_start = None
                self._count(source)
                return None
            command, policy = self._safe(q, v, now_ns)
        else:
            self._keep_good(policy)
        self._remember(policy)
        self._count(source, command)
        return TickResult(command, source, previous, plan, plan_start_ns, trouble, policy)

    def _keep_good(self, policy: FeedbackPolicy) -> None:
        """``policy``, of the plan just solved, is good: the one to hold when a later tick fails, its plan the one to
        restore."""
        mpc = self.mpc
        self.good_policy = policy
        self._failures_in_row = 0
        self._good_plan = (mpc, self._gait_start, mpc.solver.X.copy(), mpc.solver.U.copy(), self._last_knot)

    def _restore(self, mpc: LeggedMPC, knot: Optional[int]) -> bool:
        """After a failed solve (no previous plan to warm-start from), put the last good plan of ``mpc`` back as the
        solver's nominal, to be shifted to ``knot`` (its multipliers reset), for up to RESTORE_ATTEMPTS failures in a
        row; whether it did. Otherwise the tick starts from scratch."""
        good = self._good_plan
        if (self._last_knot is not None or not self._failures_in_row or self._failures_in_row > RESTORE_ATTEMPTS
                or good is None or good[0] is not mpc or good[1] != self._gait_start or knot is None
                or good[4] is None):
            return False
        _, _, X, U, good_knot = good
        mpc.solver.X[:], mpc.solver.U[:] = X, U
        for constraint in mpc.ocp.constraints:
            constraint.reset()
        self._last_knot = good_knot
        return True

    def _remember(self, policy: FeedbackPolicy) -> None:
        """Keep ``policy`` as the robot side does (one stamped like the newest replaces it; an older one is
        refused there)."""
        sent = self._sent
        if sent and policy.stamp_ns < sent[-1].stamp_ns:
            return
        keep_taken(sent, policy)
        self._sent_ns = policy.stamp_ns
        if self._first_policy is None:
            self._first_policy = self._seconds(policy.stamp_ns)

    def _plan_policy(self, mpc: LeggedMPC, start_ns: int) -> Optional[FeedbackPolicy]:
        """The feedback policy of the MPC's new plan (None if it is not finite)."""
        solver = mpc.solver
        gain_knots = self.settings.gain_knots
        states, torques, gain = solver.X, solver.U, solver.K[:gain_knots] if gain_knots > 1 else solver.K[0]
        policy = policy_from_plan(states, torques, gain, start_ns, mpc.dt, self.settings.policy_validity)
        finite = (np.isfinite(policy.x_ref).all() and np.isfinite(policy.u_ff).all()
                  and np.isfinite(policy.gain).all())
        return policy if finite else None

    def _safe(self, q: np.ndarray, v: np.ndarray, now_ns: int) -> Tuple[np.ndarray, FeedbackPolicy]:
        """The safe command and its policy: the last good policy while valid, else the static torques of
        the measured posture on the feet the gait has down, as a policy without gain."""
        policy = self.good_policy
        if policy is not None and policy.is_valid(now_ns):
            try:
                torque = policy.torque(self.model, q, v, now_ns, self.lower, self.upper)
                if np.isfinite(torque).all():
                    self.held_policy_ticks += 1
                    return torque, policy
            except RbdDerivError:
                pass
        return self._static_policy(q, v, now_ns, policy)

    def stop_command(self, now_ns: int) -> Optional[Tuple[np.ndarray, FeedbackPolicy]]:
        """The last command when control stops (the node deactivated): the static torques of the measured posture
        on the feet the gait has down (:meth:`static_command`), as a policy valid for ``policy_validity`` from
        ``now_ns``, with the last good plan's final gain when there was a plan (the posture held at rest). The robot
        side applies it that long, then goes to its own safe mode for an expired policy.

        Returns:
            (command (nu,) [N m], policy), or None before the base and every joint were received.
        """
        if not self.state.complete:
            return None
        torque, policy = self._static_policy(self.state.q.copy(), self.state.v.copy(), now_ns, self.good_policy)
        self._remember(policy)
        return torque, policy

    def _static_policy(self, q: np.ndarray, v: np.ndarray, now_ns: int, policy: Optional[FeedbackPolicy]
                       ) -> Tuple[np.ndarray, FeedbackPolicy]:
        """:meth:`static_command` at q as a policy: without gain before any plan, else at rest under the gain of
        ``policy``'s final knot (the last good plan's)."""
        torque = self.static_command(q)
        # Stamped like the last policy sent (the robot side refuses a policy older than the one it applies,
        # and the next plan's first knot may be earlier than now), valid from now on for the usual time.
        stamp_ns = now_ns if self._sent_ns is None else min(self._sent_ns, now_ns)
        valid_for = (now_ns - stamp_ns) * 1e-9 + self.settings.policy_validity
        if policy is None:
            return torque, constant_policy(torque, q, v, stamp_ns, valid_for, self.mpc.dt)
        # After a plan: the measured posture held at rest under the gain of the last good plan's last knot, so that
        # the robot side keeps feedback (a torque without it, applied for the policy's validity, lets the robot
        # drift or throws it).
        return torque, constant_policy(torque, q, np.zeros_like(v), stamp_ns, valid_for, self.mpc.dt,
                                       gain=policy.gains[-1])

    def static_command(self, q: np.ndarray) -> np.ndarray:
        """Torques (nu,) [N m] that hold configuration q at rest on the feet of the gait's current knot; the
        admissible torque closest to 0 where they cannot be computed or need more than the effort limits (a posture
        the robot cannot hold on those feet, such as a fallen robot's: pushing at the limits from it throws it)."""
        mpc = self.mpc
        knot = mpc.gait.pattern[mpc.phase % mpc.gait.period]
        feet = [f for f, down in zip(self.feet, knot) if down]
        kinds = [k for k, down in zip(self.kinds, knot) if down]
        try:
            torque, _ = static_torques(self.model, q, feet, kinds, self.actuated)
        except (RbdDerivError, np.linalg.LinAlgError, ValueError):
            torque = None
        if torque is not None and not (np.isfinite(torque).all() and (torque >= self.lower).all()
                                       and (torque <= self.upper).all()):
            torque = None
        return hold_command(torque, self.lower, self.upper)

    # ------------------------------------------------------------------------------------- report
    def warm_up(self) -> None:
        """Solve each MPC once at its posture, at rest, so that every kernel is compiled (or loaded from
        numba's cache) before the first input (the first tick starts its plan from scratch anyway)."""
        for mpc in self.mpcs.values():
            mpc.solve(mpc.x_ref.copy(), phase=0)

    def _report(self, values: Dict[str, str]) -> None:
        """The legged values of :meth:`diagnostics`: gait, phase, horizon, ticks on a held policy, the largest
        cone violation of the first knots, the last plan's first-knot violation of the pyramid, safe commands."""
        values.update(gait=self.gait, phase=str(self.mpc.phase), horizon=str(self.mpc.horizon),
                      held_policy_ticks=str(self.held_policy_ticks), cmd_vel=" ".join(f"{x:.3g}" for x in self.command),
                      cmd_vel_clamped=str(self.clamped_commands))
        if self.cone_violations:
            values["cone_violation_max_n"] = f"{max(self.cone_violations):.4g}"
        if self.last_plan is not None:
            values["cone_constraint_violation_n"] = f"{self.last_plan.constraint_violation:.4g}"
        values["safe_commands"] = str(sum(count for source, count in self.sources.items()
                                          if source not in (CommandSource.PLAN, CommandSource.NO_STATE)))
