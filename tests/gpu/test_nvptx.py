"""The GPU flow on any machine: UNIT's Tensor Core schedule (compiler/ops/cuda.py), the cuda pipeline's
tensorize pass that turns its marked nests into the spec's instruction, and the NVPTX backend's PTX,
assembled by ptxas where it is installed. Every kernel's loop IR runs on the reference interpreter before and
after tensorization and is compared with numpy's exact result of the same fp16 inputs (within the fp32
accumulation bound)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import isa
from compiler import interp
from compiler.backend import nvptx
from compiler.errors import CodegenError, ScheduleError
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.cuda import FRAGMENT, barrier
from compiler.ir.functor import IRVisitor
from compiler.ops import cuda, cuda_kernel, reference
from compiler.ops.nn import ConvShape
from compiler.pipeline import compile_func, passes_for
from compiler.target import Target
from tandem.flows.check import within_bound
from tandem.flows.cuda import left_scalar
from tandem.flows.targets import load_target

SPEC = isa.load_isa("cuda")
CUDA_TOML = Path(isa.__file__).parent / "specs" / "cuda.toml"
HAVE_PTXAS = nvptx.ptxas() is not None


def _insns(func: ir.PrimFunc) -> list[ir.TensorInsn]:
    found = []

    class _Find(IRVisitor):
        def visit_TensorInsn(self, s: ir.TensorInsn) -> None:
            found.append(s)

    _Find().visit(func.body)
    return found


def _tensorized(s: cuda.GpuSchedule, spec: isa.ISA = SPEC) -> ir.PrimFunc:
    """The schedule's loop IR after the cuda pipeline (its marked nests become the spec's instruction)."""
    return compile_func(s.func, Target("cuda", spec))


def _run_gemm(func: ir.PrimFunc, s: cuda.GpuSchedule, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    pa, pb = cuda.pack_gemm(a, b, s)
    c = np.zeros((s.m, s.n), np.float32)
    interp.run(func, [pa, pb, c])
    return cuda.unpack_gemm(c, a.shape[0], b.shape[1])


def _f16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape, np.float32).astype(np.float16)


# ------------------------------------------------------------------------------------------ selection
def test_the_inspector_selects_the_f32_accumulating_wmma_from_the_spec():
    insn = cuda.tensor_core_instruction(SPEC)
    assert (insn.name, insn.tm, insn.tn, insn.tk) == ("wmma_m16n16k16_f16_f32", 16, 16, 16)


def test_a_spec_of_another_shape_is_selected_and_emitted_with_no_python_change(tmp_path):
    """The instruction, its tile and its intrinsic come from the spec alone: a spec whose only instruction
    is m32n8k16 gives 32 x 8 tiles and PTX with wmma m32n8k16, through the same code."""
    text = CUDA_TOML.read_text()
    text = text.split("[instructions.wmma_m16n16k16_f16_f16]")[0]
    text = text.replace("wmma_m16n16k16_f16_f32", "wmma_m32n8k16_f16_f32").replace("m16n16k16", "m32n8k16")
    text = text.replace('name = "a", kind = "register", dtype = "f16", shape = [16, 16]',
                        'name = "a", kind = "register", dtype = "f16", shape = [32, 16]')
    text = text.replace('name = "b", kind = "register", dtype = "f16", shape = [16, 16]',
                        'name = "b", kind = "register", dtype = "f16", shape = [16, 8]')
    text = text.replace('name = "c", kind = "register", dtype = "f32", shape = [16, 16]',
                        'name = "c", kind = "register", dtype = "f32", shape = [32, 8]')
    path = tmp_path / "cuda-m32n8k16.toml"
    path.write_text(text)
    spec = isa.load_spec_file(path)
    insn = cuda.tensor_core_instruction(spec)
    assert (insn.name, insn.tm, insn.tn, insn.tk) == ("wmma_m32n8k16_f16_f32", 32, 8, 16)
    s = cuda.gemm(64, 32, 32, cuda.GpuTuning(1, 2, 2, 2, 32), spec=spec)
    rng = np.random.default_rng(1)
    a, b = _f16(rng, (64, 32)), _f16(rng, (32, 32))
    want, size = reference.dense(a, b.T), reference.dense(abs(a), abs(b).T)
    func = _tensorized(s, spec)
    check = within_bound(_run_gemm(func, s, a, b), want, size, 32)
    assert check.validated, check.detail
    ptx = nvptx.build(func).ptx
    assert "wmma.mma.sync.aligned.row.row.m32n8k16.f32.f32" in ptx
    assert "wmma.load.a.sync.aligned.row.m32n8k16.shared.f16" in ptx


def test_a_spec_without_an_f32_accumulating_instruction_is_refused_with_each_reason(tmp_path):
    text = CUDA_TOML.read_text().split("[instructions.wmma_m16n16k16_f16_f32]")[0] + \
        "[instructions.wmma_m16n16k16_f16_f16]" + CUDA_TOML.read_text().split(
            "[instructions.wmma_m16n16k16_f16_f16]")[1].split("# Hopper's warpgroup MMA")[0]
    path = tmp_path / "cuda-f16-only.toml"
    path.write_text(text)
    why = r"no instruction that computes .*wmma_m16n16k16_f16_f16 is not applicable \(compute\)"
    with pytest.raises(ScheduleError, match=why):
        cuda.tensor_core_instruction(isa.load_spec_file(path))


# ------------------------------------------------------------------------------------------ schedules
def test_the_schedule_writes_loop_ir_and_the_cuda_pipeline_tensorizes_it():
    """cuda is compiled through compiler/pipeline.py like every target: its schedule builds the kernel from
    compiler/ir alone (no emitter, no pass), and the pipeline's pass selects the instruction."""
    assert [p.name for p in passes_for("cuda")] == ["tensorize_registers"]
    for module in (cuda, cuda_kernel):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert not {m for m in imported if m.startswith(("compiler.backend", "compiler.pipeline",
                                                         "compiler.passes.tensorize"))}, module.__name__


GEMM_CASES = [
    ((32, 64, 64), cuda.GpuTuning(2, 2, 1, 1, 32, 1)),
    ((20, 24, 40), cuda.GpuTuning(1, 1, 2, 2, 32, 1)),        # padded in every dimension
    ((32, 32, 128), cuda.GpuTuning(2, 1, 1, 2, 64, 2)),       # split-K over 2 warp groups
    ((32, 32, 64), cuda.GpuTuning(1, 1, 2, 2, 64, 4)),        # split-K over 4
    ((32, 32, 96), cuda.GpuTuning(2, 2, 1, 1, 32, 1, 2)),     # the next tiles prefetched, two shared buffers
    ((20, 24, 72), cuda.GpuTuning(1, 1, 2, 2, 32, 2, 2)),     # ... with split-K and padding
    ((32, 32, 160), cuda.GpuTuning(2, 1, 1, 2, 32, 1, 3)),    # asynchronous copies, a ring of 3 buffers
    ((20, 40, 200), cuda.GpuTuning(1, 1, 2, 2, 32, 2, 4)),    # ... 4 buffers, split-K and padding
    ((32, 32, 32), cuda.GpuTuning(2, 2, 1, 1, 32, 1, 4)),     # ... fewer steps than buffers in flight
]


@pytest.mark.parametrize(("shape", "tuning"), GEMM_CASES, ids=[str(t) for _, t in GEMM_CASES])
def test_gemm_before_and_after_tensorize_computes_numpys_result(shape, tuning):
    m, n, k = shape
    s = cuda.gemm(m, n, k, tuning, spec=SPEC)
    rng = np.random.default_rng(k)
    a, b = _f16(rng, (m, k)), _f16(rng, (k, n))
    want, size = reference.dense(a, b.T), reference.dense(np.abs(a), np.abs(b).T)
    tensorized = _tensorized(s)
    for func in (s.func, tensorized):
        check = within_bound(_run_gemm(func, s, a, b), want, size, k)
        assert check.validated, f"{func.name}: {check.detail}"
    assert len(_insns(tensorized)) == 1 and not _insns(s.func)   # the one mark became the instruction
    assert not left_scalar(tensorized, load_target("cuda"))


CONV_CASES = [
    (ConvShape(5, 5, 9, 20, 3, 2, 1, n=2), cuda.GpuTuning(1, 2, 1, 1, 32, 2)),
    (ConvShape(6, 6, 16, 24, 1, 1, 0), cuda.GpuTuning(2, 1, 1, 1, 32, 1)),
    (ConvShape(5, 5, 3, 16, 3, 1, 1), cuda.GpuTuning(1, 1, 1, 2, 32, 1)),    # a 3-channel stem: K padded
    (ConvShape(5, 5, 7, 20, 3, 2, 1), cuda.GpuTuning(1, 2, 1, 1, 32, 2, 2)),   # prefetched
    (ConvShape(6, 6, 9, 20, 3, 1, 1), cuda.GpuTuning(2, 1, 1, 1, 32, 1, 3)),   # the kernel copied async
]


@pytest.mark.parametrize(("layer", "tuning"), CONV_CASES, ids=[str(t) for _, t in CONV_CASES])
def test_conv2d_with_fused_pixels_computes_numpys_result(layer, tuning):
    s = cuda.conv2d(layer, tuning, spec=SPEC)
    rng = np.random.default_rng(layer.ic)
    data, kernel = _f16(rng, (layer.n, layer.ic, layer.h, layer.w)), _f16(rng, (layer.oc, layer.ic, layer.k,
                                                                                layer.k))
    want = reference.conv2d(data, kernel, layer.s, layer.p)
    size = reference.conv2d(np.abs(data), np.abs(kernel), layer.s, layer.p)
    for func in (s.func, _tensorized(s)):
        pd, pw = cuda.pack_conv(data, kernel, layer, s)
        out = np.zeros((layer.n, s.m, s.n), np.float32)
        interp.run(func, [pd, pw, out])
        check = within_bound(cuda.unpack_conv(out, layer), want, size, layer.ic * layer.k * layer.k)
        assert check.validated, f"{func.name}: {check.detail}"


def test_a_tuning_that_does_not_fit_is_refused_naming_the_rule():
    with pytest.raises(ScheduleError, match="bk 48 must be a multiple of 16 x split_k 2"):
        cuda.gemm(64, 64, 64, cuda.GpuTuning(bk=48, split_k=2), spec=SPEC)
    with pytest.raises(ScheduleError, match="bytes of shared memory exceed 8192"):
        cuda.gemm(64, 64, 64, cuda.GpuTuning(2, 2, 2, 2, 64), spec=SPEC, shared_limit=8192)
    with pytest.raises(ScheduleError, match="exceed 1024 threads"):
        cuda.gemm(64, 64, 64, cuda.GpuTuning(4, 4, 1, 1, 64, 4), spec=SPEC)


def test_the_tuning_space_spreads_its_first_candidates_and_they_compile():
    """The first K tunings span K block shapes and reduction splits (the model is rough, the device measures
    them), and the first ones compile to PTX within the shared-memory limit."""
    insn = cuda.tensor_core_instruction(SPEC)
    space = cuda.tuning_space(196, 256, 2304, 1, insn, 232448, 132, 233472)
    assert len(space) >= 20 and len(set(space)) == len(space)
    first = space[:8]
    assert len({(t.warps_m, t.warps_n, t.p, t.q, t.split_k, t.stages) for t in first}) == 8
    assert {t.split_k for t in first} == {1, 2, 4}
    for t in space[:3]:
        kernel = nvptx.build(_tensorized(cuda.gemm(196, 256, 2304, t, spec=SPEC, shared_limit=232448)),
                             shared_limit=232448)
        assert kernel.shared_bytes <= 232448 and kernel.instructions()["wmma.mma"] > 0


# ------------------------------------------------------------------------------------------ PTX
def _ptx_body(ptx: str) -> str:
    return "\n".join(line for line in ptx.splitlines() if not line.strip().startswith("//"))


def test_the_gemm_ptx_keeps_the_accumulators_in_registers_and_loads_16_bytes_at_a_time():
    s = cuda.gemm(256, 256, 256, cuda.GpuTuning(2, 2, 2, 2, 32), spec=SPEC)
    kernel = nvptx.build(_tensorized(s), arch="sm_90")
    ptx = _ptx_body(kernel.ptx)
    ops = kernel.instructions()
    assert ".target sm_90" in ptx and ".entry gemm(" in ptx
    assert ops["wmma.mma"] == 2 * 2 * (32 // 16)                    # p x q tiles x k steps, per k tile
    assert ops["wmma.load"] == (2 + 2) * (32 // 16)                # p + q operand loads per k step
    assert ops["wmma.store"] == 2 * 2                              # the accumulators, once
    assert "ld.global.nc.v4" in ptx and "st.shared.v4" in ptx     # 16-byte copies into shared memory
    assert "local" not in ptx                                     # no fragment spilled to local memory
    assert not re.search(r"\b(fma|mul|add)\.rn?\.?f32", ptx)      # no scalar fallback: no fp32 arithmetic
    assert "bar.sync" in ptx
    assert kernel.launch.grid == (4, 4, 1) and kernel.launch.block == (32, 4, 1)


def test_a_prefetched_schedule_keeps_the_next_tiles_in_registers_with_one_barrier_per_step():
    s = cuda.gemm(256, 256, 256, cuda.GpuTuning(2, 2, 4, 4, 32, 1, 2), spec=SPEC)
    kernel = nvptx.build(_tensorized(s))
    ptx = _ptx_body(kernel.ptx)
    assert "local" not in ptx                                        # the prefetched tiles stay in registers
    assert kernel.shared_bytes == 2 * (128 * 40 + 32 * 136) * 2      # two buffers of each tile
    loop = ptx[ptx.index("bar.sync"):]
    assert loop.count("bar.sync") == 2                               # the prologue's, and one per step


def test_an_asynchronous_schedule_keeps_its_copies_in_flight_in_dynamic_shared_memory():
    """4 buffers of 128 x 32 and 32 x 128 tiles (75776 bytes: dynamic shared memory): cp.async copies of 16
    bytes, the prologue's 3 groups and one a step, a wait for all but the 2 youngest, one barrier a step."""
    s = cuda.gemm(256, 256, 256, cuda.GpuTuning(2, 2, 4, 4, 32, 1, 4), spec=SPEC, shared_limit=232448)
    kernel = nvptx.build(_tensorized(s), shared_limit=232448)
    ptx = _ptx_body(kernel.ptx)
    assert kernel.shared_bytes == kernel.dynamic_shared == 4 * (128 * 40 + 32 * 136) * 2
    assert ".extern .shared .align 1024 .b8 dynamic_shared[]" in ptx
    assert "cp.async.cg.shared.global" in ptx and "st.shared" not in ptx   # no tile goes through registers
    assert ptx.count("cp.async.commit_group") == 3 + 1                      # the prologue's, and a step's
    assert len(re.findall(r"cp\.async\.wait_group\s+2;", ptx)) == 1
    loop = ptx[ptx.index("cp.async.wait_group"):]
    assert loop.count("bar.sync") == 1 and "local" not in ptx
    small = nvptx.build(_tensorized(cuda.gemm(64, 64, 64, cuda.GpuTuning(1, 1, 2, 2, 32, 1, 3), spec=SPEC)))
    assert small.dynamic_shared == 0 and ".extern" not in small.ptx         # 18432 bytes: static


def test_the_split_k_reduction_sums_the_partials_in_shared_memory():
    s = cuda.gemm(64, 64, 256, cuda.GpuTuning(1, 1, 2, 2, 64, 4), spec=SPEC)
    ptx = _ptx_body(nvptx.build(_tensorized(s)).ptx)
    assert "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32" in ptx     # the partials, into shared
    assert len(re.findall(r"add\.(rn\.)?f32", ptx)) >= 3                   # 4 groups: 3 additions each


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas is not installed (the CUDA toolkit, or pip install -e "
                                           "'.[ptxas]')")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gemm_and_conv_ptx_assemble_with_ptxas(arch):
    conv = ConvShape(14, 14, 64, 64, 3, 1, 1)
    kernels = [cuda.gemm(128, 128, 128, cuda.GpuTuning(2, 2, 2, 2, 32), spec=SPEC),
               cuda.gemm(64, 64, 256, cuda.GpuTuning(1, 2, 2, 1, 64, 2), spec=SPEC),
               cuda.conv2d(conv, cuda.GpuTuning(2, 2, 1, 1, 32, 2), spec=SPEC),
               cuda.conv2d(ConvShape(56, 56, 64, 128, 1, 2, 0, n=2), cuda.GpuTuning(), spec=SPEC),
               cuda.gemm(256, 256, 256, cuda.GpuTuning(2, 2, 4, 4, 32, 1, 2), spec=SPEC),
               cuda.conv2d(conv, cuda.GpuTuning(2, 2, 1, 1, 32, 2, 2), spec=SPEC),
               cuda.gemm(256, 256, 256, cuda.GpuTuning(2, 4, 4, 4, 32, 1, 3), spec=SPEC, shared_limit=232448),
               cuda.conv2d(conv, cuda.GpuTuning(2, 2, 2, 2, 32, 1, 4), spec=SPEC)]
    for s in kernels:
        kernel = nvptx.build(_tensorized(s), arch=arch, ptx=70 if arch == "sm_80" else 80,
                             shared_limit=166912)
        assert f".target {arch}" in kernel.ptx
        assert nvptx.assemble(kernel) is None


# ------------------------------------------------------------------------------------------ emitter errors
def _kernel(body: ir.Stmt, *params: ir.Buffer) -> ir.PrimFunc:
    return ir.PrimFunc("k", params, body)


def test_a_fragment_filled_in_part_is_refused():
    acc = ir.Buffer("acc", (1, 16, 16), dtypes.float32, FRAGMENT)
    out = ir.Buffer("out", (16, 16), dtypes.float32)
    w, i, j = ir.Var("w"), ir.Var("i"), ir.Var("j")
    a_sh = ir.Buffer("a", (16, 16), dtypes.float16, "shared")
    insn = ir.TensorInsn(SPEC, "wmma_m16n16k16_f16_f32", (), (
        ir.Region("a", a_sh, ir.const(0)), ir.Region("b", a_sh, ir.const(0)),
        ir.Region("c", acc, w * 256)))
    zero = ir.Store(acc, (w, i, j), ir.const(0.0, dtypes.float32))
    fill = ir.For(i, ir.const(0), ir.const(8), ir.For(j, ir.const(0), ir.const(16), zero))
    body = ir.For(w, ir.const(0), ir.const(1), ir.Allocate(a_sh, ir.Allocate(acc, ir.seq(fill, insn))),
                  ir.ForKind.THREAD_BINDING, "threadIdx.y")
    with pytest.raises(CodegenError, match="cover part of tile 0 of fragment acc; fragments are filled and "
                                           "stored in whole tiles"):
        nvptx.build(_kernel(body, out))


def test_a_thread_buffer_indexed_by_anything_but_the_thread_is_refused():
    x = ir.Buffer("x", (2, 32, 4), dtypes.float32, "thread")
    out = ir.Buffer("out", (4,), dtypes.float32)
    w, t, i = ir.Var("w"), ir.Var("t"), ir.Var("i")
    one = ir.const(1.0, dtypes.float32)
    store = ir.For(i, ir.const(0), ir.const(4), ir.Store(x, (ir.const(0), t, i), one))
    body = ir.Allocate(x, ir.For(w, ir.const(0), ir.const(2), ir.For(
        t, ir.const(0), ir.const(32), store, ir.ForKind.THREAD_BINDING, "threadIdx.x"),
        ir.ForKind.THREAD_BINDING, "threadIdx.y"))
    with pytest.raises(CodegenError, match="indexed first by the variables bound to threadIdx.y and "
                                           "threadIdx.x"):
        nvptx.build(_kernel(body, out))


def test_a_loop_bound_to_an_axis_a_gpu_lacks_is_refused():
    x = ir.Buffer("x", (4,), dtypes.float32)
    v = ir.Var("v")
    body = ir.For(v, ir.const(0), ir.const(4), ir.Store(x, (v,), ir.const(1.0, dtypes.float32)),
                  ir.ForKind.THREAD_BINDING, "vthread")
    with pytest.raises(CodegenError, match="bound to 'vthread'; a GPU has blockIdx.x"):
        nvptx.build(_kernel(body, x))


def test_too_many_threads_and_an_unknown_architecture_are_refused():
    x = ir.Buffer("x", (2048,), dtypes.float32)
    v = ir.Var("v")
    body = ir.For(v, ir.const(0), ir.const(2048), ir.Store(x, (v,), ir.const(1.0, dtypes.float32)),
                  ir.ForKind.THREAD_BINDING, "threadIdx.x")
    with pytest.raises(CodegenError, match="2048 threads per block"):
        nvptx.build(_kernel(body, x))
    with pytest.raises(CodegenError, match="unknown architecture 'volta'"):
        nvptx.build(_kernel(barrier(), x), arch="volta")
