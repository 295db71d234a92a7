"""Tests of the legged benchmark's Crocoddyl side (rbd_deriv/bench/crocoddyl_legged.py): the Pinocchio it accepts,
and, where an environment with Crocoddyl is found, its problem checked against this package's own solve.

That environment is the one ``./run crocoddyl-env`` makes (``.venv-crocoddyl``, what CI makes before the suite),
another given by ``RBD_DERIV_CROCODDYL_PYTHON``, or this interpreter if it imports crocoddyl. Without any the
comparison is skipped and says why.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rbd_deriv.bench import crocoddyl_legged

ROOT = Path(__file__).resolve().parents[1]


def _crocoddyl_python() -> str | None:
    """The first interpreter that imports crocoddyl, in the order of the module docstring."""
    candidates = [os.environ.get("RBD_DERIV_CROCODDYL_PYTHON"),
                  str(Path(os.environ.get("RBD_DERIV_CROCODDYL_VENV", ROOT / ".venv-crocoddyl"), "bin", "python")),
                  sys.executable]
    for python in candidates:
        if python and Path(python).exists():
            found = subprocess.run([python, "-c", "import crocoddyl"], capture_output=True, timeout=120)
            if found.returncode == 0:
                return python
    return None


def _required_crocoddyl_python() -> str:
    """:func:`_crocoddyl_python`, or the test is skipped; a failure when CI made the environment
    (RBD_DERIV_REQUIRE_CROCODDYL): not finding it then is a fault, not a reason to skip."""
    python = _crocoddyl_python()
    if python is None:
        if os.environ.get("RBD_DERIV_REQUIRE_CROCODDYL"):
            pytest.fail("RBD_DERIV_REQUIRE_CROCODDYL is set but no Python with crocoddyl was found")
        pytest.skip("no Python with crocoddyl: ./run crocoddyl-env makes one (.venv-crocoddyl)")
    return python


def test_crocoddyl_3_2_1_refuses_the_pinocchio_it_was_not_built_against():
    crocoddyl_legged.check_pinocchio("3.2.1", "4.0.0")
    with pytest.raises(SystemExit, match="built against Pinocchio 4.0.x, this is Pinocchio 4.1.0"):
        crocoddyl_legged.check_pinocchio("3.2.1", "4.1.0")
    crocoddyl_legged.check_pinocchio("9.9.9", "4.1.0")  # a version it knows nothing of is let through


#: gait -> bounds on the first step's torques, (angle [deg], difference / ours) (see the test's docstring).
FIRST_STEP_BOUNDS = {"trot": (10.0, 0.25), "pace": (3.0, 0.1), "crawl": (3.0, 0.1)}


@pytest.mark.parametrize("gait", list(FIRST_STEP_BOUNDS))
def test_crocoddyl_solves_the_legged_problem_this_package_solves(gait):
    """solo12 on a gait of its node's table (config/mpc_node.yaml), N = 10 knots of 0.02 s from the gait's
    start, three ticks in Crocoddyl's environment. Trotting, two feet lift off within those knots and none
    lands, so the two problems differ only by the friction cone's term (a log barrier here, a quadratic barrier
    zero inside the pyramid there); crawling (the hind left foot up from knot 0, down at knot 8) and pacing
    (at a 0.4 s cycle no landing within the knots, at 0.32 s one at knot 8), a foot that lands meets this
    package's touchdown impulse, composed into the knot's dynamics, which Crocoddyl does not have (the cold
    start, still, has none: every knot at rest).

    Checked: the sizes; finite timings; the cost of the common cold start (x0 at every knot, the static
    torques) within 2 % (the cone terms, 0.15-0.2 on costs of 20-75: measured 0.2 % trotting, 0.2 % pacing at
    0.4 s, 0.9 % at 0.32 s with 3 cm swings, 0.5 % crawling; Crocoddyl's Euler model scales the running cost
    by dt, which the script undoes: without that its cost is 50 times smaller); Crocoddyl's iteration lowers
    it; and both first steps move the first torques the same way: the change from the static torques of
    Crocoddyl's full step (its change over the step length its line search took: 1 trotting, 1/2 pacing and
    crawling; this package's real-time step is whole) against ours, the angle between the two and their
    difference over ours under :data:`FIRST_STEP_BOUNDS` (measured trotting 5.9 degrees and 0.11, pacing 0.74
    and 0.019 at 0.4 s, 1.3 and 0.044 at 0.32 s, crawling 1.3 and 0.024).
    """
    python = _required_crocoddyl_python()
    from rbd_deriv.bench import legged

    horizon = 10
    model, mpc, x0 = legged.build("solo12", gait, horizon, 0.02)
    spec = legged.crocoddyl_spec("solo12", mpc, x0, ticks=3, warmup=0)
    theirs = legged.run_crocoddyl(python, spec)
    assert "error" not in theirs, f"{python}: {theirs.get('error')}"
    plan = mpc.solve(x0, phase=0, evaluate_cost=True)
    assert plan.ok

    assert (theirs["nx"], theirs["ndx"], theirs["nu"], theirs["horizon"]) == (
        model.nq + model.nv, 2 * model.nv, model.nv - 6, horizon)
    assert all(math.isfinite(theirs[key]) and theirs[key] > 0 for key in ("median_us", "p99_us"))

    assert theirs["initial_cost"] == pytest.approx(plan.cost, rel=0.02)
    assert theirs["first_cost"] < 0.5 * theirs["initial_cost"]

    ours = plan.torque - mpc.u_static
    change = (np.asarray(theirs["first_torque"]) - mpc.u_static) / theirs["first_step"]
    assert np.linalg.norm(ours) > 0.01  # the swing moves the torques: the comparison below means something
    cosine = ours @ change / (np.linalg.norm(ours) * np.linalg.norm(change))
    angle, difference = FIRST_STEP_BOUNDS[gait]
    assert cosine > math.cos(math.radians(angle))
    assert np.linalg.norm(change - ours) < difference * np.linalg.norm(ours)


@pytest.mark.parametrize("gait", ["stand", "walk"])
def test_crocoddyl_plans_on_the_reduced_talos_the_node_plans_on(gait):
    """talos standing and walking (its soles' swings held flat) as its node plans it (config/talos.yaml's
    locked_joints: arms, grippers and head locked at half-sitting): Crocoddyl, given the locked joints, builds Pinocchio's reduced model with this package's sizes
    (20 velocity rows, not the full robot's 50), and the cold start's cost agrees within 1 %: both sides plan
    one problem. The start is off the posture (the base 2 cm aside at 0.1 m/s, the knees 0.05 rad bent: a cost
    of 4.6); the cone's terms differ (a log barrier here, a quadratic zero inside the pyramid there) by what
    this package's cost is at rest, where only they count (-0.56 standing); measured 0.07 % apart standing once it
    is taken out."""
    python = _required_crocoddyl_python()
    from rbd_deriv.bench import legged

    model, mpc, x0 = legged.build("talos", gait, 10, 0.02)
    assert model.nv == 20 and len(legged.node_locked_joints("talos")) == 30
    at_rest = legged.build("talos", gait, 10, 0.02)[1].solve(x0, phase=0, evaluate_cost=True).cost
    x0 = x0.copy()
    x0[1], x0[model.nq + 1] = 0.02, 0.1
    for knee in ("leg_left_4_joint", "leg_right_4_joint"):
        x0[model.idx_q[knee]] += 0.05
    theirs = legged.run_crocoddyl(python, legged.crocoddyl_spec("talos", mpc, x0, ticks=2, warmup=0))
    assert "error" not in theirs, f"{python}: {theirs.get('error')}"
    plan = mpc.solve(x0, phase=0, evaluate_cost=True)
    assert plan.ok
    assert (theirs["nx"], theirs["ndx"], theirs["nu"]) == (model.nq + model.nv, 2 * model.nv, model.nv - 6)
    assert theirs["initial_cost"] > 1.0
    assert theirs["initial_cost"] == pytest.approx(plan.cost - at_rest, rel=0.01)


def test_crocoddyl_ticks_asked_in_turns_are_those_of_one_run():
    """The benchmark's interleaved mode (``--serve``, :class:`rbd_deriv.bench.legged.CrocoddylTicks`): ticks asked
    1 then 2 at a time give the reply of the three ticks run at once (the same first step and mean cost), and a
    Python without crocoddyl is reported, not hung on."""
    python = _required_crocoddyl_python()
    from rbd_deriv.bench import legged

    _, mpc, x0 = legged.build("solo12", "pace", 10, 0.02)
    spec = legged.crocoddyl_spec("solo12", mpc, x0, ticks=3, warmup=1)
    once = legged.run_crocoddyl(python, spec)
    turns = legged.CrocoddylTicks(python, spec)
    assert len(turns.run(1)) == 1 and len(turns.run(2)) == 2
    reply = turns.close()
    assert reply["ticks"] == once["ticks"] == 3
    assert reply["first_torque"] == once["first_torque"] and reply["mean_cost"] == pytest.approx(once["mean_cost"])

    with pytest.raises(RuntimeError, match="crocoddyl|exited with"):
        legged.CrocoddylTicks(sys.executable if python != sys.executable else "/bin/false", spec)
