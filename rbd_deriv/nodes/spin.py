"""The one way every node of the package runs: init, spin until SIGINT/SIGTERM, clean up."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node


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
