"""Immutable nodes of the loop IR: expressions, statements, buffers and functions.

Nodes are frozen, slotted dataclasses; edit them with ``dataclasses.replace`` or an ``IRMutator``.
``Var`` and ``Buffer`` have identity semantics (two variables named ``i`` are different variables);
every other node compares by value, so ``==`` is exact syntactic equality under variable identity.
Use ``compiler.ir.structural_equal`` to compare programs up to renaming of bound variables.
Intrinsic calls (``Call``) are in ``compiler.ir.intrinsics``, dependency tokens (``DepToken``) in
``compiler.ir.dae_tokens``, shifts (``Shr``, ``Shl``) in ``compiler.ir.shifts``.

Expressions overload Python operators (``+ - * // % / >> << < <= > >= & | ~``) to build nodes; ``==`` keeps
its Python meaning (node equality), so build comparisons with ``EQ(a, b)`` / ``NE(a, b)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import isa as isa_spec
from compiler.errors import IRTypeError
from compiler.ir import dtypes
from compiler.ir.dtypes import DType


class Node:
    """Base of every IR node."""

    __slots__ = ()

    def __str__(self) -> str:
        from compiler.ir.printer import format_node

        return format_node(self)


# --------------------------------------------------------------------------------------------------
# Expressions


class Expr(Node):
    """Base of expressions; ``dtype`` is the type of the value."""

    __slots__ = ()

    @property
    def dtype(self) -> DType:
        raise NotImplementedError(type(self).__name__)

    def __bool__(self) -> bool:
        raise IRTypeError(
            f"cannot use the IR expression '{self}' as a Python bool; build IfThenElse/Select instead"
        )

    __hash__ = object.__hash__

    # arithmetic
    def __add__(self, other):
        return Add(self, const_like(other, self))

    def __radd__(self, other):
        return Add(const_like(other, self), self)

    def __sub__(self, other):
        return Sub(self, const_like(other, self))

    def __rsub__(self, other):
        return Sub(const_like(other, self), self)

    def __mul__(self, other):
        return Mul(self, const_like(other, self))

    def __rmul__(self, other):
        return Mul(const_like(other, self), self)

    def __truediv__(self, other):
        return Div(self, const_like(other, self))

    def __rtruediv__(self, other):
        return Div(const_like(other, self), self)

    def __floordiv__(self, other):
        return FloorDiv(self, const_like(other, self))

    def __rfloordiv__(self, other):
        return FloorDiv(const_like(other, self), self)

    def __mod__(self, other):
        return FloorMod(self, const_like(other, self))

    def __rmod__(self, other):
        return FloorMod(const_like(other, self), self)

    def __neg__(self):
        return Sub(const_like(0, self), self)

    # shifts of integers (a constant amount becomes FloorDiv/Mul by a power of two: compiler.ir.shifts)
    def __rshift__(self, other):
        from compiler.ir.shifts import shift

        return shift(">>", self, other)

    def __rrshift__(self, other):
        from compiler.ir.shifts import shift

        return shift(">>", other, self)

    def __lshift__(self, other):
        from compiler.ir.shifts import shift

        return shift("<<", self, other)

    def __rlshift__(self, other):
        from compiler.ir.shifts import shift

        return shift("<<", other, self)

    # comparisons (== and != keep Python semantics)
    def __lt__(self, other):
        return LT(self, const_like(other, self))

    def __le__(self, other):
        return LE(self, const_like(other, self))

    def __gt__(self, other):
        return GT(self, const_like(other, self))

    def __ge__(self, other):
        return GE(self, const_like(other, self))

    # logic on bool expressions
    def __and__(self, other):
        return And(self, as_expr(other))

    def __rand__(self, other):
        return And(as_expr(other), self)

    def __or__(self, other):
        return Or(self, as_expr(other))

    def __ror__(self, other):
        return Or(as_expr(other), self)

    def __invert__(self):
        return Not(self)


def as_expr(value, dt: DType | str | None = None) -> Expr:
    """Convert a Python ``bool``/``int``/``float`` (or an ``Expr``) to an expression of dtype ``dt``."""
    if isinstance(value, Expr):
        return value
    convert = getattr(value, "__ir_expr__", None)
    if convert is not None:  # objects that stand for an expression, e.g. te.IterVar
        return convert()
    target = dtypes.dtype(dt) if dt is not None else None
    if isinstance(value, bool):
        return IntImm(int(value), target or dtypes.bool_)
    if isinstance(value, int):
        if target is not None and target.is_float:
            return FloatImm(float(value), target)
        return IntImm(value, target or dtypes.int32)
    if isinstance(value, float):
        if target is not None and not target.is_float:
            raise IRTypeError(f"expected an integer constant of type {target}, but got {value!r}")
        return FloatImm(value, target or dtypes.float32)
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalar keeps its dtype
        return as_expr(value.item(), dt if dt is not None else dtypes.dtype(value.dtype))
    raise IRTypeError(f"expected an IR expression or a Python number, but got {value!r}")


def const_like(value, other: Expr) -> Expr:
    """Convert a Python number to a constant of ``other``'s dtype (bools become ints of that dtype)."""
    if isinstance(value, Expr) or hasattr(value, "__ir_expr__"):
        return as_expr(value)
    return as_expr(value, None if other.dtype.is_bool else other.dtype)


@dataclass(frozen=True, slots=True, eq=False)
class Var(Expr):
    """A scalar variable; identity, not name, makes two variables equal."""

    name: str
    type: DType = dtypes.int32

    @property
    def dtype(self) -> DType:
        return self.type

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class IntImm(Expr):
    """An integer (or bool) constant."""

    value: int
    type: DType = dtypes.int32

    def __post_init__(self) -> None:
        if not (self.type.is_int or self.type.is_bool):
            raise IRTypeError(f"IntImm: expected an integer dtype, but got {self.type}")
        if not self.type.min_value <= self.value <= self.type.max_value:
            raise IRTypeError(f"IntImm: {self.value} does not fit in {self.type}")

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, slots=True)
class FloatImm(Expr):
    """A floating-point constant."""

    value: float
    type: DType = dtypes.float32

    def __post_init__(self) -> None:
        if not self.type.is_float:
            raise IRTypeError(f"FloatImm: expected a float dtype, but got {self.type}")

    @property
    def dtype(self) -> DType:
        return self.type


def _check_same(node: str, a: Expr, b: Expr) -> None:
    if not isinstance(a, Expr) or not isinstance(b, Expr):
        raise IRTypeError(f"{node}: expected two expressions, but got {a!r} and {b!r}")
    if a.dtype != b.dtype:
        raise IRTypeError(
            f"{node}: operand dtypes differ ({a.dtype} vs {b.dtype}) in '{a}' and '{b}'; insert a cast"
        )


class BinaryOp(Expr):
    """Base of two-operand arithmetic nodes; both operands have the same dtype, which is the result's."""

    __slots__ = ()

    def __post_init__(self) -> None:
        _check_same(type(self).__name__, self.a, self.b)
        if self.a.dtype.is_bool:
            raise IRTypeError(f"{type(self).__name__}: arithmetic on bool operands '{self.a}'")

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Add(BinaryOp):
    """a + b (integers wrap to the dtype's width)."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Sub(BinaryOp):
    """a - b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Mul(BinaryOp):
    """a * b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Div(BinaryOp):
    """a / b on floats (integer division is FloorDiv)."""

    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        BinaryOp.__post_init__(self)
        if not self.a.dtype.is_float:
            raise IRTypeError(f"Div: expected float operands, but got {self.a.dtype}; use FloorDiv")


@dataclass(frozen=True, slots=True)
class FloorDiv(BinaryOp):
    """floor(a / b) on integers."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class FloorMod(BinaryOp):
    """a - b * floor(a / b) on integers (the result has the sign of b)."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Min(BinaryOp):
    """min(a, b)."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Max(BinaryOp):
    """max(a, b)."""

    a: Expr
    b: Expr


class CmpOp(Expr):
    """Base of comparisons: two operands of one dtype, a bool result."""

    __slots__ = ()

    def __post_init__(self) -> None:
        _check_same(type(self).__name__, self.a, self.b)

    @property
    def dtype(self) -> DType:
        return dtypes.bool_


@dataclass(frozen=True, slots=True)
class EQ(CmpOp):
    """a == b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class NE(CmpOp):
    """a != b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class LT(CmpOp):
    """a < b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class LE(CmpOp):
    """a <= b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class GT(CmpOp):
    """a > b."""

    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class GE(CmpOp):
    """a >= b."""

    a: Expr
    b: Expr


def _check_bool(node: str, *operands: Expr) -> None:
    for x in operands:
        if not isinstance(x, Expr) or not x.dtype.is_bool:
            raise IRTypeError(f"{node}: expected a bool operand, but got '{x}'")


@dataclass(frozen=True, slots=True)
class And(Expr):
    """a and b (bool)."""

    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        _check_bool("And", self.a, self.b)

    @property
    def dtype(self) -> DType:
        return dtypes.bool_


@dataclass(frozen=True, slots=True)
class Or(Expr):
    """a or b (bool)."""

    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        _check_bool("Or", self.a, self.b)

    @property
    def dtype(self) -> DType:
        return dtypes.bool_


@dataclass(frozen=True, slots=True)
class Not(Expr):
    """not a (bool)."""

    a: Expr

    def __post_init__(self) -> None:
        _check_bool("Not", self.a)

    @property
    def dtype(self) -> DType:
        return dtypes.bool_


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """cond ? true_value : false_value; both values are evaluated (use if_then_else for lazy)."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    def __post_init__(self) -> None:
        _check_bool("Select", self.cond)
        _check_same("Select", self.true_value, self.false_value)

    @property
    def dtype(self) -> DType:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Convert value to dtype (ints wrap, floats round to nearest even, float->int truncates)."""

    value: Expr
    type: DType

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """Read buffer[indices]."""

    buffer: Buffer
    indices: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _check_indices("Load", self.buffer, self.indices)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


class ReduceCombiner(enum.Enum):
    """How a reduction combines values: the combiner and its identity."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """Reduction of ``source`` over ``axis`` (each ranging over [min, min + extent)).

    Appears only in tensor expressions (``compiler.te``); lowering replaces it by init and update loops.
    """

    combiner: ReduceCombiner
    source: Expr
    axis: tuple[Var, ...]
    ranges: tuple[tuple[int, int], ...]

    @property
    def dtype(self) -> DType:
        return self.source.dtype


def _check_indices(node: str, buffer: Buffer, indices: tuple) -> None:
    if not isinstance(buffer, Buffer):
        raise IRTypeError(f"{node}: expected a Buffer, but got {buffer!r}")
    if len(indices) != len(buffer.shape):
        raise IRTypeError(
            f"{node} of {buffer.name}: expected {len(buffer.shape)} indices for shape "
            f"{list(buffer.shape)}, but got {len(indices)}"
        )
    for i in indices:
        if not isinstance(i, Expr) or not i.dtype.is_int:
            raise IRTypeError(f"{node} of {buffer.name}: index '{i}' is not an integer expression")


# --------------------------------------------------------------------------------------------------
# Buffers


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Buffer:
    """A dense row-major array: ``name``, static ``shape``, element ``dtype`` and memory ``scope``."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    scope: str = "global"

    def __post_init__(self) -> None:
        if not all(isinstance(d, int) and d > 0 for d in self.shape):
            raise IRTypeError(f"buffer {self.name}: expected positive int dims, got {self.shape}")

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer's elements (a sub-byte type rounded down, as the backends lay buffers out)."""
        return self.size * self.dtype.bits // 8

    def __getitem__(self, indices) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return Load(self, tuple(as_expr(i) for i in indices))

    def __str__(self) -> str:
        return self.name

    __hash__ = object.__hash__


# --------------------------------------------------------------------------------------------------
# Statements


class Stmt(Node):
    """Base of statements."""

    __slots__ = ()


class ForKind(enum.Enum):
    """How a loop runs."""

    SERIAL = "range"
    PARALLEL = "parallel"
    UNROLLED = "unroll"
    VECTORIZED = "vectorize"
    THREAD_BINDING = "bind"  # bound to a named hardware axis (core, cluster, vthread, ...)


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """for var in [min, min + extent): body. ``thread`` names the hardware axis of a bound loop."""

    var: Var
    min: Expr
    extent: Expr
    body: Stmt
    kind: ForKind = ForKind.SERIAL
    thread: str = ""

    def __post_init__(self) -> None:
        if (self.kind is ForKind.THREAD_BINDING) != bool(self.thread):
            raise IRTypeError(f"For {self.var.name}: a bound loop needs a thread axis name, no other")


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    """if cond: then_case else: else_case (else_case may be None)."""

    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None

    def __post_init__(self) -> None:
        _check_bool("IfThenElse", self.cond)


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    """buffer[indices] = value."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr

    def __post_init__(self) -> None:
        _check_indices("Store", self.buffer, self.indices)
        if self.value.dtype != self.buffer.dtype:
            raise IRTypeError(
                f"Store to {self.buffer.name}: value dtype {self.value.dtype} differs from the "
                f"buffer's {self.buffer.dtype}"
            )


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    """Statements executed in order."""

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """Allocate ``buffer`` (in its memory scope) for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class Attr(Stmt):
    """Annotate ``body`` with ``key = value`` (pragmas, tensorize marks, ...)."""

    key: str
    value: str | int | Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (an intrinsic call)."""

    value: Expr


@dataclass(frozen=True, slots=True)
class Let(Stmt):
    """Bind var = value in body."""

    var: Var
    value: Expr
    body: Stmt

    def __post_init__(self) -> None:
        if self.var.dtype != self.value.dtype:
            raise IRTypeError(f"Let {self.var.name}: value dtype {self.value.dtype} != {self.var.dtype}")


def _text(x) -> str:
    return str(x) if isinstance(x, Expr) else repr(x)


@dataclass(frozen=True, slots=True)
class InsnField(Node):
    """Field ``name`` of a tensor instruction set to the integer expression ``value``."""

    name: str
    value: Expr

    def __post_init__(self) -> None:
        if not isinstance(self.value, Expr) or not self.value.dtype.is_int:
            raise IRTypeError(
                f"InsnField {self.name}: expected an integer expression, but got {_text(self.value)}"
            )


@dataclass(frozen=True, slots=True)
class Region(Node):
    """Operand ``operand`` of a tensor instruction: ``buffer`` from flat row-major element ``offset`` on.

    Which elements from ``offset`` on the operand covers is up to the instruction (its shape and strides),
    unless the region gives its own view: then the operand's elements, in row-major order of the operand's
    shape, are viewed as an array of ``shape`` whose element ``(i0, ..., ik)`` is at
    ``offset + sum(i_d * strides_d)``. A register operand fed from memory uses it (UNIT Sec. III.C's operand
    preparation: a stride of 0 broadcasts, a stride of 1 is a vector load, others gather).
    """

    operand: str
    buffer: Buffer
    offset: Expr
    shape: tuple[int, ...] = ()
    strides: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.buffer, Buffer):
            raise IRTypeError(f"Region {self.operand}: expected a Buffer, but got {self.buffer!r}")
        if not isinstance(self.offset, Expr) or not self.offset.dtype.is_int:
            raise IRTypeError(
                f"Region {self.operand} of {self.buffer.name}: expected an integer offset, "
                f"but got {_text(self.offset)}"
            )
        if len(self.shape) != len(self.strides) or not all(isinstance(d, int) and d > 0 for d in self.shape):
            raise IRTypeError(f"Region {self.operand} of {self.buffer.name}: a view needs one positive int "
                              f"dimension per stride, but got shape {self.shape} and {len(self.strides)} "
                              "strides")
        if not all(isinstance(x, Expr) and x.dtype.is_int for x in self.strides):
            raise IRTypeError(f"Region {self.operand} of {self.buffer.name}: strides must be integer "
                              "expressions")


@dataclass(frozen=True, slots=True)
class TensorInsn(Stmt):
    """Run instruction ``name`` of the ISA spec ``isa`` (the value the compiler was given, machine parameters
    applied) once, with ``fields`` set, on operands laid out as ``regions``.

    Fields not given take the spec's defaults; type fields are not given: they follow the dtypes of the
    buffers of the regions whose operands have that type (see ``compiler.interp``).
    """

    isa: isa_spec.ISA
    name: str
    fields: tuple[InsnField, ...]
    regions: tuple[Region, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.isa, isa_spec.ISA):
            raise IRTypeError(f"TensorInsn {self.name}: expected an isa.ISA spec, but got {self.isa!r}")
        where = f"TensorInsn {self.isa.name}.{self.name}"
        for kind, items, cls, key in (
            ("field", self.fields, InsnField, "name"),
            ("region", self.regions, Region, "operand"),
        ):
            if not isinstance(items, tuple) or not all(isinstance(x, cls) for x in items):
                raise IRTypeError(f"{where}: expected a tuple of {cls.__name__}, but got {items!r}")
            names = [getattr(x, key) for x in items]
            repeated = sorted({x for x in names if names.count(x) > 1})
            if repeated:
                raise IRTypeError(f"{where}: {kind} names must be unique, but {repeated} repeat")


@dataclass(frozen=True, slots=True)
class PrimFunc(Node):
    """A function over buffer parameters; ``attrs`` holds (key, value) pairs such as the target."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: tuple[tuple[str, str], ...] = field(default=())


# --------------------------------------------------------------------------------------------------
# Constructors


def seq(*stmts: Stmt | None) -> Stmt:
    """Sequence statements, flattening nested ``Seq`` and dropping ``None``; one statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return Seq(tuple(flat))


def cast(value, dt: DType | str) -> Expr:
    """Cast ``value`` to ``dt``; a no-op when it already has that dtype."""
    dt = dtypes.dtype(dt)
    value = as_expr(value, dt if not isinstance(value, Expr) else None)
    return value if value.dtype == dt else Cast(value, dt)


def min_(a, b) -> Expr:
    a, b = _pair(a, b)
    return Min(a, b)


def max_(a, b) -> Expr:
    a, b = _pair(a, b)
    return Max(a, b)


def _pair(a, b) -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        return a, const_like(b, a)
    if isinstance(b, Expr):
        return const_like(a, b), b
    return as_expr(a), as_expr(b)


def const(value, dt: DType | str = "int32") -> Expr:
    """A constant of dtype ``dt``."""
    return as_expr(value, dt)
