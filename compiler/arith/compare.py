"""Deciding integer comparisons from the bound of the difference of their sides.

``decide_compare(op, diff, ranges)`` takes a comparison class (LT, LE, GT, GE, EQ, NE) and
the linear form of ``a - b``. It returns True when ``op(a, b)`` holds for every assignment of the
variables within ``ranges``, False when it fails for every assignment, and None otherwise. Terms
shared by ``a`` and ``b`` have cancelled in ``diff``, so ``i + j < i + j + 1`` is True for any i, j.
EQ/NE also use divisibility: ``x*2 == 1`` is False because every coefficient is even.
"""

from __future__ import annotations

import math

from compiler.arith.bound import Ranges, bound_linear
from compiler.arith.linear import LinearForm
from compiler.ir import EQ, GE, GT, LE, LT, NE

#: The comparison that holds when the key's operands are negated (a < b <=> -a > -b).
FLIPPED = {LT: GT, LE: GE, GT: LT, GE: LE, EQ: EQ, NE: NE}
#: The comparison that holds exactly when the key does not (integers only: no NaN).
NEGATED = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}


def decide_compare(op: type, diff: LinearForm, ranges: Ranges) -> bool | None:
    """Decide ``op(diff, 0)`` over ``ranges``; None when the answer depends on the assignment."""
    if op is NE:
        eq = decide_compare(EQ, diff, ranges)
        return None if eq is None else not eq
    b = bound_linear(diff, ranges)
    lo, hi = b.lo, b.hi
    if op is EQ:
        if b.is_const and lo == 0:
            return True
        if (hi is not None and hi < 0) or (lo is not None and lo > 0):
            return False
        g = math.gcd(*diff.terms.values()) if diff.terms else 0
        if g > 1 and diff.const % g != 0:
            return False
        return None
    if op is LT:
        return _decide(hi is not None and hi < 0, lo is not None and lo >= 0)
    if op is LE:
        return _decide(hi is not None and hi <= 0, lo is not None and lo > 0)
    if op is GT:
        return _decide(lo is not None and lo > 0, hi is not None and hi <= 0)
    if op is GE:
        return _decide(lo is not None and lo >= 0, hi is not None and hi < 0)
    raise NotImplementedError(f"decide_compare: no case for {op.__name__}")


def _decide(always: bool, never: bool) -> bool | None:
    if always:
        return True
    if never:
        return False
    return None
