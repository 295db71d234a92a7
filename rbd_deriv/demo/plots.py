"""The demos' PNGs, drawn without a display (matplotlib's Agg backend).

:func:`plot_arm`: per joint, the reference against the measured position and the torque commands against the
effort limits. :func:`plot_legged`: the base velocity against the command, its height and tilt, the contact forces
against their friction cones, the torques against the limits and the feet on the floor, with the script's segments
marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["plot_arm", "plot_legged"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def plot_arm(summary: dict, joint_names: Sequence[str], effort_limit: np.ndarray, path: Path, title: str) -> None:
    """Write the arm demo's PNG to ``path``: ``summary`` of :func:`rbd_deriv.demo.arm.summarize`,
    ``effort_limit`` (nv,) [N m]."""
    count = len(joint_names)
    figure, axes = _pyplot().subplots(count, 2, figsize=(13, 2.0 * count), sharex=True)
    for j, name in enumerate(joint_names):
        left, right = axes[j]
        left.plot(summary["stamps"], summary["expected"][:, j], "k--", lw=1.0, label="reference")
        left.plot(summary["stamps"], summary["positions"][:, j], "C0", lw=1.0, label="actual")
        left.set_ylabel(f"{name}\n[rad]")
        right.plot(summary["command_times"], summary["torques"][:, j], "C1", lw=0.8, label="command")
        for sign in (-1.0, 1.0):
            right.axhline(sign * effort_limit[j], color="r", lw=0.8, ls=":")
        right.set_ylabel("[N m]")
    axes[0][0].legend(loc="upper right", fontsize=8)
    axes[0][0].set_title("joint positions: reference vs actual")
    axes[0][1].set_title("torque commands vs effort limits (dotted)")
    axes[-1][0].set_xlabel("time [s]")
    axes[-1][1].set_xlabel("time [s]")
    _save(figure, path, title)


def plot_legged(summary: dict, feet: Sequence[str], effort_limit: np.ndarray, events: dict, path: Path,
                title: str) -> None:
    """Write the legged demo's PNG to ``path``: ``summary`` of :func:`rbd_deriv.demo.legged.summarize_legged`,
    ``effort_limit`` (nu,) [N m], ``events``: {name: time [s] from the start}."""
    figure, axes = _pyplot().subplots(5, 1, figsize=(12, 16), sharex=True)
    trajectory, height, cones, torques, gait = axes
    for k, axis in enumerate(("vx [m/s]", "vy [m/s]", "wz [rad/s]")):
        trajectory.plot(summary["base_times"], summary["velocity"][:, k], lw=1.0, label=axis, color=f"C{k}")
        for segment in summary["segments"]:
            trajectory.hlines(segment["cmd_vel"][k], segment["start_s"], segment["start_s"] + segment["duration_s"],
                              color=f"C{k}", ls="--", lw=0.8)
    trajectory.set_ylabel("base velocity (dashed: cmd_vel)")
    trajectory.set_title("base velocity in its heading frame, averaged over a gait cycle (odometry), against the "
                         "command")
    if len(summary["base"]):
        height.plot(summary["base_times"], summary["base"][:, 2], lw=1.0, color="C0", label="base height [m]")
        height.plot(summary["base_times"], summary["tilt"], lw=1.0, color="C3", label="tilt [rad]")
    height.set_title("base height and tilt from upright")
    height.legend(loc="lower left", fontsize=8)
    for c, foot in enumerate(feet):
        if len(summary["cone_use"]):
            cones.plot(summary["contact_times"], summary["cone_use"][:, c], lw=0.8, label=foot)
    cones.axhline(summary["mu"], color="r", ls=":", lw=1.0, label="mu (MPC)")
    cones.set_ylabel("|f_t| / f_n")
    cones.set_title("contact forces against their friction cones (simulator)")
    if len(summary["torques"]):
        torques.plot(summary["command_times"], summary["torques"] / effort_limit, lw=0.5)
    for sign in (-1.0, 1.0):
        torques.axhline(sign, color="r", ls=":", lw=1.0)
    torques.set_ylabel("torque / limit")
    torques.set_title("torque commands against the effort limits (one line per joint)")
    for c, foot in enumerate(feet):
        if len(summary["touching"]):
            down = summary["touching"][:, c]
            gait.fill_between(summary["contact_times"], c + 0.1, c + 0.9, where=down, step="post", color=f"C{c}")
    gait.set_yticks(np.arange(len(feet)) + 0.5)
    gait.set_yticklabels(feet)
    gait.set_title("gait: feet on the floor (simulator)")
    gait.set_xlabel("time [s]")
    for axis in axes:
        for at in events.values():
            axis.axvline(at, color="k", lw=0.8, ls="--")
    for name, at in events.items():
        trajectory.annotate(name, (at, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="top")
    trajectory.legend(loc="upper left", fontsize=8)
    cones.legend(loc="upper right", fontsize=8)
    _save(figure, path, title)
