"""MuJoCo backend: an independent physics engine loading the same URDF.

MuJoCo's URDF import fails on mesh paths it cannot resolve and needs a few compiler options, so
the description is prepared first: ``<visual>`` and ``<collision>`` are removed (the plant has no
contacts), static bodies are kept apart so that joint frames match the URDF, and inertias that
violate the triangle inequality are balanced. Damping and dry friction (MuJoCo's
``frictionloss``) are then set per joint.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rbd_deriv.exceptions import InputError, ModelError, RbdDerivError, URDFError
from rbd_deriv.sim.plant import Plant, _joint_vector


def mujoco_ready_urdf(source: str | Path) -> str:
    """URDF text (or a path to it) rewritten for MuJoCo's importer; returns the new XML text.

    Raises:
        URDFError: The text is not XML or its root is not ``<robot>``.
    """
    text = str(source)
    if not text.lstrip().startswith("<"):
        text = Path(text).read_text(encoding="utf-8")
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise URDFError(f"robot description is not valid XML: {error}") from error
    if root.tag != "robot":
        raise URDFError(f"root element is <{root.tag}>, expected <robot>")
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for element in link.findall(tag):
                link.remove(element)
    for element in root.findall("mujoco"):
        root.remove(element)
    extension = ElementTree.SubElement(root, "mujoco")
    ElementTree.SubElement(extension, "compiler", discardvisual="true", fusestatic="false",
                           balanceinertia="true", boundmass="1e-4", boundinertia="1e-8")
    return ElementTree.tostring(root, encoding="unicode")


class MujocoPlant(Plant):
    """Robot simulated by MuJoCo with torques applied directly at the joints.

    Args:
        urdf: URDF text or file path.
        joint_names: Joints to actuate, in the package's model order (``model.joint_names``).
        effort_limit: (nv,) torque saturation [N m].
        dt: Physics step [s].
        damping: Viscous damping, scalar or (nv,) [N m s/rad].
        friction: Dry friction (MuJoCo frictionloss), scalar or (nv,) [N m].

    Raises:
        ModelError: MuJoCo cannot load the description, a joint is missing or is not a 1-dof joint.
        RbdDerivError: MuJoCo is not installed.
    """

    def __init__(self, urdf: str | Path, joint_names: Sequence[str], effort_limit: Any,
                 dt: float = 1e-3, damping: Any = 0.0, friction: Any = 0.0) -> None:
        try:
            import mujoco  # only the simulator needs it
        except ImportError as error:
            raise RbdDerivError("the simulated robot needs MuJoCo: pip install mujoco (rosdep key "
                                f"python3-mujoco-pip); {error}") from error

        self._mujoco = mujoco
        if not (np.isfinite(dt) and dt > 0.0):
            raise InputError(f"dt must be a positive number of seconds, got {dt!r}")
        try:
            self.mj_model = mujoco.MjModel.from_xml_string(mujoco_ready_urdf(urdf))
        except ValueError as error:
            raise ModelError(f"MuJoCo cannot load the robot description: {error}") from error
        self.mj_model.opt.timestep = dt
        self.mj_model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        self.mj_data = mujoco.MjData(self.mj_model)
        self.joint_names = tuple(joint_names)
        nv = len(self.joint_names)
        self.dt = float(dt)
        self.effort_limit = np.asarray(effort_limit, dtype=float).copy()
        if self.effort_limit.shape != (nv,):
            raise InputError(f"effort_limit must have shape ({nv},)")
        qpos, dof = [], []
        hinge_or_slide = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
        for name in self.joint_names:
            joint = mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint < 0:
                raise ModelError(f"joint {name!r} is not in the MuJoCo model", joint=name)
            if int(self.mj_model.jnt_type[joint]) not in hinge_or_slide:
                raise ModelError(f"joint {name!r} is not a 1-dof joint in MuJoCo", joint=name)
            qpos.append(self.mj_model.jnt_qposadr[joint])
            dof.append(self.mj_model.jnt_dofadr[joint])
        self._qpos = np.array(qpos, dtype=np.int64)
        self._dof = np.array(dof, dtype=np.int64)
        if self.mj_model.nv != nv:
            raise ModelError(f"MuJoCo has {self.mj_model.nv} degrees of freedom, the model {nv}")
        self.mj_model.dof_damping[self._dof] = _joint_vector("damping", damping, nv)
        self.mj_model.dof_frictionloss[self._dof] = _joint_vector("friction", friction, nv)
        self.time = 0.0
        self.saturated_steps = 0

    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        nv = len(self.joint_names)
        q = np.asarray(q, dtype=float)
        v = np.zeros(nv) if v is None else np.asarray(v, dtype=float)
        if q.shape != (nv,) or v.shape != (nv,) or not (np.isfinite(q).all() and np.isfinite(v).all()):
            raise InputError(f"reset needs finite q and v of shape ({nv},)")
        self._mujoco.mj_resetData(self.mj_model, self.mj_data)
        self.mj_data.qpos[self._qpos] = q
        self.mj_data.qvel[self._dof] = v
        self._mujoco.mj_forward(self.mj_model, self.mj_data)
        self.time = 0.0
        self.saturated_steps = 0

    def _advance(self, torque: np.ndarray) -> None:
        self.mj_data.qfrc_applied[self._dof] = torque
        self._mujoco.mj_step(self.mj_model, self.mj_data)

    @property
    def q(self) -> np.ndarray:
        return self.mj_data.qpos[self._qpos].copy()

    @property
    def v(self) -> np.ndarray:
        return self.mj_data.qvel[self._dof].copy()
