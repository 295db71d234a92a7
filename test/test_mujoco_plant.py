"""Tests of rbd_deriv.sim.mujoco_plant on a floating base: landing and resting on the feet, pushes, falls,
brakes, bad input. (The fixed-base plant is tested in test_sim.py beside the in-process plant.)

Oracles: Newton's laws with the robot's total mass (the floor carries m g at rest; a push changes the
momentum by F T), the friction cone, the library's kinematics for heights and foot positions.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.core.soles import feet_on_soles
from rbd_deriv.exceptions import InputError, ModelError
from rbd_deriv.sim import Ground, make_plant
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_data_dir

mujoco = pytest.importorskip("mujoco")

from rbd_deriv.sim.mujoco_plant import MAX_PUSH_WEIGHTS, frame_links  # noqa: E402
from rbd_deriv.sim.ground import COP_EDGE, initial_configuration  # noqa: E402

SOLO = str(EXAMPLE_ROBOTS["solo12"])
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
GRAVITY = 9.81


def srdf_posture(model, srdf, name):
    """q (nq,) of a group_state of an SRDF (the base's pose included)."""
    q = rd.neutral(model)
    state = next(s for s in ElementTree.parse(srdf).getroot().iter("group_state") if s.get("name") == name)
    for joint in state.iter("joint"):
        values = [float(x) for x in joint.get("value").split()]
        start = model.idx_q[joint.get("name")]
        q[start:start + len(values)] = values
    return q


@pytest.fixture(scope="module")
def solo():
    model = rd.load_urdf(SOLO, floating_base=True)
    data = model.create_data()
    standing = srdf_posture(model, example_robot_data_dir() / "solo_description/srdf/solo.srdf", "standing")
    return model, data, standing


def total_mass(model, data):
    """The robot's mass from the library: the free flyer's diagonal of M."""
    return rd.crba(model, data, rd.neutral(model))[0, 0]


def at_height(model, data, q, clearance, radius=0.02):
    """q with the base raised so that the lowest foot sphere is ``clearance`` [m] above the floor."""
    q = q.copy()
    q[2] = 0.0
    rd.forward_kinematics(model, data, q)
    q[2] = radius + clearance - min(rd.frame_placement(model, data, foot)[2, 3] for foot in FEET)
    return q


def stance_torque(model, data, q, mass):
    """Joint torques that hold the robot at q with its weight shared by the four feet: the static equilibrium
    g(q) = S^T tau + sum_i J_i^T f_i with f_i = (0, 0, m g / 4)."""
    tau = rd.gravity_torques(model, data, q)[6:].copy()
    for foot in FEET:
        jacobian = rd.frame_jacobian(model, data, q, foot, "local_world_aligned")
        tau -= jacobian[:3, 6:].T @ np.array([0.0, 0.0, mass * GRAVITY / 4])
    return tau


def test_solo12_dropped_lands_and_rests_on_its_feet(solo):
    model, data, standing = solo
    mass = total_mass(model, data)
    plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
    assert plant.mass == pytest.approx(mass, rel=1e-9)
    q0 = at_height(model, data, standing, 0.05)
    plant.reset(q0)
    assert not plant.touching.any()
    reference = standing[7:]
    touched_at = None
    for step in range(1500):
        q, v = plant.q, plant.v
        plant.step(stance_torque(model, data, q, mass) + 5.0 * (reference - q[7:]) - 0.1 * v[6:])
        if touched_at is None and plant.touching.any():
            touched_at = step
    # Free fall from 5 cm takes sqrt(2 h / g) = 0.101 s; the stance torques stretch the legs meanwhile.
    assert 60 <= touched_at <= 102
    assert plant.touching.all() and not plant.fell
    forces = plant.contact_forces
    # At rest the floor carries the weight, shared by the feet, each force inside its friction cone.
    assert np.abs(plant.v).max() < 0.01
    assert forces[:, 2].sum() == pytest.approx(mass * GRAVITY, rel=0.02)
    assert np.abs(forces[:, :2].sum(axis=0)).max() < 0.02 * mass * GRAVITY
    assert (forces[:, 2] > 0.15 * mass * GRAVITY).all()
    assert (np.hypot(forces[:, 0], forces[:, 1]) <= 1.0 * forces[:, 2]).all()
    assert plant.cone_violations == 0
    # The feet sink less than a millimetre: the foot frames rest one radius above the floor.
    rd.forward_kinematics(model, data, plant.q)
    heights = np.array([rd.frame_placement(model, data, foot)[2, 3] for foot in FEET])
    assert (np.abs(heights - 0.02) < 1e-3).all(), heights


def test_friction_cone_violations_are_counted():
    ground = Ground(FEET, friction=0.5)
    model = rd.load_urdf(SOLO, floating_base=True)
    plant = make_plant("mujoco", SOLO, model=model, ground=ground)
    forces = np.array([[0.3, 0.4, 1.0], [0.0, 0.6, 1.0], [0.0, 0.0, -0.1], [0.0, 0.0, 0.0]])
    # |f_t| = 0.5 is on the cone, 0.6 outside, a pulling foot outside; no force is no violation.
    assert plant.contacts.cone_violations(forces).tolist() == [False, True, True, False]


def test_push_changes_the_momentum_by_the_impulse(solo):
    """In the air, the push's impulse F T is the only difference between a pushed robot and an unpushed
    one's centre-of-mass velocity; the base moves along F."""
    model, data, standing = solo
    mass = total_mass(model, data)
    force, duration = np.array([6.0, -4.0, 3.0]), 0.05
    plants = [make_plant("mujoco", SOLO, model=model, ground=Ground(FEET)) for _ in range(2)]
    for plant in plants:
        plant.reset(at_height(model, data, standing, 1.0))
    assert plants[0].push(force, np.zeros(3), duration) == 50
    for plant in plants:
        plant.step(np.zeros(12), steps=80)
    (pushed_com, pushed_velocity), (free_com, free_velocity) = (
        rd.center_of_mass(model, data, plant.q, plant.v) for plant in plants)
    assert not plants[0].touching.any()
    np.testing.assert_allclose(pushed_velocity - free_velocity, force * duration / mass, rtol=2e-3)
    # Displacement of the centre of mass: F / m (T^2 / 2 + T (t - T)) at t = 80 ms.
    expected = force / mass * (duration ** 2 / 2 + duration * 0.03)
    np.testing.assert_allclose(pushed_com - free_com, expected, rtol=0.03)
    moved = plants[0].q[0:3] - plants[1].q[0:3]
    assert moved @ force / np.linalg.norm(force) > 0.9 * np.linalg.norm(moved)
    assert plants[0].pushes_applied == 1 and plants[1].pushes_applied == 0


def test_push_is_a_wrench_about_the_base_origin():
    """A force at the base origin of a single free body whose centre of mass is elsewhere turns it: its angular
    momentum about the centre of mass grows by sum dt ((p - c) x F + tau)."""
    urdf = """<robot name="brick"><link name="brick"><inertial><origin xyz="0.1 -0.05 0.03" rpy="0 0 0"/>
        <mass value="2.0"/><inertia ixx="0.02" iyy="0.03" izz="0.04" ixy="0" ixz="0" iyz="0"/></inertial>
        </link></robot>"""
    model = rd.load_urdf(urdf, floating_base=True)
    plant = make_plant("mujoco", urdf, model=model)
    q0 = rd.neutral(model)
    q0[2] = 1.0
    plant.reset(q0)
    force, torque = np.array([1.0, 2.0, -0.5]), np.array([0.01, -0.02, 0.03])
    plant.push(force, torque, 0.02)
    expected = np.zeros(3)
    offset = np.array([0.1, -0.05, 0.03])
    for _ in range(20):
        q = plant.q
        rotation = rd.forward_kinematics(model, model.create_data(), q)[1][:3, :3]
        expected += plant.dt * (np.cross(-rotation @ offset, force) + torque)
        plant.step(np.zeros(0))
    q, v = plant.q, plant.v
    rotation = rd.forward_kinematics(model, model.create_data(), q)[1][:3, :3]
    momentum = rotation @ (np.diag([0.02, 0.03, 0.04]) @ v[3:6])
    np.testing.assert_allclose(momentum, expected, rtol=1e-3, atol=1e-9)


def test_tipped_over_robot_falls(solo):
    model, data, standing = solo
    plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
    tipped = at_height(model, data, standing, 0.0)
    tipped[3:7] = [np.sin(0.6), 0.0, 0.0, np.cos(0.6)]  # rolled by 1.2 rad about x
    tipped[2] += 0.1
    plant.reset(tipped)
    plant.hold(steps=1500)
    assert plant.fell
    # An upright robot on locked joints stands.
    plant.reset(at_height(model, data, standing, 0.0))
    plant.hold(steps=500)
    assert not plant.fell and plant.touching.all()


def test_trunk_on_the_floor_is_a_fall_at_any_height(solo):
    """Upside down, 3 cm up, its legs in the air: the trunk lands on the floor with the base above half its
    initial height. The trunk detector says it fell; no foot touches."""
    model, _, standing = solo
    plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
    upside_down = standing.copy()
    upside_down[2], upside_down[3:7] = 0.03, [1.0, 0.0, 0.0, 0.0]
    plant.reset(upside_down)
    assert not plant.fell
    plant.hold(steps=300)
    assert plant.fell and not plant.touching.any()
    assert plant.q[2] > 0.5 * 0.03 + 0.005
    assert plant.contacts.read(plant.mj_model, plant.mj_data)[2]


def test_base_below_half_its_height_is_a_fall(solo):
    model, data, standing = solo
    plant = make_plant("mujoco", SOLO, model=model)  # no floor: it falls for ever
    q0 = standing.copy()
    q0[2] = 0.2
    plant.reset(q0)
    plant.step(np.zeros(12), steps=150)  # 0.11 m in 0.15 s
    assert plant.q[2] == pytest.approx(0.2 - GRAVITY * 0.15 * 0.151 / 2, abs=1e-3)
    assert plant.fell


def test_brakes_lock_the_joints_of_a_floating_base(solo):
    model, data, standing = solo
    plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
    plant.reset(at_height(model, data, standing, 0.02))
    touched_at = next(step for step in range(400) if plant.hold() or plant.touching.any())
    # A rigid robot: free fall from 2 cm takes sqrt(2 h / g) = 64 ms.
    assert touched_at == pytest.approx(1000 * np.sqrt(2 * 0.02 / GRAVITY), abs=1.5)
    plant.hold(steps=399 - touched_at)
    # It dropped 2 cm onto locked legs: the joints held (to the softness of MuJoCo's constraint).
    assert np.abs(plant.q[7:] - standing[7:]).max() < 5e-3
    assert plant.touching.all() and plant.time == pytest.approx(0.4)
    plant.step(np.zeros(12), steps=100)  # released: with no torque the legs fold
    assert np.abs(plant.q[7:] - standing[7:]).max() > 0.05


def test_bad_pushes_are_refused_and_change_nothing(solo):
    model, data, standing = solo
    plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
    plant.reset(at_height(model, data, standing, 0.0))
    weight = plant.mass * GRAVITY
    bad = [((np.nan, 0, 0), (0, 0, 0), 0.1, "NaN"), ((1, 0, 0), (0, 0, 0), -0.1, "lasts"),
           ((1, 0, 0), (0, 0, 0), 0.0, "lasts"), ((1.01 * MAX_PUSH_WEIGHTS * weight, 0, 0), (0, 0, 0), 0.1, "limit"),
           ((0, 0, 0), (0, 0, 1.01 * MAX_PUSH_WEIGHTS * weight), 0.1, "limit"), ((1, 0), (0, 0, 0), 0.1, "force"),
           ((1, 0, 0), (0, 0, 0), float("inf"), "NaN or inf")]
    for force, torque, duration, message in bad:
        with pytest.raises(InputError, match=message):
            plant.push(force, torque, duration)
    assert plant.pushes_applied == 0 and not plant._pushes
    fixed = make_plant("mujoco", str(rd.bundled_urdf("rbd_arm7")), model=rd.load_urdf(rd.bundled_urdf("rbd_arm7")))
    with pytest.raises(InputError, match="floating base"):
        fixed.push((1, 0, 0), (0, 0, 0), 0.1)


def test_construction_errors(solo):
    model, _, standing = solo
    with pytest.raises(ModelError, match="neither a link nor a joint"):
        make_plant("mujoco", SOLO, model=model, ground=Ground(("FL_FOOT", "nose")))
    arm = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    with pytest.raises(InputError, match="floating base"):
        make_plant("mujoco", str(rd.bundled_urdf("rbd_arm7")), model=arm, ground=Ground(("ee_link",)))
    plant = make_plant("mujoco", SOLO, model=model)
    with pytest.raises(InputError, match="reset"):
        plant.reset(standing[7:])
    with pytest.raises(InputError, match="not unit"):
        plant.reset(np.r_[standing[:3], [0.0, 0.0, 0.0, 2.0], standing[7:]])


def test_frames_are_found_as_links_or_joints():
    talos = str(EXAMPLE_ROBOTS["talos"])
    assert frame_links(talos, ["leg_left_sole_fix_joint", "leg_right_6_link"]) == ("left_sole_link",
                                                                                 "leg_right_6_link")


def test_talos_stands_on_its_soles():
    """Two 6D soles (four spheres each) carry the humanoid on locked joints, flat on the floor."""
    talos = str(EXAMPLE_ROBOTS["talos"])
    model = rd.load_urdf(talos, floating_base=True)
    data = model.create_data()
    soles = ("leg_left_sole_fix_joint", "leg_right_sole_fix_joint")
    plant = make_plant("mujoco", talos, model=model, ground=Ground(soles, ("frame", "frame")))
    q = rd.neutral(model)
    rd.forward_kinematics(model, data, q)
    q[2] = 0.005 - min(rd.frame_placement(model, data, sole)[2, 3] for sole in soles)
    plant.reset(q)
    plant.hold(steps=1000)
    assert plant.touching.all() and not plant.fell
    assert plant.contact_forces[:, 2].sum() == pytest.approx(total_mass(model, data) * GRAVITY, rel=0.02)
    assert plant.contact_forces[0, 2] == pytest.approx(plant.contact_forces[1, 2], rel=0.05)
    # At rest the soles' centers of pressure, weighted by their normal forces, are under the center of mass, and
    # inside the soles: none on an edge.
    cop = plant.contacts.centers_of_pressure()
    rd.forward_kinematics(model, data, plant.q)
    placements = [rd.frame_placement(model, data, sole) for sole in soles]
    world = np.array([placement[:2, 3] + placement[:2, :2] @ point for placement, point in zip(placements, cop)])
    under = plant.contact_forces[:, 2] @ world / plant.contact_forces[:, 2].sum()
    assert np.abs(under - rd.center_of_mass(model, data, plant.q)[:2]).max() < 2e-3
    assert (np.abs(cop) < 0.5 * COP_EDGE * np.asarray(Ground(soles).sole_size)).all()
    assert plant.cop_edge_steps == 0 and not plant.contacts.soles_on_edge().any()


def test_g1_stands_on_the_soles_its_collision_geometry_gives():
    """G1's URDF has no sole frame; the soles taken from its feet's collision spheres (rbd_deriv.core.soles) are
    where MuJoCo puts the feet's four spheres (the model's sole frames and the simulator's geoms agree to 1e-9 m),
    and the robot, put on the floor by them and held by its brakes, rests there carrying its weight."""
    path = str(example_robot_data_dir() / "g1_description" / "urdf" / "g1_29dof_rev_1_0.urdf")
    model = rd.load_urdf(path, floating_base=True)
    frames, size, soles = feet_on_soles(model, path, ["left_ankle_roll_link", "right_ankle_roll_link"],
                                        ["frame", "frame"], "collision", (0.2, 0.1))
    ground = Ground(tuple(frames), ("frame", "frame"), sole_size=size, soles=soles)
    plant = make_plant("mujoco", path, model=model, ground=ground)
    q = initial_configuration(model, [0.0], (0.0,), ground)
    plant.reset(q)
    mujoco.mj_forward(plant.mj_model, plant.mj_data)
    data = model.create_data()
    rd.forward_kinematics(model, data, q)
    for index, frame in enumerate(frames):
        placement = rd.frame_placement(model, data, frame)
        expected = (placement[:3, :3] @ ground.sphere_centers("frame").T).T + placement[:3, 3]
        geoms = [mujoco.mj_name2id(plant.mj_model, mujoco.mjtObj.mjOBJ_GEOM, f"foot{index}_{corner}")
                 for corner in range(4)]
        np.testing.assert_allclose(plant.mj_data.geom_xpos[geoms], expected, atol=1e-9)
        np.testing.assert_allclose(expected[:, 2], ground.foot_radius, atol=1e-9)  # resting on the floor
    plant.hold(steps=1000)
    assert plant.touching.all() and not plant.fell
    assert plant.contact_forces[:, 2].sum() == pytest.approx(total_mass(model, data) * GRAVITY, rel=0.02)
    assert abs(plant.q[2] - q[2]) < 1e-3


def test_center_of_pressure_of_a_sole_from_its_corners():
    """A sole's center of pressure is its corners weighted by their normal forces: the middle under four equal
    ones or two diagonal ones, on the edge under the two of one side, at a corner under one; point feet have
    none."""
    talos = str(EXAMPLE_ROBOTS["talos"])
    ground = Ground(("leg_left_sole_fix_joint", "leg_right_6_link"), ("frame", "point"), sole_size=(0.2, 0.1))
    plant = make_plant("mujoco", talos, model=rd.load_urdf(talos, floating_base=True), ground=ground)
    contacts = plant.contacts
    # The corners in sphere order: (+x, +y), (+x, -y), (-x, +y), (-x, -y).
    for loads, expected, edge in (([5, 5, 5, 5], (0.0, 0.0), False), ([5, 0, 0, 5], (0.0, 0.0), False),
                                  ([1, 3, 0, 0], (0.1, -0.025), True), ([0, 0, 2, 0], (-0.1, 0.05), True),
                                  ([4, 4, 1, 1], (0.06, 0.0), False), ([0, 0, 0, 0], (np.nan, np.nan), False)):
        contacts.corner_forces[0] = loads
        cop = contacts.centers_of_pressure()
        np.testing.assert_allclose(cop[0], expected, atol=1e-15)
        assert np.isnan(cop[1]).all()
        assert contacts.soles_on_edge().tolist() == [edge, False]


def test_damping_bound_is_what_one_step_keeps_stable(solo):
    """In the air, with gravity off, the joints damped by torques -d v at the step's start: at d = damping_bound the
    joint speeds decay; at four times it (past the explicit step's 2 M / dt) they grow."""
    model, data, standing = solo
    speeds = {}
    for factor in (1.0, 4.0):
        plant = make_plant("mujoco", SOLO, model=model, ground=Ground(FEET))
        plant.mj_model.opt.gravity[:] = 0.0
        plant.reset(at_height(model, data, standing, 1.0), np.r_[np.zeros(6), np.full(12, 1.0)])
        damping = factor * plant.damping_bound
        assert (damping > 0).all()
        for _ in range(50):
            plant.step(-damping * plant.v[6:])
        speeds[factor] = np.abs(plant.v[6:]).max()
    assert speeds[1.0] < 0.5 and speeds[4.0] > 10.0, speeds


def test_visuals_are_seen_and_never_felt(solo):
    """solo12's meshes and the arm's cylinders are geoms that collide with nothing and weigh nothing: the bodies'
    masses and inertias, and a landing on the floor step by step, are the same without them."""
    from rbd_deriv.sim.visuals import VISUAL_GROUP

    model, data, standing = solo
    plants = {visuals: make_plant_with_visuals(model, visuals) for visuals in (True, False)}
    shown, bare = plants[True].mj_model, plants[False].mj_model
    visual = shown.geom_group == VISUAL_GROUP
    assert visual.sum() == plants[True].visuals.added == 17 and plants[True].visuals.note is None
    assert (shown.geom_type[visual] == mujoco.mjtGeom.mjGEOM_MESH).all() and shown.nmesh == 10
    assert not shown.geom_contype[visual].any() and not shown.geom_conaffinity[visual].any()
    assert (bare.geom_group != VISUAL_GROUP).all()
    for field in ("body_mass", "body_inertia", "body_ipos", "body_iquat"):
        np.testing.assert_array_equal(getattr(shown, field), getattr(bare, field), err_msg=field)
    for plant in plants.values():
        plant.reset(at_height(model, data, standing, 0.05))
        plant.hold(steps=300)
    np.testing.assert_array_equal(plants[True].q, plants[False].q)
    np.testing.assert_array_equal(plants[True].contact_forces, plants[False].contact_forces)
    arm = make_plant("mujoco", str(rd.bundled_urdf("rbd_arm7")))
    assert arm.visuals.added == 9 and (arm.mj_model.geom_type == mujoco.mjtGeom.mjGEOM_CYLINDER).sum() >= 7


def make_plant_with_visuals(model, visuals):
    """solo12 on the floor, with or without its visual geoms."""
    from rbd_deriv.sim.mujoco_plant import MujocoPlant

    actuated = model.actuated_joint_names
    effort = np.asarray(model.effort_limit, dtype=float)[[model.idx_v[name] for name in actuated]]
    return MujocoPlant(SOLO, actuated, effort, floating_base=True, ground=Ground(FEET), visuals=visuals)


def test_unreadable_and_missing_meshes_are_skipped_in_one_line():
    """A COLLADA mesh (a format MuJoCo cannot read) and a missing STL are left out, said in one line; the rest
    stays, and the three links they were on show their collision shapes too (seen, never felt)."""
    root = ElementTree.parse(rd.bundled_urdf("rbd_arm7")).getroot()
    links = list(root.iter("link"))
    for link, filename in ((links[1], "package://nowhere/meshes/a.dae"), (links[2], "meshes/b.dae"),
                           (links[3], "missing.stl")):
        visual = ElementTree.SubElement(link, "visual")
        ElementTree.SubElement(ElementTree.SubElement(visual, "geometry"), "mesh", filename=filename)
    stand_ins = [f"visual_collision_{link.get('name')}_{k}" for link in links[1:4]
                 for k, _ in enumerate(link.findall("collision"))]
    assert stand_ins
    arm = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    plant = make_plant("mujoco", ElementTree.tostring(root, encoding="unicode"), model=arm)
    assert plant.visuals.added == 9 and plant.visuals.from_collision == len(stand_ins)
    assert plant.visuals.note == ("visual meshes skipped: 2 .dae (a format MuJoCo cannot read), 1 not found; "
                                  f"9 visual geoms kept, {len(stand_ins)} collision shapes shown on their links "
                                  "instead")
    model = plant.mj_model
    for name in stand_ins:
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
        assert geom >= 0 and model.geom_contype[geom] == model.geom_conaffinity[geom] == 0, name


def test_a_robot_drawn_in_collada_only_shows_its_collision_shapes():
    """example-robot-data's ANYmal B gives every visual mesh as COLLADA: each of its collision boxes, cylinders and
    spheres is drawn instead (counted from its URDF), none of them colliding; its bodies' masses are the URDF's."""
    from rbd_deriv.sim.mujoco_plant import robot_spec
    from rbd_deriv.testing.robots import example_robot_data_dir

    path = example_robot_data_dir() / "anymal_b_simple_description" / "robots" / "anymal.urdf"
    root = ElementTree.parse(path).getroot()
    drawable = sum(1 for link in root.iter("link")
                   if any(v.find("geometry/mesh") is not None for v in link.findall("visual"))
                   for c in link.findall("collision") if c.find("geometry")[0].tag in ("box", "cylinder", "sphere"))
    spec, visuals = robot_spec(mujoco, str(path), floating_base=True)
    model = spec.compile()
    assert visuals.skipped[".dae"] == 17 and visuals.from_collision == drawable > 30
    shown = np.array([mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g).startswith("visual_collision_")
                      for g in range(model.ngeom)])
    assert shown.sum() == drawable and not model.geom_contype[shown].any()
    bare, _ = robot_spec(mujoco, str(path), floating_base=True, visuals=False)
    np.testing.assert_array_equal(model.body_mass, bare.compile().body_mass)
