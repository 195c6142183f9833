"""fuse_elementwise (compiler/passes/fuse_elementwise.py): PolyDL's Algorithm 3. Each fused function is run
by the interpreter before and after the pass, and after loop_partition peels the last iteration off."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.interp import run
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.passes.fuse_elementwise import fuse_elementwise, fusions
from compiler.passes.loop_partition import loop_partition

F32 = dtypes.float32
M, N, K = 3, 4, 5
i, j, k, i2, j2 = (ir.Var(x) for x in ("i", "j", "k", "i2", "j2"))
A, B, C = ir.Buffer("A", (M, K), F32), ir.Buffer("B", (K, N), F32), ir.Buffer("C", (M, N), F32)
BIAS, D = ir.Buffer("bias", (N,), F32), ir.Buffer("D", (M, N), F32)
ZERO, SIX = ir.const(0.0, F32), ir.const(6.0, F32)


def loops(body: ir.Stmt, *nest: tuple[ir.Var, int]) -> ir.Stmt:
    for var, extent in reversed(nest):
        body = ir.For(var, ir.const(0), ir.const(extent), body)
    return body


def matmul() -> ir.Stmt:
    update = loops(ir.Store(C, (i, j), C[i, j] + A[i, k] * B[k, j]), (k, K))
    return loops(ir.seq(ir.Store(C, (i, j), ZERO), update), (i, M), (j, N))


def func(*stmts: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (A, B, BIAS, C, D), ir.seq(*stmts))


def outputs(f: ir.PrimFunc) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    args = {"A": rng.standard_normal((M, K)).astype(np.float32),
            "B": rng.standard_normal((K, N)).astype(np.float32),
            "bias": rng.standard_normal(N).astype(np.float32),
            "C": np.zeros((M, N), np.float32), "D": np.zeros((M, N), np.float32)}
    run(f, args)
    return args["C"], args["D"]


RELU = loops(ir.Store(C, (i2, j2), ir.max_(C[i2, j2], ZERO)), (i2, M), (j2, N))
RELU6 = loops(ir.Store(C, (i2, j2), ir.min_(ir.max_(C[i2, j2], ZERO), SIX)), (i2, M), (j2, N))
BIAS_ADD = loops(ir.Store(C, (j2, i2), C[j2, i2] + BIAS[i2]), (i2, N), (j2, M))   # its loops in another order


def test_a_relu_goes_into_the_last_iteration_of_the_reduction():
    f = func(matmul(), RELU)
    fused = fuse_elementwise(f)
    assert str(fused.body).strip() == """\
for i in range(3):
  for j in range(4):
    C[i, j] = f32(0.0)
    for k in range(5):
      C[i, j] = C[i, j] + A[i, k]*B[k, j]
      if k >= 4:
        C[i, j] = max(C[i, j], f32(0.0))"""
    assert [v.why for v in fusions(f)] == ["fused"]


@pytest.mark.parametrize("ew", [RELU, RELU6, BIAS_ADD], ids=["relu", "relu6", "bias"])
def test_fused_and_peeled_functions_compute_the_same(ew):
    f = func(matmul(), ew)
    fused = fuse_elementwise(f)
    peeled = loop_partition(fused)
    want = outputs(f)
    for g in (fused, peeled):
        got = outputs(g)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert "if k >=" not in str(peeled.body) and str(peeled.body).count("for k in range") == 2


@pytest.mark.parametrize(("ew", "why"), [
    (loops(ir.Store(D, (i2, j2), ir.max_(C[i2, j2], ZERO)), (i2, M), (j2, N)), "writes D"),
    (loops(ir.Store(C, (i2, j2), ir.max_(C[i2, j2], ZERO)), (i2, M - 1), (j2, N)), "the write sets differ"),
    (loops(ir.Store(C, (i2, ir.const(0)), C[i2, ir.const(0)] + ZERO), (i2, M), (j2, N)),
     "not a reduction followed by an element-wise nest"),
], ids=["other-buffer", "part-of-C", "not-element-wise"])
def test_pairs_algorithm_3_refuses_are_left_alone_with_the_reason(ew, why):
    f = func(matmul(), ew)
    assert fuse_elementwise(f) is f
    assert why in fusions(f)[0].why


def test_a_statement_between_that_touches_the_output_blocks_fusion():
    copy = loops(ir.Store(D, (i2, j2), C[i2, j2]), (i2, M), (j2, N))
    f = func(matmul(), copy, RELU)
    verdicts = fusions(f)
    assert verdicts[-1].why == "a statement between them touches C" and fuse_elementwise(f) is f
    untouched = loops(ir.Store(D, (i2, j2), A[i2, ir.const(0)]), (i2, M), (j2, N))
    assert [v.fused for v in fusions(func(matmul(), untouched, RELU))][-1]


def test_unit_cpu_conv_with_a_relu_fuses_into_the_copy_out_and_runs_on_this_cpu():
    """UNIT's CPU schedule sums into a register tile and copies each element out once: the ReLU goes right
    after that copy, unguarded. The fused function, tensorized and compiled with LLVM, equals numpy."""
    from compiler.backend.llvm import build, host_cpu
    from compiler.lower import lower
    from compiler.ops import cpu, reference
    from compiler.ops.nn import ConvShape
    from compiler.pipeline import compile_func
    from tandem.flows.targets import load_target

    target = load_target("cpu")
    layer = ConvShape(8, 8, 16, 32, 3, 1, 1)
    isa = "x86-vnni" if host_cpu()["avx512vnni"] else "x86-avx512"
    sched = cpu.conv2d(layer, isa, cpu.CpuTuning(2, 2, 4), spec=target.spec)
    func = lower(sched.schedule, sched.args)
    out = func.params[-1]
    idx = [ir.Var(f"o{d}") for d in range(len(out.shape))]
    relu = ir.Store(out, tuple(idx), ir.max_(out[tuple(idx)], ir.const(0, dtypes.int32)))
    for var, extent in reversed(list(zip(idx, out.shape, strict=True))):
        relu = ir.For(var, ir.const(0), ir.const(extent), relu)
    with_relu = ir.PrimFunc(func.name, func.params, ir.seq(func.body, relu), func.attrs)
    fused = fuse_elementwise(with_relu)
    assert fusions(with_relu)[-1].why == "fused" and str(fused.body).count("max(") == 1
    assert "if " not in str(fused.body).split("max(")[0].splitlines()[-1]   # unguarded: the copy-out
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (1, 16, 8, 8)).astype(np.uint8)
    weight = rng.integers(-128, 128, (32, 16, 3, 3)).astype(np.int8)
    packed = cpu.pack_conv(data, weight, layer, sched.packing)
    want = np.maximum(reference.conv2d(data, weight, 1, 1), 0).astype(np.int32)
    for f in (with_relu, fused):
        got = np.zeros(out.shape, np.int32)
        build(compile_func(f, target), threads=1)(*packed, got)
        assert np.array_equal(cpu.unpack_conv(got, layer), want)
