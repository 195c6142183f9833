"""Tensor expressions: the declarative front end (placeholder, compute, reduce_axis, sum/max/min, cast).

A ``Tensor`` is produced by an operation: a ``PlaceholderOp`` (an input) or a ``ComputeOp`` (one output
element per point of its iteration space, given by an expression over its axes). Indexing a tensor,
``A[i, j]``, builds a ``Load`` of the tensor's buffer, so compute bodies are ordinary loop-IR expressions::

    A = placeholder((14, 14), "float32", name="A")
    k = reduce_axis(14, name="k")
    C = compute((14,), lambda i: sum(A[i, k], axis=k), name="C")

Non-goals: symbolic shapes, multi-output operations, scans.
"""

from __future__ import annotations

import enum
import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.errors import IRTypeError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor
from compiler.ir.intrinsics import Call, fma, if_then_else, math_call

cast = ir.cast
const = ir.const


def exp(x) -> Call:
    return math_call("exp", x)


def log(x) -> Call:
    return math_call("log", x)


def sqrt(x) -> Call:
    return math_call("sqrt", x)


def tanh(x) -> Call:
    return math_call("tanh", x)


class IterKind(enum.Enum):
    """What an iteration variable ranges over."""

    SPATIAL = "spatial"  # an axis of the output
    REDUCE = "reduce"  # a reduction axis
    THREAD = "thread"  # a hardware axis (core, cluster, vthread, ...) that loops can be bound to


@dataclass(frozen=True, eq=False)
class IterVar:
    """An iteration variable: ``var`` ranges over ``[dom[0], dom[0] + dom[1])`` (None for thread axes)."""

    var: ir.Var
    dom: tuple[int, int] | None
    kind: IterKind
    thread_tag: str = ""

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def extent(self) -> int | None:
        return None if self.dom is None else self.dom[1]

    def __repr__(self) -> str:
        dom = "" if self.dom is None else f", dom={self.dom}"
        return f"IterVar({self.name}, {self.kind.value}{dom})"

    def __ir_expr__(self) -> ir.Var:
        """An IterVar stands for its variable in expressions (``yy*2 + ry``)."""
        return self.var

    __hash__ = object.__hash__


def _delegate(name: str):
    def method(self, *args):
        return getattr(self.var, name)(*args)

    method.__name__ = name
    return method


for _op in (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__neg__",
    "__rshift__",
    "__rrshift__",
    "__lshift__",
    "__rlshift__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
):
    setattr(IterVar, _op, _delegate(_op))


def _iter_var(name: str, dom: tuple[int, int], kind: IterKind) -> IterVar:
    iv = IterVar(ir.Var(name), dom, kind)
    _ITERVARS[id(iv.var)] = iv
    return iv


_ITERVARS: weakref.WeakValueDictionary[int, IterVar] = weakref.WeakValueDictionary()
_TENSORS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def _adopt(var: ir.Var, dom: tuple[int, int]) -> IterVar:
    """An IterVar for a reduce variable whose axis object nobody holds any more."""
    iv = IterVar(var, dom, IterKind.REDUCE)
    _ITERVARS[id(var)] = iv
    return iv


def reduce_axis(dom: int | tuple[int, int], name: str = "k") -> IterVar:
    """A reduction axis over ``range(dom)`` or ``range(lo, hi)`` for ``dom = (lo, hi)``."""
    if isinstance(dom, int) and not isinstance(dom, bool):
        lo, hi = 0, dom
    elif isinstance(dom, tuple) and len(dom) == 2 and all(isinstance(x, int) for x in dom):
        lo, hi = dom
    else:
        raise IRTypeError(f"reduce_axis {name}: expected an int extent or (lo, hi), but got {dom!r}")
    if hi <= lo:
        raise IRTypeError(f"reduce_axis {name}: expected a non-empty range, but got [{lo}, {hi})")
    return _iter_var(name, (lo, hi - lo), IterKind.REDUCE)


def thread_axis(tag: str, name: str | None = None) -> IterVar:
    """A hardware axis such as ``"core"``, ``"cluster"`` or ``"vthread"`` that loops can be bound to."""
    if not isinstance(tag, str) or not tag:
        raise IRTypeError(f"thread_axis: expected a non-empty tag string, but got {tag!r}")
    iv = IterVar(ir.Var(name or tag), None, IterKind.THREAD, tag)
    _ITERVARS[id(iv.var)] = iv
    return iv


def iter_var_of(var: ir.Var) -> IterVar | None:
    """The IterVar that owns ``var`` (None for plain variables)."""
    iv = _ITERVARS.get(id(var))
    return iv if iv is not None and iv.var is var else None


# --------------------------------------------------------------------------------------------------
# Operations and tensors


class Operation:
    """Base of operations; each produces exactly one tensor, ``output``."""

    name: str
    output: Tensor

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()


class PlaceholderOp(Operation):
    """An input tensor supplied by the caller."""

    def __init__(self, name: str, shape: tuple[int, ...], dt: dtypes.DType) -> None:
        self.name = name
        self.output = Tensor(self, shape, dt, name)

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


class ComputeOp(Operation):
    """output[axis] = body, where body may be a top-level ``Reduce`` over ``reduce_axis``."""

    def __init__(
        self,
        name: str,
        axis: tuple[IterVar, ...],
        reduce_axis: tuple[IterVar, ...],
        body: ir.Expr,
    ) -> None:
        self.name = name
        self.axis = axis
        self.reduce_axis = reduce_axis
        self.body = body
        self.output = Tensor(self, tuple(iv.extent for iv in axis), body.dtype, name)
        # Hold the tensors the body reads: the IR keeps only their buffers, and the buffer -> tensor registry
        # is weak, so an intermediate tensor nobody else holds (conv2d's pad) would otherwise vanish at the
        # next garbage collection and drop out of every schedule built later.
        self._inputs = tensors_read(body)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return self._inputs

    def __repr__(self) -> str:
        return f"compute({self.name})"


class Tensor:
    """The result of an operation; ``T[i, j]`` is a ``Load`` of its buffer."""

    __slots__ = ("op", "buffer", "__weakref__")

    def __init__(self, op: Operation, shape: tuple[int, ...], dt: dtypes.DType, name: str) -> None:
        self.op = op
        self.buffer = ir.Buffer(name, tuple(shape), dt)
        _TENSORS[id(self.buffer)] = self

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> dtypes.DType:
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, indices) -> ir.Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IRTypeError(
                f"tensor {self.name}: expected {self.ndim} indices for shape {list(self.shape)}, "
                f"but got {len(indices)}"
            )
        return ir.Load(self.buffer, tuple(_index(i, self.name) for i in indices))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


def _index(i, tensor: str) -> ir.Expr:
    if isinstance(i, IterVar):
        return i.var
    if isinstance(i, ir.Expr):
        if not i.dtype.is_int:
            raise IRTypeError(f"tensor {tensor}: index '{i}' has dtype {i.dtype}, expected an int")
        return i
    if isinstance(i, int) and not isinstance(i, bool):
        return ir.IntImm(i)
    raise IRTypeError(f"tensor {tensor}: expected an integer index, but got {i!r}")


def tensor_of(buffer: ir.Buffer) -> Tensor | None:
    """The tensor whose buffer is ``buffer`` (None for buffers made outside tensor expressions)."""
    t = _TENSORS.get(id(buffer))
    return t if t is not None and t.buffer is buffer else None


def tensors_read(expr: ir.Expr) -> tuple[Tensor, ...]:
    """Tensors loaded in ``expr``, in order of first appearance."""
    found: dict[int, Tensor] = {}

    class _Loads(IRVisitor):
        def visit_buffer(self, buffer: ir.Buffer) -> None:
            t = tensor_of(buffer)
            if t is not None:
                found.setdefault(id(buffer), t)

    _Loads().visit(expr)
    return tuple(found.values())


def _shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise IRTypeError(f"{what}: expected a non-empty shape of positive ints, but got {shape!r}")
    return shape


def placeholder(shape: Sequence[int] | int, dtype: str | dtypes.DType = "float32", name: str = "A"):
    """An input tensor of the given shape and dtype."""
    return PlaceholderOp(name, _shape(shape, f"placeholder {name}"), dtypes.dtype(dtype)).output


def compute(
    shape: Sequence[int] | int,
    fcompute: Callable[..., ir.Expr],
    name: str = "compute",
    dtype: str | dtypes.DType | None = None,
    axis_names: Sequence[str] | None = None,
) -> Tensor:
    """A tensor whose element at each point of ``shape`` is ``fcompute(*indices)``.

    The axes are named after ``fcompute``'s parameters (or ``axis_names``; ``ax0, ax1, ...`` for a
    ``*args`` function). A reduction must be the whole body (``lambda i: sum(A[i, k], axis=k)``), as
    in TVM. ``dtype`` casts the body.
    """
    shape = _shape(shape, f"compute {name}")
    params = list(axis_names) if axis_names is not None else _param_names(fcompute)
    if params is None:
        params = [f"ax{d}" for d in range(len(shape))]
    if len(params) != len(shape):
        raise IRTypeError(
            f"compute {name}: fcompute takes {len(params)} indices but the shape "
            f"{list(shape)} has {len(shape)} dims"
        )
    axis = tuple(_iter_var(p, (0, extent), IterKind.SPATIAL) for p, extent in zip(params, shape, strict=True))
    body = fcompute(*(iv.var for iv in axis))
    body = ir.as_expr(body, dtype)
    if dtype is not None:
        body = ir.cast(body, dtype)
    reduce_ivs: tuple[IterVar, ...] = ()
    if isinstance(body, ir.Reduce):
        reduce_ivs = tuple(
            iter_var_of(v) or _adopt(v, dom) for v, dom in zip(body.axis, body.ranges, strict=True)
        )
        _check_no_nested_reduce(body.source, name)
    else:
        _check_no_nested_reduce(body, name)
    return ComputeOp(name, axis, reduce_ivs, body).output


def _param_names(fcompute: Callable) -> list[str] | None:
    """Positional parameter names of ``fcompute``; None for ``*args`` functions."""
    try:
        params = inspect.signature(fcompute).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    return [p.name for p in params]


def _check_no_nested_reduce(expr: ir.Expr, name: str) -> None:
    class _Find(IRVisitor):
        def visit_Reduce(self, node: ir.Reduce) -> None:
            raise IRTypeError(
                f"compute {name}: a reduction must be the whole body, but '{node}' is nested inside it"
            )

    _Find().visit(expr)


def _reduce(combiner: ir.ReduceCombiner, expr, axis) -> ir.Reduce:
    axes = axis if isinstance(axis, list | tuple) else [axis]
    if not axes or not all(isinstance(a, IterVar) and a.kind is IterKind.REDUCE for a in axes):
        raise IRTypeError(f"{combiner.value}: expected reduce axes made by reduce_axis(), but got {axis!r}")
    if len({id(a) for a in axes}) != len(axes):
        raise IRTypeError(f"{combiner.value}: a reduce axis appears twice in {axis!r}")
    source = ir.as_expr(expr)
    return ir.Reduce(combiner, source, tuple(a.var for a in axes), tuple(a.dom for a in axes))


def sum(expr, axis) -> ir.Reduce:  # noqa: A001 - te.sum is the field's name for it
    """Sum of ``expr`` over the reduce axis (or list of axes) ``axis``."""
    return _reduce(ir.ReduceCombiner.SUM, expr, axis)


def max(expr, axis) -> ir.Reduce:  # noqa: A001
    """Maximum of ``expr`` over ``axis``."""
    return _reduce(ir.ReduceCombiner.MAX, expr, axis)


def min(expr, axis) -> ir.Reduce:  # noqa: A001
    """Minimum of ``expr`` over ``axis``."""
    return _reduce(ir.ReduceCombiner.MIN, expr, axis)


def reduce_identity(combiner: ir.ReduceCombiner, dt: dtypes.DType) -> ir.Expr:
    """The value a reduction starts from: 0 for sum, the lowest value for max, the highest for min."""
    if combiner is ir.ReduceCombiner.SUM:
        return ir.const(0, dt)
    if combiner is ir.ReduceCombiner.MAX:
        value = dt.min_value if dt.is_int else float("-inf")
    else:
        value = dt.max_value if dt.is_int else float("inf")
    return ir.const(value, dt)


__all__ = [
    "ComputeOp",
    "IterKind",
    "IterVar",
    "Operation",
    "PlaceholderOp",
    "Tensor",
    "cast",
    "compute",
    "const",
    "if_then_else",
    "exp",
    "fma",
    "log",
    "sqrt",
    "tanh",
    "iter_var_of",
    "max",
    "min",
    "placeholder",
    "reduce_axis",
    "reduce_identity",
    "sum",
    "tensor_of",
    "tensors_read",
    "thread_axis",
]
