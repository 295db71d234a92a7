"""The stderr progress bar (rbd_deriv.replay.progress): redraws on a terminal, tenths into a log."""

from __future__ import annotations

import io

from rbd_deriv.replay.progress import ProgressBar


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
