"""Contact forces in the cost: regularization, friction cone and unilaterality, and the cone check.

The dynamics provider gives, per step k, the forces F_k (m,) of the closed contacts stacked in
contact order (3 rows per point contact, 6 per frame contact [force, torque], expressed in
LOCAL_WORLD_ALIGNED at the contact frame's origin, acting on the robot) and their Jacobians
dF/dx, dF/du. Which rows belong to which contact at knot k comes from the schedule
(:meth:`rbd_deriv.control.schedule.ContactSchedule.force_offsets`).

- :class:`ContactForceResidual`: :math:`f_c - f^r_c` for one contact (a force regularization,
  a desired load share). Zero with zero Jacobians at knots where the contact is open.
  :class:`ForceStackResidual`: the same for every contact at once, on the whole stack.
- :class:`FrictionConeResidual`: the linearized friction pyramid and the unilateral condition
  as residuals that must stay non-negative, for every contact. With the contact normal n (the
  world z axis by default, flat ground) and tangents t1, t2, for each closed contact

  .. math::

      r = \\big[\\mu' f_n - f_{t1},\\; \\mu' f_n + f_{t1},\\; \\mu' f_n - f_{t2},\\;
      \\mu' f_n + f_{t2},\\; f_n - f_{min}\\big] \\ge 0,

  :math:`\\mu' = \\mu / \\sqrt 2` (the pyramid inscribed in the circular cone, so that meeting
  the pyramid meets the cone). A frame contact's cone applies to its force rows; its torques
  (center of pressure inside the sole) are not constrained here. Open contacts give the neutral
  value 1 with zero Jacobians.

  The residual is enforced as a constraint of the problem
  (:class:`~rbd_deriv.control.constraints.FrictionConeConstraint`, an augmented Lagrangian), and/or
  through an activation: a :class:`~rbd_deriv.control.activation.RelaxedLogBarrier` (the forces of
  the plan stay strictly inside the pyramid as long as the barrier's relaxation is not reached; the
  legged MPC keeps a light one beside the constraint) or a
  :class:`~rbd_deriv.control.activation.QuadraticBarrier` with bounds [0, inf) (a penalty:
  violations shrink as its weight grows but do not vanish).
- :func:`cone_violation` and :func:`forces_within_cone`: the check a tick makes before sending
  a plan, on the exact circular cone, with a stated tolerance.

The compiled kernels below work on the 3 force rows of each closed contact: the pyramid's value,
its gradient :math:`C^T a'` and 3 x 3 Hessian blocks :math:`C^T \\mathrm{diag}(a'') C` in force
space (folded once through the forces' Jacobians,
:func:`~rbd_deriv.control.residuals.fold_force_derivatives`), and the exact cone check.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numba import njit

from rbd_deriv.control.constants import CONE_ABSOLUTE_TOLERANCE, CONE_RELATIVE_TOLERANCE
from rbd_deriv.control.euler_riccati import all_finite
from rbd_deriv.control.residuals import (Derivatives, Knots, Residual, diagonal,
                                         knot_factors, fold_force_derivatives,
                                         hessian_rows, identity_quadratic)
from rbd_deriv.core.contact import FORCE_ROWS
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.exceptions import InputError

#: Rows of the friction-cone residual per contact: four pyramid faces and the normal force.
CONE_ROWS = 5


@njit(**JIT_OPTIONS)
def _cone_residual(F, offsets, cones, shift, r):
    """r[k] (5 nc) = C_c f_c - shift for each contact c closed at knot k (f_c its 3 force rows from
    offsets[k, c]), 1 for an open one."""
    K, contacts = offsets.shape
    rows = cones.shape[1]
    for k in range(K):
        for c in range(contacts):
            o = offsets[k, c]
            for i in range(rows):
                if o < 0:
                    r[k, c * rows + i] = 1.0
                    continue
                C = cones[c, i]
                r[k, c * rows + i] = C[0] * F[k, o] + C[1] * F[k, o + 1] + C[2] * F[k, o + 2] - shift[i]


@njit(**JIT_OPTIONS)
def _cone_force_derivatives(offsets, cones, gradient, hessian, Lf, Lff):
    """The friction pyramid's a' (K, 5 nc) and a'' (K or 1, 5 nc) turned into the force stack's
    derivatives: for each closed contact, Lf[rows] += C^T a' and Lff[rows, rows] += C^T diag(a'') C on
    its 3 force rows."""
    K, contacts = offsets.shape
    rows = cones.shape[1]
    shared = hessian.shape[0] == 1
    for k in range(K):
        h = hessian[0] if shared else hessian[k]
        for c in range(contacts):
            o = offsets[k, c]
            if o < 0:
                continue
            C = cones[c]
            for i in range(rows):
                g, w = gradient[k, c * rows + i], h[c * rows + i]
                for a in range(3):
                    Lf[k, o + a] += C[i, a] * g
                    wa = w * C[i, a]
                    for b in range(3):
                        Lff[k, o + a, o + b] += wa * C[i, b]


@njit(**JIT_OPTIONS)
def _cone_violations(forces, offsets, normals, mu, absolute_tolerance, relative_tolerance, out):
    """out[c] = max(0, |f_t| - mu f_n, -f_n) [N] of each closed contact's force f (its 3 rows from
    offsets[c]) against the cone of unit normal normals[c]; 0 for an open contact, inf for a force that is
    not finite. Returns whether every violation is at most absolute_tolerance + relative_tolerance |f|."""
    within = True
    for c in range(offsets.shape[0]):
        o = offsets[c]
        if o < 0:
            out[c] = 0.0
            continue
        nx, ny, nz = normals[c, 0], normals[c, 1], normals[c, 2]
        fx, fy, fz = forces[o], forces[o + 1], forces[o + 2]
        if not (math.isfinite(fx) and math.isfinite(fy) and math.isfinite(fz)):
            out[c] = math.inf
            within = False
            continue
        normal = fx * nx + fy * ny + fz * nz
        tx, ty, tz = fx - normal * nx, fy - normal * ny, fz - normal * nz
        out[c] = max(0.0, math.sqrt(tx * tx + ty * ty + tz * tz) - mu * normal, -normal)
        if out[c] > absolute_tolerance + relative_tolerance * math.sqrt(fx * fx + fy * fy + fz * fz):
            within = False
    return within


def _offsets(offsets: np.ndarray, contacts: int) -> np.ndarray:
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 2 or offsets.shape[1] != contacts:
        raise InputError(f"force offsets must be (K, {contacts}), got {offsets.shape}", "offsets")
    return offsets


def _check_forces(knots: Knots) -> None:
    if knots.F is None or knots.dF_dx is None or knots.dF_du is None:
        raise InputError("this cost needs the contact forces of the dynamics (knots.F is None)")


class ContactForceResidual(Residual):
    """r = f_c - f_ref for one contact c (3 or 6 rows).

    Args:
        space: The state space.
        nu: Number of controls.
        offsets: (K, nc) first force row of each contact per knot, -1 when open (the
            schedule's ``force_offsets``); kept, not copied.
        contact: Index of the contact in the schedule.
        kind: ``"point"`` or ``"frame"``.
        reference: (K, rows) or (rows,) desired force [N] (and torque [N m]); None for 0.
    """

    uses_control = True

    def __init__(self, space: VectorSpace, nu: int, offsets: np.ndarray, contact: int,
                 kind: str = "point", reference: np.ndarray | None = None) -> None:
        if kind not in FORCE_ROWS:
            raise InputError(f"contact kind {kind!r} is neither 'point' nor 'frame'", "kind")
        self.nr = FORCE_ROWS[kind]
        self.ndx, self.nu = space.ndx, nu
        self.offsets = offsets
        if not 0 <= contact < np.asarray(offsets).shape[1]:
            raise InputError(f"contact index {contact} outside the schedule's "
                             f"{np.asarray(offsets).shape[1]} contacts", "contact")
        self.contact = contact
        self.reference = np.zeros(self.nr) if reference is None else reference

    def _rows(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        _check_forces(knots)
        offsets = _offsets(self.offsets, np.asarray(self.offsets).shape[1])[:, self.contact]
        if offsets.shape[0] != knots.count:
            raise InputError(f"force offsets for {offsets.shape[0]} knots, {knots.count} given")
        closed = offsets >= 0
        rows = np.where(closed, offsets, 0)[:, None] + np.arange(self.nr)
        return closed, rows

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, rows); zero where the contact is open."""
        closed, rows = self._rows(knots)
        force = np.take_along_axis(knots.F, rows, axis=1)
        return np.where(closed[:, None], force - self.reference, 0.0)

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """dr/dx (K, rows, ndx), dr/du (K, rows, nu); zero where the contact is open."""
        closed, rows = self._rows(knots)
        Rx = np.take_along_axis(knots.dF_dx, rows[:, :, None], axis=1) * closed[:, None, None]
        Ru = np.take_along_axis(knots.dF_du, rows[:, :, None], axis=1) * closed[:, None, None]
        return Rx, Ru


class ForceStackResidual(Residual):
    """r = F - F_ref over the whole force stack of each knot (m rows, zero past its contacts).

    The regularization of every contact's force at once: the stack's layout changes with the
    contacts closed at each knot, so the reference is given in that layout (the caller writes
    it when the schedule moves; rows past a knot's contacts stay zero, where F is zero too).
    Its Jacobians are the dynamics' dF/dx and dF/du themselves, so the Gauss-Newton products
    are one batched product each.

    Args:
        space: The state space.
        nu: Number of controls.
        reference: (K, m) desired stacks [N, N m], kept (not copied).
    """

    uses_control = True

    def __init__(self, space: VectorSpace, nu: int, reference: np.ndarray) -> None:
        reference = np.asarray(reference)
        if reference.ndim != 2:
            raise InputError(f"reference must be (K, m), got {reference.shape}", "reference")
        self.nr = reference.shape[1]
        self.ndx, self.nu = space.ndx, nu
        self.reference = reference

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, m)."""
        _check_forces(knots)
        if knots.F.shape != self.reference.shape:
            raise InputError(f"forces {knots.F.shape} for a reference {self.reference.shape}")
        return knots.F - self.reference

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """dF/dx (K, m, ndx), dF/du (K, m, nu)."""
        _check_forces(knots)
        return knots.dF_dx, knots.dF_du

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """L_f += w (F - F_ref), diag(L_ff) += w in one compiled pass when ``out`` has force-space
        derivatives (:func:`~rbd_deriv.control.residuals.identity_quadratic`)."""
        if out.Lff is None:
            return False
        _check_forces(knots)
        if knots.F.shape != self.reference.shape:
            raise InputError(f"forces {knots.F.shape} for a reference {self.reference.shape}")
        identity_quadratic(knots.F, self.reference, weights, knot_factors(knot_weights), out.Lf,
                           out.Lff)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Into the force-space derivatives when ``out`` has them (dr/dF is the identity)."""
        if out.Lff is None:
            super().gauss_newton(knots, r, gradient, hessian, out)
            return
        out.Lf += gradient
        diagonal(out.Lff)[:] += hessian


def pyramid(mu: float, normal: np.ndarray | None = None) -> np.ndarray:
    """(5, 3) matrix C of the inscribed friction pyramid: C f >= [0, 0, 0, 0, f_min] row by row.

    Args:
        mu: Friction coefficient > 0.
        normal: (3,) contact normal in the world (default +z).
    """
    if not (np.isfinite(mu) and mu > 0.0):
        raise InputError(f"friction coefficient must be > 0, got {mu!r}", "mu")
    n = np.array([0.0, 0.0, 1.0]) if normal is None else np.asarray(normal, dtype=float)
    norm = np.linalg.norm(n)
    if n.shape != (3,) or not norm > 0.0 or not np.isfinite(norm):
        raise InputError(f"normal must be a non-zero 3-vector, got {normal!r}", "normal")
    n = n / norm
    # Tangents: world x projected on the contact plane (y if x is nearly normal), then n x t1;
    # for flat ground they are the world x and y axes.
    helper = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = helper - (helper @ n) * n
    t1 /= np.linalg.norm(t1)
    t2 = np.cross(n, t1)
    m = mu / np.sqrt(2.0)
    return np.array([m * n - t1, m * n + t1, m * n - t2, m * n + t2, n])


class FrictionConeResidual(Residual):
    """Linearized friction cones and unilaterality of every contact (5 rows per contact).

    The residual is ``C f_c - [0, 0, 0, 0, f_min]`` per closed contact (see the module docstring)
    and 1 (with zero Jacobians) per open one; an activation keeps it non-negative.

    Args:
        space: The state space.
        nu: Number of controls.
        offsets: (K, nc) first force row of each contact per knot, -1 when open; kept.
        mu: Friction coefficient.
        min_normal_force: f_min [N] >= 0.
        normals: (nc, 3) contact normals in the world, default +z for all.
    """

    uses_control = True

    def __init__(self, space: VectorSpace, nu: int, offsets: np.ndarray, mu: float,
                 min_normal_force: float = 0.0, normals: Sequence[Sequence[float]] | None = None
                 ) -> None:
        contacts = np.asarray(offsets).shape[1]
        _offsets(offsets, contacts)
        if not (np.isfinite(min_normal_force) and min_normal_force >= 0.0):
            raise InputError(f"min_normal_force must be >= 0, got {min_normal_force!r}")
        if normals is None:
            normals = [None] * contacts
        if len(normals) != contacts:
            raise InputError(f"{len(normals)} normals for {contacts} contacts", "normals")
        self.cones = np.array([pyramid(mu, normal) for normal in normals])  # (nc, 5, 3)
        self.offsets = offsets
        self.mu = float(mu)
        self.shift = np.array([0.0, 0.0, 0.0, 0.0, float(min_normal_force)])
        self.nr = CONE_ROWS * contacts
        self.ndx, self.nu = space.ndx, nu

    def _checked_offsets(self, knots: Knots) -> np.ndarray:
        """The offsets (K, nc) as the kernels take them, after checking them against the forces."""
        _check_forces(knots)
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        if offsets.shape[0] != knots.count:
            raise InputError(f"force offsets for {offsets.shape[0]} knots, {knots.count} given")
        if offsets.size and offsets.max() + 3 > knots.F.shape[1]:
            raise InputError(f"force offsets up to {offsets.max()} for stacks of "
                             f"{knots.F.shape[1]} rows", "offsets")
        return offsets

    def _forces(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        offsets = self._checked_offsets(knots)
        closed = offsets >= 0
        rows = np.where(closed, offsets, 0)[:, :, None] + np.arange(3)   # (K, nc, 3)
        return closed, rows

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, 5 nc) (:func:`_cone_residual`)."""
        offsets = self._checked_offsets(knots)
        r = np.empty((knots.count, self.nr))
        _cone_residual(np.ascontiguousarray(knots.F, dtype=float), offsets, self.cones, self.shift, r)
        return r

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """dr/dx (K, 5 nc, ndx), dr/du (K, 5 nc, nu)."""
        closed, rows = self._forces(knots)
        K, contacts = closed.shape
        flat = rows.reshape(K, -1)[:, :, None]
        dx = np.take_along_axis(knots.dF_dx, flat, axis=1).reshape(K, contacts, 3, self.ndx)
        du = np.take_along_axis(knots.dF_du, flat, axis=1).reshape(K, contacts, 3, self.nu)
        mask = closed[:, :, None, None]
        Rx = (np.einsum("cij,kcjd->kcid", self.cones, dx) * mask).reshape(K, self.nr, self.ndx)
        Ru = (np.einsum("cij,kcja->kcia", self.cones, du) * mask).reshape(K, self.nr, self.nu)
        return Rx, Ru


    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Through the forces: with a'(r) and a''(r) turned into the force stack's gradient
        :math:`C^T a'` and block-diagonal Hessian :math:`G = C^T \\mathrm{diag}(a'') C` (3 x 3
        per closed contact), :math:`L_{xx} \\mathrel{+}= F_x^T G F_x` and likewise for u: products
        of the stack's m rows instead of the residual's 5 per contact, or none at all when
        ``out`` collects force-space derivatives."""
        offsets = self._checked_offsets(knots)
        gradient = np.ascontiguousarray(gradient, dtype=float)
        hessian = hessian_rows(hessian, self.nr)
        if out.Lff is not None:
            _cone_force_derivatives(offsets, self.cones, gradient, hessian, out.Lf, out.Lff)
            return
        K, m = knots.F.shape
        G, gF = np.zeros((K, m, m)), np.zeros((K, m))
        _cone_force_derivatives(offsets, self.cones, gradient, hessian, gF, G)
        fold_force_derivatives(knots, Derivatives(out.Lxx, out.Lx, out.Luu, out.Lux, out.Lu, G, gF))


def cone_violation(forces: np.ndarray, offsets: np.ndarray, mu: float,
                   normals: Sequence[Sequence[float]] | None = None) -> np.ndarray:
    """How far each closed contact's force is outside the exact friction cone [N].

    The violation of a force f with normal part f_n and tangential part f_t is
    :math:`\\max(0, \\|f_t\\| - \\mu f_n, -f_n)`: zero inside the cone, else the larger of the
    excess of friction and the pull on the ground.

    Args:
        forces: (m,) the force stack of one knot.
        offsets: (nc,) first row of each contact in it, -1 for an open contact.
        mu: Friction coefficient.
        normals: (nc, 3) contact normals, default +z.

    Returns:
        (nc,) violations, 0 for open contacts.
    """
    return _cone_check(forces, offsets, mu, normals, 0.0, 0.0)[0]


def _cone_check(forces: np.ndarray, offsets: np.ndarray, mu: float,
                normals: Sequence[Sequence[float]] | None, absolute_tolerance: float,
                relative_tolerance: float) -> tuple[np.ndarray, bool]:
    """(violations (nc,), every one within the tolerance) after the checks of the arguments."""
    forces = np.ascontiguousarray(forces, dtype=float)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or forces.ndim != 1:
        raise InputError(f"offsets must be (nc,) and forces (m,), got {offsets.shape} and "
                         f"{forces.shape}", "offsets")
    if offsets.size and offsets.max() + 3 > forces.size:
        raise InputError(f"force stack of {forces.size} rows too short for offsets "
                         f"{offsets.tolist()}", "forces")
    if not (math.isfinite(mu) and mu > 0.0):
        raise InputError(f"friction coefficient must be > 0, got {mu!r}", "mu")
    if normals is None:
        n = _vertical(offsets.size)
    else:
        n = np.array(normals, dtype=float).reshape(offsets.size, 3)
        n /= np.linalg.norm(n, axis=1, keepdims=True)
    violation = np.empty(offsets.size)
    within = _cone_violations(forces, offsets, n, float(mu), float(absolute_tolerance),
                              float(relative_tolerance), violation)
    return violation, within


_VERTICAL: dict[int, np.ndarray] = {}


def _vertical(contacts: int) -> np.ndarray:
    """(contacts, 3) unit normals +z, one array per count, kept (not to be written)."""
    normals = _VERTICAL.get(contacts)
    if normals is None:
        normals = _VERTICAL[contacts] = np.tile([0.0, 0.0, 1.0], (contacts, 1))
    return normals


def forces_within_cone(forces: np.ndarray, offsets: np.ndarray, mu: float,
                       absolute_tolerance: float = CONE_ABSOLUTE_TOLERANCE,
                       relative_tolerance: float = CONE_RELATIVE_TOLERANCE,
                       normals: Sequence[Sequence[float]] | None = None) -> tuple[bool, float]:
    """Whether a plan's first-knot forces may be sent: every violation within the tolerance.

    A contact passes when its :func:`cone_violation` is at most
    ``absolute_tolerance + relative_tolerance * |f|``; NaN or inf forces never pass.

    Returns:
        (passes, the largest violation [N]).
    """
    forces = np.asarray(forces, dtype=float)
    if not all_finite(forces):
        return False, float("inf")
    violation, within = _cone_check(forces, offsets, mu, normals, absolute_tolerance,
                                    relative_tolerance)
    return within, float(violation.max()) if violation.size else 0.0


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the residuals pass (the package's
    build runs it): one contact, two knots, the force-space derivatives collected."""
    K = 2
    space = VectorSpace(1)
    offsets = np.zeros((K, 1), dtype=np.int64)
    knots = Knots(np.zeros((K, 2)), np.zeros((K, 1)), np.zeros((K, 3)), np.zeros((K, 3, 2)),
                  np.zeros((K, 3, 1)))
    out = Derivatives(np.zeros((K, 2, 2)), np.zeros((K, 2)), Lff=np.zeros((K, 3, 3)), Lf=np.zeros((K, 3)))
    cone = FrictionConeResidual(space, 1, offsets, 0.5)
    cone.gauss_newton(knots, cone.value(knots), np.zeros((K, cone.nr)), np.ones((K, cone.nr)), out)
    weights = np.ones(3)
    weights.setflags(write=False)
    ForceStackResidual(space, 1, np.zeros((K, 3))).add_quadratic(knots, weights, None, out)
    forces_within_cone(np.zeros(3), offsets[0], 0.5)


#: Rows of the center-of-pressure residual per sole: both ends of its length, both sides of its width.
COP_ROWS = 4


class CenterOfPressureResidual(Residual):
    """The center of pressure of each sole (a frame contact) inside its rectangle, as residuals that must stay
    non-negative. With the sole's wrench (f, tau) at its center in LOCAL_WORLD_ALIGNED (the force stack's 6 rows)
    turned into the sole's axes by its orientation R (f' = R^T f, tau' = R^T tau), the center of pressure on the
    sole is p = (-tau'_y, tau'_x) / f'_z, and

    .. math::

        r = \\big[l f'_z + \\tau'_y,\\; l f'_z - \\tau'_y,\\; w f'_z - \\tau'_x,\\; w f'_z + \\tau'_x\\big] \\ge 0

    with l, w the half-length and half-width: |p_x| <= l, |p_y| <= w. Linear in the stack: r = A_k F, A_k (4, 6)
    per sole and knot. Open soles and point contacts give the neutral value 1 with zero Jacobians.

    Args:
        space: The state space.
        nu: Number of controls.
        offsets: (K, nc) first force row of each contact per knot, -1 when open; kept.
        soles: {contact index: (K, 3, 3) orientation of that sole in the world at each knot}, kept (not copied):
            writing into them turns the rectangles.
        half_size: (l, w) [m] half the sole's length (along its x) and width (along its y), > 0.
    """

    uses_control = True

    def __init__(self, space: VectorSpace, nu: int, offsets: np.ndarray, soles: dict,
                 half_size: Sequence[float]) -> None:
        contacts = np.asarray(offsets).shape[1]
        _offsets(offsets, contacts)
        half_size = np.asarray(half_size, dtype=float)
        if half_size.shape != (2,) or not (np.isfinite(half_size).all() and (half_size > 0.0).all()):
            raise InputError(f"half_size must be two numbers > 0 [m], got {half_size.tolist()}", "half_size")
        if any(not 0 <= c < contacts for c in soles):
            raise InputError(f"soles {sorted(soles)} for {contacts} contacts", "soles")
        self.offsets, self.soles = offsets, soles
        self.indices = sorted(soles)
        length, width = half_size
        #: (4, 6) the rows in the sole's axes, on (f', tau').
        self.rows = np.array([[0, 0, length, 0, 1, 0], [0, 0, length, 0, -1, 0],
                              [0, 0, width, -1, 0, 0], [0, 0, width, 1, 0, 0]], dtype=float)
        self.nr = COP_ROWS * len(self.indices)
        self.ndx, self.nu = space.ndx, nu

    def _maps(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """(K, S, 4, 6) A of each sole at each knot (zero where it is open) and (K, S) its first force row (0 where
        open)."""
        _check_forces(knots)
        offsets = np.asarray(self.offsets)
        if offsets.shape[0] != knots.count:
            raise InputError(f"force offsets for {offsets.shape[0]} knots, {knots.count} given")
        K = knots.count
        maps = np.zeros((K, len(self.indices), COP_ROWS, 6))
        first = np.zeros((K, len(self.indices)), dtype=np.int64)
        for s, c in enumerate(self.indices):
            R = np.asarray(self.soles[c])
            RT = np.swapaxes(R, -1, -2)
            closed = offsets[:, c] >= 0
            maps[:, s, :, :3] = self.rows[:, :3] @ RT
            maps[:, s, :, 3:] = self.rows[:, 3:] @ RT
            maps[~closed, s] = 0.0
            first[:, s] = np.where(closed, offsets[:, c], 0)
        return maps, first

    def _wrenches(self, knots: Knots, first: np.ndarray) -> np.ndarray:
        """(K, S, 6) each sole's rows of the force stack."""
        return np.take_along_axis(knots.F[:, None, :], (first[:, :, None] + np.arange(6)), axis=2)

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, 4 S) [N]: 1 on open soles."""
        maps, first = self._maps(knots)
        r = np.einsum("ksij,ksj->ksi", maps, self._wrenches(knots, first))
        open_ = np.asarray(self.offsets)[:, self.indices] < 0
        r[open_] = 1.0
        return r.reshape(knots.count, self.nr)

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """dr/dx (K, 4 S, ndx), dr/du (K, 4 S, nu): A through the stack's Jacobians."""
        maps, first = self._maps(knots)
        rows = (first[:, :, None] + np.arange(6)).reshape(knots.count, -1)[:, :, None]
        K, S = first.shape
        dx = np.take_along_axis(knots.dF_dx, rows, axis=1).reshape(K, S, 6, self.ndx)
        du = np.take_along_axis(knots.dF_du, rows, axis=1).reshape(K, S, 6, self.nu)
        return (np.einsum("ksij,ksjd->ksid", maps, dx).reshape(K, self.nr, self.ndx),
                np.einsum("ksij,ksjd->ksid", maps, du).reshape(K, self.nr, self.nu))

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Through the forces, as the friction cone: the stack's gradient A^T a' and Hessian A^T diag(a'') A on each
        closed sole's 6 rows, into the force-space derivatives or folded through the forces' Jacobians."""
        maps, first = self._maps(knots)
        K, S = first.shape
        gradient = np.asarray(gradient, dtype=float).reshape(K, S, COP_ROWS)
        hessian = np.broadcast_to(hessian_rows(hessian, self.nr), (K, self.nr)).reshape(K, S, COP_ROWS)
        m = knots.F.shape[1]
        own = out.Lff is not None
        Lf, Lff = (out.Lf, out.Lff) if own else (np.zeros((K, m)), np.zeros((K, m, m)))
        # Open soles have A = 0: they add nothing wherever their (unused) rows point.
        rows = first[:, :, None] + np.arange(6)                                          # (K, S, 6)
        knot = np.arange(K)[:, None, None]
        for s in range(S):  # a knot's soles sit on rows of their own: no index repeats within one sole's update
            Lf[knot[:, :, 0], rows[:, s]] += np.einsum("kij,ki->kj", maps[:, s], gradient[:, s])
            Lff[knot, rows[:, s, :, None], rows[:, s, None, :]] += np.einsum(
                "kij,ki,kil->kjl", maps[:, s], hessian[:, s], maps[:, s])
        if not own:
            fold_force_derivatives(knots, Derivatives(out.Lxx, out.Lx, out.Luu, out.Lux, out.Lu, Lff, Lf))
