"""``hoist_fill``: a pipeline's first cluster-shared tile fill is issued (asynchronously, split among the
cluster's cores) before the synchronous copies that precede it, and waited for where its closing barrier was;
after a card fill, inside it; the next tile's rows from GMEM before the first tile's barrier. The interpreter
gives the same results before and after, and the simulated card computes numpy's result in fewer cycles."""

from __future__ import annotations

import numpy as np

import isa
from compiler.backend.diannao import codegen
from compiler.interp import run
from compiler.ir import Allocate, Attr, Buffer, PrimFunc, TensorInsn, Var, seq
from compiler.ir.functor import IRMutator
from compiler.ir.printer import format_node
from compiler.passes.double_buffer import CLUSTER_PREFETCH, CLUSTER_SYNC, asynchronous_copies
from compiler.passes.hoist_fill import hoist_fill
from compiler.passes.share_card import CARD_FILL
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


def same_and_faster(before: PrimFunc, after: PrimFunc, a: np.ndarray, w: np.ndarray,
                    want: np.ndarray) -> None:
    """Both compute ``want`` in the interpreter and on the simulated card, ``after`` in fewer cycles."""
    cycles = []
    for func in (before, after):
        args = [a, w, np.zeros(B.size, np.int32)]
        run(func, args)
        assert np.array_equal(args[2], want)
        result, (_, _, b) = run_kernel(codegen(func, SPEC), [a, w, np.zeros(B.size, np.int32)])
        assert np.array_equal(b, want)
        cycles.append(result.cycles)
    assert cycles[1] < cycles[0]


def test_the_first_fill_is_issued_before_the_copies_and_waited_for_after_them() -> None:
    before = kernel()
    after = hoist_fill(before, SPEC)
    text = "\n".join(keys(after))
    assert CLUSTER_FILL + "', 'T'" not in text
    assert text.index(CLUSTER_PREFETCH) < text.index("dst=W.nmem[0]") < text.index(CLUSTER_SYNC)
    assert "diannao.memcpy_async(" in text and "dst=T[0]" in text
    rng = np.random.default_rng(1)
    a, w = rng.integers(-99, 99, A.size, dtype=np.int32), rng.integers(-99, 99, W.size, dtype=np.int32)
    want = np.concatenate([a[(c * N):(c + 1) * N] for c in range(2) for _ in range(4)])
    same_and_faster(before, after, a, w, want)


def test_a_copy_that_writes_what_the_fill_reads_keeps_its_place() -> None:
    overwrite = kernel(first_copy=copy(A, 0, WS, 0))   # writes the rows of A the fill reads
    assert hoist_fill(overwrite, SPEC) is overwrite


def carried_kernel() -> PrimFunc:
    """``kernel`` with the weights card filled (``share_card``'s mark): loaded once for the card."""
    func = kernel()
    text = format_node(func.body)
    assert CLUSTER_FILL + "', 'W.smem'" in text

    class Card(IRMutator):
        def mutate_Attr(self, s: Attr):
            body = self.mutate(s.body)
            key = CARD_FILL if s.key == CLUSTER_FILL and s.value == "W.smem" else s.key
            return Attr(key, s.value, body)
    return PrimFunc(func.name, func.params, Card().mutate(func.body))


def test_after_a_card_fill_the_prefetch_rides_in_it_and_crosses_gmem_while_the_cores_send() -> None:
    """The card fill carries the tile's prefetch (issued after a core's part, before its closing barrier),
    moved inside the tile's allocations; the copies stay between it and the tile's sync."""
    before = carried_kernel()
    after = hoist_fill(before, SPEC)
    text = format_node(after.body)
    card = text.index(CARD_FILL)
    assert text.index("alloc(T,") < card < text.index(CLUSTER_PREFETCH) < text.index("dst=W.nmem[0]") < \
        text.index(CLUSTER_SYNC)
    assert text[card:text.index("dst=W.nmem[0]")].count("memcpy_async") == 1   # the tile's copy, in it
    rng = np.random.default_rng(2)
    a, w = rng.integers(-99, 99, A.size, dtype=np.int32), rng.integers(-99, 99, W.size, dtype=np.int32)
    want = np.concatenate([a[(c * N):(c + 1) * N] for c in range(2) for _ in range(4)])
    same_and_faster(before, after, a, w, want)


def test_a_card_fill_that_writes_what_the_prefetch_reads_does_not_carry_it() -> None:
    """The tile filled from W.smem, which the card fill writes: hoisted past the copies, not carried."""
    func = carried_kernel()

    class FromWeights(IRMutator):
        def mutate_TensorInsn(self, s: TensorInsn):
            names = {r.buffer.name for r in s.regions}
            return copy(T, 0, WS, 0) if names == {"T", "A"} else s
    after = hoist_fill(PrimFunc(func.name, func.params, FromWeights().mutate(func.body)), SPEC)
    text = format_node(after.body)
    assert text.index(CARD_FILL) < text.index("alloc(T,") < text.index(CLUSTER_PREFETCH)


U = vec("U", N, "smem")


def two_tiles() -> PrimFunc:
    """``kernel``'s tile T, then a second tile U: its first half T's second half (a halo, on chip), its
    second half rows of A; every core copies U out (through T.nmem)."""
    cl, tid = Var("cl"), Var("tid")
    half = N // 2
    prefetch = Attr(CLUSTER_PREFETCH, "U", seq(*asynchronous_copies(SPEC, [
        share_smem_copy(U, 0, T, half, half), share_smem_copy(U, half, A, cl * N + half, half)])))
    body = seq(Attr(CLUSTER_FILL, "T", Attr("pragma_intrin", "copy", copy(T, 0, A, cl * N))),
               copy(TN, 0, T, 0), prefetch, Attr(CLUSTER_SYNC, "U", TensorInsn(SPEC, "wait", (), ())),
               copy(TN, 0, U, 0), copy(B, (cl * 4 + tid) * N, TN, 0))
    tiles = Attr(CLUSTER_SHARED, "T", Allocate(T, Attr(CLUSTER_SHARED, "U", Allocate(U, Allocate(TN, body)))))
    weights = Attr(CLUSTER_SHARED, "W.smem", Allocate(WS, Allocate(WN, seq(
        Attr(CLUSTER_FILL, "W.smem", Attr("pragma_intrin", "copy", copy(WS, 0, W, 0))),
        Attr("pragma_intrin", "copy", copy(WN, 0, WS, 0)), tiles))))
    return PrimFunc("two_tiles", (A, W, B), bound(cl, 2, "cluster", bound(tid, 4, "core", weights)))


def test_the_next_tiles_rows_from_gmem_are_issued_before_the_first_tiles_barrier() -> None:
    """U's copy from A (nothing before touched U, it reads nothing the kernel writes, apart from the halo
    copy it passes) moves into T's sync, after the wait; the halo copy, which reads T, stays."""
    before = two_tiles()
    after = hoist_fill(before, SPEC)
    text = format_node(after.body)
    sync_t = text.index(f"{CLUSTER_SYNC}', 'T'")
    early, late = text.index(f"{CLUSTER_PREFETCH}', 'U'"), text.rindex(f"{CLUSTER_PREFETCH}', 'U'")
    assert sync_t < early < text.index("src=A[cl*1024 + 512]") < text.index("dst=T.nmem[0], src=T[0]") < late
    assert text.index("src=T[512]") > late
    rng = np.random.default_rng(3)
    a, w = rng.integers(-99, 99, A.size, dtype=np.int32), rng.integers(-99, 99, W.size, dtype=np.int32)
    want = np.concatenate([np.concatenate([a[c * N + N // 2:(c + 1) * N]] * 2) for c in range(2)
                           for _ in range(4)])
    same_and_faster(before, after, a, w, want)


def test_a_part_that_overlaps_one_it_would_pass_stays() -> None:
    """U's rows from A written over the halo's elements: moving it ahead would change what U holds."""
    func = two_tiles()

    class Overlap(IRMutator):
        def mutate_TensorInsn(self, s: TensorInsn):
            names = {r.buffer.name for r in s.regions}
            return s if names != {"U", "A"} else asynchronous_copies(SPEC, [
                share_smem_copy(U, N // 4, A, Var("cl") * N + N // 2, N // 2)])[0]
    after = hoist_fill(PrimFunc(func.name, func.params, Overlap().mutate(func.body)), SPEC)
    text = format_node(after.body)
    assert text.count(f"{CLUSTER_PREFETCH}', 'U'") == 1
