"""The figures of a legged demo run, from what its recorder kept: the base against its reference, torque use,
contact forces against their friction cones, rates; and the ``--json`` document made of them."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rbd_deriv.demo.processes import loop_counts, solve_times

__all__ = ["legged_document", "reference_path", "summarize_legged"]


def reference_path(base_times: np.ndarray, base: np.ndarray, motions: Sequence[tuple]) -> np.ndarray:
    """(K, 3) the base's reference at ``base_times`` (K,) [s]: its first position, moved as the MPC node was
    told (``motions``: (time [s], MPC parameters set then), in time order) along a
    :class:`~rbd_deriv.control.base_motion.BasePath`. ``base``: (K, 7) base poses (position [m], quaternion)."""
    from rbd_deriv.control.base_motion import BasePath

    if not len(base):
        return np.zeros((0, 3))
    reference = np.tile(base[0, :3], (len(base), 1))
    path = BasePath(origin=tuple(base[0, :2]))
    boundaries = [at for at, _ in motions] + [np.inf]
    for (at, values), until in zip(motions, boundaries[1:]):
        path = path.moved(at, velocity=values.get("base_velocity"), amplitude=values.get("sway_amplitude"),
                          period=values.get("sway_period"))
        inside = (base_times >= at) & (base_times < until)
        reference[inside, :2] = path.at(base_times[inside])[0]
    return reference


def summarize_legged(recorder: Any, start: float, duration: float, effort_limit: np.ndarray,
                     mu: float, motions: Sequence[tuple] = ()) -> dict:
    """Base motion (against its reference: ``motions`` as for :func:`reference_path`), torque use (against
    ``effort_limit`` (nu,) [N m]), forces against their cones (the MPC's ``mu``) and the rates of a legged run
    between ``start`` and ``start + duration`` [s]. ``recorder``: a
    :class:`~rbd_deriv.demo.legged.LeggedRecorder` after its ``decode()``."""
    base_times = np.array([b[0] for b in recorder.base]) - start
    base = np.array([b[1] for b in recorder.base])
    inside = (base_times >= 0.0) & (base_times <= duration)
    base_times, base = base_times[inside], base[inside]
    command_times = np.array([c[0] for c in recorder.commands]) - start
    torques = np.array([c[1] for c in recorder.commands])
    during = (command_times >= 0.0) & (command_times <= duration)
    contact_times = np.array([c[0] for c in recorder.contacts]) - start
    forces = np.array([c[1] for c in recorder.contacts])
    touching = np.array([c[2] for c in recorder.contacts])
    deviation = base[:, :3] - base[0, :3] if len(base) else np.zeros((0, 3))
    reference = reference_path(base_times, base, motions)
    error = base[:, :3] - reference if len(base) else np.zeros((0, 3))
    walking = [at for at, values in motions if any(values.get("base_velocity", [0.0]))]
    walked = base_times >= (walking[0] + 1.0 if walking else np.inf)  # one second to get going
    swaying = [at for at, values in motions if values.get("sway_amplitude")]
    swayed = base_times >= (swaying[0] + 1.0 if swaying else np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        cone_use = np.where(forces[..., 2] > 1e-6, np.hypot(forces[..., 0], forces[..., 1]) / forces[..., 2],
                            0.0) if len(forces) else np.zeros((0, 0))
    # Against the MPC's mu, which is under the floor's: the simulator's own count holds MuJoCo to MuJoCo's cone,
    # which it keeps by construction. The same tolerance as the simulator's (rbd_deriv.sim.ground.CONE_TOLERANCE).
    from rbd_deriv.sim.ground import CONE_TOLERANCE

    mpc_cone_violations, cone_use_max = 0, 0.0
    if len(forces):
        down = touching & ((contact_times >= 0.0) & (contact_times <= duration))[:, None]
        slack = mu * forces[..., 2] + CONE_TOLERANCE * np.maximum(1.0, np.linalg.norm(forces, axis=-1))
        mpc_cone_violations = int((down & (np.hypot(forces[..., 0], forces[..., 1]) > slack)).sum())
        loaded = down & (forces[..., 2] > 1e-6)
        cone_use_max = float(cone_use[loaded].max()) if loaded.any() else 0.0
    return {
        "base_times": base_times, "base": base, "deviation": deviation, "reference": reference - base[0, :3]
        if len(base) else reference,
        "base_position_rms": float(np.sqrt(np.mean(np.sum(error ** 2, axis=1)))) if len(base) else None,
        "walk_speed": (float(np.polyfit(base_times[walked], base[walked, 0], 1)[0])
                       if walked.sum() > 10 else None),
        "sway_amplitude": (float(0.5 * np.ptp(base[swayed, 1])) if swayed.sum() > 10 else None),
        "command_times": command_times, "torques": torques,
        "torque_ratio": (np.abs(torques).max(axis=0) / effort_limit) if len(torques) else np.zeros(1),
        "command_rate": during.sum() / duration,
        "contact_times": contact_times, "forces": forces, "touching": touching, "cone_use": cone_use, "mu": mu,
        "mpc_cone_violations": mpc_cone_violations, "cone_use_max": cone_use_max,
    }


def legged_document(summary: dict, diagnostics: dict, simulator: dict, pushes: int, robot: str,
                    gait: str) -> dict:
    """The legged run's figures (the keys of ``--json``): ``summary`` of :func:`summarize_legged`, the MPC
    node's and the simulator's last /diagnostics values, the pushes sent."""
    fell = simulator.get("fell", "true") == "true"
    return {
        "robot": robot, "gait": gait, "mpc_rate_hz": summary["command_rate"], **solve_times(diagnostics),
        "fell": fell, "base_position_rms_m": summary["base_position_rms"],
        "walk_speed_mps": summary["walk_speed"], "sway_amplitude_m": summary["sway_amplitude"],
        "max_torque_ratio": float(summary["torque_ratio"].max()),
        "friction_cone_violations": int(simulator.get("friction_cone_violations", "-1")),
        "friction_cone_violations_mpc_mu": summary["mpc_cone_violations"], "max_cone_use": summary["cone_use_max"],
        "pushes_applied": int(simulator.get("pushes_applied", "0")),
        "pushes_survived": 0 if fell else int(simulator.get("pushes_applied", "0")),
        "pushes_sent": pushes,
        "simulator_lost_time_s": float(simulator.get("lost_time_s", "nan")),
        **loop_counts(diagnostics, simulator),
    }
