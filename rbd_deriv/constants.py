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

#: Without the C extension (numba's prange runs the batches): batched calls with fewer (states x dofs) than
#: this run on the calling thread. Measured on the 2-core machine, 32 ur5 states (192): serial 123-155 us per
#: call; threaded 239 us with OpenMP's default wait policy, 106 us when the workers spin (GOMP_SPINCOUNT=300000)
#: and calls come back to back, but 455-498 us (p90 up to 987) against 416-421 us (p90 523-548) after 5 ms
#: idle, a controller's tick: prange's caller waits for every worker to wake.
PARALLEL_MIN_WORK = 1024

#: The C extension's batch workers, between batches (times from the end of the last one): they spin for
#: BATCH_WORKER_SPIN, so that batches that come back to back (a bag replay) find them awake; then look for a
#: batch every BATCH_WORKER_POLL until BATCH_WORKER_STEADY, or four times the last batch's duration if
#: longer (an MPC's next iteration, after its QP solve; the next of a run of long batches);
#: then after sleeps twice as long each time until BATCH_WORKER_LINGER; then sleep until a batch wakes them.
#: A batch never waits for a worker (the calling thread takes part), but waking a sleeping one costs the
#: caller a system call: on this 2-core VM 17 us typically and 0.5 ms at p90 after 5 ms idle. Polling
#: spares a controller's tick that cost. Measured on ur5 (32 states of aba_derivatives every 10 ms, 2 s):
#: the process used 6.1 % of a core with threads, 4.8 % without, with polls doubling from 100 us.
BATCH_WORKER_SPIN = 2e-4
BATCH_WORKER_POLL = 2e-4
BATCH_WORKER_STEADY = 3e-3
BATCH_WORKER_LINGER = 0.05

#: Finite bound used by random_configuration where the URDF gives no position limit: free-flyer
#: translation in [-bound, bound] [m]; continuous joints use [-pi, pi].
RANDOM_TRANSLATION_BOUND = 1.0
