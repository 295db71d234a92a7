"""Bad inputs to the algorithms: each is refused with an InputError naming the argument,
and the Data workspace is left exactly as it was (nothing half-written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError, RbdDerivError
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

# name -> the state arguments after (model, data), in signature order.
ALGORITHMS = {
    "rnea": ("q", "v", "a", "fext"),
    "aba": ("q", "v", "tau", "fext"),
    "crba": ("q",),
    "minverse": ("q",),
    "nonlinear_effects": ("q", "v"),
    "gravity_torques": ("q",),
    "forward_kinematics": ("q",),
    "rnea_derivatives": ("q", "v", "a", "fext"),
    "aba_derivatives": ("q", "v", "tau", "fext"),
    "linearize": ("q", "v", "tau", "dt"),
}


@pytest.fixture(scope="module")
def floating():
    """A floating-base robot, so that q holds a quaternion."""
    return rd.load_urdf(EXAMPLE_ROBOTS["solo12"], floating_base=True)


def _good_arguments(model, rng):
    """Valid values of every argument name of ALGORITHMS."""
    values = {
        "q": rd.random_configuration(model, rng),
        "v": rng.uniform(-1, 1, model.nv),
        "a": rng.uniform(-1, 1, model.nv),
        "tau": rng.uniform(-1, 1, model.nv),
        "fext": rng.uniform(-1, 1, (model.njoints, 6)),
        "dt": 0.01,
    }
    return values


def _call(model, data, name, values):
    arguments = [values[argument] for argument in ALGORITHMS[name]]
    return getattr(rd, name)(model, data, *arguments)


def _warm_data(model, rng, name):
    """A workspace holding the results of a successful call of ``name`` (and of RNEA and ABA),
    so that 'untouched' is a meaningful check."""
    data = model.create_data()
    values = _good_arguments(model, rng)
    for algorithm in dict.fromkeys(("rnea", "aba", name)):
        _call(model, data, algorithm, values)
    return data


def _bad_variants(model, argument):
    """(label, bad value) pairs for one argument."""
    if argument == "dt":
        return [("nan", np.nan), ("inf", np.inf), ("negative", -0.01), ("zero", 0.0)]
    size = {"q": model.nq, "v": model.nv, "a": model.nv, "tau": model.nv}.get(argument)
    if argument == "fext":
        good = np.zeros((model.njoints, 6))
        short = np.zeros((model.njoints - 1, 6))
        flat = np.zeros(model.njoints * 6)
    else:
        good = rd.neutral(model) if argument == "q" else np.zeros(size)
        short = good[:-1].copy()
        flat = np.tile(good, (2, 1))
    nan, inf = good.copy(), good.copy()
    nan.flat[0] = np.nan
    inf.flat[-1] = -np.inf
    return [("too short", short), ("wrong ndim", flat), ("nan", nan), ("inf", inf), ("not numbers", "abc")]


CASES = [
    pytest.param(name, argument, label, id=f"{name}-{argument}-{label}")
    for name, arguments in ALGORITHMS.items()
    for argument in arguments
    for label in (("nan", "inf", "negative", "zero") if argument == "dt" else
                  ("too short", "wrong ndim", "nan", "inf", "not numbers"))
]


@pytest.mark.parametrize("name, argument, label", CASES)
def test_bad_argument_is_refused_and_data_untouched(floating, name, argument, label):
    model = floating
    rng = np.random.default_rng(0)
    data = _warm_data(model, rng, name)
    values = _good_arguments(model, rng)
    values[argument] = dict(_bad_variants(model, argument))[label]
    before = data.ws.copy()
    with pytest.raises(InputError) as info:
        _call(model, data, name, values)
    assert info.value.argument == argument
    assert argument in str(info.value)
    assert np.array_equal(data.ws, before, equal_nan=True), "a refused call wrote into data"


@pytest.mark.parametrize("name", [n for n, arguments in ALGORITHMS.items() if "q" in arguments])
def test_non_unit_quaternion_is_refused(floating, name):
    model = floating
    rng = np.random.default_rng(1)
    data = _warm_data(model, rng, name)
    values = _good_arguments(model, rng)
    values["q"] = values["q"].copy()
    values["q"][3:7] *= 1.01
    before = data.ws.copy()
    with pytest.raises(InputError, match="root_joint") as info:
        _call(model, data, name, values)
    assert info.value.argument == "q"
    assert np.array_equal(data.ws, before, equal_nan=True)


@pytest.mark.parametrize("name", ["rnea", "aba", "crba", "rnea_derivatives", "linearize"])
def test_nearly_unit_quaternion_is_normalized(floating, name):
    model = floating
    rng = np.random.default_rng(2)
    values = _good_arguments(model, rng)
    exact = _call(model, model.create_data(), name, values)
    exact = [x.copy() for x in exact] if isinstance(exact, tuple) else exact.copy()
    values["q"] = values["q"].copy()
    values["q"][3:7] *= 1 + 5e-7
    slightly_off = _call(model, model.create_data(), name, values)
    if not isinstance(slightly_off, tuple):
        slightly_off, exact = (slightly_off,), (exact,)
    for ours, reference in zip(slightly_off, exact):
        assert_close(ours, reference)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_results_cannot_be_written(floating, name):
    """Results are read-only views into data: writing into one raises instead of corrupting data."""
    model = floating
    data = model.create_data()
    results = _call(model, data, name, _good_arguments(model, np.random.default_rng(6)))
    for result in results if isinstance(results, tuple) else (results,):
        assert not result.flags.writeable
        with pytest.raises(ValueError):
            result[..., 0] = 1.0


def test_configuration_functions_refuse_bad_inputs(floating):
    model = floating
    q = rd.neutral(model)
    v = np.zeros(model.nv)
    for call, argument in (
        (lambda: rd.integrate(model, q[:-1], v), "q"),
        (lambda: rd.integrate(model, q, np.full(model.nv, np.nan)), "v"),
        (lambda: rd.difference(model, q, q[:-1]), "q1"),
        (lambda: rd.difference(model, np.full(model.nq, np.inf), q), "q0"),
        (lambda: rd.dintegrate_dq(model, q, v[:-1]), "v"),
        (lambda: rd.dintegrate_dv(model, q * 2.0, v), "q"),
        (lambda: rd.random_configuration(model, 42), "rng"),
    ):
        with pytest.raises(InputError) as info:
            call()
        assert info.value.argument == argument


def test_unknown_frame_is_refused(floating):
    model = floating
    data = model.create_data()
    rd.forward_kinematics(model, data, rd.neutral(model))
    with pytest.raises(InputError, match="no_such_frame"):
        rd.frame_placement(model, data, "no_such_frame")


FOREIGN_ALGORITHMS = ["rnea", "aba", "crba", "rnea_derivatives", "aba_derivatives", "linearize"]


def _foreign_data_outcome(model, foreign, name: str) -> dict:
    """Call ``name`` on ``model`` with the workspace ``foreign`` of another robot; report what happened."""
    before = foreign.ws.copy()
    try:
        _call(model, foreign, name, _good_arguments(model, np.random.default_rng(5)))
        outcome = {"error": None}
    except InputError as error:
        outcome = {"error": "InputError", "argument": error.argument}
    except Exception as error:  # reported, not raised: the test turns it into a failure
        outcome = {"error": f"{type(error).__name__}: {error}"}
    outcome["untouched"] = bool(np.array_equal(foreign.ws, before, equal_nan=True))
    return outcome


def _check_outcome(outcome: dict, what: str) -> None:
    assert outcome["error"] == "InputError", f"{what}: {outcome}"
    assert outcome["argument"] == "data", f"{what}: {outcome}"
    assert outcome["untouched"], f"{what}: the foreign workspace was written"


@pytest.mark.parametrize("name", FOREIGN_ALGORITHMS)
def test_larger_workspace_of_another_model_is_refused(floating, name):
    foreign = rd.load_urdf(EXAMPLE_ROBOTS["talos"], floating_base=True).create_data()
    _check_outcome(_foreign_data_outcome(floating, foreign, name), f"{name} with talos's workspace")


@pytest.fixture(scope="module")
def smaller_workspace_outcomes() -> dict:
    """Outcome of each algorithm on solo12 given ur5's (smaller) workspace.

    Computed in child processes: an unchecked workspace lets the compiled kernels
    write outside it, which can kill the interpreter. A child that dies marks the
    algorithm it was running as crashed, and a new child goes on with the rest.
    """
    outcomes: dict = {}
    pending = list(FOREIGN_ALGORITHMS)
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [_project_root(), os.environ.get("PYTHONPATH")]))
    while pending:
        child = subprocess.run([sys.executable, __file__, *pending], capture_output=True, text=True,
                               timeout=600, env=environment)
        for line in child.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                outcomes[record.pop("name")] = record
        pending = [name for name in pending if name not in outcomes]
        if pending:
            if child.returncode == 0:
                raise RuntimeError(f"child process skipped {pending}: {child.stderr[-2000:]}")
            outcomes[pending.pop(0)] = {"error": f"process died (return code {child.returncode})"}
    return outcomes


@pytest.mark.parametrize("name", FOREIGN_ALGORITHMS)
def test_smaller_workspace_of_another_model_is_refused(smaller_workspace_outcomes, name):
    _check_outcome(smaller_workspace_outcomes[name], f"{name} with ur5's workspace")


def _project_root() -> str:
    return str(Path(__file__).resolve().parents[1])


def _child_main(names) -> None:
    model = rd.load_urdf(EXAMPLE_ROBOTS["solo12"], floating_base=True)
    foreign = rd.load_urdf(EXAMPLE_ROBOTS["ur5"]).create_data()
    for name in names:
        print(json.dumps(dict(_foreign_data_outcome(model, foreign, name), name=name)), flush=True)


@pytest.mark.parametrize("name", ["rnea_batch", "aba_batch", "rnea_derivatives_batch", "aba_derivatives_batch"])
def test_batch_shapes_are_checked(floating, name):
    model = floating
    rng = np.random.default_rng(3)
    Q = np.array([rd.random_configuration(model, rng) for _ in range(4)])
    V = rng.uniform(-1, 1, (4, model.nv))
    function = getattr(rd, name)
    for bad_q, bad_v, argument in ((Q[:3], V, None), (Q[:, :-1], V, "Q"), (Q, V[:, :-1], "V"), (Q[0], V, "Q")):
        with pytest.raises(InputError) as info:
            function(model, bad_q, bad_v, V)
        if argument is not None:
            assert info.value.argument == argument
    bad = V.copy()
    bad[2, 1] = np.nan
    with pytest.raises(InputError):
        function(model, Q, V, bad)
    quaternion_off = Q.copy()
    quaternion_off[1, 3:7] *= 1.1
    with pytest.raises(InputError, match="root_joint"):
        function(model, quaternion_off, V, V)


def test_linearize_batch_checks_dt(floating):
    model = floating
    rng = np.random.default_rng(4)
    Q = np.array([rd.random_configuration(model, rng) for _ in range(2)])
    V = np.zeros((2, model.nv))
    with pytest.raises(InputError) as info:
        rd.linearize_batch(model, Q, V, V, np.nan)
    assert info.value.argument == "dt"


def test_every_error_is_an_rbd_deriv_error():
    for error in (rd.InputError, rd.ModelError, rd.URDFError):
        assert issubclass(error, RbdDerivError)
    assert issubclass(rd.InputError, ValueError)


if __name__ == "__main__":
    # Child process of smaller_workspace_outcomes.
    _child_main(sys.argv[1:])


def test_difference_names_q1_for_its_bad_quaternion(floating):
    q0 = rd.neutral(floating)
    q1 = rd.neutral(floating)
    iq = floating.idx_q["root_joint"]
    q1[iq + 3 : iq + 7] = 0.0
    with pytest.raises(InputError, match=r"^q1: the quaternion of joint 'root_joint'") as info:
        rd.difference(floating, q0, q1)
    assert info.value.argument == "q1"
    with pytest.raises(InputError, match=r"^q0: the quaternion of joint 'root_joint'"):
        rd.difference(floating, q1, q0)


def test_complex_input_is_refused(floating):
    data = floating.create_data()
    q = rd.neutral(floating).astype(complex)
    zero = np.zeros(floating.nv)
    with pytest.raises(InputError, match="complex") as info:
        rd.rnea(floating, data, q, zero, zero)
    assert info.value.argument == "q"


@pytest.mark.parametrize("function", ["rnea", "crba", "forward_kinematics"])
def test_missing_data_is_refused(floating, function):
    q, zero = rd.neutral(floating), np.zeros(floating.nv)
    arguments = {"rnea": (q, zero, zero), "crba": (q,), "forward_kinematics": (q,)}[function]
    with pytest.raises(InputError, match="data") as info:
        getattr(rd, function)(floating, None, *arguments)
    assert info.value.argument == "data"


@pytest.mark.parametrize("function", ["integrate", "difference", "dintegrate_dq", "rnea_batch", "linearize_batch"])
def test_missing_model_is_refused(floating, function):
    q, v = rd.neutral(floating), np.zeros(floating.nv)
    arguments = {"integrate": (q, v), "difference": (q, q), "dintegrate_dq": (q, v),
                 "rnea_batch": (q[None], v[None], v[None]), "linearize_batch": (q[None], v[None], v[None], 0.01)}
    with pytest.raises(InputError, match="model") as info:
        getattr(rd, function)(None, *arguments[function])
    assert info.value.argument == "model"


@pytest.mark.parametrize("function", ["rnea", "integrate"])
def test_ragged_input_is_refused(floating, function):
    """A nested list that is not an array (rows of different lengths) is an InputError, not numpy's."""
    data, zero = floating.create_data(), np.zeros(floating.nv)
    ragged = [[0.0, 1.0], [2.0]]
    with pytest.raises(InputError, match="array of numbers") as info:
        if function == "rnea":
            rd.rnea(floating, data, ragged, zero, zero)
        else:
            rd.integrate(floating, ragged, zero)
    assert info.value.argument == "q"
