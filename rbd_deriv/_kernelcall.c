/* Calling the compiled kernels from Python without numba's dispatcher.
 *
 * numba's dispatcher types every argument and unboxes every array on each call: about 0.1-0.2 us per
 * array, close to 1 us for a kernel of four arrays, more than a whole forward kinematics of a six-joint
 * arm. A Kernel object holds the address of a kernel's C entry, a numba cfunc of the fixed signature
 *
 *     int64_t entry(void **data, int64_t *dims)
 *
 * (or a callable that gives the address at the first call: a kernel compiled when first needed), and the
 * kernel's argument spec, one letter (and digit) per argument: the grammar, with what each letter
 * means, is in rbd_deriv/core/calling.py. A call checks every argument against its letter (an ndarray of
 * that dtype, native byte order, aligned, C-contiguous, that many dimensions, writable if the kernel writes
 * it; a Python float or int for a scalar), writes its data pointer into data[k] and its shape into
 * dims[3k..3k+2] (missing dimensions are 1), releases the GIL (unless the Kernel was made for a kernel of a
 * few microseconds, which would not give another thread time to run) and calls the entry. A read-only array whose
 * memory overlaps a written one is refused too: the kernel would overwrite it while reading it. Shapes are
 * not checked here: the kernels check them and return a status. Anything refused raises TypeError, which the
 * Python callers catch to convert the arguments. (An 'n' that sizes an 'N' array and is negative or too
 * large raises ValueError or OverflowError instead: the callers pass model sizes there.)
 *
 * parallel(kernel, count, threads, status, *arguments) runs a kernel over `count` items (the states of a
 * batch) on the calling thread and on up to threads - 1 worker threads of this module; see the part
 * "Batches over worker threads" below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <sched.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#define MAX_ARGS 24

typedef int64_t (*kernel_fn)(void **data, int64_t *dims);

typedef struct {
    PyObject_HEAD
    kernel_fn fn;          /* NULL until `resolver` has given the address */
    PyObject *resolver;    /* a callable returning the address (a kernel compiled at its first call), or NULL */
    int release_gil;       /* 0 for kernels of a few microseconds: the release and the retake would cost more */
    Py_ssize_t nargs;
    char kind[MAX_ARGS];  /* 'i', 'f', 'b', 'F', 'I', 'W', 'd', 'n' or 'N' */
    int ndim[MAX_ARGS];
    int new_at, new_like;  /* position of the 'N' argument (-1: none) and of the argument it is shaped like */
    vectorcallfunc vectorcall;
} KernelObject;

static int expected_type(char kind)
{
    return (kind == 'i' || kind == 'I') ? NPY_INT64 : (kind == 'f' || kind == 'F' || kind == 'W') ? NPY_FLOAT64
                                                                                                   : NPY_BOOL;
}

static int written(char kind)
{
    return kind == 'F' || kind == 'I' || kind == 'W' || kind == 'N';
}

static const char *type_name(char kind)
{
    return kind == 'i' ? "int64" : kind == 'I' ? "writable int64" : kind == 'b' ? "bool"
         : (kind == 'F' || kind == 'W') ? "writable float64" : "float64";
}

/* The scalar arguments' values, which data[k] points at during a call. */
typedef union {
    double real;
    int64_t integer;
} Scalar;

/* True when the memory of a (read-only, not written by the kernel) overlaps that of a written argument. */
static int overlaps_written(KernelObject *self, PyArrayObject *const *arrays, Py_ssize_t nargs, PyArrayObject *a)
{
    const char *lo = PyArray_BYTES(a), *hi = lo + PyArray_NBYTES(a);
    for (Py_ssize_t k = 0; k < nargs; ++k) {
        if (!written(self->kind[k]) || arrays[k] == NULL)  /* an 'N' array is made after this check */
            continue;
        const char *wlo = PyArray_BYTES(arrays[k]), *whi = wlo + PyArray_NBYTES(arrays[k]);
        if (lo < whi && wlo < hi)
            return 1;
    }
    return 0;
}

/* How a batch gives an argument (see "Batches over worker threads"): per item, per thread, or shared. */
typedef struct {
    int64_t count, threads;  /* count < 0: a single call */
    int64_t item_stride[MAX_ARGS], slot_stride[MAX_ARGS];  /* bytes from one item's (thread's) data to the next */
} Lifting;

/* Check the arguments against the kernel's spec and fill data and dims (see the top of this file). With an
 * 'N' in the spec, `created` receives the new array (a new reference); batches pass NULL, and such a kernel
 * is refused. With `lifting` (a batch), an array may have one more leading dimension (see parallel()).
 * Returns 0, or -1 with an exception set (and nothing created). */
static int fill_arguments(KernelObject *self, PyObject *const *args, Py_ssize_t nargs, void **data, int64_t *dims,
                          Scalar *scalars, PyArrayObject **created, Lifting *lifting)
{
    Py_ssize_t expected = self->nargs - (self->new_at >= 0);
    if (self->new_at >= 0 && created == NULL) {
        PyErr_SetString(PyExc_TypeError, "this kernel returns a new array: call it directly");
        return -1;
    }
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "kernel takes %zd arguments, got %zd", expected, nargs);
        return -1;
    }
    PyArrayObject *arrays[MAX_ARGS];
    for (Py_ssize_t k = 0, p = 0; k < self->nargs; ++k) {
        char kind = self->kind[k];
        arrays[k] = NULL;
        dims[3 * k] = dims[3 * k + 1] = dims[3 * k + 2] = 1;
        if (lifting != NULL)
            lifting->item_stride[k] = lifting->slot_stride[k] = 0;
        if (kind == 'N')
            continue;  /* made below, once every argument is known to be good */
        PyObject *arg = args[p++];
        if (kind == 'd') {
            scalars[k].real = PyFloat_AsDouble(arg);
            if (scalars[k].real == -1.0 && PyErr_Occurred())
                return -1;
            data[k] = &scalars[k];
            continue;
        }
        if (kind == 'n') {
            if (!PyLong_Check(arg)) {
                PyErr_Format(PyExc_TypeError, "kernel argument %zd: expected an int", p - 1);
                return -1;
            }
            scalars[k].integer = PyLong_AsLongLong(arg);
            if (scalars[k].integer == -1 && PyErr_Occurred())
                return -1;
            data[k] = &scalars[k];
            continue;
        }
        if (!PyArray_Check(arg))
            goto wrong_type;
        PyArrayObject *array = (PyArrayObject *)arg;
        int ndim = PyArray_NDIM(array), first = 0;  /* first: the dimension one item's shape starts at */
        const npy_intp *shape = PyArray_DIMS(array);
        if (PyArray_TYPE(array) != expected_type(kind) || !PyArray_ISBEHAVED_RO(array)
            || !PyArray_IS_C_CONTIGUOUS(array) || (written(kind) && !PyArray_ISWRITEABLE(array)))
            goto wrong_type;
        if (lifting != NULL && kind == 'W') {  /* one row per thread */
            if (ndim != 2 || shape[0] < lifting->threads)
                goto wrong_batch;
            lifting->slot_stride[k] = (int64_t)PyArray_STRIDES(array)[0];
            first = 1;
        } else if (lifting != NULL && ndim == self->ndim[k] + 1) {  /* one row per item */
            if (shape[0] != lifting->count)
                goto wrong_batch;
            lifting->item_stride[k] = (int64_t)PyArray_STRIDES(array)[0];
            first = 1;
        } else if (ndim != self->ndim[k]) {
            goto wrong_type;
        } else if (lifting != NULL && written(kind)) {  /* shared by all items: only inputs may be */
            goto wrong_batch;
        }
        arrays[k] = array;
        data[k] = PyArray_DATA(array);
        for (int d = first; d < ndim; ++d)
            dims[3 * k + d - first] = (int64_t)shape[d];
        continue;
    wrong_type:
        PyErr_Format(PyExc_TypeError, "kernel argument %zd: expected a C-contiguous %s array of %d dimension(s)",
                     p - 1, type_name(kind), self->ndim[k]);
        return -1;
    wrong_batch:
        PyErr_Format(PyExc_TypeError, "kernel argument %zd: a batch takes %s", p - 1,
                     kind == 'W' ? "one workspace row per thread" : written(kind) ? "one output row per item"
                                                                       : "one row per item, or one for all");
        return -1;
    }
    for (Py_ssize_t k = 0; k < self->nargs; ++k) {
        if (arrays[k] != NULL && !written(self->kind[k]) && !PyArray_ISWRITEABLE(arrays[k])
            && overlaps_written(self, arrays, self->nargs, arrays[k])) {
            PyErr_Format(PyExc_TypeError, "kernel argument %zd: a read-only view of memory the kernel writes",
                         k - (self->new_at >= 0 && k > self->new_at));
            return -1;
        }
    }
    if (self->new_at >= 0) {
        int k = self->new_at, ndim = self->ndim[k];
        npy_intp shape[3];
        if (self->kind[self->new_like] == 'n') {
            shape[0] = (npy_intp)scalars[self->new_like].integer;
            if (shape[0] < 0) {
                PyErr_Format(PyExc_ValueError, "kernel argument %d: a negative length", self->new_like);
                return -1;
            }
        } else {
            for (int d = 0; d < ndim; ++d)
                shape[d] = PyArray_DIMS(arrays[self->new_like])[d];
        }
        PyArrayObject *array = (PyArrayObject *)PyArray_SimpleNew(ndim, shape, NPY_FLOAT64);
        if (array == NULL)
            return -1;
        data[k] = PyArray_DATA(array);
        for (int d = 0; d < ndim; ++d)
            dims[3 * k + d] = (int64_t)shape[d];
        *created = array;
    }
    return 0;
}

static int no_keywords(PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "kernel arguments are positional");
        return -1;
    }
    return 0;
}

/* The entry's address from the resolver, at the first call (with the GIL). Returns 0, or -1 with an
 * exception set. */
static int resolve(KernelObject *self)
{
    if (self->fn != NULL)
        return 0;
    PyObject *address = PyObject_CallNoArgs(self->resolver);
    if (address == NULL)
        return -1;
    void *fn = PyLong_AsVoidPtr(address);
    Py_DECREF(address);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Kernel: the resolver gave a null address");
        return -1;
    }
    self->fn = (kernel_fn)fn;
    Py_CLEAR(self->resolver);
    return 0;
}

static PyObject *kernel_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    KernelObject *self = (KernelObject *)callable;
    if (self->fn == NULL && resolve(self) < 0)
        return NULL;
    void *data[MAX_ARGS];
    int64_t dims[3 * MAX_ARGS];
    Scalar scalars[MAX_ARGS];
    PyArrayObject *created = NULL;
    if (no_keywords(kwnames) < 0
        || fill_arguments(self, args, PyVectorcall_NARGS(nargsf), data, dims, scalars, &created, NULL) < 0)
        return NULL;
    int64_t status;
    if (self->release_gil) {
        Py_BEGIN_ALLOW_THREADS
        status = self->fn(data, dims);
        Py_END_ALLOW_THREADS
    } else {
        status = self->fn(data, dims);
    }
    if (created != NULL) {
        if (status == 0)
            return (PyObject *)created;
        Py_DECREF(created);
    }
    return PyLong_FromLongLong((long long)status);
}

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *address;
    const char *spec;
    int release_gil = 1;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Kernel(address, spec, release_gil=True) takes positional arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Os|p:Kernel", &address, &spec, &release_gil))
        return NULL;
    void *fn = NULL;
    if (!PyCallable_Check(address)) {
        fn = PyLong_AsVoidPtr(address);
        if (fn == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "Kernel: null address");
            return NULL;
        }
    }
    KernelObject *self = (KernelObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fn = (kernel_fn)fn;
    self->release_gil = release_gil;
    self->resolver = NULL;
    if (fn == NULL) {
        Py_INCREF(address);
        self->resolver = address;
    }
    self->nargs = 0;
    self->new_at = self->new_like = -1;
    self->vectorcall = kernel_vectorcall;
    for (const char *c = spec; *c != '\0'; ++c) {
        if (self->nargs == MAX_ARGS)
            goto bad_spec;
        char kind = *c;
        if (kind == 'N') {  /* a new array shaped like the earlier array argument c[1] */
            int like = c[1] - '0';
            if (self->new_at >= 0 || like < 0 || like >= self->nargs || self->kind[like] == 'd'
                || self->kind[like] == 'W')
                goto bad_spec;
            self->new_at = (int)self->nargs;
            self->new_like = like;
            self->kind[self->nargs] = kind;
            self->ndim[self->nargs++] = self->kind[like] == 'n' ? 1 : self->ndim[like];
            ++c;
            continue;
        }
        if (kind == 'd' || kind == 'n') {
            self->kind[self->nargs] = kind;
            self->ndim[self->nargs++] = 0;
            continue;
        }
        if (kind == 'W') {  /* the workspace: a float64 (n,) array the kernel writes */
            self->kind[self->nargs] = kind;
            self->ndim[self->nargs++] = 1;
            continue;
        }
        if ((kind != 'i' && kind != 'f' && kind != 'b' && kind != 'F' && kind != 'I') || c[1] < '1' || c[1] > '3')
            goto bad_spec;
        self->kind[self->nargs] = kind;
        self->ndim[self->nargs++] = c[1] - '0';
        ++c;
    }
    return (PyObject *)self;
bad_spec:
    Py_DECREF(self);
    PyErr_Format(PyExc_ValueError, "Kernel: bad argument spec %R", PyTuple_GET_ITEM(args, 1));
    return NULL;
}

static PyObject *kernel_call(PyObject *self, PyObject *args, PyObject *kwds)
{
    return PyVectorcall_Call(self, args, kwds);
}

static void kernel_dealloc(PyObject *self)
{
    Py_CLEAR(((KernelObject *)self)->resolver);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rbd_deriv._kernelcall.Kernel",
    .tp_doc = "Kernel(address, spec, release_gil=True): a numba cfunc int64(void**, int64*) called with checked "
              "ndarrays, without the GIL unless release_gil is false. The address may be given by a callable, called "
              "at the first call (a kernel compiled when first needed).",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = kernel_new,
    .tp_dealloc = kernel_dealloc,
    .tp_call = kernel_call,
    .tp_vectorcall_offset = offsetof(KernelObject, vectorcall),
};

/* ---- Batches over worker threads ----------------------------------------------------------------------
 *
 * parallel(kernel, count, threads, status, *arguments) calls the kernel once per item k < count, each call
 * checked as a single call would be, with these arguments: an array given with one more leading dimension
 * of length `count` is per item (item k gets row k); the workspace ('W') is given as a (threads or more, n)
 * array, and each thread uses its own row; an input given as for a single call is shared by all items.
 * status[k] (an int64 (count,) array) receives item k's status. Items are handed out one at a time from a
 * shared counter, and the calling thread takes part, so a worker that is slow to wake only means the caller
 * does more of the items: a batch is never much slower than on the calling thread alone. A worker that
 * other work descheduled in the middle of an item holds the caller until it is back; when the caller waited
 * that long, the next few batches run on the calling thread alone (see run_batch).
 *
 * The workers (threads - 1 of them at most, started on first use and kept) spin for a while after a batch,
 * so that batches that keep coming find them awake, then poll, then sleep on a condition variable (see
 * note_batch_start and wait_for_batch; the times are rbd_deriv.core.constants.BATCH_WORKER_*). One batch runs
 * over the workers at a time; a concurrent call runs on its own thread.
 *
 * A batch is published as a new value of `state` (generation * 2 + 1, "open") and closed by clearing the
 * low bit. A worker joins by incrementing `active` and reading `state` again; the caller, having closed the
 * batch, waits until `active` is back to 0. With sequentially consistent atomics either the worker sees the
 * batch closed and leaves, or the caller sees the worker and waits for it: the batch's arguments, on the
 * caller's stack, are never read after parallel() returns.
 */

#define MAX_WORKERS 63
#define STEADY_BATCHES 4.0
#define RECENT_BATCHES 8
#define STRAGGLER_ITEMS 4.0
#define STRAGGLER_SECONDS 5e-4
#define SOLO_BATCHES 4

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct {
    kernel_fn fn;
    Py_ssize_t nargs;
    void **data;       /* item 0's arguments on thread slot 0 */
    int64_t *dims;
    const Lifting *lifting;
    int64_t *status;   /* one per item */
    int64_t count, threads;
    atomic_llong next;    /* next item to hand out */
    atomic_llong slots;   /* next workspace slot for a worker (slot 0 is the caller's) */
    atomic_llong failed;  /* first nonzero status a kernel call returned */
} Batch;

static struct {
    pthread_mutex_t busy;   /* held by the caller of the batch in flight */
    pthread_mutex_t lock;   /* protects sleepers, with `wake` */
    pthread_cond_t wake;
    int sleepers;
    int workers;
    int refused;            /* pthread_create failed once: no more workers are started */
    int solo;               /* coming batches to run on the calling thread alone (under `busy`) */
    atomic_ullong state;    /* generation * 2 + (1 while the batch is open) */
    atomic_int active;      /* workers inside the current batch */
    _Atomic double spin_seconds, spin_max_seconds, poll_seconds, steady_seconds, linger_seconds;
    _Atomic double last_batch_seconds;
    _Atomic double spin_hint_seconds;  /* how long workers spin after this batch (see note_batch_start) */
    double starts[RECENT_BATCHES];     /* start times of the last batches, a ring (under `busy`) */
    int next_start;
    Batch batch;
} pool = {
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .spin_seconds = 2e-4,
    .spin_max_seconds = 3e-3,
    .poll_seconds = 2e-4,
    .steady_seconds = 3e-3,
    .linger_seconds = 0.05,
};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Take items until none is left, one at a time, with the workspace row of `slot`; return how many. */
static long long run_items(Batch *batch, long long slot)
{
    long long taken = 0;
    void *data[MAX_ARGS];
    char *first[MAX_ARGS];  /* item 0's data on this thread */
    const Lifting *lifting = batch->lifting;
    for (Py_ssize_t k = 0; k < batch->nargs; ++k)
        first[k] = (char *)batch->data[k] + slot * lifting->slot_stride[k];
    for (;;) {
        long long item = atomic_fetch_add(&batch->next, 1);
        if (item >= batch->count)
            return taken;
        ++taken;
        for (Py_ssize_t k = 0; k < batch->nargs; ++k)
            data[k] = first[k] + item * lifting->item_stride[k];
        int64_t status = batch->fn(data, batch->dims);
        batch->status[item] = status;
        if (status != 0) {
            long long none = 0;
            atomic_compare_exchange_strong(&batch->failed, &none, (long long)status);
        }
    }
}

static int batch_is_new(unsigned long long state, unsigned long long seen)
{
    return state != seen && (state & 1u);
}

/* Wait until a batch other than `seen` is open; return its state. Times count from the call (the end of
 * this worker's share of the last batch):
 *   1. spin for spin_seconds, or for spin_hint_seconds if note_batch_start set it longer;
 *   2. look after sleeps of poll_seconds, until steady_seconds or STEADY_BATCHES times the last batch's
 *      duration, whichever is longer (an MPC's next iteration after its QP solve; the next long batch);
 *   3. look after sleeps twice as long each time, until linger_seconds;
 *   4. sleep until a batch wakes the worker.
 * A worker that polls needs no wake-up. Waking a sleeping thread costs its waker a system call, which on a
 * virtual machine can take longer than a whole batch (docs/performance.md). */
static unsigned long long wait_for_batch(unsigned long long seen)
{
    unsigned long long state;
    double start = now_seconds();
    double last = atomic_load(&pool.last_batch_seconds);
    double spin = atomic_load(&pool.spin_seconds), spin_long = atomic_load(&pool.spin_hint_seconds);
    double spin_end = start + (spin > spin_long ? spin : spin_long);
    for (unsigned spins = 1;; ++spins) {
        if (batch_is_new(state = atomic_load(&pool.state), seen))
            return state;
        CPU_RELAX();
        if ((spins & 255u) == 0 && now_seconds() > spin_end)
            break;
    }
    double poll = atomic_load(&pool.poll_seconds);
    double linger_end = start + atomic_load(&pool.linger_seconds);
    double steady = atomic_load(&pool.steady_seconds);
    double steady_end = start + (steady > STEADY_BATCHES * last ? steady : STEADY_BATCHES * last);
    for (double now = now_seconds(); poll > 0.0 && now < linger_end; now = now_seconds()) {
        if (now > steady_end)
            poll *= 2.0;
        struct timespec nap = {(time_t)poll, (long)((poll - (double)(time_t)poll) * 1e9)};
        nanosleep(&nap, NULL);
        if (batch_is_new(state = atomic_load(&pool.state), seen))
            return state;
    }
    pthread_mutex_lock(&pool.lock);
    ++pool.sleepers;
    while (!batch_is_new(state = atomic_load(&pool.state), seen))
        pthread_cond_wait(&pool.wake, &pool.lock);
    --pool.sleepers;
    pthread_mutex_unlock(&pool.lock);
    return state;
}

static void *worker_main(void *arg)
{
    unsigned long long seen = (unsigned long long)(uintptr_t)arg;
#ifdef __linux__
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  /* polls on time: 1 us of slack instead of 50 */
#endif
    for (;;) {
        unsigned long long state = wait_for_batch(seen);
        seen = state;
        atomic_fetch_add(&pool.active, 1);
        if (atomic_load(&pool.state) == state) {
            long long slot = atomic_fetch_add(&pool.batch.slots, 1);  /* slot 0 is the caller's */
            if (slot < pool.batch.threads)
                run_items(&pool.batch, slot);
        }
        atomic_fetch_sub(&pool.active, 1);
    }
    return NULL;
}

/* Start workers until there are `wanted` (fewer if the system refuses). Called with `busy` held. Workers
 * block every signal: signals go to the interpreter's threads. */
static void start_workers(int wanted)
{
    if (wanted > MAX_WORKERS)
        wanted = MAX_WORKERS;
    if (pool.workers >= wanted || pool.refused)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (pool.workers < wanted) {
        pthread_t thread;
        void *seen = (void *)(uintptr_t)atomic_load(&pool.state);
        if (pthread_create(&thread, &attr, worker_main, seen) != 0) {
            pool.refused = 1;  /* the system refuses threads: do with these, and stop asking */
            break;
        }
        ++pool.workers;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Record the start of a batch and set how long the workers spin after it. When the last RECENT_BATCHES
 * batches all came within spin_max_seconds of the one before (a replay, an MPC's iterations, a benchmark's
 * blocks), twice the longest of those intervals, at most spin_max_seconds; otherwise (a controller's tick
 * every few milliseconds) zero, which leaves spin_seconds. Spinning until a batch that comes only later
 * takes the core the caller needs in between, and so slows the next threaded batches (docs/performance.md). */
static void note_batch_start(double now)
{
    double longest = 0.0, later = now;
    for (int k = 1; k <= RECENT_BATCHES; ++k) {
        double earlier = pool.starts[(pool.next_start + RECENT_BATCHES - k) % RECENT_BATCHES];
        double gap = earlier > 0.0 ? later - earlier : 1e9;
        if (gap > longest)
            longest = gap;
        later = earlier;
    }
    pool.starts[pool.next_start] = now;
    pool.next_start = (pool.next_start + 1) % RECENT_BATCHES;
    double spin_max = atomic_load(&pool.spin_max_seconds);
    atomic_store(&pool.spin_hint_seconds, longest > spin_max ? 0.0 : 2.0 * longest < spin_max ? 2.0 * longest
                                                                                                : spin_max);
}

/* Run the batch on this thread and the workers. Called without the GIL, with `busy` held. */
static int64_t run_batch(const Batch *work)
{
    Batch *batch = &pool.batch;
    start_workers((int)(work->threads - 1));
    batch->fn = work->fn;
    batch->nargs = work->nargs;
    batch->data = work->data;
    batch->dims = work->dims;
    batch->lifting = work->lifting;
    batch->status = work->status;
    batch->count = work->count;
    batch->threads = work->threads;
    atomic_store(&batch->next, 0);
    atomic_store(&batch->slots, 1);
    atomic_store(&batch->failed, 0);
    unsigned long long open = (atomic_load(&pool.state) | 1u) + 2u;
    atomic_store(&pool.state, open);
    pthread_mutex_lock(&pool.lock);
    if (pool.sleepers > 0)
        pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    double start = now_seconds();
    note_batch_start(start);
    long long taken = run_items(batch, 0);
    double done = now_seconds();
    atomic_store(&pool.state, open & ~1ull);
    /* A worker inside finishes its item; one that was descheduled there gets this CPU after a while. */
    for (unsigned spins = 1; atomic_load(&pool.active) != 0; ++spins) {
        CPU_RELAX();
        if ((spins & 4095u) == 0)
            sched_yield();
    }
    double end = now_seconds();
    /* A worker that held its last item for more than STRAGGLER_ITEMS of the caller's items and more than
     * STRAGGLER_SECONDS was descheduled there (the machine's other work has its core; a worker that is merely
     * slower, on a core that was idle, costs an item or two): the next SOLO_BATCHES batches run on the calling
     * thread alone, which then costs what one thread costs instead of that wait, and the workers are tried
     * again. */
    double wait = end - done;
    if (taken > 0 && wait > STRAGGLER_SECONDS && wait > STRAGGLER_ITEMS * (done - start) / (double)taken)
        pool.solo = SOLO_BATCHES;
    atomic_store(&pool.last_batch_seconds, end - start);
    return (int64_t)atomic_load(&batch->failed);
}

/* After fork() only the forking thread exists: forget the workers and the locks' state. */
static void pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.sleepers = 0;
    pool.workers = 0;
    pool.refused = 0;
    pool.solo = 0;
    memset(pool.starts, 0, sizeof pool.starts);
    atomic_store(&pool.active, 0);
}

static PyObject *parallel(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 4 || !PyObject_TypeCheck(args[0], &KernelType)) {
        PyErr_SetString(PyExc_TypeError, "parallel(kernel, count, threads, status, *arguments)");
        return NULL;
    }
    KernelObject *self = (KernelObject *)args[0];
    if (self->fn == NULL && resolve(self) < 0)
        return NULL;
    long long count = PyLong_AsLongLong(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    long long threads = PyLong_AsLongLong(args[2]);
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0 || threads < 1) {
        PyErr_SetString(PyExc_ValueError, "parallel: count >= 0 and threads >= 1");
        return NULL;
    }
    PyArrayObject *statuses = (PyArrayObject *)args[3];
    if (!PyArray_Check(args[3]) || PyArray_TYPE(statuses) != NPY_INT64 || PyArray_NDIM(statuses) != 1
        || PyArray_DIM(statuses, 0) != count || !PyArray_ISBEHAVED(statuses) || !PyArray_IS_C_CONTIGUOUS(statuses)) {
        PyErr_SetString(PyExc_TypeError, "parallel: status must be a writable C-contiguous int64 (count,) array");
        return NULL;
    }
    if (threads > count)
        threads = count > 0 ? count : 1;
    void *data[MAX_ARGS];
    int64_t dims[3 * MAX_ARGS];
    Scalar scalars[MAX_ARGS];
    Lifting lifting = {.count = count, .threads = threads};
    if (fill_arguments(self, args + 4, nargs - 4, data, dims, scalars, NULL, &lifting) < 0)
        return NULL;
    Batch work = {.fn = self->fn, .nargs = self->nargs, .data = data, .dims = dims, .lifting = &lifting,
                  .status = (int64_t *)PyArray_DATA(statuses), .count = count, .threads = threads};
    atomic_init(&work.next, 0);
    atomic_init(&work.slots, 1);
    atomic_init(&work.failed, 0);
    int64_t status = 0;
    Py_BEGIN_ALLOW_THREADS
    if (threads > 1 && pthread_mutex_trylock(&pool.busy) == 0) {
        if (pool.solo > 0) {  /* a worker was held up lately (see run_batch) */
            --pool.solo;
            run_items(&work, 0);
            status = (int64_t)atomic_load(&work.failed);
        } else {
            status = run_batch(&work);
        }
        pthread_mutex_unlock(&pool.busy);
    } else {  /* alone, or another batch holds the workers: on this thread, with workspace row 0 */
        run_items(&work, 0);
        status = (int64_t)atomic_load(&work.failed);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong((long long)status);
}

static PyObject *set_worker_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    double seconds[5];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "set_worker_wait(spin_seconds, spin_max_seconds, poll_seconds, "
                                         "steady_seconds, linger_seconds)");
        return NULL;
    }
    for (int k = 0; k < 5; ++k) {
        seconds[k] = PyFloat_AsDouble(args[k]);
        if (seconds[k] == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(seconds[k] >= 0.0 && seconds[k] <= 10.0)) {
            PyErr_SetString(PyExc_ValueError, "set_worker_wait: each time in [0, 10] s");
            return NULL;
        }
    }
    atomic_store(&pool.spin_seconds, seconds[0]);
    atomic_store(&pool.spin_max_seconds, seconds[1]);
    atomic_store(&pool.poll_seconds, seconds[2]);
    atomic_store(&pool.steady_seconds, seconds[3]);
    atomic_store(&pool.linger_seconds, seconds[4]);
    Py_RETURN_NONE;
}

static PyObject *worker_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromLong(pool.workers);
}

static PyMethodDef kernelcall_methods[] = {
    {"parallel", (PyCFunction)(void (*)(void))parallel, METH_FASTCALL,
     "parallel(kernel, count, threads, status, *arguments) -> status: the kernel over count items on the "
     "calling thread and up to threads - 1 workers; status[k] receives item k's status (returns 0, or a "
     "nonzero status of a kernel call: the first in time, not necessarily that of the lowest item)."},
    {"set_worker_wait", (PyCFunction)(void (*)(void))set_worker_wait, METH_FASTCALL,
     "set_worker_wait(spin_seconds, spin_max_seconds, poll_seconds, steady_seconds, linger_seconds): idle "
     "workers spin (up to spin_max_seconds while batches keep coming), then look every poll_seconds until "
     "steady_seconds, then after sleeps doubling each time until linger_seconds after their last batch, "
     "then sleep until a batch wakes them (see rbd_deriv.constants)."},
    {"worker_count", worker_count, METH_NOARGS, "worker_count() -> the worker threads started so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernelcall_module = {
    PyModuleDef_HEAD_INIT, "_kernelcall", "Direct calls of the compiled kernels (see rbd_deriv.core.calling).", -1,
    kernelcall_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernelcall(void)
{
    import_array();
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    static int registered = 0;
    if (!registered && pthread_atfork(NULL, NULL, pool_after_fork_in_child) != 0) {
        PyErr_SetString(PyExc_OSError, "_kernelcall: pthread_atfork failed");
        return NULL;
    }
    registered = 1;
    PyObject *module = PyModule_Create(&kernelcall_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(module, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
