"""A foot's sole from its collision geometry, for robots whose URDF names no sole frame (pure Python, no numba).

A humanoid stands on a rectangle of contact under each foot (the ``frame`` contact of
:mod:`rbd_deriv.control` and of the simulator's ground, ``sole_size`` long and wide, centred on the contact
frame, its z axis the floor's normal). Many humanoid URDFs have no frame there: the foot link's origin is at
the ankle (Unitree's G1), and only the foot's collision geometry says where the floor will touch it.

:func:`sole_from_collision` reads that geometry (boxes, cylinders, spheres, and STL or OBJ meshes) and takes its
lowest part as the sole, "lowest" along the world's vertical at the model's neutral configuration, where a
humanoid's URDF stands it upright on flat feet:

1. every point of the link's collision geometry, in the link's frame: a box's corners, a cylinder's rims, a
   sphere's lowest point, a mesh's vertices;
2. the points within ``band`` of the lowest one along the vertical are those the floor touches;
3. the sole frame's z axis is up, its x axis the link's x projected on the floor; its origin is the centre of
   the touching points' bounding rectangle in those axes, on the lowest plane, and the rectangle's length and
   width are the sole's size.

:func:`add_soles` adds the frames to a model (:meth:`rbd_deriv.core.model.Model.add_frame`, named
``<link>_sole``); the nodes' ``sole_placement: "collision"`` does both for each foot link of ``contact_frames``.
"""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rbd_deriv.core.urdf import description_tree, resolve_mesh, transform_from_origin
from rbd_deriv.exceptions import InputError, ModelError, URDFError

__all__ = ["SOLE_BAND", "SOLE_PLACEMENTS", "Sole", "add_soles", "common_size", "feet_on_soles", "sole_from_collision",
           "soles_from_collision"]

#: Height [m] above a foot's lowest collision point within which its points are taken as touching the floor.
SOLE_BAND = 0.005
#: Where a robot's soles are (the nodes' ``sole_placement``): the contact frames are the soles' centres, or the
#: contact frames are foot links whose collision geometry gives the soles.
SOLE_PLACEMENTS = ("frame", "collision")
#: Points on each rim of a collision cylinder.
CYLINDER_POINTS = 32


@dataclasses.dataclass(frozen=True)
class Sole:
    """The sole of one foot link.

    Attributes:
        link: The URDF link the sole is fixed to.
        placement: (4, 4) the sole frame in the link's frame: origin at the centre of the touching rectangle on
            its lowest plane, z up (at the neutral configuration), x along the link's x projected on the floor.
        size: (length along the sole's x, width along its y) [m] of the touching points' bounding rectangle.
        points: How many collision points the rectangle bounds.
    """

    link: str
    placement: np.ndarray
    size: tuple
    points: int

    @property
    def frame(self) -> str:
        """The name :func:`add_soles` gives the sole's frame."""
        return f"{self.link}_sole"


def _numbers(text: str | None, count: int, default: float = 0.0) -> np.ndarray:
    values = [float(x) for x in text.split()] if text else [default] * count
    if len(values) != count or not all(math.isfinite(x) for x in values):
        raise URDFError(f"expected {count} finite numbers, got {text!r}")
    return np.array(values)


def _mesh_vertices(path: Path) -> np.ndarray:
    """(k, 3) the vertices of an STL (binary or ASCII) or OBJ mesh file.

    Raises:
        URDFError: Another format, a file that cannot be read, or no vertex in it.
    """
    try:
        vertices = _read_vertices(path)
    except (OSError, ValueError) as error:
        raise URDFError(f"collision mesh {path.name} cannot be read: {error}") from error
    if not len(vertices) or not np.isfinite(vertices).all():
        raise URDFError(f"collision mesh {path.name} holds no vertex, or one that is not finite")
    return vertices


def _read_vertices(path: Path) -> np.ndarray:
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".obj":
        rows = [line.split()[1:4] for line in data.decode("utf-8", "replace").splitlines() if line.startswith("v ")]
        return np.array(rows, dtype=float).reshape(-1, 3)
    if suffix != ".stl":
        raise URDFError(f"collision mesh {path.name}: only STL and OBJ meshes are read, not {suffix or 'this'}")
    if len(data) >= 84:
        count = int(np.frombuffer(data, dtype="<u4", count=1, offset=80)[0])
        if len(data) == 84 + 50 * count:  # binary: a normal and three vertices, 12 floats and 2 bytes each
            facets = np.frombuffer(data, dtype=np.dtype([("f", "<f4", 12), ("a", "<u2")]), count=count, offset=84)
            return facets["f"][:, 3:].astype(float).reshape(-1, 3)
    rows = [line.split()[1:4] for line in data.decode("utf-8", "replace").splitlines()
            if line.strip().startswith("vertex")]
    return np.array(rows, dtype=float).reshape(-1, 3)


def _shape_points(shape: ElementTree.Element, down: np.ndarray, folder: Path) -> np.ndarray:
    """(k, 3) the points of one collision shape in its own frame (``down``: the vertical there)."""
    if shape.tag == "box":
        half = _numbers(shape.get("size"), 3) / 2
        return np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
    if shape.tag == "sphere":
        return float(shape.get("radius", "0")) * down[None, :]
    if shape.tag == "cylinder":
        radius, length = float(shape.get("radius", "0")), float(shape.get("length", "0"))
        angles = np.linspace(0.0, 2.0 * np.pi, CYLINDER_POINTS, endpoint=False)
        rim = np.stack([radius * np.cos(angles), radius * np.sin(angles), np.zeros_like(angles)], axis=1)
        return np.concatenate([rim + [0.0, 0.0, length / 2], rim - [0.0, 0.0, length / 2]])
    if shape.tag == "mesh":
        filename = shape.get("filename", "")
        path = resolve_mesh(filename, folder)
        if path is None:
            raise URDFError(f"collision mesh {filename!r} not found")
        return _mesh_vertices(path) * _numbers(shape.get("scale"), 3, 1.0)
    raise URDFError(f"collision geometry <{shape.tag}> is not a box, cylinder, sphere or mesh")


def collision_points(description: str | Path, link: str, down: Sequence[float]) -> np.ndarray:
    """(k, 3) [m] the points of ``link``'s collision geometry in the link's frame: box corners, cylinder rims,
    each sphere's lowest point along ``down`` (the vertical in the link's frame), mesh vertices.

    Raises:
        URDFError: No such link, a link without collision geometry, a shape or mesh that cannot be read.
    """
    return _link_points(*description_tree(description), link, down)


def _link_points(root: ElementTree.Element, folder: Path, link: str, down: Sequence[float]) -> np.ndarray:
    element = next((e for e in root.iter("link") if e.get("name") == link), None)
    if element is None:
        raise URDFError(f"no link named {link!r} in the robot description")
    down = np.asarray(down, dtype=float)
    parts = []
    for collision in element.findall("collision"):
        geometry = collision.find("geometry")
        if geometry is None or not len(geometry):
            continue
        origin = collision.find("origin")
        placement = transform_from_origin(None if origin is None else _numbers(origin.get("xyz"), 3),
                                          None if origin is None else _numbers(origin.get("rpy"), 3),
                                          f"a collision of link {link!r}")
        # The shape's points in its frame (a sphere's lowest point along the vertical seen from that frame).
        points = _shape_points(geometry[0], placement[:3, :3].T @ down, folder)
        parts.append(points @ placement[:3, :3].T + placement[:3, 3])
    if not parts:
        raise URDFError(f"link {link!r} has no collision geometry to take a sole from")
    return np.concatenate(parts)


def sole_from_collision(description: str | Path, link: str, down: Sequence[float],
                        band: float = SOLE_BAND) -> Sole:
    """The sole of ``link``: the bounding rectangle of its collision points within ``band`` [m] of the lowest
    along ``down`` (the world's vertical, downwards, in the link's frame).

    Raises:
        URDFError: As :func:`collision_points`.
        ModelError: The touching points span no area (a single point or a line), so there is no sole.
    """
    return _sole(*description_tree(description), link, down, band)


def _sole(root: ElementTree.Element, folder: Path, link: str, down: Sequence[float], band: float) -> Sole:
    down = np.asarray(down, dtype=float)
    down = down / np.linalg.norm(down)
    points = _link_points(root, folder, link, down)
    depth = points @ down
    lowest = depth.max()
    touching = points[depth >= lowest - band]
    z = -down
    x = np.array([1.0, 0.0, 0.0]) - z[0] * z
    if np.linalg.norm(x) < 1e-6:  # the link's x is vertical: its y gives the sole's x
        x = np.array([0.0, 1.0, 0.0]) - z[1] * z
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    u, w = touching @ x, touching @ y
    length, width = float(u.max() - u.min()), float(w.max() - w.min())
    if min(length, width) < 1e-3:
        raise ModelError(f"the lowest collision points of link {link!r} span {length:.4f} x {width:.4f} m: no "
                         "sole to stand on (give the foot a sole frame and sole_size instead)", link)
    placement = np.eye(4)
    placement[:3, :3] = np.stack([x, y, z], axis=1)
    placement[:3, 3] = 0.5 * (u.max() + u.min()) * x + 0.5 * (w.max() + w.min()) * y + lowest * down
    return Sole(link, placement, (length, width), int(len(touching)))


def soles_from_collision(model: Any, description: str | Path, links: Sequence[str],
                         band: float = SOLE_BAND) -> list[Sole]:
    """The sole of each foot link of ``links`` (frames of ``model``, loaded from ``description``), the vertical
    taken at the model's neutral configuration.

    Raises:
        InputError: A link the model lacks (from :func:`rbd_deriv.frame_placement`).
        URDFError, ModelError: As :func:`sole_from_collision`.
    """
    from rbd_deriv.core.configuration import neutral
    from rbd_deriv.core.kinematics import forward_kinematics, frame_placement

    root, folder = description_tree(description)  # read once for every foot
    data = model.create_data()
    forward_kinematics(model, data, neutral(model))
    soles = []
    for link in links:
        rotation = frame_placement(model, data, link)[:3, :3]
        soles.append(_sole(root, folder, link, rotation.T @ [0.0, 0.0, -1.0], band))
    return soles


def add_soles(model: Any, soles: Sequence[Sole]) -> list[str]:
    """Add each sole's frame to ``model`` (fixed to its link; a model loaded with locked joints gets them in the
    same place) and return their names, ``<link>_sole``, in order. A frame the model already has is kept (the
    same soles added twice).

    Raises:
        ModelError: A link the model lacks.
    """
    names = []
    for sole in soles:
        if sole.frame not in model.frames:
            model.add_frame(sole.frame, sole.link, sole.placement)
        names.append(sole.frame)
    return names


def common_size(soles: Sequence[Sole]) -> tuple:
    """(length, width) [m] of a rectangle inside every sole's: the smallest of each (the feet of a robot are
    mirror images; the controller and the simulator use one size)."""
    return (min(s.size[0] for s in soles), min(s.size[1] for s in soles))


def feet_on_soles(model: Any, description: str | Path, contact_frames: Sequence[str], contact_kinds: Sequence[str],
                  sole_placement: str, sole_size: Sequence[float]) -> tuple[list[str], tuple, tuple]:
    """The contact frames, the sole size and the soles a robot stands on, as the nodes' parameters give them.

    ``sole_placement`` ``"frame"``: the frames and ``sole_size`` as given, no :class:`Sole`. ``"collision"``:
    every contact is a sole (``contact_kinds`` all ``"frame"``) and each contact frame a foot link: its sole is
    taken from its collision geometry (:func:`soles_from_collision`) and added to ``model``; the sole frames
    replace the contact frames and :func:`common_size` replaces ``sole_size``.

    Raises:
        InputError: an unknown placement, or ``"collision"`` with a point contact.
        URDFError, ModelError: as :func:`soles_from_collision`.
    """
    frames = list(contact_frames)
    if sole_placement not in SOLE_PLACEMENTS:
        raise InputError(f"sole_placement must be one of {SOLE_PLACEMENTS}, got {sole_placement!r}", "sole_placement")
    if sole_placement == "frame":
        return frames, tuple(float(x) for x in sole_size), ()
    if not frames or list(contact_kinds) != ["frame"] * len(frames):
        raise InputError("sole_placement collision takes a sole under every foot: contact_kinds must all be frame, "
                         f"got {list(contact_kinds)}", "sole_placement")
    soles = tuple(soles_from_collision(model, description, frames))
    return add_soles(model, soles), common_size(soles), soles
