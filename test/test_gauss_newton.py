"""Tests of rbd_deriv.control.gauss_newton, the compiled products of the costs.

Oracles: the products written out with numpy einsum on the dense matrices (every row of the force
stack, nothing skipped), the inverse of the right Jacobian of SE(3) by numpy's inverse of the core's
rd.dintegrate_dv, and the frame kinematics against rd.frame_placement / rd.frame_jacobian knot by
knot. The residuals' own tests check the same kernels through the classes, against finite
differences and the generic dense Gauss-Newton products.
"""

from __future__ import annotations

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.control import gauss_newton
from rbd_deriv.testing import assert_close
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS


@pytest.fixture(scope="module")
def solo():
    return rd.load_urdf(str(EXAMPLE_ROBOTS["solo12"]), floating_base=True)


@pytest.mark.parametrize("ndx, nu, m", [(8, 2, 6), (36, 12, 12), (100, 44, 12)])
def test_fold_is_the_dense_product_with_the_idle_rows_left_out(ndx, nu, m):
    """F^T L_ff F and F^T L_f at knots with rows of no force (past the closed contacts) and rows of
    no cost, against the products over every row."""
    rng = np.random.default_rng(ndx)
    K = 4
    Fx, Fu = rng.standard_normal((K, m, ndx)), rng.standard_normal((K, m, nu))
    Fx[1, m // 2:] = Fu[1, m // 2:] = 0.0            # a knot with half the contacts open
    G = rng.standard_normal((K, m, m))
    Lff = G @ G.transpose(0, 2, 1)
    Lf = rng.standard_normal((K, m))
    Lff[2, :3], Lff[2, :, :3], Lf[2, :3] = 0.0, 0.0, 0.0  # rows without cost
    Lff[3], Lf[3] = 0.0, 0.0                              # a knot without force cost
    start = [rng.standard_normal(shape) for shape in ((K, ndx), (K, ndx, ndx), (K, nu), (K, nu, nu),
                                                      (K, nu, ndx))]
    Lx, Lxx, Lu, Luu, Lux = (a.copy() for a in start)
    gauss_newton.fold_force_derivatives(Fx, Fu, Lff, Lf, Lx, Lxx, Lu, Luu, Lux)
    assert_close(Lx, start[0] + np.einsum("kmi,km->ki", Fx, Lf), what="Lx")
    assert_close(Lxx, start[1] + np.einsum("kri,krs,ksj->kij", Fx, Lff, Fx), what="Lxx")
    assert_close(Lu, start[2] + np.einsum("kma,km->ka", Fu, Lf), what="Lu")
    assert_close(Luu, start[3] + np.einsum("kra,krs,ksb->kab", Fu, Lff, Fu), what="Luu")
    assert_close(Lux, start[4] + np.einsum("kra,krs,ksj->kaj", Fu, Lff, Fx), what="Lux")


def test_difference_blocks_invert_the_right_jacobian(solo):
    rng = np.random.default_rng(1)
    D = rng.uniform(-1.5, 1.5, (5, 6))
    D[0, 3:] *= 1e-9                                      # near zero rotation
    D[1, 3:] *= 0.009 / np.linalg.norm(D[1, 3:])          # just under the series threshold
    blocks = np.empty((5, 6, 6))
    gauss_newton.difference_blocks(D, blocks)
    q = rd.neutral(solo)
    for k in range(5):
        right = rd.dintegrate_dv(solo, q, np.r_[D[k], np.zeros(12)])[:6, :6]
        assert_close(blocks[k], np.linalg.inv(right), rtol=1e-12, what=f"knot {k}")


def test_state_products_with_a_hessian_shared_or_per_knot(solo):
    """L_x += J^T a', L_xx += J^T diag(a'') J with J the identity but the free-flyer block (the
    inverse right Jacobian), a'' given once or per knot; knots with zero derivatives on the block
    untouched there."""
    rng = np.random.default_rng(2)
    K, ndx = 4, 36
    r = rng.uniform(-1, 1, (K, ndx))
    gradient = rng.uniform(-1, 1, (K, ndx))
    gradient[1, :6] = 0.0
    J = np.tile(np.eye(ndx), (K, 1, 1))
    for k in range(K):
        right = rd.dintegrate_dv(solo, rd.neutral(solo), r[k, :18])[:6, :6]
        J[k, :6, :6] = np.linalg.inv(right)
    for hessian in (rng.uniform(0, 2, (1, ndx)), rng.uniform(0, 2, (K, ndx))):
        hessian = hessian.copy()
        if hessian.shape[0] == K:
            hessian[1, :6] = 0.0
        Lx, Lxx = np.zeros((K, ndx)), np.zeros((K, ndx, ndx))
        gauss_newton.state_gauss_newton(6, r, gradient, hessian, Lx, Lxx)
        H = np.broadcast_to(hessian, (K, ndx))
        assert_close(Lx, np.einsum("kri,kr->ki", J, gradient), what="Lx")
        expected = np.einsum("kri,kr,krj->kij", J, H, J)
        assert_close(Lxx, expected, what="Lxx")


def test_frame_kinematics_are_the_core_frame_functions(solo):
    """Positions and Jacobian rows at the wanted knots and frames only, against rd.frame_placement
    and rd.frame_jacobian; the others untouched; nothing recomputed where done."""
    rng = np.random.default_rng(3)
    X = np.array([np.r_[rd.random_configuration(solo, rng), np.zeros(18)] for _ in range(4)])
    feet = ("FL_FOOT", "HR_FOOT")
    joints = np.array([solo.frames[f][0] for f in feet], dtype=np.int64)
    placements = np.array([np.r_[solo.frames[f][1][:3, :3].ravel(), solo.frames[f][1][:3, 3]]
                           for f in feet])
    wanted = np.array([[True, False], [True, True], [False, False], [False, True]])
    positions, jacobians = np.full((4, 2, 3), 7.0), np.full((4, 2, 3, 18), 7.0)
    done = np.zeros((4, 2), dtype=bool)
    data = solo.create_data()
    gauss_newton.frame_kinematics(solo.mi, solo.mf, data.ws, X, joints, placements, wanted,
                                  positions, jacobians, done)
    assert (done == wanted).all()
    oracle = solo.create_data()
    for k in range(4):
        for p, foot in enumerate(feet):
            if not wanted[k, p]:
                assert (positions[k, p] == 7.0).all() and (jacobians[k, p] == 7.0).all()
                continue
            rd.forward_kinematics(solo, oracle, X[k, :19])
            assert_close(positions[k, p], rd.frame_placement(solo, oracle, foot)[:3, 3])
            assert_close(jacobians[k, p], rd.frame_jacobian(solo, oracle, X[k, :19], foot)[:3])
    positions[1, 0] = -1.0
    gauss_newton.frame_kinematics(solo.mi, solo.mf, data.ws, X, joints, placements, wanted,
                                  positions, jacobians, done)
    assert (positions[1, 0] == -1.0).all()
