"""Native fork/join for parallel segments: each parallel loop's iterations are shared by threads of the GNU
OpenMP runtime (libgomp), started from the compiled code itself.

A parallel segment ``i32 seg(ptr..., i64 begin, i64 end)`` gets a wrapper
``i32 seg.fork(ptr..., i64 total, i32 threads)`` that packs its arguments into a context and calls
``GOMP_parallel(seg.worker, ctx, threads, 0)``; each worker takes the contiguous slice
``[total * t / n, total * (t + 1) / n)`` of thread ``t`` of ``n`` and records its return code, and the wrapper
returns the first nonzero one. libgomp keeps its threads spinning briefly between parallel regions, so a
fork costs microseconds, against tens for handing work to Python threads (``compiler.backend.llvm`` falls
back to those when libgomp cannot be loaded).
"""

from __future__ import annotations

import ctypes.util
from functools import cache

import llvmlite.binding as llvm
from llvmlite import ir as ll

from compiler.backend.llvm_emit import I32, I64, PTR, declare

LIBRARY = "libgomp.so.1"


@cache
def openmp_available() -> bool:
    """Whether libgomp could be loaded into the process (its symbols then resolve in JIT-compiled code)."""
    for name in (LIBRARY, ctypes.util.find_library("gomp")):
        if not name:
            continue
        try:
            llvm.load_library_permanently(name)
            return True
        except RuntimeError:
            continue
    return False


def emit_fork(module: ll.Module, segment: ll.Function, buffers: int) -> str:
    """Emit ``<segment>.fork``; returns its name."""
    ctx_type = ll.LiteralStructType([ll.ArrayType(PTR, buffers), I64, PTR])
    worker = ll.Function(module, ll.FunctionType(ll.VoidType(), [PTR]), f"{segment.name}.worker")
    worker.linkage = "internal"
    b = ll.IRBuilder(worker.append_basic_block("entry"))
    thread = b.call(declare(module, "omp_get_thread_num", ll.FunctionType(I32, [])), [])
    count = b.call(declare(module, "omp_get_num_threads", ll.FunctionType(I32, [])), [])
    ctx = worker.args[0]
    zero = ll.Constant(I32, 0)
    total = b.load(b.gep(ctx, [zero, ll.Constant(I32, 1)], source_etype=ctx_type), typ=I64)
    t64, n64 = b.sext(thread, I64), b.sext(count, I64)
    begin = b.sdiv(b.mul(total, t64), n64)
    end = b.sdiv(b.mul(total, b.add(t64, ll.Constant(I64, 1))), n64)
    ptrs = [b.load(b.gep(ctx, [zero, zero, ll.Constant(I32, k)], source_etype=ctx_type), typ=PTR)
            for k in range(buffers)]
    code = b.call(segment, [*ptrs, begin, end])
    codes = b.load(b.gep(ctx, [zero, ll.Constant(I32, 2)], source_etype=ctx_type), typ=PTR)
    b.store(code, b.gep(codes, [thread], source_etype=I32))
    b.ret_void()

    fork = ll.Function(module, ll.FunctionType(I32, [PTR] * buffers + [I64, I32]), f"{segment.name}.fork")
    entry, loop, done = (fork.append_basic_block(x) for x in ("entry", "scan", "done"))
    b = ll.IRBuilder(entry)
    threads = fork.args[-1]
    ctx = b.alloca(ctx_type)
    ctx.type = PTR  # llvmlite types an alloca as a typed pointer; LLVM 22 has only opaque ones
    for k in range(buffers):
        b.store(fork.args[k], b.gep(ctx, [zero, zero, ll.Constant(I32, k)], source_etype=ctx_type))
    b.store(fork.args[buffers], b.gep(ctx, [zero, ll.Constant(I32, 1)], source_etype=ctx_type))
    codes = b.alloca(I32, size=threads)
    codes.type = PTR
    memset = declare(module, "llvm.memset.p0.i64", ll.FunctionType(ll.VoidType(), [PTR, ll.IntType(8), I64,
                                                                                     ll.IntType(1)]))
    b.call(memset, [codes, ll.Constant(ll.IntType(8), 0), b.mul(b.sext(threads, I64), ll.Constant(I64, 4)),
                    ll.Constant(ll.IntType(1), 0)])
    b.store(codes, b.gep(ctx, [zero, ll.Constant(I32, 2)], source_etype=ctx_type))
    gomp = declare(module, "GOMP_parallel", ll.FunctionType(ll.VoidType(), [PTR, PTR, I32, I32]))
    b.call(gomp, [worker, ctx, threads, zero])
    b.branch(loop)
    b = ll.IRBuilder(loop)
    k = b.phi(I32)
    k.add_incoming(zero, entry)
    code = b.load(b.gep(codes, [k], source_etype=I32), typ=I32)
    k.add_incoming(b.add(k, ll.Constant(I32, 1)), loop)
    stop = b.or_(b.icmp_signed("!=", code, zero), b.icmp_signed(">=", b.add(k, ll.Constant(I32, 1)), threads))
    b.cbranch(stop, done, loop)
    b = ll.IRBuilder(done)
    b.ret(code)
    return fork.name
