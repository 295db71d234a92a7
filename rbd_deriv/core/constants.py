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

#: The C extension's batch workers, between batches (times from the end of the last one):
#: 1. they spin for BATCH_WORKER_SPIN, or, while batches keep coming (each of the last eight within
#:    BATCH_WORKER_SPIN_MAX of the one before: a replay, an MPC's iterations), for twice the longest of those
#:    intervals, at most BATCH_WORKER_SPIN_MAX;
#: 2. then look for a batch every BATCH_WORKER_POLL until BATCH_WORKER_STEADY, or four times the last batch's
#:    duration if longer;
#: 3. then after sleeps twice as long each time, until BATCH_WORKER_LINGER;
#: 4. then sleep until a batch wakes them.
#: A batch never waits for a worker (the calling thread takes part), but waking a sleeping one costs the
#: caller a system call: on this 2-core VM 17 us typically and 0.5 ms at p90 after 5 ms idle, which steps 2
#: and 3 spare a controller's tick. Spinning long after every batch costs the tick too: 2 ms of spinning
#: after each ur5 batch every 5 ms took the p90 of its threaded batches from 0.6 to 1.7 ms, hence step 1's
#: rule. Measured on ur5, 32 states of aba_derivatives every 10 ms for 2 s: the process used 6.9 % of a
#: core with the worker, 5.4 % without.
BATCH_WORKER_SPIN = 2e-4
BATCH_WORKER_SPIN_MAX = 3e-3
BATCH_WORKER_POLL = 2e-4
BATCH_WORKER_STEADY = 3e-3
BATCH_WORKER_LINGER = 0.05

#: Finite bound used by random_configuration where the URDF gives no position limit: free-flyer
#: translation in [-bound, bound] [m]; continuous joints use [-pi, pi].
RANDOM_TRANSLATION_BOUND = 1.0
