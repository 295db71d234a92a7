"""Tests of rbd_deriv.nodes.soak_accounting: a topic's balance (exclusive and shared), the counts of /diagnostics
values, the memory watch and the paced loop (the soaks themselves run in test_dynamics_soak.py and
test_legged_soak.py)."""

from __future__ import annotations

import os
import time

from rbd_deriv.nodes.soak_accounting import MemoryWatch, TopicBalance, counts_with_prefix, differences, paced


def test_an_exclusive_topic_balances_when_every_message_is_counted_once():
    topic = TopicBalance("cmd_vel", exclusive=True, reasons={"non_finite": "cmd_vel/not_finite"})
    for kind in ("", "", "non_finite", ""):
        topic.send(kind)
    assert topic.sent == 4 and topic.sent_bad == {"non_finite": 1}
    topic.used, topic.refused, topic.superseded, topic.lost = 2, {"cmd_vel/not_finite": 1}, 0, 1
    assert topic.balanced and topic.exact
    topic.lost = 0  # one message nobody counted
    assert not topic.balanced
    topic.superseded = 2  # one counted twice
    assert not topic.balanced


def test_a_shared_topic_balances_on_the_refusals_under_the_soak_reasons_within_the_losses():
    reasons = {"non_finite": "odom/bad_base", "wrong_frame": "odom/frame"}
    topic = TopicBalance("odom", exclusive=False, reasons=reasons)
    for kind in ("non_finite", "wrong_frame", "non_finite"):
        topic.send(kind)
    # The simulator's own messages are used and superseded by the thousand; a refusal under another reason
    # (one of theirs) is not the soak's.
    topic.used, topic.superseded, topic.refused = 5000, 20000, {"odom/bad_base": 2, "odom/frame": 1, "odom/jump": 7}
    assert topic.refused_as_sent == 3 and topic.balanced and topic.exact
    topic.refused = {"odom/bad_base": 1, "odom/frame": 1}
    assert not topic.balanced
    topic.lost = 4  # the topic lost four messages, maybe the missing one
    assert topic.balanced and not topic.exact
    topic.refused = {"odom/bad_base": 3, "odom/frame": 1}  # more refused than sent: not the soak's alone
    assert not topic.balanced


def test_counts_are_taken_by_prefix_and_compared_by_key():
    values = {"refused_push": "3", "refused_push/budget": "2", "used_odom": "9", "fell": "false"}
    counts = counts_with_prefix(values, "refused_")
    assert counts == {"push": 3, "push/budget": 2}
    assert differences({"push": 5, "push/budget": 2, "policy/size": 1}, counts) == {"push": 2, "policy/size": 1}


def test_the_memory_watch_reads_this_process_and_keeps_the_largest():
    watch = MemoryWatch(os.getpid())
    watch.begin()
    assert watch.start > 0 and watch.max == watch.start
    ballast = bytearray(64 * 2**20)  # touched: resident
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    watch.finish()
    assert watch.end >= watch.start + 32 * 2**20 and watch.max >= watch.end
    del ballast
    assert MemoryWatch(2**22 + 12345).sample() == -1  # no such process


def test_paced_yields_each_time_when_it_is_due_and_idles_meanwhile():
    idled = []
    start = time.monotonic()
    times = list(paced(0.1, 100.0, lambda: idled.append(1)))
    assert len(times) == 10 and times[0] == 0.0 and abs(times[-1] - 0.09) < 1e-9
    assert time.monotonic() - start >= 0.09 and idled
