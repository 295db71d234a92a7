"""Parameter tables of the nodes (rbd_deriv.nodes.parameters): the YAML in config/ agrees with them, checks
refuse bad values with a reason, and a node declares its table with descriptions and read-only flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
yaml = pytest.importorskip("yaml")

from rclpy.parameter import Parameter  # noqa: E402

import rbd_deriv as rd  # noqa: E402
from rbd_deriv.nodes.parameters import (DYNAMICS_NODE, MPC_NODE, SIM_NODE, Spec, declare_parameters,  # noqa: E402
                                        finite_values, fraction, non_negative, one_of, per_joint, positive,
                                        updated_values)

CONFIG = Path(__file__).resolve().parents[1] / "config"


@pytest.mark.parametrize("node, table", [("dynamics_node", DYNAMICS_NODE), ("mpc_node", MPC_NODE),
                                         ("sim_node", SIM_NODE)])
def test_yaml_lists_the_same_parameters_and_defaults(node, table):
    values = yaml.safe_load((CONFIG / f"{node}.yaml").read_text())[node]["ros__parameters"]
    assert set(values) == set(table)
    for name, spec in table.items():
        assert values[name] == spec.default, name
        assert type(values[name]) is type(spec.default), f"{name}: {values[name]!r} and {spec.default!r}"
        assert spec.description
        assert spec.check is None or spec.check(name, spec.default) is None, name


def test_checks():
    assert positive("rate", 1e-3) is None and positive("horizon", 3) is None
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "1"):
        assert "rate must be > 0" in positive("rate", bad)
    assert non_negative("age", 0.0) is None and "must be >= 0" in non_negative("age", -1e-9)
    assert fraction("margin", 1.0) is None and fraction("margin", 0.0) and fraction("margin", 1.5)
    assert one_of(("a", "b"))("mode", "b") is None and "one of a, b" in one_of(("a", "b"))("mode", "c")
    assert finite_values("w", [1.0, 2.0]) is None
    assert finite_values("w", []) and finite_values("w", [1.0, float("nan")])
    assert per_joint([2.0]) == 2.0
    np.testing.assert_array_equal(per_joint([1.0, 2.0]), [1.0, 2.0])


def test_updated_values_refuse_a_request_as_a_whole():
    current = {name: spec.default for name, spec in DYNAMICS_NODE.items()}
    updated, problem = updated_values(DYNAMICS_NODE, current, [Parameter("dt", value=0.004),
                                                                Parameter("use_sim_time", value=True)])
    assert problem is None and updated["dt"] == 0.004 and "use_sim_time" not in updated
    assert current["dt"] == 0.001  # not modified in place
    for parameter, reason in ((Parameter("dt", value=-1.0), "dt must be > 0"),
                              (Parameter("publish_mode", value="sometimes"), "one of on_message, timer"),
                              (Parameter("rate", value=5), "rate takes a float")):
        updated, problem = updated_values(DYNAMICS_NODE, current, [Parameter("dt", value=0.004), parameter])
        assert reason in problem and updated is current


def test_a_node_declares_its_table_and_refuses_bad_start_up_values():
    context = rclpy.Context()
    rclpy.init(context=context)
    table = {"rate": Spec(100.0, "Rate [Hz].", positive), "mode": Spec("a", "Mode.", one_of(("a", "b")), read_only=True),
             "weights": Spec([1.0], "Weights.", finite_values)}
    try:
        node = rclpy.create_node("parameters_test", context=context, start_parameter_services=False,
                                 parameter_overrides=[Parameter("weights", value=[1.0, 2.0])])
        values = declare_parameters(node, table)
        assert values["rate"] == 100.0 and values["mode"] == "a" and list(values["weights"]) == [1.0, 2.0]
        descriptor = node.describe_parameter("mode")
        assert descriptor.description == "Mode." and descriptor.read_only
        assert not node.set_parameters([Parameter("mode", value="b")])[0].successful  # read-only
        node.destroy_node()

        bad = rclpy.create_node("parameters_test_bad", context=context, start_parameter_services=False,
                                parameter_overrides=[Parameter("rate", value=-5.0), Parameter("mode", value="c")])
        with pytest.raises(rd.InputError) as caught:
            declare_parameters(bad, table)
        assert "rate must be > 0" in str(caught.value) and "mode must be one of a, b" in str(caught.value)
        bad.destroy_node()
    finally:
        rclpy.shutdown(context=context)
