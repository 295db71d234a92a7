"""Delay compensation: the measured state carried forward to the time the command acts.

A tick solves from a state measured some milliseconds earlier (the age of the joint_states it
read), and its command reaches the actuators later still. A controller tuned for a 10 ms horizon
step reacts to where the robot *was*; with a light joint and a few ticks of delay the loop rings
and then diverges. Integrating the model over the known delay, with the torques that were sent
meanwhile, gives the state the command will actually start from (a Smith predictor).
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.constants import PREDICTION_STEP


class CommandHistory:
    """The torques sent recently, with the time [s] each was sent.

    Args:
        capacity: Number of commands kept (the oldest are forgotten).
    """

    def __init__(self, capacity: int = 64) -> None:
        self._times: collections.deque = collections.deque(maxlen=capacity)
        self._torques: collections.deque = collections.deque(maxlen=capacity)

    def clear(self) -> None:
        """Forget every command."""
        self._times.clear()
        self._torques.clear()

    def record(self, time: float, torque: np.ndarray) -> None:
        """Remember that ``torque`` (nv,) [N m] was sent at ``time`` [s] (non-decreasing)."""
        self._times.append(float(time))
        self._torques.append(np.array(torque, dtype=float))

    def torque_at(self, time: float) -> np.ndarray | None:
        """The last torque sent at or before ``time`` [s], or None if none is known."""
        for sent, torque in zip(reversed(self._times), reversed(self._torques)):
            if sent <= time:
                return torque
        return None


def predict_state(model: Any, data: Any, q: np.ndarray, v: np.ndarray, start: float, end: float,
                  history: CommandHistory, delay: float = 0.0,
                  disturbance: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """State (q, v) at ``end`` [s] from the one measured at ``start`` [s], by forward dynamics.

    Semi-implicit Euler in steps of at most :data:`PREDICTION_STEP`, each with the torque that
    acted then: the command sent ``delay`` [s] earlier, plus ``disturbance`` (nv,) [N m] if given.
    Where no command is known the measured state is returned unchanged (nothing to predict with).
    The model must have nq == nv (as the MPC requires).

    Returns:
        New arrays q (nq,) [rad], v (nv,) [rad/s], and the time [s] they hold at: ``end``, or
        ``start`` when nothing was predicted.
    """
    q = np.array(q, dtype=float)
    v = np.array(v, dtype=float)
    span = end - start
    if not span > 0.0 or history.torque_at(start - delay) is None:
        return q, v, start  # nothing to predict, or no command known over the whole span
    # Rounding of the times must not add a step: a span of 8 ms computed as 8.000000000000002 ms takes 8.
    steps = max(1, int(np.ceil(span / PREDICTION_STEP - 1e-9)))
    step = span / steps
    for k in range(steps):
        torque = history.torque_at(start + k * step - delay)
        if disturbance is not None:
            torque = torque + disturbance
        v += step * rd.aba(model, data, q, v, torque)
        q += step * v
    return q, v, end


def predict_on_contacts(model: Any, data: Any, q: np.ndarray, v: np.ndarray, span: float,
                        torque: Callable[[np.ndarray, np.ndarray, float], np.ndarray],
                        contacts: Callable[[float], tuple], actuated: np.ndarray,
                        step: float = PREDICTION_STEP) -> tuple[np.ndarray, np.ndarray]:
    """State (q, v) of a robot on its contacts ``span`` [s] after the measured one, by contact dynamics.

    Semi-implicit Euler on the manifold in steps of at most ``step``: at time t from the start, the
    contacts ``contacts(t)`` (a tuple of :class:`rbd_deriv.Contact`) are held
    (:func:`rbd_deriv.contact_dynamics`; :func:`rbd_deriv.aba` with none), a contact that closes
    stops its foot by an impulse (:func:`rbd_deriv.impulse_dynamics`, restitution 0; so do those of
    t = 0: a foot measured still moving where the gait has it down, a touchdown a little later than
    planned, is stopped there, as the MPC's own touchdown would), and the actuated joints (velocity indices ``actuated`` (nu,)) get
    ``torque(q, v, t)`` (nu,) [N m]: the policy the robot applies meanwhile. The MPC's own model of a
    step (its knots' maps are the same), so the plan starts where its own dynamics would be.

    Returns:
        New arrays q (nq,) and v (nv,) at ``span``; the measured ones when ``span`` <= 0.

    Raises:
        RbdDerivError: the dynamics refuse the state (NaN, a singular contact set).
    """
    q = np.array(q, dtype=float)
    v = np.array(v, dtype=float)
    if not span > 0.0:
        return q, v
    steps = max(1, int(np.ceil(span / step - 1e-9)))
    h = span / steps
    tau = np.zeros(model.nv)
    closed: set = set()
    for k in range(steps):
        now = contacts(k * h)
        if not closed.issuperset(now):
            v = np.array(rd.impulse_dynamics(model, data, now, q, v)[0])
        closed = set(now)
        tau[actuated] = torque(q, v, k * h)
        if now:
            ddq = rd.contact_dynamics(model, data, now, q, v, tau)[0]
        else:
            ddq = rd.aba(model, data, q, v, tau)
        v = v + h * ddq
        q = rd.integrate(model, q, h * v)
    return q, v
