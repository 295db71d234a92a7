"""rbd_deriv.nodes.lifecycle in this process: Autostart on a bare managed node whose configure succeeds for one
description only, the waiting notice said once, :func:`destroy`."""

from __future__ import annotations

import os
from typing import Optional

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.lifecycle import LifecycleNode  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from rbd_deriv.nodes.lifecycle import FAILURE, SUCCESS, Autostart, destroy, waiting_notice  # noqa: E402

GOOD = "<robot name='good'/>"


class Managed(LifecycleNode):
    """Configures from ``description`` when it is GOOD; counts its configure attempts and notices."""

    def __init__(self, context) -> None:
        super().__init__("managed", context=context)
        self.description: Optional[str] = None
        self.configured = False
        self.attempts: list = []
        self.notices = 0

    def on_configure(self, state):
        self.attempts.append(self.description)
        self.configured = self.description == GOOD
        return SUCCESS if self.configured else FAILURE

    def waiting(self) -> None:
        self.notices += 1

    def label(self) -> str:
        return self._state_machine.current_state[1]


@pytest.fixture
def node():
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=1 + os.getpid() % 200)
    managed = Managed(context)
    yield managed
    managed.destroy_node()
    rclpy.shutdown(context=context)


def test_autostart_waits_tries_each_description_once_then_activates(node):
    autostart = Autostart(node, lambda: node.description, lambda: node.configured, node.waiting, lambda f: f)
    assert node.label() == "unconfigured" and node.attempts == [] and node.notices == 1
    node.description = "<robot name='broken'/>"
    autostart.step()
    autostart.step()
    assert node.attempts == ["<robot name='broken'/>"], "a description that failed was tried again"
    assert node.label() == "unconfigured"
    node.description = GOOD
    autostart.step()
    assert node.label() == "active"
    autostart.step()
    assert node.attempts[-1] == GOOD and len(node.attempts) == 2


def test_autostart_activates_a_node_configured_by_hand(node):
    node.description = GOOD
    node.trigger_configure()
    Autostart(node, lambda: node.description, lambda: node.configured, node.waiting, lambda f: f)
    assert node.label() == "active" and len(node.attempts) == 1


def test_waiting_is_said_once(node, monkeypatch):
    lines = []

    class Logger:
        def info(self, line):
            lines.append(line)
    monkeypatch.setattr(node, "get_logger", Logger)
    say = waiting_notice(node)
    say()
    say()
    assert lines == ["no robot description yet: waiting on the robot_description topic"]


def test_destroy_removes_what_it_is_given(node):
    timer = node.create_timer(1.0, lambda: None)
    publisher = node.create_publisher(String, "chatter", 10)
    subscription = node.create_subscription(String, "chatter", lambda message: None, 10)
    destroy(node, [timer, None, publisher, subscription])
    assert timer not in node.timers and publisher not in node.publishers
    assert subscription not in node.subscriptions
