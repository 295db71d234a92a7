"""Tunable constants and tolerances, in one place."""

#: A quaternion whose norm differs from 1 by more than this is refused; below it, it is normalized.
QUATERNION_TOLERANCE = 1e-6

#: Joint axes shorter than this [-] are refused as zero axes.
AXIS_TOLERANCE = 1e-12

#: Relative tolerance on negative eigenvalues of a URDF rotational inertia.
INERTIA_TOLERANCE = 1e-12

#: A joint whose supported subtree gives S^T I^C S below this [kg m^2 or kg] makes the mass matrix singular.
SINGULAR_INERTIA = 1e-12

#: Below this rotation angle [rad] the exponential-map coefficients of SO(3) use their Taylor series.
SMALL_ANGLE = 1e-2

#: The coefficients of the SE(3) Jacobian (Q block) cancel more: Taylor series up to this angle [rad].
SMALL_ANGLE_JACOBIAN = 0.3

#: Batched calls with fewer (states x dofs) than this run on the calling thread instead of numba's workers.
#: Measured on the 2-core machine, 32 ur5 states (192): serial 123-155 us per call; threaded 239 us with
#: OpenMP's default wait policy, 106 us when the workers spin (GOMP_SPINCOUNT=300000) and calls come back
#: to back, but 455-498 us (p90 up to 987) against 416-421 us (p90 523-548) after 5 ms idle, a controller's tick.
PARALLEL_MIN_WORK = 1024

#: Finite bound used by random_configuration where the URDF gives no position limit: free-flyer
#: translation in [-bound, bound] [m]; continuous joints use [-pi, pi].
RANDOM_TRANSLATION_BOUND = 1.0
