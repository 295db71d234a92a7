"""Fixtures shared by the core test suite.

Oracles: Pinocchio (through :class:`rbd_deriv.testing.pinocchio_bridge.PinocchioBridge`),
the complex-step reference (:mod:`rbd_deriv.testing.reference`), central finite
differences on the manifold (:mod:`rbd_deriv.testing.finite_diff`) and algebraic
identities.

Tolerances (:func:`rbd_deriv.testing.assert_close`), entry by entry:

* exact oracles (Pinocchio, identities): ``atol = 1e-9 * max(1, max|ref|)``, ``rtol = 1e-9``;
* complex-step derivatives: the same with 1e-10;
* central finite differences: 1e-6 relative (their measured error is below 1e-7,
  see :mod:`rbd_deriv.testing.finite_diff`);
* batched versus single calls: byte for byte (the same compiled kernel runs both).

Robots (each fixed base and with a free flyer): ``robot`` the seven example robots
(Romeo with its massless hands given a little mass, see
:func:`rbd_deriv.testing.robots.with_minimum_mass`), ``random_robot`` random URDF
trees, ``any_robot`` both, ``small_robot`` / ``light_robot`` the lighter sets for
the slow oracles. Models are loaded once per session.
"""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.testing import random_urdf

if TYPE_CHECKING:  # Pinocchio is imported where a robot fixture loads: test/launch needs none of it
    from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS, MASSLESS_MOVING_ROBOTS, ROBOT_NAMES, with_minimum_mass

STATES_PER_ROBOT = 2
"""Random states per example robot and test; the random trees add breadth."""

RANDOM_TREE_SEEDS = range(12)
"""Seeds of the random trees; each is tested fixed and floating."""


@dataclasses.dataclass
class RobotCase:
    """One robot loaded in both libraries."""

    label: str
    source: Any  # URDF path or XML text
    floating_base: bool
    model: Any
    data: Any
    bridge: "PinocchioBridge"

    def rng(self, salt: str = "") -> np.random.Generator:
        """Generator seeded by the case and ``salt`` so every test draws reproducible states."""
        key = f"{self.label}/{'floating' if self.floating_base else 'fixed'}/{salt}"
        return np.random.default_rng(zlib.crc32(key.encode()))

    def random_q(self, rng: np.random.Generator) -> np.ndarray:
        """Random configuration (nq,) drawn by Pinocchio's side, independent of the library."""
        return self.bridge.random_configuration(rng)

    def states(self, salt: str, count: int = STATES_PER_ROBOT) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``count`` random (q, v, u) triples; u serves as acceleration or torque."""
        rng = self.rng(salt)
        nv = self.model.nv
        return [(self.random_q(rng), rng.uniform(-2, 2, nv), rng.uniform(-2, 2, nv)) for _ in range(count)]

    def assert_singular_named(self, function, *arguments) -> None:
        """``function(model, data, *arguments)`` raises ModelError naming a joint that moves only massless bodies
        (Pinocchio's model says which)."""
        singular = self.bridge.joints_moving_no_inertia()
        assert singular, "the robot has no joint moving only massless bodies: the test checks nothing"
        with pytest.raises(rd.ModelError, match="singular") as error:
            function(self.model, self.data, *arguments)
        assert error.value.joint in singular and error.value.joint in str(error.value)

    def random_fext(self, rng: np.random.Generator) -> np.ndarray:
        """External forces (njoints, 6) [N, N m], universe row zero."""
        fext = rng.uniform(-5, 5, (self.model.njoints, 6))
        fext[0] = 0.0
        return fext


def example_source(name: str) -> Any:
    """URDF of an example robot as the suite loads it (massless moving links given some mass)."""
    if name in MASSLESS_MOVING_ROBOTS:
        return with_minimum_mass(EXAMPLE_ROBOTS[name])
    return EXAMPLE_ROBOTS[name]


def random_tree_source(seed: int) -> str:
    """URDF text of random tree ``seed`` (3 to 10 links; every third one with non-unit axes)."""
    rng = np.random.default_rng(1000 + seed)
    return random_urdf(rng, n_links=int(rng.integers(3, 11)), non_unit_axes=seed % 3 == 0)


_CACHE: Dict[Tuple[str, bool], RobotCase] = {}


def _load(label: str, source: Any, floating_base: bool) -> RobotCase:
    key = (label, floating_base)
    if key not in _CACHE:
        from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge

        model = rd.load_urdf(source, floating_base=floating_base)
        bridge = PinocchioBridge.for_model(model, source)
        _CACHE[key] = RobotCase(label, source, floating_base, model, model.create_data(), bridge)
    return _CACHE[key]


def load_example(name: str, floating_base: bool) -> RobotCase:
    """Example robot ``name``, loaded once per session."""
    return _load(name, example_source(name), floating_base)


@pytest.fixture
def load_robot():
    """load_robot(name, floating_base) -> the RobotCase of an example robot (loaded once per session), for
    tests that pick their robots by name."""
    return load_example


def load_random_tree(seed: int, floating_base: bool) -> RobotCase:
    """Random tree ``seed``, loaded once per session."""
    return _load(f"random{seed}", random_tree_source(seed), floating_base)


def _base(floating: bool) -> str:
    return "floating" if floating else "fixed"


def _load_param(label, floating_base: bool) -> RobotCase:
    """A fixture parameter: an example robot name or a random tree seed."""
    if isinstance(label, str):
        return load_example(label, floating_base)
    return load_random_tree(label, floating_base)


def _params(labels, id_of):
    return [pytest.param((label, fb), id=f"{id_of(label)}-{_base(fb)}") for label in labels for fb in (False, True)]


ROBOT_PARAMS = _params(ROBOT_NAMES, str)
SMALL_ROBOT_PARAMS = _params(("ur5", "panda", "solo12", "anymal"), str)
FLOATING_SMALL_ROBOT_PARAMS = [p for p in SMALL_ROBOT_PARAMS if p.values[0][1]]
RANDOM_PARAMS = _params(RANDOM_TREE_SEEDS, lambda seed: f"tree{seed}")


def _robot_fixture(name: str, params, doc: str):
    """A parametrized fixture ``name`` yielding the RobotCase of each parameter."""

    def fixture(request) -> RobotCase:
        return _load_param(*request.param)

    fixture.__doc__ = doc
    return pytest.fixture(name=name, params=params)(fixture)


robot = _robot_fixture("robot", ROBOT_PARAMS, "Every example robot, fixed base and floating base.")
small_robot = _robot_fixture("small_robot", SMALL_ROBOT_PARAMS, "The smaller example robots, fixed and floating.")
floating_robot = _robot_fixture(
    "floating_robot", FLOATING_SMALL_ROBOT_PARAMS, "The smaller example robots with a free flyer."
)
random_robot = _robot_fixture(
    "random_robot",
    RANDOM_PARAMS,
    "Random trees with revolute, continuous, prismatic and fixed joints, massless links,"
    " random frames and inertias, fixed base and floating base.",
)
any_robot = _robot_fixture(
    "any_robot", ROBOT_PARAMS + RANDOM_PARAMS, "Every example robot and every random tree, fixed and floating."
)
light_robot = _robot_fixture(
    "light_robot",
    SMALL_ROBOT_PARAMS + RANDOM_PARAMS,
    "The smaller example robots and every random tree, for the slow oracles (finite differences, complex step).",
)


_ARMATURE_CACHE: Dict[Tuple[str, bool], RobotCase] = {}


def armature_case(name: str, floating_base: bool, source: Any = None) -> RobotCase:
    """Example robot ``name`` (or the URDF ``source``) with a random armature on every dof, set in both
    libraries: models of its own, loaded once per session (the shared models keep no armature)."""
    key = (name, floating_base)
    if key not in _ARMATURE_CACHE:
        from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge

        source = example_source(name) if source is None else source
        model = rd.load_urdf(source, floating_base=floating_base)
        bridge = PinocchioBridge.for_model(model, source)
        case = RobotCase(f"{name}+armature", source, floating_base, model, model.create_data(), bridge)
        armature = case.rng("armature").uniform(0.01, 0.5, model.nv)
        model.armature = armature
        bridge.model.armature = armature.copy()
        _ARMATURE_CACHE[key] = case
    return _ARMATURE_CACHE[key]


@pytest.fixture(params=[pytest.param(("ur5", False), id="ur5-fixed"), pytest.param(("talos", True), id="talos-floating")])
def armature_robot(request) -> RobotCase:
    """ur5 and talos (free flyer, whose 6 dofs get an armature too) with a random armature on every dof."""
    return armature_case(*request.param)


@pytest.fixture
def massless_robot() -> RobotCase:
    """Romeo as example-robot-data ships it (floating base): its hands' links have no mass."""
    return _load("romeo-massless", EXAMPLE_ROBOTS["romeo"], True)


@pytest.fixture
def massless_armature_robot() -> RobotCase:
    """massless_robot with a random armature on every dof, which makes M regular."""
    return armature_case("romeo-massless", True, source=EXAMPLE_ROBOTS["romeo"])


@pytest.fixture(params=[pytest.param(False, id="fixed"), pytest.param(True, id="floating")])
def arm7(request) -> RobotCase:
    """The package's own 7-dof arm URDF."""
    from rbd_deriv.testing.robots import bundled_urdf

    return _load("rbd_arm7", bundled_urdf("rbd_arm7"), request.param)


@pytest.fixture
def ros(tmp_path):
    """A private ROS domain (limited to this machine), rclpy initialised in it, a client node, and
    ``start(module, parameters) -> log path``, which starts ``python -m module`` with those parameters as a
    process (its output in ``tmp_path``); every process started is stopped at the end."""
    rclpy = pytest.importorskip("rclpy")
    from rbd_deriv.nodes.processes import ros_parameters, stop_processes

    os.environ["ROS_DOMAIN_ID"] = str(random.randint(100, 200))
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    rclpy.init()
    processes: List[subprocess.Popen] = []

    def start(module: str, parameters: dict) -> Path:
        log = tmp_path / f"{module.rsplit('.', 1)[-1]}_{len(processes)}.log"
        with open(log, "wb") as stream:
            processes.append(subprocess.Popen([sys.executable, "-m", module, *ros_parameters(parameters)],
                                              stdout=stream, stderr=stream))
        return log

    node = rclpy.create_node("test_client")
    yield node, start, processes
    stop_processes(processes, timeout=10.0)
    node.destroy_node()
    rclpy.try_shutdown()
