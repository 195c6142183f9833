"""Card fills (``share_card``): a cluster fill whose bytes are the same in every cluster crosses GMEM once
for the card; the DianNao backend splits it among every core, each sending its part to the other clusters'
SMEM with the spec's cluster copy (``memcpyc``) between barriers of every core.

A marked function means what the unmarked one means (every cluster fills its own copy): the interpreter runs
both alike, and the simulated card, where each cluster loads a part, must agree with numpy bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np

import isa
from compiler.backend.diannao import codegen
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Attr,
    IfThenElse,
    PrimFunc,
    Stmt,
    Var,
    seq,
)
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.passes.share_card import CARD_FILL, cluster_copy, share_card
from compiler.passes.share_smem import CLUSTER_FILL, share_smem
from compiler.pipeline import compile_func
from compiler.target import Target
from tandem.flows.diannao import conv2d_matches, run_kernel
from tests.compiler.test_share_smem import bound, vec
from tests.compiler.test_share_smem import copy as copy_n

SPEC = isa.load_isa("diannao")
TARGET = Target("diannao", SPEC)
N = 16000  # int32 elements of the shared tile: 64 KB, enough for a card fill to pay (rule 5)


def copy(dst, dst_off, src, src_off):
    return copy_n(dst, dst_off, src, src_off, N)


def keys(func: PrimFunc) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def visit(node) -> None:
        if isinstance(node, Attr) and node.key in (CLUSTER_FILL, CARD_FILL):
            found.append((node.key, node.value))

    post_order_visit(func.body, visit)
    return found


A, B, S = vec("A", 4 * N), vec("B", 16 * N), vec("S", N, "smem")
cl, tid = Var("cl"), Var("tid")


def weights(fill_offset, clusters_for=lambda stmt: stmt) -> PrimFunc:
    """Four clusters of four cores; each cluster fills S from A once, and every core copies S to its own
    part of B."""
    tile = Allocate(S, seq(copy(S, 0, A, fill_offset), copy(B, (cl * 4 + tid) * N, S, 0)))
    return share_smem(PrimFunc("weights", (A, B), bound(cl, 4, "cluster", clusters_for(
        bound(tid, 4, "core", tile)))))


def test_a_fill_every_cluster_makes_alike_crosses_gmem_once() -> None:
    func = share_card(weights(0), SPEC)
    assert keys(func) == [(CARD_FILL, "S")]
    a = np.arange(A.size, dtype=np.int32) * 3 + 1
    want = [a, np.zeros(B.size, np.int32)]
    run(func, want)
    assert np.array_equal(want[1], np.tile(a[:N], 16))
    kernel = codegen(func, SPEC)
    result, (_, b) = run_kernel(kernel, [a, np.zeros(B.size, np.int32)])
    assert np.array_equal(b, np.tile(a[:N], 16))
    # 16 parts of 4 bytes (one per core) through GMEM once, each sent to the three other clusters
    assert result.bytes_moved["GMEM->SMEM"] == 4 * N
    assert result.bytes_moved["SMEM->SMEM"] == 3 * 4 * N
    assert result.instructions["memcpyc"] == 16 * 3
    alone = codegen(weights(0), SPEC)   # without the pass: every cluster loads all of it
    assert run_kernel(alone, [a, np.zeros(B.size, np.int32)])[0].bytes_moved["GMEM->SMEM"] == 4 * 4 * N


def test_a_fill_that_depends_on_the_cluster_stays_the_clusters() -> None:
    func = weights(cl * N)
    assert share_card(func, SPEC) is func


def test_partitioned_clusters_share_only_when_every_path_fills_alike() -> None:
    def split(stmt: Stmt) -> Stmt:   # what loop partitioning makes of a first cluster with other rows
        return IfThenElse(cl < 1, stmt, IfThenElse(cl < 3, stmt, stmt))

    assert keys(share_card(weights(0, split), SPEC)) == [(CARD_FILL, "S")] * 3

    def differ(stmt: Stmt) -> Stmt:
        other = Allocate(S, seq(copy(S, 0, A, N), copy(B, (cl * 4 + tid) * N, S, 0)))
        return IfThenElse(cl < 1, stmt, bound(tid, 4, "core", other))

    assert keys(share_card(weights(0, differ), SPEC)) == [(CLUSTER_FILL, "S")] * 2


def test_a_spec_without_a_cluster_copy_keeps_cluster_fills() -> None:
    spec = dataclasses.replace(SPEC, instructions={k: v for k, v in SPEC.instructions.items()
                                                    if v is not cluster_copy(SPEC)})
    func = weights(0)
    assert cluster_copy(spec) is None and share_card(func, spec) is func


def test_a_conv_whose_clusters_take_row_groups_loads_its_weights_once_and_keeps_the_result() -> None:
    """Four clusters of two channel groups x two sub-rows: the weights staged in SMEM (36 KB, enough to pay
    for sending them) are the same in every cluster; with ``share_card`` they cross GMEM once, and the
    result is numpy's, bit for bit."""
    plan = dops.ConvPlan(oh=16, ow=16, row_groups=4, cout_groups=2, tile_rows=1, estimate=0, sub_rows=2,
                         smem_rows=2)
    d = dops.conv2d(16, 16, 64, 64, 3, 1, 1, "int8", 16, plan=plan, spec=SPEC)
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (16, 16, 64), dtype=np.int8)
    wt = rng.integers(-128, 128, (64, 3, 3, 64), dtype=np.int8)
    moved = {}
    for skip in ((), ("share_card",)):
        func = compile_func(lower(d.schedule, list(d.args), "conv"), TARGET, skip=skip)
        assert (CARD_FILL, "Wb.smem") in keys(func) or skip
        result, outs = run_kernel(codegen(func, SPEC), [x, dops.block_weights(wt.transpose(1, 2, 3, 0)),
                                                        np.zeros((16, 16, 64), np.int32)])
        assert conv2d_matches(outs[-1], x, wt, 1, 1), skip
        moved[skip] = result.bytes_moved
    weight_bytes = wt.size
    assert moved[("share_card",)]["GMEM->SMEM"] - moved[()]["GMEM->SMEM"] == 3 * weight_bytes
    assert moved[()]["SMEM->SMEM"] - moved[("share_card",)].get("SMEM->SMEM", 0) == 3 * weight_bytes


def test_a_fill_too_small_to_pay_for_its_sends_stays_the_clusters() -> None:
    """Rule 5: a 4 KB fill saves 3 x 64 cycles of GMEM, less than four times the two barriers and three sends'
    latencies a card fill adds (GoogLeNet's 8x8 layers lost ~900 cycles each to such card fills)."""
    small = share_smem(PrimFunc("small", (A, B), bound(cl, 4, "cluster", bound(tid, 4, "core", Allocate(
        S, seq(copy_n(S, 0, A, 0, 1024), copy_n(B, (cl * 4 + tid) * N, S, 0, 1024)))))))
    assert keys(share_card(small, SPEC)) == [(CLUSTER_FILL, "S")]
