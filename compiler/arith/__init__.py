"""Integer arithmetic for index expressions: intervals, linear forms, simplify, prove, relax.

Modules, one job each:
- ``interval``: ``Interval`` and sound interval arithmetic;
- ``linear``: ``LinearForm`` (sum of coef*atom + const), structural ``linearize``, rebuilding;
- ``bound``: constant bounds of expressions over variable ranges;
- ``compare``: deciding a comparison from the bound of the difference of its sides;
- ``divmod``: FloorDiv/FloorMod rewrite rules on linear forms;
- ``simplify``: the simplifier, and ``linear_form`` and ``bound`` built on it;
- ``prove``: ``prove``;
- ``relax``: symbolic interval relaxation for bound inference.

Index dtypes (int32, int64) are treated as mathematical integers: indices never overflow.
"""

from collections.abc import Mapping

from compiler.arith.interval import Interval
from compiler.arith.linear import LinearForm
from compiler.arith.prove import prove
from compiler.arith.relax import relax
from compiler.arith.simplify import bound, linear_form, simplify
from compiler.ir import Var

VarRanges = Mapping[Var, Interval]

__all__ = [
    "Interval",
    "LinearForm",
    "VarRanges",
    "bound",
    "linear_form",
    "prove",
    "relax",
    "simplify",
]
