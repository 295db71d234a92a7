"""What both demos share: the package's parameter files, the nodes started as processes, the recording node.

Each demo starts its nodes (``rbd_deriv.nodes.<node>``) as processes with the files of the package's
``config/`` folder, waits until the MPC node sends commands from its plan, records what the loop does through
an rclpy node of its own (a :class:`LoopRecorder`), then stops the nodes and reports. The figures both reports
share (solve times, commands by source, refusals) are made here too.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from rbd_deriv.nodes.processes import CLOCKS, config_folder, start_node

__all__ = ["CLOCKS", "STARTUP_TIMEOUT", "LoopRecorder", "clock_fields", "config_folder", "exited", "logs_folder",
           "loop_counts", "read_parameters", "solve_times", "spin_until", "start_node", "wait_for_loop"]

#: Seconds given to the processes to start before giving up: a few once the kernels are compiled
#: (./run setup, colcon build); kernels without signatures (the MPC solver's) compile at their first use
#: unless their module has a precompile hook (rbd_deriv.precompile), then load from the cache.
STARTUP_TIMEOUT = 180.0


def read_parameters(file_name: str) -> dict:
    """{node name: {parameter: value}} of the parameter file ``file_name`` of config/ (``node: ros__parameters:``
    sections)."""
    import yaml

    with open(config_folder() / file_name, encoding="utf-8") as stream:
        document = yaml.safe_load(stream)
    return {node: section["ros__parameters"] for node, section in document.items()}


def exited(processes: Sequence[subprocess.Popen]) -> list[str]:
    """The names of the nodes of ``processes`` (started by :func:`start_node`) that are no longer running."""
    return [p.args[2].rsplit(".", 1)[-1] for p in processes if p.poll() is not None]


def logs_folder(path: Optional[str]) -> Path:
    """The folder for the nodes' logs: ``path`` (``--logs``), else a new temporary one; made if missing."""
    logs = Path(path or tempfile.mkdtemp(prefix="rbd_deriv_demo_"))
    logs.mkdir(parents=True, exist_ok=True)
    return logs


class LoopRecorder:
    """rclpy node of a demo's own process: records the MPC node's torque commands and keeps the last
    /diagnostics status of each node. A demo adds what it publishes and the other topics it records.

    Attributes:
        commands: (receive time [s] on the node's clock, torques (nu,) [N m]) while :attr:`recording`.
        diagnostics: The last key-value pairs of each /diagnostics status, by status name.
    """

    def __init__(self, name: str, command_topic: str, clock: str = "wall") -> None:
        """``clock``: one of :data:`CLOCKS`, the nodes' (``simulated``: this node's clock is /clock)."""
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.parameter import Parameter
        from std_msgs.msg import Float64MultiArray

        import rclpy

        self.node = rclpy.create_node(
            name, parameter_overrides=[Parameter("use_sim_time", value=clock == "simulated")])
        self.commands: list[tuple[float, np.ndarray]] = []
        self.diagnostics: dict[str, dict[str, str]] = {}
        self.recording = False
        self.node.create_subscription(Float64MultiArray, command_topic, self._on_command, 100)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def now(self) -> float:
        """The node's clock [s]."""
        return self.node.get_clock().now().nanoseconds * 1e-9

    def poll(self) -> None:
        """Take what the demo's polled subscriptions received since the previous call (none here)."""

    def destroy(self) -> None:
        """Remove the node (its subscriptions and publishers with it)."""
        self.node.destroy_node()

    def _on_command(self, message: Any) -> None:
        if self.recording:
            self.commands.append((self.now(), np.array(message.data)))

    def _on_diagnostics(self, message: Any) -> None:
        for status in message.status:
            self.diagnostics[status.name] = {kv.key: kv.value for kv in status.values}

    def mpc_diagnostics(self) -> dict[str, str]:
        """The MPC node's last /diagnostics values ({} before its first report)."""
        return self._diagnostics_of(": MPC")

    def sim_diagnostics(self) -> dict[str, str]:
        """The simulator's last /diagnostics values ({} before its first report)."""
        return self._diagnostics_of(": simulator")

    def _diagnostics_of(self, suffix: str) -> dict[str, str]:
        for name, values in self.diagnostics.items():
            if name.endswith(suffix):
                return values
        return {}


def spin_until(recorder: LoopRecorder, condition: Callable[[], bool], timeout: float) -> bool:
    """Spin ``recorder`` (and poll it) until ``condition()`` holds, at most ``timeout`` [s]; whether it held."""
    import rclpy

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rclpy.spin_once(recorder.node, timeout_sec=0.01)
        recorder.poll()
        if condition():
            return True
    return False


def wait_for_loop(recorder: LoopRecorder, processes: Sequence[subprocess.Popen] = ()) -> bool:
    """Wait up to STARTUP_TIMEOUT for the MPC's first commands from its plan (the loop runs) and the recorder's
    clock (on /clock, it reads 0 until its first message); False if they do not come, or one of ``processes``
    exits meanwhile."""
    return spin_until(
        recorder, lambda: int(recorder.mpc_diagnostics().get("commands_plan", "0")) > 0 and recorder.now() > 0.0
        or any(p.poll() is not None for p in processes), STARTUP_TIMEOUT) and all(
        p.poll() is None for p in processes)


def clock_fields(clock: str, simulated_s: float, wall_s: float) -> dict:
    """The run's clock (one of :data:`CLOCKS`) and its pace: ``simulated_s`` seconds of the nodes' clock over
    ``wall_s`` of the wall clock (1 on the wall clock; below 1 where a busy machine slowed the simulated time)."""
    return {"clock": clock, "real_time_factor": simulated_s / wall_s if wall_s > 0.0 else float("nan")}


def solve_times(diagnostics: dict) -> dict:
    """The MPC's solve-time percentiles [ms] of its /diagnostics values (``None`` if it reported none):
    ``solve_p50_ms``, ``solve_p99_ms``."""
    return {f"solve_{p}_ms": float(diagnostics[f"solve_time_{p}_us"]) * 1e-3
            if f"solve_time_{p}_us" in diagnostics else None for p in ("p50", "p99")}


def loop_counts(diagnostics: dict, simulator: dict) -> dict:
    """The counts of the MPC node's (``diagnostics``) and the simulator's /diagnostics values: the MPC's
    commands by source, both nodes' refused messages by reason."""
    def by_prefix(values: dict, prefix: str) -> dict:
        return {key[len(prefix):]: int(value) for key, value in values.items() if key.startswith(prefix)}

    return {"commands_by_source": by_prefix(diagnostics, "commands_"),
            "refused_mpc": by_prefix(diagnostics, "refused_"), "refused_simulator": by_prefix(simulator, "refused_")}
