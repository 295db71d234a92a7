"""The parameters of the package's nodes, declared one way: a :class:`Spec` per parameter, a table per node.

Each parameter has a default (the value of ``config/<node>.yaml``, which lists the same names: the test
suite checks that both agree), a description that ``ros2 param describe`` shows, a check that refuses a
bad value with a reason, and whether it may change while the node runs. A node declares its table
(:data:`DYNAMICS_NODE`, :data:`MPC_NODE`, :data:`SIM_NODE`) with :func:`declare_parameters` (bad values
given at start-up stop the node with every problem listed) and checks a ``ros2 param set`` with
:func:`updated_values` in its set-parameters callback.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.parameter import Parameter

from rbd_deriv.control.legged import LeggedWeights
from rbd_deriv.control.problem import Mode
from rbd_deriv.core.soles import SOLE_PLACEMENTS
from rbd_deriv.exceptions import InputError
from rbd_deriv.joint_state_map import PLAUSIBLE
from rbd_deriv.mpc_loops import per_joint  # noqa: F401 - the nodes' parameters read through it
from rbd_deriv.pipeline import CONTACT_KINDS, LINEARIZATION_INPUTS
from rbd_deriv.sim import BACKENDS

#: A check: (name, value) -> None if the value is good, else what is wrong with it.
Check = Callable[[str, Any], Optional[str]]


@dataclass(frozen=True)
class Spec:
    """One parameter of a node.

    Attributes:
        default: Its value when none is given; its type is the parameter's type (an empty list: a string
            array).
        description: What it means, with its unit in brackets.
        check: Refuses bad values, or None when any value of the type will do.
        read_only: Read at start-up only: ROS refuses to set it later.
    """

    default: Any
    description: str
    check: Optional[Check] = None
    read_only: bool = False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(name: str, value: Any) -> Optional[str]:
    """A finite number > 0."""
    return None if _number(value) and value > 0 else f"{name} must be > 0, got {value!r}"


def non_negative(name: str, value: Any) -> Optional[str]:
    """A finite number >= 0."""
    return None if _number(value) and value >= 0 else f"{name} must be >= 0, got {value!r}"


def fraction(name: str, value: Any) -> Optional[str]:
    """A number in (0, 1]."""
    return None if _number(value) and 0 < value <= 1 else f"{name} must be in (0, 1], got {value!r}"


def in_range(low: float, high: float, low_open: bool = False) -> Check:
    """A finite number in [low, high] ((low, high] with ``low_open``): bounds that keep the timers, buffers
    and steps a value sets sane (a rate of 1e-12 Hz is a timer period no clock can hold)."""
    def check(name: str, value: Any) -> Optional[str]:
        inside = _number(value) and (low < value if low_open else low <= value) and value <= high
        return None if inside else f"{name} must be in {'(' if low_open else '['}{low:g}, {high:g}], got {value!r}"
    return check


def one_of(choices: Sequence[str]) -> Check:
    """One of ``choices``."""
    def check(name: str, value: Any) -> Optional[str]:
        return None if value in choices else f"{name} must be one of {', '.join(choices)}, got {value!r}"
    return check


def finite_values(name: str, value: Any) -> Optional[str]:
    """A non-empty list of finite numbers (its length is checked against the robot later)."""
    values = list(value)
    if values and all(_number(x) for x in values):
        return None
    return f"{name} must be a non-empty list of finite numbers, got {values!r}"


def positive_triple(name: str, value: Any) -> Optional[str]:
    """Three finite numbers > 0 (x, y, yaw)."""
    values = list(value)
    if len(values) == 3 and all(_number(x) and x > 0 for x in values):
        return None
    return f"{name} must be three numbers > 0 (x, y, yaw), got {values!r}"


def effort_values(name: str, value: Any) -> Optional[str]:
    """[0.0] (the URDF's limits), or a non-empty list of finite numbers > 0 (checked against the robot later)."""
    values = list(value)
    if values == [0.0] or (values and all(_number(x) and x > 0 for x in values)):
        return None
    return f"{name} must be [0.0] or a non-empty list of finite numbers > 0, got {values!r}"


def actuator_limits(values: Any) -> list:
    """The ``effort_limits`` parameter as :meth:`rbd_deriv.core.model.Model.set_actuator_limits` takes it:
    [0.0] means the URDF's (an empty list, which ROS cannot type as numbers)."""
    values = [float(x) for x in values]
    return [] if values == [0.0] else values


def contact_kinds(name: str, value: Any) -> Optional[str]:
    """A list of contact kinds (:data:`rbd_deriv.pipeline.CONTACT_KINDS`), possibly empty."""
    bad = [kind for kind in value if kind not in CONTACT_KINDS]
    return f"{name} must list {' or '.join(CONTACT_KINDS)}, got {bad[:3]!r}" if bad else None


def _same_type(default: Any, value: Any) -> bool:
    if isinstance(default, (list, tuple)):
        return not isinstance(value, (str, bytes, bool, int, float))
    if isinstance(default, float):
        return isinstance(value, float)
    return type(value) is type(default)


def _problem(name: str, spec: Spec, value: Any) -> Optional[str]:
    if not _same_type(spec.default, value):
        return f"{name} takes a {type(spec.default).__name__}, got {value!r}"
    return spec.check(name, value) if spec.check is not None else None


def declare_parameters(node: Any, specs: Dict[str, Spec]) -> Dict[str, Any]:
    """Declare every parameter of ``specs`` on ``node``; return their values (overrides applied).

    Raises:
        InputError: Some values given at start-up are refused by their checks (all are listed).
    """
    values = {}
    for name, spec in specs.items():
        # An empty list tells ROS no element type: the parameter is declared as a string array instead, and
        # left uninitialized unless a value is given.
        untyped = isinstance(spec.default, list) and not spec.default
        node.declare_parameter(name, Parameter.Type.STRING_ARRAY if untyped else spec.default,
                               ParameterDescriptor(description=spec.description, read_only=spec.read_only))
        try:
            values[name] = node.get_parameter(name).value
        except ParameterUninitializedException:
            values[name] = []
    problems = [p for p in (_problem(name, spec, values[name]) for name, spec in specs.items()) if p]
    if problems:
        raise InputError("invalid parameters: " + "; ".join(problems), "parameters")
    return values


def updated_values(specs: Dict[str, Spec], current: Dict[str, Any],
                   parameters: List[Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """The values after a set-parameters request, or why it is refused (as a whole).

    Args:
        specs: The node's table.
        current: The values in use.
        parameters: rclpy ``Parameter`` objects of the request; names outside ``specs`` (``use_sim_time``)
            are ROS's own and left to it.

    Returns:
        (new values, None), or (``current``, the reason) if any value is refused.
    """
    updated = dict(current)
    for parameter in parameters:
        spec = specs.get(parameter.name)
        if spec is None:
            continue
        problem = _problem(parameter.name, spec, parameter.value)
        if problem:
            return current, problem
        updated[parameter.name] = parameter.value
    return updated, None


# ----------------------------------------------------------------------------------------- the tables
PUBLISH_MODES = ("on_message", "timer")

#: Ranges shared by the tables. Rates [Hz]: a timer period from 0.1 ms to 100 s. Periods and ages [s]: up
#: to an hour. The linearization step [s]: the library's bound (joint_state_map.PLAUSIBLE["step"]).
RATE = in_range(0.01, 10000.0)
PERIOD = in_range(0.01, 3600.0)
AGE = in_range(0.0, 3600.0)
STEP = in_range(0.0, PLAUSIBLE["step"], low_open=True)

EFFORT_LIMITS = ("the actuators' torque limits [N m] of the actuated joints, one value for every joint or one per "
                 "joint in model order, each > 0 and at most the URDF's; the default [0.0] means the URDF's. The "
                 "MPC's torque box, its safe command and the simulator's saturation use them: give both nodes the "
                 "same (a URDF's limits are often placeholders)")

_STAMP_LEAD = ("Refuse input stamped ahead of the node's clock by more than this [s]: two machines' clocks "
               "disagree a little, but a stamp far ahead would make every later message look out of order.")

STATE_QOS_CHOICES = ("best_effort", "reliable")
STATE_QOS_TEXT = ("reliability of the state subscriptions (joint_states, odom): best_effort matches both reliable "
                  "and best-effort publishers (REP 2003's sensor data profile); reliable matches reliable "
                  "publishers only")
#: How the legged MPC reads its torque and force weights (LeggedWeights.per_robot, or as given).
WEIGHT_SCALES = ("robot", "none")

#: Both legged nodes' ``sole_placement`` (the simulator and the MPC must be given the same).
SOLE_PLACEMENT = Spec("frame", "where each sole is: frame (the contact frame is the sole's centre, z up, sole_size "
                      "long and wide); collision (each contact frame is a foot link whose URDF collision geometry "
                      "gives the sole: its lowest face at the neutral configuration, a frame <link>_sole at its "
                      "centre, its size replacing sole_size; rbd_deriv.core.soles)", one_of(SOLE_PLACEMENTS),
                      read_only=True)
#: The managed nodes' (dynamics and MPC).
AUTOSTART = Spec(True, "walk the lifecycle through configure and activate at start (once a description is known); "
                 "false: wait for 'ros2 lifecycle set <node> configure' then 'activate'", read_only=True)

#: rbd_deriv/nodes/dynamics_node.py; every parameter but autostart and state_qos may be set at run time (the model's
#: while unconfigured: taken at configure).
DYNAMICS_NODE: Dict[str, Spec] = {
    "robot_description": Spec("", "URDF XML of the robot. Empty: use urdf_path, or wait for the robot_description "
                              "topic. Setting it while configured rebuilds the model (refused if the URDF is "
                              "broken); unconfigured, configure takes it."),
    "urdf_path": Spec("", "Path of a URDF file, used when robot_description is empty."),
    "floating_base": Spec(False, "Add a free-flyer root joint; its pose and twist come from the odom topic."),
    "allow_robot_change": Spec(False, "Accept a new description whose joints differ from the running model's "
                               "(by default refused: consumers rely on the state layout)."),
    "autostart": AUTOSTART,
    "publish_mode": Spec("on_message", "on_message: compute on every joint_states message; timer: at 'rate' from "
                         "the latest state.", one_of(PUBLISH_MODES)),
    "rate": Spec(100.0, "Output rate in timer mode [Hz], in [0.01, 10000].", RATE),
    "dt": Spec(0.001, "Time step of the published linearization [s], in (0, 1].", STEP),
    "publish_linearization": Spec(True, "Publish A, B, x+ on 'linearization'."),
    "publish_mass_matrix_inverse": Spec(True, "Publish M^-1 on 'mass_matrix_inverse'."),
    "publish_torques": Spec(True, "Publish RNEA(q, v, 0) as effort on 'bias_torques'."),
    "linearization_input": Spec("bias", "Input u of the linearization: bias = RNEA(q, v, 0) (holds the current "
                                "velocity), effort = measured effort from joint_states.", one_of(LINEARIZATION_INPUTS)),
    "state_qos": Spec("best_effort", STATE_QOS_TEXT[:1].upper() + STATE_QOS_TEXT[1:] + ".",
                      one_of(STATE_QOS_CHOICES), read_only=True),
    "strict_joint_names": Spec(False, "Refuse joint_states naming joints the model does not have (by default "
                               "they are ignored)."),
    "max_state_age": Spec(0.5, "Refuse states whose stamp is older than the clock by more than this, or whose "
                          "joints were updated this far apart [s], in [0, 3600]; 0 disables.", AGE),
    "max_stamp_lead": Spec(0.1, _STAMP_LEAD + " In [0, 3600].", AGE),
    "contact_frames": Spec([], "Frames in contact (URDF links or joints): the linearization is then the "
                           "contact-constrained one, with the contact forces. Empty: the free tree. The "
                           "active_contacts topic (rbd_deriv/ContactSet) replaces it at run time."),
    "contact_kinds": Spec([], "One per contact frame, point (3 force rows) or frame (6 rows); empty: every "
                          "contact is a point contact.", contact_kinds),
    "diagnostics_period": Spec(1.0, "Period of /diagnostics [s], in [0.01, 3600]; rates and percentiles cover one "
                               "period.", PERIOD),
    "log_throttle_period": Spec(5.0, "At most one log line per kind of fault per period [s], in [0, 3600].", AGE),
}

#: rbd_deriv/nodes/mpc_node.py; read at start-up, but goal_positions.
MPC_NODE: Dict[str, Spec] = {
    "urdf_path": Spec("", "URDF file of the robot; empty with robot_description empty: the model comes from the "
                      "robot_description topic (std_msgs/String, transient local), configure waits for it",
                      read_only=True),
    "robot_description": Spec("", "URDF text; used instead of urdf_path when not empty", read_only=True),
    "allow_robot_change": Spec(False, "accept a robot_description topic message that differs from the model in use; "
                               "it is taken at the next configure (cleanup, configure). By default refused and "
                               "counted, the model in use stays"),
    "autostart": AUTOSTART,
    "state_qos": Spec("best_effort", STATE_QOS_TEXT, one_of(STATE_QOS_CHOICES), read_only=True),
    "mode": Spec("held", "held: linearization from the dynamics node held over the horizon; relinearize: "
                 "in-process re-linearization along the prediction (one Gauss-Newton step per tick)",
                 one_of([m.value for m in Mode]), read_only=True),
    "horizon": Spec(20, "horizon steps N, in [1, 1000]", in_range(1, 1000), read_only=True),
    "dt": Spec(0.01, "horizon step [s], in (0, 1]; must equal the dynamics node's dt in held mode", STEP,
               read_only=True),
    "rate_hz": Spec(200.0, "tick rate [Hz], in [0.01, 10000]", RATE, read_only=True),
    "max_iterations": Spec(1, "Riccati passes per tick at most, in [1, 100]", in_range(1, 100), read_only=True),
    "position_weight": Spec([1000.0], "W on positions [1/rad^2], one value or one per joint", finite_values,
                            read_only=True),
    "velocity_weight": Spec([1.0], "W on velocities [s^2/rad^2], one value or one per joint", finite_values,
                            read_only=True),
    "torque_weight": Spec([0.001], "R on torque deviations from inverse dynamics [1/(N m)^2], one value or one "
                          "per joint", finite_values, read_only=True),
    "terminal_scale": Spec(10.0, "W factor at knot N", non_negative, read_only=True),
    "limit_weight": Spec(10000.0, "weight of the soft position and velocity limits", non_negative, read_only=True),
    "effort_limits": Spec([0.0], EFFORT_LIMITS, effort_values, read_only=True),
    "torque_margin": Spec(1.0, "fraction of the URDF effort limit the MPC may use, in (0, 1]", fraction,
                          read_only=True),
    "disturbance_time_constant": Spec(0.01, "filter time constant [s] of the estimate of the torques the model "
                                      "misses (friction, damping), added to the model; 0 disables", non_negative,
                                      read_only=True),
    "disturbance_bound": Spec(0.2, "largest disturbance estimate, as a fraction of each joint's effort limit, in "
                              "(0, 1]", fraction, read_only=True),
    "predict_delay": Spec(True, "solve from the measured state carried forward by the model to the time the "
                          "command acts (the state's age plus command_delay), with the torques sent meanwhile",
                          read_only=True),
    "command_delay": Spec(0.0, "expected time [s] from publishing a command to its effect at the actuators, in "
                          "[0, state_timeout)", non_negative, read_only=True),
    "state_timeout": Spec(0.05, "joint_states older than this [s] trigger the safe command, in (0, 3600]",
                          in_range(0.0, 3600.0, low_open=True), read_only=True),
    "linearization_timeout": Spec(0.05, "a linearization older than this [s] triggers the safe command, in "
                                  "(0, 3600]", in_range(0.0, 3600.0, low_open=True), read_only=True),
    "max_stamp_lead": Spec(0.1, _STAMP_LEAD + " In [0, 3600].", AGE, read_only=True),
    "max_reference_error": Spec(0.1, "fixed base: the horizon's reference is shifted so that it starts within this "
                                "[rad or m] of the state on every joint (a far goal, a robot left behind by a "
                                "stall: reached at a pace the MPC can stop from), in [0, 3600]; 0: never shifted",
                                AGE, read_only=True),
    "goal_positions": Spec([0.0], "goal configuration [rad] in model order, one value per joint; settable at run "
                           "time (replaces the reference); the default [0.0] means none", finite_values),
    "plan_decimation": Spec(5, "publish the plan every this many ticks, in [1, 1000000]", in_range(1, 1e6),
                            read_only=True),
    "policy_topic": Spec("feedback_policy", "rbd_deriv/msg/FeedbackPolicy output, every tick: the plan's feedback "
                         "policy u = u_ff + K (x (-) x_ref) for a robot-side controller; empty: not published",
                         read_only=True),
    "policy_validity": Spec(0.1, "how long [s] after its first knot's time the robot side may apply a policy, in "
                            "(0, 3600]; the policy carries the plan's knots over that time", in_range(0.0, 3600.0,
                            low_open=True), read_only=True),
    "diagnostics_period": Spec(1.0, "period of /diagnostics [s], in [0.01, 3600]", PERIOD, read_only=True),
    "command_topic": Spec("/effort_controller/commands", "std_msgs/Float64MultiArray torque command output",
                          read_only=True),
    "joint_states_topic": Spec("joint_states", "sensor_msgs/JointState input", read_only=True),
    "linearization_topic": Spec("linearization", "rbd_deriv/msg/Linearization input (held mode)", read_only=True),
    "compensation_topic": Spec("bias_torques", "sensor_msgs/JointState with effort = RNEA(q, v, 0), for the safe "
                               "command", read_only=True),
    "reference_topic": Spec("~/reference", "trajectory_msgs/JointTrajectory reference input", read_only=True),
    "plan_topic": Spec("~/plan", "trajectory_msgs/JointTrajectory planned motion output", read_only=True),
}

#: The default gait table (config/mpc_node.yaml says the same): a quadruped's, feet FL, FR, HL, HR, then a biped's,
#: feet L, R. Trot: diagonal pairs; pace: left pair, right pair; bound: front pair, hind pair; crawl: one foot at a
#: time (HL, FL, HR, FR); walk: one sole at a time, both down 2 x 20 % of the cycle.
DEFAULT_GAITS = ("trot: period=0.4 duty=0.6 offsets=0.5,0.0,0.0,0.5",
                 "pace: period=0.32 duty=0.625 offsets=0.5,0.0,0.5,0.0 swing_height=0.03",
                 "bound: period=0.4 duty=0.7 offsets=0.5,0.5,0.0,0.0",
                 "crawl: period=0.8 duty=0.8 offsets=0.45,0.95,0.2,0.7",
                 "walk: period=1.0 duty=0.7 offsets=0.0,0.5 swing_height=0.05")

#: The floating-base mode of the MPC node (a legged robot on its feet, rbd_deriv.control.legged_loop): read at
#: start-up, but ``gait``.
MPC_NODE_LEGGED: Dict[str, Spec] = {
    "floating_base": Spec(False, "a legged robot: free-flyer base (pose and twist from odom_topic), the legged MPC "
                          "on contact_frames along a gait; false: the fixed-base MPC", read_only=True),
    "contact_frames": Spec([], "floating base: the feet (URDF links or joints), in the gait's order (a trot: FL, "
                           "FR, HL, HR)", read_only=True),
    "contact_kinds": Spec([], "one per foot, point (a force) or frame (a sole: a wrench); empty: every foot is a "
                          "point", contact_kinds, read_only=True),
    "srdf_path": Spec("", "SRDF file whose group_state `posture` is the reference posture; empty: the neutral "
                      "configuration", read_only=True),
    "posture": Spec("", "name of the SRDF group_state of the reference posture (joints it leaves out take their "
                    "neutral value); the base is put on the floor", read_only=True),
    "foot_radius": Spec(0.02, "radius of a point foot [m], > 0: its frame stands that high above the floor (the "
                        "simulator's foot sphere)", positive, read_only=True),
    "sole_size": Spec([0.2, 0.1], "length and width of a sole [m] (the simulator's sole)", finite_values,
                      read_only=True),
    "cop_margin": Spec(0.0, "share of a sole's half length and half width the plan keeps its center of pressure "
                       "away from the sole's edges, in [0, 0.9] (0: up to the edge, where the sole starts to tip)",
                       in_range(0.0, 0.9), read_only=True),
    "sole_placement": SOLE_PLACEMENT,
    "gait_table": Spec(list(DEFAULT_GAITS), "the robot's gaits as data, one string per gait: \"NAME: period=T duty=B offsets=O1,O2,... "
                       "[swing_height=H]\" (T [s] a whole number of dt, B the share of the cycle each foot is down, "
                       "one phase in [0, 1) per foot of contact_frames at which it lands, H [m]); `stand` (every "
                       "foot down) is built in", read_only=True),
    "gaits": Spec(["stand"], "the gaits built at start-up (each `stand` or a row of gait_table): `gait` and "
                  "`idle_gait` may switch between them at run time", read_only=True),
    "gait": Spec("stand", "the gait followed (one of `gaits`); settable at run time: the new gait starts at its "
                 "first knot, at a knot where the gait in use has every foot down"),
    "idle_gait": Spec("", "the gait followed while the velocity command is zero (e.g. stand), the `gait` as soon as "
                      "it is not; empty: always `gait` (a zero command steps in place); settable at run time"),
    "policy_gain_knots": Spec(1, "knots whose own Riccati gain the feedback policy carries (1: the first knot's for "
                              "all; more: a robot side that runs on for several knots, such as a stalled MPC's, keeps "
                              "each knot's feedback), in [1, 1000]; at most the policy's knots are sent",
                              in_range(1, 1000), read_only=True),
    "mu": Spec(0.7, "friction coefficient the MPC plans with (keep it under the floor's), > 0", positive,
               read_only=True),
    "swing_height": Spec(0.05, "apex of a swing foot above its stance position [m], >= 0", non_negative,
                         read_only=True),
    "odom_topic": Spec("odom", "nav_msgs/Odometry input of the base: pose in the world, twist in the base frame",
                       read_only=True),
    "odom_frame": Spec("odom", "the odometry's header.frame_id; odometry naming another frame is refused (`frame`); "
                       "empty: any", read_only=True),
    "base_frame": Spec("", "the odometry's child_frame_id; odometry naming another frame is refused (`frame`); "
                       "empty: the URDF's root link (what the simulator node sends)", read_only=True),
    "odom_jump_margin": Spec(0.05, "a base position farther from the last accepted one than its velocity explains "
                             "over the time between them, by more than this [m], is refused (`jump`), in (0, 100]",
                             in_range(0.0, 100.0, low_open=True), read_only=True),
    "odom_jump_angle_margin": Spec(0.2, "the same for the base's orientation [rad] and its angular velocity, in "
                                   "(0, 3.2]", in_range(0.0, 3.2, low_open=True), read_only=True),
    "odom_max_speed": Spec(10.0, "odometry whose twist claims a faster base [m/s] is refused (`twist`): the twist "
                           "bounds what a jump may be explained by, in (0, 1000]", in_range(0.0, 1000.0, low_open=True),
                           read_only=True),
    "odom_max_rate": Spec(20.0, "the same for the base's angular velocity [rad/s], in (0, 1000]",
                          in_range(0.0, 1000.0, low_open=True), read_only=True),
    "motion_margin": Spec(0.5, "fraction of what the robot can follow that the velocity command and the sway may ask "
                          "together, in (0, 1]: a peak speed (walk plus sway) up to sqrt(g h) and a sway "
                          "acceleration up to g w / h, h the base's height above its feet and w the nearest foot's "
                          "sideways distance in the reference posture; a set beyond is refused", fraction,
                          read_only=True),
    "cmd_vel_topic": Spec("cmd_vel", "geometry_msgs/Twist velocity command of a legged robot, in its base frame (REP "
                          "103): linear.x forward, linear.y left [m/s], angular.z [rad/s]; the others are unused",
                          read_only=True),
    "cmd_vel_stamped": Spec(False, "cmd_vel is geometry_msgs/TwistStamped (as Nav2 sends it) instead of Twist",
                            read_only=True),
    "max_cmd_vel": Spec([0.5, 0.3, 1.0], "bounds of the velocity command (vx, vy [m/s], wz [rad/s]), each > 0: a "
                        "command beyond, or beyond the speed the robot can follow (motion_margin), is clamped and "
                        "counted (cmd_vel_clamped)", positive_triple, read_only=True),
    "max_cmd_acceleration": Spec([1.0, 1.0, 2.0], "how fast the base's reference velocity follows the command (ax, "
                                 "ay [m/s^2], yaw [rad/s^2]), each > 0", positive_triple, read_only=True),
    "posture_ramp": Spec(1.0, "the first plans reach the reference posture's joints and base height from where the "
                         "robot is over this long [s] (a smoothstep), in [0, 60]; 0: at once", in_range(0.0, 60.0),
                         read_only=True),
    "locked_joints": Spec([], "floating base: joints the MPC plans as locked at the reference posture (a humanoid's "
                          "arms, grippers, head: a smaller problem); the policy it sends holds each on a spring "
                          "over its gravity torque (rbd_deriv.control.locked_joints); empty: none", read_only=True),
    "locked_joint_frequency": Spec(10.0, "natural frequency [Hz] of the locked joints' critically damped springs, "
                                   "in (0, 100]", in_range(0.0, 100.0, low_open=True), read_only=True),
    "path_slack": Spec(0.1, "the base's reference is kept within this distance [m] of the measured base (a pushed "
                       "robot goes on from where it is), in (0, 100]", in_range(0.0, 100.0, low_open=True),
                       read_only=True),
    "heading_slack": Spec(0.2, "the same for its heading [rad], in (0, 3.2]", in_range(0.0, 3.2, low_open=True),
                          read_only=True),
    "sway_amplitude": Spec(0.0, "sway: the base's reference moves sideways (its heading's y) by this [m] times sin(2 pi t / "
                           "sway_period), in [0, 0.5]; settable at run time; 0: no sway", in_range(0.0, 0.5)),
    "sway_period": Spec(2.0, "period of the sway [s], in [0.1, 60]; settable at run time", in_range(0.1, 60.0)),
    **{f"weight_{field.name}": Spec(float(field.default), f"legged cost weight `{field.name}` (see "
                                    "rbd_deriv.control.legged.LeggedWeights), >= 0", non_negative, read_only=True)
       for field in dataclasses.fields(LeggedWeights) if field.name not in ("torque", "force")},
    "weight_scale": Spec("robot", "how weight_torque and weight_force read: robot (dimensionless, per the square of "
                         "the root mean square of the planned joints' effort limits and of the robot's weight: "
                         "LeggedWeights.per_robot) or none (as given, [1/(N m)^2] and [1/N^2])",
                         one_of(WEIGHT_SCALES), read_only=True),
    "weight_torque": Spec(0.729, "legged cost weight on u - u^s, >= 0: per (effort limit)^2 with weight_scale robot "
                          "(0.729: solo12's 0.1 /(N m)^2 on its 2.7 N m), [1/(N m)^2] with none", non_negative,
                          read_only=True),
    "weight_force": Spec(0.6015, "legged cost weight on f - f^r, >= 0: per (robot's weight)^2 with weight_scale "
                         "robot (0.6015: solo12's 0.001 /N^2 on its 24.5 N), [1/N^2] with none", non_negative,
                         read_only=True),
}
MPC_NODE.update(MPC_NODE_LEGGED)

#: rbd_deriv/nodes/sim_node.py; read at start-up.
SIM_NODE: Dict[str, Spec] = {
    "urdf_path": Spec("", "URDF file of the robot; empty with robot_description empty: the robot comes from the "
                      "robot_description topic (latched), the simulation starts when it arrives", read_only=True),
    "robot_description": Spec("", "URDF text; used instead of urdf_path when not empty", read_only=True),
    "backend": Spec("mujoco", f"physics backend, one of {', '.join(BACKENDS)}", one_of(BACKENDS), read_only=True),
    "physics_rate_hz": Spec(1000.0, "physics and joint_states rate [Hz], in [0.01, 10000]", RATE, read_only=True),
    "damping": Spec([0.1], "joint viscous damping [N m s/rad]; one value for every joint or one per joint",
                    finite_values, read_only=True),
    "friction": Spec([0.1], "joint dry friction [N m]; one value for every joint or one per joint", finite_values,
                     read_only=True),
    "initial_positions": Spec([0.0], "initial joint positions [rad] in model order; one value is used for every "
                              "joint", finite_values, read_only=True),
    "command_topic": Spec("/effort_controller/commands", "std_msgs/Float64MultiArray effort commands [N m]",
                          read_only=True),
    "policy_topic": Spec("feedback_policy", "rbd_deriv/msg/FeedbackPolicy input, applied at every physics step "
                         "while valid (before the torque commands); empty: torque commands only", read_only=True),
    "command_timeout": Spec(0.5, "a torque command older than this [s] is no longer applied (when no valid policy "
                            "is either, the brakes hold the joints), in [0, 3600]; 0: held for ever", AGE,
                            read_only=True),
    "expiry_hold": Spec(0.0, "when the newest policy expires (its controller stalled or died), its last knot "
                        "(reference state and feedforward) is applied under its gain for this long [s], in [0, 3600]",
                        AGE, read_only=True),
    "expiry_damping": Spec(0.0, "after expiry_hold, with no fresh torque command, joint damping u = -d v with this "
                           "d [N m s/rad], >= 0 (a robot on its feet settles), at most what one physics step keeps "
                           "stable on each joint (its inertia over the step); 0: the brakes", non_negative,
                           read_only=True),
    "effort_limits": Spec([0.0], EFFORT_LIMITS, effort_values, read_only=True),
    "push_budget": Spec(2.0, "floating base: the pushes accepted within any second may change the base's momentum "
                        "by at most the robot's mass times this [m/s] (and its angular momentum by as many N m s); "
                        "pushes beyond are refused (push/budget), in (0, 1000]", in_range(0.0, 1000.0, low_open=True),
                        read_only=True),
    "max_stamp_lead": Spec(0.1, "Refuse policies stamped ahead of the node's clock by more than this [s], in "
                           "[0, 3600].", AGE, read_only=True),
    "diagnostics_period": Spec(1.0, "period of /diagnostics [s], in [0.01, 3600]", PERIOD, read_only=True),
    "joint_states_topic": Spec("joint_states", "sensor_msgs/JointState output", read_only=True),
    "frame_id": Spec("", "frame_id of the joint_states header", read_only=True),
    "floating_base": Spec(False, "the robot's root body moves freely (a legged robot); its pose and twist go out on "
                          "odom_topic", read_only=True),
    "contact_frames": Spec([], "floating base: frames (URDF links or joints) that touch the floor, each with a foot "
                           "sphere or a sole; empty: no floor", read_only=True),
    "contact_kinds": Spec([], "one per contact frame, point (a sphere) or frame (a sole: four spheres at the corners "
                          "of sole_size); empty: every contact is a point", contact_kinds, read_only=True),
    "foot_radius": Spec(0.02, "radius of the foot spheres [m], > 0", positive, read_only=True),
    "sole_size": Spec([0.2, 0.1], "length and width of a sole's rectangle [m]", finite_values, read_only=True),
    "sole_placement": SOLE_PLACEMENT,
    "ground_friction": Spec(1.0, "friction coefficient mu of the feet on the floor, > 0", positive, read_only=True),
    "initial_base_pose": Spec([0.0], "floating base: initial x y z [m] qx qy qz qw of the base; one value: upright "
                              "above the origin, the lowest foot resting on the floor", finite_values,
                              read_only=True),
    "odom_topic": Spec("odom", "nav_msgs/Odometry output of a floating base (ground truth)", read_only=True),
    "odom_frame_id": Spec("odom", "the odometry's world frame", read_only=True),
    "tf_period": Spec(0.01, "floating base: period [s] of the base's transform (odom_frame_id -> base link) on /tf, "
                      "where tf2_msgs is installed, in [0, 3600]; 0: none", AGE, read_only=True),
    "push_topic": Spec("push", "rbd_deriv/msg/Push input: a wrench on a floating base for a while", read_only=True),
    "contact_forces_topic": Spec("contact_forces", "rbd_deriv/msg/ContactForces output: the floor's force on each "
                                 "foot (world frame); empty: not published", read_only=True),
    "contact_forces_period": Spec(0.01, "period of contact_forces [s], in [0.001, 3600]", in_range(0.001, 3600.0),
                                  read_only=True),
    "publish_clock": Spec(False, "simulated time: the simulator's time goes out on /clock (rosgraph_msgs/Clock) and "
                          "stamps its outputs; a machine too busy to keep up slows that time instead of leaving the "
                          "robot behind it (the other nodes need use_sim_time); false: the wall clock",
                          read_only=True),
    "real_time_factor": Spec(1.0, "with publish_clock: simulated seconds per wall-clock second asked for, in "
                             "(0, 100]", in_range(0.0, 100.0, low_open=True), read_only=True),
    "wait_for_policy": Spec(0.03, "with publish_clock: the simulated time runs at most this far [s] past the last "
                            "policy message heard, then waits for the next one (at most WAIT_FOR_POLICY_MAX of the wall "
                            "clock: a controller that died meets the expiry's safe mode), so a stalled controller "
                            "stops the simulated time, in [0, 3600]; 0: never waits", AGE,
                            read_only=True),
    "clock_period": Spec(0.005, "with publish_clock: simulated time between two /clock messages [s], in "
                         "[0.0001, 1]", in_range(0.0001, 1.0), read_only=True),
}
