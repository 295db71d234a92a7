"""Whole-body MPC of a legged robot on its contacts: the problem, built once, moved along a gait.

The optimal control problem (:mod:`rbd_deriv.control.ocp`) of a floating-base robot whose feet
follow a :class:`~rbd_deriv.control.schedule.Gait`:

- state x = (q, v) with the free flyer (:class:`~rbd_deriv.control.state_space.ConfigurationSpace`),
  controls u = the actuated joints' torques (nu = nv - 6), in the box of the URDF's effort limits;
- dynamics: the contact dynamics of the feet closed at each knot, with the touchdown impulse
  composed into the touchdown knots' maps (:class:`~rbd_deriv.control.dynamics.ContactDynamics`);
- running costs (Gauss-Newton, :mod:`rbd_deriv.control.cost`):

  .. math::

      \\tfrac12 \\|x \\ominus x^r\\|^2_{W_x} + \\tfrac12 w_c \\|c_{xy}(q) - c^r_{xy}\\|^2
      + \\tfrac12 w_u \\|u - u^s\\|^2 + \\sum_{feet} \\big(\\tfrac12 w_f \\|f_c - f^r_c\\|^2
      [\\text{closed}] + \\tfrac12 w_s \\|p_c(q) - p^r_{c,k}\\|^2 [\\text{open}]\\big)
      + \\tfrac12 w_e \\|(J_c(q)\\,v)_{xy}\\|^2 [\\text{swing end}]
      + w_b \\sum \\mathrm{barrier}(C f_c) + \\tfrac12 w_o \\|\\log_3(R^{r\\,T}_o R_o(q))\\|^2

  with x^r the reference posture (an SRDF group_state, :mod:`rbd_deriv.control.srdf`) at rest,
  u^s the static torques that hold it (:func:`static_torques`), f^r the robot's weight shared by
  the closed feet of the knot, p^r a swing foot's placement over its stance position lifted by
  :math:`16 h s^2 (1 - s)^2` (s in [0, 1] along the swing: it leaves and reaches the ground
  with no vertical speed, so a touchdown a little off its knot is a gentle one), with ``weights.swing_ends`` the
  horizontal world velocity of a swing foot (:class:`~rbd_deriv.control.task_residuals.FrameVelocityResidual`) at the
  ends of its swing (:data:`SWING_END_KNOTS`: the knot after its lift-off, the knot before its touchdown and the
  touchdown knot, before the impulse), its horizontal reference held still at the landing (a semi-implicit Euler step of dt
  lands the foot at the chord's velocity of its last step, whatever the reference's slope at the touchdown: solo12's
  feet landed at 0.2 m/s sideways and slid on the floor), a relaxed log
  barrier on the friction pyramid (:mod:`rbd_deriv.control.contact_force`), and, when its weight is
  set, the torso frame's orientation R_o kept at the posture's
  (:mod:`rbd_deriv.control.orientation_residual`);
- constraint: the friction pyramid (mu of the MPC) with unilaterality of every closed foot,
  :math:`C f_c \\ge 0`, kept by the solver's augmented Lagrangian (:mod:`rbd_deriv.control.constraints`,
  penalty ``weights.cone_penalty``), its multipliers carried from tick to tick with the plan.

  The barrier stays, light, beside the constraint: the Gauss-Newton model of the augmented Lagrangian is
  flat on a face the nominal's forces do not touch, so a real-time step cannot see a face it is about to
  cross (solo12 starting to walk in MuJoCo, test_legged_loop: without the barrier or with its default
  weight, first-knot forces 7 to 33 N out of the pyramid and 11 plans refused, whatever the penalty from
  1 to 100 [1/N^2]; with config/solo12.yaml's barrier weight 1, none). The barrier's curvature inside
  gives the step that anticipation; the constraint removes what the barrier's relaxation lets out (a
  penalty there, whose violation vanishes only as its weight grows: solo12 asked for more friction than
  the cone gives, 1.5 N out of the pyramid with the barrier alone, 0.017 N with the constraint,
  test_constraints);
- terminal cost: the posture term times ``weights.terminal``;
- a moving base (:class:`BasePath`, :meth:`LeggedMPC.set_path`): the base's horizontal reference
  p(t), its heading :math:`\\theta(t)` (the posture turned about the vertical) and their rates at
  each knot's time (walking and turning at a commanded velocity, a lateral sway), and each swing
  foot's placement moving from where its previous touchdown put it to where this one puts it,
  :math:`p(t_{td}) + R_z(\\theta(t_{td}))\\,o_c + v(t_{td})\\,T_{st}/2 + \\sqrt{h/g}\\,(\\dot p - v)`
  (o_c the foot's offset from the base in the posture, T_st its stance time: Raibert's rule, which
  centres the stance under the hip; the last term the capture point's offset of the base's measured
  velocity error, so that a pushed robot steps where its momentum goes); feet in stance are where
  they landed (their contacts hold them, no reference).

:class:`LeggedMPC` builds that problem and its :class:`~rbd_deriv.control.solver.RiccatiSolver`
once; :meth:`LeggedMPC.solve` moves the schedule to the tick's gait phase (in place: the residuals
keep the arrays), warm-starts from the previous plan and runs real-time iterations. Its plan is
sent only if the first knot's forces are inside the exact friction cone within the tolerance of
:func:`~rbd_deriv.control.contact_force.forces_within_cone`; the plan also reports their largest
violation of the pyramid the solver keeps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.constants import GRAVITY, STEP_BASE_SPEED, STEP_HALVINGS, STEP_VELOCITY_FACTOR
from rbd_deriv.control.activation import Quadratic, RelaxedLogBarrier
from rbd_deriv.control.base_motion import BasePath, turned
from rbd_deriv.control.constraints import FrictionConeConstraint
from rbd_deriv.control.contact_force import (CenterOfPressureResidual, ForceStackResidual, FrictionConeResidual,
                                             forces_within_cone)
from rbd_deriv.control.cost import Cost
from rbd_deriv.control.dynamics import ContactDynamics
from rbd_deriv.control.euler_riccati import all_finite
from rbd_deriv.control.ocp import OptimalControlProblem, check_state
from rbd_deriv.control.orientation_residual import FrameOrientationResidual
from rbd_deriv.control.residuals import ControlResidual, StateResidual
from rbd_deriv.control.schedule import Gait
from rbd_deriv.control.plan import Plan
from rbd_deriv.control.solver import SOLVE_PARTS, RiccatiSolver
from rbd_deriv.control.state_space import FREE_FLYER_DOF, ConfigurationSpace
from rbd_deriv.control.statics import static_torques
from rbd_deriv.control.task_residuals import (CenterOfMassResidual, FramePositionResidual,
                                              FrameVelocityResidual, RobotKinematics)
from rbd_deriv.core.configuration import rotation_of
from rbd_deriv.exceptions import InputError


#: The knots at each end of a swing where, with ``weights.swing_ends``, the foot's horizontal velocity is costed:
#: the first SWING_END_KNOTS knots after its lift-off knot, the last SWING_END_KNOTS before its touchdown knot and
#: the touchdown knot itself (its velocity before the impulse); the horizontal reference holds the landing place
#: from SWING_END_KNOTS before the touchdown (holding the lift-off place too made the feet cross the step faster
#: and the yaw rate's tracking worse: 0.0031-0.0032 -> 0.0036-0.0038 rad/s RMS over the demo's script in process).
SWING_END_KNOTS = 1

#: The parts of a tick timed in its plan's ``timings``: moving the schedule and the warm start; the solver's
#: (:data:`~rbd_deriv.control.solver.SOLVE_PARTS`); the first knot's forces and cone check.
TIMING_PARTS = ("schedule",) + SOLVE_PARTS + ("cone check",)


def _yaw_rotations(angles: np.ndarray) -> np.ndarray:
    """(K, 3, 3) rotations about the world's z by ``angles`` (K,) [rad]."""
    cos, sin = np.cos(angles), np.sin(angles)
    turn = np.zeros((len(angles), 3, 3))
    turn[:, 0, 0], turn[:, 0, 1], turn[:, 1, 0], turn[:, 1, 1], turn[:, 2, 2] = cos, -sin, sin, cos, 1.0
    return turn


@dataclass(frozen=True)
class LeggedWeights:
    """Weights of the legged problem's costs (each multiplies half a squared residual).

    Attributes:
        base_position, base_orientation: On the free flyer's tangent deviation [1/m^2], [1/rad^2].
        joint_position: On the joints' deviation from the posture [1/rad^2].
        base_velocity, joint_velocity: On the velocities [s^2/m^2 or s^2/rad^2].
        com: On the center of mass's horizontal deviation from the posture's [1/m^2].
        torque: On u - u^s [1/(N m)^2].
        force: On f - f^r [1/N^2].
        swing: On a swing foot's placement error [1/m^2].
        swing_orientation: On a swing sole's orientation error [1/rad^2] (feet in ``frame`` contact: a sole
            lands flat, turned with the heading).
        swing_ends: On a swing foot's horizontal world velocity at the ends of its swing [s^2/m^2]
            (:data:`SWING_END_KNOTS`; 0: no such cost, and the horizontal reference moves until the touchdown).
        terminal: Factor of the posture cost at the last knot.
        cone: Weight w_b of the friction-cone barrier.
        cone_delta: Relaxation threshold of the barrier, as a fraction of the weight share of a
            foot (the barrier turns quadratic below it).
        cone_penalty: The friction-cone constraint's augmented-Lagrangian penalty times the robot's
            weight squared, rho W^2 (dimensionless): rho = cone_penalty / W^2 [1/N^2]
            (:mod:`rbd_deriv.control.constraints`), so that a violation by a given share of the weight
            costs every robot alike (600: rho = 1 /N^2 on solo12's 24.5 N; a 95 kg humanoid with solo12's
            rho refuses its first plans at 100 Hz and falls); its multipliers are bounded by rho W (the
            multiplier a violation by the whole weight would give in one update).
        torso_orientation: On the torso frame's orientation error [1/rad^2] (0: no such cost).
        center_of_pressure: Weight of the log barrier keeping each sole's center of pressure inside its rectangle
            (feet in ``frame`` contact, with a ``sole_size``), relaxed like the cone's at ``cone_delta`` of a foot's
            weight share times the sole's half-width.
    """

    base_position: float = 100.0
    base_orientation: float = 100.0
    joint_position: float = 1.0
    base_velocity: float = 1.0
    joint_velocity: float = 0.1
    com: float = 0.0
    torque: float = 0.1
    force: float = 1e-3
    swing: float = 1e4
    swing_orientation: float = 1e3
    swing_ends: float = 0.0
    terminal: float = 10.0
    cone: float = 1e-3
    cone_delta: float = 0.05
    cone_penalty: float = 600.0
    torso_orientation: float = 0.0
    center_of_pressure: float = 0.1

    def per_robot(self, model: Any) -> "LeggedWeights":
        """These weights with ``torque`` and ``force`` read as dimensionless, per the robot's own scales (as
        ``cone_penalty`` is): the weight on u - u^s becomes torque / u_rms^2, u_rms the root mean square of the
        actuated joints' effort limits [N m], and the one on f - f^r force / W^2, W the robot's weight [N]. A
        torque off by a given share of the actuators' limits, or a force by a given share of the weight, then
        costs every robot alike: solo12's tuning (0.1 [1/(N m)^2] on 2.7 N m actuators, 0.001 [1/N^2] on 24.5 N)
        is torque 0.729, force 0.6015 here, and carries to a 30 kg quadruped on 80 N m actuators (solo12's absolute
        weights on that robot made its plans trot backwards when asked forwards).

        Args:
            model: The robot the MPC plans (its effort limits those it plans with: ``set_actuator_limits``).

        Raises:
            InputError: An actuated joint without an effort limit (none in the URDF: give the real ones).
        """
        rows = [model.idx_v[name] for name in model.actuated_joint_names]
        limits = np.asarray(model.effort_limit, dtype=float)[rows]
        missing = [name for name, limit in zip(model.actuated_joint_names, limits)
                   if not (np.isfinite(limit) and limit > 0.0)]
        if missing:
            raise InputError(f"torque weights per the robot need every joint's effort limit; none for {missing}",
                             "effort_limits")
        weight = float(np.asarray(model.inertias)[:, 0].sum()) * GRAVITY
        return replace(self, torque=self.torque / float(np.mean(limits ** 2)),
                       force=self.force / weight ** 2)


class LeggedMPC:
    """The legged problem of the module docstring, its solver, and one call per tick.

    Args:
        model: A floating-base model.
        feet: Contact frame names, in the gait's order.
        gait: The contact pattern (its names must be ``feet``).
        posture: (nq,) reference configuration, feet on the ground (z of each foot there is the
            ground height of its swing reference).
        horizon: Number of knots N.
        dt: Step [s].
        mu: Friction coefficient.
        weights: The cost weights.
        swing_height: Apex of a swing foot above its stance position [m].
        impulses: Compose the touchdown impulses (see :class:`ContactDynamics`).
        effort: (nu,) torque limits [N m] (default the URDF's, which must be finite).
        actuated: Actuated joints in control order (default all but the free flyer).
        torso: The frame of the torso orientation cost (``weights.torso_orientation``).
        capture_point: Step beside Raibert's placement by the capture point's offset of the base's measured
            velocity error (:meth:`_capture_offset`) when the base moves along a path.
        sole_size: (length, width) [m] of the soles (``frame`` feet), for their center-of-pressure barrier.
        cop_margin: Share of a sole's half length and half width, in [0, 1), kept free of the planned center of
            pressure at each edge: the barrier's rectangle is (1 - cop_margin) times the sole's. The plan's
            center of pressure on the edge is the robot's sole on its edge, tipping at the least error
            (talos pushed by 0.2 m/s standing, in process: 313 sole-steps of 1 ms on the edge with no margin, 103
            with 0.2, 77 with 0.3); the ankle's reach shrinks with it (standing, 0.3 m/s held but not 0.4, which
            the margin 0 holds).

    Raises:
        InputError: A fixed-base model, a foot frame the model does not have, a posture of the
            wrong size or not finite, a gait on other contacts, a knot without contact, a cop_margin outside
            [0, 1).
    """

    def __init__(self, model: Any, feet: Sequence[str], gait: Gait, posture: np.ndarray,
                 horizon: int = 20, dt: float = 0.02, mu: float = 0.7,
                 weights: LeggedWeights = LeggedWeights(), swing_height: float = 0.05,
                 impulses: bool = True, effort: np.ndarray | None = None,
                 actuated: Sequence[str] | None = None, torso: str = "base_link",
                 capture_point: bool = True, sole_size: Sequence[float] | None = None,
                 cop_margin: float = 0.0) -> None:
        if not model.has_floating_base:
            raise InputError("a legged MPC needs a model with a floating base", "model")
        feet = tuple(feet)
        if gait.names != feet:
            raise InputError(f"gait contacts {list(gait.names)} are not the feet {list(feet)}",
                             "gait")
        posture = np.array(posture, dtype=float)
        if posture.shape != (model.nq,) or not np.isfinite(posture).all():
            raise InputError(f"posture must be {model.nq} finite numbers, got shape "
                             f"{posture.shape}", "posture")
        self.model, self.feet, self.gait = model, feet, gait
        self.horizon, self.dt, self.mu = int(horizon), float(dt), float(mu)
        self.weights = weights
        self.phase = 0
        schedule = gait.schedule(self.horizon, 0)
        # A horizon moving along a periodic gait meets each of its P schedules again.
        self._schedules = {0: schedule}
        #: Phase of the period -> its references without a path (:meth:`_references_at_phase`).
        self._phase_references: dict[int, tuple] = {}
        self.dynamics = ContactDynamics(model, dt, schedule, actuated, impulses)
        self.kinds = self.dynamics.kinds
        nv, nu = model.nv, self.dynamics.nu
        space = ConfigurationSpace(model)
        self.space = space
        self.x_ref = np.r_[posture, np.zeros(nv)]
        self.u_static, self.f_static = static_torques(model, posture, feet, self.kinds,
                                                      self.dynamics.actuated)
        data = model.create_data()
        self.weight = float(np.linalg.norm(rd.gravity_torques(model, data, posture)[:3]))
        rd.forward_kinematics(model, data, posture)
        self.stance = np.array([rd.frame_placement(model, data, foot)[:3, 3] for foot in feet])
        #: (nc, 3, 3) each foot's orientation in the posture.
        self.stance_rotations = np.array([rd.frame_placement(model, data, foot)[:3, :3] for foot in feet])
        if effort is None:
            effort = model.effort_limit[self.dynamics.actuated]
        effort = np.asarray(effort, dtype=float)
        self.swing_height = float(swing_height)
        self._lift, self._since, self._until = self._lift_table()
        #: (nc, 2) each foot's horizontal offset from the base in the posture, (nc,) its stance time [s].
        self.foot_offsets = self.stance[:, :2] - posture[:2]
        self.stance_time = gait.pattern.sum(axis=0) * self.dt
        #: sqrt(h / g) [s] of the posture (h its base's height above its feet) when ``capture_point``, else 0; (2,)
        #: the step beside Raibert's placement of the current solve [m], at most half the nearest foot's distance
        #: from the base (:meth:`_capture_offset`).
        height = float(posture[2] - self.stance[:, 2].mean())
        self.capture_time = float(np.sqrt(max(height, 0.0) / GRAVITY)) if capture_point else 0.0
        self.max_capture_offset = 0.5 * float(np.linalg.norm(self.foot_offsets, axis=1).min())
        self.capture_offset = np.zeros(2)
        self._measured_velocity = np.zeros(2)

        w = weights
        joints = nv - FREE_FLYER_DOF
        state_weight = np.r_[np.full(3, w.base_position), np.full(3, w.base_orientation),
                             np.full(joints, w.joint_position), np.full(FREE_FLYER_DOF, w.base_velocity),
                             np.full(joints, w.joint_velocity)]
        #: (ndx,) weights of the posture cost (before the terminal factor).
        self.state_weight = state_weight
        N = self.horizon
        kinematics = RobotKinematics(model)
        self.kinematics = kinematics
        #: (N, nx) running and (nx,) final state references: the posture, its base moved along the path.
        self.state_reference = np.tile(self.x_ref, (N, 1))
        self.final_reference = self.x_ref.copy()
        running = [Cost(StateResidual(space, self.state_reference), Quadratic(state_weight, space.ndx),
                        name="posture"),
                   Cost(ControlResidual(space, nu, self.u_static), Quadratic(w.torque, nu),
                        name="torque")]
        if w.com > 0.0:
            com = rd.center_of_mass(model, data, posture)
            running.append(Cost(CenterOfMassResidual(space, kinematics, com[:2], axes=(0, 1)),
                                Quadratic(w.com, 2), name="com"))
        offsets = self.dynamics.offsets
        #: (N, m) weight share of the closed feet in each knot's force stack, written by the schedule.
        self.force_reference = np.zeros((N, self.dynamics.force_rows))
        running.append(Cost(ForceStackResidual(space, nu, self.force_reference),
                            Quadratic(w.force, self.dynamics.force_rows), name="forces"))
        #: (N, 3 nc) placement references of the feet, (N, nc) the feet in the air.
        self.swing_reference = np.tile(self.stance.ravel(), (N, 1))
        self.swinging = np.zeros((N, len(feet)), dtype=bool)
        running.append(Cost(FramePositionResidual(space, kinematics, feet, self.swing_reference,
                                                  knots=self.swinging),
                            Quadratic(w.swing, 3 * len(feet)), name="swing feet"))
        #: The soles (``frame`` feet): (N, 3, 3) orientation references and (N,) knot weights (1 while the sole
        #: swings and at its touchdown knot) of each, by foot index.
        self.sole_references: dict[int, np.ndarray] = {}
        self.sole_weights: dict[int, np.ndarray] = {}
        for c, foot in enumerate(feet):
            if self.kinds[c] != "frame":
                continue
            self.sole_references[c] = np.tile(self.stance_rotations[c], (N, 1, 1))
            self.sole_weights[c] = np.zeros(N)
            running.append(Cost(FrameOrientationResidual(space, kinematics, foot, self.sole_references[c]),
                                Quadratic(w.swing_orientation, 3), self.sole_weights[c], name=f"swing sole {foot}"))
        #: The soles' orientations at each knot, by foot index, for their center-of-pressure rectangles: the
        #: posture's, turned with the base's heading reference.
        self.sole_frames: dict[int, np.ndarray] = {c: np.tile(self.stance_rotations[c], (N, 1, 1))
                                                   for c in self.sole_references}
        #: (N, nc) the swing feet at the ends of their swings (:data:`SWING_END_KNOTS`), with ``weights.swing_ends``.
        self.swing_ends = np.zeros((N, len(feet)), dtype=bool)
        #: The knots held at each end of a swing (0 without ``weights.swing_ends``).
        self.end_knots = SWING_END_KNOTS if w.swing_ends > 0.0 else 0
        if self.end_knots:
            running.append(Cost(FrameVelocityResidual(space, kinematics, feet, axes=(0, 1), knots=self.swing_ends),
                                Quadratic(w.swing_ends, 2 * len(feet)), name="swing ends"))
        share = self.weight / len(feet)
        if not (math.isfinite(cop_margin) and 0.0 <= cop_margin < 1.0):
            raise InputError(f"cop_margin must be in [0, 1), got {cop_margin!r}", "cop_margin")
        if sole_size is not None and self.sole_frames and w.center_of_pressure > 0.0:
            half = 0.5 * (1.0 - cop_margin) * np.asarray(sole_size, dtype=float)
            cop = CenterOfPressureResidual(space, nu, offsets, self.sole_frames, half)
            running.append(Cost(cop, RelaxedLogBarrier(w.center_of_pressure,
                                                       w.cone_delta * share * float(half.min()), cop.nr),
                                name="center of pressure"))
        self.cone = FrictionConeResidual(space, nu, offsets, mu)
        running.append(Cost(self.cone, RelaxedLogBarrier(w.cone, w.cone_delta * share,
                                                         self.cone.nr), name="friction cone"))
        #: The friction pyramid and unilaterality of the closed feet, a constraint of the problem.
        rho = w.cone_penalty / self.weight ** 2
        self.cone_constraint = FrictionConeConstraint(self.cone, rho, rho * self.weight)
        if w.torso_orientation > 0.0:  # the orientation at the posture (forward_kinematics above)
            running.append(Cost(FrameOrientationResidual(space, kinematics, torso, rd.frame_placement(
                model, data, torso)[:3, :3]), Quadratic(w.torso_orientation, 3), name="torso orientation"))
        terminal = [Cost(StateResidual(space, self.final_reference),
                         Quadratic(w.terminal * state_weight, space.ndx), name="final posture")]
        self.ocp = OptimalControlProblem(space, N, dt, -effort, effort, running, terminal,
                                         self.dynamics, [self.cone_constraint])
        self.solver = RiccatiSolver(self.ocp)
        limit = np.asarray(model.velocity_limit, dtype=float)[FREE_FLYER_DOF:]
        #: (nv - 6,) the joints' speed bound of a real-time step [rad/s or m/s] (none where the URDF gives none).
        self._speed_bound = np.where(np.isfinite(limit) & (limit > 0.0), STEP_VELOCITY_FACTOR * limit, np.inf)
        #: (nv,) the bound of a real-time step's velocity change: :data:`STEP_BASE_SPEED` on the base, then the joints'.
        self._step_bound = np.r_[np.full(FREE_FLYER_DOF, STEP_BASE_SPEED), self._speed_bound]
        self._started = False
        #: The base's path and the time [s] of the horizon's first knot on its clock (None: in place).
        self.path: BasePath | None = None
        self.time = 0.0
        #: (q (nq,), start [s], duration [s]) of a ramp from a start configuration to the posture (ramp_from).
        self._ramp: tuple | None = None
        self._update_references()

    # ------------------------------------------------------------------------------ schedule
    def set_path(self, path: BasePath | None, time: float) -> None:
        """Move the base's reference along ``path`` (None: the posture's, in place), the horizon's first
        knot being at ``time`` [s] on the path's clock; the references follow at the next solve."""
        self.path, self.time = path, float(time)

    def set_phase(self, phase: int) -> None:
        """Start the horizon at knot ``phase`` of the gait (the contact sets, force references,
        swing references and weights follow, in place)."""
        self.phase = int(phase)
        key = self.phase % self.gait.period
        schedule = self._schedules.get(key)
        if schedule is None:
            schedule = self._schedules[key] = self.gait.schedule(self.horizon, self.phase)
        self.dynamics.set_schedule(schedule)
        self._update_references()

    def _update_references(self) -> None:
        key = self.phase % self.gait.period
        knots = (self.phase + np.arange(self.horizon)) % self.gait.period
        references = self._phase_references.get(key)
        if references is None:
            references = self._phase_references[key] = self._references_at_phase(key, knots)
        self.force_reference[:], self.swinging[:], self.swing_reference[:], self.swing_ends[:] = references
        for c, weights in self.sole_weights.items():
            weights[:] = self.swinging[:, c]
        if self.path is None:  # in place: the soles swing to, and stand on, the posture's orientation
            for c in self.sole_references:
                self.sole_references[c][:] = self.sole_frames[c][:] = self.stance_rotations[c]
        else:
            self._move_references(knots)
        if self._ramp is not None:
            self._ramp_references()

    def _references_at_phase(self, key: int, knots: np.ndarray) -> tuple:
        """The references of the schedule in place (phase ``key`` of the gait's period; ``knots`` (N,) the period's
        knot of each knot), without a path: (N, m) the weight shared by the closed feet on their normal rows [N],
        (N, nc) the feet in the air, (N, 3 nc) their placements over their stance lifted along their swing [m],
        (N, nc) the feet at the ends of their swings (:attr:`swing_ends`, none without ``weights.swing_ends``).
        Read-only: :meth:`_update_references` copies them into the costs' arrays at every tick of that phase."""
        active, offsets = self.dynamics.active, self.dynamics.offsets
        share = self.weight / np.maximum(active.sum(axis=1), 1)
        force_reference = np.zeros_like(self.force_reference)
        for c in range(len(self.feet)):
            rows = np.flatnonzero(offsets[:, c] >= 0)
            force_reference[rows, offsets[rows, c] + 2] = share[rows]
        # A foot's placement is held at its swing reference from lift-off to its touchdown knot included:
        # the contact closes there whatever the foot's height, so the foot must be down on its own.
        swinging = ~active | self._schedules[key].touchdown
        swing_reference = np.tile(self.stance.ravel(), (self.horizon, 1))
        swing_reference[:, 2::3] += self.swing_height * self._lift[knots]
        since, until = self._since[knots], self._until[knots]
        ends = self.end_knots
        swing_ends = swinging & (((since >= 1) & (since <= ends)) | (until <= ends)) if ends else np.zeros_like(swinging)
        for array in (force_reference, swinging, swing_reference, swing_ends):
            array.setflags(write=False)
        return force_reference, swinging, swing_reference, swing_ends

    def ramp_from(self, q: np.ndarray, time: float, duration: float) -> None:
        """Reach the posture's joints and base height from configuration q (nq,) over ``duration`` [s] from
        ``time`` [s] (on the clock of :meth:`set_path`): the references of those coordinates move from q's to the
        posture's along a smoothstep, :math:`w(s) = 3 s^2 - 2 s^3`, instead of asking for the whole change at once (a
        humanoid let go of its brakes' straight legs, whose first plans toward its half-sitting posture asked the
        soles for forces far out of the cone). ``duration`` 0: no ramp.

        Raises:
            InputError: q of the wrong size or not finite, a negative or non-finite duration.
        """
        q = np.array(q, dtype=float)
        if q.shape != (self.model.nq,) or not np.isfinite(q).all():
            raise InputError(f"q must be {self.model.nq} finite numbers, got shape {q.shape}", "q")
        if not (np.isfinite(duration) and duration >= 0.0):
            raise InputError(f"a ramp's duration must be >= 0 s, got {duration!r}", "duration")
        self._ramp = (q, float(time), float(duration)) if duration > 0.0 else None

    def _ramp_references(self) -> None:
        """The joints' and the base height's references along the ramp of :meth:`ramp_from` (the posture's once it
        is over)."""
        q, start, duration = self._ramp
        N, nq = self.horizon, self.model.nq
        s = np.clip((self.time + self.dt * np.arange(N + 1) - start) / duration, 0.0, 1.0)
        if s[0] >= 1.0:
            self._ramp = None
            self.state_reference[:, 2] = self.final_reference[2] = self.x_ref[2]
            self.state_reference[:, 7:nq] = self.x_ref[7:nq]
            self.final_reference[7:nq] = self.x_ref[7:nq]
            return
        w = (s * s * (3.0 - 2.0 * s))[:, None]
        rows = np.r_[2, np.arange(7, nq)]
        blended = q[rows] + w * (self.x_ref[rows] - q[rows])
        self.state_reference[:, rows] = blended[:N]
        self.final_reference[rows] = blended[N]

    def _move_references(self, knots: np.ndarray) -> None:
        """The state references' base (position, heading, velocities) and the swing feet's horizontal references
        along :attr:`path`, with the capture point's offset (:meth:`_capture`): the path read once, at the knots'
        times and at every landing and lift-off the swing references need."""
        N, nq, dt = self.horizon, self.model.nq, self.dt
        times = self.time + dt * np.arange(N + 1)
        # The swing entries (knot, foot): the foot lands `until` knots later, it lifted off one period before.
        rows, feet = np.nonzero(self.swinging)
        since, until = self._since[knots[rows], feet], self._until[knots[rows], feet]
        landing = times[rows] + until * dt
        count = rows.size
        position, velocity, heading = self.path.poses(np.r_[times, landing, landing - self.gait.period * dt])
        # The posture's orientation turned about the world's z by the heading: q = q_z(heading) q_posture.
        # (With t = (0, 0, sin(heading / 2)) and p the posture's: w = cos p_w - t . p_v, v = cos p_v + p_w t + t x p_v.)
        half = 0.5 * heading[:N + 1]
        cos, sin = np.cos(half), np.sin(half)
        (px, py, pz), pw = self.x_ref[3:6], self.x_ref[6]
        orientation = np.empty((N + 1, 4))
        orientation[:, 0] = cos * px - sin * py
        orientation[:, 1] = cos * py + sin * px
        orientation[:, 2] = cos * pz + pw * sin
        orientation[:, 3] = cos * pw - sin * pz
        # The base's velocities are in its own frame, R = R_z(heading) R_posture: v_base = R_posture^T R_z^T v.
        rotation = rotation_of(self.x_ref[3:7])
        local = np.zeros((N + 1, 3))
        local[:, :2] = turned(-heading[:N + 1], velocity[:N + 1, 0], velocity[:N + 1, 1])
        spin = np.zeros((N + 1, 3))
        spin[:, 2] = np.where(times >= self.path.start, self.path.yaw_rate, 0.0)
        linear, angular = local @ rotation, spin @ rotation
        for c, frames in self.sole_frames.items():  # the soles' rectangles turn with the base
            frames[:] = _yaw_rotations(heading[:N]) @ self.stance_rotations[c]
        for reference, knot in ((self.state_reference, slice(0, N)), (self.final_reference, N)):
            reference[..., :2] = position[knot]
            reference[..., 3:7] = orientation[knot]
            reference[..., nq:nq + 3] = linear[knot]
            reference[..., nq + 3:nq + 6] = angular[knot]
        self._capture_offset(velocity[0])
        if count == 0:
            return
        # Each foot under its hip at the base's path (its offset turned with the heading), half its stance's travel
        # ahead (Raibert); where it lands, the capture point's offset too.
        placed = (position[N + 1:] + turned(heading[N + 1:], *np.tile(self.foot_offsets[feet], (2, 1)).T)
                  + 0.5 * np.tile(self.stance_time[feet], 2)[:, None] * velocity[N + 1:])
        land, lift_off = placed[:count] + self.capture_offset, placed[count:]
        # The blend 0.5 (1 - cos(pi s)) from the lift-off to end_knots before the touchdown, 1 from there on.
        s = np.clip(since / np.maximum(since + until - self.end_knots, 1), 0.0, 1.0)
        blend = (0.5 * (1.0 - np.cos(np.pi * s)))[:, None]
        swing = lift_off + blend * (land - lift_off)
        self.swing_reference[rows, 3 * feet] = swing[:, 0]
        self.swing_reference[rows, 3 * feet + 1] = swing[:, 1]
        # A swinging sole turns to the heading it lands with.
        for c, references in self.sole_references.items():
            mine = feet == c
            references[rows[mine]] = _yaw_rotations(heading[N + 1:N + 1 + count][mine]) @ self.stance_rotations[c]

    def _capture(self, x0: np.ndarray) -> None:
        """Keep the base's measured planar velocity [m/s] of x0 (nx,), in the world frame, for
        :meth:`_capture_offset`."""
        nq = self.model.nq
        self._measured_velocity = (rotation_of(x0[3:7]) @ x0[nq:nq + 3])[:2]

    def _capture_offset(self, reference: np.ndarray) -> None:
        r""":attr:`capture_offset`: where the feet landing in the horizon step beside Raibert's placement to catch
        the base's measured velocity error against its ``reference`` (2,) [m/s] at the first knot,
        :math:`\sqrt{h / g}\,(\dot p - \dot p^r)` (the capture point's offset, h the posture's base height above its
        feet), at most :attr:`max_capture_offset` [m]."""
        self.capture_offset[:] = 0.0
        if self.capture_time == 0.0:
            return
        offset = self.capture_time * (self._measured_velocity - reference)
        norm = float(np.linalg.norm(offset))
        if np.isfinite(norm):
            self.capture_offset[:] = offset * min(1.0, self.max_capture_offset / max(norm, 1e-12))

    def _lift_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(P, nc) 16 s^2 (1 - s)^2 at each knot of the gait's period, s the fraction of the foot's swing
        done at the knot's state (0 at lift-off, 1 at the touchdown knot, 0 in stance; a swing
        wraps around the period's end); and (P, nc) the knots since the foot's lift-off and until
        its touchdown, at its swing knots and touchdown knot (0 elsewhere)."""
        pattern = self.gait.pattern
        period = pattern.shape[0]
        table = np.zeros(pattern.shape)
        since = np.zeros(pattern.shape, dtype=np.int64)
        until = np.zeros(pattern.shape, dtype=np.int64)
        for c in range(pattern.shape[1]):
            if not pattern[:, c].any():
                raise InputError(f"foot {self.feet[c]!r} never touches the ground in the gait",
                                 "gait")
            for p in np.flatnonzero(~pattern[:, c]):
                start = end = p
                while not pattern[(start - 1) % period, c]:
                    start -= 1
                while not pattern[(end + 1) % period, c]:
                    end += 1
                # Higher than sin^2(pi s) at the knots next to the ground (0.19 against 0.15 of h on an 8-knot
                # swing): trotting solo12 in process, 0 contact samples past mu instead of 165 in 5 gaits.
                s = (p - start) / (end - start + 1)
                table[p, c] = 16.0 * s * s * (1.0 - s) ** 2
                since[p, c], until[p, c] = p - start, end + 1 - p
                touchdown = (end + 1) % period
                since[touchdown, c], until[touchdown, c] = end + 1 - start, 0
        return table, since, until

    # ------------------------------------------------------------------------------ tick
    def _step_within_bounds(self, DX: np.ndarray, X_new: np.ndarray) -> bool:
        """The step DX (N + 1, ndx) changes the velocities by at most :data:`STEP_BASE_SPEED` on the base and
        :data:`STEP_VELOCITY_FACTOR` times the velocity limits the URDF gives on the joints, and its rollout
        X_new is finite."""
        return bool(all_finite(X_new) and (np.abs(DX[:, self.model.nv:]) <= self._step_bound).all())

    def _bound_step(self, solver: RiccatiSolver) -> bool:
        """Halve the last rollout's step (X_new, U_new from X, U) until :meth:`_step_within_bounds`, at most
        :data:`STEP_HALVINGS` times; whether it is within them."""
        step_X = solver.DX
        if self._step_within_bounds(step_X, solver.X_new):
            return True
        step_U = solver.U_new - solver.U
        alpha = 1.0
        for _ in range(STEP_HALVINGS):
            alpha *= 0.5
            scaled = alpha * step_X
            self.space.integrate(solver.X, scaled, solver.X_new)
            np.add(solver.U, alpha * step_U, out=solver.U_new)
            if self._step_within_bounds(scaled, solver.X_new):
                return True
        return False

    def solve(self, x0: np.ndarray, phase: int | None = None, elapsed: float | None = None,
              iterations: int = 1, evaluate_cost: bool = False) -> Plan:
        r"""One tick: move to the gait phase, warm-start, iterate, check the first knot's cone.

        The iterations are the solver's (:meth:`RiccatiSolver.solve <rbd_deriv.control.solver.RiccatiSolver.solve>`):
        each relinearizes the contact dynamics at the nominal and takes the full Riccati step (no line search: a
        real-time iteration), halved while it changes a velocity by more than the step bounds
        (:data:`~rbd_deriv.control.constants.STEP_VELOCITY_FACTOR`; beyond them after
        :data:`~rbd_deriv.control.constants.STEP_HALVINGS` halvings the solve fails ``not_finite`` and keeps its
        nominal); the friction cone's multipliers are updated for each step taken at the next linearization. The
        plan's first-knot forces are those of ``rd.contact_dynamics`` at its first state and torques: after one
        iteration, from the step's linearization at that state, :math:`f + \partial f/\partial u\,(u - \bar u)`
        (the contact forces are affine in the torques at a given state: the same to round-off, without another
        contact dynamics).

        Args:
            x0: Measured state (nx,).
            phase: Gait knot the horizon starts at (default: unchanged).
            elapsed: Time since the previous solve [s] (default: the phase change times dt);
                the first solve starts from x0 held with the static torques.
            iterations: Real-time iterations (1 per tick in closed loop).
            evaluate_cost: Give the plan the cost of the nominal the first iteration started from
                (NaN otherwise: the tick does not need it).

        Raises:
            InputError: x0 of the wrong shape or not finite.
        """
        x0 = check_state("x0", x0, self.space)
        clock = time.perf_counter
        start = started = clock()
        if self.path is not None:  # the base's measured velocity is read along a path only (_capture_offset)
            self._capture(x0)
        previous = self.phase
        if phase is not None and int(phase) != self.phase:
            self.set_phase(phase)
        elif self.path is not None or self._ramp is not None:
            self._update_references()
        solver = self.solver
        if not self._started:
            solver.cold_start(x0, np.tile(self.u_static, (self.horizon, 1)))
            self._started = True
        else:
            if elapsed is None:
                elapsed = (self.phase - previous) * self.dt
            solver.warm_start(elapsed, x0)
        timings = dict.fromkeys(TIMING_PARTS, 0.0)
        timings["schedule"] = clock() - start
        linearized = solver.U[0].copy()  # the first knot's torques of the (first) linearization
        result = solver.solve(x0, iterations, tolerance=0.0, line_search=False,
                              cost_of="start" if evaluate_cost else None, step_filter=self._bound_step,
                              timings=timings)
        start = clock()
        offsets = self.dynamics.offsets[0].copy()
        if result.ok:
            if result.iterations == 1:  # linearized at the plan's first state, x0 (the step leaves it)
                knot = solver.dynamics
                forces = knot.F[0] + knot.dF_du[0] @ (solver.U[0] - linearized)
            else:
                forces = self.dynamics.forces(solver.X[0], solver.U[0])
            ok, violation = forces_within_cone(forces, offsets, self.mu)
            constraint_violation = self.cone_constraint.stack_violation(forces)
        else:
            forces, ok, violation = np.full(self.dynamics.force_rows, np.nan), False, np.inf
            constraint_violation = np.inf
        timings["cone check"] = clock() - start
        return Plan.of(solver, result, clock() - started, forces=forces, offsets=offsets, cone_ok=ok,
                       cone_violation=violation, constraint_violation=constraint_violation, timings=timings)
