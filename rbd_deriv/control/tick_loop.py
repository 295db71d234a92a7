"""What every MPC tick loop shares, whatever it plans: the tick's inputs, clock, counters and report (no ROS).

The package's two tick loops, :class:`~rbd_deriv.control.loop.ControlLoop` (a fixed-base robot tracking a
reference through the dynamics node's linearizations) and :class:`~rbd_deriv.control.legged_loop.LeggedLoop` (a
robot on its feet along a gait), plan differently and share the rest, written once here in :class:`TickLoop`:

- the robot's joint states by name (:class:`~rbd_deriv.joint_state_map.JointStateMap`), with one rule for their
  efforts (:func:`usable_effort`);
- the caller's clock: times inside a loop are seconds from the first stamp it sees (``_seconds``: float seconds
  since 1970 keep only a fraction of a microsecond, and a simulated clock may start anywhere), and a clock that
  stands still gives the safe command (:class:`~rbd_deriv.control.safety.ClockWatch`);
- refused inputs counted by kind and reason (:class:`~rbd_deriv.refusals.Refusals`, :meth:`TickLoop.refuse`);
- the command of each tick and why (:class:`~rbd_deriv.control.safety.CommandSource`, one enum for both; each
  loop lists the ones it produces in ``SOURCES``), counted by :meth:`TickLoop._count`;
- the report for ``/diagnostics`` (:meth:`TickLoop.diagnostics`): rate, source of the last command, solve-time
  percentiles, commands by source and refusals, to which each loop adds its own values
  (:meth:`TickLoop._report`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from rbd_deriv.control.constants import STATISTICS_WINDOW
from rbd_deriv.control.policy import FeedbackPolicy
from rbd_deriv.control.safety import ClockWatch, CommandSource
from rbd_deriv.joint_state_map import JointStateMap, implausible
from rbd_deriv.refusals import Refusals
from rbd_deriv.stamps import ns_to_seconds

__all__ = ["TickLoop", "TickResult", "time_percentiles", "usable_effort"]


@dataclass(frozen=True)
class TickResult:
    """What one tick of a loop decided.

    Attributes:
        command: Torques (nu,) [N m or N] to send now: finite, inside the problem's torque box.
        source: Why this command (:class:`CommandSource`); ``PLAN`` when it is the plan's.
        previous_source: The source of the previous tick's command (a change is worth a log line).
        plan: The plan when the solver succeeded this tick (a legged loop: when a solve ran, sendable or not),
            else None.
        plan_start_ns: Time [ns] of the plan's first knot (the state it was solved from, predicted to
            when the command acts); meaningful with ``plan`` only.
        trouble: A log line when this tick's solve was refused or failed (at most one per log period
            and reason), else None.
        policy: The feedback policy for the robot side: the plan's (stamped ``plan_start_ns``) with
            ``source`` PLAN, else the safe command as a policy (a legged loop may hold its last good policy).
            Finite, torques inside the box.
    """

    command: np.ndarray
    source: CommandSource
    previous_source: CommandSource
    plan: Any
    plan_start_ns: int
    trouble: Optional[str] = None
    policy: Optional[FeedbackPolicy] = None


def time_percentiles(name: str, seconds: Sequence[float]) -> Dict[str, str]:
    """``<name>_p50_us``, ``<name>_p99_us`` and ``<name>_max_us`` of durations [s], for /diagnostics (empty
    without a sample)."""
    if len(seconds) == 0:
        return {}
    times = np.asarray(seconds) * 1e6
    return {f"{name}_p50_us": f"{np.percentile(times, 50):.1f}", f"{name}_p99_us": f"{np.percentile(times, 99):.1f}",
            f"{name}_max_us": f"{times.max():.1f}"}


def usable_effort(effort: Any) -> Any:
    """``effort``, or none when not all of it is plausible: the loops never need the measured efforts to plan
    (the fixed-base observer learns from them when given), and a message whose efforts are not all finite
    (ros2_control fills NaN for joints without an effort interface) still gives positions and velocities."""
    return () if implausible(np.asarray(effort, dtype=float), "effort").any() else effort


class TickLoop:
    """The shared part of a tick loop (see the module docstring); a loop calls :meth:`_start` first.

    Attributes:
        state: The joint states (and the base's, for a floating base) by name.
        clock: The watch on the caller's clock.
        refusals: Refused inputs and failed ticks by kind and reason, and the messages used or superseded.
        solve_times: Recent solve durations [s].
        sources: Commands by :class:`CommandSource` since the start.
        last_source, last_plan, last_command: Those of the last tick.
        ticks: Ticks since the start.
    """

    #: The sources of a loop's commands (its subclasses narrow it) and what its safe command is.
    SOURCES: Tuple[CommandSource, ...] = tuple(CommandSource)
    SAFE_COMMAND = "the safe command"

    def _start(self, model: Any, max_stamp_lead: float, state_timeout: float, log_period: float) -> None:
        self.model = model
        self.actuated_joint_names = tuple(model.actuated_joint_names)
        self.state = JointStateMap(model, max_lead=max_stamp_lead)
        self.clock = ClockWatch(state_timeout)
        self._epoch_ns: Optional[int] = None
        self.refusals = Refusals(log_period)
        self.solve_times: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        self.sources: collections.Counter = collections.Counter()
        self.last_source = CommandSource.NO_STATE
        self.last_plan: Any = None
        self.last_command: Optional[np.ndarray] = None
        self.ticks = 0
        self._window_ticks = 0

    def _seconds(self, ns: int) -> float:
        """Seconds from the first stamp the loop saw to ``ns`` [ns]."""
        if self._epoch_ns is None:
            self._epoch_ns = int(ns)
        return ns_to_seconds(ns, self._epoch_ns)

    # ---------------------------------------------------------------------------------------- inputs
    def take_joint_states(self, names: Sequence[str], position: Any, velocity: Any, effort: Any,
                          stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """One joint_states message: names (n,), position, velocity, effort (n,) or empty, stamp [ns]; joints the
        model lacks are ignored, the efforts dropped unless all are plausible (:func:`usable_effort`).

        Args:
            now_ns: The clock [ns], to refuse a stamp from the future; None skips that check.

        Raises:
            JointStateError: Refused whole (see :class:`~rbd_deriv.joint_state_map.JointStateMap`): NaN, inf or
                implausible magnitudes, no joint of the model, a stamp out of order or ahead of the clock by more
                than ``max_stamp_lead``.
        """
        self.state.update(names, position, velocity, usable_effort(effort), stamp_ns, now_ns)

    def check_joint_states(self, names: Sequence[str], position: Any, velocity: Any, effort: Any,
                           stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """Raise what :meth:`take_joint_states` would for a message superseded by a newer one (its values and
        its lead on the clock, not its order); nothing is stored."""
        self.state.check(names, position, velocity, usable_effort(effort), stamp_ns, now_ns)

    def refuse(self, kind: str, error: Any) -> Optional[str]:
        """Count a refused input (or a failed tick) of ``kind``, under ``kind/reason`` when the error has a
        ``reason``; return the line to log, or None within the log period of that key."""
        return self.refusals.count_error(kind, error)

    # ------------------------------------------------------------------------------------------ tick
    def _count(self, source: CommandSource, command: Optional[np.ndarray] = None) -> None:
        """A tick sent ``command`` for ``source`` (None: no command, before any state)."""
        self.sources[source] += 1
        self.last_source = source
        if command is not None:
            self.last_command = command
            self.ticks += 1
            self._window_ticks += 1

    # ------------------------------------------------------------------------------------ diagnostics
    def diagnostics(self, elapsed: float) -> Tuple[bool, str, Dict[str, str]]:
        """The loop's report, and the start of a new reporting window.

        Args:
            elapsed: Time [s] since the previous report, for the tick rate.

        Returns:
            (healthy: the last command was the plan's, a one-line summary, key -> value).
        """
        rate, self._window_ticks = (self._window_ticks / elapsed if elapsed > 0.0 else 0.0), 0
        healthy = self.last_source is CommandSource.PLAN
        message = "tracking" if healthy else f"safe command ({self.SAFE_COMMAND}): {self.last_source.value}"
        values = {"rate_hz": f"{rate:.1f}", "command_source": self.last_source.value}
        values.update(time_percentiles("solve_time", self.solve_times))
        self._report(values)
        for source in self.SOURCES:
            values[f"commands_{source.value}"] = str(self.sources[source])
        values.update(self.refusals.report())
        return healthy, message, values

    def _report(self, values: Dict[str, str]) -> None:
        """Add the loop's own values to its report (nothing here)."""
