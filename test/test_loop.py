"""The MPC's tick policy (rbd_deriv.control.loop), without ROS: freshness, prediction, safe command, counters.

Inputs are fed as a node would feed them, at stamps chosen by the test; the expected commands come from
the library's other parts (gravity torques, the controller facade on the same inputs, predict_state) and
from the rules of rbd_deriv.control.safety, never from the loop itself. Every command must be finite and
inside the torque box.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control import (CommandHistory, CommandSource, ControlLoop, LoopSettings, MPCProblem, clamp_torque,
                               predict_state)
from rbd_deriv.joint_state_map import PLAUSIBLE, JointStateError
from rbd_deriv.messages import MessageError, linearization_arrays, linearization_fields, linearization_sizes
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import bundled_urdf

MS = 1_000_000
DT = 0.01
Q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])


@pytest.fixture(scope="module")
def model():
    return rd.load_urdf(str(bundled_urdf("rbd_arm7")))


def make_loop(model, mode="held", **settings):
    settings = {"disturbance_time_constant": 0.0, "predict_delay": False, **settings}
    loop = ControlLoop(model, MPCProblem.from_model(model, horizon=10, dt=DT, mode=mode), LoopSettings(**settings))
    loop.warm_up()
    return loop


def linearization_message(model, q, v, stamp_ns, scale_A=1.0, dt=DT):
    """A duck-typed rbd_deriv/Linearization, built the way the dynamics node packs one."""
    data = model.create_data()
    u = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()
    A, B = rd.linearize(model, data, q, v, u, dt)
    fields = linearization_fields(dt, np.r_[q, v], u, scale_A * A, B, data.x_next)
    stamp = types.SimpleNamespace(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
    return types.SimpleNamespace(header=types.SimpleNamespace(stamp=stamp),
                                 **linearization_sizes(model.joint_names, model.nq, model.nv), **fields)


def feed(loop, model, q, v, stamp_ns, now_ns=None, linearization=True, scale_A=1.0):
    loop.take_joint_states(list(model.joint_names), q, v, [], stamp_ns, now_ns)
    if linearization:
        message = linearization_message(model, q, v, stamp_ns, scale_A)
        loop.take_linearization(linearization_arrays(message, model.nq, model.nv, model.joint_names), stamp_ns,
                                stamp_ns if now_ns is None else now_ns)


def check_command(model, result):
    limit = np.asarray(model.effort_limit)
    assert np.isfinite(result.command).all()
    assert (np.abs(result.command) <= limit).all()


def gravity(model, q):
    return clamp_torque(rd.gravity_torques(model, model.create_data(), q), -np.asarray(model.effort_limit),
                        np.asarray(model.effort_limit))


@pytest.mark.parametrize("t0", [1_000 * 10**9, 1_763_900_000 * 10**9])  # a simulated clock, the wall clock
def test_fresh_inputs_give_the_plan_of_the_controller(model, t0):
    loop = make_loop(model)
    assert loop.tick(t0) is None and loop.sources[CommandSource.NO_STATE] == 1
    goal = Q + 0.05
    loop.set_goal(goal)
    v = np.zeros(model.nv)
    feed(loop, model, Q, v, t0)
    result = loop.tick(t0 + 2 * MS)
    assert result.source is CommandSource.PLAN and result.plan is not None
    check_command(model, result)
    np.testing.assert_array_equal(result.command, clamp_torque(result.plan.torque, loop.lower, loop.upper))
    # Without prediction the plan starts at the measured state and its stamp.
    assert_close(result.plan.states[0], np.r_[Q, v], what="first knot")
    assert result.plan_start_ns == t0
    # An independent controller on the same inputs plans the same first torque.
    twin = make_loop(model)
    twin.set_goal(goal)
    feed(twin, model, Q, v, t0)
    assert_close(twin.tick(t0 + 2 * MS).command, result.command, what="same inputs, same command")
    # Moving towards a goal 0.05 rad away from rest is not gravity hold.
    assert np.abs(result.command - gravity(model, Q)).max() > 1.0


def test_every_tick_gives_a_policy_the_plans_or_the_safe_command_without_gain(model):
    loop = make_loop(model, policy_validity=0.05, state_timeout=0.05)
    t0 = 5 * 10**9
    loop.set_goal(Q + 0.05)
    feed(loop, model, Q, np.zeros(model.nv), t0)
    result = loop.tick(t0 + 2 * MS)
    policy = result.policy
    # The plan's first knots over the validity (50 ms: 6 knots of 10 ms), the gain of its first knot.
    assert policy.stamp_ns == result.plan_start_ns == t0 and policy.knots == 6 and policy.valid_for == 0.05
    np.testing.assert_array_equal(policy.x_ref, result.plan.states[:6])
    np.testing.assert_array_equal(policy.u_ff, result.plan.torques[:6])
    np.testing.assert_array_equal(policy.u_ff[0], result.command)
    np.testing.assert_array_equal(policy.gain, result.plan.gain)
    assert np.abs(policy.gain).max() > 1.0 and (np.abs(policy.u_ff) <= loop.upper).all()
    # A safe command is sent as a policy too: that torque, no gain, stamped when it is decided.
    result = loop.tick(t0 + 60 * MS)
    assert result.source is CommandSource.STALE_STATE
    held = result.policy
    assert held.knots == 1 and not held.gain.any() and held.stamp_ns == t0
    np.testing.assert_array_equal(held.u_ff[0], result.command)
    assert_close(held.torque(model, Q + 0.2, np.ones(model.nv), t0 + 70 * MS, loop.lower, loop.upper),
                 gravity(model, Q), what="the hold whatever the state")
    predicting = make_loop(model, predict_delay=True)
    feed(predicting, model, Q, np.zeros(model.nv), t0)
    assert predicting.tick(t0 + 60 * MS).policy.stamp_ns == t0 + 60 * MS  # stamped now, not at the old state


def test_stale_state_holds_with_gravity_at_the_last_state(model):
    loop = make_loop(model, state_timeout=0.05)
    t0 = 5 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0)
    loop.take_compensation(list(model.joint_names), np.full(model.nv, 1.0), t0)
    assert loop.tick(t0 + 10 * MS).source is CommandSource.PLAN
    result = loop.tick(t0 + 60 * MS)
    assert result.source is CommandSource.STALE_STATE and result.previous_source is CommandSource.PLAN
    # The compensation torques are as old as the state: gravity is computed at the last state.
    assert_close(result.command, gravity(model, Q), what="gravity hold")
    # A stamp from the future beyond the timeout is not trusted either.
    feed(loop, model, Q, np.zeros(model.nv), t0 + 10**9)
    assert loop.tick(t0 + 100 * MS).source is CommandSource.STALE_STATE


def test_stale_linearization_holds_with_the_fresh_compensation(model):
    loop = make_loop(model, linearization_timeout=0.02)
    t0 = 5 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0)
    assert loop.tick(t0).source is CommandSource.PLAN
    compensation = np.linspace(-3.0, 3.0, model.nv)
    names = list(reversed(model.joint_names))
    loop.take_joint_states(list(model.joint_names), Q, np.zeros(model.nv), [], t0 + 30 * MS)
    loop.take_compensation(names, compensation[::-1], t0 + 30 * MS)
    result = loop.tick(t0 + 30 * MS)
    assert result.source is CommandSource.STALE_LINEARIZATION
    np.testing.assert_array_equal(result.command, compensation)


def test_a_failed_solve_gives_the_safe_command_and_is_counted(model):
    loop = make_loop(model)
    t0 = 5 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0, scale_A=1e150)
    result = loop.tick(t0)
    assert result.source is CommandSource.SOLVER_FAILURE and result.plan is None
    assert loop.refusals.counts["solver_failure"] == 1 and "solver status" in result.trouble
    assert_close(result.command, gravity(model, Q), what="gravity hold")
    # Good inputs again: planning again.
    feed(loop, model, Q, np.zeros(model.nv), t0 + 5 * MS)
    assert loop.tick(t0 + 5 * MS).source is CommandSource.PLAN


def test_extreme_inputs_never_give_nan_or_an_over_limit_command(model, monkeypatch):
    loop = make_loop(model, disturbance_time_constant=0.01, predict_delay=True)
    t0 = 5 * 10**9
    names = list(model.joint_names)
    feed(loop, model, Q, np.zeros(model.nv), t0)
    check_command(model, loop.tick(t0))
    # Finite but absurd: refused at the door, the last good state stays and the loop plans on.
    huge = np.full(model.nv, 1e307)
    with pytest.raises(JointStateError) as caught:
        loop.take_joint_states(names, Q, huge, [], t0 + 5 * MS, t0 + 5 * MS)
    assert caught.value.reason == "implausible"
    result = loop.tick(t0 + 5 * MS)
    check_command(model, result)
    assert result.source is CommandSource.PLAN
    # Past the door (its bound lifted), the tick itself survives: the observer learns nothing from it, the
    # solve is refused or fails, the command holds and the failure is counted.
    monkeypatch.setitem(PLAUSIBLE, "velocity", math.inf)
    before = loop.refusals.total
    loop.take_joint_states(names, Q, huge, [], t0 + 6 * MS, t0 + 6 * MS)
    result = loop.tick(t0 + 6 * MS)
    check_command(model, result)
    assert result.source is not CommandSource.PLAN and loop.refusals.total == before + 1
    assert np.isfinite(loop.observer.estimate).all()
    # Compensation torques far beyond the limits are refused: the hold takes gravity computed here, not
    # the full effort limit that clamping 1e308 would give.
    with pytest.raises(MessageError) as caught:
        loop.take_compensation(names, np.full(model.nv, 1e308), t0 + 6 * MS, t0 + 6 * MS)
    assert caught.value.reason == "implausible" and loop.compensation is None
    monkeypatch.setitem(PLAUSIBLE, "velocity", 1e4)
    loop.take_joint_states(names, Q, np.zeros(model.nv), [], t0 + 7 * MS, t0 + 7 * MS)
    result = loop.tick(t0 + 200 * MS)  # the state is stale by now: the safe command
    assert result.source is CommandSource.STALE_STATE
    assert_close(result.command, gravity(model, Q), what="hold with gravity")


def test_inputs_from_the_future_are_refused_and_block_nothing(model):
    loop = make_loop(model, max_stamp_lead=0.1)
    t0 = 5 * 10**9
    names = list(model.joint_names)
    feed(loop, model, Q, np.zeros(model.nv), t0)
    assert loop.tick(t0).source is CommandSource.PLAN
    hour = 3600 * 10**9
    with pytest.raises(JointStateError) as caught:
        loop.take_joint_states(names, Q, np.zeros(model.nv), [], t0 + hour, t0 + MS)
    assert caught.value.reason == "future"
    for take in (lambda: loop.take_compensation(names, np.zeros(model.nv), t0 + hour, t0 + MS),
                 lambda: loop.take_linearization(linearization_arrays(linearization_message(model, Q, np.zeros(
                     model.nv), t0 + hour), model.nq, model.nv, names), t0 + hour, t0 + MS)):
        with pytest.raises(MessageError) as caught:
            take()
        assert caught.value.reason == "future"
    # Every good state after it is taken: the loop keeps planning.
    for k in range(1, 20):
        now = t0 + k * 5 * MS
        feed(loop, model, Q, np.zeros(model.nv), now, now)
        assert loop.tick(now).source is CommandSource.PLAN
    assert loop.state.stamp_ns == t0 + 19 * 5 * MS


def test_prediction_carries_the_state_to_when_the_command_acts(model):
    loop = make_loop(model, predict_delay=True, command_delay=0.004)
    t0 = 5 * 10**9
    v = np.linspace(-0.5, 0.5, model.nv)
    feed(loop, model, Q, v, t0)
    first = loop.tick(t0)
    # No command sent yet: nothing to predict with, the plan starts at the measurement.
    assert first.plan_start_ns == t0
    assert_close(first.plan.states[0], np.r_[Q, v], what="first knot without history")
    # The command sent at t0 acts from t0 + 4 ms: a state from t0 + 5 ms can be carried forward with it.
    feed(loop, model, Q, v, t0 + 5 * MS)
    second = loop.tick(t0 + 6 * MS)
    assert second.plan_start_ns == t0 + 10 * MS  # now + command_delay
    history = CommandHistory()
    history.record(0.0, first.command)
    q_expected, v_expected, reached = predict_state(model, model.create_data(), Q, v, 0.005, 0.010, history, 0.004)
    assert reached == 0.010
    assert_close(second.plan.states[0], np.r_[q_expected, v_expected], what="predicted first knot")


def test_refused_inputs_leave_the_last_good_ones(model):
    loop = make_loop(model)
    t0 = 5 * 10**9
    names = list(model.joint_names)
    feed(loop, model, Q, np.zeros(model.nv), t0)
    good = loop.linearization
    with pytest.raises(JointStateError) as caught:
        loop.take_joint_states(names, np.full(model.nv, np.nan), np.zeros(model.nv), [], t0 + MS)
    assert loop.refuse("joint_states", caught.value) and loop.refusals.counts["joint_states/non_finite"] == 1
    # Efforts that are not all finite, or not plausible, are dropped, positions and velocities kept.
    loop.take_joint_states(names, Q, np.zeros(model.nv), np.full(model.nv, np.nan), t0 + 2 * MS)
    assert loop.state.stamp_ns == t0 + 2 * MS and not loop.state.has_effort
    loop.take_joint_states(names, Q, np.zeros(model.nv), np.full(model.nv, 1e300), t0 + 3 * MS)
    assert loop.state.stamp_ns == t0 + 3 * MS and not loop.state.has_effort

    message = linearization_message(model, Q, np.zeros(model.nv), t0, dt=0.02)
    with pytest.raises(MessageError) as caught:
        loop.take_linearization(linearization_arrays(message, model.nq, model.nv, names), t0, t0)
    assert caught.value.reason == "values"
    message.x = message.x[:3]
    with pytest.raises(MessageError) as caught:
        linearization_arrays(message, model.nq, model.nv, names)
    loop.refuse("linearization", caught.value)
    assert loop.refusals.counts["linearization/size"] == 1
    assert loop.linearization is good

    for bad_names, effort, reason in ((names[:6], np.ones(6), "joints"), (names, np.full(7, np.inf), "effort"),
                                      (names, np.ones(3), "effort"), (names, np.full(7, 1e9), "implausible")):
        with pytest.raises(MessageError) as caught:
            loop.take_compensation(bad_names, effort, t0)
        assert caught.value.reason == reason
    assert loop.compensation is None
    with pytest.raises(rd.InputError, match="missing"):
        loop.take_reference(names[:6], t0, [0.0], np.zeros((1, 6)))
    with pytest.raises(rd.InputError, match="one row per knot"):
        loop.take_reference(names, t0, [0.0, 1.0], [[0.0] * 7, [0.0] * 6])
    with pytest.raises(rd.InputError, match="increasing"):
        loop.take_reference(names, t0, [1.0, 0.0], np.zeros((2, 7)))
    with pytest.raises(rd.InputError, match="finite values"):
        loop.set_goal([0.0])
    # Run-time parameters: the goal is taken, a legged robot's motion is refused with its reason.
    assert loop.set_parameters({"goal_positions": [0.1] * 7}, {"goal_positions"}) is None
    assert "goal_positions: " in loop.set_parameters({"goal_positions": [0.1]}, {"goal_positions"})
    assert "legged" in loop.set_parameters({"idle_gait": "stand"}, {"idle_gait"})
    assert loop.refuse("reference", rd.InputError("x")) is not None  # no reason: counted under the kind
    assert loop.refusals.counts["reference"] == 1


def test_reference_is_followed_at_its_stamped_time(model):
    loop = make_loop(model)
    t0 = 7 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0)
    loop.tick(t0)
    names = list(reversed(model.joint_names))
    target = Q + 0.1
    duration = loop.take_reference(names, t0 + 10**9, [0.0, 1.0], np.vstack([Q[::-1], target[::-1]]))
    assert duration == 1.0
    positions, _, _ = loop.reference.sample(np.array([1.0, 1.5, 2.0]))  # loop seconds: t0 is 0
    assert_close(positions[0], Q, what="before its start")
    assert_close(positions[1], (Q + target) / 2, what="half way")
    assert_close(positions[2], target, what="at its end")


def test_diagnostics_report_rates_sources_and_refusals(model):
    loop = make_loop(model)
    t0 = 5 * 10**9
    for k in range(4):
        feed(loop, model, Q, np.zeros(model.nv), t0 + k * 5 * MS)
        loop.tick(t0 + k * 5 * MS)
    loop.refuse("compensation", MessageError("x", "joints"))
    healthy, summary, values = loop.diagnostics(elapsed=2.0)
    assert healthy and summary == "tracking"
    assert values["rate_hz"] == "2.0" and values["commands_plan"] == "4" and values["mode"] == "held"
    assert values["refused_compensation/joints"] == "1"
    for key in ("solve_time_p50_us", "solve_time_p99_us", "solve_time_max_us", "linearization_age_p50_ms",
                "tick_time_p99_us", "status", "iterations", "cost", "active_torque_bounds"):
        assert key in values, key
    assert loop.diagnostics(elapsed=1.0)[2]["rate_hz"] == "0.0"  # a new window


def test_relinearize_mode_needs_no_linearization(model):
    loop = make_loop(model, mode="relinearize")
    t0 = 5 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0, linearization=False)
    result = loop.tick(t0)
    assert result.source is CommandSource.PLAN
    check_command(model, result)


@pytest.mark.parametrize("fields, match", [
    (dict(rate_hz=0.0), "rate_hz"),
    (dict(state_timeout=-1.0), "state_timeout"),
    (dict(command_delay=0.05), "command_delay"),
    (dict(disturbance_bound=1.5), "disturbance_bound"),
    (dict(disturbance_time_constant=float("nan")), "disturbance_time_constant"),
])
def test_bad_settings_are_refused(fields, match):
    with pytest.raises(rd.InputError, match=match):
        LoopSettings(**fields)


CENTER = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])


def mujoco_arm(model):
    """The bundled arm in MuJoCo at 1 kHz, with damping and friction the loop does not model, at CENTER."""
    from rbd_deriv.sim import make_plant

    limit = np.asarray(model.effort_limit)
    plant = make_plant("mujoco", str(bundled_urdf("rbd_arm7")), dt=1e-3, damping=0.001 * limit,
                       friction=0.002 * limit, model=model)
    plant.reset(CENTER)
    return plant


def drive(model, loop, plant, t0, seconds, linearized=lambda t: True, error=None):
    """The loop at 200 Hz driving ``plant`` for ``seconds``: each state 1 ms old, each command applied one
    physics step late, a linearization with every tick for which ``linearized(t)`` holds (t [s] from t0).

    Returns:
        (times (n,) [s], positions (n, nv), velocities (n, nv)) of the plant at each physics step.
    """
    data, command, pending, log = model.create_data(), None, None, []
    for k in range(int(round(seconds * 1e3))):
        now = t0 + k * MS
        stamp = now - MS
        q, v = plant.q, plant.v
        loop.take_joint_states(list(model.joint_names), q, v, [], stamp)
        if k % 5 == 0:
            if linearized(k * 1e-3):
                u = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()
                A, B = rd.linearize(model, data, q, v, u, DT)
                loop.take_linearization({"A": A.copy(), "B": B.copy(), "x": np.r_[q, v], "u": u,
                                         "x_next": data.x_next.copy(), "dt": DT}, stamp, now)
            result = loop.tick(now)
            check_command(model, result)
            pending = result.command
        if command is not None:
            plant.step(command, 1)
        command = pending
        log.append((k * 1e-3, plant.q.copy(), plant.v.copy()))
    times, positions, velocities = zip(*log)
    return np.array(times), np.array(positions), np.array(velocities)


def test_closed_loop_with_delay_tracks_a_moving_reference(model):
    """The loop driving a simulated arm (damping and friction it does not model) at 200 Hz, each state 1 ms
    old and each command applied one physics step late: it follows a moving reference closely."""
    from rbd_deriv.control import SinusoidReference

    plant = mujoco_arm(model)
    loop = make_loop(model, disturbance_time_constant=0.01, predict_delay=True)
    reference = SinusoidReference(CENTER, 0.3, np.linspace(0.2, 0.5, 7), ramp=0.5)
    t0, start = 3 * 10**9, 0.2
    times = np.arange(0.0, 2.5, 0.02)
    positions, velocities, _ = reference.sample(times)
    loop.take_reference(list(model.joint_names), t0 + int(start * 1e9), times, positions, velocities)
    t, q, _ = drive(model, loop, plant, t0, 2.0)
    window = (t - start >= 0.0) & (t - start <= 1.7)
    errors = q[window] - reference.sample(t[window] - start)[0]
    assert loop.sources[CommandSource.PLAN] == 400
    # About 2 mrad RMS here; a loop that does not track (stale plans, a wrong sign) is off by tenths of a rad.
    assert np.sqrt(np.mean(errors ** 2)) < 0.005 and np.abs(errors).max() < 0.03, np.abs(errors).max(axis=0)
    assert loop.reference_pulled == 0, "tracking closely, the reference is never shifted"


def test_a_goal_far_away_is_reached_without_a_run_at_full_torque(model):
    """A goal up to 1 rad from where the arm stands, on every joint at once: the arm gets there and stops,
    never faster than its URDF velocity limits allow by much. Left to a linear model over a 0.2 s horizon with
    the torque box, the plan runs at full torque toward a goal whose stop it cannot see, and the arm spins
    off at hundreds of rad/s."""
    plant = mujoco_arm(model)
    loop = ControlLoop(model, MPCProblem.from_model(model, horizon=20, dt=DT), LoopSettings())
    loop.warm_up()
    goal = CENTER + np.array([1.0, -0.5, 1.0, 0.5, 1.0, -0.5, 1.0])
    loop.set_goal(goal)
    t, q, v = drive(model, loop, plant, 3 * 10**9, 3.0)
    speed = np.abs(v).max(axis=0)
    assert (speed < 1.8 * np.asarray(model.velocity_limit)).all(), speed
    assert np.abs(q[-1] - goal).max() < 1e-3, q[-1] - goal
    assert loop.sources[CommandSource.PLAN] == 600 and loop.reference_pulled > 0


def test_tracking_resumes_after_the_linearizations_stop_for_a_second(model):
    """The dynamics node stalls for 1 s mid-motion: the loop holds with gravity compensation while its
    linearization is stale (the arm drifts), then takes the reference up again from wherever the arm is. It
    used to warm-start from a plan the arm never followed, toward a reference far off, and threw the arm."""
    from rbd_deriv.control import SinusoidReference

    plant = mujoco_arm(model)
    loop = ControlLoop(model, MPCProblem.from_model(model, horizon=20, dt=DT), LoopSettings())
    loop.warm_up()
    reference = SinusoidReference(CENTER, np.array([0.6, 0.35, 0.6, 0.4, 0.7, 0.5, 0.8]),
                                  np.linspace(0.2, 0.5, 7), ramp=1.0)
    t0 = 3 * 10**9
    times = np.arange(0.0, 5.0, 0.02)
    positions, velocities, _ = reference.sample(times)
    loop.take_reference(list(model.joint_names), t0, times, positions, velocities)
    t, q, v = drive(model, loop, plant, t0, 4.5, linearized=lambda t: not 1.5 <= t < 2.5)
    # The last linearization before the stall stays fresh for linearization_timeout (10 ticks).
    assert 185 <= loop.sources[CommandSource.STALE_LINEARIZATION] <= 200
    drift = np.abs(q[2499] - reference.sample(np.array([2.499]))[0][0]).max()
    assert drift > 0.3, f"the stall must leave the arm well off its reference ({drift:.3f} rad)"
    assert (np.abs(v).max(axis=0) < 1.8 * np.asarray(model.velocity_limit)).all(), np.abs(v).max(axis=0)
    late = t >= 3.5
    errors = q[late] - reference.sample(t[late])[0]
    assert np.abs(errors).max() < 0.03, np.abs(errors).max(axis=0)
    assert loop.sources[CommandSource.SOLVER_FAILURE] == 0


def test_a_clock_that_stands_still_holds_with_gravity_and_plans_again_once_it_moves(model):
    loop = make_loop(model, state_timeout=0.05)
    t0 = 5 * 10**9
    feed(loop, model, Q, np.zeros(model.nv), t0)
    assert loop.tick(t0 + 10 * MS, monotonic_ns=0).source is CommandSource.PLAN
    # Simulated time switched on without /clock: the clock reads 0.
    result = loop.tick(0, monotonic_ns=10 * MS)
    assert result.source is CommandSource.STALE_CLOCK and result.plan is None
    assert_close(result.command, gravity(model, Q), what="gravity hold")
    # Held as a policy without gain, stamped at the newest state's time (the robot's clock as last heard).
    assert not result.policy.gain.any() and result.policy.stamp_ns == t0
    # A clock stuck at one value for longer than state_timeout of the monotonic clock: the same.
    assert loop.tick(t0 + 20 * MS, monotonic_ns=20 * MS).source is not CommandSource.STALE_CLOCK
    assert loop.tick(t0 + 20 * MS, monotonic_ns=71 * MS).source is CommandSource.STALE_CLOCK
    feed(loop, model, Q, np.zeros(model.nv), t0 + 30 * MS)
    assert loop.tick(t0 + 31 * MS, monotonic_ns=72 * MS).source is CommandSource.PLAN
    assert loop.diagnostics(1.0)[2]["commands_stale_clock"] == "2"


def test_policy_stamps_never_go_backwards_when_the_clock_stops(model):
    """With delay prediction a plan's policy is stamped when its command acts, after the state's time; the hold
    of a clock that stands still must not be stamped before it (the robot side refuses an older policy)."""
    loop = make_loop(model, predict_delay=True, command_delay=0.004)
    t0 = 5 * 10**9
    for k in range(3):
        feed(loop, model, Q, np.zeros(model.nv), t0 + 5 * k * MS)
        planned = loop.tick(t0 + (5 * k + 2) * MS, monotonic_ns=k * MS)
    assert planned.source is CommandSource.PLAN and planned.policy.stamp_ns > loop.state.stamp_ns
    held = loop.tick(0, monotonic_ns=10 * MS)
    assert held.source is CommandSource.STALE_CLOCK
    assert held.policy.stamp_ns >= planned.policy.stamp_ns


def test_the_stop_command_holds_the_measured_posture_as_a_policy_without_gain(model):
    """Deactivating the node: the hold with gravity compensation at the measured state, valid for policy_validity
    from now and never stamped before the plans sent; nothing before a state."""
    loop = make_loop(model, policy_validity=0.1)
    t0 = 1_000 * 10**9
    assert loop.stop_command(t0) is None
    loop.set_goal(Q + 0.3)
    feed(loop, model, Q, np.zeros(model.nv), t0)
    plan = loop.tick(t0 + MS)
    assert plan.source is CommandSource.PLAN
    command, policy = loop.stop_command(t0 + 2 * MS)
    assert_close(command, gravity(model, Q), what="stop command")
    assert not np.allclose(plan.command, command), "the plan at Q is already the hold: nothing is tested"
    np.testing.assert_array_equal(policy.u_ff[0], command)
    assert not np.any(policy.gain)
    np.testing.assert_array_equal(policy.x_ref[0], np.r_[Q, np.zeros(model.nv)])
    assert policy.stamp_ns == max(t0 + 2 * MS, plan.policy.stamp_ns) and policy.valid_for == 0.1
