"""Tests of rbd_deriv.bench.soak, the soak benchmark's command line: its reports and exit codes, its JSON, on
made-up results (the soaks themselves run in test_dynamics_soak.py and test_legged_soak.py)."""

from __future__ import annotations

import json

from rbd_deriv.bench import SUBCOMMANDS, soak
from rbd_deriv.nodes.dynamics_soak import SoakResult
from rbd_deriv.nodes.legged_soak import LeggedSoakResult
from rbd_deriv.nodes.soak_accounting import TopicBalance


def assert_contains(text: str, *parts: str) -> None:
    for part in parts:
        assert part in text, (part, text)


def balanced_result() -> SoakResult:
    return SoakResult(duration_s=6.0, rate_hz=1000.0, sent=6600, sent_bad={"non_finite": 50, "future": 50},
                      inputs=6400, outputs=6300, refused={"non_finite": 50, "future": 50}, lost=200,
                      received={"linearization": 6300, "bias_torques": 6300}, rss_start=100 * 2**20,
                      rss_end=101 * 2**20, rss_max=102 * 2**20)


def test_report_gives_the_memory_the_counts_and_the_balance():
    result = balanced_result()
    text = soak.report(result)
    assert result.balanced
    assert_contains(text, "node RSS: start 100.0 MiB, end 101.0 MiB, max 102.0 MiB",
                    "sent 6600 joint_states (100 broken: non_finite 50, future 50)",
                    "6400 taken, 6300 answered with outputs, 100 refused (future 50, non_finite 50), 200 lost",
                    "6600 = 6300 + 100 + 200: holds")
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


def legged_result() -> LeggedSoakResult:
    topics = {
        "odom": TopicBalance("odom", False, {"non_finite": "odom/bad_base"}, sent=40, sent_bad={"non_finite": 40},
                             used=6000, refused={"odom/bad_base": 40}, superseded=24000),
        "push": TopicBalance("push", True, {"over_budget": "push/budget"}, sent=12, sent_bad={"over_budget": 6},
                             used=6, refused={"push/budget": 6})}
    return LeggedSoakResult(robot="solo12", duration_s=30.0, simulated_s=29.5, topics=topics, beyond_limits=5,
                            clamped=4, pushes_applied=6,
                            rss={"sim": {"start": 300 * 2**20, "end": 301 * 2**20, "max": 302 * 2**20}},
                            mpc_rate_hz=199.5, mpc_rate_min_hz=180.0, commands={"plan": 5985},
                            walked_m=5.8, turned_rad=4.5, alive={"sim": True, "mpc": True})


def test_legged_report_gives_each_topic_its_balance_the_memory_falls_and_rate():
    result = legged_result()
    text = soak.legged_report(result)
    assert result.balanced
    assert_contains(text, "legged soak, solo12: 30 s on the simulated clock (29.5 s of it), nodes alive at the end: "
                    "mpc True, sim True",
                    "sim RSS: start 300.0 MiB, end 301.0 MiB, max 302.0 MiB",
                    "odom: sent 40 (non_finite 40); node: used 6000, refused 40 (odom/bad_base 40), superseded 24000",
                    "40 = 40 (+ 0): holds", "sent = used + refused + superseded + lost: 12 = 6 + 6 + 0 + 0: holds",
                    "fell: False; walked 5.8 m", "MPC: 199.5 Hz over the soak")
    result.topics["push"].lost = 1
    assert "DOES NOT HOLD" in soak.legged_report(result)
    result.topics["push"].lost, result.topics["odom"].lost = 0, 3
    result.topics["odom"].refused = {"odom/bad_base": 38}
    assert "40 = 38 (+ 3): holds within the losses" in soak.legged_report(result)


def test_command_line_soaks_a_robot_and_fails_on_a_fall(tmp_path, monkeypatch, capsys):
    results = [legged_result()]
    monkeypatch.setattr(soak, "run_legged_soak", lambda *arguments, **options: results[-1])
    path = tmp_path / "legged.json"
    assert soak.main(["--robot", "solo12", "--duration", "30", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert document["balanced"] is True and document["topics"]["push"]["sent"] == 12 and "machine" in document
    assert "legged soak, solo12" in capsys.readouterr().out
    results.append(legged_result())
    results[-1].fell = True
    assert soak.main(["--robot", "solo12"]) == 1
    results.append(legged_result())
    results[-1].alive["mpc"] = False
    assert soak.main(["--robot", "solo12"]) == 1
