"""The launch tests under plain pytest: they need launch_testing's pytest plugin to start their launch
description. pytest 9 cannot load it (ros2/launch#979), so pyproject.toml blocks it (``-p no:launch_testing``),
and without it pytest would run the test classes against nothing; they are then reported as skipped with the
ways that work: ``launch_test <file>`` and ``colcon test`` (which calls launch_test)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if config.pluginmanager.hasplugin("launch_testing"):
        return
    skip = pytest.mark.skip(reason="launch_testing's pytest plugin is not loaded (pytest 9, ros2/launch#979): "
                                   "run `launch_test test/launch/<file>` or `colcon test`")
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(skip)
