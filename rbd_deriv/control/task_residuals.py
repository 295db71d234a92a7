"""Task residuals on the robot's kinematics: a frame's position, the center of mass.

The kinematics come from :class:`RobotKinematics`: the core library's forward pass, frame
origins and Jacobians for all the knots at once, and its center of mass (``rd.center_of_mass``,
``rd.com_jacobian``). Both quantities depend on q only, so with dx = [dq, dv] the Jacobian is
[J, 0] with J the provider's (3, nv) Jacobian in the tangent space of q (LOCAL_WORLD_ALIGNED for
a frame: the world-frame velocity of its origin).

- :class:`FramePositionResidual`: :math:`p_f(q) - p^r` on selected axes (a foot's placement,
  a swing foot's height with ``axes=(2,)``, a hand's target);
- :class:`CenterOfMassResidual`: :math:`c(q) - c^r` on selected axes (balance, COM sway).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control import gauss_newton
from rbd_deriv.control.residuals import (Derivatives, Knots, Residual, knot_factors,
                                         hessian_rows)
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError


class RobotKinematics:
    """Frame positions, the center of mass and their Jacobians at K states, from the core library.

    Frame positions and their Jacobians (LOCAL_WORLD_ALIGNED: the linear rows map the tangent dq to
    the world velocity of the frame's origin) come from one compiled call for all the knots and
    frames asked (:func:`rbd_deriv.control.gauss_newton.frame_kinematics`: the core's forward pass
    once per knot, then its frame origin and Jacobian per frame); the center of mass from
    ``rd.center_of_mass`` and ``rd.com_jacobian``. Several residuals read the same knots in one
    evaluation (a swing height per foot, the COM): the results of the last states asked are kept
    and reused while the states are equal.

    Args:
        model: The robot model.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.data = model.create_data()
        self._X: np.ndarray | None = None
        # frames -> (joints, placements) as the kernel takes them.
        self._descriptions: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        # frames -> (positions, jacobians, done) at the last states: new arrays for new states, so
        # that what an earlier call returned stays as it was.
        self._frames: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._com: tuple[np.ndarray, np.ndarray] | None = None

    def _fresh(self, X: np.ndarray) -> None:
        if self._X is None or self._X.shape != X.shape or not np.array_equal(self._X, X):
            self._X = X.copy()
            self._frames.clear()
            self._com = None

    def _description(self, frames: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        found = self._descriptions.get(frames)
        if found is None:
            model = self.model
            for frame in frames:
                if frame not in model.frames:
                    raise InputError(f"no frame named {frame!r} in model {model.name!r}", "frame")
            joints = np.array([model.frames[frame][0] for frame in frames], dtype=np.int64)
            placements = np.array([np.r_[model.frames[frame][1][:3, :3].ravel(),
                                         model.frames[frame][1][:3, 3]] for frame in frames])
            found = self._descriptions[frames] = (joints, placements)
        return found

    def frame_positions(self, X: np.ndarray, frames: Sequence[str], mask: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Positions (K, P, 3) [m] of the P frames' origins in the world at the states X (K, nx),
        and their Jacobians (K, P, 3, nv) with respect to the tangent dq (LOCAL_WORLD_ALIGNED).

        Args:
            mask: (K, P) booleans: compute these knots and frames only (the others are left zero
                unless an earlier call at the same states computed them); None for all.

        Raises:
            InputError: No frame of that name; states or mask of the wrong shape.
        """
        X = np.ascontiguousarray(X, dtype=float)
        frames = tuple(frames)
        if X.ndim != 2 or X.shape[1] < self.model.nq:
            raise InputError(f"states must be (K, nx) with nx >= {self.model.nq}, got {X.shape}", "X")
        K = X.shape[0]
        if mask is None:
            mask = np.ones((K, len(frames)), dtype=bool)
        else:
            mask = np.ascontiguousarray(mask, dtype=bool)
            if mask.shape != (K, len(frames)):
                raise InputError(f"mask of shape {mask.shape} for {K} knots and {len(frames)} "
                                 "frames", "mask")
        joints, placements = self._description(frames)
        self._fresh(X)
        entry = self._frames.get(frames)
        if entry is None:
            P, nv = len(frames), self.model.nv
            entry = self._frames[frames] = (np.zeros((K, P, 3)), np.zeros((K, P, 3, nv)),
                                            np.zeros((K, P), dtype=bool))
        positions, jacobians, done = entry
        model = self.model
        gauss_newton.frame_kinematics(model.mi, model.mf, self.data.ws, X, joints, placements, mask,
                                      positions, jacobians, done)
        return positions, jacobians

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
        mask = None if rows is None else np.asarray(rows, dtype=bool)[:, None]
        positions, jacobians = self.frame_positions(X, (frame,), mask)
        return positions[:, 0], jacobians[:, 0]

    def center_of_mass(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Center of mass (K, 3) [m] in the world at the states X (K, nx) and its Jacobian
        (K, 3, nv) with respect to the tangent dq."""
        X = np.ascontiguousarray(X, dtype=float)
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
    """p_i(q)[axes] - reference for P points i (frames, the center of mass) given with their
    Jacobians by the kinematics: nr = P * len(axes), point-major."""

    uses_control = False

    def __init__(self, space: VectorSpace, points: int, reference: np.ndarray | None,
                 axes: Sequence[int], knots: np.ndarray | None = None) -> None:
        self.space = space
        self.points = points
        #: (K,) or (K, P) booleans, kept: where the residual is computed (zero elsewhere), or None.
        self.knots = knots
        self.axes = _axes(axes)
        self.nr = points * self.axes.size
        self.reference = np.zeros(self.nr) if reference is None else reference
        if self.reference.shape[-1] != self.nr:
            raise InputError(f"reference must have {self.nr} entries per knot, got "
                             f"{self.reference.shape}", "reference")

    def _mask(self, count: int) -> np.ndarray | None:
        """(K, P) view of :attr:`knots`, or None."""
        if self.knots is None:
            return None
        mask = self.knots[:, None] if self.knots.ndim == 1 else self.knots
        if mask.shape != (count, self.points):
            raise InputError(f"knots mask of shape {self.knots.shape} for {count} knots and "
                             f"{self.points} points", "knots")
        return mask

    def _positions(self, X: np.ndarray, mask: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Positions (K, P, 3) and Jacobians (K, P, 3, nv), at least where mask holds."""
        raise NotImplementedError

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, nr); zero where :attr:`knots` is False."""
        K = knots.count
        mask = self._mask(K)
        position, _ = self._positions(knots.X, mask)
        r = position[:, :, self.axes].reshape(K, self.nr) - self.reference
        if mask is not None:
            r.reshape(K, self.points, -1)[~mask] = 0.0
        return r

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, None]:
        """dr/dx = [J[axes], 0] (K, nr, ndx); zero where :attr:`knots` is False."""
        K = knots.count
        mask = self._mask(K)
        _, jacobian = self._positions(knots.X, mask)
        Rx = np.zeros((K, self.points, self.axes.size, self.space.ndx))
        Rx[..., :self.space.nv] = jacobian[:, :, self.axes, :]
        if mask is not None:
            Rx[~mask] = 0.0
        return Rx.reshape(K, self.nr, self.space.ndx), None

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """The value and the products of :meth:`gauss_newton` in one compiled pass
        (:func:`rbd_deriv.control.gauss_newton.position_quadratic`)."""
        K = knots.count
        mask = self._mask(K)
        positions, jacobians = self._positions(knots.X, mask)
        mask = np.ones((K, self.points), dtype=bool) if mask is None else np.ascontiguousarray(mask)
        reference = self.reference.reshape(-1, self.nr)
        if reference.shape[0] not in (1, K):
            raise InputError(f"reference of {reference.shape[0]} knots, the cost is evaluated on "
                             f"{K}", "reference")
        gauss_newton.position_quadratic(positions, jacobians, self.axes, mask, reference, weights,
                                        knot_factors(knot_weights), out.Lx, out.Lxx)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Products on the q columns of the computed knots only (dr/dv = 0 and the rows left
        out are zero): :func:`rbd_deriv.control.gauss_newton.position_gauss_newton`."""
        K = knots.count
        mask = self._mask(K)
        _, jacobian = self._positions(knots.X, mask)
        mask = np.ones((K, self.points), dtype=bool) if mask is None else np.ascontiguousarray(mask)
        gauss_newton.position_gauss_newton(jacobian, self.axes, mask,
                                           np.ascontiguousarray(gradient, dtype=float),
                                           hessian_rows(hessian, self.nr), out.Lx, out.Lxx)


class FramePositionResidual(_PositionResidual):
    """r = p_f(q)[axes] - p_ref for one frame f, or for several (stacked frame by frame).

    Args:
        space: The state space.
        kinematics: The kinematics (:class:`RobotKinematics`).
        frame: Frame name, or a sequence of frame names.
        reference: (K, nr) or (nr,) target positions [m], kept (not copied); None for 0.
        axes: World axes compared (default all three).
        knots: (K,) booleans (or (K, frames) for several frames), kept (not copied): where the
            residual is computed, zero elsewhere (a swing foot's cost, there only while the
            foot is in the air, needs the kinematics of those knots only); None for everywhere.
    """

    def __init__(self, space: VectorSpace, kinematics: RobotKinematics,
                 frame: str | Sequence[str], reference: np.ndarray | None = None,
                 axes: Sequence[int] = (0, 1, 2), knots: np.ndarray | None = None) -> None:
        self.frames = (frame,) if isinstance(frame, str) else tuple(frame)
        if not self.frames:
            raise InputError("no frame given", "frame")
        super().__init__(space, len(self.frames), reference, axes, knots)
        self.kinematics = kinematics
        self.frame = frame

    def _positions(self, X: np.ndarray, mask: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        return self.kinematics.frame_positions(X, self.frames, mask)


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
        super().__init__(space, 1, reference, axes)
        self.kinematics = kinematics

    def _positions(self, X: np.ndarray, mask: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        position, jacobian = self.kinematics.center_of_mass(X)
        return position[:, None], jacobian[:, None]
