/* Calling the compiled kernels from Python without numba's dispatcher.
 *
 * numba's dispatcher types every argument and unboxes every array on each call: about 0.1-0.2 us per
 * array, close to 1 us for a kernel of four arrays. That is more than a whole forward kinematics of a
 * six-joint arm. A Kernel object holds the address of a numba cfunc of the fixed C signature
 *
 *     int64_t kernel(void **data, int64_t *dims)
 *
 * (see rbd_deriv/native.py) and the expected type of each argument, one letter per argument:
 *
 *     'i' int64 array, 'f' float64 array, 'b' bool array, each followed by its number of dimensions
 *     (1-3); 'F' a float64 array the kernel writes (the workspace, an output); 'd' a float (passed as a
 *     pointer to a double).
 *
 * A call checks every argument against its letter (an ndarray of that dtype, native byte order, aligned,
 * C-contiguous, that many dimensions; writable for 'F'), writes its data pointer into data[k] and its
 * shape into dims[3k..3k+2] (missing dimensions are 1), releases the GIL and calls the kernel. A read-only
 * array whose memory overlaps a written one (a result view of the same Data given back as an input) is
 * refused too: the kernel would overwrite it while reading it. Shapes are not checked here: the kernels
 * check them and return a status. Anything refused raises TypeError, which the Python wrappers catch to
 * convert (copy) the arguments, as they do for numba's dispatcher.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#define MAX_ARGS 12

typedef int64_t (*kernel_fn)(void **data, int64_t *dims);

typedef struct {
    PyObject_HEAD
    kernel_fn fn;
    Py_ssize_t nargs;
    char kind[MAX_ARGS];  /* 'i', 'f', 'b', 'F' or 'd' */
    int ndim[MAX_ARGS];
    vectorcallfunc vectorcall;
} KernelObject;

static int expected_type(char kind)
{
    return kind == 'i' ? NPY_INT64 : (kind == 'f' || kind == 'F') ? NPY_FLOAT64 : NPY_BOOL;
}

static const char *type_name(char kind)
{
    return kind == 'i' ? "int64" : kind == 'b' ? "bool" : kind == 'F' ? "writable float64" : "float64";
}

/* True when the memory of a (read-only, not written by the kernel) overlaps that of a written argument. */
static int overlaps_written(KernelObject *self, PyArrayObject *const *arrays, Py_ssize_t nargs, PyArrayObject *a)
{
    const char *lo = PyArray_BYTES(a), *hi = lo + PyArray_NBYTES(a);
    for (Py_ssize_t k = 0; k < nargs; ++k) {
        if (self->kind[k] != 'F')
            continue;
        const char *wlo = PyArray_BYTES(arrays[k]), *whi = wlo + PyArray_NBYTES(arrays[k]);
        if (lo < whi && wlo < hi)
            return 1;
    }
    return 0;
}

static PyObject *kernel_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    KernelObject *self = (KernelObject *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    void *data[MAX_ARGS];
    int64_t dims[3 * MAX_ARGS];
    double scalars[MAX_ARGS];
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "kernel arguments are positional");
        return NULL;
    }
    if (nargs != self->nargs) {
        PyErr_Format(PyExc_TypeError, "kernel takes %zd arguments, got %zd", self->nargs, nargs);
        return NULL;
    }
    PyArrayObject *arrays[MAX_ARGS];
    for (Py_ssize_t k = 0; k < nargs; ++k) {
        PyObject *arg = args[k];
        arrays[k] = NULL;
        dims[3 * k] = dims[3 * k + 1] = dims[3 * k + 2] = 1;
        if (self->kind[k] == 'd') {
            scalars[k] = PyFloat_AsDouble(arg);
            if (scalars[k] == -1.0 && PyErr_Occurred())
                return NULL;
            data[k] = &scalars[k];
            continue;
        }
        if (!PyArray_Check(arg))
            goto wrong_type;
        PyArrayObject *array = (PyArrayObject *)arg;
        if (PyArray_TYPE(array) != expected_type(self->kind[k]) || PyArray_NDIM(array) != self->ndim[k]
            || !PyArray_ISBEHAVED_RO(array) || !PyArray_IS_C_CONTIGUOUS(array)
            || (self->kind[k] == 'F' && !PyArray_ISWRITEABLE(array)))
            goto wrong_type;
        arrays[k] = array;
        data[k] = PyArray_DATA(array);
        const npy_intp *shape = PyArray_DIMS(array);
        for (int d = 0; d < self->ndim[k]; ++d)
            dims[3 * k + d] = (int64_t)shape[d];
        continue;
    wrong_type:
        PyErr_Format(PyExc_TypeError, "kernel argument %zd: expected a C-contiguous %s array of %d dimension(s)",
                     k, type_name(self->kind[k]), self->ndim[k]);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < nargs; ++k) {
        if (arrays[k] != NULL && self->kind[k] != 'F' && !PyArray_ISWRITEABLE(arrays[k])
            && overlaps_written(self, arrays, nargs, arrays[k])) {
            PyErr_Format(PyExc_TypeError, "kernel argument %zd: a read-only view of memory the kernel writes", k);
            return NULL;
        }
    }
    int64_t status;
    Py_BEGIN_ALLOW_THREADS
    status = self->fn(data, dims);
    Py_END_ALLOW_THREADS
    return PyLong_FromLongLong((long long)status);
}

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *address;
    const char *spec;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Kernel(address, spec) takes positional arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Os:Kernel", &address, &spec))
        return NULL;
    void *fn = PyLong_AsVoidPtr(address);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Kernel: null address");
        return NULL;
    }
    KernelObject *self = (KernelObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fn = (kernel_fn)fn;
    self->nargs = 0;
    self->vectorcall = kernel_vectorcall;
    for (const char *c = spec; *c != '\0'; ++c) {
        if (self->nargs == MAX_ARGS)
            goto bad_spec;
        char kind = *c;
        if (kind == 'd') {
            self->kind[self->nargs] = kind;
            self->ndim[self->nargs++] = 0;
            continue;
        }
        if ((kind != 'i' && kind != 'f' && kind != 'b' && kind != 'F') || c[1] < '1' || c[1] > '3')
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

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rbd_deriv._kernelcall.Kernel",
    .tp_doc = "Kernel(address, spec): a numba cfunc int64(void**, int64*) called with checked ndarrays.",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = kernel_new,
    .tp_call = kernel_call,
    .tp_vectorcall_offset = offsetof(KernelObject, vectorcall),
};

static struct PyModuleDef kernelcall_module = {
    PyModuleDef_HEAD_INIT, "_kernelcall", "Direct calls of the compiled kernels (see rbd_deriv.native).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernelcall(void)
{
    import_array();
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
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
