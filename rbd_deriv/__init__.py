"""rbd_deriv: rigid-body dynamics and their analytical derivatives, compiled with numba.

    import rbd_deriv as rd
    model = rd.load_urdf("robot.urdf", floating_base=False)
    data = model.create_data()
    tau = rd.rnea(model, data, q, v, a)

The library imports no ROS package; the nodes live in :mod:`rbd_deriv.nodes`.
"""

import os

# numba.get_num_threads(), which sizes the batches, starts numba's OpenMP thread pool, whose threads spin
# while they wait by default: on a robot computer they would take the cores its other processes need. Read
# when that pool starts (the first batched call), so it must be set before.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Before any kernel module: choose the cache of compiled kernels for these sources and this machine, and fill it
# if it is empty (saying so on stderr), so that the imports below load machine code.
from rbd_deriv import jit_cache  # noqa: E402

jit_cache.activate()

from rbd_deriv.exceptions import InputError, ModelError, RbdDerivError, URDFError  # noqa: E402
from rbd_deriv.core.urdf import FREE_FLYER_JOINT, JOINT_FREEFLYER, JOINT_PRISMATIC, JOINT_REVOLUTE, bundled_urdf  # noqa: E402
from rbd_deriv.core.model import Data, Model, load_urdf  # noqa: E402
from rbd_deriv.core.kinematics import forward_kinematics, frame_placement  # noqa: E402
from rbd_deriv.core.configuration import (  # noqa: E402
    difference,
    dintegrate_dq,
    dintegrate_dv,
    integrate,
    neutral,
    random_configuration,
)
from rbd_deriv.core.rnea import gravity_torques, nonlinear_effects, rnea, rnea_batch  # noqa: E402
from rbd_deriv.core.crba import crba  # noqa: E402
from rbd_deriv.core.aba import aba, aba_batch  # noqa: E402
from rbd_deriv.core.minverse import minverse  # noqa: E402
from rbd_deriv.core.rnea_derivatives import rnea_derivatives, rnea_derivatives_batch  # noqa: E402
from rbd_deriv.core.aba_derivatives import aba_derivatives, aba_derivatives_batch  # noqa: E402
from rbd_deriv.core.frames import (  # noqa: E402
    center_of_mass,
    com_jacobian,
    frame_acceleration,
    frame_acceleration_derivatives,
    frame_classical_acceleration,
    frame_jacobian,
    frame_velocity,
    frame_velocity_derivatives,
)
from rbd_deriv.core.contact import (  # noqa: E402
    Contact,
    ContactData,
    contact_dynamics,
    contact_dynamics_derivatives,
    contact_forces,
    impulse_dynamics,
    impulse_dynamics_derivatives,
    linearize,
    linearize_batch,
)

__all__ = [
    "Data", "Model", "load_urdf", "bundled_urdf", "InputError", "ModelError", "RbdDerivError", "URDFError",
    "FREE_FLYER_JOINT", "JOINT_FREEFLYER", "JOINT_PRISMATIC", "JOINT_REVOLUTE",
    "forward_kinematics", "frame_placement", "neutral", "integrate", "difference", "random_configuration",
    "dintegrate_dq", "dintegrate_dv", "rnea", "nonlinear_effects", "gravity_torques", "crba", "aba", "minverse",
    "rnea_derivatives", "aba_derivatives", "linearize",
    "rnea_batch", "aba_batch", "rnea_derivatives_batch", "aba_derivatives_batch", "linearize_batch",
    "Contact", "ContactData", "contact_dynamics", "contact_dynamics_derivatives", "contact_forces",
    "impulse_dynamics", "impulse_dynamics_derivatives", "frame_jacobian", "frame_velocity", "frame_acceleration",
    "frame_classical_acceleration", "frame_velocity_derivatives", "frame_acceleration_derivatives",
    "center_of_mass", "com_jacobian",
]
