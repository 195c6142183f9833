"""A stable, readable text form of the loop IR (used by golden tests and ``--dump-passes``).

The syntax is Python-like: ``for i in range(4):``, ``if tid*4 + i < 14:``, ``C[i, j] = A[i, j] + B[i, j]``,
``with alloc(AL, f32[16], "nmem"):``, and a tensor instruction as one call with its fields, then its operands'
regions (buffer and flat offset): ``diannao.vadd(n=64, dst=C[tid*64], a=A[tid*64], b=B[tid*64])``.
Multiplicative operators print tight (``tid*4``), additive and comparison operators spaced. Distinct
variables that share a name are told apart as ``i``, ``i_1``, ... in order of first appearance, so the
output depends only on the program's structure.
"""

from __future__ import annotations

from compiler.ir import nodes as n
from compiler.ir.dae_tokens import DepToken
from compiler.ir.intrinsics import Call
from compiler.ir.shifts import Shl, Shr

INDENT = "  "

_BINARY = {
    n.Or: ("or", 1),
    n.And: ("and", 2),
    n.EQ: ("==", 4),
    n.NE: ("!=", 4),
    n.LT: ("<", 4),
    n.LE: ("<=", 4),
    n.GT: (">", 4),
    n.GE: (">=", 4),
    Shr: (">>", 4.5),  # Python's level: below + and -, above comparisons
    Shl: ("<<", 4.5),
    n.Add: ("+", 5),
    n.Sub: ("-", 5),
    n.Mul: ("*", 6),
    n.Div: ("/", 6),
    n.FloorDiv: ("//", 6),
    n.FloorMod: ("%", 6),
}
_ATOM = 9
_COMPARE = 4
_SHIFT = 4.5


class _Names:
    """Assigns each Var/Buffer a unique printed name on first sight."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.keep: list[object] = []  # keep objects alive so id() stays unique

    def __call__(self, obj) -> str:
        key = id(obj)
        if key not in self.names:
            base = obj.name or "v"
            name, k = base, 0
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.names[key] = name
            self.taken.add(name)
            self.keep.append(obj)
        return self.names[key]


class _Printer:
    def __init__(self) -> None:
        self.name = _Names()
        self.lines: list[str] = []

    # expressions -----------------------------------------------------------------------------
    def expr(self, e: n.Expr, ctx: int = 0) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < ctx else text

    def _expr(self, e: n.Expr) -> tuple[str, int]:
        t = type(e)
        if t in _BINARY:
            op, prec = _BINARY[t]
            # comparisons do not associate: `(a < b) == c` must not print as the chain `a < b == c`; a sum
            # shifted prints in parentheses, `(a + b) >> c`, though Python would read it without
            left = self.expr(e.a, prec + 1 if prec in (_COMPARE, _SHIFT) else prec)
            right = self.expr(e.b, prec + 1)
            if prec == 6:
                return f"{left}{op}{right}", prec
            return f"{left} {op} {right}", prec
        if t is n.Var:
            return self.name(e), _ATOM
        if t is n.IntImm:
            if e.type.is_bool:
                return ("True" if e.value else "False"), _ATOM
            if e.type == n.dtypes.int32:
                return str(e.value), (_ATOM if e.value >= 0 else 5)
            return f"{e.type.short}({e.value})", _ATOM
        if t is n.FloatImm:
            return f"{e.type.short}({e.value!r})", _ATOM
        if t is n.Not:
            return f"not {self.expr(e.a, 3)}", 3
        if t is n.Min or t is n.Max:
            return f"{t.__name__.lower()}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
        if t is n.Select:
            args = ", ".join(self.expr(x) for x in (e.cond, e.true_value, e.false_value))
            return f"select({args})", _ATOM
        if t is n.Cast:
            return f"{e.type.short}({self.expr(e.value)})", _ATOM
        if t is n.Load:
            name = self.name(e.buffer)  # names are numbered in textual order: the buffer first
            idx = ", ".join(self.expr(i) for i in e.indices)
            return f"{name}[{idx}]", _ATOM
        if t is Call:
            return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", _ATOM
        if t is n.Reduce:
            source = self.expr(e.source)
            axes = ", ".join(
                f"{self.name(v)} in {_range(str(lo), lo, ext)}"
                for v, (lo, ext) in zip(e.axis, e.ranges, strict=True)
            )
            return f"{e.combiner.value}({source}, axis=[{axes}])", _ATOM
        raise NotImplementedError(f"printer: no case for {t.__name__}")

    # statements ------------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def stmt(self, s: n.Stmt, depth: int) -> None:
        t = type(s)
        if t is n.Seq:
            if not s.stmts:
                self.emit(depth, "pass")  # an empty body still shows as a body
            for x in s.stmts:
                self.stmt(x, depth)
        elif t is n.For:
            var = self.name(s.var)
            lo = self.expr(s.min)
            ext = self.expr(s.extent)
            if s.kind is n.ForKind.THREAD_BINDING:
                head = f"bind({s.thread}, {_bounds(s, lo, ext)})"
            else:
                head = f"{s.kind.value}({_bounds(s, lo, ext)})"
            self.emit(depth, f"for {var} in {head}:")
            self.stmt(s.body, depth + 1)
        elif t is n.IfThenElse:
            self.emit(depth, f"if {self.expr(s.cond)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif t is n.Store:
            name = self.name(s.buffer)
            idx = ", ".join(self.expr(i) for i in s.indices)
            self.emit(depth, f"{name}[{idx}] = {self.expr(s.value)}")
        elif t is n.Allocate:
            self.emit(depth, f"with alloc({self.buffer_decl(s.buffer, sep=', ')}):")
            self.stmt(s.body, depth + 1)
        elif t is n.Attr:
            value = self.expr(s.value) if isinstance(s.value, n.Expr) else repr(s.value)
            self.emit(depth, f"with attr({s.key!r}, {value}):")
            self.stmt(s.body, depth + 1)
        elif t is n.Evaluate:
            self.emit(depth, self.expr(s.value))
        elif t is n.Let:
            self.emit(depth, f"with let({self.name(s.var)}, {self.expr(s.value)}):")
            self.stmt(s.body, depth + 1)
        elif t is n.TensorInsn:
            self.emit(depth, self.tensor_insn(s))
        elif t is DepToken:
            label = ", ".join(self.expr(x) for x in s.label)
            self.emit(depth, f"{s.action}_dep({s.src} -> {s.dst}, {s.token!r}, [{label}])")
        else:
            raise NotImplementedError(f"printer: no case for {t.__name__}")

    def tensor_insn(self, s: n.TensorInsn) -> str:
        """``isa.name(field=value, ..., operand=buffer[offset], ...)``: fields first, then regions."""
        args = [self.insn_part(x) for x in (*s.fields, *s.regions)]
        return f"{s.isa.name}.{s.name}({', '.join(args)})"

    def insn_part(self, x: n.InsnField | n.Region) -> str:
        if isinstance(x, n.InsnField):
            return f"{x.name}={self.expr(x.value)}"
        view = ""
        if x.strides:
            shape = ", ".join(str(d) for d in x.shape)
            strides = ", ".join(self.expr(e) for e in x.strides)
            view = f", shape=({shape}), strides=({strides})"
        return f"{x.operand}={self.name(x.buffer)}[{self.expr(x.offset)}{view}]"

    def buffer_decl(self, b: n.Buffer, sep: str = ": ") -> str:
        shape = ", ".join(str(d) for d in b.shape)
        scope = "" if b.scope == "global" else f', "{b.scope}"'
        return f"{self.name(b)}{sep}{b.dtype.short}[{shape}]{scope}"

    def func(self, f: n.PrimFunc) -> None:
        params = ", ".join(self.buffer_decl(b) for b in f.params)
        for key, value in f.attrs:
            self.emit(0, f"@attr({key!r}, {value!r})")
        self.emit(0, f"def {f.name}({params}):")
        self.stmt(f.body, 1)


def _range(lo_text: str, lo: int, ext: int) -> str:
    return f"range({ext})" if lo == 0 else f"range({lo_text}, {lo + ext})"


def _bounds(s: n.For, lo: str, ext: str) -> str:
    if isinstance(s.min, n.IntImm) and s.min.value == 0:
        return ext
    if isinstance(s.min, n.IntImm) and isinstance(s.extent, n.IntImm):
        return f"{lo}, {s.min.value + s.extent.value}"
    return f"{lo}, {lo} + {ext}" if "+" not in ext else f"{lo}, {lo} + ({ext})"


def format_node(node: n.Node) -> str:
    """Print any node: an expression on one line, a statement or function as indented lines."""
    p = _Printer()
    if isinstance(node, n.Expr):
        return p.expr(node)
    if isinstance(node, n.PrimFunc):
        p.func(node)
    elif isinstance(node, n.Stmt):
        p.stmt(node, 0)
    elif isinstance(node, n.InsnField | n.Region):
        return p.insn_part(node)
    else:
        raise NotImplementedError(f"printer: no case for {type(node).__name__}")
    return "\n".join(p.lines)
