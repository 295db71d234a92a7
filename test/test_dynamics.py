"""Tests of rbd_deriv.control.dynamics: the providers without and with contacts against
rd.linearize and rd.contact_dynamics_derivatives knot by knot, the contact step and its forces
against central differences on the manifold, the touchdown impulse composition against finite
differences of the composed step x -> f(Phi(x), u), the actuated-joint selection."""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.dynamics import (ContactDynamics, FreeDynamics, KnotDynamics,
                                        actuated_indices)
from rbd_deriv.control.schedule import ContactSchedule, Gait
from rbd_deriv.control.state_space import ConfigurationSpace
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


@pytest.fixture(scope="module")
def solo():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)


def test_free_dynamics_is_linearize_with_torques_on_the_joints(solo):
    rng = np.random.default_rng(0)
    N, dt = 4, 0.01
    provider = FreeDynamics(solo, dt)
    assert provider.nu == 12 and provider.force_rows == 0
    X = np.array([np.r_[rd.integrate(solo, rd.neutral(solo), rng.uniform(-0.5, 0.5, 18)),
                        rng.uniform(-1, 1, 18)] for _ in range(N)])
    U = rng.uniform(-2, 2, (N, 12))
    provider.bias[:] = rng.uniform(-0.5, 0.5, 18)
    out = KnotDynamics(N, 37, 36, 12)
    provider.linearize(X, U, out)
    data = solo.create_data()
    for k in range(N):
        tau = provider.bias + np.r_[np.zeros(6), U[k]]
        A, B = rd.linearize(solo, data, X[k, :19], X[k, 19:], tau, dt)
        assert_close(out.A[k], A, what="A")
        assert_close(out.B[k], B[:, 6:], what="B on the actuated joints")
        assert_close(out.X_next[k], data.x_next, what="x+")


def test_actuated_joints_are_checked(solo):
    assert actuated_indices(solo).tolist() == list(range(6, 18))
    assert actuated_indices(solo, ["HR_KFE", "FL_HAA"]).tolist() == [17, 6]
    with pytest.raises(InputError, match="no joint"):
        actuated_indices(solo, ["FL_FOOT"])
    with pytest.raises(InputError, match="1-dof"):
        actuated_indices(solo, ["root_joint"])
    with pytest.raises(InputError, match="twice"):
        actuated_indices(solo, ["FL_HAA", "FL_HAA"])


FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


def trot_states(model, rng, count):
    """States near the neutral posture with the legs bent (every foot Jacobian of full rank)."""
    q = rd.neutral(model)
    for leg in ("FL", "FR", "HL", "HR"):
        q[model.idx_q[f"{leg}_HFE"]] = 0.8 if leg[0] == "F" else -0.8
        q[model.idx_q[f"{leg}_KFE"]] = -1.6 if leg[0] == "F" else 1.6
    return np.array([np.r_[rd.integrate(model, q, rng.uniform(-0.2, 0.2, 18)),
                           rng.uniform(-0.5, 0.5, 18)] for _ in range(count)])


def test_contact_dynamics_is_the_contact_linearization_knot_by_knot(solo):
    rng = np.random.default_rng(2)
    schedule = Gait.trot(FEET, swing=2, support=1).schedule(6, start=0)
    provider = ContactDynamics(solo, 0.01, schedule, impulses=False)
    assert provider.force_rows == 12 and provider.nu == 12
    X = trot_states(solo, rng, 6)
    U = rng.uniform(-1, 1, (6, 12))
    out = KnotDynamics(6, 37, 36, 12, provider.force_rows)
    out.F[:] = np.nan  # rows past a knot's contacts must be written (zero)
    provider.linearize(X, U, out)
    data = solo.create_data()
    offsets = schedule.force_offsets()
    assert_close(provider.offsets, offsets, what="offsets")
    for k in range(6):
        contacts = [rd.Contact(solo, name) for name in schedule.contacts_at(k)]
        m = 3 * len(contacts)
        tau = np.r_[np.zeros(6), U[k]]
        A, B = rd.linearize(solo, data, X[k, :19], X[k, 19:], tau, 0.01, contacts=contacts)
        assert_close(out.A[k], A, what=f"A at knot {k}")
        assert_close(out.B[k], B[:, 6:], what=f"B at knot {k}")
        assert_close(out.X_next[k], data.x_next, what=f"x+ at knot {k}")
        assert_close(out.F[k, :m], rd.contact_forces(solo, data, contacts), what="forces")
        assert not out.F[k, m:].any() and not out.dF_dx[k, m:].any() and not out.dF_du[k, m:].any()
        _, _, _, df_dq, df_dv, df_dtau = rd.contact_dynamics_derivatives(
            solo, data, contacts, X[k, :19], X[k, 19:], tau)
        assert_close(out.dF_dx[k, :m], np.hstack([df_dq, df_dv]), what="dF/dx")
        assert_close(out.dF_du[k, :m], df_dtau[:, 6:], what="dF/du")


def _central_difference(function, x, space, eps):
    """d function(x (+) dx) / d dx at 0, by central differences, for a function returning
    (state, forces): the state's derivative is taken as a tangent difference."""
    ndx = space.ndx
    state0, _ = function(x)
    columns_x, columns_f = [], []
    for j in range(ndx):
        step = np.zeros((1, ndx))
        step[0, j] = eps
        plus = space.integrate(x[None], step, np.empty((1, space.nx)))[0]
        minus = space.integrate(x[None], -step, np.empty((1, space.nx)))[0]
        (xp, fp), (xm, fm) = function(plus), function(minus)
        dp = space.difference(state0[None], xp[None], np.empty((1, ndx)))[0]
        dm = space.difference(state0[None], xm[None], np.empty((1, ndx)))[0]
        columns_x.append((dp - dm) / (2 * eps))
        columns_f.append((fp - fm) / (2 * eps))
    return np.array(columns_x).T, np.array(columns_f).T


@pytest.mark.parametrize("touchdown", [False, True])
def test_contact_step_against_finite_differences_on_the_manifold(solo, touchdown):
    """A, dF/dx by central differences of the step x -> f(x, u) (with the impulse Phi first at a
    touchdown), B and dF/du by differences in u; the states perturbed through integrate."""
    rng = np.random.default_rng(3)
    # Knot 1 is the first knot of a swing (no touchdown) or the knot where that swing lands.
    start = 1 if not touchdown else 2
    schedule = Gait.trot(FEET, swing=2, support=1).schedule(3, start=start)
    knot = 1
    assert bool(schedule.touchdown[knot].any()) == touchdown
    provider = ContactDynamics(solo, 0.01, schedule)
    space = ConfigurationSpace(solo)
    X = trot_states(solo, rng, 3)
    U = rng.uniform(-1, 1, (3, 12))
    out = KnotDynamics(3, 37, 36, 12, provider.force_rows)
    provider.linearize(X, U, out)
    contacts = [rd.Contact(solo, name) for name in schedule.contacts_at(knot)]
    m = 3 * len(contacts)
    data = solo.create_data()

    def step(x, u=U[knot]):
        v = x[19:]
        if touchdown:
            v = rd.impulse_dynamics(solo, data, contacts, x[:19], v)[0].copy()
        rd.linearize(solo, data, x[:19], v, np.r_[np.zeros(6), u], 0.01, contacts=contacts)
        return data.x_next.copy(), rd.contact_forces(solo, data, contacts).copy()

    x_next, forces = step(X[knot])
    assert_close(out.X_next[knot], x_next, what="x+")
    assert_close(out.F[knot, :m], forces, what="forces")
    A, dF_dx = _central_difference(step, X[knot], space, 1e-6)
    scale = np.abs(out.A[knot]).max()
    np.testing.assert_allclose(out.A[knot], A, atol=1e-6 * scale)
    np.testing.assert_allclose(out.dF_dx[knot, :m], dF_dx, atol=1e-6 * np.abs(dF_dx).max())
    B, dF_du = np.zeros((36, 12)), np.zeros((m, 12))
    for a in range(12):
        delta = np.zeros(12)
        delta[a] = 1e-6
        (xp, fp), (xm, fm) = step(X[knot], U[knot] + delta), step(X[knot], U[knot] - delta)
        B[:, a] = space.difference(xm[None], xp[None], np.empty((1, 36)))[0] / 2e-6
        dF_du[:, a] = (fp - fm) / 2e-6
    np.testing.assert_allclose(out.B[knot], B, atol=1e-6 * np.abs(B).max())
    np.testing.assert_allclose(out.dF_du[knot, :m], dF_du, atol=1e-6 * np.abs(dF_du).max())


def test_contact_dynamics_refuses_bad_input(solo):
    schedule = Gait.standing(FEET).schedule(3)
    with pytest.raises(InputError, match="NO_FOOT"):
        ContactDynamics(solo, 0.01, Gait.standing(("FL_FOOT", "NO_FOOT")).schedule(3))
    with pytest.raises(InputError, match="no contact"):
        ContactSchedule(FEET, np.array([[True] * 4, [False] * 4]))
    provider = ContactDynamics(solo, 0.01, schedule)
    with pytest.raises(InputError, match="schedule"):
        provider.set_schedule(Gait.standing(FEET).schedule(4))
    with pytest.raises(InputError, match="schedule"):
        provider.set_schedule(Gait.standing(FEET[::-1]).schedule(3))
    X = trot_states(solo, np.random.default_rng(0), 3)
    X[1, 25] = np.nan
    with pytest.raises(InputError):
        provider.linearize(X, np.zeros((3, 12)), KnotDynamics(3, 37, 36, 12, 12))
