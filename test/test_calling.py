"""The kernel calling convention (rbd_deriv.core.calling) and the C extension rbd_deriv._kernelcall.

Every registered kernel is called through its C entry when the extension is built. These tests check that the
installed package has it; that a call through the C entry leaves exactly the same workspace, outputs and status
as the same call through numba's dispatcher; that arguments of the wrong type are refused by the entry and then
converted by the public functions; the spec grammar and its refusals; batches over the extension's threads;
statuses and the exceptions they map to; and that the entries made from one template are cached by numba like
functions written in their kernels' modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.core import calling, configuration, contact, kinematics, linearization, rnea_derivatives
from rbd_deriv.core.layout import MI_OFFSETS, REGION_INDEX, region_shape
from rbd_deriv.testing import assert_close

needs_extension = pytest.mark.skipif(not calling.DIRECT_CALLS, reason="the extension is not in use")

# Every kernel the package registers (the lazy ones are compiled by the first test that calls them).
REGISTERED = sorted(calling.REGISTRY.values(), key=lambda r: r.name)


def _values(model, data, rng):
    q = rd.random_configuration(model, rng)
    return {
        "mi": model.mi, "mf": model.mf, "data": data.ws, "continuous": model.continuous, "nv": model.nv,
        "q": q, "q0": q, "q1": rd.random_configuration(model, rng),
        "v": rng.standard_normal(model.nv), "a": rng.standard_normal(model.nv),
        "tau": rng.standard_normal(model.nv), "fext": rng.standard_normal((model.njoints, 6)), "dt": 0.01,
        **_contact_values(model),
    }


def _contact_values(model):
    """The arguments of the contact and frame kernels: a point contact on the last frame of the last body (a
    joint's own origin may not move along three directions: redundant rows)."""
    point = rd.Contact(model, [f for f in model.frame_names if model.frames[f][0] == model.njoints - 1][-1])
    return {"ci": point._row_i[None, :].copy(), "cf": point._row_f[None, :].copy(), "e": 0.2,
            "X": point._row_f[:12].copy(), "joint": point.joint, "level": 3,
            "mode": contact.MODE_LINEARIZE_FORCES, "cws": np.zeros(contact.workspace_size(model.nv, 6))}


def _output_shape(name, model):
    """The shape of an output: its Data region, or for the contact and frame kernels' own outputs, that of a
    single point contact (m = 3)."""
    nv, m = model.nv, 3
    shapes = {"forces": (m,), "dforces_dx": (m, 2 * nv), "dforces_du": (m, nv), "impulses": (m,), "v_plus": (nv,),
              "dforces": (3, m, nv), "dddq_dtau": (nv, nv), "dv_plus_dq": (nv, nv), "dv_plus_dv": (nv, nv),
              "dimpulses_dq": (m, nv), "dimpulses_dv": (m, nv), "pose": (4, 4), "motion": (3, 6),
              "derivs": (4, 6, nv), "com": (3,), "vcom": (3,), "Jcom": (3, nv)}
    if name in shapes:
        return shapes[name]
    return region_shape(name, model.njoints, model.nv, model.nq)


def _arguments(registered, model, data, rng):
    """Valid arguments for a registered kernel, by the names of its spec; outputs zeroed, the new array
    (N) left out."""
    values = _values(model, data, rng)
    arguments = []
    for argument in registered.arguments:
        if argument.letter in "IF":
            arguments.append(np.zeros(_output_shape(argument.name, model)))
        elif argument.letter != "N":
            arguments.append(values[argument.name])
    return arguments


def _copies(arguments):
    return [a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a for a in arguments]


@pytest.mark.skipif(os.environ.get("RBD_DERIV_DISPATCHER", "") not in ("", "0"),
                    reason="RBD_DERIV_DISPATCHER is set: the dispatcher is asked for")
def test_the_package_calls_kernels_through_the_extension():
    """The installed package has the extension and uses it (CI would otherwise time the slow path)."""
    assert calling.DIRECT_CALLS
    assert type(calling.REGISTRY["crba._crba_kernel"].call).__name__ == "Kernel"


@needs_extension
@pytest.mark.parametrize("registered", REGISTERED, ids=[r.name for r in REGISTERED])
def test_direct_call_equals_dispatcher_call(small_robot, registered):
    """Same arguments through the C entry and through numba's dispatcher: the same status and the same values
    in every array written (workspace and outputs included; the new array of an N spec compared as returned),
    to rounding: the entry holds its own copy of the kernel's code, which the compiler may reassociate and
    contract into fused multiply-adds differently (1e-12 of each array's largest entry, as for the batches)."""
    model = small_robot.model
    data = model.create_data()
    arguments = _arguments(registered, model, data, small_robot.rng(registered.name))
    first, second = _copies(arguments), _copies(arguments)
    through_entry = registered.call(*first)
    new = [k for k, a in enumerate(registered.arguments) if a.letter == "N"]
    if new:  # the dispatcher takes the new array where the spec has it
        made = np.zeros(np.shape(through_entry))
        status = registered.dispatcher(*second[:new[0]], made, *second[new[0]:])
        assert status == 0 and isinstance(through_entry, np.ndarray)
        assert_close(through_entry, made, rtol=1e-12)
    else:
        assert through_entry == registered.dispatcher(*second) == 0
    for a, b, argument in zip(first, second, [a for a in registered.arguments if a.letter != "N"]):
        if isinstance(a, np.ndarray) and a.dtype == np.float64:
            assert_close(a, b, rtol=1e-12, what=argument.name)
        elif isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


def test_a_kernel_status_comes_back_unchanged(arm):
    """A status computed by the kernel (here a q of the wrong length) comes back as the kernel returns it."""
    model, data, _ = arm
    short = np.zeros(model.nq - 1)
    crba = calling.REGISTRY["crba._crba_kernel"]
    code = crba.call(model.mi, model.mf, data.ws, short, data.output("M"))
    assert code == crba.dispatcher(model.mi, model.mf, data.ws, short, data.output("M"))
    assert calling.decode(code) == (calling.STATUS_SHAPE, 3, 0)  # q is argument 3 of (mi, mf, data, q, M)
    error = crba.error(model, code)
    assert isinstance(error, rd.InputError) and error.argument == "q"


@pytest.fixture
def arm():
    model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    return model, model.create_data(), rd.random_configuration(model, np.random.default_rng(7))


def _crba_call(model, data, q):
    return calling.REGISTRY["crba._crba_kernel"].call(model.mi, model.mf, data.ws, q, data.output("M"))


@needs_extension
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
    model, data, q = arm
    with pytest.raises(TypeError):
        _crba_call(model, data, make(q))


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
    expected_Jq = rd.dintegrate_dq(model, q, v)
    np.testing.assert_array_equal(rd.forward_kinematics(model, data, make(q)), expected_fk)
    np.testing.assert_array_equal(rd.rnea(model, data, make(q), v, v), expected_tau)
    np.testing.assert_array_equal(rd.integrate(model, make(q), v), expected_step)
    np.testing.assert_array_equal(rd.difference(model, make(q), expected_step), expected_difference)
    np.testing.assert_array_equal(rd.linearize(model, data, make(q), v, v, 0.01)[0], expected_A)
    np.testing.assert_array_equal(rd.dintegrate_dq(model, make(q), v), expected_Jq)


@needs_extension
def test_entry_accepts_read_only_inputs(arm):
    """A read-only input is read in place."""
    model, data, q = arm
    expected = rd.crba(model, data, q).copy()
    frozen = q.copy()
    frozen.flags.writeable = False
    assert _crba_call(model, data, frozen) == 0
    np.testing.assert_array_equal(data.M, expected)


@needs_extension
def test_entry_checks_its_argument_count_and_scalar_arguments(arm):
    model, data, q = arm
    with pytest.raises(TypeError, match="takes 5 arguments"):
        calling.REGISTRY["crba._crba_kernel"].call(model.mi, model.mf, data.ws, q)
    zero = np.zeros(model.nv)
    outputs = [data.output(name) for name in ("A", "B", "x_next")]
    with pytest.raises(TypeError):
        linearization.LINEARIZE.call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, "0.01", *outputs)
    assert linearization.LINEARIZE.call(model.mi, model.mf, data.ws, q, zero, zero, data._zero_fext, 1, *outputs) == 0


@needs_extension
def test_kernel_objects_refuse_bad_specs_and_addresses():
    address = calling.REGISTRY["crba._crba_kernel"].entry.address
    for spec in ("x1", "f4", "f", "F0", "I0", "W1", "i2f2F1f1" * 7, "WN0", "dN0"):
        with pytest.raises(ValueError):
            calling.Kernel(address, spec)
    with pytest.raises(ValueError):
        calling.Kernel(0, "f1")


@pytest.mark.parametrize("spec, message", [
    ("q f1", "bad kernel argument"),
    ("q:f4", "bad kernel argument"),
    ("q:x1", "bad kernel argument"),
    ("q:f1 q:f1", "twice"),
    ("out:N(q) q:f1", "earlier"),
    ("ws:W out:N(ws)", "earlier"),
    ("q:f1 a:N(q) b:N(q)", "at most one"),
])
def test_specs_are_parsed_or_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        calling.parse_spec(spec)


def test_a_spec_gives_the_extension_its_compact_form_and_the_kernel_its_types():
    arguments = calling.parse_spec("mi:i2 data:W q:f1 n:n dt:d out:F2 made:N(n)")
    assert "".join(a.code for a in arguments) == "i2Wf1ndF2N3"
    types = [calling.numba_type(a) for a in arguments]
    assert [t.mutable for t in types if isinstance(t, numba.types.Array)] == [False, True, False, True, True]
    assert [str(t) for t in types[3:5]] == ["int64", "float64"]


def test_dispatcher_can_be_asked_for():
    """RBD_DERIV_DISPATCHER=1 at import: the public functions run the numba kernels themselves."""
    code = ("from rbd_deriv.core import calling, crba; "
            "print(calling.DIRECT_CALLS, type(crba.CRBA.call).__name__ != 'Kernel', crba.CRBA.entry is None)")
    env = dict(os.environ, RBD_DERIV_DISPATCHER="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


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
    if calling.DIRECT_CALLS:
        with pytest.raises(TypeError, match="read-only view"):
            linearization.LINEARIZE.call(model.mi, model.mf, data.ws, q, data.ddq, tau, data._zero_fext, 0.01,
                                         data.output("A"), data.output("B"), data.output("x_next"))


@needs_extension
def test_entry_refuses_a_read_only_workspace(arm):
    model, data, q = arm
    frozen = data.ws.copy()
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        calling.REGISTRY["crba._crba_kernel"].call(model.mi, model.mf, frozen, q, data.output("M"))


@needs_extension
def test_an_error_inside_a_kernel_is_not_reported_as_success(arm):
    """A kernel's internal guard (a workspace view out of bounds, here from a corrupted layout) raises; through
    the C entry it comes back as STATUS_INTERNAL, never as 0, and maps to a RuntimeError."""
    model, data, q = arm
    broken = model.mi.copy()
    broken[0, MI_OFFSETS + REGION_INDEX["S"]] = data.ws.shape[0]  # the motion subspaces' view would end past ws
    code = calling.REGISTRY["crba._crba_kernel"].call(broken, model.mf, data.ws, q, data.output("M"))
    assert code == calling.STATUS_INTERNAL
    assert isinstance(calling.error_for(model, code, ()), RuntimeError)


def test_statuses_map_to_exceptions_naming_the_argument_or_joint():
    model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"), floating_base=True)
    names = ("mi", "mf", "data", "q", "v")
    cases = [
        (calling.STATUS_SHAPE, 4, 0, rd.InputError, "v", r"^v: wrong shape, expected \(13,\)"),
        (calling.STATUS_NONFINITE, 3, 0, rd.InputError, "q", r"^q: contains NaN or inf"),
        (calling.STATUS_QUATERNION, 3, 1, rd.InputError, "q", r"^q: the quaternion of joint 'root_joint'"),
        (calling.STATUS_WORKSPACE, 2, 0, rd.InputError, "data", r"^data: not a workspace of this model"),
    ]
    for kind, argument, index, exception, name, message in cases:
        error = calling.error_for(model, kind * calling.KIND_SCALE + argument * calling.ARGUMENT_SCALE + index,
                                  names)
        assert type(error) is exception and error.argument == name
        assert pytest.raises(exception, _raise, error).match(message)
    singular = calling.error_for(model, calling.STATUS_SINGULAR * calling.KIND_SCALE + 3, names)
    assert isinstance(singular, rd.ModelError) and singular.joint == model.joint_names[2]
    assert model.joint_names[2] in str(singular)
    assert isinstance(calling.error_for(model, 99 * calling.KIND_SCALE, names), RuntimeError)


def _raise(error):
    raise error


def test_new_status_kinds_can_be_defined_once():
    """What an algorithm with its own failures (contacts) does: a kind and the exception it maps to."""
    model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    kind = 4242
    try:
        assert calling.define_status(kind, lambda m, name, index: rd.InputError(f"{name}: item {index}", name)) == kind
        error = calling.error_for(model, kind * calling.KIND_SCALE + 1 * calling.ARGUMENT_SCALE + 3, ("a", "items"))
        assert str(error) == "items: item 3" and error.argument == "items"
        for taken in (kind, calling.STATUS_SHAPE, 7, 0):
            with pytest.raises(ValueError):
                calling.define_status(taken, lambda m, name, index: RuntimeError())
    finally:
        calling.ERRORS.pop(kind, None)


def test_lazy_kernels_compile_at_their_first_call_and_compile_all_compiles_them():
    code = textwrap.dedent("""
        import json, numpy as np, rbd_deriv as rd
        from rbd_deriv.core import calling
        def waiting():
            return sorted(name for name, r in calling.REGISTRY.items() if not r.compiled)
        lazy = waiting()
        model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
        rd.nonlinear_effects(model, model.create_data(), rd.neutral(model), np.zeros(model.nv))
        after_first_call = waiting()
        calling.compile_all()
        print(json.dumps([lazy, after_first_call, waiting()]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    lazy, after_first_call, after_all = json.loads(out.stdout.splitlines()[-1])
    assert "rnea._nle_kernel" in lazy and "crba._crba_kernel" not in lazy
    assert after_first_call == [name for name in lazy if name != "rnea._nle_kernel"]
    assert after_all == []


def test_what_the_nodes_call_at_start_is_compiled_by_the_build():
    """The robot side's policy (difference, integrate), the legged MPC's construction, warm-up and first ticks
    (kinematics, frames, centre of mass, impulses, the integrate Jacobians) and the fixed-base loop's warm-up
    call no kernel that the build leaves to its first call: a node's first tick compiles nothing (a compile
    there stalls the robot for seconds)."""
    code = textwrap.dedent("""
        import json, numpy as np, rbd_deriv as rd
        from rbd_deriv.core import calling
        from rbd_deriv.control import ControlLoop, MPCProblem
        from rbd_deriv.control.policy import policy_from_plan
        from rbd_deriv.mpc_loops import legged_loop
        from rbd_deriv.nodes.parameters import MPC_NODE
        from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, example_robot_srdf
        def waiting():
            return sorted(name for name, r in calling.REGISTRY.items() if not r.compiled)
        before = waiting()
        arm = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
        ControlLoop(arm, MPCProblem.from_model(arm, horizon=5, dt=0.01)).warm_up()
        q = rd.neutral(arm)
        X = np.tile(np.r_[q, np.zeros(arm.nv)], (3, 1))
        policy = policy_from_plan(X, np.zeros((2, arm.nv)), np.zeros((arm.nv, 2 * arm.nv)), 0, 0.01, 0.1)
        policy.torque(arm, q, np.zeros(arm.nv), 5_000_000, -np.ones(arm.nv), np.ones(arm.nv))
        solo = rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)
        p = {name: spec.default for name, spec in MPC_NODE.items()}
        p.update(contact_frames=["FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"], contact_kinds=["point"] * 4,
                 srdf_path=str(example_robot_srdf("solo12")), posture="standing", gaits=["stand", "trot"],
                 gait="trot", horizon=8)
        legged_loop(solo, p).warm_up()
        print(json.dumps([before, waiting()]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = json.loads(out.stdout.splitlines()[-1])
    assert before, "no lazy kernel left to watch"
    assert after == before, f"compiled at a node's first use: {sorted(set(before) - set(after))}"


_CACHE_PROBE = '''
import numpy as np
from numba import njit
from rbd_deriv.core.calling import register
from rbd_deriv.core.constants import JIT_OPTIONS


@njit(**JIT_OPTIONS)
def _scale_kernel(x, factor, out):
    for k in range(x.shape[0]):
        out[k] = FACTOR * factor * x[k]
    return 0


FACTOR = {factor}
SCALE = register(_scale_kernel, "x:f1 factor:d out:F1")
'''


@needs_extension
def test_entries_are_cached_beside_their_kernels_and_never_stale(tmp_path):
    """An entry made by register() is compiled once, loaded from numba's cache by the next process, and
    compiled again when its kernel's module changes (never served stale)."""
    module = tmp_path / "probe_kernels.py"
    run = [sys.executable, "-c", textwrap.dedent("""
        import sys, numpy as np
        sys.path.insert(0, sys.argv[1])
        import probe_kernels as p
        out = np.zeros(3)
        assert p.SCALE.call(np.arange(3.0), 2.0, out) == 0
        print(p.SCALE.entry.cache_hits, out.tolist())
    """), str(tmp_path)]
    env = dict(os.environ, NUMBA_CACHE_DIR="")
    results = []
    for factor in (1.0, 1.0, 10.0):
        module.write_text(_CACHE_PROBE.format(factor=factor))
        os.utime(module, (module.stat().st_atime, module.stat().st_mtime + len(results) + 1))
        out = subprocess.run(run, capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stderr
        hits, values = out.stdout.splitlines()[-1].split(" ", 1)
        results.append((int(hits), json.loads(values)))
    assert results[0] == (0, [0.0, 2.0, 4.0])
    assert results[1] == (1, [0.0, 2.0, 4.0])  # from the cache
    assert results[2] == (0, [0.0, 20.0, 40.0])  # the module changed: compiled again, new constant
    assert any(path.name.startswith("probe_kernels._scale_kernel_entry") for path in
               (tmp_path / "__pycache__").iterdir())


# ---- batches over the extension's worker threads (calling.parallel, used by rbd_deriv.core.batch) ----


def _batch_arguments(model, count, threads, rng):
    """The arguments of parallel() for rnea_derivatives at `count` random states."""
    Q = np.array([rd.random_configuration(model, rng) for _ in range(count)]).reshape(count, model.nq)
    V, A = rng.standard_normal((count, model.nv)), rng.standard_normal((count, model.nv))
    workspaces = np.zeros((threads, model.workspace_size))
    for ws in workspaces:
        rd.Data.initialize(model, ws)
    outputs = [np.full((count, model.nv, model.nv), np.nan) for _ in range(3)]
    return [np.full(count, -1, dtype=np.int64), model.mi, model.mf, workspaces, Q, V, A,
            np.zeros((model.njoints, 6)), *outputs]


@needs_extension
def test_parallel_runs_every_item_once_on_any_number_of_threads(arm):
    """parallel(kernel, count, threads, status, ...) with 1 to 4 threads and 0 to 9 items: every state is done
    (status 0, results byte-equal to the single-state function's), none twice, none left."""
    model, data, _ = arm
    rng = np.random.default_rng(11)
    kernel = rnea_derivatives.RNEA_DERIVATIVES.call
    for count in (0, 1, 2, 9):
        for threads in (1, 2, 4):
            arguments = _batch_arguments(model, count, threads, rng)
            assert calling.parallel(kernel, count, threads, *arguments) == 0
            codes, Q, V, A, out1, out2, out3 = (arguments[k] for k in (0, 4, 5, 6, 8, 9, 10))
            assert (codes == 0).all()
            for k in range(count):
                expected = rd.rnea_derivatives(model, data, Q[k], V[k], A[k])
                for got, want in zip((out1[k], out2[k], out3[k]), expected):
                    np.testing.assert_array_equal(got, want)
    assert 1 <= calling.worker_count() <= 3  # started for threads = 4 (and kept), never more


@needs_extension
def test_parallel_takes_shared_inputs_and_per_item_rows(arm):
    """An input given as for one call is shared by every item; given with a leading dimension, per item."""
    model, data, _ = arm
    rng = np.random.default_rng(15)
    arguments = _batch_arguments(model, 5, 2, rng)
    shared_v = arguments[5][2].copy()
    arguments[5] = shared_v  # one velocity for all states
    assert calling.parallel(rnea_derivatives.RNEA_DERIVATIVES.call, 5, 2, *arguments) == 0
    for k in range(5):
        expected = rd.rnea_derivatives(model, data, arguments[4][k], shared_v, arguments[6][k])
        np.testing.assert_array_equal(arguments[8][k], expected[0])


@needs_extension
def test_parallel_checks_its_arguments(arm):
    model, _, _ = arm
    kernel = rnea_derivatives.RNEA_DERIVATIVES.call
    arguments = _batch_arguments(model, 3, 2, np.random.default_rng(12))
    with pytest.raises(TypeError):
        calling.parallel(lambda *a: 0, 3, 2, *arguments)
    with pytest.raises(TypeError):
        calling.parallel(kernel, 3)
    with pytest.raises(ValueError):
        calling.parallel(kernel, -1, 2, *arguments)
    with pytest.raises(ValueError):
        calling.parallel(kernel, 3, 0, *arguments)
    with pytest.raises(TypeError, match="status"):
        calling.parallel(kernel, 3, 2, arguments[0][:2], *arguments[1:])
    with pytest.raises(TypeError, match="argument 3"):  # Q as a list
        calling.parallel(kernel, 3, 2, *arguments[:4], arguments[4].tolist(), *arguments[5:])
    with pytest.raises(TypeError, match="one row per item"):  # Q of 2 rows for 3 items
        calling.parallel(kernel, 3, 2, *arguments[:4], arguments[4][:2].copy(), *arguments[5:])
    with pytest.raises(TypeError, match="one workspace row per thread"):
        calling.parallel(kernel, 3, 2, *arguments[:3], arguments[3][:1].copy(), *arguments[4:])
    with pytest.raises(TypeError, match="one output row per item"):  # an output shared by all items
        calling.parallel(kernel, 3, 2, *arguments[:8], arguments[8][0].copy(), *arguments[9:])
    with pytest.raises(TypeError):
        calling.parallel(kernel, 3, 2, *arguments[:-1])
    with pytest.raises(TypeError, match="returns a new array"):
        calling.parallel(configuration.INTEGRATE.call, 1, 1, np.zeros(1, dtype=np.int64), model.mi,
                         np.zeros((1, model.nq)), np.zeros((1, model.nv)))
    for bad in ((-1.0, 0, 0, 0, 0), (0, 0, 0, 0, 11.0), (0, 0, 0, 0)):
        with pytest.raises((ValueError, TypeError)):
            calling.set_worker_wait(*bad)


@needs_extension
def test_parallel_reports_each_items_status(arm):
    """A state the kernel refuses gets its status, the others 0; parallel returns a nonzero status."""
    model, _, _ = arm
    for threads in (1, 2):
        arguments = _batch_arguments(model, 6, threads, np.random.default_rng(13))
        arguments[5][4, 0] = np.nan
        code = calling.parallel(rnea_derivatives.RNEA_DERIVATIVES.call, 6, threads, *arguments)
        codes = arguments[0]
        assert code == codes[4] and calling.decode(code) == (calling.STATUS_NONFINITE, 4, 0)
        assert (np.delete(codes, 4) == 0).all()


@needs_extension
def test_workers_between_recurring_batches_then_asleep(arm):
    """Batches every 4 ms (a controller's ticks, a benchmark's blocks between other work) with the workers
    polling between them: every batch is complete and byte-equal to the single calls, whichever thread took
    each state. Once batches stop, the workers leave the core within the linger time: a second of the
    process's CPU time, counted while its only Python thread sleeps, stays far below a spinning core's."""
    import time

    from rbd_deriv.core import constants

    model, data, _ = arm
    rng = np.random.default_rng(17)
    kernel = rnea_derivatives.RNEA_DERIVATIVES.call
    for _ in range(12):
        arguments = _batch_arguments(model, 5, 2, rng)
        assert calling.parallel(kernel, 5, 2, *arguments) == 0
        Q, V, A, out = arguments[4], arguments[5], arguments[6], arguments[8]
        for k in range(5):
            np.testing.assert_array_equal(out[k], rd.rnea_derivatives(model, data, Q[k], V[k], A[k])[0])
        time.sleep(0.004)
    time.sleep(2 * constants.BATCH_WORKER_LINGER)
    start = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - start < 0.1


def test_batches_after_fork_run_without_the_parents_workers():
    """A child forked after the parent started its workers has none of them: its batches run and give the
    parent's results (the extension forgets its workers in the child)."""
    if not calling.DIRECT_CALLS:
        pytest.skip("the extension is not in use")
    code = """
import os, sys, numpy as np, rbd_deriv as rd
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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0"


def test_dispatcher_results_equal_the_extensions(tmp_path):
    """With RBD_DERIV_DISPATCHER=1 the public functions and the batches run on numba's dispatcher: the same
    results, to 1e-12 (the same kernels, compiled inside another function: the compiler may fuse other
    products)."""
    code = """
import sys, numpy as np, rbd_deriv as rd
model = rd.load_urdf(rd.bundled_urdf("rbd_arm7"), floating_base=True)
data = model.create_data()
rng = np.random.default_rng(6)
results = []
for count in (1, 8):
    Q = np.array([rd.random_configuration(model, rng) for _ in range(count)])
    V, U = rng.standard_normal((count, model.nv)), rng.standard_normal((count, model.nv))
    results += [*rd.aba_derivatives_batch(model, Q, V, U), *rd.linearize_batch(model, Q, V, U, 0.01)]
    results += [rd.crba(model, data, Q[0]).copy(), rd.difference(model, Q[0], Q[-1]), rd.integrate(model, Q[0], V[0])]
np.savez(sys.argv[1], *results)
"""
    results = []
    for dispatcher in ("0", "1"):
        env = dict(os.environ, RBD_DERIV_DISPATCHER=dispatcher)
        path = tmp_path / f"dispatcher{dispatcher}.npz"
        out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, out.stderr
        with np.load(path) as arrays:
            results.append([arrays[key] for key in sorted(arrays.files, key=lambda name: int(name[4:]))])
    assert len(results[0]) == len(results[1]) == 18
    for extension, dispatcher in zip(*results):
        assert_close(extension, dispatcher, rtol=1e-12, what="through the dispatcher")


@needs_extension
def test_an_entry_can_return_the_array_it_makes(arm):
    """Spec N(name): the call makes a float64 array shaped like that argument and returns it (status 0), or
    returns the kernel's status and drops it. integrate's entry is one."""
    model, _, q = arm
    call = configuration.INTEGRATE.call
    v = np.full(model.nv, 0.1)
    out = call(model.mi, q, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape and out.flags.writeable and out.flags.owndata
    np.testing.assert_array_equal(out, rd.integrate(model, q, v))
    assert not np.shares_memory(out, call(model.mi, q, v))
    code = call(model.mi, q[:-1].copy(), v)  # a q of the wrong length: the kernel's status comes back
    assert type(code) is int and calling.decode(code) == (calling.STATUS_SHAPE, 1, 0)
    with pytest.raises(TypeError, match="arguments"):
        call(model.mi, q, v, np.empty(model.nq))  # the output is not passed
    with pytest.raises(TypeError, match="argument 1"):
        call(model.mi, q.tolist(), v)
    for spec in ("N0", "f1N1", "f1N0N0", "dN0", "f1N9", "f1N"):
        with pytest.raises(ValueError):
            calling.Kernel(configuration.INTEGRATE.entry.address, spec)


@needs_extension
def test_an_entry_can_make_an_array_of_a_given_length(arm):
    """N(name) with that argument an int: a new 1-D array of that length (difference's entry, of length nv)."""
    model, _, q = arm
    call = configuration.DIFFERENCE.call
    q1 = rd.random_configuration(model, np.random.default_rng(14))
    out = call(model.mi, model.continuous, q, q1, model.nv)
    assert isinstance(out, np.ndarray) and out.shape == (model.nv,)
    np.testing.assert_array_equal(out, rd.difference(model, q, q1))
    assert calling.decode(call(model.mi, model.continuous, q, q1, model.nv + 1)) == (calling.STATUS_SHAPE, 5, 0)
    with pytest.raises(ValueError, match="negative length"):
        call(model.mi, model.continuous, q, q1, -1)
    with pytest.raises(TypeError, match="argument 4"):
        call(model.mi, model.continuous, q, q1, float(model.nv))


def test_forward_kinematics_refuses_a_foreign_workspace_through_the_fast_path(arm):
    """The public functions pass the Data's own regions as outputs: a Data of another model is named."""
    model, _, q = arm
    other = rd.load_urdf(rd.bundled_urdf("rbd_arm7"), floating_base=True).create_data()
    with pytest.raises(rd.InputError) as info:
        rd.forward_kinematics(model, other, q)
    assert info.value.argument == "data"


def test_kernel_modules_register_and_the_convention_module_knows_them_all():
    names = set(calling.REGISTRY)
    assert {"rnea._rnea_kernel", "crba._crba_kernel", "aba._aba_kernel", "minverse._minverse_kernel",
            "rnea_derivatives._rnea_derivatives_kernel", "aba_derivatives._aba_derivatives_kernel",
            "linearization._linearize_kernel", "kinematics._forward_kinematics_kernel",
            "configuration._integrate_kernel", "configuration._difference_kernel",
            "configuration._dintegrate_kernel", "rnea._nle_kernel", "rnea._gravity_kernel",
            "frames._frame_kernel", "frames._com_kernel", "contact._contact_kernel", "contact._impulse_kernel"} == names
    assert Path(calling.__file__).name == "calling.py" and kinematics.FORWARD_KINEMATICS.outputs == ("oMi",)
