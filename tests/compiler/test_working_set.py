"""PolyDL's working sets (compiler/analysis/working_set.py, Algorithm 1) against the paper's worked example
and hand counts on fourteen loop nests (guards, registers and tensorized instructions among them): for each
nest, the dependences found and the working set of each, as (kind, buffer) -> (WS_min, WS_max) in elements,
counted by hand in the comments."""

from __future__ import annotations

import pytest

from compiler.analysis.working_set import NotAnalysable, polyhedral, working_sets, working_sets_each
from compiler.ir import dtypes
from compiler.ir import nodes as ir

F32 = dtypes.float32


def loops(body: ir.Stmt, *nest: tuple[ir.Var, int]) -> ir.Stmt:
    for var, extent in reversed(nest):
        body = ir.For(var, ir.const(0), ir.const(extent), body)
    return body


def found(stmt: ir.Stmt, parallel: tuple[ir.Var, ...] = ()) -> dict[tuple[str, str], tuple[int, int]]:
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for ws in working_sets(polyhedral(stmt), parallel):
        key = (ws.kind, ws.buffer)
        assert out.get(key, (ws.ws_min, ws.ws_max)) == (ws.ws_min, ws.ws_max), key
        out[key] = (ws.ws_min, ws.ws_max)
    return out


i, j, k = ir.Var("i"), ir.Var("j"), ir.Var("k")


def matmul(m: int, n: int, kk: int) -> ir.Stmt:
    a, b, c = ir.Buffer("A", (m, kk), F32), ir.Buffer("B", (kk, n), F32), ir.Buffer("C", (m, n), F32)
    return loops(ir.Store(c, (i, j), c[i, j] + a[i, k] * b[k, j]), (i, m), (j, n), (k, kk))


@pytest.mark.parametrize(("m", "n", "kk"), [(4, 4, 4), (3, 5, 7)])
def test_the_papers_matmul_example(m, n, kk):
    """Sec. 3.3: d2 on A (source S[0,0,0], targets S[0,j,0]): WS_min = 2K + 3 (K of A, K + 1 of B, 2 of C),
    WS_max = NK + N + 1; on C (S[0,0,k] -> S[0,0,k']): 5 and 2K + 1; on B (S[0,0,0] -> S[i,0,0]):
    NK + K + N + 2 and (M-1)K + 1 + NK + (M-1)N + 1."""
    ws = found(matmul(m, n, kk))
    assert ws[("RAR", "A")] == (2 * kk + 3, n * kk + n + 1)
    for kind in ("RAR", "RAW", "WAR", "WAW"):
        assert ws[(kind, "C")] == (5, 2 * kk + 1)
    assert ws[("RAR", "B")] == (n * kk + kk + n + 2, (m - 1) * kk + 1 + n * kk + (m - 1) * n + 1)
    assert len(ws) == 6


def test_a_stencil_reuses_its_right_neighbour_once():
    # b[i] = a[i] + a[i+1]: a[1] read at i = 0 (as a[i+1]) and at i = 1 (as a[i]); from i = 0 to i = 1:
    # a[0..2] and b[0..1], 5 elements, one target so min = max; a[i] is never read again later.
    a, b = ir.Buffer("a", (9,), F32), ir.Buffer("b", (8,), F32)
    assert found(loops(ir.Store(b, (i,), a[i] + a[i + 1]), (i, 8))) == {("RAR", "a"): (5, 5)}


def test_a_scalar_reduction_reuses_its_accumulator_every_iteration():
    # s[0] = s[0] + a[i], i < 6: from i = 0 to i = 1: s[0], a[0], a[1] (3); to i = 5: s[0] + 6 of a (7)
    s, a = ir.Buffer("s", (1,), F32), ir.Buffer("a", (6,), F32)
    zero = ir.const(0)
    ws = found(loops(ir.Store(s, (zero,), s[zero] + a[i]), (i, 6)))
    assert ws == {(kind, "s"): (3, 7) for kind in ("RAR", "RAW", "WAR", "WAW")}


@pytest.mark.parametrize("transpose", [False, True])
def test_a_copy_or_a_transpose_has_no_reuse(transpose):
    a, b = ir.Buffer("a", (3, 4), F32), ir.Buffer("b", (4, 3) if transpose else (3, 4), F32)
    store = ir.Store(b, (j, i) if transpose else (i, j), a[i, j])
    assert found(loops(store, (i, 3), (j, 4))) == {}


def test_a_row_sum_reuses_along_the_inner_loop():
    # s[i] += A[i, j], 3 x 4: from (0,0) to (0,1): s[0], A[0,0..1] (3); to (0,3): s[0], A[0,0..3] (5)
    s, a = ir.Buffer("s", (3,), F32), ir.Buffer("A", (3, 4), F32)
    ws = found(loops(ir.Store(s, (i,), s[i] + a[i, j]), (i, 3), (j, 4)))
    assert ws == {(kind, "s"): (3, 5) for kind in ("RAR", "RAW", "WAR", "WAW")}


def test_a_column_sum_reuses_across_the_outer_loop():
    # s[j] += A[i, j], i < 3 outer, j < 4 inner: s[0] at (0,0) again at (1,0) and (2,0). From (0,0) to
    # (1,0): s[0..3] and A[0,0..3], A[1,0] (9); to (2,0): s[0..3], A[0..1, 0..3], A[2,0] (13)
    s, a = ir.Buffer("s", (4,), F32), ir.Buffer("A", (3, 4), F32)
    ws = found(loops(ir.Store(s, (j,), s[j] + a[i, j]), (i, 3), (j, 4)))
    assert ws == {(kind, "s"): (9, 13) for kind in ("RAR", "RAW", "WAR", "WAW")}


def test_a_1d_convolution_reuses_output_weights_and_input():
    # y[i] += x[i+k] * w[k], i < 4, k < 3.
    # y[0] over (0,0)..(0,1): y[0], x[0..1], w[0..1] (5); ..(0,2): y[0], x[0..2], w[0..2] (7).
    # w[0] at (0,0) again at (1,0), (2,0), (3,0): to (1,0): y[0..1], x[0..2], w[0..2] (8); to (3,0):
    #   y[0..3], x[0..4], w[0..2] (12).
    # x: the first element read again is x[1] (at (0,1), then at (1,0) only): (0,1), (0,2), (1,0) touch
    #   y[0..1], x[1..2], w[0..2] (7).
    y, x, w = ir.Buffer("y", (4,), F32), ir.Buffer("x", (6,), F32), ir.Buffer("w", (3,), F32)
    ws = found(loops(ir.Store(y, (i,), y[i] + x[i + k] * w[k]), (i, 4), (k, 3)))
    assert ws == {**{(kind, "y"): (5, 7) for kind in ("RAR", "RAW", "WAR", "WAW")},
                  ("RAR", "w"): (8, 12), ("RAR", "x"): (7, 7)}


def test_a_reuse_across_a_parallel_loop_needs_everything_the_loop_touches():
    # matmul with i parallel: B[k, j] is reused across i, so its working set is the whole nest's
    # footprint, A, B and C (16 + 16 + 16); A's and C's reuses stay within one i and keep their sizes.
    ws = found(matmul(4, 4, 4), parallel=(i,))
    assert ws[("RAR", "B")] == (48, 48)
    assert ws[("RAR", "A")] == (11, 21) and ws[("WAW", "C")] == (5, 9)


def test_static_chunks_of_a_parallel_loop_reuse_in_order_each_thread_its_own():
    """With the parallel loop cut into contiguous chunks, a reuse across its iterations is each thread's,
    in order: the sequential working sets, held by every thread at once (PolyDL's own rule takes all the
    parallel iterations' footprint instead)."""
    nest = matmul(4, 4, 4)
    sequential = working_sets(polyhedral(nest))
    polydl = working_sets(polyhedral(nest), (j,))
    chunked = working_sets(polyhedral(nest), (j,), threads=2)
    assert any(w.parallel for w in polydl) and not all(w.parallel for w in polydl)
    for seq, rule, got in zip(sequential, polydl, chunked, strict=True):
        scale = 2 if rule.parallel else 1   # the reuses across j; those inside one j iteration stay
        assert (got.ws_min, got.ws_max, got.parallel) == (seq.ws_min * scale, seq.ws_max * scale, False)
        if rule.parallel:
            assert rule.ws_min == rule.ws_max   # PolyDL's: one footprint of every parallel iteration
    assert working_sets(polyhedral(nest), (), threads=2) == sequential   # no parallel loop: unchanged


def test_several_choices_of_parallel_loops_share_one_analysis_and_each_gets_its_own_sets():
    nest = polyhedral(matmul(4, 4, 4))
    each = working_sets_each(nest, [(), (i,), (i, j)])
    for choice, sets in each.items():
        assert sets == working_sets(polyhedral(matmul(4, 4, 4)), choice), choice
    by_kind = {choice: {(ws.kind, ws.buffer): (ws.ws_min, ws.ws_max, ws.parallel) for ws in sets}
               for choice, sets in each.items()}
    assert by_kind[()][("RAR", "B")][2] is False and by_kind[(i,)][("RAR", "B")] == (48, 48, True)
    assert by_kind[(i, j)][("RAR", "A")][2] is True     # A[i, k] is reused across j once j runs in parallel


def test_an_initialized_reduction_orders_its_two_statements():
    # for i < 2: s[i] = 0; for j < 3: s[i] = s[i] + A[i, j]. The init's write of s[0] is written again
    # by the update at (0, 0..2): from the init to the first update, s[0] and A[0,0] (2); to the last,
    # s[0] and A[0,0..2] (4). The updates among themselves: (0,0) -> (0,1): s[0], A[0,0..1] (3); to (0,2): 4.
    s, a = ir.Buffer("s", (2,), F32), ir.Buffer("A", (2, 3), F32)
    update = ir.For(j, ir.const(0), ir.const(3), ir.Store(s, (i,), s[i] + a[i, j]))
    nest = ir.For(i, ir.const(0), ir.const(2), ir.seq(ir.Store(s, (i,), ir.const(0.0, F32)), update))
    ws = working_sets(polyhedral(nest))
    by_source = {(w.kind, w.source.split(":")[0]): (w.ws_min, w.ws_max) for w in ws}
    assert by_source[("WAW", "S0")] == (2, 4) and by_source[("RAW", "S0")] == (2, 4)
    assert by_source[("WAW", "S1")] == (3, 4)


@pytest.mark.parametrize("order", [(j, i, k), (k, i, j), (k, j, i)], ids=lambda o: "".join(v.name for v in o))
def test_a_reordered_nest_has_the_working_sets_of_the_nest_written_in_that_order(order):
    m, n, kk = 3, 4, 5
    a, b, c = ir.Buffer("A", (m, kk), F32), ir.Buffer("B", (kk, n), F32), ir.Buffer("C", (m, n), F32)
    store = ir.Store(c, (i, j), c[i, j] + a[i, k] * b[k, j])
    extents = {i: m, j: n, k: kk}
    written = polyhedral(loops(store, *[(v, extents[v]) for v in order]))
    reordered = polyhedral(matmul(m, n, kk)).reordered(order)
    assert reordered.times["S0"] == tuple(reordered.names[v] for v in order)

    def sets(nest, parallel=()):   # the access texts name ISL variables, which differ: compare the sets
        return [(w.kind, w.buffer, w.ws_min, w.ws_max, w.parallel, w.by_buffer)
                for w in working_sets(nest, parallel)]

    assert sets(reordered) == sets(written)
    assert sets(reordered, (order[0],)) == sets(written, (order[0],))


def test_only_loops_around_every_statement_and_outside_the_rest_are_reordered():
    s, a = ir.Buffer("s", (2,), F32), ir.Buffer("A", (2, 3), F32)
    update = ir.For(j, ir.const(0), ir.const(3), ir.Store(s, (i,), s[i] + a[i, j]))
    nest = polyhedral(ir.For(i, ir.const(0), ir.const(2), ir.seq(ir.Store(s, (i,), ir.const(0.0, F32)),
                                                                 update)))
    with pytest.raises(ValueError, match="is not inside every loop"):
        nest.reordered((j, i))
    with pytest.raises(ValueError, match="not a permutation"):
        nest.reordered((i, i))
    inner = polyhedral(matmul(3, 4, 5))
    with pytest.raises(ValueError, match="a loop outside"):
        inner.reordered((k, j))   # i stays outside them


def test_a_non_affine_access_or_bound_is_not_analysable():
    a, b = ir.Buffer("a", (8,), F32), ir.Buffer("b", (64,), F32)
    with pytest.raises(NotAnalysable, match=r"the access b\[i\*i\] is not affine"):
        polyhedral(loops(ir.Store(b, (i * i,), a[i]), (i, 8)))
    with pytest.raises(NotAnalysable, match=r"is not affine"):   # a quotient by a loop, not a constant
        polyhedral(loops(ir.Store(b, (i // (j + 1),), a[i]), (i, 8), (j, 2)))


def test_a_quotient_or_remainder_by_a_constant_is_quasi_affine():
    """What fusing loops writes (``fused // 8``, ``fused % 8``) is analysed, with ISL's floor and mod: here
    the 8 iterations write 8 distinct elements of b [4, 2], and the 4 distinct elements a[i // 2] read."""
    a, b = ir.Buffer("a", (4,), F32), ir.Buffer("b", (4, 2), F32)
    nest = polyhedral(loops(ir.Store(b, (i // 2, i % 2), a[i // 2]), (i, 8)))
    write, read = (next(x for x in nest.accesses if x.buffer is buf) for buf in (b, a))
    assert nest.access_map(write).range().count_val() == 8
    assert nest.access_map(read).range().count_val() == 4
    with pytest.raises(NotAnalysable, match="loop j runs from 0 for i: not constant bounds"):
        polyhedral(ir.For(i, ir.const(0), ir.const(4), ir.For(j, ir.const(0), i, ir.Store(a, (j,), a[j]))))


def test_an_affine_guard_narrows_the_domain_and_its_else_takes_the_rest():
    # for i < 8: if i < 3: s[0] += a[i] else: t[0] += a[i].
    # s[0] at i = 0..2: to i = 1: s[0], a[0..1] (3); to i = 2: s[0], a[0..2] (4).
    # t[0] at i = 3..7 (the else): to i = 4: t[0], a[3..4] (3); to i = 7: t[0], a[3..7] (6).
    s, t, a = ir.Buffer("s", (1,), F32), ir.Buffer("t", (1,), F32), ir.Buffer("a", (8,), F32)
    zero = ir.const(0)
    body = ir.IfThenElse(ir.LT(i, ir.const(3)), ir.Store(s, (zero,), s[zero] + a[i]),
                         ir.Store(t, (zero,), t[zero] + a[i]))
    ws = found(loops(body, (i, 8)))
    assert ws == {**{(kind, "s"): (3, 4) for kind in ("RAR", "RAW", "WAR", "WAW")},
                  **{(kind, "t"): (3, 6) for kind in ("RAR", "RAW", "WAR", "WAW")}}


def test_a_guard_that_is_not_affine_is_not_analysable():
    a = ir.Buffer("a", (8,), F32)
    guarded = ir.IfThenElse(ir.LT(i * i, ir.const(9)), ir.Store(a, (i,), a[i] + a[i]))
    with pytest.raises(NotAnalysable, match="is not affine"):
        polyhedral(loops(guarded, (i, 8)))


def test_register_buffers_are_left_out():
    # acc[0] += a[i]; out[0] = acc[0]: with acc a register (scope "local") nothing in memory is reused;
    # with acc in memory its reuse is the scalar reduction's, from i = 0 to i = 1 (acc, a[0..1]) and to
    # i = 5 (acc, a[0..5]).
    a, out = ir.Buffer("a", (6,), F32), ir.Buffer("out", (1,), F32)
    zero = ir.const(0)

    def nest(scope: str) -> ir.Stmt:
        acc = ir.Buffer("acc", (1,), F32, scope)
        update = loops(ir.Store(acc, (zero,), acc[zero] + a[i]), (i, 6))
        return ir.seq(update, ir.Store(out, (zero,), acc[zero]))

    assert found(nest("local")) == {}
    in_memory = working_sets(polyhedral(nest("global")))
    assert ("WAW", "acc", 3, 7) in {(w.kind, w.buffer, w.ws_min, w.ws_max) for w in in_memory}


def test_a_tensorized_instructions_loops_are_one_step_in_time():
    # s[j] += A[i, j], i < 3 outer, the j < 4 loop one instruction (a tensorize mark): its four lanes run at
    # one time, so s[0..3] are reused from step i = 0 to i = 1: s[0..3], A[0..1, 0..3] (12 elements) and to
    # i = 2: s[0..3], A[0..2, 0..3] (16). In bytes (s int32, A int8): 16 + 8 = 24 and 16 + 12 = 28.
    # A row sum done the same way (s[i] += A[i, j], one instruction per row) reuses nothing between steps.
    i8, i32 = dtypes.int8, dtypes.int32
    s, a = ir.Buffer("s", (4,), i32), ir.Buffer("A", (3, 4), i8)
    lanes = ir.Attr("tensorize", "dot", ir.For(j, ir.const(0), ir.const(4),
                                               ir.Store(s, (j,), s[j] + ir.cast(a[i, j], "int32"))))
    ws = working_sets(polyhedral(loops(lanes, (i, 3))))
    assert {(w.kind, w.ws_min, w.ws_max, w.bytes()) for w in ws} == \
        {(kind, 12, 16, (24, 28)) for kind in ("RAR", "RAW", "WAR", "WAW")}
    row = ir.Buffer("r", (3,), i32)
    per_row = ir.Attr("tensorize", "dot", ir.For(j, ir.const(0), ir.const(4),
                                                 ir.Store(row, (i,), row[i] + ir.cast(a[i, j], "int32"))))
    assert found(loops(per_row, (i, 3))) == {}


# ------------------------------------------------------------------------------------------ Algorithm 2
from compiler.analysis.poly_rank import MemoryLevel, Placement, cpu_caches, place, rank, sizes  # noqa: E402

L1, L2 = MemoryLevel("L1", 100, 4, 192), MemoryLevel("L2", 1000, 14, 96)
MEM = MemoryLevel("memory", 0, 84, 8)


def test_algorithm_2_places_the_smallest_first_into_the_fastest_level_with_room():
    # sorted: 10, 40, 60, 500, 700, 900: 10 and 40 fill L1 to 50, 60 does not fit beside them (110 > 100)
    # and goes to L2 (60); 500 to L2 (560); 700 fits nowhere (1260 > 1000); 900 neither: memory 1600
    assert place([700, 10, 60, 900, 40, 500], [L1, L2]) == Placement({"L1": 50, "L2": 560}, 1600)


def test_eq_1_weighs_each_level_by_latency_over_bandwidth():
    p = Placement({"L1": 192, "L2": 96}, 8)
    assert p.cost([L1, L2], MEM) == 192 * 4 / 192 + 96 * 14 / 96 + 8 * 84 / 8   # 4 + 14 + 84


def test_the_working_sets_are_placed_in_bytes_both_bounds_of_each():
    ws = working_sets(polyhedral(matmul(4, 4, 4)))
    assert sorted(sizes(ws, 4)) == sorted(x * 4 for w in ws for x in (w.ws_min, w.ws_max))


def test_the_loop_order_whose_reuses_are_nearer_ranks_first():
    """C[i,j] += A[i,k] * B[k,j], 16^3 floats, L1 1 KiB and L2 4 KiB, as ijk and ikj. ijk: C's four
    dependences (5, 33), A (35, 273), B (290, 738) elements; ikj: C's reuse spans a row of C (35, 273 each),
    A (5, 33), B the same. In bytes, smallest first: ijk puts 4 x 20 + 4 x 132 + 140 = 748 in L1, 1092 and
    1160 in L2 (2252), and 2952 goes to memory; ikj puts 20 + 132 + 4 x 140 = 712 in L1, three 1092s in L2
    (3276), and the fourth 1092, 1160 and 2952 (5204) to memory. Eq. (1) ranks ijk first."""
    m = n = kk = 16
    a, b, c = ir.Buffer("A", (m, kk), F32), ir.Buffer("B", (kk, n), F32), ir.Buffer("C", (m, n), F32)
    update = ir.Store(c, (i, j), c[i, j] + a[i, k] * b[k, j])
    variants = {"ijk": polyhedral(loops(update, (i, m), (j, n), (k, kk))),
                "ikj": polyhedral(loops(update, (i, m), (k, kk), (j, n)))}
    levels = [MemoryLevel("L1", 1024, 4, 192), MemoryLevel("L2", 4096, 14, 96)]
    ranked = rank(variants, levels, MEM)
    assert [r.name for r in ranked] == ["ijk", "ikj"]
    assert ranked[0].placement == Placement({"L1": 748, "L2": 2252}, 2952)
    assert ranked[1].placement == Placement({"L1": 712, "L2": 3276}, 5204)
    assert ranked[0].cost == 748 * 4 / 192 + 2252 * 14 / 96 + 2952 * 84 / 8


def test_this_cpus_caches_come_from_the_os(tmp_path):
    caches = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]
    for n, (level, kind, size) in enumerate(caches):
        d = tmp_path / f"index{n}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert [(c.name, c.bytes) for c in cpu_caches(tmp_path)] == [("L1", 48 * 1024), ("L2", 1 << 20),
                                                                 ("L3", 32 << 20)]
    assert cpu_caches(tmp_path / "none") == []


def test_working_sets_in_cache_lines_count_the_lines_touched():
    # s[j] += A[i, j] over i < 3, j < 32 (float32, row-major, 128 bytes a row): with 64-byte lines a row of
    # A is 2 lines and s is 2 lines. s's first line (s[0..15]) is written at (0, 0) and read next at (0, 1),
    # its neighbour in the line: s's line and A[0, 0..15]'s, 2 lines; it is read last at (2, 15): both lines
    # of s, rows 0 and 1 of A (4 lines) and A[2, 0..15] (1) = 7 lines. In elements, s[0] is reused from
    # (0, 0) to (1, 0) (s, A[0, :], A[1, 0]: 32 + 33 = 65) and to (2, 0) (97).
    s, a = ir.Buffer("s", (32,), F32), ir.Buffer("A", (3, 32), F32)
    stmt = loops(ir.Store(s, (j,), s[j] + a[i, j]), (i, 3), (j, 32))
    by_line = {(w.kind, w.buffer): (w.ws_min, w.ws_max, w.bytes()) for w in
               working_sets(polyhedral(stmt, line_bytes=64))}
    assert by_line[("RAW", "s")] == (2, 7, (2 * 64, 7 * 64))
    assert found(stmt)[("RAW", "s")] == (65, 97)


# ------------------------------------------------------------------------------------------- scratchpads
from compiler.analysis.poly_rank import place_scratchpads, scratchpad_homes, scratchpad_levels  # noqa: E402
from compiler.analysis.working_set import WorkingSet  # noqa: E402


def test_scratchpads_hold_only_their_own_buffers_working_sets():
    """Two dependences on ``data`` (its part: 100 and 300 bytes, then 200 and 200) and one on ``kernel``
    (50 and 900): the input buffer (250 bytes) takes data's 100 and then nothing else of data (100 + 200 >
    250), the weight buffer (1000) takes kernel's 50 and 900; the rest (300, 200, 200) goes to memory. The
    other buffers' bytes in a working set do not count against a scratchpad."""
    def ws(buffer, low, high):
        return WorkingSet("RAR", buffer, "", "", 0, 0, by_buffer=((buffer, low, high), ("other", 999, 999)))

    levels = [MemoryLevel("inp", 250, 1, 16), MemoryLevel("wgt", 1000, 1, 256)]
    found = [ws("data", 100, 300), ws("data", 200, 200), ws("kernel", 50, 900)]
    placement = place_scratchpads(found, {"data": "inp", "kernel": "wgt"}, levels)
    assert placement == Placement({"inp": 100, "wgt": 950}, 700)
    # a buffer no copy fills has no scratchpad: memory
    assert place_scratchpads(found, {"kernel": "wgt"}, levels).memory == 100 + 300 + 200 + 200


def test_a_staged_nests_copies_say_which_scratchpad_holds_which_array():
    data, out = ir.Buffer("data", (8,), F32), ir.Buffer("out", (8,), F32)
    buf = ir.Buffer("data.inp", (8,), F32, "inp")
    copy = loops(ir.Store(buf, (i,), data[i]), (i, 8))
    use = loops(ir.Store(out, (i,), buf[i] + buf[i]), (i, 8))
    assert scratchpad_homes(ir.Allocate(buf, ir.seq(copy, use))) == {"data": "inp"}


def test_scratchpad_levels_come_from_the_specs_spaces():
    from isa import load_isa

    spec = load_isa("vita")
    inp, wgt = scratchpad_levels(spec, ["inp", "wgt"])
    assert (inp.bytes, inp.bandwidth) == (spec.spaces["INP"].bytes, spec.spaces["INP"].unit_bytes)
    assert wgt.bytes == spec.spaces["WGT"].bytes and inp.latency == 1
    with pytest.raises(ValueError, match="has no space NMEM"):
        scratchpad_levels(spec, ["nmem"])
