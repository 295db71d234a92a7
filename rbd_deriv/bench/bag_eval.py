"""Benchmark of the offline bag evaluation: wall time and peak memory on 60 s and 10 min of the 7-dof arm at 1 kHz.

    python -m rbd_deriv.bench bag-eval [--seconds 60 600] [--rate 1000] [--storage mcap] [--keep DIR] [--no-bag]

For each length, writes a recording with rosbags (a known motion, efforts from the library's inverse
dynamics plus noise; generated in pieces, so a long recording does not have to fit in memory), then runs
``python -m rbd_deriv bag-eval`` on it as a separate process, as a user would, and prints:

- the wall time of the evaluation as the command reports it (reading, computing, the plot, the output
  bag), excluding the first JIT compilation that the command does on two states before it starts;
- the wall time of the whole process, Python start-up and loading the compiled kernels included;
- the peak resident memory of the process (``ru_maxrss`` from ``wait4``), output bag writing included;
- the wall time of each stage, the CPU time and the machine's load average.

Nothing is asserted: the figures are printed beside the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence, Tuple

from rbd_deriv.replay import bagio, synthetic
from rbd_deriv import bundled_urdf

__all__ = ["main", "make_recording"]

TARGET_WALL_S = 10.0  # for 60 s at 1 kHz
TARGET_RSS_MB = 500.0


def make_recording(path: Path, seconds: float, rate_hz: float, storage: str, noise: float, seed: int = 0,
                   start_ns: int = 1_700_000_000_000_000_000) -> int:
    """Write a recording of the bundled arm at ``path``; returns the number of joint_states messages."""
    return synthetic.write_noisy_recording(path, bagio.package_typestore(), bundled_urdf("rbd_arm7").read_text(),
                                           seconds, rate_hz, noise, seed=seed, start_ns=start_ns, storage=storage)


def _peak_rss_mb(command: Sequence[str]) -> Tuple[int, float, float, str, str]:
    """Run ``command``; returns (status, wall [s], peak RSS [MB], stdout, stderr)."""
    tic = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - tic
        out.seek(0)
        err.seek(0)
        # ru_maxrss is in KiB on Linux.
        return os.waitstatus_to_exitcode(status), elapsed, usage.ru_maxrss / 1024.0, out.read(), err.read()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench bag-eval", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[60.0, 600.0], help="recording lengths [s]")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate [Hz]")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--noise", type=float, default=0.05, help="effort noise standard deviation [N m]")
    parser.add_argument("--keep", type=Path, help="keep the recordings and the reports in this folder")
    parser.add_argument("--no-bag", action="store_true", help="skip writing the output bag")
    args = parser.parse_args(list(argv) if argv is not None else None)

    folder = args.keep if args.keep is not None else Path(tempfile.mkdtemp(prefix="rbd_bag_eval_"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for seconds in args.seconds:
            name = f"{seconds:g}s"
            recording, report = folder / f"recording_{name}", folder / f"report_{name}"
            for stale in (recording, report):
                if stale.exists():
                    shutil.rmtree(stale)
            tic = time.perf_counter()
            count = make_recording(recording, seconds, args.rate, args.storage, args.noise)
            print(f"wrote {count} joint_states messages ({args.storage}, {seconds:g} s) in {time.perf_counter() - tic:.1f} s",
                  flush=True)
            command = [sys.executable, "-m", "rbd_deriv", "bag-eval", str(recording), "--out-dir", str(report),
                       "--quiet"] + (["--no-bag"] if args.no_bag else [])
            load = os.getloadavg()[0]
            status, process_s, rss_mb, out, err = _peak_rss_mb(command)
            if status != 0:
                print(f"bag-eval failed with status {status}:\n{err}", file=sys.stderr)
                return status
            summary = json.loads((report / "summary.json").read_text())
            wall = summary["timing"]["wall_s"]
            jit = wall.get("jit_warmup", 0.0)
            evaluation_s = wall["total"] - jit
            stages = ", ".join(f"{k} {v:.2f}" for k, v in wall.items() if k not in ("total", "jit_warmup"))
            print(f"  {summary['messages']['evaluated']} messages evaluated: {evaluation_s:.2f} s excluding {jit:.2f} s "
                  f"of JIT warm-up; process {process_s:.2f} s; max RSS {rss_mb:.0f} MB; load average before {load:.1f}")
            print(f"  stages [s]: {stages}", flush=True)
            rows.append((name, summary["messages"]["evaluated"], evaluation_s, process_s, rss_mb))
        print(f"\n{'recording':>10} {'messages':>9} {'wall, JIT excl.':>16} {'process wall':>13} {'max RSS':>9}")
        for name, messages, evaluation_s, process_s, rss_mb in rows:
            print(f"{name:>10} {messages:>9} {evaluation_s:>14.2f} s {process_s:>11.2f} s {rss_mb:>6.0f} MB")
        print(f"targets: <= {TARGET_WALL_S:.0f} s for 60 s at 1 kHz with the output bag; <= {TARGET_RSS_MB:.0f} MB at any length "
              f"({os.cpu_count()} cores; load average now {os.getloadavg()[0]:.1f})")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
