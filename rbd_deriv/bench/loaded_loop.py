"""The MPC's tick loop on the MuJoCo arm with the timing of a loaded machine, reproduced deterministically.

    python -m rbd_deriv.bench loaded-loop                  # every case, three seeds each
    python -m rbd_deriv.bench loaded-loop --seeds 5 --json loaded.json
    python -m rbd_deriv.bench loaded-loop --robot-side held policy playback

What the closed-loop test of the MPC node runs through DDS (the simulator node, the MPC node in
re-linearization mode at 200 Hz, a sinusoid reference), here in one process on a simulated wall clock with
1 ms steps, so that the timing a loaded machine imposes can be chosen and replayed:

- the plant publishes each physics step stamped with the wall clock; the MPC's tick reads the newest state
  published at least 1 ms (delivery) before it;
- a tick's command (and its feedback policy) reaches the plant its duration plus 1 ms later;
- the next tick comes at the first period boundary after the tick's end (rclpy's timer skips the calls it
  missed);
- a long tick (the process descheduled between reading the state and publishing) takes 15-45 ms with the
  case's probability.

- the robot side (``--robot-side``, each case is run with each):

  - ``held``: the command stays applied until the next one arrives (the effort forward-command controller);
  - ``policy``: every 1 ms step applies the tick's feedback policy u_ff(t) + K (x (-) x_ref(t)) from the
    plant's own state while it is valid (:class:`rbd_deriv.control.PolicyExecutor`, what the simulator node
    runs), the held command after it expires;
  - ``playback``: the plan's torques played back by their time until the next command (no feedback).

Both sides see the same ticks: the seed draws the same tick lengths whatever the robot side does (the
MPC's work does not depend on it). Reported per case and seed: the largest and the RMS tracking error [rad]
over the reference's 6 s (the node test allows 0.15 and 0.05). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.bench.timing import format_table, machine_info, write_json
from rbd_deriv.control import (CommandSource, ControlLoop, LoopSettings, MPCProblem, PolicyExecutor,
                               SinusoidReference, TickResult)
from rbd_deriv.testing.robots import bundled_urdf

__all__ = ["CASES", "ROBOT_SIDES", "main", "run_case"]

#: Case name -> (probability that a tick is long, short tick durations [ms] (low, high)).
CASES: Dict[str, Tuple[float, Tuple[float, float]]] = {
    "idle": (0.0, (0.5, 1.0)),
    "slow ticks 1-8 ms": (0.0, (1.0, 8.0)),
    "2 % long ticks": (0.02, (1.0, 4.0)),
    "5 % long ticks": (0.05, (1.0, 4.0)),
    "10 % long ticks": (0.10, (1.0, 4.0)),
}

ROBOT_SIDES = ("held", "policy", "playback")
LONG_TICK_MS = (15.0, 45.0)
DELIVERY_MS = 1.0
PERIOD_MS = 5
CENTER = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 0.8, 0.0])
_NS_PER_MS = 1_000_000


def run_case(long_probability: float, short_ms: Tuple[float, float], seed: int, robot_side: str = "held",
             duration: float = 6.0) -> Tuple[float, float]:
    """One closed loop; returns (largest, RMS) tracking error [rad] over ``duration`` [s] of the reference."""
    from rbd_deriv.demo.arm import demo_parameters
    from rbd_deriv.sim import make_plant

    rng = np.random.default_rng(seed)
    urdf = str(bundled_urdf("rbd_arm7"))
    model = rd.load_urdf(urdf)
    sim = demo_parameters()["sim_node"]  # the demo's plant: its damping and friction
    plant = make_plant("mujoco", urdf, dt=1e-3, damping=np.asarray(sim["damping"], dtype=float),
                       friction=np.asarray(sim["friction"], dtype=float), model=model)
    plant.reset(CENTER)
    problem = MPCProblem.from_model(model, mode="relinearize")
    loop = ControlLoop(model, problem, LoopSettings())
    loop.warm_up()
    # command_timeout 0: a command is held until the next, as the effort forward-command controller does.
    executor = PolicyExecutor(model, command_timeout=0.0)
    names = list(model.joint_names)
    reference = SinusoidReference(CENTER, 0.3, np.linspace(0.2, 0.5, model.nv), ramp=1.0)
    epoch_ns, begin = 10**9, 0.5
    knots = np.arange(0.0, duration + 1.0, 0.02)
    positions, velocities, _ = reference.sample(knots)
    loop.take_reference(names, epoch_ns + int(begin * 1e9), knots, positions, velocities)

    published: List[Tuple[int, np.ndarray, np.ndarray]] = []
    # (arrival [ms], tick result)
    pending: List[Tuple[int, TickResult]] = []
    applied: Optional[np.ndarray] = None
    following: Optional[Tuple[np.ndarray, int]] = None
    errors = []
    next_tick = 0
    for ms in range(int((begin + duration + 0.5) * 1000)):
        now_ns = epoch_ns + ms * _NS_PER_MS
        while pending and pending[0][0] <= ms:
            _, result = pending.pop(0)
            executor.take_command(result.command, now_ns)
            if robot_side == "policy":
                executor.take_policy(_fields(result.policy, names), result.policy.stamp_ns, now_ns)
            following = ((result.plan.torques.copy(), result.plan_start_ns)
                         if result.plan is not None and result.source is CommandSource.PLAN else None)
        applied, _ = executor.torque(plant.q, plant.v, now_ns)
        if robot_side == "playback" and following is not None:
            torques, start_ns = following
            k = (now_ns - start_ns) // int(problem.dt * 1e9)
            if k > 0:
                applied = np.clip(torques[min(k, len(torques) - 1)], loop.lower, loop.upper)
        if applied is not None:
            plant.step(applied, 1)
        published.append((ms, plant.q.copy(), plant.v.copy()))
        del published[:-100]
        t = ms * 1e-3 - begin
        if 0.0 <= t <= duration:
            errors.append(plant.q - reference.sample(np.array([t]))[0][0])
        if ms < next_tick:
            continue
        stamp, q, v = [state for state in published if state[0] <= ms - DELIVERY_MS][-1] if ms else published[0]
        loop.take_joint_states(names, q, v, [] if applied is None else applied, epoch_ns + stamp * _NS_PER_MS,
                               now_ns)
        result = loop.tick(now_ns)
        length = rng.uniform(*LONG_TICK_MS) if rng.random() < long_probability else rng.uniform(*short_ms)
        if result is not None:
            pending.append((ms + int(np.ceil(length + DELIVERY_MS)), result))
            pending.sort(key=lambda item: item[0])
        next_tick = (int(ms + length) // PERIOD_MS + 1) * PERIOD_MS
    errors = np.asarray(errors)
    return float(np.abs(errors).max()), float(np.sqrt(np.mean(errors**2)))


def _fields(policy, names: List[str]) -> dict:
    """A policy as the simulator node receives it (what rbd_deriv.messages.feedback_policy_arrays gives)."""
    return {"joint_names": names, "state_joint_names": names, "knot_dt": policy.knot_dt,
            "valid_for": policy.valid_for, "x_ref": policy.x_ref, "u_ff": policy.u_ff, "K": policy.gain}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: every case (or those named), with each robot side asked for."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.bench loaded-loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--seeds", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--robot-side", nargs="+", choices=ROBOT_SIDES, default=["held", "policy"],
                        help="how the plant uses the MPC's output (default: held and policy)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    options = parser.parse_args(argv)
    rows, results = [], []
    for name in options.cases:
        probability, short_ms = CASES[name]
        for side in options.robot_side:
            errors = [run_case(probability, short_ms, seed, side) for seed in range(options.seeds)]
            rows.append([name, side, " ".join(f"{largest:.3f}" for largest, _ in errors),
                         " ".join(f"{rms:.3f}" for _, rms in errors)])
            results.append({"case": name, "robot_side": side, "largest": [e[0] for e in errors],
                            "rms": [e[1] for e in errors]})
            print(" | ".join(rows[-1]), flush=True)
    print(format_table(["case", "robot side", "largest error [rad] per seed", "RMS error [rad] per seed"], rows))
    if options.json:
        write_json(options.json, {"machine": machine_info(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
