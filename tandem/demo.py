"""The ``tandem demo`` checks: compile a few small operators and compare them with numpy; run ISA
instructions from the shared specs through the generic executor.

Each check builds a tensor expression, schedules it (with splits that do not divide the extent, so
the lowered loops carry guards), compiles it through the reference pipeline (lowering, then each
pass with the verifier after it) and runs the reference interpreter on random inputs with a fixed
seed. Integer results must be bit-exact with a numpy reference that accumulates
in int32; float results must match within ``np.allclose``. A check that raises is reported as a
failed check carrying the error message, never as a traceback, so ``tandem demo`` always shows every
row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tandem.validate import compare

SEED = 0


@dataclass(frozen=True, slots=True)
class Check:
    """One demo result: a name, whether it passed, and a one-line detail (values or error)."""

    name: str
    passed: bool
    detail: str
    ir: str = ""


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


def _conv2d_nchw_reference(data: np.ndarray, kernel: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Direct int32 NCHW convolution.

    ``out[n, o, y, x] = sum over c, r, q of in[n, c, y*stride + r, x*stride + q] * w[o, c, r, q]``
    with ``in`` zero-padded by ``pad`` on both spatial sides.
    """
    n, _c, h, w = data.shape
    o, _, kh, kw = kernel.shape
    padded = np.pad(data.astype(np.int32), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int32)
    wgt = kernel.astype(np.int32)
    for r in range(kh):
        for q in range(kw):
            win = padded[:, :, r : r + stride * oh : stride, q : q + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", win, wgt[:, :, r, q], dtype=np.int32)
    return out


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
    return out, _conv2d_nchw_reference(data, kernel, stride=1, pad=1), str(func)


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
    from sim.vita.machine import simulate
    from tandem import vita_gemm

    a = rng.integers(-128, 128, (vita_gemm.M, vita_gemm.K), dtype=np.int8)
    w = rng.integers(-128, 128, (vita_gemm.N, vita_gemm.K), dtype=np.int8)
    program = vita_gemm.program()
    result = simulate(program, vita_gemm.dram_image(a, w), "vta-default")
    summary = (f"# {len(program)} instructions, {result.cycles} cycles, "
               f"GEMM utilization {result.gemm_utilization:.1%}\n")
    return vita_gemm.output(result.dram), vita_gemm.reference(a, w), summary + isa.disassemble(program)


CHECKS: list[tuple[str, Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray, str]]]] = [
    ("add 14x14 f32, split nparts=4, bind core", _check_add),
    ("relu 20 f32, split factor=8", _check_relu),
    ("dense 16x32x24 i8->i32, split 5 + reorder", _check_dense),
    ("conv2d_nchw 1x4x8x8 * 8x4x3x3 i8->i32, split 3", _check_conv2d),
    ("isa vita: GEMM micro-op i8 x i8 -> i32", _check_isa_vita_gemm),
    ("isa diannao: program round trip, vadd.f32 128", _check_isa_diannao_program),
    ("sim vita: double-buffered 256^3 GEMM, shift+clip", _check_vita_double_buffered_gemm),
]


def run_demo() -> list[Check]:
    """Run every demo check and return one ``Check`` per row; never raises for a failing check.

    Each check gets its own generator seeded with ``SEED``, so results do not depend on order.
    ``Check.ir`` holds the printed lowered IR of every check that got as far as lowering.
    """
    results: list[Check] = []
    for name, fn in CHECKS:
        start = time.perf_counter()
        try:
            got, want, ir = fn(np.random.default_rng(SEED))
            result = compare(got, want)
            passed, detail = result.passed, result.detail
        except Exception as exc:  # a demo row, not a traceback: report and go on
            results.append(Check(name, False, f"{type(exc).__name__}: {exc}"))
            continue
        elapsed = time.perf_counter() - start
        results.append(Check(name, passed, f"{detail}; {elapsed:.2f} s", ir))
    return results
