"""Cluster-shared SMEM tiles (seed 001 Sec. V's two-level tiling): bound inference relaxes an "smem" stage
over the core axis, ``share_smem`` marks the tiles one core per cluster may fill for all, and the DianNao
backend turns a mark into barrier, fill on the cluster's first core, barrier.

A marked function means what the unmarked one means (every core fills its own copy): the interpreter runs
both the same, and the simulated card, where only one core fills, must agree with it bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler.backend.diannao import codegen
from compiler.errors import LoweringError
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Attr,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    InsnField,
    PrimFunc,
    Region,
    Stmt,
    TensorInsn,
    Var,
    const,
    dtypes,
    seq,
)
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.ops.diannao import block_weights
from compiler.passes import share_smem
from compiler.passes.share_smem import CLUSTER_FILL, CLUSTER_SHARED
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func
from compiler.target import Target
from tandem.flows.diannao import conv2d_matches, run_kernel

SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}
N = 16  # int32 elements per tile


def vec(name: str, n: int, scope: str = "global") -> Buffer:
    return Buffer(name, (n,), dtypes.dtype("int32"), scope)


def copy(dst: Buffer, dst_off, src: Buffer, src_off, n: int = N) -> TensorInsn:
    """``n`` int32 elements from ``src`` to ``dst`` (offsets in elements)."""
    spaces = {"global": "GMEM", "smem": "SMEM", "nmem": "NMEM"}
    fields = {"dst_space": SPACE[spaces[dst.scope]], "src_space": SPACE[spaces[src.scope]], "len": 4 * n,
              "count": 1, "dst_stride": 0, "src_stride": 0}
    return TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", dst, _expr(dst_off)), Region("src", src, _expr(src_off))))


def _expr(x):
    return const(x) if isinstance(x, int) else x


def bound(var: Var, n: int, thread: str, body: Stmt) -> For:
    return For(var, const(0), const(n), body, ForKind.THREAD_BINDING, thread)


def marks(func: PrimFunc) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def visit(node) -> None:
        if isinstance(node, Attr) and node.key in (CLUSTER_SHARED, CLUSTER_FILL):
            found.append((node.key, node.value))

    post_order_visit(func.body, visit)
    return found


A, B, S = vec("A", 2 * 3 * N), vec("B", 8 * 3 * N), vec("S", N, "smem")
cl, tid, t = Var("cl"), Var("tid"), Var("t")


def tiles(fill_offset, body_for=lambda stmt: stmt) -> PrimFunc:
    """Two clusters of four cores; each cluster walks three tiles of A through S, and every core copies each
    tile to its own part of B."""
    reader = copy(B, ((cl * 4 + tid) * 3 + t) * N, S, 0)
    tile = Allocate(S, seq(copy(S, 0, A, fill_offset), reader))
    return PrimFunc("tiles", (A, B), bound(cl, 2, "cluster", bound(tid, 4, "core", body_for(
        For(t, const(0), const(3), tile)))))


def expected(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a[(c * 3 + k) * N:(c * 3 + k + 1) * N] for c in range(2) for _ in range(4)
                           for k in range(3)])


def test_lowering_gives_an_smem_stage_the_region_of_the_whole_cluster() -> None:
    """In the cluster-shared conv schedule, the SMEM tile's fill depends on the cluster, not the core."""
    plan = dops.ConvPlan(oh=8, ow=6, row_groups=2, cout_groups=2, tile_rows=2, estimate=0, sub_rows=2,
                         smem_rows=4)
    d = dops.conv2d(8, 6, 4, 32, 3, 1, 1, "float32", plan=plan, spec=SPEC)
    func = lower(d.schedule, list(d.args), "conv")
    text = str(func)
    fill = next(line for line in text.splitlines() if line.strip().startswith("Xp.smem["))
    assert "cl*4" in fill and "tid" not in fill
    assert 'alloc(Xp.smem, f32[6, 8, 4], "smem")' in text   # 4 output rows + halo, padded width


def test_one_core_fills_a_tile_for_its_cluster() -> None:
    func = share_smem(tiles((cl * 3 + t) * N))
    assert sorted(marks(func)) == [(CLUSTER_FILL, "S"), (CLUSTER_SHARED, "S")]
    a = np.arange(A.size, dtype=np.int32) * 7
    want = [a, np.zeros(B.size, np.int32)]
    run(func, want)
    assert np.array_equal(want[1], expected(a))
    kernel = codegen(func, SPEC)
    assert [i.name for i in kernel.program.insns].count("barrier") == 2
    result, (_, b) = run_kernel(kernel, [a, np.zeros(B.size, np.int32)])
    assert np.array_equal(b, expected(a))
    assert kernel.onchip_bytes["SMEM_CLUSTER"] == 4 * N and kernel.onchip_bytes["SMEM"] == 0
    # one fill per cluster and tile, split among the cluster's 4 cores (a quarter of its bytes each): 2 x 3
    # tiles' bytes from GMEM into SMEM once, and 8 cores x 3 tiles copied out of it
    copies = sum(result.executed[pc] for pc, i in enumerate(kernel.program.insns) if i.name == "memcpyr")
    assert copies == 2 * 3 * 4 + 8 * 3
    assert result.bytes_moved["GMEM->SMEM"] == 2 * 3 * 4 * N


def test_a_fill_that_depends_on_the_core_stays_private() -> None:
    func = tiles((cl * 3 + t) * N + tid)
    assert share_smem(func) is func


def test_core_dependent_branches_share_only_when_they_fill_alike() -> None:
    def split_cores(stmt: Stmt) -> Stmt:  # what loop partitioning makes of a core whose last tile is short
        return IfThenElse(tid < 2, stmt, stmt)

    alike = share_smem(tiles((cl * 3 + t) * N, split_cores))
    assert marks(alike).count((CLUSTER_FILL, "S")) == 2

    def differ(stmt: Stmt) -> Stmt:
        return IfThenElse(tid < 2, stmt, For(Var("u"), const(0), const(2), stmt))

    func = tiles((cl * 3 + t) * N, differ)
    assert share_smem(func) is func


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_shared_conv_layer_runs_like_numpy(dtype) -> None:
    """14 output rows over four clusters (4, 4, 4 and 2 rows), two SMEM tiles per cluster, each cluster's
    four cores split into 2 row halves x 2 channel groups: the last cluster's cores part in branches that
    fill alike."""
    plan = dops.ConvPlan(oh=14, ow=9, row_groups=4, cout_groups=2, tile_rows=1, estimate=0, sub_rows=2,
                         smem_rows=2)
    d = dops.conv2d(14, 9, 8, 32, 3, 1, 1, dtype, plan=plan, spec=SPEC)
    func = compile_func(lower(d.schedule, list(d.args), "conv"), Target("diannao", SPEC))
    # two SMEM tiles per cluster: double-buffered (double_buffer), each shared by the cluster
    assert {(CLUSTER_SHARED, "Xp.smem.0"), (CLUSTER_SHARED, "Xp.smem.1")} <= set(marks(func))
    assert unmatched(func, SPEC) == []
    rng = np.random.default_rng(5)
    if dtype == "int8":
        x = rng.integers(-128, 128, (14, 9, 8), dtype=np.int8)
        wt = rng.integers(-128, 128, (32, 3, 3, 8), dtype=np.int8)
        y = np.zeros((14, 9, 32), np.int32)
    else:
        x = rng.standard_normal((14, 9, 8)).astype(np.float32)
        wt = rng.standard_normal((32, 3, 3, 8)).astype(np.float32)
        y = np.zeros((14, 9, 32), np.float32)
    _, outs = run_kernel(codegen(func, SPEC), [x, block_weights(wt.transpose(1, 2, 3, 0)), y])
    assert conv2d_matches(outs[-1], x, wt, 1, 1)


# ---- what the backend refuses

def test_bound_loops_one_after_another_are_refused() -> None:
    body = seq(bound(tid, 4, "core", copy(B, tid * N, A, 0)), bound(Var("u"), 4, "core", copy(B, 0, A, 0)))
    with pytest.raises(LoweringError, match="bound loops run one after another"):
        codegen(PrimFunc("f", (A, B), body), SPEC)


def test_a_core_loop_in_a_cluster_loop_covers_whole_clusters() -> None:
    body = bound(cl, 2, "cluster", bound(tid, 2, "core", copy(B, tid * N, A, 0)))
    with pytest.raises(LoweringError, match="runs over the 4 cores of each"):
        codegen(PrimFunc("f", (A, B), body), SPEC)


def test_a_fill_outside_the_core_loop_is_refused() -> None:
    body = Allocate(S, Attr(CLUSTER_FILL, "S", copy(S, 0, A, 0)))
    with pytest.raises(LoweringError, match="a cluster fill must be inside the core-bound loop"):
        codegen(PrimFunc("f", (A,), body), SPEC)
