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
from rbd_deriv.joint_state_map import PLAUSIBLE, JointStateError
from rbd_deriv.pipeline import (DERIVATIVES, DynamicsPipeline, OutputSelection, PipelineError, Throughput,
                                read_description, replace_robot, warm_up)
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


def test_outputs_live_in_the_buffer_until_the_next_call(arm):
    model = arm.model
    data = model.create_data()
    rng = np.random.default_rng(2)
    q1, v1 = random_state(model, rng)
    first = arm.outputs(q1, v1, OutputSelection())
    kept = first.mass_matrix_inverse.copy()
    assert_close(kept, rd.minverse(model, data, q1), what="M^-1 at the first state")
    q2, v2 = random_state(model, rng)
    second = arm.outputs(q2, v2, OutputSelection())
    # No allocation per call: the second call overwrote the first one's arrays.
    assert np.shares_memory(first.mass_matrix_inverse, second.mass_matrix_inverse)
    assert_close(first.mass_matrix_inverse, rd.minverse(model, data, q2), what="M^-1 at the second state")
    assert not np.allclose(kept, second.mass_matrix_inverse)


def test_non_finite_outputs_are_refused_with_their_input(arm):
    """The last check before anything leaves: finite inputs whose results overflow (the joint-state map
    refuses such magnitudes; outputs() itself only needs finite ones) give no output at all."""
    model = arm.model
    rng = np.random.default_rng(21)
    q, v = random_state(model, rng)
    huge = v.copy()
    huge[2] = 1e200  # its square overflows to inf, inf - inf is NaN
    with pytest.raises(PipelineError, match="not finite") as caught:
        arm.outputs(q, huge, OutputSelection(linearization=False))
    assert caught.value.reason == "non_finite_output" and "1e+200" in str(caught.value)
    # With the linearization, the library may refuse the non-finite bias as its input first: refused either
    # way, quoting the input.
    with pytest.raises(PipelineError) as caught:
        arm.outputs(q, huge, OutputSelection())
    assert caught.value.reason in ("unusable_state", "non_finite_output") and "1e+200" in str(caught.value)
    effort = np.full(model.nv, 1e308)
    with pytest.raises(PipelineError) as caught:
        arm.outputs(q, v, OutputSelection(torques=False, mass_matrix_inverse=False, linearization_input="effort"),
                    effort=effort)
    assert caught.value.reason in ("unusable_state", "non_finite_output") and "1e+308" in str(caught.value)
    # Good input is served afterwards, every output right (nothing left over from the refused ones).
    out = arm.outputs(q, v, OutputSelection(mass_matrix_inverse=False))
    data = model.create_data()
    bias = rd.rnea(model, data, q, v, np.zeros(model.nv)).copy()
    assert_close(out.bias, bias, what="bias after a refusal")
    A, B = rd.linearize(model, data, q, v, bias, 1e-3)
    assert_close(out.linearization["A"], A, what="A after a refusal")


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
    (dict(dt=0.0), "dt must be in"),
    (dict(dt=math.nan), "dt must be in"),
    (dict(dt=1e300), "dt must be in"),
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
    (dict(dt=0.0), "dt must be in"),
    (dict(dt=math.inf), "dt must be in"),
    (dict(dt=1e300), "dt must be in"),
    (dict(v=[0.0] * 6 + [1e200]), "beyond any physical velocity"),
    (dict(q=[1e300] + [0.0] * 6), "beyond any physical position"),
    (dict(tau=[1e308] * 7), "beyond any physical effort"),
    (dict(wanted=["inverse_dynamics_derivatives"], a=[1e308] * 7), "beyond any physical acceleration"),
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


def test_non_finite_derivatives_are_never_answered(arm, monkeypatch):
    """The last check of an answer, reached by lifting the magnitude bounds that normally refuse such input."""
    monkeypatch.setitem(PLAUSIBLE, "velocity", math.inf)
    with pytest.raises(PipelineError, match="not finite") as caught:
        arm.derivatives([0.0] * 7, [1e200] * 7, tau=[0.0] * 7, dt=1e-3, wanted=["linearization", "mass_matrix"])
    assert caught.value.reason == "non_finite_output" and "1e+200" in str(caught.value)


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
                        (massless, "unusable"), (str(ARM), "not URDF XML"), ("robot.urdf", "not URDF XML")):
        with pytest.raises(PipelineError, match=match) as caught:
            DynamicsPipeline(text)
        assert caught.value.reason == "bad_description"


def test_the_description_the_parameters_name(arm_text, tmp_path):
    assert read_description("<robot name='x'/>", str(ARM)) == "<robot name='x'/>"  # the XML comes first
    assert read_description("", str(ARM)) == arm_text
    assert read_description("", "") == ""  # none yet: the node waits for the topic
    with pytest.raises(PipelineError, match="cannot read urdf_path") as caught:
        read_description("", str(tmp_path / "missing.urdf"))
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


def test_a_urdf_joint_named_like_the_free_flyer_is_refused_with_floating_base(arm_text):
    renamed = arm_text.replace('"joint1"', f'"{rd.FREE_FLYER_JOINT}"')
    with pytest.raises(PipelineError, match="free flyer that floating_base adds") as caught:
        DynamicsPipeline(renamed, floating_base=True)
    assert caught.value.reason == "bad_description"


def test_the_parser_refuses_a_urdf_joint_named_like_the_free_flyer(arm_text):
    renamed = arm_text.replace('"joint1"', f'"{rd.FREE_FLYER_JOINT}"')
    with pytest.raises(rd.URDFError, match=rd.FREE_FLYER_JOINT):
        rd.load_urdf(renamed, floating_base=True)


def test_selection_from_the_node_parameters():
    p = {"publish_torques": False, "publish_mass_matrix_inverse": True, "publish_linearization": True,
         "linearization_input": "effort", "dt": 0.004}
    assert OutputSelection.from_parameters(p) == OutputSelection(torques=False, linearization_input="effort", dt=0.004)
    with pytest.raises(rd.InputError, match="dt must be in"):
        OutputSelection.from_parameters({**p, "dt": -1.0})


def test_throughput_counts_periods_and_totals():
    throughput = Throughput()
    throughput.took()
    throughput.took(3)
    for compute_time in (0.001, 0.002, 0.003):
        throughput.sent(compute_time, compute_time + 0.010)
    first = throughput.report(2.0)
    assert first["input_rate_hz"] == 2.0 and first["output_rate_hz"] == 1.5
    assert math.isclose(first["compute_time_ms_p50"], 2.0) and math.isclose(first["compute_time_ms_max"], 3.0)
    assert math.isclose(first["latency_ms_p50"], 12.0) and math.isclose(first["latency_ms_max"], 13.0)
    assert (first["inputs_total"], first["outputs_total"]) == (4, 3)
    throughput.took()
    second = throughput.report(1.0)  # a new period: rates of its own, no samples, totals carried on
    assert second["input_rate_hz"] == 1.0 and second["output_rate_hz"] == 0.0
    assert "compute_time_ms_p50" not in second and (second["inputs_total"], second["outputs_total"]) == (5, 3)


def test_warm_up_runs_the_batched_calls_too(arm):
    assert warm_up(arm.model, batched=True) > 0.0


# ------------------------------------------------------------------------------------------- contacts
SOLO_FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


@pytest.fixture(scope="module")
def solo_text():
    from rbd_deriv.testing.robots import example_robot_urdf
    return example_robot_urdf("solo12").read_text()


@pytest.mark.parametrize("frames, kinds", [(SOLO_FEET, ()), (("FL_FOOT", "HR_FOOT"), ("frame", "point"))])
def test_contact_linearization_matches_pinocchio_and_the_library(solo_text, frames, kinds):
    from rbd_deriv.testing.pinocchio_contact import PinocchioContacts
    pipeline = DynamicsPipeline(solo_text, floating_base=True, contact_frames=frames, contact_kinds=kinds)
    model = pipeline.model
    assert pipeline.contact_frames == frames
    assert pipeline.contact_kinds == (tuple(kinds) or ("point",) * len(frames))
    reference = PinocchioContacts(pin_bridge.PinocchioBridge.for_model(model, solo_text), pipeline.contacts)
    rng = np.random.default_rng(21)
    dt = 0.002
    for _ in range(2):
        q, v = random_state(model, rng)
        effort = rng.uniform(-2.0, 2.0, model.nv)
        lin = pipeline.outputs(q, v, OutputSelection(dt=dt, linearization_input="effort"), effort).linearization
        ddq, forces = reference.dynamics(q, v, effort)
        assert_close(lin["x_next"][model.nq:], v + dt * ddq, what="v+ against Pinocchio's constraintDynamics")
        assert_close(lin["contact_forces"], forces, what="contact forces against Pinocchio's lambda_c")
        data = model.create_data()
        contacts = [rd.Contact(model, f, k) for f, k in zip(frames, pipeline.contact_kinds)]
        A, B = rd.linearize(model, data, q, v, effort, dt, contacts=contacts)
        assert_close(lin["A"], A, what="A")
        assert_close(lin["B"], B, what="B")
        assert list(lin["contact_frames"]) == list(frames)
        assert list(lin["contact_kinds"]) == list(pipeline.contact_kinds)
    # The free tree again: no forces, ABA's step.
    pipeline.set_contacts(())
    lin = pipeline.outputs(q, v, OutputSelection(dt=dt, linearization_input="effort"), effort).linearization
    assert lin["contact_forces"].shape == (0,) and list(lin["contact_frames"]) == []
    assert_close(lin["x_next"][model.nq:], v + dt * rd.aba(model, model.create_data(), q, v, effort), what="v+")


@pytest.mark.parametrize("frames, kinds, match", [
    (("FL_FOOT", "NO_SUCH_FOOT"), (), "no frame named 'NO_SUCH_FOOT'"),
    (("FL_FOOT",), ("point", "point"), "1 contact frames but 2 contact kinds"),
    (("FL_FOOT",), ("edge",), "kind"),
    (("FL_FOOT", "FL_FOOT"), (), "redundant contacts"),
])
def test_bad_contact_sets_are_refused_and_the_current_set_stays(solo_text, frames, kinds, match):
    pipeline = DynamicsPipeline(solo_text, floating_base=True, contact_frames=SOLO_FEET[:2])
    with pytest.raises(PipelineError, match=match) as caught:
        pipeline.set_contacts(frames, kinds)
    assert caught.value.reason == "bad_contacts"
    assert pipeline.contact_frames == SOLO_FEET[:2]
    with pytest.raises(PipelineError, match=match):
        DynamicsPipeline(solo_text, floating_base=True, contact_frames=frames, contact_kinds=kinds)
    with pytest.raises(PipelineError, match=match) as caught:
        pipeline.derivatives(rd.neutral(pipeline.model), np.zeros(18), wanted=["mass_matrix"], contact_frames=frames,
                             contact_kinds=kinds)
    assert caught.value.reason == "bad_request"


def test_derivatives_under_a_contact_set(solo_text):
    pipeline = DynamicsPipeline(solo_text, floating_base=True)
    model = pipeline.model
    rng = np.random.default_rng(22)
    q, v = random_state(model, rng)
    tau = rng.uniform(-2.0, 2.0, model.nv)
    answer = pipeline.derivatives(q, v, tau=tau, dt=0.01, wanted=["forward_dynamics_derivatives", "linearization"],
                                  contact_frames=SOLO_FEET[1:])
    contacts = [rd.Contact(model, f) for f in SOLO_FEET[1:]]
    data = model.create_data()
    dddq_dq, dddq_dv = rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau)[:2]
    assert_close(answer["dddq_dq"], dddq_dq, what="constrained dddq/dq")
    assert_close(answer["dddq_dv"], dddq_dv, what="constrained dddq/dv")
    A, B = rd.linearize(model, data, q, v, tau, 0.01, contacts=contacts)
    assert_close(answer["linearization"]["A"], A, what="constrained A")
    assert_close(answer["linearization"]["contact_forces"], rd.contact_forces(model, data, contacts), what="forces")
    assert answer["linearization"]["contact_frames"] == list(SOLO_FEET[1:])
    # The request's set is the request's own: the pipeline's set is untouched, and no set is the free tree.
    assert pipeline.contact_frames == ()
    free = pipeline.derivatives(q, v, tau=tau, wanted=["forward_dynamics_derivatives"])
    assert_close(free["dddq_dq"], rd.aba_derivatives(model, data, q, v, tau)[0], what="free dddq/dq")


def test_a_contact_on_a_frame_fixed_to_the_universe_is_refused(arm_text):
    with pytest.raises(PipelineError, match="fixed to the universe") as caught:
        DynamicsPipeline(arm_text, contact_frames=["base_link"])
    assert caught.value.reason == "bad_contacts"
