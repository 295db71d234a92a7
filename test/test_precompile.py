"""Tests of rbd_deriv.precompile: what a build leaves behind, and which modules it compiles.

The build of this environment's cache (``./run setup``) must leave nothing to compile at import, which
``python -m rbd_deriv.precompile --check`` verifies from numba's own cache statistics. The modules left out
of the cache key (rbd_deriv.jit_cache.NOT_KERNEL_SOURCES) must define no kernel, which importing them in a
build's process (kernels recorded, not compiled) shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from rbd_deriv import jit_cache

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
    names, _ = precompile.discover_modules()
    print("KERNELS " + json.dumps({"modules": sorted({jit_cache.kernel_module(k) for k in jit_cache.pending()}),
                                   "skipped": skipped}))
""")


def test_nothing_compiles_at_import_after_the_build():
    completed = subprocess.run([sys.executable, "-m", "rbd_deriv.precompile", "--check"], capture_output=True,
                               text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    assert "loaded from the cache" in completed.stdout
    assert "compiling" not in completed.stderr, "the build left kernels to compile"


def test_kernels_are_found_and_none_is_in_a_module_left_out_of_the_key(tmp_path):
    environment = dict(os.environ, **{jit_cache.ROLE_VARIABLE: str(tmp_path / "key")})
    completed = subprocess.run([sys.executable, "-c", LIST_KERNELS], env=environment, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("KERNELS "))[8:])
    modules = report["modules"]
    assert {"rbd_deriv.core.kinematics", "rbd_deriv.core.rnea", "rbd_deriv.core.aba", "rbd_deriv.core.configuration"} <= set(modules)
    left_out = [m for m in modules if m.split(".")[1] in jit_cache.NOT_KERNEL_SOURCES]
    assert not left_out, f"kernels defined outside the cache key: {left_out}"
    # Recording is all a build's process does at import: nothing was compiled or cached.
    assert not list(tmp_path.rglob("*.nbi"))
