"""Test and benchmark kit: oracles for :mod:`rbd_deriv`, never imported by the library itself.

* :mod:`~rbd_deriv.testing.robots`: where the example robots' URDFs are.
* :mod:`~rbd_deriv.testing.pinocchio_bridge`: Pinocchio on the same robot, our arrays in and out.
* :mod:`~rbd_deriv.testing.random_urdf`: random kinematic trees as URDF text.
* :mod:`~rbd_deriv.testing.reference`: a plain, complex-safe RNEA for complex-step derivatives.
* :mod:`~rbd_deriv.testing.finite_diff`: central differences on the configuration manifold.

Only :mod:`robots` and :mod:`random_urdf` are imported here; the others need
Pinocchio or the compiled library and are imported where used.

Tolerance policy of the test suite (:func:`assert_close`): an exact oracle
(Pinocchio, the complex-step reference, an algebraic identity) must agree to

.. math:: |x - x_{ref}| \\le 10^{-9} \\max(1, \\max|x_{ref}|) + 10^{-9} |x_{ref}|

entry by entry: 1e-9 relative to the largest entry of the reference, with an
absolute floor of 1e-9 for quantities of order one or less.
"""

from typing import Optional

import numpy as np

from rbd_deriv.testing.random_urdf import random_urdf
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, ROBOT_NAMES, bundled_urdf, with_minimum_mass

__all__ = [
    "EXAMPLE_ROBOTS",
    "EXACT_RTOL",
    "FINITE_DIFFERENCE_RTOL",
    "ROBOT_NAMES",
    "assert_close",
    "bundled_urdf",
    "random_urdf",
    "with_minimum_mass",
]

EXACT_RTOL = 1e-9
"""Relative tolerance against exact oracles."""

FINITE_DIFFERENCE_RTOL = 1e-6
"""Relative tolerance against central finite differences: their truncation and
round-off errors stay below 1e-7 relative with the steps of
:mod:`rbd_deriv.testing.finite_diff`, while a wrong term shows up at order one."""


def assert_close(actual, expected, rtol: float = EXACT_RTOL, what: Optional[str] = None) -> None:
    """Assert ``actual`` matches ``expected`` entry by entry under the suite's policy.

    ``atol = rtol * max(1, max|expected|)``, then ``numpy.testing.assert_allclose``
    with that ``atol`` and ``rtol``; the message reports the worst entry.
    """
    actual = np.asarray(actual, dtype=float)
    expected = np.asarray(expected, dtype=float)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what or 'value'}: shape {actual.shape} != expected {expected.shape}")
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    atol = rtol * scale
    error = np.abs(actual - expected)
    worst = np.unravel_index(int(np.argmax(error)), error.shape) if error.size else ()
    message = (
        f"{what or 'value'}: worst |error| {error[worst] if error.size else 0:.3e} at {worst} "
        f"(actual {actual[worst] if error.size else 0!r}, expected {expected[worst] if error.size else 0!r}), "
        f"scale {scale:.3e}, rtol {rtol:g}"
    )
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=message)
