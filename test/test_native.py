"""Direct kernel calls (rbd_deriv.core.calling and the C extension rbd_deriv._kernelcall).

Each public function calls its kernel through a C entry when the extension is built. These tests check that
the installed package has it, that a call through the C entry leaves exactly the same workspace and status as
the same call through numba's dispatcher, and that arguments of the wrong type are refused by the entry and
then converted by the public functions, as before.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv import native
from rbd_deriv.testing import assert_close

configuration = importlib.import_module("rbd_deriv.core.configuration")
kinematics = importlib.import_module("rbd_deriv.core.kinematics")

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
    ("configuration", "_integrate", "mi q v new_q"),
    ("configuration", "_difference", "mi continuous q q1 new_v"),
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
        if name in ("out_q", "new_q"):
            arguments.append(np.zeros(model.nq))
        elif name in ("out_v", "new_v"):
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
    if "new_q" in inputs:  # the entry makes that output and returns it; the dispatcher writes the one given
        new_at = inputs.split().index("new_q")
        first[new_at] = direct(*first[:new_at], *first[new_at + 1:])
        status_direct = 0
    elif "new_v" in inputs:  # likewise, of length nv, which the entry takes in its place
        new_at = inputs.split().index("new_v")
        first[new_at] = direct(*first[:new_at], model.nv, *first[new_at + 1:])
        status_direct = 0
    else:
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
    linearize_call = importlib.import_module("rbd_deriv.core.linearization")._linearize_call
    zero = np.zeros(model.nv)
    with pytest.raises(TypeError):
        linearize_call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, "0.01")
    assert linearize_call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, 1) == 0


def test_kernel_objects_refuse_bad_specs_and_addresses():
    if native.Kernel is None:
        pytest.skip("the extension is not built")
    address = kinematics._forward_kinematics_entry.address
    for spec in ("x1", "f4", "f", "F0", "I0", "i2f2F1f1" * 5):
        with pytest.raises(ValueError):
            native.Kernel(address, spec)
    with pytest.raises(ValueError):
        native.Kernel(0, "f1")


def test_dispatcher_can_be_asked_for():
    """RBD_DERIV_DISPATCHER=1 at import: the public functions run the numba kernels themselves."""
    code = ("import importlib, rbd_deriv.core.calling as n; k = importlib.import_module('rbd_deriv.core.kinematics'); "
            "print(n.direct_calls(), k._forward_kinematics_call is k._forward_kinematics_kernel)")
    env = dict(os.environ, RBD_DERIV_DISPATCHER="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_results_given_back_as_inputs_are_copied_first():
    """A result view of a Data (read-only, inside its workspace) given back as an input of a call on the same
    Data: the entry refuses it and the wrapper copies it, so the kernel does not overwrite what it reads."""
    model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"), floating_base=True)
    data = model.create_data()
    rng = np.random.default_rng(3)
    q = rd.random_configuration(model, rng)
    v, tau = rng.standard_normal(model.nv), rng.standard_normal(model.nv)
    rd.aba(model, data, q, v, tau)
    velocity = data.ddq.copy()
    expected = [x.copy() for x in rd.linearize(model, data, q, velocity, tau, 0.01)] + [data.x_next.copy()]
    rd.aba(model, data, q, v, tau)  # data.ddq holds `velocity` again
    got = list(rd.linearize(model, data, q, data.ddq, tau, 0.01)) + [data.x_next]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    if native.direct_calls():
        with pytest.raises(TypeError, match="read-only view"):
            importlib.import_module("rbd_deriv.core.linearization")._linearize_call(
                model.mi, model.mf, data.ws, q, data.ddq, tau, data._zero_fext, 0.01)


def test_entry_refuses_a_read_only_workspace(arm):
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, q = arm
    frozen = data.ws.copy()
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        kinematics._forward_kinematics_call(model.mi, model.mf, frozen, q)


def test_an_error_inside_a_kernel_is_not_reported_as_success(arm):
    """A kernel's internal guard (a workspace view out of bounds, here from a corrupted layout) raises; through
    the C entry it comes back as STATUS_INTERNAL, never as 0."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, q = arm
    from rbd_deriv.core.model import MI_OFFSETS, REGION_INDEX

    broken = model.mi.copy()
    broken[0, MI_OFFSETS + REGION_INDEX["oMi"]] = data.ws.shape[0]  # the placements' view would end past ws
    status = kinematics._forward_kinematics_call(broken, model.mf, data.ws, q)
    assert status == native.STATUS_INTERNAL
    with pytest.raises(RuntimeError, match="internally"):
        kinematics.raise_for_status(model, status)


# ---- batches over the extension's worker threads (native.parallel, used by rbd_deriv.core.batch) ----

batch = importlib.import_module("rbd_deriv.core.batch")


def _batch_arguments(model, count, threads, rng):
    """The arguments of batch._batch_call for rnea_derivatives at `count` random states."""
    Q = np.array([rd.random_configuration(model, rng) for _ in range(count)]).reshape(count, model.nq)
    V, A = rng.standard_normal((count, model.nv)), rng.standard_normal((count, model.nv))
    workspaces = np.zeros((threads, model.workspace_size))
    for ws in workspaces:
        rd.Data.initialize(model, ws)
    outs = [np.full((count, model.nv * model.nv), np.nan) for _ in range(3)]
    return [model.mi, model.mf, workspaces, Q, V, A, 0.0, batch.OP_RNEA_DERIVATIVES, *outs,
            np.full(count, -1, dtype=np.int64)]


def test_parallel_runs_every_item_once_on_any_number_of_threads(arm):
    """parallel(kernel, count, threads, ...) with 1 to 4 threads and 0 to 9 items: every state is done
    (status 0, results equal to the single-state function's), none twice, none left."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, data, _ = arm
    rng = np.random.default_rng(11)
    for count in (0, 1, 2, 9):
        for threads in (1, 2, 4):
            arguments = _batch_arguments(model, count, threads, rng)
            assert native.parallel(batch._batch_call, count, threads, *arguments) == 0
            Q, V, A, out1, out2, out3, status = (arguments[k] for k in (3, 4, 5, 8, 9, 10, 11))
            assert (status == 0).all()
            for k in range(count):
                expected = rd.rnea_derivatives(model, data, Q[k], V[k], A[k])
                for got, want in zip((out1[k], out2[k], out3[k]), expected):
                    np.testing.assert_array_equal(got, want.reshape(-1))
    assert 1 <= native.worker_count() <= 3  # started for threads = 4 (and kept), never more


def test_parallel_checks_its_arguments(arm):
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, _, _ = arm
    arguments = _batch_arguments(model, 3, 2, np.random.default_rng(12))
    with pytest.raises(TypeError):
        native.parallel(lambda *a: 0, 3, 2, *arguments)
    with pytest.raises(TypeError):
        native.parallel(batch._batch_call, 3)
    with pytest.raises(ValueError):
        native.parallel(batch._batch_call, -1, 2, *arguments)
    with pytest.raises(ValueError):
        native.parallel(batch._batch_call, 3, 0, *arguments)
    with pytest.raises(TypeError, match="argument 3"):
        native.parallel(batch._batch_call, 3, 2, *arguments[:3], arguments[3].tolist(), *arguments[4:])
    with pytest.raises(TypeError, match="argument 7"):
        native.parallel(batch._batch_call, 3, 2, *arguments[:7], 1.5, *arguments[8:])
    with pytest.raises(TypeError):
        native.parallel(batch._batch_call, 3, 2, *arguments[:-1])
    for bad in ((-1.0, 0, 0, 0, 0), (0, 0, 0, 0, 11.0), (0, 0, 0, 0)):
        with pytest.raises((ValueError, TypeError)):
            native.set_worker_wait(*bad)


def test_parallel_reports_a_kernel_that_cannot_run(arm):
    """Without a workspace for its slot the batch kernel cannot run: parallel returns STATUS_INTERNAL
    (on the calling thread alone and shared), never 0."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, _, _ = arm
    for threads in (1, 2):
        arguments = _batch_arguments(model, 4, threads, np.random.default_rng(13))
        arguments[2] = arguments[2][:0]
        assert native.parallel(batch._batch_call, 4, threads, *arguments) == native.STATUS_INTERNAL


def test_batches_after_fork_run_without_the_parents_workers():
    """A child forked after the parent started its workers has none of them: its batches run and give the
    parent's results (the extension forgets its workers in the child)."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    code = """
import os, sys, numpy as np, rbd_deriv as rd
from rbd_deriv import native
model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
rng = np.random.default_rng(5)
Q = np.array([rd.random_configuration(model, rng) for _ in range(24)])
V = rng.standard_normal((24, model.nv))
expected = rd.aba_derivatives_batch(model, Q, V, V)
pid = os.fork()
if pid == 0:
    got = rd.aba_derivatives_batch(model, Q, V, V)
    os._exit(0 if all(np.array_equal(a, b) for a, b in zip(got, expected)) else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0"


def test_dispatcher_batches_equal_the_extensions(tmp_path):
    """With RBD_DERIV_DISPATCHER=1 the batches run on numba (prange or the calling thread): the same results,
    to 1e-12 (the same kernels, compiled inside another function: the compiler may fuse other products)."""
    code = """
import sys, numpy as np, rbd_deriv as rd
model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"), floating_base=True)
rng = np.random.default_rng(6)
results = []
for count in (8, 200):
    Q = np.array([rd.random_configuration(model, rng) for _ in range(count)])
    V, U = rng.standard_normal((count, model.nv)), rng.standard_normal((count, model.nv))
    results += [*rd.aba_derivatives_batch(model, Q, V, U), *rd.linearize_batch(model, Q, V, U, 0.01)]
np.savez(sys.argv[1], *results)
"""
    results = []
    for dispatcher in ("0", "1"):
        env = dict(os.environ, RBD_DERIV_DISPATCHER=dispatcher)
        path = tmp_path / f"dispatcher{dispatcher}.npz"
        out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        with np.load(path) as arrays:
            results.append([arrays[key] for key in sorted(arrays.files, key=lambda name: int(name[4:]))])
    assert len(results[0]) == len(results[1]) == 12
    for extension, dispatcher in zip(*results):
        assert_close(extension, dispatcher, rtol=1e-12, what="batch through the dispatcher")


def test_an_entry_can_return_the_array_it_makes(arm):
    """Spec letter N<j>: the call makes a float64 array shaped like argument j and returns it (status 0), or
    returns the kernel's status and drops it. integrate's entry is one."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, _, q = arm
    call = configuration._integrate_call
    v = np.full(model.nv, 0.1)
    out = call(model.mi, q, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape and out.flags.writeable and out.flags.owndata
    np.testing.assert_array_equal(out, rd.integrate(model, q, v))
    assert not np.shares_memory(out, call(model.mi, q, v))
    status = call(model.mi, q[:-1].copy(), v)  # a q of the wrong length: the kernel's status comes back
    assert type(status) is int and status == kinematics.STATUS_SHAPE * kinematics.STATUS_SCALE
    with pytest.raises(TypeError, match="arguments"):
        call(model.mi, q, v, np.empty(model.nq))  # the output is not passed
    with pytest.raises(TypeError, match="argument 1"):
        call(model.mi, q.tolist(), v)
    with pytest.raises(TypeError, match="returns a new array"):
        native.parallel(call, 1, 1, model.mi, q, v)
    for spec in ("N0", "f1N1", "f1N0N0", "dN0", "f1N9", "f1N"):
        with pytest.raises(ValueError):
            native.Kernel(configuration._integrate_entry.address, spec)


def test_an_entry_can_make_an_array_of_a_given_length(arm):
    """N<j> with argument j an int: a new 1-D array of that length (difference's entry, of length nv)."""
    if not native.direct_calls():
        pytest.skip("the extension is not in use")
    model, _, q = arm
    call = configuration._difference_call
    q1 = rd.random_configuration(model, np.random.default_rng(14))
    out = call(model.mi, model.continuous, q, q1, model.nv)
    assert isinstance(out, np.ndarray) and out.shape == (model.nv,)
    np.testing.assert_array_equal(out, rd.difference(model, q, q1))
    with pytest.raises(ValueError, match="negative length"):
        call(model.mi, model.continuous, q, q1, -1)
    with pytest.raises(TypeError, match="argument 4"):
        call(model.mi, model.continuous, q, q1, float(model.nv))
