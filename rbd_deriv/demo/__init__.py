"""The closed-loop demos, ``python -m rbd_deriv.demo`` (``./run demo``): the simulator and the nodes as
processes over DDS, as on a robot.

* :mod:`rbd_deriv.demo.__main__`: the command line (the arm by default, ``--robot``/``--urdf`` a legged robot).
* :mod:`rbd_deriv.demo.arm`: the bundled 7-dof arm tracking a sinusoid (simulator, dynamics node, MPC node).
* :mod:`rbd_deriv.demo.legged`: a legged robot standing, stepping, pushed, walking or swaying (simulator, MPC
  node); its figures in :mod:`rbd_deriv.demo.legged_summary`.
* :mod:`rbd_deriv.demo.processes`: what both share: config/'s parameter files, the nodes started as processes,
  the recording node, the figures of the nodes' diagnostics.
* :mod:`rbd_deriv.demo.plots`: the PNGs.

The arm's plant damping and friction are parameters of the simulator in config/demo.yaml, nowhere else:
``DAMPING_PER_EFFORT`` and ``FRICTION_PER_EFFORT`` here are read from it, (nv,) per N m of the bundled arm's
URDF effort limits (:func:`rbd_deriv.demo.arm.plant_per_effort`).
"""

from __future__ import annotations

from typing import Any

from rbd_deriv.demo.processes import config_folder

__all__ = ["config_folder"]


def __getattr__(name: str) -> Any:
    if name in ("DAMPING_PER_EFFORT", "FRICTION_PER_EFFORT"):
        import rbd_deriv as rd
        from rbd_deriv.demo.arm import plant_per_effort

        damping, friction = plant_per_effort(rd.load_urdf(str(rd.bundled_urdf("rbd_arm7"))).effort_limit)
        return damping if name == "DAMPING_PER_EFFORT" else friction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
