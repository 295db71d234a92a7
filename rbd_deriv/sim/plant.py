"""Simulated robots ("plants") driven by joint torques, and the in-process ABA plant.

A plant advances by fixed steps of ``dt`` [s] with the torque held over the step, saturated at
the URDF effort limits as a real drive would be. Both backends add viscous damping and dry
friction at the joints, which the controller's model does not know: this is the model/plant
mismatch the closed loop has to absorb.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError

#: Velocity [rad/s] under which the ABA plant's dry friction ramps linearly to zero, a stand-in for
#: stiction (exact stiction needs a constraint solver, as in MuJoCo's frictionloss).
FRICTION_SMOOTHING_VELOCITY = 0.01


def joint_vector(name: str, value: Any, size: int) -> np.ndarray:
    array = np.array(value, dtype=float)
    if array.ndim == 0:
        array = np.full(size, float(array))
    if array.shape != (size,) or not np.isfinite(array).all() or (array < 0.0).any():
        raise InputError(f"{name} must be a finite non-negative scalar or ({size},) vector")
    return array


class Plant(ABC):
    """A simulated robot with joint-torque inputs.

    Its state follows the library's conventions: q (nq,) and v (nv,) in model order, after the free flyer's
    7 and 6 entries on a floating base (:mod:`rbd_deriv.sim.free_flyer`); torques are (nu,), one per actuated
    joint (nu = nv on a fixed base, nv - 6 on a floating base).

    Attributes:
        joint_names: Names of the nu actuated joints, in the package's model order.
        dt: Physics step [s].
        time: Simulated time [s] since the last reset.
        effort_limit: (nu,) torque saturation [N m].
        saturated_steps: Steps in which at least one commanded torque was beyond its limit.
    """

    joint_names: tuple[str, ...]
    dt: float
    time: float
    effort_limit: np.ndarray
    saturated_steps: int

    @abstractmethod
    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        """Place the robot at the configuration q (nq,) with velocities v (nv,) (zero if None)."""

    @abstractmethod
    def _advance(self, torque: np.ndarray) -> None:
        """One physics step with the (already saturated) torque."""

    @property
    @abstractmethod
    def q(self) -> np.ndarray:
        """Configuration (nq,) [rad, m], a copy."""

    @property
    @abstractmethod
    def v(self) -> np.ndarray:
        """Velocities (nv,) [rad/s, m/s], a copy."""

    def brake(self) -> None:
        """Brakes on: the joints stop where they are (velocities zero); time and counts are kept."""
        elapsed, saturated = self.time, self.saturated_steps
        self.reset(self.q)
        self.time, self.saturated_steps = elapsed, saturated

    def hold(self, steps: int = 1) -> None:
        """``steps`` physics steps with the brakes on. Here (a fixed base) the joints stop where they are and
        the robot does not move; a floating base keeps falling and standing on its locked joints."""
        if self.v.any():
            self.brake()

    def step(self, torque: np.ndarray, steps: int = 1) -> np.ndarray:
        """Apply ``torque`` (nu,) [N m] for ``steps`` physics steps; return the torque applied.

        Raises:
            InputError: Wrong shape or a non-finite entry; the plant is left untouched.
        """
        torque = np.asarray(torque, dtype=float)
        if torque.shape != self.effort_limit.shape or not np.isfinite(torque).all():
            raise InputError(f"torque must be finite with shape {self.effort_limit.shape}, "
                             f"got {torque.shape}")
        applied = np.clip(torque, -self.effort_limit, self.effort_limit)
        saturated = bool((applied != torque).any())
        for _ in range(steps):
            self._advance(applied)
            self.time += self.dt
            self.saturated_steps += saturated
        return applied


class AbaPlant(Plant):
    r"""In-process plant: semi-implicit Euler on the package's own forward dynamics.

    Joint damping b and dry friction f (a linear ramp of slope f / v_s below v_s, a stand-in for
    stiction) are integrated implicitly, as MuJoCo does, because their stiffness on light distal
    links would make an explicit step unstable at 1 kHz:

    .. math:: \ddot q_0 = ABA(q, v, \tau + F(v)),\quad
              v^+ = v + dt\,(I + dt\,M^{-1} D)^{-1} \ddot q_0,\quad q^+ = q \oplus dt\, v^+

    with :math:`F(v) = -b v - f\,\mathrm{sat}(v / v_s)` and D its (diagonal) slope. Without
    damping and friction this is exactly :math:`v^+ = v + dt\,ABA(q, v, \tau)`.

    Args:
        model: Model from :func:`rbd_deriv.load_urdf`.
        dt: Physics step [s].
        damping: Viscous damping b, scalar or (nv,) [N m s/rad].
        friction: Dry friction f, scalar or (nv,) [N m].
    """

    def __init__(self, model: Any, dt: float = 1e-3, damping: Any = 0.0,
                 friction: Any = 0.0) -> None:
        if not (np.isfinite(dt) and dt > 0.0):
            raise InputError(f"dt must be a positive number of seconds, got {dt!r}")
        self.model = model
        self.data = model.create_data()
        self.joint_names = tuple(model.joint_names)
        self.dt = float(dt)
        self.effort_limit = np.asarray(model.effort_limit, dtype=float).copy()
        self.damping = joint_vector("damping", damping, model.nv)
        self.friction = joint_vector("friction", friction, model.nv)
        self._q = rd.neutral(model)
        self._v = np.zeros(model.nv)
        self.time = 0.0
        self.saturated_steps = 0

    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        q = np.asarray(q, dtype=float)
        v = np.zeros(self.model.nv) if v is None else np.asarray(v, dtype=float)
        if q.shape != (self.model.nq,) or v.shape != (self.model.nv,) or not (
                np.isfinite(q).all() and np.isfinite(v).all()):
            raise InputError(f"reset needs finite q ({self.model.nq},) and v ({self.model.nv},)")
        self._q, self._v = q.copy(), v.copy()
        self.time = 0.0
        self.saturated_steps = 0

    def _advance(self, torque: np.ndarray) -> None:
        v = self._v
        ramp = np.abs(v) < FRICTION_SMOOTHING_VELOCITY
        force = -self.damping * v - self.friction * np.clip(v / FRICTION_SMOOTHING_VELOCITY, -1, 1)
        ddq = rd.aba(self.model, self.data, self._q, v, torque + force)
        slope = self.damping + np.where(ramp, self.friction / FRICTION_SMOOTHING_VELOCITY, 0.0)
        if slope.any():
            minv = rd.minverse(self.model, self.data, self._q)
            ddq = np.linalg.solve(np.eye(v.size) + self.dt * minv * slope, ddq)
        self._v = v + self.dt * ddq
        self._q = rd.integrate(self.model, self._q, self.dt * self._v)

    @property
    def q(self) -> np.ndarray:
        return self._q.copy()

    @property
    def v(self) -> np.ndarray:
        return self._v.copy()
