"""Simulated robots for closing the loop without hardware (no ROS in here).

- :class:`~rbd_deriv.sim.mujoco_plant.MujocoPlant`: MuJoCo, an independent engine, the simulator node's plant
  (:func:`make_plant`), fixed-base or floating-base; a floating base stands on a
  :class:`~rbd_deriv.sim.ground.Ground` (floor, feet, contact forces, falls) and can be pushed.
- :class:`~rbd_deriv.sim.plant.AbaPlant`: the package's own forward dynamics stepped in the caller's process, for
  in-process loops that want the controller's own model as the plant (the MPC benchmark). It is not a backend of
  the simulator node: a plant that shares the controller's model, run beside it over DDS, tests nothing that
  MuJoCo does not test better.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError
from rbd_deriv.sim.ground import Ground
from rbd_deriv.sim.plant import AbaPlant, Plant

BACKENDS = ("mujoco",)


def make_plant(backend: str, urdf: str | Path, dt: float = 1e-3, damping: Any = 0.0,
               friction: Any = 0.0, model: Any = None, ground: Optional[Ground] = None,
               push_budget: Optional[float] = None) -> Plant:
    """Build a plant from a URDF (text or path): floating-base when ``model`` has a free flyer.

    Args:
        backend: ``"mujoco"``.
        urdf: Robot description.
        dt: Physics step [s].
        damping: Joint viscous damping, scalar or (nu,) [N m s/rad].
        friction: Joint dry friction, scalar or (nu,) [N m].
        model: The model already loaded from ``urdf`` (fixed base if None), to avoid loading it twice.
        ground: The floor and the feet of a floating-base robot (:class:`~rbd_deriv.sim.ground.Ground`).
        push_budget: [m/s] bound on the pushes within a second (:class:`~rbd_deriv.sim.mujoco_plant.MujocoPlant`);
            None: the plant's default.

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

    actuated = model.actuated_joint_names
    effort = np.asarray(model.effort_limit, dtype=float)[[model.idx_v[name] for name in actuated]]
    budget = {} if push_budget is None else {"push_budget": push_budget}
    return MujocoPlant(urdf, actuated, effort, dt=dt, damping=damping, friction=friction,
                       floating_base=model.has_floating_base, ground=ground, **budget)


__all__ = ["AbaPlant", "Ground", "Plant", "BACKENDS", "make_plant"]
