"""Assemble the robot state (q, v) from joint_states-like messages, checking every one of them.

A robot's joint states often arrive by pieces: one publisher for the arm, one for the gripper, the
floating base from an odometry source; names come in any order, with joints the model does not know.
:class:`JointStateMap` keeps the latest position, velocity and effort of every joint of a model, maps
each message by joint name onto the model's coordinates, and refuses a bad message as a whole (nothing
of it is kept) with a :class:`JointStateError` whose ``reason`` is a short key a node can count by.

No ROS here: messages are passed as names, arrays and a stamp in [ns], so the checks are testable
without a middleware and usable from a bag reader.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.core import constants
from rbd_deriv.exceptions import InputError

__all__ = ["JointStateError", "JointStateMap", "PLAUSIBLE", "REASONS", "describe", "implausible", "velocity_names"]

#: Largest magnitude a measured quantity may have to be taken as physical, by kind. Finite values beyond
#: these are sensor or software faults, and fed to the dynamics they overflow (a velocity above about
#: 1e154 squares to inf) into NaN outputs. The bounds are far above any robot: position [rad or m] leaves a
#: continuous joint room to count turns for months; velocity [rad/s or m/s]; acceleration [rad/s^2 or
#: m/s^2]; effort [N m or N]; step: the longest time step of a linearization [s].
PLAUSIBLE: Dict[str, float] = {
    "position": 1e9,
    "velocity": 1e4,
    "acceleration": 1e7,
    "effort": 1e7,
    "step": 1.0,
}

#: Every ``JointStateError.reason``, with what it means.
REASONS: Dict[str, str] = {
    "length_mismatch": "position, velocity or effort length differs from the number of names",
    "duplicate_joint": "a joint name appears twice in one message",
    "unknown_joints": "no joint of the message belongs to the model (or an unknown one in strict mode)",
    "non_finite": "a value of a model joint is NaN or inf",
    "implausible": "a value of a model joint is finite but beyond any physical robot (see PLAUSIBLE)",
    "missing_velocity": "a model joint comes without a velocity",
    "missing_effort": "an effort is needed but a model joint has none",
    "out_of_order": "the stamp is older than the last accepted stamp of one of its joints",
    "future": "the stamp is ahead of the clock by more than the tolerance (it would block every later message)",
    "stale": "the stamp is too old compared to the clock, or a joint was not updated for too long",
    "incomplete": "some joints of the model have not been received yet",
    "bad_base": "the floating-base pose or twist is unusable (non-finite or implausible, quaternion not unit)",
}

_FREE_FLYER_AXES = ("vx", "vy", "vz", "wx", "wy", "wz")

#: Longest name shown in a message: a hostile publisher's megabyte name must not reach the log whole.
_NAME_SHOWN = 64

#: Layouts (name list -> coordinates) remembered, and the most characters of names a remembered list may
#: hold: publishers repeat a few lists, one inventing names must not grow memory.
_LAYOUT_CACHE_SIZE = 64
_LAYOUT_CACHE_CHARACTERS = 1 << 16

#: The stamps a message is judged against when its order does not matter (none).
_NO_STAMPS = np.empty(0, dtype=np.int64)


def implausible(values: np.ndarray, kind: str) -> np.ndarray:
    """Mask of the entries of ``values`` that are NaN, inf or larger in magnitude than ``PLAUSIBLE[kind]``."""
    # The comparison is False for NaN: one test catches both faults.
    return ~(np.abs(values) <= PLAUSIBLE[kind])


def _plausible(values: np.ndarray, kind: str) -> bool:
    """No entry of ``values`` is :func:`implausible` (the test made at every message: two numpy calls)."""
    # The largest magnitude is NaN if any entry is: the comparison is then False.
    return bool(np.abs(values).max(initial=0.0) <= PLAUSIBLE[kind])


class JointStateError(InputError):
    """A joint-state or base-state message is refused.

    Attributes:
        reason: One key of :data:`REASONS`, for counting.
        joints: The joint names concerned (possibly empty).
    """

    def __init__(self, message: str, reason: str, joints: Sequence[str] = ()) -> None:
        super().__init__(message, argument="joint_states" if reason != "bad_base" else "odometry")
        self.reason = reason
        self.joints = list(joints)


def velocity_names(model) -> List[str]:
    """Name of each velocity coordinate of ``model`` (nv,), in model order.

    One-dof joints keep their name; the free flyer gives ``root_joint_vx ... root_joint_wz`` (linear,
    then angular, in the base frame); any other multi-dof joint gives ``<name>_<k>``.
    """
    names: List[str] = [""] * model.nv
    for joint in model.joint_names:
        start, count = model.idx_v[joint], model.nv_joint[joint]
        if count == 1:
            names[start] = joint
        elif joint == rd.FREE_FLYER_JOINT and count == 6:
            names[start : start + 6] = [f"{joint}_{axis}" for axis in _FREE_FLYER_AXES]
        else:
            names[start : start + count] = [f"{joint}_{k}" for k in range(count)]
    return names


def describe(names: Sequence[str], limit: int = 5) -> str:
    """The first ``limit`` names, each cut to a readable length, and how many more there are."""
    shown = ", ".join(n if len(n) <= _NAME_SHOWN else f"{n[:_NAME_SHOWN]}...({len(n)} characters)"
                      for n in map(str, names[:limit]))
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class JointStateMap:
    """Latest joint positions, velocities and efforts of a model, filled by name.

    Args:
        model: The :class:`rbd_deriv.Model` whose state is assembled. Its actuated joints
            (``model.actuated_joint_names``) are read from joint_states; a free-flyer base from
            :meth:`update_base`.
        strict: Refuse a message naming a joint the model does not have. By default such joints (a
            gripper, a sensor joint...) are ignored, and only a message with no model joint at all is
            refused.
        max_age: A stamp older than the clock by more than this [s] is stale, and so is a state one of
            whose joints was last updated more than this before the newest one; 0 disables both checks.
        max_lead: A stamp ahead of the clock by more than this [s] is refused (``future``): accepted, it
            would make every later message out of order until the clock caught up. Inf disables.

    Attributes:
        q: Configuration (nq,) [rad or m], starts at the neutral configuration.
        v: Velocity (nv,) [rad/s or m/s].
        effort: Latest measured effort (nv,) [N m or N]; free-flyer entries stay 0.
        stamp_ns: Stamp of the last accepted message [ns], or -1.
    """

    def __init__(self, model, strict: bool = False, max_age: float = 0.0, max_lead: float = math.inf) -> None:
        self.set_checks(strict, max_age, max_lead)
        self.joint_names = list(model.actuated_joint_names)
        for name in self.joint_names:
            if model.nq_joint[name] != 1 or model.nv_joint[name] != 1:
                raise InputError(f"joint {name!r} has nq={model.nq_joint[name]}, nv={model.nv_joint[name]}: "
                                 "joint_states carries one position and one velocity per joint", "model")
        self.floating_base = bool(model.has_floating_base)
        self._slot = {name: k for k, name in enumerate(self.joint_names)}
        self._q_index = np.array([model.idx_q[n] for n in self.joint_names], dtype=np.int64)
        self._v_index = np.array([model.idx_v[n] for n in self.joint_names], dtype=np.int64)
        if self.floating_base:
            self._base_q = model.idx_q[rd.FREE_FLYER_JOINT]
            self._base_v = model.idx_v[rd.FREE_FLYER_JOINT]
        self.q = np.zeros(model.nq)
        if self.floating_base:
            self.q[self._base_q + 6] = 1.0  # identity quaternion (x, y, z, w)
        self.v = np.zeros(model.nv)
        self.effort = np.zeros(model.nv)
        self.stamp_ns = -1
        self._joint_stamp = np.full(len(self.joint_names), -1, dtype=np.int64)
        self._has_effort = np.zeros(len(self.joint_names), dtype=bool)
        self._base_stamp = -1
        self._complete = False
        # Publishers repeat the same name list: its mapping is computed once. The unknown names are kept
        # with it, so that strict mode applies to lists seen before it was turned on.
        self._layouts: Dict[Tuple[str, ...], Tuple[np.ndarray, np.ndarray, List[str]]] = {}

    def set_checks(self, strict: bool, max_age: float, max_lead: float) -> None:
        """Check the messages from now on as the constructor's arguments of the same names say (``max_age``,
        ``max_lead`` [s]); a refused value (InputError) changes nothing."""
        if not (math.isfinite(max_age) and max_age >= 0.0):
            raise InputError(f"max_age must be a finite number of seconds >= 0, got {max_age!r}", "max_age")
        self.max_lead = max_lead  # checked before anything changes
        self.strict = bool(strict)
        self.max_age_ns = int(round(max_age * 1e9))

    @property
    def max_lead(self) -> float:
        """Largest lead [s] of a stamp over the clock (inf: no limit)."""
        return self._max_lead_ns * 1e-9

    @max_lead.setter
    def max_lead(self, seconds: float) -> None:
        if math.isnan(seconds) or seconds < 0.0:
            raise InputError(f"max_lead must be a number of seconds >= 0, got {seconds!r}", "max_lead")
        self._max_lead_ns = int(round(seconds * 1e9)) if math.isfinite(seconds) else None

    # ----------------------------------------------------------------------------------- joint_states
    def _layout(self, names: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        key = tuple(names)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._new_layout(key)
        rows, slots, unknown = layout
        if unknown and self.strict:
            raise JointStateError(f"joints not in the model: {describe(unknown)}", "unknown_joints", unknown)
        return rows, slots

    def _new_layout(self, key: Tuple[str, ...]) -> Tuple[np.ndarray, np.ndarray, List[str]]:
        if len(set(key)) != len(key):
            repeated = sorted({n for n in key if key.count(n) > 1})
            raise JointStateError(f"joint names repeated in one message: {describe(repeated)}",
                                  "duplicate_joint", repeated)
        rows = [i for i, n in enumerate(key) if n in self._slot]
        unknown = [n for n in key if n not in self._slot]
        if not rows:
            raise JointStateError(f"none of the joints {describe(list(key))} belongs to the model "
                                  f"(expects {describe(self.joint_names)})", "unknown_joints", unknown)
        layout = (np.array(rows, dtype=np.int64), np.array([self._slot[key[i]] for i in rows], dtype=np.int64),
                  unknown)
        if sum(map(len, key)) <= _LAYOUT_CACHE_CHARACTERS:
            if len(self._layouts) >= _LAYOUT_CACHE_SIZE:
                self._layouts.clear()
            self._layouts[key] = layout
        return layout

    def update(self, names: Sequence[str], position, velocity, effort, stamp_ns: int,
               now_ns: Optional[int] = None) -> None:
        """Take in one joint_states message, or refuse all of it.

        Args:
            names: Joint names (n,), any order, may include joints the model does not have.
            position: (n,) [rad or m].
            velocity: (n,) [rad/s or m/s]; required for the model's joints.
            effort: (n,) [N m or N] or empty.
            stamp_ns: Header stamp [ns].
            now_ns: Current time [ns] for the staleness and lead checks; None (or 0: a clock on simulated time
                not started yet) skips them.

        Raises:
            JointStateError: the message is refused; the stored state is unchanged.
        """
        slots, p, w, e = self._checked(names, position, velocity, effort, stamp_ns, now_ns, True)
        self.q[self._q_index[slots]] = p
        self.v[self._v_index[slots]] = w
        if e is not None:
            self.effort[self._v_index[slots]] = e
            self._has_effort[slots] = True
        self._joint_stamp[slots] = stamp_ns
        self.stamp_ns = max(self.stamp_ns, stamp_ns)
        self._complete = self._complete or self._all_received()

    def check(self, names: Sequence[str], position, velocity, effort, stamp_ns: int,
              now_ns: Optional[int] = None) -> None:
        """Raise what :meth:`update` would for this message but for the order of its stamp (a message judged
        after a newer one of its joints was taken); nothing is stored."""
        self._checked(names, position, velocity, effort, stamp_ns, now_ns, False)

    def _checked(self, names, position, velocity, effort, stamp_ns: int, now_ns: Optional[int],
                 in_order: bool) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]:
        """The model slots, positions, velocities and efforts (or None) of a message :meth:`update` accepts;
        ``in_order``: refuse a stamp older than the last accepted one of its joints."""
        n = len(names)
        position = np.asarray(position, dtype=float)
        velocity = np.asarray(velocity, dtype=float)
        effort = np.asarray(effort, dtype=float)
        if position.shape != (n,) or velocity.shape not in ((n,), (0,)) or effort.shape not in ((n,), (0,)):
            raise JointStateError(
                f"{n} names but {position.size} positions, {velocity.size} velocities, {effort.size} efforts "
                "(velocity and effort may be empty, otherwise every array has one entry per name)",
                "length_mismatch")
        rows, slots = self._layout(names)
        if velocity.size == 0:
            raise JointStateError(f"no velocities for {describe([names[i] for i in rows])}: the dynamics "
                                  "need them", "missing_velocity", [names[i] for i in rows])
        p, w = position[rows], velocity[rows]
        e = effort[rows] if effort.size else None
        if not (_plausible(p, "position") and _plausible(w, "velocity") and (e is None or _plausible(e, "effort"))):
            bad = implausible(p, "position") | implausible(w, "velocity")
            if e is not None:
                bad |= implausible(e, "effort")
            self._refuse_values(names, rows, bad, p, w, e)
        self._check_stamp(stamp_ns, now_ns, self._joint_stamp[slots] if in_order else _NO_STAMPS,
                          lambda: [names[i] for i in rows])
        return slots, p, w, e

    @staticmethod
    def _refuse_values(names, rows, bad, p, w, e) -> None:
        joints = [names[rows[i]] for i in np.flatnonzero(bad)]
        finite = np.isfinite(p).all() and np.isfinite(w).all() and (e is None or np.isfinite(e).all())
        if not finite:
            raise JointStateError(f"NaN or inf in the state of {describe(joints)}", "non_finite", joints)
        k = int(np.flatnonzero(bad)[0])
        values = f"position {p[k]:.6g}, velocity {w[k]:.6g}" + ("" if e is None else f", effort {e[k]:.6g}")
        raise JointStateError(
            f"implausible state of {describe(joints)} ({describe([joints[0]], 1)}: {values}; the bounds are "
            f"{PLAUSIBLE['position']:g} rad or m, {PLAUSIBLE['velocity']:g} rad/s or m/s, "
            f"{PLAUSIBLE['effort']:g} N m or N)", "implausible", joints)

    def _check_stamp(self, stamp_ns: int, now_ns: Optional[int], previous: np.ndarray,
                     joints: Callable[[], List[str]]) -> None:
        """Refuse ``stamp_ns`` if stale, ahead of the clock, or older than ``previous`` (the last accepted
        stamps of the joints concerned); ``joints()`` names them (called on the way to an error only)."""
        # A clock that reads 0 is a ROS clock on simulated time before its first /clock message: there is no
        # time yet to measure ages and leads against (stamps of a played recording would all look ahead).
        if not now_ns:
            now_ns = None
        # Staleness first: a message seconds old is better reported as stale than as out of order.
        if self.max_age_ns and now_ns is not None and now_ns - stamp_ns > self.max_age_ns:
            raise JointStateError(
                f"stamp {stamp_ns * 1e-9:.6f} s is {(now_ns - stamp_ns) * 1e-9:.3f} s old "
                f"(max_age {self.max_age_ns * 1e-9:g} s)", "stale", joints())
        # A stamp from the future is refused before it can become the reference of the order check.
        if self._max_lead_ns is not None and now_ns is not None and stamp_ns - now_ns > self._max_lead_ns:
            raise JointStateError(
                f"stamp {stamp_ns * 1e-9:.6f} s is {(stamp_ns - now_ns) * 1e-9:.6g} s ahead of the clock "
                f"(tolerance {self._max_lead_ns * 1e-9:g} s)", "future", joints())
        if previous.size and stamp_ns < previous.max():
            named = joints()
            later = [named[i] for i in np.flatnonzero(previous > stamp_ns)]
            raise JointStateError(
                f"stamp {stamp_ns * 1e-9:.6f} s is older than the last accepted one "
                f"({previous.max() * 1e-9:.6f} s) for {describe(later)}", "out_of_order", later)

    # ------------------------------------------------------------------------------- floating base
    def update_base(self, position, orientation, linear, angular, stamp_ns: int,
                    now_ns: Optional[int] = None) -> None:
        """Take in the floating-base pose and twist (nav_msgs/Odometry), or refuse them.

        Args:
            position: Base position in the world (3,) [m].
            orientation: Base orientation quaternion (x, y, z, w) (4,) [-]; normalized when its norm is
                within ``constants.QUATERNION_TOLERANCE`` of 1, refused otherwise.
            linear: Base linear velocity in the base frame (3,) [m/s] (Odometry's child frame).
            angular: Base angular velocity in the base frame (3,) [rad/s].
            stamp_ns: Header stamp [ns].
            now_ns: Current time [ns] for the staleness and lead checks; None (or 0: a clock on simulated time
                not started yet) skips them.

        Raises:
            JointStateError: reason ``bad_base``, ``out_of_order`` or ``stale``; nothing is stored.
            InputError: the model has no floating base.
        """
        position, orientation, linear, angular = self._checked_base(position, orientation, linear, angular,
                                                                    stamp_ns, now_ns, True)
        iq, iv = self._base_q, self._base_v
        self.q[iq : iq + 3] = position
        self.q[iq + 3 : iq + 7] = orientation
        self.v[iv : iv + 3] = linear
        self.v[iv + 3 : iv + 6] = angular
        self._base_stamp = stamp_ns
        self.stamp_ns = max(self.stamp_ns, stamp_ns)
        self._complete = self._complete or self._all_received()

    def check_base(self, position, orientation, linear, angular, stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """Raise what :meth:`update_base` would for this base state but for the order of its stamp; nothing is
        stored."""
        self._checked_base(position, orientation, linear, angular, stamp_ns, now_ns, False)

    def _checked_base(self, position, orientation, linear, angular, stamp_ns: int, now_ns: Optional[int],
                      in_order: bool) -> Tuple[np.ndarray, ...]:
        """Position, unit quaternion, linear and angular velocity of a base state :meth:`update_base` accepts."""
        if not self.floating_base:
            raise InputError("the model has a fixed base: there is no base state to set", "odometry")
        values = [np.asarray(x, dtype=float) for x in (position, orientation, linear, angular)]
        if [x.shape for x in values] != [(3,), (4,), (3,), (3,)]:
            raise JointStateError("base state needs position (3,), orientation (4,), linear (3,), angular (3,)",
                                  "bad_base", [rd.FREE_FLYER_JOINT])
        position, orientation, linear, angular = values
        if not all(np.isfinite(x).all() for x in values):
            raise JointStateError("NaN or inf in the base pose or twist", "bad_base", [rd.FREE_FLYER_JOINT])
        if implausible(position, "position").any() or implausible(np.r_[linear, angular], "velocity").any():
            raise JointStateError(
                f"implausible base pose or twist (position {position}, linear {linear}, angular {angular}; the "
                f"bounds are {PLAUSIBLE['position']:g} m, {PLAUSIBLE['velocity']:g} m/s or rad/s)", "bad_base",
                [rd.FREE_FLYER_JOINT])
        norm = float(np.linalg.norm(orientation))
        if abs(norm - 1.0) > constants.QUATERNION_TOLERANCE:
            raise JointStateError(f"base orientation quaternion has norm {norm:.9g}, not 1", "bad_base",
                                  [rd.FREE_FLYER_JOINT])
        previous = np.array([self._base_stamp], dtype=np.int64) if in_order else _NO_STAMPS
        self._check_stamp(stamp_ns, now_ns, previous, lambda: [rd.FREE_FLYER_JOINT])
        return position, orientation / norm, linear, angular

    # ------------------------------------------------------------------------------------- status
    def missing(self) -> List[str]:
        """Joints (and ``root_joint`` for a floating base) never received yet."""
        names = [self.joint_names[k] for k in np.flatnonzero(self._joint_stamp < 0)]
        if self.floating_base and self._base_stamp < 0:
            names.insert(0, rd.FREE_FLYER_JOINT)
        return names

    def _all_received(self) -> bool:
        return bool((self._joint_stamp >= 0).all()) and (not self.floating_base or self._base_stamp >= 0)

    @property
    def complete(self) -> bool:
        """Every joint (and the base) has been received at least once."""
        return self._complete

    @property
    def has_effort(self) -> bool:
        """Every joint has reported a measured effort at least once."""
        return bool(self._has_effort.all())

    def _oldest_stamp(self) -> int:
        oldest = int(self._joint_stamp.min())
        return min(oldest, self._base_stamp) if self.floating_base else oldest

    def check_fresh(self, now_ns: int) -> None:
        """Raise if the newest stamp is more than max_age older than the clock ``now_ns`` [ns] (a state kept
        while its publishers stopped); max_age 0 checks nothing.

        Raises:
            JointStateError: ``stale``.
        """
        age_ns = now_ns - self.stamp_ns
        if self.max_age_ns and age_ns > self.max_age_ns:
            raise JointStateError(f"latest state is {age_ns * 1e-9:.3f} s old", "stale")

    def check_ready(self, need_effort: bool = False) -> None:
        """Raise unless the stored state can be used as a whole.

        Raises:
            JointStateError: ``incomplete`` (joints never received), ``stale`` (a joint last updated
                more than max_age before the newest stamp: a publisher stopped) or ``missing_effort``.
        """
        # Names are listed only on the way to an error: this runs at every message.
        if not self.complete:
            missing = self.missing()
            raise JointStateError(f"waiting for joints {describe(missing)}", "incomplete", missing)
        if self.max_age_ns and self.stamp_ns - self._oldest_stamp() > self.max_age_ns:
            stamps = self._joint_stamp if not self.floating_base else np.append(self._joint_stamp, self._base_stamp)
            names = self.joint_names + ([rd.FREE_FLYER_JOINT] if self.floating_base else [])
            old = [names[k] for k in np.flatnonzero(self.stamp_ns - stamps > self.max_age_ns)]
            raise JointStateError(f"joints {describe(old)} not updated for more than "
                                  f"{self.max_age_ns * 1e-9:g} s", "stale", old)
        if need_effort and not self._has_effort.all():
            lacking = [self.joint_names[k] for k in np.flatnonzero(~self._has_effort)]
            raise JointStateError(f"no measured effort for {describe(lacking)}", "missing_effort", lacking)
