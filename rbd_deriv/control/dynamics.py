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

:class:`FreeDynamics` is the provider without contacts, on ``rd.linearize_batch``;
:class:`ContactDynamics` is the provider with contacts: each knot's step runs the contact
dynamics of the contacts a schedule closes at that knot (``rd.linearize(..., contacts=set)``). A
touchdown is an impulse applied at the start of a step, :math:`x_{k+1} = f(\\Phi(x_k), u_k)`
with :math:`\\Phi(q, v) = (q, v^+(q, v))` (``rd.impulse_dynamics``), composed into the knot's
map by :func:`compose_impulse`; the Euler structure the Riccati pass relies on is kept since an
impulse changes v only.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.core.contact import contact_data
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
        out.A[:] = A
        np.take(B, self.actuated, axis=2, out=out.B)
        out.X_next[:] = X_next


def compose_impulse(out: KnotDynamics, knot: int, Phi_x: np.ndarray) -> None:
    """Make step ``knot`` start with an impulse: A <- A Phi_x, dF/dx <- dF/dx Phi_x.

    ``out`` must already hold the step taken from the post-impulse state (X_next, B, F and dF/du
    of :math:`f(\\Phi(x), u)` need nothing more).

    Args:
        out: The knot dynamics.
        knot: Index of the touchdown step.
        Phi_x: (ndx, ndx) Jacobian of the impulse map at that knot's nominal state.
    """
    out.A[knot] = out.A[knot] @ Phi_x
    if out.force_rows:
        out.dF_dx[knot] = out.dF_dx[knot] @ Phi_x


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
        from rbd_deriv.control.schedule import FORCE_ROWS
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
        self._sets: list[tuple] = []
        self._by_pattern: dict[bytes, tuple] = {}
        self._tau = np.zeros((self.horizon, model.nv))
        self._phi = np.eye(2 * model.nv)
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
        self.active[:] = schedule.active
        self.offsets[:] = schedule.force_offsets()
        self.touchdown[:] = schedule.touchdown.any(axis=1)
        self._sets = [self._set(row) for row in self.active]

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
        """A, B (actuated columns), X_next, F, dF/dx, dF/du of every step (see the class)."""
        model, data, dt = self.model, self.data, self.dt
        nq, nv = model.nq, model.nv
        if X.shape[0] != self.horizon:
            raise InputError(f"{X.shape[0]} knots for a schedule of {self.horizon}", "X")
        tau = self._tau
        tau[:] = self.bias
        tau[:, self._columns] += U
        phi = self._phi
        actuated = self._columns
        for k in range(self.horizon):
            contacts = self._sets[k]
            q, v = X[k, :nq], X[k, nq:]
            touchdown = self.impulses and self.touchdown[k]
            if touchdown:
                dv_dq, dv_dv, _, _ = rd.impulse_dynamics_derivatives(model, data, contacts, q, v,
                                                                     self.restitution)
                phi[nv:, :nv] = dv_dq
                phi[nv:, nv:] = dv_dv
                v = contact_data(model, data, contacts).v_plus.copy()
            A, B = rd.linearize(model, data, q, v, tau[k], dt, contacts=contacts)
            out.A[k] = A
            out.B[k] = B[:, actuated]
            out.X_next[k] = data.x_next
            state = contact_data(model, data, contacts)
            m = state.m
            out.F[k, :m] = state.forces
            out.dF_dx[k, :m, :nv] = state.dforces_dq
            out.dF_dx[k, :m, nv:] = state.dforces_dv
            out.dF_du[k, :m] = state.dforces_dtau[:, actuated]
            if m < self.force_rows:
                out.F[k, m:] = 0.0
                out.dF_dx[k, m:] = 0.0
                out.dF_du[k, m:] = 0.0
            if touchdown:
                compose_impulse(out, k, phi)
