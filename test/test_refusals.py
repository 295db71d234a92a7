"""Refusal counting and log throttling (rbd_deriv.refusals)."""

from __future__ import annotations

from rbd_deriv.refusals import Refusals


def test_counts_every_refusal_and_logs_each_reason_once_per_period():
    refusals = Refusals(log_period=5.0)
    assert refusals.count("stale", "3 s old", now=100.0) == "refused [stale, 1 so far]: 3 s old"
    assert refusals.count("stale", "4 s old", now=101.0) is None
    assert refusals.count("stale", "5 s old", now=104.9) is None
    # Another reason has its own period.
    assert refusals.count("non_finite", "NaN in joint2", now=102.0) == "refused [non_finite, 1 so far]: NaN in joint2"
    line = refusals.count("stale", "6 s old", now=105.0)
    assert line == "refused [stale, 4 so far]: 6 s old (2 more since the last report)"
    assert refusals.counts == {"stale": 4, "non_finite": 1} and refusals.total == 5


def test_a_zero_period_logs_every_refusal():
    refusals = Refusals(log_period=0.0)
    assert all(refusals.count("bad_request", "x", now=1.0) for _ in range(3))
    assert refusals.counts["bad_request"] == 3


def test_an_error_is_counted_under_its_kind_and_reason():
    class Refused(Exception):
        reason = "size"

    refusals = Refusals(log_period=0.0)
    assert refusals.count_error("policy", Refused("3 knots, 4 expected")) == \
        "refused [policy/size, 1 so far]: 3 knots, 4 expected"
    assert refusals.count_error("policy", "no reason given") == "refused [policy, 1 so far]: no reason given"
    assert refusals.counts == {"policy/size": 1, "policy": 1}


def test_messages_used_refused_and_superseded_are_reported_by_input():
    refusals = Refusals(log_period=0.0)
    refusals.count_error("odom", type("Refused", (Exception,), {"reason": "jump"})("0.3 m"))
    refusals.count_error("odom", "no reason given")
    refusals.count_error("odometry", "another input whose name starts alike")
    refusals.used["odom"] += 3
    refusals.superseded["odom"] += 7
    assert refusals.refused("odom") == 2 and refusals.refused("joint_states") == 0
    assert refusals.report() == {"refused_odom": "1", "refused_odom/jump": "1", "refused_odometry": "1",
                                 "used_odom": "3", "superseded_odom": "7"}
