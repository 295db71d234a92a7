"""The MPC node's tick policies built from its parameters (the ``MPC_NODE`` table of
:mod:`rbd_deriv.nodes.parameters`, as a dict): :func:`control_loop` for a fixed-base arm, :func:`legged_loop` for
a legged robot on its feet (the reference posture put on the floor the way the simulator puts the robot)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control import ControlLoop, LoopSettings, MPCProblem
from rbd_deriv.control.legged import LeggedMPC, LeggedWeights
from rbd_deriv.control.legged_loop import LeggedLoop
from rbd_deriv.control.legged_settings import (LeggedLoopSettings, base_link, built_gaits, make_gait,
                                               parse_gait_table, swing_height)
from rbd_deriv.control.locked_joints import LockedJoints, locked_positions
from rbd_deriv.control.srdf import reference_posture
from rbd_deriv.core.soles import feet_on_soles
from rbd_deriv.exceptions import InputError
from rbd_deriv.sim.ground import Ground, rest_on_floor


def per_joint(values: Any) -> Any:
    """A list parameter given as one value for every joint (returned as a float) or one per joint (an
    array, whose length the library checks against the robot)."""
    values = np.asarray(values, dtype=float)
    return float(values[0]) if values.size == 1 else values


def reference_configuration(model: Any, p: Mapping[str, Any]) -> np.ndarray:
    """(nq,) the SRDF's ``posture`` (joints it leaves out at neutral, the ``locked_joints`` a reduced model lacks
    skipped), else the neutral configuration."""
    return (reference_posture(model, p["srdf_path"], p["posture"], missing="neutral", absent=p["locked_joints"])
            if p["srdf_path"] else rd.neutral(model))


def soles_parameters(robot: Any, description: str, p: Mapping[str, Any]) -> dict:
    """``p`` with the feet the robot stands on (:func:`rbd_deriv.core.soles.feet_on_soles`): as given, or with
    ``sole_placement`` ``collision`` the sole frames it adds to ``robot`` and their size.

    Raises:
        InputError, URDFError, ModelError: soles that cannot be taken from the collision geometry.
    """
    frames, size, _ = feet_on_soles(robot, description, p["contact_frames"], p["contact_kinds"], p["sole_placement"],
                                    p["sole_size"])
    return {**p, "contact_frames": frames, "sole_size": list(size)}


def planning_model(robot: Any, description: str, p: Mapping[str, Any]) -> Tuple[Any, Optional[LockedJoints]]:
    """The model the MPC plans on, from the ``robot``'s (every joint, its actuator limits set) and its URDF
    ``description``: the robot's own, or with ``locked_joints`` its reduced model (those joints locked at the
    reference posture, their limits the robot's) and the :class:`LockedJoints` that writes its policies for the
    robot.

    Raises:
        InputError: Locked joints on a fixed base (whose held mode linearizes the full model), or that the robot
            lacks; a posture that cannot be read.
    """
    names = list(p["locked_joints"])
    if not names:
        return robot, None
    if not p["floating_base"]:
        raise InputError("locked_joints is for a legged robot (floating_base): a fixed base's held mode "
                         "linearizes every joint", "locked_joints")
    positions = locked_positions(robot, names, reference_configuration(robot, p))
    reduced = rd.load_urdf(description, floating_base=True, locked_joints=positions)
    for name, (parent, placement) in robot.added_frames.items():  # the soles (rbd_deriv.core.soles)
        reduced.add_frame(name, parent, placement)
    reduced.set_actuator_limits([robot.effort_limit[robot.idx_v[name]] for name in reduced.actuated_joint_names])
    return reduced, LockedJoints(robot, reduced, positions, p["locked_joint_frequency"])


def control_loop(model: Any, p: Mapping[str, Any]) -> ControlLoop:
    """The fixed-base loop: the MPC problem and the loop's settings from ``p``, the goal when ``goal_positions``
    has one value per joint.

    Raises:
        RbdDerivError: A problem the parameters cannot make (weights of the wrong size...).
    """
    problem = MPCProblem.from_model(
        model, horizon=p["horizon"], dt=p["dt"], position_weight=per_joint(p["position_weight"]),
        velocity_weight=per_joint(p["velocity_weight"]), torque_weight=per_joint(p["torque_weight"]),
        terminal_scale=p["terminal_scale"], limit_weight=p["limit_weight"], mode=p["mode"],
        max_iterations=p["max_iterations"], torque_margin=p["torque_margin"])
    settings = LoopSettings(
        rate_hz=p["rate_hz"], state_timeout=p["state_timeout"], linearization_timeout=p["linearization_timeout"],
        predict_delay=p["predict_delay"], command_delay=p["command_delay"],
        disturbance_time_constant=p["disturbance_time_constant"], disturbance_bound=p["disturbance_bound"],
        max_stamp_lead=p["max_stamp_lead"], policy_validity=p["policy_validity"],
        max_reference_error=p["max_reference_error"])
    loop = ControlLoop(model, problem, settings)
    goal = np.asarray(p["goal_positions"], dtype=float)
    if goal.size == problem.nv:
        loop.set_goal(goal)
    return loop


def legged_loop(model: Any, p: Mapping[str, Any]) -> LeggedLoop:
    """The floating-base loop: the reference posture (the SRDF's ``posture``, else the neutral configuration) put
    on the floor the way the simulator puts the robot (point feet ``foot_radius`` above it, soles on it), one legged
    MPC per gait of ``gaits`` (rows of ``gait_table``, its horizon at least one cycle of the gait), the sway; the
    torque and force weights per the robot's scales with ``weight_scale`` robot (``LeggedWeights.per_robot``).

    Raises:
        InputError: No foot, a foot the model lacks, an SRDF or posture that cannot be read, a gait that
            cannot be made (a table row that does not parse, offsets for other feet, a knot without contact),
            ``gait`` or ``idle_gait`` not in ``gaits``, a planned joint without an effort limit with ``weight_scale``
            robot.
    """
    feet = list(p["contact_frames"])
    if not feet:
        raise InputError("floating_base needs contact_frames (the feet)", "contact_frames")
    kinds = list(p["contact_kinds"]) or ["point"] * len(feet)
    if len(kinds) != len(feet):
        raise InputError(f"{len(kinds)} contact_kinds for {len(feet)} contact_frames", "contact_kinds")
    posture = rest_on_floor(model, reference_configuration(model, p), Ground(tuple(feet), tuple(kinds), p["foot_radius"],
                                                   tuple(p["sole_size"])))
    weights = LeggedWeights(**{field: p[f"weight_{field}"] for field in LeggedWeights.__dataclass_fields__})
    if p["weight_scale"] == "robot":
        weights = weights.per_robot(model)
    table = parse_gait_table(p["gait_table"])
    mpcs = {}
    for name in built_gaits(p):
        gait = make_gait(name, feet, kinds, table, p["dt"])
        mpcs[name] = LeggedMPC(model, feet, gait, posture, horizon=max(p["horizon"], gait.period), dt=p["dt"],
                               mu=p["mu"], weights=weights, swing_height=swing_height(table, name, p["swing_height"]),
                               torso=base_link(model), sole_size=p["sole_size"], cop_margin=p["cop_margin"])
    settings = LeggedLoopSettings(state_timeout=p["state_timeout"], policy_validity=p["policy_validity"],
                                  max_stamp_lead=p["max_stamp_lead"], latency=p["command_delay"],
                                  predict=p["predict_delay"], gain_knots=p["policy_gain_knots"],
                                  odom_frame=p["odom_frame"], base_frame=p["base_frame"] or base_link(model),
                                  jump_margin=p["odom_jump_margin"], jump_angle_margin=p["odom_jump_angle_margin"],
                                  max_base_speed=p["odom_max_speed"], max_base_rate=p["odom_max_rate"],
                                  motion_margin=p["motion_margin"], max_velocity=tuple(p["max_cmd_vel"]),
                                  max_acceleration=tuple(p["max_cmd_acceleration"]), path_slack=p["path_slack"],
                                  heading_slack=p["heading_slack"], idle_gait=p["idle_gait"],
                                  posture_ramp=p["posture_ramp"])
    loop = LeggedLoop(model, mpcs, p["gait"], settings)
    loop.set_sway(p["sway_amplitude"], p["sway_period"])
    return loop
