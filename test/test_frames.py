"""Frames (rbd_deriv.core.frames): Jacobians, velocities, accelerations, center of mass, their derivatives.

Oracles: Pinocchio's getFrameJacobian / getFrameVelocity / getFrameAcceleration /
getFrameClassicalAcceleration / centerOfMass / jacobianCenterOfMass / getFrameVelocityDerivatives /
getFrameAccelerationDerivatives (1e-9), and central finite differences on the manifold (1e-6).

One difference from Pinocchio: in LOCAL_WORLD_ALIGNED, our q-derivatives are the derivatives of the LWA vectors
themselves (what a task cost or a contact needs, checked here against finite differences); Pinocchio's
getFrame*Derivatives in LOCAL_WORLD_ALIGNED return another quantity. LOCAL and WORLD match Pinocchio.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

import rbd_deriv as rd
from rbd_deriv.core import frames
from rbd_deriv.testing import FINITE_DIFFERENCE_RTOL, assert_close, finite_diff


FRAMES = [("talos", True, "leg_left_sole_fix_joint"), ("talos", True, "gripper_left_joint"),
          ("solo12", True, "FL_FOOT"), ("panda", False, "panda_hand"), ("ur5", False, "wrist_3_link")]
REFERENCES = {"local_world_aligned": pin.LOCAL_WORLD_ALIGNED, "local": pin.LOCAL, "world": pin.WORLD}


@pytest.fixture(params=FRAMES, ids=[f"{name}-{frame}" for name, _, frame in FRAMES])
def frame_case(request, load_robot):
    name, floating, frame = request.param
    return load_robot(name, floating), frame


def _pinocchio_state(robot, frame, q, v, a):
    pm, pd = robot.bridge.model, robot.bridge.data
    qp = robot.bridge.q_to_pin(q)
    pin.forwardKinematics(pm, pd, qp, v, a)
    pin.computeJointJacobians(pm, pd, qp)
    pin.updateFramePlacements(pm, pd)
    return pm, pd, qp, pm.getFrameId(frame)


@pytest.mark.parametrize("reference", list(REFERENCES))
def test_frame_quantities_match_pinocchio(frame_case, reference):
    robot, frame = frame_case
    model, data = robot.model, robot.data
    ref = REFERENCES[reference]
    for q, v, a in robot.states("frames"):
        pm, pd, qp, fid = _pinocchio_state(robot, frame, q, v, a)
        assert_close(rd.frame_jacobian(model, data, q, frame, reference), pin.getFrameJacobian(pm, pd, fid, ref),
                     what="J")
        assert_close(rd.frame_velocity(model, data, q, v, frame, reference),
                     pin.getFrameVelocity(pm, pd, fid, ref).vector, what="velocity")
        assert_close(rd.frame_acceleration(model, data, q, v, a, frame, reference),
                     pin.getFrameAcceleration(pm, pd, fid, ref).vector, what="acceleration")
        if reference != "world":
            assert_close(rd.frame_classical_acceleration(model, data, q, v, a, frame, reference),
                         pin.getFrameClassicalAcceleration(pm, pd, fid, ref).vector, what="classical acceleration")
        if reference == "local_world_aligned":
            continue  # Pinocchio's LWA derivatives are another quantity: see the module docstring
        pin.computeForwardKinematicsDerivatives(pm, pd, qp, v, a)
        ours = rd.frame_acceleration_derivatives(model, data, q, v, a, frame, reference)
        names = ("dv/dq", "da/dq", "da/dv", "da/da")
        for mine, theirs, name in zip(ours, pin.getFrameAccelerationDerivatives(pm, pd, fid, ref), names):
            assert_close(mine, theirs, what=name)
        for mine, theirs, name in zip(rd.frame_velocity_derivatives(model, data, q, v, frame, reference),
                                      pin.getFrameVelocityDerivatives(pm, pd, fid, ref), ("dv/dq", "dv/dv")):
            assert_close(mine, theirs, what=name)


@pytest.mark.parametrize("reference", list(REFERENCES))
def test_frame_derivatives_match_finite_differences(reference, load_robot):
    robot = load_robot("talos", True)
    model, data, frame = robot.model, robot.data, "gripper_left_joint"
    q, v, a = robot.states("frame fd", 1)[0]
    dv_dq, da_dq, da_dv, da_da = rd.frame_acceleration_derivatives(model, data, q, v, a, frame, reference)

    def step(qq):
        return np.concatenate([rd.frame_velocity(model, data, qq, v, frame, reference),
                               rd.frame_acceleration(model, data, qq, v, a, frame, reference)])

    by_q = finite_diff.manifold_difference(step, q, lambda qq, dq: rd.integrate(model, qq, dq), model.nv)
    by_v = finite_diff.central_difference(lambda vv: rd.frame_acceleration(model, data, q, vv, a, frame, reference),
                                          v)
    assert_close(dv_dq, by_q[:6], rtol=FINITE_DIFFERENCE_RTOL, what="dv/dq")
    assert_close(da_dq, by_q[6:], rtol=FINITE_DIFFERENCE_RTOL, what="da/dq")
    assert_close(da_dv, by_v, rtol=FINITE_DIFFERENCE_RTOL, what="da/dv")
    assert_close(da_da, rd.frame_jacobian(model, data, q, frame, reference), what="da/da = J")


@pytest.mark.parametrize("name,floating", [("talos", True), ("solo12", True), ("panda", False)])
def test_center_of_mass_matches_pinocchio(name, floating, load_robot):
    robot = load_robot(name, floating)
    model, data = robot.model, robot.data
    pm, pd = robot.bridge.model, robot.bridge.data
    for q, v, _ in robot.states("com"):
        qp = robot.bridge.q_to_pin(q)
        com, vcom = rd.center_of_mass(model, data, q, v)
        assert_close(com, pin.centerOfMass(pm, pd, qp, v), what="com")
        assert_close(vcom, pd.vcom[0], what="com velocity")
        assert_close(rd.center_of_mass(model, data, q), com, what="com without v")
        assert_close(rd.com_jacobian(model, data, q), pin.jacobianCenterOfMass(pm, pd, qp), what="com Jacobian")


def test_frames_refuse_bad_input(load_robot):
    robot = load_robot("solo12", True)
    model, data = robot.model, robot.data
    q, v, a = robot.states("frames bad", 1)[0]
    with pytest.raises(rd.InputError, match="no frame named"):
        rd.frame_jacobian(model, data, q, "NO_SUCH_FRAME")
    with pytest.raises(rd.InputError, match="reference"):
        rd.frame_velocity(model, data, q, v, "FL_FOOT", "body")
    with pytest.raises(rd.InputError, match="reference"):
        rd.frame_classical_acceleration(model, data, q, v, a, "FL_FOOT", "world")
    with pytest.raises(rd.InputError) as error:
        rd.frame_velocity(model, data, q, np.full(model.nv, np.nan), "FL_FOOT")
    assert error.value.argument == "v"
    with pytest.raises(rd.InputError) as error:
        rd.center_of_mass(model, data, q[:-1])
    assert error.value.argument == "q"
    # Lists are converted.
    assert_close(rd.frame_jacobian(model, data, list(q), "FL_FOOT"), rd.frame_jacobian(model, data, q, "FL_FOOT"))


def test_frame_fixed_to_the_universe_checks_its_state(load_robot):
    robot = load_robot("ur5", False)
    model, data = robot.model, robot.data
    q, v, a = robot.states("frames universe", 1)[0]
    frame = next(name for name in model.frame_names if model.frames[name][0] == 0)
    placement = model.frames[frame][1]
    assert not rd.frame_jacobian(model, data, q, frame).any()
    assert_close(frames._frame_data(data).pose, placement, what="pose of a frame on the universe")
    assert not rd.frame_acceleration(model, data, q, v, a, frame).any()
    bad = {"q": (np.full(model.nq, np.nan), v, a), "v": (q, v[:-1], a), "a": (q, v, np.r_[a[:-1], np.inf])}
    for name, (qq, vv, aa) in bad.items():
        with pytest.raises(rd.InputError) as error:
            rd.frame_acceleration(model, data, qq, vv, aa, frame)
        assert error.value.argument == name
    with pytest.raises(rd.InputError) as error:
        rd.frame_jacobian(model, data, q[:-1], frame)
    assert error.value.argument == "q"
