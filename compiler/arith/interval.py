"""Integer intervals with optional infinite ends, and sound interval arithmetic on them.

An ``Interval(lo, hi)`` is the set of integers ``lo <= v <= hi``; ``None`` stands for -inf
(``lo``) or +inf (``hi``). Every operation returns an interval that contains every result of the
operation on members of its operands (soundness); it is exact where that is cheap (+, -, scaling,
min, max).
Division or modulo by an interval that may contain 0 gives the unbounded interval.

Non-Goals: empty intervals (constructing one raises) and wraparound (integers are mathematical).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_Ext = int | float  # an int, or -math.inf / math.inf for an open end


@dataclass(frozen=True, slots=True)
class Interval:
    """Inclusive integer bounds ``[lo, hi]``; ``None`` means unbounded on that side."""

    lo: int | None
    hi: int | None

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"Interval.{name}: expected an int or None, but got {v!r}")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise ValueError(f"Interval: expected lo <= hi, but got [{self.lo}, {self.hi}]")

    # constructors ---------------------------------------------------------------------------------
    @staticmethod
    def from_extent(min: int, extent: int) -> Interval:
        """``[min, min + extent - 1]``, the values of ``v`` in ``range(min, min + extent)``."""
        if extent < 1:
            raise ValueError(f"Interval.from_extent: expected a positive extent, but got {extent}")
        return Interval(min, min + extent - 1)

    @staticmethod
    def point(v: int) -> Interval:
        return Interval(v, v)

    @staticmethod
    def everything() -> Interval:
        """The unbounded interval (-inf, +inf)."""
        return _EVERYTHING

    # queries --------------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        """True when the interval holds exactly one value."""
        return self.lo is not None and self.lo == self.hi

    @property
    def is_bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def extent(self) -> int | None:
        """Number of members, or None when unbounded."""
        return self.hi - self.lo + 1 if self.is_bounded else None

    def contains(self, v: int) -> bool:
        return (self.lo is None or self.lo <= v) and (self.hi is None or v <= self.hi)

    def within(self, other: Interval) -> bool:
        """True when every member of ``self`` is a member of ``other``."""
        lo_ok = other.lo is None or (self.lo is not None and self.lo >= other.lo)
        hi_ok = other.hi is None or (self.hi is not None and self.hi <= other.hi)
        return lo_ok and hi_ok

    # set operations -------------------------------------------------------------------------------
    def union(self, other: Interval) -> Interval:
        """The smallest interval holding both (the hull)."""
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def intersect(self, other: Interval) -> Interval | None:
        """The common part, or None when it is empty."""
        lo = _pick(max, self.lo, other.lo)
        hi = _pick(min, self.hi, other.hi)
        if lo is not None and hi is not None and lo > hi:
            return None
        return Interval(lo, hi)

    # arithmetic -----------------------------------------------------------------------------------
    def __add__(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else self.lo + other.lo
        hi = None if self.hi is None or other.hi is None else self.hi + other.hi
        return Interval(lo, hi)

    def __neg__(self) -> Interval:
        return Interval(
            None if self.hi is None else -self.hi, None if self.lo is None else -self.lo
        )

    def __sub__(self, other: Interval) -> Interval:
        return self + (-other)

    def shift(self, c: int) -> Interval:
        return self + Interval(c, c)

    def scale(self, c: int) -> Interval:
        """``{v * c}`` hull for a constant ``c``."""
        if c == 0:
            return Interval(0, 0)
        if c < 0:
            return (-self).scale(-c)
        return Interval(
            None if self.lo is None else self.lo * c, None if self.hi is None else self.hi * c
        )

    def __mul__(self, other: Interval) -> Interval:
        if other.is_const:
            return self.scale(other.lo)
        if self.is_const:
            return other.scale(self.lo)
        corners = [_mul(a, b) for a in _ends(self) for b in _ends(other)]
        return _from_ext(min(corners), max(corners))

    def floordiv(self, d: Interval) -> Interval:
        """Hull of ``floor(a / b)``; unbounded when ``d`` may contain 0."""
        if d.is_const:
            return self._floordiv_const(d.lo)
        if d.hi is not None and d.hi < 0:
            return (-self).floordiv(-d)
        if d.lo is None or d.lo <= 0:
            return _EVERYTHING
        # b > 0: floor(a/b) rises with a; for fixed a it is monotone in b, so the ends decide.
        divisors = [d.lo] if d.hi is None else [d.lo, d.hi]
        lo = None if self.lo is None else min(self.lo // b for b in divisors)
        hi = None if self.hi is None else max(self.hi // b for b in divisors)
        if d.hi is None:  # b -> inf: floor(a/b) -> 0 for a >= 0 and -1 for a < 0
            lo = None if lo is None else min(lo, 0 if self.lo >= 0 else -1)
            hi = None if hi is None else max(hi, 0 if self.hi >= 0 else -1)
        return Interval(lo, hi)

    def _floordiv_const(self, c: int) -> Interval:
        if c == 0:
            return _EVERYTHING
        if c < 0:
            return (-self)._floordiv_const(-c)
        return Interval(
            None if self.lo is None else self.lo // c, None if self.hi is None else self.hi // c
        )

    def floormod(self, d: Interval) -> Interval:
        """Hull of ``a - b * floor(a / b)`` (sign of ``b``); unbounded when ``d`` may contain 0."""
        if d.is_const:
            return self._floormod_const(d.lo)
        if d.lo is not None and d.lo > 0:
            out = Interval(0, None if d.hi is None else d.hi - 1)
            if self.lo is not None and self.lo >= 0:  # a % b <= a for a >= 0
                out = Interval(0, _pick(min, out.hi, self.hi))
            return out
        if d.hi is not None and d.hi < 0:
            out = Interval(None if d.lo is None else d.lo + 1, 0)
            if self.hi is not None and self.hi <= 0:
                out = Interval(_pick(max, out.lo, self.lo), 0)
            return out
        return _EVERYTHING

    def _floormod_const(self, c: int) -> Interval:
        if c == 0:
            return _EVERYTHING
        if self.is_bounded and self.lo // c == self.hi // c:  # one period: a % c == a - k*c
            k = self.lo // c
            return Interval(self.lo - k * c, self.hi - k * c)
        return Interval(0, c - 1) if c > 0 else Interval(c + 1, 0)

    def min(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        return Interval(lo, _pick(min, self.hi, other.hi))

    def max(self, other: Interval) -> Interval:
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(_pick(max, self.lo, other.lo), hi)

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "+inf" if self.hi is None else str(self.hi)
        return f"[{lo}, {hi}]"


_EVERYTHING = Interval(None, None)


def _pick(fn, a: int | None, b: int | None) -> int | None:
    """``fn(a, b)`` where a None operand is ignored (it is the neutral open end)."""
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


def _ends(iv: Interval) -> tuple[_Ext, _Ext]:
    return (-math.inf if iv.lo is None else iv.lo, math.inf if iv.hi is None else iv.hi)


def _mul(a: _Ext, b: _Ext) -> _Ext:
    """Product on the extended integers with 0 * inf = 0 (the 0 end is a real member)."""
    if a == 0 or b == 0:
        return 0
    if isinstance(a, float) or isinstance(b, float):
        return math.inf if (a > 0) == (b > 0) else -math.inf
    return a * b


def _from_ext(lo: _Ext, hi: _Ext) -> Interval:
    return Interval(None if lo == -math.inf else lo, None if hi == math.inf else hi)
