"""Hopper's warpgroup MMA on any machine: the spec's wgmma instructions selected by the Inspector only where
the GPU has sm_90a, the schedule's warpgroup form (swizzled, unpadded shared tiles; one group of
instructions in flight across a step) run on the reference interpreter before and after tensorization
against numpy, and the PTX's structure (descriptors, fences, the accumulator tied through the waits),
assembled by ptxas for sm_90a where it is installed. tests/gpu/test_cuda_device.py runs the kernels on a GPU.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler import interp
from compiler.backend import nvptx
from compiler.errors import CodegenError, ScheduleError
from compiler.ir import nodes as ir
from compiler.ir.cuda import SWIZZLE, swizzled_offset
from compiler.ir.functor import IRMutator, post_order_visit
from compiler.ops import cuda, reference
from compiler.ops.cuda_kernel import UNROLLED_STEPS
from compiler.ops.nn import ConvShape
from compiler.pipeline import compile_func
from sim.core.errors import SimConfigError
from tandem.flows import cuda as cuda_run
from tandem.flows import cuda_config
from tandem.flows.check import within_bound
from tandem.flows.flow import RunError
from tandem.flows.targets import load_target

H100 = load_target("cuda")
A100 = load_target("cuda", "sm80")
W128, W256 = "wgmma_m64n128k16_f16_f32", "wgmma_m64n256k16_f16_f32"
PTXAS = nvptx.ptxas()


def _f16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape, np.float32).astype(np.float16)


def _gemm(m, n, k, tuning) -> cuda.GpuSchedule:
    cfg = H100.config
    return cuda.gemm(m, n, k, tuning, spec=H100.spec, shared_limit=cfg.shared_bytes, features=cfg.features)


def _tensorized(s: cuda.GpuSchedule) -> ir.PrimFunc:
    """The schedule's loop IR after the cuda pipeline (its marked nests become the spec's instruction)."""
    return compile_func(s.func, H100)


# ------------------------------------------------------------------------------------------ selection
def test_the_h100_has_the_warpgroup_instructions_and_the_a100_does_not():
    names = [i.name for i in cuda.tensor_core_instructions(H100.spec, H100.config.features)]
    assert names == ["wmma_m16n16k16_f16_f32", W256, W128]
    w = cuda.tensor_core_instruction(H100.spec, W256, H100.config.features)
    assert (w.tm, w.tn, w.tk, w.threads, w.shared) == (64, 256, 16, 128, True)
    assert [i.name for i in cuda.tensor_core_instructions(A100.spec, A100.config.features)] == \
        ["wmma_m16n16k16_f16_f32"]
    with pytest.raises(ScheduleError, match=r"not one of the spec's usable .*wmma_m16n16k16_f16_f32\)"):
        cuda.tensor_core_instruction(A100.spec, W256, A100.config.features)


def test_a_tuning_naming_the_warpgroup_instruction_on_an_a100_is_refused_before_compiling():
    with pytest.raises(RunError, match=f"names instruction '{W128}', which is not one of the usable"):
        cuda_run.FLOW.plan("gemm", {"M": 256, "N": 256, "K": 256,
                                    "tuning": cuda.GpuTuning(2, 1, 1, 1, 64, 1, 3, W128)}, A100)


@pytest.mark.parametrize(("tuning", "rule"), [
    (cuda.GpuTuning(2, 1, 1, 1, 32, 1, 3, W128), "bk must be a multiple of 64"),
    (cuda.GpuTuning(2, 1, 1, 1, 64, 2, 3, W128), "split_k must be 1"),
    (cuda.GpuTuning(1, 1, 2, 1, 64, 1, 3, W256), "keep 256 accumulator registers per thread"),
    (cuda.GpuTuning(2, 2, 2, 1, 64, 1, 3, W128), "exceed the 65536 registers"),
])
def test_a_warpgroup_tuning_that_cannot_work_is_refused_naming_the_rule(tuning, rule):
    with pytest.raises(ScheduleError, match=rule):
        _gemm(256, 256, 256, tuning)


def test_the_h100_config_lists_sm_90a_and_a_bad_features_value_is_refused(tmp_path):
    assert H100.config.features == ("sm_90a",) and A100.config.features == ()
    assert H100.config.arch_for((("sm_90a",),)) == "sm_90a" and H100.config.arch_for(()) == "sm_90"
    bad = tmp_path / "gpu.toml"
    bad.write_text('name = "x"\nsummary = "x"\nfeatures = "sm_90a"\n')
    with pytest.raises(SimConfigError, match="features.*expected a list of names"):
        cuda_config.load_config(bad)


def test_large_gemms_measure_the_warpgroup_instruction_first_and_only_batched_convs_take_turns():
    """A warpgroup's gathered conv tile adds to its step (its conv tunings ran 2.3-23x slower than the best
    wmma ones at batch 1 on an H200): a batch-1 conv measures wmma tunings, the same at batch 16 both."""
    cfg = H100.config
    insns = cuda.tensor_core_instructions(H100.spec, cfg.features)
    big = cuda.tuning_space(4096, 4096, 4096, 1, insns, cfg.shared_bytes, cfg.sm_count, cfg.sm_shared_bytes)
    assert big[0].instruction == W256
    small, batched = (cuda.tuning_space(512, 196, 1024, n, insns, cfg.shared_bytes, cfg.sm_count,
                                        cfg.sm_shared_bytes, gathered=True) for n in (1, 16))
    assert not any(t.instruction for t in small[:6])
    assert batched[0].instruction == "" and any(t.instruction for t in batched[:3])
    for t in big[:6] + small[:6] + batched[:6]:
        insn = cuda.tensor_core_instruction(H100.spec, t.instruction, cfg.features)
        assert t.why_not(insn, cfg.shared_bytes) is None


# ------------------------------------------------------------------------------------------ the layout
def test_the_swizzle_moves_whole_16_byte_chunks_within_a_row_and_is_a_bijection():
    shape = (2, 64, 192)                 # two stages, 64 rows, three 64-element (128-byte) panels
    phys = np.array([swizzled_offset(f, shape, 2) for f in range(int(np.prod(shape)))])
    assert sorted(phys.tolist()) == list(range(phys.size))
    for stage, row, col in ((0, 0, 0), (0, 3, 8), (1, 13, 70), (1, 63, 191)):
        flat = (stage * 64 + row) * 192 + col
        panel, chunk = divmod(col, 64)
        want = stage * 64 * 192 + panel * 64 * 64 + row * 64 + ((chunk // 8) ^ (row % 8)) * 8 + chunk % 8
        assert phys[flat] == want
    assert phys[: 8].tolist() == list(range(8))            # a chunk stays contiguous


# ------------------------------------------------------------------------------------------ interpreter
GEMMS = [
    ((70, 260, 136), cuda.GpuTuning(1, 1, 1, 1, 64, 1, 1, W256)),      # padded; global -> shared directly
    ((128, 256, 192), cuda.GpuTuning(2, 1, 1, 1, 64, 1, 2, W128)),     # prefetched through registers
    ((128, 256, 320), cuda.GpuTuning(2, 1, 1, 2, 64, 1, 3, W128)),     # ring of 3: one group in flight
    ((256, 128, 384), cuda.GpuTuning(2, 1, 2, 1, 64, 1, 4, W128)),     # ring of 4, p = 2
    ((128, 256, 256), cuda.GpuTuning(1, 1, 2, 1, 128, 1, 3, W128)),    # two panels of K per row
]


def _check_gemm(func: ir.PrimFunc, s: cuda.GpuSchedule, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(7)
    a, b = _f16(rng, (m, k)), _f16(rng, (k, n))
    pa, pb = cuda.pack_gemm(a, b, s)
    c = np.zeros((s.m, s.n), np.float32)
    interp.run(func, [pa, pb, c])
    want = reference.dense(a, np.ascontiguousarray(b.T))
    scale = reference.dense(np.abs(a), np.ascontiguousarray(np.abs(b).T))
    assert within_bound(cuda.unpack_gemm(c, m, n), want, scale, k).validated


def test_the_warpgroup_schedule_before_and_after_tensorize_computes_numpys_result():
    """The loop IR before the pass runs scalar in the interpreter (about a microsecond a multiply-add):
    the smallest block, one step."""
    s = _gemm(64, 100, 64, cuda.GpuTuning(1, 1, 1, 1, 64, 1, 3, W128))
    for func in (s.func, _tensorized(s)):
        _check_gemm(func, s, 64, 100, 64)


@pytest.mark.parametrize(("shape", "tuning"), GEMMS,
                         ids=[f"{t.stages}-{t.p}x{t.q}-bk{t.bk}" for _, t in GEMMS])
def test_warpgroup_gemms_compute_numpys_result(shape, tuning):
    s = _gemm(*shape, tuning)
    _check_gemm(_tensorized(s), s, *shape)


def test_a_warpgroup_conv_gathers_into_the_swizzled_tile_and_computes_numpys_result():
    layer = ConvShape(h=9, w=9, ic=24, oc=64, k=3, s=1, p=1, n=2)
    cfg = H100.config
    s = cuda.conv2d(layer, cuda.GpuTuning(1, 1, 1, 1, 64, 1, 3, W128), spec=H100.spec,
                    shared_limit=cfg.shared_bytes, features=cfg.features)
    rng = np.random.default_rng(3)
    data, kernel = _f16(rng, (2, 24, 9, 9)), _f16(rng, (64, 24, 3, 3))
    padded, flat = cuda.pack_conv(data, kernel, layer, s)
    out = np.zeros((2, s.m, s.n), np.float32)
    interp.run(_tensorized(s), [padded, flat, out])
    want = reference.conv2d(data, kernel, 1, 1)
    scale = reference.conv2d(np.abs(data), np.abs(kernel), 1, 1)
    assert within_bound(cuda.unpack_conv(out, layer), want, scale, 24 * 9).validated


# ------------------------------------------------------------------------------------------ PTX
def test_the_ptx_reads_both_operands_through_descriptors_with_one_group_in_flight():
    s = _gemm(512, 512, 512, cuda.GpuTuning(2, 1, 1, 1, 64, 1, 4, W256))
    kernel = nvptx.build(_tensorized(s), arch="sm_90a", shared_limit=H100.config.shared_bytes)
    ptx = kernel.ptx
    assert ".target sm_90a" in ptx and ".maxntid 128, 2, 1" in ptx
    assert ".extern .shared .align 1024 .b8 dynamic_shared[]" in ptx
    mma = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(mma) == 4                                  # bk 64 = four k16 steps, one tile per warpgroup
    # a K-major (no transpose), b MN-major (transposed: B is [K, N] with N contiguous)
    assert all(line.rstrip().endswith("p, 1, 1, 0, 1;") for line in mma)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" in mma[0]
    for op in ("wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;",
               "wgmma.wait_group.sync.aligned 1;", "wgmma.wait_group.sync.aligned 0;",
               "fence.proxy.async.shared::cta;", "cp.async.cg.shared.global"):
        assert op in ptx, op
    assert "xor.b" in ptx                                 # the swizzle of the copies' addresses
    # nothing branches between the step's instructions and their wait (ptxas would serialize them)
    body = ptx[ptx.index("wgmma.commit_group"): ptx.index("wgmma.wait_group.sync.aligned 1;")]
    assert "bra" not in body


@pytest.mark.skipif(PTXAS is None, reason="no ptxas here (pip install -e \".[ptxas]\")")
@pytest.mark.parametrize("tuning", [cuda.GpuTuning(2, 1, 1, 1, 64, 1, 4, W256),
                                    cuda.GpuTuning(2, 1, 2, 1, 64, 1, 4, W128)], ids=str)
def test_the_warpgroup_ptx_assembles_for_sm_90a_without_serialized_instructions(tuning, tmp_path):
    s = _gemm(4096, 4096, 4096, tuning)
    kernel = nvptx.build(_tensorized(s), arch="sm_90a", shared_limit=H100.config.shared_bytes)
    src = tmp_path / "k.ptx"
    src.write_text(kernel.ptx)
    done = subprocess.run([PTXAS, "-arch=sm_90a", "-v", "-o", str(tmp_path / "k.cubin"), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "serialized" not in done.stderr and "spill stores" in done.stderr
    assert " 0 bytes spill stores" in done.stderr


def test_the_flow_compiles_a_warpgroup_kernel_for_sm_90a():
    job = cuda_run.FLOW.plan("gemm", {"M": 256, "N": 256, "K": 256,
                                      "tuning": cuda.GpuTuning(2, 1, 1, 1, 64, 1, 3, W128)}, H100)
    compiled = cuda_run.compile_gpu(job, job.candidates[0], H100)
    assert compiled.kernel.arch == "sm_90a" and not compiled.unmatched
    assert compiled.kernel.instructions()["wgmma"] > 0


class _Unswizzle(IRMutator):
    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        return self.mutate(s.body) if s.key == SWIZZLE else self.generic_mutate(s)


def test_a_warpgroup_instruction_on_an_unswizzled_buffer_is_refused_naming_it():
    done = _tensorized(_gemm(128, 256, 64, cuda.GpuTuning(2, 1, 1, 1, 64, 1, 1, W128)))
    func = ir.PrimFunc(done.name, done.params, _Unswizzle().mutate(done.body), done.attrs)
    with pytest.raises(CodegenError, match="buffer A_shared must be a swizzled shared buffer"):
        nvptx.build(func, arch="sm_90a", shared_limit=H100.config.shared_bytes)


def test_every_tuning_the_device_check_sweeps_fits_the_h100():
    spec = importlib.util.spec_from_file_location("sweep_gemm", Path(__file__).parents[2] / "gpu" /
                                                  "sweep_gemm.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    tunings = sweep.parse(sweep.TUNINGS)
    assert {t.instruction for t in tunings} == {"", W128, W256}
    cfg = H100.config
    for t in tunings:
        insn = cuda.tensor_core_instruction(H100.spec, t.instruction, cfg.features)
        assert t.why_not(insn, cfg.shared_bytes) is None, t


def test_a_warpgroup_convs_gathered_tile_is_a_loop_and_assembles_without_spills(tmp_path):
    """64 elements per thread of a 64 x 256 im2col tile: a loop over 4 groups of 16 unrolled elements (all
    64 unrolled, the kernel spilled registers; one per iteration, each waited a global load's latency)."""
    cfg = H100.config
    layer = ConvShape(h=28, w=28, ic=128, oc=256, k=3, s=1, p=1, n=1)
    s = cuda.conv2d(layer, cuda.GpuTuning(2, 1, 1, 1, 64, 1, 4, W256), spec=H100.spec,
                    shared_limit=cfg.shared_bytes, features=cfg.features)
    groups = []
    post_order_visit(s.func.body, lambda x: groups.append(x) if isinstance(x, ir.For) and
                     x.var.name == "group_b" else None)
    assert groups and all(g.kind is ir.ForKind.SERIAL and g.extent.value == 4 for g in groups)
    assert all(g.body.var.name == "it_b" and g.body.kind is ir.ForKind.UNROLLED and
               g.body.extent.value == UNROLLED_STEPS for g in groups)
    kernel = nvptx.build(_tensorized(s), arch="sm_90a", shared_limit=cfg.shared_bytes)
    if PTXAS is not None:
        src = tmp_path / "conv.ptx"
        src.write_text(kernel.ptx)
        done = subprocess.run([PTXAS, "-arch=sm_90a", "-v", "-o", str(tmp_path / "conv.cubin"), str(src)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and " 0 bytes spill stores" in done.stderr, done.stderr
        assert "serialized" not in done.stderr
