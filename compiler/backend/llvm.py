"""The CPU backend: loop IR -> LLVM IR (llvmlite) -> machine code for this CPU, called on numpy arrays.

``build(func)`` compiles a lowered ``PrimFunc`` (any pipeline stage: multi-dimensional or flat buffers,
tensor instructions of the x86 spec included) and returns a ``CpuKernel``; ``kernel(*arrays)`` runs it in
place on the arrays, as ``compiler.interp.run`` does, with the same argument rules and the same results.

How the function is cut up (``plan``):
- allocations at the top of the function (not inside a loop) are *workspaces*: numpy allocates them per
  call and they are passed in like parameters;
- what remains is a sequence of top-level statements, each compiled to one LLVM function over the buffers
  it touches (``compiler.backend.llvm_emit``). A parallel loop at the top level is a *parallel segment*:
  its iterations are cut into one contiguous slice per thread, each slice runs on its own thread (ctypes
  releases the GIL during the call), and the call waits for all of them before the next segment starts;
  parallel loops deeper down run serially within their thread. The threads are the workers of Tandem's
  native pool (``compiler.backend.llvm_pool``), forked from the compiled code
  (``compiler.backend.llvm_parallel``): a call is one native call of every segment.

The code is generated for the host CPU (``llvmlite.binding.get_host_cpu_name()`` and its features, so
AVX-512 VNNI where the CPU has it) and optimized with LLVM's O3 pipeline. ``CpuKernel.llvm_ir`` and
``CpuKernel.assembly()`` show what was built. ``compile_module`` and ``target_machine`` are shared with
``compiler.backend.llvm_cross``, which compiles the same segments for another machine (AArch64).

Faults found at run time (an out-of-bounds index that could not be proven in bounds at compile time, a
division by zero, a float cast out of range) stop the call with ``CpuRuntimeError`` naming the statement;
arrays may then be partly written.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir as ll

from compiler.backend import aligned
from compiler.backend.llvm_emit import FunctionEmitter
from compiler.backend.llvm_operands import emit_tensor_insn, runs_on_cpu
from compiler.backend.llvm_parallel import emit_each, emit_fork, emit_repeat
from compiler.backend.llvm_pool import Pool, pool_module
from compiler.backend.llvm_types import I32, I64, PTR, ErrorTable
from compiler.errors import CodegenError, CpuRuntimeError
from compiler.interp.args import contiguous_args, match_args, stored_buffers
from compiler.ir import nodes as n
from compiler.ir.functor import IRVisitor

__all__ = ["CpuKernel", "Segment", "build", "compile_module", "cpu_unsupported", "host_cpu",
           "median_seconds", "plan", "target_machine"]


def target_machine(triple: str | None = None, cpu: str = "generic", features: str = "") -> llvm.TargetMachine:
    """A new target machine: for the host when ``triple`` is None (an MCJIT engine takes ownership of the
    one it is given), else for ``cpu`` of ``triple`` with ``features`` (LLVM's ``+a,+b``), emitting static
    code."""
    if triple is None:
        _initialize()
        target = llvm.Target.from_default_triple()
        return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                            features=llvm.get_host_cpu_features().flatten(), opt=3,
                                            jit=True)
    _initialize_all()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise CodegenError(f"llvm: no LLVM target for triple {triple!r}: {e}") from None
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="static", codemodel="small")


@cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@cache
def _initialize_all() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def host_cpu() -> dict[str, object]:
    """The CPU code is generated for: LLVM's name for it, whether it has AVX-512 (F, VNNI), how many vector
    registers (32 with AVX-512, else AVX2's 16) and how many cores."""
    features = set(llvm.get_host_cpu_features().flatten().split(","))
    return {"cpu": llvm.get_host_cpu_name(), "avx512vnni": "+avx512vnni" in features,
            "avx512f": "+avx512f" in features, "avxvnni": "+avxvnni" in features,
            "vector_registers": 32 if "+avx512f" in features else 16, "cores": default_threads()}


def default_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Segment:
    """One top-level statement compiled to one LLVM function ``name`` over ``buffers``."""

    name: str
    stmt: n.Stmt
    buffers: tuple[n.Buffer, ...]
    parallel: n.For | None  # the loop whose iterations are shared between threads

    @property
    def iterations(self) -> int:
        return int(self.parallel.extent.value) if self.parallel is not None else 1


def plan(func: n.PrimFunc) -> tuple[tuple[n.Buffer, ...], tuple[Segment, ...]]:
    """The workspaces (top-level allocations) and the segments of ``func``, in execution order."""
    workspaces: list[n.Buffer] = []
    items: list[n.Stmt] = []

    def walk(s: n.Stmt) -> None:
        if isinstance(s, n.Allocate):
            workspaces.append(s.buffer)
            walk(s.body)
        elif isinstance(s, n.Seq):
            for x in s.stmts:
                walk(x)
        elif isinstance(s, n.Attr):
            walk(s.body)
        else:
            items.append(s)

    walk(func.body)
    segments = []
    for k, s in enumerate(items):
        loop = s if isinstance(s, n.For) and s.kind is n.ForKind.PARALLEL and \
            isinstance(s.min, n.IntImm) and isinstance(s.extent, n.IntImm) else None
        segments.append(Segment(f"{func.name}_{k}", s, _buffers_of(s), loop))
    return tuple(workspaces), tuple(segments)


def compile_module(func: n.PrimFunc, segments: tuple[Segment, ...], tm: llvm.TargetMachine, triple: str,
                   errors: ErrorTable, rules: Callable, fork: bool = False,
                   slots: list[list[int]] | None = None) -> llvm.ModuleRef:
    """One LLVM module for ``tm`` and ``triple`` with a function per segment of ``func`` (tensor
    instructions emitted by ``rules``), verified and optimized with LLVM's O3 pipeline; with ``fork``, each
    parallel segment also gets a fork wrapper (``llvm_parallel.emit_fork``); with ``slots`` (each segment's
    buffers as indices into one pointer array), the native loop ``<func>.repeat``
    (``llvm_parallel.emit_repeat``), which runs every segment, forked where it has a wrapper: each call of a
    kernel once, its timing loop n times."""
    module = ll.Module(name=func.name)
    module.triple = triple
    module.data_layout = str(tm.target_data)
    calls = []
    for k, seg in enumerate(segments):
        fn = FunctionEmitter(module, seg.name, list(seg.buffers), errors, rules).emit(seg.stmt, seg.parallel)
        forked = emit_fork(module, fn, len(seg.buffers)) if seg.parallel is not None and fork else None
        if slots is not None:
            calls.append((fn, forked and module.get_global(forked), slots[k], seg.iterations))
    if slots is not None:
        emit_repeat(module, f"{func.name}.repeat", calls)
    return optimized(module, tm, func.name)


def optimized(module: ll.Module, tm: llvm.TargetMachine, name: str, backend: str = "llvm",
              vectorize: bool = True) -> llvm.ModuleRef:
    """``module`` parsed, verified (CodegenError naming ``name`` if it does not) and optimized with LLVM's
    O3 pipeline for ``tm`` (loop unrolling on; loop and SLP vectorization with ``vectorize``)."""
    try:
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
    except RuntimeError as e:
        raise CodegenError(f"{backend}: the generated IR of {name} does not verify: {e}") from None
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_unrolling = True
    pto.loop_vectorization = pto.slp_vectorization = vectorize
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(parsed, pb)
    return parsed


def _buffers_of(s: n.Stmt) -> tuple[n.Buffer, ...]:
    """The buffers ``s`` uses that it does not allocate itself, in order of first use."""
    found: dict[n.Buffer, None] = {}
    inner: set[n.Buffer] = set()

    class _Collect(IRVisitor):
        def visit_Allocate(self, a: n.Allocate) -> None:
            inner.add(a.buffer)
            self.generic_visit(a)

        def visit_buffer(self, buffer: n.Buffer) -> None:
            found.setdefault(buffer)

    _Collect().visit(s)
    return tuple(b for b in found if b not in inner)


class CpuKernel:
    """A compiled function: call it with numpy arrays (positional or by parameter name)."""

    def __init__(self, func: n.PrimFunc, threads: int | None = None) -> None:
        self.func = func
        self.threads = threads or default_threads()
        self.workspaces, self.segments = plan(func)
        self.errors = ErrorTable()
        tm = target_machine()
        self._pool = thread_pool()
        index = {b: k for k, b in enumerate((*func.params, *self.workspaces))}
        self._slots = [[index[b] for b in seg.buffers] for seg in self.segments]  # each segment's pointers
        parsed = compile_module(func, self.segments, tm, llvm.get_process_triple(), self.errors,
                                emit_tensor_insn, fork=True, slots=self._slots)
        self.llvm_ir = str(parsed)
        self._engine = llvm.create_mcjit_compiler(parsed, tm)  # owns tm and the module from here on
        self._tm = tm
        self._engine.finalize_object()
        self._module = parsed
        self._stored = stored_buffers(func.body)
        self._params = [(p.shape, p.dtype.numpy, p.size) for p in func.params]
        self._repeat = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)(
            self._engine.get_function_address(f"{func.name}.repeat"))
        self._each = None   # ``<func>.each.fork``, compiled on the first ``bind_each`` (``_each_call``)

    def assembly(self) -> str:
        """The machine code, as assembly text."""
        return self._tm.emit_assembly(self._module)

    def __call__(self, *args, threads: int | None = None, **named) -> None:
        """Run in place on ``args`` (or on arrays named by parameter); ``threads`` overrides the default."""
        if not named and self._plain(args):  # the common case, checked cheaply: calls can be microseconds
            _check_overlap(self.func, args)
            workspaces = [aligned.empty(w.size, w.dtype.numpy) for w in self.workspaces]  # alive until done
            self._run(_pointers([a.ctypes.data for a in (*args, *workspaces)]), self._started(threads))
            return
        given = named if named and not args else list(args)
        with contiguous_args(self.func, given, self._stored, CpuRuntimeError) as arrays:
            _check_overlap(self.func, match_args(self.func, given, CpuRuntimeError))
            workspaces = [aligned.empty(w.size, w.dtype.numpy) for w in self.workspaces]
            addresses = [a.ctypes.data for a in (*arrays, *workspaces)]
            self._run(_pointers(addresses), self._started(threads))

    def bind(self, *args) -> Callable[[], None]:
        """A call on ``args`` (numpy arrays matching the parameters exactly, checked once here) to be made
        again and again as their contents change, the checks and pointers not redone: a kernel of a few
        microseconds in a network's prepared inference (tandem/network/inference.py). The call holds the
        arrays alive."""
        if not self._plain(args):
            raise CpuRuntimeError(f"{self.func.name}: bind() takes one C-contiguous, writeable numpy array "
                                  f"per parameter of exactly its dtype and shape")
        _check_overlap(self.func, args)
        arrays = (*args, *(aligned.empty(w.size, w.dtype.numpy) for w in self.workspaces))
        pointers, threads = _pointers([a.ctypes.data for a in arrays]), self._started(None)

        def call() -> None:
            self._run(pointers, threads)
        call.arrays = arrays   # held as long as the call is
        return call

    def bind_each(self, sets: Sequence[Sequence[np.ndarray]], threads: int | None = None
                  ) -> Callable[[], None]:
        """A call that runs the kernel on each set of arrays in ``sets`` (each as ``bind`` takes them), the
        sets shared among ``threads`` (by default the kernel's), each set's loops on one thread: many small
        kernels in one native call and one fork (the GEMMs of attention's heads), where their own parallel
        loops would each fork and join."""
        calls = [self.bind(*args) for args in sets]   # (each set checked, its workspaces its own)
        if not calls:
            def each() -> None:
                for call in calls:
                    call()
            each.arrays = [call.arrays for call in calls]
            return each
        table = (ctypes.c_void_p * sum(len(call.arrays) for call in calls))(
            *(a.ctypes.data for call in calls for a in call.arrays))
        threads = self._started(min(threads or self.threads, len(calls)))
        native = self._each_call()

        def each() -> None:
            code = native(table, len(calls), threads)
            if code:
                raise CpuRuntimeError(f"{self.func.name}: {self.errors.messages[code - 1]}")
        each.arrays = [call.arrays for call in calls]   # held as long as the call is
        return each

    def _each_call(self) -> Callable:
        """``<func>.each.fork`` (``llvm_parallel.emit_each``), compiled into a module of its own on the first
        call (most kernels never need it: it would cost each build a third more) and added to the engine,
        where it calls the segments the kernel's module defines."""
        if self._each is None:
            module = ll.Module(name=f"{self.func.name}.each")
            module.triple, module.data_layout = llvm.get_process_triple(), str(self._tm.target_data)
            calls = [(ll.Function(module, ll.FunctionType(I32, [PTR] * len(seg.buffers) + [I64, I64]),
                                  seg.name), slots, seg.iterations)   # (declared: the kernel's module's)
                     for seg, slots in zip(self.segments, self._slots, strict=True)]
            width = len(self.func.params) + len(self.workspaces)
            fork = emit_each(module, f"{self.func.name}.each", calls, width)
            self._engine.add_module(optimized(module, self._tm, f"{self.func.name}.each"))
            self._engine.finalize_object()
            self._each = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)(
                self._engine.get_function_address(fork))
        return self._each

    def time(self, *args, min_time: float = 0.05, repeats: int = 5, threads: int | None = None) -> float:
        """The median seconds of one call on ``args`` (numpy arrays matching the parameters exactly, checked
        once), over ``repeats`` samples of back-to-back calls lasting at least ``min_time`` seconds each.
        The calls run in the native loop ``<func>.repeat``, so what a Python call costs besides the kernel
        (checks, ctypes, about 9 µs per call on this project's CPUs) is not counted; TVM's time_evaluator
        times the same way."""
        if not self._plain(args):
            raise CpuRuntimeError(f"{self.func.name}: time() takes one C-contiguous, writeable numpy array "
                                  f"per parameter of exactly its dtype and shape")
        _check_overlap(self.func, args)
        threads = self._started(threads)
        workspaces = [aligned.empty(w.size, w.dtype.numpy) for w in self.workspaces]  # alive until done
        pointers = _pointers([a.ctypes.data for a in (*args, *workspaces)])

        def run(calls: int) -> None:
            code = self._repeat(pointers, calls, threads)
            if code:
                raise CpuRuntimeError(f"{self.func.name}: {self.errors.messages[code - 1]}")

        return median_seconds(run, min_time, repeats)

    def _plain(self, args: tuple) -> bool:
        """Every argument an exactly matching, C-contiguous, writeable numpy array."""
        if len(args) != len(self._params):
            return False
        for a, (shape, dtype, size) in zip(args, self._params, strict=True):
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                return False
            if not a.flags.writeable or (a.shape != shape and not (len(shape) == 1 and a.size == size)):
                return False
        return True

    def _started(self, threads: int | None) -> int:
        """``threads`` (the kernel's by default), the pool's workers for them started."""
        threads = threads or self.threads
        if threads > 1 + self._pool.workers:
            self._pool.ensure(threads - 1)
        return threads

    def _run(self, pointers: ctypes.Array, threads: int) -> None:
        """Every segment on ``pointers`` (``_pointers``'): one native call of ``<func>.repeat``, its parallel
        segments forked there."""
        code = self._repeat(pointers, 1, threads)
        if code:
            raise CpuRuntimeError(f"{self.func.name}: {self.errors.messages[code - 1]}")


def _pointers(addresses: list[int]) -> ctypes.Array:
    """The arrays' addresses as the native calls take them: one C array."""
    return (ctypes.c_void_p * len(addresses))(*addresses)


@cache
def thread_pool() -> Pool:
    """This process's native thread pool (``llvm_pool``), compiled with the first kernel."""
    tm = target_machine()
    engine = llvm.create_mcjit_compiler(optimized(pool_module(llvm.get_process_triple(), str(tm.target_data)),
                                                  tm, "tandem.pool"), tm)
    engine.finalize_object()
    return Pool(engine)


MAX_CALLS = 2**40   # the most calls one timing sample may take (a 64-bit count, far from overflowing)


def median_seconds(run: Callable[[int], object], min_time: float, repeats: int) -> float:
    """The median seconds per call of ``run(calls)`` (which makes ``calls`` calls): one warm-up call, then the
    number of calls that lasts ``min_time`` is found by doubling, then ``repeats`` samples of that many. The
    one timing rule of compiled kernels and their peers."""
    if repeats < 1 or min_time < 0:
        raise ValueError(f"time: expected repeats >= 1 and min_time >= 0, but got {repeats} and {min_time}")
    run(1)
    calls = 1
    while True:
        start = time.perf_counter()
        run(calls)
        if time.perf_counter() - start >= min_time:
            break
        if calls >= MAX_CALLS:
            raise CpuRuntimeError(f"time: {calls:,} calls took less than {min_time} s: the timed code does "
                                  f"no measurable work")
        calls *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(calls)
        samples.append((time.perf_counter() - start) / calls)
    return float(np.median(samples))


def _check_overlap(func: n.PrimFunc, arrays: list[np.ndarray]) -> None:
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            if np.may_share_memory(arrays[i], arrays[j]):
                raise CpuRuntimeError(
                    f"{func.name}: arguments '{func.params[i].name}' and '{func.params[j].name}' share "
                    "memory; compiled code assumes every buffer is distinct"
                )


def cpu_unsupported(func: n.PrimFunc) -> str | None:
    """Why ``func`` cannot run on this CPU (a tensor instruction of an accelerator), or None if it can."""
    found: list[str] = []

    class _Find(IRVisitor):
        def visit_TensorInsn(self, s: n.TensorInsn) -> None:
            if not found and not runs_on_cpu(s):
                found.append(f"{s.isa.name}.{s.name} is not an instruction of this CPU")

    _Find().visit(func.body)
    return found[0] if found else None


def build(func: n.PrimFunc, threads: int | None = None) -> CpuKernel:
    """Compile ``func`` for this CPU; parallel loops use ``threads`` threads (default: every core)."""
    if not isinstance(func, n.PrimFunc):
        raise CodegenError(f"llvm.build: expected a PrimFunc, but got {type(func).__name__}")
    return CpuKernel(func, threads)
