"""The one way every node of the package runs: init, spin until SIGINT/SIGTERM, clean up."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.serialization import deserialize_message


def run_node(make_node: Callable[[], Node], args: Optional[Sequence[str]] = None,
             cleanup: Optional[Callable[[Node], None]] = None) -> int:
    """Create the node with ``make_node`` and spin it until shutdown; return the exit code (0).

    Args:
        make_node: Builds the node, after ``rclpy.init``.
        args: Command-line arguments (``--ros-args ...``); None for ``sys.argv``.
        cleanup: Called with the node before it is destroyed (stop a thread...).
    """
    rclpy.init(args=args)
    node = None
    try:
        node = make_node()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            if cleanup is not None:
                cleanup(node)
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


class PolledSubscription:
    """A subscription read when the node asks (:meth:`take`), not by executor callbacks.

    rclpy's executor costs a few hundred microseconds of Python per message it delivers. A node that
    works at its own rate (a timer) from the newest data of a 1 kHz topic only needs the messages
    that arrived since its last tick: taking them in the tick saves that cost for every message.

    The subscription lives on a hidden helper node (``_<node>_inputs``, same namespace and context)
    that no executor spins. The topic is resolved, remappings included, by the owning node.

    Args:
        node: The node the subscription belongs to.
        message_type: Message class (sensor_msgs.msg.JointState...).
        topic: Topic name, as the owner would pass it to ``create_subscription``.
        qos: QoS profile; its depth bounds how many messages wait between two takes.
    """

    def __init__(self, node: Node, message_type: type, topic: str, qos) -> None:
        self.message_type = message_type
        self._reader = Node(f"_{node.get_name()}_inputs", namespace=node.get_namespace(),
                            context=node.context, start_parameter_services=False,
                            enable_rosout=False)
        self.topic = node.resolve_topic_name(topic)
        self._subscription = self._reader.create_subscription(message_type, self.topic,
                                                              lambda _: None, qos)

    def take(self, serialized: bool = False) -> list:
        """Messages received since the last call, oldest first (empty if none).

        Args:
            serialized: Return the CDR bytes of each message instead of message objects, so that
                the caller deserializes (``rclpy.serialization.deserialize_message``) only those it
                needs: building a JointState in Python costs about 0.1 ms.
        """
        messages = []
        handle = self._subscription.handle
        while True:
            taken = handle.take_message(self.message_type, serialized)
            if taken is None:
                return messages
            messages.append(taken[0])

    def destroy(self) -> None:
        """Remove the subscription and its helper node."""
        self._reader.destroy_node()


def newest_covering(serialized: list, message_type: type, names: frozenset) -> list:
    """The messages that still matter among ``serialized`` (oldest first): newest first, keep each
    that names a joint of ``names`` not named by a newer one, stop once all are named.

    A robot publishing its joints in one message needs one deserialization per tick; joints split
    across publishers need one message from each. Returned oldest first, so that applying them in
    order leaves the newest value of every joint.
    """
    kept = []
    missing = set(names)
    for data in reversed(serialized):
        message = deserialize_message(data, message_type)
        named = missing.intersection(message.name)
        if named or not names.issuperset(message.name):
            kept.append(message)  # joints still wanted, or unknown ones for the caller to judge
        missing -= named
        if not missing:
            break
    kept.reverse()
    return kept
