"""Probes of this CPU through LLVM: its time-stamp counter and the peak of its tensor instruction.

    measure_peak(threads)          # vpdpbusd GOPS, the roof the CPU target's int8 results are held to
    measure_peak(threads, "fma")   # fp32 FMA GFLOPS, the roof of its float32 results
    measure_instruction_peak(spec, "vpmaddwd_256", threads)   # any spec instruction's, from the spec alone
    tsc_ticks(fn), tsc_hz() # time-stamp-counter ticks of one call, and ticks per second

Both JIT a few lines of LLVM IR with llvmlite (the same engine as ``compiler.backend.llvm``), once per
process.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from functools import cache

import llvmlite.binding as llvm
from llvmlite import ir as ll

import isa
from compiler.backend.llvm import host_cpu, target_machine
from compiler.backend.llvm_operands import instruction_runs_on_cpu
from compiler.backend.llvm_types import memory_type
from compiler.errors import CodegenError
from compiler.ir import dtypes
from isa.instance import operand_shape
from isa.lang.scalar import evaluate as evaluate_scalar


@cache
def _jit(name: str) -> tuple[object, Callable]:
    """One JIT helper, compiled in a module of its own (kept alive with its engine): ``tsc``, the
    time-stamp counter, or ``vnni`` / ``fma``, a throughput loop of that instruction. Each is compiled only
    when asked for, so a CPU without AVX-512 VNNI still reads its counter (LLVM aborts the process on an
    intrinsic the CPU lacks: ``measure_peak`` refuses first)."""
    module = ll.Module(f"tandem_cpu_probe_{name}")
    i32, i64 = ll.IntType(32), ll.IntType(64)
    if name == "tsc":
        tsc = ll.Function(module, ll.FunctionType(i64, []), "tandem_tsc")
        b = ll.IRBuilder(tsc.append_basic_block())
        b.ret(b.call(ll.Function(module, ll.FunctionType(i64, []), "llvm.readcyclecounter"), []))
        proto = ctypes.CFUNCTYPE(ctypes.c_int64)
    elif name == "vnni":
        v16, v64 = ll.VectorType(i32, 16), ll.VectorType(ll.IntType(8), 64)
        dot = ll.Function(module, ll.FunctionType(v16, [v16, v64, v64]), "llvm.x86.avx512.vpdpbusd.512")

        def vnni_operands(b: ll.IRBuilder, seed: ll.Value) -> tuple[ll.Value, ll.Value]:
            a = b.bitcast(b.insert_element(ll.Constant(v16, None), seed, ll.Constant(i32, 0)), v64)
            w = b.insert_element(ll.Constant(v16, None), b.add(seed, ll.Constant(i32, 1)),
                                 ll.Constant(i32, 0))
            return a, b.bitcast(w, v64)

        _throughput_loop(module, "tandem_vnni", v16, vnni_operands,
                         lambda b, acc, a, w: b.call(dot, [acc, a, w]))
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32)
    else:
        f16 = ll.VectorType(ll.FloatType(), 16)
        fma = ll.Function(module, ll.FunctionType(f16, [f16, f16, f16]), "llvm.fma.v16f32")

        def fma_operands(b: ll.IRBuilder, seed: ll.Value) -> tuple[ll.Value, ll.Value]:
            x = b.sitofp(seed, ll.FloatType())
            return (b.insert_element(ll.Constant(f16, None), x, ll.Constant(i32, 0)),
                    b.insert_element(ll.Constant(f16, None), b.fadd(x, ll.Constant(ll.FloatType(), 1.0)),
                                     ll.Constant(i32, 0)))

        _throughput_loop(module, "tandem_fma", f16, fma_operands,
                         lambda b, acc, a, w: b.call(fma, [a, w, acc]))
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32)
    tm = target_machine()  # initializes LLVM's native target before the parse
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), tm)
    engine.finalize_object()
    return engine, proto(engine.get_function_address(f"tandem_{name}"))


def _throughput_loop(module: ll.Module, name: str, vector: ll.VectorType, operands: Callable, step: Callable,
                     chains: int | None = None) -> None:
    """``i32 name(i64 n, i32 seed)``: ``n`` rounds of ``chains`` (default ``ACCUMULATORS``) independent
    ``step``s on registers (operands made from ``seed``, so nothing folds), returning a lane of their sum (so
    nothing is dead)."""
    i32, i64 = ll.IntType(32), ll.IntType(64)
    fn = ll.Function(module, ll.FunctionType(i32, [i64, i32]), name)
    n, seed = fn.args
    entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
    b = ll.IRBuilder(entry)
    a, w = operands(b, seed)
    b.branch(loop)
    b = ll.IRBuilder(loop)
    k = b.phi(i64)
    k.add_incoming(ll.Constant(i64, 0), entry)
    accs = []
    for _ in range(chains or ACCUMULATORS):
        phi = b.phi(vector)
        phi.add_incoming(ll.Constant(vector, None), entry)
        accs.append(phi)
    nxt = [step(b, acc, a, w) for acc in accs]
    for phi, value in zip(accs, nxt, strict=True):
        phi.add_incoming(value, loop)
    k2 = b.add(k, ll.Constant(i64, 1))
    k.add_incoming(k2, loop)
    b.cbranch(b.icmp_signed("<", k2, n), loop, done)
    b = ll.IRBuilder(done)
    total = nxt[0]
    for value in nxt[1:]:
        total = b.fadd(total, value) if isinstance(vector.element, ll.FloatType) else b.add(total, value)
    lane = b.extract_element(total, ll.Constant(i32, 0))
    b.ret(b.fptosi(lane, i32) if isinstance(vector.element, ll.FloatType) else lane)


ACCUMULATORS = 12  # independent vpdpbusd chains: enough to cover its latency at two issues per cycle


def tsc_ticks(fn: Callable[[], object]) -> int:
    """Time-stamp-counter ticks one call of ``fn`` takes."""
    tsc = _jit("tsc")[1]
    t0 = tsc()
    fn()
    return tsc() - t0


@cache
def tsc_hz() -> float:
    """Ticks of the time-stamp counter per second, measured against ``time.perf_counter`` over 50 ms."""
    tsc = _jit("tsc")[1]
    t0, c0 = time.perf_counter(), tsc()
    while time.perf_counter() - t0 < 0.05:
        pass
    return (tsc() - c0) / (time.perf_counter() - t0)


@cache
def measure_peak(threads: int = 1, instruction: str = "vnni") -> float:
    """This CPU's peak in GOPS (2 ops per multiply-add) on ``threads`` threads, all running at once, of
    ``instruction``: ``vnni`` (vpdpbusd, 64 multiply-adds) or ``fma`` (vfmadd on 16 fp32 lanes: GFLOPS).
    Each thread runs ``ACCUMULATORS`` independent instruction chains on registers and keeps its best of
    ``PEAK_RUNS`` runs of about 1 ms (the best, because other work on the machine only ever slows a run
    down; many short runs, because on a shared machine a long one is seldom left alone: on a 2-core Zen 4
    guest, 10 runs of 13 ms read 450-466 GOPS from one process to the next, 100 runs of 1 ms 472.6-472.7,
    and compiled kernels were timed at up to 466)."""
    if instruction not in PEAK_OPS:
        raise CodegenError(f"cpu: no peak probe for {instruction!r}; expected one of {', '.join(PEAK_OPS)}")
    if instruction == "vnni" and not host_cpu()["avx512vnni"]:
        raise CodegenError("cpu: this CPU has no AVX-512 VNNI to measure")
    if instruction == "fma" and not host_cpu()["avx512f"]:
        raise CodegenError("cpu: this CPU has no AVX-512 to measure")
    loop = _jit(instruction)[1]
    iterations = 300_000
    return _best_on_threads(loop, threads, iterations * ACCUMULATORS * PEAK_OPS[instruction] * 2, iterations)


def measure_instruction_peak(spec: isa.ISA, name: str, threads: int = 1) -> float:
    """This CPU's peak in GOPS (2 ops per multiply-add) on ``threads`` threads of ``spec``'s instruction
    ``name``, built from the spec alone: its intrinsic, argument order, operand types and shapes, the
    operand its result is added to (``intrinsic_accumulator``) and its multiply-adds (the written operand's
    lanes times its reduction's extent). The loop is ``measure_peak``'s: ``ACCUMULATORS`` independent chains
    on registers, each instruction reading the previous one's result (the accumulator, or for an intrinsic
    that takes none its first argument, the accumulator's bits), the best of ``PEAK_RUNS`` runs. CodegenError
    where this CPU lacks its features (LLVM aborts on an intrinsic the CPU lacks)."""
    instr = spec.instruction(name)
    if not instr.intrinsic or not instr.intrinsic_args:
        raise CodegenError(f"cpu: {spec.name}.{name} names no LLVM intrinsic with its arguments to measure")
    if not instruction_runs_on_cpu(instr):
        raise CodegenError(f"cpu: this CPU lacks the features of {name} "
                           f"({' or '.join('+'.join(f) for f in instr.features)}) to measure")
    sem = instr.typed_semantics()
    (out,) = sem.writes
    reduce = math.prod(int(evaluate_scalar(iv.extent, spec.params))
                       for iv in sem.indices if iv.kind == "reduce")
    macs = math.prod(operand_shape(spec, spec.insn(name), out)) * reduce
    key = _loop_key(spec, name)
    if (key, threads) not in _PEAKS:
        rounds = 300_000
        _PEAKS[key, threads] = _best_on_threads(_instruction_loop(*key), threads,
                                                rounds * ACCUMULATORS * macs * 2, rounds)
    return _PEAKS[key, threads]


#: the chain counts ``chains_to_peak`` tries, and the share of the best rate the fewest must reach
CHAINS, NEAR_PEAK = (4, 6, 8, 10, 12, 14, 16), 0.98


def chains_to_peak(spec: isa.ISA, name: str) -> int:
    """The fewest independent chains of ``spec``'s instruction ``name`` (each reading the previous one's
    result, as a register tile's accumulators do) that run at ``NEAR_PEAK`` of the best rate of
    ``CHAINS`` on one thread: its latency times its issue rate, which a kernel's register tile must cover.
    Measured once per process (each count's best of ``PEAK_RUNS`` // 4 runs); CodegenError as
    ``measure_instruction_peak``. On AMD EPYC znver5 (two vpdpbusd issued per cycle), vpdpbusd_512 ran
    at 551, 830, 1028, 1080, 1101, 1113 and 1103 GOPS with 4 to 16 chains: 12 reach 98%."""
    instr = spec.instruction(name)
    if not instr.intrinsic or not instr.intrinsic_args or not instruction_runs_on_cpu(instr):
        raise CodegenError(f"cpu: {spec.name}.{name}: no intrinsic this CPU runs to measure")
    key = ("chains", spec.name, name)
    if key not in _PEAKS:
        loop_key = _loop_key(spec, name)
        rates = []
        for chains in CHAINS:
            rounds = 4_000_000 // chains
            rates.append(_best_on_threads(_instruction_loop(*loop_key, chains), 1, rounds * chains,
                                          rounds, PEAK_RUNS // 4))
        _PEAKS[key] = next(c for c, r in zip(CHAINS, rates, strict=True) if r >= NEAR_PEAK * max(rates))
    return _PEAKS[key]


def _loop_key(spec: isa.ISA, name: str) -> tuple:
    """What ``_instruction_loop`` builds the throughput loop of instruction ``name`` from: its intrinsic,
    its arguments (name, vector type) in order, its result's type, the operand the chain runs through and
    whether the result is added to it."""
    instr, insn = spec.instruction(name), spec.insn(name)

    def vector(operand: str) -> ll.VectorType:
        dt = dtypes.dtype(instr.operand(operand).dtype)
        return ll.VectorType(memory_type(dt), math.prod(operand_shape(spec, insn, operand)))

    (out,) = instr.typed_semantics().writes
    acc = instr.intrinsic_accumulator or next(a for a in reversed(instr.intrinsic_args)
                                               if vector(a) == vector(out))
    args = tuple((a, vector(a)) for a in instr.intrinsic_args)
    return instr.intrinsic, args, vector(out), acc, instr.intrinsic_accumulator is not None


@cache
def _instruction_loop(intrinsic: str, args: tuple[tuple[str, ll.VectorType], ...], out: ll.VectorType,
                      acc: str, added: bool, chains: int | None = None) -> Callable:
    """``i32 loop(i64 n, i32 seed)`` of ``intrinsic`` (``args``: operand name and vector type, in order;
    ``out`` its result's), JIT-compiled: the result is ``acc``, or with ``added``, ``acc`` plus the
    result."""
    module = ll.Module(f"tandem_cpu_probe_{intrinsic}")
    i32 = ll.IntType(32)
    types = dict(args)
    fn = ll.Function(module, ll.FunctionType(out, list(types.values())), intrinsic)

    def operands(b: ll.IRBuilder, seed: ll.Value) -> tuple[dict[str, ll.Value], None]:
        made = {}
        for k, (name, t) in enumerate(types.items()):
            word = b.add(seed, ll.Constant(i32, k + 1))
            if isinstance(t.element, ll.IntType):   # the word's bits in the first lane
                words = ll.VectorType(i32, t.count * t.element.width // 32)
                made[name] = b.bitcast(b.insert_element(ll.Constant(words, None), word, ll.Constant(i32, 0)),
                                       t)
            else:   # the word's value (its bits would be a denormal number, slow on some CPUs)
                made[name] = b.insert_element(ll.Constant(t, None), b.sitofp(word, t.element),
                                              ll.Constant(i32, 0))
        return made, None

    def step(b: ll.IRBuilder, chain: ll.Value, made: dict, _: None) -> ll.Value:
        values = dict(made)
        if added:   # the intrinsic reads no accumulator: its first argument carries the chain's bits
            first = args[0][0]
            values[first] = b.bitcast(chain, types[first])
        else:
            values[acc] = chain
        call = b.call(fn, list(values[n] for n in types))
        if not added:
            return call
        return b.add(chain, call) if isinstance(out.element, ll.IntType) else b.fadd(chain, call)

    _throughput_loop(module, "tandem_probe", out, operands, step, chains)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), target_machine())
    engine.finalize_object()
    _ENGINES.append(engine)   # kept alive with the function
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32)
    return proto(engine.get_function_address("tandem_probe"))


_ENGINES: list = []
_PEAKS: dict = {}   # measured once per process: (the loop's key, threads) -> GOPS


def _best_on_threads(loop: Callable, threads: int, ops: int, rounds: int, runs: int | None = None) -> float:
    """GOPS of ``loop`` (``rounds`` rounds, ``ops`` operations in all) on ``threads`` threads at once, each
    its best of ``runs`` (default ``PEAK_RUNS``) runs."""
    from concurrent.futures import ThreadPoolExecutor

    def best_of(seed: int) -> float:
        best = 0.0
        for _ in range(runs or PEAK_RUNS):
            t0 = time.perf_counter()
            loop(rounds, seed)
            best = max(best, ops / (time.perf_counter() - t0))
        return best

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(best_of, range(threads))) / 1e9


PEAK_RUNS = 100
#: each probe's multiply-adds per instruction
PEAK_OPS = {"vnni": 64, "fma": 16}
