"""Reference trajectories for the MPC: a time-stamped joint trajectory or an exciting sinusoid.

Both give positions, velocities and accelerations at any time; :func:`horizon_reference` turns
one into the (X_ref, U_ref) of a tick, with inverse-dynamics feedforward torques as U_ref.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError


class Reference(Protocol):
    """Anything that gives the desired joint motion at given times."""

    nv: int

    def sample(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions [rad], velocities [rad/s], accelerations [rad/s^2], each (K, nv), at times (K,) [s]."""


class TrajectoryReference:
    """Piecewise-linear interpolation of knots (times, positions, optional velocities).

    Before the first knot the first position is held, after the last knot the last one, both at
    rest. Without velocities, each segment moves at constant speed. Accelerations are those of
    the velocity interpolation (piecewise constant).

    Args:
        times: (T,) strictly increasing knot times [s], T >= 1.
        positions: (T, nv) [rad].
        velocities: (T, nv) [rad/s] or None.

    Raises:
        InputError: Shapes disagree, times do not increase, or values are not finite.
    """

    def __init__(self, times: Any, positions: Any, velocities: Any = None) -> None:
        times = np.asarray(times, dtype=float).reshape(-1)
        positions = np.asarray(positions, dtype=float)
        if positions.ndim != 2 or positions.shape[0] != times.size or times.size == 0:
            raise InputError(f"positions must have shape ({times.size}, nv) with at least one "
                             f"knot, got {positions.shape}")
        if not (np.isfinite(times).all() and np.isfinite(positions).all()):
            raise InputError("trajectory times and positions must be finite")
        if (np.diff(times) <= 0.0).any():
            raise InputError("trajectory times must be strictly increasing")
        if velocities is None:
            velocities = np.zeros_like(positions)
            if times.size > 1:
                slopes = np.diff(positions, axis=0) / np.diff(times)[:, None]
                velocities[:-1] = slopes
            self._segment_velocities = True
        else:
            velocities = np.asarray(velocities, dtype=float)
            if velocities.shape != positions.shape or not np.isfinite(velocities).all():
                raise InputError(f"velocities must be finite with shape {positions.shape}")
            self._segment_velocities = False
        self.times = times
        self.positions = positions
        self.velocities = velocities
        self.nv = positions.shape[1]

    def sample(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities, accelerations (K, nv) at times (K,) [s]."""
        times = np.asarray(times, dtype=float)
        count = self.times.size
        positions = np.empty((times.size, self.nv))
        velocities = np.zeros((times.size, self.nv))
        accelerations = np.zeros((times.size, self.nv))
        if count == 1:
            positions[:] = self.positions[0]
            return positions, velocities, accelerations
        segment = np.clip(np.searchsorted(self.times, times, side="right") - 1, 0, count - 2)
        span = self.times[segment + 1] - self.times[segment]
        fraction = np.clip((times - self.times[segment]) / span, 0.0, 1.0)[:, None]
        positions[:] = ((1.0 - fraction) * self.positions[segment]
                        + fraction * self.positions[segment + 1])
        inside = ((times >= self.times[0]) & (times < self.times[-1]))[:, None]
        if self._segment_velocities:
            velocities[:] = np.where(inside, self.velocities[segment], 0.0)
        else:
            velocities[:] = np.where(inside, (1.0 - fraction) * self.velocities[segment]
                                     + fraction * self.velocities[segment + 1], 0.0)
            slope = (self.velocities[segment + 1] - self.velocities[segment]) / span[:, None]
            accelerations[:] = np.where(inside, slope, 0.0)
        return positions, velocities, accelerations


class SinusoidReference:
    """q(t) = c + a r(t) sin(2 pi f t + phi) with a quintic ramp r from 0 to 1 over ``ramp`` [s].

    The ramp starts the motion at rest at c, so a robot holding c can follow from t = 0.

    Args:
        center: (nv,) [rad]; amplitude: (nv,) [rad]; frequency: (nv,) [Hz]; phase: (nv,) [rad].
        ramp: Ramp duration [s], > 0.
    """

    def __init__(self, center: Any, amplitude: Any, frequency: Any, phase: Any = 0.0,
                 ramp: float = 1.0) -> None:
        self.center = np.asarray(center, dtype=float).reshape(-1)
        self.nv = self.center.size
        arrays = [np.broadcast_to(np.asarray(value, dtype=float), (self.nv,)).copy()
                  for value in (amplitude, frequency, phase)]
        self.amplitude, self.frequency, self.phase = arrays
        if not all(np.isfinite(a).all() for a in [self.center] + arrays) or not ramp > 0.0:
            raise InputError("sinusoid parameters must be finite and the ramp positive")
        self.ramp = float(ramp)

    def sample(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities, accelerations (K, nv) at times (K,) [s]."""
        t = np.asarray(times, dtype=float)[:, None]
        s = np.clip(t / self.ramp, 0.0, 1.0)
        inside = (t > 0.0) & (t < self.ramp)
        ramp = s ** 3 * (10.0 - 15.0 * s + 6.0 * s * s)
        ramp_d = np.where(inside, 30.0 * s ** 2 * (1.0 - s) ** 2 / self.ramp, 0.0)
        ramp_dd = np.where(inside, 60.0 * s * (1.0 - s) * (1.0 - 2.0 * s) / self.ramp ** 2, 0.0)
        omega = 2.0 * np.pi * self.frequency
        angle = omega * np.maximum(t, 0.0) + self.phase
        sin, cos = np.sin(angle), np.cos(angle)
        positions = self.center + self.amplitude * ramp * sin
        velocities = self.amplitude * (ramp_d * sin + ramp * omega * cos)
        accelerations = self.amplitude * (ramp_dd * sin + 2.0 * ramp_d * omega * cos
                                          - ramp * omega ** 2 * sin)
        return positions, velocities, accelerations


def horizon_reference(reference: Reference, start: float, horizon: int, dt: float, model: Any,
                      torque_lower: np.ndarray, torque_upper: np.ndarray,
                      X_ref: np.ndarray, U_ref: np.ndarray, data: Any = None) -> None:
    """Fill X_ref (N+1, 2 nv) and U_ref (N, nv) for a tick starting at ``start`` [s].

    U_ref is the inverse dynamics rnea(q_r, v_r, a_r) of the reference, clamped to the torque
    box: the torque that would make the model follow it exactly. ``data`` (from
    ``model.create_data()``) is the workspace of those calls; one is made if None.
    """
    nv = reference.nv
    positions, velocities, accelerations = reference.sample(start + dt * np.arange(horizon + 1))
    X_ref[:, :nv] = positions
    X_ref[:, nv:] = velocities
    data = model.create_data() if data is None else data
    # One call per knot: for N of a few tens, cheaper than the batched call's dispatch.
    for k in range(horizon):
        U_ref[k] = rd.rnea(model, data, positions[k], velocities[k], accelerations[k])
    np.clip(U_ref, torque_lower, torque_upper, out=U_ref)


def bound_reference_error(model: Any, q0: np.ndarray, X_ref: np.ndarray, bound: float) -> bool:
    """Shift the positions of X_ref (N+1, 2 nv) so that its first knot is within ``bound`` [rad or m] of q0
    (nv,), joint by joint.

    The MPC's model is linear over a short horizon with a box on the torques: from far off its reference (a
    new goal, a robot left behind by a stalled input) it plans a run at full torque whose end its horizon
    cannot see, and the robot overshoots at speeds where the model no longer holds. Shifted, the reference
    keeps its shape and velocities but starts at an error the MPC closes within its horizon; the shift moves
    with the robot, so the robot walks toward the real reference and tracks it unchanged once within
    ``bound``. A bound of 0 or less leaves X_ref as it is.

    Returns:
        Whether the reference was shifted.
    """
    if bound <= 0.0:
        return False
    nv = X_ref.shape[1] // 2
    error = rd.difference(model, q0, X_ref[0, :nv])  # continuous joints: the short way round
    excess = error - np.clip(error, -bound, bound)
    if np.abs(excess).max() <= 1e-12:  # a reference already shifted to the bound, up to rounding
        return False
    X_ref[:, :nv] -= excess
    return True
