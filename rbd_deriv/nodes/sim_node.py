"""Simulated torque-controlled robot: effort commands in, joint_states out at 1 kHz.

The physics (:mod:`rbd_deriv.sim`) runs in its own thread paced on the wall clock, so the
joint_states rate does not depend on the executor; commands arrive through the executor and are
picked up at the next physics step. The command topic takes std_msgs/Float64MultiArray like
ros2_control's effort forward-command controller (``/<controller>/commands``), so a controller
written against this node drives a real robot's controller unchanged.

Until the first valid command arrives the robot is held still (brakes on); afterwards the last
valid command stays applied, as the forward-command controller does. A bad command (wrong
length, NaN or inf) is refused, counted and logged; the last good one stays.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

import rbd_deriv as rd
from rbd_deriv.nodes.parameters import SIM_NODE, declare_parameters, per_joint
from rbd_deriv.nodes.spin import run_node
from rbd_deriv.sim import make_plant
from rbd_deriv import bundled_urdf

#: Largest number of physics steps taken at once to catch up with the wall clock; beyond it the
#: simulation slows down instead of jumping.
MAX_CATCH_UP_STEPS = 20


class SimNode(Node):
    """Wires the plant to ROS: parameters, command subscription, joint_states publisher."""

    def __init__(self) -> None:
        # rclpy destroys a context's nodes at shutdown, this one too when the rest of __init__ fails (MuJoCo
        # missing, a bad URDF): stop() must then find no thread rather than no attribute.
        self._running = False
        self._thread: threading.Thread | None = None
        super().__init__("sim_node")
        p = declare_parameters(self, SIM_NODE)
        urdf_path = p["urdf_path"] or str(bundled_urdf("rbd_arm7"))
        rate = p["physics_rate_hz"]
        self.model = rd.load_urdf(str(Path(urdf_path)))
        self.plant = make_plant(p["backend"], urdf_path, dt=1.0 / rate, damping=per_joint(p["damping"]),
                                friction=per_joint(p["friction"]), model=self.model)
        initial = np.asarray(p["initial_positions"], dtype=float)
        if initial.size == 1:
            initial = np.full(self.model.nv, float(initial[0]))
        self.plant.reset(initial)
        self.nv = self.model.nv
        self._command: np.ndarray | None = None
        self._applied: np.ndarray | None = None
        self._lock = threading.Lock()
        self.refused_commands = 0
        self._message = JointState()
        self._message.name = list(self.plant.joint_names)
        self._message.header.frame_id = p["frame_id"]
        self.publisher = self.create_publisher(JointState, p["joint_states_topic"], 10)
        self.create_subscription(Float64MultiArray, p["command_topic"], self._on_command, 10)
        self._running = True
        self._thread = threading.Thread(target=self._physics_loop, daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{p['backend']} plant of {self.model.name!r} ({self.nv} joints) at {rate:g} Hz, "
            f"commands on {p['command_topic']}")

    def _on_command(self, message: Float64MultiArray) -> None:
        command = np.asarray(message.data, dtype=float)
        if command.shape != (self.nv,) or not np.isfinite(command).all():
            self.refused_commands += 1
            self.get_logger().warning(
                f"refused command: needs {self.nv} finite torques, got {command.size} values "
                f"({self.refused_commands} refused so far)", throttle_duration_sec=1.0)
            return
        with self._lock:
            self._command = command

    def _physics_loop(self) -> None:
        period = self.plant.dt
        next_time = time.monotonic()
        while self._running and rclpy.ok():
            now = time.monotonic()
            steps = min(MAX_CATCH_UP_STEPS, max(1, int((now - next_time) / period) + 1))
            with self._lock:
                command = self._command
            if command is not None:
                self._applied = self.plant.step(command, steps)
            next_time += steps * period
            if now - next_time > MAX_CATCH_UP_STEPS * period:
                next_time = now  # too far behind: slow down rather than jump
            try:
                self._publish()
            except Exception:  # noqa: BLE001 - Ctrl-C shut the context down between ok() and publish
                if rclpy.ok():
                    raise
                return
            delay = next_time - time.monotonic()
            if delay > 0.0:
                time.sleep(delay)

    def _publish(self) -> None:
        message = self._message
        message.header.stamp = self.get_clock().now().to_msg()
        message.position = self.plant.q.tolist()
        message.velocity = self.plant.v.tolist()
        # The torque the drives actually applied (saturated), as a real robot reports it.
        message.effort = [] if self._applied is None else self._applied.tolist()
        self.publisher.publish(message)

    def stop(self) -> None:
        """Stop the physics thread."""
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def destroy_node(self) -> None:
        """Stop the physics thread, then the node."""
        self.stop()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """Console entry point ``sim_node``: spin until interrupted (SIGINT or SIGTERM)."""
    return run_node(SimNode, args)


if __name__ == "__main__":
    sys.exit(main())
