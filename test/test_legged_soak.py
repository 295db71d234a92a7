"""A short soak of the legged loop (rbd_deriv/nodes/legged_soak.py): solo12 trotting through the simulator and MPC
nodes as processes on the simulated clock (as the demos), broken inputs of every kind mixed into both nodes' topics,
every message sent accounted for.

The full soak (10 minutes) is a benchmark, ``./run bench soak --robot solo12`` (rbd_deriv/bench/soak.py, whose
report gives the failures' text here); its figures are in docs/ros.md.
"""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg", reason="rbd_deriv interfaces not built (pip install -e . or colcon build)")
pytest.importorskip("mujoco")

from rbd_deriv.bench.soak import legged_report  # noqa: E402
from rbd_deriv.nodes.legged_soak import BROKEN, run_legged_soak  # noqa: E402

#: Growth of each node's resident memory allowed over the short soak [bytes]. Measured over 25-30 s (three runs):
#: the simulator +0.4 to +1.2 MiB, the MPC node +1.5 to +1.9 MiB (over the 10-minute soak: +1.3 and +1.9). A leak of
#: a few hundred bytes per message (joint_states and odometry at 1 kHz each, the MPC's 200 policies a second) would
#: pass it within the soak.
RSS_GROWTH_BOUND = 16 * 2**20


def test_a_short_legged_soak_keeps_solo12_up_and_accounts_for_every_message():
    result = run_legged_soak("solo12", duration=25.0, push_period=4.0)
    text = legged_report(result)
    print(text)
    assert all(result.alive.values()) and set(result.alive) == {"sim", "mpc"}, text
    assert not result.fell, text
    # Every topic's balance: sent = used + refused + superseded + lost where only the soak publishes (cmd_vel,
    # push), every broken message refused under its reason where the nodes' own messages share the topic.
    for topic in result.topics.values():
        assert topic.balanced, text
    assert result.balanced, text
    # Every broken kind was sent and counted under its reason: all of them but those lost before the node, and on
    # cmd_vel those superseded (only the newest command of a tick is read: the older ones are not judged).
    for name, kinds in BROKEN.items():
        topic = result.topics[name]
        unjudged = topic.lost + (topic.superseded if name == "cmd_vel" else 0)
        for kind, reason in kinds.items():
            sent, refused = topic.sent_bad.get(kind, 0), topic.refused.get(reason, 0)
            assert sent > 0 and 0 < refused, (name, kind, text)
            assert sent - unjudged <= refused <= sent, (name, kind, text)
    # The cmd_vel beyond the bounds were clamped and counted (those superseded before a tick aside).
    assert 0 < result.clamped <= result.beyond_limits, text
    assert result.pushes_applied > 0, text
    # Nothing else failed, and the MPC kept its rate (200 Hz in solo12.yaml; a loaded machine slows it).
    assert not any("internal_error" in key for key in result.refused_other), text
    assert result.mpc_rate_hz > 100.0, text
    assert result.walked_m > 2.0, text
    for node, rss in result.rss.items():
        assert 0 < rss["start"] and rss["end"] - rss["start"] < RSS_GROWTH_BOUND, (node, text)
