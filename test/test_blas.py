"""Tests of rbd_deriv.control.blas: the bundled OpenBLAS builds are found and set to one thread."""

from __future__ import annotations

import numpy as np

from rbd_deriv.control import blas


def test_single_threaded_blas_finds_numpys_openblas():
    assert blas.single_threaded_blas()
    assert len(blas._setters()) >= 1
    # Products still compute after the change.
    a = np.arange(36.0).reshape(6, 6)
    np.testing.assert_array_equal(a @ np.eye(6), a)
