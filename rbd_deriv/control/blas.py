"""Keep BLAS on one thread: SciPy's, which the Riccati pass calls through numba's ``np.dot``, and
NumPy's, which the costs' batched products call.

OpenBLAS splits a product of a few hundred thousand multiply-adds over every core. On a
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
from typing import Callable


#: Thread-count setters of the OpenBLAS builds that NumPy and SciPy wheels bundle (the 64-bit
#: integer build of NumPy suffixes its symbols).
_SETTERS = ("scipy_openblas_set_num_threads", "scipy_openblas_set_num_threads64_",
            "openblas_set_num_threads")


@lru_cache(maxsize=1)
def _setters() -> tuple[Callable[[int], None], ...]:
    found = []
    for package in ("numpy", "scipy"):
        try:
            module = __import__(package)
        except ImportError:
            continue
        folder = os.path.join(os.path.dirname(os.path.dirname(module.__file__)), f"{package}.libs")
        for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas*.so*"))):
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for name in _SETTERS:
                function = getattr(library, name, None)
                if function is not None:
                    function.argtypes = [ctypes.c_int]
                    function.restype = None
                    found.append(function)
                    break
    return tuple(found)


def single_threaded_blas() -> bool:
    """Make the OpenBLAS of SciPy (numba's products) and of NumPy (``np.matmul`` of the costs)
    single-threaded in this process; True if at least one was found."""
    setters = _setters()
    for setter in setters:
        setter(1)
    return bool(setters)
