"""Fleet evaluation: many bags, from several robots and days, evaluated one by one and merged into one report.

A fleet run has three parts:

1. **Discovery** (:func:`discover`): the paths given are bags (a rosbag2 folder, a single ``.mcap`` or
   ``.db3`` file), folders searched recursively for bags, or text files listing such paths (one a line,
   ``#`` comments, relative to the list's folder). A folder with ``metadata.yaml`` is one bag; elsewhere each
   ``.mcap``/``.db3`` file is one. A missing path and a folder that holds no file at all become entries too,
   so that they appear in the report with their reason.
2. **Evaluation** (:func:`evaluate_bag`), one task per bag: the same pipeline and summary as ``bag-eval``
   (:func:`rbd_deriv.replay.cli.run_evaluation`), by default without output bag and PNG, plus per-joint
   histograms of ``|residual|`` that can be merged. A bag that cannot be used gives a failed
   :class:`BagResult` with a reason code (:data:`FAILURE_REASONS`), never an exception. The engines
   (:class:`LocalEngine`, a process pool whose workers are single-threaded and replaced when they die;
   :class:`RayEngine`, one Ray task per bag) run these tasks; both retry a bag once when the process
   evaluating it dies, then report it.
3. **Merging** (:func:`merge`): results are merged in the order of discovery, whatever order they finished
   in, so that the report does not depend on the engine.

Merged statistics, per group (robot or folder) and joint:

- exact (to the rounding of a sum): message counts, sample counts, sums of squares (the RMS), the mean and
  standard deviation (Chan et al.'s pairwise combination of per-bag means and squared deviations), the
  largest ``|residual|``, the worst cond(M);
- percentiles of ``|residual|`` from logarithmic histograms with :data:`RESIDUAL_BINS_PER_DECADE` bins per
  decade between :data:`RESIDUAL_LOW` and :data:`RESIDUAL_HIGH` [N m or N]. Histograms with the same bins
  merge by adding their counts, so the merged histogram is exactly the one of the concatenated samples;
  its quantile ``q`` is the centre of the bin that holds the sample of rank ``floor(q (n - 1))`` (numpy's
  ``method="lower"``), clamped to the exact minimum and maximum: within a factor ``10 ** (0.5 / 1000)``
  (0.116 %) of that sample, or within :data:`RESIDUAL_LOW` of it for samples below that floor. cond(M) and
  the compute time per message merge the same way (bag-eval's histograms, 1000 bins per decade).

Timings (compute time per message, wall time, peak memory, attempts) are kept apart from everything else
(:attr:`BagResult.timing`), since they change from run to run; the rest of a report is the same whichever
engine made it.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import resource
import signal
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from rbd_deriv.exceptions import InputError, ModelError, RbdDerivError, URDFError
from rbd_deriv.replay import bagio
from rbd_deriv.replay.evaluate import EvaluationConfig
from rbd_deriv.replay.stats import LogHistogram
from rbd_deriv.replay.storage import BagError, BagSource

__all__ = [
    "BAG_SUFFIXES",
    "FAILURE_REASONS",
    "RESIDUAL_LOW",
    "RESIDUAL_HIGH",
    "RESIDUAL_BINS_PER_DECADE",
    "BagEntry",
    "FleetOptions",
    "BagTask",
    "BagResult",
    "ResidualHistograms",
    "discover",
    "make_tasks",
    "evaluate_bag",
    "single_thread",
    "LocalEngine",
    "RayEngine",
    "merge",
    "histogram_from",
    "sparse_histogram",
    "merge_timing",
    "outliers",
]

BAG_SUFFIXES = (".mcap", ".db3")

FAILURE_REASONS = {
    "missing": "the path does not exist",
    "empty": "a folder with no file, or a bag without messages",
    "damaged": "not readable as a bag (not mcap/sqlite3, or damaged before any message)",
    "no_joint_states": "the bag has no joint_states topic",
    "no_description": "no robot description in the bag and no --urdf",
    "bad_description": "the robot description does not load",
    "foreign_robot": "the bag's description names another robot than --urdf",
    "urdf_mismatch": "the joint names of the messages do not fit the URDF",
    "nothing_evaluated": "every message was refused",
    "unusable": "another reason given by bag-eval",
    "worker_died": "the process evaluating the bag died twice (killed, out of memory)",
    "interrupted": "the run was interrupted before the bag finished",
    "error": "an unexpected error (a defect: the detail has the traceback's last line)",
}
"""Reason codes of a failed bag -> what they mean."""

RESIDUAL_LOW = 1e-9
RESIDUAL_HIGH = 1e6
RESIDUAL_BINS_PER_DECADE = 1000


# ----------------------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class BagEntry:
    """One bag found by :func:`discover`.

    Attributes:
        path: The bag (folder or file).
        name: How the report names it: the path from the folder above the root it was found under.
        folder: The bag's folder relative to that root's parent (the ``folder`` grouping).
        problem: ``"missing"`` or ``"empty"`` when discovery already knows it cannot be evaluated.
    """

    path: Path
    name: str
    folder: str
    problem: Optional[str] = None


def _is_rosbag_folder(folder: Path) -> bool:
    return (folder / "metadata.yaml").is_file()


def _entry(path: Path, base: Path, problem: Optional[str] = None) -> BagEntry:
    try:
        name = path.relative_to(base).as_posix()
    except ValueError:
        name = path.as_posix()
    parent = Path(name).parent.as_posix()
    return BagEntry(path, name, parent if parent != "." else base.name or ".", problem)


def _search(root: Path, base: Path) -> List[BagEntry]:
    found: List[BagEntry] = []
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        if _is_rosbag_folder(here):
            found.append(_entry(here, base))
            subfolders[:] = []
            continue
        subfolders.sort()
        if not files and not subfolders:
            found.append(_entry(here, base, "empty"))
        for name in sorted(files):
            if name.endswith(BAG_SUFFIXES):
                found.append(_entry(here / name, base))
    return found


def discover(paths: Sequence[os.PathLike]) -> List[BagEntry]:
    """The bags under ``paths``, in a fixed order (sorted by name, duplicates removed).

    Args:
        paths: Bags, folders to search, or text files listing bags or folders.

    Raises:
        InputError: A list file that cannot be read (the others become entries with a problem).
    """
    entries: List[BagEntry] = []

    def add(path: Path, base: Path, listed: bool) -> None:
        if not path.exists():
            entries.append(_entry(path, base, "missing"))
        elif path.is_dir():
            entries.extend(_search(path, base))
        elif path.suffix in BAG_SUFFIXES:
            entries.append(_entry(path, base))
        elif listed:
            entries.append(_entry(path, base, "damaged"))
        else:
            try:
                lines = path.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as err:
                raise InputError(f"{path} is neither a bag, a folder nor a readable list of bags: {err}", "paths") from err
            for line in lines:
                line = line.split("#", 1)[0].strip()
                if line:
                    listed_path = Path(line) if Path(line).is_absolute() else path.parent / line
                    add(listed_path, listed_path.parent, True)

    for given in paths:
        path = Path(given)
        add(path, path.parent, False)
    unique: Dict[str, BagEntry] = {}
    for entry in entries:
        unique.setdefault(os.path.abspath(entry.path), entry)
    return sorted(unique.values(), key=lambda entry: (entry.name, str(entry.path)))


# ------------------------------------------------------------------------------------------ one bag


@dataclass(frozen=True)
class FleetOptions:
    """How every bag is evaluated (``bag-eval``'s options) and grouped.

    Attributes:
        urdf: URDF file for every bag; None takes each bag's description.
        description_topic, topic, odom: As ``bag-eval``'s ``--description-topic``, ``--topic``, ``--odom``.
        evaluation: The evaluation's settings (``bag-eval``'s ``--acceleration``, ``--half-window``...).
        bag_plots: Also draw ``bag-eval``'s PNG for every bag.
        output_bags: Also write every bag's output bag (about 230 MB a minute for the 7-dof arm at 1 kHz).
    """

    urdf: Optional[Path] = None
    description_topic: str = "/robot_description"
    topic: str = "/joint_states"
    odom: Optional[str] = None
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    bag_plots: bool = False
    output_bags: bool = False

    def bag_eval_arguments(self, bag: Path, out_dir: Path) -> argparse.Namespace:
        """The arguments ``bag-eval`` would parse for ``bag`` writing into ``out_dir``."""
        config = self.evaluation
        return argparse.Namespace(
            bag=bag, urdf=self.urdf, description_topic=self.description_topic, topic=self.topic, odom=self.odom,
            dt=config.dt, acceleration=config.acceleration, half_window=config.half_window,
            gap_factor=config.gap_factor, stamps=config.stamps, chunk=config.chunk,
            latency_samples=config.latency_samples, out_dir=out_dir,
            out_storage="mcap", prefix="/rbd_deriv", no_bag=not self.output_bags, residual_topic=False,
            no_png=not self.bag_plots, quiet=True,
        )


@dataclass(frozen=True)
class BagTask:
    """One bag to evaluate.

    Attributes:
        number: Position in the fleet (discovery order), from 0.
        entry: The bag.
        out_dir: Where its ``summary.json`` (and PNG, output bag) go.
        options: The fleet's options.
    """

    number: int
    entry: BagEntry
    out_dir: Path
    options: FleetOptions


@dataclass
class BagResult:
    """What one bag gave, in a form that pickles and merges.

    Attributes:
        number, name, path, folder: From the task.
        ok: False when the bag could not be evaluated; ``reason`` (a key of :data:`FAILURE_REASONS`) and
            ``detail`` (the error's message) say why.
        robot: Robot name of the model used ("" when unknown); ``joints``: its velocity coordinates.
        start_ns: Stamp of the first usable message [ns] (header stamps, or receive times); None if failed.
        duration_s: Time from the first to the last evaluated message [s].
        messages: ``bag-eval``'s message counts (total, evaluated, rejected, by reason, lost to damage).
        damage_events: Damaged stretches read around.
        residual: Per joint with recorded efforts: ``count``, ``mean``, ``m2`` (sum of squared deviations),
            ``sum_squares`` [(N m)^2], ``max_abs`` [N m], ``max_at_s`` [s], ``effort_sum_squares`` and the
            sparse ``|residual|`` histogram (``bins``, ``counts``, ``sum``, ``min``, ``max``).
        condition: cond(M): ``min``, ``max``, ``max_at_s`` and its sparse histogram.
        summary_file: ``summary.json`` relative to the fleet's output folder, ``bags/NNN_name/summary.json``
            with the tasks of :func:`make_tasks` ("" when failed).
        plot_file: The bag's PNG relative to the output folder ("" when not drawn).
        timing: What changes from run to run: ``wall_s`` (bag-eval's stages), the sparse histogram of the
            batched compute time per message [us], ``process_s``, ``peak_rss_mb`` of the process, ``pid``,
            ``attempts``.
    """

    number: int
    name: str
    path: str
    folder: str
    ok: bool = False
    reason: str = ""
    detail: str = ""
    robot: str = ""
    joints: List[str] = field(default_factory=list)
    start_ns: Optional[int] = None
    duration_s: float = 0.0
    messages: Dict[str, Any] = field(default_factory=dict)
    damage_events: int = 0
    residual: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    condition: Dict[str, Any] = field(default_factory=dict)
    summary_file: str = ""
    plot_file: str = ""
    timing: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def failed(task: BagTask, reason: str, detail: str) -> "BagResult":
        entry = task.entry
        return BagResult(task.number, entry.name, str(entry.path), entry.folder, ok=False, reason=reason,
                         detail=detail)


class ResidualHistograms:
    """Per-column histograms of ``|RNEA(q, v, a) - effort|`` over the chunks of an evaluation (a chunk consumer).

    Values below :data:`RESIDUAL_LOW` count in the first bin, values above :data:`RESIDUAL_HIGH` in the last;
    columns without a recorded effort stay empty.
    """

    def __init__(self) -> None:
        self.columns: List[LogHistogram] = []

    def __call__(self, chunk: Any) -> None:
        residual = np.abs(chunk.residual)
        if not self.columns:
            self.columns = [LogHistogram(RESIDUAL_LOW, RESIDUAL_HIGH, RESIDUAL_BINS_PER_DECADE)
                            for _ in range(residual.shape[1])]
        for column, histogram in enumerate(self.columns):
            values = residual[:, column]
            values = values[np.isfinite(values)]
            histogram.add(np.maximum(values, RESIDUAL_LOW))
            if values.size:
                # The floor above only places tiny values in the first bin: keep their true extremes.
                histogram.min = min(histogram.min, float(values.min()))


def sparse_histogram(histogram: LogHistogram) -> Dict[str, Any]:
    """A histogram as its non-empty bins (``bins``, ``counts``) with its range, total, sum, minimum and maximum."""
    bins = np.flatnonzero(histogram.counts)
    return {"log10_low": float(histogram.low), "bins_per_decade": histogram.bins_per_decade, "size": histogram.bins,
            "bins": bins.astype(np.int32), "counts": histogram.counts[bins], "total": int(histogram.total),
            "sum": float(histogram.sum), "min": float(histogram.min), "max": float(histogram.max)}


def histogram_from(parts: Iterable[Dict[str, Any]]) -> Optional[LogHistogram]:
    """The :class:`~rbd_deriv.replay.stats.LogHistogram` of the samples of several sparse histograms (same bins).

    Counts, total, minimum and maximum are exact; the sum is added in the order given. None when
    ``parts`` is empty.
    """
    merged: Optional[LogHistogram] = None
    for part in parts:
        if merged is None:
            # Bins as the part's: the constructor's range is replaced by the part's own first bin and count.
            merged = LogHistogram(1.0, 10.0, part["bins_per_decade"])
            merged.low = part["log10_low"]
            merged.counts = np.zeros(part["size"], dtype=np.int64)
            merged.bins = part["size"]
        if part["size"] != merged.bins:
            raise InputError("histograms with different bins cannot be merged", "histogram")
        np.add.at(merged.counts, part["bins"], part["counts"])
        merged.total += part["total"]
        merged.sum += part["sum"]
        merged.min = min(merged.min, part["min"])
        merged.max = max(merged.max, part["max"])
    return merged


_WORKER_STATE: Dict[str, Any] = {}


def single_thread() -> None:
    """Make this process compute on one thread: numba's and every loaded BLAS's thread pools (idempotent)."""
    if _WORKER_STATE.get("single_thread"):
        return
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    import numba
    import scipy.linalg  # noqa: F401 - loads the BLAS numba's kernels call, so that the limit below reaches it
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(1)
    _WORKER_STATE["blas_limits"] = threadpool_limits(limits=1)
    _WORKER_STATE["single_thread"] = True


def _classify(err: Exception, options: FleetOptions) -> str:
    """The reason code of an error raised while evaluating a bag."""
    text = str(err)
    if isinstance(err, BagError):
        if err.topic == options.description_topic:
            return "no_description"
        if err.topic == options.topic:
            if "no readable message" in text:
                return "empty"
            if "do not match the URDF" in text or "appear in no message" in text:
                return "urdf_mismatch"
            return "no_joint_states"
        return "damaged" if err.path is not None else "unusable"
    if isinstance(err, (URDFError, ModelError)):
        return "bad_description"
    if isinstance(err, InputError) and err.argument == "joint_states":
        return "nothing_evaluated"
    return "unusable"


def _description_robot(text: str) -> str:
    import xml.etree.ElementTree as ElementTree

    try:
        return ElementTree.fromstring(text).get("name", "")
    except ElementTree.ParseError:
        return ""


def _check_bag(task: BagTask) -> Optional[Tuple[str, str]]:
    """Reasons known before evaluating: missing, empty, unreadable, no joint_states, another robot."""
    entry, options = task.entry, task.options
    if entry.problem == "missing" or not entry.path.exists():
        return "missing", f"{entry.path} does not exist"
    if entry.problem == "empty":
        return "empty", f"{entry.path} is a folder with no file"
    if entry.problem == "damaged":
        return "damaged", f"{entry.path} is neither a bag folder nor a .mcap/.db3 file"
    try:
        source = BagSource(entry.path)
        topics = source.topics
    except BagError as err:
        return "damaged", str(err)
    if not topics or all(info.count == 0 for info in topics.values()):
        return "empty", f"{entry.path} holds no message"
    if options.topic not in topics:
        have = ", ".join(sorted(topics)) or "none"
        return "no_joint_states", f"no topic {options.topic!r} (the bag has {have})"
    if topics[options.topic].count == 0:
        return "no_joint_states", f"topic {options.topic!r} has no message"
    if options.urdf is not None and options.description_topic in topics:
        urdf_robot = _urdf_robot(Path(options.urdf))
        try:
            bag_robot = _description_robot(bagio.read_robot_description(source, _typestore(), options.description_topic))
        except BagError:
            bag_robot = ""
        if bag_robot and urdf_robot and bag_robot != urdf_robot:
            return "foreign_robot", f"the bag's description is robot {bag_robot!r}, the URDF is {urdf_robot!r}"
    return None


def _typestore() -> Any:
    if "typestore" not in _WORKER_STATE:
        _WORKER_STATE["typestore"] = bagio.package_typestore()
    return _WORKER_STATE["typestore"]


def _urdf_robot(path: Path) -> str:
    """The robot name of a URDF file, read once per process ("" when unreadable: bag-eval then says why)."""
    key = f"robot of {path}"
    if key not in _WORKER_STATE:
        _WORKER_STATE[key] = _description_robot(path.read_text()) if path.is_file() else ""
    return _WORKER_STATE[key]


def evaluate_bag(task: BagTask) -> BagResult:
    """Evaluate one bag as ``bag-eval`` does; a bag that cannot be used gives a failed result, not an exception.

    Writes ``summary.json`` (``bag-eval``'s, with output paths relative to ``task.out_dir``) and the
    optional PNG and output bag into ``task.out_dir``.
    """
    from rbd_deriv.replay import cli, report

    tic = time.perf_counter()
    try:
        problem = _check_bag(task)
    except Exception as err:  # noqa: BLE001 - one bag's defect must not stop the fleet
        problem = ("error", f"{type(err).__name__}: {err}")
    if problem is not None:
        result = BagResult.failed(task, *problem)
        result.timing = {"process_s": time.perf_counter() - tic, "pid": os.getpid()}
        return result
    histograms = ResidualHistograms()
    try:
        summary, evaluation = cli.run_evaluation(task.options.bag_eval_arguments(task.entry.path, task.out_dir),
                                                 [histograms])
    except RbdDerivError as err:
        result = BagResult.failed(task, _classify(err, task.options), str(err))
    except MemoryError as err:
        result = BagResult.failed(task, "worker_died", f"out of memory: {err}")
    except Exception as err:  # noqa: BLE001 - one bag's defect must not stop the fleet
        last = traceback.format_exception(type(err), err, err.__traceback__)[-2:]
        result = BagResult.failed(task, "error", f"{type(err).__name__}: {err} ({''.join(last).strip()})")
    else:
        result = _result(task, summary, evaluation, histograms)
        outputs = {key: Path(value).name if key in ("json", "png", "bag") else value
                   for key, value in summary.get("outputs", {}).items()}
        summary["outputs"] = outputs
        report.write_json(summary, task.out_dir / "summary.json")
    result.timing["process_s"] = time.perf_counter() - tic
    result.timing["pid"] = os.getpid()
    # ru_maxrss is in KiB on Linux: the process's peak so far, this bag and those before it.
    result.timing["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return result


def _result(task: BagTask, summary: Dict[str, Any], evaluation: Any, histograms: ResidualHistograms) -> BagResult:
    entry = task.entry
    result = BagResult(task.number, entry.name, str(entry.path), entry.folder, ok=True)
    result.robot = str(summary.get("robot", ""))
    result.joints = list(evaluation.velocity_names)
    result.start_ns = evaluation.survey.first_stamp_ns
    result.duration_s = float(summary["duration_s"])
    result.messages = dict(summary["messages"])
    result.damage_events = len(evaluation.damage)
    residual, effort = evaluation.residual, evaluation.effort
    for column, name in enumerate(evaluation.velocity_names):
        if residual is None or residual.count[column] == 0:
            continue
        result.residual[name] = {
            "count": int(residual.count[column]),
            "mean": float(residual.mean[column]),
            "m2": float(residual.m2[column]),
            "sum_squares": float(residual.sum_squares[column]),
            "max_abs": float(residual.max_abs[column]),
            "max_at_s": float(residual.max_at[column]),
            "effort_sum_squares": float(effort.sum_squares[column]),
            "histogram": sparse_histogram(histograms.columns[column]),
        }
    result.condition = {"min": float(evaluation.condition_min), "max": float(evaluation.condition_max),
                        "max_at_s": float(evaluation.condition_max_t), "histogram": sparse_histogram(evaluation.condition)}
    # Relative to the report's folder, the parent of the folder of every bag's folder.
    folder = f"{task.out_dir.parent.name}/{task.out_dir.name}"
    result.summary_file = f"{folder}/summary.json"
    if "png" in summary.get("outputs", {}):
        result.plot_file = f"{folder}/report.png"
    result.timing = {"wall_s": dict(summary["timing"]["wall_s"]), "compute_us": sparse_histogram(evaluation.batched_us)}
    return result


def make_tasks(entries: Sequence[BagEntry], bags_dir: Path, options: FleetOptions) -> List[BagTask]:
    """One task per entry, each writing into its own folder ``bags_dir/NNN_<name>``."""
    tasks = []
    for number, entry in enumerate(entries):
        slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in entry.name).strip("._") or "bag"
        tasks.append(BagTask(number, entry, bags_dir / f"{number:03d}_{slug[-60:]}", options))
    return tasks


# ------------------------------------------------------------------------------------------ engines


def _worker_main(connection: Any) -> None:
    """A local worker: single-threaded, kernels loaded once, one bag at a time until told to stop."""
    # Ctrl-C reaches the whole process group: the parent decides what happens, the worker carries on
    # until it is terminated.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    single_thread()
    import rbd_deriv  # noqa: F401 - the compiled kernels, loaded once for every bag of this worker

    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        if task is None:
            return
        connection.send(("started", task.number))
        connection.send(("done", evaluate_bag(task)))


class _Worker:
    def __init__(self, context: Any) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: Optional[BagTask] = None

    def stop(self, terminate: bool) -> None:
        if terminate:
            self.process.terminate()
        else:
            try:
                self.connection.send(None)
            except (OSError, ValueError):
                pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def _death_detail(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"the worker was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"the worker was killed by signal {-exitcode}"
    return f"the worker exited with status {exitcode}"


class LocalEngine:
    """A pool of ``workers`` processes on this machine, each single-threaded, one bag at a time.

    Workers are started with the ``spawn`` method (nothing of the parent's state is shared) and load the
    compiled kernels once. A worker that dies (killed, out of memory) is replaced; the bag it held is
    evaluated again once, then reported as ``worker_died``.

    Args:
        workers: Number of processes (default: the machine's cores).
        on_start: Called with (task, worker pid) when a worker starts on a bag.
    """

    name = "local"

    def __init__(self, workers: Optional[int] = None, on_start: Optional[Callable[[BagTask, int], None]] = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.on_start = on_start

    def describe(self) -> Dict[str, Any]:
        return {"engine": self.name, "workers": self.workers}

    def run(self, tasks: Sequence[BagTask], on_result: Callable[[BagResult], None]) -> None:
        """Evaluate every task, calling ``on_result`` as each finishes (in completion order).

        A KeyboardInterrupt stops the workers and propagates; the results already given stand.
        """
        context = multiprocessing.get_context("spawn")
        queue = list(tasks)
        attempts: Dict[int, int] = {}
        pool: List[_Worker] = []
        try:
            while queue or any(worker.task is not None for worker in pool):
                while queue and len(pool) < self.workers:
                    pool.append(_Worker(context))
                for worker in pool:
                    if worker.task is None and queue:
                        worker.task = queue.pop(0)
                        attempts[worker.task.number] = attempts.get(worker.task.number, 0) + 1
                        worker.connection.send(worker.task)
                busy = [worker for worker in pool if worker.task is not None]
                ready = wait_for([w.connection for w in busy] + [w.process.sentinel for w in busy])
                for worker in busy:
                    result = None
                    if worker.connection in ready:
                        try:
                            kind, payload = worker.connection.recv()
                        except (EOFError, OSError):
                            kind, payload = "died", None
                        if kind == "started":
                            if self.on_start is not None:
                                self.on_start(worker.task, worker.process.pid)
                            continue
                        result = payload
                    elif worker.process.sentinel not in ready:
                        continue
                    task = worker.task
                    if result is not None:
                        worker.task = None
                        result.timing["attempts"] = attempts[task.number]
                        on_result(result)
                        continue
                    # The worker died with the bag: replace it, retry the bag once.
                    worker.process.join(timeout=5)
                    detail = _death_detail(worker.process.exitcode)
                    worker.task = None
                    worker.stop(terminate=True)
                    pool.remove(worker)
                    if attempts[task.number] < 2:
                        queue.insert(0, task)
                    else:
                        failed = BagResult.failed(task, "worker_died", f"{detail}, twice")
                        failed.timing["attempts"] = attempts[task.number]
                        on_result(failed)
        except KeyboardInterrupt:
            for worker in pool:
                worker.stop(terminate=True)
            pool = []
            raise
        finally:
            for worker in pool:
                worker.stop(terminate=False)


class RayEngine:
    """The same tasks on a Ray cluster: one task per bag, one CPU and ``memory_mb`` declared, retried once.

    Args:
        address: ``"auto"``, a head's address (``host:port`` or ``ray://host:port``), or None for a local Ray
            instance of ``workers`` CPUs started and stopped here.
        workers: CPUs of the local instance (default: the machine's cores); ignored with an address.
        memory_mb: Memory each task declares [MB] (what the scheduler reserves for it).
    """

    name = "ray"

    def __init__(self, address: Optional[str] = None, workers: Optional[int] = None, memory_mb: float = 1024.0) -> None:
        self.address = address
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.memory_mb = memory_mb

    def describe(self) -> Dict[str, Any]:
        return {"engine": self.name, "address": self.address or "local", "workers": self.workers,
                "memory_mb_per_task": self.memory_mb}

    def run(self, tasks: Sequence[BagTask], on_result: Callable[[BagResult], None]) -> None:
        """Evaluate every task on Ray, calling ``on_result`` as each finishes (in completion order)."""
        try:
            import ray
        except ImportError as err:
            raise InputError("the ray engine needs Ray: pip install 'rbd_deriv[fleet]'", "engine") from err
        started = not ray.is_initialized()
        if started:
            options: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                                       "configure_logging": True}
            try:
                if self.address:
                    ray.init(address=self.address, **options)
                else:
                    ray.init(num_cpus=self.workers, **options)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
                raise InputError(f"cannot start or reach {where}: {err}", "address") from err
        remote = ray.remote(num_cpus=1, memory=int(self.memory_mb * 2**20), max_retries=1,
                            retry_exceptions=False)(_ray_task)
        pending = {remote.remote(task): task for task in tasks}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for reference in done:
                    task = pending.pop(reference)
                    try:
                        result = ray.get(reference)
                    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.OutOfMemoryError) as err:
                        result = BagResult.failed(task, "worker_died", f"{type(err).__name__}, after one retry")
                    except ray.exceptions.RayError as err:
                        result = BagResult.failed(task, "error", f"{type(err).__name__}: {str(err).splitlines()[0]}")
                    on_result(result)
        except KeyboardInterrupt:
            # A local instance goes down with its workers in shutdown. On a cluster the tasks are cancelled
            # without force: a task's worker killed while its reply is on the way once made Ray's own core
            # abort the driver (exit 1, "Tried to complete task that was not pending") instead of the
            # interrupt's report and 130.
            if not started:
                for reference in pending:
                    ray.cancel(reference, force=False)
            raise
        finally:
            if started:
                ray.shutdown()


def _ray_task(task: BagTask) -> BagResult:
    single_thread()
    result = evaluate_bag(task)
    # Ray retries a task whose worker died without saying so to the task: the first attempt is the norm.
    result.timing.setdefault("attempts", 1)
    return result


# ------------------------------------------------------------------------------------------- merging


def _median_mad(values: np.ndarray) -> Tuple[float, float]:
    median = float(np.median(values))
    return median, float(np.median(np.abs(values - median)))


def outliers(values: Dict[int, float], k: float) -> Tuple[List[int], Optional[float]]:
    """Bags whose value stands above the others: beyond ``median + k * MAD`` (median absolute deviation).

    With fewer than 3 bags there is no such test (returns ``[], None``). When the MAD is zero (most bags
    equal), the threshold is the median plus 1e-9 of its size, so only bags above the common value count.

    Returns:
        The bag numbers beyond the threshold (ascending), and the threshold.
    """
    if len(values) < 3:
        return [], None
    numbers = sorted(values)
    array = np.array([values[n] for n in numbers])
    median, mad = _median_mad(array)
    threshold = median + k * max(mad, 1e-9 * abs(median))
    return [n for n, value in zip(numbers, array) if value > threshold], threshold


def _joint_totals(parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    count = 0
    mean = 0.0
    m2 = 0.0
    for part in parts:
        n = part["count"]
        delta = part["mean"] - mean
        total = count + n
        mean += delta * n / total
        m2 += part["m2"] + delta * delta * count * n / total
        count = total
    squares = math.fsum(part["sum_squares"] for part in parts)
    energy = math.fsum(part["effort_sum_squares"] for part in parts)
    worst = max(parts, key=lambda part: part["max_abs"])
    histogram = histogram_from(part["histogram"] for part in parts)
    percentiles = {f"p{q}": histogram.quantile(q / 100) for q in (50, 90, 99)}
    return {
        "samples": count,
        "residual_rms": math.sqrt(squares / count),
        "residual_mean": mean,
        "residual_std": math.sqrt(m2 / count),
        "abs_residual_percentiles": percentiles,
        "residual_max_abs": worst["max_abs"],
        "explained": 1.0 - squares / energy if energy > 0 else float("nan"),
    }


def _bag_row(result: BagResult) -> Dict[str, Any]:
    row: Dict[str, Any] = {"number": result.number, "bag": result.name, "path": result.path, "folder": result.folder,
                           "ok": result.ok, "reason": result.reason, "detail": result.detail, "robot": result.robot}
    if not result.ok:
        return row
    per_joint = {}
    for name, part in result.residual.items():
        histogram = histogram_from([part["histogram"]])
        per_joint[name] = {
            "samples": part["count"],
            "residual_rms": math.sqrt(part["sum_squares"] / part["count"]),
            "residual_mean": part["mean"],
            "abs_residual_percentiles": {f"p{q}": histogram.quantile(q / 100) for q in (50, 90, 99)},
            "residual_max_abs": part["max_abs"],
            "residual_max_at_s": part["max_at_s"],
        }
    row.update({
        "start_ns": result.start_ns,
        "duration_s": result.duration_s,
        "messages": result.messages,
        "damage_events": result.damage_events,
        "condition_max": result.condition["max"],
        "condition_max_at_s": result.condition["max_at_s"],
        "per_joint": per_joint,
        "summary": result.summary_file,
        "plot": result.plot_file,
    })
    return row


def _group_key(result: BagResult, group_by: str) -> str:
    return result.folder if group_by == "folder" else result.robot


def merge(results: Sequence[BagResult], group_by: str = "robot", outlier_k: float = 3.0) -> Dict[str, Any]:
    """The fleet report's content (nothing that depends on timing), from the results in any order.

    Args:
        results: One per bag.
        group_by: ``"robot"`` (the URDF's robot name) or ``"folder"`` (the bag's folder).
        outlier_k: A bag stands out on a joint when its residual RMS exceeds the group's median plus
            ``outlier_k`` median absolute deviations.

    Returns:
        ``{"bags": [...], "groups": {key: {...}}, "failures": {reason: count}, "totals": {...}}``.
    """
    ordered = sorted(results, key=lambda result: result.number)
    bags = [_bag_row(result) for result in ordered]
    rows = {row["number"]: row for row in bags}
    failures: Dict[str, int] = {}
    for result in ordered:
        if not result.ok:
            failures[result.reason] = failures.get(result.reason, 0) + 1
    groups: Dict[str, Dict[str, Any]] = {}
    for key in sorted({_group_key(result, group_by) for result in ordered if result.ok}):
        members = [result for result in ordered if result.ok and _group_key(result, group_by) == key]
        # Points over time: bags by start time (then discovery order).
        members.sort(key=lambda result: (result.start_ns if result.start_ns is not None else 0, result.number))
        messages = {name: sum(int(result.messages.get(name) or 0) for result in members)
                    for name in ("total", "evaluated", "rejected", "lost_to_damage")}
        reasons: Dict[str, int] = {}
        for result in members:
            for reason, count in result.messages.get("rejected_by_reason", {}).items():
                reasons[reason] = reasons.get(reason, 0) + int(count)
        joints: List[str] = []
        for result in members:
            joints.extend(name for name in result.residual if name not in joints)
        per_joint: Dict[str, Any] = {}
        for name in joints:
            having = [result for result in members if name in result.residual]
            totals = _joint_totals([result.residual[name] for result in having])
            rms = {result.number: rows[result.number]["per_joint"][name]["residual_rms"] for result in having}
            flagged, threshold = outliers(rms, outlier_k)
            totals.update({"bags": len(having), "outlier_threshold_rms": threshold,
                           "outlier_bags": [rows[n]["bag"] for n in flagged]})
            for number in flagged:
                rows[number].setdefault("outlier_joints", []).append(name)
            per_joint[name] = totals
        worst = max(members, key=lambda result: result.condition["max"])
        condition = histogram_from(result.condition["histogram"] for result in members)
        groups[key] = {
            "robots": sorted({result.robot for result in members}),
            "bags": [rows[result.number]["bag"] for result in members],
            "bag_numbers": [result.number for result in members],
            "first_start_ns": members[0].start_ns,
            "last_start_ns": members[-1].start_ns,
            "messages": {**messages, "rejected_by_reason": dict(sorted(reasons.items()))},
            "damaged_bags": sum(1 for result in members if result.damage_events or result.messages.get("lost_to_damage")),
            "per_joint": per_joint,
            "condition": {"max": worst.condition["max"], "max_bag": worst.name, "max_at_s": worst.condition["max_at_s"],
                          "p50": condition.quantile(0.5), "p99": condition.quantile(0.99),
                          "min": min(result.condition["min"] for result in members)},
        }
    totals = {"bags": len(ordered), "evaluated": sum(1 for r in ordered if r.ok),
              "failed": sum(1 for r in ordered if not r.ok),
              "messages_evaluated": sum(int(r.messages.get("evaluated") or 0) for r in ordered if r.ok)}
    return {"group_by": group_by, "outlier_k": outlier_k, "totals": totals, "failures": dict(sorted(failures.items())),
            "groups": groups, "bags": bags}


def merge_timing(results: Sequence[BagResult], group_by: str = "robot") -> Dict[str, Any]:
    """What changes from run to run: compute time per message per group, wall time and memory per bag."""
    ordered = sorted(results, key=lambda result: result.number)
    groups: Dict[str, Any] = {}
    for key in sorted({_group_key(result, group_by) for result in ordered if result.ok}):
        members = [r for r in ordered if r.ok and _group_key(r, group_by) == key and "compute_us" in r.timing]
        histogram = histogram_from(result.timing["compute_us"] for result in members)
        groups[key] = histogram.percentiles() if histogram is not None else {}
    bags = []
    for result in ordered:
        timing = result.timing
        compute = histogram_from([timing["compute_us"]]) if "compute_us" in timing else None
        bags.append({
            "number": result.number, "bag": result.name,
            "process_s": timing.get("process_s"), "attempts": timing.get("attempts", 1),
            "peak_rss_mb": timing.get("peak_rss_mb"), "pid": timing.get("pid"),
            "compute_us_p50": compute.quantile(0.5) if compute is not None else None,
            "compute_us_p99": compute.quantile(0.99) if compute is not None else None,
            "evaluation_s": timing.get("wall_s", {}).get("total"),
        })
    return {"compute_per_message_us": groups, "bags": bags}
