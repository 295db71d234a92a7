"""The plan of a tick, whatever the MPC: what :meth:`ModelPredictiveController.solve
<rbd_deriv.control.mpc.ModelPredictiveController.solve>` and :meth:`LeggedMPC.solve
<rbd_deriv.control.legged.LeggedMPC.solve>` return.

A :class:`Plan` is the solver's solution (states, torques, the first knot's gain) with its outcome
(:class:`~rbd_deriv.control.solver.SolveStatus`, iterations, cost, time) and, on contacts, the first knot's forces
and how they sit in the friction cone (a fixed base has none: no forces, nothing to refuse).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rbd_deriv.control.solver import SolveResult, SolveStatus

__all__ = ["Plan"]


@dataclass(frozen=True)
class Plan:
    """Result of one tick. Arrays are copies owned by the plan.

    Attributes:
        torque: (nu,) command for now [N m]; inside the torque box whenever ``ok``.
        states: (N+1, nx) predicted states; torques: (N, nu) planned torques.
        gain: (nu, ndx) feedback gain K of the first knot from the last Riccati pass: the first torque at a state x
            near ``states[0]`` is ``torque + gain (x (-) states[0])`` (clamped to the box), as the pass's forward
            rollout applies it (:mod:`rbd_deriv.control.policy`); zero rows for torques on a bound.
        status: :class:`~rbd_deriv.control.solver.SolveStatus`.
        iterations: Riccati passes; qp_iterations: stage box-QP iterations in total.
        clamped: Number of (knot, control) pairs on a bound.
        cost: The cost the solve was asked for (the solution's, or the nominal's it started from), else NaN: a tick
            does not need it.
        solve_time: Wall time of the tick [s].
        largest_update: Largest control change of the last iteration [N m].
        forces: First knot's contact forces (m,) [N, N m] (zero rows past the closed contacts; none without
            contacts, NaN after a failed solve).
        offsets: First force row of each foot at the first knot, -1 when open (nc,).
        cone_ok: Every closed foot's force is inside the friction cone within the tolerance.
        cone_violation: Largest excursion of the first knot's forces out of the exact cone [N].
        constraint_violation: First knot's largest violation of the friction-cone constraint the solver keeps (the
            inscribed pyramid's faces and unilaterality) [N], 0 inside.
        timings: Seconds spent in each part of the tick.
    """

    torque: np.ndarray
    states: np.ndarray
    torques: np.ndarray
    gain: np.ndarray
    status: SolveStatus
    iterations: int
    qp_iterations: int
    clamped: int
    cost: float
    solve_time: float
    largest_update: float = np.nan
    forces: np.ndarray = field(default_factory=lambda: np.zeros(0))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cone_ok: bool = True
    cone_violation: float = 0.0
    constraint_violation: float = 0.0
    timings: dict = field(default_factory=dict)

    @classmethod
    def of(cls, solver, result: SolveResult, solve_time: float, **contacts) -> "Plan":
        """The plan in ``solver``'s X, U, K after ``result`` (copies), with the contact fields given."""
        torques = solver.U.copy()
        return cls(torque=torques[0].copy(), states=solver.X.copy(), torques=torques, gain=solver.K[0].copy(),
                   status=result.status, iterations=result.iterations, qp_iterations=result.qp_iterations,
                   clamped=result.clamped, cost=result.cost, solve_time=solve_time,
                   largest_update=result.largest_update, **contacts)

    @property
    def ok(self) -> bool:
        """The solve succeeded."""
        return self.status is SolveStatus.OK

    @property
    def sendable(self) -> bool:
        """The solve succeeded and the first knot's forces respect the cone: the plan may be sent."""
        return self.ok and self.cone_ok

    @property
    def state(self) -> np.ndarray:
        """The first knot's state x_0 (nx,)."""
        return self.states[0]
