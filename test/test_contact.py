"""Rigid contacts (rbd_deriv.core.contact): KKT dynamics, impulses, their derivatives, the contact linearization.

Oracles: Pinocchio's constraintDynamics / computeConstraintDynamicsDerivatives / impulseDynamics /
computeImpulseDynamicsDerivatives (LOCAL_WORLD_ALIGNED contact models, 1e-9; Pinocchio's own accuracy with one
proximal iteration is about 1e-10), central finite differences on the manifold (1e-6), identities (the equation
of motion, zero contact acceleration, the structure of dddq/dtau). The linearization is checked against finite differences of the Euler step (the
step Crocoddyl's IntegratedActionModelEuler takes over its contact dynamics).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.testing import FINITE_DIFFERENCE_RTOL, assert_close, finite_diff
from rbd_deriv.testing.pinocchio_contact import PinocchioContacts
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


SOLO_FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
ANYMAL_FEET = ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT")
SOLES = ("leg_left_sole_fix_joint", "leg_right_sole_fix_joint")
HAND = "gripper_left_joint"

CASES = {
    "solo12-4": ("solo12", [(f, "point") for f in SOLO_FEET]),
    "solo12-3": ("solo12", [(f, "point") for f in SOLO_FEET[:3]]),
    "solo12-2": ("solo12", [(f, "point") for f in SOLO_FEET[1:3]]),
    "anymal-4": ("anymal", [(f, "point") for f in ANYMAL_FEET]),
    "talos-2soles": ("talos", [(f, "frame") for f in SOLES]),
    "talos-1sole": ("talos", [(SOLES[1], "frame")]),
    "talos-2soles-hand": ("talos", [(f, "frame") for f in SOLES] + [(HAND, "point")]),
}


def _case(load_robot, label):
    name, specs = CASES[label]
    robot = load_robot(name, True)
    contacts = [rd.Contact(robot.model, frame, kind=kind) for frame, kind in specs]
    return robot, contacts


def _states(robot, salt, count=2):
    """Random (q, v, tau) with nonzero velocities."""
    return robot.states(salt, count)


def _moderate_state(robot, salt):
    """A random state whose torques give accelerations of order one: a random tau on the light joints (grippers,
    head) gives huge ones, whose round-off divided by the step would swamp finite differences."""
    q, v, a = robot.states(salt, 1)[0]
    return q, v, rd.rnea(robot.model, robot.data, q, v, a).copy()


@pytest.fixture(params=list(CASES))
def case(request, load_robot):
    return _case(load_robot, request.param)


def test_contact_dynamics_match_pinocchio(case):
    robot, contacts = case
    reference = PinocchioContacts(robot.bridge, contacts)
    for q, v, tau in _states(robot, "contact dynamics"):
        ddq, forces = rd.contact_dynamics(robot.model, robot.data, contacts, q, v, tau)
        pin_ddq, pin_forces = reference.dynamics(q, v, tau)
        assert forces.shape == (sum(c.rows for c in contacts),)
        assert_close(ddq, pin_ddq, what="ddq")
        assert_close(forces, pin_forces, what="forces")


def test_contact_derivatives_match_pinocchio(case):
    robot, contacts = case
    reference = PinocchioContacts(robot.bridge, contacts)
    names = ("dddq_dq", "dddq_dv", "dddq_dtau", "dforces_dq", "dforces_dv", "dforces_dtau")
    for q, v, tau in _states(robot, "contact derivatives"):
        ours = [x.copy() for x in rd.contact_dynamics_derivatives(robot.model, robot.data, contacts, q, v, tau)]
        for mine, theirs, name in zip(ours, reference.derivatives(q, v, tau), names):
            assert_close(mine, theirs, what=name)
        # The by-products are the dynamics themselves.
        ddq, forces = reference.dynamics(q, v, tau)
        assert_close(robot.data.ddq, ddq, what="ddq by-product")
        assert_close(rd.contact_forces(robot.model, robot.data, contacts), forces, what="forces by-product")


def test_contact_identities(case):
    robot, contacts = case
    model, data = robot.model, robot.data
    q, v, tau = _states(robot, "contact identities", 1)[0]
    ddq, forces = [x.copy() for x in rd.contact_dynamics(model, data, contacts, q, v, tau)]
    J = np.vstack([rd.frame_jacobian(model, data, q, c.frame)[:c.rows] for c in contacts])
    M = rd.crba(model, data, q).copy()
    b = rd.nonlinear_effects(model, data, q, v).copy()
    assert_close(M @ ddq + b, tau + J.T @ forces, what="M ddq + b = tau + J^T f")
    for c in contacts:
        if c.kind == "point":
            acceleration = rd.frame_classical_acceleration(model, data, q, v, ddq, c.frame)[:3]
        else:
            acceleration = rd.frame_acceleration(model, data, q, v, ddq, c.frame)
        assert_close(acceleration, np.zeros(c.rows), what=f"contact acceleration at {c.frame}")
    dddq_dq, dddq_dv, dddq_dtau, df_dq, df_dv, df_dtau = [
        x.copy() for x in rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)]
    scale = np.abs(dddq_dtau).max()
    assert_close(dddq_dtau / scale, dddq_dtau.T / scale, what="dddq/dtau symmetric")
    assert_close(J @ dddq_dtau / scale, np.zeros((len(forces), model.nv)), what="J dddq/dtau = 0")
    # df/dtau = -Lambda J M^-1 and dddq/dtau = M^-1 (I + J^T df/dtau), formed here with numpy's inverses, whose
    # own rounding (condition number of M times that of the Delassus matrix, about 1e7 on talos) needs 1e-8.
    Minv = np.linalg.inv(M)
    Lambda = np.linalg.inv(J @ Minv @ J.T)
    assert_close(df_dtau, -Lambda @ J @ Minv, rtol=1e-8, what="df/dtau")
    assert_close(dddq_dtau, Minv @ (np.eye(model.nv) + J.T @ df_dtau), rtol=1e-8, what="dddq/dtau")


@pytest.mark.parametrize("label", ["solo12-3", "talos-2soles-hand"])
def test_contact_derivatives_match_finite_differences(label, load_robot):
    robot, contacts = _case(load_robot, label)
    model, data = robot.model, robot.data
    q, v, tau = _moderate_state(robot, "contact fd")
    # Another external force, in the frame of the root body (on the light links, random forces would give
    # accelerations too large for the finite differences).
    fext = np.zeros((model.njoints, 6))
    fext[1] = robot.random_fext(robot.rng("contact fd fext"))[1]
    ours = [x.copy() for x in rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau, fext)]

    def both(qq, vv, tt):
        ddq, forces = rd.contact_dynamics(model, data, contacts, qq, vv, tt, fext)
        return np.concatenate([ddq, forces])

    nv = model.nv
    eps = finite_diff.FORWARD_DYNAMICS_STEP
    by_q = finite_diff.manifold_difference(lambda qq: both(qq, v, tau), q, lambda qq, dq: rd.integrate(model, qq, dq),
                                           nv, eps)
    by_v = finite_diff.central_difference(lambda vv: both(q, vv, tau), v, eps)
    by_tau = finite_diff.central_difference(lambda tt: both(q, v, tt), tau, eps)
    for k, (fd, name) in enumerate(((by_q, "q"), (by_v, "v"), (by_tau, "tau"))):
        assert_close(ours[k], fd[:nv], rtol=FINITE_DIFFERENCE_RTOL, what=f"dddq/d{name}")
        assert_close(ours[3 + k], fd[nv:], rtol=FINITE_DIFFERENCE_RTOL, what=f"dforces/d{name}")


def _rotation(axis_angle):
    """exp3 of an axis-angle vector (Rodrigues)."""
    theta = np.linalg.norm(axis_angle)
    K = np.array([[0.0, -axis_angle[2], axis_angle[1]], [axis_angle[2], 0.0, -axis_angle[0]],
                  [-axis_angle[1], axis_angle[0], 0.0]]) / theta
    return np.eye(3) + np.sin(theta) * K + (1.0 - np.cos(theta)) * K @ K


def _offset_placement(model, data, q, frame, rng, angle=0.4, distance=0.05):
    """The frame's placement at q, turned by ``angle`` about a random axis and moved by ``distance``."""
    rd.forward_kinematics(model, data, q)
    placement = rd.frame_placement(model, data, frame).copy()
    axis = rng.normal(size=3)
    placement[:3, :3] = placement[:3, :3] @ _rotation(angle * axis / np.linalg.norm(axis))
    direction = rng.normal(size=3)
    placement[:3, 3] += distance * direction / np.linalg.norm(direction)
    return placement


def _gains_case(robot, plain, q, zero_error=False):
    """The contacts of ``plain`` with Baumgarte gains: points pulled to a position, frames to a placement (their
    placement at q when ``zero_error``, else one turned and moved from it)."""
    model, rng = robot.model, robot.rng("baumgarte references")
    contacts = []
    for k, c in enumerate(plain):
        if c.kind == "point":  # Pinocchio's 3D corrector: -kp (p - p_ref) - kd v_p, p_ref its joint2 placement
            contacts.append(rd.Contact(model, c.frame, baumgarte=(20.0 + k, 3.0), reference=[0.1 * k, -0.2, 0.05]))
        else:  # its 6D corrector: -kp R log6(ref^-1 oMc) - kd (v_p, w)
            if zero_error:
                rd.forward_kinematics(model, robot.data, q)
                ref = rd.frame_placement(model, robot.data, c.frame).copy()
            else:
                ref = _offset_placement(model, robot.data, q, c.frame, rng)
            contacts.append(rd.Contact(model, c.frame, kind="frame", baumgarte=(15.0 + k, 4.0 + k), reference=ref))
    return contacts


@pytest.mark.parametrize("label", ["solo12-4", "talos-2soles", "talos-2soles-hand"])
def test_baumgarte_matches_pinocchio(label, load_robot):
    robot, plain = _case(load_robot, label)
    model = robot.model
    states = _states(robot, "baumgarte")
    contacts = _gains_case(robot, plain, states[0][0])
    reference = PinocchioContacts(robot.bridge, contacts)
    names = ("dddq_dq", "dddq_dv", "dddq_dtau", "dforces_dq", "dforces_dv", "dforces_dtau")
    frames = any(c.kind == "frame" for c in contacts)
    for q, v, tau in states:
        ddq, forces = [x.copy() for x in rd.contact_dynamics(model, robot.data, contacts, q, v, tau)]
        pin_ddq, pin_forces = reference.dynamics(q, v, tau)
        assert_close(ddq, pin_ddq, what="ddq")
        assert_close(forces, pin_forces, what="forces")
        ours = rd.contact_dynamics_derivatives(model, robot.data, contacts, q, v, tau)
        for k, (mine, theirs, name) in enumerate(zip(ours, reference.derivatives(q, v, tau), names)):
            # Pinocchio's q-derivative of a frame's position gain is kp Jlog6 J_LWA, which is the derivative of
            # its dynamics only where the placement error vanishes (its finite differences disagree elsewhere):
            # ours is checked there (test_frame_position_gain_at_zero_error_matches_pinocchio) and by finite
            # differences (test_baumgarte_derivatives_match_finite_differences).
            if not (frames and k in (0, 3)):
                assert_close(mine, theirs, what=f"{name} with Baumgarte gains")
    # The reference is read at each call.
    q, v, tau = states[0]
    before = rd.contact_dynamics(model, robot.data, contacts, q, v, tau)[0].copy()
    if contacts[0].kind == "point":
        contacts[0].reference = contacts[0].reference + 0.1
    else:
        contacts[0].reference = _offset_placement(model, robot.data, q, contacts[0].frame, robot.rng("moved"))
    after = rd.contact_dynamics(model, robot.data, contacts, q, v, tau)[0].copy()
    assert np.abs(after - before).max() > 1e-3
    reference = PinocchioContacts(robot.bridge, contacts)
    assert_close(after, reference.dynamics(q, v, tau)[0], what="ddq after moving the reference")


def test_frame_position_gain_at_zero_error_matches_pinocchio(load_robot):
    robot, plain = _case(load_robot, "talos-2soles")
    q, v, tau = _states(robot, "baumgarte zero error", 1)[0]
    contacts = _gains_case(robot, plain, q, zero_error=True)
    ours = rd.contact_dynamics_derivatives(robot.model, robot.data, contacts, q, v, tau)
    names = ("dddq_dq", "dddq_dv", "dddq_dtau", "dforces_dq", "dforces_dv", "dforces_dtau")
    for mine, theirs, name in zip(ours, PinocchioContacts(robot.bridge, contacts).derivatives(q, v, tau), names):
        assert_close(mine, theirs, what=name)
    # kp still acts on the derivatives (kp J): without it they differ.
    without = [rd.Contact(robot.model, c.frame, kind="frame", baumgarte=(0.0, c.baumgarte[1])) for c in contacts]
    dforces_dq = rd.contact_dynamics_derivatives(robot.model, robot.data, without, q, v, tau)[3]
    assert np.abs(dforces_dq - ours[3]).max() > 1e-3 * np.abs(ours[3]).max()


@pytest.mark.parametrize("label", ["talos-2soles-hand", "solo12-3"])
def test_baumgarte_derivatives_match_finite_differences(label, load_robot):
    robot, plain = _case(load_robot, label)
    model, data = robot.model, robot.data
    q, v, tau = _moderate_state(robot, "baumgarte fd")
    contacts = _gains_case(robot, plain, q)
    ours = [x.copy() for x in rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)]

    def both(qq, vv, tt):
        return np.concatenate(rd.contact_dynamics(model, data, contacts, qq, vv, tt))

    nv = model.nv
    eps = finite_diff.FORWARD_DYNAMICS_STEP
    by_q = finite_diff.manifold_difference(lambda qq: both(qq, v, tau), q, lambda qq, dq: rd.integrate(model, qq, dq),
                                           nv, eps)
    by_v = finite_diff.central_difference(lambda vv: both(q, vv, tau), v, eps)
    for k, (fd, name) in enumerate(((by_q, "q"), (by_v, "v"))):
        assert_close(ours[k], fd[:nv], rtol=FINITE_DIFFERENCE_RTOL, what=f"dddq/d{name}")
        assert_close(ours[3 + k], fd[nv:], rtol=FINITE_DIFFERENCE_RTOL, what=f"dforces/d{name}")


@pytest.mark.parametrize("label", ["solo12-4", "solo12-2", "talos-2soles", "talos-2soles-hand", "anymal-4"])
@pytest.mark.parametrize("restitution", [0.0, 0.4])
def test_impulses_match_pinocchio(label, restitution, load_robot):
    robot, contacts = _case(load_robot, label)
    model, data = robot.model, robot.data
    reference = PinocchioContacts(robot.bridge, contacts)
    q, v, _ = _states(robot, "impulse", 1)[0]
    v_plus, impulses = [x.copy() for x in rd.impulse_dynamics(model, data, contacts, q, v, restitution)]
    pin_v_plus, pin_impulses = reference.impulse(q, v, restitution)
    assert_close(v_plus, pin_v_plus, what="v+")
    assert_close(impulses, pin_impulses, what="impulses")
    J = np.vstack([rd.frame_jacobian(model, data, q, c.frame)[:c.rows] for c in contacts])
    assert_close(J @ v_plus, -restitution * J @ v, what="J v+ = -e J v")
    ours = rd.impulse_dynamics_derivatives(model, data, contacts, q, v, restitution)
    names = ("dv+/dq", "dv+/dv", "dimpulses/dq", "dimpulses/dv")
    for mine, theirs, name in zip(ours, reference.impulse_derivatives(q, v, restitution), names):
        assert_close(mine, theirs, what=name)


def test_impulse_derivatives_match_finite_differences(load_robot):
    robot, contacts = _case(load_robot, "talos-2soles-hand")
    model, data = robot.model, robot.data
    q, v, _ = _states(robot, "impulse fd", 1)[0]
    ours = [x.copy() for x in rd.impulse_dynamics_derivatives(model, data, contacts, q, v, 0.3)]

    def both(qq, vv):
        return np.concatenate(rd.impulse_dynamics(model, data, contacts, qq, vv, 0.3))

    nv = model.nv
    by_q = finite_diff.manifold_difference(lambda qq: both(qq, v), q, lambda qq, dq: rd.integrate(model, qq, dq), nv)
    by_v = finite_diff.central_difference(lambda vv: both(q, vv), v)
    assert_close(ours[0], by_q[:nv], rtol=FINITE_DIFFERENCE_RTOL, what="dv+/dq")
    assert_close(ours[1], by_v[:nv], rtol=FINITE_DIFFERENCE_RTOL, what="dv+/dv")
    assert_close(ours[2], by_q[nv:], rtol=FINITE_DIFFERENCE_RTOL, what="dimpulses/dq")
    assert_close(ours[3], by_v[nv:], rtol=FINITE_DIFFERENCE_RTOL, what="dimpulses/dv")


@pytest.mark.parametrize("label", ["solo12-3", "talos-2soles"])
def test_contact_linearization_matches_finite_differences(label, load_robot):
    robot, contacts = _case(load_robot, label)
    model, data = robot.model, robot.data
    q, v, tau = _moderate_state(robot, "contact linearize")
    dt = 0.01
    A, B = [x.copy() for x in rd.linearize(model, data, q, v, tau, dt, contacts=contacts)]
    x_next = data.x_next.copy()
    forces = rd.contact_forces(model, data, contacts).copy()
    q_next, v_next = finite_diff.semi_implicit_euler_step(model, data, q, v, tau, dt, contacts)
    assert_close(x_next, np.concatenate([q_next, v_next]), what="x+")
    assert_close(forces, rd.contact_dynamics(model, data, contacts, q, v, tau)[1], what="forces of the step")
    fd_A, fd_B = finite_diff.linearization(model, data, q, v, tau, dt, contacts=contacts)
    assert_close(A, fd_A, rtol=FINITE_DIFFERENCE_RTOL, what="A")
    assert_close(B, fd_B, rtol=FINITE_DIFFERENCE_RTOL, what="B")


@pytest.mark.parametrize("label", ["solo12-4", "talos-2soles"])
def test_contact_linearization_is_the_euler_step_of_the_derivatives(label, load_robot):
    """The bottom rows of A and B are dt times the derivatives of contact_dynamics_derivatives (plus I on the
    v block), the top rows Jv dt times them plus Jq: the linearization reads the three blocks where the KKT
    solve leaves them, and none may be taken for another."""
    robot, contacts = _case(load_robot, label)
    model, data = robot.model, robot.data
    q, v, tau = _moderate_state(robot, "contact linearize")
    dt, nv = 0.01, model.nv
    A, B = [x.copy() for x in rd.linearize(model, data, q, v, tau, dt, contacts=contacts)]
    step = dt * data.x_next[model.nq:]
    dq, dv, dtau = [x.copy() for x in rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)[:3]]
    Jq, Jv = rd.dintegrate_dq(model, q, step), rd.dintegrate_dv(model, q, step)
    bottom_A = np.hstack([dt * dq, np.eye(nv) + dt * dv])
    assert_close(A[nv:], bottom_A, rtol=1e-12, what="bottom rows of A")
    assert_close(B[nv:], dt * dtau, rtol=1e-12, what="bottom rows of B")
    assert_close(A[:nv], dt * Jv @ bottom_A + np.hstack([Jq, np.zeros((nv, nv))]), rtol=1e-12, what="top of A")
    assert_close(B[:nv], dt * Jv @ (dt * dtau), rtol=1e-12, what="top rows of B")


def test_contact_linearization_batch_is_the_single_call(load_robot):
    robot, contacts = _case(load_robot, "solo12-4")
    model, data = robot.model, robot.data
    rng = robot.rng("contact batch")
    count = 9
    Q = np.array([robot.random_q(rng) for _ in range(count)])
    V, TAU = rng.uniform(-1, 1, (2, count, model.nv))
    # [] a flight; the last two repeat earlier sets in other sequences (one layout per distinct set).
    gait = [contacts, contacts[:2], contacts[1:], [contacts[3]], [], contacts[::2], contacts[:1], list(contacts),
            tuple(contacts[:2])]
    A, B, X, F = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait)
    assert F.shape == (count, 12)
    for k in range(count):
        A1, B1 = rd.linearize(model, data, Q[k], V[k], TAU[k], 0.01, contacts=gait[k])
        m = 3 * len(gait[k])
        assert np.array_equal(A[k], A1) and np.array_equal(B[k], B1) and np.array_equal(X[k], data.x_next)
        assert np.array_equal(F[k, :m], rd.contact_forces(model, data, gait[k])) and not F[k, m:].any()
    # A flight phase is the dynamics without contact.
    A1, B1 = [x.copy() for x in rd.linearize(model, data, Q[4], V[4], TAU[4], 0.01)]
    assert_close(A[4], A1, what="A without contacts")
    assert_close(B[4], B1, what="B without contacts")
    ddq, forces = rd.contact_dynamics(model, data, [], Q[4], V[4], TAU[4])
    assert forces.shape == (0,)
    assert_close(ddq, rd.aba(model, data, Q[4], V[4], TAU[4]), what="ddq without contacts")
    # One contact set for every state.
    A, B, X, F = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=contacts)
    A1, B1 = rd.linearize(model, data, Q[2], V[2], TAU[2], 0.01, contacts=contacts)
    assert np.array_equal(A[2], A1) and np.array_equal(B[2], B1)


def test_contact_batch_layouts_follow_the_references(load_robot):
    """A batch lays out each contact set once per model and reuses it in later batches: a reference moved
    between two batches (a settable target of the position gain) is the one the next batch uses, as the single
    call does; sets given as lists, tuples or the same object for many states are the same set."""
    robot, plain = _case(load_robot, "solo12-4")
    model, data = robot.model, robot.data
    rng = robot.rng("contact batch references")
    gained = [rd.Contact(model, c.frame, baumgarte=(20.0, 3.0), reference=[0.1, -0.2, 0.05]) for c in plain[:2]]
    count = 6
    Q = np.array([robot.random_q(rng) for _ in range(count)])
    V, TAU = rng.uniform(-1, 1, (2, count, model.nv))
    shared = [gained[0], plain[2]]
    gait = [shared, shared, tuple(shared), list(gained), plain, shared]
    for reference in ([0.1, -0.2, 0.05], [-0.3, 0.4, 0.0]):
        gained[0].reference = reference
        A, B, X, F = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait)
        for k in range(count):
            A1, B1 = rd.linearize(model, data, Q[k], V[k], TAU[k], 0.01, contacts=gait[k])
            assert np.array_equal(A[k], A1) and np.array_equal(B[k], B1) and np.array_equal(X[k], data.x_next)
    other = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    with pytest.raises(rd.InputError, match="another model"):
        rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=[[rd.Contact(other, "FL_FOOT")]] * count)


@pytest.mark.parametrize("label", ["solo12-4", "talos-2soles-hand"])
def test_contact_batch_force_derivatives_are_the_single_calls(load_robot, label):
    """dforces/dx and dforces/du of a batch: each state's rows are those of contact_dynamics_derivatives with
    its own set (same kernel), zero below them; repeated batches of other sizes on the same thread (its
    workspaces are reused) and batches on two threads at once give the same results."""
    robot, contacts = _case(load_robot, label)
    model, data = robot.model, robot.data
    rng = robot.rng("contact batch derivatives")
    count, nv = 7, model.nv
    Q = np.array([robot.random_q(rng) for _ in range(count)])
    V, TAU = rng.uniform(-1, 1, (2, count, nv))
    gait = [contacts, contacts[:1], [], contacts[::-1], contacts[1:], list(contacts), contacts[:1]]
    A, B, X, F, dF_dx, dF_du = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, force_derivatives=True)
    rows = max(sum(c.rows for c in s) for s in gait)
    assert dF_dx.shape == (count, rows, 2 * nv) and dF_du.shape == (count, rows, nv)
    for k in range(count):
        d = rd.contact_dynamics_derivatives(model, data, gait[k], Q[k], V[k], TAU[k])
        m = d[3].shape[0]
        assert np.array_equal(dF_dx[k, :m, :nv], d[3]) and np.array_equal(dF_dx[k, :m, nv:], d[4])
        assert np.array_equal(dF_du[k, :m], d[5])
        assert not dF_dx[k, m:].any() and not dF_du[k, m:].any()
    # Smaller, then larger batches on this thread, and without the derivatives.
    small = rd.linearize_batch(model, Q[3:5], V[3:5], TAU[3:5], 0.01, contacts=gait[3:5], force_derivatives=True)
    for ours, full in zip(small, (A, B, X, F, dF_dx, dF_du)):
        assert np.array_equal(ours, full[3:5, :ours.shape[1]])
    big = np.concatenate([Q, Q]), np.concatenate([V, V]), np.concatenate([TAU, TAU])
    again = rd.linearize_batch(model, *big, 0.01, contacts=gait + gait)
    for ours, full in zip(again, (A, B, X, F)):
        assert np.array_equal(ours[:count], full) and np.array_equal(ours[count:], full)
    # Two threads at once, each its own workspaces.
    results = [None, None]

    def run(slot):
        results[slot] = [rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, force_derivatives=True)
                         for _ in range(20)]

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for per_thread in results:
        for result in per_thread:
            assert all(np.array_equal(x, y) for x, y in zip(result, (A, B, X, F, dF_dx, dF_du)))
    with pytest.raises(rd.InputError, match="force_derivatives"):
        rd.linearize_batch(model, Q, V, TAU, 0.01, force_derivatives=True)


@pytest.mark.parametrize("label", ["solo12-4"])
def test_contact_batch_into_given_arrays(load_robot, label):
    """out=: the batch writes the very arrays given, with the results it returns otherwise, the forces' rows
    past a state's own zeroed when the arrays have more rows than the largest set (a controller's buffers sized
    for every contact), also for a tuple of sets given again (described once, found by its identity) and
    without the derivatives; an array that does not fit is refused, naming out."""
    robot, contacts = _case(load_robot, label)
    model = robot.model
    rng = robot.rng("contact batch out")
    count, nv = 5, model.nv
    Q = np.array([robot.random_q(rng) for _ in range(count)])
    V, TAU = rng.uniform(-1, 1, (2, count, nv))
    gait = tuple(tuple(s) for s in (contacts[:2], contacts[1:3], contacts[:1], contacts[:2], contacts[2:3]))
    expected = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, force_derivatives=True)
    rows = sum(c.rows for c in contacts)
    for _ in range(2):  # the second time with the tuple's description kept
        out = (np.full((count, 2 * nv, 2 * nv), np.nan), np.full((count, 2 * nv, nv), np.nan),
               np.full((count, model.nq + nv), np.nan), np.full((count, rows), np.nan),
               np.full((count, rows, 2 * nv), np.nan), np.full((count, rows, nv), np.nan))
        got = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, force_derivatives=True, out=out)
        assert all(a is b for a, b in zip(got, out))
        for ours, theirs in zip(got, expected):
            assert np.array_equal(ours[:, :theirs.shape[1]], theirs)
            assert not ours[:, theirs.shape[1]:].any()
    plain = rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, out=[array.copy() for array in out[:4]])
    assert all(np.array_equal(a, b) for a, b in zip(plain, got[:4]))
    with pytest.raises(rd.InputError, match="out"):
        rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=gait, out=(out[0][:, :, :3],) + out[1:4])
    with pytest.raises(rd.InputError, match="out"):
        rd.linearize_batch(model, Q[:4], V[:4], TAU[:4], 0.01, contacts=gait[:4], out=out[:4])


# --- bad input ---------------------------------------------------------------------------------------------------


def test_contact_refuses_bad_descriptions(load_robot):
    robot = load_robot("solo12", True)
    model = robot.model
    with pytest.raises(rd.InputError, match="no frame named"):
        rd.Contact(model, "NO_SUCH_FOOT")
    with pytest.raises(rd.InputError, match="kind"):
        rd.Contact(model, "FL_FOOT", kind="line")
    for gains in ((1.0,), (-1.0, 2.0), (np.nan, 1.0), "ab"):
        with pytest.raises(rd.InputError, match="baumgarte"):
            rd.Contact(model, "FL_FOOT", baumgarte=gains)
    with pytest.raises(rd.InputError, match="reference"):
        rd.Contact(model, "FL_FOOT", baumgarte=(10.0, 1.0))
    with pytest.raises(rd.InputError, match="reference"):
        rd.Contact(model, "FL_FOOT", baumgarte=(10.0, 1.0), reference=[0.0, np.inf, 0.0])
    with pytest.raises(rd.InputError, match="reference"):  # a frame's reference is a placement
        rd.Contact(model, "FL_FOOT", kind="frame", baumgarte=(10.0, 1.0), reference=np.zeros(3))
    with pytest.raises(rd.InputError, match="needs a reference world placement"):
        rd.Contact(model, "FL_FOOT", kind="frame", baumgarte=(10.0, 1.0))
    sheared = np.eye(4)
    sheared[0, 1] = 1e-6
    flipped = np.diag([1.0, 1.0, -1.0, 1.0])
    projective = np.eye(4)
    projective[3, 0] = 1.0
    for placement in (sheared, flipped, projective):
        with pytest.raises(rd.InputError, match="orthonormal"):
            rd.Contact(model, "FL_FOOT", kind="frame", baumgarte=(10.0, 1.0), reference=placement)
    contact = rd.Contact(model, "FL_FOOT", kind="frame", baumgarte=(10.0, 1.0), reference=np.eye(4))
    with pytest.raises(rd.InputError, match="orthonormal"):
        contact.reference = sheared
    assert np.array_equal(contact.reference, np.eye(4))  # a refused reference leaves the last one
    arm = load_robot("ur5", False)
    with pytest.raises(rd.InputError, match="fixed to the universe"):
        rd.Contact(arm.model, arm.model.frame_names[0])


def _snapshot(data):
    return data.ws.copy()


def test_contact_functions_refuse_bad_input_before_writing(load_robot):
    robot, contacts = _case(load_robot, "solo12-4")
    model, data = robot.model, robot.data
    q, v, tau = _states(robot, "bad input", 1)[0]
    rd.contact_dynamics(model, data, contacts, q, v, tau)
    other = load_robot("anymal", True)
    foreign = [rd.Contact(other.model, "LF_FOOT")]
    bad = {
        "q": (np.full(model.nq, np.nan), v, tau),
        "v": (q, np.r_[v[:-1], np.inf], tau),
        "tau": (q, v, tau[:-1]),
    }
    functions = [
        lambda qq, vv, tt, cc: rd.contact_dynamics(model, data, cc, qq, vv, tt),
        lambda qq, vv, tt, cc: rd.contact_dynamics_derivatives(model, data, cc, qq, vv, tt),
        lambda qq, vv, tt, cc: rd.impulse_dynamics(model, data, cc, qq, vv),
        lambda qq, vv, tt, cc: rd.impulse_dynamics_derivatives(model, data, cc, qq, vv),
        lambda qq, vv, tt, cc: rd.linearize(model, data, qq, vv, tt, 0.01, contacts=cc),
    ]
    for k, function in enumerate(functions):
        for name, (qq, vv, tt) in bad.items():
            if name == "tau" and k in (2, 3):
                continue
            before = _snapshot(data)
            with pytest.raises(rd.InputError) as error:
                function(qq, vv, tt, contacts)
            assert error.value.argument == name
            assert np.array_equal(_snapshot(data), before), "an InputError must leave data as it was"
        for cc, match in ((foreign, "another model"), ([contacts[0], "FR_FOOT"], "Contact"),
                          (contacts + [contacts[0]], "redundant"),
                          ([contacts[0], rd.Contact(model, "FL_FOOT", kind="frame")], "redundant")):
            before = _snapshot(data)
            with pytest.raises(rd.InputError, match=match):
                function(q, v, tau, cc)
            assert np.array_equal(_snapshot(data), before)
    for fext, match in ((np.full((model.njoints, 6), np.nan), "NaN"), (np.zeros((model.njoints, 5)), "shape")):
        with pytest.raises(rd.InputError, match=match) as error:
            rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau, fext)
        assert error.value.argument == "fext"
    with pytest.raises(rd.InputError, match="restitution"):
        rd.impulse_dynamics(model, data, contacts, q, v, restitution=-0.1)
    with pytest.raises(rd.InputError, match="dt"):
        rd.linearize(model, data, q, v, tau, 0.0, contacts=contacts)
    with pytest.raises(rd.InputError, match="state 1 of 2"):
        rd.linearize_batch(model, np.array([q, q * np.nan]), np.array([v, v]), np.array([tau, tau]), 0.01,
                           contacts=contacts)
    # Lists and other dtypes are converted (the slow path), with the same results.
    for function in functions:
        expected = [np.array(x, copy=True) for x in function(q, v, tau, contacts)]
        got = function(list(q), list(v), tau.astype(np.float32).astype(np.float64).tolist(), contacts)
        for a, b in zip(got, expected):
            assert_close(a, b, rtol=1e-6)


def test_redundant_contacts_at_a_configuration_name_the_contact(load_robot):
    # A fixed-base six-joint arm whose tip is held by a frame contact has no motion left: a further point
    # contact on another body adds rows that depend on the first six (found by the Delassus factorization).
    arm = load_robot("ur5", False)
    model, data = arm.model, arm.data
    contacts = [rd.Contact(model, model.joint_names[-1], kind="frame"), rd.Contact(model, model.joint_names[2])]
    q, v, tau = arm.states("rank", 1)[0]
    rd.contact_dynamics(model, data, contacts[:1], q, v, tau)
    before = data.ddq.copy()
    with pytest.raises(rd.InputError, match=r"redundant contacts: the rows of contact 1"):
        rd.contact_dynamics(model, data, contacts, q, v, tau)
    assert np.array_equal(data.ddq, before)
    forces = rd.contact_forces(model, data, contacts).copy()
    with pytest.raises(rd.InputError, match="redundant"):
        rd.contact_dynamics(model, data, contacts, q, v, tau)
    assert np.array_equal(rd.contact_forces(model, data, contacts), forces), "a failed call keeps the forces"
    # In a batch, the error names the state and the frames of its own contact set.
    Q, V, TAU = (np.array([x, x]) for x in (q, v, tau))
    frames = [c.frame for c in contacts]
    with pytest.raises(rd.InputError, match=rf"state 1 of 2: contacts: redundant contacts: the rows of contact 1"
                       rf" \('{frames[1]}', point\) depend on those of '{frames[0]}'") as error:
        rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=[contacts[:1], contacts])
    assert error.value.argument == "contacts"
    with pytest.raises(rd.InputError, match=rf"state 0 of 2: .*contact 1 \('{frames[1]}'"):
        rd.linearize_batch(model, Q, V, TAU, 0.01, contacts=contacts)


@pytest.mark.parametrize("label", ["solo12-4", "talos-2soles"])
def test_contacts_with_armature_match_pinocchio(label, load_robot):
    robot, contacts = _case(load_robot, label)
    model, bridge = robot.model, robot.bridge
    armature = robot.rng("armature").uniform(0.0, 0.3, model.nv)
    armature[:6] = 0.0  # the free flyer has no rotor
    try:
        model.armature = armature
        bridge.model.armature = armature
        reference = PinocchioContacts(bridge, contacts)
        q, v, tau = _states(robot, "armature", 1)[0]
        ddq, forces = [x.copy() for x in rd.contact_dynamics(model, robot.data, contacts, q, v, tau)]
        pin_ddq, pin_forces = reference.dynamics(q, v, tau)
        assert_close(ddq, pin_ddq, what="ddq with armature")
        assert_close(forces, pin_forces, what="forces with armature")
        ours = rd.contact_dynamics_derivatives(model, robot.data, contacts, q, v, tau)
        for mine, theirs in zip(ours, reference.derivatives(q, v, tau)):
            assert_close(mine, theirs, what="derivatives with armature")
        v_plus, impulses = rd.impulse_dynamics(model, robot.data, contacts, q, v, 0.2)
        pin_v_plus, pin_impulses = reference.impulse(q, v, 0.2)
        assert_close(v_plus, pin_v_plus, what="v+ with armature")
        ours = rd.impulse_dynamics_derivatives(model, robot.data, contacts, q, v, 0.2)
        for mine, theirs in zip(ours, reference.impulse_derivatives(q, v, 0.2)):
            assert_close(mine, theirs, what="impulse derivatives with armature")
    finally:
        model.armature = np.zeros(model.nv)
        bridge.model.armature = np.zeros(model.nv)
