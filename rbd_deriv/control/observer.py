"""Estimate of the joint torques the model misses (friction, damping, payload errors).

Between two measured states (q0, v0) at t0 and (q1, v1) at t1, with the torque u applied in
between, the model explains the motion with :math:`\\tau = RNEA(q_0, v_0, (v_1 - v_0)/(t_1 - t_0))`;
the residual :math:`\\tau - u` is what acted on the joints besides the command. Low-pass filtered,
it is the disturbance :math:`\\hat\\tau_d` the MPC adds to its model (offset-free MPC: a constant
input disturbance over the horizon gives the controller integral action against a steady
mismatch). Without it, a light joint with unmodelled damping keeps a large tracking error: the
model believes a small torque moves it quickly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import implausible


class DisturbanceObserver:
    """First-order filtered inverse-dynamics residual.

    Args:
        model: Fixed-base model from :func:`rbd_deriv.load_urdf`.
        time_constant: Filter time constant [s], > 0; longer is smoother and slower.
        bound: (nv,) largest magnitude of the estimate [N m]; a fault cannot ask for more.
        max_gap: Longest time [s] between two states that still teaches the estimate. Over a longer
            gap (a stalled process, lost messages) the finite-difference acceleration and the
            applied torque no longer describe the same motion: the estimate is kept as it is.
    """

    def __init__(self, model: Any, time_constant: float, bound: np.ndarray,
                 max_gap: float = 0.02) -> None:
        if not (np.isfinite(time_constant) and time_constant > 0.0):
            raise InputError(f"time_constant must be > 0 s, got {time_constant!r}")
        if not (np.isfinite(max_gap) and max_gap > 0.0):
            raise InputError(f"max_gap must be > 0 s, got {max_gap!r}")
        self.max_gap = float(max_gap)
        self.model = model
        self.data = model.create_data()
        self.time_constant = float(time_constant)
        self.bound = np.asarray(bound, dtype=float)
        self.estimate = np.zeros(model.nv)
        self._previous: tuple[np.ndarray, np.ndarray, float] | None = None

    def reset(self) -> None:
        """Forget the previous state and the estimate."""
        self.estimate[:] = 0.0
        self._previous = None

    def update(self, q: np.ndarray, v: np.ndarray, time: float,
               applied_torque: np.ndarray | None) -> np.ndarray:
        """Take a new measured state; return the estimate (nv,) [N m] (a view, do not modify).

        Args:
            q, v: Measured state (nv,) [rad], [rad/s] at ``time`` [s].
            applied_torque: Torque (nv,) [N m] applied since the previous call, or None if unknown
                (the estimate is then kept and the state only remembered).
        """
        previous = self._previous
        self._previous = (np.array(q, dtype=float), np.array(v, dtype=float), float(time))
        if previous is None or applied_torque is None:
            return self.estimate
        q0, v0, t0 = previous
        elapsed = time - t0
        if not 0.0 < elapsed <= self.max_gap:
            return self.estimate  # same state again, or too far apart to learn from
        with np.errstate(over="ignore", invalid="ignore"):
            acceleration = (self._previous[1] - v0) / elapsed
        if implausible(acceleration, "acceleration").any():
            return self.estimate  # no physical motion links the two states (a faulty reading): nothing to learn
        residual = rd.rnea(self.model, self.data, q0, v0, acceleration) - applied_torque
        if np.isfinite(residual).all():
            gain = elapsed / (self.time_constant + elapsed)
            self.estimate += gain * (residual - self.estimate)
            np.clip(self.estimate, -self.bound, self.bound, out=self.estimate)
        return self.estimate
