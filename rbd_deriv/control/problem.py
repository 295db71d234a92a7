"""The fixed-base tracking problem: its settings (:class:`MPCProblem`) and its builder (:func:`tracking_problem`).

Over a horizon of N steps of length dt, with state :math:`x = (q, v)` and torque input
:math:`u = \\tau`, the controller minimises

.. math::

    \\sum_{k=0}^{N-1} \\big[\\tfrac12 \\|x_k - x^r_k\\|^2_{W} + \\tfrac12 \\|u_k - u^r_k\\|^2_{R}
    + \\phi(x_k)\\big] + \\tfrac12 \\|x_N - x^r_N\\|^2_{s_N W} + \\phi(x_N)

subject to :math:`x_{k+1} = f(x_k, u_k)` (semi-implicit Euler of the rigid-body dynamics, or its
linearization held over the horizon), :math:`x_0` the measured state and
:math:`\\tau_{lo} \\le u_k \\le \\tau_{hi}` (hard, from the URDF effort limits). The soft state
limits :math:`\\phi(x) = \\tfrac12 w_l \\|\\max(0, x - x_{hi}) + \\max(0, x_{lo} - x)\\|^2` keep
positions and velocities inside the URDF limits where that is cheap (a diagonal Gauss-Newton term).

Only robots whose configuration space is a vector space (fixed base; continuous joints carry one
angle in this package) are accepted: a floating base driven by joint torques alone needs a contact
model, which this controller does not have.

:func:`tracking_problem` writes it as the package's one optimal control problem
(:class:`~rbd_deriv.control.ocp.OptimalControlProblem`, the one the legged MPC composes too): the
tracking terms are a state and a control residual under quadratic activations, the soft limits a
quadratic barrier on the state, the dynamics a held linearization or the batched free dynamics.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from rbd_deriv.control.activation import Quadratic, QuadraticBarrier
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import DynamicsProvider
from rbd_deriv.control.ocp import OptimalControlProblem
from rbd_deriv.control.residuals import ControlResidual, StateResidual
from rbd_deriv.control.state_space import VectorSpace
from rbd_deriv.exceptions import InputError, ModelError


class Mode(str, Enum):
    """How the dynamics constraint of the horizon is built each tick."""

    #: The linearization (A, B, x+) received at the current state, held over the whole horizon.
    HELD = "held"
    #: One Gauss-Newton (real-time iteration) step: the dynamics are re-linearized in-process at
    #: every knot of the predicted trajectory with the batched derivatives.
    RELINEARIZE = "relinearize"


def _as_vector(name: str, value: Any, size: int) -> np.ndarray:
    """Broadcast a scalar or check a vector of length ``size``; refuse NaN."""
    array = np.array(value, dtype=float)
    if array.ndim == 0:
        array = np.full(size, float(array))
    if array.shape != (size,):
        raise InputError(f"{name} must be a scalar or have shape ({size},), got {array.shape}")
    if np.isnan(array).any():
        raise InputError(f"{name} contains NaN")
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class MPCProblem:
    """Horizon, weights and limits of the MPC problem for one robot.

    Attributes:
        joint_names: Names of the nv controlled joints, in model order.
        horizon: Number of steps N of the horizon.
        dt: Step of the horizon in [s].
        torque_lower: Lower torque bounds (nv,) in [N m] or [N].
        torque_upper: Upper torque bounds (nv,) in [N m] or [N].
        state_lower: Soft lower state bounds (2 nv,): positions [rad] then velocities [rad/s]; -inf for none.
        state_upper: Soft upper state bounds (2 nv,); +inf for none.
        position_weight: Diagonal of W on positions (nv,) in [1/rad^2].
        velocity_weight: Diagonal of W on velocities (nv,) in [s^2/rad^2].
        torque_weight: Diagonal of R (nv,) in [1/(N m)^2].
        terminal_scale: Factor s_N of W on the last knot [-].
        limit_weight: Weight w_l of the soft state limits.
        mode: How the dynamics are built each tick (:class:`Mode`).
        max_iterations: Riccati passes per tick at most (1 is real-time iteration).
    """

    joint_names: tuple[str, ...]
    horizon: int
    dt: float
    torque_lower: np.ndarray
    torque_upper: np.ndarray
    state_lower: np.ndarray
    state_upper: np.ndarray
    position_weight: np.ndarray
    velocity_weight: np.ndarray
    torque_weight: np.ndarray
    terminal_scale: float = 10.0
    limit_weight: float = 1e4
    mode: Mode = Mode.HELD
    max_iterations: int = 1

    def __post_init__(self) -> None:
        nv = len(self.joint_names)
        if nv == 0:
            raise InputError("joint_names is empty: nothing to control")
        if int(self.horizon) != self.horizon or self.horizon < 1:
            raise InputError(f"horizon must be a positive integer, got {self.horizon!r}")
        if not np.isfinite(self.dt) or self.dt <= 0.0:
            raise InputError(f"dt must be a positive number of seconds, got {self.dt!r}")
        if int(self.max_iterations) != self.max_iterations or self.max_iterations < 1:
            raise InputError(f"max_iterations must be a positive integer, got {self.max_iterations!r}")
        if not np.isfinite(self.terminal_scale) or self.terminal_scale < 0.0:
            raise InputError(f"terminal_scale must be finite and >= 0, got {self.terminal_scale!r}")
        if not np.isfinite(self.limit_weight) or self.limit_weight < 0.0:
            raise InputError(f"limit_weight must be finite and >= 0, got {self.limit_weight!r}")
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "joint_names", tuple(self.joint_names))
        for name, size in (("torque_lower", nv), ("torque_upper", nv), ("state_lower", 2 * nv),
                           ("state_upper", 2 * nv), ("position_weight", nv),
                           ("velocity_weight", nv), ("torque_weight", nv)):
            object.__setattr__(self, name, _as_vector(name, getattr(self, name), size))
        if not (np.isfinite(self.torque_lower).all() and np.isfinite(self.torque_upper).all()):
            raise InputError("torque bounds must be finite: every joint needs an effort limit")
        if (self.torque_lower > self.torque_upper).any():
            bad = [self.joint_names[i] for i in np.flatnonzero(self.torque_lower > self.torque_upper)]
            raise InputError(f"torque_lower exceeds torque_upper for joints {bad}")
        if (self.state_lower > self.state_upper).any():
            raise InputError("state_lower exceeds state_upper")
        for name in ("position_weight", "velocity_weight"):
            weights = getattr(self, name)
            if not np.isfinite(weights).all() or (weights < 0.0).any():
                raise InputError(f"{name} must be finite and >= 0")
        if not np.isfinite(self.torque_weight).all() or (self.torque_weight <= 0.0).any():
            # R > 0 keeps every stage QP strictly convex whatever the dynamics.
            raise InputError("torque_weight must be finite and > 0")

    @property
    def nv(self) -> int:
        """Number of joints (velocity and torque dimension)."""
        return len(self.joint_names)

    @property
    def nx(self) -> int:
        """State dimension 2 nv."""
        return 2 * self.nv

    @classmethod
    def from_model(cls, model: Any, horizon: int = 20, dt: float = 0.01,
                   position_weight: Any = 1e3, velocity_weight: Any = 1.0,
                   torque_weight: Any = 1e-3, terminal_scale: float = 10.0,
                   limit_weight: float = 1e4, mode: Mode | str = Mode.HELD,
                   max_iterations: int = 1, torque_margin: float = 1.0,
                   default_effort: float | None = None) -> "MPCProblem":
        """Build the problem for a model loaded with :func:`rbd_deriv.load_urdf`.

        Args:
            model: The robot model; must have a fixed base and nq == nv.
            horizon: Number of steps N.
            dt: Step of the horizon in [s].
            position_weight, velocity_weight, torque_weight: Scalars or (nv,) diagonals.
            terminal_scale: Factor on W at the last knot.
            limit_weight: Weight of the soft position/velocity limits.
            mode: :class:`Mode` or its value.
            max_iterations: Riccati passes per tick at most.
            torque_margin: Fraction in (0, 1] of the URDF effort limit the MPC may use [-].
            default_effort: Torque bound [N m] for joints whose URDF gives no effort limit;
                None refuses such joints.

        Raises:
            ModelError: The model has a floating base, nq != nv, or a joint without an effort limit.
            InputError: A weight or option is invalid.
        """
        if getattr(model, "has_floating_base", False) or model.nq != model.nv:
            raise ModelError(
                f"model {model.name!r}: the MPC needs a fixed base with nq == nv "
                f"(got nq={model.nq}, nv={model.nv}, floating base={model.has_floating_base})")
        if not 0.0 < torque_margin <= 1.0:
            raise InputError(f"torque_margin must be in (0, 1], got {torque_margin!r}")
        effort = np.asarray(model.effort_limit, dtype=float)
        if default_effort is not None:
            if not (np.isfinite(default_effort) and default_effort > 0.0):
                raise InputError(f"default_effort must be > 0, got {default_effort!r}")
            effort = np.where(np.isfinite(effort) & (effort > 0.0), effort, default_effort)
        missing = [n for n, e in zip(model.joint_names, effort) if not (np.isfinite(e) and e > 0.0)]
        if missing:
            raise ModelError(f"joints {missing} have no positive effort limit in the URDF; "
                             "the MPC cannot bound their torque")
        velocity = np.asarray(model.velocity_limit, dtype=float)
        # A zero velocity limit in a URDF means "not given", not "cannot move".
        velocity = np.where(velocity > 0.0, velocity, np.inf)
        return cls(
            joint_names=tuple(model.joint_names), horizon=horizon, dt=dt,
            torque_lower=-torque_margin * effort, torque_upper=torque_margin * effort,
            state_lower=np.concatenate([model.lower_position_limit, -velocity]),
            state_upper=np.concatenate([model.upper_position_limit, velocity]),
            position_weight=position_weight, velocity_weight=velocity_weight,
            torque_weight=torque_weight, terminal_scale=terminal_scale,
            limit_weight=limit_weight, mode=mode, max_iterations=max_iterations)


def tracking_problem(problem: MPCProblem, X_ref: np.ndarray, U_ref: np.ndarray,
                     dynamics: DynamicsProvider) -> OptimalControlProblem:
    """The optimal control problem of the module docstring for ``problem``'s settings.

    Args:
        problem: Horizon, weights and limits.
        X_ref: (N+1, nx) reference states [rad, rad/s]; U_ref: (N, nu) reference torques [N m]. Kept, not
            copied: writing into them moves the references of the costs.
        dynamics: The provider of the steps' dynamics (:class:`~rbd_deriv.control.dynamics.HeldDynamics`
            or :class:`~rbd_deriv.control.dynamics.FreeDynamics`).
    """
    p = problem
    N, nv = p.horizon, p.nv
    space = VectorSpace(nv)
    state_weight = np.concatenate([p.position_weight, p.velocity_weight])
    running = [Cost(StateResidual(space, X_ref[:N]), Quadratic(state_weight, space.ndx), name="tracking"),
               Cost(ControlResidual(space, nv, U_ref), Quadratic(p.torque_weight, nv), name="torque")]
    terminal = [Cost(StateResidual(space, X_ref[N:]), Quadratic(p.terminal_scale * state_weight, space.ndx),
                     name="final tracking")]
    if p.limit_weight > 0.0 and (np.isfinite(p.state_lower).any() or np.isfinite(p.state_upper).any()):
        for costs in (running, terminal):
            costs.append(Cost(StateResidual(space, np.zeros(space.nx)),
                              QuadraticBarrier(p.state_lower, p.state_upper, p.limit_weight), name="state limits"))
    return OptimalControlProblem(space, N, p.dt, p.torque_lower, p.torque_upper, running, terminal, dynamics)
