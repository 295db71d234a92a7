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
a frame's orientation in :mod:`rbd_deriv.control.orientation_residual`, contact forces and
friction cones in :mod:`rbd_deriv.control.contact_force`.

Each residual family has a compiled kernel beside its class, looping over the knots into the solver's
buffers (with numpy, the calls, not the arithmetic, would take the time). Here: the state residual's, the
identity but the free flyer's block in its Jacobian (the inverse of the right Jacobian of SE(3),
:func:`rbd_deriv.control.state_space.difference_block`); the quadratic of a residual whose Jacobian is the
identity on the variable it reads (:func:`identity_quadratic`; :meth:`Residual.identity` names that
variable for other activations); the fold :math:`L_{xx} \\mathrel{+}= F_x^T L_{ff} F_x` of the force-space
derivatives on the closed contacts' rows (:func:`fold_force_derivatives`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from rbd_deriv.control.blas import gemm
from rbd_deriv.control.state_space import (FREE_FLYER_DOF, VectorSpace, difference_batch,
                                           difference_block)
from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING, UINT
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
    likewise for u and ux (:func:`_fold`: the rows of the stack that carry no cost or no force left
    out). L_xx, L_ux and L_uu must have contiguous columns (BLAS writes their rows).

    Raises:
        InputError: L_xx, L_ux or L_uu with strided columns."""
    for name in ("Lxx", "Lux", "Luu"):
        array = getattr(out, name)
        if array.strides[-1] != array.itemsize:
            raise InputError(f"{name}: its columns must be contiguous", name)
    _fold(knots.dF_dx, knots.dF_du, out.Lff, out.Lf, out.Lx, out.Lxx, out.Lu, out.Luu, out.Lux)


@njit(**JIT_OPTIONS_ALLOCATING)
def _fold(Fx, Fu, Lff, Lf, Lx, Lxx, Lu, Luu, Lux):
    """Force-space derivatives through the forces' Jacobians at every knot: with F = [F_x, F_u] (m, ndx
    + nu), L_x += F_x^T L_f, L_u += F_u^T L_f and the blocks of F^T L_ff F into L_xx, L_ux, L_uu.

    Only the rows r of the stack that carry something enter the products: L_f[r] or a row of L_ff not
    zero, and a row of F not zero (the rows past a knot's closed contacts carry nothing). With F and
    GF = L_ff F on the c rows kept, the blocks of F^T GF are three products accumulated by BLAS
    (:func:`rbd_deriv.control.blas.gemm`: F_x^T GF_x, F_u^T GF_x, F_u^T GF_u)."""
    K, m, ndx = Fx.shape
    nu = Fu.shape[2]
    n = ndx + nu
    used = np.empty(m, dtype=np.int64)
    F = np.empty((m, n))
    GF = np.empty((m, n))
    for k in range(K):
        count = 0
        for r in range(m):
            carries = Lf[k, r] != 0.0
            for s in range(m):
                if Lff[k, r, s] != 0.0:
                    carries = True
            if not carries:
                continue
            moves = False
            for j in range(ndx):
                if Fx[k, r, j] != 0.0:
                    moves = True
            for j in range(nu):
                if Fu[k, r, j] != 0.0:
                    moves = True
            if moves:
                used[count] = r
                count += 1
        if count == 0:
            continue
        for a in range(count):
            r = used[a]
            F[a, :ndx] = Fx[k, r]
            F[a, ndx:] = Fu[k, r]
            gradient = Lf[k, r]
            if gradient != 0.0:
                for j in range(UINT(0), UINT(ndx)):
                    Lx[k, j] += gradient * Fx[k, r, j]
                for j in range(UINT(0), UINT(nu)):
                    Lu[k, j] += gradient * Fu[k, r, j]
        # GF = L_ff F on the kept rows.
        for a in range(count):
            GF[a, :] = 0.0
            for b in range(count):
                w = Lff[k, used[a], used[b]]
                if w != 0.0:
                    for j in range(UINT(0), UINT(n)):
                        GF[a, j] += w * F[b, j]
        gemm(1.0, F[:count, :ndx], True, GF[:count, :ndx], False, 1.0, Lxx[k])
        gemm(1.0, F[:count, ndx:], True, GF[:count, :ndx], False, 1.0, Lux[k])
        gemm(1.0, F[:count, ndx:], True, GF[:count, ndx:], False, 1.0, Luu[k])


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

    def identity(self, knots: Knots, out: Derivatives) -> tuple | None:
        """(Y, Y_ref, gradient, hessian) when r = Y - Y_ref, Y (K, nr) a variable of the knots on which the Jacobian is
        the identity, gradient and hessian the arrays of ``out`` for it (an activation then adds to them directly);
        None otherwise."""
        return None

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


@njit(**JIT_OPTIONS)
def identity_quadratic(Y, reference, weights, knot_weights, gradient, hessian):
    """Gauss-Newton derivatives of 0.5 sum_i w_i r_i^2 (times the knot weight, knot_weights (K,) or empty
    for 1) of r = Y - reference (reference of 1 or K rows), a residual whose Jacobian is the identity on
    the variable it reads (controls, forces): gradient (K, nr) += w r, the diagonals of hessian
    (K, nr, nr) += w."""
    shared = reference.shape[0] == 1
    for k in range(Y.shape[0]):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        y, ref = Y[k], reference[0] if shared else reference[k]
        for i in range(Y.shape[1]):
            w = factor * weights[i]
            gradient[k, i] += w * (y[i] - ref[i])
            hessian[k, i, i] += w


def diagonal(matrices: np.ndarray) -> np.ndarray:
    """Writable view (K, n) of the diagonals of matrices (K, n, n) (C-contiguous)."""
    K, n, _ = matrices.shape
    return matrices.reshape(K, n * n)[:, :: n + 1]


@njit(**JIT_OPTIONS)
def _state_knot(block, r, g, h, work, J, Lx, Lxx):
    """One knot of :func:`_state_gauss_newton`: r, g, h (ndx,), Lx (ndx,), Lxx (ndx, ndx)."""
    for i in range(block, r.shape[0]):
        Lx[i] += g[i]
        Lxx[i, i] += h[i]
    if block == 0:
        return
    active = False
    for i in range(FREE_FLYER_DOF):
        if g[i] != 0.0 or h[i] != 0.0:
            active = True
    if not active:
        return
    difference_block(r, work, J)
    for j in range(FREE_FLYER_DOF):
        s = 0.0
        for i in range(FREE_FLYER_DOF):
            s += J[i, j] * g[i]
        Lx[j] += s
    for a in range(FREE_FLYER_DOF):
        for b in range(FREE_FLYER_DOF):
            s = 0.0
            for i in range(FREE_FLYER_DOF):
                s += J[i, a] * h[i] * J[i, b]
            Lxx[a, b] += s


@njit(**JIT_OPTIONS_ALLOCATING)
def _state_gauss_newton(block, r, gradient, hessian, Lx, Lxx):
    """Gauss-Newton products of r = X (-) X_ref at K knots, gradient a' (K, ndx), Hessian diagonal a''
    (K or 1, ndx): the identity rows past the free-flyer block (``block`` = 6 or 0) add a' and a''
    directly; the block's rows J = Jr(r[:6])^-1 add J^T a' and J^T diag(a'') J, at knots where a' or a''
    is not zero there."""
    shared = hessian.shape[0] == 1
    work, J = np.empty((10, 3, 3)), np.empty((FREE_FLYER_DOF, FREE_FLYER_DOF))
    for k in range(r.shape[0]):
        _state_knot(block, r[k], gradient[k], hessian[0] if shared else hessian[k], work, J, Lx[k],
                    Lxx[k])


@njit(**JIT_OPTIONS_ALLOCATING)
def _state_quadratic(mi, continuous, reference, X, nq, block, weights, knot_weights, r, Lx, Lxx):
    """:func:`~rbd_deriv.control.state_space.difference_batch` into r (r = X (-) reference), then
    :func:`_state_gauss_newton` of the activation 0.5 sum_i w_i r_i^2 times the knot weight
    (knot_weights (K,), or empty for 1): a' = w r, a'' = w, in one pass. Returns what
    ``difference_batch`` returns."""
    bad = difference_batch(mi, continuous, reference, X, nq, r)
    if bad >= 0:
        return bad
    ndx = r.shape[1]
    work, J = np.empty((10, 3, 3)), np.empty((FREE_FLYER_DOF, FREE_FLYER_DOF))
    g, h = np.empty(ndx), np.empty(ndx)
    for k in range(r.shape[0]):
        factor = 1.0 if knot_weights.shape[0] == 0 else knot_weights[k]
        if factor == 0.0:
            continue
        for i in range(ndx):
            h[i] = factor * weights[i]
            g[i] = h[i] * r[k, i]
        _state_knot(block, r[k], g, h, work, J, Lx[k], Lxx[k])
    return -1


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

    def identity(self, knots: Knots, out: Derivatives) -> tuple | None:
        """(X, X_ref, L_x, L_xx) on a plain vector space (see :meth:`Residual.identity`), else None."""
        if hasattr(self.space, "model"):
            return None
        return knots.X, self._reference(knots.count).reshape(-1, self.space.nx), out.Lx, out.Lxx

    def add_quadratic(self, knots: Knots, weights: np.ndarray, knot_weights: np.ndarray | None,
                      out: Derivatives) -> bool:
        """The value and the products of :meth:`gauss_newton` in one compiled pass
        (:func:`_state_quadratic`) on a model's configuration space, :func:`identity_quadratic` on a plain
        vector space (whose Jacobian is the identity)."""
        model = getattr(self.space, "model", None)
        K = knots.count
        reference = self._reference(K)
        X = knots.X
        if X.shape[1:] != (self.space.nx,):
            raise InputError(f"states must have {self.space.nx} entries, got {X.shape}", "X")
        if model is None:  # on a plain vector space r = x - x_ref has the identity for Jacobian
            identity_quadratic(*self.identity(knots, out)[:2], weights, knot_factors(knot_weights), out.Lx, out.Lxx)
            return True
        if self._r is None or self._r.shape[0] != K:
            self._r = np.empty((K, self.nr))
        bad = _state_quadratic(model.mi, model.continuous, reference.reshape(-1, self.space.nx), X,
                               self.space.nq, self.space.block, weights, knot_factors(knot_weights),
                               self._r, out.Lx, out.Lxx)
        if bad >= 0:
            which, row = ("X", bad) if bad < K else ("reference", bad - K)
            raise InputError(f"{which}: the quaternion of state {row} is not of unit norm", which)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Diagonal terms in O(ndx); the free-flyer block (6 x 6) densely, at the knots where the
        activation's derivatives are not zero on it
        (:func:`_state_gauss_newton`)."""
        _state_gauss_newton(self.space.block, np.ascontiguousarray(r, dtype=float),
                            np.ascontiguousarray(gradient, dtype=float), hessian_rows(hessian, self.nr),
                            out.Lx, out.Lxx)


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
        (:func:`identity_quadratic`)."""
        if knots.U is None or out.Lu is None:
            return False
        reference = self.reference.reshape(-1, self.nr)
        if knots.U.shape != (knots.count, self.nr) or reference.shape[0] not in (1, knots.count):
            raise InputError(f"controls {knots.U.shape} for a reference {self.reference.shape}")
        identity_quadratic(knots.U, reference, weights, knot_factors(knot_weights), out.Lu, out.Luu)
        return True

    def gauss_newton(self, knots: Knots, r: np.ndarray, gradient: np.ndarray,
                     hessian: np.ndarray, out: Derivatives) -> None:
        """Diagonal terms in O(nu)."""
        out.Lu += gradient
        diagonal(out.Luu)[:] += hessian


def precompile_kernels() -> None:
    """Compile the kernels into the cache with the argument types the residuals pass (the package's
    build runs it): on the bundled arm with a floating base, two knots, the weights read-only as an
    activation keeps them."""
    import rbd_deriv as rd
    from rbd_deriv.control.state_space import ConfigurationSpace
    space = ConfigurationSpace(rd.load_urdf(str(rd.bundled_urdf("rbd_arm7")), floating_base=True))
    K, ndx, nu = 2, space.ndx, space.nv - FREE_FLYER_DOF
    X = np.tile(space.zero(), (K, 1))
    out = Derivatives(np.zeros((K, ndx, ndx)), np.zeros((K, ndx)), np.zeros((K, nu, nu)),
                      np.zeros((K, nu, ndx)), np.zeros((K, nu)), np.zeros((K, 3, 3)), np.zeros((K, 3)))
    knots = Knots(X, np.zeros((K, nu)), np.zeros((K, 3)), np.zeros((K, 3, ndx)), np.zeros((K, 3, nu)))
    state, control = StateResidual(space, X[0].copy()), ControlResidual(space, nu)
    for residual in (state, control):
        weights = np.ones(residual.nr)
        weights.setflags(write=False)
        for knot_weights in (None, np.ones(K)):
            residual.add_quadratic(knots, weights, knot_weights, out)
    state.gauss_newton(knots, state.value(knots), np.zeros((K, ndx)), np.ones(ndx), out)
    fold_force_derivatives(knots, out)
