"""Fleet evaluation (rbd_deriv.replay.fleet): discovery, one bag's task, the local engine's retries, merging.

The merged statistics are checked against evaluating the same data another way: every bag of a robot
concatenated into one bag and evaluated by bag-eval's pipeline, and the per-message residuals of each bag
collected and reduced with numpy.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

from rbd_deriv.replay import bagio, cli, fleet, synthetic
from rbd_deriv.replay.evaluate import Chunk, EvaluationConfig
from rbd_deriv.replay.stats import LogHistogram
from rbd_deriv.replay.storage import BagSource
from rbd_deriv.testing.fleet import write_test_fleet

# Bound of a merged percentile against the sample of rank floor(q (n - 1)): half a logarithmic bin.
PERCENTILE_FACTOR = 10 ** (0.5 / fleet.RESIDUAL_BINS_PER_DECADE)
# bag-eval's settings without the one-call-at-a-time latency sample (timing only).
QUICK = fleet.FleetOptions(evaluation=EvaluationConfig(latency_samples=0))


@pytest.fixture(scope="module")
def test_fleet(tmp_path_factory):
    return write_test_fleet(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def arm_results(test_fleet, tmp_path_factory):
    """Every bag of the fleet evaluated in this process (no engine)."""
    out = tmp_path_factory.mktemp("out")
    entries = fleet.discover([test_fleet.root])
    tasks = fleet.make_tasks(entries, out, fleet.FleetOptions(evaluation=EvaluationConfig(latency_samples=10)))
    return [fleet.evaluate_bag(task) for task in tasks]


def test_discovery_finds_bags_in_folders_and_lists(test_fleet):
    entries = fleet.discover([test_fleet.listing])
    names = {entry.name: entry for entry in entries}
    assert set(names) == set(test_fleet.bags)
    assert names["day9"].problem == "missing" and names["fleet/empty_day"].problem == "empty"
    assert names["fleet/junk.mcap"].problem is None and names["fleet/junk.mcap"].path.is_file()
    # A rosbag2 folder is one bag: its .mcap/.db3 file is not found a second time.
    assert not any(name.endswith((".mcap", ".db3")) and name != "fleet/junk.mcap" for name in names)
    assert names["fleet/arm/day0"].folder == "fleet/arm" and names["fleet/small/day1"].folder == "fleet/small"
    # Sorted, and the same whichever way the bags are given.
    assert [e.name for e in entries] == sorted(e.name for e in entries)
    again = fleet.discover([test_fleet.root / "small" / "day1", test_fleet.root, test_fleet.root / "arm"])
    # A bag reached twice keeps the name of its first path.
    assert {e.name for e in again} == (set(test_fleet.bags) - {"day9", "fleet/small/day1"}) | {"day1"}
    single = fleet.discover([next((test_fleet.root / "arm" / "day0").glob("*.mcap"))])
    assert len(single) == 1 and single[0].name.endswith(".mcap")


def test_a_list_file_that_cannot_be_read_is_an_input_error(tmp_path):
    binary = tmp_path / "bags.txt"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(fleet.InputError, match="neither a bag"):
        fleet.discover([binary])


def test_each_bag_gives_its_result_or_its_reason(test_fleet, arm_results):
    by_name = {result.name: result for result in arm_results}
    for name, expected in test_fleet.bags.items():
        if name == "day9":
            continue  # only reached through the list
        result = by_name[name]
        assert (result.reason or "ok") == expected.reason, (name, result.detail)
        if expected.reason != "ok":
            assert not result.ok and result.detail
            continue
        assert result.robot == expected.robot and result.start_ns == expected.start_ns
        messages = result.messages
        if expected.damaged:
            assert 0 < messages["total"] < expected.messages and messages["lost_to_damage"] == expected.messages - messages["total"]
        else:
            assert messages["total"] == messages["evaluated"] == expected.messages and messages["lost_to_damage"] == 0
        # The residual is the injected noise (a sample of 500 values per joint: within 15 %).
        for stats in result.residual.values():
            rms = np.sqrt(stats["sum_squares"] / stats["count"])
            assert rms == pytest.approx(expected.noise, rel=0.15)
    assert by_name["fleet/junk.mcap"].reason == "damaged" and "cannot open bag" in by_name["fleet/junk.mcap"].detail


def test_urdf_of_another_robot_refuses_foreign_bags(test_fleet, tmp_path):
    from rbd_deriv.core.urdf import bundled_urdf

    options = fleet.FleetOptions(urdf=bundled_urdf("rbd_arm7"), evaluation=EvaluationConfig(latency_samples=0))
    entries = [e for e in fleet.discover([test_fleet.root]) if e.name in ("fleet/small/day0", "fleet/anonymous",
                                                                           "fleet/arm/day1")]
    results = {r.name: r for r in (fleet.evaluate_bag(t) for t in fleet.make_tasks(entries, tmp_path, options))}
    assert results["fleet/small/day0"].reason == "foreign_robot" and "small_arm" in results["fleet/small/day0"].detail
    assert results["fleet/anonymous"].reason == "urdf_mismatch"
    assert results["fleet/arm/day1"].ok


def _residuals(path: Path) -> tuple:
    """Per-message residuals and cond(M) of one bag, through bag-eval's pipeline with a collecting consumer."""
    chunks: List[Chunk] = []
    args = QUICK.bag_eval_arguments(path, path.parent / f"{path.name}_check")
    summary, evaluation = cli.run_evaluation(args, [chunks.append])
    residual = np.concatenate([chunk.residual for chunk in chunks])
    condition = np.concatenate([chunk.condition for chunk in chunks])
    return residual, condition, evaluation.velocity_names


def _concatenate(bags: List[Path], target: Path) -> None:
    """One bag holding the readable joint states of ``bags`` in order, with the first bag's description."""
    store = bagio.package_typestore()
    records = []
    for bag in bags:
        for batch in BagSource(bag).read(["/joint_states"]):
            records += [(int(batch.bag_ns[i]), batch.message(i)) for i in range(len(batch))]
    description = bagio.read_robot_description(BagSource(bags[0]), store)
    synthetic.write_recording(target, store, "mcap", records, robot_description=description)


def test_merged_statistics_match_the_concatenated_data(test_fleet, arm_results, tmp_path):
    merged = fleet.merge(arm_results)
    group = merged["groups"]["rbd_arm7"]
    members = sorted((r for r in arm_results if r.ok and r.robot == "rbd_arm7"), key=lambda r: r.start_ns)
    assert [r.name for r in members] == group["bags"] and len(members) == 5
    paths = [Path(r.path) for r in members]

    # 1. Every bag's per-message residuals, reduced with numpy.
    parts = [_residuals(path) for path in paths]
    residual = np.concatenate([p[0] for p in parts])
    condition = np.concatenate([p[1] for p in parts])
    names = parts[0][2]
    # 2. One bag of all the messages, evaluated by bag-eval.
    _concatenate(paths, tmp_path / "all")
    summary = cli.run(QUICK.bag_eval_arguments(tmp_path / "all", tmp_path / "all_eval"))

    assert group["messages"]["evaluated"] == residual.shape[0] == summary["messages"]["evaluated"]
    assert group["messages"]["lost_to_damage"] == sum(r.messages["lost_to_damage"] for r in members) > 0
    assert group["condition"]["max"] == condition.max() == summary["mass_matrix_condition"]["max"]
    assert group["condition"]["min"] == condition.min()
    for column, name in enumerate(names):
        joint = group["per_joint"][name]
        r = residual[:, column]
        direct = summary["residual"]["per_joint"][name]
        assert joint["samples"] == r.size == direct["samples"]
        assert joint["residual_rms"] == pytest.approx(np.sqrt(np.mean(r**2)), rel=1e-12)
        assert joint["residual_rms"] == pytest.approx(direct["residual_rms"], rel=1e-12)
        assert joint["residual_mean"] == pytest.approx(r.mean(), rel=1e-9, abs=1e-15)
        assert joint["residual_std"] == pytest.approx(r.std(), rel=1e-12)
        assert joint["residual_std"] == pytest.approx(direct["residual_std"], rel=1e-12)
        assert joint["residual_max_abs"] == np.abs(r).max() == direct["residual_max_abs"]
        assert joint["explained"] == pytest.approx(direct["explained"], rel=1e-12)
        for q in (50, 90, 99):
            exact = np.percentile(np.abs(r), q, method="lower")
            value = joint["abs_residual_percentiles"][f"p{q}"]
            assert exact / PERCENTILE_FACTOR <= value <= exact * PERCENTILE_FACTOR, (name, q, value, exact)


def test_merged_histogram_is_the_histogram_of_the_concatenated_samples():
    rng = np.random.default_rng(0)
    samples = [np.abs(rng.standard_cauchy(size)) * 0.01 for size in (5, 1000, 333)]
    sparse = []
    for values in samples:
        histogram = LogHistogram(1e-9, 1e6, 1000)
        histogram.add(values)
        sparse.append(fleet.sparse_histogram(histogram))
    merged = fleet.histogram_from(sparse)
    everything = np.concatenate(samples)
    direct = LogHistogram(1e-9, 1e6, 1000)
    direct.add(everything)
    np.testing.assert_array_equal(merged.counts, direct.counts)
    assert (merged.total, merged.min, merged.max) == (everything.size, everything.min(), everything.max())
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        exact = np.percentile(everything, 100 * q, method="lower")
        assert exact / PERCENTILE_FACTOR <= merged.quantile(q) <= exact * PERCENTILE_FACTOR
    assert fleet.histogram_from([]) is None


def test_outliers_beyond_median_plus_k_mad():
    values = {0: 1.0, 1: 1.1, 2: 0.9, 3: 1.05, 4: 3.0}
    # median 1.05, deviations 0.05 0.05 0.15 0 1.95 -> MAD 0.05; threshold 1.05 + 3 * 0.05 = 1.2
    flagged, threshold = fleet.outliers(values, 3.0)
    assert flagged == [4] and threshold == pytest.approx(1.2)
    assert fleet.outliers(values, 50.0)[0] == []
    assert fleet.outliers({0: 1.0, 1: 5.0}, 3.0) == ([], None)
    assert fleet.outliers({0: 2.0, 1: 2.0, 2: 2.0, 3: 2.5}, 3.0)[0] == [3]


def _bytes_read(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar")


def _kill_mid_bag(pid: int, bag_bytes: int, killed: List[int]) -> None:
    """SIGKILL ``pid`` once it has read 1.5 times the bag since now: inside the second pass over it (the first
    pass reads the whole bag once; the evaluation ends after reading it twice)."""
    try:
        start = _bytes_read(pid)
        while _bytes_read(pid) - start < 1.5 * bag_bytes:
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    except (FileNotFoundError, ProcessLookupError):
        pass  # the worker ended first: the test then fails on the number of kills


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="reads a worker's progress from /proc/<pid>/io (Linux)")
def test_a_worker_killed_mid_bag_loses_only_that_bag(tmp_path):
    # Three bags: one is killed once (then evaluated on its retry), one is killed every time (reported),
    # the last is never touched.
    store = bagio.package_typestore()
    from rbd_deriv.core.urdf import bundled_urdf

    arm = bundled_urdf("rbd_arm7").read_text()
    for name, seconds in (("once", 8.0), ("always", 8.0), ("calm", 1.0)):
        synthetic.write_noisy_recording(tmp_path / "bags" / name, store, arm, seconds, 1000.0, 0.02, seed=len(name))
    size = {name: sum(f.stat().st_size for f in (tmp_path / "bags" / name).glob("*.mcap")) for name in ("once", "always")}
    tasks = fleet.make_tasks(fleet.discover([tmp_path / "bags"]), tmp_path / "out", QUICK)
    killed: Dict[str, List[int]] = {"once": [], "always": []}
    watchers: List[threading.Thread] = []

    def on_start(task: fleet.BagTask, pid: int) -> None:
        name = Path(task.entry.name).name
        if name == "always" or (name == "once" and not watchers_for(name)):
            watcher = threading.Thread(target=_kill_mid_bag, args=(pid, size[name], killed[name]), name=name)
            watcher.start()
            watchers.append(watcher)

    def watchers_for(name: str) -> List[threading.Thread]:
        return [w for w in watchers if w.name == name]

    results: List[fleet.BagResult] = []
    fleet.LocalEngine(2, on_start=on_start).run(tasks, results.append)
    for watcher in watchers:
        watcher.join()
    by_name = {Path(r.name).name: r for r in results}
    assert len(results) == 3 and {name: len(pids) for name, pids in killed.items()} == {"once": 1, "always": 2}
    assert by_name["once"].ok and by_name["once"].timing["attempts"] == 2
    assert by_name["once"].messages["evaluated"] == 8000
    assert not by_name["always"].ok and by_name["always"].reason == "worker_died"
    assert "SIGKILL" in by_name["always"].detail and by_name["always"].timing["attempts"] == 2
    assert by_name["calm"].ok and by_name["calm"].timing["attempts"] == 1
    # The bag whose retry succeeded gives what an untouched evaluation gives.
    again = fleet.evaluate_bag(next(t for t in tasks if t.entry.name.endswith("once")))
    assert _same_residual(again, by_name["once"])


def _same_residual(a: fleet.BagResult, b: fleet.BagResult) -> bool:
    for name in a.residual:
        x, y = a.residual[name], b.residual[name]
        if any(x[k] != y[k] for k in ("count", "mean", "m2", "sum_squares", "max_abs")):
            return False
        if not np.array_equal(x["histogram"]["counts"], y["histogram"]["counts"]):
            return False
    return set(a.residual) == set(b.residual)


def test_a_worker_computes_on_one_thread():
    # In a fresh process, as a worker starts: numba's pool and every BLAS loaded by the library hold one thread.
    import subprocess
    import sys

    code = ("from rbd_deriv.replay.fleet import single_thread; single_thread(); import rbd_deriv, numba, threadpoolctl; "
            "print(numba.get_num_threads(), [i['num_threads'] for i in threadpoolctl.threadpool_info()])")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    numba_threads, blas = run.stdout.split(" ", 1)
    assert numba_threads == "1" and blas.strip() != "[]" and set(eval(blas)) == {1}, run.stdout


def _open_bag_position(pid: int, marker: str) -> Optional[float]:
    """How far [0..1] process ``pid`` has read the bag file whose path holds ``marker``; None when not open."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if marker in target and target.endswith(".mcap"):
            position = int(Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().split()[1])
            return position / Path(target).stat().st_size
    return None


def _ray_task_processes() -> List[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_ray_task"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.skipif(not Path("/proc/self/fdinfo").exists(), reason="watches the workers through /proc (Linux)")
def test_a_ray_worker_killed_mid_bag_loses_only_that_bag(tmp_path):
    # As the local engine's test, on a local Ray instance of one CPU: a watcher kills the Ray worker running a
    # bag once it has read half of the bag's file (once for "once", every time for "always").
    pytest.importorskip("ray")
    store = bagio.package_typestore()
    from rbd_deriv.core.urdf import bundled_urdf

    arm = bundled_urdf("rbd_arm7").read_text()
    for name, seconds in (("always", 8.0), ("calm", 1.0), ("once", 8.0)):
        synthetic.write_noisy_recording(tmp_path / "bags" / name, store, arm, seconds, 1000.0, 0.02, seed=len(name))
    tasks = fleet.make_tasks(fleet.discover([tmp_path / "bags"]), tmp_path / "out", QUICK)
    killed: Dict[str, List[int]] = {"always": [], "once": []}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for pid in _ray_task_processes():
                for name in ("always", "once"):
                    if pid in killed[name] or (name == "once" and killed["once"]):
                        continue
                    try:
                        position = _open_bag_position(pid, f"/bags/{name}/")
                    except (OSError, IndexError, ValueError):
                        continue
                    if position is not None and position > 0.5:
                        os.kill(pid, signal.SIGKILL)
                        killed[name].append(pid)
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    results: List[fleet.BagResult] = []
    try:
        fleet.RayEngine(workers=1).run(tasks, results.append)
    finally:
        stop.set()
        watcher.join()
    by_name = {Path(r.name).name: r for r in results}
    assert len(results) == 3 and {name: len(pids) for name, pids in killed.items()} == {"always": 2, "once": 1}
    assert not by_name["always"].ok and by_name["always"].reason == "worker_died"
    assert by_name["once"].ok and by_name["once"].messages["evaluated"] == 8000
    assert by_name["calm"].ok
    assert _same_residual(fleet.evaluate_bag(next(t for t in tasks if t.entry.name.endswith("once"))), by_name["once"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory from ru_maxrss in KiB (Linux)")
def test_a_worker_does_not_grow_with_the_number_of_bags(tmp_path):
    # One worker, eight bags: its peak resident memory after the second bag and after the last differ by
    # less than 20 MB (keeping the outputs of a bag, about 2.8 kB a message for the arm, would add over 5 MB a bag here).
    store = bagio.package_typestore()
    from rbd_deriv.core.urdf import bundled_urdf

    arm = bundled_urdf("rbd_arm7").read_text()
    for k in range(8):
        synthetic.write_noisy_recording(tmp_path / "bags" / f"day{k}", store, arm, 2.0, 1000.0, 0.02, seed=k)
    tasks = fleet.make_tasks(fleet.discover([tmp_path / "bags"]), tmp_path / "out", QUICK)
    results: List[fleet.BagResult] = []
    fleet.LocalEngine(1).run(tasks, results.append)
    assert all(r.ok for r in results) and len({r.timing["pid"] for r in results}) == 1
    peaks = [r.timing["peak_rss_mb"] for r in sorted(results, key=lambda r: r.number)]
    assert peaks == sorted(peaks) and peaks[-1] - peaks[1] < 20.0, peaks
