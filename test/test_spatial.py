"""Spatial algebra (rbd_deriv.core.spatial) against plain 6x6 numpy: inertias, products, force transforms."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.core import spatial
from rbd_deriv.core.urdf import spatial_inertia, transform_inertia
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.random_urdf import random_inertia


def _placement(rng):
    """A random rigid placement (4, 4)."""
    axis = rng.standard_normal(3)
    axis /= np.linalg.norm(axis)
    angle = rng.uniform(-np.pi, np.pi)
    K = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    T = np.eye(4)
    T[:3, :3] = np.eye(3) + np.sin(angle) * K + (1.0 - np.cos(angle)) * K @ K
    T[:3, 3] = rng.uniform(-1.0, 1.0, 3)
    return T


def _parameters(I6):
    """The 10 parameters (mass, first moment, rotational inertia about the origin) read off a 6x6 inertia."""
    return np.array([I6[0, 0], I6[5, 1], I6[3, 2], I6[4, 0], I6[3, 3], I6[3, 4], I6[3, 5], I6[4, 4], I6[4, 5],
                     I6[5, 5]])


def _body(rng):
    mass = rng.uniform(0.5, 5.0)
    return spatial_inertia(mass, rng.uniform(-0.3, 0.3, 3), random_inertia(rng, mass))


@pytest.mark.parametrize("seed", range(5))
def test_inertia_parameters_move_to_the_world_as_the_6x6_inertia_does(seed):
    rng = np.random.default_rng(seed)
    I6, T = _body(rng), _placement(rng)
    world = np.empty(10)
    spatial.inertia_to_world(T, _parameters(I6), world)
    matrix = np.empty((6, 6))
    spatial.inertia_matrix(world, matrix)
    assert_close(matrix, transform_inertia(T, I6), rtol=1e-12, what="I in the world")
    spatial.inertia_matrix(_parameters(I6), matrix)
    assert_close(matrix, I6, rtol=1e-15, what="parameters -> matrix")


@pytest.mark.parametrize("seed", range(5))
def test_inertia_times_a_motion_is_the_matrix_product(seed):
    rng = np.random.default_rng(seed)
    I6, m = _body(rng), rng.standard_normal(6)
    assert_close(np.array(spatial.inertia_times(_parameters(I6), *m)), I6 @ m, rtol=1e-13)


def test_cross_products_and_force_transform():
    rng = np.random.default_rng(9)
    m1, m2, f = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6)

    def cross(m):  # motion cross product matrix, [linear, angular]
        v, w = m[:3], m[3:]
        skew = lambda x: np.array([[0.0, -x[2], x[1]], [x[2], 0.0, -x[0]], [-x[1], x[0], 0.0]])  # noqa: E731
        return np.block([[skew(w), skew(v)], [np.zeros((3, 3)), skew(w)]])

    out = np.empty(6)
    spatial.motion_cross(m1, m2, out)
    assert_close(out, cross(m1) @ m2, rtol=1e-14)
    out[:] = 1.0
    spatial.force_cross_add(m1, f, 2.0, out)
    assert_close(out, 1.0 + 2.0 * (-cross(m1).T @ f), rtol=1e-14)
    T = _placement(rng)
    spatial.act_force(T, f, out)
    R, p = T[:3, :3], T[:3, 3]
    assert_close(out, np.r_[R @ f[:3], R @ f[3:] + np.cross(p, R @ f[:3])], rtol=1e-14)
