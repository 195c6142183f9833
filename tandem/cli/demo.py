"""The ``tandem demo`` checks: compile a few small operators and compare them with numpy; run ISA
instructions from the shared specs through the generic executor; run hand-written kernels on the VITA and
DianNao simulators.

Each check builds a tensor expression, schedules it (with splits that do not divide the extent, so
the lowered loops carry guards), compiles it through the reference pipeline (lowering, then each
pass with the verifier after it) and runs the reference interpreter on random inputs with a fixed
seed. Integer results must be bit-exact with a numpy reference that accumulates
in int32; float results must match within ``np.allclose``. A check that raises is reported as a
failed check carrying the error message, never as a traceback, so ``tandem demo`` always shows every
row. Simulator checks also test what the timing must show (a bandwidth-bound kernel within reach of its
bandwidth floor, more cores faster than one, vector code faster than scalar code) and put the cycles in the
row's detail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tandem.flows.check import Check, compare

if TYPE_CHECKING:  # the checks import what they run late, so that a broken layer fails only its rows
    from baselines.diannao_kernels import KernelRun
    from sim.diannao.machine import Card, DiannaoResult

SEED = 0


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the demo table: the check's name, how its result compared with numpy (the ``Check``'s
    detail opened by the row's note and closed by the seconds it took, or the error it raised), and the
    text ``--show-ir`` prints."""

    name: str
    check: Check
    ir: str = ""


class Outcome(NamedTuple):
    """What a check function returns: its result, numpy's, the text ``--show-ir`` prints, and a note that
    opens the row's detail (cycles, speedups). A check may return a plain 3-tuple (no note)."""

    got: np.ndarray
    want: np.ndarray
    ir: str
    note: str = ""


def _check_add(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """14x14 float32 add, axis 0 split into 4 parts bound to the core axis (seed 001's example)."""
    from compiler import te
    from compiler.interp import run
    from compiler.pipeline import build
    from compiler.schedule import create_schedule

    a_t = te.placeholder((14, 14), "float32", name="A")
    b_t = te.placeholder((14, 14), "float32", name="B")
    c_t = te.compute((14, 14), lambda i, j: a_t[i, j] + b_t[i, j], name="C")
    s = create_schedule(c_t)
    xo, _xi = s[c_t].split(c_t.op.axis[0], nparts=4)
    s[c_t].bind(xo, te.thread_axis("core", name="tid"))
    func = build(s, [a_t, b_t, c_t], name="add")

    a, b = rng.standard_normal((2, 14, 14)).astype("float32")
    c = np.zeros((14, 14), "float32")
    run(func, [a, b, c])
    return c, a + b, str(func)


def _check_relu(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """float32 relu over 20 elements, split by a factor of 8 (20 = 8 + 8 + 4, so a guard)."""
    from compiler import ops, te
    from compiler.interp import run
    from compiler.pipeline import build
    from compiler.schedule import create_schedule

    a_t = te.placeholder((20,), "float32", name="A")
    r_t = ops.relu(a_t)
    s = create_schedule(r_t)
    s[r_t].split(r_t.op.axis[0], factor=8)
    func = build(s, [a_t, r_t], name="relu")

    a = rng.standard_normal(20).astype("float32")
    r = np.zeros(20, "float32")
    run(func, [a, r])
    return r, np.maximum(a, np.float32(0)), str(func)


def _check_dense(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """int8 dense (M, K) x (N, K) -> int32 (M, N), M=16 K=32 N=24; rows split by 5, reordered."""
    from compiler import ops, te
    from compiler.interp import run
    from compiler.pipeline import build
    from compiler.schedule import create_schedule

    m, k, n = 16, 32, 24
    x_t = te.placeholder((m, k), "int8", name="X")
    w_t = te.placeholder((n, k), "int8", name="W")
    d_t = ops.dense(x_t, w_t, out_dtype="int32")
    s = create_schedule(d_t)
    i, j = d_t.op.axis
    (kk,) = d_t.op.reduce_axis
    io, ii = s[d_t].split(i, factor=5)
    s[d_t].reorder(io, j, ii, kk)
    func = build(s, [x_t, w_t, d_t], name="dense")

    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    d = np.zeros((m, n), "int32")
    run(func, [x, w, d])
    return d, x.astype(np.int32) @ w.astype(np.int32).T, str(func)


def _check_conv2d(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """int8 conv2d NCHW (1,4,8,8) x (8,4,3,3), stride 1, pad 1 -> int32; out channels split by 3."""
    from compiler import ops, te
    from compiler.interp import run
    from compiler.pipeline import build
    from compiler.schedule import create_schedule

    data_t = te.placeholder((1, 4, 8, 8), "int8", name="data")
    kernel_t = te.placeholder((8, 4, 3, 3), "int8", name="kernel")
    out_t = ops.conv2d_nchw(data_t, kernel_t, stride=1, padding=1, out_dtype="int32")
    s = create_schedule(out_t)
    s[out_t].split(out_t.op.axis[1], factor=3)
    func = build(s, [data_t, kernel_t, out_t], name="conv2d_nchw")

    data = rng.integers(-128, 128, (1, 4, 8, 8), dtype=np.int8)
    kernel = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    out = np.zeros((1, 8, 8, 8), "int32")
    run(func, [data, kernel, out])
    from compiler.ops import reference

    return out, reference.conv2d(data, kernel, stride=1, pad=1).astype(np.int32), str(func)


def _check_isa_vita_gemm(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """VITA's GEMM micro-op run by the generic ISA executor from vita.toml, against an int32 numpy matmul."""
    import isa

    vita = isa.load_isa("vita")
    inp = rng.integers(-128, 128, (1, 16), dtype=np.int8)
    wgt = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    acc = rng.integers(-(2**20), 2**20, (1, 16), dtype=np.int32)
    got = isa.execute(vita, "GEMM", {"acc": acc, "inp": inp, "wgt": wgt})["acc"]
    want = acc + inp.astype(np.int32) @ wgt.astype(np.int32).T
    return got, want, str(vita.instruction("GEMM").typed_semantics())


def _check_isa_diannao_program(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """A DianNao program through its text and binary forms, then its vadd.f32 run by the executor."""
    import isa

    dn = isa.load_isa("diannao")
    vadd = dn.insn("vadd", T="f32", dst=0x400, a=0x0, b=0x200, n=128)
    program = isa.Program(dn, [vadd, dn.insn("barrier", scope="ALL"), dn.insn("halt")])
    text = isa.disassemble(program)
    if isa.assemble(text) != program or isa.decode_program(isa.encode_program(program)) != program:
        raise AssertionError("the program did not survive its text and binary round trips")
    problems = isa.check_constraints(dn, vadd)
    if problems:
        raise AssertionError(f"a valid vadd broke rules: {'; '.join(map(str, problems))}")
    a, b = rng.standard_normal((2, 128)).astype("float32")
    got = isa.execute(dn, vadd, {"a": a, "b": b})["dst"]
    return got, a + b, text


def _check_vita_double_buffered_gemm(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """The hand-assembled double-buffered 256^3 GEMM on the VITA simulator (vta-default), against numpy."""
    import isa
    from baselines import vita_gemm
    from sim.vita.machine import simulate

    a = rng.integers(-128, 128, (vita_gemm.M, vita_gemm.K), dtype=np.int8)
    w = rng.integers(-128, 128, (vita_gemm.N, vita_gemm.K), dtype=np.int8)
    program = vita_gemm.program()
    result = simulate(program, vita_gemm.dram_image(a, w), "vta-default")
    summary = (f"# {len(program)} instructions, {result.cycles} cycles, "
               f"GEMM utilization {result.gemm_utilization:.1%}\n")
    return vita_gemm.output(result.dram), vita_gemm.reference(a, w), summary + isa.disassemble(program)


# ------------------------------------------------------------------------------------ DianNao simulator
DIANNAO_ADD_SHAPE = (256, 56, 56)  # seed 001's largest tensor
DIANNAO_GMEM_BOUND_SLACK = 1.10  # a GMEM-bound launch takes at most 10% more than its bandwidth floor


def _seed(rng: np.random.Generator) -> int:
    """A kernel seed drawn from the check's generator (the kernels make their own inputs)."""
    return int(rng.integers(1 << 31))


def _gmem_floor(result: DiannaoResult, card: Card) -> int:
    """Cycles no launch can beat: every byte crossing GMEM goes through its one shared port."""
    crossing = sum(n for way, n in result.bytes_moved.items() if "GMEM" in way)
    return -(-crossing // card.config.gmem_bytes_per_cycle)


def _program_text(run: KernelRun, title: str) -> str:
    """What ``--show-ir`` prints for a kernel run: a summary line, then the program."""
    import isa

    r = run.result
    cores = f"{len(r.cores)} core{'s' if len(r.cores) > 1 else ''}"
    return (f"# {title} on {cores}: {len(run.program)} instructions, "
            f"{r.tensor_instructions + r.scalar_instructions} executed, {r.cycles} cycles\n"
            + isa.disassemble(run.program))


def _check_diannao_add_16_cores(rng: np.random.Generator) -> Outcome:
    """C = A + B, (256,56,56) f32, over all 16 cores: right, and bound by GMEM bandwidth (all cores share its
    port, so the launch takes about as long as its bytes need at gmem_bytes_per_cycle)."""
    from baselines.diannao_kernels import default_card, run_elementwise

    card = default_card()
    run = run_elementwise("vadd", DIANNAO_ADD_SHAPE, "f32", cores=16, seed=_seed(rng), card=card)
    r, floor = run.result, _gmem_floor(run.result, card)
    if not floor <= r.cycles <= DIANNAO_GMEM_BOUND_SLACK * floor:
        raise AssertionError(f"expected the 16-core add to be GMEM-bound, {floor} to "
                             f"{int(DIANNAO_GMEM_BOUND_SLACK * floor)} cycles, but it took {r.cycles}")
    note = (f"{r.cycles} cycles ({r.microseconds:.1f} us), GMEM floor {floor} at "
            f"{card.config.gmem_bytes_per_cycle} B/cycle")
    return Outcome(run.output, run.reference, _program_text(run, "vadd"), note)


def _check_diannao_add_1_core(rng: np.random.Generator) -> Outcome:
    """The same add on 1 core: right, never faster than the GMEM floor, and slower than on 16 cores."""
    from baselines.diannao_kernels import default_card, run_elementwise

    seed, card = _seed(rng), default_card()
    one = run_elementwise("vadd", DIANNAO_ADD_SHAPE, "f32", cores=1, seed=seed, card=card)
    sixteen = run_elementwise("vadd", DIANNAO_ADD_SHAPE, "f32", cores=16, seed=seed)
    c1, c16 = one.result.cycles, sixteen.result.cycles
    if c1 < _gmem_floor(one.result, card):
        raise AssertionError(f"1 core beat the GMEM floor: {c1} < {_gmem_floor(one.result, card)} cycles")
    if c1 <= c16:
        raise AssertionError(f"expected 16 cores to be faster than 1, but 1 core took {c1} cycles and 16 "
                             f"took {c16}")
    note = f"{c1} cycles ({one.result.microseconds:.1f} us); 16 cores {c16}: speedup {c1 / c16:.2f}x"
    got = np.stack([one.output, sixteen.output])
    return Outcome(got, np.stack([one.reference, sixteen.reference]), _program_text(one, "vadd"), note)


def _check_diannao_scalar_vs_vector(rng: np.random.Generator) -> Outcome:
    """A (16,64) f32 add on 1 core as a scalar loop (two loads, fadd, store per element) and as one vadd:
    both right, the loop runs one fadd per element and takes more cycles than the vector code."""
    from baselines.diannao_kernels import run_elementwise

    seed, shape = _seed(rng), (16, 64)
    scalar = run_elementwise("vadd", shape, "f32", cores=1, scalar=True, seed=seed)
    vector = run_elementwise("vadd", shape, "f32", cores=1, seed=seed)
    s, v = scalar.result, vector.result
    elements = int(np.prod(shape))
    if s.instructions.get("fadd", 0) != elements or "vadd" in s.instructions:
        raise AssertionError(f"expected the scalar loop to run {elements} fadd and no vadd, but it ran "
                             f"{s.instructions}")
    if s.cycles <= v.cycles:
        raise AssertionError(f"expected the scalar loop to be slower than vadd, but it took {s.cycles} "
                             f"cycles and vadd {v.cycles}")
    note = (f"scalar {s.cycles} cycles ({s.scalar_instructions} scalar insns), vector {v.cycles}: "
            f"{s.cycles / v.cycles:.1f}x")
    got, want = np.stack([scalar.output, vector.output]), np.stack([scalar.reference, vector.reference])
    text = _program_text(scalar, "scalar loop") + "\n" + _program_text(vector, "vadd")
    return Outcome(got, want, text, note)


def _check_diannao_relu(rng: np.random.Generator) -> Outcome:
    """relu in place over a (16,64,64) f32 tensor on 16 cores, against numpy."""
    from baselines.diannao_kernels import run_elementwise

    run = run_elementwise("relu", (16, 64, 64), "f32", cores=16, seed=_seed(rng))
    return Outcome(run.output, run.reference, _program_text(run, "relu"), f"{run.result.cycles} cycles")


def _check_diannao_matmul(rng: np.random.Generator) -> Outcome:
    """A 64x64x64 f16 matmul, the rows of A split over 16 cores, against numpy (f32 accumulation)."""
    from baselines.diannao_kernels import run_matmul

    run = run_matmul(64, 64, 64, "f16", cores=16, seed=_seed(rng))
    note = f"{run.result.cycles} cycles, TFU utilization {run.result.utilization('tfu'):.1%}"
    return Outcome(run.output, run.reference, _program_text(run, "matmul"), note)


def _check_diannao_conv(rng: np.random.Generator) -> Outcome:
    """A 3x3 valid f16 convolution, (18,18,16) -> (16,16,16), the output rows split over 16 cores."""
    from baselines.diannao_kernels import run_conv

    run = run_conv(18, 18, 16, 16, k=3, dtype="f16", cores=16, seed=_seed(rng))
    note = f"{run.result.cycles} cycles, TFU utilization {run.result.utilization('tfu'):.1%}"
    return Outcome(run.output, run.reference, _program_text(run, "conv"), note)


def _check_compiled_diannao_add(rng: np.random.Generator) -> Outcome:
    """Seed 001's flow: add (255,55,55) f32 compiled for the DianNao card (loop partitioning, preprocessing,
    tensorization), simulated on 16 cores: right, every marked statement a tensor instruction, and at least as
    fast as the shape-agnostic library kernel (baselines/diannao_library.py) on the same inputs."""
    from baselines import diannao_library
    from tandem.flows.diannao import run_diannao

    shape = (255, 55, 55)
    n = int(np.prod(shape))
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    report = run_diannao("add", shape, "float32", cores=16, inputs=inputs)
    if report.scalar_fallback:
        raise AssertionError(f"expected no scalar fallback, but {report.scalar_fallback} scalar instructions "
                             f"ran in marked statements: {report.unmatched}")
    lib = diannao_library.elementwise("add", shape, "f32", cores=16,
                                      inputs=tuple(x.reshape(shape) for x in inputs))
    if report.cycles > lib.result.cycles:
        raise AssertionError(f"compiled add took {report.cycles} cycles, the library {lib.result.cycles}")
    note = (f"{report.cycles} cycles, {report.roofline_pct:.1f}% of roofline, library {lib.result.cycles} "
            f"({lib.result.cycles / report.cycles:.3f}x), scalar fallback 0")
    return Outcome(report.output, report.reference, str(report.program), note)


def _check_compiled_vita_conv(rng: np.random.Generator) -> Outcome:
    """TVM's flow for VITA: ResNet-18's C9 (14x14, 256 -> 256, 3x3) int8 compiled with two virtual threads
    (DMA, GEMM tensorization, dependency tokens, interleaving), its tokens checked against Theorem 3.1,
    simulated on the tvm-paper machine: right, and faster than the same layer without virtual threads."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.vita import run_vita

    layer = ConvShape(14, 14, 256, 256)
    seed = _seed(rng)   # one seed: both runs see the same inputs
    serial = run_vita(layer, 0, "tvm-paper", seed=seed)
    threaded = run_vita(layer, 2, "tvm-paper", seed=seed)
    if threaded.cycles >= serial.cycles:
        raise AssertionError(f"virtual threads took {threaded.cycles} cycles, none {serial.cycles}")
    note = (f"{threaded.cycles} cycles with 2 virtual threads, {serial.cycles} without "
            f"({100 * (1 - threaded.cycles / serial.cycles):.0f}% less), GEMM utilization "
            f"{threaded.utilization['gemm']:.0%}")
    return Outcome(threaded.output, threaded.reference, "", note)


def _check_compiled_cpu_conv(rng: np.random.Generator) -> Outcome:
    """UNIT's flow on this CPU: ResNet-18's C9 int8 on the spec's dot-product instruction this CPU runs
    (vpdpbusd with AVX-512 VNNI, vpmaddwd on an AVX2 CPU: the Inspector's mapping, the rewriter's schedule,
    LLVM), run for real on one thread: bit-exact, and its speed against the instruction's measured peak and
    against the same schedule without it (x86-avx512's 32-bit multiply-adds). Where the CPU runs none, the
    row runs that schedule alone."""
    from compiler.ops.nn import ConvShape
    from tandem.flows.cpu import default_isa, run_cpu
    from tandem.flows.cpu_layers import CpuOptions
    from tandem.flows.targets import load_target

    layer = ConvShape(14, 14, 256, 256)
    seed = _seed(rng)
    plain = run_cpu(layer, "x86-avx512", threads=1, seed=seed, min_time=0.05)
    if default_isa(CpuOptions(), load_target("cpu")) != "x86-vnni":
        note = f"{plain.measured['gops']:.1f} GOPS (no dot-product instruction here)"
        return Outcome(plain.output, plain.reference, str(plain.program), note)
    tensor = run_cpu(layer, "x86-vnni", threads=1, seed=seed, min_time=0.05)
    gops, plain_gops = tensor.measured["gops"], plain.measured["gops"]
    peak = next(iter(tensor.utilization.items()), None)
    of_peak = f", {peak[1]:.0%} of this CPU's {peak[0]} peak" if peak else ""
    note = (f"{gops:.0f} GOPS on 1 thread on {tensor.params['instruction']}{of_peak}, "
            f"{gops / plain_gops:.1f}x the same schedule without it (x86-avx512)")
    return Outcome(tensor.output, tensor.reference, "", note)


CheckFn = Callable[[np.random.Generator], "Outcome | tuple[np.ndarray, np.ndarray, str]"]

CHECKS: list[tuple[str, CheckFn]] = [
    ("add 14x14 f32, split nparts=4, bind core", _check_add),
    ("relu 20 f32, split factor=8", _check_relu),
    ("dense 16x32x24 i8->i32, split 5 + reorder", _check_dense),
    ("conv2d_nchw 1x4x8x8 * 8x4x3x3 i8->i32, split 3", _check_conv2d),
    ("isa vita: GEMM micro-op i8 x i8 -> i32", _check_isa_vita_gemm),
    ("isa diannao: program round trip, vadd.f32 128", _check_isa_diannao_program),
    ("sim vita: double-buffered 256^3 GEMM, shift+clip", _check_vita_double_buffered_gemm),
    ("sim diannao: add (256,56,56) f32, 16 cores", _check_diannao_add_16_cores),
    ("sim diannao: add (256,56,56) f32, 1 core", _check_diannao_add_1_core),
    ("sim diannao: add (16,64) f32, scalar loop vs vadd", _check_diannao_scalar_vs_vector),
    ("sim diannao: relu (16,64,64) f32, 16 cores", _check_diannao_relu),
    ("sim diannao: matmul 64x64x64 f16, 16 cores", _check_diannao_matmul),
    ("sim diannao: conv 3x3 (18,18,16)->16 f16, 16 cores", _check_diannao_conv),
    ("compile diannao: add (255,55,55) f32, seed 001 passes", _check_compiled_diannao_add),
    ("compile vita: conv C9 i8, 2 virtual threads", _check_compiled_vita_conv),
    ("compile cpu: conv C9 u8 x s8, dot product (UNIT)", _check_compiled_cpu_conv),
]


def run_demo() -> list[Row]:
    """Run every demo check and return one ``Row`` per check; never raises for a failing check.

    Each check gets its own generator seeded with ``SEED``, so results do not depend on order.
    ``Row.ir`` holds the printed lowered IR of every check that got as far as lowering.
    """
    rows: list[Row] = []
    for name, fn in CHECKS:
        start = time.perf_counter()
        try:
            got, want, ir, note = Outcome(*fn(np.random.default_rng(SEED)))
            check = compare(got, want)
        except Exception as exc:  # a demo row, not a traceback: report and go on
            rows.append(Row(name, Check(False, float("nan"), f"{type(exc).__name__}: {exc}")))
            continue
        elapsed = time.perf_counter() - start
        detail = f"{note + '; ' if note else ''}{check.detail}; {elapsed:.2f} s"
        rows.append(Row(name, replace(check, detail=detail), ir))
    return rows
