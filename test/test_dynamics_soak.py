"""A short soak of the dynamics node (rbd_deriv/nodes/dynamics_soak.py): the node as a process, joint_states at 1 kHz
through DDS with broken messages and bursts beyond its queue, every message sent accounted for.

The full soak (10 minutes) is a benchmark, ``./run bench soak`` (rbd_deriv/bench/soak.py, whose report
gives the failures' text here); its figures are in docs/ros.md.
"""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("rbd_deriv.msg", reason="rbd_deriv interfaces not built (pip install -e . or colcon build)")

from rbd_deriv.bench.soak import report  # noqa: E402
from rbd_deriv.nodes.dynamics_soak import BAD_KINDS, run_soak  # noqa: E402


def test_a_short_soak_accounts_for_every_message():
    # Bursts of 300 at once: more than the node's joint_states queue holds, so some are lost before it.
    result = run_soak(duration=6.0, rate=1000.0, bad_every=25, burst=300, burst_period=2.0)
    text = report(result)
    assert result.node_alive, text
    assert result.sent >= 6000 + 2 * 300, text
    assert all(result.sent_bad[kind] > 0 for kind in BAD_KINDS), text
    # Each broken message is refused under the reason it was broken for (unless it was lost before the node).
    for kind in BAD_KINDS:
        assert 0 < result.refused.get(kind, 0) <= result.sent_bad[kind], text
    # Nothing else failed (a message delayed by the machine's load may still be refused as stale).
    assert not {"internal_error", "non_finite_output", "unusable_state"} & set(result.refused), text
    assert result.lost > 0, text  # the bursts overflow the queue: losses happen and are counted
    assert result.sent == result.outputs + result.refused_total + result.lost, text
    assert result.inputs == result.outputs + result.refused_total, text
    assert result.balanced, text
    # Every output reached this process or was counted lost on the way, and none carried NaN or inf.
    for topic, count in result.received.items():
        assert count > 0, text
    assert result.received["bias_torques"] + result.received_lost >= result.outputs, text
    assert result.non_finite_outputs == 0, text
