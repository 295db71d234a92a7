"""Benchmark of the core library against Pinocchio, call by call, from Python.

Run ``python -m rbd_deriv.bench core`` (``--help`` for options). For each robot (ur5, panda, solo12 and
talos with a free flyer) it prints:

* one row per public function: our median per-call time, min-max over blocks, Pinocchio's, the ratio
  ours/Pinocchio, the target and whether it is met, and the largest relative difference between the two
  results (a benchmark of two functions that disagree would mean nothing);
* batched calls over K states against a Python loop over Pinocchio, per state;
* the layout of Table I of Carpentier and Mansard, "Analytical Derivatives of Rigid Body Dynamics
  Algorithms" (RSS 2018): inverse dynamics (ID), its analytical and finite-difference derivatives, forward
  dynamics (FD) likewise, M^-1 by the dedicated algorithm and by Cholesky factorization;
* the JIT cost a user sees: ``import rbd_deriv`` and the first call of each function in a fresh process
  with an empty numba cache, then again with that cache filled.

Targets: every per-call ratio <= 1.5; aba_derivatives and linearize on talos <= 1.0; the
batched derivatives over K = 32 states at least 1.5 times faster per state than a loop over Pinocchio.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pinocchio as pin

import rbd_deriv as rd
from rbd_deriv.bench.timing import Case, format_table, machine_info, ratio, time_cases, write_json
from rbd_deriv.testing.pinocchio_bridge import PinocchioBridge
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

__all__ = ["DEFAULT_ROBOTS", "main", "run"]

DEFAULT_ROBOTS: Dict[str, bool] = {"ur5": False, "panda": False, "solo12": True, "talos": True}
"""Benchmarked robots -> whether a free-flyer root joint is added."""

PER_CALL_TARGET = 1.5
"""Largest acceptable ratio ours/Pinocchio for one call."""

TIGHT_TARGETS: Dict[Tuple[str, str], float] = {("talos", "aba_derivatives"): 1.0, ("talos", "linearize"): 1.0}
"""(robot, function) -> ratio target tighter than PER_CALL_TARGET."""

BATCH_SIZE = 32
BATCH_SPEEDUP_TARGET = 1.5
"""Smallest acceptable speedup per state of a batched derivative over a Python loop over Pinocchio."""

TIME_STEP = 1e-3
"""Integration step of the linearization [s]."""

FINITE_DIFFERENCE_STEP = 1e-7
"""Forward-difference increment for the Table I finite-difference columns (about sqrt of machine eps)."""

AGREEMENT_TOLERANCE = 1e-8
"""Largest relative difference between ours and Pinocchio's results before a row is flagged (the tests
hold the library to 1e-9; a benchmark state is random and unconditioned, so it gets a little slack)."""

# Many short blocks rather than a few long ones: on a shared machine a burst of other work spoils a few
# blocks, and the median over many blocks ignores them (measured: identical calls on both sides gave
# ratios within 0.95-1.1 this way, 0.45-1.7 with 15 blocks of 10 ms).
DEFAULT_REPEAT = 101
DEFAULT_BLOCK_SECONDS = 0.001
QUICK_REPEAT = 5
QUICK_BLOCK_SECONDS = 0.0005
DEFAULT_CASE_SECONDS = 0.2
QUICK_CASE_SECONDS = 0.01
SEED = 20180626


LINEARIZE_REFERENCE = (
    "pin.computeABADerivatives + semi-implicit Euler chain in numpy with pin.integrate, pin.dIntegrate and "
    "pin.dIntegrateTransport (as crocoddyl IntegratedActionModelEuler.calcDiff)"
)
FINITE_DIFFERENCE_METHOD = (
    "forward differences from Python: 3 nv + 1 calls of rnea/aba, q perturbed with integrate (manifold)"
)
CHOLESKY_METHOD = {
    "ours": "rd.crba + numpy Cholesky inverse (dense)",
    "pinocchio": "pin.crba + pin.cholesky.decompose + pin.cholesky.computeMinv (sparse LDL^T)",
}


@dataclass(frozen=True)
class Settings:
    """How long to time each case.

    Attributes:
        repeat: Timed blocks per case, at most.
        block_seconds: Target length of one block [s].
        seconds_per_case: Budget of the timed blocks of one case [s]; slow calls (batched, finite
            differences on talos) get fewer blocks, at least 5.
        quick: A smoke run (few short blocks), not a measurement.
    """

    repeat: int = DEFAULT_REPEAT
    block_seconds: float = DEFAULT_BLOCK_SECONDS
    seconds_per_case: float = DEFAULT_CASE_SECONDS
    quick: bool = False


class MissingFunction:
    """Stands for a public function the library does not define (yet): its rows are reported as
    missing instead of stopping the whole benchmark."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"rbd_deriv has no function {self.name!r}")


class _Library:
    """Attribute access to rbd_deriv's public functions, a :class:`MissingFunction` for absent ones."""

    def __getattr__(self, name: str) -> Any:
        function = getattr(rd, name, None)
        return MissingFunction(name) if function is None else function


lib = _Library()


# --------------------------------------------------------------------------------------------- setup
@dataclass
class RobotBench:
    """Both libraries' models of one robot and random states drawn once.

    Attributes:
        name: Robot name (a key of ``EXAMPLE_ROBOTS``).
        model, data: Our model and workspace.
        bridge: Pinocchio's equivalent model (``bridge.model``, ``bridge.data``) and layout conversions.
        q, v, a, tau: One random state in our layout [(nq,), (nv,), (nv,), (nv,)].
        q_pin: ``q`` in Pinocchio's layout.
        q_other: A second configuration, for ``difference``.
        Q, V, A, TAU, Q_pin: ``BATCH_SIZE`` random states, one per row.
    """

    name: str
    model: Any
    data: Any
    bridge: PinocchioBridge
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    tau: np.ndarray
    q_pin: np.ndarray
    q_other: np.ndarray
    q_other_pin: np.ndarray
    Q: np.ndarray
    V: np.ndarray
    A: np.ndarray
    TAU: np.ndarray
    Q_pin: np.ndarray


def load_robot(name: str, floating_base: bool, rng: np.random.Generator) -> RobotBench:
    """Load ``name`` in both libraries, check they agree on the layout, draw the states."""
    path = EXAMPLE_ROBOTS[name]
    model = rd.load_urdf(str(path), floating_base=floating_base)
    data = model.create_data()
    bridge = PinocchioBridge.for_model(model, path)

    def draw_q() -> np.ndarray:
        return np.asarray(rd.random_configuration(model, rng), dtype=float).copy()

    nv = model.nv
    q, q_other = draw_q(), draw_q()
    Q = np.stack([draw_q() for _ in range(BATCH_SIZE)])
    return RobotBench(
        name=name,
        model=model,
        data=data,
        bridge=bridge,
        q=q,
        v=rng.standard_normal(nv),
        a=rng.standard_normal(nv),
        tau=rng.standard_normal(nv),
        q_pin=bridge.q_to_pin(q),
        q_other=q_other,
        q_other_pin=bridge.q_to_pin(q_other),
        Q=Q,
        V=rng.standard_normal((BATCH_SIZE, nv)),
        A=rng.standard_normal((BATCH_SIZE, nv)),
        TAU=rng.standard_normal((BATCH_SIZE, nv)),
        Q_pin=np.stack([bridge.q_to_pin(row) for row in Q]),
    )


# ---------------------------------------------------------------------------- Pinocchio references
class PinocchioEulerLinearization:
    """Reference for ``rd.linearize``: Pinocchio's ABA derivatives chained through semi-implicit Euler.

    The chain of crocoddyl's IntegratedActionModelEuler, written with numpy: ``v+ = v + dt ddq``,
    ``q+ = integrate(q, dt v+)``. With ``J_q, J_v`` the Jacobians of ``integrate`` at ``(q, dt v+)``:

    .. math::
        \\partial v^+ / \\partial x = [dt\\, \\partial_q \\ddot q,\\; I + dt\\, \\partial_v \\ddot q],\\quad
        \\partial q^+ / \\partial x = J_q [I, 0] + J_v\\, dt\\, \\partial v^+ / \\partial x,

    and ``B`` likewise from ``dt Minv``. As crocoddyl does, the product by ``J_v`` is
    ``pin.dIntegrateTransport`` (it touches only the rows of non-Euclidean joints) and only ``J_q``
    is formed. Outputs are preallocated once, as a tuned user would.
    """

    def __init__(self, model: Any, data: Any, dt: float) -> None:
        self.model, self.data, self.dt = model, data, dt
        nv = model.nv
        self.A = np.zeros((2 * nv, 2 * nv))
        self.B = np.zeros((2 * nv, nv))
        self.x_next = np.zeros(model.nq + nv)
        self.identity = np.eye(nv)

    def __call__(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        dddq_dq, dddq_dv, minv = pin.computeABADerivatives(self.model, self.data, q, v, tau)
        return self.chain(q, v, self.data.ddq, dddq_dq, dddq_dv, minv)

    def chain(self, q: np.ndarray, v: np.ndarray, ddq: np.ndarray, dddq_dq: np.ndarray, dddq_dv: np.ndarray,
              dddq_dtau: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The Euler step's (A, B) from the acceleration ``ddq`` (nv,) at (q (Pinocchio's nq,), v) and its
        derivatives (nv, nv) (from ABA, or from the contact dynamics); x+ in :attr:`x_next`."""
        model, dt, A, B = self.model, self.dt, self.A, self.B
        nv = model.nv
        v_next = v + dt * ddq
        step = dt * v_next
        np.multiply(dddq_dq, dt, out=A[nv:, :nv])
        np.multiply(dddq_dv, dt, out=A[nv:, nv:])
        A[nv:, nv:] += self.identity
        np.multiply(dddq_dtau, dt, out=B[nv:])
        A[:nv] = pin.dIntegrateTransport(model, q, step, dt * A[nv:], pin.ArgumentPosition.ARG1)
        A[:nv, :nv] += pin.dIntegrate(model, q, step, pin.ArgumentPosition.ARG0)
        B[:nv] = pin.dIntegrateTransport(model, q, step, dt * B[nv:], pin.ArgumentPosition.ARG1)
        self.x_next[: model.nq] = pin.integrate(model, q, step)
        self.x_next[model.nq :] = v_next
        return A, B


def finite_difference_jacobians(
    dynamics: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    integrate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    q: np.ndarray,
    v: np.ndarray,
    u: np.ndarray,
    step: float = FINITE_DIFFERENCE_STEP,
) -> np.ndarray:
    """Forward-difference Jacobians of ``dynamics(q, v, u)`` w.r.t. q (tangent space), v and u.

    The Table I "finite differences" columns: the same Python code drives either library, so the
    difference between the two timings is the cost of the library calls.

    Args:
        dynamics: ``rnea`` or ``aba`` of one library, bound to its model and data; returns (nv,).
        integrate: That library's ``integrate(q, dv)``.
        q, v, u: Configuration (nq,), velocity (nv,), acceleration or torque (nv,).
        step: Increment of each coordinate [rad, m, rad/s, ...].

    Returns:
        (3, nv, nv): derivatives w.r.t. q, v, u.
    """
    nv = v.shape[0]
    jacobians = np.empty((3, nv, nv))
    nominal = np.array(dynamics(q, v, u))
    tangent = np.zeros(nv)
    for column in range(nv):
        tangent[column] = step
        jacobians[0, :, column] = dynamics(integrate(q, tangent), v, u)
        tangent[column] = 0.0
    perturbed_v, perturbed_u = v.copy(), u.copy()
    for column in range(nv):
        perturbed_v[column] += step
        jacobians[1, :, column] = dynamics(q, perturbed_v, u)
        perturbed_v[column] = v[column]
    for column in range(nv):
        perturbed_u[column] += step
        jacobians[2, :, column] = dynamics(q, v, perturbed_u)
        perturbed_u[column] = u[column]
    jacobians -= nominal[None, :, None]
    jacobians /= step
    return jacobians


def numpy_cholesky_inverse(mass_matrix: np.ndarray) -> np.ndarray:
    """M^-1 = L^-T L^-1 from the dense Cholesky factor M = L L^T (nv, nv)."""
    lower_inverse = np.linalg.inv(np.linalg.cholesky(mass_matrix))
    return lower_inverse.T @ lower_inverse


def pinocchio_cholesky_inverse(model: Any, data: Any, q: np.ndarray) -> np.ndarray:
    """CRBA then Pinocchio's sparse LDL^T factorization and inverse (the paper's Cholesky row)."""
    pin.crba(model, data, q)
    pin.cholesky.decompose(model, data)
    return pin.cholesky.computeMinv(model, data)


def ours_cholesky_inverse(model: Any, data: Any, q: np.ndarray) -> np.ndarray:
    """Our CRBA then a dense numpy Cholesky inverse (the library has no sparse factorization)."""
    return numpy_cholesky_inverse(lib.crba(model, data, q))


def pinocchio_loop(function: Callable[..., Any], outputs: int) -> Callable[..., Any]:
    """Python loop over one state at a time, stacking each result as ``rd.*_batch`` returns them.

    Args:
        function: ``function(q, v, u)`` returning one array or a tuple of ``outputs`` arrays.
        outputs: Number of arrays ``function`` returns (1 for a plain array).
    """

    def loop(Q: np.ndarray, V: np.ndarray, U: np.ndarray):
        results = None
        for k in range(Q.shape[0]):
            values = function(Q[k], V[k], U[k])
            if outputs == 1:
                values = (values,)
            if results is None:
                # Allocated per call like the batched functions do, so both pay for their output.
                results = [np.empty((Q.shape[0],) + np.shape(value)) for value in values]
            for stacked, value in zip(results, values):
                stacked[k] = value
        return results[0] if outputs == 1 else tuple(results)

    return loop


# ---------------------------------------------------------------------------------------- comparisons
def relative_difference(ours: Any, reference: Any) -> float:
    """max |ours - reference| / max(1, max |reference|) over arrays or tuples of arrays."""
    if isinstance(reference, (tuple, list)):
        return max(relative_difference(x, y) for x, y in zip(ours, reference))
    ours_array, reference_array = np.asarray(ours, dtype=float), np.asarray(reference, dtype=float)
    if ours_array.shape != reference_array.shape:
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(reference_array), initial=0.0)))
    return float(np.max(np.abs(ours_array - reference_array), initial=0.0)) / scale


@dataclass
class Pair:
    """One function timed in both libraries.

    Attributes:
        function: Our public function name (the row label).
        ours, pinocchio: The two calls to time.
        reference: What the Pinocchio side calls, printed under the table.
        check: Returns (ours result, Pinocchio result) in our layout, for the agreement column.
        kind: ``"call"`` (judged on the ratio), ``"info"`` (not judged), ``"batch"`` or ``"table1"``.
        states: States handled per call (K for a batched call), to report per-state times.
    """

    function: str
    ours: Case
    pinocchio: Case
    reference: str
    check: Optional[Callable[[], Tuple[Any, Any]]] = None
    kind: str = "call"
    states: int = 1


def per_call_pairs(bench: RobotBench) -> List[Pair]:
    """The public functions, each with its Pinocchio counterpart and an agreement check."""
    model, data, bridge = bench.model, bench.data, bench.bridge
    pm, pd = bridge.model, bridge.data
    q, v, a, tau, qp = bench.q, bench.v, bench.a, bench.tau, bench.q_pin
    step = TIME_STEP * v
    euler = PinocchioEulerLinearization(pm, pd, TIME_STEP)

    def copied(result: Any) -> Any:
        if isinstance(result, tuple):
            return tuple(np.array(x) for x in result)
        return np.array(result)

    def check(ours_call: Callable[[], Any], pin_call: Callable[[], Any]) -> Callable[[], Tuple[Any, Any]]:
        return lambda: (copied(ours_call()), copied(pin_call()))

    def linearize_check() -> Tuple[Any, Any]:
        ours_ab = copied(lib.linearize(model, data, q, v, tau, TIME_STEP))
        ours_x = np.array(data.x_next)
        euler(qp, v, tau)
        reference_x = np.concatenate([bridge.q_from_pin(euler.x_next[: pm.nq]), euler.x_next[pm.nq :]])
        return ours_ab + (ours_x,), (euler.A.copy(), euler.B.copy(), reference_x)

    def kinematics_check() -> Tuple[Any, Any]:
        lib.forward_kinematics(model, data, q)
        return np.array(data.oMi), bridge.joint_placements(q)

    return [
        Pair("rnea", Case("ours", lib.rnea, (model, data, q, v, a)), Case("pin", pin.rnea, (pm, pd, qp, v, a)),
             "pin.rnea", check(lambda: lib.rnea(model, data, q, v, a), lambda: bridge.rnea(q, v, a))),
        Pair("crba", Case("ours", lib.crba, (model, data, q)), Case("pin", pin.crba, (pm, pd, qp)),
             "pin.crba", check(lambda: lib.crba(model, data, q), lambda: bridge.crba(q))),
        Pair("aba", Case("ours", lib.aba, (model, data, q, v, tau)), Case("pin", pin.aba, (pm, pd, qp, v, tau)),
             "pin.aba", check(lambda: lib.aba(model, data, q, v, tau), lambda: bridge.aba(q, v, tau))),
        Pair("minverse", Case("ours", lib.minverse, (model, data, q)),
             Case("pin", pin.computeMinverse, (pm, pd, qp)), "pin.computeMinverse",
             check(lambda: lib.minverse(model, data, q), lambda: bridge.minverse(q))),
        Pair("nonlinear_effects", Case("ours", lib.nonlinear_effects, (model, data, q, v)),
             Case("pin", pin.nonLinearEffects, (pm, pd, qp, v)), "pin.nonLinearEffects",
             check(lambda: lib.nonlinear_effects(model, data, q, v), lambda: bridge.nonlinear_effects(q, v))),
        Pair("gravity_torques", Case("ours", lib.gravity_torques, (model, data, q)),
             Case("pin", pin.computeGeneralizedGravity, (pm, pd, qp)), "pin.computeGeneralizedGravity",
             check(lambda: lib.gravity_torques(model, data, q), lambda: bridge.gravity_torques(q))),
        Pair("forward_kinematics", Case("ours", lib.forward_kinematics, (model, data, q)),
             Case("pin", pin.forwardKinematics, (pm, pd, qp)), "pin.forwardKinematics", kinematics_check),
        Pair("rnea_derivatives", Case("ours", lib.rnea_derivatives, (model, data, q, v, a)),
             Case("pin", pin.computeRNEADerivatives, (pm, pd, qp, v, a)), "pin.computeRNEADerivatives",
             check(lambda: lib.rnea_derivatives(model, data, q, v, a), lambda: bridge.rnea_derivatives(q, v, a))),
        Pair("aba_derivatives", Case("ours", lib.aba_derivatives, (model, data, q, v, tau)),
             Case("pin", pin.computeABADerivatives, (pm, pd, qp, v, tau)), "pin.computeABADerivatives",
             check(lambda: lib.aba_derivatives(model, data, q, v, tau),
                   lambda: bridge.aba_derivatives(q, v, tau))),
        Pair("linearize", Case("ours", lib.linearize, (model, data, q, v, tau, TIME_STEP)),
             Case("pin", euler, (qp, v, tau)), LINEARIZE_REFERENCE, linearize_check),
        Pair("linearize vs pin ABA derivatives only", Case("ours", lib.linearize, (model, data, q, v, tau, TIME_STEP)),
             Case("pin", pin.computeABADerivatives, (pm, pd, qp, v, tau)),
             "pin.computeABADerivatives alone: a floor for any linearization built on it", kind="info"),
        Pair("integrate", Case("ours", lib.integrate, (model, q, step)),
             Case("pin", pin.integrate, (pm, qp, step)), "pin.integrate",
             check(lambda: lib.integrate(model, q, step), lambda: bridge.integrate(q, step))),
        Pair("difference", Case("ours", lib.difference, (model, q, bench.q_other)),
             Case("pin", pin.difference, (pm, qp, bench.q_other_pin)), "pin.difference",
             check(lambda: lib.difference(model, q, bench.q_other),
                   lambda: bridge.difference(q, bench.q_other))),
    ]


def batch_pairs(bench: RobotBench) -> List[Pair]:
    """Batched functions over K states against a Python loop over Pinocchio."""
    model, bridge = bench.model, bench.bridge
    pm, pd = bridge.model, bridge.data
    Q, V, A, TAU, Q_pin = bench.Q, bench.V, bench.A, bench.TAU, bench.Q_pin
    euler = PinocchioEulerLinearization(pm, pd, TIME_STEP)

    def euler_with_state(q: np.ndarray, v: np.ndarray, tau: np.ndarray):
        A_k, B_k = euler(q, v, tau)
        return A_k, B_k, euler.x_next

    loops = {
        "rnea_batch": (lib.rnea_batch, pinocchio_loop(functools.partial(pin.rnea, pm, pd), 1), A,
                       "loop over pin.rnea"),
        "aba_batch": (lib.aba_batch, pinocchio_loop(functools.partial(pin.aba, pm, pd), 1), TAU,
                      "loop over pin.aba"),
        "rnea_derivatives_batch": (
            lib.rnea_derivatives_batch, pinocchio_loop(functools.partial(pin.computeRNEADerivatives, pm, pd), 3),
            A, "loop over pin.computeRNEADerivatives"),
        "aba_derivatives_batch": (
            lib.aba_derivatives_batch, pinocchio_loop(functools.partial(pin.computeABADerivatives, pm, pd), 3),
            TAU, "loop over pin.computeABADerivatives"),
    }
    pairs = [
        Pair(name, Case("ours", ours, (model, Q, V, U)), Case("pin", reference, (Q_pin, V, U)), label,
             kind="batch", states=BATCH_SIZE)
        for name, (ours, reference, U, label) in loops.items()
    ]
    pairs.append(Pair(
        "linearize_batch", Case("ours", lib.linearize_batch, (model, Q, V, TAU, TIME_STEP)),
        Case("pin", pinocchio_loop(euler_with_state, 3), (Q_pin, V, TAU)), "loop over the linearize reference",
        kind="batch", states=BATCH_SIZE))
    _attach_batch_checks(bench, pairs)
    return pairs


def _attach_batch_checks(bench: RobotBench, pairs: List[Pair]) -> None:
    # The batch must equal the per-state function of the same library state by state; the
    # per-call checks already tie each per-state function to Pinocchio.
    model, data = bench.model, bench.data
    singles = {
        "rnea_batch": lambda k: lib.rnea(model, data, bench.Q[k], bench.V[k], bench.A[k]),
        "aba_batch": lambda k: lib.aba(model, data, bench.Q[k], bench.V[k], bench.TAU[k]),
        "rnea_derivatives_batch": lambda k: lib.rnea_derivatives(model, data, bench.Q[k], bench.V[k], bench.A[k]),
        "aba_derivatives_batch": lambda k: lib.aba_derivatives(model, data, bench.Q[k], bench.V[k], bench.TAU[k]),
        "linearize_batch": lambda k: lib.linearize(model, data, bench.Q[k], bench.V[k], bench.TAU[k], TIME_STEP)
        + (data.x_next,),
    }
    for pair in pairs:
        single = singles[pair.function]

        def check(pair: Pair = pair, single: Callable[[int], Any] = single) -> Tuple[Any, Any]:
            batched = pair.ours.function(*pair.ours.args)
            outputs = batched if isinstance(batched, tuple) else (batched,)
            stacked: List[List[np.ndarray]] = [[] for _ in outputs]
            for k in range(BATCH_SIZE):
                values = single(k)
                values = values if isinstance(values, tuple) else (values,)
                for column, value in enumerate(values):
                    stacked[column].append(np.array(value))
            return tuple(np.array(x) for x in outputs), tuple(np.stack(x) for x in stacked)

        pair.check = check


def table1_pairs(bench: RobotBench) -> List[Pair]:
    """Rows of Table I not already timed per call: finite differences and Cholesky inverse."""
    model, data, bridge = bench.model, bench.data, bench.bridge
    pm, pd = bridge.model, bridge.data
    q, v, a, tau, qp = bench.q, bench.v, bench.a, bench.tau, bench.q_pin
    ours_integrate = functools.partial(lib.integrate, model)
    pin_integrate = functools.partial(pin.integrate, pm)

    def finite_difference_pair(label: str, ours_name: str, pin_dynamics: Callable[..., Any],
                               derivatives_name: str, u: np.ndarray) -> Pair:
        ours_dynamics = functools.partial(getattr(lib, ours_name), model, data)
        derivatives = getattr(lib, derivatives_name)

        def check() -> Tuple[Any, Any]:
            # Forward differences are accurate to about sqrt(eps): the column shows they do their job.
            analytical = np.stack([np.array(x) for x in derivatives(model, data, q, v, u)])
            return finite_difference_jacobians(ours_dynamics, ours_integrate, q, v, u), analytical

        return Pair(label,
                    Case("ours", finite_difference_jacobians, (ours_dynamics, ours_integrate, q, v, u)),
                    Case("pin", finite_difference_jacobians,
                         (functools.partial(pin_dynamics, pm, pd), pin_integrate, qp, v, u)),
                    FINITE_DIFFERENCE_METHOD, check, kind="table1")

    return [
        finite_difference_pair("finite differences of ID", "rnea", pin.rnea, "rnea_derivatives", a),
        finite_difference_pair("finite differences of FD", "aba", pin.aba, "aba_derivatives", tau),
        Pair("M^-1 Cholesky factorization",
             Case("ours", ours_cholesky_inverse, (model, data, q)),
             Case("pin", pinocchio_cholesky_inverse, (pm, pd, qp)),
             CHOLESKY_METHOD["ours"] + " vs " + CHOLESKY_METHOD["pinocchio"],
             lambda: (ours_cholesky_inverse(model, data, q), bridge.minverse(q)),
             kind="table1"),
    ]


# ------------------------------------------------------------------------------------------- running
def target_for(robot: str, pair: Pair) -> Optional[float]:
    """Ratio target of a per-call row, speedup target of a batched derivative row, None otherwise."""
    if pair.kind == "call":
        return TIGHT_TARGETS.get((robot, pair.function), PER_CALL_TARGET)
    if pair.kind == "batch" and ("derivatives" in pair.function or pair.function == "linearize_batch"):
        return BATCH_SPEEDUP_TARGET
    return None


def measure_pair(robot: str, pair: Pair, settings: Settings) -> Optional[Dict[str, Any]]:
    """Time one pair interleaved, check agreement, judge the target; return the JSON row (None when
    the library lacks the function)."""
    if isinstance(pair.ours.function, MissingFunction):
        return None
    timings = time_cases([pair.ours, pair.pinocchio], settings.repeat, settings.block_seconds,
                         seconds_per_case=settings.seconds_per_case)
    ours, theirs = timings["ours"], timings["pin"]
    row: Dict[str, Any] = {
        "function": pair.function,
        "kind": pair.kind,
        "pinocchio_reference": pair.reference,
        "ours": ours.to_dict(),
        "pinocchio": theirs.to_dict(),
        "ratio": ratio(ours.median_us, theirs.median_us),
        # Fastest blocks of each side: the least disturbed by other work on the machine.
        "ratio_of_min": ratio(ours.min_us, theirs.min_us),
        "max_relative_difference": None,
    }
    if pair.check is not None:
        try:
            ours_value, reference_value = pair.check()
            row["max_relative_difference"] = relative_difference(ours_value, reference_value)
        except Exception as error:  # noqa: BLE001 - a broken check is reported, the timings are kept
            row["check_error"] = f"{type(error).__name__}: {error}"
    target = target_for(robot, pair)
    row["target"] = target
    if pair.kind == "batch":
        row["states"] = pair.states
        row["ours_per_state_us"] = ours.median_us / pair.states
        row["pinocchio_per_state_us"] = theirs.median_us / pair.states
        row["speedup"] = ratio(theirs.median_us, ours.median_us)
        row["speedup_of_min"] = ratio(theirs.min_us, ours.min_us)
        row["target_met"] = None if target is None else bool(row["speedup"] >= target)
    else:
        row["target_met"] = None if target is None else bool(row["ratio"] <= target)
    return row


def benchmark_robot(bench: RobotBench, settings: Settings) -> Dict[str, Any]:
    """All rows of one robot, plus its Table I column."""
    rows: Dict[str, List[Dict[str, Any]]] = {}
    missing: List[str] = []
    for group, builder in (("per_call", per_call_pairs), ("batch", batch_pairs), ("table1_extra", table1_pairs)):
        rows[group] = []
        for pair in builder(bench):
            row = measure_pair(bench.name, pair, settings)
            if row is None:
                missing.append(pair.function)
            else:
                rows[group].append(row)
    return {
        "nq": bench.model.nq,
        "nv": bench.model.nv,
        "floating_base": bool(bench.model.has_floating_base),
        **rows,
        "missing": missing,
        "table1": table1_column(rows),
    }


TABLE1_ROWS: List[Tuple[str, str]] = [
    ("ID", "rnea"),
    ("analytical derivatives of ID", "rnea_derivatives"),
    ("finite differences of ID", "finite differences of ID"),
    ("FD", "aba"),
    ("analytical derivatives of FD", "aba_derivatives"),
    ("finite differences of FD", "finite differences of FD"),
    ("M^-1 dedicated algorithm", "minverse"),
    ("M^-1 Cholesky factorization", "M^-1 Cholesky factorization"),
]
"""Table I row label -> the measured row it takes its numbers from."""


def table1_column(rows: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Dict[str, float]]:
    """Table I entries of one robot: label -> {ours_us, pinocchio_us, ratio}."""
    by_function = {row["function"]: row for group in rows.values() for row in group}
    return {
        label: {
            "ours_us": by_function[source]["ours"]["median_us"],
            "pinocchio_us": by_function[source]["pinocchio"]["median_us"],
            "ratio": by_function[source]["ratio"],
        }
        for label, source in TABLE1_ROWS
        if source in by_function
    }


# -------------------------------------------------------------------------------------------- JIT cost
_JIT_SCRIPT = r"""
import json, sys, time
start = time.perf_counter()
import rbd_deriv as rd
import_seconds = time.perf_counter() - start
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS
import numpy as np
report = {"import_s": import_seconds, "robots": {}}
for name, floating in json.loads(sys.argv[1]):
    timings = {}
    start = time.perf_counter()
    model = rd.load_urdf(str(EXAMPLE_ROBOTS[name]), floating_base=floating)
    data = model.create_data()
    timings["load_urdf"] = time.perf_counter() - start
    rng = np.random.default_rng(0)
    q = rd.random_configuration(model, rng)
    v, a = rng.standard_normal(model.nv), rng.standard_normal(model.nv)
    K = 4
    Q = np.stack([rd.random_configuration(model, rng) for _ in range(K)])
    V, A = rng.standard_normal((K, model.nv)), rng.standard_normal((K, model.nv))
    arguments = {
        "rnea": (model, data, q, v, a), "crba": (model, data, q), "aba": (model, data, q, v, a),
        "minverse": (model, data, q), "nonlinear_effects": (model, data, q, v),
        "gravity_torques": (model, data, q), "forward_kinematics": (model, data, q),
        "rnea_derivatives": (model, data, q, v, a), "aba_derivatives": (model, data, q, v, a),
        "linearize": (model, data, q, v, a, 1e-3), "integrate": (model, q, v), "difference": (model, q, q),
        "rnea_batch": (model, Q, V, A), "aba_batch": (model, Q, V, A),
        "rnea_derivatives_batch": (model, Q, V, A), "aba_derivatives_batch": (model, Q, V, A),
        "linearize_batch": (model, Q, V, A, 1e-3),
    }
    for label, args in arguments.items():
        function = getattr(rd, label, None)
        if function is None:
            report.setdefault("missing", []).append(label)
            continue
        start = time.perf_counter()
        function(*args)
        timings[label] = time.perf_counter() - start
    report["robots"][name] = timings
print("JIT-REPORT " + json.dumps(report))
"""

JIT_ROBOTS: List[Tuple[str, bool]] = [("ur5", False), ("solo12", True)]
"""Robots whose first calls are timed in the JIT measurement: a fixed base, then a free flyer (shows
whether a second model or joint type compiles anything again)."""


def measure_jit(
    script: str = _JIT_SCRIPT,
    robots: Sequence[Tuple[str, bool]] = tuple(JIT_ROBOTS),
    timeout: float = 900.0,
) -> Dict[str, Any]:
    """Time ``import rbd_deriv`` and first calls in a fresh process, twice with one numba cache dir.

    The first process starts with an empty ``NUMBA_CACHE_DIR`` (what a user sees on first use), the
    second reuses what the first cached (every later start). Wall times [s], measured in the child.

    Args:
        script: Python source run by each child with ``json.dumps(robots)`` as its argument; it prints
            one line ``JIT-REPORT <json>`` holding ``import_s`` and ``robots`` (name -> label -> [s]).
        robots: (robot name, floating base) pairs whose first calls are timed.
        timeout: Longest wait for one child [s].
    """
    package_parent = str(Path(rd.__file__).resolve().parents[1])
    results: Dict[str, Any] = {"robots": [name for name, _ in robots]}
    with tempfile.TemporaryDirectory(prefix="rbd_deriv_numba_cache_") as cache_dir:
        environment = dict(os.environ)
        environment["NUMBA_CACHE_DIR"] = cache_dir
        environment["PYTHONPATH"] = os.pathsep.join(
            [package_parent] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        arguments = [sys.executable, "-c", script, json.dumps([list(robot) for robot in robots])]
        results["first_import"] = _run_child(arguments, environment, timeout)
        if "error" in results["first_import"]:
            # A failed first child may have compiled part of the library: a second child would see a
            # partly filled cache, neither a first nor a cached import.
            results["cached_import"] = {"error": "not measured: the first import failed"}
        else:
            results["cached_import"] = _run_child(arguments, environment, timeout)
    return results


def _run_child(arguments: List[str], environment: Dict[str, str], timeout: float) -> Dict[str, Any]:
    # One child of measure_jit: its JIT-REPORT line plus the wall time of the whole process [s].
    start = time.perf_counter()
    try:
        completed = subprocess.run(arguments, env=environment, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no report within {timeout:.0f} s"}
    process_seconds = time.perf_counter() - start
    lines = [line for line in completed.stdout.splitlines() if line.startswith("JIT-REPORT ")]
    if completed.returncode != 0 or not lines:
        return {"error": (completed.stderr or completed.stdout).strip()[-2000:]}
    report = json.loads(lines[-1][len("JIT-REPORT "):])
    report["process_s"] = process_seconds
    report["first_calls_s"] = {
        name: sum(value for key, value in timings.items() if key != "load_urdf")
        for name, timings in report["robots"].items()
    }
    return report


# ------------------------------------------------------------------------------------------- printing
def _us_range(timing: Dict[str, float]) -> str:
    return f"{timing['min_us']:.3g}-{timing['max_us']:.3g}"


def _met(value: Optional[bool]) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def render_robot(name: str, result: Dict[str, Any]) -> str:
    """Human tables of one robot: per-call rows, batched rows, Table I extras."""
    title = f"== {name} (nq {result['nq']}, nv {result['nv']}{', free flyer' if result['floating_base'] else ''})"
    per_call = format_table(
        ["function", "ours med [us]", "ours min-max", "pin med [us]", "pin min-max", "ratio", "ratio of min",
         "target", "met", "max rel diff"],
        [[row["function"], row["ours"]["median_us"], _us_range(row["ours"]), row["pinocchio"]["median_us"],
          _us_range(row["pinocchio"]), row["ratio"], row["ratio_of_min"],
          "-" if row["target"] is None else f"<= {row['target']}",
          _met(row["target_met"]), _difference(row)] for row in result["per_call"]],
        title=title,
    )
    batch = format_table(
        ["batched (K=%d)" % BATCH_SIZE, "ours/state [us]", "ours min-max/call", "pin loop/state [us]",
         "pin min-max/call", "speedup", "speedup of min", "target", "met", "max rel diff"],
        [[row["function"], row["ours_per_state_us"], _us_range(row["ours"]), row["pinocchio_per_state_us"],
          _us_range(row["pinocchio"]), row["speedup"], row["speedup_of_min"],
          "-" if row["target"] is None else f">= {row['target']}", _met(row["target_met"]),
          _difference(row)] for row in result["batch"]],
    )
    extra = format_table(
        ["Table I extra", "ours med [us]", "ours min-max", "pin med [us]", "pin min-max", "ratio",
         "max rel diff"],
        [[row["function"], row["ours"]["median_us"], _us_range(row["ours"]), row["pinocchio"]["median_us"],
          _us_range(row["pinocchio"]), row["ratio"], _difference(row)]
         for row in result["table1_extra"]],
    )
    problems = [
        f"  {row['function']}: " + (row["check_error"] if "check_error" in row
                                    else f"results differ by {row['max_relative_difference']:.1e}")
        for group in ("per_call", "batch", "table1_extra") for row in result[group]
        if "check_error" in row or _disagrees(row)
    ]
    blocks = [per_call, batch, extra]
    if result["missing"]:
        blocks.append("not timed, rbd_deriv lacks: " + ", ".join(result["missing"]))
    if problems:
        blocks.append("results to look at:\n" + "\n".join(problems))
    return "\n\n".join(blocks)


def _disagrees(row: Dict[str, Any]) -> bool:
    # Finite differences are only accurate to about sqrt(eps): their column is informative, not judged.
    value = row.get("max_relative_difference")
    return row["kind"] != "table1" and value is not None and not value <= AGREEMENT_TOLERANCE


def _difference(row: Dict[str, Any]) -> str:
    if "check_error" in row:
        return "CHECK FAILED"
    value = row["max_relative_difference"]
    return "-" if value is None else f"{value:.1e}"


def render_table1(robots: Dict[str, Dict[str, Any]]) -> str:
    """Table I of the RSS 2018 paper, each cell "ours / Pinocchio" median [us]."""
    names = list(robots)
    rows = []
    for label, _ in TABLE1_ROWS:
        cells = []
        for name in names:
            entry = robots[name]["table1"].get(label)
            cells.append("missing" if entry is None else
                         f"{entry['ours_us']:.3g} / {entry['pinocchio_us']:.3g} ({entry['ratio']:.2f})")
        rows.append([label] + cells)
    headers = ["Table I, ours / pin [us] (ratio)"] + [
        f"{name} (nv {robots[name]['nv']})" for name in names
    ]
    return format_table(headers, rows)


def render_jit(jit: Dict[str, Any]) -> str:
    """First-import and cached-import JIT cost."""
    lines = ["== JIT cost (fresh process; numba cache empty, then filled)"]
    for label in ("first_import", "cached_import"):
        report = jit.get(label, {})
        if "error" in report:
            lines.append(f"{label}: FAILED: {report['error'].splitlines()[-1] if report['error'] else ''}")
            continue
        if not report:
            continue
        calls = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in report["first_calls_s"].items())
        lines.append(
            f"{label}: import rbd_deriv {report['import_s']:.2f} s; first calls of every function: {calls}; "
            f"whole process {report['process_s']:.2f} s"
            + (f"; missing: {', '.join(report['missing'])}" if report.get("missing") else "")
        )
    slowest = jit.get("first_import", {}).get("robots", {})
    if isinstance(slowest, dict) and slowest:
        first_robot = next(iter(slowest.values()))
        top = sorted(((s, f) for f, s in first_robot.items() if f != "load_urdf"), reverse=True)[:5]
        lines.append("slowest first calls (empty cache): " + ", ".join(f"{f} {s:.2f} s" for s, f in top))
    return "\n".join(lines)


def summarize_targets(robots: Dict[str, Dict[str, Any]]) -> Dict[str, List[str]]:
    """Every judged row as "robot function (value vs target)", split into met and missed."""
    met: List[str] = []
    missed: List[str] = []
    for name, result in robots.items():
        for row in result["per_call"] + result["batch"]:
            if row["target_met"] is None:
                continue
            if row["kind"] == "batch":
                text = f"{name} {row['function']} speedup {row['speedup']:.2f} (>= {row['target']})"
            else:
                text = f"{name} {row['function']} ratio {row['ratio']:.2f} (<= {row['target']})"
            (met if row["target_met"] else missed).append(text)
    return {"met": met, "missed": missed}


# ---------------------------------------------------------------------------------------------- entry
def run(
    robots: Sequence[str],
    settings: Settings,
    jit: bool = True,
    log: Callable[[str], None] = print,
) -> Dict[str, Any]:
    """Run the benchmark and return the JSON report (also printing the tables through ``log``)."""
    unknown = [name for name in robots if name not in DEFAULT_ROBOTS]
    if unknown:
        raise ValueError(f"unknown robot(s) {unknown}; choose among {list(DEFAULT_ROBOTS)}")
    rng = np.random.default_rng(SEED)
    report: Dict[str, Any] = {
        "benchmark": "core",
        "machine": machine_info(),
        "settings": {
            **asdict(settings), "batch_size": BATCH_SIZE, "time_step_s": TIME_STEP,
            "finite_difference_step": FINITE_DIFFERENCE_STEP, "seed": SEED,
        },
        "methods": {
            "timing": "timeit blocks interleaved ours/pinocchio in one process; per-call median, min, max over "
                      "blocks; states drawn once; warm-up block before timing",
            "linearize_reference": LINEARIZE_REFERENCE,
            "finite_differences": FINITE_DIFFERENCE_METHOD,
            "cholesky": CHOLESKY_METHOD,
            "batch_reference": "Python loop over pinocchio, one state at a time, outputs stacked",
            "max_relative_difference": "max |ours - pinocchio| / max(1, max |pinocchio|) at the timed state; "
                                       "batched rows compare with our per-state function; finite differences "
                                       "rows with our analytical derivatives",
        },
        "targets": {
            "per_call_ratio": PER_CALL_TARGET,
            "tight_ratio": {f"{robot} {function}": value for (robot, function), value in TIGHT_TARGETS.items()},
            "batch_speedup": BATCH_SPEEDUP_TARGET,
        },
        "robots": {},
    }
    machine = report["machine"]
    log(f"rbd_deriv core benchmark: {machine['processor']}, {machine['cpu_count']} cores, "
        f"1-min load {machine['load_average_1min'] or float('nan'):.2f}, "
        f"numba {machine['numba']}, pinocchio {machine['pinocchio']}; "
        f"{settings.repeat} blocks of {1e3 * settings.block_seconds:g} ms per case at most "
        f"({settings.seconds_per_case:g} s budget)")
    log("")
    for name in robots:
        start = time.perf_counter()
        bench = load_robot(name, DEFAULT_ROBOTS[name], rng)
        result = benchmark_robot(bench, settings)
        result["seconds"] = time.perf_counter() - start
        report["robots"][name] = result
        log(render_robot(name, result))
        log("")
    log(render_table1(report["robots"]))
    log("")
    log("Pinocchio side of linearize: " + LINEARIZE_REFERENCE)
    log("Finite differences: " + FINITE_DIFFERENCE_METHOD)
    log("M^-1 Cholesky: ours = " + CHOLESKY_METHOD["ours"] + "; pin = " + CHOLESKY_METHOD["pinocchio"])
    log("")
    if jit:
        report["jit"] = measure_jit()
        log(render_jit(report["jit"]))
        log("")
    report["load_average_1min_at_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    report["summary"] = summarize_targets(report["robots"])
    report["summary"]["missing"] = sorted({name for result in report["robots"].values() for name in result["missing"]})
    if report["summary"]["missing"]:
        log("  NOT MEASURED (missing in rbd_deriv): " + ", ".join(report["summary"]["missing"]))
    report["summary"]["results_to_look_at"] = [
        f"{name} {row['function']}: " + row.get("check_error", f"differs by {row['max_relative_difference']}")
        for name, result in report["robots"].items()
        for group in ("per_call", "batch", "table1_extra") for row in result[group]
        if "check_error" in row or _disagrees(row)
    ]
    log(f"targets met: {len(report['summary']['met'])}, missed: {len(report['summary']['missed'])}")
    for text in report["summary"]["missed"]:
        log("  MISSED " + text)
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rbd_deriv.bench core",
        description="Time every public function of rbd_deriv against Pinocchio in the same process.",
    )
    parser.add_argument("--robots", nargs="+", default=list(DEFAULT_ROBOTS), choices=list(DEFAULT_ROBOTS),
                        help="robots to benchmark (default: all)")
    parser.add_argument("--repeat", type=int, default=None,
                        help=f"timed blocks per case (default {DEFAULT_REPEAT}, {QUICK_REPEAT} with --quick)")
    parser.add_argument("--block-seconds", type=float, default=None,
                        help=f"target length of one block [s] (default {DEFAULT_BLOCK_SECONDS}, "
                             f"{QUICK_BLOCK_SECONDS} with --quick)")
    parser.add_argument("--case-seconds", type=float, default=None,
                        help=f"time budget of one case's timed blocks [s] (default {DEFAULT_CASE_SECONDS}, "
                             f"{QUICK_CASE_SECONDS} with --quick)")
    parser.add_argument("--quick", action="store_true", help="few short blocks: a smoke run, not a measurement")
    parser.add_argument("--no-jit", dest="jit", action="store_false",
                        help="skip the first-import / cached-import JIT measurement (two subprocesses)")
    parser.add_argument("--json", type=Path, default=None, help="also write the full report to this JSON file")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the process exit code (0 even when a target is missed)."""
    args = build_parser().parse_args(argv)

    def chosen(value: Optional[float], default: float, quick: float) -> float:
        return value if value is not None else (quick if args.quick else default)

    settings = Settings(
        repeat=int(chosen(args.repeat, DEFAULT_REPEAT, QUICK_REPEAT)),
        block_seconds=chosen(args.block_seconds, DEFAULT_BLOCK_SECONDS, QUICK_BLOCK_SECONDS),
        seconds_per_case=chosen(args.case_seconds, DEFAULT_CASE_SECONDS, QUICK_CASE_SECONDS),
        quick=bool(args.quick),
    )
    if settings.repeat < 1 or settings.block_seconds <= 0 or settings.seconds_per_case <= 0:
        print("error: --repeat must be >= 1, --block-seconds and --case-seconds > 0", file=sys.stderr)
        return 2
    report = run(args.robots, settings, jit=args.jit)
    if args.json is not None:
        path = write_json(args.json, report)
        print(f"JSON report written to {path}")
    return 0
