"""Soles from a foot's collision geometry (rbd_deriv.core.soles): rectangles built by hand, the URDF's own sole frame
(talos), a real humanoid without one (G1), meshes against primitives, refusals."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.core.soles import add_soles, feet_on_soles, sole_from_collision, soles_from_collision
from rbd_deriv.exceptions import InputError, ModelError, URDFError
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_data_dir

INERTIAL = '<inertial><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>'


def leg(foot_joint_rpy: str, collisions: str) -> str:
    """A base, a shin on a revolute knee, a foot on a fixed ankle at ``foot_joint_rpy``, with ``collisions``."""
    return (f'<?xml version="1.0"?><robot name="leg"><link name="base">{INERTIAL}</link>'
            f'<link name="shin">{INERTIAL}</link><link name="foot">{INERTIAL}{collisions}</link>'
            '<joint name="knee" type="revolute"><parent link="base"/><child link="shin"/>'
            '<origin xyz="0 0 -0.3"/><axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="50" velocity="5"/></joint>'
            '<joint name="ankle" type="fixed"><parent link="shin"/><child link="foot"/>'
            f'<origin xyz="0.01 0 -0.3" rpy="{foot_joint_rpy}"/></joint></robot>')


def collision(shape: str, xyz: str = "0 0 0", rpy: str = "0 0 0") -> str:
    return f'<collision><origin xyz="{xyz}" rpy="{rpy}"/><geometry>{shape}</geometry></collision>'


#: A 0.2 x 0.1 x 0.02 m box 3 cm ahead of the ankle and 5 cm below it (its bottom 6 cm below), under a 4 cm
#: ankle sphere that does not touch the floor.
BOX_FOOT = collision('<box size="0.2 0.1 0.02"/>', "0.03 0 -0.05") + collision('<sphere radius="0.04"/>')


def test_a_box_under_the_ankle_gives_its_bottom_face():
    description = leg("0 0 0", BOX_FOOT)
    [sole] = soles_from_collision(rd.load_urdf(description), description, ["foot"])
    np.testing.assert_allclose(sole.placement[:3, 3], [0.03, 0.0, -0.06], atol=1e-12)
    np.testing.assert_allclose(sole.placement[:3, :3], np.eye(3), atol=1e-12)
    np.testing.assert_allclose(sole.size, (0.2, 0.1), atol=1e-12)
    assert sole.points == 4 and sole.frame == "foot_sole"


def test_a_foot_frame_turned_at_the_neutral_configuration_gets_a_level_sole():
    """The foot link is pitched 0.4 rad and yawed 0.5 rad by its fixed joint, its box pitched back: the box lies flat
    in the world, and the sole frame found in the link's axes is level (z up) at the box's bottom centre."""
    description = leg("0 0.4 0.5", collision('<box size="0.2 0.1 0.02"/>', "0.03 0 -0.05", "0 -0.4 0"))
    model = rd.load_urdf(description)
    add_soles(model, soles_from_collision(model, description, ["foot"]))
    data = model.create_data()
    rd.forward_kinematics(model, data, rd.neutral(model))
    world = rd.frame_placement(model, data, "foot_sole")
    np.testing.assert_allclose(world[:3, 2], [0.0, 0.0, 1.0], atol=1e-12)
    # The box's bottom centre in the world: the ankle at (0.01, 0, -0.6), the box's centre 3 cm along the foot's
    # x and 5 cm along its z (both turned by the ankle), then 1 cm down (the box is level).
    ankle = rd.frame_placement(model, data, "foot")
    centre = ankle[:3, 3] + ankle[:3, :3] @ [0.03, 0.0, -0.05]
    np.testing.assert_allclose(world[:3, 3], centre - [0.0, 0.0, 0.01], atol=1e-12)
    # Its x axis: the foot's x projected on the floor (the yaw of the ankle).
    np.testing.assert_allclose(world[:3, 0], [np.cos(0.5), np.sin(0.5), 0.0], atol=1e-12)


def _box_triangles(size) -> np.ndarray:
    """(12, 3, 3) the triangles of a box of ``size`` centred on the origin."""
    half = np.asarray(size) / 2
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
    faces = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1), (2, 3, 7), (2, 7, 6), (0, 2, 6),
             (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    return corners[np.array(faces)]


@pytest.mark.parametrize("form", ["binary", "ascii", "obj"])
def test_a_mesh_foot_gives_the_sole_of_the_same_box(tmp_path, form):
    triangles = _box_triangles((0.1, 0.05, 0.01))  # mesh units scaled by 2 below: the box of BOX_FOOT
    if form == "binary":
        path = tmp_path / "foot.stl"
        path.write_bytes(b"\0" * 80 + struct.pack("<I", len(triangles)) + b"".join(
            struct.pack("<12fH", 0.0, 0.0, 0.0, *t.ravel(), 0) for t in triangles))
    elif form == "ascii":
        path = tmp_path / "foot.stl"
        path.write_text("solid foot\n" + "".join(
            "facet normal 0 0 0\nouter loop\n" + "".join(f"vertex {x:.17g} {y:.17g} {z:.17g}\n" for x, y, z in t)
            + "endloop\nendfacet\n" for t in triangles) + "endsolid foot\n")
    else:
        path = tmp_path / "foot.obj"
        path.write_text("".join(f"v {x:.17g} {y:.17g} {z:.17g}\n" for x, y, z in triangles.reshape(-1, 3)))
    mesh = collision(f'<mesh filename="{path.name}" scale="2 2 2"/>', "0.03 0 -0.05")
    description = tmp_path / "leg.urdf"
    description.write_text(leg("0 0 0", mesh))
    [sole] = soles_from_collision(rd.load_urdf(str(description)), str(description), ["foot"])
    box = leg("0 0 0", BOX_FOOT)
    [expected] = soles_from_collision(rd.load_urdf(box), box, ["foot"])
    np.testing.assert_allclose(sole.placement, expected.placement, atol=1e-8)  # STL stores float32
    np.testing.assert_allclose(sole.size, expected.size, atol=1e-8)


def test_g1_stands_on_the_rectangle_of_its_four_foot_spheres():
    """Unitree's G1 (example-robot-data) has no sole frame: its ankle roll link carries four 5 mm collision spheres,
    at x = -0.05 (heel, y = +-0.025) and x = 0.12 (toe, y = +-0.03), z = -0.03. The sole is the rectangle of their
    lowest points: centre (0.035, 0, -0.035), 0.17 m by 0.06 m."""
    path = example_robot_data_dir() / "g1_description" / "urdf" / "g1_29dof_rev_1_0.urdf"
    model = rd.load_urdf(str(path), floating_base=True)
    soles = soles_from_collision(model, str(path), ["left_ankle_roll_link", "right_ankle_roll_link"])
    for sole in soles:
        np.testing.assert_allclose(sole.placement[:3, 3], [0.035, 0.0, -0.035], atol=1e-9)
        np.testing.assert_allclose(sole.placement[:3, :3], np.eye(3), atol=1e-9)
        np.testing.assert_allclose(sole.size, (0.17, 0.06), atol=1e-9)
        assert sole.points == 4


def test_talos_foot_mesh_gives_the_sole_its_urdf_names():
    """Talos's URDF has a sole frame (left_sole_link, 0.107 m under leg_left_6_link); the sole taken from
    leg_left_6_link's collision mesh must land on it: same height within 2 mm, centred within 3 cm, level, and
    about the foot's size (config/talos.yaml's 0.21 x 0.13 m within 3 cm)."""
    source = str(EXAMPLE_ROBOTS["talos"])
    model = rd.load_urdf(source, floating_base=True)
    for side in ("left", "right"):
        [sole] = soles_from_collision(model, source, [f"leg_{side}_6_link"])
        data = model.create_data()
        rd.forward_kinematics(model, data, rd.neutral(model))
        add_soles(model, [sole])
        found = rd.frame_placement(model, data, sole.frame)
        named = rd.frame_placement(model, data, f"{side}_sole_link")
        assert abs(found[2, 3] - named[2, 3]) < 0.002, (found[:3, 3], named[:3, 3])
        assert np.linalg.norm(found[:2, 3] - named[:2, 3]) < 0.03, (found[:3, 3], named[:3, 3])
        np.testing.assert_allclose(found[:3, 2], [0.0, 0.0, 1.0], atol=1e-9)
        np.testing.assert_allclose(sole.size, (0.21, 0.13), atol=0.03)


def test_soles_are_refused_where_there_is_none():
    no_collision = leg("0 0 0", "")
    with pytest.raises(URDFError, match="no collision geometry"):
        soles_from_collision(rd.load_urdf(no_collision), no_collision, ["foot"])
    ball = leg("0 0 0", collision('<sphere radius="0.03"/>'))
    with pytest.raises(ModelError, match="no sole to stand on"):
        soles_from_collision(rd.load_urdf(ball), ball, ["foot"])
    collada = leg("0 0 0", collision('<mesh filename="foot.dae"/>'))
    with pytest.raises(URDFError, match="not found|only STL and OBJ"):
        sole_from_collision(collada, "foot", [0.0, 0.0, -1.0])
    with pytest.raises(URDFError, match="no link named 'toe'"):
        sole_from_collision(ball, "toe", [0.0, 0.0, -1.0])


def test_feet_on_soles_keeps_frames_or_adds_the_collision_soles():
    description = leg("0 0 0", BOX_FOOT)
    model = rd.load_urdf(description)
    assert feet_on_soles(model, description, ["foot"], ["frame"], "frame", [0.3, 0.2]) == (["foot"], (0.3, 0.2), ())
    frames, size, soles = feet_on_soles(model, description, ["foot"], ["frame"], "collision", [0.3, 0.2])
    assert frames == ["foot_sole"] and "foot_sole" in model.frame_names
    np.testing.assert_allclose(size, (0.2, 0.1), atol=1e-12)
    assert [s.frame for s in soles] == frames
    # Twice on the same model: the frame is kept, not refused as taken.
    assert feet_on_soles(model, description, ["foot"], ["frame"], "collision", [0.3, 0.2])[0] == frames
    with pytest.raises(InputError, match="contact_kinds must all be frame"):
        feet_on_soles(model, description, ["foot"], ["point"], "collision", [0.3, 0.2])
    with pytest.raises(InputError, match="sole_placement must be one of"):
        feet_on_soles(model, description, ["foot"], ["frame"], "mesh", [0.3, 0.2])
