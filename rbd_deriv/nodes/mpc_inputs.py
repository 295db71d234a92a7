"""The MPC node's inputs: its polled subscriptions, read once per tick into the tick loop, every message counted.

:class:`MpcInputs` owns the subscriptions of a configured :class:`rbd_deriv.nodes.mpc_node.MpcNode`: joint_states
(every loop), the base's odometry and the velocity command (a legged loop), the compensation torques, the reference and, in held mode, the
dynamics node's linearization (a fixed-base loop). :meth:`MpcInputs.read` hands what arrived since the previous
tick to the loop: the newest accepted message of each joint (:func:`~rbd_deriv.nodes.spin.apply_newest`), of the
compensation, linearization, reference and velocity command (:func:`~rbd_deriv.nodes.spin.apply_newest_message`), every odometry
message in order. Every message is counted once in the loop's refusals: used, refused under its reason, or
superseded (superseded joint_states are judged first: a bad one counts as refused); :meth:`MpcInputs.lost` gives
those that never reached the node.
"""

from __future__ import annotations

from typing import Any, Callable

from geometry_msgs.msg import Twist, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from rbd_deriv.exceptions import RbdDerivError
from rbd_deriv.messages import linearization_arrays, odometry_arrays, stamp_to_ns
from rbd_deriv.msg import Linearization
from rbd_deriv.nodes.spin import STATE_RELIABILITY, PolledSubscription, apply_newest, apply_newest_message

# The tick reads what arrived since the previous tick (PolledSubscription): no executor callback per
# 1 kHz joint_states message. The depth covers 100 ms of a 1 kHz topic split across several
# publishers; of the compensation, linearization and reference only the newest matters, the others are
# counted as superseded.
INPUT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
REFERENCE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)


class MpcInputs:
    """The subscriptions of a configured MPC node and their reading into its loop.

    Args:
        node: The node (its loop, model, clock, guard and log).
        p: The node's parameters (topics, ``state_qos``).
    """

    def __init__(self, node: Any, p: dict) -> None:
        self.node = node
        self.loop = node.loop
        legged = node.legged
        state_qos = QoSProfile(depth=INPUT_QOS.depth, reliability=STATE_RELIABILITY[p["state_qos"]])
        self.joint_states = PolledSubscription(node, JointState, p["joint_states_topic"], state_qos)
        self.odometry = PolledSubscription(node, Odometry, p["odom_topic"], state_qos) if legged else None
        self._joint_set = frozenset(node.model.actuated_joint_names)
        #: (kind, subscription, handler) of the inputs of which only the newest matters.
        self.newest = [("cmd_vel", PolledSubscription(node, TwistStamped if p["cmd_vel_stamped"] else Twist,
                                                      p["cmd_vel_topic"], INPUT_QOS), self._on_cmd_vel)] if legged else [
            ("compensation", PolledSubscription(node, JointState, p["compensation_topic"], INPUT_QOS),
             self._on_compensation),
            ("reference", PolledSubscription(node, JointTrajectory, p["reference_topic"], REFERENCE_QOS),
             self._on_reference)]
        if not legged and self.loop.held:
            self.newest.append(("linearization", PolledSubscription(
                node, Linearization, p["linearization_topic"], INPUT_QOS), self._on_linearization))

    def read(self) -> None:
        """Hand what arrived since the previous tick to the loop (see the module docstring)."""
        guard = self.node.guarded
        apply_newest(self.joint_states.take(serialized=True), JointState, self._joint_set,
                     guard(self._on_joint_states), guard(self._judge_joint_states))
        for kind, subscription, handler in self.newest:
            self.loop.refusals.superseded[kind] += apply_newest_message(
                subscription.take(serialized=True), subscription.message_type, guard(handler), None)
        if self.odometry is not None:
            self._read_odometry(self.odometry.take(serialized=True))

    def lost(self) -> dict:
        """``lost_<input>``: messages each subscription knows were lost before the node, for /diagnostics."""
        values = {"lost_joint_states": str(self.joint_states.lost)}
        for kind, subscription, _ in self.newest:
            values[f"lost_{kind}"] = str(subscription.lost)
        if self.odometry is not None:
            values["lost_odom"] = str(self.odometry.lost)
        return values

    def destroy(self) -> None:
        """Remove every subscription."""
        self.joint_states.destroy()
        for _, subscription, _ in self.newest:
            subscription.destroy()
        if self.odometry is not None:
            self.odometry.destroy()
        self.newest, self.odometry = [], None

    # ------------------------------------------------------------------------------ counting
    def _take(self, kind: str, take: Callable, *args: Any) -> bool:
        """Hand one input to the loop; a refusal is counted there under ``kind`` and logged. Whether it was taken."""
        try:
            take(*args)
        except RbdDerivError as error:
            self.node.log_refusal(self.loop.refuse(kind, error))
            return False
        self.loop.refusals.used[kind] += 1
        return True

    def _judge(self, kind: str, check: Callable, *args: Any) -> None:
        """A message superseded by a newer one of its input before it could be used: counted as refused (under
        its reason, as :meth:`_take` would) if ``check`` refuses it, else as superseded."""
        try:
            check(*args)
        except RbdDerivError as error:
            self.node.log_refusal(self.loop.refuse(kind, error))
            return
        self.loop.refusals.superseded[kind] += 1

    def _read_odometry(self, serialized: list) -> None:
        """Every odometry message, oldest first: each pose is judged against the one accepted just before it (a
        millisecond earlier from a 1 kHz source, whatever the time since the previous tick), so that a second
        source or a jump is refused even after a stalled tick; all but the newest accepted are superseded."""
        take = self.node.guarded(self._on_odometry)
        accepted = sum(1 for data in serialized if take(deserialize_message(data, Odometry)))
        if accepted > 1:
            counts = self.loop.refusals
            counts.used["odom"] -= accepted - 1
            counts.superseded["odom"] += accepted - 1

    # ------------------------------------------------------------------------------ messages
    def _on_joint_states(self, message: JointState) -> bool:
        return self._take("joint_states", self.loop.take_joint_states, message.name, message.position,
                          message.velocity, message.effort, stamp_to_ns(message.header.stamp), self.node.now_ns())

    def _judge_joint_states(self, message: JointState) -> None:
        self._judge("joint_states", self.loop.check_joint_states, message.name, message.position, message.velocity,
                    message.effort, stamp_to_ns(message.header.stamp), self.node.now_ns())

    def _on_odometry(self, message: Odometry) -> bool:
        return self._take("odom", self.loop.take_odometry, *odometry_arrays(message),
                          stamp_to_ns(message.header.stamp), self.node.now_ns(),
                          (message.header.frame_id, message.child_frame_id))

    def _on_cmd_vel(self, message: Any) -> bool:
        twist = message.twist if isinstance(message, TwistStamped) else message
        return self._take("cmd_vel", self.loop.take_cmd_vel, twist.linear.x, twist.linear.y, twist.angular.z)

    def _on_compensation(self, message: JointState) -> bool:
        return self._take("compensation", self.loop.take_compensation, message.name, message.effort,
                          stamp_to_ns(message.header.stamp), self.node.now_ns())

    def _on_linearization(self, message: Linearization) -> bool:
        def take() -> None:
            model = self.node.model
            arrays = linearization_arrays(message, model.nq, model.nv, self.node.joint_names)
            self.loop.take_linearization(arrays, stamp_to_ns(message.header.stamp), self.node.now_ns())
        return self._take("linearization", take)

    def _on_reference(self, message: JointTrajectory) -> bool:
        points = message.points
        names = list(message.joint_names)
        start_ns = stamp_to_ns(message.header.stamp) or self.node.now_ns()  # a stamp of 0 means "from now"
        with_velocity = bool(points) and all(len(point.velocities) == len(names) for point in points)
        try:
            duration = self.loop.take_reference(
                names, start_ns, [stamp_to_ns(point.time_from_start) * 1e-9 for point in points],
                [point.positions for point in points],
                [point.velocities for point in points] if with_velocity else None)
        except RbdDerivError as error:
            self.node.log_refusal(self.loop.refuse("reference", error))
            return False
        self.loop.refusals.used["reference"] += 1
        self.node.get_logger().info(f"new reference: {len(points)} points over {duration:.2f} s")
        return True
