"""The MPC's feedback policy, and the robot side that applies it between MPC ticks (no ROS).

One tick of the MPC ends with a plan (states and torques at the knots of its horizon) and the gain of its
Riccati pass at the first knot. A controller that runs faster than the MPC (a robot's 1 kHz loop) applies

.. math::

    u(t, x) = \\mathrm{clamp}\\big(u^{ff}(t) + K\\,(x \\ominus x^{ref}(t)),\\ \\tau_{lo},\\ \\tau_{hi}\\big)

from its own measured state x = (q, v), where :math:`x \\ominus x^{ref} = (q \\ominus q^{ref},\\ v - v^{ref})`
is the tangent difference (:func:`rbd_deriv.difference` for q). This is the forward pass of the Riccati
recursion (:func:`rbd_deriv.control.riccati.forward_pass`: u = U + k + K dx, with U + k the plan's torque
and dx the deviation from the plan's state) evaluated at the state the robot has now instead of the one
the MPC predicted, so between ticks the robot keeps the plan's feedback instead of a held torque.

- :class:`FeedbackPolicy`: the knots (x_ref_i, u_ff_i) at ``stamp + i knot_dt``, the gain K (one for every
  knot, or the Riccati gain K_i of each of the first knots: a robot that has to run on for several knots
  without a new plan, such as a stalled MPC's, then keeps the feedback of each knot's own contacts), a validity;
  :func:`policy_from_plan` makes one from a plan, :func:`constant_policy` one that is a plain torque.
- :class:`PolicyExecutor`: the robot side. It takes policies and plain torque commands, refuses what does
  not fit its model, and at every step answers the torque to apply: the policy's while it is valid, else
  the last torque command while it is fresh, else nothing (brakes).
- :func:`policy_in_use`: which of the policies taken applies at a time. A policy stamped ahead of the
  clock waits for its stamp while the one before it is valid: an MPC that solves from the state predicted
  at the next knot of its gait stamps its plan there, and the previous plan covers the time until then,
  so the robot's contact switches fall when the plan's do.

Layout on the wire: ``msg/FeedbackPolicy.msg`` (:func:`rbd_deriv.messages.feedback_policy_fields`).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.constants import MAX_TAKEN
from rbd_deriv.exceptions import InputError, MessageError, RbdDerivError
from rbd_deriv.refusals import Refusals

__all__ = ["Actuation", "FeedbackPolicy", "PolicyExecutor", "constant_policy", "keep_taken", "policy_from_plan",
           "policy_in_use"]


@dataclass(frozen=True)
class FeedbackPolicy:
    """u = clamp(u_ff(t) + K_i (x (-) x_ref(t))) over ``knots`` knots ``knot_dt`` apart. Arrays read-only.

    Attributes:
        stamp_ns: Time [ns] of knot 0: the time of the state the plan starts from.
        knot_dt: Spacing of the knots [s], > 0.
        valid_for: How long after ``stamp_ns`` the policy may be applied [s], >= 0.
        x_ref: (knots, nq + nv) reference states (q, v) in model order.
        u_ff: (knots, nu) feedforward torques [N m or N].
        gain: (nu, 2 nv) feedback gain K on the tangent state difference, the same at every knot; or (G, nu, 2 nv),
            1 <= G <= knots: the gain K_i of knot i < G, knot i >= G keeping K_{G-1}.
    """

    stamp_ns: int
    knot_dt: float
    valid_for: float
    x_ref: np.ndarray
    u_ff: np.ndarray
    gain: np.ndarray

    def __post_init__(self) -> None:
        for name in ("x_ref", "u_ff", "gain"):
            array = np.array(getattr(self, name), dtype=float)
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        object.__setattr__(self, "stamp_ns", int(self.stamp_ns))

    @property
    def knots(self) -> int:
        """Number of knots."""
        return self.u_ff.shape[0]

    @property
    def nv(self) -> int:
        """Velocity dimension of the model (half K's columns)."""
        return self.gain.shape[-1] // 2

    @property
    def gains(self) -> np.ndarray:
        """(G, nu, 2 nv) the gains of the first G knots (G = 1 for one gain at every knot)."""
        return self.gain if self.gain.ndim == 3 else self.gain[None]

    def _knot(self, now_ns: int) -> Tuple[int, float]:
        """The knot i in use at ``now_ns`` and the fraction [0, 1) of the step to knot i + 1 done (0 before the
        stamp and from the last knot on)."""
        step = max(0.0, (now_ns - self.stamp_ns) * 1e-9 / self.knot_dt)
        last = self.knots - 1
        i = min(int(step), last)
        return i, (step - i if i < last else 0.0)

    @property
    def expires_ns(self) -> int:
        """Last time [ns] at which the policy may be applied."""
        return self.stamp_ns + int(round(self.valid_for * 1e9))

    def is_valid(self, now_ns: int) -> bool:
        """Whether it may be applied at ``now_ns`` [ns] (a time before its stamp counts as knot 0)."""
        return now_ns <= self.expires_ns

    def reference(self, model: Any, now_ns: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q_ref (nq,), v_ref (nv,), u_ff (nu,)) at ``now_ns``: u_ff held over each knot's step, the state
        interpolated linearly between knots (on the manifold for q), the first knot before the stamp and the
        last after the last knot."""
        return self._reference(model, *self._knot(now_ns))

    def _reference(self, model: Any, i: int, fraction: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`reference` at ``fraction`` of the step from knot i (:meth:`_knot`)."""
        nq = self.x_ref.shape[1] - self.nv
        here = self.x_ref[i]
        if fraction == 0.0:
            return here[:nq], here[nq:], self.u_ff[i]
        after = self.x_ref[i + 1]
        q_ref = rd.integrate(model, here[:nq], fraction * rd.difference(model, here[:nq], after[:nq]))
        v_ref = (1.0 - fraction) * here[nq:] + fraction * after[nq:]
        return q_ref, v_ref, self.u_ff[i]

    def torque(self, model: Any, q: np.ndarray, v: np.ndarray, now_ns: int, lower: np.ndarray,
               upper: np.ndarray) -> np.ndarray:
        """u_ff(t) + K_i (x (-) x_ref(t)) at the state (q (nq,), v (nv,)), clamped to [lower, upper] (nu,).

        Raises:
            InputError: q or v has a wrong shape or is not finite, or a quaternion is not unit.
        """
        i, fraction = self._knot(now_ns)
        q_ref, v_ref, u_ff = self._reference(model, i, fraction)
        dx = np.concatenate([rd.difference(model, q_ref, q), np.asarray(v, dtype=float) - v_ref])
        gains = self.gains
        return np.clip(u_ff + gains[min(i, gains.shape[0] - 1)] @ dx, lower, upper)


def policy_from_plan(states: np.ndarray, torques: np.ndarray, gain: np.ndarray, start_ns: int,
                     knot_dt: float, valid_for: float) -> FeedbackPolicy:
    """The policy of a plan: its first knots (as many as ``valid_for`` needs, at most the horizon) and the
    gain of its first knot, or the gains of its first knots.

    Args:
        states: (N+1, nq + nv) planned states; torques: (N, nu) planned torques.
        gain: (nu, 2 nv) Riccati gain of knot 0 (``Plan.gain``), or (G, nu, 2 nv) those of knots 0 to G - 1 (the
            policy keeps those of its own knots).
        start_ns: Time [ns] of knot 0; knot_dt: the horizon step [s]; valid_for: validity [s], > 0.
    """
    horizon = torques.shape[0]
    knots = min(horizon, int(math.ceil(valid_for / knot_dt - 1e-9)) + 1)
    gain = np.asarray(gain)
    return FeedbackPolicy(start_ns, knot_dt, valid_for, states[:knots], torques[:knots],
                          gain[:knots] if gain.ndim == 3 else gain)


def constant_policy(torque: np.ndarray, q: np.ndarray, v: np.ndarray, stamp_ns: int, valid_for: float,
                    knot_dt: float, gain: Optional[np.ndarray] = None) -> FeedbackPolicy:
    """A policy that is the plain ``torque`` (nu,) [N m] at the state (q, v), one knot: K = 0, or ``gain``
    (nu, 2 nv) about that state."""
    torque, v = np.asarray(torque, dtype=float), np.asarray(v, dtype=float)
    x = np.concatenate([np.asarray(q, dtype=float), v])
    gain = np.zeros((torque.size, 2 * v.size)) if gain is None else np.asarray(gain, dtype=float)
    return FeedbackPolicy(stamp_ns, knot_dt, valid_for, x[None, :], torque[None, :], gain)


def policy_in_use(taken: Sequence[FeedbackPolicy], now_ns: int) -> Optional[FeedbackPolicy]:
    """The policy that applies at ``now_ns`` [ns] among ``taken`` (in stamp order, none older than the one
    before): the newest stamped at or before ``now_ns`` while it is valid; else (none yet, or expired) the
    first stamped after, applied as its first knot until its stamp; else the newest, expired, or None."""
    current = None
    for policy in taken:
        if policy.stamp_ns > now_ns:
            return current if current is not None and current.is_valid(now_ns) else policy
        current = policy
    return current


def keep_taken(taken: collections.deque, policy: FeedbackPolicy) -> None:
    """Add ``policy`` to ``taken`` (in stamp order, not older than the newest there): one stamped like the
    newest replaces it (a newer plan from the same knot)."""
    if taken and policy.stamp_ns == taken[-1].stamp_ns:
        taken.pop()
    taken.append(policy)


class Actuation(str, Enum):
    """Where the robot side's torque comes from at a step."""

    POLICY = "policy"
    HOLD = "hold"
    COMMAND = "command"
    DAMPING = "damping"
    BRAKE = "brake"


class PolicyExecutor:
    """The robot side: applies the newest valid policy at every step; when it has expired, its safe mode; else
    the last torque command while it is fresh, else brakes.

    The safe mode of an expired policy (its controller stalled or died) does not throw the robot: for
    ``expiry_hold`` after the expiry, the policy's last knot (reference state and feedforward) under that knot's
    gain, which is where the plan meant the robot to be (:attr:`Actuation.HOLD`); then the last torque command
    while it is fresh, else joint damping u = -``expiry_damping`` v (:attr:`Actuation.DAMPING`), which lets a
    robot on its feet settle instead of locking it in whatever posture it has reached; without damping (0), the
    brakes. Every torque is clamped to the effort limits. (A ``command_timeout`` shorter than the policy's
    validity plus ``expiry_hold`` keeps the command sent beside the policy from outliving the hold.)

    Args:
        model: The robot's model (the order of its actuated joints is the order of the torques returned).
        command_timeout: A torque command older than this [s] is no longer applied; 0: held for ever (the
            effort forward-command controller's behaviour).
        max_stamp_lead: A policy stamped ahead of the clock by more than this [s] is refused (``future``).
        log_period: Shortest time [s] between two log lines of one refusal reason.
        expiry_hold: How long [s] after a policy expires its last knot is held, >= 0.
        expiry_damping: Joint damping [N m s/rad] after the hold, >= 0, one value or one per actuated joint; 0
            (every joint): the brakes.

    Attributes:
        policy: The policy in use at the last time the executor was given (None before the first).
        taken: The policies taken that may still apply, in stamp order (:func:`policy_in_use` picks one).
        steps: Steps by :class:`Actuation` (a ``collections.Counter``).
        refusals: Refused policies and commands, by ``policy/<reason>`` and ``command/<reason>``.
    """

    def __init__(self, model: Any, command_timeout: float = 0.5, max_stamp_lead: float = 0.1,
                 log_period: float = 1.0, expiry_hold: float = 0.0, expiry_damping: float = 0.0) -> None:
        if not (math.isfinite(expiry_hold) and expiry_hold >= 0.0):
            raise InputError(f"expiry_hold must be finite and >= 0, got {expiry_hold!r}", "expiry_hold")
        damping = np.array(expiry_damping, dtype=float)
        if damping.ndim > 1 or not (np.isfinite(damping).all() and (damping >= 0.0).all()):
            raise InputError(f"expiry_damping must be finite and >= 0, got {expiry_damping!r}", "expiry_damping")
        self.model = model
        self.actuated_joint_names = tuple(model.actuated_joint_names)
        self.state_joint_names = tuple(model.joint_names)
        self.nu = len(self.actuated_joint_names)
        self._v_rows = np.array([model.idx_v[n] for n in self.actuated_joint_names], dtype=np.int64)
        effort = np.asarray(model.effort_limit, dtype=float)[self._v_rows]
        self.lower, self.upper = -effort, effort
        self._timeout_ns = int(round(command_timeout * 1e9))
        self._hold_ns = int(round(expiry_hold * 1e9))
        if damping.ndim == 1 and damping.shape != (self.nu,):
            raise InputError(f"expiry_damping needs one value or {self.nu}, got {damping.size}", "expiry_damping")
        self.expiry_damping = np.broadcast_to(damping, (self.nu,)).copy()
        self._max_lead_ns = int(round(max_stamp_lead * 1e9))
        self._layouts: dict = {}
        self.taken: collections.deque = collections.deque(maxlen=MAX_TAKEN)
        self._clock_ns = 0
        self.command: Optional[np.ndarray] = None
        self._command_ns = 0
        self.steps: collections.Counter = collections.Counter()
        self.refusals = Refusals(log_period)

    def refuse(self, kind: str, error: Any) -> Optional[str]:
        """Count a refusal of ``kind`` under ``kind/reason``; the line to log, or None within the log period."""
        return self.refusals.count_error(kind, error)

    @property
    def policy(self) -> Optional[FeedbackPolicy]:
        """The policy in use at the last time the executor was given (None before the first)."""
        return policy_in_use(self.taken, self._clock_ns)

    def _in_use(self, now_ns: int) -> Optional[FeedbackPolicy]:
        """The policy in use at ``now_ns``; those before it are forgotten (later stamps only come later)."""
        self._clock_ns = max(self._clock_ns, int(now_ns))
        policy = policy_in_use(self.taken, self._clock_ns)
        while self.taken and self.taken[0] is not policy:
            self.taken.popleft()
        return policy

    def _rows(self, joint_names: Sequence[str]) -> np.ndarray:
        """Where each of this robot's actuated joints is among ``joint_names`` (a policy's rows)."""
        key = tuple(joint_names)
        rows = self._layouts.get(key)
        if rows is None:
            if len(key) != self.nu or set(key) != set(self.actuated_joint_names):
                raise MessageError(f"joints {list(key)[:8]} are not this robot's actuated joints "
                                   f"{list(self.actuated_joint_names)[:8]}", "joints")
            rows = np.array([key.index(n) for n in self.actuated_joint_names], dtype=np.int64)
            if len(self._layouts) >= 16:
                self._layouts.clear()
            self._layouts[key] = rows
        return rows

    def check_policy(self, fields: Mapping[str, Any], stamp_ns: int) -> FeedbackPolicy:
        """A policy from ``fields`` (:func:`rbd_deriv.messages.feedback_policy_arrays`), with its rows in this
        robot's order, if it fits the model.

        Raises:
            MessageError: ``joints`` (names that are not this robot's), ``size`` (nq, nv, nx or nu of another
                model), ``non_finite`` (NaN or inf), ``values`` (knot_dt <= 0, valid_for < 0, a configuration
                the model refuses, such as a non-unit quaternion).
        """
        model = self.model
        if tuple(fields["state_joint_names"]) != self.state_joint_names:
            raise MessageError(f"state joints {list(fields['state_joint_names'])[:8]} are not the model's "
                               f"{list(self.state_joint_names)[:8]} in model order", "joints")
        rows = self._rows(fields["joint_names"])
        x_ref, u_ff, gain = fields["x_ref"], fields["u_ff"], fields["K"]
        if (x_ref.shape[1] != model.nq + model.nv or gain.shape[-2:] != (self.nu, 2 * model.nv)
                or not (gain.ndim == 2 or (gain.ndim == 3 and 1 <= gain.shape[0] <= u_ff.shape[0]))):
            raise MessageError(f"x_ref has {x_ref.shape[1]} entries per knot and K is "
                               f"{' x '.join(map(str, gain.shape))}; the model needs {model.nq + model.nv} and "
                               f"{self.nu} x {2 * model.nv}, one per knot at most", "size")
        knot_dt, valid_for = float(fields["knot_dt"]), float(fields["valid_for"])
        if not (np.isfinite(x_ref).all() and np.isfinite(u_ff).all() and np.isfinite(gain).all()
                and math.isfinite(knot_dt) and math.isfinite(valid_for)):
            raise MessageError("the policy holds NaN or inf", "non_finite")
        if not (knot_dt > 0.0 and 0.0 <= valid_for <= 3600.0):
            raise MessageError(f"knot_dt {knot_dt} s must be > 0 and valid_for {valid_for} s in [0, 3600]",
                               "values")
        try:
            for knot in x_ref:
                rd.difference(model, knot[:model.nq], knot[:model.nq])
        except RbdDerivError as error:
            raise MessageError(f"a reference configuration is refused by the model: {error}", "values") from error
        return FeedbackPolicy(stamp_ns, knot_dt, valid_for, x_ref, u_ff[:, rows], gain[..., rows, :])

    def take_policy(self, fields: Mapping[str, Any], stamp_ns: int, now_ns: int) -> FeedbackPolicy:
        """Use the policy of ``fields`` stamped ``stamp_ns`` [ns] from now on (``now_ns``, the clock [ns]).

        A policy stamped ahead of the clock waits for its stamp while the one in use is valid
        (:func:`policy_in_use`); one stamped like the newest taken replaces it (a newer plan from the same knot).

        Raises:
            MessageError: as :meth:`check_policy`, or ``future`` (stamped ahead of the clock by more than
                ``max_stamp_lead``), ``out_of_order`` (older than the newest policy taken), ``expired`` (already
                beyond its validity). The policies taken stay.
        """
        policy = self.check_policy(fields, stamp_ns)
        if stamp_ns - now_ns > self._max_lead_ns:
            raise MessageError(f"stamped {(stamp_ns - now_ns) * 1e-9:.6g} s ahead of the clock", "future")
        self._in_use(now_ns)
        if self.taken and stamp_ns < self.taken[-1].stamp_ns:
            raise MessageError("stamped before the newest policy taken", "out_of_order")
        if not policy.is_valid(now_ns):
            raise MessageError(f"expired {(now_ns - policy.expires_ns) * 1e-9:.6g} s before it arrived", "expired")
        keep_taken(self.taken, policy)
        return policy

    def take_command(self, torque: Any, now_ns: int) -> None:
        """A plain torque command (nu,) [N m] in this robot's actuated order, received at ``now_ns`` [ns].

        Raises:
            MessageError: ``size`` or ``non_finite``; the last good command stays.
        """
        torque = np.asarray(torque, dtype=float)
        if torque.shape != (self.nu,):
            raise MessageError(f"{torque.size} torques, need {self.nu}", "size")
        if not np.isfinite(torque).all():
            raise MessageError("a torque is NaN or inf", "non_finite")
        self.command = torque
        self._command_ns = int(now_ns)

    def torque(self, q: np.ndarray, v: np.ndarray, now_ns: int) -> Tuple[Optional[np.ndarray], Actuation]:
        """The torque (nu,) [N m] to apply at the state (q, v) at ``now_ns`` [ns], inside the effort limits,
        and where it comes from; None with :attr:`Actuation.BRAKE` when there is nothing valid to apply."""
        policy = self._in_use(now_ns)
        expired_ns = None
        if policy is not None:
            expired_ns = now_ns - policy.expires_ns
            # Valid, or expired within the hold: past its last knot a policy gives that knot under its gain.
            source = Actuation.POLICY if expired_ns <= 0 else Actuation.HOLD
            if expired_ns <= self._hold_ns:
                try:
                    torque = policy.torque(self.model, q, v, now_ns, self.lower, self.upper)
                except RbdDerivError as error:
                    torque = None
                    self.refuse("policy", MessageError(f"cannot be evaluated at the state: {error}", "unusable"))
                if torque is not None and np.isfinite(torque).all():
                    self.steps[source] += 1
                    return torque, source
                if torque is not None:
                    self.refuse("policy", MessageError("gives a torque that is not finite", "non_finite_torque"))
                self.taken.remove(policy)
        if self.command is not None and (self._timeout_ns == 0 or now_ns - self._command_ns <= self._timeout_ns):
            self.steps[Actuation.COMMAND] += 1
            return np.clip(self.command, self.lower, self.upper), Actuation.COMMAND
        if expired_ns is not None and self.expiry_damping.any():
            velocity = np.asarray(v, dtype=float)[self._v_rows]
            torque = -self.expiry_damping * np.where(np.isfinite(velocity), velocity, 0.0)
            self.steps[Actuation.DAMPING] += 1
            return np.clip(torque, self.lower, self.upper), Actuation.DAMPING
        self.steps[Actuation.BRAKE] += 1
        return None, Actuation.BRAKE
