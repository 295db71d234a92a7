"""Times in integer nanoseconds and ROS stamps (rbd_deriv.stamps)."""

from __future__ import annotations

from types import SimpleNamespace

from rbd_deriv.stamps import NS_PER_S, Throttle, ns_to_seconds, ns_to_stamp, seconds_to_stamp, set_stamp, stamp_to_ns


def test_stamps_and_nanoseconds_convert_both_ways():
    ns = 1_795_799_293_390_250_465
    stamp = set_stamp(SimpleNamespace(sec=0, nanosec=0), ns)
    assert (stamp.sec, stamp.nanosec) == (1_795_799_293, 390_250_465) == tuple(ns_to_stamp(ns))
    assert stamp_to_ns(stamp) == ns
    # A difference of two times since 1970 keeps the nanosecond; a float of either would not.
    assert ns_to_seconds(ns + 1, ns) == 1e-9
    assert seconds_to_stamp(1.5) == (1, NS_PER_S // 2)


def test_throttle_is_due_at_most_once_per_period():
    throttle = Throttle(0.005)
    times_ns = [0, 1_000_000, 4_999_999, 5_000_000, 5_000_001, 9_000_000, 10_000_000, 30_000_000, 30_000_001]
    assert [t for t in times_ns if throttle.due(t)] == [0, 5_000_000, 10_000_000, 30_000_000]
    # The first call is due whatever the clock reads (a simulated clock starts at the wall clock's time).
    assert Throttle(1.0).due(1_795_799_293_390_250_465)
    always = Throttle(0.0)
    assert all(always.due(t) for t in (7, 7, 8))
