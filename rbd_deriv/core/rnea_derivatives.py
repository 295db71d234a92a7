"""Analytical derivatives of inverse dynamics: dtau/dq, dtau/dv and dtau/da = M.

IDSVA, Algorithm 1 of Singh, Russell & Wensing ("Efficient Analytical Derivatives of Rigid-Body Dynamics using
Spatial Vector Algebra"), all quantities in the world frame. After the forward pass of
:mod:`rbd_deriv.core.kinematics` (v_i, a_i, S_i, Sdot_i, Psid_i, Psidd_i), per body:

    I^C_i = I_i,   B^C_i = 1/2 [(v_i x*) I_i - I_i (v_i x) + (I_i v_i) xbar*],   f^C_i = I_i a_i + v_i x* I_i v_i - f^ext_i

and backward, for i = N..1, with nu(i) the subtree of i (a contiguous range of dofs in depth-first order):

    t1 = I^C_i S_i                         t2 = 2 B^C_i S_i + I^C_i (Sdot_i + Psid_i)
    t3 = 2 B^C_i Psid_i + I^C_i Psidd_i + S_i x* f^C_i       t4 = 2 (B^C_i)^T S_i
    dtau/dq[i, nu(i)\\i] = S_i^T t3[nu(i)\\i]      dtau/dv[i, nu(i)\\i] = S_i^T t2[nu(i)\\i]
    dtau/dq[nu(i), i] = t4[nu(i)]^T Psid_i + t1[nu(i)]^T Psidd_i
    dtau/dv[nu(i), i] = t4[nu(i)]^T S_i + t1[nu(i)]^T (Sdot_i + Psid_i)
    M[i, nu(i)] = S_i^T t1[nu(i)],   tau_i = S_i^T f^C_i
    I^C, B^C, f^C of i added to its parent's.

The paper writes the joint's own block (row i, column i) with the first form; the second is the one that
holds for multi-dof joints (the free flyer) and is identical for one dof, so the own block uses it.
Derivatives with respect to q are in the tangent space (Pinocchio's convention): column j is the derivative
along integrate(q, eps e_j). External forces are fixed in their joint frames, so they turn with the bodies.
"""

from __future__ import annotations

from numba import njit

from rbd_deriv.core.batch import run_batch
from rbd_deriv.core.calling import ARG_FEXT, check_state_matrices, register
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.crba import symmetrize_upper, zero_outside_subtrees
from rbd_deriv.core.kinematics import FK_DERIVATIVES, forward_pass
from rbd_deriv.core.layout import (
    MF_ARMATURE,
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    MI_SUBTREE_END,
    R_BC,
    R_IC,
    R_OF,
    R_OI,
    R_OV,
    R_PSID,
    R_PSIDD,
    R_S,
    R_SDOT,
    R_T1,
    R_T2,
    R_T3,
    R_T4,
    R_TAU,
    region1,
    region2,
    region3,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.core.rnea import body_forces
from rbd_deriv.core.spatial import force_cross_add, inertia_matrix


@njit(**JIT_OPTIONS)
def coriolis_factor(I, v, out):
    """out = B(I, v) = 1/2 [(v x*) I - I (v x) + (I v) xbar*] (6x6), Singh et al. eq. 28.

    (v x*) = -(v x)^T and I is symmetric, so (v x*) I - I (v x) = X + X^T with X = (v x*) I.
    """
    vx, vy, vz, wx, wy, wz = v[0], v[1], v[2], v[3], v[4], v[5]
    for c in range(6):
        fx, fy, fz, nx, ny, nz = I[0, c], I[1, c], I[2, c], I[3, c], I[4, c], I[5, c]
        out[0, c] = wy * fz - wz * fy
        out[1, c] = wz * fx - wx * fz
        out[2, c] = wx * fy - wy * fx
        out[3, c] = wy * nz - wz * ny + vy * fz - vz * fy
        out[4, c] = wz * nx - wx * nz + vz * fx - vx * fz
        out[5, c] = wx * ny - wy * nx + vx * fy - vy * fx
    for r in range(6):
        for c in range(r, 6):
            s = 0.5 * (out[r, c] + out[c, r])
            out[r, c] = s
            out[c, r] = s
    # h = I v; (h xbar*) m = m x* h = (w_m x h_f, w_m x h_n + v_m x h_f): [[0, -[h_f]x], [-[h_f]x, -[h_n]x]].
    hf0 = hf1 = hf2 = hn0 = hn1 = hn2 = 0.0
    for k in range(6):
        hf0 += I[0, k] * v[k]
        hf1 += I[1, k] * v[k]
        hf2 += I[2, k] * v[k]
        hn0 += I[3, k] * v[k]
        hn1 += I[4, k] * v[k]
        hn2 += I[5, k] * v[k]
    hf0, hf1, hf2, hn0, hn1, hn2 = 0.5 * hf0, 0.5 * hf1, 0.5 * hf2, 0.5 * hn0, 0.5 * hn1, 0.5 * hn2
    # -[h]x = [[0, h2, -h1], [-h2, 0, h0], [h1, -h0, 0]]
    for off_r, off_c, a0, a1, a2 in ((0, 3, hf0, hf1, hf2), (3, 0, hf0, hf1, hf2), (3, 3, hn0, hn1, hn2)):
        out[off_r + 0, off_c + 1] += a2
        out[off_r + 0, off_c + 2] -= a1
        out[off_r + 1, off_c + 0] -= a2
        out[off_r + 1, off_c + 2] += a0
        out[off_r + 2, off_c + 0] += a1
        out[off_r + 2, off_c + 1] -= a0


@njit(**JIT_OPTIONS)
def rnea_derivatives_into(mi, mf, ws, a, tau, dtau_dq, dtau_dv, M):
    """IDSVA backward pass after forward_pass order 2 at acceleration a: tau (nv,), dtau/dq, dtau/dv and M
    (nv, nv), the armature in tau (armature * a) and on M's diagonal (it does not depend on q or v)."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    oI = region2(mi, ws, R_OI, nj, 10)
    IC = region3(mi, ws, R_IC, nj, 6, 6)
    BC = region3(mi, ws, R_BC, nj, 6, 6)
    ov = region2(mi, ws, R_OV, nj, 6)
    fC = region2(mi, ws, R_OF, nj, 6)
    S = region2(mi, ws, R_S, nv, 6)
    Sdot = region2(mi, ws, R_SDOT, nv, 6)
    Psid = region2(mi, ws, R_PSID, nv, 6)
    Psidd = region2(mi, ws, R_PSIDD, nv, 6)
    t1 = region2(mi, ws, R_T1, nv, 6)
    t2 = region2(mi, ws, R_T2, nv, 6)
    t3 = region2(mi, ws, R_T3, nv, 6)
    t4 = region2(mi, ws, R_T4, nv, 6)
    body_forces(mi, ws)
    for i in range(1, nj):
        inertia_matrix(oI[i], IC[i])
        coriolis_factor(IC[i], ov[i], BC[i])
    for r in range(nv):
        for c in range(nv):
            dtau_dq[r, c] = 0.0
            dtau_dv[r, c] = 0.0
    zero_outside_subtrees(mi, M)
    for i in range(nj - 1, 0, -1):
        iv, nvj, end, parent = mi[i, MI_IDX_V], mi[i, MI_NV], mi[i, MI_SUBTREE_END], mi[i, MI_PARENT]
        ICi, BCi = IC[i], BC[i]
        # The 6-vectors at hand are held in scalars throughout: every array here is a view of the one
        # workspace, so a store would otherwise force the compiler to reload them.
        for d in range(iv, iv + nvj):
            for k in range(6):
                Sdot[d, k] += Psid[d, k]  # Sdot + Psid is all that is used from here on
            s0, s1, s2, s3, s4, s5 = S[d, 0], S[d, 1], S[d, 2], S[d, 3], S[d, 4], S[d, 5]
            e0, e1, e2, e3, e4, e5 = Sdot[d, 0], Sdot[d, 1], Sdot[d, 2], Sdot[d, 3], Sdot[d, 4], Sdot[d, 5]
            p0, p1, p2, p3, p4, p5 = Psidd[d, 0], Psidd[d, 1], Psidd[d, 2], Psidd[d, 3], Psidd[d, 4], Psidd[d, 5]
            d0, d1, d2, d3, d4, d5 = Psid[d, 0], Psid[d, 1], Psid[d, 2], Psid[d, 3], Psid[d, 4], Psid[d, 5]
            # One sweep over I^C and B^C computes the four products of the dof (t4 = 2 B^C^T S).
            f0 = f1 = f2 = f3 = f4 = f5 = 0.0
            for r in range(6):
                i0, i1, i2, i3, i4, i5 = ICi[r, 0], ICi[r, 1], ICi[r, 2], ICi[r, 3], ICi[r, 4], ICi[r, 5]
                b0, b1, b2, b3, b4, b5 = BCi[r, 0], BCi[r, 1], BCi[r, 2], BCi[r, 3], BCi[r, 4], BCi[r, 5]
                sr = S[d, r]
                f0 += b0 * sr
                f1 += b1 * sr
                f2 += b2 * sr
                f3 += b3 * sr
                f4 += b4 * sr
                f5 += b5 * sr
                t1[d, r] = i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5
                t2[d, r] = (2.0 * (b0 * s0 + b1 * s1 + b2 * s2 + b3 * s3 + b4 * s4 + b5 * s5)
                            + i0 * e0 + i1 * e1 + i2 * e2 + i3 * e3 + i4 * e4 + i5 * e5)
                t3[d, r] = (2.0 * (b0 * d0 + b1 * d1 + b2 * d2 + b3 * d3 + b4 * d4 + b5 * d5)
                            + i0 * p0 + i1 * p1 + i2 * p2 + i3 * p3 + i4 * p4 + i5 * p5)
            t4[d, 0], t4[d, 1], t4[d, 2] = 2.0 * f0, 2.0 * f1, 2.0 * f2
            t4[d, 3], t4[d, 4], t4[d, 5] = 2.0 * f3, 2.0 * f4, 2.0 * f5
            force_cross_add(S[d], fC[i], 1.0, t3[d])
        for r in range(iv, iv + nvj):
            s0, s1, s2, s3, s4, s5 = S[r, 0], S[r, 1], S[r, 2], S[r, 3], S[r, 4], S[r, 5]
            armature = mf[i, MF_ARMATURE + r - iv]
            tau[r] = (s0 * fC[i, 0] + s1 * fC[i, 1] + s2 * fC[i, 2] + s3 * fC[i, 3] + s4 * fC[i, 4] + s5 * fC[i, 5]
                      + armature * a[r])
            for k in range(iv, end):
                M[r, k] = s0 * t1[k, 0] + s1 * t1[k, 1] + s2 * t1[k, 2] + s3 * t1[k, 3] + s4 * t1[k, 4] + s5 * t1[k, 5]
            M[r, r] += armature
            for k in range(iv + nvj, end):
                dtau_dq[r, k] = (s0 * t3[k, 0] + s1 * t3[k, 1] + s2 * t3[k, 2]
                                 + s3 * t3[k, 3] + s4 * t3[k, 4] + s5 * t3[k, 5])
                dtau_dv[r, k] = (s0 * t2[k, 0] + s1 * t2[k, 1] + s2 * t2[k, 2]
                                 + s3 * t2[k, 3] + s4 * t2[k, 4] + s5 * t2[k, 5])
        # The joint's own block takes the second form: for a multi-dof joint the S x* f^C term of t3 is
        # cancelled by the rotation of S_i itself (the rigid motion of the subtree leaves S_i^T f^C unchanged
        # but for gravity, which Psidd carries). For one dof both forms agree.
        for c in range(iv, iv + nvj):
            d0, d1, d2, d3, d4, d5 = Psid[c, 0], Psid[c, 1], Psid[c, 2], Psid[c, 3], Psid[c, 4], Psid[c, 5]
            p0, p1, p2, p3, p4, p5 = Psidd[c, 0], Psidd[c, 1], Psidd[c, 2], Psidd[c, 3], Psidd[c, 4], Psidd[c, 5]
            s0, s1, s2, s3, s4, s5 = S[c, 0], S[c, 1], S[c, 2], S[c, 3], S[c, 4], S[c, 5]
            e0, e1, e2, e3, e4, e5 = Sdot[c, 0], Sdot[c, 1], Sdot[c, 2], Sdot[c, 3], Sdot[c, 4], Sdot[c, 5]
            for k in range(iv, end):
                a0, a1, a2, a3, a4, a5 = t4[k, 0], t4[k, 1], t4[k, 2], t4[k, 3], t4[k, 4], t4[k, 5]
                g0, g1, g2, g3, g4, g5 = t1[k, 0], t1[k, 1], t1[k, 2], t1[k, 3], t1[k, 4], t1[k, 5]
                dtau_dq[k, c] = (a0 * d0 + a1 * d1 + a2 * d2 + a3 * d3 + a4 * d4 + a5 * d5
                                 + g0 * p0 + g1 * p1 + g2 * p2 + g3 * p3 + g4 * p4 + g5 * p5)
                dtau_dv[k, c] = (a0 * s0 + a1 * s1 + a2 * s2 + a3 * s3 + a4 * s4 + a5 * s5
                                 + g0 * e0 + g1 * e1 + g2 * e2 + g3 * e3 + g4 * e4 + g5 * e5)
        if parent > 0:
            for r in range(6):
                fC[parent, r] += fC[i, r]
                for k in range(6):
                    IC[parent, r, k] += IC[i, r, k]
                    BC[parent, r, k] += BC[i, r, k]
    symmetrize_upper(M)


@njit(**JIT_OPTIONS)
def _rnea_derivatives_kernel(mi, mf, ws, q, v, a, fext, dtau_dq, dtau_dv, M):
    nv = mi[0, MI_NVTOT]
    code = check_state_matrices(mi, ws, q, v, a, fext, ARG_FEXT + 1, dtau_dq, dtau_dv, M)
    if code == 0:
        forward_pass(mi, mf, ws, q, v, a, fext, FK_DERIVATIVES)
        rnea_derivatives_into(mi, mf, ws, a, region1(mi, ws, R_TAU, nv), dtau_dq, dtau_dv, M)
    return code


RNEA_DERIVATIVES = register(_rnea_derivatives_kernel,
                            "mi:i2 mf:f2 data:W q:f1 v:f1 a:f1 fext:f2 dtau_dq:F2 dtau_dv:F2 M:F2")
_rnea_derivatives = RNEA_DERIVATIVES.call


def rnea_derivatives(model: Model, data: Data, q, v, a, fext=None):
    """Partial derivatives of rnea(q, v, a, fext).

    Args:
        q: (nq,) configuration.
        v: (nv,) velocity [rad/s, m/s].
        a: (nv,) acceleration [rad/s^2, m/s^2].
        fext: (njoints, 6) external forces in the joint frames [N, N m], or None.

    Returns:
        (dtau_dq, dtau_dv, M): views data.dtau_dq, data.dtau_dv, data.M, each (nv, nv); dtau_dq is taken in
        the tangent space of q. data.tau holds rnea(q, v, a, fext) as a by-product.
    """
    try:
        code = _rnea_derivatives(model.mi, model.mf, data.ws, q, v, a, data._zero_fext if fext is None else fext,
                                     data._dtau_dq, data._dtau_dv, data._M)
    except (TypeError, AttributeError):
        code = RNEA_DERIVATIVES.call_converted(model, data, q, v, a, fext)
    if code:
        raise RNEA_DERIVATIVES.error(model, code)
    return data.dtau_dq, data.dtau_dv, data.M


def rnea_derivatives_batch(model: Model, Q, V, A):
    """rnea_derivatives at K states -> (dtau_dq, dtau_dv, M), each (K, nv, nv)."""
    return tuple(run_batch(RNEA_DERIVATIVES, model, Q, V, A, None))
