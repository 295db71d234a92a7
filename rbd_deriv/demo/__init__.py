"""The closed-loop demos, ``python -m rbd_deriv.demo`` (``./run demo``): the simulator and the nodes as
processes over DDS, as on a robot.

* :mod:`rbd_deriv.demo.__main__`: the command line (the arm by default, ``--robot``/``--urdf`` a legged robot).
* :mod:`rbd_deriv.demo.arm`: the bundled 7-dof arm tracking a sinusoid (simulator, dynamics node, MPC node).
* :mod:`rbd_deriv.demo.legged`: a legged robot standing, stepping, pushed, walking or swaying (simulator, MPC
  node); its figures in :mod:`rbd_deriv.demo.legged_summary`.
* :mod:`rbd_deriv.demo.processes`: what both share: config/'s parameter files, the nodes started as processes,
  the recording node, the figures of the nodes' diagnostics.
* :mod:`rbd_deriv.demo.plots`: the PNGs.
* :mod:`rbd_deriv.demo.video`: the run's video, rendered offscreen by MuJoCo from the recorded states.

The arm's plant damping and friction are parameters of the simulator in config/demo.yaml, nowhere else
(:func:`rbd_deriv.demo.arm.plant_per_effort` reads them per N m of the URDF effort limits).
"""

from __future__ import annotations

from rbd_deriv.demo.processes import config_folder

__all__ = ["config_folder"]
