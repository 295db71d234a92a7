"""Tests of rbd_deriv.dynamics_status: the dynamics node's /diagnostics status without ROS, before a robot,
while joints are missing and running, with its counts written as text."""

from __future__ import annotations

import numpy as np
import pytest

from rbd_deriv.dynamics_status import ERROR, OK, WARN, dynamics_status
from rbd_deriv.pipeline import DynamicsPipeline, Throughput
from rbd_deriv.refusals import Refusals
from rbd_deriv.testing.robots import bundled_urdf


@pytest.fixture(scope="module")
def pipeline():
    return DynamicsPipeline(bundled_urdf("rbd_arm7").read_text())


def test_without_a_robot_the_status_is_an_error_that_still_counts():
    refusals = Refusals()
    refusals.count("no_model", "joint_states before any robot description", 0.0)
    level, message, values = dynamics_status(None, Throughput().report(1.0), (3, 0), refusals)
    assert (level, message) == (ERROR, "no robot description")
    assert values["robot"] == "" and values["nq"] == "0" and values["contacts"] == ""
    assert values["lost_joint_states"] == "3" and values["lost_odom"] == "0"
    assert values["rejected_total"] == "1" and values["rejected_no_model"] == "1"


def test_missing_joints_then_running(pipeline):
    throughput = Throughput()
    throughput.took(4)
    throughput.sent(0.0005, 0.002)
    names = list(pipeline.model.joint_names)
    pipeline.state.update(names[:2], np.zeros(2), np.zeros(2), [], 1, now_ns=None)
    level, message, values = dynamics_status(pipeline, throughput.report(2.0), (0, 0), Refusals())
    assert level == WARN and message == f"waiting for joints: {', '.join(names[2:7])}"
    assert values["robot"] == pipeline.model.name and values["nv"] == "7"
    assert values["input_rate_hz"] == "2" and values["compute_time_ms_p50"] == "0.5"
    assert values["inputs_total"] == "4" and values["outputs_total"] == "1" and values["rejected_total"] == "0"
    pipeline.state.update(names, np.zeros(7), np.zeros(7), [], 2, now_ns=None)
    assert dynamics_status(pipeline, Throughput().report(1.0), (0, 0), Refusals())[:2] == (OK, "running")
