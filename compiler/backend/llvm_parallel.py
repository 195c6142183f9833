"""Native fork/join for parallel segments: each parallel loop's iterations are shared by the workers of
Tandem's native thread pool (``compiler.backend.llvm_pool``), forked from the compiled code itself.

A parallel segment ``i32 seg(ptr..., i64 begin, i64 end)`` gets a wrapper
``i32 seg.fork(ptr..., i64 total, i32 threads)`` that packs its arguments into a context on its stack and
calls ``tandem.pool.run(seg.slice, ctx, threads)``; ``seg.slice(ctx, t, n)`` runs the contiguous slice
``[total * t / n, total * (t + 1) / n)`` of thread ``t`` of ``n`` and returns its code, and the wrapper
returns the first nonzero one. The pool's workers spin briefly between forks, so a fork costs about one
round trip of a cache line between cores.
"""

from __future__ import annotations

from llvmlite import ir as ll

from compiler.backend.llvm_pool import RUN, TASK
from compiler.backend.llvm_types import I32, I64, PTR, declare


def emit_fork(module: ll.Module, segment: ll.Function, buffers: int) -> str:
    """Emit ``<segment>.fork``; returns its name."""
    ctx_type = ll.LiteralStructType([ll.ArrayType(PTR, buffers), I64])
    task = ll.Function(module, TASK, f"{segment.name}.slice")
    task.linkage = "internal"
    b = ll.IRBuilder(task.append_basic_block("entry"))
    ctx, thread, count = task.args
    zero = ll.Constant(I32, 0)
    total = b.load(b.gep(ctx, [zero, ll.Constant(I32, 1)], source_etype=ctx_type), typ=I64)
    t64, n64 = b.sext(thread, I64), b.sext(count, I64)
    begin = b.sdiv(b.mul(total, t64), n64)
    end = b.sdiv(b.mul(total, b.add(t64, ll.Constant(I64, 1))), n64)
    ptrs = [b.load(b.gep(ctx, [zero, zero, ll.Constant(I32, k)], source_etype=ctx_type), typ=PTR)
            for k in range(buffers)]
    b.ret(b.call(segment, [*ptrs, begin, end]))

    fork = ll.Function(module, ll.FunctionType(I32, [PTR] * buffers + [I64, I32]), f"{segment.name}.fork")
    b = ll.IRBuilder(fork.append_basic_block("entry"))
    ctx = b.alloca(ctx_type)
    ctx.type = PTR  # llvmlite types an alloca as a typed pointer; LLVM 22 has only opaque ones
    for k in range(buffers):
        b.store(fork.args[k], b.gep(ctx, [zero, zero, ll.Constant(I32, k)], source_etype=ctx_type))
    b.store(fork.args[buffers], b.gep(ctx, [zero, ll.Constant(I32, 1)], source_etype=ctx_type))
    run = declare(module, RUN, ll.FunctionType(I32, [PTR, PTR, I32]))
    b.ret(b.call(run, [task, ctx, fork.args[-1]]))
    return fork.name


def emit_each(module: ll.Module, name: str, calls: list[tuple[ll.Function, list[int], int]], width: int
              ) -> str:
    """Emit ``name(args: ptr[], begin: i64, end: i64) -> i32``, which runs the kernel once on each of the
    sets of arrays ``begin`` to ``end`` (``args``: ``width`` pointers per set), every segment in order
    (``calls``: its function, the indices of its buffers in a set, its iterations) on the calling thread,
    and its fork wrapper (``emit_fork``), which shares the sets among threads: many small kernels (one
    GEMM per attention head) in one call and one fork. Returns the wrapper's name."""
    fn = ll.Function(module, ll.FunctionType(I32, [PTR, I64, I64]), name)
    args, begin, end = fn.args
    entry, head, body, fail, done = (fn.append_basic_block(x)
                                     for x in ("entry", "set", "body", "fail", "done"))
    ll.IRBuilder(entry).branch(head)
    b = ll.IRBuilder(head)
    s = b.phi(I64)
    s.add_incoming(begin, entry)
    b.cbranch(b.icmp_signed("<", s, end), body, done)
    b = ll.IRBuilder(body)
    base = b.mul(s, ll.Constant(I64, width))
    failed = []
    for segment, slots, total in calls:
        ptrs = [b.load(b.gep(args, [b.add(base, ll.Constant(I64, k))], source_etype=PTR), typ=PTR)
                for k in slots]
        code = b.call(segment, [*ptrs, ll.Constant(I64, 0), ll.Constant(I64, total)])
        b = _unless_failed(fn, b, code, fail, failed)
    s.add_incoming(b.add(s, ll.Constant(I64, 1)), b.block)
    b.branch(head)
    _return_codes(fail, failed, done)
    return emit_fork(module, fn, 1)


def _unless_failed(fn: ll.Function, b: ll.IRBuilder, code: ll.Value, fail: ll.Block,
                   failed: list[tuple[ll.Value, ll.Block]]) -> ll.IRBuilder:
    """Branch to ``fail`` where a segment's ``code`` is nonzero (noted in ``failed``); a builder of the block
    that goes on otherwise."""
    after = fn.append_basic_block("next")
    failed.append((code, b.block))
    b.cbranch(b.icmp_signed("!=", code, ll.Constant(I32, 0)), fail, after)
    return ll.IRBuilder(after)


def _return_codes(fail: ll.Block, failed: list[tuple[ll.Value, ll.Block]], done: ll.Block) -> None:
    """``fail`` returns the nonzero code it came with (``_unless_failed``), ``done`` returns 0."""
    b = ll.IRBuilder(fail)
    code = b.phi(I32)
    for value, block in failed:
        code.add_incoming(value, block)
    b.ret(code)
    ll.IRBuilder(done).ret(ll.Constant(I32, 0))


def emit_repeat(module: ll.Module, name: str,
                calls: list[tuple[ll.Function, ll.Function | None, list[int], int]]) -> None:
    """Emit ``name(args: ptr[], n: i64, threads: i32) -> i32``, the native timing loop: ``n`` times, every
    segment in order (``calls``: its function, its fork or None, the indices of its buffers in ``args``, its
    iterations), a forked one on ``min(threads, iterations)`` threads when that is more than one; the first
    nonzero code returns at once. A loop of calls without the host language between them is how a kernel
    is timed (TVM's time_evaluator runs one too)."""
    fn = ll.Function(module, ll.FunctionType(I32, [PTR, I64, I32]), name)
    for segment, fork, _, _ in calls:   # called, never inlined: LLVM would hoist a kernel's work out of
        for callee in (segment, fork):  # the loop (its buffers do not alias), timing nothing
            if callee is not None:
                callee.attributes.add("noinline")
    args, count, threads = fn.args
    entry, head, fail, done = (fn.append_basic_block(x) for x in ("entry", "repeat", "fail", "done"))
    b = ll.IRBuilder(entry)
    pointers = [[b.load(b.gep(args, [ll.Constant(I64, k)], source_etype=PTR), typ=PTR) for k in slots]
                for _, _, slots, _ in calls]
    b.branch(head)
    b = ll.IRBuilder(head)
    r = b.phi(I64)
    r.add_incoming(ll.Constant(I64, 0), entry)
    failed = []
    for (segment, fork, _, total), ptrs in zip(calls, pointers, strict=True):
        zero, iterations = ll.Constant(I64, 0), ll.Constant(I64, total)
        if fork is None:
            code = b.call(segment, [*ptrs, zero, iterations])
        else:
            wide = b.sext(threads, I64)
            parts = b.trunc(b.select(b.icmp_signed("<", wide, iterations), wide, iterations), I32)
            forked, serial, joined = (fn.append_basic_block(x) for x in ("forked", "serial", "joined"))
            b.cbranch(b.icmp_signed(">", parts, ll.Constant(I32, 1)), forked, serial)
            b = ll.IRBuilder(forked)
            many = b.call(fork, [*ptrs, iterations, parts])
            b.branch(joined)
            b = ll.IRBuilder(serial)
            one = b.call(segment, [*ptrs, zero, iterations])
            b.branch(joined)
            b = ll.IRBuilder(joined)
            code = b.phi(I32)
            code.add_incoming(many, forked)
            code.add_incoming(one, serial)
        b = _unless_failed(fn, b, code, fail, failed)
    following = b.add(r, ll.Constant(I64, 1))
    r.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed("<", following, count), head, done)
    _return_codes(fail, failed, done)
