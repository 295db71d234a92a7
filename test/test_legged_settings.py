"""rbd_deriv.control.legged_settings: the gait table (gaits as data) and the loop's settings."""

import numpy as np
import pytest

from rbd_deriv.control.legged_settings import STAND, GaitSpec, LeggedLoopSettings, make_gait, parse_gait_table
from rbd_deriv.control.schedule import Gait
from rbd_deriv.demo.processes import read_parameters
from rbd_deriv.exceptions import InputError

FEET = ("FL", "FR", "HL", "HR")


def test_the_shipped_gaits_parse_and_keep_a_foot_down():
    """config/mpc_node.yaml's table: trot, pace, bound (pairs), crawl (one foot up at a time) for four feet, walk
    (one sole up at a time, both down between) for two; every knot of each has feet on the ground, at the MPC steps
    of solo12 and talos (20 ms) and of the benchmark's long horizon (10 ms)."""
    table = parse_gait_table(read_parameters("mpc_node.yaml")["mpc_node"]["gait_table"])
    assert {"trot", "pace", "bound", "crawl", "walk"} <= set(table)
    soles = ("left", "right")
    for dt in (0.02, 0.01):
        walk = make_gait("walk", soles, ["frame"] * 2, table, dt)
        assert walk.pattern.any(axis=1).all() and (~walk.pattern).any(axis=0).all()
        assert 0.35 < walk.pattern.all(axis=1).mean() < 0.45  # both soles down 2 x 20 % of the cycle
    pairs = {"trot": ({0, 3}, {1, 2}), "pace": ({0, 2}, {1, 3}), "bound": ({0, 1}, {2, 3})}
    for dt in (0.02, 0.01):
        for name, spec in table.items():
            if name == "walk":
                continue
            gait = make_gait(name, FEET, ["point"] * 4, table, dt)
            assert gait.period == int(round(spec.period / dt)) and gait.pattern.any(axis=1).all()
            lifted = {frozenset(np.flatnonzero(~row)) for row in gait.pattern} - {frozenset()}
            if name in pairs:
                assert lifted == {frozenset(p) for p in pairs[name]}, (name, lifted)
            else:
                assert all(len(s) == 1 for s in lifted) and len(lifted) == 4, (name, lifted)
    assert make_gait(STAND, FEET, ["point"] * 4, table, 0.02).pattern.all()


def test_a_row_reads_its_fields_and_a_new_gait_is_a_row():
    table = parse_gait_table(["amble: period=0.6 duty=0.7 offsets=0.0,0.5,0.75,0.25 swing_height=0.03",
                              "gallop: duty=0.4 offsets=0.0,0.1,0.5,0.6 period=0.36"])
    assert table["amble"] == GaitSpec("amble", 0.6, 0.7, (0.0, 0.5, 0.75, 0.25), 0.03)
    assert table["gallop"].swing_height is None and table["gallop"].knots(0.02) == 18
    gait = make_gait("amble", FEET, ["point"] * 4, table, 0.02)
    np.testing.assert_array_equal(gait.pattern, Gait.from_phases(FEET, 30, 0.7, (0.0, 0.5, 0.75, 0.25)).pattern)


@pytest.mark.parametrize("rows, match", [
    (["trot period=0.4 duty=0.6 offsets=0,0,0,0"], "is not"),
    (["trot: period=0.4 duty=0.6"], "is not"),
    (["trot: period=0.4 duty=0.6 offsets=0,0,0,0 speed=1"], "is not"),
    (["trot: period=0.4 period=0.5 duty=0.6 offsets=0,0,0,0"], "is not"),
    (["stand: period=0.4 duty=0.6 offsets=0,0,0,0"], "built in"),
    (["a: period=0.4 duty=0.6 offsets=0,0,0,0", "a: period=0.4 duty=0.6 offsets=0,0,0,0"], "repeated"),
    (["a: period=fast duty=0.6 offsets=0,0,0,0"], "fast"),
    (["a: period=-0.4 duty=0.6 offsets=0,0,0,0"], "period"),
    (["a: period=nan duty=0.6 offsets=0,0,0,0"], "period"),
    (["a: period=0.4 duty=0 offsets=0,0,0,0"], "duty"),
    (["a: period=0.4 duty=0.6 offsets=0,0,1,0"], "offsets"),
    (["a: period=0.4 duty=0.6 offsets=0,0,0,0 swing_height=5"], "swing_height"),
])
def test_a_bad_row_is_refused_with_its_reason(rows, match):
    with pytest.raises(InputError, match=match):
        parse_gait_table(rows)


def test_a_gait_the_robot_cannot_follow_is_refused_when_it_is_made():
    table = parse_gait_table(["hop: period=0.4 duty=0.4 offsets=0.0,0.0,0.0,0.0",
                              "biped: period=0.8 duty=0.6 offsets=0.0,0.5",
                              "odd: period=0.41 duty=0.6 offsets=0.5,0.0,0.0,0.5"])
    with pytest.raises(InputError, match="no foot on the ground"):
        make_gait("hop", FEET, ["point"] * 4, table, 0.02)
    with pytest.raises(InputError, match="2 phase offsets for 4 feet"):
        make_gait("biped", FEET, ["point"] * 4, table, 0.02)
    with pytest.raises(InputError, match="whole number"):
        make_gait("odd", FEET, ["point"] * 4, table, 0.02)
    with pytest.raises(InputError, match="neither"):
        make_gait("gallop", FEET, ["point"] * 4, table, 0.02)
    assert make_gait("biped", ("L", "R"), ["frame"] * 2, table, 0.02).pattern.any(axis=1).all()


def test_the_command_bounds_are_checked():
    for bad in ({"max_velocity": (0.5, 0.3)}, {"max_velocity": (0.5, 0.0, 1.0)}, {"max_acceleration": (1, 1, np.inf)},
                {"path_slack": 0.0}, {"heading_slack": -1.0}):
        with pytest.raises(InputError):
            LeggedLoopSettings(**bad)
    assert LeggedLoopSettings(max_velocity=[1, 2, 3]).max_velocity == (1.0, 2.0, 3.0)


def test_the_gaits_a_configuration_builds_and_their_swing_height():
    from rbd_deriv.control.legged_settings import built_gaits, swing_height

    assert built_gaits({"gaits": ["stand", "trot"], "gait": "pace", "idle_gait": ""}) == ["stand", "trot", "pace"]
    assert built_gaits({"gaits": ["trot"], "gait": "trot", "idle_gait": "stand"}) == ["trot", "stand"]
    table = parse_gait_table(read_parameters("mpc_node.yaml")["mpc_node"]["gait_table"])
    assert swing_height(table, "pace", 0.05) == 0.03      # its row's
    assert swing_height(table, "trot", 0.05) == 0.05      # the robot's
    assert swing_height(table, STAND, 0.07) == 0.07
