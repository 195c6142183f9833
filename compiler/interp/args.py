"""The arguments of an interpreter run: matched to the parameters, checked, worked on as C-contiguous arrays.

The backends that run compiled functions on numpy arrays (``compiler.backend.llvm``, ``llvm_qemu``) take their
arguments by the same rules, through these functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from compiler.errors import InterpError
from compiler.interp.tensor_insn import written_operands
from compiler.ir import nodes as n
from compiler.ir.functor import post_order_visit


def match_args(func: n.PrimFunc, args, error: type[Exception] = InterpError) -> list:
    """The arrays of ``args`` (positional, or a mapping by parameter name) in ``func.params`` order."""
    params = func.params
    names = ", ".join(p.name for p in params)
    if isinstance(args, Mapping):
        if len({p.name for p in params}) != len(params):
            raise error(
                f"{func.name}: parameter names ({names}) repeat; pass arguments by position"
            )
        unknown = sorted(set(args) - {p.name for p in params}, key=str)
        if unknown:
            raise error(
                f"{func.name}: expected arguments named ({names}), but got unknown {unknown}"
            )
        missing = [p.name for p in params if p.name not in args]
        if missing:
            raise error(f"{func.name}: missing arguments {missing} (parameters: {names})")
        return [args[p.name] for p in params]
    if isinstance(args, np.ndarray) or not isinstance(args, Sequence):
        raise error(
            f"{func.name}: expected a sequence or mapping of arrays, but got {type(args).__name__}"
        )
    if len(args) != len(params):
        raise error(
            f"{func.name}: expected {len(params)} arguments ({names}), but got {len(args)}"
        )
    return list(args)


@contextmanager
def contiguous_args(func: n.PrimFunc, args, stored: set[n.Buffer],
                    error: type[Exception] = InterpError) -> Iterator[list[np.ndarray]]:
    """The checked arguments of ``func`` as C-contiguous arrays in parameter order; a non-contiguous one is
    worked on as a copy that is written back on exit (also when the body raises) if ``func`` stores to it."""
    arrays = match_args(func, args, error)
    contiguous, write_back = [], []
    for i, (param, array) in enumerate(zip(func.params, arrays, strict=True)):
        check_array(f"argument {i}, '{param.name}' to {func.name}", param, array, writeable=param in stored,
                    error=error)
        if array.flags.c_contiguous:
            contiguous.append(array)
        else:
            contiguous.append(np.ascontiguousarray(array))
            if param in stored:
                write_back.append((array, contiguous[-1]))
    try:
        yield contiguous
    finally:
        for array, copy in write_back:
            array[...] = copy


def check_array(what: str, buffer: n.Buffer, array, *, writeable: bool,
                error: type[Exception] = InterpError) -> None:
    """Check one argument: a numpy array of ``buffer``'s shape (or its size, for a 1-D buffer) and dtype."""
    if not isinstance(array, np.ndarray):
        raise error(f"{what}: expected a numpy array, but got {type(array).__name__}")
    flat_ok = len(buffer.shape) == 1 and array.size == buffer.shape[0]
    if array.shape != buffer.shape and not flat_ok:
        raise error(
            f"{what}: expected shape {list(buffer.shape)}, but got {list(array.shape)}"
        )
    expected = buffer.dtype.numpy
    if array.dtype != expected:
        storage = f" (storage of {buffer.dtype})" if buffer.dtype.kind == "bfloat" else ""
        raise error(f"{what}: expected dtype {expected}{storage}, but got {array.dtype}")
    if writeable and not array.flags.writeable:
        raise error(f"{what}: expected a writeable array (the function stores to it)")


def stored_buffers(body: n.Stmt) -> set[n.Buffer]:
    """The buffers ``body`` stores to or passes to a tensor instruction as an operand it writes."""
    stored: set[n.Buffer] = set()

    def visit(node: n.Node) -> None:
        if isinstance(node, n.Store):
            stored.add(node.buffer)
        elif isinstance(node, n.TensorInsn):
            written = written_operands(node)
            stored.update(r.buffer for r in node.regions if r.operand in written)

    post_order_visit(body, visit)
    return stored
