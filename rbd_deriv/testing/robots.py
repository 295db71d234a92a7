"""Where the test and benchmark robots live on disk.

``EXAMPLE_ROBOTS`` maps a short robot name to the URDF shipped by the
``example-robot-data`` package (installed by pip under ``cmeel.prefix``);
:func:`bundled_urdf` (from :mod:`rbd_deriv.core.urdf`) finds the URDF files that ship with this package.
"""

from __future__ import annotations

import os
import site
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Optional, Union

from rbd_deriv.core.urdf import bundled_urdf  # re-exported: tests and benchmarks take robots from here

__all__ = [
    "EXAMPLE_ROBOTS",
    "MASSLESS_MOVING_ROBOTS",
    "ROBOT_NAMES",
    "RobotDataNotFoundError",
    "bundled_urdf",
    "example_robot_data_dir",
    "example_robot_srdf",
    "example_robot_urdf",
    "LEGGED_ROBOTS",
]


class RobotDataNotFoundError(FileNotFoundError):
    """A robot description needed by a test or benchmark is not installed."""


# Paths relative to example-robot-data's ``robots`` folder.
_EXAMPLE_ROBOT_FILES: Dict[str, str] = {
    "ur5": "ur_description/urdf/ur5_robot.urdf",
    "panda": "panda_description/urdf/panda.urdf",
    "solo12": "solo_description/robots/solo12.urdf",
    "hyq": "hyq_description/robots/hyq_no_sensors.urdf",
    "anymal": "anymal_b_simple_description/robots/anymal.urdf",
    "talos": "talos_data/robots/talos_full_v2.urdf",
    "romeo": "romeo_description/urdf/romeo.urdf",
}

_EXAMPLE_SRDF_FILES: Dict[str, str] = {
    "solo12": "solo_description/srdf/solo.srdf",
    "talos": "talos_data/srdf/talos.srdf",
}

LEGGED_ROBOTS: Dict[str, Dict[str, object]] = {
    "solo12": {"feet": ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"), "kind": "point",
               "posture": "standing"},
    "talos": {"feet": ("leg_left_sole_fix_joint", "leg_right_sole_fix_joint"), "kind": "frame",
              "posture": "half_sitting",
              "weights": {"base_position": 1e3, "base_orientation": 1e3, "joint_position": 10.0,
                          "torque": 1e-3, "force": 1e-5}},
}
"""Example robots on their feet: contact frames, contact kind, the SRDF reference posture and the
cost weights of :class:`rbd_deriv.control.legged.LeggedWeights` that differ from its defaults
(chosen for solo12's 2.5 kg; a 95 kg humanoid needs lighter torque and force weights and a
stiffer posture to hold it in closed loop)."""

ROBOT_NAMES: List[str] = list(_EXAMPLE_ROBOT_FILES)
"""Robot names in increasing size, the order tests and benchmarks use."""

_ROBOTS_SUBDIR = Path("cmeel.prefix", "share", "example-robot-data", "robots")


def _candidate_roots() -> List[Path]:
    # The cmeel prefix sits inside site-packages; a venv, a user install and
    # a system install each put site-packages somewhere else.
    roots: List[Path] = []
    for entry in list(sys.path) + site.getsitepackages() + [site.getusersitepackages()]:
        if entry and entry not in roots:
            roots.append(Path(entry))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in (sys.prefix, sys.base_prefix):
        for lib in ("lib", "lib64"):
            roots.append(Path(prefix, lib, version, "site-packages"))
    return roots


def _first_existing(paths: List[Path], exists) -> Optional[Path]:
    return next((path for path in paths if exists(path)), None)


def example_robot_data_dir() -> Path:
    """Return the ``robots`` folder of the installed example-robot-data.

    Raises:
        RobotDataNotFoundError: example-robot-data is not installed in this
            Python environment.
    """
    candidates = [root / _ROBOTS_SUBDIR for root in _candidate_roots()]
    found = _first_existing(candidates, Path.is_dir)
    if found is None:
        raise RobotDataNotFoundError(
            "example-robot-data is not installed (pip install example-robot-data); "
            "looked for its robots folder in: " + ", ".join(str(path) for path in candidates[:6])
        )
    return found


def _example_file(name: str, files: Dict[str, str], what: str) -> Path:
    if name not in files:
        raise KeyError(f"no {what} known for example robot {name!r}; known: {', '.join(files)}")
    path = example_robot_data_dir() / files[name]
    if not path.is_file():
        raise RobotDataNotFoundError(f"{what} of example robot {name!r} is missing: {path}")
    return path


def example_robot_urdf(name: str) -> Path:
    """Return the URDF path of the example robot ``name`` (a key of ``EXAMPLE_ROBOTS``).

    Raises:
        KeyError: ``name`` is not one of the known robots.
        RobotDataNotFoundError: the package or that URDF file is missing.
    """
    return _example_file(name, _EXAMPLE_ROBOT_FILES, "URDF")


def example_robot_srdf(name: str) -> Path:
    """Return the SRDF path (reference postures as ``<group_state>``) of example robot ``name``.

    Raises:
        KeyError: no SRDF is known for ``name``.
        RobotDataNotFoundError: the package or that SRDF file is missing.
    """
    return _example_file(name, _EXAMPLE_SRDF_FILES, "SRDF")


class _ExampleRobots(Dict[str, Path]):
    """Dictionary robot name -> URDF path, resolved on first access.

    Resolving lazily lets ``import rbd_deriv.testing`` succeed without
    example-robot-data; the error appears only when a robot is asked for.
    """

    def __missing__(self, name: str) -> Path:
        path = example_robot_urdf(name)
        self[name] = path
        return path

    def __iter__(self):
        return iter(ROBOT_NAMES)

    def __len__(self) -> int:
        return len(ROBOT_NAMES)

    def __contains__(self, name: object) -> bool:
        return name in _EXAMPLE_ROBOT_FILES

    def keys(self):  # type: ignore[override]
        return list(ROBOT_NAMES)

    def items(self):  # type: ignore[override]
        return [(name, self[name]) for name in ROBOT_NAMES]

    def values(self):  # type: ignore[override]
        return [self[name] for name in ROBOT_NAMES]

    def get(self, name, default=None):  # type: ignore[override]
        return self[name] if name in self else default


EXAMPLE_ROBOTS: Dict[str, Path] = _ExampleRobots()
"""Robot name (``ur5``, ``panda``, ``solo12``, ``hyq``, ``anymal``, ``talos``,
``romeo``) -> absolute URDF path inside example-robot-data."""


MASSLESS_MOVING_ROBOTS: Dict[str, List[str]] = {"romeo": ["LHand", "RHand"]}
"""Example robots whose URDF has moving joints carrying no mass (Romeo's hands
and fingers), by name -> some of the joints concerned. Their mass matrix is
singular: the library refuses them as they are; tests load them through
:func:`with_minimum_mass`."""


def with_minimum_mass(source: Union[str, os.PathLike], mass: float = 0.1, inertia: float = 1e-3) -> str:
    """Return the URDF text of ``source`` where every link without mass gets some.

    Links with no ``<inertial>`` or a zero mass get ``mass`` [kg] at their origin
    with rotational inertia ``inertia * identity`` [kg m^2], so every moving
    joint moves mass and the robot can be used for forward dynamics.

    Args:
        source: URDF file path or URDF XML text.
    """
    text = str(source)
    if not text.lstrip().startswith("<"):
        text = Path(source).read_text(encoding="utf-8")
    root = ElementTree.fromstring(text)
    for link in root.iter("link"):
        inertial = link.find("inertial")
        mass_element = inertial.find("mass") if inertial is not None else None
        if mass_element is not None and float(mass_element.get("value", "0")) > 0.0:
            continue
        if inertial is not None:
            link.remove(inertial)
        inertial = ElementTree.SubElement(link, "inertial")
        ElementTree.SubElement(inertial, "origin", xyz="0 0 0", rpy="0 0 0")
        ElementTree.SubElement(inertial, "mass", value=repr(float(mass)))
        moment = repr(float(inertia))
        ElementTree.SubElement(
            inertial, "inertia", ixx=moment, ixy="0", ixz="0", iyy=moment, iyz="0", izz=moment
        )
    return ElementTree.tostring(root, encoding="unicode")
