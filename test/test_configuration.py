"""Configuration space (rbd_deriv.core.configuration): neutral, integrate, difference, their Jacobians,
random configurations; compared with Pinocchio's Lie-group operations."""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.testing import assert_close, finite_diff, random_urdf
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge


def _cases(robot_case, salt, count=3):
    rng = robot_case.rng(salt)
    nv = robot_case.model.nv
    for _ in range(count):
        yield robot_case.random_q(rng), robot_case.random_q(rng), rng.uniform(-1.5, 1.5, nv)


def test_neutral_matches_pinocchio(robot):
    import pinocchio as pin

    expected = robot.bridge.q_from_pin(pin.neutral(robot.bridge.model))
    np.testing.assert_array_equal(rd.neutral(robot.model), expected)


def _check_integrate_difference(case):
    model, bridge = case.model, case.bridge
    for q0, q1, v in _cases(case, "integrate"):
        ours = rd.integrate(model, q0, v)
        # Same point on the manifold (angles may differ by 2 pi, quaternions by sign).
        assert_close(bridge.difference(bridge.integrate(q0, v), ours), np.zeros(model.nv), what="integrate")
        assert_close(rd.difference(model, q0, q1), bridge.difference(q0, q1), what="difference")
        assert_close(rd.dintegrate_dq(model, q0, v), bridge.dintegrate_dq(q0, v), what="dintegrate_dq")
        assert_close(rd.dintegrate_dv(model, q0, v), bridge.dintegrate_dv(q0, v), what="dintegrate_dv")


def test_integrate_difference_match_pinocchio(any_robot):
    _check_integrate_difference(any_robot)


def test_round_trips(random_robot):
    model = random_robot.model
    for q0, q1, v in _cases(random_robot, "round trip"):
        # integrate(q0, difference(q0, q1)) lands on q1.
        back = rd.integrate(model, q0, rd.difference(model, q0, q1))
        assert_close(rd.difference(model, q1, back), np.zeros(model.nv), what="integrate(difference)")
        # difference(q0, integrate(q0, v)) gives v back while rotations stay below pi.
        small = 0.5 * v / max(1.0, np.abs(v).max())
        assert_close(rd.difference(model, q0, rd.integrate(model, q0, small)), small, what="difference(integrate)")
        assert_close(rd.difference(model, q0, q0), np.zeros(model.nv), what="difference(q, q)")


@pytest.mark.parametrize("floating_base", [False, True])
def test_continuous_difference_wraps_to_minus_pi_pi(floating_base):
    xml = random_urdf(np.random.default_rng(3), 8, joint_kinds=("continuous", "revolute"), kind_weights=(3, 1))
    model = rd.load_urdf(xml, floating_base=floating_base)
    continuous = [name for i, name in enumerate(model.joint_names, start=1) if model.continuous[i]]
    assert continuous == PinocchioBridge.for_model(model, xml).continuous_joints and continuous
    rng = np.random.default_rng(4)
    q0 = rd.random_configuration(model, rng)
    q1 = q0.copy()
    for name in continuous:
        q1[model.idx_q[name]] += 2 * np.pi * 3 + 0.25
    difference = rd.difference(model, q0, q1)
    for name in model.joint_names:
        expected = 0.25 if name in continuous else 0.0
        iv, nv = model.idx_v[name], model.nv_joint[name]
        np.testing.assert_allclose(difference[iv:iv + nv], expected, rtol=0, atol=1e-12, err_msg=name)


def test_dintegrate_matches_finite_differences(small_robot):
    model = small_robot.model
    for q0, _, v in _cases(small_robot, "dintegrate fd", count=1):
        def integrate_at(q):
            return rd.integrate(model, q, v)

        def difference(a, b):
            return rd.difference(model, a, b)

        jacobian_q = finite_diff.manifold_difference(
            integrate_at, q0, lambda q, dq: rd.integrate(model, q, dq), model.nv, output_difference=difference
        )
        nominal = integrate_at(q0)
        jacobian_v = finite_diff.central_difference(lambda vv: difference(nominal, rd.integrate(model, q0, vv)), v)
        assert_close(rd.dintegrate_dq(model, q0, v), jacobian_q, rtol=1e-6, what="dintegrate_dq vs FD")
        assert_close(rd.dintegrate_dv(model, q0, v), jacobian_v, rtol=1e-6, what="dintegrate_dv vs FD")


def test_random_configuration_is_valid_and_reproducible(robot):
    model = robot.model
    first = rd.random_configuration(model, np.random.default_rng(42))
    second = rd.random_configuration(model, np.random.default_rng(42))
    np.testing.assert_array_equal(first, second)
    for q in [first] + [rd.random_configuration(model, np.random.default_rng(s)) for s in range(5)]:
        assert q.shape == (model.nq,) and np.all(np.isfinite(q))
        finite = np.isfinite(model.lower_position_limit)
        assert np.all(q[finite] >= model.lower_position_limit[finite])
        assert np.all(q[finite] <= model.upper_position_limit[finite])
        if model.has_floating_base:
            assert np.linalg.norm(q[3:7]) == pytest.approx(1.0, abs=1e-14)
            assert np.all(np.abs(q[:3]) <= 1.0)


def test_small_quaternion_error_is_normalized_silently():
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

    model = rd.load_urdf(EXAMPLE_ROBOTS["solo12"], floating_base=True)
    q = rd.random_configuration(model, np.random.default_rng(1))
    slightly_off = q.copy()
    slightly_off[3:7] *= 1 + 5e-7
    v = np.zeros(model.nv)
    assert_close(rd.integrate(model, slightly_off, v)[3:7], q[3:7], what="normalized quaternion")
