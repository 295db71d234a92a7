"""The calling convention of the compiled kernels: how Python calls them, how they check, how they fail.

Every kernel is a numba function that checks its inputs, writes its results into its output arguments
(intermediates into the workspace) and returns a status: 0, or a code from :func:`status` that
:meth:`Registered.error` turns into an exception. An algorithm module writes its kernels and registers each:

    CRBA = register(_crba_kernel, "mi:i2 mf:f2 data:W q:f1 M:F2")

which compiles the kernel for the argument types of the spec, makes its C entry (a numba cfunc
``int64 entry(void **data, int64 *dims)``) and the Python callable ``CRBA.call``: a
``rbd_deriv._kernelcall.Kernel`` that checks each argument's dtype, dimensions and layout and hands the
entry its data pointer and shape, past numba's dispatcher (which costs about 0.1-0.2 us per array). The public
function binds it once as a module global (``_crba = CRBA.call``), the cheapest thing for Python to call. A
kernel registered with ``lazy=True`` is loaded from the kernel cache (or compiled, saying so on stderr) at its
first call, behind the same callable; the build (:mod:`rbd_deriv.precompile`) compiles the other entries, those
that every node calls, and leaves the lazy ones to their first call. Without the
extension (a source tree used without building it), or with ``RBD_DERIV_DISPATCHER=1`` at import, ``call`` is
the numba dispatcher itself: same arguments, same results, slower calls. Both raise TypeError for an argument
of the wrong type or layout; the public functions then call :meth:`Registered.call_converted`, which converts
every input (or raises InputError naming it).

Spec: one ``name:letters`` per argument, in order. The name is the one errors use (the workspace argument is
named ``data`` after the public argument holding it). The letters:

* ``i``, ``f``, ``b`` and the number of dimensions (1-3): an int64, float64 or bool array the kernel reads
  (typed read-only in the kernel);
* ``I``, ``F`` and the number of dimensions: an int64 or float64 array the kernel writes (an output);
* ``W``: a workspace, a float64 (n,) array the kernel writes for its own use: the Data's (the first ``W``),
  or a scratch of the kernel's own (a contact set's);
* ``d``: a float; ``n``: an int;
* ``N(name)``: a new float64 array that the call makes and returns, shaped like the array argument
  ``name``, or of that length if ``name`` is an int. The Python caller does not pass it; the call returns
  it when the kernel returns 0, the status (an int) otherwise.

Every array must be C-contiguous, aligned and of native byte order. A read-only input overlapping an array
the kernel writes (a result view of a Data given back as an input) is refused, so that it is copied first.
The C extension receives the spec compressed, without the names: each array letter followed by its number of
dimensions, ``W``, ``d`` and ``n`` alone, ``N`` followed by the position of the argument it is sized by
(``"i2f2Wf1F2"`` for crba, ``"i2f1f1N1"`` for integrate's ``mi:i2 q:f1 v:f1 q_next:N(q)``).

Batches: ``parallel(kernel, count, threads, status, *arguments)`` (from the extension) runs one kernel over
``count`` items (states) on the calling thread and up to ``threads - 1`` worker threads. An array argument
given with one more leading dimension of length ``count`` is per item: item k gets its row k. Each workspace
``W`` is given as (threads or more, n): each thread uses its own row. Arguments given as for one call are
shared, and only inputs may be shared. ``status[k]`` receives item k's status. See
:mod:`rbd_deriv.core.batch`.

Status codes: ``kind * 10**12 + argument * 10**6 + index``, with ``argument`` the position of the
argument at fault in the kernel's signature and ``index`` a joint (or another element) index where the kind
needs one. :data:`ERRORS` maps each kind to the exception raised; :func:`define_status` adds kinds.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import types as pytypes
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
from numba import cfunc, njit, types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from rbd_deriv import jit_cache
from rbd_deriv.core import constants
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.layout import (MI_IDX_Q, MI_NJ, MI_NQTOT, MI_NVTOT, MI_TYPE, MI_WORKSPACE, REGION_INDEX,
                                  region_shape)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.urdf import JOINT_FREEFLYER
from rbd_deriv.exceptions import InputError, ModelError

try:
    from rbd_deriv._kernelcall import Kernel, parallel, set_worker_wait, worker_count
except ImportError:  # not built: the numba dispatcher serves
    Kernel = parallel = set_worker_wait = worker_count = None

DIRECT_CALLS = Kernel is not None and os.environ.get("RBD_DERIV_DISPATCHER", "") in ("", "0")
"""Decided once, at import: kernels are called through their C entries (True) or numba's dispatcher."""

BUILDING = bool(os.environ.get(jit_cache.ROLE_VARIABLE))
"""This process is a build's (rbd_deriv.precompile): the C entry of every kernel but the lazy ones is recorded
at registration for the build to compile into the cache, and nothing is compiled at import."""


# --- status codes -------------------------------------------------------------------------------------

KIND_SCALE = 1_000_000_000_000
ARGUMENT_SCALE = 1_000_000

STATUS_SHAPE = 1  #: an argument of the wrong shape
STATUS_NONFINITE = 2  #: an argument holding NaN or inf
STATUS_QUATERNION = 3  #: a free flyer's quaternion in a configuration argument is not unit norm (index: joint)
STATUS_SINGULAR = 4  #: an articulated inertia is singular, hence M (index: the joint, 0 if unknown)
STATUS_WORKSPACE = 5  #: the workspace is not one of this model's (a Data of another model)
STATUS_INTERNAL = 7 * KIND_SCALE
"""Status of an entry whose kernel raised: a guard inside the kernel (a workspace view out of bounds) that the
input checks should have made impossible. Numba would report an exception inside a cfunc as status 0."""


@njit(inline="always")
def status(kind, argument, index):
    """The status code of ``kind`` for the argument at position ``argument`` and element ``index``."""
    return kind * KIND_SCALE + argument * ARGUMENT_SCALE + index


def decode(code: int) -> Tuple[int, int, int]:
    """(kind, argument position, index) of a status code."""
    kind, rest = divmod(int(code), KIND_SCALE)
    argument, index = divmod(rest, ARGUMENT_SCALE)
    return kind, argument, index


# --- input checks (inside the kernels, before anything is written) ------------------------------------


@njit(**JIT_OPTIONS)
def check_vector(x, n, argument):
    """0, or the status of ``x`` (the argument at position ``argument``) unless it is (n,) and finite."""
    if x.shape[0] != n:
        return status(STATUS_SHAPE, argument, 0)
    for k in range(n):
        if not np.isfinite(x[k]):
            return status(STATUS_NONFINITE, argument, 0)
    return 0


@njit(**JIT_OPTIONS)
def check_matrix(x, rows, cols, argument):
    """0, or the status of ``x`` unless it is (rows, cols) and finite."""
    if x.shape[0] != rows or x.shape[1] != cols:
        return status(STATUS_SHAPE, argument, 0)
    for r in range(rows):
        for c in range(cols):
            if not np.isfinite(x[r, c]):
                return status(STATUS_NONFINITE, argument, 0)
    return 0


@njit(**JIT_OPTIONS)
def check_length(x, n, argument):
    """0, or the status of an output ``x`` unless it is (n,) (its values are not read)."""
    if x.shape[0] != n:
        return status(STATUS_SHAPE, argument, 0)
    return 0


@njit(**JIT_OPTIONS)
def check_shape(x, rows, cols, argument):
    """0, or the status of an output ``x`` unless it is (rows, cols) (its values are not read)."""
    if x.shape[0] != rows or x.shape[1] != cols:
        return status(STATUS_SHAPE, argument, 0)
    return 0


@njit(**JIT_OPTIONS)
def check_quaternions(mi, q, argument):
    """0, or the status naming the first free flyer whose quaternion in q is not unit norm."""
    for i in range(1, mi[0, MI_NJ]):
        if mi[i, MI_TYPE] == JOINT_FREEFLYER:
            iq = mi[i, MI_IDX_Q]
            n2 = q[iq + 3] ** 2 + q[iq + 4] ** 2 + q[iq + 5] ** 2 + q[iq + 6] ** 2
            if abs(np.sqrt(n2) - 1.0) > constants.QUATERNION_TOLERANCE:
                return status(STATUS_QUATERNION, argument, i)
    return 0


@njit(**JIT_OPTIONS)
def check_workspace(mi, ws, argument):
    """0, or the status of a workspace that is not the size of this model's (a Data of another model):
    checked before any view of ws is taken."""
    if ws.shape[0] != mi[0, MI_WORKSPACE]:
        return status(STATUS_WORKSPACE, argument, 0)
    return 0


# The dynamics kernels share the first arguments (mi, mf, data, q, v, a or tau, fext): their positions.
ARG_DATA, ARG_Q, ARG_V, ARG_A, ARG_FEXT = 2, 3, 4, 5, 6


@njit(**JIT_OPTIONS)
def check_position(mi, ws, q):
    """The checks of a kernel (mi, mf, data, q, ...): the workspace, then q (shape, finite, quaternions)."""
    code = check_workspace(mi, ws, ARG_DATA)
    if code == 0:
        code = check_vector(q, mi[0, MI_NQTOT], ARG_Q)
    if code == 0:
        code = check_quaternions(mi, q, ARG_Q)
    return code


@njit(**JIT_OPTIONS)
def check_state(mi, ws, q, v, a, fext):
    """The checks of a kernel (mi, mf, data, q, v, a or tau, fext, ...): workspace, q, v, a, fext."""
    code = check_workspace(mi, ws, ARG_DATA)
    if code == 0:
        code = check_vector(q, mi[0, MI_NQTOT], ARG_Q)
    if code == 0:
        code = check_vector(v, mi[0, MI_NVTOT], ARG_V)
    if code == 0:
        code = check_vector(a, mi[0, MI_NVTOT], ARG_A)
    if code == 0:
        code = check_matrix(fext, mi[0, MI_NJ], 6, ARG_FEXT)
    if code == 0:
        code = check_quaternions(mi, q, ARG_Q)
    return code


@njit(**JIT_OPTIONS)
def check_position_matrix(mi, ws, q, out):
    """The checks of a kernel (mi, mf, data, q, out) whose output is an (nv, nv) matrix."""
    code = check_position(mi, ws, q)
    if code == 0:
        code = check_shape(out, mi[0, MI_NVTOT], mi[0, MI_NVTOT], ARG_Q + 1)
    return code


@njit(**JIT_OPTIONS)
def check_state_matrices(mi, ws, q, v, a, fext, first, X, Y, Z):
    """The checks of a kernel (mi, mf, data, q, v, a or tau, fext, ...) whose outputs X, Y, Z, at positions
    first..first+2, are (nv, nv) matrices."""
    nv = mi[0, MI_NVTOT]
    code = check_state(mi, ws, q, v, a, fext)
    if code == 0:
        code = check_shape(X, nv, nv, first)
    if code == 0:
        code = check_shape(Y, nv, nv, first + 1)
    if code == 0:
        code = check_shape(Z, nv, nv, first + 2)
    return code


# --- status -> exception --------------------------------------------------------------------------------


def _expected_shape(model: Model, name: str) -> tuple:
    # Batches name their per-state arguments in capitals (Q for q): one state's shape is the same.
    if name.lower() in ("q", "q0", "q1"):
        return (model.nq,)
    if name in REGION_INDEX:  # an output: the Data region of that name
        return region_shape(name, model.njoints, model.nv, model.nq)
    return (model.njoints, 6) if name == "fext" else (model.nv,)


def _shape_error(model: Model, name: str, index: int) -> Exception:
    return InputError(f"{name}: wrong shape, expected {_expected_shape(model, name)}", name)


def _nonfinite_error(model: Model, name: str, index: int) -> Exception:
    return InputError(f"{name}: contains NaN or inf", name)


def _quaternion_error(model: Model, name: str, index: int) -> Exception:
    return InputError(f"{name}: the quaternion of joint {model.joint_names[index - 1]!r} is not unit norm"
                      f" (tolerance {constants.QUATERNION_TOLERANCE}); normalize it", name)


def _singular_error(model: Model, name: str, index: int) -> Exception:
    where = f" at joint {model.joint_names[index - 1]!r}" if index > 0 else ""
    joint = model.joint_names[index - 1] if index > 0 else None
    return ModelError(f"the mass matrix is singular at this configuration{where}: the joint moves bodies with no"
                      " inertia along its motion here; an armature on it (model.armature) makes M regular", joint)


def _workspace_error(model: Model, name: str, index: int) -> Exception:
    return InputError("data: not a workspace of this model (use model.create_data())", "data")


ERRORS: Dict[int, Callable[[Model, str, int], Exception]] = {
    STATUS_SHAPE: _shape_error,
    STATUS_NONFINITE: _nonfinite_error,
    STATUS_QUATERNION: _quaternion_error,
    STATUS_SINGULAR: _singular_error,
    STATUS_WORKSPACE: _workspace_error,
}
"""Status kind -> (model, name of the argument at fault, index) -> the exception to raise."""


def define_status(kind: int, error: Callable[[Model, str, int], Exception]) -> int:
    """Add a status kind (an int not yet in :data:`ERRORS`, below 9 * 10**6) and the exception it raises;
    returns ``kind``, for the kernels to use as a compile-time constant."""
    if kind in ERRORS or kind == STATUS_INTERNAL // KIND_SCALE or not 0 < kind < 9_000_000:
        raise ValueError(f"status kind {kind} is taken or out of range")
    ERRORS[kind] = error
    return kind


def error_for(model: Model, code: int, names: Sequence[str]) -> Exception:
    """The exception of a nonzero status ``code``; ``names`` names the kernel's arguments by position."""
    if code == STATUS_INTERNAL:
        return RuntimeError("rbd_deriv: a kernel failed internally (a workspace view out of bounds); please report")
    kind, argument, index = decode(code)
    describe = ERRORS.get(kind)
    if describe is None or argument >= len(names):
        return RuntimeError(f"rbd_deriv: unknown kernel status {code}; please report")
    return describe(model, names[argument], index)


# --- the C entry -----------------------------------------------------------------------------------------

_SPEC_ITEM = re.compile(r"^([A-Za-z_]\w*):(?:([ifbIF])([1-3])|(W)|(d)|(n)|N\((\w+)\))$")


@dataclass(frozen=True)
class Argument:
    """One argument of a kernel, as its spec gives it."""

    name: str
    letter: str  # i f b I F W d n N
    ndim: int  # 0 for scalars
    like: Optional[int] = None  # N: the position of the argument its shape or length comes from

    @property
    def written(self) -> bool:
        return self.letter in "IFWN"

    @property
    def code(self) -> str:
        """Its part of the extension's compact spec."""
        if self.letter == "N":
            return f"N{self.like}"
        return self.letter + (str(self.ndim) if self.letter in "ifbIF" else "")


def parse_spec(spec: str) -> Tuple[Argument, ...]:
    """The arguments of a spec (see the module's docstring), or ValueError."""
    arguments = []
    for item in spec.split():
        match = _SPEC_ITEM.match(item)
        if match is None:
            raise ValueError(f"bad kernel argument {item!r} in spec {spec!r}")
        name, letter, ndim, workspace, real, integer, like = match.groups()
        if letter:
            arguments.append(Argument(name, letter, int(ndim)))
        elif workspace or real or integer:
            arguments.append(Argument(name, workspace or real or integer, 1 if workspace else 0))
        else:
            names = [a.name for a in arguments]
            if like not in names or arguments[names.index(like)].letter in "dNW":
                raise ValueError(f"{item!r}: N() names an earlier array or int argument")
            position = names.index(like)
            ndim = 1 if arguments[position].letter == "n" else arguments[position].ndim
            arguments.append(Argument(name, "N", ndim, position))
    if len({a.name for a in arguments}) != len(arguments):
        raise ValueError(f"spec {spec!r} names an argument twice")
    if sum(a.letter == "N" for a in arguments) > 1:
        raise ValueError(f"spec {spec!r}: at most one new array")
    return tuple(arguments)


_DTYPES = {"i": types.int64, "I": types.int64, "f": types.float64, "F": types.float64, "W": types.float64,
           "N": types.float64, "b": types.boolean}


def numba_type(argument: Argument):
    """The numba type a kernel receives for an argument: arrays C-contiguous, read-only unless written."""
    if argument.letter == "d":
        return types.float64
    if argument.letter == "n":
        return types.int64
    return types.Array(_DTYPES[argument.letter], argument.ndim, "C", readonly=not argument.written)


@intrinsic(prefer_literal=True)
def _entry_arguments(typingctx, data, dims, spec):
    """The kernel's arguments rebuilt from the extension's (data, dims): argument k's data pointer is
    data[k], its shape dims[3k..3k+ndim-1]. ``spec`` is a literal: the types are known when compiling."""
    if not isinstance(spec, types.StringLiteral):
        raise TypingError("the kernel spec must be a compile-time constant")
    arguments = parse_spec(spec.literal_value)
    result = types.Tuple([numba_type(a) for a in arguments])

    def codegen(context, builder, signature, values):
        data_pointer, dims_pointer = values[0], values[1]
        built = []
        for k, (argument, ty) in enumerate(zip(arguments, result.types)):
            pointer = builder.load(builder.gep(data_pointer, [context.get_constant(types.intp, k)]))
            if argument.ndim == 0:
                value_type = context.get_value_type(ty)
                built.append(builder.load(builder.bitcast(pointer, value_type.as_pointer())))
                continue
            array = make_array(ty)(context, builder)
            itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(ty.dtype)))
            shape = [builder.load(builder.gep(dims_pointer, [context.get_constant(types.intp, 3 * k + d)]))
                     for d in range(argument.ndim)]
            strides = [itemsize]
            for extent in reversed(shape[1:]):
                strides.insert(0, builder.mul(strides[0], extent))
            populate_array(array, data=builder.bitcast(pointer, array.data.type),
                           shape=cgutils.pack_array(builder, shape), strides=cgutils.pack_array(builder, strides),
                           itemsize=itemsize, meminfo=None)
            built.append(array._getvalue())
        return context.make_tuple(builder, result, built)

    return result(data, dims, spec), codegen


ENTRY_SIGNATURE = types.int64(types.CPointer(types.voidptr), types.CPointer(types.int64))
ENTRY_OPTIONS = dict(cache=True, nogil=True, _nrt=False)


def _entry_template(data, dims):
    # The body of every C entry. register() copies this function once per kernel, with its own KERNEL and
    # SPEC globals (constants to numba) and the kernel's file as its source file.
    try:
        return KERNEL(*_entry_arguments(data, dims, SPEC))  # noqa: F821 - globals of each copy
    except Exception:  # numba would report an exception inside a cfunc as status 0
        return STATUS_INTERNAL


def _entry_function(kernel, spec: str, name: str):
    """A copy of :func:`_entry_template` for one kernel, to compile as its C entry.

    numba caches a compiled function by its source file, name and bytecode, and keeps the cache while that
    file is unchanged. The copy takes the kernel module's file as its own, so that its cache sits beside the
    kernel's and is dropped when the kernel's source changes, as a cfunc written in that module would be."""
    source = inspect.getfile(kernel.py_func)
    code = _entry_template.__code__.replace(co_filename=source, co_name=name, co_qualname=name)
    namespace = dict(_entry_template.__globals__, KERNEL=kernel, SPEC=spec)
    function = pytypes.FunctionType(code, namespace, name)
    function.__qualname__ = name
    function.__module__ = kernel.py_func.__module__
    return function


# --- registration ----------------------------------------------------------------------------------------

_COMPILING = threading.RLock()
"""Held while a kernel compiles: two threads calling a lazy kernel at once compile it once."""

REGISTRY: Dict[str, "Registered"] = {}
"""Every registered kernel by name (``module.kernel``): what :func:`compile_all` compiles."""

_MODEL_ARGUMENTS = {"mi": "mi", "mf": "mf", "continuous": "continuous", "nv": "nv", "nq": "nq"}
"""Arguments that call_converted takes from the model: kernel argument name -> Model attribute."""


class Registered:
    """A kernel registered with the calling convention (made by :func:`register`).

    Attributes:
        kernel: The numba dispatcher.
        arguments: The spec's arguments.
        names: Their names, by position (what status codes index).
        outputs: Names of the arrays the kernel writes (letters F and I), in order.
        call: The fast callable: the extension's Kernel, or the dispatcher (see the module's docstring).
        lazy: Compiled at its first call rather than at import, and left out of the build.
        compiled: False until a lazy kernel's first call (or :meth:`compile`).
        entry: The C entry (numba cfunc); None without the extension.
    """

    # Slots: ``REGISTERED.call`` in a public function costs what a module global would.
    __slots__ = ("kernel", "spec", "arguments", "names", "outputs", "code", "signature", "name", "_entry", "compiled",
                 "lazy", "call")

    def __init__(self, kernel, spec: str, lazy: bool = False, release_gil: bool = True) -> None:
        self.kernel = kernel
        self.spec = spec
        self.arguments = parse_spec(spec)
        self.names = tuple(a.name for a in self.arguments)
        self.outputs = tuple(a.name for a in self.arguments if a.letter in "IF")
        self.code = "".join(a.code for a in self.arguments)
        self.signature = types.int64(*(numba_type(a) for a in self.arguments))
        self.name = f"{kernel.py_func.__module__.rsplit('.', 1)[-1]}.{kernel.__name__}"
        self._entry = None
        self.compiled = False
        self.lazy = lazy
        # With the extension, the callable exists from the start and gets the entry's address at its first
        # call: a public function binds it once, as a module global (faster to call than an attribute).
        self.call = Kernel(self._entry_address, self.code, release_gil) if DIRECT_CALLS else self._compile_and_call
        if BUILDING:
            # The build compiles the recorded entry (and with it the kernel, for the same argument types) in a
            # task of its own; a call in the build's processes goes through the dispatcher.
            if not lazy:
                self._entry = self._make_entry()
        elif not lazy:
            self.compile()
        REGISTRY[self.name] = self

    def compile(self) -> None:
        """Compile (or load from numba's cache) the kernel and its C entry now. A lazy kernel that is not in
        the cache says so on stderr, with the seconds it took."""
        with _COMPILING:
            if self.compiled:
                return
            first_use = self.lazy and not BUILDING
            if DIRECT_CALLS:
                self._entry = self._make_entry(first_use)
            else:
                with jit_cache.first_use(self.name, self.kernel.py_func, self.signature.args, first_use):
                    self.call = self._dispatcher_call()
            self.compiled = True

    def _make_entry(self, first_use: bool = False):
        function = _entry_function(self.kernel, self.spec, self.kernel.__name__ + "_entry")
        with jit_cache.first_use(self.name, function, ENTRY_SIGNATURE, first_use):
            return cfunc(ENTRY_SIGNATURE, **ENTRY_OPTIONS)(function)

    @property
    def loaded_entry(self):
        """The C entry if it was made (compiled or loaded from the cache) in this process, else None; its
        ``cache_hits`` tells which."""
        return self._entry if self.compiled else None

    def _entry_address(self) -> int:
        self.compile()
        return self._entry.address

    def _compile_and_call(self, *arguments):
        """``call`` without the extension until the kernel is compiled (a lazy kernel's first call)."""
        self.compile()
        return self.call(*arguments)

    @property
    def entry(self):
        """The C entry (numba cfunc), compiled on first use; None without direct calls."""
        self.compile()
        return self._entry

    @property
    def dispatcher(self):
        """The numba dispatcher compiled for the spec's types only (arguments of other types: TypeError)."""
        if self.signature.args not in self.kernel.overloads:
            self.kernel.compile(self.signature.args)
        return self.kernel

    def _dispatcher_call(self):
        """``call`` without the extension: the dispatcher, behind the extension's two checks that numba does
        not make: an N argument is made here, and a read-only input that overlaps an array the kernel writes
        (a result view of the same Data) is refused with TypeError, so that the caller copies it."""
        kernel = self.dispatcher
        kernel.disable_compile()
        given = [a for a in self.arguments if a.letter != "N"]  # what the caller passes, in order
        inputs = [k for k, a in enumerate(given) if a.letter in "ifb"]
        written = [k for k, a in enumerate(given) if a.written]
        new = [k for k, a in enumerate(self.arguments) if a.letter == "N"]
        at = new[0] if new else None
        like = self.arguments[at].like if new else None
        by_length = new and self.arguments[like].letter == "n"

        def checked(*arguments):
            for k in inputs:
                x = arguments[k] if k < len(arguments) else None
                if isinstance(x, np.ndarray) and not x.flags.writeable and any(
                        isinstance(arguments[w], np.ndarray) and np.may_share_memory(x, arguments[w])
                        for w in written if w < len(arguments)):
                    raise TypeError(f"kernel argument {k}: a read-only view of memory the kernel writes")
            if at is None:
                return kernel(*arguments)
            try:
                made = np.empty(arguments[like] if by_length else np.shape(arguments[like]))
            except (TypeError, ValueError) as err:  # a ragged list: refused like any argument of the wrong type
                raise TypeError(f"argument {like}: {err}") from err
            code = kernel(*arguments[:at], made, *arguments[at:])
            return made if code == 0 else code

        return checked

    def call_converted(self, model, data, *inputs, bound: Optional[Dict[str, object]] = None):
        """The call for arguments the fast path refused: checks the model and the Data, converts each input
        to the array the kernel takes (InputError naming it otherwise) and calls again.

        ``inputs`` are the arguments that come neither from the model (mi, mf, continuous, nv, nq) nor from
        the Data (the workspace and the outputs, which are its regions of the same names) nor from ``bound``,
        in spec order; outputs of a kernel without workspace are among them, passed as they are. None for
        ``fext`` stands for no external force. ``bound`` maps argument names to arrays passed as they are
        (the library's own: a contact set's description, workspace and outputs)."""
        check_model(model)
        uses_data = any(a.letter == "W" for a in self.arguments)
        if uses_data and not isinstance(data, Data):
            raise InputError("data: not a workspace of this model (use model.create_data())", "data")
        given = iter(inputs)
        arguments = []
        for argument in self.arguments:
            if bound and argument.name in bound:
                arguments.append(bound[argument.name])
            elif argument.name in _MODEL_ARGUMENTS:
                arguments.append(getattr(model, _MODEL_ARGUMENTS[argument.name]))
            elif argument.letter == "W":
                arguments.append(data.ws)
            elif argument.letter in "IF" and uses_data:
                arguments.append(data.output(argument.name))
            elif argument.letter in "IF":
                arguments.append(next(given))
            elif argument.letter != "N":
                value = next(given)
                if value is None and argument.name == "fext" and uses_data:
                    arguments.append(data._zero_fext)
                else:
                    arguments.append(convert(value, argument))
        return self.call(*arguments)

    def error(self, model: Model, code: int, names: Optional[Sequence[str]] = None) -> Exception:
        """The exception of a nonzero status of this kernel (``names`` overrides the argument names)."""
        return error_for(model, code, self.names if names is None else names)

    def __repr__(self) -> str:
        return f"Registered({self.name}, {self.spec!r})"


def register(kernel, spec: str, lazy: bool = False, release_gil: bool = True) -> Registered:
    """Register a kernel (a numba ``njit`` function without signature) with its argument spec.

    Args:
        kernel: The kernel, ``njit(**JIT_OPTIONS)``; it is compiled here for the spec's types.
        spec: Its arguments (see the module's docstring).
        lazy: Load (or compile) at the first call instead of now, and leave it out of the build (for kernels
            that the nodes do not call: their first call compiles them, once, saying so on stderr).
        release_gil: Let other Python threads run during a call. False for kernels of a few microseconds on
            any robot: releasing and taking back the GIL costs about 40 ns, and so short a call would not give
            another thread time to run (Python switches threads every 5 ms). Batches always release it.
    """
    return Registered(kernel, spec, lazy, release_gil)


def compile_all() -> None:
    """Load or compile every registered kernel now, the lazy ones included."""
    for registered in REGISTRY.values():
        registered.compile()


# --- converting arguments (the slow path) ------------------------------------------------------------------


def check_model(model) -> None:
    """InputError unless ``model`` is a Model."""
    if not isinstance(model, Model):
        raise InputError(f"model: expected a Model (rbd_deriv.load_urdf), got {type(model).__name__}", "model")


def as_input_array(x, name: str, ndim: int, dtype=np.float64) -> np.ndarray:
    """``x`` as a C-contiguous, aligned array of ``dtype`` and ``ndim`` dimensions (copying only when needed),
    or InputError naming it."""
    try:
        complex_values = np.iscomplexobj(x)
        array = None if complex_values else np.asarray(x, dtype=dtype, order="C")
    except (TypeError, ValueError) as err:  # ragged nested lists, strings, objects
        raise InputError(f"{name}: expected an array of numbers ({err})", name) from err
    if complex_values:
        raise InputError(f"{name}: expected real numbers, got complex values", name)
    if not array.flags.aligned:  # the extension refuses it
        array = array.copy()
    if array.ndim != ndim:
        raise InputError(f"{name}: expected a {ndim}-D array, got shape {array.shape}", name)
    return array


def convert(x, argument: Argument):
    """One input converted for the kernel (see :meth:`Registered.call_converted`)."""
    if argument.letter == "d":
        try:
            return float(x)
        except (TypeError, ValueError):
            raise InputError(f"{argument.name}: expected a number, got {x!r}", argument.name) from None
    if argument.letter == "n":
        return int(x)
    dtype = {"i": np.int64, "f": np.float64, "b": np.bool_}[argument.letter]
    array = as_input_array(x, argument.name, argument.ndim, dtype)
    # Read-only arrays are copied: one may be a result view of the same Data, which the kernel overwrites.
    return array if array.flags.writeable else array.copy()
