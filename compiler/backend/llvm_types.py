"""The LLVM types and small helpers the LLVM backends share (``compiler.backend.llvm_emit`` and the
modules around it): the IR's types in registers and in memory, declared functions, the fault table."""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir as ll

from compiler.ir import dtypes
from compiler.ir.dtypes import DType

I1, I8, I16, I32, I64 = (ll.IntType(b) for b in (1, 8, 16, 32, 64))
HALF, FLOAT, DOUBLE = ll.HalfType(), ll.FloatType(), ll.DoubleType()
PTR = ll.PointerType()


def value_type(dt: DType) -> ll.Type:
    """The LLVM type of a value of ``dt`` in registers (bool is i1; bfloat16 lives in a float)."""
    if dt.is_bool:
        return I1
    if dt.is_int:
        return ll.IntType(dt.bits)
    if dt == dtypes.float16:
        return HALF
    return FLOAT  # float32, and bfloat16 values held in float32


def memory_type(dt: DType) -> ll.Type:
    """The LLVM type of an element of ``dt`` in memory (numpy's storage: bool is a byte)."""
    return I8 if dt.is_bool else value_type(dt)


@dataclass
class ErrorTable:
    """The run-time faults generated code can report; a function returns ``index + 1`` of its fault."""

    messages: list[str] = field(default_factory=list)

    def code(self, message: str) -> int:
        if message not in self.messages:
            self.messages.append(message)
        return self.messages.index(message) + 1


def is_vec(v: ll.Value) -> bool:
    return isinstance(v.type, ll.VectorType)


def scalar_type(t: ll.Type) -> ll.Type:
    return t.element if isinstance(t, ll.VectorType) else t


def float_bytes(t: ll.Type) -> int:
    return {HALF: 2, FLOAT: 4, DOUBLE: 8}[t]


def element_bytes(t: ll.Type) -> int:
    """The size of an element of memory type ``t`` (also its natural alignment)."""
    return t.width // 8 if isinstance(t, ll.IntType) else float_bytes(t)


def declare(module: ll.Module, name: str, fnty: ll.FunctionType) -> ll.Function:
    """Function ``name`` of ``module``, declared with ``fnty`` on first use."""
    try:
        return module.get_global(name)
    except KeyError:
        return ll.Function(module, fnty, name)


def resize_float(b: ll.IRBuilder, v: ll.Value, target: ll.Type) -> ll.Value:
    have, want = float_bytes(scalar_type(v.type)), float_bytes(scalar_type(target))
    return v if have == want else b.fpext(v, target) if want > have else b.fptrunc(v, target)
