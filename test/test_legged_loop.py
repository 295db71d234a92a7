"""Tests of rbd_deriv.control.legged_loop: the legged MPC's tick policy, without ROS.

Oracles: the inputs themselves (the state the loop assembles from joint states in any order and an
odometry is the robot's state), the gait's own table and the knot rule written out (the phase follows the
clock, each plan starts at the first knot after the tick and its latency), the library's statics
(``static_torques`` at the measured posture for the safe command), the effort limits (never exceeded,
never NaN, whatever the inputs), and physics: solo12 in MuJoCo, its policies applied at 1 kHz by the robot
side, trots and walks under ticks that are late and off the gait's grid.
"""

from __future__ import annotations

import time

import collections

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.legged import LeggedMPC, LeggedWeights
from rbd_deriv.control.statics import static_torques
from rbd_deriv.control.legged_loop import LeggedLoop
from rbd_deriv.control.legged_settings import LeggedLoopSettings, make_gait, parse_gait_table
from rbd_deriv.control.safety import CommandSource
from rbd_deriv.control.policy import PolicyExecutor
from rbd_deriv.control.schedule import Gait
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import JointStateError
from rbd_deriv.messages import MessageError
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf

MS = 1_000_000  # ns
#: config/mpc_node.yaml's trot: 0.4 s, 8 knots of 20 ms in the air per diagonal pair, 2 on four feet between.
TABLE = parse_gait_table(["trot: period=0.4 duty=0.6 offsets=0.5,0.0,0.0,0.5"])
START = 1_700_000_000 * 1_000_000_000  # a wall-clock epoch [ns]: the loop must keep its precision


@pytest.fixture(scope="module")
def solo():
    info = LEGGED_ROBOTS["solo12"]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf("solo12"), info["posture"], missing="neutral")
    feet = info["feet"]
    mpcs = {name: LeggedMPC(model, feet, make_gait(name, feet, ["point"] * 4, TABLE, 0.02), posture, horizon=10,
                            dt=0.02) for name in ("stand", "trot")}
    return model, feet, posture, mpcs


def feed(loop, model, q, v, stamp_ns, order=None, base_stamp_ns=None):
    """Give the loop the state (q, v) as a robot publishes it: joint_states of the actuated joints (in
    ``order``), odometry of the base."""
    names = list(model.actuated_joint_names)
    order = range(len(names)) if order is None else order
    rows_q = [model.idx_q[names[i]] for i in order]
    rows_v = [model.idx_v[names[i]] for i in order]
    loop.take_joint_states([names[i] for i in order], q[rows_q], v[rows_v], [], stamp_ns, stamp_ns)
    stamp = stamp_ns if base_stamp_ns is None else base_stamp_ns
    loop.take_odometry(q[:3], q[3:7], v[:3], v[3:6], stamp, stamp_ns)


def within(command, loop):
    return np.isfinite(command).all() and (command <= loop.upper).all() and (command >= loop.lower).all()


def test_assembles_the_state_and_sends_the_plan_policy(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "stand")
    assert loop.tick(START) is None, "nothing known about the robot: no command"
    rng = np.random.default_rng(3)
    q = posture.copy()
    q[7:] += 0.01 * rng.standard_normal(model.nq - 7)
    v = 0.01 * rng.standard_normal(model.nv)
    order = rng.permutation(model.nv - 6)
    loop.take_joint_states(np.array(model.actuated_joint_names)[order].tolist(),
                           q[7:][order], v[6:][order], [], START, START)
    assert loop.tick(START) is None, "joints without the base: still no command"
    loop.take_odometry(q[:3], q[3:7], v[:3], v[3:6], START, START)
    np.testing.assert_array_equal(loop.state.q, q)
    np.testing.assert_array_equal(loop.state.v, v)
    started = time.perf_counter()
    tick = loop.tick(START + MS)
    took = int((time.perf_counter() - started) * 1e9)
    assert tick.source is CommandSource.PLAN and tick.plan.sendable
    assert within(tick.command, loop)
    np.testing.assert_array_equal(tick.command, np.clip(tick.plan.torque, loop.lower, loop.upper))
    policy = tick.policy
    # The robot is held still until its first policy: that starts the gait when its solve is done, plus the
    # 2 ms of latency.
    assert START + 3 * MS <= policy.stamp_ns <= START + 3 * MS + took
    # Nothing was sent before: nothing to carry the state forward with.
    np.testing.assert_allclose(policy.x_ref[0], np.r_[q, v], rtol=0, atol=1e-15)
    np.testing.assert_array_equal(policy.u_ff[0], tick.plan.torque)
    np.testing.assert_array_equal(policy.gain, tick.plan.gain)
    assert policy.knots == 6, "0.1 s of validity at 20 ms per knot: knots 0..5"



def test_the_policy_carries_the_riccati_gains_of_its_first_knots(solo):
    model, feet, posture, mpcs = solo
    for gain_knots, expected in ((4, 4), (20, 6)):    # 0.1 s of validity: 6 knots, so at most 6 gains
        loop = LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(gain_knots=gain_knots))
        feed(loop, model, posture, np.zeros(model.nv), START)
        tick = loop.tick(START + MS)
        assert tick.source is CommandSource.PLAN
        gains = tick.policy.gains
        assert gains.shape == (expected, model.nv - 6, 2 * model.nv)
        np.testing.assert_array_equal(gains, mpcs["trot"].solver.K[:expected])
        np.testing.assert_array_equal(gains[0], tick.plan.gain)
        # The trot lifts two feet within these knots: their gains are not knot 0's.
        assert np.abs(gains[-1] - gains[0]).max() > 1e-3 * np.abs(gains[0]).max()

def test_gait_phase_and_plan_stamps_follow_the_knot_grid(solo):
    """Ticks every 7 ms on a gait of 20 ms knots, 5 ms of latency: each plan starts at the first knot of the
    gait at or after its tick plus the latency (the phase steps once per 20 ms, wraps at the period) and is
    stamped with that knot's time, so that the policies' stamps never go backwards and the robot side keeps
    the previous plan until then; its first state is the measured one carried to that time."""
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(latency=0.005, adaptive_latency=False))
    # As the node does before its first input: the first plan starts when its solve is done, and a solve that
    # compiles a kernel (the impulses', at its first use after a build) would move the gait's start by seconds.
    loop.warm_up()
    x = np.r_[posture, np.zeros(model.nv)]
    period = mpcs["trot"].gait.period
    assert period == 20
    phases, stamps = [], []
    ticks = 100  # 0.7 s: every phase of the 0.4 s period comes, however long the first solve took
    for k in range(ticks):
        stamp = START + k * 7 * MS
        feed(loop, model, x[:model.nq], x[model.nq:], stamp)
        sent_before = list(loop._sent)  # the policies the last tick's prediction ran under
        tick = loop.tick(stamp)
        assert tick.source is CommandSource.PLAN, (k, tick.source, tick.trouble)
        phases.append(loop.mpc.phase)
        stamps.append(tick.policy.stamp_ns)
    # The first plan started the gait when it was solved; each next one at the first knot at or after its
    # tick plus 5 ms (ceil), never before the last one sent.
    gait_start = stamps[0]
    knots = [0]
    for k in range(1, ticks):
        knots.append(max(knots[-1], -(-(START + k * 7 * MS + 5 * MS - gait_start) // (20 * MS))))
    assert phases == [n % period for n in knots] and max(phases) == period - 1
    assert stamps == [gait_start + n * 20 * MS for n in knots]
    # The last plan starts where the robot, measured at rest at its last tick, goes under the policies sent
    # before it (its own policy replaces one stamped at the same knot, which the prediction used).
    state_time = ((ticks - 1) * 7) * 1e-3  # seconds from the loop's first stamp, START
    sent_after = loop._sent
    loop._sent = collections.deque(sent_before, maxlen=sent_after.maxlen)
    # The plan's start time as the loop computes it (its stamp is that rounded to the nanosecond, and a
    # nanosecond moves the end of the prediction by 1e-8 rad/s on a swinging leg).
    start_time = loop._gait_start + knots[-1] * mpcs["trot"].dt
    assert abs(START + start_time * 1e9 - stamps[-1]) <= 1.0
    q0, v0 = loop.predict(x[:model.nq], x[model.nq:], state_time, start_time)
    loop._sent = sent_after
    np.testing.assert_allclose(tick.policy.x_ref[0], np.r_[q0, v0], rtol=1e-9, atol=1e-9)
    assert np.abs(v0).max() > 1e-6, "the policies sent move the robot: the prediction is not the measurement"
    loop.set_gait("stand")
    later = START + (ticks * 7 + 100) * MS
    feed(loop, model, x[:model.nq], x[model.nq:], later)
    assert loop.tick(later).source is CommandSource.PLAN and loop.mpc is mpcs["stand"]
    with pytest.raises(InputError, match="gallop"):
        loop.set_gait("gallop")
    assert loop.gait == "stand"
    # The node's run-time parameters: a known gait is taken, an unknown one and a fixed base's goal refused.
    values = {"gait": "trot", "goal_positions": [0.0]}
    assert loop.set_parameters(values, {"gait"}) is None and loop.gait == "trot"
    assert "gallop" in loop.set_parameters({"gait": "gallop"}, {"gait"}) and loop.gait == "trot"
    assert "fixed-base" in loop.set_parameters(values, {"goal_positions"})


def run_in_mujoco(model, loop, seconds, events, seed=0, period=(0.02, 0.035), delay=0.008, stall=None):
    """solo12 on MuJoCo's floor, its policies applied at 1 kHz by the robot side (a PolicyExecutor, through
    the message's fields as the simulator node takes them), ticks every ``period`` (uniform) [s] and each
    policy arriving ``delay`` [s] after its tick; ``events`` {time [s]: callable(loop)}. Returns the base's
    positions (K, 3) once per 10 ms, the ticks' sources and whether it fell."""
    from rbd_deriv.sim import Ground, make_plant
    from rbd_deriv.sim.ground import rest_on_floor

    ground = Ground(tuple(loop.feet))
    plant = make_plant("mujoco", str(EXAMPLE_ROBOTS["solo12"]), dt=1e-3, model=model, ground=ground)
    plant.reset(rest_on_floor(model, loop.mpc.x_ref[:model.nq], ground))
    robot = PolicyExecutor(model, command_timeout=0.0)
    names = list(model.actuated_joint_names)
    qi, vi = [model.idx_q[n] for n in names], [model.idx_v[n] for n in names]
    rng = np.random.default_rng(seed)
    next_tick, arrivals, base, sources = 0, [], [], []
    for k in range(int(round(seconds * 1000))):
        now = START + k * MS
        for at in [at for at in events if abs(at * 1000 - k) < 0.5]:
            events[at](loop)
        if stall is not None and stall[0] * 1000 <= k < stall[1] * 1000:
            next_tick = k + 1  # the MPC stalls: no tick, the robot runs on the policy it has
        if k >= next_tick:
            next_tick = k + int(round(rng.uniform(*period) * 1000))
            q, v = plant.q, plant.v
            loop.take_joint_states(names, q[qi], v[vi], [], now, now)
            loop.take_odometry(q[:3], q[3:7], v[:3], v[3:6], now, now)
            tick = loop.tick(now)
            sources.append(tick.source)
            policy = tick.policy
            fields = {"state_joint_names": list(model.joint_names), "joint_names": names, "x_ref": policy.x_ref,
                      "u_ff": policy.u_ff, "K": policy.gain, "knot_dt": policy.knot_dt,
                      "valid_for": policy.valid_for}  # what the simulator node reads from the message
            arrivals.append((k + int(round(delay * 1000)), fields, policy.stamp_ns))
        while arrivals and arrivals[0][0] <= k:
            _, fields, stamp = arrivals.pop(0)
            robot.take_policy(fields, stamp, now)
        torque, _ = robot.torque(plant.q, plant.v, now)
        if torque is None:
            plant.hold()  # the brakes until the first policy, as the simulator node
        else:
            plant.step(torque)
        if k % 10 == 0:
            base.append(plant.q[:3].copy())
        if plant.fell:
            break
    return np.array(base), sources, plant.fell


def test_solo12_trots_and_walks_in_mujoco_with_ticks_off_the_gait_grid():
    """Ticks every 20 to 35 ms (never on the 20 ms knots for long), each policy reaching the robot 8 ms after
    its tick, and no tick at all for 0.25 s of the trot (a stalled MPC: the robot runs on one policy through
    a swing, with each knot's gain): solo12 stands, trots in place from 0.3 s, then walks at 0.2 m/s from
    1.3 s. It does not fall, every plan is sent, the base keeps its height, stays in place while trotting and
    then follows the walk."""
    pytest.importorskip("mujoco")
    info = LEGGED_ROBOTS["solo12"]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf("solo12"), info["posture"], missing="neutral")
    from rbd_deriv.sim import Ground
    from rbd_deriv.sim.ground import rest_on_floor
    posture = rest_on_floor(model, posture, Ground(info["feet"]))
    feet, kinds = info["feet"], ["point"] * 4
    # config/solo12.yaml's weights: the base held at its height and still, the swing feet tracked closely.
    weights = LeggedWeights(base_position=1e4, base_velocity=100.0, swing=1e5, cone=1.0)
    mpcs = {name: LeggedMPC(model, feet, make_gait(name, feet, kinds, TABLE, 0.02), posture, weights=weights)
            for name in ("stand", "trot")}
    loop = LeggedLoop(model, mpcs, "stand", LeggedLoopSettings(policy_validity=0.3, latency=0.012,
                                                                adaptive_latency=False, gain_knots=16))
    events = {0.3: lambda loop: loop.set_gait("trot"), 1.3: lambda loop: loop.take_cmd_vel(0.2, 0.0, 0.0)}
    base, sources, fell = run_in_mujoco(model, loop, 2.8, events, stall=(0.8, 1.05))
    assert not fell
    assert all(source is CommandSource.PLAN for source in sources), set(sources)
    assert np.abs(base[:, 2] - base[0, 2]).max() < 0.01, "no hop: the base keeps its height within 1 cm"
    trotting = base[40:130]  # 0.4 s to 1.3 s
    assert np.abs(trotting[:, :2] - base[0, :2]).max() < 0.02, "trotting in place"
    walked = base[-1, 0] - base[140, 0]  # 1.4 s to the end, 1.4 s at 0.2 m/s
    # (The command ramps up at 1 m/s^2: 0.2 s to reach 0.2 m/s.)
    assert 0.18 < walked < 0.34 and abs(base[-1, 1]) < 0.03, walked


def test_stale_state_holds_the_last_policy_then_the_static_torques(solo):
    model, feet, posture, mpcs = solo
    settings = LeggedLoopSettings(state_timeout=0.05, policy_validity=0.1)
    loop = LeggedLoop(model, mpcs, "stand", settings)
    q, v = posture.copy(), np.zeros(model.nv)
    feed(loop, model, q, v, START)
    good = loop.tick(START)
    assert good.source is CommandSource.PLAN
    # The joints keep coming, the base state stops: stale after 50 ms.
    q_moved = q.copy()
    q_moved[7:] += 0.02
    for k in range(1, 4):
        loop.take_joint_states(list(model.actuated_joint_names), q_moved[7:], v[6:], [], START + k * 20 * MS,
                               START + k * 20 * MS)
    now = START + 60 * MS
    held = loop.tick(now)
    assert held.source is CommandSource.STALE_STATE and held.plan is None
    assert held.policy is good.policy, "the last good policy is held while valid"
    expected = good.policy.torque(model, q_moved, v, now, loop.lower, loop.upper)
    np.testing.assert_array_equal(held.command, expected)
    # Past the policy's validity: the statics of the measured posture on the four feet.
    now = good.policy.expires_ns + 50 * MS  # (the first plan is stamped after its solve: START + its time)
    fallback = loop.tick(now)
    assert fallback.source is CommandSource.STALE_STATE
    # Sent as a policy that holds the measured posture at rest under the last good plan's final gain (the robot
    # side keeps feedback), stamped like the last one sent (the robot side refuses older stamps), valid for
    # policy_validity from now.
    np.testing.assert_array_equal(fallback.policy.gain, good.policy.gains[-1])
    np.testing.assert_array_equal(fallback.policy.x_ref[0], np.r_[loop.state.q, np.zeros(model.nv)])
    assert fallback.policy.stamp_ns == good.policy.stamp_ns
    u, _ = static_torques(model, q_moved, feet, ["point"] * 4, mpcs["stand"].dynamics.actuated)
    np.testing.assert_allclose(fallback.command, np.clip(u, loop.lower, loop.upper), rtol=1e-12, atol=1e-12)
    assert fallback.policy.expires_ns == now + 100 * MS
    values = loop.diagnostics(1.0)[2]
    assert values["commands_stale_state"] == "2" and values["safe_commands"] == "2"
    assert values["held_policy_ticks"] == "1"


def test_safe_command_never_over_a_limit_nor_nan(solo):
    """Joints far too weak to hold the robot: the statics ask more than the limits, so a failed solve does not
    push at the limits (which throws a robot that cannot be held there): the command is the admissible torque
    closest to zero, finite, strictly inside the limits."""
    model, feet, posture, _ = solo
    weak = np.full(12, 0.05)
    mpc = LeggedMPC(model, feet, Gait.standing(feet), posture, horizon=10, dt=0.02, effort=weak)
    loop = LeggedLoop(model, {"stand": mpc}, "stand", LeggedLoopSettings(policy_validity=0.01))
    u, _ = static_torques(model, posture, feet, ["point"] * 4, mpc.dynamics.actuated)
    assert (np.abs(u) > weak).any(), "the statics need more than the limits"
    feed(loop, model, posture, np.zeros(model.nv), START)
    commands = [loop.tick(START).command]
    original = mpc.solve

    def failing(*args, **kwargs):
        raise FloatingPointError("the solver blew up")

    mpc.solve = failing
    try:
        # Ticks 10 s apart: the first policy starts when its solve from scratch ends (now plus the solve's own
        # time, tens of milliseconds to a second on a loaded machine), and must have expired by the next tick.
        for k in range(1, 5):
            feed(loop, model, posture, np.zeros(model.nv), START + k * 10_000 * MS)
            tick = loop.tick(START + k * 10_000 * MS)
            assert tick.source is CommandSource.SOLVER_FAILURE
            commands.append(tick.command)
    finally:
        mpc.solve = original
    np.testing.assert_array_equal(commands[-1], np.zeros(12))
    for command in commands:
        assert within(command, loop) and (np.abs(command) <= weak).all()
    for command in commands[1:]:
        assert (np.abs(command) < 0.5 * weak).all(), "a failed solve is not a reason to push at the limits"
    assert loop.refusals.counts["internal_error"] == 4


def test_cone_refusal_is_counted_and_not_sent(solo):
    """Joints too weak to hold the bent legs let the feet push out of a narrow cone (mu = 0.05): the plan
    is refused and counted. Before any plan was sent, nothing is sent (the robot stays held as it was: the statics
    of its posture without feedback would let it fall); after one, the safe command."""
    model, feet, posture, _ = solo
    mpc = LeggedMPC(model, feet, Gait.standing(feet), posture, horizon=10, dt=0.02, mu=0.05,
                    effort=np.full(12, 1e-3))
    loop = LeggedLoop(model, {"stand": mpc}, "stand")
    feed(loop, model, posture, np.zeros(model.nv), START)
    assert loop.tick(START) is None and not loop.last_plan.cone_ok
    assert loop.refusals.counts["cone_refusal"] == 1
    values = loop.diagnostics(1.0)[2]
    assert values["commands_cone_refusal"] == "1" and loop.ticks == 0
    # The first knot's violation of the pyramid the solver keeps, in newtons.
    assert loop.last_plan.constraint_violation > 0.1
    assert float(values["cone_constraint_violation_n"]) == pytest.approx(loop.last_plan.constraint_violation,
                                                                         rel=1e-3)
    # After a good plan (the cone wide), a refused one: the safe command, the refused plan's policy not sent.
    mpc.mu, mpc.cone.mu = 10.0, 10.0
    good = loop.tick(START + 20 * MS)
    assert good is not None and good.source is CommandSource.PLAN
    mpc.mu = 0.05
    feed(loop, model, posture, np.zeros(model.nv), START + 40 * MS)
    tick = loop.tick(START + 40 * MS)
    assert tick.source is CommandSource.CONE_REFUSAL and tick.policy is good.policy
    assert within(tick.command, loop) and loop.refusals.counts["cone_refusal"] == 2


def test_bad_input_is_refused_and_nothing_is_stored(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "stand")
    q, v = posture.copy(), np.zeros(model.nv)
    feed(loop, model, q, v, START)
    names = list(model.actuated_joint_names)
    bad = q[7:].copy()
    bad[3] = np.nan
    with pytest.raises(JointStateError) as error:
        loop.take_joint_states(names, bad, v[6:], [], START + MS, START + MS)
    loop.refuse("joint_states", error.value)
    with pytest.raises(JointStateError):
        loop.take_joint_states(["wheel", "gripper"], [0.0, 0.0], [0.0, 0.0], [], START + MS, START + MS)
    with pytest.raises(JointStateError):
        loop.take_odometry(q[:3], [0.0, 0.0, 0.0, 2.0], v[:3], v[3:6], START + MS, START + MS)
    with pytest.raises(JointStateError):
        loop.take_odometry(q[:3], q[3:7], [np.inf, 0.0, 0.0], v[3:6], START + MS, START + MS)
    np.testing.assert_array_equal(loop.state.q, q)
    tick = loop.tick(START + MS)
    assert tick.source is CommandSource.PLAN and within(tick.command, loop)
    assert loop.diagnostics(1.0)[2]["refused_joint_states/non_finite"] == "1"
    with pytest.raises(InputError, match="gallop"):
        make_gait("gallop", feet, ["point"] * 4, TABLE, 0.02)
    with pytest.raises(InputError, match="floating base"):
        LeggedLoop(rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"])), mpcs, "stand")
    with pytest.raises(InputError, match="gait"):
        LeggedLoop(model, mpcs, "gallop")
    for bad in ({"state_timeout": 0.0}, {"policy_validity": float("nan")}, {"start_iterations": 0},
                {"max_stamp_lead": -1.0}, {"gain_knots": 0}, {"gain_knots": 2.0}):
        with pytest.raises(InputError):
            LeggedLoopSettings(**bad)


def test_a_failed_solve_restarts_the_plan_from_scratch(solo):
    """A plan gone NaN (a diverged iteration) makes the next warm-started solve fail; the tick after that
    starts the plan from the measured state again and sends it."""
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "stand")
    x = np.r_[posture, np.zeros(model.nv)]
    feed(loop, model, x[:model.nq], x[model.nq:], START)
    assert loop.tick(START).source is CommandSource.PLAN
    mpcs["stand"].solver.X[:] = np.nan
    feed(loop, model, x[:model.nq], x[model.nq:], START + 20 * MS)
    failed = loop.tick(START + 20 * MS)
    assert failed.source is CommandSource.SOLVER_FAILURE and within(failed.command, loop)
    feed(loop, model, x[:model.nq], x[model.nq:], START + 40 * MS)
    again = loop.tick(START + 40 * MS)
    assert again.source is CommandSource.PLAN and np.isfinite(again.policy.x_ref).all()
    assert again.policy.stamp_ns >= failed.policy.stamp_ns >= START, "stamps never go backwards"


def test_failed_solves_restart_from_the_last_good_plan_then_from_scratch(solo):
    """After a failed solve the next tick starts from the last plan sent, shifted to its knot, for up to
    RESTORE_ATTEMPTS failures in a row; then from scratch (the posture's statics). A good plan ends the count."""
    from rbd_deriv.control.constants import RESTORE_ATTEMPTS

    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "stand")
    x = np.r_[posture, np.zeros(model.nv)]
    solver = mpcs["stand"].solver
    restored, colds = [], []
    restore, cold_start = loop._restore, solver.cold_start
    loop._restore = lambda *args: restored.append(restore(*args)) or restored[-1]
    solver.cold_start = lambda *args: colds.append(len(restored)) or cold_start(*args)
    feed(loop, model, x[:model.nq], x[model.nq:], START)
    assert loop.tick(START).source is CommandSource.PLAN and colds == [1]
    good_X = solver.X.copy()
    original = mpcs["stand"].solve

    def failing(*args, **kwargs):
        raise FloatingPointError("the solver blew up")

    mpcs["stand"].solve = failing
    try:
        for k in range(1, RESTORE_ATTEMPTS + 3):
            feed(loop, model, x[:model.nq], x[model.nq:], START + k * 20 * MS)
            assert loop.tick(START + k * 20 * MS).source is CommandSource.SOLVER_FAILURE
    finally:
        mpcs["stand"].solve = original
    # Tick 1 failed warm-started from its own previous plan; ticks 2..RESTORE_ATTEMPTS + 1 from the last good one.
    assert restored[1:] == [False] + [True] * RESTORE_ATTEMPTS + [False], restored
    assert colds[-1] == len(restored) and not np.array_equal(solver.X, good_X), "then from scratch"
    feed(loop, model, x[:model.nq], x[model.nq:], START + 200 * MS)
    assert loop.tick(START + 200 * MS).source is CommandSource.PLAN
    assert colds[-1] == len(restored), "from scratch until a plan is good"
    assert loop._failures_in_row == 0


def test_odometry_from_another_frame_or_jumping_is_refused(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, {"stand": mpcs["stand"]}, "stand",
                      LeggedLoopSettings(odom_frame="odom", base_frame="base_link"))
    q, v = posture.copy(), np.zeros(model.nv)
    v[0] = 1.0  # 1 m/s forward: 20 ms later the base may be 2 cm + the margin (5 cm) away
    feed(loop, model, q, v, START)
    frames = ("odom", "base_link")
    later = START + 20 * MS
    for wrong in (("map", "base_link"), ("odom", "imu_link"), ("", "")):
        with pytest.raises(MessageError) as refused:
            loop.take_odometry(q[:3], q[3:7], v[:3], v[3:6], later, later, wrong)
        assert refused.value.reason == "frame"
    turned = np.array([0.0, 0.0, np.sin(0.25 / 2), np.cos(0.25 / 2)])  # 0.25 rad about z, 0.2 explained
    for position, orientation in ((q[:3] + [0.071, 0.0, 0.0], q[3:7]), (q[:3], turned)):
        with pytest.raises(MessageError) as refused:
            loop.check_odometry(position, orientation, v[:3], v[3:6], later, later, frames)
        assert refused.value.reason == "jump"
    loop.take_odometry(q[:3] + [0.069, 0.0, 0.0], q[3:7], v[:3], v[3:6], later, later, frames)
    # A pose more than JUMP_WINDOW after the last accepted one is not judged against it.
    much_later = later + 1001 * MS
    loop.take_odometry(q[:3] + [5.0, 0.0, 0.0], turned, v[:3], v[3:6], much_later, much_later, frames)


def test_a_second_source_cannot_explain_its_jumps_by_the_twist_it_claims(solo):
    """A source whose first pose is within the margin but claims 1000 m/s would make every later pose of its
    own (and refuse the real one's): a twist beyond what a base moves at is refused first (``twist``), and
    a far pose is judged as a jump through take_odometry, the call the node makes. A broken or older message
    is refused for what it is, not as a jump."""
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, {"stand": mpcs["stand"]}, "stand", LeggedLoopSettings(max_base_speed=10.0))
    q, v = posture.copy(), np.zeros(model.nv)
    feed(loop, model, q, v, START)
    frames = ("", "")
    later = START + MS
    for linear, angular in (([1000.0, 0.0, 0.0], [0.0] * 3), ([0.0] * 3, [0.0, 0.0, 50.0])):
        with pytest.raises(MessageError) as refused:
            loop.take_odometry(q[:3] + [0.04, 0.0, 0.0], q[3:7], linear, angular, later, later, frames)
        assert refused.value.reason == "twist"
    with pytest.raises(MessageError) as refused:
        loop.take_odometry(q[:3] + [0.94, 0.0, 0.0], q[3:7], [9.0, 0.0, 0.0], v[3:6], later + MS, later + MS,
                           frames)
    assert refused.value.reason == "jump"
    np.testing.assert_array_equal(loop.state.q[:3], q[:3])
    with pytest.raises(JointStateError) as refused:
        loop.take_odometry(q[:3] + [0.9, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5], v[:3], v[3:6], later, later, frames)
    assert refused.value.reason == "bad_base"
    with pytest.raises(JointStateError) as refused:
        loop.take_odometry(q[:3] + [0.9, 0.0, 0.0], q[3:7], v[:3], v[3:6], START - MS, later, frames)
    assert refused.value.reason == "out_of_order"


def test_motions_the_robot_cannot_follow_are_refused_together(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, {"stand": mpcs["stand"]}, "stand")
    # solo12 in its standing posture: the base 0.216 m above its feet, the nearest foot 0.169 m sideways.
    assert loop.max_speed == pytest.approx(0.5 * np.sqrt(9.81 * 0.216), rel=0.01)
    assert loop.max_sway_acceleration == pytest.approx(0.5 * 9.81 * 0.169 / 0.216, rel=0.01)
    loop.set_sway(0.03, 4.0)  # talos's demo sway
    for amplitude, period in ((0.5, 0.1), (0.1, 0.5), (0.05, 0.3)):
        with pytest.raises(InputError, match="follows at most"):
            loop.set_sway(amplitude, period)
    assert loop._sway == (0.03, 4.0), "a refused sway changes nothing"
    # With a sway, the command's speed is clamped to what is left of the robot's: the sway's peak speed taken off.
    loop.take_cmd_vel(0.5, 0.0, 0.0)
    assert loop.command_target[0] == pytest.approx(min(0.5, loop.max_speed - 2 * np.pi * 0.03 / 4.0))
    with pytest.raises(InputError, match="follows at most"):
        loop.set_sway(0.1, 1.0)   # 0.63 m/s of sway with a command of the robot's speed


def test_a_clock_that_stands_still_gives_the_safe_command(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, {"stand": mpcs["stand"]}, "stand", LeggedLoopSettings(state_timeout=0.05))
    q, v = posture.copy(), np.zeros(model.nv)
    feed(loop, model, q, v, START)
    assert loop.tick(START, monotonic_ns=0).source is CommandSource.PLAN
    # The clock reads 0 (simulated time before /clock), or the same time for longer than state_timeout.
    feed(loop, model, q, v, START + 10 * MS)
    stalled = loop.tick(0, monotonic_ns=10 * MS)
    assert stalled.source is CommandSource.STALE_CLOCK and within(stalled.command, loop)
    loop.tick(START + 20 * MS, monotonic_ns=20 * MS)
    assert loop.tick(START + 20 * MS, monotonic_ns=60 * MS).source is not CommandSource.STALE_CLOCK
    held = loop.tick(START + 20 * MS, monotonic_ns=71 * MS)
    assert held.source is CommandSource.STALE_CLOCK and held.plan is None
    assert loop.diagnostics(1.0)[2]["commands_stale_clock"] == "2"


def test_a_clock_that_stands_still_while_the_robot_walks_stands_it_down(solo):
    """Walking when the node's clock stops (simulated time without /clock) while the robot's states still come: the
    safe command ``stale_clock`` is a plan on the states' clock with the velocity command at zero, so the robot
    stops walking and takes its idle gait instead of being held on its last policy (which let a trotting solo12
    fall); once the clock moves again, the plans are plans."""
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(state_timeout=0.05, idle_gait="stand"))
    q, v = posture.copy(), np.zeros(model.nv)
    for k in range(3):  # a teleop sends its command before every tick
        loop.take_cmd_vel(0.2, 0.0, 0.0)
        feed(loop, model, q, v, START + k * 10 * MS)
        assert loop.tick(START + k * 10 * MS, monotonic_ns=k * 10 * MS).source is CommandSource.PLAN
    assert loop.gait == "trot" and loop.command_target[0] == 0.2
    ticks = []
    for k in range(3, 60):  # the node's clock stuck at START + 20 ms, the robot's moving on, the teleop too
        loop.take_cmd_vel(0.2, 0.0, 0.0)
        feed(loop, model, q, v, START + k * 10 * MS)
        ticks.append(loop.tick(START + 20 * MS, monotonic_ns=k * 10 * MS))
    down = [t for t in ticks if t.source is CommandSource.STALE_CLOCK]
    assert len(down) >= 50 and all(t.plan is not None and within(t.command, loop) for t in down)
    assert not loop.command.any() and loop.gait == "stand", (loop.command, loop.gait)
    # The policies go on along the robot's clock: each starts after the one before.
    stamps = [t.policy.stamp_ns for t in down]
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]
    feed(loop, model, q, v, START + 60 * 10 * MS)
    assert loop.tick(START + 60 * 10 * MS, monotonic_ns=600 * MS).source is CommandSource.PLAN


def test_a_broken_pose_is_refused_as_bad_base_not_judged_as_a_jump(solo):
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, {"stand": mpcs["stand"]}, "stand")
    q, v = posture.copy(), np.zeros(model.nv)
    feed(loop, model, q, v, START)
    later = START + MS
    for position, orientation in ((q[:3], np.zeros(4)), ([np.nan] * 3, q[3:7]), (q[:3], [0.0, 0.0, 1.0]),
                                  (q[:3], [np.inf, 0.0, 0.0, 1.0])):
        with pytest.raises(JointStateError) as refused:
            loop.take_odometry(position, orientation, v[:3], v[3:6], later, later, ("", ""))
        assert refused.value.reason == "bad_base"


def test_the_stop_command_holds_the_posture_on_its_feet_under_the_last_gain(solo):
    """Deactivating the node: the static torques of the measured posture as a policy valid from now, under the last
    good plan's final gain once there was a plan (the posture at rest); nothing before a state."""
    model, feet, posture, mpcs = solo
    v = np.zeros(model.nv)
    unplanned = LeggedLoop(model, mpcs, "stand")
    assert unplanned.stop_command(START) is None
    feed(unplanned, model, posture, v, START)
    torque, policy = unplanned.stop_command(START)
    np.testing.assert_array_equal(torque, unplanned.static_command(posture))
    assert not np.any(policy.gain), "no plan yet: no gain"
    loop = LeggedLoop(model, mpcs, "stand")
    feed(loop, model, posture, v, START)
    first = loop.tick(START + MS)
    assert first.source is CommandSource.PLAN
    torque, policy = loop.stop_command(START + 2 * MS)
    assert within(torque, loop)
    np.testing.assert_array_equal(torque, loop.static_command(posture))
    np.testing.assert_array_equal(policy.u_ff[0], torque)
    np.testing.assert_array_equal(policy.x_ref[0], np.r_[posture, v])
    np.testing.assert_array_equal(np.asarray(policy.gain).reshape(-1),
                                  np.asarray(loop.good_policy.gains[-1]).reshape(-1))
    assert policy.is_valid(START + 2 * MS)


def _yaw(quaternions):
    x, y, z, w = np.moveaxis(np.atleast_2d(quaternions), -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def test_the_velocity_command_is_clamped_counted_ramped_and_turns_the_reference(solo):
    """cmd_vel beyond its bounds is clamped and counted, a NaN one refused with the command in use kept; the base's
    reference velocity ramps toward it at max_acceleration, its heading turns at the yaw rate reached, and the
    references of the MPC follow: positions along the arc, the orientation turned, the velocities in the base frame."""
    model, feet, posture, mpcs = solo
    settings = LeggedLoopSettings(max_velocity=(0.5, 0.3, 1.0), max_acceleration=(1.0, 1.0, 2.0))
    loop = LeggedLoop(model, mpcs, "trot", settings)
    assert loop.take_cmd_vel(5.0, -5.0, 0.4) is True and loop.clamped_commands == 1
    np.testing.assert_allclose(loop.command_target, [0.5 * 0.5 / np.hypot(0.5, 0.3), -0.3 * 0.5 / np.hypot(0.5, 0.3),
                                                     0.4] if np.hypot(0.5, 0.3) > loop.max_speed else [0.5, -0.3, 0.4])
    assert np.hypot(*loop.command_target[:2]) <= loop.max_speed + 1e-12
    assert loop.take_cmd_vel(0.3, 0.0, 0.8) is False and loop.clamped_commands == 1
    with pytest.raises(MessageError) as refused:
        loop.take_cmd_vel(float("nan"), 0.0, 0.0)
    assert refused.value.reason == "not_finite"
    np.testing.assert_array_equal(loop.command_target, [0.3, 0.0, 0.8])
    q, v = posture.copy(), np.zeros(model.nv)
    commands, times = [], []
    for k in range(30):   # (a robot that does not move: its plans may be refused, the references move on)
        now = START + k * 20 * MS
        feed(loop, model, q, v, now)
        loop.tick(now)
        commands.append(loop.command.copy())
        times.append(loop.mpc.time)
    commands, times = np.array(commands), np.array(times)
    steps = np.abs(np.diff(commands, axis=0))
    assert (steps <= np.asarray(settings.max_acceleration) * np.diff(times)[:, None] + 1e-12).all()
    assert times[-1] - times[0] > 0.5
    np.testing.assert_allclose(commands[-1], [0.3, 0.0, 0.8], atol=1e-12)   # reached (0.4 s at 2 rad/s^2)
    # The references of the last plan: heading along the knots at the yaw rate, base velocity in the base frame.
    mpc, nq = loop.mpc, model.nq
    heading = np.unwrap(_yaw(mpc.state_reference[:, 3:7]))
    np.testing.assert_allclose(np.diff(heading), 0.8 * mpc.dt, atol=1e-9)
    np.testing.assert_allclose(mpc.state_reference[:, nq:nq + 3], np.tile([0.3, 0.0, 0.0], (mpc.horizon, 1)),
                               atol=1e-9)
    np.testing.assert_allclose(mpc.state_reference[:, nq + 5], 0.8, atol=1e-12)
    speed = np.hypot(*np.diff(mpc.state_reference[:, :2], axis=0).T) / mpc.dt
    np.testing.assert_allclose(speed, 0.3, rtol=1e-3)   # chords of an arc at 0.3 m/s
    # A swing foot lands under its hip turned with the heading: its offset from the base's path keeps its length.
    assert np.isfinite(mpc.swing_reference).all()


def test_a_standing_gait_holds_the_base_still_and_the_idle_gait_stops_stepping(solo):
    model, feet, posture, mpcs = solo
    q, v = posture.copy(), np.zeros(model.nv)
    loop = LeggedLoop(model, mpcs, "stand")
    loop.take_cmd_vel(0.2, 0.0, 0.0)
    feed(loop, model, q, v, START)
    assert loop.tick(START).source is CommandSource.PLAN
    np.testing.assert_array_equal(loop.command, 0.0)   # no foot steps: the base cannot walk
    assert loop.clamped_commands == 1 and loop.diagnostics(1.0)[2]["cmd_vel_clamped"] == "1"
    # idle_gait: standing while the command is zero, trotting as soon as it is not, standing again when it stops.
    loop = LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(idle_gait="stand"))
    assert loop.gait == "stand" and loop.asked_gait == "trot"
    gaits = []
    for k in range(60):
        now = START + k * 20 * MS
        if k == 5:
            loop.take_cmd_vel(0.1, 0.0, 0.0)
        if k == 30:
            loop.take_cmd_vel(0.0, 0.0, 0.0)
        feed(loop, model, q, v, now)
        # The knot the tick's plan would start at in the gait in use (its grid is set once it has started).
        pattern = loop.mpc.gait.pattern
        down = loop._gait_start is None or pattern[loop.knot(now / 1e9 - START / 1e9 + loop.latency())
                                                   % len(pattern)].all()
        loop.tick(now)   # (a robot that does not move: its plans may be refused)
        gaits.append((loop.gait, down))
    assert gaits[4][0] == "stand" and gaits[6][0] == "trot"
    back = next(k for k in range(31, 60) if gaits[k][0] == "stand")
    assert gaits[back][1] and not all(down for _, down in gaits[31:back]), \
        "the switch waits for a knot of the trot with every foot down"
    with pytest.raises(InputError, match="idle gait"):
        LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(idle_gait="gallop"))
    assert "idle_gait 'gallop'" in loop.set_parameters({"idle_gait": "gallop", "gait": "trot"}, {"idle_gait"})
    assert loop.set_parameters({"idle_gait": "", "gait": "trot"}, {"idle_gait"}) is None and loop.idle_gait == ""


def test_the_reference_stays_within_its_slack_of_a_pushed_robot(solo):
    """A base found 0.5 m and 0.6 rad from its reference (pushed, or started elsewhere): the plan's reference starts
    within path_slack and heading_slack of it, on the reference's side, instead of walking the robot back."""
    model, feet, posture, mpcs = solo
    loop = LeggedLoop(model, mpcs, "trot", LeggedLoopSettings(path_slack=0.1, heading_slack=0.2))
    q, v = posture.copy(), np.zeros(model.nv)
    q[:2] += [0.3, 0.4]
    q[3:7] = [0.0, 0.0, np.sin(0.3), np.cos(0.3)]   # turned by 0.6 rad
    feed(loop, model, q, v, START)
    loop.tick(START)   # (its first plan, turned away from its feet's reference, may be refused)
    first = loop.mpc.state_reference[0]
    gap = first[:2] - q[:2]
    assert np.hypot(*gap) == pytest.approx(0.1, rel=1e-9)
    np.testing.assert_allclose(gap / np.hypot(*gap), -np.array([0.3, 0.4]) / 0.5, atol=1e-9)
    assert _yaw(first[3:7])[0] == pytest.approx(0.6 - 0.2, abs=1e-9)


def test_a_gait_started_on_the_move_lifts_the_feet_behind_the_motion_first(solo):
    """A gait switched to while the base moves starts at the stretch of its pattern with every foot down whose next
    lift-off lifts the feet behind the motion: pacing after moving left (+y) lifts the right pair first, after
    moving right the left pair; bounding forwards the hind pair, backwards the front pair; at rest (and under
    0.05 m/s) at its first knot, as before."""
    model, feet, posture, _ = solo
    table = parse_gait_table(["pace: period=0.32 duty=0.625 offsets=0.5,0.0,0.5,0.0",
                              "bound: period=0.4 duty=0.7 offsets=0.5,0.5,0.0,0.0"])
    mpcs = {name: LeggedMPC(model, feet, make_gait(name, feet, ["point"] * 4, table, 0.02), posture, horizon=20,
                            dt=0.02) for name in ("stand", "pace", "bound")}

    def first_lift(gait, velocity):
        loop = LeggedLoop(model, mpcs, "stand", LeggedLoopSettings())
        v = np.zeros(model.nv)
        v[:3] = velocity
        feed(loop, model, posture, v, START)
        loop.set_gait(gait)   # from standing: at once
        pattern = mpcs[gait].gait.pattern
        knot = loop.knot(1.0)
        assert pattern[knot % len(pattern)].all()
        lift = next(k for k in range(knot + 1, knot + len(pattern)) if not pattern[k % len(pattern)].all())
        return knot, {foot for foot, down in zip(feet, pattern[lift % len(pattern)]) if not down}

    assert first_lift("pace", [0.0, 0.2, 0.0])[1] == {"FR_FOOT", "HR_FOOT"}
    assert first_lift("pace", [0.0, -0.2, 0.0])[1] == {"FL_FOOT", "HL_FOOT"}
    assert first_lift("bound", [0.2, 0.0, 0.0])[1] == {"HL_FOOT", "HR_FOOT"}
    assert first_lift("bound", [-0.2, 0.0, 0.0])[1] == {"FL_FOOT", "FR_FOOT"}
    assert first_lift("pace", [0.0, 0.0, 0.0])[0] == first_lift("pace", [0.0, 0.04, 0.0])[0] == 0
