"""``fleet-eval`` end to end (rbd_deriv.replay.fleet_cli): the test fleet through the local engine and through
Ray gives the same report, apart from the timings; Ctrl-C leaves a report; bad options exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rbd_deriv.replay import fleet_cli
from rbd_deriv.replay.fleet_report import TIMING_BEGIN, TIMING_END
from rbd_deriv.testing.fleet import write_test_fleet

# Files (and per-bag summaries) that must not depend on the engine; the page is compared outside its timing block.
SAME_FILES = ("fleet.json", "bags.csv", "group_rbd_arm7.png", "group_small_arm.png")


@pytest.fixture(scope="module")
def test_fleet(tmp_path_factory):
    return write_test_fleet(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def local_report(test_fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "report"
    assert fleet_cli.main([str(test_fleet.listing), "--out-dir", str(out), "--workers", "2", "--quiet",
                           "--latency-samples", "20"]) == 0
    return out


def _without_timing(page: str) -> str:
    before, rest = page.split(TIMING_BEGIN)
    _, after = rest.split(TIMING_END)
    return before + after


def _summaries(report: Path) -> dict:
    found = {}
    for path in sorted((report / "bags").glob("*/summary.json")):
        summary = json.loads(path.read_text())
        assert set(summary["timing"]) >= {"wall_s", "batched_compute_per_message_us"}
        summary.pop("timing")
        found[path.parent.name] = summary
    return found


def test_local_report_has_a_row_per_bag_with_its_reason(test_fleet, local_report):
    report = json.loads((local_report / "fleet.json").read_text())
    rows = {row["bag"]: row for row in report["bags"]}
    assert set(rows) == set(test_fleet.bags)
    for name, expected in test_fleet.bags.items():
        assert (rows[name]["reason"] or "ok") == expected.reason, rows[name]
    assert report["totals"] == {"bags": 12, "evaluated": 7, "failed": 5,
                                "messages_evaluated": sum(rows[n]["messages"]["evaluated"] for n in rows if rows[n]["ok"])}
    assert set(report["groups"]) == {"rbd_arm7", "small_arm"}
    arm = report["groups"]["rbd_arm7"]
    # Day 2 was recorded with 5 times the noise: it is the outlier of every joint, and the only one.
    for joint in arm["per_joint"].values():
        assert joint["outlier_bags"] == [test_fleet.outlier]
    assert rows[test_fleet.outlier]["outlier_joints"] == list(arm["per_joint"])
    assert arm["damaged_bags"] == 1 and arm["messages"]["lost_to_damage"] == rows["fleet/arm/cut"]["messages"]["lost_to_damage"] > 0
    # Points over time: by start time.
    starts = [rows[name]["start_ns"] for name in arm["bags"]]
    assert starts == sorted(starts)
    csv_lines = (local_report / "bags.csv").read_text().splitlines()
    assert len(csv_lines) == 13 and csv_lines[0].startswith("number,bag,folder,robot,ok,reason")
    timing = json.loads((local_report / "timing.json").read_text())
    assert timing["run"]["engine"] == "local" and timing["run"]["workers"] == 2
    assert all(bag["compute_us_p50"] > 0 for bag in timing["bags"] if rows[bag["bag"]]["ok"])


def test_ray_engine_gives_the_same_report(test_fleet, local_report, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "report"
    assert fleet_cli.main([str(test_fleet.listing), "--out-dir", str(out), "--engine", "ray", "--workers", "2",
                           "--quiet", "--latency-samples", "20"]) == 0
    for name in SAME_FILES:
        assert (out / name).read_bytes() == (local_report / name).read_bytes(), name
    page, local_page = (out / "index.html").read_text(), (local_report / "index.html").read_text()
    assert _without_timing(page) == _without_timing(local_page)
    assert _summaries(out) == _summaries(local_report) and len(_summaries(out)) == 7
    timing = json.loads((out / "timing.json").read_text())
    assert timing["run"]["engine"] == "ray"
    # The timing block is not empty and does differ between the runs: the comparison above had work to do.
    assert "compute per message" in page and page != local_page


def test_folder_grouping_and_a_urdf_that_refuses_other_robots(test_fleet, tmp_path):
    from rbd_deriv.core.urdf import bundled_urdf

    out = tmp_path / "report"
    assert fleet_cli.main([str(test_fleet.root), "--out-dir", str(out), "--workers", "1", "--quiet", "--group-by",
                           "folder", "--urdf", str(bundled_urdf("rbd_arm7")), "--latency-samples", "0"]) == 0
    report = json.loads((out / "fleet.json").read_text())
    rows = {row["bag"]: row for row in report["bags"]}
    assert rows["fleet/small/day0"]["reason"] == rows["fleet/small/day1"]["reason"] == "foreign_robot"
    assert rows["fleet/anonymous"]["reason"] == "urdf_mismatch"
    assert set(report["groups"]) == {"fleet/arm"} and len(report["groups"]["fleet/arm"]["bags"]) == 5


@pytest.mark.parametrize("case, pattern", [
    ("nothing", "no bag found"),
    ("bad_workers", "--workers must be >= 1"),
    ("not_a_report", "holds files but no fleet report"),
    ("address_without_ray", "--address is for --engine ray"),
    ("missing_urdf", "URDF file not found"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, case, pattern):
    (tmp_path / "empty").mkdir()
    bag_dir = tmp_path / "empty"
    out = tmp_path / "out"
    args = [str(bag_dir), "--out-dir", str(out), "--quiet"]
    if case == "nothing":
        args[0] = str(tmp_path / "empty_list.txt")
        (tmp_path / "empty_list.txt").write_text("# nothing\n")
    elif case == "bad_workers":
        args += ["--workers", "0"]
    elif case == "not_a_report":
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    elif case == "address_without_ray":
        args += ["--address", "auto"]
    elif case == "missing_urdf":
        args += ["--urdf", str(tmp_path / "absent.urdf")]
    assert fleet_cli.main(args) == 2
    err = capsys.readouterr().err
    assert pattern in err and "Traceback" not in err
    if case == "not_a_report":
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not out.exists()


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_ctrl_c_leaves_a_report_of_what_finished(tmp_path, engine):
    if engine == "ray":
        pytest.importorskip("ray")
    from rbd_deriv.core.urdf import bundled_urdf
    from rbd_deriv.replay import bagio, synthetic

    store = bagio.package_typestore()
    arm = bundled_urdf("rbd_arm7").read_text()
    synthetic.write_noisy_recording(tmp_path / "bags" / "a_short", store, arm, 0.5, 1000.0, 0.02, seed=1)
    for k in range(3):
        synthetic.write_noisy_recording(tmp_path / "bags" / f"b_long{k}", store, arm, 30.0, 1000.0, 0.02, seed=2 + k)
    out = tmp_path / "report"
    command = [sys.executable, "-m", "rbd_deriv", "fleet-eval", str(tmp_path / "bags"), "--out-dir", str(out),
               "--workers", "1", "--latency-samples", "0", "--engine", engine]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stderr:
        lines.append(line)
        if "a_short" in line:
            child.send_signal(signal.SIGINT)  # the worker has just started the first long bag
            break
    out_text, rest = child.communicate(timeout=120)
    assert child.returncode == 130, "".join(lines) + rest
    assert "interrupted" in rest and "Traceback" not in rest
    report = json.loads((out / "fleet.json").read_text())
    rows = {row["bag"]: row for row in report["bags"]}
    assert report["interrupted"] and rows["bags/a_short"]["ok"]
    # Each long bag takes about a second here: the ones not finished when the signal came are marked.
    reasons = [rows[f"bags/b_long{k}"]["reason"] or "ok" for k in range(3)]
    assert set(reasons) <= {"ok", "interrupted"} and reasons.count("interrupted") >= 2
    if engine == "local":
        assert reasons == sorted(reasons, key=lambda reason: reason != "ok")  # one worker: in order
    assert "interrupted" in (out / "index.html").read_text()
    # The workers were stopped with the run (Ray's with its instance).
    pids = [bag["pid"] for bag in json.loads((out / "timing.json").read_text())["bags"] if bag["pid"]]
    assert pids and not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_ray_address_without_a_cluster_is_a_clear_error(test_fleet, tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    status = fleet_cli.main([str(test_fleet.root / "arm" / "day0"), "--out-dir", str(tmp_path / "out"), "--quiet",
                             "--engine", "ray", "--address", "auto"])
    err = capsys.readouterr().err
    assert status == 2 and "cannot start or reach the Ray cluster at auto" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists(), "a run that cannot start writes nothing"


def test_an_engine_that_fails_leaves_the_folder_as_it_found_it(test_fleet, tmp_path):
    """An engine error mid-run (a cluster lost) gives no report and leaves no per-bag folder behind, so the same
    --out-dir takes the next run; a folder holding only such leftovers is taken too."""
    from rbd_deriv.exceptions import InputError

    class Lost:
        def run(self, tasks, on_result):
            raise InputError("the cluster went away", "engine")

        def describe(self):
            return {"engine": "lost", "workers": 1}

    out = tmp_path / "out"
    args = fleet_cli.build_parser().parse_args([str(test_fleet.root / "arm" / "day0"), "--out-dir", str(out),
                                                "--quiet"])
    with pytest.raises(InputError, match="went away"):
        fleet_cli.run(args, engine=Lost())
    assert not out.exists()
    (out / "bags" / "0001").mkdir(parents=True)  # what a killed run leaves
    assert fleet_cli.main([str(test_fleet.root / "arm" / "day0"), "--out-dir", str(out), "--quiet"]) == 0
    assert (out / "fleet.json").is_file()
