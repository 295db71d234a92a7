"""The figures of a legged demo run, from what its recorder kept: the base's velocity against the command, its
height and tilt, torque use, contact forces against the MPC's friction cone, rates; per segment of the script
(:mod:`rbd_deriv.demo.scenarios`) and for the whole run; and the ``--json`` document made of them.

The velocity a gait gives its base oscillates within each cycle (a trot sways and pitches the base at its step
rate): the base's velocity is averaged over one cycle of the gait in force, as the displacement between half a
cycle before and half a cycle after each sample, over the cycle's time, turned into the base's heading frame at
the sample (the yaw rate: the heading's change over the cycle). Its error against the command is measured from
1 s after the segment's start (the ramp and the first steps) until half a cycle before its end.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from rbd_deriv.control.base_motion import turned
from rbd_deriv.demo.processes import loop_counts, solve_times

__all__ = ["LIFT_SPACING", "PUSH_RECOVERY", "SETTLE_TIME", "cycle_velocity", "foot_lift", "legged_document",
           "summarize_legged", "tilt_and_heading"]

#: Time [s] from a segment's start before its velocity error counts.
SETTLE_TIME = 1.0

#: Time [s] after a push's start left out of its segment's velocity error.
PUSH_RECOVERY = 1.0

#: The averaging window [s] of a gait without a cycle (standing).
STANDING_WINDOW = 0.4


def tilt_and_heading(base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The base's tilt from upright [rad] (the angle of its z axis from the vertical) and heading [rad] (yaw,
    unwrapped) of base poses (K, 7) (position [m], quaternion x, y, z, w)."""
    x, y, z, w = base[:, 3], base[:, 4], base[:, 5], base[:, 6]
    up = 1.0 - 2.0 * (x * x + y * y)                          # the base's z axis, its world z component
    tilt = np.arccos(np.clip(up, -1.0, 1.0))
    heading = np.unwrap(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))
    return tilt, heading


def cycle_velocity(times: np.ndarray, base: np.ndarray, window: np.ndarray) -> np.ndarray:
    """(K, 3) the base's velocity averaged over ``window`` (K,) [s] around each sample (see the module
    docstring): vx, vy [m/s] in its heading frame, wz [rad/s]; NaN where the window leaves the samples."""
    _, heading = tilt_and_heading(base)
    index = np.arange(len(times))
    track = np.c_[base[:, :2], heading]
    ends = [np.column_stack([np.interp(np.interp(times + sign * 0.5 * window, times, index), index, track[:, i])
                             for i in range(3)]) for sign in (-1.0, 1.0)]
    change = (ends[1] - ends[0]) / window[:, None]
    velocity = np.c_[turned(-heading, change[:, 0], change[:, 1]), change[:, 2]]
    inside = (times - 0.5 * window >= times[0]) & (times + 0.5 * window <= times[-1])
    velocity[~inside] = np.nan
    return velocity


def summarize_legged(recorder: Any, start: float, duration: float, effort_limit: np.ndarray, mu: float,
                     segments: Sequence[Any], periods: Dict[str, float]) -> dict:
    """Base motion, torque use (against ``effort_limit`` (nu,) [N m]), forces against their cones (the MPC's
    ``mu``) and the rates of a legged run between ``start`` and ``start + duration`` [s], overall and per segment
    of ``segments`` (:class:`~rbd_deriv.demo.scenarios.Segment`); ``periods``: the gaits' cycles [s] by name.
    ``recorder``: a :class:`~rbd_deriv.demo.legged.LeggedRecorder` after its ``decode()``."""
    from rbd_deriv.sim.ground import CONE_TOLERANCE

    base_times = np.array([b[0] for b in recorder.base]) - start
    base = np.array([b[1] for b in recorder.base]).reshape(-1, 7)
    inside = (base_times >= 0.0) & (base_times <= duration)
    base_times, base = base_times[inside], base[inside]
    command_times = np.array([c[0] for c in recorder.commands]) - start
    torques = np.array([c[1] for c in recorder.commands])
    during = (command_times >= 0.0) & (command_times <= duration)
    contact_times = np.array([c[0] for c in recorder.contacts]) - start
    forces = np.array([c[1] for c in recorder.contacts])
    touching = np.array([c[2] for c in recorder.contacts])
    begins = np.cumsum([0.0] + [segment.duration for segment in segments])
    # The gait in force at each base sample: each segment's asked gait, kept until another is asked.
    gait, gaits, sway, swaying = "stand", [], 0.0, []
    for segment in segments:
        gait = str(segment.parameters.get("gait", gait))
        sway = float(segment.parameters.get("sway_amplitude", sway))
        gaits.append(gait)
        swaying.append(sway > 0.0)
    window = np.full(len(base_times), STANDING_WINDOW)
    for k, segment in enumerate(segments):
        window[(base_times >= begins[k]) & (base_times < begins[k + 1])] = periods.get(gaits[k], STANDING_WINDOW)
    velocity = cycle_velocity(base_times, base, window) if len(base) > 1 else np.zeros((len(base), 3))
    tilt, heading = tilt_and_heading(base) if len(base) else (np.zeros(0), np.zeros(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        cone_use = np.where(forces[..., 2] > 1e-6, np.hypot(forces[..., 0], forces[..., 1]) / forces[..., 2],
                            0.0) if len(forces) else np.zeros((0, 0))
    # Against the MPC's mu, which is under the floor's: the simulator's own count holds MuJoCo to MuJoCo's cone,
    # which it keeps by construction. The same tolerance as the simulator's (rbd_deriv.sim.ground.CONE_TOLERANCE).
    outside = np.zeros(forces.shape[:2], dtype=bool) if len(forces) else np.zeros((0, 0), dtype=bool)
    if len(forces):
        slack = mu * forces[..., 2] + CONE_TOLERANCE * np.maximum(1.0, np.linalg.norm(forces, axis=-1))
        outside = touching & (np.hypot(forces[..., 0], forces[..., 1]) > slack)
    rows, squared = [], []
    for k, segment in enumerate(segments):
        begin, end = begins[k], begins[k + 1]
        here = (base_times >= begin) & (base_times < end)
        settled = (base_times >= begin + SETTLE_TIME) & (base_times <= end - 0.5 * window) & ~np.isnan(velocity[:, 0])
        recovering = np.zeros_like(settled)
        if segment.push:
            recovering = ((base_times >= begin + segment.push_at) & (base_times < begin + segment.push_at + PUSH_RECOVERY)
                          & ~np.isnan(velocity[:, 0]))
            settled &= ~recovering
        error = velocity[settled] - np.asarray(segment.cmd_vel)
        # (A sway moves the base on top of the command: its segments have no velocity error.)
        measured = settled.sum() > 5 and not swaying[k]
        if measured:
            squared.append(error ** 2)
        contacts = (contact_times >= begin) & (contact_times < end)
        commands = (command_times >= begin) & (command_times < end)
        rows.append({
            "name": segment.name, "start_s": float(begin), "duration_s": float(segment.duration),
            "gait": gaits[k], "cmd_vel": [float(x) for x in segment.cmd_vel],
            "cmd_vel_error_rms": np.sqrt(np.mean(error ** 2, axis=0)).tolist() if measured else None,
            "velocity_mean": (np.mean(velocity[settled], axis=0).tolist() if settled.sum() > 5 else None),
            "push_velocity_error_max": (np.abs(velocity[recovering] - np.asarray(segment.cmd_vel)).max(axis=0).tolist()
                                        if recovering.any() else None),
            "distance_m": _distance(base[here]),
            "yaw_change_rad": float(heading[here][-1] - heading[here][0]) if here.sum() > 1 else 0.0,
            "base_height_min_m": float(base[here, 2].min()) if here.any() else float("nan"),
            "base_height_max_m": float(base[here, 2].max()) if here.any() else float("nan"),
            "max_tilt_rad": float(tilt[here].max()) if here.any() else float("nan"),
            "sway_amplitude_m": (float(0.5 * np.ptp(base[settled, 1])) if swaying[k] and settled.sum() > 5 else None),
            "drift_m": (float(np.hypot(*(base[here][-1, :2] - base[here][0, :2])))
                        if here.sum() > 1 and not segment.moving else None),
            "cone_violations": int(outside[contacts].sum()) if len(forces) else 0,
            "max_torque_ratio": (float((np.abs(torques[commands]) / effort_limit).max()) if commands.any() else 0.0),
        })
    # Over every sample the segments' errors were measured on.
    overall = np.sqrt(np.mean(np.vstack(squared), axis=0)).tolist() if squared else None
    loaded = touching & (forces[..., 2] > 1e-6) if len(forces) else np.zeros((0, 0), dtype=bool)
    return {
        "base_times": base_times, "base": base, "velocity": velocity, "tilt": tilt, "heading": heading,
        "segments": rows, "cmd_vel_error_rms": overall,
        "command_times": command_times, "torques": torques,
        "torque_ratio": (np.abs(torques).max(axis=0) / effort_limit) if len(torques) else np.zeros(1),
        "command_rate": during.sum() / duration,
        "contact_times": contact_times, "forces": forces, "touching": touching, "cone_use": cone_use, "mu": mu,
        "mpc_cone_violations": int(outside.sum()) if len(forces) else 0,
        "cone_use_max": float(cone_use[loaded].max()) if loaded.any() else 0.0,
        "distance": _distance(base), "yaw_change": float(heading[-1] - heading[0]) if len(heading) > 1 else 0.0,
        "gaits_run": list(dict.fromkeys(gaits)),
    }


#: Spacing [s] of the states :func:`foot_lift` reads: a 5 cm swing of 0.3 s is seen at 30 of them.
LIFT_SPACING = 0.01


def foot_lift(model: Any, feet: Sequence[str], recorder: Any, start: float, duration: float) -> list[float]:
    """How high [m] each foot of ``feet`` rose over the run, between ``start`` and ``start + duration`` [s]: the
    frame's highest point above its lowest one, from the recorded joint states and odometry (the robot's ``model``
    with its floating base, the forward kinematics of each state every :data:`LIFT_SPACING`). A foot that never
    leaves the floor gives about 0; a swing of h about h."""
    import rbd_deriv as rd

    if not recorder.joints or not recorder.base:
        return [float("nan")] * len(feet)
    joint_times = np.array([j[0] for j in recorder.joints]) - start
    base_times = np.array([b[0] for b in recorder.base]) - start
    rows = [model.idx_q[name] for name in recorder.joint_names]
    data = model.create_data()
    heights = []
    for t in np.arange(0.0, duration, LIFT_SPACING):
        j, b = np.searchsorted(joint_times, t), np.searchsorted(base_times, t)
        if j >= len(joint_times) or b >= len(base_times):
            break
        q = rd.neutral(model)
        q[:7] = recorder.base[b][1]
        q[rows] = recorder.joints[j][1]
        rd.forward_kinematics(model, data, q)
        heights.append([rd.frame_placement(model, data, foot)[2, 3] for foot in feet])
    if not heights:
        return [float("nan")] * len(feet)
    heights = np.array(heights)
    return (heights.max(axis=0) - heights.min(axis=0)).tolist()


def _distance(base: np.ndarray) -> float:
    """The planar path length [m] of base poses (K, 7), sampled every 50th pose (a gait's own sway left out)."""
    if len(base) < 2:
        return 0.0
    points = np.vstack([base[::50, :2], base[-1:, :2]])
    return float(np.hypot(*np.diff(points, axis=0).T).sum())


def legged_document(summary: dict, diagnostics: dict, simulator: dict, pushes: Sequence[tuple], robot: str,
                    lift: Sequence[float] = (), simulator_before: Optional[dict] = None) -> dict:
    """The legged run's figures (the keys of ``--json``): ``summary`` of :func:`summarize_legged`, the MPC
    node's and the simulator's last /diagnostics values, the pushes sent ((time [s], DV [m/s], force [N])), how
    high each foot rose (``lift`` [m], :func:`foot_lift`). The simulator's contact counts (friction cone, center
    of pressure) are those since its report ``simulator_before`` (its last before the run: the robot settling
    on the floor at start-up is not the run's); -1 where it gave none."""
    fell = simulator.get("fell", "true") == "true"

    def since_before(key: str) -> int:
        count = int(simulator.get(key, "-1"))
        return count - int((simulator_before or {}).get(key, "0")) if count >= 0 else count
    return {
        "robot": robot, "mpc_rate_hz": summary["command_rate"], **solve_times(diagnostics), "fell": fell,
        "cmd_vel_error_rms": summary["cmd_vel_error_rms"], "distance_m": summary["distance"],
        "yaw_change_rad": summary["yaw_change"], "gaits_run": summary["gaits_run"],
        "max_torque_ratio": float(summary["torque_ratio"].max()),
        "cone_violations": summary["mpc_cone_violations"], "max_cone_use": summary["cone_use_max"],
        "friction_cone_violations": since_before("friction_cone_violations"),
        "cop_edge_steps": since_before("cop_edge_steps"),
        "pushes_applied": int(simulator.get("pushes_applied", "0")),
        "pushes_survived": 0 if fell else int(simulator.get("pushes_applied", "0")),
        "pushes_sent": len(pushes), "pushes": [{"at_s": at, "velocity_change_mps": dv, "force_n": force}
                                              for at, dv, force in pushes],
        "cmd_vel_clamped": int(diagnostics.get("cmd_vel_clamped", "0")),
        "simulator_lost_time_s": float(simulator.get("lost_time_s", "nan")),
        "foot_lift_m": [float(x) for x in lift],
        "segments": summary["segments"],
        **loop_counts(diagnostics, simulator),
    }
