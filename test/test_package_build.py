"""The ROS 2 package as a colcon workspace builds it (CMakeLists.txt, package.xml), the way docs/ros.md says.

docs/ros.md's "Without a ROS installation" is followed as a user would: a new virtual environment made by the
page's own ``pip install`` command (read from the page, so the two cannot drift apart) is the underlay; a new
workspace holds a copy of this repository; ``colcon build --packages-select rbd_deriv`` runs in a terminal
where nothing is sourced, only that environment activated, twice (a build, then a rebuild). Neither the
underlay nor the workspace has seen the package before: the test environment (an editable pip install, with
``share/rbd_deriv`` in its prefix) is left out entirely.

Checked: the install step compiled the kernels and verified that nothing is left to compile at import
(``python -m rbd_deriv.precompile --check`` in the install space), both builds pass, the installed layout
(executables, share files, setup.bash, no C sources in site-packages), and the dynamics node started from the
install space publishes a linearization without compiling anything.

The underlay costs its downloads (docs/ros.md, Tests, gives the times); the kernel cache of the build is a
hard-linked copy of this environment's (same sources, same machine, same numba: the same key) handed over by
RBD_DERIV_CACHE_DIR, so the install step's check loads instead of compiling for minutes (with other versions
in the underlay the key differs and the build compiles). Compiling into a fresh cache is covered by
test_jit_cache.py (three processes on an empty cache).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rbd_deriv import jit_cache
from rbd_deriv.bench.startup import cache_state, compiled_between

REPOSITORY = Path(__file__).resolve().parents[1]
PYTHON_DIR = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def documented_underlay_requirements() -> list:
    """The arguments of the ``pip install`` of docs/ros.md's section on building without a ROS installation."""
    page = (REPOSITORY / "docs" / "ros.md").read_text(encoding="utf-8")
    section = page.split("### Without a ROS installation", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    command = next(line for line in block.splitlines() if line.strip().startswith("pip install "))
    return shlex.split(command)[2:]


def unsourced_terminal(underlay: Path, cache: Path) -> dict:
    """The environment of a new terminal with the underlay activated and docs/ros.md's exports: nothing of
    this test's environment (its venv's PATH, PYTHONPATH, loader path, AMENT_PREFIX_PATH) comes along."""
    system_path = [entry for entry in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                   if entry and not entry.startswith(sys.prefix)]
    environment = {key: os.environ[key] for key in ("HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TERM")
                   if key in os.environ}
    environment.update(PATH=os.pathsep.join([str(underlay / "bin"), *system_path]), VIRTUAL_ENV=str(underlay),
                       AMENT_PREFIX_PATH=str(underlay), CMAKE_PREFIX_PATH=str(underlay),
                       RBD_DERIV_CACHE_DIR=str(cache))
    return environment


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """(workspace, environment, logs of both builds) after colcon build, then a rebuild, of a copy of the
    repository against an underlay made from docs/ros.md."""
    root = tmp_path_factory.mktemp("colcon")
    underlay = root / "venv"
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(underlay)], check=True, timeout=300)
    python = underlay / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *documented_underlay_requirements()],
                               capture_output=True, text=True, timeout=1800)
    assert installed.returncode == 0, installed.stderr[-5000:]
    underlay_seconds = time.monotonic() - start
    assert not (underlay / "share" / "rbd_deriv").exists()

    source = root / "ws" / "src" / "rbd_deriv"
    shutil.copytree(REPOSITORY, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "install", "log", "__pycache__", jit_cache.CACHE_FOLDER, "*.so",
        ".pytest_cache", "*.png"))
    cache = root / "cache"
    shutil.copytree(jit_cache.STATE.folder, cache / jit_cache.STATE.key, copy_function=os.link)
    environment = unsourced_terminal(underlay, cache)
    never_seen = subprocess.run([str(python), "-c", "import rbd_deriv"], env=environment, cwd=root,
                                capture_output=True, text=True, timeout=300)
    assert never_seen.returncode != 0 and "No module named 'rbd_deriv'" in never_seen.stderr, never_seen.stderr
    logs = []
    for what in ("build", "rebuild"):
        start_build = time.monotonic()
        completed = subprocess.run(["colcon", "build", "--packages-select", "rbd_deriv",
                                    "--event-handlers", "console_direct+"], cwd=root / "ws", env=environment,
                                   capture_output=True, text=True, timeout=1800)
        log = completed.stdout + completed.stderr
        assert completed.returncode == 0, log[-5000:]
        logs.append(log)
        print(f"colcon {what}: {time.monotonic() - start_build:.0f} s")
    print(f"underlay from docs/ros.md: {underlay_seconds:.0f} s")
    return root / "ws", environment, logs


def test_install_step_compiles_and_checks_the_kernels(workspace):
    _, _, logs = workspace
    for log in logs:
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


def test_the_install_space_finds_its_robots_unsourced(workspace):
    """The installed package finds its bundled robot in its own install space, the workspace not sourced (the
    install step's kernel check needs it before any setup.bash exists)."""
    ws, environment, _ = workspace
    install = ws / "install" / "rbd_deriv"
    found = subprocess.run(["python", "-c", "from rbd_deriv import bundled_urdf; print(bundled_urdf('rbd_arm7'))"],
                           env=dict(environment, PYTHONPATH=str(install / PYTHON_DIR)), cwd="/",
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr[-3000:]
    assert Path(found.stdout.strip()) == install / "share" / "rbd_deriv" / "urdf" / "rbd_arm7.urdf"


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
