"""MuJoCo backend: an independent physics engine loading the same URDF.

MuJoCo's URDF import fails on mesh paths it cannot resolve and needs a few compiler options, so
the description is prepared first: ``<visual>`` and ``<collision>`` are removed, static bodies are kept
apart so that joint and link frames match the URDF, and inertias that violate the triangle inequality are
balanced. The visuals are then put back as geoms that neither collide nor weigh (:mod:`rbd_deriv.sim.visuals`:
seen in a rendering, absent from the physics). Damping and dry friction (MuJoCo's ``frictionloss``) are then
set per joint.

A fixed-base robot has no contacts at all. A floating-base robot gets a free joint on its root body
(:mod:`rbd_deriv.sim.free_flyer` converts its state to the library's conventions) and, with a
:class:`~rbd_deriv.sim.ground.Ground`, a floor, feet and fall detectors; its contact forces, friction-cone
violations and falls are read after every step, and a push (a wrench on the base for a while) can be
applied.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from rbd_deriv.core.urdf import FREE_FLYER_JOINT, description_tree
from rbd_deriv.exceptions import BudgetError, InputError, ModelError, RbdDerivError
from rbd_deriv.sim.free_flyer import pose_from_mujoco, to_mujoco, twist_from_mujoco
from rbd_deriv.sim.ground import SOLIMP, SOLREF, Ground, GroundContacts, add_ground
from rbd_deriv.sim.plant import Plant, joint_vector
from rbd_deriv.sim.visuals import Visuals, add_visuals

#: A push's force may reach this many times the robot's weight [N]; its torque the same number in N m (a
#: 1 m lever); its duration [s] is in (0, MAX_PUSH_DURATION].
MAX_PUSH_WEIGHTS = 10.0
MAX_PUSH_DURATION = 10.0
#: Default push budget [m/s]: the pushes accepted within any second may change the base's momentum by at most the
#: robot's mass times this (its angular momentum by as many N m s), whatever their number.
PUSH_BUDGET = 2.0
#: The window [s] of the push budget.
PUSH_BUDGET_WINDOW = 1.0
#: The base counts as fallen below this fraction of its height at the last reset.
FALL_HEIGHT_FRACTION = 0.5


def mujoco_ready_urdf(source: str | Path) -> str:
    """URDF text (or a path to it) rewritten for MuJoCo's importer; returns the new XML text.

    Raises:
        URDFError: The text is not XML or its root is not ``<robot>``.
    """
    root, _ = description_tree(source)
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


def frame_links(source: str | Path, frames: Sequence[str]) -> Tuple[str, ...]:
    """The link of each frame name of a URDF: a link is its own; a joint's frame is its child link's frame.

    Raises:
        ModelError: A name is neither a link nor a joint of the URDF.
    """
    root, _ = description_tree(source)
    links = {link.get("name") for link in root.iter("link")}
    children = {joint.get("name"): joint.find("child").get("link") for joint in root.iter("joint")
                if joint.find("child") is not None}
    found = []
    for frame in frames:
        if frame in links:
            found.append(frame)
        elif frame in children:
            found.append(children[frame])
        else:
            raise ModelError(f"contact frame {frame!r} is neither a link nor a joint of the robot")
    return tuple(found)


def _load(mujoco: Any, text: str, floating_base: bool) -> Any:
    """The robot's MjSpec, with a free joint on its root body when it floats."""
    try:
        spec = mujoco.MjSpec.from_string(text)
    except ValueError as error:
        raise ModelError(f"MuJoCo cannot load the robot description: {error}") from error
    if floating_base:
        root = spec.worldbody.first_body()
        if root is None:
            raise ModelError("the robot description has no body to set free")
        free = root.add_freejoint()
        free.name = FREE_FLYER_JOINT
    return spec


def robot_spec(mujoco: Any, urdf: str | Path, floating_base: bool, visuals: bool = True) -> Tuple[Any, Visuals]:
    """The robot's MjSpec from URDF text or a path (a free joint on its root body when it floats), with its
    visuals as geoms that neither collide nor weigh unless ``visuals`` is False, and what was added of them.

    Raises:
        URDFError: The text is not a URDF.
        ModelError: MuJoCo cannot load it.
    """
    spec = _load(mujoco, mujoco_ready_urdf(urdf), floating_base)
    if not visuals:
        return spec, Visuals()
    return spec, add_visuals(spec, *description_tree(urdf))


def _compile(spec: Any) -> Any:
    try:
        return spec.compile()
    except ValueError as error:
        raise ModelError(f"MuJoCo cannot compile the robot: {error}") from error


class MujocoPlant(Plant):
    """Robot simulated by MuJoCo with torques applied directly at the joints.

    Args:
        urdf: URDF text or file path.
        joint_names: Joints to actuate, in the package's model order (``model.actuated_joint_names``).
        effort_limit: (nu,) torque saturation [N m].
        dt: Physics step [s].
        damping: Viscous damping, scalar or (nu,) [N m s/rad].
        friction: Dry friction (MuJoCo frictionloss), scalar or (nu,) [N m].
        floating_base: The root body moves freely (a free joint ``root_joint``): q (7 + nu,) and v (6 + nu,)
            follow the library's free flyer (:mod:`rbd_deriv.sim.free_flyer`).
        ground: A floor, feet and fall detectors (floating base only); None: no contact at all.
        push_budget: [m/s] the pushes accepted within any second may change the base's momentum by at most the
            robot's mass times this, and its angular momentum by as many N m s (:meth:`push`), > 0.
        visuals: Keep the URDF's visuals as geoms that neither collide nor weigh (for a rendering of
            :attr:`mj_model`); the physics is the same without them.

    Attributes:
        visuals: The visual geoms added and the meshes skipped (:class:`~rbd_deriv.sim.visuals.Visuals`, whose
            ``note`` is one line on what was skipped).

    Attributes (floating base with a ground):
        contact_forces: (nc, 3) [N] the floor's force on each foot in the world frame after the last step.
        touching: (nc,) whether each foot touches the floor.
        cone_violations: Foot-steps whose force left the friction cone since the reset.
        cop_edge_steps: Sole-steps whose center of pressure was on the edge of the sole's rectangle since the reset
            (:meth:`~rbd_deriv.sim.ground.GroundContacts.soles_on_edge`: carried by one edge or corner, tipping).
        fell: Whether the robot has fallen since the reset: its base below half its height at the reset, or a
            fall detector (trunk, limbs) on the floor.
        pushes_applied: Pushes accepted since the plant was built.

    Raises:
        ModelError: MuJoCo cannot load the description, a joint is missing or is not a 1-dof joint, a contact
            frame is not in the description.
        InputError: A ground on a fixed base, bad sizes or settings.
        RbdDerivError: MuJoCo is not installed.
    """

    def __init__(self, urdf: str | Path, joint_names: Sequence[str], effort_limit: Any,
                 dt: float = 1e-3, damping: Any = 0.0, friction: Any = 0.0, floating_base: bool = False,
                 ground: Optional[Ground] = None, push_budget: float = PUSH_BUDGET, visuals: bool = True) -> None:
        try:
            import mujoco  # only the simulator needs it
        except ImportError as error:
            raise RbdDerivError("the simulated robot needs MuJoCo: pip install mujoco (rosdep key "
                                f"python3-mujoco-pip); {error}") from error

        self._mujoco = mujoco
        if not (np.isfinite(dt) and dt > 0.0):
            raise InputError(f"dt must be a positive number of seconds, got {dt!r}")
        if not (math.isfinite(push_budget) and push_budget > 0.0):
            raise InputError(f"push_budget must be a positive speed [m/s], got {push_budget!r}", "push_budget")
        if ground is not None and not floating_base:
            raise InputError("a ground needs a floating base: a fixed-base robot has no contacts")
        self.floating_base = bool(floating_base)
        self.ground = ground
        spec, self.visuals = robot_spec(mujoco, urdf, self.floating_base, visuals)
        if ground is not None:
            feet = (tuple(sole.link for sole in ground.soles) if ground.soles
                    else frame_links(urdf, ground.contact_frames))
            # The trunk detector is sized by the root body's inertia as MuJoCo compiles it (balanced, bounded).
            bare = _compile(spec)
            root_body = spec.worldbody.first_body().name
            root = mujoco.mj_name2id(bare, mujoco.mjtObj.mjOBJ_BODY, root_body)
            add_ground(spec, ground, feet, root_body, float(bare.body_mass[root]), bare.body_inertia[root].copy(),
                       bare.body_ipos[root].copy(), bare.body_iquat[root].copy())
        self.joint_names = tuple(joint_names)
        nu = len(self.joint_names)
        locks = []
        if self.floating_base:
            for name in self.joint_names:
                lock = spec.add_equality()
                lock.type = mujoco.mjtEq.mjEQ_JOINT
                lock.name1 = name
                lock.active = False
                # As stiff as the feet on the floor (the default, 20 ms, lets a leg yield by degrees).
                lock.solref, lock.solimp = list(SOLREF), list(SOLIMP)
                locks.append(lock)
        self.mj_model = _compile(spec)
        self.mj_model.opt.timestep = dt
        if ground is None:
            self.mj_model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        self.mj_data = mujoco.MjData(self.mj_model)
        self.dt = float(dt)
        self.effort_limit = np.asarray(effort_limit, dtype=float).copy()
        if self.effort_limit.shape != (nu,):
            raise InputError(f"effort_limit must have shape ({nu},)")
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
        self._base_nq, self._base_nv = (7, 6) if self.floating_base else (0, 0)
        if self.mj_model.nv != nu + self._base_nv:
            raise ModelError(f"MuJoCo has {self.mj_model.nv} degrees of freedom, the model {nu + self._base_nv}")
        self.mj_model.dof_damping[self._dof] = joint_vector("damping", damping, nu)
        self.mj_model.dof_frictionloss[self._dof] = joint_vector("friction", friction, nu)
        self._locks = np.arange(len(locks), dtype=np.int64)  # the description has no equality of its own
        self._root_body = 1  # the world's first child: the base
        self.base_link = mujoco.mj_id2name(self.mj_model, mujoco.mjtObj.mjOBJ_BODY, self._root_body)
        self.mass = float(self.mj_model.body_mass.sum())
        self.contacts = GroundContacts(self.mj_model, ground) if ground is not None else None
        nc = len(ground.contact_frames) if ground is not None else 0
        self.contact_forces = np.zeros((nc, 3))
        self.touching = np.zeros(nc, dtype=bool)
        self.pushes_applied = 0
        self.push_budget = float(push_budget)
        self._pushes: list = []  # [force (3,), torque (3,), steps left]
        self._push_impulses: list = []  # (plant time [s], |F| T [N s], |tau| T [N m s]) of the pushes accepted
        self._braked = False
        self.time = 0.0
        self.saturated_steps = 0
        self.cone_violations = 0
        self.cop_edge_steps = 0
        self.fell = False
        self._initial_height = 0.0

    # ------------------------------------------------------------------------------------------------ state
    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        nu = len(self.joint_names)
        nq, nv = nu + self._base_nq, nu + self._base_nv
        q = np.asarray(q, dtype=float)
        v = np.zeros(nv) if v is None else np.asarray(v, dtype=float)
        if q.shape != (nq,) or v.shape != (nv,) or not (np.isfinite(q).all() and np.isfinite(v).all()):
            raise InputError(f"reset needs finite q ({nq},) and v ({nv},)")
        if self.floating_base and abs(np.linalg.norm(q[3:7]) - 1.0) > 1e-6:
            raise InputError(f"reset: the base quaternion {q[3:7].tolist()} is not unit")
        self._mujoco.mj_resetData(self.mj_model, self.mj_data)
        if self.floating_base:
            self.mj_data.qpos[0:7], self.mj_data.qvel[0:6] = to_mujoco(q[0:7], v[0:6])
        self.mj_data.qpos[self._qpos] = q[self._base_nq:]
        self.mj_data.qvel[self._dof] = v[self._base_nv:]
        self._release()
        self._pushes.clear()
        self._mujoco.mj_forward(self.mj_model, self.mj_data)
        self.time = 0.0
        self.saturated_steps = 0
        self.cone_violations = 0
        self.cop_edge_steps = 0
        self.fell = False
        self._initial_height = float(q[2]) if self.floating_base else 0.0
        self._read_contacts(count=False)

    @property
    def q(self) -> np.ndarray:
        """Configuration (nq,): the joints' positions [rad or m], after the base's pose on a floating base."""
        joints = self.mj_data.qpos[self._qpos]
        if not self.floating_base:
            return joints.copy()
        return np.concatenate([pose_from_mujoco(self.mj_data.qpos), joints])

    @property
    def v(self) -> np.ndarray:
        """Velocity (nv,): the joints' rates, after the base's twist in its own frame on a floating base."""
        joints = self.mj_data.qvel[self._dof]
        if not self.floating_base:
            return joints.copy()
        return np.concatenate([twist_from_mujoco(self.mj_data.qpos, self.mj_data.qvel), joints])

    def base_pose(self) -> Tuple[np.ndarray, np.ndarray]:
        """The base's position (3,) [m] and orientation (x, y, z, w) in the world (the ``odom`` frame)."""
        q = self.q
        return q[0:3], q[3:7]

    def base_twist(self) -> Tuple[np.ndarray, np.ndarray]:
        """The base's linear (3,) [m/s] and angular (3,) [rad/s] velocity in the base frame: the twist of
        nav_msgs/Odometry, which is expressed in its child frame (the base link)."""
        v = self.v
        return v[0:3], v[3:6]

    @property
    def damping_bound(self) -> np.ndarray:
        """(nu,) [N m s/rad] the largest joint damping d that a torque -d v, applied for a whole step, keeps
        stable: M_jj / dt, half the bound 2 M_jj / dt of an explicit step, with M_jj the joint's diagonal inertia
        (MuJoCo's ``dof_M0``, at the reference configuration). A controller's damping past it makes a light joint
        (a gripper's finger) oscillate and blow the simulation up; a real drive damps in its current loop."""
        return self.mj_model.dof_M0[self._dof] / self.dt

    # ------------------------------------------------------------------------------------------------ brakes
    def _release(self) -> None:
        if self._braked and self.floating_base:
            self.mj_data.eq_active[self._locks] = 0
            self._braked = False

    def hold(self, steps: int = 1) -> None:
        """``steps`` physics steps with the brakes on. A fixed base stops where it is and does not move; a
        floating base's joints are locked at their positions when the brakes engage (MuJoCo joint equality
        constraints), and the robot stands or falls on them."""
        if not self.floating_base:
            super().hold(steps)
            return
        if not self._braked:
            # A joint equality holds q - q0 = polycoef[0] (q0 the joint's reference position).
            self.mj_model.eq_data[self._locks, 0] = self.mj_data.qpos[self._qpos] - self.mj_model.qpos0[self._qpos]
            self.mj_model.eq_data[self._locks, 1:] = 0.0
            self.mj_data.eq_active[self._locks] = 1
            self._braked = True
        for _ in range(steps):
            self.mj_data.qfrc_applied[self._dof] = 0.0
            self._physics_step()
            self.time += self.dt

    def brake(self) -> None:
        """Brakes on. A fixed base stops where it is; a floating base's joints are locked (:meth:`hold`)."""
        if self.floating_base:
            self.hold(steps=0)
        else:
            super().brake()

    # ------------------------------------------------------------------------------------------------ stepping
    def _advance(self, torque: np.ndarray) -> None:
        self._release()
        self.mj_data.qfrc_applied[self._dof] = torque
        self._physics_step()

    def _physics_step(self) -> None:
        self._apply_pushes()
        self._mujoco.mj_step(self.mj_model, self.mj_data)
        if self.floating_base:
            self._read_contacts(count=True)

    def _read_contacts(self, count: bool) -> None:
        if self.contacts is not None:
            # After mj_step the contacts and their forces are those of the state the step started from: the
            # forces that acted during the step.
            self.contact_forces, self.touching, on_floor = self.contacts.read(self.mj_model, self.mj_data)
            if count and self.touching.any():
                self.cone_violations += int(self.contacts.cone_violations(self.contact_forces).sum())
                if self.contacts.has_soles:  # point feet have no center of pressure: no work per step for them
                    self.cop_edge_steps += int(self.contacts.soles_on_edge().sum())
            self.fell = self.fell or bool(count and on_floor)
        if self.floating_base and count:
            self.fell = self.fell or bool(self.mj_data.qpos[2] < FALL_HEIGHT_FRACTION * self._initial_height)

    # ------------------------------------------------------------------------------------------------ pushes
    def push(self, force: Any, torque: Any, duration: float) -> int:
        """Push the base with a wrench, from the next step on, for ``duration`` [s] rounded to whole steps.

        Args:
            force: (3,) [N] in the world frame; torque: (3,) [N m] in the world frame, about the base's origin.
            duration: (0, MAX_PUSH_DURATION] [s].

        Returns:
            The number of physics steps it lasts (at least one).

        Raises:
            InputError: A fixed base, a non-finite entry, wrong shapes, a force over MAX_PUSH_WEIGHTS times the
                robot's weight or a torque over that many N m, a duration outside (0, MAX_PUSH_DURATION]. Nothing
                is applied.
            BudgetError: With the pushes accepted within the last PUSH_BUDGET_WINDOW of plant time, its impulse
                |F| T (or |tau| T) would pass the robot's mass times ``push_budget`` [N s] (or as many N m s): many
                small pushes must not do what no single push may. Nothing is applied.
        """
        if not self.floating_base:
            raise InputError("a push needs a floating base")
        force, torque = np.asarray(force, dtype=float), np.asarray(torque, dtype=float)
        duration = float(duration)
        if force.shape != (3,) or torque.shape != (3,):
            raise InputError(f"a push needs force (3,) and torque (3,), got {force.shape} and {torque.shape}")
        if not (np.isfinite(force).all() and np.isfinite(torque).all() and math.isfinite(duration)):
            raise InputError("a push holds NaN or inf")
        limit = MAX_PUSH_WEIGHTS * self.mass * float(np.linalg.norm(self.mj_model.opt.gravity))
        if np.linalg.norm(force) > limit or np.linalg.norm(torque) > limit:
            raise InputError(f"a push of {np.linalg.norm(force):.4g} N and {np.linalg.norm(torque):.4g} N m is over "
                             f"the limit of {limit:.4g} ({MAX_PUSH_WEIGHTS:g} times the robot's weight)")
        if not 0.0 < duration <= MAX_PUSH_DURATION:
            raise InputError(f"a push lasts (0, {MAX_PUSH_DURATION:g}] s, got {duration:g} s")
        steps = max(1, int(round(duration / self.dt)))
        self._push_impulses = [p for p in self._push_impulses if p[0] > self.time - PUSH_BUDGET_WINDOW]
        impulse = (float(np.linalg.norm(force)) * steps * self.dt, float(np.linalg.norm(torque)) * steps * self.dt)
        budget = self.mass * self.push_budget
        used = (sum(p[1] for p in self._push_impulses), sum(p[2] for p in self._push_impulses))
        if used[0] + impulse[0] > budget or used[1] + impulse[1] > budget:
            raise BudgetError(f"a push of {impulse[0]:.4g} N s and {impulse[1]:.4g} N m s after {used[0]:.4g} N s and "
                              f"{used[1]:.4g} N m s within {PUSH_BUDGET_WINDOW:g} s passes the budget of {budget:.4g} "
                              f"(mass {self.mass:.4g} kg times {self.push_budget:g} m/s)")
        self._push_impulses.append((self.time, *impulse))
        self._pushes.append([force.copy(), torque.copy(), steps])
        self.pushes_applied += 1
        return steps

    def _apply_pushes(self) -> None:
        applied = self.mj_data.xfrc_applied[self._root_body]
        applied[:] = 0.0
        if not self._pushes:
            return
        force, torque = np.zeros(3), np.zeros(3)
        for push in self._pushes:
            force += push[0]
            torque += push[1]
            push[2] -= 1
        self._pushes = [push for push in self._pushes if push[2] > 0]
        # MuJoCo applies xfrc_applied at the body's centre of mass: the same wrench about the base's origin
        # needs the moment of the force about the centre of mass added, at the state this step starts from
        # (mj_step leaves the positions of the state before its integration).
        self._mujoco.mj_kinematics(self.mj_model, self.mj_data)
        lever = self.mj_data.xpos[self._root_body] - self.mj_data.xipos[self._root_body]
        applied[0:3] = force
        applied[3:6] = torque + np.cross(lever, force)
