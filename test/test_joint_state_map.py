"""JointStateMap: mapping joint_states onto the model's coordinates by name, and refusing bad messages whole."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import PLAUSIBLE, REASONS, JointStateError, JointStateMap, describe, velocity_names
from rbd_deriv.testing.robots import bundled_urdf

SECOND = 1_000_000_000


@pytest.fixture(scope="module")
def arm():
    return rd.load_urdf(str(bundled_urdf("rbd_arm7")))


@pytest.fixture(scope="module")
def floating_arm():
    return rd.load_urdf(str(bundled_urdf("rbd_arm7")), floating_base=True)


def _full_message(model, rng):
    """Every joint once, shuffled, plus two joints the model does not have."""
    names = list(model.joint_names) + ["gripper_left", "gripper_right"]
    order = rng.permutation(len(names))
    names = [names[i] for i in order]
    position = rng.uniform(-1, 1, len(names))
    velocity = rng.uniform(-1, 1, len(names))
    effort = rng.uniform(-10, 10, len(names))
    return names, position, velocity, effort


def test_maps_by_name_in_any_order_ignoring_extra_joints(arm):
    rng = np.random.default_rng(0)
    state = JointStateMap(arm)
    names, position, velocity, effort = _full_message(arm, rng)
    state.update(names, position, velocity, effort, 5 * SECOND)
    assert state.complete and state.missing() == []
    for k, name in enumerate(names):
        if name in arm.idx_q:
            assert state.q[arm.idx_q[name]] == position[k]
            assert state.v[arm.idx_v[name]] == velocity[k]
            assert state.effort[arm.idx_v[name]] == effort[k]
    assert state.stamp_ns == 5 * SECOND


def test_split_publishers_complete_the_state_together(arm):
    state = JointStateMap(arm)
    first, second = arm.joint_names[:4], arm.joint_names[4:]
    state.update(first, [0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4], [], SECOND)
    assert not state.complete
    assert state.missing() == second
    with pytest.raises(JointStateError) as caught:
        state.check_ready()
    assert caught.value.reason == "incomplete" and caught.value.joints == second
    state.update(second[::-1], [0.7, 0.6, 0.5], [7, 6, 5], [], SECOND + 1)
    state.check_ready()
    np.testing.assert_array_equal(state.q, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    np.testing.assert_array_equal(state.v, [1, 2, 3, 4, 5, 6, 7])


def test_repeated_name_list_uses_the_cached_layout_correctly(arm):
    state = JointStateMap(arm)
    names = arm.joint_names[::-1]
    for shift in range(3):
        position = np.arange(7.0) + shift
        state.update(names, position, -position, [], SECOND + shift)
        np.testing.assert_array_equal(state.q, position[::-1])
        np.testing.assert_array_equal(state.v, -position[::-1])


def _assert_refused_without_change(state, reason, *args, **kwargs):
    before = (state.q.copy(), state.v.copy(), state.effort.copy(), state.stamp_ns, state.missing())
    with pytest.raises(JointStateError) as caught:
        state.update(*args, **kwargs)
    assert caught.value.reason == reason, str(caught.value)
    assert caught.value.reason in REASONS
    assert isinstance(caught.value, InputError)
    after = (state.q, state.v, state.effort, state.stamp_ns, state.missing())
    for old, new in zip(before, after):
        np.testing.assert_array_equal(old, new)
    return caught.value


def test_bad_messages_are_refused_whole(arm):
    state = JointStateMap(arm)
    names = list(arm.joint_names)
    state.update(names, np.zeros(7), np.zeros(7), np.zeros(7), 10 * SECOND)
    good = np.ones(7)
    _assert_refused_without_change(state, "length_mismatch", names, good[:6], good, [], 11 * SECOND)
    _assert_refused_without_change(state, "length_mismatch", names, good, good[:3], [], 11 * SECOND)
    _assert_refused_without_change(state, "length_mismatch", names, good, good, good[:2], 11 * SECOND)
    _assert_refused_without_change(state, "missing_velocity", names, good, [], [], 11 * SECOND)
    for bad_value in (math.nan, math.inf, -math.inf):
        position = good.copy()
        position[3] = bad_value
        error = _assert_refused_without_change(state, "non_finite", names, position, good, [], 11 * SECOND)
        assert error.joints == [names[3]]
    effort = good.copy()
    effort[6] = math.nan
    _assert_refused_without_change(state, "non_finite", names, good, good, effort, 11 * SECOND)
    _assert_refused_without_change(state, "duplicate_joint", names + ["joint1"], np.ones(8), np.ones(8), [],
                                   11 * SECOND)
    error = _assert_refused_without_change(state, "unknown_joints", ["wheel", "flap"], [1, 2], [1, 2], [],
                                           11 * SECOND)
    assert "joint1" in str(error)
    error = _assert_refused_without_change(state, "out_of_order", names[:2], [1, 1], [1, 1], [], 9 * SECOND)
    assert error.joints == names[:2]


def test_extra_values_of_unknown_joints_are_not_checked(arm):
    # A gripper joint reporting NaN must not block the arm.
    state = JointStateMap(arm)
    names = list(arm.joint_names) + ["gripper"]
    state.update(names, np.append(np.ones(7), math.nan), np.ones(8), [], SECOND)
    np.testing.assert_array_equal(state.q, np.ones(7))


def test_strict_mode_refuses_unknown_joints(arm):
    state = JointStateMap(arm, strict=True)
    names = list(arm.joint_names) + ["gripper"]
    error = _assert_refused_without_change(state, "unknown_joints", names, np.ones(8), np.ones(8), [], SECOND)
    assert error.joints == ["gripper"]


def test_staleness(arm):
    state = JointStateMap(arm, max_age=0.5)
    names = list(arm.joint_names)
    now = 100 * SECOND
    _assert_refused_without_change(state, "stale", names, np.ones(7), np.ones(7), [], now - SECOND, now_ns=now)
    state.update(names, np.ones(7), np.ones(7), [], now - SECOND // 10, now_ns=now)
    state.check_ready()
    # Half of the joints move on, the other half's publisher went silent.
    state.update(names[:3], np.ones(3), np.ones(3), [], now + SECOND, now_ns=now + SECOND)
    with pytest.raises(JointStateError) as caught:
        state.check_ready()
    assert caught.value.reason == "stale" and caught.value.joints == names[3:]
    with pytest.raises(InputError):
        JointStateMap(arm, max_age=-1.0)


def test_the_newest_stamp_against_the_clock_and_checks_changed_at_run_time(arm):
    state = JointStateMap(arm, max_age=0.5)
    names = list(arm.joint_names)
    now = 100 * SECOND
    state.update(names, np.ones(7), np.ones(7), [], now, now_ns=now)
    state.check_fresh(now + SECOND // 2)
    with pytest.raises(JointStateError, match="latest state is 0.600 s old") as caught:
        state.check_fresh(now + 6 * SECOND // 10)  # its publisher stopped: a timer must not answer it
    assert caught.value.reason == "stale"
    state.set_checks(strict=True, max_age=0.0, max_lead=0.25)
    state.check_fresh(now + 3600 * SECOND)  # max_age 0: no age check
    assert state.strict and state.max_age_ns == 0 and state.max_lead == 0.25
    for max_age, max_lead in ((math.inf, 0.1), (0.5, -1.0)):
        with pytest.raises(InputError):
            state.set_checks(False, max_age, max_lead)
        assert state.max_age_ns == 0 and state.strict and state.max_lead == 0.25, "a refused change changes nothing"


def test_implausible_magnitudes_are_refused_like_non_finite_values(arm):
    """Finite values no robot reaches (a velocity of 1e307 overflows RNEA into NaN) are refused whole."""
    state = JointStateMap(arm)
    names = list(arm.joint_names)
    state.update(names, np.zeros(7), np.zeros(7), np.zeros(7), SECOND)
    good = np.ones(7)
    for kind, value in (("position", 1e300), ("velocity", 1e307), ("velocity", -1e155), ("effort", 1e308)):
        values = {"position": good.copy(), "velocity": good.copy(), "effort": good.copy()}
        values[kind][4] = value
        error = _assert_refused_without_change(state, "implausible", names, values["position"], values["velocity"],
                                               values["effort"], 2 * SECOND)
        assert error.joints == [names[4]] and f"{value:.6g}" in str(error)
    # At the bounds the values are taken.
    state.update(names, np.full(7, PLAUSIBLE["position"]), np.full(7, -PLAUSIBLE["velocity"]),
                 np.full(7, PLAUSIBLE["effort"]), 2 * SECOND)
    assert state.v[0] == -PLAUSIBLE["velocity"]


def test_a_stamp_from_the_future_is_refused_and_never_becomes_the_reference(arm):
    state = JointStateMap(arm, max_lead=0.1)
    names = list(arm.joint_names)
    now = 1000 * SECOND
    state.update(names, np.zeros(7), np.zeros(7), [], now - SECOND // 100, now_ns=now)
    for lead in (2 * SECOND, 3600 * SECOND):
        error = _assert_refused_without_change(state, "future", names, good := np.ones(7), good, [], now + lead,
                                               now_ns=now)
        assert "ahead of the clock" in str(error)
    # Within the tolerance (clocks of two machines a little apart) a stamp is taken...
    state.update(names, np.ones(7), np.ones(7), [], now + SECOND // 20, now_ns=now)
    # ...and the next good message is judged against it, not against the refused ones.
    state.update(names, np.full(7, 2.0), np.ones(7), [], now + SECOND // 10, now_ns=now + SECOND // 10)
    np.testing.assert_array_equal(state.q, np.full(7, 2.0))
    # Without a clock the lead cannot be judged (a bag reader); with no tolerance every lead is refused.
    state.update(names, np.ones(7), np.ones(7), [], now + 3600 * SECOND)
    strict = JointStateMap(arm, max_lead=0.0)
    _assert_refused_without_change(strict, "future", names, good, good, [], now + 1, now_ns=now)
    with pytest.raises(InputError):
        JointStateMap(arm, max_lead=-1.0)


def test_a_clock_on_simulated_time_not_started_yet_judges_no_stamp(arm):
    # use_sim_time before the first /clock message: the node's clock reads 0, and a played recording's
    # stamps are neither ahead of it nor stale; once the clock runs, both checks apply again.
    state = JointStateMap(arm, max_age=0.5, max_lead=0.1)
    names = list(arm.joint_names)
    recorded = 1_600_000_000 * SECOND
    state.update(names, np.zeros(7), np.zeros(7), [], recorded, now_ns=0)
    assert state.stamp_ns == recorded
    _assert_refused_without_change(state, "future", names, np.ones(7), np.ones(7), [], recorded + SECOND,
                                   now_ns=recorded)
    _assert_refused_without_change(state, "stale", names, np.ones(7), np.ones(7), [], recorded + SECOND,
                                   now_ns=recorded + 2 * SECOND)


def test_strict_mode_applies_at_once_to_name_lists_seen_before(arm):
    state = JointStateMap(arm)
    names = list(arm.joint_names) + ["gripper"]
    state.update(names, np.ones(8), np.ones(8), [], SECOND)
    state.strict = True
    error = _assert_refused_without_change(state, "unknown_joints", names, np.ones(8), np.ones(8), [], 2 * SECOND)
    assert error.joints == ["gripper"]
    state.strict = False
    state.update(names, np.full(8, 3.0), np.ones(8), [], 3 * SECOND)
    np.testing.assert_array_equal(state.q, np.full(7, 3.0))


def test_names_invented_by_a_publisher_neither_grow_memory_nor_flood_the_log(arm):
    state = JointStateMap(arm)
    names = list(arm.joint_names)
    for k in range(500):
        state.update(names + [f"sensor_{k}"], np.ones(8), np.ones(8), [], SECOND + k)
    huge = "x" * 1_000_000
    state.update(names + [huge], np.ones(8), np.ones(8), [], 2 * SECOND)
    assert len(state._layouts) <= 64
    assert sum(len(n) for key in state._layouts for n in key) < 100_000
    error = _assert_refused_without_change(state, "unknown_joints", [huge], [1.0], [1.0], [], 3 * SECOND)
    assert len(str(error)) < 1000 and "1000000 characters" in str(error)
    assert describe(["a" * 10, "b" * 100]).endswith("...(100 characters)")


def test_effort_needed_but_missing(arm):
    state = JointStateMap(arm)
    state.update(arm.joint_names, np.ones(7), np.ones(7), [], SECOND)
    state.check_ready(need_effort=False)
    with pytest.raises(JointStateError) as caught:
        state.check_ready(need_effort=True)
    assert caught.value.reason == "missing_effort"
    state.update(arm.joint_names, np.ones(7), np.ones(7), np.full(7, 2.0), SECOND)
    state.check_ready(need_effort=True)
    np.testing.assert_array_equal(state.effort, np.full(7, 2.0))


def test_floating_base_from_odometry(floating_arm):
    model = floating_arm
    state = JointStateMap(model)
    assert rd.FREE_FLYER_JOINT not in state.joint_names
    state.update(state.joint_names, np.zeros(7), np.zeros(7), [], SECOND)
    assert state.missing() == [rd.FREE_FLYER_JOINT]
    quaternion = np.array([0.1, -0.2, 0.3, 0.9])
    quaternion /= np.linalg.norm(quaternion)
    state.update_base([1, 2, 3], quaternion, [0.1, 0.2, 0.3], [-0.1, -0.2, -0.3], SECOND)
    state.check_ready()
    iq, iv = model.idx_q[rd.FREE_FLYER_JOINT], model.idx_v[rd.FREE_FLYER_JOINT]
    np.testing.assert_array_equal(state.q[iq : iq + 7], np.concatenate(([1, 2, 3], quaternion)))
    np.testing.assert_array_equal(state.v[iv : iv + 6], [0.1, 0.2, 0.3, -0.1, -0.2, -0.3])
    before = state.q.copy()
    for orientation in ([0, 0, 0, 2.0], [0, 0, math.nan, 1.0]):
        with pytest.raises(JointStateError) as caught:
            state.update_base([1, 2, 3], orientation, [0, 0, 0], [0, 0, 0], 2 * SECOND)
        assert caught.value.reason == "bad_base"
    for position, linear in (([1e300, 0, 0], [0, 0, 0]), ([1, 2, 3], [0, 1e200, 0])):
        with pytest.raises(JointStateError, match="implausible") as caught:
            state.update_base(position, quaternion, linear, [0, 0, 0], 2 * SECOND)
        assert caught.value.reason == "bad_base"
    with pytest.raises(JointStateError) as caught:
        state.update_base([1, 2, 3], quaternion, [0, 0, 0], [0, 0, 0], SECOND // 2)
    assert caught.value.reason == "out_of_order"
    np.testing.assert_array_equal(state.q, before)


def test_fixed_base_has_no_base_state(arm):
    with pytest.raises(InputError):
        JointStateMap(arm).update_base([0, 0, 0], [0, 0, 0, 1], [0, 0, 0], [0, 0, 0], SECOND)


def test_velocity_names(arm, floating_arm):
    assert velocity_names(arm) == list(arm.joint_names)
    names = velocity_names(floating_arm)
    assert len(names) == floating_arm.nv
    base = floating_arm.idx_v[rd.FREE_FLYER_JOINT]
    assert names[base : base + 6] == ["root_joint_vx", "root_joint_vy", "root_joint_vz",
                                       "root_joint_wx", "root_joint_wy", "root_joint_wz"]
    for joint in arm.joint_names:
        assert names[floating_arm.idx_v[joint]] == joint
