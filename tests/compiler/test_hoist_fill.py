"""``hoist_fill``: a pipeline's first cluster-shared tile fill is issued (asynchronously, split among the
cluster's cores) before the synchronous copies that precede it, and waited for where its closing barrier was;
the interpreter gives the same results before and after, and the simulated card computes numpy's result in
fewer cycles."""

from __future__ import annotations

import numpy as np

import isa
from compiler.backend.diannao import codegen
from compiler.interp import run
from compiler.ir import Allocate, Attr, Buffer, PrimFunc, TensorInsn, Var, seq
from compiler.ir.printer import format_node
from compiler.passes.double_buffer import CLUSTER_PREFETCH, CLUSTER_SYNC
from compiler.passes.hoist_fill import hoist_fill
from compiler.passes.share_smem import CLUSTER_FILL, CLUSTER_SHARED
from tandem.flows.diannao import run_kernel
from tests.compiler.test_share_smem import bound, vec
from tests.compiler.test_share_smem import copy as share_smem_copy

SPEC = isa.load_isa("diannao")
N = 16 * 64   # int32 elements per buffer
A, B, W = vec("A", 2 * N), vec("B", 8 * N), vec("W", N)
WS, WN = vec("W.smem", N, "smem"), vec("W.nmem", N, "nmem")
T, TN = vec("T", N, "smem"), vec("T.nmem", N, "nmem")


def copy(dst: Buffer, dst_off, src: Buffer, src_off) -> TensorInsn:
    return share_smem_copy(dst, dst_off, src, src_off, N)


def kernel(first_copy=None) -> PrimFunc:
    """Two clusters of four cores: the weights W staged in SMEM (a cluster fill) and copied into each core's
    NMEM, then a tile T of A filled for the cluster and copied out by every core, with its weights."""
    cl, tid = Var("cl"), Var("tid")
    reader = seq(copy(TN, 0, T, 0), copy(B, (cl * 4 + tid) * N, TN, 0))
    tile = Attr(CLUSTER_SHARED, "T", Allocate(T, Allocate(TN, seq(
        Attr(CLUSTER_FILL, "T", Attr("pragma_intrin", "copy", copy(T, 0, A, cl * N))), reader))))
    body = Attr(CLUSTER_SHARED, "W.smem", Allocate(WS, Allocate(WN, seq(
        Attr(CLUSTER_FILL, "W.smem", Attr("pragma_intrin", "copy", copy(WS, 0, W, 0))),
        Attr("pragma_intrin", "copy", first_copy or copy(WN, 0, WS, 0)), tile))))
    return PrimFunc("hoisted", (A, W, B), bound(cl, 2, "cluster", bound(tid, 4, "core", body)))


def keys(func: PrimFunc) -> list[str]:
    return [line.strip() for line in format_node(func.body).splitlines()
            if line.strip().startswith(("with attr('cluster", "diannao."))]


def test_the_first_fill_is_issued_before_the_copies_and_waited_for_after_them() -> None:
    before = kernel()
    after = hoist_fill(before, SPEC)
    text = "\n".join(keys(after))
    assert CLUSTER_FILL + "', 'T'" not in text
    assert text.index(CLUSTER_PREFETCH) < text.index("dst=W.nmem[0]") < text.index(CLUSTER_SYNC)
    assert "diannao.memcpy_async(" in text and "dst=T[0]" in text
    rng = np.random.default_rng(1)
    a, w = rng.integers(-99, 99, A.size, dtype=np.int32), rng.integers(-99, 99, W.size, dtype=np.int32)
    outs = []
    for func in (before, after):
        args = [a, w, np.zeros(B.size, np.int32)]
        run(func, args)
        outs.append(args[2])
    assert np.array_equal(outs[0], outs[1])
    want = np.concatenate([a[(c * N):(c + 1) * N] for c in range(2) for _ in range(4)])
    cycles = []
    for func in (before, after):
        result, (_, _, b) = run_kernel(codegen(func, SPEC), [a, w, np.zeros(B.size, np.int32)])
        assert np.array_equal(b, want)
        cycles.append(result.cycles)
    assert cycles[1] < cycles[0]


def test_a_copy_that_writes_what_the_fill_reads_keeps_its_place() -> None:
    overwrite = kernel(first_copy=copy(A, 0, WS, 0))   # writes the rows of A the fill reads
    assert hoist_fill(overwrite, SPEC) is overwrite
