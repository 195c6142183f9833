"""A TVM PrimFunc (apache-tvm 0.27's TIR, after its blocks are lowered to loops) as Tandem's loop IR.

    func = from_tvm(prim_func)              # compiler.ir.nodes.PrimFunc over the same buffers

For the differential tests against TVM's own passes (tests/compiler/test_tvm_differential.py): the same
program enters both compilers, each runs its pass (TVM's ``LoopPartition``, Tandem's ``loop_partition``),
and the results are built for this CPU and compared. The subset: parameters that are dense buffers of
static shape; ``For`` of every kind (a thread-bound one keeps its axis name), a virtual thread
(``attr virtual_thread``, or a launched ``vthread.*`` axis: a loop bound to "vthread"), ``IfThenElse``,
``BufferStore``/``BufferLoad``, ``SeqStmt``, ``LetStmt``; integer and float constants, variables,
``+ - * // % min max``, comparisons, ``and or not``, ``Select``, ``Cast``, and the ``likely`` hint (dropped:
Tandem's loop partition looks at every guard). Anything else is a ``TvmImportError`` naming the node.
"""

from __future__ import annotations

from typing import Any

from compiler.ir import dtypes
from compiler.ir import nodes as ir


class TvmImportError(ValueError):
    """A TIR construct outside the subset this importer reads (the message names it)."""


_FOR_KINDS = {"SERIAL": ir.ForKind.SERIAL, "PARALLEL": ir.ForKind.PARALLEL,
              "VECTORIZED": ir.ForKind.VECTORIZED, "UNROLLED": ir.ForKind.UNROLLED,
              "THREAD_BINDING": ir.ForKind.THREAD_BINDING}
_BINARY = {"Add": ir.Add, "Sub": ir.Sub, "Mul": ir.Mul, "FloorDiv": ir.FloorDiv, "FloorMod": ir.FloorMod,
           "Min": ir.Min, "Max": ir.Max, "EQ": ir.EQ, "NE": ir.NE, "LT": ir.LT, "LE": ir.LE, "GT": ir.GT,
           "GE": ir.GE, "And": ir.And, "Or": ir.Or}


def from_tvm(func: Any, name: str = "main") -> ir.PrimFunc:
    """``func`` (a ``tvm.tirx.PrimFunc`` whose blocks are lowered) as a Tandem PrimFunc named ``name``."""
    return _Importer().function(func, name)


def _dt(x: Any) -> Any:
    """The element type of a TIR expression (0.27 keeps it in ``ty``; a buffer keeps its own ``dtype``)."""
    ty = getattr(x, "ty", None)
    return getattr(ty, "dtype", None) or x.dtype


def _key(obj: Any) -> int:
    """A TVM object's identity: the address of the node it wraps (Python wrappers come and go, and ``==`` on
    TIR expressions builds an expression)."""
    return obj.__chandle__()


class _Importer:
    def __init__(self) -> None:
        self.vars: dict[int, ir.Var] = {}
        self.buffers: dict[int, ir.Buffer] = {}

    def function(self, func: Any, name: str) -> ir.PrimFunc:
        body = self.stmt(func.body)
        by_name = {b.name: b for b in self.buffers.values()}
        params, missing = [], []
        for p in func.params:
            found = self.buffers.get(_key(p)) or by_name.get(str(p.name))
            if found is None:
                missing.append(str(p.name))
            else:
                params.append(found)
        unused = [b.name for b in self.buffers.values() if b not in params]
        if unused:
            raise TvmImportError(f"buffer {unused[0]} is not a parameter (allocations are outside the "
                                 "subset)")
        if missing:
            raise TvmImportError(f"parameter {missing[0]} is no buffer the body uses")
        return ir.PrimFunc(name, tuple(params), body)

    def dtype(self, dt: Any, where: str) -> dtypes.DType:
        text = str(dt)
        try:
            return dtypes.dtype("bool" if text == "bool" else text)
        except Exception:  # noqa: BLE001 - an unknown dtype of any kind of fault
            raise TvmImportError(f"{where}: dtype {text} has no Tandem counterpart") from None

    def var(self, v: Any) -> ir.Var:
        key = _key(v)
        if key not in self.vars:
            self.vars[key] = ir.Var(str(v.name), self.dtype(_dt(v), f"variable {v.name}"))
        return self.vars[key]

    # ----------------------------------------------------------------------------------------- statements
    def stmt(self, s: Any) -> ir.Stmt:
        kind = type(s).__name__
        method = getattr(self, f"stmt_{kind}", None)
        if method is None:
            raise TvmImportError(f"TIR statement {kind} is outside the imported subset: {s}")
        return method(s)

    def stmt_SeqStmt(self, s: Any) -> ir.Stmt:
        return ir.seq(*(self.stmt(x) for x in s.seq))

    def stmt_For(self, s: Any) -> ir.Stmt:
        import tvm.tirx

        kind = _FOR_KINDS.get(tvm.tirx.ForKind(int(s.kind)).name)
        if kind is None:
            raise TvmImportError(f"loop {s.loop_var} of kind {s.kind} is outside the imported subset")
        thread = str(s.thread_binding.thread_tag) if kind is ir.ForKind.THREAD_BINDING else ""
        return ir.For(self.var(s.loop_var), self.expr(s.min), self.expr(s.extent), self.stmt(s.body), kind,
                      thread)

    def stmt_AttrStmt(self, s: Any) -> ir.Stmt:
        """A launched thread axis: a virtual thread (``vthread.*``) becomes Tandem's loop bound to "vthread";
        any other attribute is outside the subset."""
        key = str(s.attr_key)
        tag = str(getattr(s.node, "thread_tag", ""))
        if key == "virtual_thread" or (key == "thread_extent" and tag.startswith("vthread")):
            var = self.var(s.node.var)
            return ir.For(var, ir.const(0, var.dtype), self.expr(s.value), self.stmt(s.body),
                          ir.ForKind.THREAD_BINDING, "vthread")
        raise TvmImportError(f"attribute {key} ({tag or s.node}) is outside the imported subset")

    def stmt_IfThenElse(self, s: Any) -> ir.Stmt:
        other = self.stmt(s.else_case) if s.else_case is not None else None
        return ir.IfThenElse(self.expr(s.condition), self.stmt(s.then_case), other)

    def stmt_BufferStore(self, s: Any) -> ir.Stmt:
        return ir.Store(self.buffer(s.buffer), tuple(self.expr(i) for i in s.indices), self.expr(s.value))

    def stmt_LetStmt(self, s: Any) -> ir.Stmt:
        return ir.Let(self.var(s.var), self.expr(s.value), self.stmt(s.body))

    def buffer(self, b: Any) -> ir.Buffer:
        key = _key(b)
        if key not in self.buffers:
            try:
                shape = tuple(int(d) for d in b.shape)
            except (TypeError, ValueError):
                raise TvmImportError(f"buffer {b.name} has a symbolic shape {list(b.shape)}") from None
            self.buffers[key] = ir.Buffer(str(b.name), shape, self.dtype(b.dtype, f"buffer {b.name}"))
        return self.buffers[key]

    # ----------------------------------------------------------------------------------------- expressions
    def expr(self, e: Any) -> ir.Expr:
        kind = type(e).__name__
        if kind in _BINARY:
            return _BINARY[kind](self.expr(e.a), self.expr(e.b))
        method = getattr(self, f"expr_{kind}", None)
        if method is None:
            raise TvmImportError(f"TIR expression {kind} is outside the imported subset: {e}")
        return method(e)

    def expr_IntImm(self, e: Any) -> ir.Expr:
        return ir.const(int(e.value), self.dtype(_dt(e), f"constant {e}"))

    def expr_FloatImm(self, e: Any) -> ir.Expr:
        return ir.const(float(e.value), self.dtype(_dt(e), f"constant {e}"))

    def expr_Var(self, e: Any) -> ir.Expr:
        return self.var(e)

    def expr_Not(self, e: Any) -> ir.Expr:
        return ir.Not(self.expr(e.a))

    def expr_Select(self, e: Any) -> ir.Expr:
        return ir.Select(self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value))

    def expr_Cast(self, e: Any) -> ir.Expr:
        return ir.cast(self.expr(e.value), self.dtype(_dt(e), f"cast {e}"))

    def expr_BufferLoad(self, e: Any) -> ir.Expr:
        buffer = e.source if hasattr(e, "source") else e.buffer   # 0.27 calls it a TensorLoad of a source
        return ir.Load(self.buffer(buffer), tuple(self.expr(i) for i in e.indices))

    expr_TensorLoad = expr_BufferLoad

    def expr_Call(self, e: Any) -> ir.Expr:
        op = str(getattr(e.op, "name", e.op))
        if op.endswith(".likely") and len(e.args) == 1:
            return self.expr(e.args[0])
        raise TvmImportError(f"call of {op} is outside the imported subset: {e}")
