"""Tests of rbd_deriv.control.srdf on example-robot-data's SRDF files and on hand-written ones."""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control.srdf import posture_names, reference_posture
from rbd_deriv.exceptions import InputError
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


def srdf_of(urdf_path, name):
    return EXAMPLE_ROBOTS_DIR(urdf_path) / "srdf" / name


def EXAMPLE_ROBOTS_DIR(urdf_path):  # noqa: N802 - the robot's description folder
    path = urdf_path
    while path.name not in ("robots", "urdf"):
        path = path.parent
    return path.parent


def test_solo12_standing_posture():
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
    srdf = srdf_of(EXAMPLE_ROBOTS["solo12"], "solo.srdf")
    assert "standing" in posture_names(srdf)
    q = reference_posture(model, srdf, "standing")
    np.testing.assert_array_equal(q[:7], [0.0, 0.0, 0.235, 0.0, 0.0, 0.0, 1.0])
    assert q[model.idx_q["FL_HAA"]] == 0.1 and q[model.idx_q["FL_KFE"]] == -1.6


def test_talos_half_sitting_leaves_the_grippers_out():
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["talos"]), floating_base=True)
    srdf = srdf_of(EXAMPLE_ROBOTS["talos"], "talos.srdf")
    with pytest.raises(InputError, match="gripper_left_joint"):
        reference_posture(model, srdf, "half_sitting")
    q = reference_posture(model, srdf, "half_sitting", missing="neutral")
    assert q[2] == pytest.approx(1.01927)
    assert q[model.idx_q["arm_left_1_joint"]] == pytest.approx(0.25847)
    assert q[model.idx_q["gripper_left_joint"]] == 0.0


def test_a_reduced_model_skips_the_joints_it_locked_and_only_those():
    """talos with its arms locked: half-sitting's arm values are skipped, its legs' read as on the full model; an
    SRDF joint the reduced model lacks and that was not locked is still an error."""
    full = rd.load_urdf(str(EXAMPLE_ROBOTS["talos"]), floating_base=True)
    srdf = srdf_of(EXAMPLE_ROBOTS["talos"], "talos.srdf")
    arms = [n for n in full.actuated_joint_names if n.startswith("arm_")]
    q_full = reference_posture(full, srdf, "half_sitting", missing="neutral")
    reduced = rd.load_urdf(str(EXAMPLE_ROBOTS["talos"]), floating_base=True,
                           locked_joints={name: q_full[full.idx_q[name]] for name in arms})
    q = reference_posture(reduced, srdf, "half_sitting", missing="neutral", absent=arms)
    for name in reduced.joint_names:
        start, size = reduced.idx_q[name], reduced.nq_joint[name]
        np.testing.assert_array_equal(q[start:start + size], q_full[full.idx_q[name]:full.idx_q[name] + size])
    with pytest.raises(InputError, match="arm_right_1_joint"):
        reference_posture(reduced, srdf, "half_sitting", missing="neutral", absent=arms[:7])


def test_bad_srdf_input_is_refused():
    model = rd.load_urdf(str(EXAMPLE_ROBOTS["ur5"]))
    joints = "".join(f'<joint name="{name}" value="0.5"/>' for name in model.joint_names)
    good = f'<robot name="ur5"><group_state name="up" group="all">{joints}</group_state></robot>'
    assert np.all(reference_posture(model, good, "up") == 0.5)
    with pytest.raises(InputError, match="no group_state named 'down'"):
        reference_posture(model, good, "down")
    with pytest.raises(InputError, match="not valid XML"):
        reference_posture(model, "<robot><group_state", "up")
    with pytest.raises(InputError, match="cannot read"):
        reference_posture(model, "/nonexistent/robot.srdf", "up")
    bad_value = good.replace('value="0.5"', 'value="abc"', 1)
    with pytest.raises(InputError, match="not a number"):
        reference_posture(model, bad_value, "up")
    too_many = good.replace('value="0.5"', 'value="0.5 0.1"', 1)
    with pytest.raises(InputError, match="needs 1 finite"):
        reference_posture(model, too_many, "up")
    unknown = good.replace("</group_state>", '<joint name="elbow" value="0"/></group_state>')
    with pytest.raises(InputError, match="does not have"):
        reference_posture(model, unknown, "up")
    with pytest.raises(InputError, match="missing"):
        reference_posture(model, good, "up", missing="zero")
