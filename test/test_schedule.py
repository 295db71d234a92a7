"""Tests of rbd_deriv.control.schedule: gait tables written out by hand, touchdowns, force layout."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.control.schedule import ContactSchedule, Gait
from rbd_deriv.exceptions import InputError

FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


def test_standing_keeps_every_foot_down_without_touchdown():
    schedule = Gait.standing(FEET).schedule(5)
    assert schedule.active.all() and schedule.horizon == 5
    assert not schedule.touchdown.any() and schedule.touchdown_knots().size == 0
    assert schedule.force_rows == 12
    assert schedule.force_offsets()[3].tolist() == [0, 3, 6, 9]


def test_trot_alternates_diagonal_pairs():
    gait = Gait.trot(FEET, swing=2, support=1)
    assert gait.period == 6
    expected = np.array([[1, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 0],
                         [1, 1, 1, 1], [1, 0, 0, 1], [1, 0, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(gait.pattern, expected)
    schedule = gait.schedule(8, start=1)
    np.testing.assert_array_equal(schedule.active, expected[[1, 2, 3, 4, 5, 0, 1, 2]])
    # FL and HR land at knot 2 (pattern row 3); FR and HL at knot 5 (row 0). FR and HL also landed at the knot just
    # before the horizon (row 0): their touchdown is taken again at knot 0, for a foot that lands late.
    assert schedule.touchdown_knots().tolist() == [0, 2, 5]
    np.testing.assert_array_equal(schedule.touchdown[0], [False, True, True, False])
    np.testing.assert_array_equal(schedule.touchdown[2], [True, False, False, True])
    np.testing.assert_array_equal(schedule.liftoff[0], [True, False, False, True])
    assert schedule.contacts_at(0) == ["FR_FOOT", "HL_FOOT"]
    offsets = schedule.force_offsets()
    assert offsets[0].tolist() == [-1, 0, 3, -1] and offsets[2].tolist() == [0, 3, 6, 9]
    assert schedule.force_rows == 12
    # Receding horizon: one knot later is the same table shifted by one row, and two knots after their landing
    # FR and HL are down without a touchdown.
    later = gait.schedule(8, start=2)
    np.testing.assert_array_equal(later.active[:-1], schedule.active[1:])
    assert later.touchdown_knots().tolist() == [1, 4, 7]


def test_walk_lifts_one_foot_at_a_time_and_frames_take_six_rows():
    order = ("HL_FOOT", "FL_FOOT", "HR_FOOT", "FR_FOOT")
    gait = Gait.walk(order, swing=1)
    assert (gait.pattern.sum(axis=1) == 3).all() and gait.period == 4
    soles = ContactSchedule(("left", "right"), [[1, 1], [0, 1], [1, 1]], kinds="frame")
    assert soles.force_offsets().tolist() == [[0, 6], [-1, 0], [0, 6]]
    assert soles.force_rows == 12 and soles.touchdown_knots().tolist() == [2]


def test_bad_schedules_are_refused():
    with pytest.raises(InputError, match="no contact"):
        ContactSchedule(("a", "b"), [[1, 0], [0, 0]])
    flying = ContactSchedule(("a", "b"), [[1, 0], [0, 0]], can_fly=True)
    assert flying.force_rows == 3
    with pytest.raises(InputError, match="repeat"):
        Gait.standing(("a", "a"))
    with pytest.raises(InputError, match="kind"):
        ContactSchedule(("a",), [[1]], kinds="hinge")
    with pytest.raises(InputError, match="four feet"):
        Gait.trot(("a", "b"), swing=2)
    with pytest.raises(InputError, match="swing"):
        Gait.trot(FEET, swing=0)
    with pytest.raises(InputError, match="active"):
        ContactSchedule(("a", "b"), [[1, 1, 1]])
    with pytest.raises(InputError, match="horizon"):
        Gait.standing(FEET).schedule(0)


def test_a_phase_table_spells_the_knots_of_its_gait():
    """A trot of 20 knots, duty 0.6, the pairs half a cycle apart, is the trot of 8 swing and 2 support knots;
    each foot is down duty x period knots, lands at its offset's knot, and a crawl has one foot up at a time."""
    trot = Gait.from_phases(FEET, 20, 0.6, [0.5, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(trot.pattern, Gait.trot(FEET, swing=8, support=2).pattern)
    crawl = Gait.from_phases(FEET, 40, 0.8, [0.45, 0.95, 0.2, 0.7])
    np.testing.assert_array_equal(crawl.pattern.sum(axis=0), 32)
    assert (crawl.pattern.sum(axis=1) >= 3).all()
    for c, offset in enumerate([0.45, 0.95, 0.2, 0.7]):
        landing = int(round(offset * 40))
        assert crawl.pattern[landing, c] and not crawl.pattern[landing - 1, c]
    assert Gait.from_phases(FEET, 1, 1.0, [0.0] * 4).pattern.all()
    for period, duty, offsets in ((0, 0.5, [0.0] * 4), (2.5, 0.5, [0.0] * 4), (20, 0.0, [0.0] * 4),
                                  (20, 1.2, [0.0] * 4), (20, 0.5, [0.0] * 3), (20, 0.5, [0.0, 0.0, 1.0, 0.0]),
                                  (20, 0.5, [np.nan] * 4), (4, 0.9, [0.0] * 4)):
        with pytest.raises(InputError):
            Gait.from_phases(FEET, period, duty, offsets)
