"""Tests of rbd_deriv.precompile: what a build leaves behind, which kernels it compiles, in which order.

The build of this environment's cache (``./run setup``) must leave nothing to compile at import, which
``python -m rbd_deriv.precompile --check`` verifies from numba's own cache statistics, nor on an MPC's first
ticks (the solver's kernels, compiled by a hook). The kernels registered ``lazy=True`` are left out of it:
their first call compiles them, saying so. Every module that defines a kernel must be in
the cache key (rbd_deriv.jit_cache.kernel_sources), and the subpackages a build does not import
(rbd_deriv.jit_cache.NOT_KERNEL_SOURCES) must define none, which importing them in a build's process (kernels
recorded, not compiled) shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv import jit_cache, precompile
from rbd_deriv.bench.startup import cache_state, compiled_between

LIST_KERNELS = textwrap.dedent("""
    import importlib, json, pkgutil
    from rbd_deriv import jit_cache
    skipped = {}
    for package in jit_cache.NOT_KERNEL_SOURCES:
        folder = jit_cache.PACKAGE_DIR / package
        for module in pkgutil.walk_packages([str(folder)], f"rbd_deriv.{package}."):
            try:
                importlib.import_module(module.name)
            except ImportError as error:
                skipped[module.name] = str(error)
    from rbd_deriv import precompile
    from rbd_deriv.core import calling
    names, _ = precompile.discover_modules()
    crba_entry = "rbd_deriv.core.crba._crba_kernel_entry"
    print("KERNELS " + json.dumps({
        "modules": sorted({jit_cache.kernel_module(k) for k in jit_cache.pending()}), "skipped": skipped,
        "tasks": precompile._tasks(names), "lazy": {name: r.lazy for name, r in calling.REGISTRY.items()},
        "crba_reaches": sorted(precompile._reached_by_task([crba_entry])[crba_entry])}))
""")


def test_nothing_compiles_at_import_after_the_build():
    completed = subprocess.run([sys.executable, "-m", "rbd_deriv.precompile", "--check"], capture_output=True,
                               text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    assert "loaded from the cache" in completed.stdout
    assert "compiling" not in completed.stderr, "the build left kernels to compile"
    lazy = next(line for line in completed.stdout.splitlines() if line.startswith("compiled at their first use"))
    assert "rnea._nle_kernel" in lazy and "contact._impulse_kernel" not in lazy


MPC_TICKS = textwrap.dedent("""
    import json, numpy as np
    from rbd_deriv import precompile
    from rbd_deriv.control.mpc import HeldLinearization, ModelPredictiveController
    from rbd_deriv.control.problem import Mode, MPCProblem
    nv = 7
    problem = MPCProblem(joint_names=tuple(f"joint{k}" for k in range(1, 8)), horizon=20, dt=0.01,
                         torque_lower=np.full(nv, -5.0), torque_upper=np.full(nv, 5.0),
                         state_lower=np.full(2 * nv, -2.0), state_upper=np.full(2 * nv, 2.0),
                         position_weight=np.full(nv, 10.0), velocity_weight=np.full(nv, 0.1),
                         torque_weight=np.full(nv, 0.01), mode=Mode.HELD, max_iterations=3)
    controller = ModelPredictiveController(problem)
    rng = np.random.default_rng(1)
    held = HeldLinearization(A=np.eye(2 * nv) + 0.01 * rng.standard_normal((2 * nv, 2 * nv)),
                             B=0.1 * rng.standard_normal((2 * nv, nv)), x=np.zeros(2 * nv), u=np.zeros(nv),
                             x_next=0.01 * rng.standard_normal(2 * nv), dt=0.01)
    for tick in range(5):
        plan = controller.solve(0.3 * rng.standard_normal(2 * nv), 0.01 * tick, held)
    print("MPC " + json.dumps({"ok": bool(plan.ok), "compiled": precompile.compiled_at_import()}))
""")


def test_an_mpc_loads_its_solver_kernels_from_the_build():
    # The build's hook (rbd_deriv.control.mpc.precompile_kernels) solves a 2-joint problem; a 7-joint one with
    # a longer horizon and clamped torques must find the same machine code in the cache.
    before = cache_state(jit_cache.STATE.folder)
    completed = subprocess.run([sys.executable, "-c", MPC_TICKS], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("MPC "))[4:])
    assert report["ok"] and report["compiled"] == []
    assert compiled_between(before, cache_state(jit_cache.STATE.folder)) == []


def test_a_lazy_kernel_compiles_at_its_first_call_and_says_so(tmp_path):
    # A copy of this environment's cache without nonlinear_effects' machine code: its first call compiles it, once.
    cache = tmp_path / "cache"
    arm = rd.load_urdf(rd.bundled_urdf("rbd_arm7"))
    # Its machine code is in this environment's cache once some process has called it: this one, here.
    rd.nonlinear_effects(arm, arm.create_data(), rd.neutral(arm), np.zeros(arm.nv))
    shutil.copytree(jit_cache.STATE.folder, cache / jit_cache.STATE.key, copy_function=os.link)
    removed = [path for path in (cache / jit_cache.STATE.key / "core").glob("rnea._nle_kernel*")]
    assert removed
    for path in removed:
        path.unlink()
    call = ("import numpy as np, rbd_deriv as rd; model = rd.load_urdf(rd.bundled_urdf('rbd_arm7'));"
            "print(rd.nonlinear_effects(model, model.create_data(), rd.neutral(model), np.zeros(7)).tolist())")
    environment = dict(os.environ, RBD_DERIV_CACHE_DIR=str(cache))
    environment.pop(jit_cache.ROLE_VARIABLE, None)
    runs = [subprocess.run([sys.executable, "-c", call], env=environment, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    gravity = rd.gravity_torques(arm, arm.create_data(), rd.neutral(arm)).tolist()  # nle at rest
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        np.testing.assert_allclose(json.loads(run.stdout.splitlines()[-1]), gravity, rtol=1e-12, atol=1e-12)
    assert "compiling rnea._nle_kernel at its first use" in runs[0].stderr
    assert "rnea._nle_kernel compiled in" in runs[0].stderr
    assert "compiling" not in runs[1].stderr, "the second process loads it"


def test_schedule_takes_the_largest_work_that_waits_for_no_running_task():
    reached = {
        "big": {"shared": 5.0, "big_own": 20.0},
        "medium": {"shared": 5.0, "medium_own": 12.0},
        "apart": {"apart_own": 9.0},
        "small": {"small_own": 1.0},
    }
    schedule = precompile.Schedule(reached)
    assert schedule.take() == "big"
    # medium would wait for "shared" (being compiled by big): 12 - 5 < 9
    assert schedule.take() == "apart"
    schedule.finish("apart")
    assert schedule.take() == "medium"  # 12 - 5 = 7 > 1: still the larger work
    schedule.finish("big")
    schedule.finish("medium")
    assert schedule.take() == "small"
    assert schedule.take() is None
    assert schedule.compiled == {"shared", "big_own", "medium_own", "apart_own"}


def test_kernels_are_found_and_none_is_in_a_module_left_out_of_the_key(tmp_path):
    environment = dict(os.environ, **{jit_cache.ROLE_VARIABLE: str(tmp_path / "key")})
    completed = subprocess.run([sys.executable, "-c", LIST_KERNELS], env=environment, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("KERNELS "))[8:])
    modules = report["modules"]
    assert {"rbd_deriv.core.crba", "rbd_deriv.core.rnea", "rbd_deriv.core.aba", "rbd_deriv.core.configuration"} <= set(modules)
    left_out = [m for m in modules if m.split(".")[1] in jit_cache.NOT_KERNEL_SOURCES]
    assert not left_out, f"kernels defined in modules a build does not import: {left_out}"
    keyed = {jit_cache._module_name(path, jit_cache.PACKAGE_DIR) for path in jit_cache.kernel_sources()}
    assert set(modules) <= keyed, f"kernels defined outside the cache key: {set(modules) - keyed}"
    # One task per C entry of a kernel that is not lazy, and the MPC solvers' hooks; the lazy kernels are left out.
    built = {f"rbd_deriv.core.{name.split('.')[0]}.{name.split('.')[1]}_entry"
             for name, lazy in report["lazy"].items() if not lazy}
    hooks = {f"hook:rbd_deriv.control.{module}" for module in (
        "mpc", "euler_riccati", "state_space", "residuals", "task_residuals", "orientation_residual",
        "contact_force", "activation", "constraints", "dynamics")}
    assert set(report["tasks"]) == built | hooks
    assert {"rnea._rnea_kernel", "linearization._linearize_kernel", "contact._contact_kernel",
            "contact._impulse_kernel", "configuration._difference_kernel"} <= {
        name for name, lazy in report["lazy"].items() if not lazy}
    assert {"rnea._nle_kernel"} <= {name for name, lazy in report["lazy"].items() if lazy}
    # What the schedule weighs a kernel by: its entry, the kernel and the helpers it calls.
    assert {"rbd_deriv.core.crba._crba_kernel_entry", "rbd_deriv.core.crba._crba_kernel",
            "rbd_deriv.core.calling.check_position_matrix"} <= set(report["crba_reaches"])
    # Recording is all a build's process does at import: nothing was compiled or cached.
    assert not list(tmp_path.rglob("*.nbi"))
