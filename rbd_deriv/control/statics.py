"""A posture held at rest on its contacts: the stacked contact Jacobians and the static torques and forces.

The legged MPC's control reference (the torques that hold its reference posture), the legged loop's safe command
(the torques that hold the measured posture on the feet down) and the tests' starts all need them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.state_space import FREE_FLYER_DOF
from rbd_deriv.core.contact import FORCE_ROWS

__all__ = ["contact_jacobians", "static_torques"]


def contact_jacobians(model: Any, data: Any, q: np.ndarray, frames: Sequence[str],
                      kinds: Sequence[str]) -> np.ndarray:
    """Stacked contact Jacobians (m, nv), LOCAL_WORLD_ALIGNED: 3 linear rows per point contact,
    6 rows per frame contact (the convention of the forces of ``rd.contact_dynamics``)."""
    rows = [rd.frame_jacobian(model, data, q, frame)[:FORCE_ROWS[kind]]
            for frame, kind in zip(frames, kinds)]
    return np.vstack(rows)


def static_torques(model: Any, q: np.ndarray, frames: Sequence[str], kinds: Sequence[str],
                   actuated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Torques and contact forces that hold configuration q at rest on the given contacts.

    At rest :math:`g(q) = S^T u + J^T f`: the free flyer's rows :math:`g_b = J_b^T f` fix f up to
    the internal forces, taken closest to the weight shared equally by the contacts (vertical
    force mg/n each); then :math:`u = (g - J^T f)` on the actuated joints.

    Args:
        model: A floating-base model.
        q: (nq,) configuration.
        frames, kinds: The contacts (frame names, ``"point"`` or ``"frame"``).
        actuated: Velocity indices of the actuated joints (nu,).

    Returns:
        (u (nu,) [N m], f (m,) [N, N m] stacked in contact order, LOCAL_WORLD_ALIGNED).
    """
    data = model.create_data()
    g = rd.gravity_torques(model, data, q).copy()
    J = contact_jacobians(model, data, q, frames, kinds)
    share = np.zeros(J.shape[0])
    weight = float(np.linalg.norm(g[:3]))
    row = 0
    for kind in kinds:
        share[row + 2] = weight / len(kinds)
        row += FORCE_ROWS[kind]
    Jb = J[:, :FREE_FLYER_DOF].T
    f = share + np.linalg.lstsq(Jb, g[:FREE_FLYER_DOF] - Jb @ share, rcond=None)[0]
    return (g - J.T @ f)[actuated], f
