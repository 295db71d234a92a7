"""The state space of the optimal control problem: x = (q, v), deviations in the tangent space.

A state is the configuration q (nq entries) followed by the velocity v (nv entries); its
deviations live in the tangent space, 2 nv entries ([dq, dv], dq in the tangent space of q as
everywhere in the package). Over a horizon the operations come batched, one row per knot:

- ``difference(X0, X1)``: :math:`X_1 \\ominus X_0` (``rd.difference`` on q, subtraction on v);
- ``integrate(X, DX)``: :math:`X \\oplus DX` (``rd.integrate`` on q, addition on v);
- ``difference_jacobian_blocks(X0, D)``: the Jacobian of :math:`X_1 \\ominus X_0` with respect to
  :math:`X_1` at :math:`X_1 = X_0 \\oplus D`. It is the identity except on the free flyer's 6 x 6
  block, the inverse of the Jacobian of ``integrate`` with respect to its tangent argument, so
  only that block is returned;
- ``step_jacobian_blocks(X, X_next, dt)``: the leading blocks of the Jacobians of the Euler
  step's :math:`q \\oplus \\Delta t\\, v^+` (see :func:`rbd_deriv.control.euler_riccati.backward_pass`).

:class:`VectorSpace` is the plain case (fixed base without the wrapping of continuous joints:
every operation is arithmetic); :class:`ConfigurationSpace` wraps a model and serves every robot,
with the batched kernels below: the core's ``difference_into`` and ``integrate_into``, one call for
all the knots. The free flyer's 6 x 6 blocks are those of SE(3) at :math:`\\xi = (\\nu, \\omega)`
(Barfoot, "State Estimation for Robotics", sec. 7.1.5):

.. math::

    \\frac{\\partial (M \\exp \\xi)}{\\partial M} = \\mathrm{Ad}_{\\exp(-\\xi)}, \\qquad
    \\frac{\\partial (M \\exp \\xi)}{\\partial \\xi} = J_r(\\xi)
    = \\begin{bmatrix} J_{r3} & Q \\\\ 0 & J_{r3} \\end{bmatrix}, \\qquad
    \\frac{\\partial (X_1 \\ominus X_0)}{\\partial X_1} = J_r(\\xi)^{-1}
    = \\begin{bmatrix} J_{r3}^{-1} & -J_{r3}^{-1} Q J_{r3}^{-1} \\\\ 0 & J_{r3}^{-1} \\end{bmatrix}

written out on 3 x 3 blocks with the core's series coefficients, without allocation: the Riccati
pass and the state costs need them at every knot of every tick. :func:`difference_batch` and
:func:`difference_block` are public: the state residual's compiled pass
(:mod:`rbd_deriv.control.residuals`) calls them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

import rbd_deriv as rd
from rbd_deriv.core.calling import check_quaternions
from rbd_deriv.core.configuration import (exp3_coefficients, q_coefficients, difference_into,
                                          integrate_into)
from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING, SMALL_ANGLE
from rbd_deriv.core.frames import product3, skew_into
from rbd_deriv.exceptions import InputError

#: Size of the free flyer's tangent block (translation and rotation).
FREE_FLYER_DOF = 6


# --- batched kernels -----------------------------------------------------------------------------------------

@njit(**JIT_OPTIONS)
def difference_batch(mi, continuous, X0, X1, nq, out):
    """out[k] (ndx,) = X1[k] (-) X0[k] (X0 of one row: the same for every k): the core's difference on q,
    a subtraction on v. Returns -1, or the first row k of X1 (then K + k of X0) whose quaternion is not of
    unit norm (nothing written from there on)."""
    nv = out.shape[1] - (X1.shape[1] - nq)
    shared = X0.shape[0] == 1
    K = X1.shape[0]
    for k in range(K):
        k0 = 0 if shared else k
        if check_quaternions(mi, X1[k], 1) != 0:
            return k
        if check_quaternions(mi, X0[k0], 1) != 0:
            return K + k0
        difference_into(mi, continuous, X0[k0], X1[k], out[k])
        for j in range(X1.shape[1] - nq):
            out[k, nv + j] = X1[k, nq + j] - X0[k0, nq + j]
    return -1


@njit(**JIT_OPTIONS)
def _integrate_batch(mi, X, DX, nq, out):
    """out[k] = X[k] (+) DX[k]: the core's integrate on q, an addition on v. Returns -1, or the first row
    of X whose quaternion is not of unit norm (nothing written from there on)."""
    nv = DX.shape[1] - (X.shape[1] - nq)
    for k in range(X.shape[0]):
        if check_quaternions(mi, X[k], 1) != 0:
            return k
        integrate_into(mi, X[k], DX[k], out[k])
        for j in range(X.shape[1] - nq):
            out[k, nq + j] = X[k, nq + j] + DX[k, nv + j]
    return -1


@njit(**JIT_OPTIONS)
def _series(a, b, W, WW, out):
    """out (3, 3) = I + a W + b W^2."""
    for r in range(3):
        for c in range(3):
            out[r, c] = (1.0 if r == c else 0.0) + a * W[r, c] + b * WW[r, c]


@njit(**JIT_OPTIONS)
def _right_jacobian_corner(xi, work, Q):
    """Q (3, 3), the upper-right block of the right Jacobian of SE(3) at xi = [nu, w] (Barfoot eq.
    7.86 at -xi): -V/2 + k1 (WV + VW - WVW) - k2 (WWV + VWW - 3 WVW) + k3 (WVWW + WWVW), with
    W = [w]x, V = [nu]x. work (8, 3, 3): W, W^2 on entry; scratch."""
    W, WW, V, WV, VW, WVW, A, B = (work[0], work[1], work[2], work[3], work[4], work[5], work[6],
                                   work[7])
    theta2 = xi[3] * xi[3] + xi[4] * xi[4] + xi[5] * xi[5]
    k1, k2, k3 = q_coefficients(theta2)
    skew_into(xi[0], xi[1], xi[2], V)
    product3(W, V, WV)
    product3(V, W, VW)
    product3(WV, W, WVW)
    product3(W, WV, A)      # W W V
    product3(VW, W, B)      # V W W
    for r in range(3):
        for c in range(3):
            Q[r, c] = (-0.5 * V[r, c] + k1 * (WV[r, c] + VW[r, c] - WVW[r, c])
                       - k2 * (A[r, c] + B[r, c] - 3.0 * WVW[r, c]))
    product3(WVW, W, A)     # W V W W
    product3(W, WVW, B)     # W W V W
    for r in range(3):
        for c in range(3):
            Q[r, c] += k3 * (A[r, c] + B[r, c])


@njit(**JIT_OPTIONS)
def _integrate_block(xi, work, Jq, Jv):
    """Jq, Jv (6, 6) = d(M exp6(xi))/dM = Ad(exp6(-xi)) = [[R^T, -R^T [t]x], [0, R^T]] and
    d(M exp6(xi))/dxi = Jr(xi) = [[Jr3, Q], [0, Jr3]], with R = exp3(w), t = V(w) nu the translation of
    exp6(xi) and Jr3 = I - b W + c W^2 (Barfoot, sec. 7.1.5). work (10, 3, 3) scratch."""
    W, WW, R, T = work[0], work[1], work[8], work[9]
    theta2 = xi[3] * xi[3] + xi[4] * xi[4] + xi[5] * xi[5]
    a, b, c = exp3_coefficients(theta2)
    skew_into(xi[3], xi[4], xi[5], W)
    product3(W, W, WW)
    _series(-b, c, W, WW, R)
    for r in range(3):
        for s in range(3):
            Jv[r, s] = Jv[3 + r, 3 + s] = R[r, s]
            Jv[3 + r, s] = 0.0
    _right_jacobian_corner(xi, work, T)
    for r in range(3):
        for s in range(3):
            Jv[r, 3 + s] = T[r, s]
    _series(b, c, W, WW, T)
    tx = T[0, 0] * xi[0] + T[0, 1] * xi[1] + T[0, 2] * xi[2]
    ty = T[1, 0] * xi[0] + T[1, 1] * xi[1] + T[1, 2] * xi[2]
    tz = T[2, 0] * xi[0] + T[2, 1] * xi[1] + T[2, 2] * xi[2]
    _series(a, b, W, WW, R)
    skew_into(tx, ty, tz, T)
    for r in range(3):
        for s in range(3):
            Jq[r, s] = Jq[3 + r, 3 + s] = R[s, r]
            Jq[3 + r, s] = 0.0
            Jq[r, 3 + s] = -(R[0, r] * T[0, s] + R[1, r] * T[1, s] + R[2, r] * T[2, s])


@njit(**JIT_OPTIONS)
def difference_block(d, work, out):
    """out (6, 6) = Jr(d)^-1, the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) d. With
    Jr = [[A, Q], [0, A]], its inverse is [[A^-1, -A^-1 Q A^-1], [0, A^-1]], and
    A^-1 = Jr3^-1 = I + W/2 + e W^2, e = 1/t^2 - (1 + cos t) / (2 t sin t) (Barfoot eq. 7.77 at -w).
    work (10, 3, 3) scratch."""
    W, WW, Ai, Q = work[0], work[1], work[8], work[9]
    theta2 = d[3] * d[3] + d[4] * d[4] + d[5] * d[5]
    if theta2 < SMALL_ANGLE * SMALL_ANGLE:
        e = 1.0 / 12.0 + theta2 / 720.0 + theta2 * theta2 / 30240.0
    else:
        t = math.sqrt(theta2)
        e = 1.0 / theta2 - (1.0 + math.cos(t)) / (2.0 * t * math.sin(t))
    skew_into(d[3], d[4], d[5], W)
    product3(W, W, WW)
    _series(0.5, e, W, WW, Ai)
    _right_jacobian_corner(d, work, Q)
    A = work[2]
    product3(Ai, Q, A)
    product3(A, Ai, Q)
    for r in range(3):
        for c in range(3):
            out[r, c] = out[3 + r, 3 + c] = Ai[r, c]
            out[3 + r, c] = 0.0
            out[r, 3 + c] = -Q[r, c]


@njit(**JIT_OPTIONS_ALLOCATING)
def _integrate_blocks(X, column, scale, Jq, Jv):
    """Jq[k], Jv[k] (6, 6) = d(M exp6(xi))/dM and d(M exp6(xi))/dxi at xi = scale X[k, column:column + 6]."""
    work = np.empty((10, 3, 3))
    xi = np.empty(FREE_FLYER_DOF)
    for k in range(X.shape[0]):
        for j in range(FREE_FLYER_DOF):
            xi[j] = scale * X[k, column + j]
        _integrate_block(xi, work, Jq[k], Jv[k])


@njit(**JIT_OPTIONS_ALLOCATING)
def _difference_blocks(D, out):
    """out[k] (6, 6) = the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) D[k]."""
    work = np.empty((10, 3, 3))
    for k in range(D.shape[0]):
        difference_block(D[k], work, out[k])


# --- the spaces ----------------------------------------------------------------------------------------------


class VectorSpace:
    """x = (q, v) with q in R^nv: differences and integrations are subtractions and additions.

    Args:
        nv: Number of velocity (and configuration) coordinates.
    """

    def __init__(self, nv: int) -> None:
        if int(nv) != nv or nv < 1:
            raise InputError(f"nv must be a positive integer, got {nv!r}")
        self.nq = self.nv = int(nv)
        self.nx = 2 * self.nv
        self.ndx = 2 * self.nv
        #: Size b of the leading non-identity block of the Jacobians (0: none).
        self.block = 0

    def zero(self) -> np.ndarray:
        """The state at q = 0, v = 0 (nx,)."""
        return np.zeros(self.nx)

    def difference(self, X0: np.ndarray, X1: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, ndx) = X1 (-) X0 for states X1 (K, nx) and X0 (K, nx) or one (nx,)."""
        return np.subtract(X1, X0, out=out)

    def integrate(self, X: np.ndarray, DX: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, nx) = X (+) DX for states (K, nx) and tangent vectors (K, ndx)."""
        return np.add(X, DX, out=out)

    def difference_jacobian_blocks(self, X0: np.ndarray, D: np.ndarray) -> np.ndarray:
        """(K, 0, 0): the Jacobian of a difference is the identity."""
        return np.zeros((X0.shape[0], 0, 0))

    def step_jacobian_blocks(self, X: np.ndarray, X_next: np.ndarray, dt: float,
                             Jq: np.ndarray, Jv: np.ndarray) -> None:
        """Nothing to do: the Euler step's integrator Jacobians are the identity."""

    def normalize(self, X: np.ndarray) -> None:
        """Nothing to do: every vector is a state."""


class ConfigurationSpace(VectorSpace):
    """x = (q, v) of a model loaded with :func:`rbd_deriv.load_urdf`, free flyer included.

    The free flyer is ``root_joint``, first in the model (velocity indices 0 to 5); continuous
    joints wrap their differences to (-pi, pi], as ``rd.difference`` does.

    Args:
        model: The robot model.
    """

    def __init__(self, model: Any) -> None:
        super().__init__(model.nv)
        self.model = model
        self.nq = model.nq
        self.nx = model.nq + model.nv
        self.block = FREE_FLYER_DOF if model.has_floating_base else 0

    def zero(self) -> np.ndarray:
        """The neutral configuration with v = 0 (nx,)."""
        return np.concatenate([rd.neutral(self.model), np.zeros(self.nv)])

    def difference(self, X0: np.ndarray, X1: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, ndx) = X1 (-) X0 for states X1 (K, nx) and X0 (K, nx) or one (nx,).

        Raises:
            InputError: A shape that does not fit, a quaternion not of unit norm.
        """
        X0 = X0.reshape(1, -1) if X0.ndim == 1 else X0
        K = X1.shape[0]
        if X1.shape[1:] != (self.nx,) or X0.shape[1:] != (self.nx,) or X0.shape[0] not in (1, K) \
                or out.shape != (K, self.ndx):
            raise InputError(f"difference of states {X0.shape} and {X1.shape} into {out.shape}")
        bad = difference_batch(self.model.mi, self.model.continuous, X0, X1, self.nq, out)
        if bad >= 0:
            which, row = ("X1", bad) if bad < K else ("X0", bad - K)
            raise InputError(f"{which}: the quaternion of state {row} is not of unit norm", which)
        return out

    def integrate(self, X: np.ndarray, DX: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, nx) = X (+) DX for states (K, nx) and tangent vectors (K, ndx).

        Raises:
            InputError: A shape that does not fit, a quaternion not of unit norm.
        """
        K = X.shape[0]
        if X.shape[1:] != (self.nx,) or DX.shape != (K, self.ndx) or out.shape != X.shape:
            raise InputError(f"integrate of states {X.shape} by {DX.shape} into {out.shape}")
        bad = _integrate_batch(self.model.mi, X, DX, self.nq, out)
        if bad >= 0:
            raise InputError(f"X: the quaternion of state {bad} is not of unit norm", "X")
        return out

    def difference_jacobian_blocks(self, X0: np.ndarray, D: np.ndarray) -> np.ndarray:
        """(K, b, b): the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) D (identity elsewhere).

        Since X1 = X0 (+) D, the Jacobian is the inverse of d(X0 (+) D)/dD; on a free flyer that
        Jacobian is block diagonal, so inverting its 6 x 6 block is enough.
        """
        b = self.block
        if b == 0:
            return np.zeros((X0.shape[0], 0, 0))
        blocks = np.empty((D.shape[0], b, b))
        _difference_blocks(np.ascontiguousarray(D, dtype=float), blocks)
        return blocks

    def step_jacobian_blocks(self, X: np.ndarray, X_next: np.ndarray, dt: float,
                             Jq: np.ndarray, Jv: np.ndarray) -> None:
        """Jq, Jv (K, b, b) = leading blocks of d(q (+) dt v+)/dq and d(q (+) w)/dw at w = dt v+.

        X holds the states (K, nx) the steps start from, X_next the states (K, nx) they reach
        (v+ is its velocity).
        """
        b = self.block
        if b == 0:
            return
        _integrate_blocks(X_next, self.nq, float(dt), Jq, Jv)

    def normalize(self, X: np.ndarray) -> None:
        """Project the free flyer's quaternion of every row of X (K, nx) back to unit norm.

        Interpolating two states entry by entry (the warm start between knots) leaves a
        quaternion slightly shorter than 1.
        """
        if self.block == 0:
            return
        quaternion = X[:, 3:7]
        quaternion /= np.sqrt(np.add.reduce(quaternion * quaternion, axis=1, keepdims=True))


def state_space(model: Any) -> VectorSpace:
    """The state space of a model: :class:`VectorSpace` when its configuration is a plain vector
    (fixed base, no continuous joint), else :class:`ConfigurationSpace`."""
    if not model.has_floating_base and model.nq == model.nv and not np.any(model.continuous):
        return VectorSpace(model.nv)
    return ConfigurationSpace(model)


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the spaces pass (the package's build
    runs it): on the bundled arm with a floating base, two knots."""
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    space = ConfigurationSpace(model)
    X = np.tile(space.zero(), (2, 1))
    D = space.difference(X, X, np.empty((2, space.ndx)))
    space.integrate(X, D, X.copy())
    space.difference_jacobian_blocks(X, D)
    space.step_jacobian_blocks(X, X, 0.01, np.empty((2, 6, 6)), np.empty((2, 6, 6)))
