"""Benchmark of the contact dynamics against Pinocchio, call by call, from Python.

Run ``python -m rbd_deriv.bench contact`` (``./run bench contact``; ``--quick`` for a short run). Robots:
solo12 with its 4 feet as point contacts, talos with both soles as frame contacts (free flyers). For each it
prints our median per-call time beside Pinocchio's, timed interleaved in this process, the ratio
ours/Pinocchio (target <= 1.0) and the largest relative difference of the results:

* contact_dynamics against pin.constraintDynamics;
* contact_dynamics_derivatives against pin.constraintDynamics + pin.computeConstraintDynamicsDerivatives;
* impulse_dynamics (+ derivatives) against pin.impulseDynamics (+ computeImpulseDynamicsDerivatives);
* linearize_batch(contacts=) over K = 32 states (one contact set per state, a gait) per state, against a
  Python loop of constraintDynamics + its derivatives chained through the same semi-implicit Euler step on the
  manifold (crocoddyl's IntegratedActionModelEuler over its contact dynamics: the chain of ``bench core``'s
  linearize reference, ``PinocchioEulerLinearization.chain``), so both sides give the same A and B (target: at
  least 2 times faster per state); and, reported beside it, against the loop of the derivatives alone (no Euler
  step, no A and B).

Pinocchio runs on one thread (OMP_NUM_THREADS=1): its OpenMP threads on a shared 2-core machine made its talos
derivatives vary from 0.25 to 30 ms. The OpenMP runtime reads the variable when it is loaded, which importing
rbd_deriv (numba) does before this module runs: without it, the benchmark runs itself in a new process with it
set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Optional, Sequence

import numpy as np
import pinocchio as pin

import rbd_deriv as rd
from rbd_deriv.bench.core import PinocchioEulerLinearization
from rbd_deriv.bench.timing import Case, format_table, machine_info, ratio, time_cases
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.pinocchio_contact import PinocchioContacts
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

ROBOTS = {
    "solo12": (("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"), "point"),
    "talos": (("leg_left_sole_fix_joint", "leg_right_sole_fix_joint"), "frame"),
}
BATCH_STATES = 32
TIME_STEP = 0.01


def _difference(ours, reference) -> float:
    return max(float(np.abs(np.asarray(a) - b).max() / max(1.0, np.abs(b).max())) for a, b in zip(ours, reference))


def bench_robot(name: str, repeat: int, block_seconds: float, case_seconds: float):
    """Rows (function, ours us, pin us, ratio, target, difference) for one robot."""
    frames, kind = ROBOTS[name]
    urdf = str(EXAMPLE_ROBOTS[name])
    model = rd.load_urdf(urdf, floating_base=True)
    data = model.create_data()
    bridge = PinocchioBridge.for_model(model, urdf)
    contacts = [rd.Contact(model, frame, kind=kind) for frame in frames]
    reference = PinocchioContacts(bridge, contacts)
    rng = np.random.default_rng(0)
    q = bridge.random_configuration(rng)
    v, tau = rng.uniform(-1, 1, model.nv), rng.uniform(-1, 1, model.nv)
    qp = bridge.q_to_pin(q)
    pm, pd, cms, cds, prox = bridge.model, reference.data, reference.models, reference.datas, reference.prox

    def pin_derivatives(qp, v, tau):
        pin.constraintDynamics(pm, pd, qp, v, tau, cms, cds, prox)
        pin.computeConstraintDynamicsDerivatives(pm, pd, cms, cds, prox)

    def pin_impulse_derivatives(qp, v):
        pin.impulseDynamics(pm, pd, qp, v, cms, cds, 0.0, prox)
        pin.computeImpulseDynamicsDerivatives(pm, pd, cms, cds, 0.0, prox)

    # A gait over the horizon: all contacts, then each one lifted in turn.
    sets = [contacts if k % (len(contacts) + 1) == 0 else [c for j, c in enumerate(contacts)
                                                          if j != k % (len(contacts) + 1) - 1]
            for k in range(BATCH_STATES)]
    Q = np.array([bridge.random_configuration(rng) for _ in range(BATCH_STATES)])
    V, TAU = rng.uniform(-1, 1, (2, BATCH_STATES, model.nv))
    QP = np.array([bridge.q_to_pin(x) for x in Q])
    references = [PinocchioContacts(bridge, s) for s in sets]

    def pin_state_derivatives(x, y, z, r):
        pin.constraintDynamics(pm, r.data, x, y, z, r.models, r.datas, prox)
        pin.computeConstraintDynamicsDerivatives(pm, r.data, r.models, r.datas, prox)

    def pin_loop(QP, V, TAU):
        for x, y, z, r in zip(QP, V, TAU, references):
            pin_state_derivatives(x, y, z, r)

    euler = PinocchioEulerLinearization(pm, pd, TIME_STEP)

    def pin_linearize(x, y, z, r):
        pin_state_derivatives(x, y, z, r)
        d = r.data
        euler.chain(x, y, d.ddq, d.ddq_dq, d.ddq_dv, d.ddq_dtau)

    def pin_linearize_loop(QP, V, TAU):
        for x, y, z, r in zip(QP, V, TAU, references):
            pin_linearize(x, y, z, r)

    def batch_check():
        A, B, X_next = rd.linearize_batch(model, Q, V, TAU, TIME_STEP, sets)[:3]
        ours, theirs = [], []
        for k in range(BATCH_STATES):
            pin_linearize(QP[k], V[k], TAU[k], references[k])
            ours += [A[k], B[k], X_next[k]]
            theirs += [euler.A.copy(), euler.B.copy(),
                       np.concatenate([bridge.q_from_pin(euler.x_next[:pm.nq]), euler.x_next[pm.nq:]])]
        return ours, theirs

    pairs = [
        ("contact_dynamics", Case("ours", rd.contact_dynamics, (model, data, contacts, q, v, tau)),
         Case("pin", pin.constraintDynamics, (pm, pd, qp, v, tau, cms, cds, prox)), 1.0,
         lambda: (rd.contact_dynamics(model, data, contacts, q, v, tau), reference.dynamics(q, v, tau))),
        ("contact_dynamics_derivatives", Case("ours", rd.contact_dynamics_derivatives,
                                              (model, data, contacts, q, v, tau)),
         Case("pin", pin_derivatives, (qp, v, tau)), 1.0,
         lambda: (rd.contact_dynamics_derivatives(model, data, contacts, q, v, tau),
                  reference.derivatives(q, v, tau))),
        ("impulse_dynamics", Case("ours", rd.impulse_dynamics, (model, data, contacts, q, v)),
         Case("pin", pin.impulseDynamics, (pm, pd, qp, v, cms, cds, 0.0, prox)), 1.0,
         lambda: (rd.impulse_dynamics(model, data, contacts, q, v), reference.impulse(q, v, 0.0))),
        ("impulse_dynamics_derivatives", Case("ours", rd.impulse_dynamics_derivatives, (model, data, contacts, q, v)),
         Case("pin", pin_impulse_derivatives, (qp, v)), 1.0,
         lambda: (rd.impulse_dynamics_derivatives(model, data, contacts, q, v),
                  reference.impulse_derivatives(q, v, 0.0))),
        (f"linearize_batch K={BATCH_STATES} (per state)",
         Case("ours", rd.linearize_batch, (model, Q, V, TAU, TIME_STEP, sets)),
         Case("pin", pin_linearize_loop, (QP, V, TAU)), 0.5, batch_check),
        ("  the same, against the derivatives alone",
         Case("ours", rd.linearize_batch, (model, Q, V, TAU, TIME_STEP, sets)),
         Case("pin", pin_loop, (QP, V, TAU)), None, None),
    ]
    rows = []
    for label, ours, theirs, target, check in pairs:
        difference = float("nan")
        if check is not None:
            mine, expected = check()
            difference = _difference(mine, expected)
        timing = time_cases([ours, theirs], repeat, block_seconds, seconds_per_case=case_seconds)
        scale = BATCH_STATES if ours.function is rd.linearize_batch else 1
        a, b = timing["ours"].median_us / scale, timing["pin"].median_us / scale
        r = ratio(a, b)
        rows.append((label, a, b, r, "-" if target is None else f"<= {target}",
                     "-" if target is None else "yes" if r <= target else "NO", difference))
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    if os.environ.get("OMP_NUM_THREADS") != "1":  # see the module's docstring
        arguments = list(sys.argv[2:] if argv is None else argv)
        return subprocess.call([sys.executable, "-m", "rbd_deriv.bench", "contact", *arguments],
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench contact", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few short blocks (a smoke run)")
    parser.add_argument("--robots", nargs="*", default=list(ROBOTS), choices=list(ROBOTS))
    args = parser.parse_args(argv)
    repeat, block, budget = (5, 0.0005, 0.01) if args.quick else (101, 0.001, 0.3)
    info = machine_info()
    print(f"load average (1 min) at start: {info['load_average_1min']}, cores: {os.cpu_count()}")
    for name in args.robots:
        frames, kind = ROBOTS[name]
        rows = bench_robot(name, repeat, block, budget)
        print(format_table(("function", "ours us", "pin us", "ours/pin", "target", "met", "max rel diff"), rows,
                           title=f"{name}: {len(frames)} {kind} contacts"))
        print()
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")
    return 0
