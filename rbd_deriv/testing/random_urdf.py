"""Random kinematic trees written as URDF text, for oracle tests.

Every tree is valid for this package's loader: a single root, no loops, a
positive-definite joint-space inertia matrix. Massless links appear only where
that stays true: between two massive links (so every moving joint still moves
some mass), or as leaves hung on a fixed joint (sensor frames).
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["JOINT_KINDS", "random_inertia", "random_urdf"]

JOINT_KINDS: Tuple[str, ...] = ("revolute", "continuous", "prismatic", "fixed")


def _fmt(values: Sequence[float]) -> str:
    return " ".join(repr(float(value)) for value in values)


def _inertia_attributes(inertia: np.ndarray) -> str:
    names = (("ixx", 0, 0), ("ixy", 0, 1), ("ixz", 0, 2), ("iyy", 1, 1), ("iyz", 1, 2), ("izz", 2, 2))
    return " ".join(f'{name}="{float(inertia[row, col])!r}"' for name, row, col in names)


def _rotation_from_rpy(rpy: np.ndarray) -> np.ndarray:
    roll, pitch, yaw = rpy
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cy, sy = np.cos(yaw), np.sin(yaw)
    rot_x = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    rot_y = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rot_z = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rot_z @ rot_y @ rot_x


def random_inertia(rng: np.random.Generator, mass: float) -> np.ndarray:
    """Random rotational inertia (3, 3) [kg m^2] about the centre of mass.

    Built from the second moments of a random mass distribution (positive
    ``a, b, c`` along principal axes), so the principal moments ``b + c``,
    ``a + c``, ``a + b`` are positive and satisfy the triangle inequality;
    then rotated by a random rotation so every product of inertia is non zero.
    """
    second_moments = mass * rng.uniform(0.002, 0.05, 3)
    a, b, c = second_moments
    principal = np.diag([b + c, a + c, a + b])
    rotation = _rotation_from_rpy(rng.uniform(-np.pi, np.pi, 3))
    inertia = rotation @ principal @ rotation.T
    return 0.5 * (inertia + inertia.T)


def _random_axis(rng: np.random.Generator, non_unit_axes: bool) -> np.ndarray:
    axis = rng.standard_normal(3)
    axis /= np.linalg.norm(axis)
    if non_unit_axes:
        axis *= rng.uniform(0.2, 3.0)
    return axis


def _choose_massless(parents: List[int], kinds: List[str], rng: np.random.Generator,
                     probability: float) -> List[bool]:
    """Which links get no ``<inertial>``: never the root, never a leaf on a moving joint,
    never a link with a massless child (so every moving joint moves a massive body
    at most one massless link away)."""
    count = len(parents)
    children: List[List[int]] = [[] for _ in range(count)]
    for link in range(1, count):
        children[parents[link]].append(link)
    massless = [False] * count
    # Children have larger indices: walking down the indices decides every child
    # before its parent.
    for link in range(count - 1, 0, -1):
        if rng.uniform() >= probability:
            continue
        if not children[link]:
            massless[link] = kinds[link] == "fixed"
        else:
            massless[link] = not any(massless[child] for child in children[link])
    return massless


def random_urdf(
    rng: np.random.Generator,
    n_links: int = 8,
    *,
    joint_kinds: Sequence[str] = JOINT_KINDS,
    kind_weights: Sequence[float] | None = None,
    branching: float = 0.5,
    massless_probability: float = 0.2,
    non_unit_axes: bool = False,
    shuffle_document: bool = True,
    name: str = "random_tree",
) -> str:
    """Return the URDF text of a random kinematic tree.

    Args:
        rng: source of randomness (the same seed gives the same robot).
        n_links: number of links including the root (>= 2).
        joint_kinds: joint types to draw from (subset of ``JOINT_KINDS``).
        kind_weights: relative probabilities of ``joint_kinds`` (uniform if None).
        branching: probability that a new link attaches to a random earlier link
            instead of the previous one (0 gives a chain).
        massless_probability: probability that a link eligible to be massless
            is written without ``<inertial>``.
        non_unit_axes: scale joint axes by a random factor in [0.2, 3] so the
            loader's normalization is exercised.
        shuffle_document: write links and joints in random document order
            (the model's joint order must not depend on it).
        name: robot name.

    The root link is always massive. Joint origins have random xyz in
    [-0.4, 0.4] m and random rpy; inertial origins too. Masses are in
    [0.3, 4] kg; revolute and prismatic joints get random finite limits.
    """
    if n_links < 2:
        raise ValueError("n_links must be at least 2")
    unknown = set(joint_kinds) - set(JOINT_KINDS)
    if unknown:
        raise ValueError(f"unknown joint kinds {sorted(unknown)}")
    kinds_list = list(joint_kinds)
    weights = None
    if kind_weights is not None:
        weights = np.asarray(kind_weights, dtype=float)
        weights = weights / weights.sum()

    parents = [-1]
    kinds = [""]
    for link in range(1, n_links):
        if rng.uniform() < branching:
            parents.append(int(rng.integers(0, link)))
        else:
            parents.append(link - 1)
        kinds.append(str(rng.choice(kinds_list, p=weights)))
    massless = _choose_massless(parents, kinds, rng, massless_probability)

    link_blocks = []
    for link in range(n_links):
        if massless[link]:
            link_blocks.append(f'  <link name="link_{link}"/>')
            continue
        mass = rng.uniform(0.3, 4.0)
        inertia = random_inertia(rng, mass)
        com = rng.uniform(-0.2, 0.2, 3)
        rpy = rng.uniform(-np.pi, np.pi, 3)
        link_blocks.append(
            f'  <link name="link_{link}">\n'
            f'    <inertial>\n'
            f'      <origin xyz="{_fmt(com)}" rpy="{_fmt(rpy)}"/>\n'
            f'      <mass value="{float(mass)!r}"/>\n'
            f'      <inertia {_inertia_attributes(inertia)}/>\n'
            f'    </inertial>\n'
            f'  </link>'
        )

    joint_blocks = []
    for link in range(1, n_links):
        kind = kinds[link]
        xyz = rng.uniform(-0.4, 0.4, 3)
        rpy = rng.uniform(-np.pi, np.pi, 3)
        lines = [
            f'  <joint name="joint_{link}" type="{kind}">',
            f'    <parent link="link_{parents[link]}"/>',
            f'    <child link="link_{link}"/>',
            f'    <origin xyz="{_fmt(xyz)}" rpy="{_fmt(rpy)}"/>',
        ]
        if kind != "fixed":
            lines.append(f'    <axis xyz="{_fmt(_random_axis(rng, non_unit_axes))}"/>')
            effort, velocity = float(rng.uniform(5.0, 200.0)), float(rng.uniform(0.5, 10.0))
            if kind == "continuous":
                lines.append(f'    <limit effort="{effort!r}" velocity="{velocity!r}"/>')
            else:
                span = 3.0 if kind == "revolute" else 0.5
                lower, upper = -float(rng.uniform(0.1, span)), float(rng.uniform(0.1, span))
                lines.append(
                    f'    <limit lower="{lower!r}" upper="{upper!r}" effort="{effort!r}" velocity="{velocity!r}"/>'
                )
        lines.append("  </joint>")
        joint_blocks.append("\n".join(lines))

    if shuffle_document:
        # Link order must not matter; joint order decides nothing either, as
        # siblings are ordered by name.
        link_blocks = [link_blocks[i] for i in rng.permutation(len(link_blocks))]
        joint_blocks = [joint_blocks[i] for i in rng.permutation(len(joint_blocks))]
    body = "\n".join(link_blocks + joint_blocks)
    return f'<?xml version="1.0"?>\n<robot name="{name}">\n{body}\n</robot>\n'
