"""Tests of rbd_deriv.control.locked_joints: a reduced model's policies written for the full robot.

Oracles: the reduced policy itself (on the joints it plans, the expanded policy gives the torques the reduced one
gives), Pinocchio on the full model (the locked joints' gravity torques, their inertias in M), the spring law
written out, and physics: talos in MuJoCo, its 44 joints driven by the expanded policies of an MPC that plans 14,
stands through a push with its arms, grippers and head where they were locked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.locked_joints import LockedJoints, locked_positions
from rbd_deriv.control.policy import FeedbackPolicy
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf

TALOS = str(EXAMPLE_ROBOTS["talos"])
UPPER_BODY = ("arm_", "gripper_", "head_")


@pytest.fixture(scope="module")
def talos():
    """The full talos, its upper body locked at the SRDF's half-sitting, and the reduced model."""
    from rbd_deriv.control.srdf import reference_posture

    full = rd.load_urdf(TALOS, floating_base=True)
    posture = reference_posture(full, example_robot_srdf("talos"), "half_sitting", missing="neutral")
    names = [n for n in full.actuated_joint_names if n.startswith(UPPER_BODY)]
    positions = locked_positions(full, names, posture)
    reduced = rd.load_urdf(TALOS, floating_base=True, locked_joints=positions)
    return full, reduced, positions, LockedJoints(full, reduced, positions, frequency=8.0, damping_ratio=0.9)


def random_policy(model, rng, knots=4, gain_knots=2):
    """A reduced policy with random states near neutral, torques and gains."""
    q = np.array([rd.integrate(model, rd.neutral(model), 0.3 * rng.standard_normal(model.nv)) for _ in range(knots)])
    x_ref = np.hstack([q, rng.standard_normal((knots, model.nv))])
    nu = len(model.actuated_joint_names)
    return FeedbackPolicy(1_000_000_000, 0.02, 0.5, x_ref, rng.standard_normal((knots, nu)) * 10.0,
                          rng.standard_normal((gain_knots, nu, 2 * model.nv)) * 50.0)


def test_on_the_planned_joints_the_expanded_policy_is_the_reduced_one(talos):
    """At a full state whose locked joints sit at their positions, still, the expanded policy gives every planned
    joint the reduced policy's torque at each knot and between knots; the locked joints get Pinocchio's gravity
    torque of the full model at the reference configuration (nothing else: they are where they should be)."""
    full, reduced, positions, locked = talos
    rng = np.random.default_rng(0)
    policy = random_policy(reduced, rng)
    expanded = locked.expand(policy)
    assert expanded.x_ref.shape == (4, full.nq + full.nv) and expanded.gains.shape == (2, 44, 2 * full.nv)
    bridge = PinocchioBridge(TALOS, floating_base=True)
    inf = np.full(44, np.inf)
    rows = [list(full.actuated_joint_names).index(n) for n in reduced.actuated_joint_names]
    locked_rows = [list(full.actuated_joint_names).index(n) for n in locked.names]
    for t_ns in (policy.stamp_ns, policy.stamp_ns + 27_000_000, policy.stamp_ns + 61_000_000):
        q_r = rd.integrate(reduced, policy.x_ref[1, :reduced.nq], 0.05 * rng.standard_normal(reduced.nv))
        v_r = rng.standard_normal(reduced.nv)
        x_full = locked.full_states(np.r_[q_r, v_r])[0]
        tau_full = expanded.torque(full, x_full[:full.nq], x_full[full.nq:], t_ns, -inf, inf)
        tau_reduced = policy.torque(reduced, q_r, v_r, t_ns, -inf[:len(rows)], inf[:len(rows)])
        assert_close(tau_full[rows], tau_reduced, rtol=1e-12, what="planned joints")
        knot = min(int((t_ns - policy.stamp_ns) / 20e6), 3)
        gravity = bridge.gravity_torques(expanded.x_ref[knot, :full.nq])
        assert_close(tau_full[locked_rows], gravity[[full.idx_v[n] for n in locked.names]], rtol=1e-9,
                     what="locked joints' gravity torques")
    for name, value in positions.items():
        assert np.all(expanded.x_ref[:, full.idx_q[name]] == value)
        assert np.all(expanded.x_ref[:, full.nq + full.idx_v[name]] == 0.0)


def test_a_locked_joint_is_held_by_a_spring_of_its_own_inertia(talos):
    """Moved off its position by dq at speed dv, a locked joint's torque changes by -kp dq - kd dv, with kp = M_jj
    w^2 and kd = 2 zeta M_jj w (M from Pinocchio's CRBA of the full model at the locked posture), and nothing else
    changes."""
    full, reduced, positions, locked = talos
    rng = np.random.default_rng(1)
    policy = random_policy(reduced, rng, knots=2, gain_knots=1)
    expanded = locked.expand(policy)
    inf = np.full(44, np.inf)
    x = expanded.x_ref[0].copy()
    base = expanded.torque(full, x[:full.nq], x[full.nq:], policy.stamp_ns, -inf, inf)
    q_lock = rd.neutral(full)
    for name, value in positions.items():
        q_lock[full.idx_q[name]] = value
    M = PinocchioBridge(TALOS, floating_base=True).crba(q_lock)
    w = 2.0 * math.pi * 8.0
    for name in ("arm_left_4_joint", "head_1_joint", "gripper_right_joint"):
        j, row = full.idx_v[name], list(full.actuated_joint_names).index(name)
        moved = x.copy()
        moved[full.idx_q[name]] += 0.01
        moved[full.nq + j] += -0.2
        tau = expanded.torque(full, moved[:full.nq], moved[full.nq:], policy.stamp_ns, -inf, inf)
        kp, kd = M[j, j] * w * w, 2.0 * 0.9 * M[j, j] * w
        change = np.zeros(44)
        change[row] = -kp * 0.01 - kd * (-0.2)
        assert_close(tau - base, change, rtol=1e-9, what=name)


def test_a_command_keeps_the_last_gravity_torques_on_the_locked_joints(talos):
    full, reduced, _, locked = talos
    policy = random_policy(reduced, np.random.default_rng(2))
    expanded = locked.expand(policy)
    command = np.arange(len(reduced.actuated_joint_names), dtype=float)
    out = locked.expand_command(command)
    names = list(full.actuated_joint_names)
    assert_close(out[[names.index(n) for n in reduced.actuated_joint_names]], command, rtol=0.0, what="planned")
    assert_close(out[[names.index(n) for n in locked.names]], expanded.u_ff[0, [names.index(n) for n in locked.names]],
                 rtol=0.0, what="locked")


def test_bad_locks_are_refused(talos):
    full, reduced, positions, _ = talos
    q = rd.neutral(full)
    with pytest.raises(InputError, match="not actuated joints"):
        locked_positions(full, ["root_joint"], q)
    with pytest.raises(InputError, match="not actuated joints"):
        locked_positions(full, ["arm_left_8_joint"], q)
    with pytest.raises(InputError, match="twice"):
        locked_positions(full, ["head_1_joint", "head_1_joint"], q)
    for frequency, ratio in ((0.0, 1.0), (float("nan"), 1.0), (5.0, -1.0)):
        with pytest.raises(InputError, match="finite and > 0"):
            LockedJoints(full, reduced, positions, frequency, ratio)
    other = rd.load_urdf(TALOS, floating_base=True, locked_joints={"head_1_joint": 0.0})
    with pytest.raises(InputError, match="less the locked ones"):
        LockedJoints(full, other, positions)


def test_talos_stands_through_a_push_on_an_mpc_that_plans_its_legs_and_torso():
    """The MPC node's legged loop on the reduced talos (config/talos.yaml's weights, 14 joints planned), its
    policies expanded to the 44 joints of the robot side in MuJoCo at 1 kHz, ticks every 10 ms reaching the robot
    4 ms later: from straight legs it bends to half-sitting, takes a 0.2 m/s lateral push and stands. The locked
    joints stay within 0.1 rad of their positions (measured 0.031: the push shakes them on their 10 Hz springs),
    the base within 3 cm of its height (measured 1.2 cm)."""
    pytest.importorskip("mujoco")
    from rbd_deriv.control.policy import PolicyExecutor
    from rbd_deriv.demo.processes import read_parameters
    from rbd_deriv.mpc_loops import legged_loop, planning_model
    from rbd_deriv.nodes.parameters import MPC_NODE
    from rbd_deriv.sim import Ground, make_plant
    from rbd_deriv.sim.ground import rest_on_floor

    p = {name: spec.default for name, spec in MPC_NODE.items()}
    for name in ("mpc_node.yaml", "talos.yaml"):
        p.update(read_parameters(name)["mpc_node"])
    robot = rd.load_urdf(TALOS, floating_base=True)
    names = [n for n in robot.actuated_joint_names if n.startswith(UPPER_BODY)]
    p.update(urdf_path=TALOS, srdf_path=str(example_robot_srdf("talos")), locked_joints=names)
    model, locked = planning_model(robot, TALOS, p)
    assert model.nv == 20 and len(locked.names) == 30
    loop = legged_loop(model, p)
    loop.warm_up()
    sim = read_parameters("talos.yaml")["sim_node"]
    ground = Ground(tuple(p["contact_frames"]), tuple(p["contact_kinds"]), sole_size=tuple(sim["sole_size"]))
    plant = make_plant("mujoco", TALOS, dt=1e-3, model=robot, ground=ground)
    plant.reset(rest_on_floor(robot, rd.neutral(robot), ground))
    executor = PolicyExecutor(robot, command_timeout=0.0)
    joints = list(robot.actuated_joint_names)
    iq, iv = [robot.idx_q[n] for n in joints], [robot.idx_v[n] for n in joints]
    lock_rows = [robot.idx_q[n] for n in locked.names]
    start, ms, pending, heights, drift = 1_700_000_000 * 10 ** 9, 10 ** 6, [], [], []
    for k in range(3000):
        now = start + k * ms
        if k == 2000:
            plant.push(0.2 * plant.mass / 0.1 * np.array([0.0, 1.0, 0.0]), np.zeros(3), 0.1)
        if k % 10 == 0:
            q, v = plant.q, plant.v
            loop.take_joint_states(joints, q[iq], v[iv], [], now, now)
            loop.take_odometry(q[:3], q[3:7], v[:3], v[3:6], now, now)
            tick = loop.tick(now)
            if tick is not None and tick.policy is not None:
                pending.append((k + 4, locked.expand(tick.policy)))
        while pending and pending[0][0] <= k:
            policy = pending.pop(0)[1]
            executor.take_policy({"state_joint_names": list(robot.joint_names), "joint_names": joints,
                                  "x_ref": policy.x_ref, "u_ff": policy.u_ff, "K": policy.gain,
                                  "knot_dt": policy.knot_dt, "valid_for": policy.valid_for}, policy.stamp_ns, now)
        torque, _ = executor.torque(plant.q, plant.v, now)
        plant.hold() if torque is None else plant.step(torque)
        assert not plant.fell, f"fell at {k} ms"
        if k >= 1500:
            heights.append(plant.q[2])
            drift.append(np.abs(plant.q[lock_rows] - locked.positions).max())
    assert max(drift) < 0.1, max(drift)
    assert np.ptp(heights) < 0.03, np.ptp(heights)


def test_the_node_plans_on_the_reduced_model_only_when_asked_and_only_on_a_floating_base():
    from rbd_deriv.mpc_loops import planning_model
    from rbd_deriv.nodes.parameters import MPC_NODE

    p = {name: spec.default for name, spec in MPC_NODE.items()}
    robot = rd.load_urdf(TALOS, floating_base=True)
    p.update(floating_base=True, srdf_path=str(example_robot_srdf("talos")), posture="half_sitting")
    assert planning_model(robot, TALOS, p) == (robot, None)
    p["locked_joints"] = ["head_1_joint", "head_2_joint"]
    model, locked = planning_model(robot, TALOS, p)
    assert model.nv == robot.nv - 2 and locked.names == ("head_1_joint", "head_2_joint")
    # The reduced model's actuator limits are the robot's, joint by joint (not the URDF's).
    rows = [robot.idx_v[name] for name in robot.actuated_joint_names]
    robot.set_actuator_limits(robot.urdf_effort_limit[rows] * np.linspace(0.2, 0.9, 44))
    model, _ = planning_model(robot, TALOS, p)
    for name in model.actuated_joint_names:
        assert model.effort_limit[model.idx_v[name]] == robot.effort_limit[robot.idx_v[name]]
    arm = str(EXAMPLE_ROBOTS["panda"])
    p.update(floating_base=False, srdf_path="", locked_joints=["panda_joint7"])
    with pytest.raises(InputError, match="for a legged robot"):
        planning_model(rd.load_urdf(arm), arm, p)
