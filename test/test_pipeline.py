"""The dynamics pipeline (rbd_deriv.pipeline), without ROS: what the dynamics node and its service compute.

Oracles: Pinocchio on the same URDF for the bias torques, M^-1, M and the derivatives (1e-9, the suite's
policy); the library's own single calls for the composition (A, B and x+ at the input the pipeline chose),
and Pinocchio's ABA for x+'s velocity. Every refusal path is driven and must leave what was in use intact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.joint_state_map import JointStateError
from rbd_deriv.pipeline import (DERIVATIVES, DynamicsPipeline, OutputSelection, PipelineError, replace_robot,
                                warm_up)
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import bundled_urdf

pin_bridge = pytest.importorskip("rbd_deriv.testing.pinocchio_bridge")

ARM = bundled_urdf("rbd_arm7")
SECOND = 1_000_000_000


@pytest.fixture(scope="module")
def arm_text():
    return ARM.read_text()


@pytest.fixture(scope="module")
def arm(arm_text):
    return DynamicsPipeline(arm_text)


@pytest.fixture(scope="module")
def floating(arm_text):
    return DynamicsPipeline(arm_text, floating_base=True)


def random_state(model, rng):
    q = rd.random_configuration(model, rng)
    if model.has_floating_base:
        q[:3] = rng.uniform(-1.0, 1.0, 3)  # free-flyer position limits are infinite
    return q, rng.uniform(-1.0, 1.0, model.nv)


@pytest.mark.parametrize("which", ["arm", "floating"])
def test_outputs_match_pinocchio_and_the_library(which, request, arm_text):
    pipeline = request.getfixturevalue(which)
    model = pipeline.model
    bridge = pin_bridge.PinocchioBridge.for_model(model, arm_text)
    rng = np.random.default_rng(1)
    dt = 0.004
    for _ in range(3):
        q, v = random_state(model, rng)
        out = pipeline.outputs(q, v, OutputSelection(dt=dt))
        bias = bridge.rnea(q, v, np.zeros(model.nv))
        assert_close(out.bias, bias, what="RNEA(q, v, 0)")
        actuated = [model.idx_v[name] for name in model.actuated_joint_names]
        assert_close(out.torques, bias[actuated], what="bias torques of the actuated joints")
        assert_close(out.mass_matrix_inverse, bridge.minverse(q), what="M^-1")
        lin = out.linearization
        np.testing.assert_array_equal(lin["x"], np.concatenate((q, v)))
        np.testing.assert_array_equal(lin["u"], out.bias)
        assert lin["dt"] == dt
        data = model.create_data()
        A, B = rd.linearize(model, data, q, v, bias, dt)
        assert_close(lin["A"], A, what="A")
        assert_close(lin["B"], B, what="B")
        assert_close(lin["x_next"], data.x_next, what="x+")
        assert_close(lin["x_next"][model.nq:], v + dt * bridge.aba(q, v, bias), what="v+ against Pinocchio's ABA")
    assert len(pipeline.actuated_joint_names) == 7
    assert pipeline.velocity_names[:6] == (
        [f"root_joint_{axis}" for axis in ("vx", "vy", "vz", "wx", "wy", "wz")] if which == "floating"
        else list(model.joint_names[:6]))


def test_outputs_are_owned_by_the_result(arm):
    rng = np.random.default_rng(2)
    q1, v1 = random_state(arm.model, rng)
    first = arm.outputs(q1, v1, OutputSelection())
    kept = {"bias": first.bias.copy(), "minv": first.mass_matrix_inverse.copy(), "A": first.linearization["A"].copy()}
    q2, v2 = random_state(arm.model, rng)
    arm.outputs(q2, v2, OutputSelection())
    np.testing.assert_array_equal(first.bias, kept["bias"])
    np.testing.assert_array_equal(first.mass_matrix_inverse, kept["minv"])
    np.testing.assert_array_equal(first.linearization["A"], kept["A"])


def test_selection_and_measured_effort_input(arm):
    model = arm.model
    rng = np.random.default_rng(3)
    q, v = random_state(model, rng)
    effort = rng.uniform(-5.0, 5.0, model.nv)
    out = arm.outputs(q, v, OutputSelection(torques=False, mass_matrix_inverse=False, linearization_input="effort"),
                      effort=effort)
    assert out.bias is None and out.torques is None and out.mass_matrix_inverse is None
    np.testing.assert_array_equal(out.linearization["u"], effort)
    data = model.create_data()
    A, _ = rd.linearize(model, data, q, v, effort, 1e-3)
    assert_close(out.linearization["A"], A, what="A at the measured effort")
    with pytest.raises(rd.InputError, match="measured effort"):
        arm.outputs(q, v, OutputSelection(linearization_input="effort"))
    only_torques = arm.outputs(q, v, OutputSelection(mass_matrix_inverse=False, linearization=False))
    assert only_torques.linearization is None and only_torques.torques is not None


@pytest.mark.parametrize("fields, match", [
    (dict(linearization_input="measured"), "linearization_input"),
    (dict(dt=0.0), "dt must be > 0"),
    (dict(dt=math.nan), "dt must be > 0"),
])
def test_bad_selection_is_refused(fields, match):
    with pytest.raises(rd.InputError, match=match):
        OutputSelection(**fields)


def test_outputs_from_the_assembled_state(arm_text):
    pipeline = DynamicsPipeline(arm_text, max_state_age=0.5)
    model = pipeline.model
    names = list(model.joint_names)
    with pytest.raises(JointStateError) as caught:
        pipeline.outputs_from_state(OutputSelection())
    assert caught.value.reason == "incomplete"
    rng = np.random.default_rng(4)
    q, v = random_state(model, rng)
    pipeline.state.update(names, q, v, [], 10 * SECOND, 10 * SECOND)
    out = pipeline.outputs_from_state(OutputSelection())
    assert_close(out.linearization["x"], np.concatenate((q, v)), what="x from the joint states")
    with pytest.raises(JointStateError) as caught:
        pipeline.outputs_from_state(OutputSelection(linearization_input="effort"))
    assert caught.value.reason == "missing_effort"


def test_derivatives_match_pinocchio(arm, arm_text):
    model = arm.model
    bridge = pin_bridge.PinocchioBridge.for_model(model, arm_text)
    rng = np.random.default_rng(5)
    q, v = random_state(model, rng)
    a, tau = rng.uniform(-2.0, 2.0, model.nv), rng.uniform(-20.0, 20.0, model.nv)
    answer = arm.derivatives(q.tolist(), v.tolist(), a.tolist(), tau.tolist(), 0.01, DERIVATIVES)
    dtau_dq, dtau_dv, _ = bridge.rnea_derivatives(q, v, a)
    dddq_dq, dddq_dv, _ = bridge.aba_derivatives(q, v, tau)
    assert_close(answer["dtau_dq"], dtau_dq, what="dtau/dq")
    assert_close(answer["dtau_dv"], dtau_dv, what="dtau/dv")
    assert_close(answer["dddq_dq"], dddq_dq, what="dddq/dq")
    assert_close(answer["dddq_dv"], dddq_dv, what="dddq/dv")
    assert_close(answer["mass_matrix"], bridge.crba(q), what="M")
    assert_close(answer["mass_matrix_inverse"], bridge.minverse(q), what="M^-1")
    assert_close(answer["linearization"]["x_next"][model.nq:], v + 0.01 * bridge.aba(q, v, tau), what="v+")
    np.testing.assert_array_equal(answer["linearization"]["u"], tau)
    # Only what was asked, and what it needs: M alone takes no a, tau or dt.
    only_m = arm.derivatives(q, v, wanted=["mass_matrix"])
    assert list(only_m) == ["mass_matrix"]


@pytest.mark.parametrize("change, match", [
    (dict(q=[0.0] * 6), "q has 6 entries"),
    (dict(v=[0.0] * 9), "v has 9 entries"),
    (dict(tau=[]), "tau has 0 entries"),
    (dict(q=[math.nan] + [0.0] * 6), "NaN"),
    (dict(v=[0.0] * 6 + [math.inf]), "NaN or inf"),
    (dict(dt=0.0), "dt must be > 0"),
    (dict(dt=math.inf), "dt must be > 0"),
    (dict(wanted=[]), "nothing asked"),
    (dict(wanted=["jacobian"]), "unknown outputs"),
    (dict(wanted=["inverse_dynamics_derivatives"], a=[1.0]), "a has 1 entries"),
])
def test_bad_requests_are_refused(arm, change, match):
    request = dict(q=[0.0] * 7, v=[0.0] * 7, a=[0.0] * 7, tau=[0.0] * 7, dt=0.001,
                   wanted=["linearization", "forward_dynamics_derivatives"])
    request.update(change)
    with pytest.raises(PipelineError, match=match) as caught:
        arm.derivatives(**request)
    assert caught.value.reason == "bad_request"


def test_a_state_the_library_refuses_is_a_bad_request(floating):
    q = rd.neutral(floating.model)
    q[floating.model.idx_q[rd.FREE_FLYER_JOINT] + 6] = 3.0  # quaternion far from unit norm
    with pytest.raises(PipelineError, match="quaternion") as caught:
        floating.derivatives(q, np.zeros(floating.model.nv), wanted=["mass_matrix"])
    assert caught.value.reason == "bad_request"


def test_bad_descriptions_are_refused(arm_text):
    # Loads, but the moving body has no mass: M would be singular.
    massless = ("<robot name='m'><link name='base'/><link name='tip'/><joint name='j' type='revolute'>"
                "<parent link='base'/><child link='tip'/><axis xyz='0 0 1'/>"
                "<limit lower='-1' upper='1' effort='1' velocity='1'/></joint></robot>")
    for text, match in (("", "empty"), ("   \n", "empty"), ("<robot name='x'><link name='a'/><joint", "unusable"),
                        (massless, "unusable")):
        with pytest.raises(PipelineError, match=match) as caught:
            DynamicsPipeline(text)
        assert caught.value.reason == "bad_description"


def test_replacing_the_robot(arm_text):
    current = DynamicsPipeline(arm_text)
    names = list(current.model.joint_names)
    current.state.update(names, np.full(7, 0.1), np.zeros(7), [], SECOND)
    assert replace_robot(None, current, allow_change=False) is current

    # Same robot, new inertias: the joint states already received carry over.
    heavier = DynamicsPipeline(arm_text.replace('<mass value="', '<mass value="1', 1))
    assert replace_robot(current, heavier, allow_change=False) is heavier
    assert heavier.state is current.state and heavier.state.complete

    # Other joints: refused unless allowed.
    six_dof = DynamicsPipeline(arm_text.replace('<joint name="joint7" type="revolute">',
                                                '<joint name="joint7" type="fixed">'))
    with pytest.raises(PipelineError, match="allow_robot_change") as caught:
        replace_robot(current, six_dof, allow_change=False)
    assert caught.value.reason == "robot_changed"
    assert replace_robot(current, six_dof, allow_change=True) is six_dof
    assert not six_dof.state.complete


def test_a_fixed_base_joint_named_like_the_free_flyer_is_an_ordinary_joint(arm_text):
    renamed = DynamicsPipeline(arm_text.replace('"joint1"', f'"{rd.FREE_FLYER_JOINT}"'))
    assert rd.FREE_FLYER_JOINT in renamed.actuated_joint_names
    assert not renamed.state.floating_base
    names = list(renamed.model.joint_names)
    renamed.state.update(names, np.full(7, 0.2), np.zeros(7), [], SECOND)
    assert renamed.state.complete


def test_warm_up_runs_the_batched_calls_too(arm):
    assert warm_up(arm.model, batched=True) > 0.0
