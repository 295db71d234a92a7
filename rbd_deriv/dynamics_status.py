"""The dynamics node's /diagnostics status, made without ROS: its level, message and key-value pairs.

The node (:mod:`rbd_deriv.nodes.dynamics_node`) puts them into a diagnostic_msgs/DiagnosticStatus every
``diagnostics_period``. The pairs are its robot, what it did with its inputs over the period
(:class:`rbd_deriv.pipeline.Throughput`), the messages lost before it, the active contacts and its refusals by
reason: inputs = outputs + ``rejected_total``, and what was sent = inputs + ``lost_joint_states``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from rbd_deriv.refusals import Refusals

__all__ = ["ERROR", "OK", "WARN", "dynamics_status"]

#: Levels of a status, those of diagnostic_msgs/DiagnosticStatus.
OK, WARN, ERROR = 0, 1, 2


def dynamics_status(pipeline: Optional[Any], throughput: Dict[str, float], lost: Sequence[int],
                    refusals: Refusals) -> Tuple[int, str, Dict[str, str]]:
    """(level, message, {key: value as text}) of the dynamics node's status.

    Args:
        pipeline: The node's :class:`~rbd_deriv.pipeline.DynamicsPipeline`, None before a robot description.
        throughput: :meth:`rbd_deriv.pipeline.Throughput.report` of the period (rates [Hz], times [ms], totals).
        lost: Messages lost before the node since it started: (joint_states, odom).
        refusals: The node's refused inputs by reason.

    Level ERROR without a robot, WARN while joints were never received, else OK. Floats are written with six
    significant digits.
    """
    model = None if pipeline is None else pipeline.model
    values: Dict[str, Any] = {"robot": model.name if model else "", "nq": model.nq if model else 0,
                              "nv": model.nv if model else 0, **throughput}
    values["lost_joint_states"], values["lost_odom"] = lost
    values["contacts"] = ", ".join(pipeline.contact_frames) if pipeline else ""
    values["rejected_total"] = refusals.total
    values.update({f"rejected_{reason}": count for reason, count in sorted(refusals.counts.items())})
    text = {key: f"{value:.6g}" if isinstance(value, float) else str(value) for key, value in values.items()}
    if pipeline is None:
        return ERROR, "no robot description", text
    if not pipeline.state.complete:
        return WARN, f"waiting for joints: {', '.join(pipeline.state.missing()[:5])}", text
    return OK, "running", text
