"""Pinocchio as an oracle: the same robot, our arrays in and out.

:class:`PinocchioBridge` builds the Pinocchio model that corresponds to
``rbd_deriv.load_urdf(source, floating_base, gravity)`` and evaluates
Pinocchio's algorithms on configurations written in this package's layout.

The only layout difference is the continuous joint: this package stores one
angle (what ``sensor_msgs/JointState`` reports) while Pinocchio stores
``(cos, sin)``. Velocities, accelerations, torques and every ``nv`` sized
derivative share the same layout, which :meth:`PinocchioBridge.check_model`
verifies joint by joint.

Only the kinematic/dynamic model is built (no geometry), so mesh paths such as
``package://example-robot-data/...`` are never resolved.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pinocchio as pin

if TYPE_CHECKING:
    from rbd_deriv.testing.reference import TreeArrays

__all__ = ["LayoutMismatchError", "PinocchioBridge", "symmetrize_upper"]

UrdfSource = Union[str, os.PathLike]


class LayoutMismatchError(AssertionError):
    """Our model and Pinocchio's disagree on joint order, names or sizes.

    An ``AssertionError`` so that a test using the bridge fails (rather than
    errors) when the library under test orders joints differently.
    """


def symmetrize_upper(matrix: np.ndarray) -> np.ndarray:
    """Return the full symmetric matrix whose upper triangle is that of ``matrix``.

    Some Pinocchio versions fill only the upper triangle of M and Minv.
    """
    upper = np.triu(matrix)
    return upper + np.triu(matrix, 1).T


def _is_xml(source: UrdfSource) -> bool:
    return isinstance(source, str) and source.lstrip().startswith("<")


class PinocchioBridge:
    """Pinocchio model of a URDF plus conversions to and from our layout.

    Args:
        source: URDF file path or URDF XML text.
        floating_base: add a free-flyer root joint named ``root_joint``.
        gravity: gravity acceleration [m/s^2], (3,) linear or (6,) spatial
            ``[linear, angular]``; ``None`` keeps ``[0, 0, -9.81]``.
        locked: {joint name: position [rad or m]}: Pinocchio's reduced model (``buildReducedModel``), those
            joints fixed at those positions.

    Attributes:
        model, data: the Pinocchio model and its workspace.
        nq, nv: our configuration size (one per continuous joint) and Pinocchio's nv.
        joint_names: movable joints in Pinocchio order (universe excluded).
        idx_q, idx_v, nq_joint, nv_joint: our layout, by joint name.
    """

    def __init__(
        self,
        source: UrdfSource,
        floating_base: bool = False,
        gravity: Optional[Sequence[float]] = None,
        locked: Optional[Dict[str, float]] = None,
    ) -> None:
        root = pin.JointModelFreeFlyer()
        if _is_xml(source):
            self.model = pin.buildModelFromXML(source, root) if floating_base else pin.buildModelFromXML(source)
        else:
            path = str(Path(source))
            self.model = pin.buildModelFromUrdf(path, root) if floating_base else pin.buildModelFromUrdf(path)
        if gravity is not None:
            gravity = np.asarray(gravity, dtype=float).reshape(-1)
            linear = gravity[:3]
            angular = gravity[3:6] if gravity.size == 6 else np.zeros(3)
            self.model.gravity = pin.Motion(linear, angular)
        self.floating_base = floating_base
        self._build_layout()
        if locked:
            q = self.q_from_pin(pin.neutral(self.model))
            for name, value in locked.items():
                q[self.idx_q[name]] = value
            ids = sorted(self.model.getJointId(name) for name in locked)
            self.model = pin.buildReducedModel(self.model, ids, self.q_to_pin(q))
            self._build_layout()
        self.data = self.model.createData()

    # ------------------------------------------------------------------ layout
    def _build_layout(self) -> None:
        model = self.model
        self.joint_names: List[str] = [str(name) for name in list(model.names)[1:]]
        self.idx_q: Dict[str, int] = {}
        self.idx_v: Dict[str, int] = {}
        self.nq_joint: Dict[str, int] = {}
        self.nv_joint: Dict[str, int] = {}
        self._pin_idx_q: Dict[str, int] = {}
        self.continuous_joints: List[str] = []
        offset = 0
        for joint_id, name in enumerate(self.joint_names, start=1):
            joint = model.joints[joint_id]
            # A joint whose configuration has one more coordinate than its
            # velocity is stored on the unit circle: a continuous joint.
            is_continuous = joint.nq == 2 and joint.nv == 1
            if is_continuous:
                self.continuous_joints.append(name)
            self.idx_q[name] = offset
            self.nq_joint[name] = 1 if is_continuous else joint.nq
            self.idx_v[name] = joint.idx_v
            self.nv_joint[name] = joint.nv
            self._pin_idx_q[name] = joint.idx_q
            offset += self.nq_joint[name]
        self.nq = offset
        self.nv = model.nv
        self.njoints = model.njoints

    def check_model(self, model: Any) -> None:
        """Raise :class:`LayoutMismatchError` unless ``model`` (ours) has our layout.

        Compares joint names and order, per-joint nq/nv and their offsets,
        total sizes and the number of joints.
        """
        problems = []
        ours = list(model.joint_names)
        if ours != self.joint_names:
            problems.append(f"joint order differs: ours {ours} vs pinocchio {self.joint_names}")
            if sorted(ours) == sorted(self.joint_names):
                problems.append(
                    "same joints in another order: Pinocchio's URDF reader (urdfdom) visits the child"
                    " joints of a link sorted by joint name, not in document order"
                )
        else:
            for name in ours:
                pairs = {
                    "idx_q": (model.idx_q[name], self.idx_q[name]),
                    "idx_v": (model.idx_v[name], self.idx_v[name]),
                    "nq": (model.nq_joint[name], self.nq_joint[name]),
                    "nv": (model.nv_joint[name], self.nv_joint[name]),
                }
                for field, (mine, theirs) in pairs.items():
                    if int(mine) != int(theirs):
                        problems.append(f"joint {name!r}: {field} ours {mine} vs pinocchio {theirs}")
        for field, mine, theirs in (
            ("nq", model.nq, self.nq),
            ("nv", model.nv, self.nv),
            ("njoints", model.njoints, self.njoints),
        ):
            if int(mine) != int(theirs):
                problems.append(f"{field}: ours {mine} vs pinocchio {theirs}")
        if problems:
            raise LayoutMismatchError("; ".join(problems))

    @classmethod
    def for_model(cls, model: Any, source: UrdfSource) -> "PinocchioBridge":
        """Bridge for our ``model`` loaded from ``source``; checks the layout agrees."""
        bridge = cls(source, floating_base=bool(model.has_floating_base), gravity=np.asarray(model.gravity))
        bridge.check_model(model)
        return bridge

    def joints_moving_no_inertia(self) -> set:
        """Names of the joints whose whole subtree has no mass and no rotational inertia: M is singular along
        them (unless they have an armature)."""
        model = self.model
        names = set()
        for j in range(1, model.njoints):
            if all(model.inertias[k].mass == 0.0 and not np.any(model.inertias[k].inertia)
                   for k in model.subtrees[j]):
                names.add(str(model.names[j]))
        return names

    # ------------------------------------------------------------ conversions
    def q_to_pin(self, q: np.ndarray) -> np.ndarray:
        """Our configuration (nq,) -> Pinocchio's (pin nq,); angle -> (cos, sin)."""
        q = np.asarray(q, dtype=float)
        if q.shape != (self.nq,):
            raise ValueError(f"q must have shape ({self.nq},), got {q.shape}")
        q_pin = np.empty(self.model.nq)
        for name in self.joint_names:
            start, size, pin_start = self.idx_q[name], self.nq_joint[name], self._pin_idx_q[name]
            if name in self.continuous_joints:
                q_pin[pin_start] = np.cos(q[start])
                q_pin[pin_start + 1] = np.sin(q[start])
            else:
                q_pin[pin_start:pin_start + size] = q[start:start + size]
        return q_pin

    def q_from_pin(self, q_pin: np.ndarray) -> np.ndarray:
        """Pinocchio configuration -> ours; (cos, sin) -> angle in (-pi, pi]."""
        q_pin = np.asarray(q_pin, dtype=float)
        q = np.empty(self.nq)
        for name in self.joint_names:
            start, size, pin_start = self.idx_q[name], self.nq_joint[name], self._pin_idx_q[name]
            if name in self.continuous_joints:
                q[start] = np.arctan2(q_pin[pin_start + 1], q_pin[pin_start])
            else:
                q[start:start + size] = q_pin[pin_start:pin_start + size]
        return q

    def fext_to_pin(self, fext: Optional[np.ndarray]) -> Optional[List[Any]]:
        """Our fext (njoints, 6) [linear N, angular N m] -> list of ``pin.Force``."""
        if fext is None:
            return None
        fext = np.asarray(fext, dtype=float)
        if fext.shape != (self.njoints, 6):
            raise ValueError(f"fext must have shape ({self.njoints}, 6), got {fext.shape}")
        return [pin.Force(row[:3].copy(), row[3:].copy()) for row in fext]

    def random_configuration(self, rng: np.random.Generator) -> np.ndarray:
        """Random configuration in our layout: limits where finite, else [-pi, pi]
        for angles and [-1, 1] m for free-flyer positions; uniform unit quaternion."""
        q = np.empty(self.nq)
        lower, upper = self.model.lowerPositionLimit, self.model.upperPositionLimit
        for joint_id, name in enumerate(self.joint_names, start=1):
            start, pin_start = self.idx_q[name], self._pin_idx_q[name]
            joint = self.model.joints[joint_id]
            if joint.nq == 7:
                q[start:start + 3] = rng.uniform(-1.0, 1.0, 3)
                quaternion = rng.standard_normal(4)
                q[start + 3:start + 7] = quaternion / np.linalg.norm(quaternion)
            elif name in self.continuous_joints:
                q[start] = rng.uniform(-np.pi, np.pi)
            else:
                low, high = lower[pin_start], upper[pin_start]
                if not (np.isfinite(low) and np.isfinite(high) and high - low < 1e6):
                    low, high = -np.pi, np.pi
                q[start] = rng.uniform(low, high)
        return q

    # ---------------------------------------------------------------- algorithms
    def _arguments(self, q: np.ndarray, v: np.ndarray, u: np.ndarray, fext: Optional[np.ndarray]) -> list:
        """Pinocchio's (model, data, q, v, u[, forces]) argument list."""
        arguments = [self.model, self.data, self.q_to_pin(q), _vec(v), _vec(u)]
        if fext is not None:
            arguments.append(self.fext_to_pin(fext))
        return arguments

    def rnea(self, q: np.ndarray, v: np.ndarray, a: np.ndarray, fext: Optional[np.ndarray] = None) -> np.ndarray:
        """Inverse dynamics tau (nv,) [N m or N]."""
        return np.array(pin.rnea(*self._arguments(q, v, a, fext)))

    def crba(self, q: np.ndarray) -> np.ndarray:
        """Joint-space inertia matrix M (nv, nv), full and symmetric."""
        return symmetrize_upper(np.array(pin.crba(self.model, self.data, self.q_to_pin(q))))

    def aba(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, fext: Optional[np.ndarray] = None) -> np.ndarray:
        """Forward dynamics ddq (nv,) [rad/s^2 or m/s^2]."""
        return np.array(pin.aba(*self._arguments(q, v, tau, fext)))

    def minverse(self, q: np.ndarray) -> np.ndarray:
        """Inverse of the joint-space inertia matrix (nv, nv), full and symmetric."""
        return symmetrize_upper(np.array(pin.computeMinverse(self.model, self.data, self.q_to_pin(q))))

    def nonlinear_effects(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Coriolis, centrifugal and gravity torques h (nv,)."""
        return np.array(pin.nonLinearEffects(self.model, self.data, self.q_to_pin(q), _vec(v)))

    def gravity_torques(self, q: np.ndarray) -> np.ndarray:
        """Gravity torques g (nv,)."""
        return np.array(pin.computeGeneralizedGravity(self.model, self.data, self.q_to_pin(q)))

    def rnea_derivatives(
        self, q: np.ndarray, v: np.ndarray, a: np.ndarray, fext: Optional[np.ndarray] = None
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dtau_dq, dtau_dv, M), each (nv, nv); q derivative in the tangent space."""
        dtau_dq, dtau_dv, mass = pin.computeRNEADerivatives(*self._arguments(q, v, a, fext))
        return np.array(dtau_dq), np.array(dtau_dv), symmetrize_upper(np.array(mass))

    def aba_derivatives(
        self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, fext: Optional[np.ndarray] = None
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dddq_dq, dddq_dv, Minv), each (nv, nv); q derivative in the tangent space."""
        dddq_dq, dddq_dv, minv = pin.computeABADerivatives(*self._arguments(q, v, tau, fext))
        return np.array(dddq_dq), np.array(dddq_dv), symmetrize_upper(np.array(minv))

    def gravity_derivatives(self, q: np.ndarray) -> np.ndarray:
        """d g(q) / dq (nv, nv) of the gravity torques, in the tangent space."""
        return np.array(pin.computeGeneralizedGravityDerivatives(self.model, self.data, self.q_to_pin(q)))

    def joint_placements(self, q: np.ndarray) -> np.ndarray:
        """World placement of every joint frame (njoints, 4, 4), row 0 the universe."""
        pin.forwardKinematics(self.model, self.data, self.q_to_pin(q))
        return np.array([placement.homogeneous for placement in self.data.oMi])

    def frame_names(self) -> List[str]:
        """Names of all Pinocchio frames (links, joints, fixed joints)."""
        return [str(frame.name) for frame in self.model.frames]

    def frame_placement(self, q: np.ndarray, name: str) -> np.ndarray:
        """World placement (4, 4) of the frame ``name``.

        Pinocchio has one frame per link and per joint; when a joint and a link
        share a name the link (BODY) frame wins, as it is what a user means.
        """
        frame_id = self._frame_id(name)
        pin.framesForwardKinematics(self.model, self.data, self.q_to_pin(q))
        return np.array(self.data.oMf[frame_id].homogeneous)

    def _frame_id(self, name: str) -> int:
        matches = [i for i, frame in enumerate(self.model.frames) if frame.name == name]
        if not matches:
            raise KeyError(f"pinocchio has no frame named {name!r}")
        bodies = [i for i in matches if self.model.frames[i].type == pin.FrameType.BODY]
        return (bodies or matches)[0]

    def tree_arrays(self) -> "TreeArrays":
        """Pinocchio's model as the description read by :mod:`rbd_deriv.testing.reference`.

        Lets the reference be checked against Pinocchio without this package's loader.
        """
        from rbd_deriv.testing.reference import TreeArrays
        from rbd_deriv.core.urdf import JOINT_FREEFLYER, JOINT_PRISMATIC, JOINT_REVOLUTE

        model = self.model
        data = model.createData()
        pin.forwardKinematics(model, data, pin.neutral(model))
        njoints = model.njoints
        joint_types = np.full(njoints, -1, dtype=int)
        joint_axes = np.zeros((njoints, 3))
        placements = np.tile(np.eye(4), (njoints, 1, 1))
        inertias = np.zeros((njoints, 10))
        for joint_id in range(1, njoints):
            placements[joint_id] = model.jointPlacements[joint_id].homogeneous
            inertia = model.inertias[joint_id]
            rotational = inertia.inertia
            inertias[joint_id] = [
                inertia.mass, *inertia.lever,
                rotational[0, 0], rotational[0, 1], rotational[0, 2],
                rotational[1, 1], rotational[1, 2], rotational[2, 2],
            ]
            subspace = np.asarray(data.joints[joint_id].S).reshape(6, -1)
            if subspace.shape[1] == 6:
                joint_types[joint_id] = JOINT_FREEFLYER
            elif np.allclose(subspace[3:, 0], 0.0):
                joint_types[joint_id] = JOINT_PRISMATIC
                joint_axes[joint_id] = subspace[:3, 0]
            else:
                joint_types[joint_id] = JOINT_REVOLUTE
                joint_axes[joint_id] = subspace[3:, 0]
        gravity = np.concatenate([model.gravity.linear, model.gravity.angular])
        return TreeArrays(
            joint_names=list(self.joint_names),
            parents=np.array(model.parents, dtype=int),
            joint_types=joint_types,
            joint_axes=joint_axes,
            joint_placements=placements,
            inertias=inertias,
            idx_q=dict(self.idx_q),
            idx_v=dict(self.idx_v),
            nq=self.nq,
            nv=self.nv,
            njoints=njoints,
            gravity=gravity,
        )

    # ------------------------------------------------------------ lie group
    def integrate(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """q (+) v in our layout (continuous angles wrapped to (-pi, pi])."""
        return self.q_from_pin(pin.integrate(self.model, self.q_to_pin(q), _vec(v)))

    def difference(self, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
        """Tangent vector (nv,) taking q0 to q1."""
        return np.array(pin.difference(self.model, self.q_to_pin(q0), self.q_to_pin(q1)))

    def dintegrate_dq(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """d integrate(q, v) / dq (nv, nv) in the tangent space."""
        return np.array(pin.dIntegrate(self.model, self.q_to_pin(q), _vec(v), pin.ArgumentPosition.ARG0))

    def dintegrate_dv(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """d integrate(q, v) / dv (nv, nv)."""
        return np.array(pin.dIntegrate(self.model, self.q_to_pin(q), _vec(v), pin.ArgumentPosition.ARG1))


def _vec(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=float)
