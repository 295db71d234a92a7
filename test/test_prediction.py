"""Tests of rbd_deriv.control.prediction's contact prediction (``predict_on_contacts``), without ROS.

Oracles: the legged MPC's own step maps, computed by another code path (``ContactDynamics.linearize``: one
``rd.linearize_batch`` with contacts, the touchdown impulse composed in): one step of dt from a knot's state
under a constant torque is the knot's x+ = f(x, u), with a touchdown knot's impulse; and statics: the torques
that hold a posture on its feet keep it there.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.dynamics import ContactDynamics, KnotDynamics
from rbd_deriv.control.statics import static_torques
from rbd_deriv.control.prediction import predict_on_contacts
from rbd_deriv.control.schedule import ContactSchedule
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf


@pytest.fixture(scope="module")
def solo():
    info = LEGGED_ROBOTS["solo12"]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf("solo12"), info["posture"], missing="neutral")
    return model, tuple(info["feet"]), posture


def step_of_the_mpc(model, feet, active, before, x, u, dt):
    """x+ of one knot of the legged MPC's dynamics (its own kernel path)."""
    schedule = ContactSchedule(feet, np.array([active]), "point", before=np.array(before))
    dynamics = ContactDynamics(model, dt, schedule)
    out = KnotDynamics(1, model.nq + model.nv, 2 * model.nv, dynamics.nu, dynamics.force_rows)
    dynamics.linearize(np.array([x]), np.array([u]), out)
    return out.X_next[0]


@pytest.mark.parametrize("active, before", [((True, False, False, True), (True, False, False, True)),
                                            ((True, True, True, True), (True, False, False, True))],
                         ids=["two feet down", "touchdown of two feet"])
def test_one_step_is_the_mpc_knot_map(solo, active, before):
    model, feet, posture = solo
    rng = np.random.default_rng(4)
    q = posture.copy()
    q[7:] += 0.05 * rng.standard_normal(model.nq - 7)
    v = 0.3 * rng.standard_normal(model.nv)
    u = rng.standard_normal(model.nv - 6)
    dt = 0.01
    contacts = tuple(rd.Contact(model, foot, "point") for foot, on in zip(feet, active) if on)
    # The feet the gait had down before the step are stopped already (an impulse on them changes nothing),
    # the others touch down: the prediction's impulse at t = 0 is the MPC's touchdown impulse.
    down_before = tuple(rd.Contact(model, foot, "point") for foot, on in zip(feet, before) if on)
    v = np.array(rd.impulse_dynamics(model, model.create_data(), down_before, q, v)[0])
    x_next = step_of_the_mpc(model, feet, active, before, np.r_[q, v], u, dt)
    actuated = np.arange(6, model.nv)
    q1, v1 = predict_on_contacts(model, model.create_data(), q, v, dt, lambda q, v, t: u, lambda t: contacts,
                                 actuated, step=dt)
    np.testing.assert_allclose(np.r_[q1, v1], x_next, rtol=1e-9, atol=1e-9)


def test_statics_hold_and_fine_steps_converge(solo):
    model, feet, posture = solo
    contacts = tuple(rd.Contact(model, foot, "point") for foot in feet)
    u, _ = static_torques(model, posture, feet, ["point"] * 4, np.arange(6, model.nv))
    data = model.create_data()
    q1, v1 = predict_on_contacts(model, data, posture, np.zeros(model.nv), 0.05, lambda q, v, t: u,
                                 lambda t: contacts, np.arange(6, model.nv))
    np.testing.assert_allclose(q1, posture, atol=1e-9)
    assert np.abs(v1).max() < 1e-8
    # Nothing to predict over: the measured state, as new arrays.
    q0, v0 = predict_on_contacts(model, data, posture, np.zeros(model.nv), 0.0, None, None, None)
    assert q0 is not posture and np.array_equal(q0, posture)
    # Two feet swinging under a PD pull: halving the step changes the state by the integrator's first-order
    # error only (about half as much again each time).
    swing = tuple(c for c, on in zip(contacts, (True, False, False, True)) if on)
    target = posture[7:] + 0.1

    def pd(q, v, t):
        return u - 2.0 * (q[7:] - target) - 0.02 * v[6:]

    states = [np.r_[predict_on_contacts(model, data, posture, np.zeros(model.nv), 0.04, pd, lambda t: swing,
                                        np.arange(6, model.nv), step=h)] for h in (2e-3, 1e-3, 5e-4, 2.5e-4)]
    differences = [np.abs(a - b).max() for a, b in zip(states, states[1:])]
    assert differences[0] > differences[1] > differences[2] and differences[2] < 0.7 * differences[1]


def test_a_bad_state_is_refused(solo):
    model, feet, posture = solo
    contacts = tuple(rd.Contact(model, foot, "point") for foot in feet)
    q = posture.copy()
    q[8] = np.nan
    with pytest.raises(InputError):
        predict_on_contacts(model, model.create_data(), q, np.zeros(model.nv), 0.01,
                            lambda q, v, t: np.zeros(model.nv - 6), lambda t: contacts, np.arange(6, model.nv))
