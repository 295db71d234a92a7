"""The MPC's tick policy around the solver: what a controller does with its inputs at every tick (no ROS).

A :class:`ControlLoop` takes the robot's inputs as arrays with their stamps [ns] (joint states, the
dynamics node's linearization and compensation torques, a reference) and, at every :meth:`~ControlLoop.tick`
at the clock's time, decides the torque command:

1. freshness: the state, and in held mode the linearization, must be younger than their timeouts
   (:func:`~rbd_deriv.control.safety.is_stale`);
2. the disturbance observer learns from the new state (:mod:`~rbd_deriv.control.observer`);
3. the state is carried forward over the loop's delay (:mod:`~rbd_deriv.control.prediction`);
4. the reference of the horizon is sampled and the problem solved (:mod:`~rbd_deriv.control.mpc`);
5. the command is the plan's first torque, or the safe command and the reason
   (:func:`~rbd_deriv.control.safety.select_command`): finite and inside the torque box whatever happened;
6. the feedback policy for the robot side (:mod:`~rbd_deriv.control.policy`): the plan's first knots and
   the Riccati gain of its first knot, or, with a safe command, that command as a policy with no gain.

The clock is the caller's (a node's ROS clock, simulated time included): every age is a difference of
stamps and ``now_ns`` given to the loop. Refused inputs raise an
:class:`~rbd_deriv.exceptions.InputError`; the caller counts them with :meth:`~ControlLoop.refuse`,
next to what the tick counts itself; :meth:`~ControlLoop.diagnostics` reports both.
"""

from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.constants import COMPENSATION_BOUND, LAYOUT_CACHE_SIZE, STATISTICS_WINDOW
from rbd_deriv.control.mpc import HeldLinearization, ModelPredictiveController, Plan
from rbd_deriv.control.observer import DisturbanceObserver
from rbd_deriv.control.policy import FeedbackPolicy, constant_policy, policy_from_plan
from rbd_deriv.control.prediction import CommandHistory, predict_state
from rbd_deriv.control.problem import Mode, MPCProblem
from rbd_deriv.control.reference import TrajectoryReference, bound_reference_error, horizon_reference
from rbd_deriv.control.safety import CommandSource, hold_command, is_stale, select_command
from rbd_deriv.control.tick_loop import TickLoop, TickResult
from rbd_deriv.stamps import ns_to_seconds
from rbd_deriv.exceptions import InputError, MessageError, RbdDerivError

__all__ = ["ControlLoop", "LoopSettings"]


@dataclass(frozen=True)
class LoopSettings:
    """How the loop treats time and its inputs.

    Attributes:
        rate_hz: Tick rate [Hz], > 0; sizes the command history and the observer's longest gap.
        state_timeout: A state older than this [s] gives the safe command, > 0.
        linearization_timeout: Same for the linearization in held mode [s], > 0.
        predict_delay: Solve from the state carried forward to when the command acts.
        command_delay: Time from a command to its effect at the actuators [s], in [0, state_timeout).
        disturbance_time_constant: Observer filter [s]; 0 disables the observer.
        disturbance_bound: Largest observer estimate, a fraction of each effort limit, in (0, 1].
        max_stamp_lead: Inputs stamped ahead of the clock by more than this [s] are refused (``future``):
            a state from the future would otherwise make every later one out of order.
        policy_validity: How long [s] after the time of its first knot the robot side may apply a tick's
            feedback policy, > 0: how long a stalled MPC is covered before the robot side falls back.
        max_reference_error: The horizon's reference positions are pulled to within this [rad or m] of the
            state solved from (:func:`~rbd_deriv.control.reference.bound_reference_error`), >= 0; 0 leaves
            them where the reference puts them.
    """

    rate_hz: float = 200.0
    state_timeout: float = 0.05
    linearization_timeout: float = 0.05
    predict_delay: bool = True
    command_delay: float = 0.0
    disturbance_time_constant: float = 0.01
    disturbance_bound: float = 0.2
    max_stamp_lead: float = 0.1
    policy_validity: float = 0.1
    max_reference_error: float = 0.1

    def __post_init__(self) -> None:
        def finite(value: Any) -> bool:
            return isinstance(value, (int, float)) and math.isfinite(value)

        for name in ("rate_hz", "state_timeout", "linearization_timeout", "policy_validity"):
            if not (finite(getattr(self, name)) and getattr(self, name) > 0.0):
                raise InputError(f"{name} must be > 0, got {getattr(self, name)!r}", name)
        if not (finite(self.command_delay) and 0.0 <= self.command_delay < self.state_timeout):
            raise InputError(f"command_delay must be in [0, state_timeout), got {self.command_delay!r}",
                             "command_delay")
        if not (finite(self.disturbance_time_constant) and self.disturbance_time_constant >= 0.0):
            raise InputError(f"disturbance_time_constant must be >= 0, got {self.disturbance_time_constant!r}",
                             "disturbance_time_constant")
        if not (finite(self.disturbance_bound) and 0.0 < self.disturbance_bound <= 1.0):
            raise InputError(f"disturbance_bound must be in (0, 1], got {self.disturbance_bound!r}",
                             "disturbance_bound")
        for name in ("max_stamp_lead", "max_reference_error"):
            if not (finite(getattr(self, name)) and getattr(self, name) >= 0.0):
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)!r}", name)


class ControlLoop(TickLoop):
    """The tick policy of an MPC: freshness, observer, prediction, solve, safe command, counters.

    Args:
        model: The robot model (as :class:`MPCProblem` accepts it).
        problem: Horizon, weights, limits and mode.
        settings: Timeouts, delay and observer.

    Attributes:
        controller: The solver facade.
        state: The joint-state map the inputs fill.
        refusals: Refused inputs and tick failures by reason.
        sources: Commands by source.
    """

    #: The sources of its commands (:class:`~rbd_deriv.control.safety.CommandSource`) and what its safe command is.
    SOURCES = tuple(source for source in CommandSource if source is not CommandSource.CONE_REFUSAL)
    SAFE_COMMAND = "hold with gravity compensation"

    def __init__(self, model: Any, problem: MPCProblem, settings: LoopSettings = LoopSettings(),
                 log_period: float = 1.0) -> None:
        self._start(model, settings.max_stamp_lead, settings.state_timeout, log_period)
        self.problem, self.settings = problem, settings
        self.data = model.create_data()
        self.controller = ModelPredictiveController(problem, model)
        self.held = problem.mode is Mode.HELD
        self.joint_names = tuple(model.joint_names)
        self.lower, self.upper = problem.torque_lower, problem.torque_upper
        self._X_ref = np.zeros((problem.horizon + 1, problem.nx))
        self._U_ref = np.zeros((problem.horizon, problem.nv))
        # It learns from states up to four ticks (at least 20 ms) apart; a longer gap means a stall.
        self.observer = (DisturbanceObserver(model, settings.disturbance_time_constant,
                                             settings.disturbance_bound * problem.torque_upper,
                                             max_gap=max(4.0 / settings.rate_hz, 0.02))
                         if settings.disturbance_time_constant > 0.0 else None)
        # Enough commands to cover the longest prediction (a state as old as state_timeout).
        self.history = CommandHistory(
            int(np.ceil((settings.state_timeout + settings.command_delay) * settings.rate_hz)) + 4)
        self._max_lead_ns = int(round(settings.max_stamp_lead * 1e9))
        self._compensation_bound = COMPENSATION_BOUND * np.asarray(model.effort_limit, dtype=float)[
            [model.idx_v[n] for n in self.actuated_joint_names]]
        self.reference: Any = None
        self.linearization: Optional[HeldLinearization] = None
        self._linearization_stamp_ns = 0
        self.compensation: Optional[np.ndarray] = None
        self._compensation_stamp_ns = 0
        self._policy_stamp_ns = 0  # the newest policy's: the robot side refuses one stamped before it
        self._compensation_layouts: Dict[Tuple[str, ...], np.ndarray] = {}
        self.tick_times: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        # Age of each linearization when it arrives: the latency of joint_states -> dynamics node -> here,
        # which is what the plan is late by.
        self.linearization_ages: collections.deque = collections.deque(maxlen=STATISTICS_WINDOW)
        self.reference_pulled = 0

    # ---------------------------------------------------------------------------------------- inputs
    def _check_lead(self, stamp_ns: int, now_ns: Optional[int]) -> None:
        if now_ns and stamp_ns - now_ns > self._max_lead_ns:  # 0: simulated time not started (no /clock yet)
            raise MessageError(f"stamp {stamp_ns * 1e-9:.6f} s is {(stamp_ns - now_ns) * 1e-9:.6g} s ahead of the "
                               f"clock (max_stamp_lead {self.settings.max_stamp_lead:g} s)", "future")

    def take_compensation(self, names: Sequence[str], effort: Any, stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """The dynamics node's compensation torques RNEA(q, v, 0) of the actuated joints, by name.

        Args:
            now_ns: The clock [ns], to refuse a stamp from the future; None skips that check.

        Raises:
            MessageError: ``joints`` (not exactly the actuated joints), ``effort`` (sizes, NaN or inf),
                ``implausible`` (beyond ``COMPENSATION_BOUND`` times a joint's effort limit) or ``future``.
                The last good compensation stays.
        """
        key = tuple(names)
        layout = self._compensation_layouts.get(key)
        if layout is None:
            if sorted(key) != sorted(self.actuated_joint_names):
                raise MessageError(f"joints {list(key)[:8]} are not the model's {list(self.actuated_joint_names)[:8]}",
                                   "joints")
            layout = np.array([key.index(n) for n in self.actuated_joint_names], dtype=np.int64)
            if len(self._compensation_layouts) >= LAYOUT_CACHE_SIZE:
                self._compensation_layouts.clear()
            self._compensation_layouts[key] = layout
        effort = np.asarray(effort, dtype=float)
        if effort.shape != (len(key),) or not np.isfinite(effort).all():
            raise MessageError(f"{effort.size} efforts, need {len(key)} finite", "effort")
        compensation = effort[layout]
        beyond = np.flatnonzero(np.abs(compensation) > self._compensation_bound)
        if beyond.size:
            k = int(beyond[0])
            raise MessageError(f"compensation {compensation[k]:.6g} on {self.actuated_joint_names[k]} is beyond "
                               f"{COMPENSATION_BOUND:g} times its effort limit", "implausible")
        self._check_lead(stamp_ns, now_ns)
        self.compensation = compensation
        self._compensation_stamp_ns = int(stamp_ns)

    def take_linearization(self, arrays: Mapping[str, Any], stamp_ns: int, now_ns: int) -> None:
        """A linearization of the dynamics node (held mode), stamped with the state it was taken at.

        Args:
            arrays: The keywords of :class:`HeldLinearization` (as
                :func:`rbd_deriv.messages.linearization_arrays` reads them from a message).
            stamp_ns: Its stamp [ns]; now_ns: the clock [ns], for its age in the diagnostics.

        Raises:
            MessageError: ``values``: wrong shapes, NaN or inf, or another dt than the horizon's; ``future``:
                stamped ahead of the clock by more than ``max_stamp_lead``. The last good linearization stays.
        """
        self._check_lead(stamp_ns, now_ns)
        try:
            linearization = self.controller.check_linearization(HeldLinearization(**arrays))
        except InputError as error:
            raise MessageError(str(error), "values") from error
        self.linearization = linearization
        self._linearization_stamp_ns = int(stamp_ns)
        self.linearization_ages.append(ns_to_seconds(now_ns, stamp_ns))

    def take_reference(self, joint_names: Sequence[str], start_ns: int, offsets: Any, positions: Any,
                       velocities: Any = None) -> float:
        """A reference trajectory: knot i at ``start_ns`` + ``offsets[i]``.

        Args:
            joint_names: Columns of ``positions`` and ``velocities``; must include every joint of the model.
            start_ns: Time of the first knot's offset origin [ns].
            offsets: (T,) [s], increasing.
            positions: (T, len(joint_names)) [rad or m]; velocities: the same shape or None.

        Returns:
            Its duration [s].

        Raises:
            InputError: A joint is missing, no knot, wrong shapes, non-increasing times, NaN or inf.
        """
        names = list(joint_names)
        missing = [n for n in self.joint_names if n not in names]
        offsets = np.asarray(offsets, dtype=float).reshape(-1)
        if missing or offsets.size == 0:
            raise InputError(f"needs points for every joint; missing {missing}", "reference")
        columns = [names.index(n) for n in self.joint_names]
        start = self._seconds(start_ns)
        try:
            positions = np.asarray(positions, dtype=float)[:, columns]
            velocities = None if velocities is None else np.asarray(velocities, dtype=float)[:, columns]
        except (IndexError, ValueError) as error:
            raise InputError(f"positions and velocities need one column per joint name, one row per knot: "
                             f"{error}", "reference") from error
        self.reference = TrajectoryReference(start + offsets, positions, velocities)
        return float(offsets[-1] - offsets[0])

    def set_goal(self, goal: Any) -> None:
        """Hold ``goal`` (nv,) [rad or m] from now on (replaces the reference).

        Raises:
            InputError: Not nv finite values.
        """
        goal = np.asarray(goal, dtype=float)
        if goal.shape != (self.problem.nv,) or not np.isfinite(goal).all():
            raise InputError(f"the goal needs {self.problem.nv} finite values in the order {list(self.joint_names)}",
                             "goal")
        self.reference = TrajectoryReference([0.0], goal[None, :])

    def set_parameters(self, values: Mapping[str, Any], names: set) -> Optional[str]:
        """Take the run-time parameters among ``names`` (changed) from ``values`` (all the node's): the goal
        (``goal_positions``). Returns why they are refused, or None."""
        legged = names & {"gait", "idle_gait", "sway_amplitude", "sway_period"}
        if legged:
            return f"{', '.join(sorted(legged))}: parameters of a legged robot (floating_base), not of this fixed base"
        if "goal_positions" in names:
            try:
                self.set_goal(values["goal_positions"])
            except RbdDerivError as error:
                return f"goal_positions: {error}"
        return None

    def describe(self) -> str:
        """One line on what the loop controls and how, for the node's log."""
        p = self.problem
        return f"MPC on {self.model.name!r}: {p.nv} joints, N={p.horizon}, dt={p.dt} s, mode {p.mode.value}"

    # ------------------------------------------------------------------------------------------ tick
    def tick(self, now_ns: int, monotonic_ns: Optional[int] = None) -> Optional[TickResult]:
        """Decide the command at ``now_ns`` [ns] (the caller's clock).

        Args:
            monotonic_ns: A monotonic clock [ns] (``time.monotonic_ns()`` when None), against which the
                caller's clock must advance: one that stands still (simulated time without ``/clock``) gives
                the safe command ``stale_clock``.

        Returns:
            None before every joint has been received (nothing is known about the robot: no command is
            better than a guess), else the command and why. Never raises for a bad input or a failed
            solve: those give the safe command and are counted (``solve_input``, ``solver_failure``,
            ``internal_error``).
        """
        started = time.perf_counter()
        previous = self.last_source
        if not self.state.complete:
            self._count(CommandSource.NO_STATE)
            return None
        settings = self.settings
        q, v = self.state.q.copy(), self.state.v.copy()
        if not self.clock.advancing(now_ns, time.monotonic_ns() if monotonic_ns is None else monotonic_ns):
            return self._hold_without_clock(q, v, previous)
        now = self._seconds(now_ns)
        state_time = self._seconds(self.state.stamp_ns)
        state_fresh = not is_stale(state_time, now, settings.state_timeout)
        linearization_fresh = not self.held or (self.linearization is not None and not is_stale(
            self._seconds(self._linearization_stamp_ns), now, settings.linearization_timeout))
        if self.reference is None:
            self.reference = TrajectoryReference([0.0], q[None, :])
        plan, solve_from, trouble = None, state_time, None
        try:
            disturbance = self._observe(q, v, state_time, state_fresh)
            if state_fresh and linearization_fresh:
                x0, solve_from = self._initial_state(q, v, state_time, now, disturbance)
                horizon_reference(self.reference, solve_from, self.problem.horizon, self.problem.dt, self.model,
                                  self.lower, self.upper, self._X_ref, self._U_ref, self.data)
                if bound_reference_error(self.model, x0[:self.problem.nv], self._X_ref, settings.max_reference_error):
                    self.reference_pulled += 1
                self.controller.set_reference(self._X_ref, self._U_ref)
                if previous is not CommandSource.PLAN:
                    # The robot did not follow the last plan (a safe command was sent): warm-starting from it
                    # would start the solver from torques and states the robot never saw.
                    self.controller.reset()
                plan = self.controller.solve(x0, solve_from, self.linearization if self.held else None,
                                             disturbance)
        except RbdDerivError as error:
            trouble = self.refuse("solve_input", error)
        except Exception as error:  # noqa: BLE001 - a controller must still send a safe command
            trouble = self.refuse("internal_error", f"{type(error).__name__}: {error}")
        if plan is not None:
            self.solve_times.append(plan.solve_time)
            self.last_plan = plan
            if not plan.ok:
                trouble = self.refuse("solver_failure", f"solver status {plan.status.value}")
        command, source = select_command(
            None if plan is None else plan.torque, plan is not None and plan.ok, state_fresh, linearization_fresh,
            self._compensation_or_gravity(q, now), self.lower, self.upper)
        self.history.record(now, command)
        self._count(source, command)
        self.tick_times.append(time.perf_counter() - started)
        good = plan if plan is not None and plan.ok else None
        start_ns = self._epoch_ns + int(round(solve_from * 1e9))
        policy = self._policy(good if source is CommandSource.PLAN else None, command, q, v, start_ns, now_ns)
        self._policy_stamp_ns = max(self._policy_stamp_ns, policy.stamp_ns)
        return TickResult(command, source, previous, good, start_ns, trouble, policy)

    def stop_command(self, now_ns: int) -> Optional[Tuple[np.ndarray, FeedbackPolicy]]:
        """The last command when control stops (the node deactivated): the hold with gravity compensation at the
        measured posture, clamped to the limits, as a policy without gain valid for ``policy_validity`` from
        ``now_ns`` (never stamped before the last policy sent). The robot side holds it that long, then goes to its
        own safe mode for an expired policy.

        Returns:
            (command (nu,) [N m], policy), or None before every joint was received (nothing to hold).
        """
        if not self.state.complete:
            return None
        return self._hold(self.state.q.copy(), self.state.v.copy(), now_ns, compensation_at_ns=now_ns)

    def _hold_without_clock(self, q: np.ndarray, v: np.ndarray, previous: CommandSource) -> TickResult:
        """The tick of a clock that stands still: no age can be measured, so nothing is solved, learnt or
        recorded; the hold with gravity compensation at the measured posture, as a policy stamped at the newest
        state's time (the robot's clock as last heard), or the last policy's when that is later."""
        if self.observer is not None:
            self.observer.reset()
        command, policy = self._hold(q, v, self.state.stamp_ns)
        self._count(CommandSource.STALE_CLOCK, command)
        return TickResult(command, CommandSource.STALE_CLOCK, previous, None, policy.stamp_ns, None, policy)

    def _hold(self, q: np.ndarray, v: np.ndarray, at_ns: int,
              compensation_at_ns: Optional[int] = None) -> Tuple[np.ndarray, FeedbackPolicy]:
        """The hold with gravity compensation at q, clamped to the limits, as a policy without gain stamped at
        ``at_ns`` or at the last policy's stamp when that is later; it becomes the last command and policy. The
        compensation is the dynamics node's if fresh at ``compensation_at_ns`` (default: the stamp)."""
        stamp_ns = max(at_ns, self._policy_stamp_ns)
        at = stamp_ns if compensation_at_ns is None else compensation_at_ns
        command = hold_command(self._compensation_or_gravity(q, self._seconds(at)), self.lower, self.upper)
        self.last_command = command
        self._policy_stamp_ns = stamp_ns
        return command, constant_policy(command, q, v, stamp_ns, self.settings.policy_validity, self.problem.dt)

    def _policy(self, plan: Optional[Plan], command: np.ndarray, q: np.ndarray, v: np.ndarray, start_ns: int,
                now_ns: int) -> FeedbackPolicy:
        """The plan's policy, or ``command`` held as one (no plan, or a gain that is not finite).

        A held command is stamped like a plan of this tick would be (the time the command acts, or the
        state's time without prediction), so that the stamps the robot side sees never go backwards."""
        validity, dt = self.settings.policy_validity, self.problem.dt
        if plan is not None:
            if np.isfinite(plan.gain).all():
                return policy_from_plan(plan.states, plan.torques, plan.gain, start_ns, dt, validity)
            self.refuse("non_finite_policy", "a Riccati gain with NaN or inf: the command is sent without gain")
        stamp_ns = (now_ns + int(round(self.settings.command_delay * 1e9)) if self.settings.predict_delay
                    else self.state.stamp_ns)
        return constant_policy(command, q, v, stamp_ns, validity, dt)

    def _observe(self, q: np.ndarray, v: np.ndarray, state_time: float, fresh: bool) -> Optional[np.ndarray]:
        """The observer's disturbance estimate after the new state (None without an observer)."""
        if self.observer is None:
            return None
        if not fresh:
            self.observer.reset()
            return None
        # The measured joint torques when the robot reports them (they include the delay between this
        # controller and the actuators), else the last command.
        applied = self.state.effort if self.state.has_effort else self.last_command
        return self.observer.update(q, v, state_time, applied)

    def _initial_state(self, q: np.ndarray, v: np.ndarray, state_time: float, now: float,
                       disturbance: Optional[np.ndarray]) -> Tuple[np.ndarray, float]:
        """The state the tick solves from and its time [s]: the measurement, or (predict_delay) the
        measurement carried forward to when this tick's command acts."""
        if not self.settings.predict_delay:
            return np.concatenate([q, v]), state_time
        delay = self.settings.command_delay
        q_next, v_next, reached = predict_state(self.model, self.data, q, v, state_time, now + delay,
                                                self.history, delay, disturbance)
        return np.concatenate([q_next, v_next]), reached

    def _compensation_or_gravity(self, q: np.ndarray, now: float) -> Optional[np.ndarray]:
        """Compensation torques of the dynamics node if fresh, else gravity computed here (None if even
        that fails: the safe command then takes the torque closest to zero)."""
        if self.compensation is not None and not is_stale(
                self._seconds(self._compensation_stamp_ns), now, self.settings.state_timeout):
            return self.compensation
        try:
            return rd.gravity_torques(self.model, self.data, q).copy()
        except RbdDerivError:
            return None

    # ---------------------------------------------------------------------------------- start, report
    def warm_up(self) -> None:
        """Solve once at the neutral configuration, at rest, then forget that solve: a model that cannot
        compute (a singular mass matrix) is refused here, and the first real tick finds the solver's buffers and
        the kernels it calls (compiled by the build) ready."""
        model, problem = self.model, self.problem
        q, v = rd.neutral(model), np.zeros(model.nv)
        u = rd.gravity_torques(model, self.data, q).copy()
        A, B = rd.linearize(model, self.data, q, v, u, problem.dt)
        linearization = HeldLinearization(A.copy(), B.copy(), np.r_[q, v], u, self.data.x_next.copy(), problem.dt)
        horizon_reference(TrajectoryReference([0.0], q[None, :]), 0.0, problem.horizon, problem.dt, model,
                          self.lower, self.upper, self._X_ref, self._U_ref, self.data)
        self.controller.set_reference(self._X_ref, self._U_ref)
        self.controller.solve(np.r_[q, v], 0.0, linearization if self.held else None)
        self.controller.reset()

    def _report(self, values: Dict[str, str]) -> None:
        """The fixed-base values of :meth:`diagnostics`: mode, horizon, linearization ages, tick time, the last
        plan's status, iterations, cost and active bounds, references pulled to the state."""
        values.update({"mode": self.problem.mode.value, "horizon": str(self.problem.horizon)})
        if self.linearization_ages:
            ages = np.asarray(self.linearization_ages) * 1e3
            values.update({"linearization_age_p50_ms": f"{np.percentile(ages, 50):.3f}",
                           "linearization_age_p99_ms": f"{np.percentile(ages, 99):.3f}"})
        if self.tick_times:
            values["tick_time_p99_us"] = f"{np.percentile(np.asarray(self.tick_times) * 1e6, 99):.1f}"
        if self.last_plan is not None:
            plan = self.last_plan
            values.update({"status": plan.status.value, "iterations": str(plan.iterations),
                           "qp_iterations": str(plan.qp_iterations), "cost": f"{self.controller.cost(plan):.6g}",
                           "active_torque_bounds": str(plan.clamped)})
        values["reference_pulled"] = str(self.reference_pulled)
