"""Tests of rbd_deriv.threads: every BLAS of the process held to one thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def test_every_blas_of_the_process_is_held_to_one_thread():
    """In a fresh process (a limit is for the whole process): before, NumPy's and SciPy's BLAS run on the
    machine's threads; after, threadpoolctl's own survey finds each at one thread, and each is named."""
    code = textwrap.dedent("""
        import json, os
        import numpy as np, scipy.linalg
        from threadpoolctl import threadpool_info
        from rbd_deriv.threads import single_threaded_blas
        before = {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}
        held = single_threaded_blas()
        after = {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}
        a = np.arange(36.0).reshape(6, 6)
        print(json.dumps([before, after, held, bool((a @ np.eye(6) == a).all()), os.cpu_count()]))
    """)
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environment)
    assert run.returncode == 0, run.stderr[-2000:]
    before, after, held, products, cores = json.loads(run.stdout.splitlines()[-1])
    assert len(before) >= 2, before  # NumPy's and SciPy's
    if cores > 1:
        assert max(before.values()) > 1, before
    assert set(after.values()) == {1} and after.keys() == before.keys()
    assert len(held) == len(after) and all(name.split()[1] in " ".join(after) for name in held)
    assert products, "a product still computes on one thread"
