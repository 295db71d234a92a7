"""Progress on stderr and stage timing (rbd_deriv.replay.progress): redraws on a terminal, tenths and a
heartbeat into a log, stages that add up to the wall time."""

from __future__ import annotations

import io

from rbd_deriv.replay import progress
from rbd_deriv.replay.progress import ProgressBar, StageClock


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_output_has_one_line_per_tenth():
    stream = io.StringIO()
    with ProgressBar("read", 1000, stream=stream) as bar:
        for done in range(0, 1001, 7):
            bar.update(done)
        bar.update(1000)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11
    assert lines[0].startswith("read") and "0.0%" in lines[0]
    assert "100.0% 1000/1000" in lines[-1] and "#" * 30 in lines[-1]


def test_terminal_output_redraws_in_place():
    stream = _Terminal()
    bar = ProgressBar("compute", 10, stream=stream)
    bar.update(5)
    bar.advance(5)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "10/10" in text.splitlines()[-1]


def test_unknown_total_and_disabled():
    stream = io.StringIO()
    with ProgressBar("play", None, stream=stream) as bar:
        bar.update(42)
    assert stream.getvalue().startswith("play") and " 42 " in stream.getvalue()
    quiet = io.StringIO()
    with ProgressBar("read", 10, stream=quiet, enabled=False) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_a_log_gets_a_line_at_least_every_heartbeat(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    stream = io.StringIO()
    bar = ProgressBar("evaluate", 1_000_000, stream=stream, heartbeat=5.0)
    for step in range(1, 40):
        clock[0] += 1.0  # one second per update, far less than a tenth of the work each time
        bar.update(step)
    bar.close()
    lines = stream.getvalue().splitlines()
    # The first line, one every 5 s over 39 s, and the last.
    assert len(lines) == 1 + 7 + 1
    assert all("evaluate" in line for line in lines)


def test_stage_clock_adds_up_to_the_wall_time(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    stages = StageClock()
    for _ in range(3):
        with stages.stage("read"):
            clock[0] += 0.5
        clock[0] += 0.25  # between stages: nobody's
        with stages.stage("compute"):
            clock[0] += 1.0
    assert stages.breakdown() == {"read": 1.5, "compute": 3.0, "other": 0.75, "total": 5.25}
