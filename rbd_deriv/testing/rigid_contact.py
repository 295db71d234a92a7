"""A rigid-contact plant for closed-loop tests of the legged MPC, on the library's own dynamics.

The feet are held where they stand (``rd.contact_dynamics`` with every foot a rigid contact,
Baumgarte-stabilized toward its initial position so that integration drift does not
accumulate), and the state advances by semi-implicit Euler steps of ``h`` seconds:
:math:`v^+ = v + h \\ddot q`, :math:`q^+ = q \\oplus h v^+`. An external wrench on the base (a
push) enters through ``fext``. It is the short, deterministic stand-in for the MuJoCo robot: no
slipping, no lift-off, no impact, so it suits standing only.
"""

from __future__ import annotations

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
