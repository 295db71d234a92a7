"""Safety rules of the torque command, as pure functions.

Whatever happens upstream (stale state, stale linearization, solver failure, NaN), the command
that leaves the controller is finite and inside the URDF effort limits. When the plan cannot be
trusted, the robot holds with gravity compensation, clamped to the limits.
"""

from __future__ import annotations

from enum import Enum

import numpy as np


class CommandSource(str, Enum):
    """Why a tick sent its command, for every MPC (fixed-base and legged); reported in diagnostics.

    ``STALE_LINEARIZATION`` and ``NOT_FINITE`` arise in the fixed-base loop only (a held linearization, a
    plan checked entry by entry), ``CONE_REFUSAL`` in a loop on contacts only.
    """

    PLAN = "plan"
    NO_STATE = "no_state"
    STALE_STATE = "stale_state"
    STALE_LINEARIZATION = "stale_linearization"
    SOLVER_FAILURE = "solver_failure"
    NOT_FINITE = "not_finite"
    STALE_CLOCK = "stale_clock"
    CONE_REFUSAL = "cone_refusal"


class ClockWatch:
    """Whether the clock a controller measures ages with still advances, judged on a monotonic clock.

    A ROS clock on simulated time reads 0 until its first ``/clock`` message and stands still when the
    messages stop: every age measured on it is then meaningless, and a state looks fresh (or from the future)
    whatever its real age. Such a clock is a stale state: the caller holds its safe command.

    Args:
        timeout: Longest time [s] of the monotonic clock over which the watched clock may not change, > 0.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout_ns = int(round(timeout * 1e9))
        self._last_ns: int | None = None
        self._changed_ns = 0

    def advancing(self, now_ns: int, monotonic_ns: int) -> bool:
        """Whether the watched clock, reading ``now_ns`` [ns] at ``monotonic_ns`` [ns], changed within the
        timeout (a clock that reads 0 or less has not started)."""
        if now_ns != self._last_ns:
            self._last_ns, self._changed_ns = now_ns, monotonic_ns
        return now_ns > 0 and monotonic_ns - self._changed_ns <= self.timeout_ns


def is_stale(stamp: float | None, now: float, timeout: float) -> bool:
    """True if a message stamped ``stamp`` [s] is older than ``timeout`` [s] at ``now`` [s].

    A missing stamp is stale. A stamp in the future by more than the timeout is stale too: the
    clocks disagree and the age cannot be trusted.
    """
    if stamp is None or not np.isfinite(stamp):
        return True
    age = now - stamp
    return not (-timeout <= age <= timeout)


def clamp_torque(torque: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Torque (nv,) [N m] clamped to [lower, upper]; non-finite entries become the bound closest to 0.

    Returns a new array; the input is not modified.
    """
    torque = np.asarray(torque, dtype=float)
    closest_to_zero = np.clip(0.0, lower, upper)
    return np.clip(np.where(np.isfinite(torque), torque, closest_to_zero), lower, upper)


def hold_command(gravity_torque: np.ndarray | None, lower: np.ndarray,
                 upper: np.ndarray) -> np.ndarray:
    """Safe command (nv,) [N m]: gravity compensation clamped to the limits.

    Without a usable gravity torque (missing or not finite) each joint gets the admissible
    torque closest to zero, which is the best that can be done without a model.
    """
    if gravity_torque is None:
        return clamp_torque(np.full(lower.shape, np.nan), lower, upper)
    return clamp_torque(gravity_torque, lower, upper)


def select_command(plan_torque: np.ndarray | None, plan_ok: bool, state_fresh: bool | None,
                   linearization_fresh: bool, gravity_torque: np.ndarray | None,
                   lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, CommandSource]:
    """The command to publish and why.

    Args:
        plan_torque: First torque of the plan (nv,) [N m], or None if no plan was computed.
        plan_ok: Whether the solver reported success.
        state_fresh: None if no state was ever received, else whether it is recent enough.
        linearization_fresh: Whether the linearization used is recent enough (True when the
            mode does not use one).
        gravity_torque: Gravity compensation at the latest state (nv,) [N m], or None.
        lower, upper: Effort limits (nv,) [N m].

    Returns:
        (command (nv,) finite and inside [lower, upper], source).
    """
    if state_fresh is None:
        source = CommandSource.NO_STATE
    elif not state_fresh:
        source = CommandSource.STALE_STATE
    elif not linearization_fresh:
        source = CommandSource.STALE_LINEARIZATION
    elif plan_torque is None or not plan_ok:
        source = CommandSource.SOLVER_FAILURE
    elif not np.isfinite(plan_torque).all():
        source = CommandSource.NOT_FINITE
    else:
        return clamp_torque(plan_torque, lower, upper), CommandSource.PLAN
    return hold_command(gravity_torque, lower, upper), source
