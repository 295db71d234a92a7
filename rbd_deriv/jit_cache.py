"""Where the compiled kernels are cached, under which key, and what happens when they are not there yet.

numba's own cache keys each function by its own source file and bytecode. A kernel whose file did not change
keeps machine code compiled against whatever it read from other modules at the time (a constant, a workspace
layout, a helper of another file), so after an edit or an upgrade it would run stale code. Here every kernel
of the package is cached under one *build key* instead: a hash of every source file a kernel can read (the
modules that import numba and every package module they import, directly or not: :func:`kernel_sources`), numba's, llvmlite's, numpy's and Python's
versions, numba's code-generation settings and the CPU (numba's target triple, CPU name and features). Any
change gives another directory, so machine code is only ever loaded for the exact sources it was compiled
from, however the package was installed or rebuilt.

Layout under the cache *root* (see :func:`cache_root`)::

    <root>/<key>/             numba's index (.nbi) and data (.nbc) files, one subfolder per package folder
    <root>/<key>/COMPLETE     written last by a full build: every kernel compiled at import is in the folder
    <root>/<key>.lock         held while a process builds the folder

``import rbd_deriv`` calls :func:`activate` before any kernel module is imported. With the key's folder
complete, the import only loads machine code (about two seconds). Otherwise the first process to take the
lock builds it (:mod:`rbd_deriv.precompile`: the kernels in parallel processes, progress on stderr); others
starting meanwhile say that they wait, wait for the lock, then load. A kernel compiled later, at its first
call (one registered ``lazy=True``, which the build leaves out, or a numba function without signature), is
added to the folder: numba rewrites a function's index file on each
save, so saves to the folder are serialized by a lock (two processes saving two signatures of one function
at once could otherwise pair an index entry with the other's data file).

``python -m rbd_deriv.precompile`` (run by ``./run setup`` and by the colcon install step) builds the folder
ahead of time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

PACKAGE_DIR = Path(os.path.abspath(os.path.dirname(__file__)))
"""The package folder as Python imported it (symlinks kept: a colcon --symlink-install links each file)."""

NOT_KERNEL_SOURCES = ("nodes", "bench", "testing", "msg", "srv")
"""Subpackages that define no kernel (the ROS layer, benchmarks, test oracles, the interfaces' generated
modules, which a colcon install puts in the package folder and a pip install beside it): a build does not
import them. test_precompile.py checks that none of them defines a kernel."""

HOOK = "precompile_kernels"
"""Name of a module's function that compiles its kernels without signatures by calling them."""

CACHE_FOLDER = "__jitcache__"
"""Name of the cache root inside the package folder."""

COMPLETE = "COMPLETE"
"""File written last into a key's folder by a full build (its content: what the key was made of, in JSON)."""

ROLE_VARIABLE = "RBD_DERIV_JIT_BUILD"
"""Set (to the folder being built) in the processes of a build: kernels are then compiled when the build asks,
not at import."""

PROGRESS_PERIOD = 15.0
"""Seconds between two "still compiling" or "still waiting" lines on stderr."""


def _say(text: str) -> None:
    print(f"rbd_deriv: {text}", file=sys.stderr, flush=True)


def _module_file(name: str, package_dir: Path) -> Optional[Path]:
    """The file of the package's module ``name`` (``rbd_deriv.core.rnea``), None for another package's."""
    parts = name.split(".")
    if parts[0] != package_dir.name:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, package_dir: Path) -> str:
    relative = path.relative_to(package_dir).with_suffix("")
    parts = [package_dir.name, *relative.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_IMPORT = re.compile(r"^[ \t]*import[ \t]+((?:[\w. \t,]|\\\n)+)", re.M)
"""``import a.b [as c], d``: the modules after ``import`` (backslash continuations included)."""

_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|(?:[^\\\n]|\\[\s\S])*)", re.M)
"""``from [dots]a.b import c [as d], e``, parenthesized or continued by backslashes over several lines."""

_ROOT = re.compile(r"^(?:import|from)[ \t]+numba\b", re.M)
"""A top-level (unindented) import of numba."""


def _read_module(path: Path, package_dir: Path) -> Tuple[bool, Set[Path]]:
    """(is a root, the package files it imports) of one source file. A root imports numba at its top level;
    its imports are all of them, at any level (a function may import). ``from a import b`` counts as
    importing a's file only when b is not a module of its own: a kernel reads the names it imports, not the
    package that holds them.

    The source is scanned as text, not parsed (parsing and walking the package's trees took most of a second
    of every ``import rbd_deriv``): an import written in a docstring or a comment counts too, which can only
    widen the key. test_jit_cache checks the scan against Python's own parser on the package."""
    text = path.read_text(encoding="utf-8")
    name = _module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = [alias.split()[0] for match in _IMPORT.finditer(text)
               for alias in match.group(1).replace("\\", " ").split(",") if alias.strip()]
    for match in _FROM.finditer(text):
        dots, module = len(match.group(1)), match.group(2)
        if dots:
            anchor = package.split(".")[:len(package.split(".")) - dots + 1]
            base = ".".join(anchor + ([module] if module else []))
        else:
            base = module
        for alias in re.sub(r"#[^\n]*", "", match.group(3)).strip("()").replace("\\", " ").split(","):
            if alias.strip():
                member = f"{base}.{alias.split()[0]}"
                targets.append(member if _module_file(member, package_dir) else base)
    imported = {found for target in targets if (found := _module_file(target, package_dir)) is not None}
    return _ROOT.search(text) is not None, imported


def kernel_sources(package_dir: Path = PACKAGE_DIR) -> List[Path]:
    """The package's ``.py`` files that the key covers, sorted by relative path: the roots (modules importing
    numba) and every package module they import, directly or not. A kernel reads only its module's globals
    and what those import, so a file outside this closure (a node, the pipeline, the simulator, the MPC
    loop) cannot change machine code, and editing it keeps the cache. A module's :data:`HOOK` only chooses
    which signatures a build compiles: if an edit outside the closure changes them, the new ones compile at
    their first call and join the folder."""
    modules = {}
    for path in package_dir.rglob("*.py"):
        relative = path.relative_to(package_dir)
        if "__pycache__" in relative.parts or CACHE_FOLDER in relative.parts:
            continue
        modules[path] = _read_module(path, package_dir)
    covered = {path for path, (root, _) in modules.items() if root}
    frontier = list(covered)
    while frontier:
        for found in modules[frontier.pop()][1]:
            if found in modules and found not in covered:
                covered.add(found)
                frontier.append(found)
    return sorted(covered, key=lambda p: p.relative_to(package_dir).as_posix())


def source_digest(package_dir: Path = PACKAGE_DIR) -> str:
    """sha256 over the relative path and content of every file of :func:`kernel_sources`."""
    digest = hashlib.sha256()
    for path in kernel_sources(package_dir):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _toolchain() -> Dict[str, Any]:
    """Everything besides the sources that the machine code depends on."""
    import llvmlite
    import numba
    import numpy
    from numba.core import config
    from numba.core.registry import cpu_target

    triple, cpu_name, features = cpu_target.target_context.codegen().magic_tuple()
    settings = {name: getattr(config, name, None) for name in (
        "OPT", "BOUNDSCHECK", "FASTMATH", "DEBUGINFO_DEFAULT", "USING_SVML", "ENABLE_AVX")}
    return {
        "python": sys.version, "abi": sys.implementation.cache_tag + getattr(sys, "abiflags", ""),
        "numba": numba.__version__, "llvmlite": llvmlite.__version__, "numpy": numpy.__version__,
        "target": triple, "cpu": cpu_name, "cpu_features": features, "settings": repr(sorted(settings.items())),
    }


def build_key(package_dir: Path = PACKAGE_DIR) -> Tuple[str, Dict[str, Any]]:
    """(key, description): the key names the cache folder; the description is what it was made of."""
    description = {"sources": source_digest(package_dir), **_toolchain()}
    text = json.dumps(description, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20], description


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f".write-test-{os.getpid()}", "w"):
            pass
        os.unlink(folder / f".write-test-{os.getpid()}")
        return True
    except OSError:
        return False


def cache_root(key: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The folder holding the key folders, first of:

    1. ``RBD_DERIV_CACHE_DIR``;
    2. ``$NUMBA_CACHE_DIR/rbd_deriv``, where the user sent numba's caches;
    3. ``__jitcache__`` in the package folder, where a build (pip, colcon) puts it, if it holds the key's
       complete folder or can be written;
    4. ``$XDG_CACHE_HOME/rbd_deriv`` (``~/.cache/rbd_deriv``): a package installed read-only.
    """
    if os.environ.get("RBD_DERIV_CACHE_DIR"):
        return Path(os.environ["RBD_DERIV_CACHE_DIR"]).absolute()
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]).absolute() / "rbd_deriv"
    inside = package_dir / CACHE_FOLDER
    if (inside / key / COMPLETE).is_file() or _writable(inside):
        return inside
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return user_cache / "rbd_deriv"


@contextlib.contextmanager
def file_lock(path: Path, waiting: Optional[str] = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed). With ``waiting``, say it on stderr when the lock
    is taken by another process, and again every :data:`PROGRESS_PERIOD` seconds until it is free."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        if waiting is None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        else:
            start = time.monotonic()
            told = None
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    elapsed = time.monotonic() - start
                    if told is None or elapsed - told >= PROGRESS_PERIOD:
                        _say(f"{waiting} ({elapsed:.0f} s so far)")
                        told = elapsed
                    time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _State:
    """The folder this process caches kernels in (None until :func:`activate`) and its key."""

    folder: Optional[Path] = None
    key: Optional[str] = None
    description: Optional[Dict[str, Any]] = None


STATE = _State()


def _install_locator() -> None:
    """Put the package's locator first among numba's, and serialize saves into the package's folders."""
    from numba.core import caching

    if _PackageLocator is not None and _PackageLocator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, _PackageLocator)
    save = caching.IndexDataCacheFile.save
    if getattr(save, "_rbd_deriv_locked", False):
        return

    def locked_save(index_file, key, data):
        folder = STATE.folder
        cache_path = Path(index_file._cache_path)
        if folder is None or (folder not in cache_path.parents and cache_path != folder):
            return save(index_file, key, data)
        try:
            with file_lock(cache_path / ".save.lock"):
                return save(index_file, key, data)
        except PermissionError:  # a read-only install: the kernel stays compiled in this process only
            return None

    locked_save._rbd_deriv_locked = True
    caching.IndexDataCacheFile.save = locked_save


def _make_locator_class():
    from numba.core import caching

    class PackageLocator(caching._CacheLocator):
        """numba cache locator for the package's functions: the key's folder, with the package's subfolders
        mirrored, and the key as every function's source stamp (the key already covers every source)."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            relative = os.path.relpath(os.path.dirname(py_file), PACKAGE_DIR)
            self._cache_path = os.path.normpath(os.path.join(str(STATE.folder), relative))

        def ensure_cache_path(self):
            # A complete folder of a read-only install still serves loads; saves are then skipped.
            try:
                os.makedirs(self._cache_path, exist_ok=True)
            except OSError:
                pass

        def get_cache_path(self):
            return self._cache_path

        def get_source_stamp(self):
            return STATE.key

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            if STATE.folder is None:
                return None
            path = os.path.abspath(py_file)
            if not path.startswith(str(PACKAGE_DIR) + os.sep):
                return None
            return cls(py_func, path)

    return PackageLocator


_PackageLocator: Any = None
"""The locator class, made by :func:`activate` (it subclasses a numba class: numba is imported then)."""


def activate() -> None:
    """Choose this process's cache folder and make sure it is complete before the kernels are imported.

    Called by ``rbd_deriv/__init__.py`` before any kernel module. In a build's processes (:data:`ROLE_VARIABLE`
    set) it only points numba at the folder being built and defers compiling to the build. Otherwise, when the
    key's folder is not complete, it builds it (or waits for the process building it)."""
    global _PackageLocator
    from numba.core import config

    if config.DISABLE_JIT:
        return
    _PackageLocator = _make_locator_class()
    building = os.environ.get(ROLE_VARIABLE)
    if building:
        STATE.folder = Path(building)
        STATE.key = STATE.folder.name
        # The C entries are compiled when the build gets to them, not at import: the modules must not take
        # their addresses then (rbd_deriv.core.calling serves the kernels through numba's dispatcher instead).
        os.environ["RBD_DERIV_DISPATCHER"] = "1"
        _install_locator()
        defer_compilation()
        return
    key, description = build_key()
    root = cache_root(key)
    STATE.folder, STATE.key, STATE.description = root / key, key, description
    _install_locator()
    if not (STATE.folder / COMPLETE).is_file():
        build(root, key)


def build(root: Path, key: str) -> bool:
    """Build the key's folder unless another process did, under the key's lock. Returns True when this call
    compiled. A build that fails leaves the import to compile each kernel as it comes (and says so)."""
    folder = root / key
    with file_lock(root / f"{key}.lock",
                   waiting=f"another process is compiling the kernels into {folder}; waiting for it"):
        if (folder / COMPLETE).is_file():
            return False
        environment = dict(os.environ)
        environment[ROLE_VARIABLE] = str(folder)
        # The build's processes must import this very package folder, whatever sys.path they would get.
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_DIR.parent)] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
        completed = subprocess.run([sys.executable, "-m", "rbd_deriv.precompile"], env=environment)
        if completed.returncode == 130:  # Ctrl-C: the build said so; stop here as the user asked
            raise KeyboardInterrupt
        if completed.returncode != 0 or not (folder / COMPLETE).is_file():
            _say(f"the parallel compile failed (exit {completed.returncode}); compiling in this process instead")
            return True
        prune(root, key)
        return True


def mark_complete(folder: Path, summary: Dict[str, Any]) -> None:
    """Write :data:`COMPLETE` into ``folder`` atomically (a reader sees it whole or not at all)."""
    temporary = folder / f".{COMPLETE}.{os.getpid()}"
    temporary.write_text(json.dumps(summary, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, folder / COMPLETE)


def prune(root: Path, keep: str) -> List[str]:
    """Remove the root's other key folders, those of older sources or toolchains, unless a process is building
    one now (its lock is held). Returns the keys removed."""
    import shutil

    removed = []
    for lock in root.glob("*.lock"):
        key = lock.stem
        if key == keep:
            continue
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(root / key, ignore_errors=True)
            os.unlink(lock)
            removed.append(key)
    return removed


# ---- compiling on demand, in a build's processes ------------------------------------------------------------
#
# A kernel with explicit signatures is compiled when its module is imported, and every kernel module is imported
# by ``import rbd_deriv``: a process could not compile one module's kernels without compiling all those before
# it. In a build's processes, the decorators of cached kernels record them instead (:data:`_PENDING`), and
# :func:`compile_pending` compiles one when the build gets to it, as its decorator would have. A recorded
# kernel that another kernel calls is compiled first, with its own signatures, as at import.

_PENDING: Dict[Any, Optional[Tuple[Any, ...]]] = {}
"""Recorded kernels, in definition order: a Dispatcher -> its signatures, a CFunc -> None."""

_HELD: set = set()
"""Compile locks this process holds (a kernel compiled while compiling itself does not wait for itself)."""

LOCK_WAIT = [0.0]
"""Seconds this process waited for other processes compiling what it needed."""


def pending() -> List[Any]:
    """The kernels recorded and not compiled yet (Dispatchers and CFuncs), in definition order."""
    return list(_PENDING)


def kernel_module(kernel: Any) -> str:
    """Name of the module defining a Dispatcher or CFunc."""
    function = getattr(kernel, "py_func", None) or kernel._pyfunc
    return function.__module__


def kernel_name(kernel: Any) -> str:
    """``module.qualname`` of a Dispatcher or CFunc: how the build names its tasks and records their timings."""
    function = getattr(kernel, "py_func", None) or kernel._pyfunc
    return f"{function.__module__}.{function.__qualname__}"


def is_cached(function: Any, signature: Any) -> bool:
    """Whether the key's folder holds machine code of ``function`` (a Python function numba compiles with
    ``cache=True``) for ``signature`` (what its Dispatcher or CFunc passes to the cache): reads the function's
    index only. Used to say so before a kernel compiles at its first use."""
    from numba.core.caching import FunctionCache
    from numba.core.registry import cpu_target

    try:
        cache = FunctionCache(function)
        key = cache._index_key(signature, cpu_target.target_context.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # numba's cache internals moved: assume a compile, which is only a message too many
        return False


@contextlib.contextmanager
def first_use(what: str, function: Any, signature: Any, lazy: bool = True) -> Iterator[None]:
    """Around the compile of a kernel at its first use (``lazy``): when ``function`` is not in the key's
    folder for ``signature`` (:func:`is_cached`), say on stderr that ``what`` compiles, then in how long."""
    if not lazy or STATE.folder is None or is_cached(function, signature):
        yield
        return
    _say(f"compiling {what} at its first use: once per install or change of the library (the build compiles "
         "the kernels that every node needs, not this one)")
    start = time.monotonic()
    yield
    _say(f"{what} compiled in {time.monotonic() - start:.0f} s")


def compile_pending(kernel: Any) -> int:
    """Compile a recorded kernel as its decorator would have; returns the number of signatures compiled."""
    from numba.core import typeinfer

    if kernel not in _PENDING:
        return 0
    signatures = _PENDING.pop(kernel)
    if signatures is None:
        kernel._rbd_deriv_compile_now = True
        kernel.compile()
        return 1
    with typeinfer.register_dispatcher(kernel):
        for signature in signatures:
            kernel.compile(signature)
    kernel.disable_compile()
    return len(signatures)


def defer_compilation() -> None:
    """Make the decorators of cached kernels record them instead of compiling (numba.njit with signatures,
    numba.cfunc), and compile each function under a lock so that the build's processes never compile the same
    one twice: a process that needs a helper another is compiling waits, then loads it from the cache."""
    import numba
    from numba.core import sigutils
    from numba.core.caching import FunctionCache
    from numba.core.ccallback import CFunc
    from numba.core.dispatcher import Dispatcher

    if getattr(numba.njit, "_rbd_deriv_deferring", False):
        return
    eager_njit = numba.njit

    def njit(*args, **options):
        if not args or callable(args[0]) or not options.get("cache"):
            return eager_njit(*args, **options)
        signatures = tuple(args[0]) if isinstance(args[0], (list, tuple)) else (args[0],)
        lazy = eager_njit(*args[1:], **options)

        def decorate(function):
            dispatcher = lazy(function)
            _PENDING[dispatcher] = signatures
            return dispatcher

        return decorate

    njit._rbd_deriv_deferring = True
    numba.njit = njit

    eager_cfunc_compile = CFunc.compile

    def cfunc_compile(self):
        if getattr(self, "_rbd_deriv_compile_now", False) or not isinstance(self._cache, FunctionCache):
            return eager_cfunc_compile(self)
        _PENDING[self] = None
        return None

    CFunc.compile = cfunc_compile

    for method in ("get_call_template", "_compile_for_args"):
        original = getattr(Dispatcher, method)

        def compiling_recorded_first(self, *args, _original=original, **kwargs):
            if self in _PENDING:
                compile_pending(self)
            return _original(self, *args, **kwargs)

        setattr(Dispatcher, method, compiling_recorded_first)

    dispatcher_compile = Dispatcher.compile

    def compile_once(self, sig):
        if STATE.folder is None or not isinstance(self._cache, FunctionCache):
            return dispatcher_compile(self, sig)
        args, _ = sigutils.normalize_signature(sig)
        if tuple(args) in self.overloads:
            return dispatcher_compile(self, sig)
        function = self.py_func
        name = hashlib.sha1(f"{function.__module__}.{function.__qualname__}:{function.__code__.co_firstlineno}:"
                            f"{tuple(args)}".encode()).hexdigest()[:20]
        if name in _HELD:
            return dispatcher_compile(self, sig)
        waiting = time.monotonic()
        with file_lock(STATE.folder / ".compiling" / name):
            LOCK_WAIT[0] += time.monotonic() - waiting
            _HELD.add(name)
            try:
                return dispatcher_compile(self, sig)  # loads what another process saved meanwhile
            finally:
                _HELD.discard(name)

    Dispatcher.compile = compile_once
