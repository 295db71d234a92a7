"""The state space of the optimal control problem: x = (q, v), deviations in the tangent space.

A state is the configuration q (nq entries) followed by the velocity v (nv entries); its
deviations live in the tangent space, 2 nv entries ([dq, dv], dq in the tangent space of q as
everywhere in the package). Over a horizon the operations come batched, one row per knot:

- ``difference(X0, X1)``: :math:`X_1 \\ominus X_0` (``rd.difference`` on q, subtraction on v);
- ``integrate(X, DX)``: :math:`X \\oplus DX` (``rd.integrate`` on q, addition on v);
- ``difference_jacobian_blocks(X0, D)``: the Jacobian of :math:`X_1 \\ominus X_0` with respect to
  :math:`X_1` at :math:`X_1 = X_0 \\oplus D`. It is the identity except on the free flyer's 6 x 6
  block, the inverse of the Jacobian of ``integrate`` with respect to its tangent argument, so
  only that block is returned (:func:`se3_exp_jacobians`, batched over the knots);
- ``step_jacobian_blocks(X, X_next, dt)``: the leading blocks of the Jacobians of the Euler
  step's :math:`q \\oplus \\Delta t\\, v^+` (see :func:`rbd_deriv.control.euler_riccati.backward_pass`).

:class:`VectorSpace` is the plain case (fixed base without the wrapping of continuous joints:
every operation is arithmetic); :class:`ConfigurationSpace` wraps a model and serves every robot.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError

#: Size of the free flyer's tangent block (translation and rotation).
FREE_FLYER_DOF = 6

#: Rotation angle [rad] under which the coefficients of the SE(3) Jacobians are taken from their
#: Taylor series (to theta^6): above it the closed forms lose no more than 1e-15 absolute to
#: cancellation, below it the series' truncation error is below 1e-16.
SERIES_ANGLE = 0.1


def _skew(w: np.ndarray) -> np.ndarray:
    """(K, 3, 3) cross-product matrices of the rows of w (K, 3)."""
    S = np.zeros((w.shape[0], 3, 3))
    S[:, 0, 1], S[:, 0, 2] = -w[:, 2], w[:, 1]
    S[:, 1, 0], S[:, 1, 2] = w[:, 2], -w[:, 0]
    S[:, 2, 0], S[:, 2, 1] = -w[:, 1], w[:, 0]
    return S


def _se3_coefficients(theta: np.ndarray) -> tuple[np.ndarray, ...]:
    """sin(t)/t, (1 - cos t)/t^2, (t - sin t)/t^3, (t^2 + 2 cos t - 2)/(2 t^4) and
    (2 t - 3 sin t + t cos t)/(2 t^5) at the angles theta (K,)."""
    small = theta < SERIES_ANGLE
    x = theta * theta
    series = None if not small.any() else (
        1.0 - x / 6.0 * (1.0 - x / 20.0 * (1.0 - x / 42.0)),
        0.5 - x / 24.0 * (1.0 - x / 30.0 * (1.0 - x / 56.0)),
        1.0 / 6.0 - x / 120.0 * (1.0 - x / 42.0 * (1.0 - x / 72.0)),
        1.0 / 24.0 - x / 720.0 * (1.0 - x / 56.0 * (1.0 - x / 90.0)),
        1.0 / 120.0 - x / 2520.0 * (1.0 - x / 48.0 * (1.0 - 2.0 * x / 165.0)))
    if small.all():
        return tuple(a[:, None, None] for a in series)
    t = np.where(small, 1.0, theta)
    t2 = t * t
    sin, cos = np.sin(t), np.cos(t)
    closed = (sin / t, (1.0 - cos) / t2, (t - sin) / (t2 * t), (t2 + 2.0 * cos - 2.0) / (2.0 * t2 * t2),
              (2.0 * t - 3.0 * sin + t * cos) / (2.0 * t2 * t2 * t))
    if series is None:
        return tuple(b[:, None, None] for b in closed)
    return tuple(np.where(small, a, b)[:, None, None] for a, b in zip(series, closed))


def se3_exp_jacobians(xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Jacobians of M exp6(xi) at K twists xi (K, 6) = [linear, angular], in the body frame:

    - with respect to xi: the right Jacobian of SE(3),
      :math:`J_r = [[J_r^{SO3}(\omega), Q_r(\nu, \omega)], [0, J_r^{SO3}(\omega)]]`, with
      :math:`Q_r(\nu, \omega) = Q_l(-\nu, -\omega)` of Barfoot, "State Estimation for
      Robotics", eq. 7.86 (``rd.dintegrate_dv``'s free-flyer block);
    - with respect to M's tangent: :math:`\mathrm{Ad}(\exp_6(\xi)^{-1}) = [[R^T, -R^T
      [t]_\times], [0, R^T]]` (``rd.dintegrate_dq``'s block).

    Returns:
        (J_r (K, 6, 6), Ad (K, 6, 6)), new arrays.
    """
    nu, w = xi[:, :3], xi[:, 3:]
    a, b, c, d, e = _se3_coefficients(np.linalg.norm(w, axis=1))
    W, V = _skew(w), _skew(nu)
    WW, WV, VW = W @ W, W @ V, V @ W
    WVW = WV @ W
    identity = np.eye(3)
    R = identity + a * W + b * WW
    right = identity - b * W + c * WW
    t = np.einsum("kij,kj->ki", identity + b * W + c * WW, nu)
    Q = (-0.5 * V + c * (WV + VW - WVW) - d * (WW @ V + VW @ W - 3.0 * WVW)
         + e * (WVW @ W + W @ WVW))
    K = xi.shape[0]
    jacobian, adjoint = np.zeros((K, 6, 6)), np.zeros((K, 6, 6))
    jacobian[:, :3, :3] = jacobian[:, 3:, 3:] = right
    jacobian[:, :3, 3:] = Q
    Rt = R.transpose(0, 2, 1)
    adjoint[:, :3, :3] = adjoint[:, 3:, 3:] = Rt
    adjoint[:, :3, 3:] = -Rt @ _skew(t)
    return jacobian, adjoint


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
        self._eye = np.eye(model.nv)

    def zero(self) -> np.ndarray:
        """The neutral configuration with v = 0 (nx,)."""
        return np.concatenate([rd.neutral(self.model), np.zeros(self.nv)])

    def difference(self, X0: np.ndarray, X1: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, ndx) = X1 (-) X0 for states X1 (K, nx) and X0 (K, nx) or one (nx,)."""
        nq, nv = self.nq, self.nv
        for k in range(X1.shape[0]):
            q0 = X0[k, :nq] if X0.ndim == 2 else X0[:nq]
            out[k, :nv] = rd.difference(self.model, q0, X1[k, :nq])
        np.subtract(X1[:, nq:], X0[..., nq:], out=out[:, nv:])
        return out

    def integrate(self, X: np.ndarray, DX: np.ndarray, out: np.ndarray) -> np.ndarray:
        """out (K, nx) = X (+) DX for states (K, nx) and tangent vectors (K, ndx), knot by knot."""
        nq, nv = self.nq, self.nv
        for k in range(X.shape[0]):
            out[k, :nq] = rd.integrate(self.model, X[k, :nq], DX[k, :nv])
        np.add(X[:, nq:], DX[:, nv:], out=out[:, nq:])
        return out

    def difference_jacobian_blocks(self, X0: np.ndarray, D: np.ndarray) -> np.ndarray:
        """(K, b, b): the free-flyer block of d(X1 (-) X0)/dX1 at X1 = X0 (+) D (identity elsewhere).

        Since X1 = X0 (+) D, the Jacobian is the inverse of d(X0 (+) D)/dD; on a free flyer that
        Jacobian is block diagonal, so inverting its 6 x 6 block is enough.
        """
        b = self.block
        if b == 0:
            return np.zeros((X0.shape[0], 0, 0))
        return np.linalg.inv(se3_exp_jacobians(D[:, :b])[0])

    def step_jacobian_blocks(self, X: np.ndarray, X_next: np.ndarray, dt: float,
                             Jq: np.ndarray, Jv: np.ndarray) -> None:
        """Jq, Jv (K, b, b) = leading blocks of d(q (+) dt v+)/dq and d(q (+) w)/dw at w = dt v+.

        X holds the states (K, nx) the steps start from, X_next the states (K, nx) they reach
        (v+ is its velocity).
        """
        b = self.block
        if b == 0:
            return
        Jv[:], Jq[:] = se3_exp_jacobians(dt * X_next[:, self.nq:self.nq + b])

    def normalize(self, X: np.ndarray) -> None:
        """Project the free flyer's quaternion of every row of X (K, nx) back to unit norm.

        Interpolating two states entry by entry (the warm start between knots) leaves a
        quaternion slightly shorter than 1.
        """
        if self.block == 0:
            return
        quaternion = X[:, 3:7]
        quaternion /= np.linalg.norm(quaternion, axis=1, keepdims=True)


def state_space(model: Any) -> VectorSpace:
    """The state space of a model: :class:`VectorSpace` when its configuration is a plain vector
    (fixed base, no continuous joint), else :class:`ConfigurationSpace`."""
    if not model.has_floating_base and model.nq == model.nv and not np.any(model.continuous):
        return VectorSpace(model.nv)
    return ConfigurationSpace(model)
