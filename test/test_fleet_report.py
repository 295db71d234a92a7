"""The fleet report's files (rbd_deriv.replay.fleet_report): a page whose every image and link resolves on disk,
a CSV that says what the JSON says, and timings kept to their own block."""

from __future__ import annotations

import copy
import csv
import io
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import List

import pytest

from rbd_deriv.replay import fleet, fleet_report
from rbd_deriv.replay.evaluate import EvaluationConfig
from rbd_deriv.testing.fleet import write_test_fleet


class _References(HTMLParser):
    """Every ``src`` and ``href`` of the page, and the tags met."""

    def __init__(self) -> None:
        super().__init__()
        self.images: List[str] = []
        self.links: List[str] = []
        self.tags: List[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes["src"])
        if "href" in attributes:
            self.links.append(attributes["href"])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet")
    test_fleet = write_test_fleet(folder)
    out = folder / "report"
    tasks = fleet.make_tasks(fleet.discover([test_fleet.listing]), out / "bags",
                             fleet.FleetOptions(evaluation=EvaluationConfig(latency_samples=20), bag_plots=True))
    return out, [fleet.evaluate_bag(task) for task in tasks]


def _write(out: Path, results, wall_s: float = 1.0) -> Path:
    merged = fleet.merge(results)
    timing = {"run": {"engine": "local", "workers": 2, "wall_s": wall_s, "load_before": 0.5},
              **fleet.merge_timing(results)}
    return fleet_report.write_report(out, merged, timing)


def test_every_image_and_link_of_the_page_resolves(results):
    out, bag_results = results
    page = _write(out, bag_results)
    parser = _References()
    parser.feed(page.read_text())
    assert "script" not in parser.tags  # a static page
    # Two groups and their timing plots, and every evaluated bag's summary and PNG.
    assert len(parser.images) == 4
    evaluated = [r for r in bag_results if r.ok]
    assert sum(link.endswith("summary.json") for link in parser.links) == len(evaluated) == 7
    assert sum(link.endswith("report.png") for link in parser.links) == 7
    for reference in parser.images + parser.links:
        assert "://" not in reference and not reference.startswith("/"), reference
        target = page.parent / reference
        assert target.is_file() and target.stat().st_size > 0, reference
        if reference.endswith(".png"):
            assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if reference.endswith(".json"):
            json.loads(target.read_text())
    summary = json.loads((page.parent / next(l for l in parser.links if l.endswith("summary.json"))).read_text())
    assert summary["outputs"] == {"json": "summary.json", "png": "report.png"}


def test_csv_rows_say_what_the_json_says(results):
    out, bag_results = results
    merged = fleet.merge(bag_results)
    rows = list(csv.DictReader(io.StringIO(fleet_report.bags_csv(merged))))
    assert [row["bag"] for row in rows] == [row["bag"] for row in merged["bags"]]
    for row, bag in zip(rows, merged["bags"]):
        assert row["ok"] == str(int(bag["ok"])) and row["reason"] == bag["reason"]
        if not bag["ok"]:
            assert row["evaluated"] == "" and all(row[k] == "" for k in row if k.startswith("rms:"))
            continue
        assert int(row["evaluated"]) == bag["messages"]["evaluated"]
        assert float(row["condition_max"]) == bag["condition_max"]
        for name, joint in bag["per_joint"].items():
            assert float(row[f"rms:{name}"]) == joint["residual_rms"]


def test_timings_stay_in_their_block(results, tmp_path):
    _, bag_results = results
    slow = copy.deepcopy(bag_results)
    for result in slow:
        if "compute_us" in result.timing:
            compute = result.timing["compute_us"]
            compute["bins"] = compute["bins"] + 700  # 10 ** 0.7, 5 times slower
            for key in ("min", "max", "sum"):
                compute[key] *= 10 ** 0.7
        result.timing["process_s"] = 99.0
    first, second = _write(tmp_path / "a", bag_results, 1.0), _write(tmp_path / "b", slow, 2.0)
    for name in ("fleet.json", "bags.csv", "group_rbd_arm7.png", "group_small_arm.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    pages = [page.read_text() for page in (first, second)]
    assert pages[0] != pages[1]
    outside = [page.split(fleet_report.TIMING_BEGIN)[0] + page.split(fleet_report.TIMING_END)[1] for page in pages]
    assert outside[0] == outside[1]
    assert (tmp_path / "a" / "timing_rbd_arm7.png").read_bytes() != (tmp_path / "b" / "timing_rbd_arm7.png").read_bytes()
