"""Linearization of one semi-implicit Euler step (rbd_deriv.linearize).

ddq = aba(q, v, tau); v+ = v + dt ddq; q+ = integrate(q, dt v+); x = (q, v),
A = dx+/dx (2nv, 2nv) in the tangent space, B = dx+/dtau (2nv, nv).

Oracles: the same chain rule assembled from Pinocchio's ABA derivatives and
dIntegrate (1e-9), central finite differences of the step (1e-6), and the block
structure of B.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.testing import FINITE_DIFFERENCE_RTOL, assert_close, finite_diff

DT = 0.01


def pinocchio_step_and_linearization(bridge, q, v, tau, dt):
    """x+ and (A, B) of the semi-implicit Euler step, from Pinocchio's derivatives."""
    nv = bridge.nv
    dddq_dq, dddq_dv, Minv = bridge.aba_derivatives(q, v, tau)
    ddq = bridge.aba(q, v, tau)
    v_next = v + dt * ddq
    q_next = bridge.integrate(q, dt * v_next)
    Jq, Jv = bridge.dintegrate_dq(q, dt * v_next), bridge.dintegrate_dv(q, dt * v_next)
    identity = np.eye(nv)
    dv_dq, dv_dv, dv_dtau = dt * dddq_dq, identity + dt * dddq_dv, dt * Minv
    A = np.block([[Jq + dt * Jv @ dv_dq, dt * Jv @ dv_dv], [dv_dq, dv_dv]])
    B = np.vstack([dt * Jv @ dv_dtau, dv_dtau])
    return q_next, v_next, A, B


def _linearize(case, q, v, tau, dt=DT):
    A, B = rd.linearize(case.model, case.data, q, v, tau, dt)
    return A.copy(), B.copy(), case.data.x_next.copy()


def _check_pinocchio(case, dt=DT):
    model, bridge = case.model, case.bridge
    for q, v, tau in case.states("linearize"):
        A, B, x_next = _linearize(case, q, v, tau, dt)
        assert A.shape == (2 * model.nv, 2 * model.nv) and B.shape == (2 * model.nv, model.nv)
        assert x_next.shape == (model.nq + model.nv,)
        q_next, v_next, pin_A, pin_B = pinocchio_step_and_linearization(bridge, q, v, tau, dt)
        assert_close(x_next[model.nq:], v_next, what="v+")
        assert_close(bridge.difference(q_next, x_next[:model.nq]), np.zeros(model.nv), what="q+")
        assert_close(A, pin_A, what="A")
        assert_close(B, pin_B, what="B")


def test_linearization_matches_pinocchio(any_robot):
    _check_pinocchio(any_robot)


@pytest.mark.parametrize("dt", [1e-3, 0.05])
def test_linearization_matches_pinocchio_for_other_steps(small_robot, dt):
    _check_pinocchio(small_robot, dt)


def _check_finite_differences(case):
    q, v, a = case.states("linearize fd", 1)[0]
    # Torques giving accelerations of order one keep the round-off of the differences small.
    tau = rd.rnea(case.model, case.data, q, v, a).copy()
    A, B, _ = _linearize(case, q, v, tau)
    fd_A, fd_B = finite_diff.linearization(case.model, case.data, q, v, tau, DT)
    assert_close(A, fd_A, rtol=FINITE_DIFFERENCE_RTOL, what="A vs finite differences")
    assert_close(B, fd_B, rtol=FINITE_DIFFERENCE_RTOL, what="B vs finite differences")


def test_linearization_matches_finite_differences(light_robot):
    _check_finite_differences(light_robot)


def test_structure_of_b(random_robot):
    """B = [dt^2 dintegrate_dv(q, dt v+) Minv ; dt Minv]."""
    model, data = random_robot.model, random_robot.data
    nv, nq = model.nv, model.nq
    for q, v, tau in random_robot.states("structure"):
        A, B, x_next = _linearize(random_robot, q, v, tau)
        Minv = rd.minverse(model, data, q).copy()
        assert_close(B[nv:], DT * Minv, what="dv+/dtau == dt Minv")
        Jv = rd.dintegrate_dv(model, q, DT * x_next[nq:])
        assert_close(B[:nv], DT * DT * Jv @ Minv, what="dq+/dtau == dt^2 Jv Minv")
        # The velocity rows of A are the ABA derivatives scaled by dt, plus identity on v.
        dddq_dq, dddq_dv, _ = [x.copy() for x in rd.aba_derivatives(model, data, q, v, tau)]
        assert_close(A[nv:, :nv], DT * dddq_dq, what="dv+/dq")
        assert_close(A[nv:, nv:], np.eye(nv) + DT * dddq_dv, what="dv+/dv")


def test_linearization_with_armature_matches_pinocchio(armature_robot):
    _check_pinocchio(armature_robot)


def test_linearization_names_a_joint_where_massless_bodies_make_m_singular(massless_robot):
    q, v, tau = massless_robot.states("singular", 1)[0]
    massless_robot.assert_singular_named(rd.linearize, q, v, tau, DT)
    with pytest.raises(rd.ModelError, match="singular"):
        rd.linearize_batch(massless_robot.model, np.array([q, q]), np.array([v, v]), np.array([tau, tau]), DT)
