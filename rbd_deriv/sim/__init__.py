"""Simulated robots for closing the loop without hardware (no ROS in here).

- :class:`~rbd_deriv.sim.mujoco_plant.MujocoPlant`: MuJoCo, an independent engine, the simulator node's plant
  (:func:`make_plant`).
- :class:`~rbd_deriv.sim.plant.AbaPlant`: the package's own forward dynamics stepped in the caller's process, for
  in-process loops that want the controller's own model as the plant (the MPC benchmark). It is not a backend of
  the simulator node: a plant that shares the controller's model, run beside it over DDS, tests nothing that
  MuJoCo does not test better.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.sim.plant import AbaPlant, Plant

BACKENDS = ("mujoco",)


def make_plant(backend: str, urdf: str | Path, dt: float = 1e-3, damping: Any = 0.0,
               friction: Any = 0.0, model: Any = None) -> Plant:
    """Build a fixed-base plant from a URDF (text or path).

    Args:
        backend: ``"mujoco"``.
        urdf: Robot description.
        dt: Physics step [s].
        damping: Joint viscous damping, scalar or (nv,) [N m s/rad].
        friction: Joint dry friction, scalar or (nv,) [N m].
        model: The model already loaded from ``urdf``, to avoid loading it twice.

    Raises:
        InputError: Unknown backend.
        RbdDerivError: MuJoCo is not installed.
        URDFError, ModelError: The description cannot be loaded.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown plant backend {backend!r}; choose one of {BACKENDS}")
    if model is None:
        model = rd.load_urdf(str(urdf))
    from rbd_deriv.sim.mujoco_plant import MujocoPlant

    return MujocoPlant(urdf, model.joint_names, model.effort_limit, dt=dt, damping=damping,
                       friction=friction)


__all__ = ["AbaPlant", "Plant", "BACKENDS", "make_plant"]
