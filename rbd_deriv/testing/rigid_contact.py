"""A rigid-contact plant for closed-loop tests of the legged MPC, on the library's own dynamics.

The feet are held where they stand (``rd.contact_dynamics`` with every foot a rigid contact,
Baumgarte-stabilized toward its initial position so that integration drift does not
accumulate), and the state advances by semi-implicit Euler steps of ``h`` seconds:
:math:`v^+ = v + h \\ddot q`, :math:`q^+ = q \\oplus h v^+`. An external wrench on the base (a
push) enters through ``fext``. It is the short, deterministic stand-in for the MuJoCo robot: no
slipping, no lift-off, no impact, so it suits standing only.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.dynamics import ROOT_JOINT, actuated_indices


class RigidContactPlant:
    """A floating-base robot standing on its feet, stepped with actuated torques.

    Args:
        model: A floating-base model.
        feet: Contact frames held on the ground.
        kind: ``"point"`` or ``"frame"``.
        x0: (nx,) initial state; the feet are held at their placements there.
        baumgarte: (kp [1/s^2], kd [1/s]) drift correction of the contacts.

    Attributes:
        x: The current state (nq + nv,).
        forces: The contact forces of the last step.
    """

    def __init__(self, model: Any, feet: Sequence[str], kind: str, x0: np.ndarray,
                 baumgarte: tuple[float, float] = (100.0, 20.0)) -> None:
        self.model = model
        self.data = model.create_data()
        self.x = np.array(x0, dtype=float)
        q = self.x[:model.nq]
        rd.forward_kinematics(model, self.data, q)
        self.contacts = []
        for foot in feet:
            placement = rd.frame_placement(model, self.data, foot)
            reference = placement[:3, 3].copy() if kind == "point" else placement.copy()
            self.contacts.append(rd.Contact(model, foot, kind, baumgarte=baumgarte,
                                            reference=reference))
        self.actuated = actuated_indices(model)
        self.base = model.joint_names.index(ROOT_JOINT) + 1  # row of fext (row 0: the universe)
        self.forces = np.zeros(sum(c.rows for c in self.contacts))

    def step(self, torque: np.ndarray, h: float, push: np.ndarray | None = None) -> np.ndarray:
        """Advance h [s] under the actuated torques (nu,) and a world-frame force (3,) [N] at the
        base's origin; returns the new state."""
        model, nq = self.model, self.model.nq
        q, v = self.x[:nq], self.x[nq:]
        tau = np.zeros(model.nv)
        tau[self.actuated] = torque
        fext = None
        if push is not None:
            fext = np.zeros((model.njoints, 6))
            rd.forward_kinematics(model, self.data, q)
            rotation = self.data.oMi[self.base][:3, :3]
            fext[self.base, :3] = rotation.T @ np.asarray(push, dtype=float)
        ddq, forces = rd.contact_dynamics(model, self.data, self.contacts, q, v, tau, fext)
        self.forces = forces.copy()
        v_next = v + h * ddq
        self.x = np.r_[rd.integrate(model, q, h * v_next), v_next]
        return self.x


def standing_loop(mpc: Any, plant: RigidContactPlant, seconds: float, push: Sequence[float],
                  push_start: float, push_duration: float, h: float = 1e-3) -> dict:
    """Run a standing legged MPC on the plant: a tick every ``mpc.dt`` (warm-started by that much),
    the plan's feedback policy :math:`u = u_0 + K (x \\ominus x_0)`, clamped to the torque box,
    applied at every plant step of h [s]; a world-frame force ``push`` [N] on the base from
    ``push_start`` for ``push_duration`` [s]. A plan that is not sendable (failed solve, first
    knot outside the cone) is counted and the previous policy kept.

    Returns:
        {"deviation": (steps,) distance [m] of the base from its start, "refused": plans not
        sent, "cone_violation": largest excursion [N] of the plant's forces out of mpc.mu's cone,
        "tick_seconds": (ticks,) wall time of each solve}.
    """
    from rbd_deriv.control.contact_force import cone_violation

    x0 = plant.x.copy()
    space = mpc.space
    lower, upper = mpc.ocp.control_lower, mpc.ocp.control_upper
    per_tick = max(1, int(round(mpc.dt / h)))
    steps = int(round(seconds / h))
    rows = np.cumsum([0] + [c.rows for c in plant.contacts[:-1]])
    deviation, ticks = np.zeros(steps), []
    refused, violation, plan = 0, 0.0, None
    dx = np.empty((1, space.ndx))
    force = np.asarray(push, dtype=float)
    for step in range(steps):
        if step % per_tick == 0:
            start = time.perf_counter()
            candidate = mpc.solve(plant.x, elapsed=per_tick * h)
            ticks.append(time.perf_counter() - start)
            if candidate.sendable or plan is None:
                plan = candidate
            refused += not candidate.sendable
        space.difference(plan.state[None], plant.x[None], dx)
        torque = np.clip(plan.torque + plan.gain @ dx[0], lower, upper)
        pushing = push_start <= step * h < push_start + push_duration
        plant.step(torque, h, force if pushing else None)
        deviation[step] = np.linalg.norm(plant.x[:3] - x0[:3])
        violation = max(violation, float(cone_violation(plant.forces, rows, mpc.mu).max()))
    return {"deviation": deviation, "refused": refused, "cone_violation": violation,
            "tick_seconds": np.array(ticks)}
