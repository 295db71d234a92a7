"""Spatial algebra kernels (numba), [linear, angular] order as in Pinocchio.

A motion m = (v, w) and a force f = (f, n) are 6-vectors: linear part first. The products are Featherstone's:

    m1 x m2  = (w1 x v2 + v1 x w2,  w1 x w2)            motion cross product
    m  x* f  = (w x f,  w x n + v x f)                   force cross product, (m x*) = -(m x)^T
    (f xbar*) m = m x* f                                 the swapped operator of Singh et al. (IDSVA)

Functions write into an ``out`` argument and never allocate, so they can run inside the per-joint loops.
"""

from __future__ import annotations

from numba import njit

from rbd_deriv.core.constants import JIT_OPTIONS


# --- 6-vectors ----------------------------------------------------------------------------------------


@njit(**JIT_OPTIONS)
def motion_cross(m1, m2, out):
    """out = m1 x m2 (motion cross product). ``out`` must not alias the inputs."""
    v1x, v1y, v1z, w1x, w1y, w1z = m1[0], m1[1], m1[2], m1[3], m1[4], m1[5]
    v2x, v2y, v2z, w2x, w2y, w2z = m2[0], m2[1], m2[2], m2[3], m2[4], m2[5]
    out[0] = w1y * v2z - w1z * v2y + v1y * w2z - v1z * w2y
    out[1] = w1z * v2x - w1x * v2z + v1z * w2x - v1x * w2z
    out[2] = w1x * v2y - w1y * v2x + v1x * w2y - v1y * w2x
    out[3] = w1y * w2z - w1z * w2y
    out[4] = w1z * w2x - w1x * w2z
    out[5] = w1x * w2y - w1y * w2x


@njit(**JIT_OPTIONS)
def force_cross_add(m, f, scale, out):
    """out += scale * (m x* f) (force cross product)."""
    vx, vy, vz, wx, wy, wz = m[0], m[1], m[2], m[3], m[4], m[5]
    fx, fy, fz, nx, ny, nz = f[0], f[1], f[2], f[3], f[4], f[5]
    out[0] += scale * (wy * fz - wz * fy)
    out[1] += scale * (wz * fx - wx * fz)
    out[2] += scale * (wx * fy - wy * fx)
    out[3] += scale * (wy * nz - wz * ny + vy * fz - vz * fy)
    out[4] += scale * (wz * nx - wx * nz + vz * fx - vx * fz)
    out[5] += scale * (wx * ny - wy * nx + vx * fy - vy * fx)


# The 6x6 products read m into scalars and write out only at the end: out, I and m are often views of the
# same workspace, so the compiler must otherwise reload m after every store into out.


@njit(**JIT_OPTIONS)
def _row_dot(I, r, m0, m1, m2, m3, m4, m5):
    return I[r, 0] * m0 + I[r, 1] * m1 + I[r, 2] * m2 + I[r, 3] * m3 + I[r, 4] * m4 + I[r, 5] * m5


@njit(**JIT_OPTIONS)
def _mat6_vec_parts(I, m):
    """The six entries of I m."""
    m0, m1, m2, m3, m4, m5 = m[0], m[1], m[2], m[3], m[4], m[5]
    return (_row_dot(I, 0, m0, m1, m2, m3, m4, m5), _row_dot(I, 1, m0, m1, m2, m3, m4, m5),
            _row_dot(I, 2, m0, m1, m2, m3, m4, m5), _row_dot(I, 3, m0, m1, m2, m3, m4, m5),
            _row_dot(I, 4, m0, m1, m2, m3, m4, m5), _row_dot(I, 5, m0, m1, m2, m3, m4, m5))


@njit(**JIT_OPTIONS)
def mat6_vec(I, m, out):
    """out = I m for a 6x6 matrix I."""
    o = _mat6_vec_parts(I, m)
    out[0], out[1], out[2], out[3], out[4], out[5] = o[0], o[1], o[2], o[3], o[4], o[5]


@njit(**JIT_OPTIONS)
def dot_rows(A, r, B, k):
    """A[r] . B[k] for two (n, 6) arrays of 6-vectors (no row views in the hot loops)."""
    return (A[r, 0] * B[k, 0] + A[r, 1] * B[k, 1] + A[r, 2] * B[k, 2]
            + A[r, 3] * B[k, 3] + A[r, 4] * B[k, 4] + A[r, 5] * B[k, 5])


@njit(**JIT_OPTIONS)
def dot6(a, b):
    """a . b for 6-vectors (a motion paired with a force gives power)."""
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5]


# --- placements and inertias --------------------------------------------------------------------------


@njit(**JIT_OPTIONS)
def act_force(oM, f, out):
    """out = oX^* f: a force given in the frame of placement oM (4x4), expressed in the world frame."""
    fx = oM[0, 0] * f[0] + oM[0, 1] * f[1] + oM[0, 2] * f[2]
    fy = oM[1, 0] * f[0] + oM[1, 1] * f[1] + oM[1, 2] * f[2]
    fz = oM[2, 0] * f[0] + oM[2, 1] * f[1] + oM[2, 2] * f[2]
    nx = oM[0, 0] * f[3] + oM[0, 1] * f[4] + oM[0, 2] * f[5]
    ny = oM[1, 0] * f[3] + oM[1, 1] * f[4] + oM[1, 2] * f[5]
    nz = oM[2, 0] * f[3] + oM[2, 1] * f[4] + oM[2, 2] * f[5]
    px, py, pz = oM[0, 3], oM[1, 3], oM[2, 3]
    out[0], out[1], out[2] = fx, fy, fz
    out[3] = nx + py * fz - pz * fy
    out[4] = ny + pz * fx - px * fz
    out[5] = nz + px * fy - py * fx


# A rigid-body inertia is kept as 10 parameters p = [m, h (3), J (6)]: mass, first moment h = m c and rotational
# inertia about the frame origin (Jxx Jxy Jxz Jyy Jyz Jzz). As a 6x6 matrix, [linear, angular]:
#
#     I = [[m 1, -[h]x], [[h]x, J]],      I (v, w) = (m v + w x h,  h x v + J w)
#
# Sums of parameters are sums of inertias, so composite inertias add 10 numbers instead of 36.


@njit(**JIT_OPTIONS)
def inertia_to_world(oM, params, out):
    """out (10,) = the inertia given by its 10 parameters in the frame of placement oM, expressed in the world
    frame: h' = E h + m p and, about the world origin, J' = E J E^T - [p]x [g]x - [g]x [p]x - m [p]x [p]x with
    g = E h (parallel-axis theorem)."""
    m = params[0]
    hx, hy, hz = params[1], params[2], params[3]
    i00, i01, i02, i11, i12, i22 = params[4], params[5], params[6], params[7], params[8], params[9]
    e00, e01, e02 = oM[0, 0], oM[0, 1], oM[0, 2]
    e10, e11, e12 = oM[1, 0], oM[1, 1], oM[1, 2]
    e20, e21, e22 = oM[2, 0], oM[2, 1], oM[2, 2]
    px, py, pz = oM[0, 3], oM[1, 3], oM[2, 3]
    # T = J E^T (columns are J times the rows of E)
    t00 = i00 * e00 + i01 * e01 + i02 * e02
    t10 = i01 * e00 + i11 * e01 + i12 * e02
    t20 = i02 * e00 + i12 * e01 + i22 * e02
    t01 = i00 * e10 + i01 * e11 + i02 * e12
    t11 = i01 * e10 + i11 * e11 + i12 * e12
    t21 = i02 * e10 + i12 * e11 + i22 * e12
    t02 = i00 * e20 + i01 * e21 + i02 * e22
    t12 = i01 * e20 + i11 * e21 + i12 * e22
    t22 = i02 * e20 + i12 * e21 + i22 * e22
    gx = e00 * hx + e01 * hy + e02 * hz
    gy = e10 * hx + e11 * hy + e12 * hz
    gz = e20 * hx + e21 * hy + e22 * hz
    pg = px * gx + py * gy + pz * gz
    pp = px * px + py * py + pz * pz
    # -[p]x[g]x - [g]x[p]x - m [p]x[p]x = -(g p^T + p g^T) + 2 (p.g) Id - m (p p^T - (p.p) Id)
    d = 2.0 * pg + m * pp
    out[0] = m
    out[1], out[2], out[3] = gx + m * px, gy + m * py, gz + m * pz
    out[4] = e00 * t00 + e01 * t10 + e02 * t20 - 2.0 * gx * px - m * px * px + d
    out[5] = e00 * t01 + e01 * t11 + e02 * t21 - gx * py - px * gy - m * px * py
    out[6] = e00 * t02 + e01 * t12 + e02 * t22 - gx * pz - px * gz - m * px * pz
    out[7] = e10 * t01 + e11 * t11 + e12 * t21 - 2.0 * gy * py - m * py * py + d
    out[8] = e10 * t02 + e11 * t12 + e12 * t22 - gy * pz - py * gz - m * py * pz
    out[9] = e20 * t02 + e21 * t12 + e22 * t22 - 2.0 * gz * pz - m * pz * pz + d


@njit(**JIT_OPTIONS)
def inertia_matrix(p, out):
    """out (6x6) = the inertia of parameters p (10,) as a matrix."""
    m, hx, hy, hz = p[0], p[1], p[2], p[3]
    out[0, 0], out[0, 1], out[0, 2], out[0, 3], out[0, 4], out[0, 5] = m, 0.0, 0.0, 0.0, hz, -hy
    out[1, 0], out[1, 1], out[1, 2], out[1, 3], out[1, 4], out[1, 5] = 0.0, m, 0.0, -hz, 0.0, hx
    out[2, 0], out[2, 1], out[2, 2], out[2, 3], out[2, 4], out[2, 5] = 0.0, 0.0, m, hy, -hx, 0.0
    out[3, 0], out[3, 1], out[3, 2], out[3, 3], out[3, 4], out[3, 5] = 0.0, -hz, hy, p[4], p[5], p[6]
    out[4, 0], out[4, 1], out[4, 2], out[4, 3], out[4, 4], out[4, 5] = hz, 0.0, -hx, p[5], p[7], p[8]
    out[5, 0], out[5, 1], out[5, 2], out[5, 3], out[5, 4], out[5, 5] = -hy, hx, 0.0, p[6], p[8], p[9]


@njit(**JIT_OPTIONS)
def inertia_times(p, v0, v1, v2, w0, w1, w2):
    """The six entries of I (v, w) for the inertia of parameters p (10,): (m v + w x h, h x v + J w)."""
    m, h0, h1, h2 = p[0], p[1], p[2], p[3]
    return (m * v0 + w1 * h2 - w2 * h1,
            m * v1 + w2 * h0 - w0 * h2,
            m * v2 + w0 * h1 - w1 * h0,
            h1 * v2 - h2 * v1 + p[4] * w0 + p[5] * w1 + p[6] * w2,
            h2 * v0 - h0 * v2 + p[5] * w0 + p[7] * w1 + p[8] * w2,
            h0 * v1 - h1 * v0 + p[6] * w0 + p[8] * w1 + p[9] * w2)
