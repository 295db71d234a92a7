"""A URDF's ``<visual>`` elements as MuJoCo geoms that are seen and never felt (no ROS in here).

:func:`~rbd_deriv.sim.mujoco_plant.mujoco_ready_urdf` strips every ``<visual>`` and ``<collision>`` so that
MuJoCo's importer cannot fail on a mesh path; :func:`add_visuals` puts the visuals back on the compiled robot's
bodies through its ``MjSpec``:

- boxes, cylinders, spheres and meshes at their ``<origin>``, coloured by their material's ``rgba`` (inline or
  named at the robot's top level), grey otherwise;
- ``package://NAME/REST`` mesh URIs are resolved against the URDF's own folders (a folder named NAME above the
  file, or holding NAME), then ROS's ament index; ``file://`` and relative paths against the URDF's folder;
- each geom collides with nothing (``contype`` = ``conaffinity`` = 0) and weighs nothing (mass and density 0):
  the bodies' masses and inertias stay the URDF's ``<inertial>`` (test/test_mujoco_plant.py compares them);
- a mesh MuJoCo cannot read (a format other than :data:`MESH_FORMATS`, such as COLLADA ``.dae``) or whose file
  is missing is skipped: :attr:`Visuals.note` says how many, of which formats, in one line; the link then shows its
  ``<collision>`` shapes, drawn the same way (example-robot-data's ANYmal B, A1 and Go2 give their visuals as COLLADA
  only: without them a video showed ANYmal as a single box).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from rbd_deriv.core.urdf import resolve_mesh, transform_from_origin

__all__ = ["MESH_FORMATS", "VISUAL_GROUP", "Visuals", "add_visuals"]

#: Mesh file formats MuJoCo reads (lower case).
MESH_FORMATS = (".stl", ".obj", ".msh")
#: MuJoCo geom group of the visuals (groups 0 to 2 are drawn by default; the ground's geoms are in group 3).
VISUAL_GROUP = 1
#: Colour (r, g, b, a) of a visual without a material colour.
DEFAULT_RGBA = (0.7, 0.7, 0.7, 1.0)


@dataclass
class Visuals:
    """What :func:`add_visuals` did.

    Attributes:
        added: Number of visual geoms added.
        skipped: Number of mesh files skipped, by reason (``".dae"``: a format MuJoCo cannot read;
            ``"missing"``: a file not found).
        from_collision: Collision shapes drawn on the links whose visuals were skipped.
    """

    added: int = 0
    skipped: Counter = field(default_factory=Counter)
    from_collision: int = 0

    @property
    def note(self) -> Optional[str]:
        """One line on the skipped meshes, None when none was skipped."""
        if not self.skipped:
            return None
        parts = [f"{count} {'not found' if reason == 'missing' else reason + ' (a format MuJoCo cannot read)'}"
                 for reason, count in sorted(self.skipped.items())]
        shown = f", {self.from_collision} collision shapes shown on their links instead" if self.from_collision else ""
        return f"visual meshes skipped: {', '.join(parts)}; {self.added} visual geoms kept{shown}"


def _rgba(visual: ElementTree.Element, named: dict) -> list:
    material = visual.find("material")
    if material is None:
        return list(DEFAULT_RGBA)
    color = material.find("color")
    if color is not None and color.get("rgba"):
        return [float(x) for x in color.get("rgba").split()]
    return list(named.get(material.get("name"), DEFAULT_RGBA))


def _numbers(text: Optional[str], default: tuple) -> list:
    return [float(x) for x in text.split()] if text else list(default)


def add_visuals(spec: Any, urdf_root: ElementTree.Element, folder: Path) -> Visuals:
    """Add the ``<visual>`` elements of the URDF ``urdf_root`` to the robot's ``MjSpec`` ``spec`` (its bodies named
    as the links), as geoms of group :data:`VISUAL_GROUP` that neither collide nor weigh; a link with a visual
    that could not be drawn shows its ``<collision>`` shapes as well (grey, drawn the same way).

    Args:
        spec: The robot's spec, loaded from :func:`~rbd_deriv.sim.mujoco_plant.mujoco_ready_urdf`'s text.
        urdf_root: The original URDF's ``<robot>`` element, visuals included.
        folder: The URDF file's folder [path], against which mesh paths resolve (the working folder for a URDF
            given as text).

    Returns:
        How many geoms were added, which meshes were skipped and how many collision shapes stand in for them.
    """
    spec.compiler.discardvisual = False  # MuJoCo's importer would drop geoms that collide with nothing
    named = {m.get("name"): _numbers(m.find("color").get("rgba"), DEFAULT_RGBA)
             for m in urdf_root.findall("material") if m.find("color") is not None}
    bodies = {body.name: body for body in spec.bodies}
    meshes: dict[tuple, str] = {}
    visuals = Visuals()
    for link in urdf_root.iter("link"):
        body = bodies.get(link.get("name"))
        if body is None:
            continue
        skipped = 0
        for index, visual in enumerate(link.findall("visual")):
            reason = _add_shape(spec, body, visual, f"visual_{link.get('name')}_{index}", named, meshes, folder)
            if reason is None:
                visuals.added += 1
            elif reason:
                visuals.skipped[reason] += 1
                skipped += 1
        if skipped:
            for index, collision in enumerate(link.findall("collision")):
                name = f"visual_collision_{link.get('name')}_{index}"
                visuals.from_collision += _add_shape(spec, body, collision, name, named, meshes, folder) is None
    return visuals


def _add_shape(spec: Any, body: Any, element: ElementTree.Element, name: str, named: dict, meshes: dict,
               folder: Path) -> Optional[str]:
    """Add the shape of a ``<visual>`` or ``<collision>`` element to ``body`` as a geom named ``name`` that neither
    collides nor weighs. Returns None when added, the reason a mesh was skipped (its extension, or ``"missing"``),
    or "" for an element without a shape this draws."""
    import mujoco

    shape = element.find("geometry")
    shape = shape[0] if shape is not None and len(shape) else None
    if shape is None:
        return ""
    geom_type, size, mesh_name = None, None, None
    if shape.tag == "box":
        geom_type, size = mujoco.mjtGeom.mjGEOM_BOX, [x / 2 for x in _numbers(shape.get("size"), (0, 0, 0))]
    elif shape.tag == "cylinder":
        geom_type = mujoco.mjtGeom.mjGEOM_CYLINDER
        size = [float(shape.get("radius", 0)), float(shape.get("length", 0)) / 2, 0.0]
    elif shape.tag == "sphere":
        geom_type, size = mujoco.mjtGeom.mjGEOM_SPHERE, [float(shape.get("radius", 0)), 0.0, 0.0]
    elif shape.tag == "mesh":
        filename = shape.get("filename", "")
        extension = os.path.splitext(filename)[1].lower()
        if extension not in MESH_FORMATS:
            return extension or "(no extension)"
        path = resolve_mesh(filename, folder)
        if path is None:
            return "missing"
        scale = tuple(_numbers(shape.get("scale"), (1.0, 1.0, 1.0)))
        if (path, scale) not in meshes:
            mesh = spec.add_mesh()
            mesh.name, mesh.file, mesh.scale = f"visual_mesh{len(meshes)}", str(path), list(scale)
            meshes[(path, scale)] = mesh.name
        geom_type, mesh_name = mujoco.mjtGeom.mjGEOM_MESH, meshes[(path, scale)]
    else:
        return ""
    origin = element.find("origin")
    placement = transform_from_origin(
        _numbers(origin.get("xyz") if origin is not None else None, (0, 0, 0)),
        _numbers(origin.get("rpy") if origin is not None else None, (0, 0, 0)), name)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, placement[:3, :3].ravel())
    geom = body.add_geom()
    geom.name = name
    geom.type = geom_type
    if mesh_name is not None:
        geom.meshname = mesh_name
    else:
        geom.size = size
    geom.pos, geom.quat = placement[:3, 3], quat
    geom.rgba = _rgba(element, named)
    geom.contype, geom.conaffinity = 0, 0
    geom.mass, geom.density = 0.0, 0.0
    geom.group = VISUAL_GROUP
    return None
