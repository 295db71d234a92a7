"""Benchmark of the fleet evaluation: ``fleet-eval`` on 1 and 2 local workers and on a local Ray instance, against
a shell loop of ``bag-eval`` calls over the same bags, in one run.

    python -m rbd_deriv.bench fleet [--bags 20] [--seconds 60] [--rate 1000] [--cache DIR] [--no-ray]

The bags (the bundled 7-dof arm, a known motion, efforts from the library's inverse dynamics plus noise,
one start day per bag) are written once into ``--cache`` (default ``$XDG_CACHE_HOME/rbd_deriv/bench_fleet``,
else ``~/.cache/...``) and reused by later runs. Every figure is the wall time of a whole process, Python
start-up included, as a user would see it:

- ``loop``: ``for bag in ...; do python -m rbd_deriv bag-eval $bag --no-bag --no-png --quiet; done`` in bash: the
  same work per bag as ``fleet-eval`` by default (no output bag, no per-bag PNG);
- ``local, 1 worker``, ``local, 2 workers``: ``python -m rbd_deriv fleet-eval DIR --workers N``;
- ``ray, 2 CPUs``: ``fleet-eval --engine ray --workers 2`` (a local Ray instance started by the command).

Nothing is asserted: the figures are printed side by side with the target (2 workers <= 0.55 of the loop),
with the load average before each run and the largest peak resident memory of a fleet worker.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from rbd_deriv.bench.bag_eval import make_recording

__all__ = ["main", "TARGET_RATIO", "cached_fleet"]

TARGET_RATIO = 0.55
"""Target wall time of ``fleet-eval`` on 2 workers, as a fraction of the ``bag-eval`` loop's."""

_DAY_NS = 86_400 * 10**9
_START_NS = 1_767_225_600 * 10**9  # 2026-01-01 00:00 UTC


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rbd_deriv" / "bench_fleet"


def cached_fleet(cache: Path, bags: int, seconds: float, rate_hz: float) -> Tuple[Path, List[Path], float]:
    """The fleet's folder and bags, written unless a complete earlier copy is there; returns the writing time [s]."""
    folder = cache / f"{bags}x{seconds:g}s_{rate_hz:g}Hz"
    paths = [folder / f"day{k:02d}" for k in range(bags)]
    complete = folder / "complete"
    if complete.is_file():
        return folder, paths, 0.0
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tic = time.perf_counter()
    for k, path in enumerate(paths):
        # One bag a day; every seventh with four times the noise, as a motor going bad would show.
        noise = 0.2 if k % 7 == 3 else 0.05
        make_recording(path, seconds, rate_hz, "mcap", noise, seed=k, start_ns=_START_NS + k * _DAY_NS)
    complete.write_text("written by python -m rbd_deriv.bench fleet\n")
    return folder, paths, time.perf_counter() - tic


def _timed(command: Sequence[str], label: str) -> Tuple[float, float]:
    """Run ``command``; returns (wall time [s], load average before). Exits on failure."""
    load = os.getloadavg()[0]
    tic = time.perf_counter()
    finished = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - tic
    if finished.returncode != 0:
        raise RuntimeError(f"{label} failed with status {finished.returncode}:\n{finished.stderr[-3000:]}")
    return wall, load


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--bags", type=int, default=20, help="bags in the fleet")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each bag [s]")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate [Hz]")
    parser.add_argument("--cache", type=Path, default=None, help="where the bags are kept between runs")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    args = parser.parse_args(list(argv) if argv is not None else None)

    folder, bags, writing = cached_fleet(args.cache or _default_cache(), args.bags, args.seconds, args.rate)
    print(f"{len(bags)} bags of {args.seconds:g} s at {args.rate:g} Hz in {folder}"
          + (f" (written in {writing:.1f} s)" if writing else " (cached)"), flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="rbd_bench_fleet_"))
    python = shlex.quote(sys.executable)
    rows: List[Tuple[str, float, float]] = []
    try:
        loop = (f"for bag in {' '.join(shlex.quote(str(b)) for b in bags)}; do "
                f"{python} -m rbd_deriv bag-eval \"$bag\" --out-dir {shlex.quote(str(scratch))}/loop/$(basename \"$bag\") "
                f"--no-bag --no-png --quiet > /dev/null || exit 1; done")
        runs: List[Tuple[str, List[str]]] = [("bag-eval loop", ["bash", "-c", loop])]
        fleet = [sys.executable, "-m", "rbd_deriv", "fleet-eval", str(folder), "--quiet"]
        runs.append(("local, 1 worker", fleet + ["--out-dir", str(scratch / "local1"), "--workers", "1"]))
        runs.append(("local, 2 workers", fleet + ["--out-dir", str(scratch / "local2"), "--workers", "2"]))
        if args.no_ray:
            print("ray: skipped (--no-ray)")
        elif importlib.util.find_spec("ray") is None:
            print("ray: skipped, not installed (pip install 'rbd_deriv[fleet]')")
        else:
            runs.append(("ray, 2 CPUs", fleet + ["--out-dir", str(scratch / "ray2"), "--engine", "ray", "--workers", "2"]))
        for label, command in runs:
            wall, load = _timed(command, label)
            rows.append((label, wall, load))
            memory = ""
            if "--out-dir" in command:
                timing = json.loads((Path(command[command.index("--out-dir") + 1]) / "timing.json").read_text())
                peaks = [bag["peak_rss_mb"] for bag in timing["bags"] if bag.get("peak_rss_mb")]
                memory = f", largest worker peak RSS {max(peaks):.0f} MB" if peaks else ""
            print(f"  {label:<18} {wall:8.2f} s  (load average before {load:.1f}{memory})", flush=True)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    loop_s = rows[0][1]
    print(f"\n{'run':<18} {'wall [s]':>9} {'per bag [s]':>12} {'/ loop':>7} {'load before':>12}")
    for label, wall, load in rows:
        print(f"{label:<18} {wall:9.2f} {wall / len(bags):12.2f} {wall / loop_s:7.3f} {load:12.1f}")
    two = next(wall for label, wall, _ in rows if label == "local, 2 workers")
    verdict = "met" if two / loop_s <= TARGET_RATIO else "NOT met"
    print(f"target: local, 2 workers <= {TARGET_RATIO} of the loop: {two / loop_s:.3f} ({verdict}); "
          f"{os.cpu_count()} cores, load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
