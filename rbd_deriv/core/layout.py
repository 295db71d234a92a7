"""Memory layout shared by Python and the kernels: the model's flat arrays and the workspace regions.

A :class:`~rbd_deriv.core.model.Model` is two arrays that the kernels read:

* ``mi`` int64 (njoints, MI_COLS): per joint its type, parent, first q and v index, nq, nv and the end of its
  subtree in v (the depth-first order makes every subtree a contiguous range of v). Row 0 (the universe)
  holds the sizes, the workspace size and the offsets of the workspace regions instead.
* ``mf`` float64 (njoints, MF_COLS): per joint its placement in the parent joint frame (rotation row-major,
  then translation), its unit axis, and the inertia of its body in the joint frame as 10 numbers: mass,
  first moment h = m c (3), rotational inertia about the joint-frame origin (Ixx Ixy Ixz Iyy Iyz Izz), then
  the armature of its dofs (``Model.armature``, one column per dof of the joint). Row 0 holds the gravity (6,)
  [linear, angular].

A :class:`~rbd_deriv.core.model.Data` is one float64 array ``ws`` cut into the regions of :data:`REGIONS`.
Kernels take views of them with :func:`region1`, :func:`region2`, :func:`region3`, which read the offset
from ``mi`` row 0 and check that the view lies inside ``ws``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from rbd_deriv.core.constants import JIT_OPTIONS

# Columns of mi (joint rows).
MI_TYPE, MI_PARENT, MI_IDX_Q, MI_IDX_V, MI_NQ, MI_NV, MI_SUBTREE_END = range(7)
# Columns of mi row 0: sizes, the workspace size, then the region offsets.
MI_NJ, MI_NVTOT, MI_NQTOT, MI_WORKSPACE, MI_OFFSETS = range(5)

# Dofs of the free flyer, the only joint with several: the kernels' multi-dof steps loop to this constant,
# which the compiler unrolls.
NV_FREE_FLYER = 6

# Columns of mf.
MF_ROT, MF_POS, MF_AXIS, MF_INERTIA = 0, 9, 12, 15
MF_ARMATURE = MF_INERTIA + 10  # the joint's dofs' armatures: the first nv_j of NV_FREE_FLYER columns
MF_COLS = MF_ARMATURE + NV_FREE_FLYER

# Workspace regions: name -> shape as a function of (njoints, nv, nq). The order fixes the offsets.
# Joint-indexed regions have njoints rows; dof-indexed regions have nv rows (one 6-vector per dof).
REGIONS = (
    ("oMi", lambda nj, nv, nq: (nj, 4, 4)),  # placement of each joint frame in the world
    ("liMi", lambda nj, nv, nq: (nj, 4, 4)),  # placement of each joint frame in its parent's (rnea)
    ("ov", lambda nj, nv, nq: (nj, 6)),  # spatial velocity, world frame
    ("oa", lambda nj, nv, nq: (nj, 6)),  # spatial acceleration (gravity included), world frame
    ("of", lambda nj, nv, nq: (nj, 6)),  # force transmitted by each joint (subtree sum), world frame
    ("oI", lambda nj, nv, nq: (nj, 10)),  # body inertia, world frame, as 10 parameters (rbd_deriv.core.spatial)
    ("IC10", lambda nj, nv, nq: (nj, 10)),  # composite (subtree) inertia as 10 parameters, world frame (CRBA)
    ("IC", lambda nj, nv, nq: (nj, 6, 6)),  # composite (subtree) inertia, world frame
    ("BC", lambda nj, nv, nq: (nj, 6, 6)),  # composite Coriolis factor B (IDSVA), world frame
    ("IA", lambda nj, nv, nq: (nj, 6, 6)),  # articulated-body inertia, world frame
    ("pA", lambda nj, nv, nq: (nj, 6)),  # articulated bias force, world frame
    ("Dinv", lambda nj, nv, nq: (nj, 6, 6)),  # inverse of S^T IA S per joint (top-left nv_j block)
    ("c", lambda nj, nv, nq: (nj, 6)),  # velocity-product acceleration Sdot qd, world frame
    ("fext_world", lambda nj, nv, nq: (nj, 6)),  # external forces expressed in the world frame
    ("S", lambda nj, nv, nq: (nv, 6)),  # motion subspace, one column per dof, world frame
    ("Sdot", lambda nj, nv, nq: (nv, 6)),  # v_i x S_i
    ("Psid", lambda nj, nv, nq: (nv, 6)),  # v_parent x S_i
    ("Psidd", lambda nj, nv, nq: (nv, 6)),  # a_parent x S_i + v_parent x Psid_i
    ("t1", lambda nj, nv, nq: (nv, 6)),
    ("t2", lambda nj, nv, nq: (nv, 6)),
    ("t3", lambda nj, nv, nq: (nv, 6)),
    ("t4", lambda nj, nv, nq: (nv, 6)),
    ("U", lambda nj, nv, nq: (nv, 6)),  # IA S
    ("u", lambda nj, nv, nq: (nv,)),
    ("F", lambda nj, nv, nq: (nj, nv, 6)),  # force/acceleration sets of the M^-1 algorithm, one 6-vector per dof
    ("tau", lambda nj, nv, nq: (nv,)),
    ("ddq", lambda nj, nv, nq: (nv,)),
    ("nle", lambda nj, nv, nq: (nv,)),
    ("g", lambda nj, nv, nq: (nv,)),
    ("M", lambda nj, nv, nq: (nv, nv)),
    ("Minv", lambda nj, nv, nq: (nv, nv)),
    ("dtau_dq", lambda nj, nv, nq: (nv, nv)),
    ("dtau_dv", lambda nj, nv, nq: (nv, nv)),
    ("dddq_dq", lambda nj, nv, nq: (nv, nv)),
    ("dddq_dv", lambda nj, nv, nq: (nv, nv)),
    ("A", lambda nj, nv, nq: (2 * nv, 2 * nv)),
    ("B", lambda nj, nv, nq: (2 * nv, nv)),
    ("x_next", lambda nj, nv, nq: (nq + nv,)),
    ("v_next", lambda nj, nv, nq: (nv,)),
    ("step", lambda nj, nv, nq: (nv,)),  # dt * v_next, the tangent step of the Euler integrator
    ("Jq", lambda nj, nv, nq: (nv, nv)),  # d integrate / dq
    ("Jv", lambda nj, nv, nq: (nv, nv)),  # d integrate / dv
    ("scratch", lambda nj, nv, nq: (64,)),  # small temporaries of the kernels (no allocation in loops)
    ("zero_nv", lambda nj, nv, nq: (nv,)),  # stays zero: the "no velocity/acceleration" input
    ("zero_fext", lambda nj, nv, nq: (nj, 6)),  # stays zero: the "no external force" input
)
REGION_INDEX = {name: k for k, (name, _) in enumerate(REGIONS)}
MI_COLS = max(MI_SUBTREE_END + 1, MI_OFFSETS + len(REGIONS))


def region_shape(name: str, nj: int, nv: int, nq: int) -> tuple:
    """Shape of workspace region ``name`` for a model of nj joints (universe included), nv and nq."""
    return REGIONS[REGION_INDEX[name]][1](nj, nv, nq)


def region_sizes(nj: int, nv: int, nq: int):
    """(name, shape, size) of every region, in workspace order."""
    for name, shape in REGIONS:
        dims = shape(nj, nv, nq)
        yield name, dims, int(np.prod(dims))


# Region indices as module constants: a kernel reads them as compile-time constants.
R = REGION_INDEX
R_OMI, R_LIMI, R_OV, R_OA, R_OF = R["oMi"], R["liMi"], R["ov"], R["oa"], R["of"]
R_OI, R_IC, R_BC, R_IA, R_PA, R_DINV = R["oI"], R["IC"], R["BC"], R["IA"], R["pA"], R["Dinv"]
R_C, R_FEXTW, R_IC10 = R["c"], R["fext_world"], R["IC10"]
R_S, R_SDOT, R_PSID, R_PSIDD = R["S"], R["Sdot"], R["Psid"], R["Psidd"]
R_T1, R_T2, R_T3, R_T4, R_U, R_UVEC, R_F = R["t1"], R["t2"], R["t3"], R["t4"], R["U"], R["u"], R["F"]
R_TAU, R_DDQ, R_NLE, R_G, R_M, R_MINV = R["tau"], R["ddq"], R["nle"], R["g"], R["M"], R["Minv"]
R_DTAU_DQ, R_DTAU_DV, R_DDDQ_DQ, R_DDDQ_DV = R["dtau_dq"], R["dtau_dv"], R["dddq_dq"], R["dddq_dv"]
R_A, R_B, R_XNEXT, R_VNEXT, R_STEP, R_JQ, R_JV = R["A"], R["B"], R["x_next"], R["v_next"], R["step"], R["Jq"], R["Jv"]
R_SCRATCH, R_ZERO_NV, R_ZERO_FEXT = R["scratch"], R["zero_nv"], R["zero_fext"]


# --- workspace views ----------------------------------------------------------------------------------
# A view of a region is built directly (data pointer, shape, C strides) without numba's reshape, which
# costs ~50 ns per call, as much as a small robot's whole joint. The view carries no reference count: it
# lives only inside a kernel, while the caller holds ``ws``. The functions that return views are inlined
# into their callers (inline="always"): without reference counting (constants.JIT_OPTIONS), numba lets a
# compiled function return only an array it was given.


def _view_codegen(array_type):
    def codegen(context, builder, sig, args):
        source = make_array(sig.args[0])(context, builder, args[0])
        target = make_array(array_type)(context, builder)
        itemsize = context.get_constant(types.intp, 8)
        shape = list(args[2:])
        strides = [itemsize]
        for extent in reversed(shape[1:]):
            strides.insert(0, builder.mul(strides[0], extent))
        populate_array(target, data=builder.gep(source.data, [args[1]]), shape=cgutils.pack_array(builder, shape),
                       strides=cgutils.pack_array(builder, strides), itemsize=itemsize, meminfo=None)
        return target._getvalue()

    return codegen


def _view_signature(ws, offset, dims, readonly=False):
    array_type = types.Array(types.float64, len(dims), "C", readonly=readonly)
    return array_type(ws, offset, *dims), _view_codegen(array_type)


@intrinsic
def _view1(typingctx, ws, offset, n):
    return _view_signature(ws, offset, (n,))


@intrinsic
def _view2(typingctx, ws, offset, rows, cols):
    return _view_signature(ws, offset, (rows, cols))


@intrinsic
def _view3(typingctx, ws, offset, d0, d1, d2):
    return _view_signature(ws, offset, (d0, d1, d2))


@intrinsic
def _readonly_view1(typingctx, ws, offset, n):
    return _view_signature(ws, offset, (n,), readonly=True)


@intrinsic
def _readonly_view2(typingctx, ws, offset, rows, cols):
    return _view_signature(ws, offset, (rows, cols), readonly=True)


@intrinsic
def as_readonly(typingctx, array):
    """The same array typed read-only: a kernel's intermediate passed where inputs go, so that the function
    receiving it is compiled once for both (inputs are typed read-only)."""
    readonly_type = array.copy(readonly=True)

    def codegen(context, builder, sig, args):
        return args[0]  # same data model: only the type changes

    return readonly_type(array), codegen


@njit(**JIT_OPTIONS)
def _checked_offset(mi, ws, name_index, size):
    offset = mi[0, MI_OFFSETS + name_index]
    if offset < 0 or offset + size > ws.shape[0]:
        raise IndexError("workspace view out of bounds")
    return offset


@njit(inline="always", **JIT_OPTIONS)
def region1(mi, ws, name_index, n):
    """View (n,) of workspace region ``name_index`` (kernel-internal: the view must not outlive ws)."""
    return _view1(ws, _checked_offset(mi, ws, name_index, n), n)


@njit(inline="always", **JIT_OPTIONS)
def region2(mi, ws, name_index, rows, cols):
    """View (rows, cols) of workspace region ``name_index`` (kernel-internal)."""
    return _view2(ws, _checked_offset(mi, ws, name_index, rows * cols), rows, cols)


@njit(inline="always", **JIT_OPTIONS)
def region3(mi, ws, name_index, d0, d1, d2):
    """View (d0, d1, d2) of workspace region ``name_index`` (kernel-internal)."""
    return _view3(ws, _checked_offset(mi, ws, name_index, d0 * d1 * d2), d0, d1, d2)


@njit(inline="always", **JIT_OPTIONS)
def zero_velocity(mi, ws):
    """The zero (nv,) vector of the workspace, typed as an input: "no velocity", "no acceleration"."""
    nv = mi[0, MI_NVTOT]
    return _readonly_view1(ws, _checked_offset(mi, ws, R_ZERO_NV, nv), nv)


@njit(inline="always", **JIT_OPTIONS)
def zero_forces(mi, ws):
    """The zero (njoints, 6) external forces of the workspace, typed as an input."""
    nj = mi[0, MI_NJ]
    return _readonly_view2(ws, _checked_offset(mi, ws, R_ZERO_FEXT, nj * 6), nj, 6)
