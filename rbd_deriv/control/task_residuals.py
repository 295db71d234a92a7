"""Task residuals on the robot's kinematics: a frame's position, the center of mass.

The kinematics come from :class:`RobotKinematics`: the core library's frame placements and
Jacobians (``rd.frame_placement``, ``rd.frame_jacobian``) and center of mass
(``rd.center_of_mass``, ``rd.com_jacobian``). Both quantities depend on q
only, so with dx = [dq, dv] the Jacobian is [J, 0] with J the provider's (3, nv) Jacobian in the
tangent space of q (LOCAL_WORLD_ALIGNED for a frame: the world-frame velocity of its origin).

- :class:`FramePositionResidual`: :math:`p_f(q) - p^r` on selected axes (a foot's placement,
  a swing foot's height with ``axes=(2,)``, a hand's target);
- :class:`CenterOfMassResidual`: :math:`c(q) - c^r` on selected axes (balance, COM sway).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.residuals import Derivatives, Knots, Residual
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError


class RobotKinematics:
    """Frame positions, the center of mass and their Jacobians at K states, from the core library.

    Positions come from ``rd.forward_kinematics`` and ``rd.frame_placement``, frame Jacobians from
    ``rd.frame_jacobian`` (LOCAL_WORLD_ALIGNED: its linear rows map the tangent dq to the world
    velocity of the frame's origin), the center of mass from ``rd.center_of_mass`` and
    ``rd.com_jacobian``. Several residuals read the same knots in one evaluation (a swing height
    per foot, the COM): the results of the last states asked are kept and reused while the states
    are equal.

    Args:
        model: The robot model.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.data = model.create_data()
        self._X: np.ndarray | None = None
        self._frames: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._com: tuple[np.ndarray, np.ndarray] | None = None

    def _fresh(self, X: np.ndarray) -> None:
        if self._X is None or self._X.shape != X.shape or not np.array_equal(self._X, X):
            self._X = X.copy()
            self._frames.clear()
            self._com = None

    def frame_position(self, X: np.ndarray, frame: str, rows: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Position (K, 3) [m] of the frame's origin in the world at the states X (K, nx), and its
        Jacobian (K, 3, nv) with respect to the tangent dq (LOCAL_WORLD_ALIGNED).

        Args:
            rows: (K,) booleans: compute these knots only (the others are left zero unless an
                earlier call at the same states computed them); None for all.

        Raises:
            InputError: No frame of that name.
        """
        self._fresh(X)
        model, data = self.model, self.data
        entry = self._frames.get(frame)
        if entry is None:
            if frame not in model.frames:
                raise InputError(f"no frame named {frame!r} in model {model.name!r}", "frame")
            K = X.shape[0]
            entry = (np.zeros((K, 3)), np.zeros((K, 3, model.nv)), np.zeros(K, dtype=bool))
            self._frames[frame] = entry
        positions, jacobians, done = entry
        wanted = ~done if rows is None else rows & ~done
        for k in np.flatnonzero(wanted):
            q = X[k, :model.nq]
            rd.forward_kinematics(model, data, q)
            positions[k] = rd.frame_placement(model, data, frame)[:3, 3]
            jacobians[k] = rd.frame_jacobian(model, data, q, frame)[:3]
            done[k] = True
        return positions, jacobians

    def center_of_mass(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Center of mass (K, 3) [m] in the world at the states X (K, nx) and its Jacobian
        (K, 3, nv) with respect to the tangent dq."""
        self._fresh(X)
        if self._com is None:
            model, data = self.model, self.data
            K = X.shape[0]
            com, jacobians = np.empty((K, 3)), np.empty((K, 3, model.nv))
            for k in range(K):
                q = X[k, :model.nq]
                com[k] = rd.center_of_mass(model, data, q)
                jacobians[k] = rd.com_jacobian(model, data, q)
            self._com = (com, jacobians)
        return self._com


def _axes(axes: Sequence[int]) -> np.ndarray:
    axes = np.array(axes, dtype=np.int64)
    if axes.ndim != 1 or axes.size == 0 or (axes < 0).any() or (axes > 2).any() \
            or np.unique(axes).size != axes.size:
        raise InputError(f"axes must be distinct indices among 0, 1, 2, got {axes.tolist()}",
                         "axes")
    return axes


class _PositionResidual(Residual):
    """p(q)[axes] - reference, for a position given with its Jacobian by a provider."""

    uses_control = False

    def __init__(self, space: VectorSpace, reference: np.ndarray | None,
                 axes: Sequence[int], knots: np.ndarray | None = None) -> None:
        self.space = space
        #: (K,) booleans, kept: the knots where the residual is computed (zero elsewhere), or None.
        self.knots = knots
        self.axes = _axes(axes)
        self.nr = self.axes.size
        self.reference = np.zeros(self.nr) if reference is None else reference
        if self.reference.shape[-1] != self.nr:
            raise InputError(f"reference must have {self.nr} entries per knot, got "
                             f"{self.reference.shape}", "reference")

    def _position(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, nr); zero at the knots left out by :attr:`knots`."""
        position, _ = self._position(knots.X)
        r = position[:, self.axes] - self.reference
        if self.knots is not None:
            r[~self.knots] = 0.0
        return r

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, None]:
        """dr/dx = [J[axes], 0] (K, nr, ndx); zero at the knots left out by :attr:`knots`."""
        _, jacobian = self._position(knots.X)
        Rx = np.zeros((knots.count, self.nr, self.space.ndx))
        Rx[:, :, :self.space.nv] = jacobian[:, self.axes, :]
        if self.knots is not None:
            Rx[~self.knots] = 0.0
        return Rx, None

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Products on the q columns of the computed knots only (dr/dv = 0 and the left-out
        knots' rows are zero)."""
        _, jacobian = self._position(knots.X)
        rows = np.arange(knots.count) if self.knots is None else np.flatnonzero(self.knots)
        if rows.size == 0:
            return
        nv = self.space.nv
        J = jacobian[rows][:, self.axes, :]
        H = np.broadcast_to(hessian, r.shape)[rows]
        out.Lx[rows, :nv] += np.einsum("kri,kr->ki", J, gradient[rows])
        out.Lxx[rows, :nv, :nv] += np.matmul(J.transpose(0, 2, 1), H[:, :, None] * J)


class FramePositionResidual(_PositionResidual):
    """r = p_frame(q)[axes] - p_ref.

    Args:
        space: The state space.
        kinematics: The kinematics (:class:`RobotKinematics`).
        frame: Frame name.
        reference: (K, nr) or (nr,) target positions [m], kept (not copied); None for 0.
        axes: World axes compared (default all three).
        knots: (K,) booleans, kept (not copied): the knots where the residual is computed, zero
            elsewhere (a swing foot's cost, weighted only while the foot is in the air, needs the
            kinematics of those knots only); None for every knot.
    """

    def __init__(self, space: VectorSpace, kinematics: RobotKinematics, frame: str,
                 reference: np.ndarray | None = None, axes: Sequence[int] = (0, 1, 2),
                 knots: np.ndarray | None = None) -> None:
        super().__init__(space, reference, axes, knots)
        self.kinematics = kinematics
        self.frame = frame

    def _position(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.knots is not None and self.knots.shape != (X.shape[0],):
            raise InputError(f"knots mask of shape {self.knots.shape} for {X.shape[0]} knots",
                             "knots")
        return self.kinematics.frame_position(X, self.frame, self.knots)


class CenterOfMassResidual(_PositionResidual):
    """r = c(q)[axes] - c_ref.

    Args:
        space: The state space.
        kinematics: The kinematics (:class:`RobotKinematics`).
        reference: (K, nr) or (nr,) target positions [m], kept (not copied); None for 0.
        axes: World axes compared (default all three).
    """

    def __init__(self, space: VectorSpace, kinematics: RobotKinematics,
                 reference: np.ndarray | None = None, axes: Sequence[int] = (0, 1, 2)) -> None:
        super().__init__(space, reference, axes)
        self.kinematics = kinematics

    def _position(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.kinematics.center_of_mass(X)
