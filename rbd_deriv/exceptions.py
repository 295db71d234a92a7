"""Exceptions raised by rbd_deriv.

Every error the library raises derives from :class:`RbdDerivError`, so a caller (a ROS node, a CLI) can
refuse one bad input with a single ``except`` and keep running. Each class carries the context that
explains it (the joint, the argument) as attributes as well as in its message.
"""

from __future__ import annotations


class RbdDerivError(Exception):
    """Base class of every error raised by rbd_deriv."""


class URDFError(RbdDerivError):
    """The robot description cannot be read: XML syntax, missing file, loop, several roots...

    Attributes:
        element: Name of the offending link or joint, or None when the whole document is at fault.
    """

    def __init__(self, message: str, element: str | None = None) -> None:
        super().__init__(message)
        self.element = element


class ModelError(RbdDerivError):
    """The description parses but does not define a model the algorithms can use.

    Examples: an unsupported joint type, a zero joint axis, a negative mass, a negative armature; at call
    time, a mass matrix singular along a joint whose subtree has no inertia along its motion (ABA, M^-1).

    Attributes:
        joint: Name of the offending joint or link, or None.
    """

    def __init__(self, message: str, joint: str | None = None) -> None:
        super().__init__(message)
        self.joint = joint


class InputError(RbdDerivError, ValueError):
    """An argument given to an algorithm is unusable: wrong shape, NaN or inf, non-unit quaternion.

    Raised before any result is written: the Data workspace keeps its previous results.

    Attributes:
        argument: Name of the argument (``"q"``, ``"v"``, ``"fext"``...).
    """

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


class MessageError(InputError):
    """A received message does not fit the model: wrong joints, sizes or values.

    Attributes:
        reason: A short key to count refusals by (``joints``, ``size``, ``values``...).
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, argument="message")
        self.reason = reason


class BudgetError(InputError):
    """An input that is good on its own, refused because those accepted shortly before it used up what the
    receiver allows over a while (the pushes a simulated robot takes within a second).

    Attributes:
        reason: ``"budget"``, the reason it is counted under.
    """

    reason = "budget"
