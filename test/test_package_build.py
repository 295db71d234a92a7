"""The ROS 2 package as a colcon workspace builds it (CMakeLists.txt, package.xml), the way docs/ros.md says.

A copy of the repository is built by ``colcon build`` in a temporary workspace with this environment (the
PyPI ROS 2 wheels) as the underlay. Checked: the install step compiled the kernels and verified that nothing
is left to compile at import (``python -m rbd_deriv.precompile --check`` in the install space), the installed
layout (executables, share files, setup.bash, no C sources in site-packages), and the dynamics node started
from the install space publishes a linearization without compiling anything (no kernel it calls is left by
the build to its first use).

This environment holds the package as an editable pip install, whose import hook would put the source tree
in front of any workspace (docs/ros.md: do not install both in one environment). The test takes the hook out
the way a separate underlay would (rbd_deriv.testing.editable).

The kernel cache of this build is a hard-linked copy of this environment's (same sources, same machine, so the
same key), handed over by RBD_DERIV_CACHE_DIR: the install step's check then loads instead of compiling for
minutes. Compiling into a fresh cache is covered by test_jit_cache.py (three processes on an empty cache).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rbd_deriv import jit_cache
from rbd_deriv.bench.startup import cache_state, compiled_between
from rbd_deriv.testing.editable import hook_free_path

REPOSITORY = jit_cache.PACKAGE_DIR.parent
COLCON = shutil.which("colcon", path=os.path.dirname(sys.executable))
PYTHON_DIR = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"

pytestmark = pytest.mark.skipif(COLCON is None, reason="colcon not installed (pip install colcon-common-extensions)")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """(workspace, environment, build log) after colcon build of a copy of the repository."""
    root = tmp_path_factory.mktemp("colcon")
    source = root / "ws" / "src" / "rbd_deriv"
    shutil.copytree(REPOSITORY, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "install", "log", "__pycache__", jit_cache.CACHE_FOLDER, "*.so",
        ".pytest_cache", "*.png"))
    no_hook = hook_free_path(root / "no_editable_hook")
    cache = root / "cache"
    shutil.copytree(jit_cache.STATE.folder, cache / jit_cache.STATE.key, copy_function=os.link)
    environment = dict(os.environ)
    environment.pop(jit_cache.ROLE_VARIABLE, None)
    environment.update(
        VIRTUAL_ENV=sys.prefix, AMENT_PREFIX_PATH=sys.prefix, CMAKE_PREFIX_PATH=sys.prefix,
        PATH=os.pathsep.join([os.path.dirname(sys.executable), environment.get("PATH", "")]),
        PYTHONPATH=no_hook, RBD_DERIV_CACHE_DIR=str(cache))
    completed = subprocess.run([COLCON, "build", "--event-handlers", "console_direct+"], cwd=root / "ws",
                               env=environment, capture_output=True, text=True, timeout=1800)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log[-5000:]
    return root / "ws", environment, log


def test_install_step_compiles_and_checks_the_kernels(workspace):
    _, _, log = workspace
    assert "rbd_deriv: numba kernels of the install space" in log
    assert "every kernel compiled at import was loaded from the cache" in log


def test_installed_layout(workspace):
    ws, _, _ = workspace
    install = ws / "install"
    assert (install / "setup.bash").is_file() and (install / "local_setup.bash").is_file()
    for name in ("dynamics_node", "mpc_node", "sim_node"):
        executable = install / "rbd_deriv" / "lib" / "rbd_deriv" / name
        assert executable.is_file() and os.access(executable, os.X_OK), executable
    share = install / "rbd_deriv" / "share" / "rbd_deriv"
    for relative in ("package.xml", "launch/dynamics.launch.py", "launch/dynamics_listen.launch.py",
                     "launch/demo.launch.py", "config/dynamics_node.yaml", "config/mpc_node.yaml",
                     "config/sim_node.yaml", "config/demo.yaml", "urdf/rbd_arm7.urdf",
                     "msg/Linearization.msg", "srv/ComputeDerivatives.srv"):
        assert (share / relative).is_file(), relative
    index = install / "rbd_deriv" / "share" / "ament_index" / "resource_index" / "packages" / "rbd_deriv"
    assert index.is_file()
    package = install / "rbd_deriv" / PYTHON_DIR / "rbd_deriv"
    assert (package / "jit_cache.py").is_file() and (package / "msg" / "__init__.py").is_file()
    assert list(package.glob("_kernelcall*.so")), "the C extension is built and installed"
    assert not list(package.rglob("*.c")), "C sources are not installed"
    assert not (package / jit_cache.CACHE_FOLDER).exists(), "the cache went where RBD_DERIV_CACHE_DIR says"


def test_dynamics_node_from_the_install_space_publishes(workspace):
    from rbd_deriv.bench.latency import first_linearization

    ws, environment, _ = workspace
    install = ws / "install"
    share = install / "rbd_deriv" / "share" / "rbd_deriv"
    environment = dict(environment, ROS_DOMAIN_ID=str(random.randint(150, 230)),
                       ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    # What the node imports after sourcing the workspace: the installed package.
    where = subprocess.run(["bash", "-c", f"source {install}/setup.bash && python -c "
                            "'import rbd_deriv, rbd_deriv.msg; print(rbd_deriv.__file__)'"],
                           env=environment, capture_output=True, text=True, timeout=300, cwd=ws)
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.strip().startswith(str(install / "rbd_deriv" / PYTHON_DIR)), where.stdout
    command = ["bash", "-c", f"source {install}/setup.bash && exec {install}/rbd_deriv/lib/rbd_deriv/dynamics_node"
               f" --ros-args -p urdf_path:={share}/urdf/rbd_arm7.urdf"]
    folder = Path(environment["RBD_DERIV_CACHE_DIR"]) / jit_cache.STATE.key
    before = cache_state(folder)
    start = time.monotonic()
    seconds = first_linearization(command, environment, [f"joint{k}" for k in range(1, 8)], timeout=600.0)
    assert 0.0 < seconds <= time.monotonic() - start
    assert compiled_between(before, cache_state(folder)) == [], "the node's start compiled a kernel"
    print(f"dynamics node from the install space: first linearization {seconds:.1f} s after start")
