"""Type checking of semantics: resolves names, infers dtypes and index extents, returns the typed tree.

The typed tree is what consumers see: casts are ``Cast``, reductions are ``Reduce`` (a reduce index used
outside an explicit reduction becomes one ``sum`` around the whole right-hand side), every node has its dtype,
and ``Name`` nodes say whether they are an index, a field, a parameter or an enum value.

Rules (see isa/README.md): arithmetic operands must have equal dtypes, except weak operands ("int": literals,
fields, parameters and index arithmetic; "float": float literals) which take the other side's type; ``/`` is
float only; ``//``, ``%``, shifts and bit operations are integer only; arithmetic and ordering never take
bool; the assigned value must have the target's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from isa.dtypes import DTYPES, canonical
from isa.errors import ParseError
from isa.lang.parser import _error
from isa.lang.tree import Access, Assign, Binary, Call, Cast, Expr, Name, Num, Reduce, Unary, children, walk

WEAK_INT = "int"
WEAK_FLOAT = "float"
BOOL = "bool"

FLOAT_FUNCS = ("exp", "tanh", "sqrt", "log")
SCALAR_FUNCS = ("ceil_div", "bytes", "log2", "capacity")
REDUCERS = ("sum", "max", "min")


@dataclass(frozen=True, slots=True)
class IndexVar:
    """An index variable of an instruction's semantics; ``extent`` is an expression over fields and params."""

    name: str
    kind: str  # "spatial" or "reduce"
    extent: Expr


@dataclass(frozen=True, slots=True)
class Semantics:
    """Typed semantics for one binding of the type variables."""

    statements: tuple[Assign, ...]
    indices: tuple[IndexVar, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def index(self, name: str) -> IndexVar:
        for iv in self.indices:
            if iv.name == name:
                return iv
        raise KeyError(name)

    def __str__(self) -> str:
        return "; ".join(str(s) for s in self.statements)


@dataclass(frozen=True, slots=True)
class TensorSig:
    """What the type checker needs of a tensor operand: its dtype (after type binding) and shape."""

    dtype: str
    shape: tuple[Expr, ...]


def _kind(dt: str) -> str:
    """"int", "float", "bool" for a dtype name or weak type."""
    if dt in (WEAK_INT, WEAK_FLOAT, BOOL):
        return {WEAK_INT: "int", WEAK_FLOAT: "float", BOOL: "bool"}[dt]
    return "float" if DTYPES[dt].is_float else ("bool" if dt == BOOL else "int")


class _Checker:
    def __init__(self, text: str, tensors: dict[str, TensorSig], indices: dict[str, str],
                 scalars: dict[str, str], types: dict[str, str]) -> None:
        self.text = text
        self.tensors = tensors
        self.index_kinds = indices
        self.scalars = scalars  # name -> "field" | "param" | "enum"
        self.types = types      # type variable -> dtype name

    def error(self, node_pos: int, message: str) -> ParseError:
        return _error(self.text, node_pos, message)

    # ------------------------------------------------------------------ unification
    def unify(self, a: str, b: str, what: str, pos: int) -> str:
        if a == b:
            return a
        weak = {WEAK_INT, WEAK_FLOAT}
        if BOOL in (a, b):
            raise self.error(pos, f"{what}: cannot combine {a} and {b}")
        if a in weak and b in weak:
            return WEAK_FLOAT
        if a in weak or b in weak:
            w, c = (a, b) if a in weak else (b, a)
            if w == WEAK_FLOAT and not DTYPES[c].is_float:
                raise self.error(pos, f"{what}: a float literal cannot combine with {c}; cast it")
            return c
        raise self.error(pos, f"{what}: operands have different types {a} and {b}; cast one, e.g. {a}(...)")

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Expr, bound: frozenset[str]) -> Expr:
        if isinstance(e, Num):
            return replace(e, dtype=WEAK_FLOAT if isinstance(e.value, float) else WEAK_INT)
        if isinstance(e, Name):
            return self.name(e, bound)
        if isinstance(e, Access):
            return self.access(e, bound)
        if isinstance(e, Unary):
            x = self.expr(e.operand, bound)
            if e.op == "not":
                self.truthy(x, "not")
                return replace(e, operand=x, dtype=BOOL)
            if e.op == "~" and _kind(x.dtype) != "int":
                raise self.error(e.pos, f"'~' needs an integer operand, but got {x.dtype}")
            if _kind(x.dtype) == "bool":
                raise self.error(e.pos, f"'{e.op}' needs a number, but got bool")
            return replace(e, operand=x, dtype=x.dtype)
        if isinstance(e, Binary):
            return self.binary(e, bound)
        if isinstance(e, Call):
            return self.call(e, bound)
        raise self.error(getattr(e, "pos", 0), f"unexpected {type(e).__name__}")

    def truthy(self, x: Expr, what: str) -> None:
        if x.dtype not in (BOOL, WEAK_INT):
            raise self.error(x.pos, f"'{what}' needs a condition, but got a {x.dtype} value")

    def name(self, e: Name, bound: frozenset[str]) -> Expr:
        if e.id in self.index_kinds:
            return replace(e, kind="index", dtype=WEAK_INT)
        if e.id in self.scalars:
            return replace(e, kind=self.scalars[e.id], dtype=WEAK_INT)
        if e.id in self.types or canonical(e.id):
            raise self.error(e.pos, f"'{e.id}' is a type; use it as a cast, e.g. {e.id}(x)")
        if e.id in self.tensors:
            raise self.error(e.pos, f"tensor '{e.id}' needs indices, e.g. {e.id}[i]")
        raise self.error(e.pos, f"undefined name '{e.id}'")

    def access(self, e: Access, bound: frozenset[str]) -> Expr:
        sig = self.tensors.get(e.tensor)
        if sig is None:
            raise self.error(e.pos, f"undefined tensor '{e.tensor}'")
        if len(e.indices) != len(sig.shape):
            raise self.error(e.pos, f"tensor '{e.tensor}' has {len(sig.shape)} dimensions, "
                                    f"but is indexed with {len(e.indices)}")
        indices = []
        for idx in e.indices:
            t = self.expr(idx, bound)
            if _kind(t.dtype) != "int":
                raise self.error(idx.pos, f"an index of '{e.tensor}' must be an integer, but got {t.dtype}")
            indices.append(t)
        return replace(e, indices=tuple(indices), dtype=sig.dtype)

    _INT_OPS = ("//", "%", "<<", ">>", "&", "|", "^")
    _CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")

    def binary(self, e: Binary, bound: frozenset[str]) -> Expr:
        lhs = self.expr(e.lhs, bound)
        rhs = self.expr(e.rhs, bound)
        if e.op in ("and", "or"):
            self.truthy(lhs, e.op)
            self.truthy(rhs, e.op)
            return replace(e, lhs=lhs, rhs=rhs, dtype=BOOL, arg_dtype=BOOL)
        if e.op in ("==", "!=") and lhs.dtype == BOOL and rhs.dtype == BOOL:
            return replace(e, lhs=lhs, rhs=rhs, dtype=BOOL, arg_dtype=BOOL)
        t = self.unify(lhs.dtype, rhs.dtype, f"'{e.op}'", e.pos)
        if t == BOOL:  # only 'and', 'or', '==' and '!=' (above) take conditions
            raise self.error(e.pos, f"'{e.op}' needs numbers, but got bool")
        if e.op in self._INT_OPS and _kind(t) != "int":
            raise self.error(e.pos, f"'{e.op}' needs integer operands, but got {t}")
        if e.op == "/" and _kind(t) != "float":
            raise self.error(e.pos, "'/' divides floats; use '//' for integer division")
        if e.op in self._CMP_OPS:
            return replace(e, lhs=lhs, rhs=rhs, dtype=BOOL, arg_dtype=t)
        return replace(e, lhs=lhs, rhs=rhs, dtype=t, arg_dtype=t)

    def cast_target(self, func: str) -> str | None:
        if func in self.types:
            return self.types[func]
        return canonical(func)

    def call(self, e: Call, bound: frozenset[str]) -> Expr:
        f, args = e.func, e.args
        target = self.cast_target(f)
        if target is not None:
            if len(args) != 1:
                raise self.error(e.pos, f"cast {f}(...) takes one argument, but got {len(args)}")
            x = self.expr(args[0], bound)
            return Cast(x, target, pos=e.pos)
        if f in REDUCERS and self.is_reduction(e):
            return self.reduction(e, bound)
        if f in ("min", "max"):
            if len(args) < 2:
                raise self.error(e.pos, f"{f}(...) takes at least two values (or a reduce index and a body)")
            xs = [self.expr(a, bound) for a in args]
            t = xs[0].dtype
            for x in xs[1:]:
                t = self.unify(t, x.dtype, f"{f}()", e.pos)
            if t == BOOL:
                raise self.error(e.pos, f"{f}() needs numbers, but got bool")
            return replace(e, args=tuple(xs), dtype=t)
        if f == "select":
            if len(args) != 3:
                raise self.error(e.pos, f"select(cond, a, b) takes three arguments, but got {len(args)}")
            c, a, b = (self.expr(x, bound) for x in args)
            self.truthy(c, "select")
            return replace(e, args=(c, a, b), dtype=self.unify(a.dtype, b.dtype, "select()", e.pos))
        if f == "abs" or f in FLOAT_FUNCS:
            if len(args) != 1:
                raise self.error(e.pos, f"{f}(x) takes one argument, but got {len(args)}")
            x = self.expr(args[0], bound)
            if _kind(x.dtype) == "bool" or (f in FLOAT_FUNCS and _kind(x.dtype) != "float"):
                raise self.error(e.pos, f"{f}() needs a {'float' if f in FLOAT_FUNCS else 'number'}, "
                                        f"but got {x.dtype}; cast it")
            return replace(e, args=(x,), dtype=x.dtype)
        if f in SCALAR_FUNCS:
            return self.scalar_call(e, bound)
        if f == "sum":
            raise self.error(e.pos, "sum(...) needs a reduce index: sum(j, body)")
        raise self.error(e.pos, f"unknown function '{f}'")

    def scalar_call(self, e: Call, bound: frozenset[str]) -> Expr:
        f, args = e.func, e.args
        arity = {"ceil_div": 2, "bytes": 1, "log2": 1, "capacity": 1}[f]
        if len(args) != arity:
            raise self.error(e.pos, f"{f}() takes {arity} argument(s), but got {len(args)}")
        if f == "bytes":
            a = args[0]
            if not (isinstance(a, Name) and self.cast_target(a.id)):
                raise self.error(e.pos, "bytes(T) takes a dtype or a type variable")
            return replace(e, dtype=WEAK_INT)
        xs = tuple(self.expr(a, bound) for a in args)
        for x in xs:
            if x.dtype != WEAK_INT:
                raise self.error(x.pos, f"{f}() takes integer parameters or fields, but got {x.dtype}")
        return replace(e, args=xs, dtype=WEAK_INT)

    def is_reduction(self, e: Call) -> bool:
        if e.func == "sum":
            return True
        first = e.args[0] if e.args else None
        return isinstance(first, Name) and self.index_kinds.get(first.id) == "reduce"

    def reduction(self, e: Call, bound: frozenset[str]) -> Expr:
        if not e.args:
            raise self.error(e.pos, f"{e.func}() needs a body")
        *axes_e, body = e.args
        axes = []
        for a in axes_e:
            if not isinstance(a, Name):
                raise self.error(a.pos, f"{e.func}(): expected a reduce index name before the body")
            kind = self.index_kinds.get(a.id)
            if kind != "reduce":
                what = "a spatial index" if kind == "spatial" else "not an index"
                raise self.error(a.pos, f"{e.func}() reduces over reduce indices, but '{a.id}' is {what}")
            if a.id in bound or a.id in axes:
                raise self.error(a.pos, f"reduce index '{a.id}' is reduced twice")
            axes.append(a.id)
        if not axes:  # UNIT's sum(expr): all reduce indices free in the body
            axes = [n.id for n in walk(body) if isinstance(n, Name)
                    and self.index_kinds.get(n.id) == "reduce" and n.id not in bound]
            axes = list(dict.fromkeys(axes))
            if not axes:
                raise self.error(e.pos, f"{e.func}(...) body uses no reduce index")
        b = self.expr(body, bound | frozenset(axes))
        if _kind(b.dtype) == "bool":
            raise self.error(e.pos, f"{e.func}() needs numbers, but got bool")
        return Reduce(e.func, tuple(axes), b, dtype=b.dtype, pos=e.pos)

    # ------------------------------------------------------------------ statements
    def statement(self, s: Assign) -> Assign:
        target = self.access(s.target, frozenset())
        for idx in target.indices:
            for n in walk(idx):
                if isinstance(n, Name) and self.index_kinds.get(n.id) == "reduce":
                    raise self.error(n.pos, f"reduce index '{n.id}' appears on the left side; "
                                            "only spatial indices may")
        lhs_spatial = {n.id for idx in target.indices for n in walk(idx) if isinstance(n, Name)
                       and self.index_kinds.get(n.id) == "spatial"}
        value = self.expr(s.value, frozenset())
        free_reduce: list[str] = []
        self.free_indices(value, frozenset(), lhs_spatial, free_reduce)
        for n in walk(value):
            if isinstance(n, Reduce) and set(n.axes) & set(free_reduce):
                ax = next(a for a in n.axes if a in free_reduce)
                raise self.error(n.pos, f"reduce index '{ax}' is reduced by {n.op}(...) and also used "
                                        "outside it (which sums over the whole right side); rename one")
        if free_reduce:
            value = Reduce("sum", tuple(dict.fromkeys(free_reduce)), value, dtype=value.dtype, pos=value.pos)
        t = target.dtype
        v = value.dtype
        ok = v == t or (v == WEAK_INT and _kind(t) != "bool") or (v == WEAK_FLOAT and _kind(t) == "float")
        if not ok:
            raise self.error(s.value.pos, f"cannot assign a value of type {v} to '{target.tensor}' of type "
                                          f"{t}; cast it, e.g. {t}(...)")
        if s.op == "+=" and _kind(t) == "bool":
            raise self.error(s.pos, "'+=' needs a numeric target")
        return replace(s, target=target, value=value)

    def free_indices(self, e: Expr, bound: frozenset[str], lhs_spatial: set[str], out: list[str]) -> None:
        if isinstance(e, Reduce):
            self.free_indices(e.body, bound | frozenset(e.axes), lhs_spatial, out)
            return
        if isinstance(e, Name) and e.kind == "index":
            kind = self.index_kinds[e.id]
            if kind == "spatial" and e.id not in lhs_spatial:
                raise self.error(e.pos, f"spatial index '{e.id}' is used on the right but not on the left")
            if kind == "reduce" and e.id not in bound:
                out.append(e.id)
            return
        for c in children(e):
            self.free_indices(c, bound, lhs_spatial, out)


def typecheck(text: str, statements: tuple[Assign, ...], *, tensors: dict[str, TensorSig],
              indices: dict[str, tuple[str, Expr | None]], scalars: dict[str, str],
              types: dict[str, str]) -> Semantics:
    """Type the parsed ``statements`` of ``text`` for one binding of the type variables.

    ``indices`` maps each index name to (kind, declared extent or None); ``scalars`` maps field, param and
    enum names to their kind. Raises ``ParseError`` (with the column in ``text``) on the first problem.
    """
    kinds = {name: kind for name, (kind, _) in indices.items()}
    checker = _Checker(text, tensors, kinds, scalars, types)
    typed = tuple(checker.statement(s) for s in statements)
    used = {n.id for s in typed for part in (s.target, s.value) for n in walk(part)
            if isinstance(n, Name) and n.kind == "index"}
    ivars = []
    for name, (kind, declared) in indices.items():
        if name not in used:
            raise _error(text, 0, f"index '{name}' is declared but never used")
        extent = declared if declared is not None else _infer_extent(name, typed, tensors)
        if extent is None:
            pos = next(n.pos for s in typed for part in (s.target, s.value) for n in walk(part)
                       if isinstance(n, Name) and n.id == name)
            raise _error(text, pos, f"cannot infer the extent of index '{name}': it never subscripts a "
                                    "tensor dimension on its own; declare it with extent = ...")
        ivars.append(IndexVar(name, kind, extent))
    reads = tuple(dict.fromkeys(n.tensor for s in typed for n in walk(s.value) if isinstance(n, Access)))
    reads += tuple(s.target.tensor for s in typed if s.op == "+=" and s.target.tensor not in reads)
    writes = tuple(dict.fromkeys(s.target.tensor for s in typed))
    return Semantics(typed, tuple(ivars), reads, writes)


def _infer_extent(name: str, typed: tuple[Assign, ...], tensors: dict[str, TensorSig]) -> Expr | None:
    """The size of the first tensor dimension subscripted by exactly ``name`` (left sides first)."""
    accesses = [s.target for s in typed] + [n for s in typed for n in walk(s.value) if isinstance(n, Access)]
    for acc in accesses:
        for dim, idx in enumerate(acc.indices):
            if isinstance(idx, Name) and idx.id == name:
                return tensors[acc.tensor].shape[dim]
    return None


def check_scalar(text: str, expr: Expr, *, scalars: dict[str, str], types: dict[str, str],
                 tensors: dict[str, TensorSig] | None = None) -> Expr:
    """Resolve names and types of a scalar expression (a constraint, shape, address, width or timing).

    Returns the typed tree; raises ``ParseError`` with the column of the first unknown name or type error.
    """
    checker = _Checker(text, tensors or {}, {}, scalars, types)
    return checker.expr(expr, frozenset())
