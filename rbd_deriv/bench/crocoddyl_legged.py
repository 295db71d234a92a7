"""Crocoddyl's tick on the legged benchmark's problem, run in another Python environment.

``python -m rbd_deriv.bench legged --crocoddyl-python PATH`` runs this file with the interpreter
PATH (an environment with ``crocoddyl``; it needs neither this package nor numba: Crocoddyl 3.2
and Pinocchio 4.1 do not share one environment with example-robot-data 6), giving it the problem
as JSON on stdin, and reads the timings back as JSON on stdout: all ticks at once (:func:`run`), or,
with ``--serve``, a number of ticks per line asked, in turn with its own (:func:`serve`).

The problem is the one :class:`rbd_deriv.control.legged.LeggedMPC` solves, written with
Crocoddyl's action models. The gait comes as data, whatever it is (standing, a trot, a crawl with one
foot up at a time...): ``pattern`` (P, nc), which feet are on the ground at each knot of one period,
and ``lift`` (P, nc), the fraction of its swing height each foot's reference is lifted by there; knot k
of the horizon is knot k mod P of the period, a touchdown is a knot where a foot is down after being up
at the knot before (the period wraps). Per knot of the period a ``DifferentialActionModelContactFwdDynamics``
on the knot's stance feet (``ContactModel3D`` for a ``point`` foot, ``ContactModel6D`` for a ``frame``
foot, LOCAL_WORLD_ALIGNED, no Baumgarte gains) with the same costs and weights (posture: weighted
quadratic state residual; torque toward the static torques; each stance foot's force toward its share
of the weight; each swing foot's translation toward its lifted reference, and on its touchdown knot
toward its stance position, as this package holds a foot's swing reference until its touchdown knot
included; friction cone of ``ResidualModelContactFrictionCone``), integrated by
``IntegratedActionModelEuler``, and the same terminal posture cost. Two
differences: the cone is kept by a quadratic barrier (Crocoddyl has no log barrier; the constraint of
:mod:`rbd_deriv.control.constraints` is not written there either), and a
touchdown is not an impulse knot (Crocoddyl would add a knot there). The receding horizon moves
by ``ShootingProblem.circularAppend`` with the next knot's model and a data of that model left by a knot
that went out of the horizon (the same plans as with a data created each tick, which made talos's tick
0.3 ms longer, 2 %, and solo12's 0.2-1.3 %, in one comparison), the solver is ``SolverBoxFDDP``
with one iteration per tick, warm-started by the previous plan shifted one knot, single-threaded
(``problem.nthreads = 1``, and ``OMP_NUM_THREADS=1`` for the OpenMP threads that setting does not
govern: without it talos's tick took 25 times longer on the shared cores), and each tick starts from
the state its previous plan predicts, as in the benchmark's own loop.

The JSON (written by :func:`rbd_deriv.bench.legged.crocoddyl_spec`): ``urdf``; ``locked`` {joint: position}, the
joints locked in the model both sides plan on (Pinocchio's ``buildReducedModel`` here); ``feet`` (nc,) and their
``kinds``; ``x0``, ``x_ref`` (nq + nv,); ``state_weights`` (2 nv,); ``weights`` (terminal, torque, force,
swing, swing_orientation); ``cone_weight``; ``u_static`` (nu,) [N m]; ``weight`` [N]; ``pattern``, ``lift`` (P, nc);
``stance`` (nc, 3) [m] and ``stance_rotations`` (nc, 3, 3) (a sole's swing holds that orientation, weighed by
``weights["swing_orientation"]``); ``swing_height`` [m]; ``mu``; ``dt`` [s];
``horizon`` N; ``ticks`` and ``warmup``.

Crocoddyl's Euler model multiplies a running cost by the knot's dt and leaves the terminal cost as
it is; the running weights are divided by dt here, so that both problems have the same cost
(this package's solver sums the knots' costs unscaled).

Besides the timings, the reply holds what a test compares with this package's solve: the problem's
sizes, the cost of the cold start (x0 at every knot, the static torques) and the first tick's
first torques, cost and step length (BoxFDDP's line search: 1, 1/2, 1/4...) after its iteration, and
the share of the timed ticks whose line search took the full step (each shorter one cost it another
rollout of the horizon).

Crocoddyl 3.2.1's wheels were built against Pinocchio 4.0: Pinocchio 4.1 added acceleration and jerk
limits to its ``Model``, so a model built by 4.1 is read with the wrong layout by Crocoddyl's
compiled code, which then fails in ``ShootingProblem`` (``MemoryError`` or a crash) when it creates
the knots' data. The pair is refused here with a message; ``./run crocoddyl-env`` makes an
environment with Crocoddyl 3.2.1 and Pinocchio 4.0.0.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

#: Crocoddyl wheel version -> the Pinocchio version prefix its compiled code was built against.
BUILT_AGAINST = {"3.2.1": "4.0."}


def check_pinocchio(crocoddyl_version: str, pinocchio_version: str) -> None:
    """Refuse a Pinocchio whose ``Model`` layout differs from the one Crocoddyl was built against."""
    wanted = BUILT_AGAINST.get(crocoddyl_version)
    if wanted is not None and not pinocchio_version.startswith(wanted):
        raise SystemExit(f"crocoddyl {crocoddyl_version} was built against Pinocchio {wanted}x, this is "
                         f"Pinocchio {pinocchio_version}: its models would be misread (make the "
                         f"environment with ./run crocoddyl-env)")


def _knot_model(spec, croc, pin, model, state, actuation, knot, terminal=False):
    """The action model of gait knot ``knot`` (mod the period)."""
    nu = actuation.nu
    pattern = np.array(spec["pattern"], dtype=bool)
    period = pattern.shape[0]
    row = pattern[knot % period]
    touchdown = row & ~pattern[(knot - 1) % period]
    kinds = spec.get("kinds") or [spec["kind"]] * len(spec["feet"])
    weights = spec["weights"]
    contacts = croc.ContactModelMultiple(state, nu)
    costs = croc.CostModelSum(state, nu)
    x_ref = np.array(spec["x_ref"])
    state_weights = np.array(spec["state_weights"])
    factor = weights["terminal"] if terminal else 1.0
    # Crocoddyl's Euler model scales a running cost by dt (see the module docstring).
    scale = 1.0 if terminal else 1.0 / spec["dt"]
    costs.addCost("posture", croc.CostModelResidual(
        state, croc.ActivationModelWeightedQuad(factor * state_weights),
        croc.ResidualModelState(state, x_ref, nu)), scale)
    if not terminal:
        costs.addCost("torque", croc.CostModelResidual(
            state, croc.ResidualModelControl(state, np.array(spec["u_static"]))), weights["torque"] * scale)
    share = spec["weight"] / max(int(row.sum()), 1)
    lift = np.array(spec["lift"])[knot % period]
    for c, foot in enumerate(spec["feet"]):
        frame = model.getFrameId(foot)
        if terminal:
            continue
        if row[c]:
            if kinds[c] == "point":
                contacts.addContact(foot, croc.ContactModel3D(
                    state, frame, np.array(spec["stance"][c]), pin.LOCAL_WORLD_ALIGNED, nu,
                    np.zeros(2)))
                rows = 3
            else:
                placement = pin.SE3(np.array(spec["stance_rotations"][c]), np.array(spec["stance"][c]))
                contacts.addContact(foot, croc.ContactModel6D(
                    state, frame, placement, pin.LOCAL_WORLD_ALIGNED, nu, np.zeros(2)))
                rows = 6
            force = pin.Force(np.array([0.0, 0.0, share, 0.0, 0.0, 0.0]))
            costs.addCost(f"force {foot}", croc.CostModelResidual(
                state, croc.ResidualModelContactForce(state, frame, force, rows, nu)), weights["force"] * scale)
            cone = croc.FrictionCone(np.eye(3), spec["mu"], 4, True, 0.0)
            bounds = croc.ActivationBounds(cone.lb, cone.ub)
            costs.addCost(f"cone {foot}", croc.CostModelResidual(
                state, croc.ActivationModelQuadraticBarrier(bounds),
                croc.ResidualModelContactFrictionCone(state, frame, cone, nu)), spec["cone_weight"] * scale)
        if not row[c] or touchdown[c]:
            # In the air: toward the lifted reference; at touchdown (lift 0): toward the stance position.
            target = np.array(spec["stance"][c]) + np.array([0.0, 0.0, spec["swing_height"] * lift[c]])
            costs.addCost(f"swing {foot}", croc.CostModelResidual(
                state, croc.ResidualModelFrameTranslation(state, frame, target, nu)), weights["swing"] * scale)
            if kinds[c] == "frame":  # a sole lands flat: its orientation held at the stance's
                costs.addCost(f"swing sole {foot}", croc.CostModelResidual(
                    state, croc.ResidualModelFrameRotation(state, frame, np.array(spec["stance_rotations"][c]), nu)),
                    weights["swing_orientation"] * scale)
    dynamics = croc.DifferentialActionModelContactFwdDynamics(state, actuation, contacts, costs, 0.0, True)
    return croc.IntegratedActionModelEuler(dynamics, 0.0 if terminal else spec["dt"])


class Ticks:
    """The receding-horizon loop of the module docstring on ``spec``'s problem: :meth:`tick` runs one tick and
    returns its time [us]; :meth:`reply` the figures of the module docstring over the ticks timed so far."""

    def __init__(self, spec: dict) -> None:
        # Read by the OpenMP runtime when Crocoddyl loads it (see the module docstring).
        os.environ["OMP_NUM_THREADS"] = "1"
        import crocoddyl as croc
        import pinocchio as pin

        check_pinocchio(croc.__version__, pin.__version__)
        self.versions = {"crocoddyl": croc.__version__, "pinocchio": pin.__version__}
        model = pin.buildModelFromUrdf(spec["urdf"], pin.JointModelFreeFlyer())
        if spec["locked"]:  # the joints this package's MPC plans as locked, in Pinocchio's reduced model
            q = pin.neutral(model)
            for joint, position in spec["locked"].items():
                q[model.joints[model.getJointId(joint)].idx_q] = position
            model = pin.buildReducedModel(model, [model.getJointId(joint) for joint in spec["locked"]], q)
        state = croc.StateMultibody(model)
        actuation = croc.ActuationModelFloatingBase(state)
        self.horizon = N = spec["horizon"]
        self.period = period = len(spec["pattern"])
        self.models = [_knot_model(spec, croc, pin, model, state, actuation, k) for k in range(period)]
        terminal = _knot_model(spec, croc, pin, model, state, actuation, 0, terminal=True)
        self.x = x = np.array(spec["x0"])
        self.problem = croc.ShootingProblem(x, [self.models[k % period] for k in range(N)], terminal)
        self.problem.nthreads = 1
        self.solver = croc.SolverBoxFDDP(self.problem)
        #: Data of each knot model not in the horizon (see the module docstring): one spare each to start.
        self.spares = {k: [m.createData()] for k, m in enumerate(self.models)}
        self.xs = [x.copy() for _ in range(N + 1)]
        self.us = [np.array(spec["u_static"]) for _ in range(N)]
        self.first = {"nx": state.nx, "ndx": state.ndx, "nu": actuation.nu, "horizon": self.problem.T,
                      "initial_cost": float(self.problem.calc(self.xs, self.us))}
        self.count = 0
        self.measured: list[float] = []
        self.costs: list[float] = []
        self.steps: list[float] = []

    def tick(self, timed: bool = True) -> float:
        """One tick (the horizon moved one knot, warm-started, one iteration) [us]; ``timed``: counted in
        :meth:`reply`."""
        solver, problem, N = self.solver, self.problem, self.horizon
        start = time.perf_counter()
        if self.count:
            arriving = (self.count + N - 1) % self.period
            self.spares[(self.count - 1) % self.period].append(problem.runningDatas[0])
            spares = self.spares[arriving]
            model = self.models[arriving]
            problem.circularAppend(model, spares.pop() if spares else model.createData())
            problem.x0 = self.x
            self.xs = [self.x] + list(solver.xs[2:]) + [solver.xs[-1]]
            self.us = list(solver.us[1:]) + [solver.us[-1]]
        solver.solve(self.xs, self.us, 1, False)
        elapsed = (time.perf_counter() - start) * 1e6
        if timed:
            self.measured.append(elapsed)
            self.costs.append(solver.cost)
            self.steps.append(solver.stepLength)
        if self.count == 0:
            self.first.update(first_torque=np.array(solver.us[0]).tolist(), first_cost=float(solver.cost),
                              first_step=float(solver.stepLength))
        self.x = np.array(solver.xs[1])
        self.count += 1
        return elapsed

    def reply(self) -> dict:
        measured = self.measured or [float("nan")]
        return {**self.first, "median_us": float(np.median(measured)),
                "p99_us": float(np.percentile(measured, 99)), "mean_cost": float(np.mean(self.costs or [np.nan])),
                "full_steps": float(np.mean(np.array(self.steps) == 1.0)) if self.steps else float("nan"),
                "ticks": len(self.measured), **self.versions}


def run(spec: dict) -> dict:
    """``spec["warmup"]`` untimed ticks, then ``spec["ticks"]`` timed ones: the reply."""
    ticks = Ticks(spec)
    for tick in range(spec["warmup"] + spec["ticks"]):
        ticks.tick(timed=tick >= spec["warmup"])
    return ticks.reply()


def serve(spec: dict, lines, out) -> None:
    """Ticks on request, for a benchmark that alternates its own ticks with these (the machine's load then
    weighs on both alike): ``spec["warmup"]`` untimed ticks, then the line ``{"ready": true}`` on ``out``;
    each line read from ``lines`` is a number of ticks to time, answered by the line ``{"us": [...]}`` (their
    times); an empty line or the end of ``lines`` ends it with the reply of :func:`run` on all of them."""
    ticks = Ticks(spec)
    for _ in range(spec["warmup"]):
        ticks.tick(timed=False)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in lines:
        if not line.strip():
            break
        out.write(json.dumps({"us": [ticks.tick() for _ in range(int(line))]}) + "\n")
        out.flush()
    out.write(json.dumps(ticks.reply()) + "\n")
    out.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(json.loads(sys.stdin.readline()), sys.stdin, sys.stdout)
    else:
        print(json.dumps(run(json.load(sys.stdin))))
