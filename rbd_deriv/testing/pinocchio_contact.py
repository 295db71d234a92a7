"""Pinocchio's rigid-contact algorithms on the same robot and contacts as ours (test and benchmark oracle).

Builds one ``pin.RigidConstraintModel`` per :class:`rbd_deriv.Contact` (CONTACT_3D for a point, CONTACT_6D
for a frame, LOCAL_WORLD_ALIGNED, on the frame's parent joint at its placement; Baumgarte gains and the
reference, a position or a placement, copied as joint2_placement on the universe), and runs
``constraintDynamics``, ``computeConstraintDynamicsDerivatives``, ``impulseDynamics`` and
``computeImpulseDynamicsDerivatives`` with tight proximal settings, our arrays in and out (q converted by the
bridge).
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np
import pinocchio as pin

from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge

PROXIMAL_ACCURACY = 1e-14
PROXIMAL_MU = 1e-12
PROXIMAL_ITERATIONS = 1
"""ProximalSettings(accuracy, mu, max_iter): one iteration with a vanishing regularization is the exact KKT
solution, to about 1e-10 relative."""


class PinocchioContacts:
    """Pinocchio's contact dynamics for ``contacts`` (a sequence of rbd_deriv.Contact) on ``bridge``'s robot.

    Attributes:
        data: A Pinocchio Data of its own: initConstraintDynamics sizes it for these contacts.
        models, datas: Pinocchio's constraint models and datas (its std::vector containers).
        prox: The proximal settings used by every call.
    """

    def __init__(self, bridge: PinocchioBridge, contacts: Sequence) -> None:
        self.bridge = bridge
        pm = bridge.model
        self.models = pin.StdVec_RigidConstraintModel()
        self.datas = pin.StdVec_RigidConstraintData()
        for contact in contacts:
            frame = pm.frames[pm.getFrameId(contact.frame)]
            kind = pin.ContactType.CONTACT_3D if contact.kind == "point" else pin.ContactType.CONTACT_6D
            cm = pin.RigidConstraintModel(kind, pm, frame.parentJoint, frame.placement, pin.LOCAL_WORLD_ALIGNED)
            kp, kd = contact.baumgarte
            if kp or kd:
                gains = cm.m_baumgarte_parameters
                gains.Kp, gains.Kd = kp, kd
                cm.m_baumgarte_parameters = gains
                ref = contact.reference
                cm.joint2_placement = (pin.SE3(np.eye(3), ref) if contact.kind == "point" else
                                       pin.SE3(ref[:3, :3], ref[:3, 3]))
            self.models.append(cm)
            self.datas.append(cm.createData())
        self.data = pm.createData()
        pin.initConstraintDynamics(pm, self.data, self.models, self.datas)
        self.prox = pin.ProximalSettings(PROXIMAL_ACCURACY, PROXIMAL_MU, PROXIMAL_ITERATIONS)

    def dynamics(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(ddq, forces) of pin.constraintDynamics."""
        b = self.bridge
        ddq = pin.constraintDynamics(b.model, self.data, b.q_to_pin(q), v, tau, self.models, self.datas, self.prox)
        return ddq.copy(), self.data.lambda_c.copy()

    def derivatives(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> Tuple[np.ndarray, ...]:
        """(dddq_dq, dddq_dv, dddq_dtau, dforces_dq, dforces_dv, dforces_dtau) of Pinocchio."""
        b = self.bridge
        self.dynamics(q, v, tau)
        pin.computeConstraintDynamicsDerivatives(b.model, self.data, self.models, self.datas, self.prox)
        d = self.data
        return tuple(x.copy() for x in (d.ddq_dq, d.ddq_dv, d.ddq_dtau, d.dlambda_dq, d.dlambda_dv, d.dlambda_dtau))

    def impulse(self, q: np.ndarray, v: np.ndarray, restitution: float) -> Tuple[np.ndarray, np.ndarray]:
        """(v_plus, impulses) of pin.impulseDynamics."""
        b = self.bridge
        pin.impulseDynamics(b.model, self.data, b.q_to_pin(q), v, self.models, self.datas, restitution, self.prox)
        return self.data.dq_after.copy(), self.data.impulse_c.copy()

    def impulse_derivatives(self, q: np.ndarray, v: np.ndarray, restitution: float) -> Tuple[np.ndarray, ...]:
        """(dv_plus_dq, dv_plus_dv, dimpulses_dq, dimpulses_dv); Pinocchio's ddq_dv is dv+/dv - I."""
        b = self.bridge
        self.impulse(q, v, restitution)
        pin.computeImpulseDynamicsDerivatives(b.model, self.data, self.models, self.datas, restitution, self.prox)
        d = self.data
        return (d.ddq_dq.copy(), d.ddq_dv + np.eye(b.model.nv), d.dlambda_dq.copy(), d.dlambda_dv.copy())
