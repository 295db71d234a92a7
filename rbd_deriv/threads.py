"""Process-wide thread settings: the BLAS libraries held to one thread.

NumPy's and SciPy's BLAS (OpenBLAS in the pip wheels; the system's OpenBLAS, BLIS or MKL under a Debian or
rosdep numpy) split a product of a few hundred thousand multiply-adds over every core. On a machine whose
cores are shared (a robot's computer running its whole stack, a CI runner, a pool of evaluation workers) those
threads wait for each other, and a product meant to take tens of microseconds takes several times that. Holding
BLAS to one thread is a choice for a whole process, so the library never makes it on import: the MPC node, the
benchmarks and the fleet evaluation's workers call :func:`single_threaded_blas`.
"""

from __future__ import annotations

from typing import Any, List

__all__ = ["single_threaded_blas"]

_LIMITS: List[Any] = []


def single_threaded_blas() -> List[str]:
    """Hold every BLAS loaded in this process to one thread (threadpoolctl, which knows each implementation's
    own setter); load NumPy's and SciPy's first, so that those are among them.

    Returns:
        The libraries held, as ``"<implementation> <file>"``; empty when none was found or threadpoolctl is not
        installed (the caller says so: products then run on as many threads as the library chooses).
    """
    import numpy  # noqa: F401 - loads NumPy's BLAS
    import scipy.linalg  # noqa: F401 - loads SciPy's, the one numba's np.dot and the Riccati kernels call
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:  # a ROS install through rosdep, which has no key for it: pip install threadpoolctl
        return []

    _LIMITS.append(threadpool_limits(limits=1, user_api="blas"))
    return [f"{info['internal_api']} {info['filepath'].rsplit('/', 1)[-1]}" for info in threadpool_info()
            if info["user_api"] == "blas" and info["num_threads"] == 1]
