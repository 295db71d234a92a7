"""The floor under a floating-base robot in MuJoCo: feet, contact settings, contact forces, falls (no ROS).

The robot's own collision meshes are stripped (:func:`rbd_deriv.sim.mujoco_plant.mujoco_ready_urdf`), so the
ground adds the only geometry that touches the floor:

- a plane at z = 0 (normal +z);
- per contact frame, a **point foot**: a sphere of radius ``foot_radius`` centred on the frame's origin (the
  frame rests ``foot_radius`` above the floor), or a **sole** (kind ``"frame"``): four spheres of that radius
  at the corners of a ``sole_size`` = (length along the frame's x, width along its y) rectangle centred on
  the frame, their centres ``foot_radius`` above the frame along its z, so that a flat sole frame rests on
  the floor. Four corners give the sole its support polygon and a torque about every axis, as a box would,
  with contacts that stay at four points instead of MuJoCo's box-plane contact switching among corners;
- fall detectors that collide like the rest: a box on the root body with the root's mass and principal
  inertia (the uniform box of the same inertia, at its centre of mass) for the trunk, and a capsule of
  radius ``foot_radius / 2`` along each limb segment (from a body's origin to its child's), except the
  segments that end at a foot (the shin of a point foot, the ankle of a sole), so a foot on the floor is never
  taken for a fall. A detector on the floor means the robot has fallen: a knee, the trunk, an elbow on the
  ground.

Contact settings. MuJoCo's contacts are soft: a constraint force follows a reference acceleration
-b v - k d of the penetration d with the time constant and damping ratio of ``solref`` and an impedance
from ``solimp``. MuJoCo's defaults (``solref`` 0.02 s, ``solimp`` 0.9 to 0.95) let solo12 (2.5 kg on four
2 cm feet) standing at its SRDF posture under a PD with its stance torques sink 3 mm into the floor, still
sinking at 2 mm/s after 1.5 s. :data:`SOLREF` takes a time constant of 5 ms, stable at the 1 ms step (MuJoCo
needs it above twice the step), and :data:`SOLIMP` an impedance of 0.99 over 1 mm of penetration, which makes
the constraint nearly rigid: the same robot sinks 0.04 mm and rests (test/test_mujoco_plant.py). The friction
cone is MuJoCo's elliptic cone (the exact cone |f_t| <= mu f_n rather than a pyramid) with ``impratio`` 10,
which makes the friction rows stiffer than the normal one, as MuJoCo's documentation suggests with elliptic
cones to reduce slip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.core.contact import FORCE_ROWS
from rbd_deriv.exceptions import InputError

#: Contact kinds: a point foot (one sphere) or a flat sole (four spheres).
KINDS = tuple(FORCE_ROWS)

#: Contact reference (time constant [s], damping ratio), for every geom of the ground and the robot.
SOLREF = (0.005, 1.0)
#: Contact impedance (d0, dwidth, width [m], midpoint, power).
SOLIMP = (0.99, 0.99, 0.001, 0.5, 2.0)
#: MuJoCo's ratio of frictional to normal constraint impedance (elliptic cones).
IMPRATIO = 10.0
#: Friction-cone check of a foot's force: |f_t| > mu f_n + CONE_TOLERANCE * max(1, |f|) [N] counts a violation.
CONE_TOLERANCE = 1e-6
#: A sole's center of pressure on the edge of its rectangle: at this fraction of the half-length or half-width
#: or beyond, the sole is carried by one edge or one corner (the others off the floor): it starts to tip.
COP_EDGE = 0.99

_AXES = np.arange(3)

#: Collision bits: the floor collides with the robot's geoms, the robot's geoms not with each other.
_FLOOR_CONTYPE, _FLOOR_CONAFFINITY = 1, 0
_ROBOT_CONTYPE, _ROBOT_CONAFFINITY = 0, 1


@dataclass(frozen=True)
class Ground:
    """The floor, the feet and the friction.

    Attributes:
        contact_frames: Frames of the model (links or joints) that touch the floor.
        contact_kinds: One of :data:`KINDS` per frame, or empty: every contact is a point foot.
        foot_radius: Radius of the foot spheres [m].
        sole_size: (length, width) of a sole's rectangle [m], for the ``"frame"`` contacts.
        friction: Coulomb coefficient mu of the feet on the floor (also of the fall detectors).
        soles: Empty: each contact frame is a link or a joint of the URDF. Else one
            :class:`rbd_deriv.core.soles.Sole` per contact frame, taken from a foot's collision geometry: the
            frame is the sole's (``Sole.frame``, added to the model by :func:`rbd_deriv.core.soles.add_soles`),
            fixed to its link at its placement.

    Raises:
        InputError: no frame, a repeated frame, kinds that do not match, a radius, sizes or mu that is not a
            positive finite number, soles that are not the contact frames'.
    """

    contact_frames: Tuple[str, ...]
    contact_kinds: Tuple[str, ...] = ()
    foot_radius: float = 0.02
    sole_size: Tuple[float, float] = (0.2, 0.1)
    friction: float = 1.0
    soles: Tuple[Any, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        frames = tuple(str(frame) for frame in self.contact_frames)
        kinds = tuple(str(kind) for kind in self.contact_kinds) or ("point",) * len(frames)
        if not frames or len(set(frames)) != len(frames):
            raise InputError(f"contact_frames must name at least one frame, each once, got {list(frames)}")
        if len(kinds) != len(frames) or any(kind not in KINDS for kind in kinds):
            raise InputError(f"contact_kinds must give one of {KINDS} per contact frame or be empty, got {list(kinds)}")
        size = tuple(float(x) for x in np.ravel(self.sole_size))
        numbers = {"foot_radius": float(self.foot_radius), "friction": float(self.friction)}
        if len(size) != 2:
            raise InputError(f"sole_size must be (length, width) [m], got {list(size)}")
        for name, value in {**numbers, "sole_size": min(size)}.items():
            if not (math.isfinite(value) and value > 0.0):
                raise InputError(f"{name} must be a positive finite number, got {value!r}")
        soles = tuple(self.soles)
        if soles and [sole.frame for sole in soles] != list(frames):
            raise InputError(f"soles {[sole.frame for sole in soles]} are not those of the contact frames "
                             f"{list(frames)}")
        object.__setattr__(self, "soles", soles)
        object.__setattr__(self, "contact_frames", frames)
        object.__setattr__(self, "contact_kinds", kinds)
        object.__setattr__(self, "sole_size", size)
        object.__setattr__(self, "foot_radius", numbers["foot_radius"])
        object.__setattr__(self, "friction", numbers["friction"])

    def sphere_centers(self, kind: str) -> np.ndarray:
        """Centres (k, 3) [m] of one foot's spheres in its frame: 1 for a point foot, 4 for a sole."""
        if kind == "point":
            return np.zeros((1, 3))
        length, width = self.sole_size
        return np.array([[sx * length / 2, sy * width / 2, self.foot_radius] for sx in (1, -1) for sy in (1, -1)])


def rest_on_floor(model: Any, q: np.ndarray, ground: Ground) -> np.ndarray:
    """q (nq,) with the base's height changed so that the lowest foot sphere touches the floor (the base's
    orientation, x, y and the joints as given)."""
    q = np.array(q, dtype=float)
    data = model.create_data()
    rd.forward_kinematics(model, data, q)
    lowest = math.inf
    for frame, kind in zip(ground.contact_frames, ground.contact_kinds):
        placement = rd.frame_placement(model, data, frame)
        centers = placement[:3, :3] @ ground.sphere_centers(kind).T + placement[:3, 3:4]
        lowest = min(lowest, float(centers[2].min()) - ground.foot_radius)
    q[2] -= lowest
    return q


def initial_configuration(model: Any, joint_positions: Any, base_pose: Any = (0.0,),
                          ground: Optional[Ground] = None) -> np.ndarray:
    """A robot's q (nq,) from its actuated joints' positions and, on a floating base, its base's pose.

    Args:
        model: The model.
        joint_positions: One value for every actuated joint, or one per actuated joint in model order [rad, m].
        base_pose: Floating base: x y z [m] qx qy qz qw, or one value (any): upright above the origin, with its
            lowest foot sphere on the floor when there is a ``ground`` (else at z = 0).
        ground: The feet, for the resting height.

    Raises:
        InputError: Wrong numbers of values.
    """
    actuated = model.actuated_joint_names
    joints = np.asarray(joint_positions, dtype=float).ravel()
    if joints.size == 1:
        joints = np.full(len(actuated), float(joints[0]))
    if joints.size != len(actuated):
        raise InputError(f"{joints.size} initial joint positions; the robot has {len(actuated)} actuated joints")
    q = rd.neutral(model)
    for name, value in zip(actuated, joints):
        q[model.idx_q[name]] = value
    if not model.has_floating_base:
        return q
    base = np.asarray(base_pose, dtype=float).ravel()
    if base.size == 7:
        q[0:7] = base
        return q
    if base.size != 1:
        raise InputError(f"the initial base pose needs x y z qx qy qz qw (7 values) or one, got {base.size}")
    return q if ground is None else rest_on_floor(model, q, ground)


def _set_contact(geom: Any, friction: float) -> None:
    geom.condim = 3
    geom.friction = [friction, 0.005, 0.0001]
    geom.solref = list(SOLREF)
    geom.solimp = list(SOLIMP)
    geom.contype, geom.conaffinity = _ROBOT_CONTYPE, _ROBOT_CONAFFINITY
    geom.mass = 0.0  # the URDF's inertias stay the bodies' only mass
    geom.group = 3


def trunk_box(mass: float, principal_inertia: np.ndarray) -> np.ndarray:
    """Half-sizes (3,) [m] of the uniform box of this mass [kg] and principal inertia (3,) [kg m^2].

    A box of half-sizes (a, b, c) has I_x = m (b^2 + c^2) / 3 and so on, hence a^2 = 3 (I_y + I_z - I_x) / (2 m).
    A principal inertia at the triangle inequality's limit (a flat body) gets 1 mm.
    """
    ix, iy, iz = principal_inertia
    squares = 1.5 / mass * np.array([iy + iz - ix, ix + iz - iy, ix + iy - iz])
    return np.sqrt(np.maximum(squares, 1e-6))


def add_ground(spec: Any, ground: Ground, foot_bodies: Sequence[str], root_body: str, root_mass: float,
               root_inertia: np.ndarray, root_ipos: np.ndarray, root_iquat: np.ndarray) -> None:
    """Add the floor, the feet and the fall detectors to a MuJoCo ``MjSpec`` of the robot.

    Args:
        spec: The robot's spec (compiled later by the caller).
        ground: The settings.
        foot_bodies: The spec's body of each contact frame (the frame's link, or its sole's), one per frame.
        root_body: The base's body; root_mass [kg], root_inertia (3,) [kg m^2] principal, root_ipos (3,) [m]
            and root_iquat (4,) (w, x, y, z): its inertia as MuJoCo compiled it, for the trunk detector.
    """
    import mujoco

    spec.option.cone = int(mujoco.mjtCone.mjCONE_ELLIPTIC)
    spec.option.impratio = IMPRATIO
    floor = spec.worldbody.add_geom()
    floor.name = "floor"
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0.0, 0.0, 1.0]
    _set_contact(floor, ground.friction)
    floor.contype, floor.conaffinity = _FLOOR_CONTYPE, _FLOOR_CONAFFINITY
    bodies = {body.name: body for body in spec.bodies}
    for index, (body_name, kind) in enumerate(zip(foot_bodies, ground.contact_kinds)):
        placement = ground.soles[index].placement if ground.soles else np.eye(4)
        for corner, center in enumerate(ground.sphere_centers(kind)):
            geom = bodies[body_name].add_geom()
            geom.name = f"foot{index}_{corner}"
            geom.type = mujoco.mjtGeom.mjGEOM_SPHERE
            geom.size = [ground.foot_radius, 0.0, 0.0]
            geom.pos = placement[:3, :3] @ center + placement[:3, 3]
            _set_contact(geom, ground.friction)
    trunk = bodies[root_body].add_geom()
    trunk.name = "detector_trunk"
    trunk.type = mujoco.mjtGeom.mjGEOM_BOX
    trunk.size = trunk_box(root_mass, root_inertia)
    trunk.pos, trunk.quat = root_ipos, root_iquat
    _set_contact(trunk, ground.friction)
    feet = set(foot_bodies)
    for body in spec.bodies:
        parent = body.parent
        if body.name in feet or parent is None or parent.name not in bodies or parent.name == "world":
            continue
        if np.linalg.norm(body.pos) < 1e-9:
            continue
        limb = parent.add_geom()
        limb.name = f"detector_{body.name}"
        limb.type = mujoco.mjtGeom.mjGEOM_CAPSULE
        limb.fromto = [0.0, 0.0, 0.0, *body.pos]
        limb.size = [ground.foot_radius / 2, 0.0, 0.0]
        _set_contact(limb, ground.friction)


class GroundContacts:
    """Reads the compiled model's contacts: forces on each foot, which feet touch, whether a detector does.

    Args:
        mj_model: The compiled MuJoCo model holding the geoms of :func:`add_ground`.
        ground: The settings it was built with.
    """

    def __init__(self, mj_model: Any, ground: Ground) -> None:
        import mujoco

        self.ground = ground
        self.floor = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
        # Which foot each geom belongs to: -1 for a fall detector, -2 for anything else.
        self.foot_of_geom = np.full(mj_model.ngeom, -2, dtype=np.int64)
        corner_of_geom = np.zeros(mj_model.ngeom, dtype=np.int64)
        for geom in range(mj_model.ngeom):
            name = mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_GEOM, geom) or ""
            if name.startswith("foot"):
                foot, corner = name[4:].split("_")
                self.foot_of_geom[geom], corner_of_geom[geom] = int(foot), int(corner)
            elif name.startswith("detector_"):
                self.foot_of_geom[geom] = -1
        self._foot_of, self._corner_of = self.foot_of_geom.tolist(), corner_of_geom.tolist()
        #: (nc,) whether each contact is a sole, and whether any is; (4, 2) [m] a sole's corners in its frame (x, y);
        #: (2,) [m] its half length and width.
        self.is_sole = np.array([kind == "frame" for kind in ground.contact_kinds])
        self.has_soles = bool(self.is_sole.any())
        self.corners = ground.sphere_centers("frame")[:, :2]
        self.half_sole = 0.5 * np.asarray(ground.sole_size)
        #: (nc, 4) [N] the normal force on each corner of each sole at the last :meth:`read` (0 on point feet).
        self.corner_forces = np.zeros((len(self.is_sole), 4))

    def read(self, mj_model: Any, mj_data: Any) -> Tuple[np.ndarray, np.ndarray, bool]:
        """(forces (nc, 3) [N] the floor exerts on each foot in the world frame, summed over the foot's spheres;
        touching (nc,) whether each foot is in contact with the floor; whether a fall detector or any geom other
        than a foot touches the floor)."""
        nc = len(self.ground.contact_frames)
        forces, touching = np.zeros((nc, 3)), np.zeros(nc, dtype=bool)
        self.corner_forces[:] = 0.0
        count = mj_data.ncon
        if count == 0:
            return forces, touching, False
        contact = mj_data.contact
        # A handful of contacts: plain Python over lists beats numpy's per-call cost here.
        geom1, geom2, floor, foot_of_geom = contact.geom1.tolist(), contact.geom2.tolist(), self.floor, self._foot_of
        rows, feet, corners, signs = [], [], [], []
        body_on_floor = False
        for i in range(count):
            # The force is the one geom1 exerts on geom2: on the foot when the foot is geom2.
            if geom1[i] == floor:
                robot, sign = geom2[i], 1.0
            elif geom2[i] == floor:
                robot, sign = geom1[i], -1.0
            else:
                continue
            foot = foot_of_geom[robot]
            if foot < 0:
                body_on_floor = True
            else:
                rows.append(i)
                feet.append(foot)
                corners.append(self._corner_of[robot])
                signs.append(sign)
        if rows:
            # Every contact here has condim 3 on an elliptic cone: its three constraint forces are the force
            # itself in the contact frame (normal from geom1 to geom2, two tangents), whose rows are those axes
            # in the world.
            local = mj_data.efc_force[contact.efc_address[rows][:, None] + _AXES]
            world = np.einsum("kij,ki->kj", contact.frame[rows].reshape(-1, 3, 3), local)
            for force, normal, foot, corner, sign in zip(world, local[:, 0], feet, corners, signs):
                forces[foot] += sign * force
                touching[foot] = True
                if self.is_sole[foot]:
                    self.corner_forces[foot, corner] += normal
        return forces, touching, body_on_floor

    def centers_of_pressure(self) -> np.ndarray:
        """(nc, 2) [m] each sole's center of pressure at the last :meth:`read`, in its frame (x, y): its corners
        weighted by their normal forces; NaN for a point foot or a sole that carries nothing."""
        total = self.corner_forces.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            cop = self.corner_forces @ self.corners / total[:, None]
        cop[~(self.is_sole & (total > 0.0))] = np.nan
        return cop

    def soles_on_edge(self) -> np.ndarray:
        """(nc,) whether each sole's center of pressure is on the edge of its rectangle (:data:`COP_EDGE`): the
        sole carried by one edge or one corner. False for point feet and soles off the floor."""
        with np.errstate(invalid="ignore"):
            return (np.abs(self.centers_of_pressure()) >= COP_EDGE * self.half_sole).any(axis=1)

    def cone_violations(self, forces: np.ndarray) -> np.ndarray:
        """(nc,) whether each foot's force (world, the floor's normal +z) leaves the friction cone."""
        tangential = np.hypot(forces[:, 0], forces[:, 1])
        tolerance = CONE_TOLERANCE * np.maximum(1.0, np.linalg.norm(forces, axis=1))
        return tangential > self.ground.friction * forces[:, 2] + tolerance


__all__ = ["CONE_TOLERANCE", "COP_EDGE", "Ground", "GroundContacts", "IMPRATIO", "KINDS", "SOLIMP", "SOLREF",
           "add_ground", "initial_configuration", "rest_on_floor", "trunk_box"]
