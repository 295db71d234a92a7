"""A small fleet of generated bags for the fleet evaluation's tests: two robots over several days, plus the
bags a real fleet also holds (a damaged file, an empty folder, a file that is not a bag, a bag without
joint states, a bag without description, a path listed that does not exist).

Every evaluable bag is :func:`rbd_deriv.replay.synthetic.write_noisy_recording`: a known motion with efforts
from the model's inverse dynamics plus Gaussian noise of a known standard deviation, so the residual RMS of
each bag is its noise level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from rbd_deriv.core.urdf import bundled_urdf
from rbd_deriv.replay import bagio, synthetic
from rbd_deriv.testing.random_urdf import random_urdf

__all__ = ["FleetBag", "TestFleet", "SMALL_ARM", "write_test_fleet"]

DAY_NS = 86_400 * 10**9
START_NS = 1_767_225_600 * 10**9  # 2026-01-01 00:00 UTC

SMALL_ARM = random_urdf(np.random.default_rng(4), 4, joint_kinds=("revolute",), branching=0.0,
                        massless_probability=0.0, shuffle_document=False, name="small_arm")
"""A three-joint chain: the fleet's second robot."""


@dataclass
class FleetBag:
    """One entry of the test fleet.

    Attributes:
        name: Its name in the report (path from the folder above the fleet's root).
        reason: ``"ok"`` or the failure reason expected without ``--urdf``.
        robot: Robot name of its description ("" without one).
        noise: Effort noise standard deviation [N m] (0 when not evaluable).
        messages: joint_states messages written.
        start_ns: First stamp [ns].
        damaged: True when part of the file was cut off.
    """

    name: str
    reason: str
    robot: str = ""
    noise: float = 0.0
    messages: int = 0
    start_ns: Optional[int] = None
    damaged: bool = False


@dataclass
class TestFleet:
    """The fleet written by :func:`write_test_fleet`.

    Attributes:
        root: The folder to give ``fleet-eval``.
        listing: A text file listing ``root`` and a path that does not exist.
        bags: Every entry the report must have, by name.
        outlier: Name of the arm bag recorded with 5 times the noise of the others.
    """

    root: Path
    listing: Path
    bags: Dict[str, FleetBag] = field(default_factory=dict)
    outlier: str = ""

    def evaluable(self, robot: str) -> List[FleetBag]:
        return [bag for bag in self.bags.values() if bag.reason == "ok" and bag.robot == robot]


def write_test_fleet(folder: Path, seconds: float = 1.0, rate_hz: float = 500.0) -> TestFleet:
    """Write the test fleet under ``folder/fleet`` (and ``folder/fleet.txt`` listing it).

    Layout: ``fleet/arm/day{0..3}`` (rbd_arm7, 0.02 N m noise, day 2 at 0.1 N m: the outlier),
    ``fleet/arm/cut`` (its mcap cut at 60 %), ``fleet/small/day{0,1}`` (small_arm, one sqlite3),
    ``fleet/empty_day/`` (no file), ``fleet/junk.mcap`` (random bytes), ``fleet/no_states`` (only the
    description), ``fleet/anonymous`` (small_arm without description).
    """
    store = bagio.package_typestore()
    root = folder / "fleet"
    arm_urdf = bundled_urdf("rbd_arm7").read_text()
    fleet = TestFleet(root, folder / "fleet.txt")

    def recording(relative: str, urdf: str, robot: str, day: int, noise: float, storage: str = "mcap",
                  seed: int = 0) -> FleetBag:
        start = START_NS + day * DAY_NS + 3_600 * 10**9 * (seed % 5)
        count = synthetic.write_noisy_recording(root / relative, store, urdf, seconds, rate_hz, noise, seed=seed,
                                                start_ns=start, storage=storage)
        bag = FleetBag(f"fleet/{relative}", "ok", robot, noise, count, start)
        fleet.bags[bag.name] = bag
        return bag

    for day in range(4):
        recording(f"arm/day{day}", arm_urdf, "rbd_arm7", day, 0.1 if day == 2 else 0.02, seed=day)
    fleet.outlier = "fleet/arm/day2"
    cut = recording("arm/cut", arm_urdf, "rbd_arm7", 5, 0.02, seed=7)
    data = next((root / "arm/cut").glob("*.mcap"))
    content = data.read_bytes()
    data.write_bytes(content[: int(len(content) * 0.6)])
    cut.damaged = True
    recording("small/day0", SMALL_ARM, "small_arm", 0, 0.01, seed=10)
    recording("small/day1", SMALL_ARM, "small_arm", 1, 0.01, storage="sqlite3", seed=11)

    (root / "empty_day").mkdir(parents=True)
    fleet.bags["fleet/empty_day"] = FleetBag("fleet/empty_day", "empty")
    (root / "junk.mcap").write_bytes(np.random.default_rng(2).bytes(5000))
    fleet.bags["fleet/junk.mcap"] = FleetBag("fleet/junk.mcap", "damaged")
    synthetic.write_recording(root / "no_states", store, "mcap", [], robot_description=arm_urdf, first_time_ns=START_NS)
    fleet.bags["fleet/no_states"] = FleetBag("fleet/no_states", "no_joint_states", "rbd_arm7")
    anonymous = synthetic.write_noisy_recording(root / "anonymous_tmp", store, SMALL_ARM, seconds, rate_hz, 0.01, seed=12)
    _strip_description(root / "anonymous_tmp", root / "anonymous", store)
    fleet.bags["fleet/anonymous"] = FleetBag("fleet/anonymous", "no_description", "", 0.01, anonymous)

    fleet.listing.write_text(f"# the fleet and a bag that went missing\n{root}\n{folder / 'gone' / 'day9'}\n")
    fleet.bags["day9"] = FleetBag("day9", "missing")
    return fleet


def _strip_description(source: Path, target: Path, store) -> None:
    """Copy the joint states of ``source`` into a new bag ``target`` without the description; remove ``source``."""
    import shutil

    from rbd_deriv.replay.storage import BagSource

    records = []
    for batch in BagSource(source).read(["/joint_states"]):
        records += [(int(batch.bag_ns[i]), batch.message(i)) for i in range(len(batch))]
    synthetic.write_recording(target, store, "mcap", records)
    shutil.rmtree(source)
