r"""Task residuals on the robot's kinematics: a frame's position and velocity, the center of mass.

The kinematics come from :class:`RobotKinematics`: the core library's forward pass, frame
origins and Jacobians for all the knots at once, and its center of mass (``rd.center_of_mass``,
``rd.com_jacobian``). Positions depend on q only, so with dx = [dq, dv] the Jacobian is
[J, 0] with J the provider's (3, nv) Jacobian in the tangent space of q (LOCAL_WORLD_ALIGNED for
a frame: the world-frame velocity of its origin). A frame origin's velocity :math:`J(q)\,v` has the
Jacobian :math:`[\partial (J v) / \partial q,\ J]` (the first block the core's
``lwa_velocity_derivative``, Pinocchio's ``getFrameVelocityDerivatives`` on the linear rows).

- :class:`FramePositionResidual`: :math:`p_f(q) - p^r` on selected axes (a foot's placement,
  a swing foot's height with ``axes=(2,)``, a hand's target);
- :class:`FrameVelocityResidual`: :math:`J_f(q)\,v - \dot p^r` on selected axes (a swing foot that
  lands still);
- :class:`CenterOfMassResidual`: :math:`c(q) - c^r` on selected axes (balance, COM sway).

Their compiled kernels reuse the core's joint placements and motion subspaces
(``joint_placement``, ``motion_subspace``: its forward pass without the inertias,
:func:`placement_pass`), frame origin and LOCAL_WORLD_ALIGNED Jacobian (``frame_origin``,
``lwa_jacobian_into``, ``lwa_velocity_derivative``). The Gauss-Newton products use the structure of the
Jacobian, nonzero on its first n columns only (n = nv for a residual of q alone, n = ndx = 2 nv for a velocity):
row by row, :math:`L_x[:n] \\mathrel{+}= a'_i J_i` and :math:`L_{xx}[:n, :n] \\mathrel{+}= a''_i J_i J_i^T`
(:func:`position_gauss_newton`, :func:`position_quadratic`, which any residual with such rows can use).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from numba import njit

import rbd_deriv as rd
from rbd_deriv.control.residuals import (Derivatives, Knots, Residual, knot_factors,
                                         hessian_rows)
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.core.constants import JIT_OPTIONS, UINT
from rbd_deriv.core.frames import frame_origin, lwa_jacobian_into, lwa_velocity_derivative
from rbd_deriv.core.kinematics import joint_placement, motion_subspace
from rbd_deriv.core.layout import MI_NJ, MI_NVTOT, MI_PARENT, R_OMI, R_S, region2, region3
from rbd_deriv.exceptions import InputError


@njit(**JIT_OPTIONS)
def placement_pass(mi, mf, ws, q):
    """The joint placements oMi and motion subspaces S of the core's forward pass at q into ws, without
    the body inertias, which frame placements and Jacobians do not need."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oMi = region3(mi, ws, R_OMI, nj, 4, 4)
    S = region2(mi, ws, R_S, nv, 6)
    for i in range(1, nj):
        joint_placement(mi, mf, q, i, oMi[mi[i, MI_PARENT]], oMi[i])
        motion_subspace(mi, mf, i, oMi[i], S)


@njit(**JIT_OPTIONS)
def _pending(wanted, done):
    """Whether a frame of the knot is wanted (wanted (P,)) and not done yet (done (P,))."""
    for p in range(wanted.shape[0]):
        if wanted[p] and not done[p]:
            return True
    return False


@njit(**JIT_OPTIONS)
def _frame_kinematics(mi, mf, ws, X, joints, placements, wanted, positions, jacobians, done):
    """For every knot k with a frame p such that wanted[k, p] and not done[k, p]: one forward pass at q_k,
    then each such frame's origin positions[k, p] (3,) in the world and the linear rows of its
    LOCAL_WORLD_ALIGNED Jacobian jacobians[k, p] (3, nv); done[k, p] set. ws: a Data workspace of the
    model (its placements are overwritten). A frame p is fixed to joint
    joints[p] at placements[p] (12,: rotation row-major, translation)."""
    K, P = wanted.shape
    for k in range(K):
        if not _pending(wanted[k], done[k]):
            continue
        placement_pass(mi, mf, ws, X[k])
        for p in range(P):
            if not wanted[k, p] or done[k, p]:
                continue
            px, py, pz = frame_origin(mi, ws, joints[p], placements[p])
            positions[k, p, 0], positions[k, p, 1], positions[k, p, 2] = px, py, pz
            lwa_jacobian_into(mi, ws, joints[p], px, py, pz, 3, jacobians[k, p], 0)
            done[k, p] = True


@njit(**JIT_OPTIONS)
def _frame_velocity_kinematics(mi, mf, ws, X, joints, placements, wanted, velocities, jacobians, done, work):
    """For every knot k with a frame p such that wanted[k, p] and not done[k, p]: one forward pass at q_k,
    then each such frame origin's world velocity velocities[k, p] (3,) = J v_k [m/s] and its Jacobian
    jacobians[k, p] (3, 2 nv) = [d(J v)/dq, J] with respect to (dq, dv) (J the linear rows of the
    LOCAL_WORLD_ALIGNED Jacobian); done[k, p] set. X (K, nq + nv); ws, joints, placements as in
    :func:`_frame_kinematics`; work (2, 3, nv) scratch."""
    K, P = wanted.shape
    nv = mi[0, MI_NVTOT]
    nq = X.shape[1] - nv
    J, G = work[0], work[1]
    for k in range(K):
        if not _pending(wanted[k], done[k]):
            continue
        placement_pass(mi, mf, ws, X[k])
        v = X[k, nq:]
        for p in range(P):
            if not wanted[k, p] or done[k, p]:
                continue
            px, py, pz = frame_origin(mi, ws, joints[p], placements[p])
            lwa_jacobian_into(mi, ws, joints[p], px, py, pz, 3, J, 0)
            lwa_velocity_derivative(mi, ws, joints[p], px, py, pz, 3, v, J, G, 0)
            for a in range(3):
                s = 0.0
                for i in range(nv):
                    s += J[a, i] * v[i]
                    jacobians[k, p, a, i] = G[a, i]
                    jacobians[k, p, a, nv + i] = J[a, i]
                velocities[k, p, a] = s
            done[k, p] = True


@njit(**JIT_OPTIONS)
def _add_row(J, g, w, Lx, Lxx):
    """One residual row of Jacobian J (nv,) on the q columns: Lx[:nv] += g J, Lxx[:nv, :nv] += w J J^T."""
    nv = J.shape[0]
    if g != 0.0:
        for i in range(nv):
            Lx[i] += g * J[i]
    if w == 0.0:
        return
    for i in range(nv):
        c = w * J[i]
        if c == 0.0:
            continue
        row = Lxx[i]
        for j in range(UINT(0), UINT(nv)):
            row[j] += c * J[j]


@njit(**JIT_OPTIONS)
def position_gauss_newton(jacobians, axes, mask, gradient, hessian, Lx, Lxx):
    """Gauss-Newton products of r = p_i(q)[axes] - reference for P points (rows point-major, len(axes)
    per point) at the knots and points where mask (K, P) holds: with J the point's Jacobian rows (nv,),
    L_x[:nv] += J a' and L_xx[:nv, :nv] += a'' J J^T, row by row. hessian is (K or 1, nr)."""
    K, P = mask.shape
    width = axes.shape[0]
    shared = hessian.shape[0] == 1
    for k in range(K):
        h = hessian[0] if shared else hessian[k]
        for p in range(P):
            if not mask[k, p]:
                continue
            for a in range(width):
                row = p * width + a
                _add_row(jacobians[k, p, axes[a]], gradient[k, row], h[row], Lx[k], Lxx[k])


@njit(**JIT_OPTIONS)
def position_quadratic(positions, jacobians, axes, mask, reference, weights, knot_weights, Lx, Lxx):
    """:func:`position_gauss_newton` of the activation 0.5 sum_i w_i r_i^2 (times the knot weight,
    knot_weights (K,) or empty for 1) with its residual r = positions[k, p, axes] - reference (reference
    of 1 or K rows, nr = P len(axes) entries) formed on the way: a' = w r, a'' = w."""
    K, P = mask.shape
    width = axes.shape[0]
    shared = reference.shape[0] == 1
    for k in range(K):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        ref = reference[0] if shared else reference[k]
        for p in range(P):
            if not mask[k, p]:
                continue
            for a in range(width):
                row = p * width + a
                w = factor * weights[row]
                if w == 0.0:
                    continue
                _add_row(jacobians[k, p, axes[a]], w * (positions[k, p, axes[a]] - ref[row]), w,
                         Lx[k], Lxx[k])


class RobotKinematics:
    """Frame positions, the center of mass and their Jacobians at K states, from the core library.

    Frame positions and their Jacobians (LOCAL_WORLD_ALIGNED: the linear rows map the tangent dq to
    the world velocity of the frame's origin) come from one compiled call for all the knots and
    frames asked (:func:`_frame_kinematics`: the core's forward pass
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
        # frames -> (velocities, jacobians, done) at the last states, likewise.
        self._velocities: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._com: tuple[np.ndarray, np.ndarray] | None = None
        self._work: np.ndarray = np.empty((2, 3, model.nv))

    def _fresh(self, X: np.ndarray) -> None:
        if self._X is None or self._X.shape != X.shape or not np.array_equal(self._X, X):
            self._X = X.copy()
            self._frames.clear()
            self._velocities.clear()
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
        return self._frame_quantities(self._frames, _frame_kinematics, X, frames, mask, self.model.nq, self.model.nv)

    def frame_velocities(self, X: np.ndarray, frames: Sequence[str], mask: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Velocities (K, P, 3) [m/s] of the P frames' origins in the world, :math:`J(q)\\,v`, at the states
        X (K, nx) (nx = nq + nv), and their Jacobians (K, P, 3, 2 nv) with respect to the tangent (dq, dv):
        :math:`[\\partial (J v) / \\partial q,\\ J]` (J the linear rows of the LOCAL_WORLD_ALIGNED Jacobian).

        Args:
            mask: (K, P) booleans: compute these knots and frames only (the others are left zero
                unless an earlier call at the same states computed them); None for all.

        Raises:
            InputError: No frame of that name; states or mask of the wrong shape.
        """
        model = self.model
        return self._frame_quantities(self._velocities, _frame_velocity_kinematics, X, frames, mask,
                                      model.nq + model.nv, 2 * model.nv, self._work)

    def _frame_quantities(self, store: dict, kernel: Any, X: np.ndarray, frames: Sequence[str],
                          mask: np.ndarray | None, width: int, columns: int, *work: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """The values (K, P, 3) and Jacobians (K, P, 3, columns) of ``kernel`` (:func:`_frame_kinematics`,
        :func:`_frame_velocity_kinematics`) at the states X (K, nx >= width), kept in ``store`` by frames for
        these states and completed where the mask asks."""
        X, frames, mask = self._checked(X, frames, mask, width)
        joints, placements = self._description(frames)
        self._fresh(X)
        entry = store.get(frames)
        if entry is None:
            K, P = X.shape[0], len(frames)
            entry = store[frames] = (np.zeros((K, P, 3)), np.zeros((K, P, 3, columns)), np.zeros((K, P), dtype=bool))
        values, jacobians, done = entry
        model = self.model
        kernel(model.mi, model.mf, self.data.ws, X, joints, placements, mask, values, jacobians, done, *work)
        return values, jacobians

    @staticmethod
    def _checked(X: np.ndarray, frames: Sequence[str], mask: np.ndarray | None, width: int
                 ) -> tuple[np.ndarray, tuple[str, ...], np.ndarray]:
        """X as a C array of floats (K, nx >= width), the frames as a tuple, the mask (K, P) as a C array of
        booleans (all True for None)."""
        X = np.ascontiguousarray(X, dtype=float)
        frames = tuple(frames)
        if X.ndim != 2 or X.shape[1] < width:
            raise InputError(f"states must be (K, nx) with nx >= {width}, got {X.shape}", "X")
        K = X.shape[0]
        if mask is None:
            return X, frames, np.ones((K, len(frames)), dtype=bool)
        mask = np.ascontiguousarray(mask, dtype=bool)
        if mask.shape != (K, len(frames)):
            raise InputError(f"mask of shape {mask.shape} for {K} knots and {len(frames)} "
                             "frames", "mask")
        return X, frames, mask

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
    """y_i(x)[axes] - reference for P points i given with their Jacobians by the kinematics: positions p_i(q)
    (frames, the center of mass; Jacobians (3, nv) on dq) or velocities (Jacobians (3, 2 nv) on (dq, dv)):
    nr = P * len(axes), point-major."""

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
        """Values (K, P, 3) and Jacobians (K, P, 3, n) on the first n entries of the tangent (n = nv or
        2 nv), at least where mask holds."""
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
        """dr/dx = [J[axes], 0] (K, nr, ndx) (J of n columns); zero where :attr:`knots` is False."""
        K = knots.count
        mask = self._mask(K)
        _, jacobian = self._positions(knots.X, mask)
        Rx = np.zeros((K, self.points, self.axes.size, self.space.ndx))
        Rx[..., :jacobian.shape[-1]] = jacobian[:, :, self.axes, :]
        if mask is not None:
            Rx[~mask] = 0.0
        return Rx.reshape(K, self.nr, self.space.ndx), None

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """The value and the products of :meth:`gauss_newton` in one compiled pass
        (:func:`position_quadratic`)."""
        K = knots.count
        mask = self._mask(K)
        positions, jacobians = self._positions(knots.X, mask)
        mask = np.ones((K, self.points), dtype=bool) if mask is None else np.ascontiguousarray(mask)
        reference = self.reference.reshape(-1, self.nr)
        if reference.shape[0] not in (1, K):
            raise InputError(f"reference of {reference.shape[0]} knots, the cost is evaluated on "
                             f"{K}", "reference")
        position_quadratic(positions, jacobians, self.axes, mask, reference, weights,
                           knot_factors(knot_weights), out.Lx, out.Lxx)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Products on the Jacobian's first n columns of the computed knots only (the columns past them
        and the rows left out are zero): :func:`position_gauss_newton`."""
        K = knots.count
        mask = self._mask(K)
        _, jacobian = self._positions(knots.X, mask)
        mask = np.ones((K, self.points), dtype=bool) if mask is None else np.ascontiguousarray(mask)
        position_gauss_newton(jacobian, self.axes, mask, np.ascontiguousarray(gradient, dtype=float),
                              hessian_rows(hessian, self.nr), out.Lx, out.Lxx)


class _FrameResidual(_PositionResidual):
    """A quantity of one frame or several (stacked frame by frame) from the kinematics: the arguments of
    :class:`FramePositionResidual`."""

    def __init__(self, space: VectorSpace, kinematics: RobotKinematics,
                 frame: str | Sequence[str], reference: np.ndarray | None = None,
                 axes: Sequence[int] = (0, 1, 2), knots: np.ndarray | None = None) -> None:
        self.frames = (frame,) if isinstance(frame, str) else tuple(frame)
        if not self.frames:
            raise InputError("no frame given", "frame")
        super().__init__(space, len(self.frames), reference, axes, knots)
        self.kinematics = kinematics
        self.frame = frame


class FramePositionResidual(_FrameResidual):
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

    def _positions(self, X: np.ndarray, mask: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        return self.kinematics.frame_positions(X, self.frames, mask)


class FrameVelocityResidual(_FrameResidual):
    """r = (J_f(q) v)[axes] - v_ref: the world velocity of one frame's origin, or of several (stacked
    frame by frame); its Jacobian [d(J v)/dq, J] on (dq, dv) (:meth:`RobotKinematics.frame_velocities`).

    Args:
        space: The state space.
        kinematics: The kinematics (:class:`RobotKinematics`).
        frame: Frame name, or a sequence of frame names.
        reference: (K, nr) or (nr,) target velocities [m/s], kept (not copied); None for 0.
        axes: World axes compared (default all three).
        knots: (K,) booleans (or (K, frames) for several frames), kept (not copied): where the
            residual is computed, zero elsewhere (a foot about to land); None for everywhere.
    """

    def _positions(self, X: np.ndarray, mask: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
        return self.kinematics.frame_velocities(X, self.frames, mask)


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


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the residuals pass (the package's
    build runs it): a frame of the bundled arm with a floating base, two knots, the weights read-only
    as an activation keeps them."""
    from rbd_deriv.control.state_space import ConfigurationSpace
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    space = ConfigurationSpace(model)
    K = 2
    X = np.tile(space.zero(), (K, 1))
    out = Derivatives(np.zeros((K, space.ndx, space.ndx)), np.zeros((K, space.ndx)))
    residual = FramePositionResidual(space, RobotKinematics(model), model.frame_names[-1],
                                     knots=np.ones(K, dtype=bool))
    weights = np.ones(residual.nr)
    weights.setflags(write=False)
    for knot_weights in (None, np.ones(K)):
        residual.add_quadratic(Knots(X), weights, knot_weights, out)
    residual.gauss_newton(Knots(X), residual.value(Knots(X)), np.zeros((K, 3)), np.ones(3), out)
    velocity = FrameVelocityResidual(space, RobotKinematics(model), model.frame_names[-1],
                                     knots=np.ones(K, dtype=bool))
    for knot_weights in (None, np.ones(K)):
        velocity.add_quadratic(Knots(X), weights, knot_weights, out)
    velocity.gauss_newton(Knots(X), velocity.value(Knots(X)), np.zeros((K, 3)), np.ones(3), out)
