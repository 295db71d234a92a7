"""How the package's nodes run: :func:`run_node` (init, spin until SIGINT/SIGTERM, clean up), and two
cheaper ways in for fast topics than an executor callback per message: :class:`PolledSubscription`
(read in a timer) and :class:`ListenerThread` (answer each message from a thread of its own), put
together for a robot's state topics in :class:`StateInputs`."""

from __future__ import annotations

import contextlib
import itertools
import signal
import sys
import threading
from typing import Callable, Optional, Sequence

import rclpy
from nav_msgs.msg import Odometry
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import ReliabilityPolicy
from rclpy.serialization import deserialize_message
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState

from rbd_deriv.exceptions import RbdDerivError


#: The state_qos parameter of the nodes: how joint_states and odometry are subscribed (best effort matches
#: reliable and best-effort publishers, REP 2003).
STATE_RELIABILITY = {"best_effort": ReliabilityPolicy.BEST_EFFORT, "reliable": ReliabilityPolicy.RELIABLE}


class StopRequested(BaseException):
    """Raised in the main thread by :class:`StopSignals` at the first SIGINT or SIGTERM while it is ``raising``.
    A BaseException, as KeyboardInterrupt, so that no ``except Exception`` swallows it."""


class StopSignals:
    """SIGINT and SIGTERM handled once for the whole process: the first asks the process to stop, any later one
    (Ctrl-C in a terminal under ``ros2 launch`` sends two SIGINTs: the terminal's, then launch's) is ignored
    while it cleans up and exits (SIGKILL still ends a clean-up that hangs). rclpy's own handlers are to be left out (``rclpy.init(signal_handler_options=
    SignalHandlerOptions.NO)``): they shut the context down under the process's threads and hand the signal on
    to Python, which raises KeyboardInterrupt wherever the main thread happens to be, a second time for the
    second signal, in the middle of the clean-up.

    Args:
        raising: Whether the first signal raises :class:`StopRequested` in the main thread (to end work that
            does not look at :attr:`requested`: a node's start-up, a loop of ``spin_once``); set it to False
            once the process polls :attr:`requested` itself, and before cleaning up.

    Attributes:
        requested: Set at the first signal.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, raising: bool = True) -> None:
        self.requested = threading.Event()
        self.raising = raising

    def install(self) -> bool:
        """Install the handlers; False if they cannot be (not the main thread): rclpy's should apply instead."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for number in self.SIGNALS:
            signal.signal(number, self)
        return True

    def __call__(self, number: int, frame) -> None:
        # Ignored from now on by the operating system, not by a Python handler: the interpreter's finalization
        # puts Python handlers back to the default (die from the signal) but leaves ignored signals ignored.
        for each in self.SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        first = not self.requested.is_set()
        self.requested.set()
        if first and self.raising:
            self.raising = False
            raise StopRequested


#: Longest time [s] the spinning node takes to notice a stop signal (Python runs signal handlers between two
#: executor waits, not during one).
SIGNAL_POLL_PERIOD = 0.1


def run_node(make_node: Callable[[], Node], args: Optional[Sequence[str]] = None,
             cleanup: Optional[Callable[[Node], None]] = None) -> int:
    """Create the node with ``make_node`` and spin it until SIGINT or SIGTERM (or an external shutdown), then
    clean up; return the exit code: 0, or 2 when making the node raises an
    :class:`~rbd_deriv.exceptions.RbdDerivError` (parameters refused at start-up), its reason printed in one line.

    A signal while the node is being made ends the start-up; one while it spins ends the spin; signals after
    the first are ignored, so the clean-up runs to its end and the process exits with 0 and no traceback
    however many SIGINTs and SIGTERMs it receives (a terminal's Ctrl-C and ``ros2 launch`` both send one).
    Called from another thread than the main one, rclpy's signal handling applies instead.

    Args:
        make_node: Builds the node, after ``rclpy.init``.
        args: Command-line arguments (``--ros-args ...``); None for ``sys.argv``.
        cleanup: Called with the node before it is destroyed (stop a thread...).
    """
    signals = StopSignals()
    node = executor = None
    try:
        own = signals.install()
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO if own else None)
        try:
            node = make_node()
        except RbdDerivError as error:  # refused start-up parameters: the reason in one line, no traceback
            print(f"{getattr(make_node, '__name__', 'node')}: {error}", file=sys.stderr)
            return 2
        signals.raising = False
        executor = SingleThreadedExecutor(context=node.context)
        executor.add_node(node)
        while not signals.requested.is_set() and executor.context.ok():
            executor.spin_once(timeout_sec=SIGNAL_POLL_PERIOD)
    except (StopRequested, KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        signals.raising = False
        if executor is not None:
            executor.shutdown()
        if node is not None:
            if cleanup is not None:
                cleanup(node)
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


def guard(callback: Callable, on_error: Callable[[Exception], None]) -> Callable:
    """``callback`` wrapped so that an exception goes to ``on_error`` (count it, log it) instead of killing
    the node: every timer, subscription and listener callback of the package's nodes runs inside one."""
    def guarded(*args):
        try:
            return callback(*args)
        except Exception as error:  # noqa: BLE001 - the node must survive any single message
            on_error(error)
    return guarded


_READER_NUMBERS = itertools.count()


class SequenceGaps:
    """Messages lost before a subscriber, counted from the gaps in each publisher's sequence numbers.

    A history that overflows drops its oldest message without telling anyone (Fast DDS raises no message-lost
    event for it: ``SubscriptionEventCallbacks(message_lost=...)`` stays silent), and whatever the middleware
    loses on the way is not reported either; both leave a gap in the sequence numbers of the publisher, which
    every taken message carries in its info (``publication_sequence_number``, ``publisher_gid``).

    Attributes:
        lost: Messages lost so far: gaps in the sequence numbers of each publisher, from the first message
            seen from it (what it sent before is not known).
    """

    #: Publishers whose last sequence number is remembered; a topic with more forgets them all at once
    #: (the gap across that moment is not counted).
    MAX_PUBLISHERS = 256

    def __init__(self) -> None:
        self.lost = 0
        self._last_sequence: dict = {}

    def count(self, info: dict) -> None:
        """Count the messages lost before the one whose message info is ``info``."""
        sequence, publisher = info.get("publication_sequence_number"), info.get("publisher_gid")
        if sequence is None or publisher is None:
            return  # a middleware that does not number its messages: losses cannot be seen
        key = bytes(publisher["data"])
        last = self._last_sequence.get(key)
        if last is None and len(self._last_sequence) >= self.MAX_PUBLISHERS:
            self._last_sequence.clear()
        elif last is not None and sequence > last + 1:
            self.lost += sequence - last - 1
        self._last_sequence[key] = sequence

    def counting(self, callback: Callable[[object], None]) -> Callable[[object, dict], None]:
        """An executor callback that counts the losses before each message, then hands it to ``callback``
        (rclpy passes the message info to a callback of two arguments)."""
        def counted(message: object, info: dict) -> None:
            self.count(info)
            callback(message)
        return counted


class PolledSubscription:
    """A subscription read when the node asks (:meth:`take`), not by executor callbacks.

    rclpy's executor costs a few hundred microseconds of Python per message it delivers. A node that
    works at its own rate (a timer) from the newest data of a 1 kHz topic only needs the messages
    that arrived since its last tick: taking them in the tick saves that cost for every message.

    The subscription lives on a hidden helper node (``_<node>_input_<n>``, same namespace and
    context) that no executor spins. The topic is resolved, remappings included, by the owning node.

    Messages lost before the node (a queue that overflowed between two takes, the middleware) are counted in
    :attr:`lost` (:class:`SequenceGaps`).

    Args:
        node: The node the subscription belongs to.
        message_type: Message class (sensor_msgs.msg.JointState...).
        topic: Topic name, as the owner would pass it to ``create_subscription``.
        qos: QoS profile; its depth bounds how many messages wait between two takes.

    Attributes:
        lost: Messages lost so far (:attr:`SequenceGaps.lost`).
    """

    def __init__(self, node: Node, message_type: type, topic: str, qos) -> None:
        self.message_type = message_type
        self._gaps = SequenceGaps()
        # The owner resolves the topic; the helper ignores the command line (a launch file's
        # ``__node:=`` rename or a remapping must not apply to it a second time) and gets a name of
        # its own.
        self.topic = node.resolve_topic_name(topic)
        self._reader = Node(f"_{node.get_name()}_input_{next(_READER_NUMBERS)}",
                            namespace=node.get_namespace(), context=node.context,
                            use_global_arguments=False, start_parameter_services=False,
                            enable_rosout=False,
                            parameter_overrides=[Parameter("start_type_description_service", value=False)])
        self._subscription = self._reader.create_subscription(message_type, self.topic,
                                                              lambda _: None, qos)

    def take(self, serialized: bool = False) -> list:
        """Messages received since the last call, oldest first (empty if none).

        Args:
            serialized: Return the CDR bytes of each message instead of message objects, so that
                the caller deserializes (``rclpy.serialization.deserialize_message``) only those it
                needs: building a message object in Python costs far more than taking its bytes.
        """
        messages = []
        handle = self._subscription.handle
        with handle:  # the handle cannot be destroyed under us meanwhile
            while True:
                taken = handle.take_message(self.message_type, serialized)
                if taken is None:
                    return messages
                messages.append(taken[0])
                self._gaps.count(taken[1])

    @property
    def lost(self) -> int:
        return self._gaps.lost

    def destroy(self) -> None:
        """Remove the subscription and its helper node."""
        self._reader.destroy_node()


class ListenerThread:
    """Calls ``on_messages()`` from its own thread whenever one of ``subscriptions`` has messages.

    For a node that must answer every message of a fast topic: rclpy's executor spends a few hundred
    microseconds per callback, this thread a few tens. The node's other callbacks (services,
    parameters, timers) stay with the executor; what both threads touch must be locked.

    Args:
        subscriptions: The polled subscriptions to wait on.
        on_messages: Called with no argument after each wake-up; takes the messages itself. It must
            not raise: an exception would end the thread (wrap it as the node's other callbacks).
        name: Thread name, for debuggers and logs.
    """

    #: Longest wait [s] before the thread checks whether it should stop.
    POLL_PERIOD = 0.1

    def __init__(self, subscriptions: Sequence[PolledSubscription], on_messages: Callable[[], None],
                 name: str) -> None:
        self._subscriptions = list(subscriptions)
        self._context = self._subscriptions[0]._reader.context
        self._on_messages = on_messages
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _wait(self, wait_set) -> bool:
        """Block (without the GIL) until a message is waiting or POLL_PERIOD passes; True if one is."""
        wait_set.clear_entities()
        with contextlib.ExitStack() as handles:  # none can be destroyed while rcl waits on it
            for subscription in self._subscriptions:
                handle = subscription._subscription.handle
                handles.enter_context(handle)
                wait_set.add_subscription(handle)
            wait_set.wait(int(self.POLL_PERIOD * 1e9))
            return bool(wait_set.get_ready_entities("subscription"))

    def _run(self) -> None:
        wait_set = _rclpy.WaitSet(len(self._subscriptions), 0, 0, 0, 0, 0, self._context.handle)
        while not self._stop.is_set() and self._context.ok():
            try:
                ready = self._wait(wait_set)
            except Exception:  # noqa: BLE001 - the context went away under us: shutting down
                if self._context.ok() and not self._stop.is_set():
                    raise
                return
            if ready and not self._stop.is_set():
                self._on_messages()

    def stop(self) -> None:
        """Stop waiting and return once the thread has finished its current call."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def apply_newest(serialized: list, message_type: type, names: frozenset, apply: Callable[[object], bool],
                 on_superseded: Optional[Callable[[object], None]] = None) -> int:
    """Apply, oldest first, what matters among ``serialized`` (oldest first): the newest message of every
    joint of ``names`` that ``apply`` accepts.

    Newest first, each message naming a joint of ``names`` not named by a newer kept one is kept (and, in
    the first round, each naming joints outside ``names``, for ``apply`` to judge), until every joint is
    named; the kept ones are applied oldest first, so that each joint ends with its newest value. A robot
    publishing its joints in one message costs one deserialization per call; joints split across publishers
    one message from each. The joints whose newest message ``apply`` refused are looked for again among the
    older messages: a refused message (stamped in the future, broken) never hides good ones. (An older
    message naming such a joint beside joints already updated is refused as out of order.)

    Args:
        apply: Takes one message, returns whether it was accepted (falsy when refused).
        on_superseded: Called with each message not handed to ``apply`` (oldest first), to judge what it
            would have been (refused or superseded); None: those are not deserialized.

    Returns:
        The number of messages neither accepted nor refused: superseded.
    """
    remaining, missing, handled, first = list(serialized), set(names), set(), True
    while remaining and missing:
        kept = []  # (index in serialized, message), newest first
        wanted = set(missing)
        for index in range(len(remaining) - 1, -1, -1):
            message = deserialize_message(remaining[index], message_type)
            named = wanted.intersection(message.name)
            if named or (first and not names.issuperset(message.name)):
                kept.append((index, message))
            wanted -= named
            if not wanted:
                break
        for index, message in reversed(kept):
            handled.add(index)
            if apply(message):
                missing.difference_update(message.name)
        remaining = remaining[: kept[-1][0]] if kept else []
        first = False
    return _pass_superseded(serialized, message_type, handled, on_superseded)


def apply_newest_message(serialized: list, message_type: type, apply: Callable[[object], bool],
                         on_superseded: Optional[Callable[[object], None]] = None) -> int:
    """Apply the newest message of ``serialized`` (oldest first) that ``apply`` accepts: newest first, each is
    handed to ``apply`` until one is accepted (a refused message never hides a good older one).

    Args:
        apply: Takes one message, returns whether it was accepted (falsy when refused).
        on_superseded: Called with each message older than the accepted one (oldest first); None: those are
            not deserialized.

    Returns:
        The number of messages not handed to ``apply``: superseded.
    """
    handled = set()
    for index in range(len(serialized) - 1, -1, -1):
        handled.add(index)
        if apply(deserialize_message(serialized[index], message_type)):
            break
    return _pass_superseded(serialized, message_type, handled, on_superseded)


def _pass_superseded(serialized: list, message_type: type, handled: set,
                     on_superseded: Optional[Callable[[object], None]]) -> int:
    """Hand ``on_superseded`` each message of ``serialized`` whose index is not in ``handled``; their number."""
    if on_superseded is not None:
        for index, data in enumerate(serialized):
            if index not in handled:
                on_superseded(deserialize_message(data, message_type))
    return len(serialized) - len(handled)


class StateInputs:
    """A robot's state topics, joint_states and odom, read without an executor callback per message.

    Each callback of the executor costs a few hundred microseconds at 1 kHz. Two ways instead:

    * ``listen``: a :class:`ListenerThread` hands every message to the handlers as it comes, odometry
      first so that a joint_states message is applied with the newest base;
    * polled: :meth:`poll` (called from the node's timer) applies what arrived since its previous call,
      deserializing only the newest message of each joint (:func:`apply_newest`) and of the odometry.

    Args:
        node: The owner.
        listen: Answer every message from a thread of its own, else wait for :meth:`poll`.
        joint_states_qos, odometry_qos: QoS of the two subscriptions; a polled joint_states history
            must hold a slow publisher's last message over one poll period.
        on_joint_states, on_odometry: Handlers of one message; they must not raise. ``on_joint_states``
            returns whether it accepted the message (see :func:`apply_newest`).
        thread_name: Name of the listener thread.
        on_error: Receives what the listener thread's reading raises (see :func:`guard`).
    """

    def __init__(self, node: Node, listen: bool, joint_states_qos, odometry_qos,
                 on_joint_states: Callable, on_odometry: Callable, thread_name: str,
                 on_error: Callable[[Exception], None]) -> None:
        self._on_joint_states, self._on_odometry = on_joint_states, on_odometry
        self._subscriptions = [PolledSubscription(node, JointState, "joint_states", joint_states_qos),
                               PolledSubscription(node, Odometry, "odom", odometry_qos)]
        self._listener = (ListenerThread(self._subscriptions, guard(self._on_messages, on_error), thread_name)
                          if listen else None)

    def _on_messages(self) -> None:
        joint_states, odometry = (subscription.take() for subscription in self._subscriptions)
        for message in odometry:
            self._on_odometry(message)
        for message in joint_states:
            self._on_joint_states(message)

    def poll(self, joint_names: Optional[frozenset]) -> int:
        """Apply what arrived since the previous call: the newest accepted message of each joint of
        ``joint_names`` (:func:`apply_newest`; only the newest message if None), then the newest odometry.

        Returns:
            The number of joint_states messages skipped as superseded.
        """
        joint_states, odometry = (subscription.take(serialized=True) for subscription in self._subscriptions)
        skipped = 0
        if joint_states and joint_names is None:
            self._on_joint_states(deserialize_message(joint_states[-1], JointState))
            skipped = len(joint_states) - 1
        elif joint_states:
            skipped = apply_newest(joint_states, JointState, joint_names, self._on_joint_states)
        if odometry:
            self._on_odometry(deserialize_message(odometry[-1], Odometry))
        return skipped

    @property
    def lost(self) -> tuple:
        """Messages lost before the node so far (:attr:`PolledSubscription.lost`): (joint_states, odom)."""
        return tuple(subscription.lost for subscription in self._subscriptions)

    def destroy(self) -> None:
        """Stop the listener thread and remove the subscriptions."""
        if self._listener is not None:
            self._listener.stop()
        for subscription in self._subscriptions:
            subscription.destroy()
