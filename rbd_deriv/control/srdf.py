"""Reference postures from an SRDF: the ``<group_state>`` convention of MoveIt and example-robot-data.

.. code-block:: xml

    <group_state name="standing" group="all_legs">
        <joint name="root_joint" value="0. 0. 0.235 0. 0. 0. 1." />
        <joint name="FL_HAA" value="0.1" />
        ...
    </group_state>

:func:`reference_posture` reads one such state into a configuration vector of a model (nq
entries, the free flyer as [x y z qx qy qz qw]). Joints the state does not list are an error
by default, naming them; ``missing="neutral"`` takes them from the neutral configuration instead
(talos' ``half_sitting`` leaves the grippers out, for example).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from typing import Any, Collection, Union

import numpy as np

import rbd_deriv as rd
from rbd_deriv.exceptions import InputError

SrdfSource = Union[str, os.PathLike]


def _root(source: SrdfSource) -> ElementTree.Element:
    text = str(source)
    try:
        if text.lstrip().startswith("<"):
            return ElementTree.fromstring(text)
        return ElementTree.parse(text).getroot()
    except ElementTree.ParseError as error:
        raise InputError(f"SRDF is not valid XML: {error}", "srdf") from None
    except OSError as error:
        raise InputError(f"cannot read SRDF {text!r}: {error}", "srdf") from None


def posture_names(source: SrdfSource) -> list[str]:
    """Names of the group states of an SRDF (path or XML text), in document order."""
    return [state.get("name", "") for state in _root(source).iter("group_state")]


def reference_posture(model: Any, source: SrdfSource, name: str,
                      missing: str = "error", absent: Collection[str] = ()) -> np.ndarray:
    """The configuration (nq,) of the group state ``name`` of an SRDF.

    Args:
        model: The robot model.
        source: SRDF file path or XML text.
        name: Name of the ``<group_state>``.
        missing: ``"error"`` to refuse a state that leaves a joint of the model out,
            ``"neutral"`` to take such joints from the neutral configuration.
        absent: Joints of the robot the model leaves out on purpose (locked in a reduced model): the state's
            values for them are skipped.

    Returns:
        (nq,) new array; a free flyer's quaternion normalized.

    Raises:
        InputError: Unreadable SRDF, no such state, a missing joint (with ``missing="error"``),
            a value of the wrong size or not a number, a joint the model does not have.
    """
    if missing not in ("error", "neutral"):
        raise InputError(f"missing must be 'error' or 'neutral', got {missing!r}", "missing")
    states = [state for state in _root(source).iter("group_state") if state.get("name") == name]
    if not states:
        raise InputError(f"SRDF has no group_state named {name!r}; it has "
                         f"{posture_names(source)}", "name")
    q = rd.neutral(model)
    seen = set()
    for joint in states[0].iter("joint"):
        joint_name = joint.get("name")
        if joint_name not in model.idx_q:
            if joint_name in absent:
                continue
            raise InputError(f"group_state {name!r} sets joint {joint_name!r}, which model "
                             f"{model.name!r} does not have", "srdf")
        try:
            values = np.array([float(value) for value in joint.get("value", "").split()])
        except ValueError:
            raise InputError(f"group_state {name!r}: joint {joint_name!r} has a value that is "
                             f"not a number: {joint.get('value')!r}", "srdf") from None
        size = model.nq_joint[joint_name]
        if values.size != size or not np.isfinite(values).all():
            raise InputError(f"group_state {name!r}: joint {joint_name!r} needs {size} finite "
                             f"values, got {joint.get('value')!r}", "srdf")
        start = model.idx_q[joint_name]
        q[start:start + size] = values
        seen.add(joint_name)
    left_out = [joint for joint in model.joint_names if joint not in seen]
    if left_out and missing == "error":
        raise InputError(f"group_state {name!r} does not set joints {left_out} of model "
                         f"{model.name!r} (missing='neutral' takes them from the neutral "
                         "configuration)", "srdf")
    if model.has_floating_base:
        norm = np.linalg.norm(q[3:7])
        if not norm > 0.0:
            raise InputError(f"group_state {name!r}: the free flyer's quaternion is zero", "srdf")
        q[3:7] /= norm
    return q
