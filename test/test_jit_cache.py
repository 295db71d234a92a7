"""Tests of rbd_deriv.jit_cache: the key of the kernel cache, where it lives, and a fresh cache under load.

The scenario that numba's own cache gets wrong: a constant of one module (constants.QUATERNION_TOLERANCE) is
compiled into a kernel of another (kinematics), so changing it leaves the kernel's source file untouched. A
copy of the package with that constant changed, started as three processes at once on an empty cache, must
compile once (the other two wait for it) and all three must run the new value.
"""

from __future__ import annotations

import ast
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
from rbd_deriv import jit_cache
from rbd_deriv.core import constants as core_constants
from rbd_deriv.core import rnea
from rbd_deriv.testing.editable import hook_free_path

PACKAGE = Path(rd.__file__).resolve().parent
# The repository holding this test: the bundled robots are not beside an installed package (a colcon install
# space puts them in share/).
REPOSITORY = Path(__file__).resolve().parents[1]
CONSTANT_LINE = "QUATERNION_TOLERANCE = 1e-6"

# Run in each child: is a quaternion of norm 1.01 accepted by the compiled input check?
PROBE = textwrap.dedent("""
    import json
    import rbd_deriv as rd
    from rbd_deriv import jit_cache
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    q = rd.neutral(model)
    q[3:7] *= 1.01
    try:
        rd.forward_kinematics(model, model.create_data(), q)
        accepted = True
    except rd.InputError:
        accepted = False
    print("PROBE " + json.dumps({"package": rd.__file__, "accepted": accepted,
                                 "folder": str(jit_cache.STATE.folder)}))
""")


def copy_package(destination: Path) -> Path:
    """The package's sources and the bundled robots under ``destination``; returns the package folder."""
    ignore = shutil.ignore_patterns("__pycache__", jit_cache.CACHE_FOLDER, "*.so")
    shutil.copytree(PACKAGE, destination / "rbd_deriv", ignore=ignore)
    shutil.copytree(REPOSITORY / "urdf", destination / "urdf")
    return destination / "rbd_deriv"


def test_key_follows_the_kernels_sources_and_what_they_import_only(tmp_path):
    copy = copy_package(tmp_path)
    key, description = jit_cache.build_key(PACKAGE)
    assert jit_cache.build_key(copy)[0] == key, "the key depends on the content, not the location"
    assert description["numba"] and description["cpu"] and description["target"]

    constants = copy / "core" / "constants.py"
    text = constants.read_text()
    constants.write_text(text.replace(CONSTANT_LINE, "QUATERNION_TOLERANCE = 2e-6"))
    changed = jit_cache.build_key(copy)[0]
    assert changed != key, "a constant read by a kernel of another file must change the key"
    constants.write_text(text)
    assert jit_cache.build_key(copy)[0] == key

    # Files no kernel module imports: the ROS layer, the pipeline, the MPC loop, the simulator.
    for outside in ("nodes/dynamics_node.py", "pipeline.py", "control/loop.py", "sim/plant.py", "messages.py"):
        (copy / outside).write_text((copy / outside).read_text() + "\n# edited\n", encoding="utf-8")
        assert jit_cache.build_key(copy)[0] == key, f"{outside} is compiled into no kernel"
    # Read by kernels: a kernel module itself, a module a kernel module imports (exceptions: the checks'
    # messages), and the MPC's numba kernels and their constants.
    for inside in ("core/batch.py", "exceptions.py", "core/model.py", "control/riccati.py", "control/constants.py"):
        original = (copy / inside).read_text()
        (copy / inside).write_text(original + "\n# edited\n", encoding="utf-8")
        assert jit_cache.build_key(copy)[0] != key, f"{inside} is read by kernels"
        (copy / inside).write_text(original, encoding="utf-8")
    # A new kernel module brings its imports into the key, relative ones too.
    (copy / "sim" / "kernel.py").write_text("import numba\nfrom ..messages import DynamicsMessages\n")
    with_kernel = jit_cache.build_key(copy)[0]
    assert with_kernel != key
    (copy / "messages.py").write_text((copy / "messages.py").read_text() + "\n# again\n", encoding="utf-8")
    assert jit_cache.build_key(copy)[0] != with_kernel, "messages.py is now imported by a kernel module"


def _parsed_module(path: Path, package_dir: Path):
    """Oracle of jit_cache._read_module from Python's parser: (top-level numba import, package files imported
    at any level)."""
    tree = ast.parse(path.read_bytes())
    name = jit_cache._module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    root = any(isinstance(node, ast.Import) and any(a.name.split(".")[0] == "numba" for a in node.names)
               or isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("numba")
               for node in tree.body)
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = (".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                    if node.level else node.module)
            targets += [f"{base}.{a.name}" if jit_cache._module_file(f"{base}.{a.name}", package_dir) else base
                        for a in node.names]
    return root, {f for t in targets if (f := jit_cache._module_file(t, package_dir)) is not None}


def test_the_text_scan_of_imports_agrees_with_the_parser(tmp_path):
    """The key's import scan reads source text (fast at every import); on every file of the package, and on
    the forms a parser would see differently from a careless scan, it finds what Python's parser finds, or
    more (an import quoted in a docstring counts, which only widens the key)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/__init__.py", "sub/e.py"):
        (package / name).write_text("")
    (package / "sub" / "k.py").write_text(textwrap.dedent("""
        import numba as nb, numpy
        from .. import a  # comment
        from ..b import (  # noqa
            X,  # a comment, with a comma
            Y as Z,
        )
        from pkg import c, \\
            d
        from . import e

        def f():
            import pkg.sub
    """))
    for path in [*PACKAGE.rglob("*.py"), package / "sub" / "k.py"]:
        if "__pycache__" in path.parts or jit_cache.CACHE_FOLDER in path.parts:
            continue
        folder = package if path.is_relative_to(package) else PACKAGE
        root, imported = jit_cache._read_module(path, folder)
        parsed_root, parsed = _parsed_module(path, folder)
        assert root == parsed_root, path
        assert imported >= parsed, (path, parsed - imported)
    root, imported = jit_cache._read_module(package / "sub" / "k.py", package)
    assert root and {p.relative_to(package).as_posix() for p in imported} == {
        "a.py", "b.py", "c.py", "d.py", "sub/e.py", "sub/__init__.py"}


def test_this_process_loads_kernels_from_its_complete_key_folder():
    folder = jit_cache.STATE.folder
    assert folder is not None and folder.name == jit_cache.build_key()[0]
    assert (folder / jit_cache.COMPLETE).is_file()
    # The kernels' numba caches sit in the key folder, mirroring the package's subfolders; a kernel's C entry
    # beside the kernel. RNEA is built (not lazy), so it is there whatever this process called before.
    cache_path = Path(rnea._rnea_kernel.stats.cache_path)
    assert cache_path == folder / "core"
    assert any(cache_path.glob("rnea._rnea_kernel-*.nbi"))
    assert any(cache_path.glob("rnea._rnea_kernel_entry-*.nbi"))


def test_is_cached_reads_the_key_folders_index():
    from rbd_deriv.core import calling, crba

    # CRBA is compiled by the build: its entry is in the complete folder, for the entry's signature only.
    entry = calling._entry_function(crba.CRBA.kernel, crba.CRBA.spec, crba.CRBA.kernel.__name__ + "_entry")
    assert jit_cache.is_cached(entry, calling.ENTRY_SIGNATURE)
    assert not jit_cache.is_cached(entry, calling.types.int64(calling.types.CPointer(calling.types.int64)))
    assert jit_cache.is_cached(crba.CRBA.kernel.py_func, crba.CRBA.signature.args)

    def never_compiled(x):
        return x

    assert not jit_cache.is_cached(never_compiled, (calling.types.float64,))


def test_cache_root_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("RBD_DERIV_CACHE_DIR", str(tmp_path / "mine"))
    assert jit_cache.cache_root("k") == tmp_path / "mine"
    monkeypatch.delenv("RBD_DERIV_CACHE_DIR")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert jit_cache.cache_root("k") == tmp_path / "numba" / "rbd_deriv"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    writable = tmp_path / "package"
    writable.mkdir()
    assert jit_cache.cache_root("k", writable) == writable / jit_cache.CACHE_FOLDER
    if os.geteuid() != 0:  # root writes anywhere
        read_only = tmp_path / "read_only"
        read_only.mkdir()
        read_only.chmod(0o555)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert jit_cache.cache_root("k", read_only) == tmp_path / "xdg" / "rbd_deriv"


def test_prune_keeps_the_current_key_and_folders_being_built(tmp_path):
    for key in ("old", "current", "building"):
        (tmp_path / key).mkdir()
        (tmp_path / f"{key}.lock").touch()
    with jit_cache.file_lock(tmp_path / "building.lock"):
        # flock locks belong to an open file: a second open in this process is refused like another process
        removed = jit_cache.prune(tmp_path, keep="current")
    assert removed == ["old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["building", "building.lock", "current", "current.lock"]


def test_three_processes_on_an_empty_cache_compile_once_and_run_a_changed_constant(tmp_path):
    copy = copy_package(tmp_path / "source")
    constants = copy / "core" / "constants.py"
    assert CONSTANT_LINE in constants.read_text(), "the probed constant moved: update this test"
    constants.write_text(constants.read_text().replace(CONSTANT_LINE, "QUATERNION_TOLERANCE = 0.5"))
    cache = tmp_path / "cache"
    no_hook = hook_free_path(tmp_path / "no_editable_hook")
    environment = dict(os.environ, RBD_DERIV_CACHE_DIR=str(cache),
                       PYTHONPATH=os.pathsep.join([no_hook, str(copy.parent)]))
    environment.pop(jit_cache.ROLE_VARIABLE, None)
    processes = [subprocess.Popen([sys.executable, "-c", PROBE], env=environment, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=tmp_path) for _ in range(3)]
    outputs = [process.communicate(timeout=1500) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
    reports = [json.loads(next(line for line in stdout.splitlines() if line.startswith("PROBE "))[6:])
               for stdout, _ in outputs]
    assert all(Path(report["package"]).parent == copy for report in reports)
    assert all(report["accepted"] for report in reports), "a process ran kernels of the old constant"
    builds = sum(stderr.count("kernels for this machine and these sources") for _, stderr in outputs)
    waits = sum("waiting for it" in stderr for _, stderr in outputs)
    assert builds == 1, [stderr[-2000:] for _, stderr in outputs]
    assert waits == 2, "the two other processes say that they wait"
    folders = {report["folder"] for report in reports}
    assert len(folders) == 1 and (Path(folders.pop()) / jit_cache.COMPLETE).is_file()
    assert not list(cache.rglob("*.tmp.*")), "no half-written cache file is left"

    # This process runs the original constant from its own cache: the same state is refused.
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    q = rd.neutral(model)
    q[3:7] *= 1.01
    with pytest.raises(rd.InputError, match="quaternion"):
        rd.forward_kinematics(model, model.create_data(), q)
    assert np.isclose(core_constants.QUATERNION_TOLERANCE, 1e-6)
