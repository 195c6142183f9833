"""Prove conditions over variable ranges.

``prove(cond, var_ranges)`` is True when ``cond`` holds for every assignment of the variables within
their ranges (variables without a range are unbounded), False when it fails for every assignment,
and None when the answer depends on the assignment or cannot be decided. It is sound: it answers
True/False only when that is certain, and None otherwise.

Comparisons of index expressions are decided from the bound of the linear form of ``a - b``
(``compiler.arith.compare``); And/Or/Not/Select combine decided parts. The condition is simplified
first, which is where all of that happens.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler.arith.interval import Interval
from compiler.arith.simplify import check_ranges, simplify
from compiler.errors import IRTypeError
from compiler.ir import Expr, IntImm, Var


def prove(cond: Expr, var_ranges: Mapping[Var, Interval] | None = None) -> bool | None:
    """Decide a bool condition for all assignments within ``var_ranges``; None when undecided."""
    if not isinstance(cond, Expr) or not cond.dtype.is_bool:
        shown = f"'{cond}' of dtype {cond.dtype}" if isinstance(cond, Expr) else repr(cond)
        raise IRTypeError(f"prove: expected a bool condition, but got {shown}")
    s = simplify(cond, check_ranges("prove", var_ranges))
    if isinstance(s, IntImm):
        return bool(s.value)
    return None
