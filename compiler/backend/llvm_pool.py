"""The native thread pool that runs a parallel segment's slices: workers started once per process, waiting in
compiled code, handed each fork through one cache line.

A fork is ``i32 tandem.pool.run(ptr task, ptr ctx, i32 n)``: ``task(ctx, t, n)`` (returning a fault code, 0
for none) runs for every ``t`` of ``n``, slice 0 on the calling thread and slice ``t`` on worker ``t``; it
returns the first nonzero code of the calling thread's slices, else one of the workers'. Compiled kernels
call it (``llvm_parallel.emit_fork``); ``compiler.backend.llvm.thread_pool`` compiles ``pool_module`` once per
process, on the first kernel, and its ``Pool`` makes the name resolvable in every module compiled after.

Why not libgomp's ``GOMP_parallel``: on this project's 2-core guests a fork and join of libgomp's team took
~1.05 us, twice the ~0.5 us of a round trip of one cache line between the two cores (both measured in C, side
by side), and a ResNet-18 1x1 conv of ~6 us on 2 threads lost 12% of its time to it. Here the caller writes
the task and a sequence word into one line, which the waiting workers read; a worker adds to a done count and
the caller waits for it: one line each way.

The protocol (``seq`` is ``generation << 16 | helpers``, one word, so that a worker reads in one load both
that there is a new fork and whether it takes part):
- the caller takes ``busy`` (a second caller, on another Python thread, finds it taken and runs every slice
  itself), writes the task, zeroes the done count, stores ``seq``, wakes sleeping workers, runs slice 0 and
  any slice without a started worker, and waits until the done count is ``helpers``;
- a worker spins on ``seq`` for about ``SPINS`` pauses after its last fork, then sleeps on a condition
  variable (its count in ``sleepers``, which the caller reads after storing ``seq``: both sequentially
  consistent, so either the caller sees it asleep and wakes it or the worker sees the new ``seq``).
Workers are pthreads created by ``tandem.pool.start`` (``Pool.ensure``); a fork asks for no more of them
than have started. In a child process forked from this one (multiprocessing), no worker exists: the pool
is reset there (``os.register_at_fork``) and starts its own.
"""

from __future__ import annotations

import ctypes
import os
import threading

import llvmlite.binding as llvm
from llvmlite import ir as ll

from compiler.backend.llvm_types import I8, I32, I64, PTR, declare

RUN, START, RESET, SLEEPERS = (f"tandem.pool.{name}" for name in ("run", "start", "reset", "asleep"))
MAX_WORKERS = 255       # helpers are counted in seq's low 16 bits; far more cores than a host has
SPINS = 1 << 15         # pauses a worker spins before it sleeps (~0.5-1 ms): back-to-back kernels never sleep
LOCK_BYTES = 128        # room for a pthread mutex or condition variable on any libc (glibc: 40 and 48)
TASK = ll.FunctionType(I32, [PTR, I32, I32])


class Pool:
    """The compiled pool of this process (``engine``: ``pool_module`` built; ``compiler.backend.llvm`` keeps
    the one pool): ``tandem.pool.run`` resolves in modules compiled after it; ``ensure(k)`` starts workers
    until ``k`` have; a child process forked from this one starts afresh."""

    def __init__(self, engine: llvm.ExecutionEngine) -> None:
        self._engine = engine   # holds the compiled code alive
        llvm.add_symbol(RUN, engine.get_function_address(RUN))
        self._start = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(engine.get_function_address(START))
        self._reset = ctypes.CFUNCTYPE(None)(engine.get_function_address(RESET))
        self._sleepers = ctypes.CFUNCTYPE(ctypes.c_int32)(engine.get_function_address(SLEEPERS))
        self._lock = threading.Lock()
        self.workers = 0
        self._reset()
        os.register_at_fork(after_in_child=self.after_fork_in_child)

    def ensure(self, workers: int) -> None:
        """At least ``min(workers, MAX_WORKERS)`` workers started (fewer where the system refuses threads:
        a fork then runs the slices without one on its caller)."""
        if workers > self.workers:
            with self._lock:
                self.workers = self._start(min(workers, MAX_WORKERS))

    def sleeping(self) -> int:
        """How many workers sleep on the condition variable now (the rest spin or work)."""
        return self._sleepers()

    def after_fork_in_child(self) -> None:
        """The pool of a child process: no worker runs there, so none is counted, and the locks are new."""
        self._reset()
        self._lock = threading.Lock()
        self.workers = 0


class _State:
    """The pool's globals, each on cache lines of its own, as bytes: a field is a typed pointer into one."""

    def __init__(self, module: ll.Module) -> None:
        def line(name: str, size: int = 64) -> ll.GlobalVariable:
            g = ll.GlobalVariable(module, ll.ArrayType(I8, size), f"tandem.pool.{name}")
            g.initializer = ll.Constant(g.value_type, None)
            g.linkage = "internal"
            g.align = 64
            return g

        self.job = line("job")            # seq (i64), task and ctx (as i64), n (i32)
        self.done = line("done")          # count, a worker's nonzero code (i32 each)
        self.busy, self.sleepers, self.workers = line("busy"), line("sleepers"), line("workers")
        self.born = line("born", 8 * (MAX_WORKERS + 1))   # seq when worker t was started (i64 each)
        self.mutex, self.cond = line("mutex", LOCK_BYTES), line("cond", LOCK_BYTES)

    @staticmethod
    def at(b: ll.IRBuilder, g: ll.GlobalVariable, offset: ll.Value | int = 0, typ: ll.Type = I32) -> ll.Value:
        """A ``typ`` pointer to byte ``offset`` of ``g`` (``typ`` PTR: an untyped pointer)."""
        offset = ll.Constant(I64, offset) if isinstance(offset, int) else offset
        p = b.gep(g, [ll.Constant(I64, 0), offset], source_etype=g.value_type)
        return b.bitcast(p, PTR if typ is PTR else ll.PointerType(typ))


def pool_module(triple: str, layout: str) -> ll.Module:
    """The pool's functions (``RUN``, ``START``, ``RESET``, ``SLEEPERS``) and globals, for ``triple``."""
    module = ll.Module(name="tandem.pool")
    module.triple, module.data_layout = triple, layout
    state = _State(module)
    x86 = triple.startswith(("x86_64", "i686", "i386"))
    pause_fn = declare(module, "llvm.x86.sse2.pause", ll.FunctionType(ll.VoidType(), [])) if x86 else None

    def pause(b: ll.IRBuilder) -> None:   # a spin-wait hint where the CPU has one
        if pause_fn is not None:
            b.call(pause_fn, [])
    _emit_run(module, state, pause)
    _emit_worker(module, state, pause)
    _emit_start(module, state, pause)
    _emit_reset(module, state)
    fn = ll.Function(module, ll.FunctionType(I32, []), SLEEPERS)
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.load_atomic(state.at(b, state.sleepers), "monotonic", 4))
    return module


def _c(value: int, typ: ll.Type = I32) -> ll.Constant:
    return ll.Constant(typ, value)


def _libc(b: ll.IRBuilder, name: str, *args: ll.Value) -> ll.Value:
    """A call of the C library's (pthreads') ``int name(args...)``."""
    return b.call(declare(b.module, name, ll.FunctionType(I32, [a.type for a in args])), list(args))


def _slices(b: ll.IRBuilder, fn: ll.Function, task: ll.Value, ctx: ll.Value, first: ll.Value, n: ll.Value,
            code: ll.Value) -> tuple[ll.IRBuilder, ll.Value]:
    """Run ``task``'s slices ``first`` to ``n - 1`` on this thread; the first nonzero code (``code`` if it
    is nonzero already)."""
    entry = b.block
    head, body, after = (fn.append_basic_block(x) for x in ("slice", "slice.run", "slices.done"))
    b.branch(head)
    b = ll.IRBuilder(head)
    t, acc = b.phi(I32), b.phi(I32)
    t.add_incoming(first, entry)
    acc.add_incoming(code, entry)
    b.cbranch(b.icmp_signed("<", t, n), body, after)
    b = ll.IRBuilder(body)
    got = b.call(task, [ctx, t, n])
    t.add_incoming(b.add(t, _c(1)), body)
    acc.add_incoming(b.select(b.icmp_signed("!=", acc, _c(0)), acc, got), body)
    b.branch(head)
    return ll.IRBuilder(after), acc


def _emit_run(module: ll.Module, s: _State, pause) -> None:
    fn = ll.Function(module, ll.FunctionType(I32, [PTR, PTR, I32]), RUN)
    untyped, ctx, n = fn.args
    entry, release, back, forked, wake, own, wait, waited, serial = (fn.append_basic_block(x) for x in (
        "entry", "taken", "give.back", "forked", "wake", "own", "wait", "waited", "serial"))
    b = ll.IRBuilder(entry)
    task = b.inttoptr(b.ptrtoint(untyped, I64), ll.PointerType(TASK))   # typed, to be called
    taken = b.extract_value(b.cmpxchg(s.at(b, s.busy), _c(0), _c(1), "acquire", "monotonic"), 1)
    b.cbranch(taken, release, serial)
    b = ll.IRBuilder(release)
    workers = b.load_atomic(s.at(b, s.workers), "monotonic", 4)
    helpers = b.select(b.icmp_signed("<", b.sub(n, _c(1)), workers), b.sub(n, _c(1)), workers)
    b.cbranch(b.icmp_signed("<=", helpers, _c(0)), back, forked)
    b = ll.IRBuilder(back)
    b.store_atomic(_c(0), s.at(b, s.busy), "release", 4)
    b.branch(serial)

    b = ll.IRBuilder(forked)
    b.store(b.ptrtoint(untyped, I64), s.at(b, s.job, 8, I64))
    b.store(b.ptrtoint(ctx, I64), s.at(b, s.job, 16, I64))
    b.store(n, s.at(b, s.job, 24))
    b.store_atomic(_c(0), s.at(b, s.done, 0), "monotonic", 4)
    b.store_atomic(_c(0), s.at(b, s.done, 4), "monotonic", 4)
    word = s.at(b, s.job, 0, I64)
    old = b.load_atomic(word, "monotonic", 8)
    seq = b.or_(b.shl(b.add(b.lshr(old, _c(16, I64)), _c(1, I64)), _c(16, I64)), b.zext(helpers, I64))
    b.store_atomic(seq, word, "seq_cst", 8)
    asleep = b.load_atomic(s.at(b, s.sleepers), "seq_cst", 4)
    b.cbranch(b.icmp_signed("!=", asleep, _c(0)), wake, own)
    b = ll.IRBuilder(wake)
    _libc(b, "pthread_mutex_lock", s.at(b, s.mutex, typ=PTR))
    _libc(b, "pthread_cond_broadcast", s.at(b, s.cond, typ=PTR))
    _libc(b, "pthread_mutex_unlock", s.at(b, s.mutex, typ=PTR))
    b.branch(own)
    b = ll.IRBuilder(own)
    first = b.call(task, [ctx, _c(0), n])
    b, code = _slices(b, fn, task, ctx, b.add(helpers, _c(1)), n, first)   # slices no worker takes
    b.branch(wait)
    b = ll.IRBuilder(wait)
    count = b.load_atomic(s.at(b, s.done, 0), "acquire", 4)
    spin = fn.append_basic_block("wait.spin")
    b.cbranch(b.icmp_signed("==", count, helpers), waited, spin)
    b = ll.IRBuilder(spin)
    pause(b)
    b.branch(wait)
    b = ll.IRBuilder(waited)
    theirs = b.load_atomic(s.at(b, s.done, 4), "monotonic", 4)
    b.store_atomic(_c(0), s.at(b, s.busy), "release", 4)
    b.ret(b.select(b.icmp_signed("!=", code, _c(0)), code, theirs))

    b = ll.IRBuilder(serial)
    b, code = _slices(b, fn, task, ctx, _c(0), n, _c(0))
    b.ret(code)


def _emit_worker(module: ll.Module, s: _State, pause) -> None:
    """``ptr tandem.pool.worker(ptr t)``: worker ``t`` (1-based, passed as the pointer's value) forever."""
    fn = ll.Function(module, ll.FunctionType(PTR, [PTR]), "tandem.pool.worker")
    fn.linkage = "internal"
    entry, head, spin, sleep, nap, woke, got, work, note, counted = (fn.append_basic_block(x) for x in (
        "entry", "poll", "spin", "sleep", "nap", "woke", "got", "work", "note", "counted"))
    b = ll.IRBuilder(entry)
    me = b.trunc(b.ptrtoint(fn.args[0], I64), I32)
    born = b.load_atomic(s.at(b, s.born, b.mul(b.zext(me, I64), _c(8, I64)), I64), "monotonic", 8)
    b.branch(head)

    b = ll.IRBuilder(head)   # spins counts pauses since the last fork
    last, spins = b.phi(I64), b.phi(I32)
    last.add_incoming(born, entry)
    spins.add_incoming(_c(0), entry)
    word = s.at(b, s.job, 0, I64)
    seq = b.load_atomic(word, "acquire", 8)
    b.cbranch(b.icmp_unsigned("!=", seq, last), got, spin)
    b = ll.IRBuilder(spin)
    pause(b)
    more = b.add(spins, _c(1))
    last.add_incoming(last, spin)
    spins.add_incoming(more, spin)
    b.cbranch(b.icmp_signed("<", more, _c(SPINS)), head, sleep)

    b = ll.IRBuilder(sleep)  # from spinning too long, or from a fork not this worker's (few threads wanted)
    waiting = b.phi(I64)
    waiting.add_incoming(last, spin)
    _libc(b, "pthread_mutex_lock", s.at(b, s.mutex, typ=PTR))
    b.atomic_rmw("add", s.at(b, s.sleepers), _c(1), "seq_cst")
    b.branch(nap)
    b = ll.IRBuilder(nap)
    now = b.load_atomic(word, "seq_cst", 8)
    asleep = fn.append_basic_block("asleep")
    b.cbranch(b.icmp_unsigned("!=", now, waiting), woke, asleep)
    b = ll.IRBuilder(asleep)
    _libc(b, "pthread_cond_wait", s.at(b, s.cond, typ=PTR), s.at(b, s.mutex, typ=PTR))
    b.branch(nap)
    b = ll.IRBuilder(woke)
    b.atomic_rmw("sub", s.at(b, s.sleepers), _c(1), "seq_cst")
    _libc(b, "pthread_mutex_unlock", s.at(b, s.mutex, typ=PTR))
    last.add_incoming(waiting, woke)
    spins.add_incoming(_c(0), woke)
    b.branch(head)

    b = ll.IRBuilder(got)    # a new fork: take part if this worker is one of its helpers
    helpers = b.trunc(b.and_(seq, _c(0xFFFF, I64)), I32)
    b.cbranch(b.icmp_signed("<=", me, helpers), work, sleep)
    waiting.add_incoming(seq, got)
    b = ll.IRBuilder(work)
    task = b.inttoptr(b.load(s.at(b, s.job, 8, I64)), ll.PointerType(TASK))
    ctx = b.inttoptr(b.load(s.at(b, s.job, 16, I64)), PTR)
    n = b.load(s.at(b, s.job, 24))
    code = b.call(task, [ctx, me, n])
    b.cbranch(b.icmp_signed("!=", code, _c(0)), note, counted)
    b = ll.IRBuilder(note)
    b.cmpxchg(s.at(b, s.done, 4), _c(0), code, "monotonic", "monotonic")
    b.branch(counted)
    b = ll.IRBuilder(counted)
    b.atomic_rmw("add", s.at(b, s.done, 0), _c(1), "release")
    last.add_incoming(seq, counted)
    spins.add_incoming(_c(0), counted)
    b.branch(head)


def _emit_start(module: ll.Module, s: _State, pause) -> None:
    """``i32 tandem.pool.start(i32 k)``: workers started until ``k`` have (or the system refuses one); the
    number started. It holds ``busy`` meanwhile, so that no fork is under way while a worker is born."""
    fn = ll.Function(module, ll.FunctionType(I32, [I32]), START)
    entry, take, wait, taken, head, body, made, done = (fn.append_basic_block(x) for x in (
        "entry", "take", "wait", "taken", "worker", "create", "made", "done"))
    want = fn.args[0]
    b = ll.IRBuilder(entry)
    tid = b.alloca(I64)
    tid.type = PTR   # llvmlite types an alloca as a typed pointer; LLVM 22 has only opaque ones
    b.branch(take)
    b = ll.IRBuilder(take)
    taken_now = b.extract_value(b.cmpxchg(s.at(b, s.busy), _c(0), _c(1), "acquire", "monotonic"), 1)
    b.cbranch(taken_now, taken, wait)
    b = ll.IRBuilder(wait)
    pause(b)
    b.branch(take)
    b = ll.IRBuilder(taken)
    have = b.load_atomic(s.at(b, s.workers), "monotonic", 4)
    b.branch(head)
    b = ll.IRBuilder(head)
    k = b.phi(I32)
    k.add_incoming(have, taken)
    b.cbranch(b.icmp_signed("<", k, want), body, done)
    b = ll.IRBuilder(body)
    t = b.add(k, _c(1))
    seq = b.load_atomic(s.at(b, s.job, 0, I64), "monotonic", 8)
    b.store_atomic(seq, s.at(b, s.born, b.mul(b.zext(t, I64), _c(8, I64)), I64), "monotonic", 8)
    create = declare(module, "pthread_create", ll.FunctionType(I32, [PTR, PTR, PTR, PTR]))
    worker = module.get_global("tandem.pool.worker")
    failed = b.call(create, [tid, ll.Constant(PTR, None), worker, b.inttoptr(b.zext(t, I64), PTR)])
    b.cbranch(b.icmp_signed("!=", failed, _c(0)), done, made)
    b = ll.IRBuilder(made)
    _libc(b, "pthread_detach", b.load(tid, typ=I64))
    b.store_atomic(t, s.at(b, s.workers), "release", 4)
    k.add_incoming(t, made)
    b.branch(head)
    b = ll.IRBuilder(done)
    count = b.load_atomic(s.at(b, s.workers), "monotonic", 4)
    b.store_atomic(_c(0), s.at(b, s.busy), "release", 4)
    b.ret(count)


def _emit_reset(module: ll.Module, s: _State) -> None:
    """``void tandem.pool.reset()``: no worker, nothing held, new mutex and condition variable (at start and
    in a forked child)."""
    fn = ll.Function(module, ll.FunctionType(ll.VoidType(), []), RESET)
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    for g in (s.workers, s.busy, s.sleepers):
        b.store_atomic(_c(0), s.at(b, g), "seq_cst", 4)
    _libc(b, "pthread_mutex_init", s.at(b, s.mutex, typ=PTR), ll.Constant(PTR, None))
    _libc(b, "pthread_cond_init", s.at(b, s.cond, typ=PTR), ll.Constant(PTR, None))
    b.ret_void()
