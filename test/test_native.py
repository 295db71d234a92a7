"""Direct kernel calls (rbd_deriv.native and the C extension rbd_deriv._kernelcall).

Each public function calls its kernel through a C entry when the extension is built. These tests check that
the installed package has it, that a call through the C entry leaves exactly the same workspace and status as
the same call through numba's dispatcher, and that arguments of the wrong type are refused by the entry and
then converted by the public functions, as before.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv import native

configuration = importlib.import_module("rbd_deriv.configuration")
kinematics = importlib.import_module("rbd_deriv.kinematics")

# (module, stem, inputs): the kernel is <stem>_kernel, its C entry's callable <stem>_call; inputs names what
# follows (mi, mf, ws) for the model kernels, or the whole argument list for the configuration kernels.
ENTRIES = [
    ("kinematics", "_forward_kinematics", "q"),
    ("rnea", "_rnea", "q v a fext"),
    ("rnea", "_nle", "q v"),
    ("rnea", "_gravity", "q"),
    ("crba", "_crba", "q"),
    ("aba", "_aba", "q v a fext"),
    ("minverse", "_minverse", "q"),
    ("rnea_derivatives", "_rnea_derivatives", "q v a fext"),
    ("aba_derivatives", "_aba_derivatives", "q v a fext"),
    ("linearization", "_linearize", "q v a fext dt"),
    ("configuration", "_integrate", "mi q v out_q"),
    ("configuration", "_difference", "mi continuous q q1 out_v"),
    ("configuration", "_dintegrate", "mi q v out_vv out_vv"),
]


def _arguments(model, data, inputs, rng):
    q = rd.random_configuration(model, rng)
    values = {
        "q": q,
        "q1": rd.random_configuration(model, rng),
        "v": rng.standard_normal(model.nv),
        "a": rng.standard_normal(model.nv),
        "fext": rng.standard_normal((model.njoints, 6)),
        "dt": 0.01,
        "mi": model.mi,
        "continuous": model.continuous,
    }
    arguments = []
    for name in inputs.split():
        if name == "out_q":
            arguments.append(np.zeros(model.nq))
        elif name == "out_v":
            arguments.append(np.zeros(model.nv))
        elif name == "out_vv":
            arguments.append(np.zeros((model.nv, model.nv)))
        else:
            arguments.append(values[name])
    if inputs.split()[0] != "mi":
        arguments = [model.mi, model.mf, data.ws] + arguments
    return arguments


def _copies(arguments):
    return [a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a for a in arguments]


@pytest.mark.skipif(os.environ.get("RBD_DERIV_DISPATCHER", "") not in ("", "0"),
                    reason="RBD_DERIV_DISPATCHER is set: the dispatcher is asked for")
def test_the_package_calls_kernels_through_the_extension():
    """The installed package has the extension and uses it (CI would otherwise time the slow path)."""
    assert native.direct_calls()
    assert type(kinematics._forward_kinematics_call).__name__ == "Kernel"


@pytest.mark.parametrize("module_name, stem, inputs", ENTRIES, ids=[e[1].strip("_") for e in ENTRIES])
def test_direct_call_equals_dispatcher_call(robot, module_name, stem, inputs):
    """Same arguments through the C entry and through numba's dispatcher: the same status and the same
    bytes in every array written (the workspace included)."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use: both paths are the dispatcher")
    module = importlib.import_module(f"rbd_deriv.{module_name}")
    direct, dispatcher = getattr(module, f"{stem}_call"), getattr(module, f"{stem}_kernel")
    model = robot.model
    data = model.create_data()
    arguments = _arguments(model, data, inputs, robot.rng(stem))
    first = _copies(arguments)
    status_direct = direct(*first)
    second = _copies(arguments)
    status_dispatcher = dispatcher(*second)
    assert status_direct == status_dispatcher == 0
    for a, b in zip(first, second):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


def test_direct_call_returns_the_kernel_status(robot):
    """A status computed by the kernel (here a q of the wrong length) comes back unchanged."""
    model, data = robot.model, robot.model.create_data()
    short = np.zeros(model.nq - 1)
    status = kinematics._forward_kinematics_call(model.mi, model.mf, data.ws, short)
    assert status == kinematics._forward_kinematics_kernel(model.mi, model.mf, data.ws, short)
    assert status == kinematics.STATUS_SHAPE * kinematics.STATUS_SCALE


@pytest.fixture
def arm():
    model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    return model, model.create_data(), rd.random_configuration(model, np.random.default_rng(7))


def _refused(model, data, q):
    call = kinematics._forward_kinematics_call
    with pytest.raises(TypeError):
        call(model.mi, model.mf, data.ws, q)


@pytest.mark.parametrize("make", [
    lambda q: q.astype(np.int64),
    lambda q: q.astype(np.float32),
    lambda q: q.reshape(1, -1),
    lambda q: np.repeat(q, 2)[::2],
    lambda q: q.astype(">f8"),
    lambda q: list(q),
    lambda q: None,
], ids=["int64", "float32", "2-D", "strided", "big-endian", "list", "None"])
def test_entry_refuses_arguments_of_the_wrong_type(arm, make):
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, q = arm
    _refused(model, data, make(q))


@pytest.mark.parametrize("make", [
    lambda q: q.astype(np.int64),
    lambda q: q.astype(np.float32),
    lambda q: np.repeat(q, 2)[::2],
    lambda q: q.astype(">f8"),
    lambda q: list(q),
], ids=["int64", "float32", "strided", "big-endian", "list"])
def test_public_functions_convert_what_the_entry_refuses(arm, make):
    """What the entry refuses, the public functions convert: same results as with a plain float64 array."""
    model, data, q = arm
    q = np.round(q, 0)  # integer-valued, so that the int64 and float32 versions are the same numbers
    v = np.linspace(-1.0, 1.0, model.nv)
    expected_fk = rd.forward_kinematics(model, data, q).copy()
    expected_tau = rd.rnea(model, data, q, v, v).copy()
    expected_step = rd.integrate(model, q, v)
    expected_difference = rd.difference(model, q, expected_step)
    expected_A = rd.linearize(model, data, q, v, v, 0.01)[0].copy()
    np.testing.assert_array_equal(rd.forward_kinematics(model, data, make(q)), expected_fk)
    np.testing.assert_array_equal(rd.rnea(model, data, make(q), v, v), expected_tau)
    np.testing.assert_array_equal(rd.integrate(model, make(q), v), expected_step)
    np.testing.assert_array_equal(rd.difference(model, make(q), expected_step), expected_difference)
    np.testing.assert_array_equal(rd.linearize(model, data, make(q), v, v, 0.01)[0], expected_A)


def test_entry_accepts_read_only_inputs(arm):
    """A read-only input is read in place (numba's dispatcher refused it, and the wrappers copied it)."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, q = arm
    expected = rd.forward_kinematics(model, data, q).copy()
    frozen = q.copy()
    frozen.flags.writeable = False
    assert kinematics._forward_kinematics_call(model.mi, model.mf, data.ws, frozen) == 0
    np.testing.assert_array_equal(data.oMi, expected)


def test_entry_checks_its_argument_count_and_float_arguments(arm):
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, q = arm
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kinematics._forward_kinematics_call(model.mi, model.mf, data.ws)
    linearize_call = importlib.import_module("rbd_deriv.linearization")._linearize_call
    zero = np.zeros(model.nv)
    with pytest.raises(TypeError):
        linearize_call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, "0.01")
    assert linearize_call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, 1) == 0


def test_kernel_objects_refuse_bad_specs_and_addresses():
    if native.Kernel is None:
        pytest.skip("the extension is not built")
    address = kinematics._forward_kinematics_entry.address
    for spec in ("x1", "f4", "f", "i2f2f1f1" * 4):
        with pytest.raises(ValueError):
            native.Kernel(address, spec)
    with pytest.raises(ValueError):
        native.Kernel(0, "f1")


def test_dispatcher_can_be_asked_for(monkeypatch):
    """RBD_DERIV_DISPATCHER=1 turns direct calls off; entry() then hands back the numba kernel itself."""
    monkeypatch.setenv("RBD_DERIV_DISPATCHER", "1")
    assert not native.direct_calls()
    kernel = kinematics._forward_kinematics_kernel
    assert native.entry(kernel, kinematics._forward_kinematics_entry, "i2f2f1f1") is kernel
