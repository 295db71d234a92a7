"""URDF -> kinematic tree description (pure Python, no numba).

Reads a URDF (file path or XML string) with urdf_parser_py and produces a :class:`TreeDescription`: the
movable joints in Pinocchio's order (depth-first from the root link; the children of a link sorted by joint
name, which is the order urdfdom hands them to Pinocchio, whatever their order in the document), fixed
joints merged into the body of their nearest movable ancestor, and frames for every link and joint. A
joint can be locked at a position: it is then fixed there (its motion folded into its placement), which
gives the reduced model Pinocchio's ``buildReducedModel`` builds.
:mod:`rbd_deriv.core.model` packs it into the arrays the kernels read.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Mapping

import numpy as np

from rbd_deriv.core import constants
from rbd_deriv.exceptions import ModelError, URDFError

JOINT_REVOLUTE = 0
JOINT_PRISMATIC = 1
JOINT_FREEFLYER = 2

#: Name of the free-flyer joint that ``floating_base=True`` adds above the root link.
FREE_FLYER_JOINT = "root_joint"


@dataclasses.dataclass
class JointDescription:
    """One movable joint and the body it carries.

    Attributes:
        name: Joint name (``root_joint`` for an added free flyer).
        jtype: JOINT_REVOLUTE, JOINT_PRISMATIC or JOINT_FREEFLYER.
        parent: Index of the parent joint (0 = universe; movable joints are numbered from 1).
        placement: (4, 4) placement of the joint frame in the parent joint frame at zero joint motion.
        axis: (3,) unit axis in the joint frame (unused by the free flyer).
        inertia: (6, 6) spatial inertia of the carried body in the joint frame, [linear, angular] order.
        lower, upper: Position limits [rad or m], +-inf where the URDF gives none.
        velocity, effort: Velocity [rad/s or m/s] and effort [N m or N] limits, inf where the URDF gives none.
    """

    name: str
    jtype: int
    parent: int
    placement: np.ndarray
    axis: np.ndarray
    inertia: np.ndarray
    lower: float = -math.inf
    upper: float = math.inf
    velocity: float = math.inf
    effort: float = math.inf
    continuous: bool = False


@dataclasses.dataclass
class FrameDescription:
    """A link or a joint kept for kinematics: rigidly attached to movable joint ``parent``."""

    name: str
    parent: int
    placement: np.ndarray  # (4, 4) in the parent joint frame


@dataclasses.dataclass
class TreeDescription:
    """A robot as a list of movable joints (universe excluded) and frames."""

    name: str
    joints: list
    frames: list


def transform_from_origin(xyz, rpy, element: str | None = None) -> np.ndarray:
    """Homogeneous transform (4, 4) from a URDF origin: translation [m], roll-pitch-yaw [rad] (fixed axes X, Y, Z).

    Raises:
        ModelError: a non-finite value (naming ``element``).
    """
    for values in (xyz, rpy):
        if values is not None and not all(math.isfinite(float(a)) for a in values):
            raise ModelError(f"{element or 'an origin'} has a non-finite origin {list(values)}", element)
    T = np.eye(4)
    if rpy is not None:
        r, p, y = (float(a) for a in rpy)
        cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
        T[:3, :3] = [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    if xyz is not None:
        T[:3, 3] = [float(a) for a in xyz]
    return T


def spatial_inertia(mass: float, com: np.ndarray, inertia_com: np.ndarray) -> np.ndarray:
    """Spatial inertia (6, 6) about the frame origin, [linear, angular] order.

    Args:
        mass: Mass [kg].
        com: (3,) centre of mass in the frame [m].
        inertia_com: (3, 3) rotational inertia about the centre of mass, frame axes [kg m^2].
    """
    cx = np.array([[0.0, -com[2], com[1]], [com[2], 0.0, -com[0]], [-com[1], com[0], 0.0]])
    I6 = np.zeros((6, 6))
    I6[:3, :3] = mass * np.eye(3)
    I6[:3, 3:] = -mass * cx
    I6[3:, :3] = mass * cx
    I6[3:, 3:] = inertia_com - mass * cx @ cx
    return I6


def transform_inertia(T: np.ndarray, I6: np.ndarray) -> np.ndarray:
    """Express spatial inertia ``I6`` (given in frame B) in frame A, where T = aMb (4, 4)."""
    R, p = T[:3, :3], T[:3, 3]
    px = np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])
    # Motion transform aXb in [linear, angular] order: [[R, px R], [0, R]].
    X = np.zeros((6, 6))
    X[:3, :3] = R
    X[:3, 3:] = px @ R
    X[3:, 3:] = R
    Xinv = np.linalg.inv(X)
    return Xinv.T @ I6 @ Xinv


def read_description(path_or_xml: str) -> str:
    """The URDF text of ``path_or_xml`` (XML text as is, else the file it names).

    Raises:
        URDFError: Neither text nor a path, an empty description, a missing file.
    """
    if not isinstance(path_or_xml, (str, os.PathLike)):
        raise URDFError(f"expected a URDF file path or an XML string, got {type(path_or_xml).__name__}")
    text = os.fspath(path_or_xml)
    if text.lstrip().startswith("<"):
        return text
    if not text.strip():
        raise URDFError("empty robot description")
    if not os.path.isfile(text):
        raise URDFError(f"URDF file not found: {text!r}")
    with open(text, encoding="utf-8") as stream:
        return stream.read()


def description_tree(path_or_xml: str) -> tuple[ElementTree.Element, Path]:
    """The ``<robot>`` element of a URDF (:func:`read_description`'s text) and the folder its relative mesh paths
    resolve against: the file's, or the working folder for XML text.

    Raises:
        URDFError: What :func:`read_description` refuses, text that is not XML, a root other than ``<robot>``.
    """
    text = read_description(path_or_xml)
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise URDFError(f"robot description is not valid XML: {error}") from error
    if root.tag != "robot":
        raise URDFError(f"root element is <{root.tag}>, expected <robot>")
    is_text = os.fspath(path_or_xml).lstrip().startswith("<")
    return root, (Path.cwd() if is_text else Path(path_or_xml).resolve().parent)


_PARSER_LOCK = threading.Lock()


def _ignore(message: str) -> None:
    del message


def _parse(xml: str):
    from urdf_parser_py import urdf as urdf_module
    from urdf_parser_py.xml_reflection import core

    # urdf_parser_py reports every tag it does not model (gazebo, transmission...) on stderr through a
    # module-global hook: silence it for this parse, under a lock since the hook is shared by all threads.
    with _PARSER_LOCK:
        previous = core.on_error
        core.on_error = _ignore
        try:
            return urdf_module.URDF.from_xml_string(xml.encode("utf-8") if "encoding=" in xml[:100] else xml)
        except Exception as err:  # lxml/ElementTree syntax errors, and urdf_parser_py's own assertions
            raise URDFError(f"cannot parse URDF: {err}") from err
        finally:
            core.on_error = previous


def _link_inertia(link) -> np.ndarray:
    inertial = link.inertial
    if inertial is None or inertial.mass is None:
        return np.zeros((6, 6))
    mass = float(inertial.mass)
    if not math.isfinite(mass) or mass < 0.0:
        raise ModelError(f"link {link.name!r} has an invalid mass {mass}", link.name)
    i = inertial.inertia
    Ic = np.zeros((3, 3))
    if i is not None:
        Ic = np.array([[i.ixx, i.ixy, i.ixz], [i.ixy, i.iyy, i.iyz], [i.ixz, i.iyz, i.izz]], dtype=float)
    if not np.all(np.isfinite(Ic)) or np.linalg.eigvalsh(Ic).min() < -constants.INERTIA_TOLERANCE * max(
        1.0, np.abs(Ic).max()
    ):
        raise ModelError(f"link {link.name!r} has a rotational inertia that is not positive semi-definite", link.name)
    origin = inertial.origin
    T = transform_from_origin(origin.xyz if origin else None, origin.rpy if origin else None, link.name)
    # Rotational inertia about the com, expressed in link axes.
    Ic_link = T[:3, :3] @ Ic @ T[:3, :3].T
    return spatial_inertia(mass, T[:3, 3], Ic_link)


def _limit(value, default: float) -> float:
    if value is None:
        return default
    return float(value)


def parse_urdf(path_or_xml: str, floating_base: bool = False, locked: Mapping[str, float] | None = None
               ) -> TreeDescription:
    """Read a URDF into a :class:`TreeDescription`.

    Args:
        path_or_xml: A URDF file path, or the XML text itself.
        floating_base: Add a free-flyer joint ``root_joint`` between the universe and the root link.
        locked: {joint name: position [rad or m]} of revolute, continuous or prismatic joints to fix at that
            position: each becomes a fixed joint whose placement includes its motion (its frame stays).

    Raises:
        URDFError: Unreadable file, XML syntax error, no root, several roots, a loop, unknown link names, a
            joint named like the free flyer when ``floating_base`` adds it.
        ModelError: Unsupported joint type, zero axis, invalid inertia; a locked joint the URDF lacks or that
            is not revolute, continuous or prismatic, or a locked position that is not finite or is outside
            the joint's limits.
    """
    robot = _parse(read_description(path_or_xml))
    locked = _locked_positions(robot, locked or {})
    links = {link.name: link for link in robot.links}
    if not links:
        raise URDFError("the URDF defines no link")
    for kind, names in (("link", [link.name for link in robot.links]), ("joint", [j.name for j in robot.joints])):
        seen: set = set()
        for name in names:
            if name in seen:
                raise URDFError(f"two {kind}s are named {name!r}", name)
            seen.add(name)
    if floating_base and any(joint.name == FREE_FLYER_JOINT for joint in robot.joints):
        raise URDFError(f"the URDF has a joint named {FREE_FLYER_JOINT!r}, the name of the free flyer that "
                        "floating_base adds: rename that joint", FREE_FLYER_JOINT)
    children: dict[str, list] = {name: [] for name in links}
    parent_of: dict[str, str] = {}
    for joint in robot.joints:
        for end in (joint.parent, joint.child):
            if end not in links:
                raise URDFError(f"joint {joint.name!r} refers to an unknown link {end!r}", joint.name)
        if joint.child in parent_of:
            raise URDFError(
                f"link {joint.child!r} is the child of two joints ({parent_of[joint.child]!r} and {joint.name!r}):"
                " kinematic loops are not supported",
                joint.name,
            )
        parent_of[joint.child] = joint.name
        children[joint.parent].append(joint)
    roots = [name for name in links if name not in parent_of]
    if len(roots) != 1:
        if not roots:
            raise URDFError("the URDF has no root link: its joints form a loop")
        raise URDFError(f"the URDF has several root links: {', '.join(sorted(roots))}")
    root = roots[0]

    joints: list[JointDescription] = []
    frames: list[FrameDescription] = []
    if floating_base:
        joints.append(
            JointDescription(FREE_FLYER_JOINT, JOINT_FREEFLYER, 0, np.eye(4), np.zeros(3), _link_inertia(links[root]))
        )
        frames.append(FrameDescription(FREE_FLYER_JOINT, 1, np.eye(4)))
        root_support = 1
    else:
        root_support = 0
    frames.append(FrameDescription(root, root_support, np.eye(4)))

    # Depth-first from the root, children by joint name (Pinocchio's order, so results compare entry by entry).
    for joint_list in children.values():
        joint_list.sort(key=lambda joint: joint.name)
    visited = {root}
    stack = [(joint, root_support, np.eye(4)) for joint in reversed(children[root])]
    while stack:
        joint, support, link_placement = stack.pop()
        if joint.child in visited:
            raise URDFError(f"joint {joint.name!r} closes a kinematic loop", joint.name)
        visited.add(joint.child)
        origin = joint.origin
        T = link_placement @ transform_from_origin(origin.xyz if origin else None, origin.rpy if origin else None,
                                                   joint.name)
        child = links[joint.child]
        if joint.name in locked:
            T = T @ _joint_motion(*locked[joint.name])
        if joint.type == "fixed" or joint.name in locked:
            frames.append(FrameDescription(joint.name, support, T))
            if support > 0:
                joints[support - 1].inertia = joints[support - 1].inertia + transform_inertia(T, _link_inertia(child))
            child_support, child_placement = support, T
        elif joint.type in ("revolute", "continuous", "prismatic", "floating"):
            joints.append(_movable_joint(joint, support, T, _link_inertia(child)))
            child_support, child_placement = len(joints), np.eye(4)
            frames.append(FrameDescription(joint.name, child_support, np.eye(4)))
        else:
            raise ModelError(
                f"joint {joint.name!r} has type {joint.type!r}, which is not supported"
                " (revolute, continuous, prismatic, fixed, floating are)",
                joint.name,
            )
        frames.append(FrameDescription(child.name, child_support, child_placement))
        stack.extend((grandchild, child_support, child_placement) for grandchild in reversed(children[child.name]))
    unreached = sorted(set(links) - visited)
    if unreached:
        raise URDFError(f"links not connected to the root {root!r} (a kinematic loop?): {', '.join(unreached)}",
                        unreached[0])
    return TreeDescription(robot.name or "robot", joints, frames)


def _locked_positions(robot, locked: Mapping[str, float]) -> dict:
    """``locked`` checked against the URDF's joints: {name: (its description, its position)} (see
    :func:`parse_urdf`)."""
    joints = {joint.name: joint for joint in robot.joints}
    positions = {}
    for name, value in locked.items():
        joint = joints.get(name)
        if joint is None:
            raise ModelError(f"locked joint {name!r} is not a joint of the URDF", name)
        if joint.type not in ("revolute", "continuous", "prismatic"):
            raise ModelError(f"locked joint {name!r} is {joint.type}: only revolute, continuous and prismatic "
                             "joints can be locked", name)
        description = _movable_joint(joint, 0, np.eye(4), np.zeros((6, 6)))
        position = float(value)
        if not math.isfinite(position) or not description.lower <= position <= description.upper:
            raise ModelError(f"locked joint {name!r} at {value!r}: not a finite position within its limits "
                             f"[{description.lower:g}, {description.upper:g}]", name)
        positions[name] = (description, position)
    return positions


def _joint_motion(joint: JointDescription, position: float) -> np.ndarray:
    """(4, 4) the motion of a revolute or prismatic ``joint`` at ``position`` [rad or m], in its frame."""
    T = np.eye(4)
    if joint.jtype == JOINT_PRISMATIC:
        T[:3, 3] = joint.axis * position
        return T
    x, y, z = joint.axis
    K = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    T[:3, :3] += math.sin(position) * K + (1.0 - math.cos(position)) * (K @ K)  # Rodrigues
    return T


def _movable_joint(joint, parent: int, placement: np.ndarray, inertia: np.ndarray) -> JointDescription:
    if joint.type == "floating":
        return JointDescription(joint.name, JOINT_FREEFLYER, parent, placement, np.zeros(3), inertia)
    axis = np.array(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), dtype=float)
    norm = float(np.linalg.norm(axis))
    if not math.isfinite(norm) or norm < constants.AXIS_TOLERANCE:
        raise ModelError(f"joint {joint.name!r} has a zero or invalid axis {axis.tolist()}", joint.name)
    jtype = JOINT_PRISMATIC if joint.type == "prismatic" else JOINT_REVOLUTE
    description = JointDescription(joint.name, jtype, parent, placement, axis / norm, inertia)
    description.continuous = joint.type == "continuous"
    limit = joint.limit
    if limit is not None:
        if joint.type != "continuous":
            description.lower = _limit(limit.lower, -math.inf)
            description.upper = _limit(limit.upper, math.inf)
        description.velocity = _limit(limit.velocity, math.inf)
        description.effort = _limit(limit.effort, math.inf)
    for label, value in (("lower", description.lower), ("upper", description.upper)):
        if math.isnan(value):
            raise ModelError(f"joint {joint.name!r} has a NaN {label} position limit", joint.name)
    for label, value in (("velocity", description.velocity), ("effort", description.effort)):
        if math.isnan(value) or value < 0.0:
            raise ModelError(f"joint {joint.name!r} has an invalid {label} limit {value}", joint.name)
    if description.lower > description.upper:
        raise ModelError(
            f"joint {joint.name!r} has lower limit {description.lower} above upper limit {description.upper}",
            joint.name,
        )
    return description


def package_data_folders() -> list[Path]:
    """Folders that may hold the package's ``urdf/``, ``msg/``, ``config/``..., in the order they are tried:
    the folder holding the package folder (a source checkout or an editable install); the share folder of the
    prefix the package is installed in (``<prefix>/lib/python3.X/site-packages/rbd_deriv`` beside
    ``<prefix>/share/rbd_deriv``: a colcon install space, sourced or not, or a pip install); the package's
    share folder that ament_index_python finds (a sourced workspace); ``<sys.prefix>/share/rbd_deriv``."""
    package = Path(__file__).resolve().parents[1]
    folders = [package.parent]
    if package.parent.name in ("site-packages", "dist-packages"):
        # Above site-packages: python3.X, lib, then the prefix (one more for Debian's local/lib/python3/dist-packages).
        folders += [prefix / "share" / "rbd_deriv" for prefix in package.parents[2:5]]
    try:
        from ament_index_python.packages import get_package_share_directory

        folders.append(Path(get_package_share_directory("rbd_deriv")))
    except Exception:  # noqa: BLE001 - not installed, or no ament index for this package
        pass
    folders.append(Path(sys.prefix, "share", "rbd_deriv"))
    return folders


def _package_roots(name: str, folder: Path) -> list[Path]:
    """Folders that may be ROS package ``name``'s root, for a URDF in ``folder``."""
    roots = []
    for ancestor in (folder, *folder.parents):
        if ancestor.name == name:
            roots.append(ancestor)
        roots.append(ancestor / name)
    try:
        from ament_index_python.packages import get_package_share_directory

        roots.append(Path(get_package_share_directory(name)))
    except Exception:  # noqa: BLE001 - no ament index, or no such package in it
        pass
    return roots


def resolve_mesh(filename: str, folder: Path) -> Path | None:
    """The file of a URDF mesh ``filename`` (``package://``, ``file://`` or a path) for a URDF in ``folder``;
    None if no such file exists."""
    if filename.startswith("package://"):
        name, _, rest = filename[len("package://"):].lstrip("/").partition("/")
        candidates = [root / rest for root in _package_roots(name, folder)]
    else:
        path = Path(filename[len("file://"):] if filename.startswith("file://") else filename)
        candidates = [path if path.is_absolute() else folder / path]
    return next((c.resolve() for c in candidates if c.is_file()), None)


def bundled_urdf(name: str) -> Path:
    """Path of a robot description shipped in the package's ``urdf/`` folder, looked for in each of
    :func:`package_data_folders`.

    Args:
        name: File name with or without ``.urdf``, e.g. ``"rbd_arm7"``.

    Raises:
        URDFError: No such file; the message lists where it was looked for.
    """
    file_name = name if name.endswith(".urdf") else name + ".urdf"
    folders = [folder / "urdf" for folder in package_data_folders()]
    for folder in folders:
        if (folder / file_name).is_file():
            return folder / file_name
    raise URDFError(f"no bundled URDF {file_name!r}; looked in {', '.join(str(f) for f in folders)}")
