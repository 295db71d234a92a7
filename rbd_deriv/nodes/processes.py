"""Nodes run as child processes (the demos, the benchmarks, the node tests): the package's parameter files, their
start, their command-line parameters, their memory and their shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, List, Optional


def node_command(console_script: str, module: str) -> List[str]:
    """How to start a node: its console entry point next to this interpreter (pip or colcon installed it),
    else ``python -m module`` (a source tree)."""
    script = shutil.which(console_script, path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", module]


def resident_memory(pid: int) -> int:
    """Resident set size of process ``pid`` [bytes] (Linux /proc), or -1 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


def ros_parameters(values: dict) -> List[str]:
    """``--ros-args -p name:=value ...`` for a node's command line (bools as true/false, sequences as
    lists of floats)."""
    arguments = ["--ros-args"]
    for name, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = "[" + ", ".join(repr(float(x)) for x in value) + "]"
        else:
            text = str(value)
        arguments += ["-p", f"{name}:={text}"]
    return arguments


def stop_processes(processes: Iterable[subprocess.Popen], timeout: float = 5.0,
                   first_signal: int = signal.SIGINT) -> None:
    """Stop child nodes: ``first_signal`` to all (SIGINT, as Ctrl-C would), then wait up to ``timeout``
    seconds in all [s]; any still running after that is killed."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.send_signal(first_signal)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def config_folder() -> Path:
    """The package's config/ folder: beside the bundled robots' urdf/ folder, wherever the package found it
    (a source checkout, a colcon install's share folder, a pip install's prefix)."""
    from rbd_deriv import bundled_urdf

    return bundled_urdf("rbd_arm7").parent.parent / "config"


#: The clocks the nodes may run on (the demos' and the legged soak's ``--clock``): the simulator's time on /clock,
#: every node on it (``use_sim_time``), or the wall clock. On the simulated clock a machine too busy for the loop
#: slows the simulated time down; on the wall clock the simulated robot falls behind the clock its controller runs on.
CLOCKS = ("simulated", "wall")


def start_node(node: str, parameter_file: str, overrides: dict, log: Path, clock: str = "wall",
               env: Optional[dict] = None) -> subprocess.Popen:
    """Start node ``node`` (rbd_deriv.nodes.<node>) with its own file of config/, then ``parameter_file`` (the
    demo's: demo.yaml or a legged robot's; none if empty), then ``overrides``; its output goes to ``log``, its
    environment is ``env`` (None: this process's). ``clock`` (one of :data:`CLOCKS`): ``simulated`` has the
    simulator publish /clock and the others use it."""
    if clock == "simulated":
        overrides = dict(overrides, **({"publish_clock": True} if node == "sim_node" else {"use_sim_time": True}))
    config = config_folder()
    files = [config / f"{node}.yaml"] + ([config / parameter_file] if parameter_file else [])
    arguments = ["--ros-args"] + [a for f in files for a in ("--params-file", str(f))] + ros_parameters(overrides)[1:]
    handle = open(log, "w", encoding="utf-8")
    return subprocess.Popen([sys.executable, "-m", f"rbd_deriv.nodes.{node}"] + arguments,
                            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, env=env)
