"""Compile every kernel of the package into its cache ahead of time: ``python -m rbd_deriv.precompile``.

``./run setup`` and the colcon install step run it, so that the first ``import rbd_deriv`` of an installed
package, and the first start of a node, load machine code instead of compiling it. The cache, its key and
its locks are :mod:`rbd_deriv.jit_cache`; running this module is ``import rbd_deriv``, which builds the
key's folder when it is not complete, plus a report. Options:

    --check   also import every module that defines kernels and run their hooks (below), and fail (exit 1) if
              a kernel that the build compiles had to be compiled rather than loaded: what a build must leave
              behind. The kernels registered ``lazy=True`` are not compiled by the build: listed, not loaded.

The build itself runs in this module too, in a process started by :func:`rbd_deriv.jit_cache.build` (the
variable :data:`~rbd_deriv.jit_cache.ROLE_VARIABLE` set): it imports every module of the package with the
kernels' compilation deferred, to find them, then has a pool of processes (``RBD_DERIV_JIT_JOBS``, by default
one per usable core) compile them one kernel per task, in the order of :class:`Schedule`. A helper
needed by several kernels is compiled by the first process to need it; the others wait for it and load it from
the cache. The kernels registered ``lazy=True`` (rbd_deriv.core.calling) are left to their first call.

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
import queue
import signal
import sys
import time
import types
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

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


HOOK = jit_cache.HOOK

HOOK_TASK = "hook:"
"""Prefix of the task that runs a module's :data:`HOOK` (the other tasks are kernels' names)."""

SECONDS_PER_BYTE = 0.5e-3
"""Static estimate of the compile time of a numba function [s of CPU] per byte of its bytecode (measured on the
2-core machine: 0.1-1.5 ms for the core's kernels, 0.5 typical); the build's schedule weighs tasks with it."""

HOOK_ESTIMATE = 10.0
"""Static estimate of a module's :data:`HOOK` [s of CPU]."""


def _tasks(imported: Sequence[str]) -> List[str]:
    """What a build compiles, one task each: every recorded kernel (by :func:`jit_cache.kernel_name`), then
    a :data:`HOOK_TASK` for every imported module that has a :data:`HOOK`."""
    tasks = [jit_cache.kernel_name(kernel) for kernel in jit_cache.pending()]
    if len(set(tasks)) != len(tasks):
        raise RuntimeError(f"two kernels of one name: {sorted(t for t in tasks if tasks.count(t) > 1)}")
    return tasks + [HOOK_TASK + name for name in imported if callable(getattr(sys.modules.get(name), HOOK, None))]


def reached_functions(function: Any) -> Dict[str, float]:
    """{name: estimated compile CPU seconds} of ``function`` and of every numba function it calls, directly
    or not, through its module's globals: what numba types, lowers and optimizes to compile it (a C entry
    reaches its kernel through its global ``KERNEL``)."""
    from numba.core.dispatcher import Dispatcher

    def codes(code: types.CodeType) -> Iterator[types.CodeType]:
        yield code
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                yield from codes(constant)

    reached: Dict[str, float] = {}
    stack = [function]
    while stack:
        current = stack.pop()
        name = f"{current.__module__}.{current.__qualname__}"
        if name in reached:
            continue
        reached[name] = SECONDS_PER_BYTE * sum(len(code.co_code) for code in codes(current.__code__))
        for code in codes(current.__code__):
            stack.extend(value.py_func for value in map(current.__globals__.get, code.co_names)
                         if isinstance(value, Dispatcher))
    return reached


class Schedule:
    """Which task a free process takes next.

    Tasks that reach the same helpers would have one process wait while the other compiles them (under the
    helper's lock). So a free process takes the task with the most work it can do at once: the estimated
    cost of its functions that neither a finished task compiled (those load from the cache) nor a running
    task is compiling, less the cost of those a running task is compiling (it would wait for them). The
    largest such task first, so that the last ones to finish are short."""

    def __init__(self, reached: Dict[str, Dict[str, float]]) -> None:
        self.reached = reached  # task -> {function: estimated seconds}
        self.remaining = list(reached)
        self.running: Dict[str, None] = {}
        self.compiled: set = set()

    def estimate(self, task: str) -> float:
        """The task's estimated CPU seconds, in an empty cache."""
        return sum(self.reached[task].values())

    def _score(self, task: str, busy: set) -> Tuple[float, float]:
        functions = self.reached[task]
        free = sum(cost for name, cost in functions.items() if name not in self.compiled and name not in busy)
        blocked = sum(cost for name, cost in functions.items() if name in busy)
        return free - blocked, self.estimate(task)

    def take(self) -> Optional[str]:
        """The next task (now running), or None when every task was taken."""
        if not self.remaining:
            return None
        busy = set().union(*(self.reached[t] for t in self.running)) - self.compiled
        task = max(self.remaining, key=lambda t: self._score(t, busy))
        self.remaining.remove(task)
        self.running[task] = None
        return task

    def finish(self, task: str) -> None:
        """The task is done: its functions are in the cache."""
        del self.running[task]
        self.compiled.update(self.reached[task])


def _reached_by_task(tasks: Sequence[str]) -> Dict[str, Dict[str, float]]:
    kernels = {jit_cache.kernel_name(kernel): kernel for kernel in jit_cache.pending()}
    return {task: {task: HOOK_ESTIMATE} if task.startswith(HOOK_TASK) else reached_functions(
        getattr(kernels[task], "py_func", None) or kernels[task]._pyfunc) for task in tasks}


def _compile_task(task: str) -> Tuple[str, float, float, float, int, int, float]:
    """In a pool process: compile one recorded kernel, or run a module's :data:`HOOK`; (task, wall seconds, CPU
    seconds, seconds waiting for other processes, signatures, process id, the process's CPU seconds so far)."""
    start, cpu, waited = time.monotonic(), time.process_time(), jit_cache.LOCK_WAIT[0]
    count = 0
    if task.startswith(HOOK_TASK):
        getattr(importlib.import_module(task[len(HOOK_TASK):]), HOOK)()
    else:
        for kernel in jit_cache.pending():
            if jit_cache.kernel_name(kernel) == task:
                count += jit_cache.compile_pending(kernel)
    return (task, time.monotonic() - start, time.process_time() - cpu, jit_cache.LOCK_WAIT[0] - waited, count,
            os.getpid(), time.process_time())


def _worker_start() -> None:
    # Ctrl-C reaches the whole process group: the build's main process alone answers it (below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _jobs() -> int:
    requested = os.environ.get("RBD_DERIV_JIT_JOBS", "")
    return int(requested) if requested.isdigit() and int(requested) > 0 else len(os.sched_getaffinity(0))


def build_folder() -> int:
    """The build (in the role's process): compile every recorded kernel into the folder, then mark it
    complete. Returns the exit code.

    One task per kernel (and per module :data:`HOOK`), handed to the pool's processes as they come free in
    the order of :class:`Schedule`. A helper two kernels need is compiled by the first process to need it, the
    other waiting for it under its lock (:func:`jit_cache.defer_compilation`) and loading it. The pool is
    started first: its processes import the package (as the main module's) while this one looks for the kernels."""
    folder = jit_cache.STATE.folder
    start = time.monotonic()
    jobs = _jobs()
    pool = multiprocessing.get_context("spawn").Pool(jobs, initializer=_worker_start)
    try:
        return _run_build(pool, jobs, folder, start)
    finally:
        pool.terminate()
        pool.join()


def _run_build(pool: Any, jobs: int, folder: Any, start: float) -> int:
    imported, skipped = discover_modules()
    tasks = _tasks(imported)
    schedule = Schedule(_reached_by_task(tasks))
    from rbd_deriv.core import calling

    lazy = sorted(name for name, registered in calling.REGISTRY.items() if registered.lazy)
    _say(f"compiling {len(tasks)} kernels for this machine and these sources ({jobs} processes; once per "
         f"install, upgrade or change of the library, about a minute on 2 cores) into {folder}")
    _say(f"  compiled at their first use instead: {', '.join(lazy)}")
    for name, reason in skipped.items():
        _say(f"  not imported, its kernels (if any) compile at first use: {name} ({reason})")
    finished: "queue.Queue[Any]" = queue.Queue()
    done: Dict[str, Dict[str, Any]] = {}
    order: List[str] = []
    process_cpu: Dict[int, float] = {}
    signatures = 0

    def hand_out() -> None:
        task = schedule.take()
        if task is not None:
            order.append(task)
            pool.apply_async(_compile_task, (task,), callback=finished.put, error_callback=finished.put)

    for _ in range(jobs):  # as many tasks in flight as processes: each starts at once, in a free process
        hand_out()
    while len(done) < len(tasks):
        try:
            result = finished.get(timeout=jit_cache.PROGRESS_PERIOD)
        except KeyboardInterrupt:
            _say("compiling interrupted; what was compiled is kept, the next start compiles the rest")
            return 130
        except queue.Empty:
            _say(f"  still compiling ({time.monotonic() - start:.0f} s so far; {len(done)} of {len(tasks)} done; "
                 f"now: {', '.join(_short(task) for task in schedule.running)})")
            continue
        if isinstance(result, BaseException):
            raise result
        task, seconds, cpu_seconds, waited, count, pid, so_far = result
        schedule.finish(task)
        hand_out()
        done[task] = {"wall": round(seconds, 2), "cpu": round(cpu_seconds, 2), "waited": round(waited, 2),
                      "signatures": count, "process": pid, "estimate": round(schedule.estimate(task), 1)}
        process_cpu[pid] = max(process_cpu.get(pid, 0.0), so_far)
        signatures += count
        _say(f"  {_short(task)}: {seconds:.0f} s (CPU {cpu_seconds:.0f} s, waited {waited:.0f} s for another "
             f"process) [{len(done)}/{len(tasks)}, {time.monotonic() - start:.0f} s so far]")
    total = time.monotonic() - start
    cpu = sum(entry["cpu"] for entry in done.values())
    modules: Dict[str, float] = {}
    for task, entry in done.items():
        module = task[len(HOOK_TASK):] if task.startswith(HOOK_TASK) else task.rsplit(".", 1)[0]
        modules[module] = round(modules.get(module, 0.0) + entry["cpu"], 2)
    jit_cache.mark_complete(folder, {
        "key": jit_cache.STATE.key, "seconds": round(total, 1), "jobs": jobs, "tasks": done, "order": order,
        "modules": modules, "signatures": signatures, "cpu_seconds": round(cpu, 1), "lazy": lazy,
        "process_cpu_seconds": {str(pid): round(seconds, 1) for pid, seconds in process_cpu.items()},
        "skipped": skipped, "imported": imported, "toolchain": jit_cache.build_key()[1],
    })
    _say(f"compiled {len(tasks)} kernels ({signatures} signatures) in {total:.0f} s ({cpu:.0f} s of CPU compiling, "
         f"{sum(process_cpu.values()):.0f} s in the processes with their start)")
    return 0


def _short(task: str) -> str:
    """A task's name without the package's prefix."""
    return task.replace("rbd_deriv.", "", 1) if not task.startswith(HOOK_TASK) else task.replace("rbd_deriv.", "")


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
    imported, _ = discover_modules()
    for name in imported:  # what the build runs besides the kernels: the modules' hooks
        hook = getattr(sys.modules[name], HOOK, None)
        if callable(hook):
            hook()
    from rbd_deriv.core import calling

    compiled = compiled_at_import()
    lazy = sorted(name for name, registered in calling.REGISTRY.items() if registered.lazy)
    print(f"compiled at their first use, not by the build ({len(lazy)}): {', '.join(lazy)}")
    if compiled:
        print(f"compiled at import instead of loaded ({len(compiled)}): {', '.join(sorted(compiled))}")
        return 1
    print("every kernel compiled at import was loaded from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
