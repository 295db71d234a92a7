"""Model (immutable robot description) and Data (preallocated workspace).

A :class:`Model` holds the kinematic tree as the flat per-joint arrays ``mi`` and ``mf`` that the kernels read
(their columns: :mod:`rbd_deriv.core.layout`). A :class:`Data` holds one flat float64 array ``ws``; every
intermediate quantity and result is a named view into it (``data.tau``, ``data.M``, ``data.oMi``...),
allocated once. One Data per thread: the algorithms never write the Model (setting ``model.gravity`` does: do
it before sharing the model among threads).

Conventions are Pinocchio's: spatial vectors [linear, angular]; joints depth-first, the children of a link
sorted by joint name; free flyer ``root_joint`` with q = [x y z qx qy qz qw] and v = [linear, angular] in the
body frame. A continuous joint uses one angle (nq = 1).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from rbd_deriv.core.layout import (
    MF_ARMATURE,
    MF_AXIS,
    MF_COLS,
    MF_INERTIA,
    MF_POS,
    MF_ROT,
    MI_COLS,
    MI_IDX_Q,
    MI_IDX_V,
    MI_NJ,
    MI_NQ,
    MI_NQTOT,
    MI_NV,
    MI_NVTOT,
    MI_OFFSETS,
    MI_PARENT,
    MI_SUBTREE_END,
    MI_TYPE,
    MI_WORKSPACE,
    REGION_INDEX,
    region_sizes,
)
from rbd_deriv.core.urdf import (
    JOINT_FREEFLYER,
    JOINT_PRISMATIC,
    JOINT_REVOLUTE,
    TreeDescription,
    parse_urdf,
)
from rbd_deriv.exceptions import ModelError


class Model:
    """A kinematic tree with masses, ready for the algorithms. Build it with :func:`load_urdf`.

    Attributes:
        name: Robot name from the URDF.
        nq, nv: Sizes of the configuration and of the velocity (tangent space).
        njoints: Number of joints including the universe (joint 0).
        joint_names: Names of the movable joints in model order (depth-first).
        idx_q, idx_v: Joint name -> first index in q and in v.
        nq_joint, nv_joint: Joint name -> its number of configuration / velocity entries.
        parents: (njoints,) parent joint index (0 is the universe; universe row is 0).
        joint_types: (njoints,) JOINT_REVOLUTE, JOINT_PRISMATIC, JOINT_FREEFLYER; -1 for the universe.
        joint_axes: (njoints, 3) unit axis in the joint frame.
        joint_placements: (njoints, 4, 4) placement of each joint frame in its parent joint frame.
        inertias: (njoints, 10): mass [kg], com (3) in the joint frame [m], inertia about the com in joint axes
            [kg m^2] as Ixx Ixy Ixz Iyy Iyz Izz.
        continuous: (njoints,) True for continuous joints (no position limit, difference wraps to (-pi, pi]).
        lower_position_limit, upper_position_limit: (nq,) [rad or m], +-inf where the URDF gives none.
        velocity_limit, effort_limit: (nv,) [rad/s, m/s] and [N m, N], inf where the URDF gives none; the
            effort limits are the URDF's unless :meth:`set_actuator_limits` replaced them.
        urdf_effort_limit: (nv,) [N m, N] the URDF's effort limits.
        frame_names: Links and joints kept as frames (see :func:`rbd_deriv.frame_placement`).
        has_floating_base: True when a free flyer ``root_joint`` was added.
        armature: (nv,) rotor inertia reflected on each dof (settable, see the property).
    """

    def __init__(self, tree: TreeDescription, floating_base: bool, gravity=None) -> None:
        joints = tree.joints
        if not joints:
            raise ModelError("the robot has no movable joint")
        self.name = tree.name
        self.has_floating_base = bool(floating_base)
        nj = len(joints) + 1
        nq_of = {JOINT_REVOLUTE: 1, JOINT_PRISMATIC: 1, JOINT_FREEFLYER: 7}
        nv_of = {JOINT_REVOLUTE: 1, JOINT_PRISMATIC: 1, JOINT_FREEFLYER: 6}

        mi = np.zeros((nj, MI_COLS), dtype=np.int64)
        mf = np.zeros((nj, MF_COLS))
        iq = iv = 0
        for k, joint in enumerate(joints, start=1):
            mi[k, MI_TYPE] = joint.jtype
            mi[k, MI_PARENT] = joint.parent
            mi[k, MI_IDX_Q], mi[k, MI_IDX_V] = iq, iv
            mi[k, MI_NQ], mi[k, MI_NV] = nq_of[joint.jtype], nv_of[joint.jtype]
            iq += nq_of[joint.jtype]
            iv += nv_of[joint.jtype]
            mf[k, MF_ROT : MF_ROT + 9] = joint.placement[:3, :3].ravel()
            mf[k, MF_POS : MF_POS + 3] = joint.placement[:3, 3]
            mf[k, MF_AXIS : MF_AXIS + 3] = joint.axis
            I6 = joint.inertia
            mf[k, MF_INERTIA : MF_INERTIA + 10] = [I6[0, 0], I6[5, 1], I6[3, 2], I6[4, 0], I6[3, 3], I6[3, 4], I6[3, 5],
                                  I6[4, 4], I6[4, 5], I6[5, 5]]
        # Depth-first numbering makes the subtree of k the joints k..end with parents inside it.
        subtree_end = mi[:, MI_IDX_V] + mi[:, MI_NV]
        for k in range(nj - 1, 0, -1):
            parent = mi[k, MI_PARENT]
            if parent > 0:
                subtree_end[parent] = max(subtree_end[parent], subtree_end[k])
        mi[1:, MI_SUBTREE_END] = subtree_end[1:]
        self.nq, self.nv, self.njoints = iq, iv, nj

        mi[0, MI_NJ], mi[0, MI_NVTOT], mi[0, MI_NQTOT] = nj, iv, iq
        offset = 0
        for k, (_, _, size) in enumerate(region_sizes(nj, iv, iq)):
            mi[0, MI_OFFSETS + k] = offset
            offset += size
        self.workspace_size = offset
        mi[0, MI_WORKSPACE] = offset
        self.mi, self.mf = mi, mf
        self.gravity = np.array([0.0, 0.0, -9.81, 0.0, 0.0, 0.0]) if gravity is None else gravity

        self.joint_names = [joint.name for joint in joints]
        self.idx_q = {j.name: int(mi[k, MI_IDX_Q]) for k, j in enumerate(joints, start=1)}
        self.idx_v = {j.name: int(mi[k, MI_IDX_V]) for k, j in enumerate(joints, start=1)}
        self.nq_joint = {j.name: int(mi[k, MI_NQ]) for k, j in enumerate(joints, start=1)}
        self.nv_joint = {j.name: int(mi[k, MI_NV]) for k, j in enumerate(joints, start=1)}
        self.joint_index = {j.name: k for k, j in enumerate(joints, start=1)}
        self._actuated_joint_names = tuple(j.name for j in joints if j.jtype != JOINT_FREEFLYER)
        self.continuous = np.array([False] + [j.jtype == JOINT_REVOLUTE and j.continuous for j in joints])
        self.continuous.setflags(write=False)
        self._set_limits(joints)
        self._set_public_arrays(joints)
        self.neutral_configuration = np.zeros(self.nq)
        for k, joint in enumerate(joints, start=1):
            if joint.jtype == JOINT_FREEFLYER:
                self.neutral_configuration[mi[k, MI_IDX_Q] + 6] = 1.0
        self.neutral_configuration.setflags(write=False)
        self.frames = {frame.name: (frame.parent, frame.placement.copy()) for frame in tree.frames}
        self.frame_names = list(self.frames)
        #: Frames added after loading (:meth:`add_frame`): name -> (the frame it is fixed to, its placement there).
        self.added_frames: dict = {}
        for frame in self.frames.values():
            frame[1].setflags(write=False)
        self._armature = np.zeros(self.nv)
        self._armature.setflags(write=False)
        for array in (self.mi, self.mf):
            array.setflags(write=False)

    @property
    def actuated_joint_names(self) -> tuple:
        """Names of the movable joints but the free flyer, in model order: the joints a joint_states
        message reports and a torque command drives (read-only)."""
        return self._actuated_joint_names

    @property
    def gravity(self) -> np.ndarray:
        """Gravity acceleration (6,) [linear m/s^2, angular rad/s^2], world frame. Settable."""
        g = self.mf[0, :6].copy()
        g.setflags(write=False)
        return g

    @gravity.setter
    def gravity(self, value) -> None:
        g = np.asarray(value, dtype=float).reshape(-1)
        if g.shape == (3,):
            g = np.concatenate([g, np.zeros(3)])
        if g.shape != (6,) or not np.all(np.isfinite(g)):
            raise ModelError(f"gravity must be 3 or 6 finite numbers, got {value!r}")
        writable = self.mf.flags.writeable
        self.mf.setflags(write=True)
        self.mf[0, :6] = g
        self.mf.setflags(write=writable)

    @property
    def armature(self) -> np.ndarray:
        """Armature (nv,) [kg m^2 for a revolute dof, kg for a prismatic one]: the rotor inertia reflected on
        each dof, added to the diagonal of M (Pinocchio's ``model.armature``, MuJoCo's joint armature). Zero
        after loading. Every algorithm honours it: RNEA adds armature * a, CRBA its diagonal, ABA, M^-1 and
        what uses them the regularized M. A joint that moves bodies with no inertia along its motion (a
        massless finger) makes M singular unless it has an armature. Settable: nv finite numbers >= 0
        (ModelError otherwise); set it before sharing the model among threads."""
        return self._armature

    @armature.setter
    def armature(self, value) -> None:
        try:
            armature = np.array(value, dtype=float).reshape(-1)
        except (TypeError, ValueError) as err:
            raise ModelError(f"armature must be {self.nv} numbers, got {value!r} ({err})") from None
        if armature.shape != (self.nv,):
            raise ModelError(f"armature must be {self.nv} numbers (one per dof), got {armature.size}")
        bad = np.flatnonzero(~(np.isfinite(armature) & (armature >= 0.0)))
        if bad.size:
            joint = self._joint_of_dof(int(bad[0]))
            raise ModelError(f"armature of joint {joint!r} (dof {bad[0]}) must be finite and >= 0, got "
                             f"{armature[bad[0]]}", joint)
        writable = self.mf.flags.writeable
        self.mf.setflags(write=True)
        for k in range(1, self.njoints):
            iv, nvj = self.mi[k, MI_IDX_V], self.mi[k, MI_NV]
            self.mf[k, MF_ARMATURE : MF_ARMATURE + nvj] = armature[iv : iv + nvj]
        self.mf.setflags(write=writable)
        armature.setflags(write=False)
        self._armature = armature

    def set_actuator_limits(self, limits) -> None:
        """Replace the URDF's effort limits of the actuated joints with the actuators' real ones.

        A URDF often carries a placeholder (example-robot-data's solo12 says 1000 N m where its drives give
        about 2.7 N m); every consumer of :attr:`effort_limit` (the MPC's torque box, its safe command, the
        simulator's saturation) then uses the real ones. :attr:`urdf_effort_limit` keeps the URDF's.

        Args:
            limits: [N m or N] empty: the URDF's; one value: every actuated joint; or one per actuated joint
                in model order (:attr:`actuated_joint_names`). Each finite, > 0, and at most the URDF's limit
                where the URDF gives a finite one.

        Raises:
            ModelError: another count of values, a value that is not finite or not > 0, or above the URDF's.
        """
        try:
            values = np.array(limits, dtype=float).reshape(-1)
        except (TypeError, ValueError) as err:
            raise ModelError(f"effort limits must be numbers, got {limits!r} ({err})") from None
        names = self._actuated_joint_names
        rows = np.array([self.idx_v[name] for name in names], dtype=np.int64)
        urdf = self.urdf_effort_limit[rows]
        if values.size == 0:
            values = urdf
        elif values.size == 1:
            values = np.full(len(names), values[0])
        elif values.size != len(names):
            raise ModelError(f"effort limits take one value or one per actuated joint ({len(names)}), got "
                             f"{values.size}")
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0.0)) | (values > urdf))
        if bad.size:
            name = names[int(bad[0])]
            raise ModelError(f"effort limit of joint {name!r} must be finite, > 0 and at most the URDF's "
                             f"{urdf[bad[0]]:g}, got {values[bad[0]]!r}", name)
        effort = self.urdf_effort_limit.copy()
        effort[rows] = values
        effort.setflags(write=False)
        self.effort_limit = effort

    def add_frame(self, name: str, parent: str, placement) -> None:
        """Add a frame fixed to an existing one (Pinocchio's ``addFrame``): a point of interest the URDF does not
        name, such as the centre of a foot's sole (:mod:`rbd_deriv.core.soles`).

        Args:
            name: The new frame's name, not yet one of :attr:`frame_names`.
            parent: The frame it is fixed to (one of :attr:`frame_names`).
            placement: (4, 4) homogeneous placement of the new frame in ``parent`` (a rotation and a translation
                [m]).

        Raises:
            ModelError: the name is taken, the parent unknown, or the placement not a rigid transform.
        """
        name = str(name)
        if name in self.frames:
            raise ModelError(f"a frame named {name!r} already exists", name)
        if parent not in self.frames:
            raise ModelError(f"no frame named {parent!r} to fix frame {name!r} to; frame_names lists them", name)
        X = np.array(placement, dtype=float)
        if X.shape != (4, 4) or not np.isfinite(X).all():
            raise ModelError(f"the placement of frame {name!r} must be a finite (4, 4) transform", name)
        R = X[:3, :3]
        if (np.abs(R @ R.T - np.eye(3)).max() > 1e-9 or abs(np.linalg.det(R) - 1.0) > 1e-9
                or np.abs(X[3] - [0.0, 0.0, 0.0, 1.0]).max() > 0.0):
            raise ModelError(f"the placement of frame {name!r} must be a rotation and a translation", name)
        joint, parent_placement = self.frames[parent]
        combined = parent_placement @ X
        combined.setflags(write=False)
        self.frames[name] = (joint, combined)
        self.frame_names.append(name)
        self.added_frames[name] = (parent, X)

    def _joint_of_dof(self, dof: int) -> str:
        for name in self.joint_names:
            if self.idx_v[name] <= dof < self.idx_v[name] + self.nv_joint[name]:
                return name
        raise IndexError(dof)

    def _set_limits(self, joints) -> None:
        lower = np.full(self.nq, -math.inf)
        upper = np.full(self.nq, math.inf)
        velocity = np.full(self.nv, math.inf)
        effort = np.full(self.nv, math.inf)
        for joint in joints:
            iq, iv = self.idx_q[joint.name], self.idx_v[joint.name]
            if joint.jtype != JOINT_FREEFLYER:
                lower[iq], upper[iq] = joint.lower, joint.upper
                velocity[iv], effort[iv] = joint.velocity, joint.effort
        self.lower_position_limit, self.upper_position_limit = lower, upper
        self.velocity_limit, self.effort_limit = velocity, effort
        self.urdf_effort_limit = effort
        for array in (lower, upper, velocity, effort):
            array.setflags(write=False)

    def _set_public_arrays(self, joints) -> None:
        nj = self.njoints
        self.parents = self.mi[:, MI_PARENT].copy()
        self.joint_types = self.mi[:, MI_TYPE].copy()
        self.parents[0], self.joint_types[0] = 0, -1  # row 0 of mi holds sizes, not a joint
        self.joint_axes = self.mf[:, MF_AXIS : MF_AXIS + 3].copy()
        self.joint_placements = np.tile(np.eye(4), (nj, 1, 1))
        self.inertias = np.zeros((nj, 10))
        for k in range(1, nj):
            self.joint_placements[k, :3, :3] = self.mf[k, MF_ROT : MF_ROT + 9].reshape(3, 3)
            self.joint_placements[k, :3, 3] = self.mf[k, MF_POS : MF_POS + 3]
            mass, hx, hy, hz, ixx, ixy, ixz, iyy, iyz, izz = self.mf[k, MF_INERTIA : MF_INERTIA + 10]
            com = np.array([hx, hy, hz]) / mass if mass > 0 else np.zeros(3)
            cx = np.array([[0.0, -com[2], com[1]], [com[2], 0.0, -com[0]], [-com[1], com[0], 0.0]])
            Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]]) + mass * cx @ cx
            self.inertias[k] = [mass, *com, Ic[0, 0], Ic[0, 1], Ic[0, 2], Ic[1, 1], Ic[1, 2], Ic[2, 2]]
        for array in (self.parents, self.joint_types, self.joint_axes, self.joint_placements, self.inertias):
            array.setflags(write=False)

    def create_data(self) -> "Data":
        """A new workspace for this model (one per thread)."""
        return Data(self)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, nq={self.nq}, nv={self.nv}, njoints={self.njoints})"


RESULTS = ("oMi", "tau", "ddq", "nle", "g", "M", "Minv", "dtau_dq", "dtau_dv", "dddq_dq", "dddq_dv", "A", "B",
           "x_next")
"""The regions that hold public results: read-only for the user, written by the kernels through
:meth:`Data.output`."""


class Data:
    """Preallocated workspace of a :class:`Model`: every intermediate and result, as views of ``ws``.

    Results are overwritten by the next call that computes them: copy() what you keep.
    Fields (world frame unless stated): ``oMi`` (njoints, 4, 4); ``ov``, ``oa``, ``of`` (njoints, 6);
    ``tau``, ``ddq``, ``nle``, ``g`` (nv,); ``M``, ``Minv`` (nv, nv); ``dtau_dq``, ``dtau_dv``,
    ``dddq_dq``, ``dddq_dv`` (nv, nv); ``A`` (2nv, 2nv); ``B`` (2nv, nv); ``x_next`` (nq + nv,).
    """

    @staticmethod
    def initialize(model: Model, ws: np.ndarray) -> None:
        """Put a zeroed workspace in its initial state: the universe placement oMi[0] is the identity."""
        offset = model.mi[0, MI_OFFSETS + REGION_INDEX["oMi"]]
        ws[offset : offset + 16 : 5] = 1.0

    def __init__(self, model: Model) -> None:
        self.ws = np.zeros(model.workspace_size)
        offset = 0
        for name, dims, size in region_sizes(model.njoints, model.nv, model.nq):
            view = self.ws[offset : offset + size].reshape(dims)
            offset += size
            if name.startswith("zero_"):  # they stay zero only if nobody writes them: private
                setattr(self, "_" + name, view)
                continue
            setattr(self, name, view)
            if name in RESULTS:
                # The kernels write a result through a private writable view; the public one is read-only.
                setattr(self, "_" + name, view)
                public = view.view()
                public.setflags(write=False)
                setattr(self, name, public)
        Data.initialize(model, self.ws)

    def output(self, name: str) -> np.ndarray:
        """The writable view of result ``name`` that a kernel takes as its output argument."""
        return getattr(self, "_" + name)


def load_urdf(path_or_xml: str, floating_base: bool = False, gravity=None,
              locked_joints: Mapping[str, float] | None = None) -> Model:
    """Build a :class:`Model` from a URDF.

    Args:
        path_or_xml: URDF file path, or the XML text itself (anything starting with ``<``).
        floating_base: Add a free-flyer joint ``root_joint`` (nq 7, nv 6) above the root link.
        gravity: (3,) or (6,) gravity [m/s^2]; default [0, 0, -9.81].
        locked_joints: {joint name: position [rad or m]}: a reduced model, those joints fixed at those
            positions (their bodies merged into their parents', their frames kept), as Pinocchio's
            ``buildReducedModel``.

    Raises:
        URDFError: unreadable or malformed description (syntax, missing file, loop, several roots).
        ModelError: unsupported joint type, zero axis, invalid mass or inertia. A moving body without mass
            loads: the algorithms that need M^-1 raise ModelError at call time where M is singular.
    """
    return Model(parse_urdf(path_or_xml, floating_base=floating_base, locked=locked_joints), floating_base, gravity)
