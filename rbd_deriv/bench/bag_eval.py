"""Benchmark of the offline bag evaluation: a 60 s, 1 kHz recording of the 7-dof arm (60,000 messages).

    python -m rbd_deriv.bench bag-eval [--seconds 60] [--rate 1000] [--storage mcap] [--keep DIR]

Writes the recording (known motion, efforts from the library's inverse dynamics plus noise), then runs
the ``bag-eval`` command on it in this process and prints the wall time of the whole evaluation
(reading, computing, plotting, writing the output bag) excluding the first JIT compilation, which the
command does on two states before it starts its clock. Nothing is asserted; the figure is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.replay import bagio, cli, synthetic
from rbd_deriv import bundled_urdf

__all__ = ["main", "make_recording"]

TARGET_S = 10.0


def make_recording(path: Path, seconds: float, rate_hz: float, storage: str, noise: float, seed: int = 0) -> int:
    """Write a recording of the bundled arm at ``path``; returns the number of joint_states messages."""
    urdf = bundled_urdf("rbd_arm7")
    model = rd.load_urdf(str(urdf))
    store = bagio.package_typestore()
    motion = synthetic.sinusoid_motion(model.nv, seconds, rate_hz, seed=seed)
    effort = rd.rnea_batch(model, motion.position, motion.velocity, motion.acceleration)
    effort += np.random.default_rng(seed).normal(0.0, noise, effort.shape)
    rows = synthetic.joint_state_rows(store, model.joint_names, motion.stamp_ns, motion.position, motion.velocity, effort)
    # Receive times trail the stamps by a fixed transport delay, as on a real recorder.
    records = [(int(t) + 200_000, row.data) for t, row in zip(motion.stamp_ns, rows)]
    synthetic.write_recording(path, store, storage, records, robot_description=urdf.read_text())
    return len(records)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench bag-eval", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="recording length [s]")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate [Hz]")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--noise", type=float, default=0.05, help="effort noise standard deviation [N m]")
    parser.add_argument("--keep", type=Path, help="keep the recording and the report in this folder")
    parser.add_argument("--no-bag", action="store_true", help="skip writing the output bag")
    args = parser.parse_args(list(argv) if argv is not None else None)

    folder = args.keep if args.keep is not None else Path(tempfile.mkdtemp(prefix="rbd_bag_eval_"))
    recording, report = folder / "recording", folder / "report"
    for stale in (recording, report):
        if stale.exists():
            shutil.rmtree(stale)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tic = time.perf_counter()
        count = make_recording(recording, args.seconds, args.rate, args.storage, args.noise)
        print(f"wrote {count} joint_states messages ({args.storage}) in {time.perf_counter() - tic:.2f} s")

        command = [str(recording), "--out-dir", str(report)] + (["--no-bag"] if args.no_bag else [])
        tic, cpu = time.perf_counter(), time.process_time()
        status = cli.main(command)
        elapsed, cpu = time.perf_counter() - tic, time.process_time() - cpu
        if status != 0:
            return status
        summary = json.loads((report / "summary.json").read_text())
        wall = summary["timing"]["wall_s"]
        jit = wall.get("jit_warmup", 0.0)
        print(
            f"\nbag-eval of {summary['messages']['evaluated']} messages: {summary['timing']['run_wall_s'] - jit:.2f} s "
            f"excluding {jit:.2f} s of JIT warm-up (target < {TARGET_S:.0f} s; {elapsed:.2f} s with printing); "
            "stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in wall.items() if k != "jit_warmup")
        )
        # On a shared machine the wall time depends on the other jobs; CPU time (all threads) much less.
        print(
            f"CPU time of the command: {cpu:.2f} s (all threads, JIT warm-up included); load average over the "
            f"last minute: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
