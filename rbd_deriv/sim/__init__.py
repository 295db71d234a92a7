"""Simulated robots for closing the loop without hardware (no ROS in here).

- :class:`~rbd_deriv.sim.plant.AbaPlant`: built-in, the package's own forward dynamics.
- :class:`~rbd_deriv.sim.mujoco_plant.MujocoPlant`: MuJoCo, an independent engine.
- :func:`make_plant`: either one from a URDF, by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.sim.plant import AbaPlant, Plant

BACKENDS = ("mujoco", "builtin")


def make_plant(backend: str, urdf: str | Path, dt: float = 1e-3, damping: Any = 0.0,
               friction: Any = 0.0, model: Any = None) -> Plant:
    """Build a fixed-base plant from a URDF (text or path).

    Args:
        backend: ``"mujoco"`` or ``"builtin"``.
        urdf: Robot description.
        dt: Physics step [s].
        damping: Joint viscous damping, scalar or (nv,) [N m s/rad].
        friction: Joint dry friction, scalar or (nv,) [N m].
        model: The model already loaded from ``urdf``, to avoid loading it twice.

    Raises:
        InputError: Unknown backend.
        URDFError, ModelError: The description cannot be loaded.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown plant backend {backend!r}; choose one of {BACKENDS}")
    if model is None:
        model = rd.load_urdf(str(urdf))
    if backend == "builtin":
        return AbaPlant(model, dt=dt, damping=damping, friction=friction)
    from rbd_deriv.sim.mujoco_plant import MujocoPlant

    return MujocoPlant(urdf, model.joint_names, model.effort_limit, dt=dt, damping=damping,
                       friction=friction)


__all__ = ["AbaPlant", "Plant", "BACKENDS", "make_plant"]
