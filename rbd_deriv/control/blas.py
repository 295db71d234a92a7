"""Keep SciPy's BLAS, which the Riccati pass calls through numba's ``np.dot``, on one thread.

SciPy's OpenBLAS splits a product of a few hundred thousand multiply-adds over every core. On a
machine whose cores are shared with other processes (a robot's computer running its whole
stack, the CI runner) those threads wait for each other, and a product meant to take tens of
microseconds takes several times that (figures in docs/mpc.md). :func:`single_threaded_blas`
sets that OpenBLAS to one thread for the whole process; it is a process-wide choice, so the
library does not make it: the MPC benchmark does, and a controller process can (setting
``OPENBLAS_NUM_THREADS=1`` before Python starts does the same for every OpenBLAS).
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache
from typing import Callable, Optional


@lru_cache(maxsize=1)
def _setter() -> Optional[Callable[[int], None]]:
    try:
        import scipy
    except ImportError:
        return None
    folder = os.path.join(os.path.dirname(os.path.dirname(scipy.__file__)), "scipy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas*.so*"))):
        try:
            library = ctypes.CDLL(path)
            function = library.scipy_openblas_set_num_threads
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_int]
        function.restype = None
        return function
    return None


def single_threaded_blas() -> bool:
    """Make SciPy's OpenBLAS single-threaded in this process; True if it was found."""
    setter = _setter()
    if setter is None:
        return False
    setter(1)
    return True
