"""Tests of rbd_deriv.control.legged: whole-body MPC on the contacts of solo12 and talos.

Oracles: rd.contact_dynamics (the first knot's torques hold the posture: ddq ~ 0 at v = 0; the
plan's forces are the contact forces of its first state and torques), the exact friction cone,
the frame placements of the plan's swing feet, and the statics of the reference (torques and
forces balancing gravity, checked through rd.contact_dynamics again).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.contact_force import cone_violation
from rbd_deriv.control.dynamics import actuated_indices
from rbd_deriv.control.base_motion import BasePath
from rbd_deriv.control.legged import LeggedMPC, LeggedWeights
from rbd_deriv.control.statics import static_torques
from rbd_deriv.control.residuals import Knots
from rbd_deriv.control.schedule import Gait
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, LEGGED_ROBOTS, example_robot_srdf

#: |ddq| allowed at the first knot of a standing plan [m/s^2, rad/s^2]: 1 % of gravity. The
#: friction-cone barrier pulls the planned forces towards the cones' axes, which the posture
#: cost balances at a slight offset from the exact static torques.
STANDING_ACCELERATION = 0.0981


def robot(name):
    info = LEGGED_ROBOTS[name]
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=True)
    posture = reference_posture(model, example_robot_srdf(name), info["posture"], missing="neutral")
    return model, info["feet"], info["kind"], posture


def weights(name):
    return LeggedWeights(**LEGGED_ROBOTS[name].get("weights", {}))


@pytest.fixture(scope="module")
def solo():
    return robot("solo12")


@pytest.fixture(scope="module")
def talos():
    return robot("talos")


def _held_acceleration(model, feet, kind, q, torque):
    """ddq and forces of rd.contact_dynamics at rest under the actuated torques."""
    contacts = [rd.Contact(model, foot, kind) for foot in feet]
    tau = np.zeros(model.nv)
    tau[actuated_indices(model)] = torque
    ddq, forces = rd.contact_dynamics(model, model.create_data(), contacts, q, np.zeros(model.nv), tau)
    return ddq.copy(), forces.copy()


@pytest.mark.parametrize("name", ["solo12", "talos"])
def test_static_torques_hold_the_posture(name):
    model, feet, kind, q = robot(name)
    u, f = static_torques(model, q, feet, [kind] * len(feet), actuated_indices(model))
    ddq, forces = _held_acceleration(model, feet, kind, q, u)
    assert np.abs(ddq).max() < 1e-8, "the static torques leave the robot at rest"
    assert_close(forces, f, rtol=1e-8, what="the contact forces are the static ones")


@pytest.mark.parametrize("name", ["solo12", "talos"])
def test_standing_solve_holds_the_posture(name):
    model, feet, kind, q = robot(name)
    mpc = LeggedMPC(model, feet, Gait.standing(feet, kind), q, horizon=20, dt=0.02,
                    weights=weights(name))
    x0 = np.r_[q, np.zeros(model.nv)]
    costs = []
    for _ in range(4):
        plan = mpc.solve(x0, evaluate_cost=True)
        assert plan.ok and plan.sendable
        costs.append(plan.cost)
    assert all(b <= a + 1e-9 * abs(a) for a, b in zip(costs, costs[1:])), costs
    ddq, forces = _held_acceleration(model, feet, kind, q, plan.torque)
    assert np.abs(ddq).max() < STANDING_ACCELERATION, np.abs(ddq).max()
    assert_close(plan.forces, forces, rtol=1e-9, what="the plan's first-knot forces")
    weight = np.linalg.norm(rd.gravity_torques(model, model.create_data(), q)[:3])
    rows = 3 if kind == "point" else 6
    assert_close(forces[2::rows].sum(), weight, rtol=1e-2, what="the feet carry the weight")
    assert not cone_violation(forces, plan.offsets, mpc.mu).any()


def test_torso_orientation_cost_only_with_its_weight(talos):
    """No such cost at the default weight 0; with a weight, the torso frame's orientation error is
    zero at the posture (its reference) and the standing problem still solves."""
    model, feet, kind, q = talos
    gait = Gait.standing(feet, kind)
    plain = LeggedMPC(model, feet, gait, q, horizon=5, weights=weights("talos"))
    assert "torso orientation" not in [cost.name for cost in plain.ocp.running_costs]
    mpc = LeggedMPC(model, feet, gait, q, horizon=5, torso="torso_2_link",
                    weights=replace(weights("talos"), torso_orientation=100.0))
    cost = next(cost for cost in mpc.ocp.running_costs if cost.name == "torso orientation")
    x0 = np.r_[q, np.zeros(model.nv)]
    assert np.abs(cost.residual.value(Knots(x0[None]))).max() < 1e-12
    assert mpc.solve(x0).ok


def test_trot_ticks(solo):
    """Receding horizon along a trot: every tick's plan is sent (its first knot inside the cone),
    the open feet carry no force rows, the swing feet rise over their stance height, and at a
    fixed phase the real-time iterations lower the cost."""
    model, feet, kind, q = solo
    mpc = LeggedMPC(model, feet, Gait.trot(feet, swing=8, support=2), q, horizon=20, dt=0.02)
    x = np.r_[q, np.zeros(model.nv)]
    costs = [mpc.solve(x, phase=0, evaluate_cost=True).cost for _ in range(4)]
    assert costs[-1] < 0.5 * costs[0] and costs[2] <= costs[1], costs
    for tick in range(1, 8):
        x = mpc.solver.X[1].copy()
        plan = mpc.solve(x, phase=tick)
        assert plan.ok and plan.sendable, (tick, plan.cone_violation)
        active = mpc.dynamics.active
        assert ((plan.offsets >= 0) == active[0]).all()
        for k in range(mpc.horizon):
            contacts = [rd.Contact(model, foot) for foot, on in zip(feet, active[k]) if on]
            assert np.count_nonzero(mpc.solver.dynamics.F[k]) <= 3 * len(contacts)
            assert not mpc.solver.dynamics.F[k, 3 * len(contacts):].any(), "no force past the stance feet"
        data = model.create_data()
        lift = mpc.swing_reference[:, 2::3] - mpc.stance[:, 2]  # h sin^2(pi s) at each knot's state
        for c, foot in enumerate(feet):
            swing = np.flatnonzero(~active[:, c] & (lift[:, c] >= 0.5 * mpc.swing_height))
            assert swing.size or tick > 5
            for k in swing:
                rd.forward_kinematics(model, data, mpc.solver.X[k, :model.nq])
                height = rd.frame_placement(model, data, foot)[2, 3]
                assert height > mpc.stance[c, 2] + 0.25 * mpc.swing_height, (tick, foot, k, height)


def test_first_knot_check_refuses_a_plan_outside_the_cone(solo):
    """Joints too weak to hold the bent legs (torque box of 1 mN m): whatever the torques, the
    feet push outwards, beyond a cone of mu = 0.05, so the plan is not sent."""
    model, feet, kind, q = solo
    mpc = LeggedMPC(model, feet, Gait.standing(feet), q, horizon=10, dt=0.02, mu=0.05,
                    effort=np.full(12, 1e-3))
    plan = mpc.solve(np.r_[q, np.zeros(model.nv)])
    assert plan.ok
    expected = cone_violation(plan.forces, plan.offsets, 0.05).max()
    assert plan.cone_violation == pytest.approx(expected)
    assert expected > 0.1 and not plan.sendable


def test_bad_input(solo, talos):
    model, feet, kind, q = solo
    with pytest.raises(InputError, match="NO_FOOT"):
        names = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "NO_FOOT")
        LeggedMPC(model, names, Gait.standing(names), q)
    with pytest.raises(InputError, match="no contact"):
        LeggedMPC(model, feet, Gait(feet, np.array([[True] * 4, [False] * 4])), q, horizon=4)
    with pytest.raises(InputError, match="not the feet"):
        LeggedMPC(model, feet, Gait.standing(feet[::-1]), q)
    with pytest.raises(InputError, match="posture"):
        LeggedMPC(model, feet, Gait.standing(feet), q[:-1])
    mpc = LeggedMPC(model, feet, Gait.standing(feet), q, horizon=4)
    x = np.r_[q, np.zeros(model.nv)]
    x[20] = np.nan
    with pytest.raises(InputError, match="x0"):
        mpc.solve(x)
    talos_model = talos[0]
    with pytest.raises(InputError, match="does not set joints"):
        reference_posture(talos_model, example_robot_srdf("talos"), "half_sitting")
    fixed = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]))
    with pytest.raises(InputError, match="floating base"):
        LeggedMPC(fixed, feet, Gait.standing(feet), rd.neutral(fixed))


def test_standing_closed_loop_returns_after_a_push(solo):
    """solo12 on the rigid-contact plant (rd.contact_dynamics, every foot held) stepped at 1 kHz
    with the plan's feedback policy u = u_0 + K (x (-) x_0), an MPC tick every 20 ms, and a 5 N
    lateral push on the base for 0.1 s: the base moves, then comes back."""
    from rbd_deriv.testing.rigid_contact import RigidContactPlant, standing_loop
    model, feet, kind, q = solo
    mpc = LeggedMPC(model, feet, Gait.standing(feet), q, horizon=10, dt=0.02)
    x0 = np.r_[q, np.zeros(model.nv)]
    run = standing_loop(mpc, RigidContactPlant(model, feet, kind, x0), 1.5, [0.0, 5.0, 0.0], 0.3, 0.1)
    deviation = run["deviation"]
    assert run["refused"] == 0 and run["cone_violation"] == 0.0
    assert deviation[:300].max() < 1e-3, "standing still before the push"
    assert deviation.max() > 3e-3, "the push moves the base"
    assert deviation[-1] < 0.1 * deviation.max(), (deviation.max(), deviation[-1])


def test_base_path_positions_velocities_and_changes():
    """The path's velocity is its position's derivative (central differences), it stays at its origin
    before its start, and a change keeps the position continuous."""
    path = BasePath(origin=(0.1, -0.2), start=1.0, velocity=(0.2, 0.05), amplitude=0.03, period=2.0)
    times = np.linspace(1.1, 4.0, 30)
    position, velocity = path.at(times)
    h = 1e-6
    numeric = (path.at(times + h)[0] - path.at(times - h)[0]) / (2 * h)
    np.testing.assert_allclose(velocity, numeric, rtol=1e-6, atol=1e-8)
    before, still = path.at(np.array([0.0, 0.5]))
    np.testing.assert_array_equal(before, [[0.1, -0.2], [0.1, -0.2]])
    assert not still.any()
    np.testing.assert_allclose(path.at(np.array([3.0]))[0][0], [0.1 + 0.4, -0.2 + 0.1 + 0.03 * np.sin(2 * np.pi)],
                               atol=1e-12)
    stopped = path.moved(2.5, velocity=(0.0, 0.0), amplitude=0.0)
    np.testing.assert_allclose(stopped.at(np.array([2.5, 9.0]))[0], np.tile(path.at(np.array([2.5]))[0], (2, 1)),
                               atol=1e-12)
    for bad in ({"velocity": (np.nan, 0.0)}, {"origin": (0.0,)}, {"amplitude": -0.1}, {"period": 0.0}):
        with pytest.raises(InputError):
            BasePath(**bad)


def test_walking_references_move_the_base_and_land_the_swing_feet_ahead(solo):
    """Walking at 0.2 m/s along x from t = 0: the running base reference at knot k is v (t_0 + k dt), its
    velocity reference v (the posture's base frame is the world's); a swing foot's reference at its touchdown
    knot is where Raibert's rule puts it (under its hip at the base's reference, half its stance's travel
    ahead) and on the ground, and at its lift-off knot where its previous touchdown put it."""
    model, feet, kind, q = solo
    mpc = LeggedMPC(model, feet, Gait.trot(feet, swing=8, support=2), q, horizon=20, dt=0.02)
    velocity, start = np.array([0.2, 0.0]), 0.46
    mpc.set_path(BasePath(origin=tuple(q[:2]), velocity=tuple(velocity)), start)
    mpc.solve(np.r_[q, np.zeros(model.nv)], phase=3)
    times = start + mpc.dt * np.arange(mpc.horizon)
    np.testing.assert_allclose(mpc.state_reference[:, :2], q[:2] + times[:, None] * velocity, atol=1e-12)
    np.testing.assert_allclose(mpc.state_reference[:, model.nq:model.nq + 2], np.tile(velocity, (mpc.horizon, 1)),
                               atol=1e-12)
    np.testing.assert_allclose(mpc.final_reference[:2], q[:2] + (start + mpc.dt * mpc.horizon) * velocity,
                               atol=1e-12)
    stance_time = 12 * mpc.dt  # each foot of this trot is down 2 + 8 + 2 knots of 20
    # The base at rest where its reference walks at 0.2 m/s: the feet land the capture point's offset of that
    # velocity error behind Raibert's placement, sqrt(h / g) (0 - v), h the base's height above its feet.
    height = q[2] - mpc.stance[:, 2].mean()
    capture = np.sqrt(height / 9.81) * (0.0 - velocity)
    np.testing.assert_allclose(mpc.capture_offset, capture, atol=1e-12)
    touchdowns = mpc.gait.schedule(mpc.horizon, 3).touchdown
    checked = 0
    for k, c in zip(*np.nonzero(touchdowns)):
        offset = mpc.stance[c, :2] - q[:2]
        expected = q[:2] + velocity * times[k] + offset + 0.5 * stance_time * velocity
        np.testing.assert_allclose(mpc.swing_reference[k, 3 * c:3 * c + 2], expected + capture, atol=1e-12)
        assert mpc.swinging[k, c] and mpc.swing_reference[k, 3 * c + 2] == pytest.approx(mpc.stance[c, 2])
        lift_off = k - 8  # 8 knots in the air: the first open knot, one period after the last touchdown
        if lift_off >= 0:
            previous = expected - velocity * 20 * mpc.dt
            np.testing.assert_allclose(mpc.swing_reference[lift_off, 3 * c:3 * c + 2], previous, atol=1e-12)
        checked += 1
    assert checked >= 2


def test_swing_ends_lift_and_land_the_feet_without_horizontal_speed(solo):
    """Walking at 0.3 m/s with weights.swing_ends: its knots are, for each foot, the knot after its lift-off, the knot
    before its touchdown and the touchdown knot (read off the gait's table here); the horizontal reference holds the
    landing place at the last two; and the plan's feet
    (rd.frame_velocity at its states) move at most 2 cm/s horizontally there, where the same problem without the
    cost moves them at 0.15 m/s and more (a foot that lands that fast slides on the floor)."""
    model, feet, kind, q = solo
    gait = Gait.trot(feet, swing=8, support=2)
    data = model.create_data()
    fastest = {}
    for weight in (0.0, 1000.0):
        mpc = LeggedMPC(model, feet, gait, q, horizon=20, dt=0.02, weights=replace(weights("solo12"), swing_ends=weight))
        mpc.set_path(BasePath(origin=tuple(q[:2]), velocity=(0.3, 0.0)), 0.0)
        assert mpc.solve(np.r_[q, np.zeros(model.nv)], phase=0, iterations=20).ok
        down = gait.pattern[np.arange(mpc.horizon + 1) % gait.period]  # one knot past the horizon too
        before = np.vstack([gait.pattern[-1], down[:-1]])
        touchdown, liftoff = down & ~before, ~down & before
        ends = touchdown[:-1] | touchdown[1:]
        ends[1:] |= liftoff[:-2]
        touchdown = touchdown[:-1]
        if weight:
            np.testing.assert_array_equal(mpc.swing_ends, ends)
            for k, c in zip(*np.nonzero(touchdown[1:])):
                np.testing.assert_array_equal(mpc.swing_reference[k, 3 * c:3 * c + 2],
                                              mpc.swing_reference[k + 1, 3 * c:3 * c + 2])
        speeds = [np.hypot(*rd.frame_velocity(model, data, mpc.solver.X[k, :model.nq], mpc.solver.X[k, model.nq:],
                                              feet[c])[:2]) for k, c in zip(*np.nonzero(ends))]
        fastest[weight] = max(speeds)
    assert fastest[1000.0] < 0.02 and fastest[0.0] > 0.15, fastest

def test_far_from_the_plan_a_step_is_bounded_and_the_nominal_stays_finite(talos):
    """talos measured while moving at about 2 m/s or rad/s on every dof (a stumble, a robot pushed or left moving
    by a stalled controller): the full real-time step of the linearized contact dynamics overshoots by orders of
    magnitude there. Each of three Gauss-Newton iterations from scratch must keep a finite nominal whose velocities
    stay within reach of the measured ones (a joint's within 10 times its URDF limit plus its measured speed), and
    never end in an error: before the step was bounded, the overflowed nominal's next linearization raised a
    singular mass matrix at some joint."""
    model, feet, kind, q = talos
    mpc = LeggedMPC(model, feet, Gait.standing(feet, kind), q, horizon=20, dt=0.02, weights=weights("talos"))
    limit = np.asarray(model.velocity_limit, dtype=float)[6:]
    rng = np.random.default_rng(7)
    for _ in range(4):
        v = rng.normal(0.0, 2.0, model.nv)
        x0 = np.r_[q, v]
        mpc.solver.cold_start(x0, np.tile(mpc.u_static, (mpc.horizon, 1)))
        plan = mpc.solve(x0, phase=0, elapsed=0.0, iterations=3)  # a failed solve is a status, not an error
        X = mpc.solver.X
        assert np.isfinite(X).all() and np.isfinite(mpc.solver.U).all()
        joints = np.abs(X[:, model.nq + 6:])
        bound = np.where(np.isfinite(limit), 10.0 * limit * 3 + np.abs(v[6:]), np.inf)  # three steps at most
        assert (joints <= bound).all(), "a joint's planned speed ran away"


def test_a_turning_path_is_an_arc_its_velocity_the_derivative_and_a_changed_one_starts_where_it_was():
    """BasePath with a yaw rate: positions on the arc of the heading frame's velocity, velocities their derivative
    (central differences), the sway on top in the heading frame's y; moved, it continues from the pose reached,
    its sway going on in its phase."""
    path = BasePath(origin=(0.5, -0.2), start=1.0, velocity=(0.3, 0.1), yaw_rate=0.7, heading=0.4,
                    amplitude=0.02, period=1.5)
    times = np.linspace(0.0, 4.0, 4001)
    position, velocity, heading = path.poses(times)
    before = times < 1.0
    np.testing.assert_array_equal(position[before], np.tile([0.5, -0.2], (before.sum(), 1)))
    np.testing.assert_allclose(heading[~before], 0.4 + 0.7 * (times[~before] - 1.0), atol=1e-12)
    slope = np.gradient(position, times, axis=0)
    np.testing.assert_allclose(slope[1100:-1], velocity[1100:-1], atol=1e-6)
    # Without the sway, the speed is the command's and the arc's radius |v| / w.
    plain = BasePath(origin=(0.0, 0.0), velocity=(0.3, 0.1), yaw_rate=0.7)
    p, v, _ = plain.poses(times)
    np.testing.assert_allclose(np.hypot(*v.T), np.hypot(0.3, 0.1), atol=1e-12)
    centre = np.array([-0.1, 0.3]) / 0.7   # R(pi/2) v / w from the origin, heading 0
    np.testing.assert_allclose(np.hypot(*(p - centre).T), np.hypot(0.3, 0.1) / 0.7, atol=1e-12)
    moved = path.moved(2.5, velocity=(0.0, 0.0), yaw_rate=0.0)
    after = times >= 2.5
    np.testing.assert_allclose(moved.poses(times[after][:1])[0], position[after][:1], atol=1e-12)
    assert moved.sway_start == path.sway_start and moved.heading == pytest.approx(0.4 + 0.7 * 1.5)


def test_a_ramp_takes_the_references_from_the_start_to_the_posture_along_a_smoothstep(solo):
    """ramp_from: the joints' and the base height's references move from the start configuration's to the
    posture's, w(s) = 3 s^2 - 2 s^3 of the time since the ramp's start over its duration, the rest of the state
    reference untouched; past its end, the posture's; a bad start or duration is refused."""
    model, feet, kind, q = solo
    mpc = LeggedMPC(model, feet, Gait.standing(feet, kind), q, horizon=10, dt=0.02)
    start = q.copy()
    start[7:] += 0.3
    start[2] += 0.05
    mpc.ramp_from(start, 1.0, 0.5)
    mpc.set_path(BasePath(origin=tuple(q[:2])), 1.1)
    mpc.solve(np.r_[start, np.zeros(model.nv)], phase=0)
    s = np.clip((1.1 + 0.02 * np.arange(11) - 1.0) / 0.5, 0.0, 1.0)
    w = s * s * (3 - 2 * s)
    expected = start[7:] + w[:10, None] * (q[7:] - start[7:])
    np.testing.assert_allclose(mpc.state_reference[:, 7:model.nq], expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mpc.state_reference[:, 2], start[2] + w[:10] * (q[2] - start[2]), atol=1e-12)
    np.testing.assert_allclose(mpc.final_reference[7:model.nq], start[7:] + w[10] * (q[7:] - start[7:]), atol=1e-12)
    np.testing.assert_array_equal(mpc.state_reference[:, 3:7], np.tile(q[3:7], (10, 1)))
    mpc.set_path(BasePath(origin=tuple(q[:2])), 1.6)
    mpc.solve(np.r_[q, np.zeros(model.nv)], phase=0)
    np.testing.assert_array_equal(mpc.state_reference[:, :model.nq], np.tile(q, (10, 1)))
    for bad in ((start[:5], 0.0, 1.0), (start * np.nan, 0.0, 1.0), (start, 0.0, -1.0), (start, 0.0, np.inf)):
        with pytest.raises(InputError):
            mpc.ramp_from(*bad)


def test_the_planned_center_of_pressure_keeps_its_margin_from_the_soles_edges(talos):
    """talos standing, its base moving sideways at 0.3 m/s (pushed): planned up to the sole's edge (cop_margin 0),
    the first knot's center of pressure is past 85 % of the half-width (measured 0.91-0.94); with cop_margin 0.3
    every sole's is within 70 % of its half length and width (measured 0.62-0.67). The center of pressure is
    read from the plan's wrenches, (-tau_y, tau_x) / f_z at the sole's centre, the soles level."""
    from rbd_deriv.control.legged_settings import make_gait, parse_gait_table

    model, feet, kind, q = talos
    gait = make_gait("stand", feet, [kind] * 2, parse_gait_table([]), 0.02)
    half = 0.5 * np.array([0.21, 0.13])
    x0 = np.r_[q, np.zeros(model.nv)]
    x0[model.nq + 1] = 0.3
    reach = {}
    for margin in (0.0, 0.3):
        mpc = LeggedMPC(model, feet, gait, q, horizon=25, dt=0.02, weights=weights("talos"), sole_size=2 * half,
                        cop_margin=margin)
        plan = mpc.solve(x0, phase=0, iterations=5)
        assert plan.ok
        wrenches = [plan.forces[plan.offsets[c]:plan.offsets[c] + 6] for c in range(2)]
        reach[margin] = np.array([[-w[4] / w[2], w[3] / w[2]] for w in wrenches]) / half
    assert np.abs(reach[0.0][:, 1]).max() > 0.85, reach
    assert np.abs(reach[0.3]).max() <= 0.7 + 1e-3, reach
    for bad in (-0.1, 1.0, np.nan):
        with pytest.raises(InputError):
            LeggedMPC(model, feet, gait, q, sole_size=2 * half, cop_margin=bad)


def test_a_swinging_sole_is_held_flat_and_turned_to_the_heading_it_lands_with(talos):
    """talos walking (1 s cycle, soles down 70 % of it) on a path turning at 0.3 rad/s: each sole's orientation
    cost weighs exactly the knots where the sole swings and its touchdown knot (the gait's own table), its reference
    there the posture's sole orientation turned about z by the path's heading at that landing (the path's own
    heading, an independent formula: the yaw rate times the time since the path started); solo12's point feet have
    no such cost. Solved from the posture with the swinging right sole pitched by 0.15 rad, the plan lands every
    sole level within 0.02 rad (measured 0.007-0.009 rad; without the cost 0.026-0.035)."""
    from rbd_deriv.control.legged_settings import make_gait, parse_gait_table

    model, feet, kind, q = talos

    table = parse_gait_table(["walk: period=1.0 duty=0.7 offsets=0.0,0.5 swing_height=0.05"])
    gait = make_gait("walk", feet, [kind] * 2, table, 0.02)
    mpc = LeggedMPC(model, feet, gait, q, horizon=50, dt=0.02, weights=weights("talos"))
    assert sorted(mpc.sole_references) == [0, 1]
    rate, start = 0.3, 0.1
    mpc.set_path(BasePath(origin=tuple(q[:2]), velocity=(0.1, 0.0), yaw_rate=rate, start=0.0), start)
    # Knot 12 of the cycle: the right sole is in the air (since knot 10, down again at 25), here pitched 0.15 rad.
    x0 = np.r_[q, np.zeros(model.nv)]
    x0[model.idx_q["leg_right_5_joint"]] += 0.15
    plan = mpc.solve(x0, phase=12, iterations=3)
    assert plan.ok
    schedule = gait.schedule(mpc.horizon, 12)
    data = model.create_data()
    for c in (0, 1):
        held = ~schedule.active[:, c] | schedule.touchdown[:, c]
        assert held.any() and (~held).any()
        np.testing.assert_array_equal(mpc.sole_weights[c], held.astype(float))
        for k in np.flatnonzero(held):
            # The horizon knot where this swing lands: k itself at a touchdown, else the next knot down.
            landing = k if schedule.touchdown[k, c] else next(
                j for j in range(k + 1, k + gait.period) if gait.pattern[(12 + j) % gait.period, c])
            angle = rate * (start + landing * mpc.dt)
            turn = np.array([[np.cos(angle), -np.sin(angle), 0.0], [np.sin(angle), np.cos(angle), 0.0], [0, 0, 1]])
            np.testing.assert_allclose(mpc.sole_references[c][k], turn @ mpc.stance_rotations[c], atol=1e-12,
                                       err_msg=f"foot {c} knot {k}")
            if schedule.touchdown[k, c]:  # it lands level
                rd.forward_kinematics(model, data, mpc.solver.X[k, :model.nq])
                tilt = np.arccos(np.clip(rd.frame_placement(model, data, feet[c])[2, 2], -1.0, 1.0))
                assert tilt < 0.02, (c, k, tilt)
    solo_model, solo_feet, _, solo_q = robot("solo12")
    assert LeggedMPC(solo_model, solo_feet, Gait.trot(solo_feet, swing=8, support=2), solo_q).sole_references == {}


def _urdf_masses(path):
    import xml.etree.ElementTree as ElementTree

    return sum(float(mass.get("value")) for mass in ElementTree.parse(path).getroot().iter("mass"))


def test_torque_and_force_weights_per_robot_follow_its_limits_and_weight():
    """LeggedWeights.per_robot: the weight on u - u^s over the mean square of the actuated joints' effort limits,
    the one on f - f^r over the robot's weight squared (its mass summed from the URDF's own tags), every other
    weight as it was; a torque a tenth of every limit off costs the same whatever the limits; a joint without an
    effort limit is refused."""
    path = str(EXAMPLE_ROBOTS["solo12"])
    model = rd.load_urdf(path, floating_base=True)
    model.set_actuator_limits([2.7])
    given = LeggedWeights(torque=0.729, force=0.6015, swing=123.0)
    scaled = given.per_robot(model)
    weight = _urdf_masses(path) * 9.81
    assert scaled.torque == pytest.approx(0.729 / 2.7 ** 2, rel=1e-12)   # solo12's 0.1 /(N m)^2
    assert scaled.force == pytest.approx(0.6015 / weight ** 2, rel=1e-12)
    assert scaled.force == pytest.approx(1e-3, rel=1e-3)                  # and its 0.001 /N^2 (2.5 kg)
    assert replace(scaled, torque=given.torque, force=given.force) == given

    def cost(limits):
        model.set_actuator_limits(limits)
        share = 0.1 * np.asarray(model.effort_limit)[6:]
        return 0.5 * given.per_robot(model).torque * float(share @ share)

    assert cost([5.4]) == pytest.approx(cost([2.7]), rel=1e-12)
    assert cost(np.linspace(1.0, 3.0, 12)) == pytest.approx(cost([2.7]), rel=1e-12)
    free = ("<robot name='free'><link name='a'><inertial><mass value='1'/><inertia ixx='1' iyy='1' izz='1' "
            "ixy='0' ixz='0' iyz='0'/></inertial></link><joint name='j' type='continuous'><parent link='a'/>"
            "<child link='b'/><axis xyz='0 1 0'/></joint><link name='b'><inertial><mass value='1'/>"
            "<inertia ixx='1' iyy='1' izz='1' ixy='0' ixz='0' iyz='0'/></inertial></link></robot>")
    with pytest.raises(InputError, match=r"effort limit.*\['j'\]"):
        given.per_robot(rd.load_urdf(free, floating_base=True))
