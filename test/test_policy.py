"""The MPC's feedback policy and its robot side (rbd_deriv.control.policy), without ROS.

Oracles: laws written out by hand (a PD law, a wrapped continuous joint, a free flyer moved along one axis),
Pinocchio's configuration difference, and the MPC itself: on a linear-quadratic tick problem (held
linearization, no active bound) the optimal first torque from a perturbed state is exactly the first
torque plus K times the perturbation, which is what the Riccati forward pass applies.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control import (Actuation, FeedbackPolicy, HeldLinearization, ModelPredictiveController, MPCProblem,
                               PolicyExecutor, constant_policy, policy_from_plan)
from rbd_deriv.control.policy import policy_in_use
from rbd_deriv.exceptions import InputError
from rbd_deriv.messages import MessageError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import bundled_urdf

MS = 1_000_000
T0 = 1_000 * 10**9
Q = np.array([0.3, 0.6, -0.2, -1.0, 0.4, 0.7, 0.1])

TWO_JOINTS = """<robot name="two">
  <link name="base"/>
  <link name="a"><inertial><mass value="1"/><origin xyz="0 0 0.1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
    ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="b"><inertial><mass value="1"/><origin xyz="0 0 0.1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
    ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="spin" type="continuous"><parent link="base"/><child link="a"/><axis xyz="0 0 1"/>
    <limit effort="5" velocity="10"/></joint>
  <joint name="lift" type="prismatic"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/>
    <limit effort="50" velocity="1" lower="-1" upper="1"/></joint>
</robot>"""


@pytest.fixture(scope="module")
def arm():
    return rd.load_urdf(str(bundled_urdf("rbd_arm7")))


@pytest.fixture(scope="module")
def two():
    return rd.load_urdf(TWO_JOINTS)


def pd_policy(nv, x_ref, u_ff, kp, kd, knot_dt=0.01, valid_for=0.1, stamp_ns=T0):
    """u = u_ff - kp (q - q_ref) - kd (v - v_ref): K = [-kp I, -kd I]."""
    gain = np.hstack([-kp * np.eye(nv), -kd * np.eye(nv)])
    return FeedbackPolicy(stamp_ns, knot_dt, valid_for, np.atleast_2d(x_ref), np.atleast_2d(u_ff), gain)


def fields_of(policy, model, joint_names=None, state_joint_names=None):
    """What rbd_deriv.messages.feedback_policy_arrays gives for a message carrying ``policy``."""
    return {"joint_names": list(joint_names or model.actuated_joint_names),
            "state_joint_names": list(state_joint_names or model.joint_names), "knot_dt": policy.knot_dt,
            "valid_for": policy.valid_for, "x_ref": np.array(policy.x_ref), "u_ff": np.array(policy.u_ff),
            "K": np.array(policy.gain)}


# --------------------------------------------------------------------------------- the law by hand
def test_a_pd_law_by_hand_with_interpolated_knots(two):
    # Two knots 10 ms apart: q_ref goes from (0.1, 0.2) to (0.3, 0.0), v_ref from (1, -2) to (3, 0).
    x_ref = np.array([[0.1, 0.2, 1.0, -2.0], [0.3, 0.0, 3.0, 0.0]])
    u_ff = np.array([[1.0, 20.0], [2.0, 10.0]])
    policy = pd_policy(2, x_ref, u_ff, kp=10.0, kd=0.5)
    lower, upper = np.array([-5.0, -50.0]), np.array([5.0, 50.0])
    q, v = np.array([0.15, 0.25]), np.array([2.0, -1.0])
    # 2.5 ms after the stamp: a quarter of the step, knot 0's torque held, the state a quarter of the way.
    q_ref, v_ref = np.array([0.15, 0.15]), np.array([1.5, -1.5])
    expected = np.array([1.0, 20.0]) - 10.0 * (q - q_ref) - 0.5 * (v - v_ref)
    assert_close(policy.torque(two, q, v, T0 + 2_500_000, lower, upper), expected, what="quarter step")
    # Before the stamp: knot 0; after the last knot: the last one.
    assert_close(policy.torque(two, q, v, T0 - 5 * MS, lower, upper),
                 np.array([1.0, 20.0]) - 10.0 * (q - x_ref[0, :2]) - 0.5 * (v - x_ref[0, 2:]))
    late = np.array([2.0, 10.0]) - 10.0 * (q - x_ref[1, :2]) - 0.5 * (v - x_ref[1, 2:])
    assert_close(policy.torque(two, q, v, T0 + 50 * MS, lower, upper), late)
    # Far from the reference the torque stops at the limits.
    assert_close(policy.torque(two, np.array([3.0, -3.0]), v, T0, lower, upper), np.array([-5.0, 50.0]))



def test_a_gain_per_knot_applies_in_its_knots_step_and_the_last_one_after(two):
    # Three knots 10 ms apart, the reference still; gains for the first two only: knot 2 keeps knot 1's.
    x_ref = np.tile([0.1, 0.2, 0.0, 0.0], (3, 1))
    u_ff = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    gains = np.stack([np.hstack([-kp * np.eye(2), -0.5 * np.eye(2)]) for kp in (10.0, 40.0)])
    policy = FeedbackPolicy(T0, 0.01, 0.1, x_ref, u_ff, gains)
    assert policy.gains.shape == (2, 2, 4) and policy.nv == 2
    big = np.full(2, 1e3)
    q, v = np.array([0.15, 0.1]), np.array([0.2, -0.4])
    for now, knot, kp in ((T0 - 3 * MS, 0, 10.0), (T0 + 9 * MS, 0, 10.0), (T0 + 10 * MS, 1, 40.0),
                          (T0 + 25 * MS, 2, 40.0), (T0 + 90 * MS, 2, 40.0)):
        expected = u_ff[knot] - kp * (q - x_ref[0, :2]) - 0.5 * v
        assert_close(policy.torque(two, q, v, now, -big, big), expected, what=f"{(now - T0) / MS:g} ms")
    # One gain (nu, nx) is the same law as that gain given for every knot.
    one, every = (FeedbackPolicy(T0, 0.01, 0.1, x_ref, u_ff, g) for g in (gains[1], np.stack([gains[1]] * 3)))
    for now in (T0, T0 + 15 * MS, T0 + 40 * MS):
        np.testing.assert_array_equal(one.torque(two, q, v, now, -big, big), every.torque(two, q, v, now, -big, big))

def test_a_continuous_joint_is_compared_across_pi(two):
    policy = pd_policy(2, [math.pi - 0.1, 0.0, 0.0, 0.0], [0.0, 0.0], kp=10.0, kd=0.0)
    # -pi + 0.1 is 0.2 rad past pi - 0.1, not 2 pi - 0.2 before it.
    torque = policy.torque(two, np.array([-math.pi + 0.1, 0.0]), np.zeros(2), T0, np.full(2, -100.0),
                           np.full(2, 100.0))
    assert_close(torque, np.array([-2.0, 0.0]))


def test_a_free_flyer_deviation_is_the_body_frame_tangent():
    model = rd.load_urdf(TWO_JOINTS, floating_base=True)     # nq = 9, nv = 8
    q_ref = rd.neutral(model)
    gain = np.zeros((2, 16))
    gain[0, :8] = np.arange(1.0, 9.0)                          # u0 reads the position deviation
    policy = FeedbackPolicy(T0, 0.01, 0.1, np.r_[q_ref, np.zeros(8)][None, :], np.zeros((1, 2)), gain)
    big = np.full(2, 1e6)
    # The base turned by 0.3 rad about z, otherwise at the reference: dq = (0, 0, 0, 0, 0, 0.3, 0, 0).
    q = q_ref.copy()
    q[3:7] = [0.0, 0.0, math.sin(0.15), math.cos(0.15)]
    assert_close(policy.torque(model, q, np.zeros(8), T0, -big, big)[0], 6.0 * 0.3)
    # Turned by 90 degrees about z and moved 0.2 m along x: the deviation is the log of SE(3), whose linear
    # part mixes translation and rotation; Pinocchio's difference is the oracle.
    pytest.importorskip("pinocchio")
    from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
    bridge = PinocchioBridge.for_model(model, TWO_JOINTS)
    q[0] = 0.2
    q[3:7] = [0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)]
    dq = bridge.difference(q_ref, q)
    assert abs(dq[5] - math.pi / 2) < 1e-12 and abs(dq[1]) > 0.05
    assert_close(policy.torque(model, q, np.zeros(8), T0, -big, big)[0], float(np.arange(1.0, 9.0) @ dq))


# ------------------------------------------------------------------------- against the MPC itself
def lq_controller(model, q):
    """A held-mode MPC (the tick problem is linear-quadratic) around q at rest, with its gravity torque."""
    data = model.create_data()
    u = rd.gravity_torques(model, data, q).copy()
    A, B = rd.linearize(model, data, q, np.zeros(model.nv), u, 0.01)
    linearization = HeldLinearization(A.copy(), B.copy(), np.r_[q, np.zeros(model.nv)], u, data.x_next.copy(), 0.01)
    problem = MPCProblem.from_model(model, horizon=20, dt=0.01, mode="held")
    controller = ModelPredictiveController(problem, model)
    X_ref = np.tile(np.r_[q + 0.05, np.zeros(model.nv)], (21, 1))
    controller.set_reference(X_ref, np.tile(u, (20, 1)))
    return controller, linearization


def test_k_on_a_perturbed_state_gives_the_optimal_first_torque_of_a_linear_quadratic_tick(arm):
    controller, linearization = lq_controller(arm, Q)
    x0 = np.r_[Q, np.zeros(arm.nv)]
    plan = controller.solve(x0, 0.0, linearization)
    assert plan.ok and plan.clamped == 0
    policy = policy_from_plan(plan.states, plan.torques, plan.gain, T0, 0.01, 0.1)
    assert_close(policy.x_ref[0], x0, what="knot 0 is the state solved from")
    assert_close(policy.u_ff[0], plan.torque, what="knot 0's torque is the command")
    limit = np.asarray(arm.effort_limit)
    rng = np.random.default_rng(3)
    for _ in range(3):
        delta = rng.normal(scale=[0.01] * 7 + [0.05] * 7)
        controller.reset()
        perturbed = controller.solve(x0 + delta, 0.0, linearization)
        assert perturbed.ok and perturbed.clamped == 0
        # The Riccati forward pass from the perturbed state: its first torque is the optimum (one Newton step
        # solves a linear-quadratic problem exactly), and the policy reproduces it from the unperturbed plan.
        expected = perturbed.torque
        got = policy.torque(arm, x0[:7] + delta[:7], delta[7:], T0, -limit, limit)
        assert np.abs(expected - plan.torque).max() > 1.0, "the perturbation must matter"
        assert_close(got, expected, what="u_ff + K dx against the re-solved first torque")


def test_on_the_nonlinear_problem_k_predicts_the_re_solved_torque_to_first_order(arm):
    problem = MPCProblem.from_model(arm, horizon=20, dt=0.01, mode="relinearize", max_iterations=5)
    controller = ModelPredictiveController(problem, arm)
    data = arm.create_data()
    u = rd.gravity_torques(arm, data, Q).copy()
    controller.set_reference(np.tile(np.r_[Q + 0.05, np.zeros(7)], (21, 1)), np.tile(u, (20, 1)))
    x0 = np.r_[Q, np.zeros(7)]
    plan = controller.solve(x0, 0.0)
    policy = policy_from_plan(plan.states, plan.torques, plan.gain, T0, 0.01, 0.1)
    limit = np.asarray(arm.effort_limit)
    delta = np.r_[np.full(7, 0.005), np.full(7, -0.02)]
    controller.reset()
    resolved = controller.solve(x0 + delta, 0.0).torque
    predicted = policy.torque(arm, Q + delta[:7], delta[7:], T0, -limit, limit)
    # The gain explains the change of the optimal torque: what is left is a small fraction of it (a wrong sign
    # or a transposed gain would leave more than the change itself).
    change = np.abs(resolved - plan.torque).max()
    assert change > 1.0
    assert np.abs(resolved - predicted).max() < 0.05 * change


def test_a_plans_policy_keeps_the_knots_its_validity_needs(arm):
    states, torques = np.arange(21 * 14.0).reshape(21, 14), np.arange(20 * 7.0).reshape(20, 7)
    gain = np.ones((7, 14))
    for valid_for, knots in ((0.1, 11), (0.095, 11), (0.001, 2), (1.0, 20)):
        policy = policy_from_plan(states, torques, gain, T0, 0.01, valid_for)
        assert policy.knots == knots, valid_for
        np.testing.assert_array_equal(policy.x_ref, states[:knots])
        np.testing.assert_array_equal(policy.u_ff, torques[:knots])
    assert policy.expires_ns == T0 + 10**9 and policy.is_valid(T0 + 10**9) and not policy.is_valid(T0 + 10**9 + 1)
    with pytest.raises(ValueError):
        policy.u_ff[0, 0] = 1.0  # read-only
    held = constant_policy(np.full(7, 2.0), Q, np.zeros(7), T0, 0.1, 0.01)
    assert held.knots == 1 and not held.gain.any()
    assert_close(held.torque(arm, Q + 0.3, np.ones(7), T0 + 50 * MS, np.full(7, -9.0), np.full(7, 9.0)),
                 np.full(7, 2.0))


# --------------------------------------------------------------------------------- the robot side
def test_the_executor_applies_the_policy_then_the_command_then_brakes(arm):
    executor = PolicyExecutor(arm, command_timeout=0.2)
    limit = np.asarray(arm.effort_limit)
    assert executor.torque(Q, np.zeros(7), T0) == (None, Actuation.BRAKE)  # nothing yet: brakes
    policy = pd_policy(7, np.r_[Q, np.zeros(7)], np.full(7, 1.0), kp=100.0, kd=2.0, valid_for=0.05)
    executor.take_policy(fields_of(policy, arm), T0, T0 + MS)
    executor.take_command(np.full(7, -3.0), T0 + MS)
    q, v = Q + 0.01, np.full(7, 0.1)
    torque, source = executor.torque(q, v, T0 + 10 * MS)
    assert source is Actuation.POLICY
    assert_close(torque, np.clip(1.0 - 100.0 * 0.01 - 2.0 * 0.1, -limit, limit))
    # The policy expires 50 ms after its stamp: the held command until 200 ms after it came, then brakes.
    assert executor.torque(q, v, T0 + 50 * MS)[1] is Actuation.POLICY
    torque, source = executor.torque(q, v, T0 + 50 * MS + 1)
    assert source is Actuation.COMMAND
    assert_close(torque, np.full(7, -3.0))
    assert executor.torque(q, v, T0 + 201 * MS)[1] is Actuation.COMMAND
    assert executor.torque(q, v, T0 + 202 * MS) == (None, Actuation.BRAKE)
    assert executor.steps == {Actuation.BRAKE: 2, Actuation.POLICY: 2, Actuation.COMMAND: 2}
    # command_timeout 0: the forward-command controller's behaviour, held for ever.
    forever = PolicyExecutor(arm, command_timeout=0.0)
    forever.take_command(np.full(7, 2.0), T0)
    assert forever.torque(Q, np.zeros(7), T0 + 3600 * 10**9)[1] is Actuation.COMMAND


def test_an_expired_policy_holds_its_last_knot_then_damps(arm):
    """The controller stops sending: for expiry_hold the last knot (its reference and feedforward) under the gain,
    then damping; a torque command arriving meanwhile takes over after the hold; without damping, the brakes."""
    executor = PolicyExecutor(arm, command_timeout=0.05, expiry_hold=0.1, expiry_damping=2.0)
    last = np.r_[Q + 0.2, np.zeros(7)]
    x_ref = np.vstack([np.r_[Q, np.zeros(7)], last])
    policy = FeedbackPolicy(T0, 0.02, 0.03, x_ref, np.vstack([np.full(7, 1.0), np.full(7, -1.0)]),
                            np.hstack([-50.0 * np.eye(7), -1.0 * np.eye(7)]))
    executor.take_policy(fields_of(policy, arm), T0, T0)
    q, v = Q + 0.1, np.full(7, 0.3)
    assert executor.torque(q, v, T0 + 30 * MS)[1] is Actuation.POLICY
    # Expired 30 ms after its stamp: held at its last knot, u = u_ff[-1] - 50 (q - q_ref[-1]) - v, until 100 ms later.
    for now in (T0 + 30 * MS + 1, T0 + 130 * MS):
        torque, source = executor.torque(q, v, now)
        assert source is Actuation.HOLD
        assert_close(torque, -1.0 - 50.0 * (q - (Q + 0.2)) - 1.0 * v)
    # Then damping, -2 v, inside the limits.
    torque, source = executor.torque(q, v, T0 + 130 * MS + 1)
    assert source is Actuation.DAMPING
    assert_close(torque, -2.0 * v)
    torque, _ = executor.torque(q, np.full(7, 1e6), T0 + 140 * MS)
    assert_close(torque, -np.asarray(arm.effort_limit))
    # A command that arrives takes over while fresh, then damping again.
    executor.take_command(np.full(7, 0.5), T0 + 200 * MS)
    assert executor.torque(q, v, T0 + 240 * MS)[1] is Actuation.COMMAND
    assert executor.torque(q, v, T0 + 260 * MS)[1] is Actuation.DAMPING
    assert executor.steps == {Actuation.POLICY: 1, Actuation.HOLD: 2, Actuation.DAMPING: 3, Actuation.COMMAND: 1}
    # Without damping the brakes follow the hold.
    braking = PolicyExecutor(arm, expiry_hold=0.1)
    braking.take_policy(fields_of(policy, arm), T0, T0)
    assert braking.torque(q, v, T0 + 130 * MS)[1] is Actuation.HOLD
    assert braking.torque(q, v, T0 + 131 * MS) == (None, Actuation.BRAKE)
    with pytest.raises(InputError):
        PolicyExecutor(arm, expiry_hold=-1.0)


def test_policy_rows_are_matched_by_joint_name(arm):
    names = list(arm.actuated_joint_names)
    policy = pd_policy(7, np.r_[Q, np.zeros(7)], np.arange(7.0), kp=50.0, kd=1.0)
    in_order, shuffled = PolicyExecutor(arm), PolicyExecutor(arm)
    in_order.take_policy(fields_of(policy, arm), T0, T0)
    order = [3, 0, 6, 1, 5, 2, 4]
    fields = fields_of(policy, arm, joint_names=[names[i] for i in order])
    fields["u_ff"], fields["K"] = fields["u_ff"][:, order], fields["K"][order]
    shuffled.take_policy(fields, T0, T0)
    q, v = Q + np.linspace(-0.01, 0.01, 7), np.linspace(0.1, -0.1, 7)
    np.testing.assert_array_equal(shuffled.torque(q, v, T0)[0], in_order.torque(q, v, T0)[0])



def test_per_knot_gains_are_matched_by_joint_name_and_checked(arm):
    names = list(arm.actuated_joint_names)
    x_ref, u_ff = np.tile(np.r_[Q, np.zeros(7)], (4, 1)), np.tile(np.arange(7.0), (4, 1))
    gains = np.random.default_rng(3).normal(size=(3, 7, 14))
    policy = FeedbackPolicy(T0, 0.01, 0.1, x_ref, u_ff, gains)
    in_order, shuffled = PolicyExecutor(arm), PolicyExecutor(arm)
    in_order.take_policy(fields_of(policy, arm), T0, T0)
    order = [3, 0, 6, 1, 5, 2, 4]
    fields = fields_of(policy, arm, joint_names=[names[i] for i in order])
    fields["u_ff"], fields["K"] = fields["u_ff"][:, order], fields["K"][:, order]
    shuffled.take_policy(fields, T0, T0)
    q, v = Q + np.linspace(-0.01, 0.01, 7), np.linspace(0.1, -0.1, 7)
    for now in (T0, T0 + 12 * MS, T0 + 35 * MS):
        np.testing.assert_array_equal(shuffled.torque(q, v, now)[0], in_order.torque(q, v, now)[0])
    # More gains than knots, or gains of another model's size, are refused; the policy in use stays.
    for K, what in ((np.random.default_rng(4).normal(size=(5, 7, 14)), "5 gains for 4 knots"),
                    (gains[:, :, :12], "nx of another model")):
        with pytest.raises(MessageError) as refused:
            in_order.take_policy({**fields_of(policy, arm), "K": K}, T0 + MS, T0 + MS)
        assert refused.value.reason == "size", what
    assert in_order.policy.gains.shape == (3, 7, 14)


def test_a_plans_policy_keeps_the_gains_of_its_own_knots():
    states, torques = np.zeros((21, 4)), np.zeros((20, 2))
    gains = np.arange(20 * 2 * 4, dtype=float).reshape(20, 2, 4)
    policy = policy_from_plan(states, torques, gains, T0, 0.02, 0.1)      # 6 knots cover 0.1 s
    assert policy.knots == 6 and policy.gains.shape == (6, 2, 4)
    np.testing.assert_array_equal(policy.gains, gains[:6])
    fewer = policy_from_plan(states, torques, gains[:3], T0, 0.02, 0.1)
    np.testing.assert_array_equal(fewer.gains, gains[:3])
    np.testing.assert_array_equal(policy_from_plan(states, torques, gains[0], T0, 0.02, 0.1).gains, gains[:1])

def bad(fields, **changes):
    return {**fields, **changes}


@pytest.mark.parametrize("change, reason", [
    (lambda f, m: bad(f, joint_names=f["joint_names"][:6] + ["elbow_of_another_robot"]), "joints"),
    (lambda f, m: bad(f, joint_names=f["joint_names"][:6]), "joints"),
    (lambda f, m: bad(f, state_joint_names=f["state_joint_names"][::-1]), "joints"),
    (lambda f, m: bad(f, K=f["K"][:, :12]), "size"),                       # nx of another model
    (lambda f, m: bad(f, x_ref=f["x_ref"][:, :13]), "size"),
    (lambda f, m: bad(f, K=np.where(np.eye(7, 14) > 0, np.nan, f["K"])), "non_finite"),
    (lambda f, m: bad(f, u_ff=f["u_ff"] * np.inf), "non_finite"),
    (lambda f, m: bad(f, knot_dt=0.0), "values"),
    (lambda f, m: bad(f, valid_for=-0.1), "values"),
    (lambda f, m: bad(f, valid_for=math.nan), "non_finite"),
])
def test_bad_policies_are_refused_and_the_one_in_use_stays(arm, change, reason):
    executor = PolicyExecutor(arm)
    good = pd_policy(7, np.r_[Q, np.zeros(7)], np.full(7, 1.0), kp=10.0, kd=1.0)
    executor.take_policy(fields_of(good, arm), T0, T0)
    with pytest.raises(MessageError) as caught:
        executor.take_policy(change(fields_of(good, arm), arm), T0 + MS, T0 + MS)
    assert caught.value.reason == reason
    assert executor.policy.stamp_ns == T0
    assert executor.refuse("policy", caught.value) and executor.refusals.counts[f"policy/{reason}"] == 1


def test_policies_from_the_future_out_of_order_or_expired_are_refused(arm):
    executor = PolicyExecutor(arm, max_stamp_lead=0.1)
    policy = pd_policy(7, np.r_[Q, np.zeros(7)], np.zeros(7), kp=1.0, kd=0.1, valid_for=0.1)
    for stamp, now, reason in ((T0 + 200 * MS, T0, "future"), (T0, T0 + 101 * MS, "expired")):
        with pytest.raises(MessageError) as caught:
            executor.take_policy(fields_of(policy, arm), stamp, now)
        assert caught.value.reason == reason
    executor.take_policy(fields_of(policy, arm), T0 + 50 * MS, T0 + 50 * MS)   # a stamp 50 ms ahead is fine
    with pytest.raises(MessageError) as caught:
        executor.take_policy(fields_of(policy, arm), T0 + 40 * MS, T0 + 60 * MS)
    assert caught.value.reason == "out_of_order"
    assert executor.policy.stamp_ns == T0 + 50 * MS


def test_a_policy_stamped_ahead_waits_for_its_stamp_while_the_one_in_use_is_valid(arm):
    """A plan solved from the state predicted at its first knot starts there: until then the robot side keeps
    the previous plan (the two torques below are different constants, so the source of each step shows)."""
    executor = PolicyExecutor(arm, max_stamp_lead=0.1)
    x = np.r_[Q, np.zeros(7)]
    first = pd_policy(7, x, np.full(7, 1.0), kp=0.0, kd=0.0, valid_for=0.1, stamp_ns=T0)
    second = pd_policy(7, x, np.full(7, 2.0), kp=0.0, kd=0.0, valid_for=0.1, stamp_ns=T0 + 30 * MS)
    third = pd_policy(7, x, np.full(7, 3.0), kp=0.0, kd=0.0, valid_for=0.1, stamp_ns=T0 + 50 * MS)
    executor.take_policy(fields_of(first, arm), T0, T0)
    executor.take_policy(fields_of(second, arm), second.stamp_ns, T0 + 5 * MS)
    executor.take_policy(fields_of(third, arm), third.stamp_ns, T0 + 10 * MS)
    applied = [executor.torque(Q, np.zeros(7), T0 + t * MS)[0][0] for t in (10, 29, 30, 49, 50, 140)]
    assert applied == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert [p.stamp_ns for p in executor.taken] == [third.stamp_ns], "the policies before are forgotten"
    # A newer plan for the same first knot replaces the one waiting; an older stamp than the newest taken is
    # refused, even if it is ahead of the clock.
    executor = PolicyExecutor(arm)
    executor.take_policy(fields_of(first, arm), T0, T0)
    executor.take_policy(fields_of(second, arm), second.stamp_ns, T0 + MS)
    again = pd_policy(7, x, np.full(7, 4.0), kp=0.0, kd=0.0, valid_for=0.1, stamp_ns=second.stamp_ns)
    executor.take_policy(fields_of(again, arm), again.stamp_ns, T0 + 2 * MS)
    with pytest.raises(MessageError) as caught:
        executor.take_policy(fields_of(first, arm), T0 + 20 * MS, T0 + 3 * MS)
    assert caught.value.reason == "out_of_order"
    assert executor.torque(Q, np.zeros(7), T0 + 29 * MS)[0][0] == 1.0
    assert executor.torque(Q, np.zeros(7), T0 + 30 * MS)[0][0] == 4.0
    # With nothing valid in use a policy ahead of the clock is applied at once (its first knot).
    late = PolicyExecutor(arm)
    ahead = pd_policy(7, x, np.full(7, 2.0), kp=0.0, kd=0.0, valid_for=0.1, stamp_ns=T0 + 130 * MS)
    late.take_policy(fields_of(first, arm), T0, T0)
    late.take_policy(fields_of(ahead, arm), ahead.stamp_ns, T0 + 95 * MS)
    assert late.torque(Q, np.zeros(7), T0 + 100 * MS)[0][0] == 1.0
    assert late.torque(Q, np.zeros(7), T0 + 101 * MS)[0][0] == 2.0, "the first has expired"


def test_policy_in_use_picks_by_stamp_and_validity():
    x = np.zeros(2)
    a, b = (FeedbackPolicy(stamp, 0.01, 0.05, x[None], np.zeros((1, 1)), np.zeros((1, 2)))
            for stamp in (T0, T0 + 20 * MS))
    assert policy_in_use([], T0) is None
    assert policy_in_use([a, b], T0 - MS) is a, "before every stamp: the first, as its first knot"
    assert policy_in_use([a, b], T0 + 19 * MS) is a and policy_in_use([a, b], T0 + 20 * MS) is b
    assert policy_in_use([a], T0 + 60 * MS) is a, "the newest, expired: the caller sees it is not valid"
    expired_first = [a, FeedbackPolicy(T0 + 80 * MS, 0.01, 0.05, x[None], np.zeros((1, 1)), np.zeros((1, 2)))]
    assert policy_in_use(expired_first, T0 + 60 * MS) is expired_first[1], "a valid one ahead beats an expired one"


def test_bad_commands_are_refused_and_a_policy_that_cannot_be_evaluated_is_dropped(arm):
    executor = PolicyExecutor(arm)
    for torque, reason in ((np.zeros(6), "size"), (np.full(7, np.nan), "non_finite")):
        with pytest.raises(MessageError) as caught:
            executor.take_command(torque, T0)
        assert caught.value.reason == reason
    assert executor.command is None
    executor.take_command(np.ones(7), T0)
    executor.take_policy(fields_of(pd_policy(7, np.r_[Q, np.zeros(7)], np.zeros(7), 1.0, 0.1), arm), T0, T0)
    # A state the model refuses (a wrong size here): counted, the policy dropped, the command applied.
    torque, source = executor.torque(np.zeros(3), np.zeros(7), T0)
    assert source is Actuation.COMMAND and executor.policy is None
    assert executor.refusals.counts["policy/unusable"] == 1
