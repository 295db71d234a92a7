"""Tests of the oracle kit itself (rbd_deriv.testing), independent of the library's algorithms.

If an oracle were wrong, every other test would be meaningless: here the kit is
checked against Pinocchio, against closed-form derivatives, and for the
properties its random robots promise.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import numpy as np
import pinocchio as pin
import pytest

from rbd_deriv.testing import EXACT_RTOL, assert_close, finite_diff, random_urdf, reference
from rbd_deriv.testing.pinocchio_bridge import LayoutMismatchError, PinocchioBridge, symmetrize_upper
from rbd_deriv.testing.random_urdf import random_inertia
from rbd_deriv.testing.robots import (
    EXAMPLE_ROBOTS,
    ROBOT_NAMES,
    example_robot_urdf,
    with_minimum_mass,
)

EXPECTED_NV = {"ur5": 6, "panda": 9, "solo12": 12, "hyq": 12, "anymal": 12, "talos": 44, "romeo": 55}


# ------------------------------------------------------------------ robots
def test_example_robots_are_found_with_expected_sizes():
    assert list(EXAMPLE_ROBOTS) == ROBOT_NAMES == list(EXPECTED_NV)
    for name, path in EXAMPLE_ROBOTS.items():
        assert path.is_file() and path.suffix == ".urdf"
        assert PinocchioBridge(path).nv == EXPECTED_NV[name]


def test_unknown_robot_names_are_refused_clearly():
    with pytest.raises(KeyError, match="known robots"):
        example_robot_urdf("atlas")



def test_with_minimum_mass_only_fills_massless_links():
    original = ElementTree.parse(EXAMPLE_ROBOTS["romeo"]).getroot()
    filled = ElementTree.fromstring(with_minimum_mass(EXAMPLE_ROBOTS["romeo"], mass=0.1, inertia=1e-3))
    masses_before = {link.get("name"): link.find("inertial/mass") for link in original.iter("link")}
    for link in filled.iter("link"):
        mass = float(link.find("inertial/mass").get("value"))
        before = masses_before[link.get("name")]
        if before is not None and float(before.get("value")) > 0:
            assert mass == float(before.get("value"))
        else:
            assert mass == 0.1
    bridge = PinocchioBridge(with_minimum_mass(EXAMPLE_ROBOTS["romeo"]), floating_base=True)
    mass_matrix = bridge.crba(bridge.random_configuration(np.random.default_rng(0)))
    assert np.linalg.eigvalsh(mass_matrix).min() > 1e-5


# ------------------------------------------------------------------ bridge
def _tree_with_continuous_joints() -> str:
    rng = np.random.default_rng(7)
    return random_urdf(rng, 9, joint_kinds=("continuous", "revolute", "prismatic"), kind_weights=(2, 1, 1))


def test_bridge_layout_turns_continuous_joints_into_one_angle():
    bridge = PinocchioBridge(_tree_with_continuous_joints(), floating_base=True)
    assert bridge.continuous_joints, "the test tree should contain continuous joints"
    assert bridge.nq == bridge.model.nq - len(bridge.continuous_joints)
    assert bridge.joint_names[0] == "root_joint" and bridge.nq_joint["root_joint"] == 7
    rng = np.random.default_rng(1)
    q = bridge.random_configuration(rng)
    q_pin = bridge.q_to_pin(q)
    assert np.all(np.isfinite(q_pin))
    for name in bridge.continuous_joints:
        start = bridge.model.joints[bridge.joint_names.index(name) + 1].idx_q
        assert q_pin[start] ** 2 + q_pin[start + 1] ** 2 == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(bridge.q_from_pin(q_pin), q, rtol=0, atol=1e-15)


def test_bridge_check_model_detects_a_different_layout():
    bridge = PinocchioBridge(EXAMPLE_ROBOTS["ur5"])

    class Layout:
        joint_names = list(bridge.joint_names)
        idx_q, idx_v = dict(bridge.idx_q), dict(bridge.idx_v)
        nq_joint, nv_joint = dict(bridge.nq_joint), dict(bridge.nv_joint)
        nq, nv, njoints = bridge.nq, bridge.nv, bridge.njoints

    bridge.check_model(Layout)
    Layout.joint_names = Layout.joint_names[::-1]
    with pytest.raises(LayoutMismatchError, match="joint order"):
        bridge.check_model(Layout)
    Layout.joint_names = list(bridge.joint_names)
    Layout.idx_v = dict(Layout.idx_v, **{bridge.joint_names[0]: 3})
    with pytest.raises(LayoutMismatchError, match="idx_v"):
        bridge.check_model(Layout)


def test_bridge_fext_conversion_and_symmetrize():
    bridge = PinocchioBridge(EXAMPLE_ROBOTS["ur5"])
    fext = np.arange(bridge.njoints * 6, dtype=float).reshape(bridge.njoints, 6)
    forces = bridge.fext_to_pin(fext)
    assert len(forces) == bridge.njoints
    np.testing.assert_array_equal(forces[2].linear, fext[2, :3])
    np.testing.assert_array_equal(forces[2].angular, fext[2, 3:])
    with pytest.raises(ValueError):
        bridge.fext_to_pin(fext[1:])
    upper = np.triu(np.arange(9.0).reshape(3, 3))
    np.testing.assert_array_equal(symmetrize_upper(upper), upper + np.triu(upper, 1).T)


def test_bridge_gravity_is_passed_to_pinocchio():
    gravity = np.array([0.3, -1.0, -3.7, 0.0, 0.0, 0.0])
    bridge = PinocchioBridge(EXAMPLE_ROBOTS["panda"], gravity=gravity)
    np.testing.assert_array_equal(bridge.model.gravity.linear, gravity[:3])
    q = bridge.random_configuration(np.random.default_rng(2))
    zero = np.zeros(bridge.nv)
    default = PinocchioBridge(EXAMPLE_ROBOTS["panda"])
    assert not np.allclose(bridge.rnea(q, zero, zero), default.rnea(q, zero, zero))


def test_bridge_random_configuration_respects_limits():
    bridge = PinocchioBridge(EXAMPLE_ROBOTS["talos"], floating_base=True)
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = bridge.random_configuration(rng)
        assert np.linalg.norm(q[3:7]) == pytest.approx(1.0, abs=1e-14)
        q_pin = bridge.q_to_pin(q)
        assert np.all(q_pin[7:] >= bridge.model.lowerPositionLimit[7:])
        assert np.all(q_pin[7:] <= bridge.model.upperPositionLimit[7:])


# ------------------------------------------------------------------ random trees
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("floating_base", [False, True])
def test_random_trees_have_a_positive_definite_mass_matrix(seed, floating_base):
    rng = np.random.default_rng(seed)
    xml = random_urdf(rng, int(rng.integers(2, 13)), non_unit_axes=seed % 2 == 0)
    bridge = PinocchioBridge(xml, floating_base=floating_base)
    if bridge.nv == 0:
        pytest.skip("this tree has only fixed joints: nothing to check")
    eigenvalues = np.linalg.eigvalsh(bridge.crba(bridge.random_configuration(rng)))
    assert eigenvalues.min() > 1e-6 * eigenvalues.max()


def test_random_trees_are_reproducible_and_varied():
    assert random_urdf(np.random.default_rng(5)) == random_urdf(np.random.default_rng(5))
    assert random_urdf(np.random.default_rng(5)) != random_urdf(np.random.default_rng(6))
    texts = [random_urdf(np.random.default_rng(seed), 10) for seed in range(20)]
    joined = "\n".join(texts)
    for kind in ("revolute", "continuous", "prismatic", "fixed"):
        assert f'type="{kind}"' in joined
    assert re.search(r'<link name="link_\d+"/>', joined), "some links should be massless"
    branched = 0
    for text in texts:
        parents = re.findall(r'<parent link="(link_\d+)"/>', text)
        branched += len(parents) != len(set(parents))
    assert branched > 5, "most trees should branch"


@pytest.mark.parametrize("seed", range(30))
def test_random_tree_massless_links_are_never_moving_leaves(seed):
    root = ElementTree.fromstring(random_urdf(np.random.default_rng(seed), 12, massless_probability=0.6))
    massless = {link.get("name") for link in root.iter("link") if link.find("inertial") is None}
    parents = {joint.find("child").get("link"): joint.find("parent").get("link") for joint in root.iter("joint")}
    kinds = {joint.find("child").get("link"): joint.get("type") for joint in root.iter("joint")}
    has_child = set(parents.values())
    assert "link_0" not in massless
    for link in massless:
        assert parents[link] not in massless
        if link not in has_child:
            assert kinds[link] == "fixed"


def test_random_inertia_is_physical():
    rng = np.random.default_rng(11)
    for _ in range(200):
        inertia = random_inertia(rng, rng.uniform(0.1, 5))
        np.testing.assert_array_equal(inertia, inertia.T)
        a, b, c = np.sort(np.linalg.eigvalsh(inertia))
        assert a > 0 and a + b >= c * (1 - 1e-12)


def test_random_tree_axes_are_normalized_by_pinocchio_as_by_the_spec():
    xml = random_urdf(np.random.default_rng(21), 8, non_unit_axes=True, joint_kinds=("revolute", "prismatic"))
    norms = [np.linalg.norm([float(x) for x in match.split()]) for match in re.findall(r'<axis xyz="([^"]+)"', xml)]
    assert max(abs(norm - 1.0) for norm in norms) > 0.1

    def unit_axis(match):
        axis = np.array([float(x) for x in match.group(1).split()])
        return '<axis xyz="' + " ".join(repr(float(x)) for x in axis / np.linalg.norm(axis)) + '"'

    normalized = re.sub(r'<axis xyz="([^"]+)"', unit_axis, xml)
    scaled, unit = PinocchioBridge(xml, True), PinocchioBridge(normalized, True)
    rng = np.random.default_rng(0)
    q, v, a = scaled.random_configuration(rng), rng.standard_normal(scaled.nv), rng.standard_normal(scaled.nv)
    assert_close(scaled.rnea(q, v, a), unit.rnea(q, v, a))


# ------------------------------------------------------------------ reference RNEA
REFERENCE_CASES = [("ur5", False), ("panda", True), ("solo12", True), ("anymal", False)]


def _reference_cases():
    for name, floating_base in REFERENCE_CASES:
        yield pytest.param(str(EXAMPLE_ROBOTS[name]), floating_base, id=f"{name}-{floating_base}")
    for seed in range(6):
        xml = random_urdf(np.random.default_rng(100 + seed), 8, non_unit_axes=seed % 2 == 1)
        yield pytest.param(xml, seed % 2 == 0, id=f"tree{seed}")


def _reference_state(source, floating_base, seed):
    """Bridge, its tree description, a generator and a random (q, v, a, fext)."""
    bridge = PinocchioBridge(source, floating_base=floating_base)
    rng = np.random.default_rng(seed)
    q = bridge.random_configuration(rng)
    v, a = rng.uniform(-2, 2, bridge.nv), rng.uniform(-2, 2, bridge.nv)
    fext = rng.uniform(-5, 5, (bridge.njoints, 6))
    return bridge, bridge.tree_arrays(), rng, q, v, a, fext


@pytest.mark.parametrize("source, floating_base", list(_reference_cases()))
def test_reference_matches_pinocchio(source, floating_base):
    bridge, tree, rng, q, v, a, fext = _reference_state(source, floating_base, 4)
    assert_close(reference.rnea(tree, q, v, a), bridge.rnea(q, v, a), what="rnea")
    assert_close(reference.rnea(tree, q, v, a, fext), bridge.rnea(q, v, a, fext), what="rnea fext")
    assert_close(reference.mass_matrix(tree, q), bridge.crba(q), what="M")
    tau = rng.uniform(-5, 5, bridge.nv)
    assert_close(reference.forward_dynamics(tree, q, v, tau, fext), bridge.aba(q, v, tau, fext), what="ddq")
    step = rng.uniform(-1.5, 1.5, bridge.nv)
    assert_close(bridge.difference(bridge.integrate(q, step), reference.integrate(tree, q, step)),
                 np.zeros(bridge.nv), what="integrate")


@pytest.mark.parametrize("source, floating_base", list(_reference_cases()))
def test_complex_step_derivatives_match_pinocchio(source, floating_base):
    bridge, tree, rng, q, v, a, fext = _reference_state(source, floating_base, 5)
    dq, dv, da = reference.complex_step_rnea_derivatives(tree, q, v, a, fext)
    pin_dq, pin_dv, pin_m = bridge.rnea_derivatives(q, v, a, fext)
    assert_close(dq, pin_dq, rtol=1e-10, what="dtau/dq")
    assert_close(dv, pin_dv, rtol=1e-10, what="dtau/dv")
    assert_close(da, pin_m, rtol=1e-10, what="dtau/da")
    tau = rng.uniform(-5, 5, bridge.nv)
    dq, dv, dtau = reference.complex_step_aba_derivatives(tree, q, v, tau, fext)
    pin_dq, pin_dv, pin_minv = bridge.aba_derivatives(q, v, tau, fext)
    assert_close(dq, pin_dq, rtol=1e-10, what="dddq/dq")
    assert_close(dv, pin_dv, rtol=1e-10, what="dddq/dv")
    assert_close(dtau, pin_minv, rtol=1e-10, what="dddq/dtau")


def test_complex_safe_integrate_is_exact_at_tiny_and_large_angles():
    bridge = PinocchioBridge(EXAMPLE_ROBOTS["solo12"], floating_base=True)
    tree = bridge.tree_arrays()
    q = bridge.random_configuration(np.random.default_rng(6))
    for scale in (1e-9, 1e-4, 1e-2, 3.0):
        step = scale * np.random.default_rng(7).standard_normal(bridge.nv)
        ours = reference.integrate(tree, q, step)
        assert_close(bridge.difference(bridge.integrate(q, step), ours), np.zeros(bridge.nv), rtol=1e-13)


# ------------------------------------------------------------------ finite differences
def test_central_difference_on_a_known_function():
    def function(x):
        return np.array([np.sin(x[0]) * x[1], np.exp(x[1]) + x[2] ** 3])

    x = np.array([0.3, -0.7, 1.1])
    exact = np.array([[np.cos(0.3) * -0.7, np.sin(0.3), 0.0], [0.0, np.exp(-0.7), 3 * 1.1 ** 2]])
    assert_close(finite_diff.central_difference(function, x), exact, rtol=1e-8)


def _free_body():
    return PinocchioBridge(
        '<robot name="body"><link name="base"><inertial><mass value="1"/>'
        '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link></robot>',
        floating_base=True,
    )


def test_manifold_difference_on_a_known_function_of_a_pose():
    bridge = _free_body()
    tree = bridge.tree_arrays()
    q = bridge.random_configuration(np.random.default_rng(8))
    point = np.array([0.2, -0.4, 0.7])
    rotation = reference.rotation_from_quaternion(*q[3:7])

    def world_point(qq):
        return reference.rotation_from_quaternion(*qq[3:7]) @ point + qq[:3]

    jacobian = finite_diff.manifold_difference(world_point, q, lambda qq, dq: reference.integrate(tree, qq, dq), 6)
    # Body twist [linear, angular]: d p = R dl, d(R c) = -R [c]x dw.
    exact = np.hstack([rotation, -rotation @ reference.skew(point)])
    assert_close(jacobian, exact, rtol=1e-8)


def test_manifold_difference_with_output_difference_gives_dintegrate():
    bridge = PinocchioBridge(_tree_with_continuous_joints(), floating_base=True)
    rng = np.random.default_rng(9)
    q, v = bridge.random_configuration(rng), rng.uniform(-1, 1, bridge.nv)
    jacobian = finite_diff.manifold_difference(
        lambda qq: bridge.integrate(qq, v), q, bridge.integrate, bridge.nv, output_difference=bridge.difference
    )
    assert_close(jacobian, bridge.dintegrate_dq(q, v), rtol=1e-8)


def test_tolerance_helper_uses_the_documented_scale():
    expected = np.array([1000.0, 1.0])
    assert_close(expected + [5e-7, 5e-7], expected)  # within 1e-9 * 1000 absolute
    with pytest.raises(AssertionError, match="worst"):
        assert_close(expected + [0.0, 2e-6], expected)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(expected[:1], expected)
    assert EXACT_RTOL == 1e-9
