"""The one matcher of instruction selection: an instruction's semantics tree against a loop-IR expression.

Every selection pass matches value trees through ``TreeMatch``: ``tensorize`` (seed 001 Sec. IV-D), tile
selection (``tensorize_tiles``, TVM Sec. 3.4) and UNIT's Inspector (Algorithm 1). So each rule is decided
once, here:

- **operators**: a pattern operator matches the IR node of the same operator (``IR_BINARY``, ``IR_CALLS``);
  ``+ * max min`` (``COMMUTATIVE``) also with their operands swapped;
- **index equality** (``same_index``): an operand met twice must be the same buffer at the same index, and
  two indices are the same when their affine forms are equal (``i + 4*j`` and ``4*j + i`` are; where an index
  is not affine, when it prints the same);
- **casts**: ``T(x)`` matches a cast to T of ``e`` (then ``x`` against the cast's value), or an ``e`` that
  already has type T (then ``x`` against ``e`` itself: a cast to a value's own type is no cast);
- **constants**: a pattern number matches an integer or float constant of equal value and sign (``-0.0`` is
  not ``0.0``);
- **dtypes** (``check_dtypes``): with a typed pattern, every node has the pattern's dtype (the Inspector's
  rule; the other passes check operand dtypes once matched);
- **fields** (``fields``): a name that is an instruction field matches a constant and sets the field;
  ``select(flag != 0, a, b)`` on a field matches the branch the flag's value makes true; ``field % N`` (a
  hardware that keeps an amount's low bits) matches a constant ``c`` with ``0 <= c < N`` and sets the field
  to c;
- **simplified forms**: on integers, ``0 - x`` (how the simplifier writes ``x * -1``) matches ``x * -1``;
  ``x * 2`` (how it writes ``x + x``) matches ``x + x``; ``x - c`` matches ``x + -c``;
- **shifts** (``shifts``): ``x >> n`` matches ``floordiv(x, 2**n)`` (a shift by a constant, as
  ``compiler.ir.shifts`` builds it), and ``x >> y`` / ``x << y`` the IR's ``Shr`` / ``Shl`` of the same
  operands (a shift by a non-constant amount). The two agree on every amount of 0 or more; a negative amount,
  which the spec language clamps to 0 and the IR (numpy) reads as unsigned (every bit shifted out), is the
  one case where they differ, and the match assumes there is none (validation against the reference shows
  one);
- **sums** (``sums``): ``sum(..., body)`` matches ``body`` alone, when the loop nest around the store walks
  the reduce indices one product per store;
- **subtrees** (``subtrees``, for covering, ``compiler/passes/cover.py``): an operand matches any expression
  that is not a constant (``exprs`` records it: a value an earlier instruction computes into a tile), or a
  constant too with ``constants`` (a target that fills a tile with it); an operand met twice must be the
  same expression.

What a pass does with the result (loops, fields, constraints) stays in the pass. Failures raise
``NoTreeMatch`` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from compiler.arith import linear_form
from compiler.ir import nodes as ir
from compiler.ir.intrinsics import MATH, Call
from compiler.ir.shifts import SHIFTS
from isa.lang import tree as t
from isa.lang.scalar import ScalarEnv
from isa.lang.scalar import evaluate as evaluate_scalar

#: The loop-IR node of each operator and call of the ISA expression language, and which of them commute.
IR_BINARY = {"+": ir.Add, "-": ir.Sub, "*": ir.Mul, "/": ir.Div}   # "/" is float-only in both
IR_CALLS = {"max": ir.Max, "min": ir.Min}
COMMUTATIVE = {"+", "*", "max", "min"}


class NoTreeMatch(Exception):
    """The tree does not match; the message says where and why."""


def same_index(a: ir.Expr | tuple[ir.Expr, ...], b: ir.Expr | tuple[ir.Expr, ...]) -> bool:
    """Whether two indices (one expression, or one per dimension) address the same element: equal affine
    forms, or, where a dimension is not affine, the same printed expression."""
    a, b = (a,) if isinstance(a, ir.Expr) else tuple(a), (b,) if isinstance(b, ir.Expr) else tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        lx, ly = linear_form(x), linear_form(y)
        if lx is not None and ly is not None:
            if lx.const != ly.const or lx.terms != ly.terms:
                return False
        elif str(x) != str(y):
            return False
    return True


Index = ir.Expr | tuple[ir.Expr, ...]


@dataclass
class TreeMatch:
    """One match of a semantics tree against loop IR: the rules above, with the options a pass needs.

    ``index(load)`` gives the position an operand is bound at (a flat index, or the indices per dimension);
    ``admit(name, buffer)`` may refuse a buffer for an operand when first bound (a memory space, say).
    After ``match``, ``operands`` maps each operand to (buffer, index) and ``values`` each field it set.
    """

    types: Mapping[str, str] = field(default_factory=dict)   # type variable -> dtype
    fields: frozenset[str] = frozenset()
    field_defaults: Mapping[str, int] = field(default_factory=dict)   # what a condition sees for unset fields
    check_dtypes: bool = False
    shifts: bool = False
    sums: bool = False
    index: Callable[[ir.Load], Index] = lambda load: load.indices[0]
    admit: Callable[[str, ir.Buffer], str | None] | None = None
    subtrees: bool = False
    constants: bool = False
    operands: dict[str, tuple[ir.Buffer, Index]] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)
    exprs: dict[str, ir.Expr] = field(default_factory=dict)

    def dtype(self, name: str | None) -> str | None:
        return self.types.get(name, name) if name is not None else None

    def bind(self, name: str, buffer: ir.Buffer, index: Index) -> None:
        """Operand ``name`` is ``buffer[index]``: the first time, or the same place again."""
        have = self.operands.get(name)
        if have is not None:
            if have[0] is not buffer or not same_index(have[1], index):
                raise NoTreeMatch(f"operand {name} is both {have[0].name}[{_show(have[1])}] and "
                                  f"{buffer.name}[{_show(index)}]")
            return
        if self.admit is not None:
            reason = self.admit(name, buffer)
            if reason is not None:
                raise NoTreeMatch(reason)
        self.operands[name] = (buffer, index)

    def set_field(self, name: str, value: int) -> None:
        if self.values.setdefault(name, value) != value:
            raise NoTreeMatch(f"field {name} would be both {self.values[name]} and {value}")

    def match(self, pat: t.Expr, e: ir.Expr) -> None:
        """Match pattern ``pat`` against ``e``, binding operands and fields; NoTreeMatch if it does not."""
        want = self.dtype(pat.dtype)
        if self.check_dtypes and want is not None and e.dtype.short != want:
            raise NoTreeMatch(f"dtype mismatch: the instruction has {want} at {t.to_text(pat)}, the code "
                              f"{e.dtype.short} at {e}")
        if isinstance(pat, t.Access) and self.subtrees:
            self._bind_expr(pat.tensor, e)
        elif isinstance(pat, t.Access):
            if not isinstance(e, ir.Load):
                raise NoTreeMatch(f"expected a load for operand {pat.tensor}, found {e}")
            self.bind(pat.tensor, e.buffer, self.index(e))
        elif isinstance(pat, t.Name) and pat.id in self.fields:
            if not isinstance(e, ir.IntImm):
                raise NoTreeMatch(f"field {pat.id} needs a constant, found {e}")
            self.set_field(pat.id, e.value)
        elif isinstance(pat, t.Num):
            value = e.value if isinstance(e, ir.IntImm | ir.FloatImm) else None
            same_sign = value is not None and math.copysign(1.0, value) == math.copysign(1.0, pat.value)
            if value is None or value != pat.value or not same_sign:
                raise NoTreeMatch(f"expected the constant {pat.value}, found {e}")
        elif isinstance(pat, t.Cast):
            to = self.dtype(pat.dtype)
            if isinstance(e, ir.Cast) and e.type.short == to:
                self.match(pat.value, e.value)
            elif e.dtype.short == to:
                self.match(pat.value, e)   # a cast to the type a value already has is no cast
            else:
                raise NoTreeMatch(f"expected a cast to {to}, found {e}")
        elif isinstance(pat, t.Reduce) and self.sums and pat.op == "sum":
            self.match(pat.body, e)
        elif isinstance(pat, t.Binary) and pat.op == "%" and isinstance(pat.lhs, t.Name) \
                and pat.lhs.id in self.fields and isinstance(pat.rhs, t.Num):
            if not isinstance(e, ir.IntImm) or not 0 <= e.value < pat.rhs.value:
                raise NoTreeMatch(f"{t.to_text(pat)} needs a constant in [0, {pat.rhs.value}), found {e}")
            self.set_field(pat.lhs.id, e.value)
        elif isinstance(pat, t.Call) and pat.func == "select" and self.fields:
            self._select(pat, e)
        elif isinstance(pat, t.Binary) and pat.op in SHIFTS and self.shifts and type(e) is SHIFTS[pat.op]:
            self._pair(pat.op, (pat.lhs, pat.rhs), (e.a, e.b))
        elif isinstance(pat, t.Binary) and pat.op == ">>" and self.shifts:
            if not isinstance(e, ir.FloorDiv) or not isinstance(e.b, ir.IntImm) or e.b.value <= 0 \
                    or e.b.value & (e.b.value - 1):
                raise NoTreeMatch(f"expected a shift (a Shr, or a floor division by a power of two), "
                                  f"found {e}")
            self.match(pat.lhs, e.a)
            self.match(pat.rhs, ir.const(e.b.value.bit_length() - 1, e.b.dtype))
        elif isinstance(pat, t.Call) and pat.func in MATH:
            if not isinstance(e, Call) or e.name != pat.func:
                raise NoTreeMatch(f"opcode mismatch: the instruction has {pat.func}, the code '{e}'")
            self.match(pat.args[0], e.args[0])
        elif isinstance(pat, t.Binary) and pat.op == "+" and isinstance(e, ir.Sub) \
                and isinstance(e.b, ir.IntImm | ir.FloatImm):
            self._pair("+", (pat.lhs, pat.rhs), (e.a, ir.const(-e.b.value, e.b.dtype)))   # x - c is x + -c
        elif isinstance(pat, t.Binary) and pat.op == "*" and isinstance(e, ir.Sub) and e.dtype.is_int \
                and isinstance(e.a, ir.IntImm) and e.a.value == 0:
            self._pair("*", (pat.lhs, pat.rhs), (e.b, ir.const(-1, e.b.dtype)))   # 0 - x is x * -1
        elif isinstance(pat, t.Binary) and pat.op == "+" and isinstance(e, ir.Mul) \
                and isinstance(e.b, ir.IntImm | ir.FloatImm) and e.b.value == 2:
            self._pair("+", (pat.lhs, pat.rhs), (e.a, e.a))   # x * 2 is x + x
        elif isinstance(pat, t.Binary | t.Call):
            op = pat.op if isinstance(pat, t.Binary) else pat.func
            args = (pat.lhs, pat.rhs) if isinstance(pat, t.Binary) else pat.args
            node = IR_BINARY.get(op) if isinstance(pat, t.Binary) else IR_CALLS.get(op)
            if node is None or len(args) != 2 or type(e) is not node:
                raise NoTreeMatch(f"opcode mismatch: the instruction has {op}, the code {type(e).__name__} "
                                  f"in '{e}'")
            self._pair(op, args, (e.a, e.b))
        else:
            raise NoTreeMatch(f"the semantics use {t.to_text(pat)}, which has no loop-IR counterpart")

    # ---- helpers

    def _saved(self):
        return dict(self.operands), dict(self.values), dict(self.exprs)

    def _restore(self, saved) -> None:
        self.operands, self.values, self.exprs = dict(saved[0]), dict(saved[1]), dict(saved[2])

    def _bind_expr(self, name: str, e: ir.Expr) -> None:
        if isinstance(e, ir.IntImm | ir.FloatImm) and not self.constants:
            raise NoTreeMatch(f"operand {name} is a tile, not the constant {e}")
        have = self.exprs.setdefault(name, e)
        if have is not e and str(have) != str(e):
            raise NoTreeMatch(f"operand {name} is both {have} and {e}")

    def _pair(self, op: str, pats, exprs) -> None:
        saved = self._saved()
        try:
            self.match(pats[0], exprs[0])
            self.match(pats[1], exprs[1])
        except NoTreeMatch as first:
            if op not in COMMUTATIVE:
                raise
            self._restore(saved)
            try:
                self.match(pats[0], exprs[1])
                self.match(pats[1], exprs[0])
            except NoTreeMatch:
                raise first from None

    def _select(self, pat: t.Call, e: ir.Expr) -> None:
        """``select(c, a, b)`` on fields: the branch that matches and whose condition agrees."""
        cond, branches = pat.args[0], pat.args[1:]
        failures = []
        for want, branch in zip((True, False), branches, strict=True):
            saved = self._saved()
            try:
                self._condition(cond, want)
                self.match(branch, e)
                if self._value(cond) != want:
                    raise NoTreeMatch(f"{t.to_text(cond)} is not {want}")
                return
            except NoTreeMatch as err:
                failures.append(str(err))
                self._restore(saved)
        raise NoTreeMatch("; ".join(failures))

    def _condition(self, cond: t.Expr, want: bool) -> None:
        """Set a flag field a condition ``flag != 0`` needs (``use_imm``: the immediate form)."""
        if isinstance(cond, t.Binary) and cond.op == "!=" and isinstance(cond.lhs, t.Name) and \
                isinstance(cond.rhs, t.Num) and cond.rhs.value == 0 and cond.lhs.id in self.fields:
            self.set_field(cond.lhs.id, 1 if want else 0)

    def _value(self, cond: t.Expr) -> bool:
        try:
            return bool(evaluate_scalar(cond, ScalarEnv({**self.field_defaults, **self.values})))
        except Exception as err:   # a field the tree did not set: the condition is undecided
            raise NoTreeMatch(f"cannot decide {t.to_text(cond)}: {err}") from None


def _show(index: Index) -> str:
    return ", ".join(str(i) for i in index) if isinstance(index, tuple) else str(index)
