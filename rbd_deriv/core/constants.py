"""Tunable constants and tolerances of the core, in one place (their measurements: docs/performance.md)."""

import numpy as np

#: numba options of every compiled function: cached machine code; no GIL, so other Python threads run during
#: a call; fastmath limited to contraction and reassociation (FMA, reordered sums), which moves results by
#: rounding only, never the handling of NaN or inf that the input checks rely on; and no reference counting
#: (numba's _nrt option): the kernels allocate nothing and only take views of arrays their caller holds, so the
#: increments and decrements numba would emit for every view taken in a loop are pure cost, a large share of
#: the small robots' calls. The few functions that allocate (numpy temporaries, BLAS) keep it.
JIT_OPTIONS = dict(cache=True, nogil=True, _nrt=False, fastmath={"contract", "reassoc", "nsz", "arcp"},
                   error_model="numpy")

#: JIT_OPTIONS for a function that allocates arrays or calls BLAS.
JIT_OPTIONS_ALLOCATING = dict(JIT_OPTIONS, _nrt=True)

#: Type of the bounds of a hot inner loop, ``for j in range(UINT(a), UINT(b))``: numba checks every signed
#: index for wraparound (a negative index counts from the end), a branch per access that also keeps LLVM from
#: vectorizing the loop; an unsigned index is used as it is. Such a loop variable only indexes: mixed with
#: signed integers in arithmetic, numba would compute in floating point.
UINT = np.uintp

#: A quaternion whose norm differs from 1 by more than this is refused; below it, it is normalized (a
#: joint_states round trip through float32 stays well within it).
QUATERNION_TOLERANCE = 1e-6

#: Joint axes shorter than this [-] are refused as zero axes: normalizing them would amplify noise.
AXIS_TOLERANCE = 1e-12

#: Relative tolerance on negative eigenvalues of a URDF rotational inertia: rounding in the file, not a
#: physically negative inertia.
INERTIA_TOLERANCE = 1e-12

#: A joint whose D = S^T I^A S + armature (the inertia its subtree opposes to its motion) is at or below this
#: [kg m^2 or kg] makes the mass matrix singular: ABA, M^-1 and what needs them raise ModelError naming it.
SINGULAR_INERTIA = 1e-12

#: Below this rotation angle [rad] the exponential-map coefficients of SO(3) use their Taylor series, whose
#: truncation error there is below the rounding error of the closed forms.
SMALL_ANGLE = 1e-2

#: The coefficients of the SE(3) Jacobian (Q block) cancel more: Taylor series up to this angle [rad].
SMALL_ANGLE_JACOBIAN = 0.3

#: The extension's batch workers, between batches (times from the end of the last one): they spin for
#: BATCH_WORKER_SPIN, longer while batches keep coming (twice the longest of the last eight intervals, at most
#: BATCH_WORKER_SPIN_MAX); then look for a batch every BATCH_WORKER_POLL until BATCH_WORKER_STEADY (or four
#: times the last batch's duration); then after sleeps twice as long each time until BATCH_WORKER_LINGER;
#: then sleep until a batch wakes them. Waking a sleeping thread costs the caller a system call, which the
#: polling spares a controller's periodic tick; spinning long after a lone batch would take the core the
#: caller's next work needs.
BATCH_WORKER_SPIN = 2e-4
BATCH_WORKER_SPIN_MAX = 3e-3
BATCH_WORKER_POLL = 2e-4
BATCH_WORKER_STEADY = 3e-3
BATCH_WORKER_LINGER = 0.05

#: Finite bound used by random_configuration where the URDF gives no position limit: free-flyer
#: translation in [-bound, bound] [m]; continuous joints use [-pi, pi].
RANDOM_TRANSLATION_BOUND = 1.0
