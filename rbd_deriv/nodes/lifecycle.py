"""What the package's managed (lifecycle) nodes share: the ``robot_description`` topic's QoS, the transition
results, the note that a node waits for a description, :func:`destroy` for what configure made, and
:class:`Autostart`, which walks a node through configure and activate at start (the ``autostart`` parameter)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer

#: robot_state_publisher's: the last description is kept for late subscribers.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE

#: How often [s] autostart looks again for a description (one from the topic arrives between two looks).
AUTOSTART_PERIOD = 0.1


def waiting_notice(node: LifecycleNode) -> Callable[[], None]:
    """A call that logs, the first time only, that ``node`` waits for its robot description on the topic."""
    said = []

    def say() -> None:
        if not said:
            node.get_logger().info("no robot description yet: waiting on the robot_description topic")
            said.append(True)
    return say


def destroy(node: LifecycleNode, entities: Iterable) -> None:
    """Remove ``entities`` (publishers, subscriptions, services, timers; None is skipped) from ``node``: what
    configure made, at cleanup."""
    removers = ((Timer, node.destroy_timer), (Publisher, node.destroy_publisher),
                (Subscription, node.destroy_subscription), (Service, node.destroy_service))
    for entity in entities:
        for kind, remove in removers:
            if isinstance(entity, kind):
                remove(entity)
                break


class Autostart:
    """Configure, then activate, a managed node as soon as a robot description is known: at once if its
    parameters give one, else on a timer (steady clock) while the topic may still bring it. A description
    that failed to configure is not tried again; another one is. Once active, the timer is removed.

    Args:
        node: The node to walk through its transitions.
        description: What configure would load now (the parameter's text, the file's path, the topic's
            text), None while nothing is known.
        configured: Whether the node is configured (a user's ``ros2 lifecycle set`` may have done it).
        waiting: Called while nothing is known (:func:`waiting_notice`).
        guard: Wraps the timer's callback (an unexpected error counted, not fatal).
    """

    def __init__(self, node: LifecycleNode, description: Callable[[], Optional[str]], configured: Callable[[], bool],
                 waiting: Callable[[], None], guard: Callable[[Callable], Callable]) -> None:
        self._node, self._description, self._configured, self._waiting = node, description, configured, waiting
        self._failed: Optional[str] = None
        self._timer = node.create_timer(AUTOSTART_PERIOD, guard(self.step),
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.step()

    def step(self) -> None:
        """One attempt: configure if a new description is known, then activate and stop."""
        if self._timer is None:
            return
        if not self._configured():
            text = self._description()
            if text is None or text == self._failed:
                if text is None:
                    self._waiting()
                return
            if self._node.trigger_configure() != SUCCESS:
                self._failed = text
                return
        self._node.destroy_timer(self._timer)
        self._timer = None
        self._node.trigger_activate()
