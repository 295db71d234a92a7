"""Frames: placement, velocity, accelerations and Jacobians of a frame, and their derivatives.

A frame c is fixed to the body of joint b at placement bMc (rotation, translation in the joint frame).
Everything here reads the world-frame quantities of the forward pass of :mod:`rbd_deriv.core.kinematics`: the
joint placements oMi, the motion subspace columns S_k (world frame, at the world origin), the spatial
velocities ov and accelerations oa (at the world origin; oa carries a_0 = -g). With v_b = (v_o, w) and
a_b = (a_o, alpha) the true spatial velocity and acceleration of body b at the world origin and p the frame's
origin in the world:

    v_p = v_o + w x p                              velocity of the point p (LOCAL_WORLD_ALIGNED, "LWA")
    a_p = a_o + alpha x p + w x v_p                classical acceleration of p
    a_6 = (a_o + alpha x p, alpha)                 spatial acceleration, LWA (world axes, origin p)
    J_p[:, k] = S_k,lin + S_k,ang x p              for every dof k supporting b (zero elsewhere)

The derivatives along dof k of joint j supporting b (lambda the parent of j), as in Carpentier & Mansard
(RSS 2018, sec. III) written in the world frame:

    dp/dq_k     = S_k,lin + S_k,ang x p
    dv_b/dq_k   = S_k x (v_b - v_lambda)
    da_b/dq_k   = S_k x (a_b - a_lambda) - (S_k x v_lambda) x (v_b - v_lambda)
    dv_b/dqd_k  = S_k,     da_b/dqd_k = S_k x (v_b - v_lambda) + v_j x S_k,     da_b/dqdd_k = S_k

(v_j is body j's own velocity: for one dof v_j x S_k = v_lambda x S_k, for the free flyer it is not), and
the chain rule through v_p, a_p, a_6. Each costs O(depth of b) per frame.

Contacts (:mod:`rbd_deriv.core.contact`) build on these kernels; so do the public frame functions below.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rbd_deriv.core.calling import STATUS_SHAPE, check_model, check_state, check_vector, convert, register, status
from rbd_deriv.core.constants import JIT_OPTIONS
from rbd_deriv.core.kinematics import FK_ACCELERATION, FK_POSITION, FK_VELOCITY, forward_pass, position_pass
from rbd_deriv.core.layout import (
    MI_IDX_V,
    MI_NJ,
    MI_NV,
    MI_NVTOT,
    MI_PARENT,
    R_IC10,
    R_OA,
    R_OI,
    R_OMI,
    R_OV,
    R_S,
    region2,
    region3,
    zero_forces,
)
from rbd_deriv.core.model import Data, Model
from rbd_deriv.exceptions import InputError

# A frame's placement in its joint frame as 12 numbers: rotation row-major (9), then translation (3).
FRAME_ROT, FRAME_POS, FRAME_COLS = 0, 9, 12


@njit(inline="always", **JIT_OPTIONS)
def cross3(ax, ay, az, bx, by, bz):
    """a x b for 3-vectors given as scalars."""
    return ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx


@njit(inline="always", **JIT_OPTIONS)
def motion_cross6(v1x, v1y, v1z, w1x, w1y, w1z, v2x, v2y, v2z, w2x, w2y, w2z):
    """m1 x m2 = (w1 x v2 + v1 x w2, w1 x w2) for motions given as scalars."""
    c0, c1, c2 = cross3(w1x, w1y, w1z, v2x, v2y, v2z)
    e0, e1, e2 = cross3(v1x, v1y, v1z, w2x, w2y, w2z)
    a0, a1, a2 = cross3(w1x, w1y, w1z, w2x, w2y, w2z)
    return c0 + e0, c1 + e1, c2 + e2, a0, a1, a2


@njit(inline="always", **JIT_OPTIONS)
def velocity_column(sx, sy, sz, tx, ty, tz, dvx, dvy, dvz, dwx, dwy, dwz, px, py, pz, wx, wy, wz):
    """For the dof of motion column S = (s, t): dp/dq = s + t x p, the body velocity's dv_b/dq = S x (v_b -
    v_lambda) (given as dv, dw) and the point velocity's dv_p/dq = dv_o + dw x p + w x dp: 12 scalars
    (dp, dv_o, dw, dv_p)."""
    c0, c1, c2 = cross3(tx, ty, tz, px, py, pz)
    dpx, dpy, dpz = sx + c0, sy + c1, sz + c2
    qvx, qvy, qvz, qwx, qwy, qwz = motion_cross6(sx, sy, sz, tx, ty, tz, dvx, dvy, dvz, dwx, dwy, dwz)
    c0, c1, c2 = cross3(qwx, qwy, qwz, px, py, pz)
    e0, e1, e2 = cross3(wx, wy, wz, dpx, dpy, dpz)
    return (dpx, dpy, dpz, qvx, qvy, qvz, qwx, qwy, qwz, qvx + c0 + e0, qvy + c1 + e1, qvz + c2 + e2)


@njit(**JIT_OPTIONS)
def frame_origin(mi, ws, b, X):
    """The world position p (3 scalars) of the origin of a frame at placement X (12,) in joint b."""
    oMi = region3(mi, ws, R_OMI, mi[0, MI_NJ], 4, 4)
    o = oMi[b]
    t0, t1, t2 = X[FRAME_POS], X[FRAME_POS + 1], X[FRAME_POS + 2]
    return (o[0, 3] + o[0, 0] * t0 + o[0, 1] * t1 + o[0, 2] * t2,
            o[1, 3] + o[1, 0] * t0 + o[1, 1] * t1 + o[1, 2] * t2,
            o[2, 3] + o[2, 0] * t0 + o[2, 1] * t1 + o[2, 2] * t2)


@njit(**JIT_OPTIONS)
def lwa_jacobian_into(mi, ws, b, px, py, pz, rows, J, row0):
    """Rows row0..row0+rows of J (.., nv) = the LWA Jacobian of the frame at p on body b: the linear rows
    (S_lin + S_ang x p) for rows = 3, and the angular rows S_ang too for rows = 6."""
    nv = mi[0, MI_NVTOT]
    S = region2(mi, ws, R_S, nv, 6)
    for r in range(row0, row0 + rows):
        for k in range(nv):
            J[r, k] = 0.0
    j = b
    while j > 0:
        iv = mi[j, MI_IDX_V]
        for k in range(iv, iv + mi[j, MI_NV]):
            cx, cy, cz = cross3(S[k, 3], S[k, 4], S[k, 5], px, py, pz)
            J[row0, k] = S[k, 0] + cx
            J[row0 + 1, k] = S[k, 1] + cy
            J[row0 + 2, k] = S[k, 2] + cz
            if rows == 6:
                J[row0 + 3, k] = S[k, 3]
                J[row0 + 4, k] = S[k, 4]
                J[row0 + 5, k] = S[k, 5]
        j = mi[j, MI_PARENT]


@njit(**JIT_OPTIONS)
def body_motion(mi, mf, ws, b):
    """(v_o, w, a_o, alpha) of body b as 12 scalars: its true spatial velocity and acceleration at the world
    origin (gravity, which oa carries as a_0 = -g, added back)."""
    nj = mi[0, MI_NJ]
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    return (ov[b, 0], ov[b, 1], ov[b, 2], ov[b, 3], ov[b, 4], ov[b, 5],
            oa[b, 0] + mf[0, 0], oa[b, 1] + mf[0, 1], oa[b, 2] + mf[0, 2],
            oa[b, 3] + mf[0, 3], oa[b, 4] + mf[0, 4], oa[b, 5] + mf[0, 5])


@njit(**JIT_OPTIONS)
def lwa_motion(mi, mf, ws, b, px, py, pz, rows, kd, out, row0):
    """out[row0:row0+rows] = the frame's acceleration plus kd times its velocity: for rows = 3 the classical
    acceleration of the point p, a_p + kd v_p; for rows = 6 the LWA spatial acceleration a_6 + kd (v_p, w).
    Needs forward_pass at FK_ACCELERATION."""
    vx, vy, vz, wx, wy, wz, ax, ay, az, bx, by, bz = body_motion(mi, mf, ws, b)
    cx, cy, cz = cross3(wx, wy, wz, px, py, pz)
    vpx, vpy, vpz = vx + cx, vy + cy, vz + cz
    cx, cy, cz = cross3(bx, by, bz, px, py, pz)
    apx, apy, apz = ax + cx, ay + cy, az + cz
    if rows == 3:
        cx, cy, cz = cross3(wx, wy, wz, vpx, vpy, vpz)
        apx, apy, apz = apx + cx, apy + cy, apz + cz
    out[row0], out[row0 + 1], out[row0 + 2] = apx + kd * vpx, apy + kd * vpy, apz + kd * vpz
    if rows == 6:
        out[row0 + 3], out[row0 + 4], out[row0 + 5] = bx + kd * wx, by + kd * wy, bz + kd * wz


@njit(**JIT_OPTIONS)
def lwa_motion_derivatives(mi, mf, ws, b, px, py, pz, rows, kp, kd, Dq, Dv, row0):
    """Rows row0..row0+rows of Dq, Dv (.., nv): the derivatives with respect to q (tangent space) and v of
    lwa_motion(...) + kp * (p, 0), at the state of the forward pass (FK_ACCELERATION; a = the acceleration
    at which they are wanted). Zero outside the dofs supporting b."""
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    S = region2(mi, ws, R_S, nv, 6)
    ov = region2(mi, ws, R_OV, nj, 6)
    oa = region2(mi, ws, R_OA, nj, 6)
    for r in range(row0, row0 + rows):
        for k in range(nv):
            Dq[r, k] = 0.0
            Dv[r, k] = 0.0
    vx, vy, vz, wx, wy, wz, ax, ay, az, bx, by, bz = body_motion(mi, mf, ws, b)
    cx, cy, cz = cross3(wx, wy, wz, px, py, pz)
    vpx, vpy, vpz = vx + cx, vy + cy, vz + cz
    j = b
    while j > 0:
        lam = mi[j, MI_PARENT]
        # v_b - v_lambda and a_b - a_lambda (gravity cancels in the difference)
        dvx, dvy, dvz = ov[b, 0] - ov[lam, 0], ov[b, 1] - ov[lam, 1], ov[b, 2] - ov[lam, 2]
        dwx, dwy, dwz = ov[b, 3] - ov[lam, 3], ov[b, 4] - ov[lam, 4], ov[b, 5] - ov[lam, 5]
        dax, day, daz = oa[b, 0] - oa[lam, 0], oa[b, 1] - oa[lam, 1], oa[b, 2] - oa[lam, 2]
        dbx, dby, dbz = oa[b, 3] - oa[lam, 3], oa[b, 4] - oa[lam, 4], oa[b, 5] - oa[lam, 5]
        lvx, lvy, lvz, lwx, lwy, lwz = ov[lam, 0], ov[lam, 1], ov[lam, 2], ov[lam, 3], ov[lam, 4], ov[lam, 5]
        jvx, jvy, jvz, jwx, jwy, jwz = ov[j, 0], ov[j, 1], ov[j, 2], ov[j, 3], ov[j, 4], ov[j, 5]
        iv = mi[j, MI_IDX_V]
        for k in range(iv, iv + mi[j, MI_NV]):
            sx, sy, sz, tx, ty, tz = S[k, 0], S[k, 1], S[k, 2], S[k, 3], S[k, 4], S[k, 5]
            (dpx, dpy, dpz, qvx, qvy, qvz, qwx, qwy, qwz,
             qpx, qpy, qpz) = velocity_column(sx, sy, sz, tx, ty, tz, dvx, dvy, dvz, dwx, dwy, dwz, px, py, pz,
                                              wx, wy, wz)
            # da_b/dq = S x (a_b - a_lambda) - (S x v_lambda) x (v_b - v_lambda)
            qax, qay, qaz, qbx, qby, qbz = motion_cross6(sx, sy, sz, tx, ty, tz, dax, day, daz, dbx, dby, dbz)
            mvx, mvy, mvz, mwx, mwy, mwz = motion_cross6(sx, sy, sz, tx, ty, tz, lvx, lvy, lvz, lwx, lwy, lwz)
            c0, c1, c2, e0, e1, e2 = motion_cross6(mvx, mvy, mvz, mwx, mwy, mwz, dvx, dvy, dvz, dwx, dwy, dwz)
            qax, qay, qaz, qbx, qby, qbz = qax - c0, qay - c1, qaz - c2, qbx - e0, qby - e1, qbz - e2
            # d(a_o + alpha x p)/dq = da_o + dalpha x p + alpha x dp
            c0, c1, c2 = cross3(qbx, qby, qbz, px, py, pz)
            e0, e1, e2 = cross3(bx, by, bz, dpx, dpy, dpz)
            gx, gy, gz = qax + c0 + e0, qay + c1 + e1, qaz + c2 + e2
            # velocity derivatives: dv_b/dv = S, dv_p/dv = dp, da_b/dv = S x (v_b - v_lambda) + v_j x S
            c0, c1, c2, e0, e1, e2 = motion_cross6(jvx, jvy, jvz, jwx, jwy, jwz, sx, sy, sz, tx, ty, tz)
            vax, vay, vaz, vbx, vby, vbz = qvx + c0, qvy + c1, qvz + c2, qwx + e0, qwy + e1, qwz + e2
            c0, c1, c2 = cross3(vbx, vby, vbz, px, py, pz)
            hx, hy, hz = vax + c0, vay + c1, vaz + c2  # d(a_o + alpha x p)/dv
            if rows == 3:
                # a_p = (a_o + alpha x p) + w x v_p
                c0, c1, c2 = cross3(qwx, qwy, qwz, vpx, vpy, vpz)
                e0, e1, e2 = cross3(wx, wy, wz, qpx, qpy, qpz)
                gx, gy, gz = gx + c0 + e0, gy + c1 + e1, gz + c2 + e2
                c0, c1, c2 = cross3(tx, ty, tz, vpx, vpy, vpz)
                e0, e1, e2 = cross3(wx, wy, wz, dpx, dpy, dpz)
                hx, hy, hz = hx + c0 + e0, hy + c1 + e1, hz + c2 + e2
            Dq[row0, k] = gx + kd * qpx + kp * dpx
            Dq[row0 + 1, k] = gy + kd * qpy + kp * dpy
            Dq[row0 + 2, k] = gz + kd * qpz + kp * dpz
            Dv[row0, k] = hx + kd * dpx
            Dv[row0 + 1, k] = hy + kd * dpy
            Dv[row0 + 2, k] = hz + kd * dpz
            if rows == 6:
                Dq[row0 + 3, k] = qbx + kd * qwx
                Dq[row0 + 4, k] = qby + kd * qwy
                Dq[row0 + 5, k] = qbz + kd * qwz
                Dv[row0 + 3, k] = vbx + kd * tx
                Dv[row0 + 4, k] = vby + kd * ty
                Dv[row0 + 5, k] = vbz + kd * tz
        j = lam


@njit(**JIT_OPTIONS)
def lwa_velocity_derivative(mi, ws, b, px, py, pz, rows, w, J, G, row0):
    """Rows row0..row0+rows of G (.., nv) = d(J w)/dq for the LWA Jacobian J of the frame at p on body b (its rows
    row0..row0+rows, from :func:`lwa_jacobian_into`) and a fixed velocity vector w (nv,): the q-derivative of the
    frame's velocity (v_p, and the angular velocity for rows = 6) were the joints moving at w. Needs forward_pass
    at FK_POSITION only. One walk from b up: after joint j, the partial sums (dv, dw) of S_k w_k are
    v_b - v_lambda(j) at w; the term w_b x dp/dq of dv_p/dq needs the total w_b, known at the end of the walk,
    and is added then with dp/dq = J_lin (zero outside the chain)."""
    nv = mi[0, MI_NVTOT]
    S = region2(mi, ws, R_S, nv, 6)
    for r in range(row0, row0 + rows):
        for k in range(nv):
            G[r, k] = 0.0
    dvx = dvy = dvz = dwx = dwy = dwz = 0.0
    j = b
    while j > 0:
        iv = mi[j, MI_IDX_V]
        for k in range(iv, iv + mi[j, MI_NV]):
            dvx += S[k, 0] * w[k]
            dvy += S[k, 1] * w[k]
            dvz += S[k, 2] * w[k]
            dwx += S[k, 3] * w[k]
            dwy += S[k, 4] * w[k]
            dwz += S[k, 5] * w[k]
        for k in range(iv, iv + mi[j, MI_NV]):
            (_, _, _, _, _, _, qwx, qwy, qwz,
             qpx, qpy, qpz) = velocity_column(S[k, 0], S[k, 1], S[k, 2], S[k, 3], S[k, 4], S[k, 5], dvx, dvy, dvz,
                                              dwx, dwy, dwz, px, py, pz, 0.0, 0.0, 0.0)
            G[row0, k], G[row0 + 1, k], G[row0 + 2, k] = qpx, qpy, qpz
            if rows == 6:
                G[row0 + 3, k], G[row0 + 4, k], G[row0 + 5, k] = qwx, qwy, qwz
        j = mi[j, MI_PARENT]
    for k in range(nv):  # (dwx, dwy, dwz) is now w_b
        cx, cy, cz = cross3(dwx, dwy, dwz, J[row0, k], J[row0 + 1, k], J[row0 + 2, k])
        G[row0, k] += cx
        G[row0 + 1, k] += cy
        G[row0 + 2, k] += cz


# --- the placement error of a frame and its Jacobian (the position gain of a frame contact) ----------------------
# With oMc = (R, p) the frame's placement and ref = (R_r, p_r) a reference placement, the error is
# (nu, omega) = log6(ref^-1 oMc) (nu linear, omega angular; Pinocchio's log6), and the kernels use it with world
# axes: (a, b) = (R nu, R omega). The right Jacobian of log6 (Pinocchio's Jlog6) in the (linear, angular) order,
#     Jlog6 = [[A, -A Q A], [0, A]],  A = I + W/2 + k W^2,  k = 1/theta^2 - (1 + cos theta)/(2 theta sin theta)
# (W = [omega]x, theta = |omega|; A is Jlog3) and Q the coupling block of the right Jacobian of exp6 at
# (nu, omega) (Barfoot, "State Estimation for Robotics", sec. 7.1.5, with (rho, phi) = -(nu, omega)):
#     Q = -N/2 + c1 (W N + N W - W N W) + c2 (3 W N W - W W N - N W W) + c3 (W N W W + W W N W),  N = [nu]x,
#     c1 = (theta - sin)/theta^3, c2 = (theta^2 + 2 cos - 2)/(2 theta^4), c3 = (2 theta - 3 sin + theta cos)/(2 theta^5).
# A and Q are polynomials in [nu]x and [omega]x, so R A R^T and R Q R^T are the same expressions in [a]x and
# [b]x: the world-axis Jacobian needs no rotation.

SMALL_ANGLE = 1e-4
"""Below this angle [rad] the coefficients of log6 and Jlog6 are taken from their Taylor series."""


@njit(**JIT_OPTIONS)
def placement_error(mi, ws, b, X, px, py, pz, ref):
    """(a, b, theta, k) as 8 scalars: the world-axis error (a, b) = (R nu, R omega) of the frame at placement X
    (12,) on body b, whose origin is p, against the reference placement ``ref`` (12: rotation row-major, then
    position; world), theta = |omega| and the coefficient k of Jlog3."""
    oMi = region3(mi, ws, R_OMI, mi[0, MI_NJ], 4, 4)
    o = oMi[b]
    # R = R_b X_rot, and the relative placement ref^-1 oMc = (R_r^T R, R_r^T (p - p_r))
    r00 = o[0, 0] * X[0] + o[0, 1] * X[3] + o[0, 2] * X[6]
    r01 = o[0, 0] * X[1] + o[0, 1] * X[4] + o[0, 2] * X[7]
    r02 = o[0, 0] * X[2] + o[0, 1] * X[5] + o[0, 2] * X[8]
    r10 = o[1, 0] * X[0] + o[1, 1] * X[3] + o[1, 2] * X[6]
    r11 = o[1, 0] * X[1] + o[1, 1] * X[4] + o[1, 2] * X[7]
    r12 = o[1, 0] * X[2] + o[1, 1] * X[5] + o[1, 2] * X[8]
    r20 = o[2, 0] * X[0] + o[2, 1] * X[3] + o[2, 2] * X[6]
    r21 = o[2, 0] * X[1] + o[2, 1] * X[4] + o[2, 2] * X[7]
    r22 = o[2, 0] * X[2] + o[2, 1] * X[5] + o[2, 2] * X[8]
    m00 = ref[0] * r00 + ref[3] * r10 + ref[6] * r20
    m01 = ref[0] * r01 + ref[3] * r11 + ref[6] * r21
    m02 = ref[0] * r02 + ref[3] * r12 + ref[6] * r22
    m10 = ref[1] * r00 + ref[4] * r10 + ref[7] * r20
    m11 = ref[1] * r01 + ref[4] * r11 + ref[7] * r21
    m12 = ref[1] * r02 + ref[4] * r12 + ref[7] * r22
    m20 = ref[2] * r00 + ref[5] * r10 + ref[8] * r20
    m21 = ref[2] * r01 + ref[5] * r11 + ref[8] * r21
    m22 = ref[2] * r02 + ref[5] * r12 + ref[8] * r22
    dx, dy, dz = px - ref[9], py - ref[10], pz - ref[11]
    tx = ref[0] * dx + ref[3] * dy + ref[6] * dz
    ty = ref[1] * dx + ref[4] * dy + ref[7] * dz
    tz = ref[2] * dx + ref[5] * dy + ref[8] * dz
    # log3: theta from the trace, omega from the skew part (from the diagonal near theta = pi, where it vanishes)
    c = min(1.0, max(-1.0, 0.5 * (m00 + m11 + m22 - 1.0)))
    theta = math.acos(c)
    s = math.sin(theta)
    ex, ey, ez = m21 - m12, m02 - m20, m10 - m01
    if theta < SMALL_ANGLE:
        f = 0.5 + theta * theta / 12.0
        wx, wy, wz = f * ex, f * ey, f * ez
        k = 1.0 / 12.0 + theta * theta / 720.0
    elif s < 1e-6:
        d = 1.0 - c
        wx = theta * math.sqrt(max(0.0, (m00 - c) / d))
        wy = theta * math.sqrt(max(0.0, (m11 - c) / d))
        wz = theta * math.sqrt(max(0.0, (m22 - c) / d))
        # signs: the largest component positive, the others from the symmetric part R + R^T = 2 (1 - c) u u^T
        if wx >= wy and wx >= wz:
            wy, wz = math.copysign(wy, m01 + m10), math.copysign(wz, m02 + m20)
        elif wy >= wz:
            wx, wz = math.copysign(wx, m01 + m10), math.copysign(wz, m12 + m21)
        else:
            wx, wy = math.copysign(wx, m02 + m20), math.copysign(wy, m12 + m21)
        k = 1.0 / (theta * theta)
    else:
        f = theta / (2.0 * s)
        wx, wy, wz = f * ex, f * ey, f * ez
        k = 1.0 / (theta * theta) - (1.0 + c) / (2.0 * theta * s)
    # nu = V^-1 t = t - omega x t / 2 + k omega x (omega x t)
    ux, uy, uz = cross3(wx, wy, wz, tx, ty, tz)
    gx, gy, gz = cross3(wx, wy, wz, ux, uy, uz)
    nx, ny, nz = tx - 0.5 * ux + k * gx, ty - 0.5 * uy + k * gy, tz - 0.5 * uz + k * gz
    return (r00 * nx + r01 * ny + r02 * nz, r10 * nx + r11 * ny + r12 * nz, r20 * nx + r21 * ny + r22 * nz,
            r00 * wx + r01 * wy + r02 * wz, r10 * wx + r11 * wy + r12 * wz, r20 * wx + r21 * wy + r22 * wz,
            theta, k)


@njit(**JIT_OPTIONS)
def skew_into(x, y, z, out):
    out[0, 0], out[0, 1], out[0, 2] = 0.0, -z, y
    out[1, 0], out[1, 1], out[1, 2] = z, 0.0, -x
    out[2, 0], out[2, 1], out[2, 2] = -y, x, 0.0


@njit(**JIT_OPTIONS)
def product3(A, B, out):
    for r in range(3):
        for c in range(3):
            out[r, c] = A[r, 0] * B[0, c] + A[r, 1] * B[1, c] + A[r, 2] * B[2, c]


@njit(**JIT_OPTIONS)
def placement_error_jacobian(ax, ay, az, bx, by, bz, theta, k, K, T):
    """K (6, 6) = d(a, b)/d(frame motion) for the error of :func:`placement_error`: the variation of (a, b) when
    the frame moves by the LWA motion (v_p, w) (a Jacobian column), (a, b) turning with the frame:
    K = [[A, -A Q A - [a]x], [0, A - [b]x]] in world axes. T: (8, 3, 3) scratch."""
    W, N, A, Q, P1, P2, P3, P4 = T[0], T[1], T[2], T[3], T[4], T[5], T[6], T[7]
    skew_into(bx, by, bz, W)
    skew_into(ax, ay, az, N)
    product3(W, W, P1)  # W^2
    for r in range(3):
        for c in range(3):
            A[r, c] = (1.0 if r == c else 0.0) + 0.5 * W[r, c] + k * P1[r, c]
    if theta < SMALL_ANGLE:
        c1, c2, c3 = 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0
    else:
        t2, sn, cs = theta * theta, math.sin(theta), math.cos(theta)
        c1 = (theta - sn) / (t2 * theta)
        c2 = (t2 + 2.0 * cs - 2.0) / (2.0 * t2 * t2)
        c3 = (2.0 * theta - 3.0 * sn + theta * cs) / (2.0 * t2 * t2 * theta)
    product3(W, N, P2)  # W N
    product3(P2, W, P3)  # W N W
    product3(N, W, P4)  # N W
    for r in range(3):
        for c in range(3):
            Q[r, c] = -0.5 * N[r, c] + c1 * (P2[r, c] + P4[r, c] - P3[r, c])
    product3(P1, N, P2)  # W W N
    product3(N, P1, P4)  # N W W
    for r in range(3):
        for c in range(3):
            Q[r, c] += c2 * (3.0 * P3[r, c] - P2[r, c] - P4[r, c])
    product3(P3, W, P2)  # W N W W
    product3(W, P3, P4)  # W W N W
    for r in range(3):
        for c in range(3):
            Q[r, c] += c3 * (P2[r, c] + P4[r, c])
    product3(A, Q, P1)
    product3(P1, A, P2)  # A Q A
    for r in range(3):
        for c in range(3):
            K[r, c] = A[r, c]
            K[r, 3 + c] = -P2[r, c] - N[r, c]
            K[3 + r, c] = 0.0
            K[3 + r, 3 + c] = A[r, c] - W[r, c]


# --- public frame functions ---------------------------------------------------------------------------------
# One kernel computes, for one frame, what its level asks for, all LOCAL_WORLD_ALIGNED (world axes, origin p):
# level 0 the placement and the Jacobian, 1 + the velocity, 2 + the accelerations, 3 + the derivatives. The
# Python functions express them in the reference frame asked for.

LEVEL_JACOBIAN, LEVEL_VELOCITY, LEVEL_ACCELERATION, LEVEL_DERIVATIVES = 0, 1, 2, 3


@njit(**JIT_OPTIONS)
def _frame_kernel(mi, mf, ws, q, v, a, X, joint, level, pose, motion, derivs):
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    code = check_state(mi, ws, q, v, a, zero_forces(mi, ws))
    if code == 0:
        code = check_vector(X, FRAME_COLS, 6)
    if code == 0 and not 0 <= joint < nj:
        code = status(STATUS_SHAPE, 7, 0)
    if code == 0 and (pose.shape[0] != 4 or pose.shape[1] != 4 or motion.shape[0] != 3 or motion.shape[1] != 6
                      or derivs.shape[0] != 4 or derivs.shape[1] != 6 or derivs.shape[2] != nv):
        code = status(STATUS_SHAPE, 9, 0)
    if code != 0:
        return code
    if joint == 0:  # fixed to the universe (checked like any frame): it does not move
        for r in range(3):
            for c in range(3):
                pose[r, c] = X[3 * r + c]
            pose[r, 3] = X[FRAME_POS + r]
            pose[3, r] = 0.0
        pose[3, 3] = 1.0
        motion[:, :] = 0.0
        derivs[:, :, :] = 0.0
        return 0
    forward_pass(mi, mf, ws, q, v, a, zero_forces(mi, ws), FK_ACCELERATION if level >= LEVEL_ACCELERATION
                 else FK_VELOCITY if level == LEVEL_VELOCITY else FK_POSITION)
    oMi = region3(mi, ws, R_OMI, nj, 4, 4)
    o = oMi[joint]
    for r in range(3):
        for c in range(3):
            pose[r, c] = o[r, 0] * X[c] + o[r, 1] * X[3 + c] + o[r, 2] * X[6 + c]
        pose[3, r] = 0.0
    pose[3, 3] = 1.0
    px, py, pz = frame_origin(mi, ws, joint, X)
    pose[0, 3], pose[1, 3], pose[2, 3] = px, py, pz
    lwa_jacobian_into(mi, ws, joint, px, py, pz, 6, derivs[0], 0)
    if level >= LEVEL_VELOCITY:
        ov = region2(mi, ws, R_OV, nj, 6)
        vx, vy, vz, wx, wy, wz = ov[joint, 0], ov[joint, 1], ov[joint, 2], ov[joint, 3], ov[joint, 4], ov[joint, 5]
        cx, cy, cz = cross3(wx, wy, wz, px, py, pz)
        motion[0, 0], motion[0, 1], motion[0, 2] = vx + cx, vy + cy, vz + cz
        motion[0, 3], motion[0, 4], motion[0, 5] = wx, wy, wz
    if level >= LEVEL_ACCELERATION:
        lwa_motion(mi, mf, ws, joint, px, py, pz, 6, 0.0, motion[1], 0)
        lwa_motion(mi, mf, ws, joint, px, py, pz, 3, 0.0, motion[2], 0)
        for k in range(3, 6):
            motion[2, k] = motion[1, k]
    if level >= LEVEL_DERIVATIVES:
        lwa_velocity_derivative(mi, ws, joint, px, py, pz, 6, v, derivs[0], derivs[1], 0)
        lwa_motion_derivatives(mi, mf, ws, joint, px, py, pz, 6, 0.0, 0.0, derivs[2], derivs[3], 0)
    return 0


FRAME = register(_frame_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 a:f1 X:f1 joint:n level:n pose:F2 motion:F2"
                 " derivs:F3")


@njit(**JIT_OPTIONS)
def _com_kernel(mi, mf, ws, q, v, com, vcom, Jcom):
    nj, nv = mi[0, MI_NJ], mi[0, MI_NVTOT]
    code = check_state(mi, ws, q, v, v, zero_forces(mi, ws))
    if code == 0 and (com.shape[0] != 3 or vcom.shape[0] != 3 or Jcom.shape[0] != 3 or Jcom.shape[1] != nv):
        code = status(STATUS_SHAPE, 5, 0)
    if code != 0:
        return code
    position_pass(mi, mf, ws, q)
    oI = region2(mi, ws, R_OI, nj, 10)
    IC = region2(mi, ws, R_IC10, nj, 10)  # subtree mass and first moment (the first 4 parameters)
    S = region2(mi, ws, R_S, nv, 6)
    for i in range(nj):
        for k in range(4):
            IC[i, k] = oI[i, k] if i > 0 else 0.0
    for i in range(nj - 1, 0, -1):
        parent = mi[i, MI_PARENT]
        if parent > 0:
            for k in range(4):
                IC[parent, k] += IC[i, k]
    total = 0.0
    hx = hy = hz = 0.0
    for i in range(1, nj):
        if mi[i, MI_PARENT] == 0:
            total += IC[i, 0]
            hx += IC[i, 1]
            hy += IC[i, 2]
            hz += IC[i, 3]
    com[0], com[1], com[2] = hx / total, hy / total, hz / total
    # Column k: (m_sub S_lin + S_ang x h_sub) / m over the subtree of dof k's joint.
    for i in range(1, nj):
        m_sub, sx, sy, sz = IC[i, 0], IC[i, 1], IC[i, 2], IC[i, 3]
        iv = mi[i, MI_IDX_V]
        for k in range(iv, iv + mi[i, MI_NV]):
            cx, cy, cz = cross3(S[k, 3], S[k, 4], S[k, 5], sx, sy, sz)
            Jcom[0, k] = (m_sub * S[k, 0] + cx) / total
            Jcom[1, k] = (m_sub * S[k, 1] + cy) / total
            Jcom[2, k] = (m_sub * S[k, 2] + cz) / total
    for r in range(3):
        acc = 0.0
        for k in range(nv):
            acc += Jcom[r, k] * v[k]
        vcom[r] = acc
    return 0


COM = register(_com_kernel, "mi:i2 mf:f2 data:W q:f1 v:f1 com:F1 vcom:F1 Jcom:F2")

REFERENCES = ("local_world_aligned", "local", "world")
"""Reference frames of the public functions: LOCAL_WORLD_ALIGNED (world axes at the frame's origin), LOCAL (the
frame's own axes and origin), WORLD (world axes and origin: the spatial quantities of Featherstone)."""


class FrameData:
    """The results of the frame functions on one Data (kept on it): views overwritten by the next call."""

    def __init__(self, nv: int) -> None:
        self.pose = np.zeros((4, 4))
        self.motion = np.zeros((3, 6))
        self.derivs = np.zeros((4, 6, nv))
        self.com, self.vcom, self.Jcom = np.zeros(3), np.zeros(3), np.zeros((3, nv))


def _frame_data(data: Data) -> FrameData:
    try:
        return data._frame_data
    except AttributeError:
        if not isinstance(data, Data):
            raise InputError("data: not a workspace of this model (use model.create_data())", "data") from None
        data._frame_data = FrameData(data.ddq.shape[0])
        return data._frame_data


def _frame_description(model: Model, frame: str):
    try:
        joint, placement = model.frames[frame]
    except (KeyError, TypeError):
        raise InputError(f"frame: no frame named {frame!r}; model.frame_names lists them", "frame") from None
    return int(joint), np.concatenate([placement[:3, :3].ravel(), placement[:3, 3]])


def _run_frame(model: Model, data: Data, frame: str, q, v, a, level: int, reference: str) -> FrameData:
    if reference not in REFERENCES:
        raise InputError(f"reference: expected one of {REFERENCES}, got {reference!r}", "reference")
    check_model(model)
    joint, X = _frame_description(model, frame)
    fd = _frame_data(data)
    zero = np.zeros(model.nv)
    arguments = [q, zero if v is None else v, zero if a is None else a]
    try:
        code = FRAME.call(model.mi, model.mf, data.ws, *arguments, X, joint, level, fd.pose, fd.motion, fd.derivs)
    except (TypeError, AttributeError):
        converted = [convert(x, arg) for x, arg in zip(arguments, FRAME.arguments[3:6])]
        code = FRAME.call(model.mi, model.mf, data.ws, *converted, X, joint, level, fd.pose, fd.motion, fd.derivs)
    if code:
        raise FRAME.error(model, code)
    return fd


def _skew(p: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])


def _express(fd: FrameData, x: np.ndarray, reference: str) -> np.ndarray:
    """A motion (6,) or motion columns (6, n) given LWA, expressed in ``reference`` (a new array)."""
    if reference == "local_world_aligned":
        return x.copy()
    R, p = fd.pose[:3, :3], fd.pose[:3, 3]
    if reference == "local":
        return np.concatenate([R.T @ x[:3], R.T @ x[3:]])
    # world: the same rigid motion seen at the world origin, v_o = v_p - w x p = v_p + p x w
    return np.concatenate([x[:3] + _skew(p) @ x[3:], x[3:]])


def frame_jacobian(model: Model, data: Data, q, frame: str, reference: str = "local_world_aligned") -> np.ndarray:
    """Jacobian (6, nv) of a frame, [linear; angular], in ``reference`` (see :data:`REFERENCES`): v_frame = J v."""
    fd = _run_frame(model, data, frame, q, None, None, LEVEL_JACOBIAN, reference)
    return _express(fd, fd.derivs[0], reference)


def frame_velocity(model: Model, data: Data, q, v, frame: str, reference: str = "local_world_aligned") -> np.ndarray:
    """Spatial velocity (6,) [m/s, rad/s] of a frame, [linear, angular], in ``reference``."""
    fd = _run_frame(model, data, frame, q, v, None, LEVEL_VELOCITY, reference)
    return _express(fd, fd.motion[0], reference)


def frame_acceleration(model: Model, data: Data, q, v, a, frame: str,
                       reference: str = "local_world_aligned") -> np.ndarray:
    """Spatial acceleration (6,) [m/s^2, rad/s^2] of a frame (the derivative of its spatial velocity in a fixed
    frame: not the acceleration of its origin), in ``reference``."""
    fd = _run_frame(model, data, frame, q, v, a, LEVEL_ACCELERATION, reference)
    return _express(fd, fd.motion[1], reference)


def frame_classical_acceleration(model: Model, data: Data, q, v, a, frame: str,
                                 reference: str = "local_world_aligned") -> np.ndarray:
    """Classical acceleration (6,) of a frame: the acceleration of its origin [m/s^2] and its angular
    acceleration [rad/s^2], with the axes of ``reference`` ("local_world_aligned" or "local")."""
    if reference == "world":
        raise InputError("reference: the classical acceleration is defined at the frame's origin: use"
                         " 'local_world_aligned' or 'local'", "reference")
    fd = _run_frame(model, data, frame, q, v, a, LEVEL_ACCELERATION, reference)
    return _express(fd, fd.motion[2], reference)


def _express_derivative(fd: FrameData, x: np.ndarray, dx: np.ndarray, reference: str) -> np.ndarray:
    """The q-derivative (6, nv) of a motion x (LWA, its derivative dx) once expressed in ``reference``."""
    J = fd.derivs[0]
    if reference == "local_world_aligned":
        return dx.copy()
    R, p = fd.pose[:3, :3], fd.pose[:3, 3]
    if reference == "local":
        # d(R^T y) = R^T (dy + y x w_k): the frame turns with angular velocity column w_k = J_ang[:, k]
        return np.concatenate([R.T @ (dx[:3] + _skew(x[:3]) @ J[3:]), R.T @ (dx[3:] + _skew(x[3:]) @ J[3:])])
    # world: d(v_p + p x w) = dv_p + dp x w + p x dw, dp = J_lin
    return np.concatenate([dx[:3] - _skew(x[3:]) @ J[:3] + _skew(p) @ dx[3:], dx[3:]])


def frame_velocity_derivatives(model: Model, data: Data, q, v, frame: str, reference: str = "local_world_aligned"):
    """(dv_dq, dv_dv), each (6, nv): the derivatives of :func:`frame_velocity` (q in the tangent space)."""
    fd = _run_frame(model, data, frame, q, v, None, LEVEL_DERIVATIVES, reference)
    x, J = fd.motion[0], fd.derivs[0]
    return _express_derivative(fd, x, fd.derivs[1], reference), _express(fd, J, reference)


def frame_acceleration_derivatives(model: Model, data: Data, q, v, a, frame: str,
                                   reference: str = "local_world_aligned"):
    """(dv_dq, da_dq, da_dv, da_da), each (6, nv): the derivatives of :func:`frame_velocity` and of
    :func:`frame_acceleration` (as Pinocchio's getFrameAccelerationDerivatives)."""
    fd = _run_frame(model, data, frame, q, v, a, LEVEL_DERIVATIVES, reference)
    J = fd.derivs[0]
    dv_dq = _express_derivative(fd, fd.motion[0], fd.derivs[1], reference)
    da_dq = _express_derivative(fd, fd.motion[1], fd.derivs[2], reference)
    # The acceleration does not turn the frame: its v-derivative is expressed like a motion (in LOCAL the
    # rotation of the axes depends on q only).
    return dv_dq, da_dq, _express(fd, fd.derivs[3], reference), _express(fd, J, reference)


def _run_com(model: Model, data: Data, q, v) -> FrameData:
    check_model(model)
    fd = _frame_data(data)
    v = np.zeros(model.nv) if v is None else v
    try:
        code = COM.call(model.mi, model.mf, data.ws, q, v, fd.com, fd.vcom, fd.Jcom)
    except (TypeError, AttributeError):
        converted = [convert(x, arg) for x, arg in zip((q, v), COM.arguments[3:5])]
        code = COM.call(model.mi, model.mf, data.ws, *converted, fd.com, fd.vcom, fd.Jcom)
    if code:
        raise COM.error(model, code)
    return fd


def center_of_mass(model: Model, data: Data, q, v=None):
    """Center of mass (3,) [m] in the world; with v, also its velocity (3,) [m/s]: returns (com, vcom)."""
    fd = _run_com(model, data, q, v)
    return fd.com.copy() if v is None else (fd.com.copy(), fd.vcom.copy())


def com_jacobian(model: Model, data: Data, q) -> np.ndarray:
    """Jacobian (3, nv) of the center of mass: vcom = Jcom v (world axes)."""
    return _run_com(model, data, q, None).Jcom.copy()
