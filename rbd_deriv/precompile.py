"""Compile every kernel of the package into its cache ahead of time: ``python -m rbd_deriv.precompile``.

``./run setup`` and the colcon install step run it, so that the first ``import rbd_deriv`` of an installed
package, and the first start of a node, load machine code instead of compiling it. The cache, its key and
its locks are :mod:`rbd_deriv.jit_cache`; running this module is ``import rbd_deriv``, which builds the
key's folder when it is not complete, plus a report. Options:

    --check   also import every module that defines kernels, load the kernels compiled at their first call,
              and fail (exit 1) if a kernel had to be compiled rather than loaded: what a build must leave
              behind.

The build itself runs in this module too, in a process started by :func:`rbd_deriv.jit_cache.build` (the
variable :data:`~rbd_deriv.jit_cache.ROLE_VARIABLE` set): it imports every module of the package with the
kernels' compilation deferred, to find them, then has a pool of processes (``RBD_DERIV_JIT_JOBS``, by default
one per usable core) compile them module by module, the modules handed out in import order as processes come
free. A helper needed by several modules is compiled by the first process to need it; the others wait for it
and load it from the cache.

A kernel without signatures compiles at its first call. A module whose such kernels are used at every start
(a solver) can define ``precompile_kernels()``, calling them on small inputs of the types its callers pass: the
build runs it in the module's task, so that those kernels are cached too.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import os
import pkgutil
import signal
import sys
import time
from typing import Dict, List, Sequence, Tuple

from rbd_deriv import jit_cache

__all__ = ["compiled_at_import", "discover_modules", "main"]


def _say(text: str) -> None:
    print(f"rbd_deriv: {text}", file=sys.stderr, flush=True)


def discover_modules() -> Tuple[List[str], Dict[str, str]]:
    """Import every module of the package folder but those of :data:`jit_cache.NOT_KERNEL_SOURCES`.

    Returns the modules' names in import order and {name: reason} for those that could not be imported (an
    optional dependency missing: their kernels, if any, compile at first use)."""
    names: List[str] = []
    skipped: Dict[str, str] = {}

    def walk(folder, prefix: str) -> None:
        for module in pkgutil.iter_modules([str(folder)]):
            name = prefix + module.name
            if name.count(".") == 1 and module.name in jit_cache.NOT_KERNEL_SOURCES \
                    or module.name in ("__main__", "precompile"):
                continue
            try:
                importlib.import_module(name)
            except ImportError as error:
                skipped[name] = str(error)
                continue
            names.append(name)
            if module.ispkg:
                walk(folder / module.name, name + ".")

    walk(jit_cache.PACKAGE_DIR, "rbd_deriv.")
    return names, skipped


HOOK = "precompile_kernels"
"""Name of a module's function that compiles its kernels without signatures by calling them."""


def _kernel_modules(imported: Sequence[str]) -> List[str]:
    """Modules defining recorded kernels, in the order their first kernel was defined, then the other imported
    modules that have a :data:`HOOK`."""
    modules: List[str] = []
    for kernel in jit_cache.pending():
        name = jit_cache.kernel_module(kernel)
        if name not in modules:
            modules.append(name)
    return modules + [name for name in imported if name not in modules and callable(getattr(
        sys.modules.get(name), HOOK, None))]


def _compile_module(name: str) -> Tuple[str, float, float, float, int]:
    """In a pool process: compile the recorded kernels of module ``name`` and run its :data:`HOOK`; (name, wall
    seconds, CPU seconds, seconds waiting for other processes, signatures)."""
    start, cpu, waited = time.monotonic(), time.process_time(), jit_cache.LOCK_WAIT[0]
    module = importlib.import_module(name)
    count = 0
    for kernel in jit_cache.pending():
        if jit_cache.kernel_module(kernel) == name:
            count += jit_cache.compile_pending(kernel)
    hook = getattr(module, HOOK, None)
    if callable(hook):
        hook()
    return (name, time.monotonic() - start, time.process_time() - cpu, jit_cache.LOCK_WAIT[0] - waited,
            count)


def _worker_start() -> None:
    # Ctrl-C reaches the whole process group: the build's main process alone answers it (below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _jobs(modules: int) -> int:
    requested = os.environ.get("RBD_DERIV_JIT_JOBS", "")
    jobs = int(requested) if requested.isdigit() and int(requested) > 0 else len(os.sched_getaffinity(0))
    return max(1, min(jobs, modules))


def build_folder() -> int:
    """The build (in the role's process): compile every recorded kernel into the folder, then mark it
    complete. Returns the exit code."""
    folder = jit_cache.STATE.folder
    start = time.monotonic()
    imported, skipped = discover_modules()
    modules = _kernel_modules(imported)
    jobs = _jobs(len(modules))
    _say(f"compiling the kernels of {len(modules)} modules for this machine and these sources "
         f"({jobs} processes; once per install, upgrade or change of the library, 1-2 minutes on 2 cores) "
         f"into {folder}")
    for name, reason in skipped.items():
        _say(f"  not imported, its kernels (if any) compile at first use: {name} ({reason})")
    timings: Dict[str, float] = {}
    signatures, cpu = 0, 0.0
    with multiprocessing.get_context("spawn").Pool(jobs, initializer=_worker_start) as pool:
        results = pool.imap_unordered(_compile_module, modules)
        while len(timings) < len(modules):
            try:
                name, seconds, cpu_seconds, waited, count = results.next(timeout=jit_cache.PROGRESS_PERIOD)
            except KeyboardInterrupt:
                pool.terminate()
                _say("compiling interrupted; what was compiled is kept, the next start compiles the rest")
                return 130
            except multiprocessing.TimeoutError:
                busy = [name for name in modules if name not in timings]
                _say(f"  still compiling ({time.monotonic() - start:.0f} s so far; "
                     f"{len(timings)} of {len(modules)} modules done; not yet: {', '.join(busy)})")
                continue
            timings[name] = seconds
            signatures, cpu = signatures + count, cpu + cpu_seconds
            _say(f"  {name}: {count} kernel signature(s) in {seconds:.0f} s (CPU {cpu_seconds:.0f} s, waited "
                 f"{waited:.0f} s for the other processes) "
                 f"[{len(timings)}/{len(modules)}, {time.monotonic() - start:.0f} s so far]")
    total = time.monotonic() - start
    jit_cache.mark_complete(folder, {
        "key": jit_cache.STATE.key, "seconds": round(total, 1), "jobs": jobs, "modules": timings,
        "signatures": signatures, "cpu_seconds": round(cpu, 1), "skipped": skipped, "imported": imported,
        "toolchain": jit_cache.build_key()[1],
    })
    _say(f"compiled {signatures} kernel signatures in {total:.0f} s ({cpu:.0f} s of CPU in the pool)")
    return 0


def compiled_at_import() -> List[str]:
    """Kernels of the imported modules that were compiled in this process instead of loaded from the cache:
    a Dispatcher with a cache miss, a CFunc compiled without a cache hit (the core's registered C entries
    included)."""
    from numba.core.ccallback import CFunc
    from numba.core.dispatcher import Dispatcher

    from rbd_deriv.core import calling

    compiled = [f"{name} (C entry)" for name, registered in calling.REGISTRY.items()
                if registered.loaded_entry is not None and registered.loaded_entry.cache_hits == 0]
    for name, module in list(sys.modules.items()):
        if not name.startswith("rbd_deriv.") or module is None:
            continue
        for attribute, value in vars(module).items():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == name:
                if sum(value.stats.cache_misses.values()):
                    compiled.append(f"{name}.{attribute}")
            elif isinstance(value, CFunc) and value._pyfunc.__module__ == name:
                if value.address is not None and value.cache_hits == 0:
                    compiled.append(f"{name}.{attribute}")
    return compiled


def main(argv: Sequence[str] | None = None) -> int:
    """Make sure the kernels are compiled for this machine; with --check, that nothing compiles at import."""
    if os.environ.get(jit_cache.ROLE_VARIABLE):
        return build_folder()
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.precompile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="import every kernel module and fail if a kernel was compiled, not loaded")
    parser.add_argument("--expect", metavar="FOLDER", default=None,
                        help="fail unless rbd_deriv is imported from FOLDER (the install step's package)")
    arguments = parser.parse_args(argv)
    if arguments.expect and os.path.realpath(arguments.expect) != os.path.realpath(jit_cache.PACKAGE_DIR):
        print(f"rbd_deriv is imported from {jit_cache.PACKAGE_DIR}, not from {arguments.expect}: another install "
              "of the package (pip install -e?) comes first on this Python's path; build the workspace with an "
              "environment that does not have it", file=sys.stderr)
        return 1
    import rbd_deriv  # noqa: F401  (builds the cache folder when it is not complete)

    folder = jit_cache.STATE.folder
    if folder is None:
        _say("numba's JIT is disabled (NUMBA_DISABLE_JIT): nothing to compile")
        return 0
    print(f"kernels compiled for this machine in {folder}")
    if not arguments.check:
        return 0
    discover_modules()
    from rbd_deriv.core import calling

    calling.compile_all()  # the kernels compiled at their first call must be in the cache too
    compiled = compiled_at_import()
    if compiled:
        print(f"compiled at import instead of loaded ({len(compiled)}): {', '.join(sorted(compiled))}")
        return 1
    print("every kernel compiled at import was loaded from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
