"""Tests of the benchmark command (rbd_deriv.bench): its timing helpers, its Pinocchio references, and a
smoke run on ur5 checking the report's structure. No test asserts a speed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
import types
from pathlib import Path

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio")

from rbd_deriv.bench import SUBCOMMANDS  # noqa: E402
from rbd_deriv.bench import __main__ as bench_main  # noqa: E402
from rbd_deriv.bench import core, timing  # noqa: E402
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge  # noqa: E402
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS  # noqa: E402

PER_CALL_FUNCTIONS = [
    "rnea", "crba", "aba", "minverse", "nonlinear_effects", "gravity_torques", "forward_kinematics",
    "rnea_derivatives", "aba_derivatives", "linearize", "integrate", "difference",
]
BATCH_FUNCTIONS = ["rnea_batch", "aba_batch", "rnea_derivatives_batch", "aba_derivatives_batch", "linearize_batch"]
TIMING_KEYS = {"median_us", "min_us", "max_us", "number", "repeat"}


# ------------------------------------------------------------------------------------------ timing
def test_timing_statistics_from_block_times():
    # Blocks of 4 calls lasting 4, 8, 40 us -> 1, 2, 10 us per call.
    result = timing.Timing.from_block_times([4e-6, 40e-6, 8e-6], number=4)
    assert result.median_us == pytest.approx(2.0, rel=1e-12)
    assert result.min_us == pytest.approx(1.0, rel=1e-12)
    assert result.max_us == pytest.approx(10.0, rel=1e-12)
    assert (result.number, result.repeat) == (4, 3)
    with pytest.raises(ValueError):
        timing.Timing.from_block_times([], number=4)
    with pytest.raises(ValueError):
        timing.Timing.from_block_times([1.0], number=0)


def test_timer_calls_the_bound_function_with_its_arguments():
    seen = []

    def record(*args):
        seen.append(args)

    marker = object()
    timer = timing.make_timer(timing.Case("record", record, (1, "two", marker)))
    timer.timeit(7)
    assert len(seen) == 7
    assert all(args == (1, "two", marker) for args in seen)


def test_time_cases_interleaves_and_reports_every_case():
    calls = {"a": 0, "b": 0}

    def call_a():
        calls["a"] += 1

    def call_b():
        calls["b"] += 1

    results = timing.time_cases([timing.Case("a", call_a), timing.Case("b", call_b)], repeat=4,
                                block_seconds=1e-4)
    assert set(results) == {"a", "b"}
    for name, result in results.items():
        assert result.repeat == 4 and result.number >= 1
        assert 0.0 < result.min_us <= result.median_us <= result.max_us
        # Calibration, one warm-up block and four timed blocks all ran the call.
        assert calls[name] >= 5 * result.number
    with pytest.raises(ValueError):
        timing.time_cases([timing.Case("a", call_a), timing.Case("a", call_b)], repeat=1, block_seconds=1e-4)
    with pytest.raises(ValueError):
        timing.time_cases([timing.Case("a", call_a)], repeat=0, block_seconds=1e-4)


def test_a_slow_first_call_does_not_set_the_block_length():
    """A call that is slow once (a kernel compiled at its first call) still gets blocks of many calls."""
    state = {"first": True}

    def compiles_once():
        if state["first"]:
            state["first"] = False
            time.sleep(0.05)

    assert timing.calibrate_number(timing.make_timer(timing.Case("lazy", compiles_once)), 1e-3) > 10


def test_time_budget_lowers_the_number_of_blocks_but_not_below_the_minimum():
    def slow():
        sum(range(20000))

    cases = [timing.Case("slow", slow), timing.Case("fast", int)]
    budgeted = timing.time_cases(cases, repeat=50, block_seconds=1e-4, seconds_per_case=1e-9, min_repeat=3)
    assert {result.repeat for result in budgeted.values()} == {3}
    unbudgeted = timing.time_cases(cases, repeat=4, block_seconds=1e-4, seconds_per_case=10.0, min_repeat=3)
    assert {result.repeat for result in unbudgeted.values()} == {4}


def test_format_table_pads_columns_and_prints_missing_values_as_dash():
    text = timing.format_table(["name", "value"], [["rnea", 1.23456], ["a much longer name", float("nan")]],
                               title="T")
    lines = text.splitlines()
    assert lines[0] == "T"
    assert lines[1].startswith("name ")
    assert "1.23" in lines[3] and "1.23456" not in lines[3]
    assert lines[4].split("|")[1].strip() == "-"
    # Every row has its separators at the same columns.
    assert len({line.index("|") for line in lines[1:] if "|" in line}) == 1


def test_write_json_turns_non_finite_numbers_into_null(tmp_path):
    path = timing.write_json(tmp_path / "sub" / "r.json", {"x": float("nan"), "y": [1.5, float("inf")], "z": "s"})
    assert json.loads(path.read_text()) == {"x": None, "y": [1.5, None], "z": "s"}


# ----------------------------------------------------------------------------------- references
def test_finite_difference_jacobians_recover_an_affine_map_exactly():
    # f(q, v, u) = P q + N v + W u + c with integrate(q, dq) = q + dq: forward differences are exact
    # (a unit step avoids rounding), so this checks rows, columns and argument order.
    rng = np.random.default_rng(3)
    n = 4
    P, N, W = (rng.standard_normal((n, n)) for _ in range(3))
    c = rng.standard_normal(n)
    q, v, u = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
    jacobians = core.finite_difference_jacobians(lambda q, v, u: P @ q + N @ v + W @ u + c,
                                                 lambda q, dq: q + dq, q, v, u, step=1.0)
    np.testing.assert_allclose(jacobians[0], P, rtol=0, atol=1e-13)
    np.testing.assert_allclose(jacobians[1], N, rtol=0, atol=1e-13)
    np.testing.assert_allclose(jacobians[2], W, rtol=0, atol=1e-13)


def test_numpy_cholesky_inverse_inverts_a_symmetric_positive_definite_matrix():
    rng = np.random.default_rng(4)
    root = rng.standard_normal((9, 9))
    matrix = root @ root.T + 9 * np.eye(9)
    inverse = core.numpy_cholesky_inverse(matrix)
    np.testing.assert_allclose(inverse @ matrix, np.eye(9), rtol=0, atol=1e-12)
    np.testing.assert_allclose(inverse, inverse.T, rtol=0, atol=1e-14)


def test_pinocchio_loop_stacks_each_state():
    Q, V, U = (np.arange(12.0).reshape(3, 4) + offset for offset in (0.0, 100.0, 200.0))
    single = core.pinocchio_loop(lambda q, v, u: q + v + u, outputs=1)(Q, V, U)
    np.testing.assert_array_equal(single, Q + V + U)
    first, second = core.pinocchio_loop(lambda q, v, u: (q * 2, np.outer(v, u)), outputs=2)(Q, V, U)
    np.testing.assert_array_equal(first, 2 * Q)
    np.testing.assert_array_equal(second, np.einsum("ki,kj->kij", V, U))


def _richardson_jacobian(function, x_plus, nominal_size, n, step):
    """Central differences with one Richardson step (error O(step^4)); x_plus(i, h) is the input moved by h
    along tangent direction i, function returns a tangent-space difference from the nominal output."""
    jacobian = np.empty((nominal_size, n))
    for i in range(n):
        def central(h):
            return (function(x_plus(i, h)) - function(x_plus(i, -h))) / (2 * h)

        jacobian[:, i] = (4 * central(step / 2) - central(step)) / 3
    return jacobian


@pytest.mark.parametrize("name, floating_base", [("ur5", False), ("solo12", True)])
def test_pinocchio_euler_linearization_matches_finite_differences_on_the_manifold(name, floating_base):
    bridge = PinocchioBridge(EXAMPLE_ROBOTS[name], floating_base=floating_base)
    model, data = bridge.model, bridge.data
    rng = np.random.default_rng(5)
    nv, dt = model.nv, 0.01
    q = bridge.q_to_pin(bridge.random_configuration(rng))
    v, tau = rng.uniform(-1, 1, nv), rng.uniform(-5, 5, nv)
    reference = core.PinocchioEulerLinearization(model, data, dt)
    A, B = (matrix.copy() for matrix in reference(q, v, tau))
    x_next = reference.x_next.copy()

    def euler_step(state):
        q_k, v_k, tau_k = state
        v_next = v_k + dt * pin.aba(model, data, q_k, v_k, tau_k)
        q_next = pin.integrate(model, q_k, dt * v_next)
        # Tangent-space displacement from the nominal next state.
        return np.concatenate([pin.difference(model, x_next[: model.nq], q_next), v_next - x_next[model.nq:]])

    def unit(i, h):
        e = np.zeros(nv)
        e[i] = h
        return e

    size = 2 * nv
    d_dq = _richardson_jacobian(euler_step, lambda i, h: (pin.integrate(model, q, unit(i, h)), v, tau), size, nv, 1e-3)
    d_dv = _richardson_jacobian(euler_step, lambda i, h: (q, v + unit(i, h), tau), size, nv, 1e-3)
    d_dtau = _richardson_jacobian(euler_step, lambda i, h: (q, v, tau + unit(i, h)), size, nv, 1e-3)
    # Next state: computeABADerivatives' ddq against pin.aba (same algorithm family, rounding apart).
    np.testing.assert_allclose(euler_step((q, v, tau)), np.zeros(size), rtol=0,
                               atol=1e-9 * max(1.0, np.abs(x_next).max()))
    scale = max(1.0, np.abs(A).max())
    np.testing.assert_allclose(A, np.hstack([d_dq, d_dv]), rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(B, d_dtau, rtol=0, atol=1e-9 * max(1.0, np.abs(B).max()))


# ------------------------------------------------------------------------------------ judging targets
def test_targets_per_row_kind():
    call = core.Pair("aba_derivatives", timing.Case("ours", print), timing.Case("pin", print), "x")
    assert core.target_for("talos", call) == 1.0
    assert core.target_for("ur5", call) == core.PER_CALL_TARGET
    batch = core.Pair("rnea_derivatives_batch", timing.Case("ours", print), timing.Case("pin", print), "x",
                      kind="batch", states=32)
    assert core.target_for("ur5", batch) == core.BATCH_SPEEDUP_TARGET
    linearize_batch = core.Pair("linearize_batch", timing.Case("o", print), timing.Case("p", print), "x", kind="batch")
    assert core.target_for("ur5", linearize_batch) == core.BATCH_SPEEDUP_TARGET
    plain_batch = core.Pair("rnea_batch", timing.Case("o", print), timing.Case("p", print), "x", kind="batch")
    assert core.target_for("ur5", plain_batch) is None
    extra = core.Pair("finite differences of ID", timing.Case("o", print), timing.Case("p", print), "x",
                      kind="table1")
    assert core.target_for("ur5", extra) is None


def test_summary_splits_met_and_missed_targets():
    robots = {"r": {
        "per_call": [
            {"function": "rnea", "kind": "call", "ratio": 1.2, "target": 1.5, "target_met": True},
            {"function": "aba", "kind": "call", "ratio": 1.7, "target": 1.5, "target_met": False},
            {"function": "x", "kind": "info", "ratio": 9.0, "target": None, "target_met": None},
        ],
        "batch": [{"function": "rnea_derivatives_batch", "kind": "batch", "speedup": 1.2, "target": 1.5,
                   "target_met": False}],
    }}
    summary = core.summarize_targets(robots)
    assert summary["met"] == ["r rnea ratio 1.20 (<= 1.5)"]
    assert summary["missed"] == ["r aba ratio 1.70 (<= 1.5)", "r rnea_derivatives_batch speedup 1.20 (>= 1.5)"]


def test_functions_the_library_lacks_are_skipped_and_named(monkeypatch):
    monkeypatch.setattr(core, "rd", types.SimpleNamespace(rnea=len))
    assert core.lib.rnea is len
    missing = core.lib.rnea_batch
    assert isinstance(missing, core.MissingFunction)
    with pytest.raises(AttributeError, match="rnea_batch"):
        missing()
    pair = core.Pair("rnea_batch", timing.Case("ours", missing), timing.Case("pin", len, ((),)), "x", kind="batch")
    assert core.measure_pair("ur5", pair, core.Settings(repeat=1, block_seconds=1e-5)) is None


def test_relative_difference_scales_by_the_reference_and_flags_shape_mismatch():
    assert core.relative_difference(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == pytest.approx(0.2)
    assert core.relative_difference(np.array([1e-3]), np.array([0.0])) == pytest.approx(1e-3)
    assert core.relative_difference((np.zeros(2), np.ones(2)), (np.zeros(2), np.zeros(2))) == 1.0
    assert math.isinf(core.relative_difference(np.zeros(2), np.zeros(3)))


# --------------------------------------------------------------------------------------- command line
def test_dispatcher_knows_core_and_refuses_unknown_subcommands(capsys):
    assert SUBCOMMANDS["core"] == "rbd_deriv.bench.core"
    for module_name in SUBCOMMANDS.values():
        # Registered modules are imported only on use; each must at least exist.
        assert importlib.util.find_spec(module_name) is not None, module_name
    assert bench_main.main(["no-such-benchmark"]) == 2
    assert "unknown subcommand" in capsys.readouterr().err
    assert bench_main.main([]) == 2
    assert bench_main.main(["--help"]) == 0


def test_core_benchmark_smoke_run_on_ur5(tmp_path, capsys):
    path = tmp_path / "core.json"
    code = bench_main.main(["core", "--robots", "ur5", "--quick", "--no-jit", "--json", str(path)])
    assert code == 0
    printed = capsys.readouterr().out
    for label in ("== ur5", "Table I", "targets met"):
        assert label in printed
    report = json.loads(path.read_text())
    assert report["benchmark"] == "core"
    assert set(report["robots"]) == {"ur5"}
    assert report["settings"]["quick"] is True
    ur5 = report["robots"]["ur5"]
    assert (ur5["nq"], ur5["nv"], ur5["floating_base"]) == (6, 6, False)
    per_call = {row["function"]: row for row in ur5["per_call"]}
    assert set(PER_CALL_FUNCTIONS) <= set(per_call)
    batch = {row["function"]: row for row in ur5["batch"]}
    assert set(batch) == set(BATCH_FUNCTIONS)
    for row in ur5["per_call"] + ur5["batch"] + ur5["table1_extra"]:
        assert TIMING_KEYS <= set(row["ours"]) and TIMING_KEYS <= set(row["pinocchio"])
        assert row["ours"]["median_us"] > 0 and row["pinocchio"]["median_us"] > 0
        assert row["ratio"] == pytest.approx(row["ours"]["median_us"] / row["pinocchio"]["median_us"])
        assert "check_error" not in row, row
    for name in PER_CALL_FUNCTIONS:
        # The benchmark only means something if both sides compute the same thing.
        assert per_call[name]["max_relative_difference"] <= core.AGREEMENT_TOLERANCE, name
        assert isinstance(per_call[name]["target_met"], bool)
    for name in BATCH_FUNCTIONS:
        assert batch[name]["max_relative_difference"] <= core.AGREEMENT_TOLERANCE, name
        assert batch[name]["states"] == core.BATCH_SIZE
        assert batch[name]["speedup"] == pytest.approx(
            batch[name]["pinocchio"]["median_us"] / batch[name]["ours"]["median_us"])
    assert [label for label, _ in core.TABLE1_ROWS] == list(ur5["table1"])
    for entry in ur5["table1"].values():
        assert set(entry) == {"ours_us", "pinocchio_us", "ratio"}
    assert ur5["missing"] == [] and report["summary"]["missing"] == []
    assert set(report["summary"]) == {"met", "missed", "missing", "results_to_look_at"}
    assert report["summary"]["results_to_look_at"] == []
    judged = [row for row in ur5["per_call"] + ur5["batch"] if row["target_met"] is not None]
    assert len(report["summary"]["met"]) + len(report["summary"]["missed"]) == len(judged)


_FAKE_JIT_SCRIPT = r"""
import json, os, sys
cache = os.environ["NUMBA_CACHE_DIR"]
marker = os.path.join(cache, "seen")
first = not os.path.exists(marker)
open(marker, "w").close()
import importlib.util
assert importlib.util.find_spec("rbd_deriv") is not None  # found without compiling anything
robots = json.loads(sys.argv[1])
report = {"import_s": 2.0 if first else 0.5,
          "robots": {name: {"load_urdf": 9.0, "rnea": 1.0 if first else 0.25, "aba": 0.5} for name, _ in robots}}
print("noise on stdout")
print("JIT-REPORT " + json.dumps(report))
"""


def test_jit_measurement_reuses_one_fresh_cache_dir_and_parses_the_child_report():
    # The real script compiles the whole library twice (minutes); a stand-in child checks the plumbing:
    # same empty cache dir for both children, package importable, report parsed, load time excluded.
    result = core.measure_jit(script=_FAKE_JIT_SCRIPT, robots=[("ur5", False)], timeout=120)
    first, cached = result["first_import"], result["cached_import"]
    assert result["robots"] == ["ur5"]
    assert (first["import_s"], cached["import_s"]) == (2.0, 0.5)
    assert first["first_calls_s"] == {"ur5": 1.5} and cached["first_calls_s"] == {"ur5": 0.75}
    assert first["process_s"] > 0 and cached["process_s"] > 0
    assert "first_import: import rbd_deriv 2.00 s" in core.render_jit(result)


def test_jit_measurement_reports_a_failing_child():
    result = core.measure_jit(script="raise SystemExit('broken child')", robots=[("ur5", False)], timeout=120)
    assert "broken child" in result["first_import"]["error"]
    assert result["cached_import"] == {"error": "not measured: the first import failed"}
    assert "FAILED" in core.render_jit(result)


def test_latency_benchmark_measures_the_node_and_its_echo_reference():
    """Short runs of `bench latency` on both nodes: every state comes back, latencies are sane."""
    pytest.importorskip("rclpy")
    from rbd_deriv.bench import latency

    for name in ("echo", "arm"):
        scenario = latency.SCENARIOS[name]
        slow = latency.Scenario(scenario.name, scenario.urdf, scenario.floating_base, 100.0,
                                scenario.target_p99_ms, scenario.echo)
        result = latency.run_scenario(slow, duration=1.0, outputs="linearization",
                                      domain=150 + (os.getpid() + len(name)) % 50)
        assert result.sent >= 90 and result.received >= 0.9 * result.sent, result
        assert 0.0 < result.p50_ms <= result.p99_ms <= result.max_ms < 1000.0, result


def test_mpc_benchmark_centres_its_reference_where_gravity_can_be_held():
    import rbd_deriv as rd
    from rbd_deriv.bench import mpc as mpc_bench
    from rbd_deriv.control import MPCProblem

    for name in ("arm", "romeo"):
        model = mpc_bench.load_robot(name)
        data = model.create_data()
        effort = MPCProblem.from_model(model, default_effort=mpc_bench.DEFAULT_EFFORT).torque_upper
        lower = np.maximum(model.lower_position_limit, -np.pi)
        upper = np.minimum(model.upper_position_limit, np.pi)
        center = mpc_bench.holdable_center(model, data, lower, upper, effort, np.random.default_rng(0))

        def load(q):
            return np.max(np.abs(rd.gravity_torques(model, data, q)) / effort)

        middle = 0.5 * (lower + upper)
        assert ((lower <= center) & (center <= upper)).all()
        if name == "arm":  # holds its mid-range posture with a fraction of its limits
            np.testing.assert_array_equal(center, middle)
        else:  # Romeo's wrists cannot hold mid-range against gravity; the centre chosen can
            assert load(middle) > 1.0 and load(center) < 1.0


def test_legged_benchmark_cases_follow_the_node_configuration():
    """The benchmark's rows are the gaits config/ gives each robot's MPC node, at the node's horizon (one cycle
    at least: crawl's 0.8 s is 40 knots of 0.02 s), then the long horizons of 50 knots of 0.01 s."""
    from rbd_deriv.bench import legged

    assert [(case.name, case.dt, case.target_hz) for case in legged.cases()] == [
        ("solo12/stand/20", 0.02, 500.0), ("solo12/trot/20", 0.02, 500.0), ("solo12/pace/20", 0.02, 500.0),
        ("solo12/bound/20", 0.02, 500.0), ("solo12/crawl/40", 0.02, 200.0), ("solo12/trot/50", 0.01, 100.0),
        ("talos/stand/25", 0.02, 100.0), ("talos/walk/50", 0.02, 100.0), ("talos/stand/50", 0.01, 50.0)]


def test_legged_benchmark_smoke_run(tmp_path, capsys):
    """A few ticks of solo12's trot and crawl: the rows are printed, the parts of a tick add up to less than
    the tick, every plan succeeded, the push loop reports a base that came back, and the batches' threads, held
    to one during the run, are given back."""
    import json

    import numba

    from rbd_deriv.bench import legged

    path = tmp_path / "legged.json"
    threads = numba.get_num_threads()
    assert legged.main(["--ticks", "3", "--warmup", "2", "--robots", "solo12", "--cases", "solo12/trot/20",
                        "solo12/crawl/40", "--push", "--json", str(path)]) == 0
    assert numba.get_num_threads() == threads
    out = capsys.readouterr().out
    assert "solo12/trot/20" in out and "solo12/crawl/40" in out
    report = json.loads(path.read_text())
    assert [row["case"] for row in report["results"]] == ["solo12/trot/20", "solo12/crawl/40"]
    for row, horizon in zip(report["results"], (20, 40)):
        assert row["failures"] == 0 and row["nv"] == 18 and row["horizon"] == horizon
        assert 0.0 < sum(row["parts_us"].values()) <= 1.05 * row["p99_us"]
    (push,) = report["pushes"]
    assert push["refused"] == 0 and push["final_m"] < 0.1 * push["peak_m"]


def test_load_benchmark_spins_the_cores_and_calls_a_fall_a_miss():
    """``bench load``'s busy processes each take a core until stopped, and its verdict names any run that fell
    or did not finish as a missed target (the run itself, a demo of 20 s and more, is not run here)."""
    import time

    from rbd_deriv.bench import load
    from rbd_deriv.nodes.processes import resident_memory, stop_processes

    spinning = load.busy_processes(2)
    try:
        time.sleep(1.0)
        assert all(process.poll() is None for process in spinning)
        assert all(resident_memory(process.pid) > 0 for process in spinning)
        # Each has run on a core (user time [clock ticks], /proc/PID/stat's 14th field) rather than slept.
        ticks = [int(Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
                 for process in spinning]
        assert min(ticks) > 0.1 * os.sysconf("SC_CLK_TCK")
    finally:
        stop_processes(spinning, timeout=2.0)
    assert all(process.returncode is not None for process in spinning)
    up = load.LoadRun("solo12", "trot", "simulated", 2, 20.0, finished=True, fell=False, mpc_rate_hz=180.0,
                      real_time_factor=0.98, max_torque_ratio=0.6, cone_violations=3,
                      safe_commands={"stale_clock": 4}, load_average=4.1)
    down = load.LoadRun("talos", "stand", "wall", 2, 20.0, finished=True, fell=True, log="talos.log")
    unfinished = load.LoadRun("talos", "stand", "wall", 2, 20.0, finished=False, log="lost.log")
    assert "target met: 1 of 1" in load.report([up])
    text = load.report([up, down, unfinished])
    assert "target MISSED: 2 of 3" in text and "talos.log" in text and "lost.log" in text
    assert "FELL" in text and "stale_clock 4" in text


def test_contact_benchmark_smoke_run_on_solo12():
    """A short ``bench contact`` on solo12 in its own process (Pinocchio on one thread): every row is printed,
    and every result, the batched contact linearization's A, B and x+ included, matches Pinocchio's (the batch
    against constraintDynamics + its derivatives chained through the Euler step) to 1e-9."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "rbd_deriv.bench", "contact", "--quick", "--robots", "solo12"],
                         env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.split("|")]
                                             for line in run.stdout.splitlines() if line.count("|") == 6)}
    checked = ["contact_dynamics", "contact_dynamics_derivatives", "impulse_dynamics",
               "impulse_dynamics_derivatives", "linearize_batch K=32 (per state)"]
    for name in checked + ["the same, against the derivatives alone"]:
        ours, theirs, ratio = (float(rows[name][k]) for k in range(3))
        assert ours > 0.0 and theirs > 0.0 and math.isclose(ratio, ours / theirs, rel_tol=0.01), (name, rows[name])
    for name in checked:
        assert float(rows[name][-1]) < 1e-9, (name, rows[name])


def test_fleet_benchmark_smoke_run(tmp_path, capsys):
    """``bench fleet`` on two short bags (Ray left out: its engine is tested in test_fleet_cli): the loop and both
    local runs are printed with their ratio to the loop, the target line follows, and the bags are cached."""
    from rbd_deriv.bench import fleet as fleet_bench

    assert fleet_bench.main(["--bags", "2", "--seconds", "0.4", "--rate", "250", "--cache", str(tmp_path),
                             "--no-ray"]) == 0
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        for label in ("bag-eval loop", "local, 1 worker", "local, 2 workers"):
            if line.startswith(label):
                rows[label] = [float(cell) for cell in line[len(label):].split()]
    assert set(rows) == {"bag-eval loop", "local, 1 worker", "local, 2 workers"}
    loop_s = rows["bag-eval loop"][0]
    for label, (wall, per_bag, ratio, load) in rows.items():
        assert wall > 0 and per_bag == pytest.approx(wall / 2, abs=0.006) and ratio == pytest.approx(wall / loop_s, rel=0.01)
    assert "target: local, 2 workers <= 0.55 of the loop" in out and "ray: skipped (--no-ray)" in out
    folder, bags, writing = fleet_bench.cached_fleet(tmp_path, 2, 0.4, 250.0)
    assert writing == 0.0 and all((bag / "metadata.yaml").is_file() for bag in bags)
