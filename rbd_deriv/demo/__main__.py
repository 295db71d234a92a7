"""The closed-loop demo: ``python -m rbd_deriv.demo`` (``--help`` for options).

Starts three processes talking over DDS, as on a robot: the simulated 7-dof arm
(:mod:`rbd_deriv.nodes.sim_node`, MuJoCo with joint damping and friction the controller does not
know), the dynamics node (linearizations at every joint_states message) and the MPC node (torque
commands). This process publishes a reference that moves every joint, records joint_states,
commands and diagnostics for a fixed time, then prints the achieved MPC rate, solve-time
percentiles, the dynamics latency seen by the MPC, the tracking error per joint, the torque
use and how the simulator actuated the arm (steps from the MPC's feedback policy, from its held
torque command, braked), and writes a PNG (reference vs actual, torques vs limits) and, with
``--json``, a summary. No display is needed.

The nodes' parameters come from the package's ``config/``: each node's own file, then ``demo.yaml``, which
``ros2 launch rbd_deriv demo.launch.py`` reads too (the same loop for ROS users). ``--mode`` and ``--rate``
override it.

Unless ROS_DOMAIN_ID is set, a random domain keeps the demo apart from other ROS traffic.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Sequence

from rbd_deriv.core.soles import SOLE_PLACEMENTS
from rbd_deriv.demo import arm, legged
from rbd_deriv.demo.processes import CLOCKS

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: the arm demo, or the legged one with ``--robot`` or ``--urdf``; its exit code."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=None,
                        help="run time [s]; default: 20 for the arm, a legged robot's script as written (a given "
                             "duration scales it), 10 for a gait given on the command line")
    parser.add_argument("--mode", choices=["held", "relinearize"], default=None,
                        help="MPC mode (held: linearizations of the dynamics node); default: demo.yaml's")
    parser.add_argument("--rate", type=float, default=None,
                        help="MPC rate, and the dynamics node's in held mode [Hz]; default: demo.yaml's")
    parser.add_argument("--output", default="rbd_deriv_demo.png", help="PNG written at the end")
    parser.add_argument("--json", default=None, help="also write a JSON summary to this file")
    parser.add_argument("--video", default=None,
                        help="video of the run (.gif, or .mp4 with ffmpeg), rendered offscreen after it; default: "
                             "beside --output with .gif; 'none' for no video")
    parser.add_argument("--clock", choices=CLOCKS, default="simulated",
                        help="simulated (default): the simulator's time on /clock, every node on it (use_sim_time): a "
                             "busy machine slows the simulation down and a stalled controller stops it; wall: the wall "
                             "clock, the simulated robot falls behind it on a busy machine")
    parser.add_argument("--logs", default=None, help="folder for the nodes' logs (default: temp)")
    parser.add_argument("--robot", choices=legged.LEGGED_DEMOS, default=None,
                        help="a legged robot instead of the arm, through its script (rbd_deriv/demo/scenarios.py): "
                             "gaits, velocity commands, pushes")
    parser.add_argument("--urdf", default=None, help="any legged robot's URDF (with --feet)")
    parser.add_argument("--feet", default=None, help="its contact frames, F1,F2,... (a trot: FL,FR,HL,HR)")
    parser.add_argument("--contact", choices=["point", "frame"], default="point", help="contact kind of the feet")
    parser.add_argument("--sole", choices=SOLE_PLACEMENTS, default="frame",
                        help="with --contact frame: each foot frame is its sole's centre (frame), or a foot link whose "
                             "collision geometry gives the sole (collision: a humanoid URDF with no sole frame)")
    parser.add_argument("--srdf", default=None, help="SRDF holding the reference posture")
    parser.add_argument("--locked-joints", default=None,
                        help="with --urdf: joints J1,J2,... the MPC plans as locked at the posture (a humanoid's arms, "
                             "head: see locked_joints in docs/mpc.md)")
    parser.add_argument("--posture", default=None, help="name of the SRDF group_state of the reference posture")
    parser.add_argument("--gait", default=None,
                        help="legged: stand 2 s, then this gait (a row of the gait table) on --cmd-vel, instead of "
                             "the robot's script")
    parser.add_argument("--cmd-vel", default=None, help="legged: the velocity command VX,VY,WZ [m/s, m/s, rad/s] "
                                                        "in the base frame (default 0,0,0)")
    parser.add_argument("--push-velocity", type=float, default=None,
                        help="legged: a lateral push at 60 %% of the run giving the base this velocity change [m/s] "
                             "(the force DV m over 0.1 s)")
    parser.add_argument("--reference-only", action="store_true",
                        help="only publish the reference once the loop runs, and stay until it ends "
                             "(for demo.launch.py)")
    arguments = parser.parse_args(argv)
    if arguments.duration is not None and not arguments.duration > 0.0:
        parser.error(f"--duration must be > 0 s, got {arguments.duration!r}")
    if not (arguments.robot or arguments.urdf) and arguments.duration is None:
        arguments.duration = 20.0
    if arguments.reference_only:
        return arm.publish_reference_only(arguments.duration, arguments.clock)

    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(20, 99)))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if arguments.robot or arguments.urdf:
        return legged.run(arguments)
    return arm.run(arguments)


if __name__ == "__main__":
    sys.exit(main())
