"""Contact schedules: which contacts are closed at each knot of the horizon.

A :class:`ContactSchedule` is a boolean table ``active`` (N, nc): contact c holds at step k
(its force acts during the step leaving knot k). From it follow

- the touchdown knots (``touchdown`` (N, nc)): contact c closes at knot k after being open at
  k - 1 (or in the state before the horizon), where an impulse starts the step;
- the force layout of the dynamics (``force_offsets`` (N, nc)): the active contacts of a knot
  stacked in contact order, 3 rows per point contact and 6 per frame contact, -1 for an open
  contact; ``force_rows`` is the largest stack, the m of the dynamics provider.

Gaits are periodic patterns (:class:`Gait`): standing, a phase table (:meth:`Gait.from_phases`: a period,
the share of it each foot spends on the ground and the phase at which each foot lands, the form in which
a robot's configuration names its gaits), trot (diagonal pairs of feet alternate) and walk (one foot in
the air at a time) spelt in knots. :meth:`Gait.schedule` reads a pattern from any knot on, so a receding
horizon moves along the gait by starting one knot later each step of dt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rbd_deriv.core.contact import FORCE_ROWS
from rbd_deriv.exceptions import InputError


def _names(names: Sequence[str]) -> tuple[str, ...]:
    names = tuple(names)
    if not names:
        raise InputError("a schedule needs at least one contact", "names")
    if len(set(names)) != len(names):
        raise InputError(f"contact names repeat: {list(names)}", "names")
    return names


def _kinds(kinds: str | Sequence[str], count: int) -> tuple[str, ...]:
    kinds = (kinds,) * count if isinstance(kinds, str) else tuple(kinds)
    if len(kinds) != count:
        raise InputError(f"{len(kinds)} contact kinds for {count} contacts", "kinds")
    for kind in kinds:
        if kind not in FORCE_ROWS:
            raise InputError(f"contact kind {kind!r} is neither 'point' nor 'frame'", "kinds")
    return kinds


class ContactSchedule:
    """Active contacts at each of N knots.

    Args:
        names: Contact frame names, in the order of the dynamics' force stack.
        active: (N, nc) booleans.
        kinds: ``"point"`` or ``"frame"`` for all contacts, or one per contact.
        before: (nc,) contacts closed before knot 0 (default: those active at knot 0, so the
            horizon does not start with a touchdown).
        can_fly: False (default) refuses a knot without any contact: a robot that cannot fly
            has no dynamics to follow there.

    Raises:
        InputError: Empty or repeated names, a table of the wrong shape, an unknown kind, a
            knot without contact when ``can_fly`` is False.
    """

    def __init__(self, names: Sequence[str], active: np.ndarray,
                 kinds: str | Sequence[str] = "point", before: np.ndarray | None = None,
                 can_fly: bool = False) -> None:
        self.names = _names(names)
        self.kinds = _kinds(kinds, len(self.names))
        active = np.array(active, dtype=bool)
        if active.ndim != 2 or active.shape[1] != len(self.names) or active.shape[0] < 1:
            raise InputError(f"active must be (N, {len(self.names)}), got {active.shape}",
                             "active")
        if not can_fly:
            flying = np.flatnonzero(~active.any(axis=1))
            if flying.size:
                raise InputError(f"knots {flying.tolist()} have no contact; pass can_fly=True "
                                 "for a robot that may leave the ground", "active")
        before = active[0] if before is None else np.array(before, dtype=bool)
        if before.shape != (len(self.names),):
            raise InputError(f"before must have {len(self.names)} entries", "before")
        self.active = active
        self.before = before
        self.active.setflags(write=False)
        self.before.setflags(write=False)

    @property
    def horizon(self) -> int:
        """Number of knots N."""
        return self.active.shape[0]

    @property
    def touchdown(self) -> np.ndarray:
        """(N, nc): contact c closes at knot k."""
        previous = np.vstack([self.before[None, :], self.active[:-1]])
        return self.active & ~previous

    @property
    def liftoff(self) -> np.ndarray:
        """(N, nc): contact c opens at knot k."""
        previous = np.vstack([self.before[None, :], self.active[:-1]])
        return ~self.active & previous

    def touchdown_knots(self) -> np.ndarray:
        """Knots where at least one contact closes (where the step starts with an impulse)."""
        return np.flatnonzero(self.touchdown.any(axis=1))

    def contacts_at(self, knot: int) -> list[str]:
        """Names of the contacts closed at ``knot``, in stack order."""
        return [name for name, on in zip(self.names, self.active[knot]) if on]

    def force_offsets(self) -> np.ndarray:
        """(N, nc) first force row of each closed contact in its knot's stack, -1 if open."""
        rows = np.array([FORCE_ROWS[kind] for kind in self.kinds])
        stacked = np.cumsum(self.active * rows, axis=1) - self.active * rows
        return np.where(self.active, stacked, -1)

    @property
    def force_rows(self) -> int:
        """Rows m of the largest force stack over the horizon."""
        rows = np.array([FORCE_ROWS[kind] for kind in self.kinds])
        return int((self.active * rows).sum(axis=1).max())


@dataclass(frozen=True)
class Gait:
    """A periodic contact pattern.

    Attributes:
        names: Contact names.
        pattern: (P, nc) booleans, one period of P knots.
        kinds: Contact kind(s), as for :class:`ContactSchedule`.
    """

    names: tuple[str, ...]
    pattern: np.ndarray
    kinds: str | tuple[str, ...] = "point"

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", _names(self.names))
        pattern = np.array(self.pattern, dtype=bool)
        if pattern.ndim != 2 or pattern.shape[1] != len(self.names) or pattern.shape[0] < 1:
            raise InputError(f"pattern must be (P, {len(self.names)}), got {pattern.shape}",
                             "pattern")
        pattern.setflags(write=False)
        object.__setattr__(self, "pattern", pattern)

    @property
    def period(self) -> int:
        """Knots P of one period."""
        return self.pattern.shape[0]

    def schedule(self, horizon: int, start: int = 0, can_fly: bool = False) -> ContactSchedule:
        """The schedule of ``horizon`` knots from knot ``start`` of the gait (any integer).

        A contact that closed at the knot just before ``start`` closes again at knot 0 (``before`` leaves it
        open): its touchdown impulse is applied to the measured state. A foot that lands up to a knot late is then
        stopped by the plan's impulse instead of moving on into the floor in it: without that, a humanoid's plan
        one tick after a late landing asked the other sole to pull hundreds of newtons, and the next solve failed.
        A foot that has landed is not moved by it (its velocity along the contact is already zero).
        """
        if int(horizon) != horizon or horizon < 1:
            raise InputError(f"horizon must be a positive integer, got {horizon!r}", "horizon")
        rows = (start + np.arange(horizon)) % self.period
        before = self.pattern[(start - 1) % self.period] & self.pattern[(start - 2) % self.period]
        return ContactSchedule(self.names, self.pattern[rows], self.kinds, before, can_fly)

    @classmethod
    def standing(cls, names: Sequence[str], kinds: str | Sequence[str] = "point") -> "Gait":
        """Every contact closed."""
        return cls(tuple(names), np.ones((1, len(tuple(names))), dtype=bool), kinds)

    @classmethod
    def from_phases(cls, names: Sequence[str], period: int, duty: float, offsets: Sequence[float],
                    kinds: str | Sequence[str] = "point") -> "Gait":
        """A gait from its phase table: foot c is on the ground at knot k of the period P when
        :math:`((k / P - o_c) \bmod 1) < \beta`, o_c its touchdown phase and beta the duty factor.

        Args:
            names: Contact names.
            period: Knots P of one period, >= 1.
            duty: Duty factor beta, in (0, 1]: the share of the period each foot is on the ground.
            offsets: (nc,) phase o_c in [0, 1) at which each foot lands.
            kinds: Contact kind(s), as for :class:`ContactSchedule`.

        Raises:
            InputError: A period, duty factor or offsets out of range; a foot that never leaves or never
                reaches the ground in a gait that swings (a duty factor that rounds to no swing or no stance).
        """
        names = tuple(names)
        if int(period) != period or period < 1:
            raise InputError(f"a gait's period must be a positive number of knots, got {period!r}", "period")
        if not (np.isfinite(duty) and 0.0 < duty <= 1.0):
            raise InputError(f"a duty factor must be in (0, 1], got {duty!r}", "duty")
        offsets = np.asarray(offsets, dtype=float)
        if offsets.shape != (len(names),) or not (np.isfinite(offsets).all() and (offsets >= 0.0).all()
                                                  and (offsets < 1.0).all()):
            raise InputError(f"a gait needs one phase offset in [0, 1) per foot ({len(names)}), got "
                             f"{offsets.tolist()}", "offsets")
        phase = np.arange(int(period))[:, None] / int(period)
        # The tolerance keeps a phase that lands on the duty's boundary (a period of a whole number of
        # knots) out of the stance it ends.
        pattern = np.mod(phase - offsets[None, :] + 1e-9, 1.0) < duty - 1e-9
        if duty < 1.0 and (pattern.all(axis=0).any() or not pattern.any(axis=0).all()):
            raise InputError(f"a duty factor of {duty:g} over {int(period)} knots leaves a foot without a swing "
                             "or without a stance: lengthen the period or change the duty factor", "duty")
        return cls(names, pattern, kinds)

    @classmethod
    def trot(cls, names: Sequence[str], swing: int, support: int = 0,
             kinds: str | Sequence[str] = "point") -> "Gait":
        """Diagonal pairs alternate: names (FL, FR, HL, HR) in that order.

        Args:
            names: The four feet, front left, front right, hind left, hind right.
            swing: Knots a pair stays in the air.
            support: Knots with all four feet down between two swings.
        """
        names = tuple(names)
        if len(names) != 4:
            raise InputError(f"a trot needs four feet (FL, FR, HL, HR), got {list(names)}",
                             "names")
        _check_knots(swing=swing, support=support)
        first = np.array([False, True, True, False])   # FL and HR in the air
        second = ~first                                 # FR and HL in the air
        rows = ([np.ones(4, bool)] * support + [first] * swing
                + [np.ones(4, bool)] * support + [second] * swing)
        return cls(names, np.array(rows), kinds)

    @classmethod
    def walk(cls, names: Sequence[str], swing: int, support: int = 0,
             kinds: str | Sequence[str] = "point") -> "Gait":
        """One foot in the air at a time, in the order given (for a quadruped: HL, FL, HR, FR).

        Args:
            names: The feet in swing order.
            swing: Knots each foot stays in the air.
            support: Knots with every foot down between two swings.
        """
        names = tuple(names)
        _check_knots(swing=swing, support=support)
        rows = []
        for foot in range(len(names)):
            rows += [np.ones(len(names), bool)] * support
            lifted = np.ones(len(names), bool)
            lifted[foot] = False
            rows += [lifted] * swing
        return cls(names, np.array(rows), kinds)


def _check_knots(**counts: int) -> None:
    for name, value in counts.items():
        if int(value) != value or value < 0:
            raise InputError(f"{name} must be a non-negative number of knots, got {value!r}", name)
    if counts.get("swing", 1) < 1:
        raise InputError("swing must last at least one knot", "swing")
