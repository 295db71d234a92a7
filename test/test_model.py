"""URDF loading (rbd_deriv.core.urdf, rbd_deriv.core.model): layout, parameters and refusals.

The layout (joint order, nq/nv per joint) is checked against Pinocchio by the
``robot`` fixture itself (:meth:`PinocchioBridge.check_model`); here the model's
numbers (placements, merged inertias, limits, gravity) are compared too.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.exceptions import ModelError, URDFError
from rbd_deriv.testing import assert_close, random_urdf
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, MASSLESS_MOVING_ROBOTS

INERTIAL = '<inertial><mass value="{m}"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'


def link(name: str, mass: float | None = 1.0) -> str:
    body = INERTIAL.format(m=mass) if mass is not None else ""
    return f'<link name="{name}">{body}</link>'


def joint(name: str, parent: str, child: str, kind: str = "revolute", axis: str = "0 0 1", extra: str = "") -> str:
    limit = '<limit lower="-1" upper="1" effort="10" velocity="2"/>' if kind in ("revolute", "prismatic") else ""
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="0.1 0 0.2" rpy="0.1 0.2 0.3"/><axis xyz="{axis}"/>{limit}{extra}</joint>'
    )


def urdf(*parts: str) -> str:
    return '<?xml version="1.0"?><robot name="test">' + "".join(parts) + "</robot>"


TWO_LINK = urdf(
    link("base"), link("arm"), link("hand"), joint("shoulder", "base", "arm"), joint("elbow", "arm", "hand")
)


# ------------------------------------------------------------------ valid robots
def test_example_robot_layout_matches_pinocchio(robot):
    model, bridge = robot.model, robot.bridge
    assert model.nq == bridge.nq and model.nv == bridge.nv and model.njoints == bridge.njoints
    assert model.joint_names == bridge.joint_names
    assert model.has_floating_base == robot.floating_base
    if robot.floating_base:
        assert model.joint_names[0] == "root_joint"
        assert (model.nq_joint["root_joint"], model.nv_joint["root_joint"]) == (7, 6)
        assert model.joint_types[1] == rd.JOINT_FREEFLYER


def test_actuated_joints_are_the_movable_joints_but_the_free_flyer():
    fixed = rd.load_urdf(TWO_LINK)
    assert fixed.actuated_joint_names == ("shoulder", "elbow") == tuple(fixed.joint_names)
    floating = rd.load_urdf(TWO_LINK, floating_base=True)
    assert floating.joint_names[0] == rd.FREE_FLYER_JOINT == "root_joint"
    assert floating.actuated_joint_names == ("shoulder", "elbow")
    # A revolute joint that happens to carry the free flyer's name is actuated like any other.
    named_like_it = rd.load_urdf(TWO_LINK.replace('"shoulder"', f'"{rd.FREE_FLYER_JOINT}"'))
    assert named_like_it.actuated_joint_names == (rd.FREE_FLYER_JOINT, "elbow")
    with pytest.raises(AttributeError):
        fixed.actuated_joint_names = ("elbow",)


def test_joint_parameters_match_pinocchio(robot):
    """Placements, axes and inertias (fixed links merged into their moving parent)."""
    model = robot.model
    tree = robot.bridge.tree_arrays()
    np.testing.assert_array_equal(model.parents[1:], tree.parents[1:])
    np.testing.assert_array_equal(model.joint_types[1:], tree.joint_types[1:])
    assert_close(model.joint_placements, tree.joint_placements, what="joint placements")
    assert_close(model.joint_axes, tree.joint_axes, what="joint axes")
    assert_close(model.inertias, tree.inertias, what="inertias")


def test_universe_row_of_the_public_arrays():
    """Row 0 is the universe: parent 0, type -1, identity placement, no inertia."""
    model = rd.load_urdf(TWO_LINK)
    assert model.parents[0] == 0
    assert model.joint_types[0] == -1
    np.testing.assert_array_equal(model.joint_placements[0], np.eye(4))
    np.testing.assert_array_equal(model.inertias[0], np.zeros(10))


def test_random_tree_parameters_match_pinocchio(random_robot):
    test_joint_parameters_match_pinocchio(random_robot)
    model = random_robot.model
    with_axis = (model.joint_types == rd.JOINT_REVOLUTE) | (model.joint_types == rd.JOINT_PRISMATIC)
    axis_norms = np.linalg.norm(model.joint_axes[with_axis], axis=1)
    assert_close(axis_norms, np.ones_like(axis_norms), what="unit axes")


def test_limits_match_the_urdf(robot):
    model, bridge = robot.model, robot.bridge
    pin_model = bridge.model
    for index, name in enumerate(model.joint_names, start=1):
        iq, iv = model.idx_q[name], model.idx_v[name]
        pin_joint = pin_model.joints[index]
        if model.joint_types[index] == rd.JOINT_FREEFLYER:
            assert np.all(np.isinf(model.lower_position_limit[iq:iq + 7]))
            assert np.all(np.isinf(model.upper_position_limit[iq:iq + 7]))
            continue
        if name not in bridge.continuous_joints:
            assert model.lower_position_limit[iq] == pin_model.lowerPositionLimit[pin_joint.idx_q]
            assert model.upper_position_limit[iq] == pin_model.upperPositionLimit[pin_joint.idx_q]
        assert model.velocity_limit[iv] == pin_model.velocityLimit[iv]
        assert model.effort_limit[iv] == pin_model.effortLimit[iv]


def test_continuous_joints_have_one_angle_and_no_position_limit(random_robot):
    model, bridge = random_robot.model, random_robot.bridge
    for name in bridge.continuous_joints:
        assert model.nq_joint[name] == 1
        iq = model.idx_q[name]
        assert model.lower_position_limit[iq] == -np.inf and model.upper_position_limit[iq] == np.inf


def test_default_gravity_and_custom_gravity():
    model = rd.load_urdf(TWO_LINK)
    np.testing.assert_array_equal(model.gravity, [0, 0, -9.81, 0, 0, 0])
    gravity = np.array([1.0, -2.0, -3.0])
    tilted = rd.load_urdf(TWO_LINK, gravity=gravity)
    np.testing.assert_array_equal(tilted.gravity, [1.0, -2.0, -3.0, 0, 0, 0])
    bridge = PinocchioBridge.for_model(tilted, TWO_LINK)
    q = np.array([0.4, -0.9])
    assert_close(rd.gravity_torques(tilted, tilted.create_data(), q), bridge.gravity_torques(q))


def test_file_path_and_xml_string_give_the_same_model():
    path = EXAMPLE_ROBOTS["panda"]
    from_file = rd.load_urdf(str(path))
    from_text = rd.load_urdf(path.read_text())
    assert from_file.joint_names == from_text.joint_names
    np.testing.assert_array_equal(from_file.inertias, from_text.inertias)
    np.testing.assert_array_equal(from_file.joint_placements, from_text.joint_placements)


def test_frame_names_cover_links_and_joints(robot):
    names = set(robot.model.frame_names)
    links = set(re.findall(r'<link\s+name="([^"]+)"', _text(robot.source)))
    joints = set(robot.model.joint_names)
    assert links <= names
    assert joints <= names


def _text(source) -> str:
    text = str(source)
    return text if text.lstrip().startswith("<") else open(text, encoding="utf-8").read()


def test_bundled_arm_loads_and_matches_pinocchio(arm7):
    assert arm7.model.nv == (13 if arm7.floating_base else 7)
    for q, v, a in arm7.states("arm7"):
        assert_close(rd.rnea(arm7.model, arm7.data, q, v, a), arm7.bridge.rnea(q, v, a), what="rnea")
        assert_close(rd.aba(arm7.model, arm7.data, q, v, a), arm7.bridge.aba(q, v, a), what="aba")


def test_sibling_joints_are_ordered_by_name_as_in_pinocchio():
    """Pinocchio's URDF reader visits the child joints of a link sorted by name, whatever
    the document order; the layout must agree with it (joint_states are mapped by name anyway)."""
    xml = urdf(link("base"), link("left"), link("right"), link("tip"),
                joint("zz_right", "base", "right"), joint("mm_tip", "right", "tip"), joint("aa_left", "base", "left"))
    model = rd.load_urdf(xml)
    assert model.joint_names == ["aa_left", "zz_right", "mm_tip"]
    PinocchioBridge.for_model(model, xml)


def test_floating_joint_in_urdf_is_a_free_flyer():
    xml = urdf(link("world", None), link("body"), link("arm"),
                '<joint name="float" type="floating"><parent link="world"/><child link="body"/></joint>',
                joint("hinge", "body", "arm"))
    model = rd.load_urdf(xml)
    assert model.joint_names == ["float", "hinge"]
    assert (model.nq, model.nv) == (8, 7)
    bridge = PinocchioBridge.for_model(model, xml)
    rng = np.random.default_rng(0)
    q, v, a = bridge.random_configuration(rng), rng.standard_normal(7), rng.standard_normal(7)
    assert_close(rd.rnea(model, model.create_data(), q, v, a), bridge.rnea(q, v, a))


def test_non_unit_axes_are_normalized():
    scaled = urdf(link("base"), link("arm"), joint("hinge", "base", "arm", axis="0 3 4"))
    unit = urdf(link("base"), link("arm"), joint("hinge", "base", "arm", axis="0 0.6 0.8"))
    scaled_model, unit_model = rd.load_urdf(scaled), rd.load_urdf(unit)
    np.testing.assert_allclose(scaled_model.joint_axes[1], [0, 0.6, 0.8], rtol=0, atol=1e-15)
    q, v, a = np.array([0.3]), np.array([0.7]), np.array([-1.2])
    assert_close(rd.rnea(scaled_model, scaled_model.create_data(), q, v, a),
                 rd.rnea(unit_model, unit_model.create_data(), q, v, a))


def test_massless_intermediate_link_with_massive_child_is_valid():
    xml = urdf(link("base"), link("middle", None), link("tip"),
                joint("first", "base", "middle"), joint("second", "middle", "tip", axis="1 0 0"))
    model = rd.load_urdf(xml)
    assert model.nv == 2 and model.inertias[1, 0] == 0.0


# ------------------------------------------------------------------ refusals
def _refused(exception, source, match, element=None, **kwargs):
    with pytest.raises(exception, match=match) as info:
        rd.load_urdf(source, **kwargs)
    assert isinstance(info.value, rd.RbdDerivError)
    if element is not None:
        attribute = "joint" if exception is ModelError else "element"
        assert getattr(info.value, attribute) == element
    return info.value


def test_xml_syntax_error():
    _refused(URDFError, TWO_LINK.replace("</robot>", "</robt>"), "parse")


def test_missing_file(tmp_path):
    missing = tmp_path / "nowhere.urdf"
    error = _refused(URDFError, str(missing), "not found")
    assert "nowhere.urdf" in str(error)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_description(text):
    _refused(URDFError, text, "empty")


def test_loop_is_refused():
    xml = urdf(link("a"), link("b"), link("c"), joint("ab", "a", "b"), joint("bc", "b", "c"), joint("ca", "c", "a"))
    _refused(URDFError, xml, "loop|root")


def test_link_with_two_parents_is_refused():
    xml = urdf(link("a"), link("b"), link("c"), joint("ab", "a", "b"), joint("ac", "a", "c"), joint("bc", "b", "c"))
    _refused(URDFError, xml, "bc", element="bc")


def test_several_roots_are_refused():
    xml = urdf(link("a"), link("b"), link("c"), link("d"), joint("ab", "a", "b"), joint("cd", "c", "d"))
    error = _refused(URDFError, xml, "several root")
    assert "a" in str(error) and "c" in str(error)


def test_unknown_link_is_refused():
    _refused(URDFError, urdf(link("a"), joint("ab", "a", "ghost")), "ghost")


@pytest.mark.parametrize("kind", ["planar"])
def test_unsupported_joint_type_is_refused(kind):
    xml = urdf(link("a"), link("b"), joint("slider_plane", "a", "b", kind=kind))
    _refused(ModelError, xml, "slider_plane", element="slider_plane")


def test_massless_moving_leaf_loads_and_m_is_singular_at_its_joint_until_it_has_an_armature():
    xml = urdf(link("base"), link("arm"), link("ghost", None), joint("shoulder", "base", "arm"),
                joint("wrist", "arm", "ghost"))
    model = rd.load_urdf(xml)
    data = model.create_data()
    q, v = np.array([0.3, -0.2]), np.array([0.5, 1.0])
    tau = rd.rnea(model, data, q, v, np.array([1.0, 2.0])).copy()
    assert tau[1] == 0.0, "nothing to accelerate behind the wrist"
    M = rd.crba(model, data, q).copy()
    assert M[1, 1] == 0.0 and M[0, 0] > 0.0
    with pytest.raises(ModelError, match="singular") as error:
        rd.aba(model, data, q, v, tau)
    assert error.value.joint == "wrist" and "armature" in str(error.value)
    model.armature = [0.0, 0.25]
    ddq = rd.aba(model, data, q, v, tau + np.array([0.0, 0.5]))
    assert_close(ddq[1], 0.5 / 0.25, what="the wrist's armature alone resists its torque")
    assert_close(rd.crba(model, data, q), M + np.diag([0.0, 0.25]), what="M + diag(armature)")


@pytest.mark.parametrize("name", sorted(MASSLESS_MOVING_ROBOTS))
def test_example_robot_with_massless_moving_links_loads_as_pinocchio_loads_it(name):
    model = rd.load_urdf(EXAMPLE_ROBOTS[name], floating_base=True)
    PinocchioBridge.for_model(model, EXAMPLE_ROBOTS[name])  # same joints, same layout
    massless = [k for k in range(1, model.njoints) if model.inertias[k, 0] == 0.0]
    assert massless, "the robot has massless moving links: the test would check nothing"


# ------------------------------------------------------------------ armature
def test_armature_is_zero_after_loading_and_read_only():
    model = rd.load_urdf(TWO_LINK)
    np.testing.assert_array_equal(model.armature, np.zeros(model.nv))
    with pytest.raises(ValueError):
        model.armature[0] = 1.0


@pytest.mark.parametrize("floating_base", [False, True])
def test_armature_set_is_read_back_in_dof_order(floating_base):
    model = rd.load_urdf(TWO_LINK, floating_base=floating_base)
    armature = np.arange(model.nv, dtype=float) * 0.5
    model.armature = list(armature)
    np.testing.assert_array_equal(model.armature, armature)
    assert not model.armature.flags.writeable
    assert not model.mf.flags.writeable, "the setter leaves the model's arrays read-only"


@pytest.mark.parametrize("value, match", [
    (np.ones(3), "2 numbers"),
    ([0.1, np.nan], "elbow"),
    ([0.1, np.inf], "elbow"),
    ([-0.1, 0.2], "shoulder"),
    ("ab", "numbers"),
])
def test_bad_armature_is_refused_and_changes_nothing(value, match):
    model = rd.load_urdf(TWO_LINK)
    model.armature = [0.1, 0.2]
    data = model.create_data()
    q = np.array([0.3, -0.2])
    M = rd.crba(model, data, q).copy()
    with pytest.raises(ModelError, match=match) as error:
        model.armature = value
    if match in ("shoulder", "elbow"):
        assert error.value.joint == match
    np.testing.assert_array_equal(model.armature, [0.1, 0.2])
    np.testing.assert_array_equal(rd.crba(model, data, q), M)


def test_zero_axis_is_refused():
    _refused(ModelError, urdf(link("a"), link("b"), joint("dead", "a", "b", axis="0 0 0")), "dead", element="dead")


def test_negative_mass_is_refused():
    _refused(ModelError, urdf(link("a"), link("b", -1.0), joint("j", "a", "b")), "b")


def test_inverted_limits_are_refused():
    xml = urdf(link("a"), link("b"), joint("j", "a", "b", kind="continuous",
                                             extra='<limit lower="1" upper="-1" effort="1" velocity="1"/>'))
    xml = xml.replace('type="continuous"', 'type="revolute"')
    _refused(ModelError, xml, "j", element="j")


def test_robot_without_moving_joint_is_refused():
    _refused(ModelError, urdf(link("a"), link("b"), joint("weld", "a", "b", kind="fixed")), "movable")


def test_random_trees_load_with_every_joint_kind():
    kinds_seen = set()
    for seed in range(10):
        xml = random_urdf(np.random.default_rng(seed), 10)
        model = rd.load_urdf(xml)
        kinds_seen.update(int(k) for k in model.joint_types[1:])
    assert kinds_seen == {rd.JOINT_REVOLUTE, rd.JOINT_PRISMATIC}


def test_loop_away_from_the_root_is_refused():
    # c and d form a cycle that no joint from the root reaches: each has a parent, so the root check passes.
    xml = urdf(link("a"), link("b"), link("c"), link("d"), joint("ab", "a", "b"), joint("cd", "c", "d"),
               joint("dc", "d", "c"))
    error = _refused(URDFError, xml, "not connected")
    assert "c" in str(error) and "d" in str(error)


@pytest.mark.parametrize("kind", ["link", "joint"])
def test_duplicate_names_are_refused(kind):
    if kind == "link":
        xml = urdf(link("a"), link("b"), link("b"), joint("ab", "a", "b"))
    else:
        xml = urdf(link("a"), link("b"), link("c"), joint("j", "a", "b"), joint("j", "b", "c"))
    _refused(URDFError, xml, f"two {kind}s are named")


def test_non_finite_origin_is_refused():
    xml = TWO_LINK.replace('<origin xyz="0.1 0 0.2"', '<origin xyz="nan 0 0.2"', 1)
    _refused(ModelError, xml, "non-finite origin", element="shoulder")


@pytest.mark.parametrize("limit, message", [('effort="-5"', "effort"), ('velocity="nan"', "velocity"),
                                            ('lower="nan"', "lower")])
def test_invalid_limits_are_refused(limit, message):
    key = limit.split("=")[0]
    original = {"effort": 'effort="10"', "velocity": 'velocity="2"', "lower": 'lower="-1"'}[key]
    xml = TWO_LINK.replace(original, limit, 1)
    _refused(ModelError, xml, message, element="shoulder")


def test_bundled_urdf_is_found_with_or_without_suffix_and_refused_clearly():
    path = rd.bundled_urdf("rbd_arm7")
    assert path == rd.bundled_urdf("rbd_arm7.urdf") and path.name == "rbd_arm7.urdf"
    assert rd.load_urdf(str(path)).nv == 7
    with pytest.raises(rd.URDFError, match="not_a_robot.urdf"):
        rd.bundled_urdf("not_a_robot")



def test_actuator_limits_replace_the_urdfs_placeholders():
    """solo12's URDF says 1000 N m per joint: the actuators' limits replace it, one value or one per joint, each
    finite, > 0 and at most the URDF's; the free flyer keeps no limit, the URDF's stay readable."""
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    urdf = np.array(model.effort_limit)
    assert (urdf[6:] == 1000.0).all() and np.isinf(urdf[:6]).all()
    model.set_actuator_limits([2.7])
    assert (model.effort_limit[6:] == 2.7).all() and np.isinf(model.effort_limit[:6]).all()
    per_joint = np.linspace(1.0, 3.0, 12)
    model.set_actuator_limits(per_joint)
    np.testing.assert_array_equal(model.effort_limit[6:], per_joint)
    with pytest.raises(ValueError):
        model.effort_limit[6] = 5.0  # read-only
    for bad, match in (([0.0], "FL_HAA"), ([1001.0], "at most the URDF's 1000"), ([np.nan], "finite"),
                       ([1.0, 2.0], "one value or one per actuated joint"), (["x"], "numbers")):
        with pytest.raises(ModelError, match=match):
            model.set_actuator_limits(bad)
    np.testing.assert_array_equal(model.effort_limit[6:], per_joint)  # a refusal changes nothing
    model.set_actuator_limits([])
    np.testing.assert_array_equal(model.effort_limit, urdf)
    np.testing.assert_array_equal(model.urdf_effort_limit, urdf)


# ------------------------------------------------------------------ locked joints (a reduced model)
def _locked_cases():
    """(URDF, floating base, {joint: position}) on robots of example-robot-data: a humanoid's arms, grippers
    and head (what its walking MPC locks), an arm's wrist."""
    talos = EXAMPLE_ROBOTS["talos"]
    full = rd.load_urdf(str(talos), floating_base=True)
    rng = np.random.default_rng(3)
    upper = [n for n in full.actuated_joint_names if not n.startswith(("leg_", "torso_"))]
    lower = np.array([full.lower_position_limit[full.idx_q[n]] for n in upper])
    high = np.array([full.upper_position_limit[full.idx_q[n]] for n in upper])
    talos_locked = dict(zip(upper, rng.uniform(lower, high)))
    panda = EXAMPLE_ROBOTS["panda"]
    return [(talos, True, talos_locked), (panda, False, {"panda_joint5": 0.7, "panda_joint7": -1.1})]


@pytest.mark.parametrize("index", [0, 1], ids=["talos_upper_body", "panda_wrist"])
def test_locked_joints_give_pinocchios_reduced_model(index):
    """A model with joints locked at given positions is Pinocchio's ``buildReducedModel``: the same joints, and
    the same placements, inertias, M, RNEA and frame placements at random states, entry by entry."""
    source, floating, locked = _locked_cases()[index]
    model = rd.load_urdf(str(source), floating_base=floating, locked_joints=locked)
    bridge = PinocchioBridge(str(source), floating_base=floating, locked=locked)
    assert model.joint_names == bridge.joint_names and not set(locked) & set(model.joint_names)
    assert (model.nq, model.nv) == (bridge.nq, bridge.nv)
    tree = bridge.tree_arrays()
    assert_close(model.joint_placements, tree.joint_placements, what="joint placements")
    assert_close(model.inertias, tree.inertias, what="inertias")
    rng = np.random.default_rng(7)
    data = model.create_data()
    for _ in range(3):
        q = bridge.random_configuration(rng)
        v, a = rng.standard_normal(model.nv), rng.standard_normal(model.nv)
        assert_close(rd.rnea(model, data, q, v, a), bridge.rnea(q, v, a), rtol=1e-9, what="rnea")
        assert_close(rd.crba(model, data, q), bridge.crba(q), rtol=1e-9, what="M")
        rd.forward_kinematics(model, data, q)
        for name in locked:  # the locked joints' frames stay, where the fixed joint puts them
            assert_close(rd.frame_placement(model, data, name), bridge.frame_placement(q, name), rtol=1e-9,
                         what=f"frame {name}")


def test_a_locked_joint_moves_its_subtree_as_the_full_model_at_that_position():
    """Independent of Pinocchio: the reduced model's links sit where the full model puts them with the locked
    joint at its position, and the reduced torques are the full model's at zero locked velocity and acceleration."""
    full = rd.load_urdf(TWO_LINK)
    reduced = rd.load_urdf(TWO_LINK, locked_joints={"elbow": 0.8})
    assert list(reduced.joint_names) == ["shoulder"]
    q_full = np.array([0.3, 0.8])
    reduced_data, full_data = reduced.create_data(), full.create_data()
    rd.forward_kinematics(reduced, reduced_data, q_full[:1])
    rd.forward_kinematics(full, full_data, q_full)
    for name in ("hand", "elbow"):
        assert_close(rd.frame_placement(reduced, reduced_data, name), rd.frame_placement(full, full_data, name),
                     rtol=1e-12, what=name)
    tau_full = rd.rnea(full, full.create_data(), q_full, np.array([0.5, 0.0]), np.array([-1.0, 0.0]))
    tau = rd.rnea(reduced, reduced.create_data(), q_full[:1], np.array([0.5]), np.array([-1.0]))
    assert_close(tau, tau_full[:1], rtol=1e-12, what="shoulder torque")


@pytest.mark.parametrize("locked, match", [
    ({"wrist": 0.0}, "not a joint of the URDF"),
    ({"elbow": float("nan")}, "not a finite position"),
    ({"elbow": 4.0}, "within its limits"),
])
def test_bad_locked_joints_are_refused(locked, match):
    with pytest.raises(ModelError, match=match):  # the elbow's limits are [-1, 1]
        rd.load_urdf(TWO_LINK, locked_joints=locked)


def test_a_fixed_joint_cannot_be_locked():
    source = urdf(link("base"), link("arm"), link("hand"), joint("shoulder", "base", "arm"),
                  joint("mount", "arm", "hand", kind="fixed"))
    with pytest.raises(ModelError, match="only revolute, continuous and prismatic"):
        rd.load_urdf(source, locked_joints={"mount": 0.0})


# ------------------------------------------------------------------ frames added after loading
def test_added_frame_matches_pinocchio_add_frame():
    """A frame fixed to a link at a placement: its world placement and Jacobian are Pinocchio's for the same
    frame added with ``addFrame`` (OP_FRAME on the link's joint, at the link's placement times the offset)."""
    import pinocchio as pin

    source = EXAMPLE_ROBOTS["talos"]
    model = rd.load_urdf(source, floating_base=True)
    bridge = PinocchioBridge.for_model(model, source)
    offset = np.eye(4)
    offset[:3, :3] = pin.rpy.rpyToMatrix(0.3, -0.2, 0.7)
    offset[:3, 3] = [0.05, -0.02, -0.11]
    model.add_frame("left_sole_test", "leg_left_6_link", offset)
    link_id = bridge.model.getFrameId("leg_left_6_link", pin.FrameType.BODY)
    link = bridge.model.frames[link_id]
    bridge.model.addFrame(pin.Frame("left_sole_test", link.parentJoint, link_id,
                                    link.placement * pin.SE3(offset), pin.FrameType.OP_FRAME))
    bridge.data = bridge.model.createData()
    data = model.create_data()
    rng = np.random.default_rng(7)
    for _ in range(3):
        q = bridge.random_configuration(rng)
        rd.forward_kinematics(model, data, q)
        assert_close(rd.frame_placement(model, data, "left_sole_test"), bridge.frame_placement(q, "left_sole_test"),
                     what="placement")
        q_pin = bridge.q_to_pin(q)
        pin.computeJointJacobians(bridge.model, bridge.data, q_pin)
        expected = pin.getFrameJacobian(bridge.model, bridge.data, bridge.model.getFrameId("left_sole_test"),
                                        pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        assert_close(rd.frame_jacobian(model, data, q, "left_sole_test"), expected, what="jacobian")
    assert model.frame_names[-1] == "left_sole_test"
    assert model.added_frames["left_sole_test"][0] == "leg_left_6_link"


def test_add_frame_refuses_a_taken_name_an_unknown_parent_and_a_non_rigid_placement():
    model = rd.load_urdf(TWO_LINK)
    with pytest.raises(ModelError, match="already exists"):
        model.add_frame("hand", "arm", np.eye(4))
    with pytest.raises(ModelError, match="no frame named 'palm'"):
        model.add_frame("tip", "palm", np.eye(4))
    scaled = np.diag([2.0, 1.0, 1.0, 1.0])
    with pytest.raises(ModelError, match="rotation and a translation"):
        model.add_frame("tip", "hand", scaled)
    with pytest.raises(ModelError, match="finite"):
        model.add_frame("tip", "hand", np.full((4, 4), np.nan))
    assert "tip" not in model.frame_names and not model.added_frames
