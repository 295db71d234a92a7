"""The dynamics of the horizon's knots: what a dynamics provider gives the solver.

At every tick the solver hands the provider the nominal states X (N, nx) and controls U (N, nu) of
the N steps and gets back, per step k, in a :class:`KnotDynamics`:

- ``A`` (N, ndx, ndx), ``B`` (N, ndx, nu): Jacobians of the semi-implicit Euler step
  :math:`x_{k+1} = f(x_k, u_k)` in the tangent spaces (the package's ``rd.linearize``
  convention: :math:`v^+ = v + \\Delta t\\, \\dot v`, :math:`q^+ = q \\oplus \\Delta t\\, v^+`);
- ``X_next`` (N, nx): :math:`f(x_k, u_k)`; the solver's gaps are
  :math:`f(x_k, u_k) \\ominus x_{k+1}`;
- ``F`` (N, m), ``dF_dx`` (N, m, ndx), ``dF_du`` (N, m, nu): the contact forces of the step and
  their Jacobians (3 rows per point contact, 6 per frame contact, zero rows past a knot's own
  contacts), which the force and friction-cone residuals read. m = 0 without contacts.

:class:`HeldDynamics` holds one linearization (the dynamics node's) for every knot, as a fixed-base MPC in
held mode uses it; :class:`FreeDynamics` is the provider without contacts, on ``rd.linearize_batch``;
:class:`ContactDynamics` is the provider with contacts: each knot's step runs the contact
dynamics of the contacts a schedule closes at that knot, for the whole horizon in one
``rd.linearize_batch(..., contacts=sets, force_derivatives=True)``. A
touchdown is an impulse applied at the start of a step, :math:`x_{k+1} = f(\\Phi(x_k), u_k)`
with :math:`\\Phi(q, v) = (q, v^+(q, v))` (``rd.impulse_dynamics``), composed into the knot's
map by :func:`compose_impulse`; the Euler structure the Riccati pass relies on is kept since an
impulse changes v only.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from numba import njit
import numpy as np

import rbd_deriv as rd
from rbd_deriv.core.constants import JIT_OPTIONS, JIT_OPTIONS_ALLOCATING
from rbd_deriv.control import euler_riccati
from rbd_deriv.control.blas import gemm
from rbd_deriv.control.constants import EULER_STEP_TOLERANCE
from rbd_deriv.core.contact import FORCE_ROWS, contact_data
from rbd_deriv.exceptions import InputError, ModelError

#: Name of the free-flyer joint (unactuated) in models with a floating base.
ROOT_JOINT = "root_joint"


class KnotDynamics:
    """Buffers of the dynamics of N steps (see the module docstring for each array).

    Args:
        horizon: Number of steps N.
        nx, ndx, nu: State, tangent and control sizes.
        force_rows: Number m of force rows per step (0 without contacts).
    """

    def __init__(self, horizon: int, nx: int, ndx: int, nu: int, force_rows: int = 0) -> None:
        self.A = np.zeros((horizon, ndx, ndx))
        self.B = np.zeros((horizon, ndx, nu))
        self.X_next = np.zeros((horizon, nx))
        self.F = np.zeros((horizon, force_rows))
        self.dF_dx = np.zeros((horizon, force_rows, ndx))
        self.dF_du = np.zeros((horizon, force_rows, nu))
        #: True when every step is a semi-implicit Euler step (:func:`is_euler_step`): the solver's structured
        #: Riccati pass reads their velocity rows only. A provider of other steps sets it False.
        self.euler_step = True

    @property
    def force_rows(self) -> int:
        """Number m of force rows per step."""
        return self.F.shape[1]


class DynamicsProvider(Protocol):
    """What the solver needs from the dynamics (see the module docstring)."""

    #: Number of force rows per step.
    force_rows: int

    def linearize(self, X: np.ndarray, U: np.ndarray, out: KnotDynamics) -> None:
        """Fill ``out`` with the dynamics of the steps leaving the states X (N, nx) under U (N, nu)."""


def actuated_indices(model: Any, actuated: Sequence[str] | None = None) -> np.ndarray:
    """Velocity indices of the actuated joints: every joint but ``root_joint`` by default.

    Args:
        model: The robot model.
        actuated: Names of the actuated joints (1-dof joints of the model), in control order.

    Raises:
        InputError: An unknown or multi-dof joint is named, or a joint twice.
    """
    if actuated is None:
        actuated = [name for name in model.joint_names if name != ROOT_JOINT]
    indices = []
    for name in actuated:
        if name not in model.idx_v:
            raise InputError(f"no joint named {name!r} in model {model.name!r}")
        if model.nv_joint[name] != 1:
            raise InputError(f"joint {name!r} has {model.nv_joint[name]} dof: only 1-dof joints "
                             "can be actuated")
        indices.append(model.idx_v[name])
    if len(set(indices)) != len(indices):
        raise InputError("a joint is listed twice among the actuated joints")
    if not indices:
        raise ModelError(f"model {model.name!r} has no actuated joint")
    return np.array(indices, dtype=np.int64)


def is_euler_step(A: np.ndarray, B: np.ndarray, dt: float) -> bool:
    """True if (A, B) is a semi-implicit Euler step of a vector space to EULER_STEP_TOLERANCE.

    With v+ = v + dt a and q+ = q + dt v+, the position rows are A_q = [I, 0] + dt A_v and
    B_q = dt B_v (A_v, B_v the velocity rows); see :func:`rbd_deriv.control.euler_riccati.is_euler_step`.

    Args:
        A: (nx, nx) state Jacobian, nx = 2 nv; B: (nx, nu) input Jacobian; dt: step [s].
    """
    return bool(euler_riccati.is_euler_step(A, B, float(dt), EULER_STEP_TOLERANCE))


@njit(**JIT_OPTIONS)
def _held_steps(A, B, x_lin, u_lin, x_plus, X, U, A_out, B_out, X_next):
    """Every knot k: A_out[k] = A, B_out[k] = B, X_next[k] = x+ + A (X[k] - x_lin) + B (U[k] - u_lin)."""
    horizon = U.shape[0]
    nx = A.shape[0]
    nu = B.shape[1]
    for k in range(horizon):
        for i in range(nx):
            s = x_plus[i]
            for j in range(nx):
                A_out[k, i, j] = A[i, j]
                s += A[i, j] * (X[k, j] - x_lin[j])
            for a in range(nu):
                B_out[k, i, a] = B[i, a]
                s += B[i, a] * (U[k, a] - u_lin[a])
            X_next[k, i] = s


class HeldDynamics:
    """One linearization for every step: x' = x+ + A (x - x_lin) + B (u - u_lin), on a vector space.

    The dynamics node publishes it at the measured state; a fixed-base MPC in held mode plans the whole
    horizon on it (:meth:`hold` each tick, then the solver's :meth:`linearize`). The steps are Euler steps
    when (A, B) has their structure (:func:`is_euler_step`, checked once per :meth:`hold`).

    Args:
        dt: Step [s] of the linearizations.
    """

    force_rows = 0

    def __init__(self, dt: float) -> None:
        self.dt = float(dt)
        self.A = self.B = self.x = self.u = self.x_next = None
        self.euler_step = False

    def hold(self, A: np.ndarray, B: np.ndarray, x: np.ndarray, u: np.ndarray, x_next: np.ndarray) -> None:
        """Plan on this linearization from now on: A (nx, nx), B (nx, nu) taken at the state x (nx,) and
        torques u (nu,) [N m], x_next = f(x, u) (nx,). Kept, not copied."""
        self.A, self.B, self.x, self.u, self.x_next = A, B, x, u, x_next
        self.euler_step = is_euler_step(A, B, self.dt)

    def linearize(self, X: np.ndarray, U: np.ndarray, out: KnotDynamics) -> None:
        """A, B and X_next of every step from the held linearization; no forces."""
        if self.A is None:
            raise InputError("no linearization held: call hold() first")
        _held_steps(self.A, self.B, self.x, self.u, self.x_next, X, U, out.A, out.B, out.X_next)
        out.euler_step = self.euler_step


class FreeDynamics:
    """The dynamics without contacts: ``rd.linearize_batch`` at every knot.

    The controls are the torques of the actuated joints, tau = S^T u (zero on the free flyer).

    Args:
        model: The robot model (fixed or floating base).
        dt: Step [s].
        actuated: Names of the actuated joints in control order (default: all but the free flyer).
    """

    force_rows = 0

    def __init__(self, model: Any, dt: float, actuated: Sequence[str] | None = None) -> None:
        self.model = model
        self.dt = float(dt)
        self.actuated = actuated_indices(model, actuated)
        self.nu = self.actuated.size
        self._all_actuated = bool(np.array_equal(self.actuated, np.arange(model.nv)))
        #: Torques (nv,) added to S^T u at every knot (a disturbance estimate), zero by default.
        self.bias = np.zeros(model.nv)
        self._tau: np.ndarray | None = None

    def linearize(self, X: np.ndarray, U: np.ndarray, out: KnotDynamics) -> None:
        """A, B (actuated columns), X_next of every step; no forces."""
        model = self.model
        nq = model.nq
        if self._tau is None or self._tau.shape[0] != U.shape[0]:
            self._tau = np.zeros((U.shape[0], model.nv))
        self._tau[:] = self.bias
        self._tau[:, self.actuated] += U
        A, B, X_next = rd.linearize_batch(model, np.ascontiguousarray(X[:, :nq]),
                                          np.ascontiguousarray(X[:, nq:]), self._tau, self.dt)
        # The batch's arrays are new: handed over, not copied (a few hundred microseconds for a humanoid).
        out.A, out.X_next = A, X_next
        if self._all_actuated:
            out.B = B
        else:
            np.take(B, self.actuated, axis=2, out=out.B)


def compose_impulse(out: KnotDynamics, knot: int, dv_dq: np.ndarray, dv_dv: np.ndarray) -> None:
    r"""Make step ``knot`` start with an impulse: A <- A Phi_x, dF/dx <- dF/dx Phi_x, with
    :math:`\Phi_x = [[I, 0], [\partial v^+/\partial q, \partial v^+/\partial v]]` (:func:`_compose_impulse`).

    ``out`` must already hold the step taken from the post-impulse state (X_next, B, F and dF/du
    of :math:`f(\Phi(x), u)` need nothing more).

    Args:
        out: The knot dynamics.
        knot: Index of the touchdown step.
        dv_dq, dv_dv: (nv, nv) Jacobians of the post-impulse velocity at that knot's nominal state.
    """
    _compose_impulse(out.A[knot], out.dF_dx[knot], dv_dq, dv_dv)


@njit(**JIT_OPTIONS_ALLOCATING)
def _compose_impulse(A, dF_dx, dv_dq, dv_dv):
    """A (2 nv, 2 nv) <- A Phi_x and dF_dx (m, 2 nv) <- dF_dx Phi_x with Phi_x = [[I, 0], [dv_dq, dv_dv]]
    (:func:`_compose_rows`)."""
    _compose_rows(A, dv_dq, dv_dv)
    _compose_rows(dF_dx, dv_dq, dv_dv)


@njit(**JIT_OPTIONS_ALLOCATING)
def _compose_rows(M, dv_dq, dv_dv):
    """M (rows, 2 nv) <- M Phi_x: with M = [M_q, M_v], [M_q + M_v dv_dq, M_v dv_dv] (half the work of the dense
    product), two BLAS products of a copy of M_v."""
    nv = dv_dq.shape[0]
    velocity = M[:, nv:].copy()
    gemm(1.0, velocity, False, dv_dq, False, 1.0, M[:, :nv])
    gemm(1.0, velocity, False, dv_dv, False, 0.0, M[:, nv:])


class ContactDynamics:
    """The contact-constrained dynamics of every knot, from a contact schedule.

    The step leaving knot k runs the contact dynamics of the contacts closed at k
    (``rd.linearize(model, data, q, v, tau, dt, contacts=set)``, tau = S^T u + bias): A, B (actuated
    columns), X_next, and the forces with their Jacobians, in the schedule's stack order
    (:meth:`rbd_deriv.control.schedule.ContactSchedule.force_offsets`). With ``impulses``, a step
    at a touchdown knot (a contact closes there) starts with the impulse of the knot's contact set,
    :math:`v^+ = v^+(q, v)` (``rd.impulse_dynamics``, restitution ``restitution``), and its
    Jacobians are composed with :math:`\\Phi_x = [[I, 0], [\\partial v^+/\\partial q,
    \\partial v^+/\\partial v]]`.

    The horizon's contact sets change as the gait moves: :meth:`set_schedule` writes the new
    schedule into the arrays (``active``, ``offsets``, ``touchdown``) that the force residuals
    keep, so a problem is built once.

    Args:
        model: A floating-base model.
        dt: Step [s].
        schedule: The first schedule (its names, kinds and horizon stay).
        actuated: Names of the actuated joints in control order (default: all but the free flyer).
        impulses: Compose the touchdown impulse into the touchdown knots' maps.
        restitution: Restitution coefficient e of the impulses, in [0, 1].

    Raises:
        InputError: A contact frame the model does not have, a frame fixed to the universe.
    """

    def __init__(self, model: Any, dt: float, schedule: Any,
                 actuated: Sequence[str] | None = None, impulses: bool = True,
                 restitution: float = 0.0) -> None:
        self.model = model
        self.dt = float(dt)
        self.data = model.create_data()
        self.actuated = actuated_indices(model, actuated)
        self.nu = self.actuated.size
        self.names, self.kinds = schedule.names, schedule.kinds
        self.contacts = tuple(rd.Contact(model, name, kind)
                              for name, kind in zip(self.names, self.kinds))
        self.horizon = schedule.horizon
        #: Force rows of the largest stack (every contact closed): the buffers' m.
        self.force_rows = sum(FORCE_ROWS[kind] for kind in self.kinds)
        self.impulses = bool(impulses)
        self.restitution = float(restitution)
        #: Torques (nv,) added to S^T u at every knot (a disturbance estimate), zero by default.
        self.bias = np.zeros(model.nv)
        self.active = np.zeros((self.horizon, len(self.names)), dtype=bool)
        self.offsets = np.full((self.horizon, len(self.names)), -1, dtype=np.int64)
        self.touchdown = np.zeros(self.horizon, dtype=bool)
        self._sets: tuple = ()
        self._by_pattern: dict[bytes, tuple] = {}
        self._layouts: dict[int, tuple] = {}
        self._tau = np.zeros((self.horizon, model.nv))
        # The batch's B (N, 2 nv, nv) and dforces/dtau (N, m, nv), all the joints' columns: the actuated ones are
        # taken from them; the batch writes its other results straight into the solver's KnotDynamics.
        self._B = np.zeros((self.horizon, 2 * model.nv, model.nv))
        self._dF_dtau = np.zeros((self.horizon, self.force_rows, model.nv))
        #: (N, nv, nv) twice: the post-impulse velocity's Jacobians at the touchdown knots (dv+/dq, dv+/dv).
        self._dv_dq = np.zeros((self.horizon, model.nv, model.nv))
        self._dv_dv = np.zeros((self.horizon, model.nv, model.nv))
        # A slice when the actuated joints are contiguous (every joint after the free flyer):
        # a view instead of a gather.
        first = int(self.actuated[0])
        contiguous = np.array_equal(self.actuated, np.arange(first, first + self.nu))
        self._columns = slice(first, first + self.nu) if contiguous else self.actuated
        self.set_schedule(schedule)

    def set_schedule(self, schedule: Any) -> None:
        """Take the contact sets of a schedule with the same contacts and horizon (in place)."""
        if schedule.names != self.names or schedule.kinds != self.kinds:
            raise InputError(f"schedule contacts {list(schedule.names)} ({list(schedule.kinds)}) "
                             f"differ from the provider's {list(self.names)}", "schedule")
        if schedule.horizon != self.horizon:
            raise InputError(f"schedule of {schedule.horizon} knots for a provider of "
                             f"{self.horizon}", "schedule")
        layout = self._layouts.get(id(schedule))
        if layout is None or layout[0] is not schedule:
            # Kept with the schedule itself, whose arrays are read-only: a schedule met again
            # (a periodic gait) is laid out once.
            touchdown = schedule.touchdown.any(axis=1)
            layout = (schedule, schedule.force_offsets(), touchdown,
                      tuple(self._set(row) for row in schedule.active),
                      [int(k) for k in np.flatnonzero(touchdown)])
            self._layouts[id(schedule)] = layout
        self.active[:] = schedule.active
        self.offsets[:] = layout[1]
        self.touchdown[:] = layout[2]
        self._sets, self._touchdowns = layout[3], layout[4]

    def _set(self, row: np.ndarray) -> tuple:
        key = row.tobytes()
        found = self._by_pattern.get(key)
        if found is None:
            found = self._by_pattern[key] = tuple(c for c, on in zip(self.contacts, row) if on)
        return found

    def forces(self, x: np.ndarray, u: np.ndarray, knot: int = 0) -> np.ndarray:
        """Contact forces (force_rows,) of the step leaving ``knot`` from state x (nx,) under the
        controls u (nu,), zero past the knot's contacts (after the impulse at a touchdown)."""
        model, data = self.model, self.data
        nq = model.nq
        contacts = self._sets[knot]
        v = x[nq:]
        if self.impulses and self.touchdown[knot]:
            v = rd.impulse_dynamics(model, data, contacts, x[:nq], v, self.restitution)[0].copy()
        tau = self.bias.copy()
        tau[self._columns] += u
        _, forces = rd.contact_dynamics(model, data, contacts, x[:nq], v, tau)
        out = np.zeros(self.force_rows)
        out[:forces.size] = forces
        return out

    def linearize(self, X: np.ndarray, U: np.ndarray, out: KnotDynamics) -> None:
        """A, B (actuated columns), X_next, F, dF/dx, dF/du of every step (see the class): one
        ``rd.linearize_batch(..., contacts=sets, force_derivatives=True)`` for the horizon, the
        touchdown knots' velocities replaced by their post-impulse ones first."""
        model, data = self.model, self.data
        nq = model.nq
        if X.shape[0] != self.horizon:
            raise InputError(f"{X.shape[0]} knots for a schedule of {self.horizon}", "X")
        tau = self._tau
        tau[:] = self.bias
        tau[:, self._columns] += U
        Q = np.ascontiguousarray(X[:, :nq])
        V = np.ascontiguousarray(X[:, nq:])
        touchdowns = self._touchdowns if self.impulses else ()
        for k in touchdowns:
            contacts = self._sets[k]
            dv_dq, dv_dv, _, _ = rd.impulse_dynamics_derivatives(model, data, contacts, Q[k], V[k],
                                                                 self.restitution)
            self._dv_dq[k] = dv_dq
            self._dv_dv[k] = dv_dv
            V[k] = contact_data(model, data, contacts).v_plus
        # The forces' rows past a knot's own contacts are written zero (the buffers have the rows of every contact).
        rd.linearize_batch(model, Q, V, tau, self.dt, contacts=self._sets, force_derivatives=True,
                           out=(out.A, self._B, out.X_next, out.F, out.dF_dx, self._dF_dtau))
        out.B[:] = self._B[:, :, self._columns]
        out.dF_du[:] = self._dF_dtau[:, :, self._columns]
        for k in touchdowns:
            compose_impulse(out, k, self._dv_dq[k], self._dv_dv[k])


def precompile_kernels() -> None:
    """Compile :func:`_compose_impulse` into the kernel cache with the argument types
    :meth:`ContactDynamics.linearize` passes (the package's build runs it)."""
    _compose_impulse(np.zeros((2, 2)), np.zeros((3, 2)), np.eye(1), np.eye(1))
