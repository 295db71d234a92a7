"""Tests of rbd_deriv.sim.ground: the settings of the floor and the feet, the trunk detector's size.

The contact physics itself (landing, resting forces, the cone, falls) is tested through the plant in
test_mujoco_plant.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.core.soles import Sole
from rbd_deriv.exceptions import InputError
from rbd_deriv.sim.ground import Ground, trunk_box
from rbd_deriv.testing import assert_close


def test_defaults_and_kinds():
    ground = Ground(["FL_FOOT", "FR_FOOT"])
    assert ground.contact_kinds == ("point", "point")
    assert ground.foot_radius == 0.02 and ground.friction == 1.0
    assert_close(ground.sphere_centers("point"), np.zeros((1, 3)))
    sole = Ground(["left_sole"], ["frame"], foot_radius=0.01, sole_size=(0.2, 0.1))
    corners = sole.sphere_centers("frame")
    # Four corners of the 0.2 x 0.1 rectangle, one radius above the sole frame.
    assert_close(np.sort(corners[:, 0]), [-0.1, -0.1, 0.1, 0.1])
    assert_close(np.sort(corners[:, 1]), [-0.05, -0.05, 0.05, 0.05])
    assert_close(corners[:, 2], np.full(4, 0.01))


@pytest.mark.parametrize("arguments, message", [
    (dict(contact_frames=[]), "at least one"),
    (dict(contact_frames=["a", "a"]), "each once"),
    (dict(contact_frames=["a"], contact_kinds=["point", "frame"]), "contact_kinds"),
    (dict(contact_frames=["a"], contact_kinds=["hand"]), "contact_kinds"),
    (dict(contact_frames=["a"], foot_radius=0.0), "foot_radius"),
    (dict(contact_frames=["a"], foot_radius=float("nan")), "foot_radius"),
    (dict(contact_frames=["a"], friction=-1.0), "friction"),
    (dict(contact_frames=["a"], sole_size=(0.2,)), "sole_size"),
    (dict(contact_frames=["a"], sole_size=(0.2, -0.1)), "sole_size"),
    (dict(contact_frames=["a"], contact_kinds=["frame"], soles=(Sole("foot", np.eye(4), (0.2, 0.1), 4),)),
     "not those of the contact frames"),
])
def test_bad_settings_are_refused(arguments, message):
    with pytest.raises(InputError, match=message):
        Ground(**arguments)


def test_trunk_box_has_the_inertia_it_was_made_from():
    mass, half = 3.0, np.array([0.2, 0.1, 0.05])
    # A uniform box: I_x = m (b^2 + c^2) / 3 with half-sizes (a, b, c).
    a, b, c = half ** 2
    inertia = mass / 3 * np.array([b + c, a + c, a + b])
    assert_close(trunk_box(mass, inertia), half)
    # A flat body at the triangle inequality's limit gets a millimetre, not a NaN.
    assert_close(trunk_box(1.0, np.array([1.0, 1.0, 2.0]))[2], 1e-3)


def test_rest_on_floor_puts_the_lowest_sphere_on_the_floor():
    import rbd_deriv as rd
    from rbd_deriv.sim.ground import rest_on_floor
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

    model = rd.load_urdf(str(EXAMPLE_ROBOTS["talos"]), floating_base=True)
    data = model.create_data()
    q = rd.neutral(model)
    q[3:7] = [0.0, np.sin(0.05), 0.0, np.cos(0.05)]  # pitched by 0.1 rad: the toes are lowest
    soles = ("leg_left_sole_fix_joint", "leg_right_sole_fix_joint")
    ground = Ground(soles, ("frame", "frame"), foot_radius=0.01, sole_size=(0.2, 0.1))
    rested = rest_on_floor(model, q, ground)
    assert_close(np.delete(rested, 2), np.delete(q, 2))
    rd.forward_kinematics(model, data, rested)
    # The sole's front edge, 0.1 m ahead of its centre, is lowest; its spheres' bottoms touch z = 0 there.
    lowest = []
    for sole in soles:
        placement = rd.frame_placement(model, data, sole)
        for x in (0.1, -0.1):
            for y in (0.05, -0.05):
                center = placement[:3, :3] @ [x, y, 0.01] + placement[:3, 3]
                lowest.append(center[2] - 0.01)
    assert min(lowest) == pytest.approx(0.0, abs=1e-12)
    assert max(lowest) > 0.01


def test_initial_configuration():
    import rbd_deriv as rd
    from rbd_deriv.sim.ground import initial_configuration, rest_on_floor
    from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, bundled_urdf

    arm = rd.load_urdf(bundled_urdf("rbd_arm7"))
    assert_close(initial_configuration(arm, [0.3]), np.full(7, 0.3))
    assert_close(initial_configuration(arm, np.arange(7.0)), np.arange(7.0))
    solo = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    joints = np.linspace(-1.0, 1.0, 12)
    pose = [0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0]
    q = initial_configuration(solo, joints, pose)
    assert_close(q[:7], pose)
    assert_close(q[[solo.idx_q[n] for n in solo.actuated_joint_names]], joints)
    feet = Ground(["FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"])
    rested = initial_configuration(solo, joints, [0.0], feet)
    assert_close(rested[[0, 1, 3, 4, 5, 6]], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert_close(rested, rest_on_floor(solo, np.r_[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, joints], feet))
    with pytest.raises(InputError, match="12 actuated joints"):
        initial_configuration(solo, np.zeros(5))
    with pytest.raises(InputError, match="7 values"):
        initial_configuration(solo, joints, [0.0, 0.0, 0.3])
