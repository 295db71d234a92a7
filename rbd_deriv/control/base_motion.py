"""A legged robot's base in motion: its horizontal reference path (:class:`BasePath`), the bounds its posture
allows, and a motion checked against them.

A base walking at a velocity and swaying sideways (the motion a :class:`~rbd_deriv.control.legged_loop.LeggedLoop`
is given, :class:`~rbd_deriv.control.base_motion.BasePath`) is followed only within what its legs can give:
:func:`motion_bounds` draws a speed and a sideways acceleration from the reference posture, :func:`checked_motion`
refuses a motion beyond them (or beyond :data:`~rbd_deriv.control.constants.MAX_BASE_SPEED` and
:data:`~rbd_deriv.control.constants.MAX_SWAY_AMPLITUDE`, which no robot follows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence, Tuple

import numpy as np

import rbd_deriv as rd
from rbd_deriv.control.constants import GRAVITY, MAX_BASE_SPEED, MAX_SWAY_AMPLITUDE
from rbd_deriv.exceptions import InputError

__all__ = ["BasePath", "checked_motion", "motion_bounds", "sway_peak_speed", "turned"]


def turned(angle: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(K, 2) the planar vectors (x, y) (K,) (or scalars) turned by ``angle`` (K,) [rad] about the vertical."""
    cos, sin = np.cos(angle), np.sin(angle)
    out = np.empty(np.shape(cos) + (2,))
    out[..., 0] = cos * x - sin * y
    out[..., 1] = sin * x + cos * y
    return out


def sway_peak_speed(amplitude: float, period: float) -> float:
    """The peak speed [m/s] of a sway A sin(2 pi t / T): 2 pi A / T."""
    return 2.0 * math.pi * amplitude / period


@dataclass(frozen=True)
class BasePath:
    r"""The base's planar reference over time [s]: from ``origin`` (x, y) [m] and ``heading`` [rad] (yaw) at
    ``start``, moving at ``velocity`` (vx, vy) [m/s] in its heading frame (x forward, y left: a velocity
    command's ``linear``) while its heading turns at ``yaw_rate`` [rad/s]; plus a sideways sway ``amplitude``
    sin(2 pi (t - sway_start) / ``period``) [m] along the heading frame's y (``sway_start`` None: ``start``).
    Before ``start`` it stays at ``origin``.

    With :math:`\theta(t) = \theta_0 + \omega t` (t from ``start``) the position is
    :math:`p_0 + \int_0^t R(\theta(s))\,v\,ds = p_0 + t\,\mathrm{sinc}(\omega t / 2)\,R(\theta_0 + \omega t/2)\,v`
    (an arc, a straight line when :math:`\omega = 0`).
    """

    origin: tuple = (0.0, 0.0)
    start: float = 0.0
    velocity: tuple = (0.0, 0.0)
    amplitude: float = 0.0
    period: float = 2.0
    heading: float = 0.0
    yaw_rate: float = 0.0
    sway_start: float | None = None

    def __post_init__(self) -> None:
        for name, size in (("origin", 2), ("velocity", 2)):
            value = np.asarray(getattr(self, name), dtype=float)
            if value.shape != (size,) or not np.isfinite(value).all():
                raise InputError(f"{name} must be {size} finite numbers, got {getattr(self, name)!r}", name)
            object.__setattr__(self, name, tuple(float(x) for x in value))
        if not (math.isfinite(self.amplitude) and self.amplitude >= 0.0):
            raise InputError(f"amplitude must be >= 0 [m], got {self.amplitude!r}", "amplitude")
        if not (math.isfinite(self.period) and self.period > 0.0):
            raise InputError(f"period must be > 0 [s], got {self.period!r}", "period")
        for name in ("heading", "yaw_rate", "start"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"{name} must be finite, got {getattr(self, name)!r}", name)
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.sway_start is None:
            object.__setattr__(self, "sway_start", self.start)

    def at(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions (K, 2) [m] and velocities (K, 2) [m/s], in the world frame, at ``times`` (K,) [s]."""
        position, velocity, _ = self.poses(times)
        return position, velocity

    def poses(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions (K, 2) [m], velocities (K, 2) [m/s] in the world frame and headings (K,) [rad] at ``times``
        (K,) [s]."""
        times = np.asarray(times, dtype=float)
        moving = times >= self.start
        elapsed = np.where(moving, times - self.start, 0.0)
        heading = self.heading + self.yaw_rate * elapsed
        middle = self.heading + 0.5 * self.yaw_rate * elapsed
        chord = elapsed * np.sinc(0.5 * self.yaw_rate * elapsed / np.pi)   # np.sinc(x) = sin(pi x) / (pi x)
        vx, vy = self.velocity
        position = np.asarray(self.origin) + chord[:, None] * turned(middle, vx, vy)
        velocity = np.where(moving[:, None], turned(heading, vx, vy), 0.0)
        if self.amplitude:
            omega = 2.0 * np.pi / self.period
            swaying = np.where(moving, times - self.sway_start, 0.0)
            sway = self.amplitude * np.sin(omega * swaying)
            sway_rate = np.where(moving, self.amplitude * omega * np.cos(omega * swaying), 0.0)
            lateral = turned(heading, 0.0, 1.0)            # the heading frame's y in the world
            position += sway[:, None] * lateral
            # d/dt (s(t) lateral(theta(t))) = s' lateral - s omega_yaw (cos, sin)
            forward = turned(heading, 1.0, 0.0)
            velocity += sway_rate[:, None] * lateral - (sway * np.where(moving, self.yaw_rate, 0.0))[:, None] * forward
        return position, velocity, heading

    def moved(self, time: float, velocity: Sequence[float] | None = None, amplitude: float | None = None,
              period: float | None = None, yaw_rate: float | None = None,
              origin: Sequence[float] | None = None, heading: float | None = None) -> "BasePath":
        """This path until ``time`` [s], then the given velocity, turn rate and sway (the others unchanged) from the
        pose it reached there, or from ``origin`` and ``heading`` when given. A new sway restarts at its zero; an
        unchanged one goes on in its phase (``origin`` is then where the path is without it)."""
        position, _, reached = self.poses(np.array([time]))
        swaying = (amplitude is None or amplitude == self.amplitude) and (period is None or period == self.period)
        sway_start = self.sway_start if swaying else float(time)
        if origin is None:
            origin = position[0]
            if swaying:   # the sway is added on top of the path's own motion
                theta = float(reached[0])
                offset = self.amplitude * math.sin(2.0 * math.pi * (time - self.sway_start) / self.period)
                origin = origin - offset * np.array([-math.sin(theta), math.cos(theta)])
        elif swaying:
            sway_start = float(time)
        return replace(self, origin=tuple(origin), start=float(time), sway_start=sway_start,
                       heading=float(reached[0]) if heading is None else float(heading),
                       velocity=self.velocity if velocity is None else tuple(velocity),
                       yaw_rate=self.yaw_rate if yaw_rate is None else float(yaw_rate),
                       amplitude=self.amplitude if amplitude is None else float(amplitude),
                       period=self.period if period is None else float(period))


def motion_bounds(model: Any, data: Any, q: np.ndarray, feet: Sequence[str], margin: float) -> Tuple[float, float]:
    """The base speed [m/s] and sway acceleration [m/s^2] a robot standing at q (nq,) on ``feet`` can follow,
    times ``margin``.

    With h the height of the base above its feet and w the smallest sideways distance from the base to a foot:
    a speed of :math:`\\sqrt{g h}` (a Froude number of 1, where a walker's feet leave the ground), and a
    sideways acceleration of :math:`g w / h` (the most the feet's forces can give the base before their centre of
    pressure leaves the support).

    Raises:
        InputError: A posture whose base is not above its feet, or has a foot straight under it (``posture``).
    """
    base = model.idx_q[rd.FREE_FLYER_JOINT]
    rd.forward_kinematics(model, data, q)
    positions = np.array([rd.frame_placement(model, data, foot)[:3, 3] for foot in feet])
    height = float(q[base + 2] - positions[:, 2].mean())
    width = float(np.abs(positions[:, 1] - q[base + 1]).min())
    if not (height > 0.0 and width > 0.0):
        raise InputError(f"the reference posture's base is {height:.3g} m above its feet and {width:.3g} m "
                         "beside the nearest: no motion bound can be drawn from it", "posture")
    return margin * math.sqrt(GRAVITY * height), margin * GRAVITY * width / height


def checked_motion(velocity: Sequence[float], amplitude: float, period: float, max_speed: float,
                   max_acceleration: float, margin: float) -> Tuple[Tuple[float, float], float, float]:
    """(velocity, amplitude, period) if a robot can follow the base velocity (vx, vy) [m/s] and a sideways sway of
    ``amplitude`` [m] over ``period`` [s] together: the walk's speed plus the sway's peak speed
    :math:`2 \\pi A / T` within ``max_speed``, the sway's peak acceleration :math:`4 \\pi^2 A / T^2` within
    ``max_acceleration`` (``margin`` is the fraction of the robot's bounds they are, for the message).

    Raises:
        InputError: A value out of its range (``base_velocity``, ``sway_amplitude``, ``sway_period``) or a motion
            the robot cannot follow (``motion``).
    """
    value = np.asarray(velocity, dtype=float)
    if value.shape != (2,) or not np.isfinite(value).all() or np.linalg.norm(value) > MAX_BASE_SPEED:
        raise InputError(f"base velocity must be (vx, vy), finite, at most {MAX_BASE_SPEED} m/s, got "
                         f"{velocity!r}", "base_velocity")
    if not (math.isfinite(amplitude) and 0.0 <= amplitude <= MAX_SWAY_AMPLITUDE):
        raise InputError(f"sway amplitude must be in [0, {MAX_SWAY_AMPLITUDE}] m, got {amplitude!r}",
                         "sway_amplitude")
    if not (math.isfinite(period) and period > 0.0):
        raise InputError(f"sway period must be > 0 s, got {period!r}", "sway_period")
    omega = 2.0 * math.pi / period
    speed = float(np.linalg.norm(value)) + sway_peak_speed(amplitude, period)
    acceleration = amplitude * omega ** 2
    if speed > max_speed or acceleration > max_acceleration:
        raise InputError(
            f"base velocity {value.tolist()} m/s with a sway of {amplitude:g} m over {period:g} s peaks at "
            f"{speed:.3g} m/s and {acceleration:.3g} m/s^2 sideways; this robot follows at most {max_speed:.3g} m/s "
            f"and {max_acceleration:.3g} m/s^2 (motion_margin {margin:g} of its bounds)", "motion")
    return (float(value[0]), float(value[1])), float(amplitude), float(period)
