"""A GPU kernel's launch shape: the grid and block its bound loops need, and the shared memory it allocates.

    launch = launch_of(func.body)       # Launch(grid=(x, y, z), block=(x, y, z))
    size = shared_bytes(func.body)      # bytes of the shared buffers the body allocates

The extent of the launch on an axis (``compiler.ir.cuda``'s ``BLOCK_AXES`` and ``THREAD_AXES``) is the
largest loop bound to it; a loop bound to fewer threads runs in the threads below its extent only (the
emitter's guard). ``compiler.backend.nvptx`` checks the block's size and records it in the kernel;
``compiler.backend.cuda_runtime`` launches with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.backend.llvm_emit import _const_int
from compiler.errors import CodegenError
from compiler.ir import nodes as n
from compiler.ir.cuda import BLOCK_AXES, THREAD_AXES
from compiler.ir.functor import IRVisitor, post_order_visit


@dataclass(frozen=True)
class Launch:
    """The grid and block of a kernel: extents on x, y, z."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        return math.prod(self.block)


def launch_of(body: n.Stmt) -> Launch:
    """The launch ``body``'s bound loops need (CodegenError for a bound loop of no constant extent, or
    an axis that is not a GPU's)."""
    extents: dict[str, int] = {}
    axes = BLOCK_AXES + THREAD_AXES

    class _Axes(IRVisitor):
        def visit_For(self, s: n.For) -> None:
            if s.kind is n.ForKind.THREAD_BINDING:
                if s.thread not in axes:
                    raise CodegenError(f"nvptx: loop {s.var.name} is bound to {s.thread!r}; a GPU has "
                                       f"{', '.join(axes)}")
                ext, lo = _const_int(s.extent), _const_int(s.min)
                if ext is None or lo != 0:
                    raise CodegenError(f"nvptx: loop {s.var.name} bound to {s.thread} must run from 0 to a "
                                       f"constant, but runs from {s.min} for {s.extent}")
                extents[s.thread] = max(extents.get(s.thread, 1), ext)
            self.generic_visit(s)

    _Axes().visit(body)
    grid = tuple(extents.get(a, 1) for a in BLOCK_AXES)
    block = tuple(extents.get(a, 1) for a in THREAD_AXES)
    return Launch(grid, block)


def shared_bytes(body: n.Stmt) -> int:
    """The bytes of the shared buffers ``body`` allocates."""
    found: list[n.Buffer] = []
    post_order_visit(body, lambda x: found.append(x.buffer) if isinstance(x, n.Allocate) and
                     x.buffer.scope == "shared" else None)
    return sum(b.nbytes for b in found)
