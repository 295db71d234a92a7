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
with the batched kernels of :mod:`rbd_deriv.control.gauss_newton` (the core's configuration-space
functions, one call for all the knots).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control import gauss_newton
from rbd_deriv.exceptions import InputError

#: Size of the free flyer's tangent block (translation and rotation).
FREE_FLYER_DOF = 6


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
        bad = gauss_newton.difference_batch(self.model.mi, self.model.continuous, X0, X1, self.nq, out)
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
        bad = gauss_newton.integrate_batch(self.model.mi, X, DX, self.nq, out)
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
        gauss_newton.difference_blocks(np.ascontiguousarray(D, dtype=float), blocks)
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
        gauss_newton.integrate_blocks(X_next, self.nq, float(dt), Jq, Jv)

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
