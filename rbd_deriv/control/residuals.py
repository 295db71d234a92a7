"""Residuals: the vector functions r(x, u) whose activations make the costs (Crocoddyl's idea).

A residual is evaluated on K knots at once (:class:`Knots`: states, controls and, once the
dynamics provide them, contact forces with their Jacobians) and gives its value r (K, nr) and
Jacobians with respect to the tangent deviation dx (K, nr, ndx) and the control du (K, nr, nu).
A cost (:mod:`rbd_deriv.control.cost`) turns it into Gauss-Newton derivatives through
:meth:`Residual.gauss_newton`: :math:`L_x \\mathrel{+}= R_x^T a'`,
:math:`L_{xx} \\mathrel{+}= R_x^T \\mathrm{diag}(a'') R_x` (same for u and ux). The default does
that with the dense Jacobians; residuals whose Jacobian is a selection (state, control) do it in
O(nr) instead, since a dense ndx x ndx product per knot would cost more than the Riccati pass.

This module holds the interface and the two residuals every problem has:

- :class:`StateResidual`: :math:`x \\ominus x_{ref}` (posture, base pose, velocities; the soft
  state limits with the neutral state as reference);
- :class:`ControlResidual`: :math:`u - u_{ref}`.

Task residuals (frame position, center of mass) are in :mod:`rbd_deriv.control.task_residuals`,
contact forces and friction cones in :mod:`rbd_deriv.control.contact_force`.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from rbd_deriv.control import gauss_newton
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError


@dataclass
class Knots:
    """What residuals see of K knots of the horizon (views, not copies).

    Attributes:
        X: States (K, nx).
        U: Controls (K, nu), or None at the terminal knot.
        F: Contact forces (K, m) of the steps leaving these knots (see
            :mod:`rbd_deriv.control.dynamics`), or None without contacts.
        dF_dx, dF_du: Their Jacobians (K, m, ndx) and (K, m, nu), or None.
    """

    X: np.ndarray
    U: np.ndarray | None = None
    F: np.ndarray | None = None
    dF_dx: np.ndarray | None = None
    dF_du: np.ndarray | None = None

    @property
    def count(self) -> int:
        """Number of knots K."""
        return self.X.shape[0]


@dataclass
class Derivatives:
    """Cost derivatives of K knots, accumulated in place (views into the solver's buffers).

    Attributes:
        Lxx: (K, ndx, ndx); Lx: (K, ndx); Luu: (K, nu, nu), Lux: (K, nu, ndx), Lu: (K, nu), the
            last three None at the terminal knot.
        Lff: (K, m, m), Lf: (K, m): derivatives with respect to the contact forces, or None.
            Residuals of the forces alone add there when they are given; whoever made them folds
            them once through the forces' Jacobians (:func:`fold_force_derivatives`), so that
            several force costs (regularization, friction cones) pay for one set of products.
    """

    Lxx: np.ndarray
    Lx: np.ndarray
    Luu: np.ndarray | None = None
    Lux: np.ndarray | None = None
    Lu: np.ndarray | None = None
    Lff: np.ndarray | None = None
    Lf: np.ndarray | None = None


def fold_force_derivatives(knots: Knots, out: Derivatives) -> None:
    """Add the force-space derivatives through the forces' Jacobians F_x, F_u:
    :math:`L_x \\mathrel{+}= F_x^T L_f`, :math:`L_{xx} \\mathrel{+}= F_x^T L_{ff} F_x`,
    likewise for u and ux (:func:`rbd_deriv.control.gauss_newton.fold_force_derivatives`: the rows
    of the stack that carry no cost or no force left out)."""
    gauss_newton.fold_force_derivatives(knots.dF_dx, knots.dF_du, out.Lff, out.Lf, out.Lx, out.Lxx,
                                        out.Lu, out.Luu, out.Lux)


_NO_KNOT_WEIGHTS = np.zeros(0)


def knot_factors(knot_weights: np.ndarray | None) -> np.ndarray:
    """Knot weights as the compiled quadratics take them: an empty array for none."""
    return _NO_KNOT_WEIGHTS if knot_weights is None else knot_weights


def hessian_rows(hessian: np.ndarray, nr: int) -> np.ndarray:
    """An activation's Hessian diagonal, (K, nr) or (nr,) for every knot, as the (K or 1, nr)
    writable C array the compiled products take (a copy only when it is not one already)."""
    rows = np.ascontiguousarray(hessian, dtype=float).reshape(-1, nr)
    return rows if rows.flags.writeable else rows.copy()


class Residual:
    """Interface of a residual r(x, u) of nr entries.

    Subclasses set ``nr`` and ``uses_control`` and implement :meth:`value` and
    :meth:`jacobians`; they may override :meth:`gauss_newton` to exploit a sparse Jacobian.
    """

    nr: int = 0
    #: True when r depends on u (such a residual has no value at the terminal knot).
    uses_control: bool = False

    def value(self, knots: Knots) -> np.ndarray:
        """r (K, nr)."""
        raise NotImplementedError

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray | None]:
        """dr/dx (K, nr, ndx) and dr/du (K, nr, nu), the latter None if r does not depend on u."""
        raise NotImplementedError

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """Add the Gauss-Newton derivatives of :math:`\\tfrac12 \\sum_i w_i r_i^2` (times the knot
        weights) to ``out`` in one pass, when the residual has such a form; return False, having
        done nothing, when it has not (the caller then takes :meth:`value` and
        :meth:`gauss_newton`). The same derivatives either way: a shortcut for the commonest cost.

        Args:
            knots: The knots.
            weights: (nr,) the quadratic's weights w.
            knot_weights: (K,) factors of the knots, or None for 1.
            out: Derivatives to add to.
        """
        return False

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Add the Gauss-Newton derivatives of a(r) to ``out``.

        Args:
            knots: The knots r was evaluated on.
            r: The residual (K, nr) at these knots (from :meth:`value`).
            gradient, hessian: a'(r) (K, nr) and the diagonal of a''(r), (K, nr) or (nr,) when
                the same at every knot; knot weights included.
            out: Derivatives to add to.
        """
        Rx, Ru = self.jacobians(knots)
        hessian = np.broadcast_to(hessian, r.shape)
        weighted_x = hessian[:, :, None] * Rx
        out.Lx += np.einsum("kri,kr->ki", Rx, gradient)
        out.Lxx += np.matmul(Rx.transpose(0, 2, 1), weighted_x)
        if Ru is not None and out.Lu is not None:
            out.Lu += np.einsum("kra,kr->ka", Ru, gradient)
            out.Luu += np.matmul(Ru.transpose(0, 2, 1), hessian[:, :, None] * Ru)
            out.Lux += np.matmul(Ru.transpose(0, 2, 1), weighted_x)


def diagonal(matrices: np.ndarray) -> np.ndarray:
    """Writable view (K, n) of the diagonals of matrices (K, n, n) (C-contiguous)."""
    K, n, _ = matrices.shape
    return matrices.reshape(K, n * n)[:, :: n + 1]


class StateResidual(Residual):
    """r = x (-) x_ref (ndx entries: [dq, v - v_ref]).

    Args:
        space: The state space (:mod:`rbd_deriv.control.state_space`).
        reference: (K, nx) reference states, one per knot the residual is evaluated on, or (nx,)
            for the same at every knot. The array is kept (not copied): writing into
            :attr:`reference` moves the reference.
    """

    uses_control = False

    def __init__(self, space: VectorSpace, reference: np.ndarray | None = None) -> None:
        self.space = space
        self.nr = space.ndx
        if reference is None:
            reference = space.zero()
        if reference.ndim not in (1, 2) or reference.shape[-1] != space.nx:
            raise InputError(f"reference must have {space.nx} entries per knot, got {reference.shape}")
        self.reference = reference
        self._r: np.ndarray | None = None

    def _reference(self, count: int) -> np.ndarray:
        """(K, nx) references, or the (nx,) one shared by every knot."""
        if self.reference.ndim == 1:
            return self.reference
        if self.reference.shape[0] != count:
            raise InputError(f"reference has {self.reference.shape[0]} knots, the cost is "
                             f"evaluated on {count}")
        return self.reference

    def value(self, knots: Knots) -> np.ndarray:
        """r = X (-) X_ref, (K, ndx)."""
        K = knots.count
        if self._r is None or self._r.shape[0] != K:
            self._r = np.empty((K, self.nr))
        return self.space.difference(self._reference(K), knots.X, self._r)

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, None]:
        """dr/dx (K, ndx, ndx): identity but the free-flyer block; no dependence on u."""
        K = knots.count
        r = self.value(knots)
        J = np.broadcast_to(np.eye(self.nr), (K, self.nr, self.nr)).copy()
        b = self.space.block
        if b:
            reference = np.broadcast_to(self._reference(K), (K, self.space.nx))
            J[:, :b, :b] = self.space.difference_jacobian_blocks(reference, r)
        return J, None

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """The value and the products of :meth:`gauss_newton` in one compiled pass
        (:func:`rbd_deriv.control.gauss_newton.state_quadratic`) on a model's configuration
        space, :func:`rbd_deriv.control.gauss_newton.identity_quadratic` on a plain vector space."""
        model = getattr(self.space, "model", None)
        K = knots.count
        reference = self._reference(K)
        X = knots.X
        if X.shape[1:] != (self.space.nx,):
            raise InputError(f"states must have {self.space.nx} entries, got {X.shape}", "X")
        if model is None:  # on a plain vector space r = x - x_ref has the identity for Jacobian
            gauss_newton.identity_quadratic(X, reference.reshape(-1, self.space.nx), weights,
                                            knot_factors(knot_weights), out.Lx, out.Lxx)
            return True
        if self._r is None or self._r.shape[0] != K:
            self._r = np.empty((K, self.nr))
        bad = gauss_newton.state_quadratic(model.mi, model.continuous,
                                           reference.reshape(-1, self.space.nx), X, self.space.nq,
                                           self.space.block, weights, knot_factors(knot_weights),
                                           self._r, out.Lx, out.Lxx)
        if bad >= 0:
            which, row = ("X", bad) if bad < K else ("reference", bad - K)
            raise InputError(f"{which}: the quaternion of state {row} is not of unit norm", which)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Diagonal terms in O(ndx); the free-flyer block (6 x 6) densely, at the knots where the
        activation's derivatives are not zero on it
        (:func:`rbd_deriv.control.gauss_newton.state_gauss_newton`)."""
        gauss_newton.state_gauss_newton(self.space.block, np.ascontiguousarray(r, dtype=float),
                                        np.ascontiguousarray(gradient, dtype=float),
                                        hessian_rows(hessian, self.nr), out.Lx, out.Lxx)


class ControlResidual(Residual):
    """r = u - u_ref (nu entries).

    Args:
        space: The state space (for the size of dr/dx, which is zero).
        nu: Number of controls.
        reference: (K, nu) or (nu,) reference controls, kept (not copied) like
            :class:`StateResidual`'s; None for zero.
    """

    uses_control = True

    def __init__(self, space: VectorSpace, nu: int, reference: np.ndarray | None = None) -> None:
        self.ndx = space.ndx
        self.nr = nu
        self.reference = np.zeros(nu) if reference is None else reference
        if self.reference.shape[-1] != nu:
            raise InputError(f"reference must have {nu} entries per knot, got {self.reference.shape}")

    def value(self, knots: Knots) -> np.ndarray:
        """r = U - U_ref, (K, nu)."""
        return knots.U - self.reference

    def jacobians(self, knots: Knots) -> tuple[np.ndarray, np.ndarray]:
        """dr/dx = 0 (K, nu, ndx), dr/du = identity (K, nu, nu)."""
        K = knots.count
        return (np.zeros((K, self.nr, self.ndx)),
                np.broadcast_to(np.eye(self.nr), (K, self.nr, self.nr)).copy())

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """L_u += w (u - u_ref), diag(L_uu) += w in one compiled pass
        (:func:`rbd_deriv.control.gauss_newton.identity_quadratic`)."""
        if knots.U is None or out.Lu is None:
            return False
        reference = self.reference.reshape(-1, self.nr)
        if knots.U.shape != (knots.count, self.nr) or reference.shape[0] not in (1, knots.count):
            raise InputError(f"controls {knots.U.shape} for a reference {self.reference.shape}")
        gauss_newton.identity_quadratic(knots.U, reference, weights,
                                        knot_factors(knot_weights), out.Lu, out.Luu)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Diagonal terms in O(nu)."""
        out.Lu += gradient
        diagonal(out.Luu)[:] += hessian
