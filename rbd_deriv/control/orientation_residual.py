"""A frame's orientation as a residual: :math:`r = \\log_3(R_{ref}^T R_f(q))` (3 entries [rad]).

The rotation vector of the frame's orientation error, in the frame's own axes (the right error,
Pinocchio's ``log3(R_ref.T @ R)``): zero when the frame has the reference orientation, its norm
:math:`\\theta` the angle between the two (a torso kept upright, a hand's or a foot's attitude).

It depends on q only. Moving q by dq in its tangent space turns the frame by the world angular
velocity :math:`\\omega = J_\\omega(q)\\, dq`, the angular rows of the frame's LOCAL_WORLD_ALIGNED
Jacobian: :math:`R \\leftarrow \\exp([\\omega]_\\times) R`, so that the error becomes
:math:`R_{ref}^T R \\exp([R^T \\omega]_\\times)` and

.. math::

    \\frac{\\partial r}{\\partial q} = J_r^{-1}(r)\\, R^T J_\\omega(q)
    = R^T \\big(I + \\tfrac12 [b]_\\times + e\\, [b]_\\times^2\\big) J_\\omega(q), \\qquad b = R\\, r,
    \\qquad e = \\frac{1}{\\theta^2} - \\frac{1 + \\cos\\theta}{2 \\theta \\sin\\theta},

with :math:`J_r^{-1}` the inverse of the right Jacobian of SO(3) (Pinocchio's Jlog3; Barfoot,
"State Estimation for Robotics", eq. 7.77 at -r), conjugated into the world's axes so that the
Jacobian's angular rows are used as they are; dr/dv = 0. The error is continuous for
:math:`\\theta < \\pi` (a reference a half turn away from the frame is ambiguous, as for any
rotation-vector cost).

The kernel reuses the core: the forward pass without inertias of the task residuals
(:func:`~rbd_deriv.control.task_residuals.placement_pass`), the frame's origin, its
LOCAL_WORLD_ALIGNED Jacobian, and ``placement_error``, whose log3 takes the angle from the trace
away from :math:`\\pi` and the axis from the diagonal near it, and gives :math:`b` and :math:`e`.
The Gauss-Newton products are those of any residual of q alone given by its Jacobian rows
(:func:`~rbd_deriv.control.task_residuals.position_quadratic` and
:func:`~rbd_deriv.control.task_residuals.position_gauss_newton`, the error in place of the position
and a zero reference).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rbd_deriv.control.residuals import (Derivatives, Knots, Residual, hessian_rows,
                                         knot_factors)
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.control.task_residuals import (RobotKinematics, placement_pass, position_gauss_newton,
                                              position_quadratic)
from rbd_deriv.core.constants import JIT_OPTIONS_ALLOCATING
from rbd_deriv.core.frames import cross3, frame_origin, lwa_jacobian_into, placement_error
from rbd_deriv.core.layout import MI_NJ, MI_NVTOT, R_OMI, region3
from rbd_deriv.exceptions import InputError

#: A reference whose R^T R departs from the identity by more than this is not a rotation.
ROTATION_TOLERANCE = 1e-9

_AXES = np.arange(3)
_NO_REFERENCE = np.zeros((1, 3))


@njit(**JIT_OPTIONS_ALLOCATING)
def _orientation_errors(mi, mf, ws, X, joint, placement, references, r, jacobians):
    """r[k, 0] (3,) = log3(R_ref^T R) [rad] and jacobians[k, 0] (3, nv) = dr/dq at every knot k of the
    states X (K, nx), R the world orientation of the frame fixed to joint ``joint`` at ``placement``
    (12,: rotation row-major, translation), R_ref = references[k] (references (K or 1, 3, 3)); r and
    jacobians have a position residual's shapes (K, 1, 3) and (K, 1, 3, nv). ws: a Data workspace of
    the model (its placements are overwritten)."""
    nv = mi[0, MI_NVTOT]
    shared = references.shape[0] == 1
    reference = np.zeros(12)   # rotation row-major, then a position placement_error needs (unused here)
    J = np.empty((6, nv))
    R = np.empty((3, 3))
    for k in range(X.shape[0]):
        placement_pass(mi, mf, ws, X[k])
        ref = references[0] if shared else references[k]
        for i in range(3):
            for j in range(3):
                reference[3 * i + j] = ref[i, j]
        px, py, pz = frame_origin(mi, ws, joint, placement)
        _, _, _, bx, by, bz, _, e = placement_error(mi, ws, joint, placement, px, py, pz, reference)
        lwa_jacobian_into(mi, ws, joint, px, py, pz, 6, J, 0)
        # R = R_joint R_placement; r = R^T b.
        o = region3(mi, ws, R_OMI, mi[0, MI_NJ], 4, 4)[joint]
        for i in range(3):
            for j in range(3):
                R[i, j] = o[i, 0] * placement[j] + o[i, 1] * placement[3 + j] + o[i, 2] * placement[6 + j]
        for i in range(3):
            r[k, 0, i] = R[0, i] * bx + R[1, i] * by + R[2, i] * bz
        # Column by column: R^T (w + b x w / 2 + e b x (b x w)), w the column's angular velocity.
        for j in range(nv):
            wx, wy, wz = J[3, j], J[4, j], J[5, j]
            ux, uy, uz = cross3(bx, by, bz, wx, wy, wz)
            gx, gy, gz = cross3(bx, by, bz, ux, uy, uz)
            cx, cy, cz = wx + 0.5 * ux + e * gx, wy + 0.5 * uy + e * gy, wz + 0.5 * uz + e * gz
            for i in range(3):
                jacobians[k, 0, i, j] = R[0, i] * cx + R[1, i] * cy + R[2, i] * cz


class FrameOrientationResidual(Residual):
    """r = log3(R_ref^T R_f(q)) (3 entries [rad]) for one frame f.

    Args:
        space: The state space.
        kinematics: The robot's kinematics (:class:`~rbd_deriv.control.task_residuals.RobotKinematics`),
            whose model holds the frame.
        frame: Frame name.
        reference: (K, 3, 3) or (3, 3) reference orientations in the world (rotation matrices), kept
            (not copied): writing into :attr:`reference` turns the reference; None for the identity.

    Raises:
        InputError: No frame of that name; a reference that is not a rotation.
    """

    uses_control = False
    nr = 3

    def __init__(self, space: VectorSpace, kinematics: RobotKinematics, frame: str,
                 reference: np.ndarray | None = None) -> None:
        model = kinematics.model
        if frame not in model.frames:
            raise InputError(f"no frame named {frame!r} in model {model.name!r}", "frame")
        reference = np.eye(3) if reference is None else reference
        if reference.ndim not in (2, 3) or reference.shape[-2:] != (3, 3):
            raise InputError(f"reference must be (3, 3) or (K, 3, 3), got {reference.shape}", "reference")
        rotations = reference.reshape(-1, 3, 3)
        if not (np.abs(rotations.transpose(0, 2, 1) @ rotations - np.eye(3)).max() <= ROTATION_TOLERANCE
                and (np.linalg.det(rotations) > 0.0).all()):
            raise InputError("reference must hold rotation matrices (R^T R = I, det R = 1)", "reference")
        self.space, self.model, self.frame = space, model, frame
        self.reference = reference
        joint, placement = model.frames[frame]
        self._joint = int(joint)
        self._placement = np.r_[placement[:3, :3].ravel(), placement[:3, 3]]
        self._data = model.create_data()
        self._r: np.ndarray | None = None
        self._jacobians = np.empty((0, 1, 3, model.nv))
        self._mask = np.ones((0, 1), dtype=bool)

    def _errors(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The errors (K, 1, 3) and their Jacobians (K, 1, 3, nv) at the states X (K, nx): one row of
        a position residual's shape (the products' kernels take those)."""
        X = np.ascontiguousarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.space.nx:
            raise InputError(f"states must be (K, {self.space.nx}), got {X.shape}", "X")
        K = X.shape[0]
        references = np.ascontiguousarray(self.reference, dtype=float).reshape(-1, 3, 3)
        if references.shape[0] not in (1, K):
            raise InputError(f"reference of {references.shape[0]} knots, the cost is evaluated on {K}",
                             "reference")
        if self._r is None or self._r.shape[0] != K:
            self._r = np.empty((K, 1, 3))
            self._jacobians = np.empty((K, 1, 3, self.model.nv))
            self._mask = np.ones((K, 1), dtype=bool)
        model = self.model
        _orientation_errors(model.mi, model.mf, self._data.ws, X, self._joint, self._placement,
                            references, self._r, self._jacobians)
        return self._r, self._jacobians

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, 3) [rad]."""
        r, _ = self._errors(knots.X)
        return r[:, 0].copy()

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, None]:
        """dr/dx = [dr/dq, 0] (K, 3, ndx); no dependence on u."""
        _, jacobian = self._errors(knots.X)
        Rx = np.zeros((knots.count, 3, self.space.ndx))
        Rx[:, :, :self.space.nv] = jacobian[:, 0]
        return Rx, None

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """The value and the products of :meth:`gauss_newton` in one compiled pass
        (:func:`~rbd_deriv.control.task_residuals.position_quadratic` of the error against zero)."""
        r, jacobian = self._errors(knots.X)
        position_quadratic(r, jacobian, _AXES, self._mask, _NO_REFERENCE, weights,
                           knot_factors(knot_weights), out.Lx, out.Lxx)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Products on the q columns (dr/dv = 0):
        :func:`~rbd_deriv.control.task_residuals.position_gauss_newton`."""
        _, jacobian = self._errors(knots.X)
        position_gauss_newton(jacobian, _AXES, self._mask, np.ascontiguousarray(gradient, dtype=float),
                              hessian_rows(hessian, self.nr), out.Lx, out.Lxx)


def precompile_kernels() -> None:
    """Compile the kernel into the cache with the argument types the residual passes (the package's
    build runs it): the last frame of the bundled arm with a floating base, two knots."""
    import rbd_deriv as rd
    from rbd_deriv.control.state_space import ConfigurationSpace
    model = rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True)
    space = ConfigurationSpace(model)
    residual = FrameOrientationResidual(space, RobotKinematics(model), model.frame_names[-1])
    residual.value(Knots(np.tile(space.zero(), (2, 1))))
