"""Tests of rbd_deriv.bench.soak, the soak benchmark's command line: its report and exit code, its JSON, on
made-up results (the soak itself runs in test_dynamics_soak.py)."""

from __future__ import annotations

import json

from rbd_deriv.bench import SUBCOMMANDS, soak
from rbd_deriv.nodes.dynamics_soak import SoakResult


def balanced_result() -> SoakResult:
    return SoakResult(duration_s=6.0, rate_hz=1000.0, sent=6600, sent_bad={"non_finite": 50, "future": 50},
                      inputs=6400, outputs=6300, refused={"non_finite": 50, "future": 50}, lost=200,
                      received={"linearization": 6300, "bias_torques": 6300}, rss_start=100 * 2**20,
                      rss_end=101 * 2**20, rss_max=102 * 2**20)


def test_report_gives_the_memory_the_counts_and_the_balance():
    result = balanced_result()
    text = soak.report(result)
    assert result.balanced
    assert "node RSS: start 100.0 MiB, end 101.0 MiB, max 102.0 MiB" in text
    assert "sent 6600 joint_states (100 broken: non_finite 50, future 50)" in text
    assert "6400 taken, 6300 answered with outputs, 100 refused (future 50, non_finite 50), 200 lost" in text
    assert "6600 = 6300 + 100 + 200: holds" in text
    result.lost = 199
    assert "DOES NOT HOLD" in soak.report(result)


def test_command_line_writes_the_figures_and_fails_on_a_broken_balance(tmp_path, monkeypatch, capsys):
    assert SUBCOMMANDS["soak"] == "rbd_deriv.bench.soak"
    results = [balanced_result()]
    monkeypatch.setattr(soak, "run_soak", lambda *arguments, **options: results[-1])
    path = tmp_path / "soak.json"
    assert soak.main(["--duration", "6", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert document["balanced"] is True and document["sent"] == 6600 and "machine" in document
    assert "dynamics node soak: 6 s at 1000 Hz" in capsys.readouterr().out
    results.append(balanced_result())
    results[-1].node_alive = False
    assert soak.main([]) == 1
    results.append(balanced_result())
    results[-1].outputs -= 1
    assert soak.main([]) == 1
