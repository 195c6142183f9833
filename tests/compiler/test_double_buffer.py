"""double_buffer: a marked tile loop loads the next tile and stores the last one while it computes.

Each test states the pipeline it expects (the printed IR), runs the function before and after the pass in the
interpreter, and runs the compiled kernel on the simulated card, where every access is checked against the
copies still in flight (a wrong pipeline is a HazardError there) and the result must equal numpy's.
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler.backend.diannao import codegen
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Attr,
    Buffer,
    For,
    ForKind,
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
from compiler.ir.printer import format_node
from compiler.passes.double_buffer import MARK, async_twin, can_double_buffer, double_buffer, wait_instruction
from tandem.flows.diannao import run_kernel

SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}
SCOPE = {"global": "GMEM", "nmem": "NMEM"}
N = 64   # int32 elements per tile (VECTOR_ELEMS)


def vec(name: str, n: int, scope: str = "global") -> Buffer:
    return Buffer(name, (n,), dtypes.dtype("int32"), scope)


def copy(dst: Buffer, dst_off, src: Buffer, src_off) -> Stmt:
    fields = {"dst_space": SPACE[SCOPE[dst.scope]], "src_space": SPACE[SCOPE[src.scope]], "len": 4 * N,
              "count": 1, "dst_stride": 0, "src_stride": 0}
    insn = TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", dst, _expr(dst_off)), Region("src", src, _expr(src_off))))
    return Attr("pragma_intrin", "copy", insn)


def vadd(dst: Buffer, a: Buffer, b: Buffer) -> Stmt:
    insn = TensorInsn(SPEC, "vadd", (InsnField("n", const(N)),),
                      (Region("dst", dst, const(0)), Region("a", a, const(0)), Region("b", b, const(0))))
    return Attr("pragma_intrin", "vadd", insn)


def _expr(x):
    return const(x) if isinstance(x, int) else x


A, C = vec("A", 8 * N), vec("C", 8 * N)
IN, OUT = vec("In", N, "nmem"), vec("Out", N, "nmem")
tid, t = Var("tid"), Var("t")


def tile_body(offset) -> Stmt:
    """One tile: copy its slice of A into NMEM, double it, copy it to its slice of C."""
    return Allocate(IN, Allocate(OUT, seq(copy(IN, 0, A, offset), vadd(OUT, IN, IN),
                                          copy(C, offset, OUT, 0))))


def tiles(count: int, *pieces: Stmt) -> PrimFunc:
    """One core walking ``count`` tiles (or the given pieces) under the double-buffer mark."""
    body = pieces or (For(t, const(0), const(count), tile_body(t * N)),)
    marked = Attr(MARK, 1, seq(*body))
    return PrimFunc("tiles", (A, C), For(tid, const(0), const(1), marked, ForKind.THREAD_BINDING, "core"))


def check(func: PrimFunc, covered: int):
    """The pass's output computes what its input does (``covered`` tiles doubled), in the interpreter and
    on the card."""
    after = double_buffer(func, SPEC)
    a = np.arange(A.size, dtype=np.int32) * 3 - 100
    want = np.zeros(C.size, np.int32)
    want[:covered * N] = 2 * a[:covered * N]
    for f in (func, after):
        args = [a.copy(), np.zeros(C.size, np.int32)]
        run(f, args)
        assert np.array_equal(args[1], want)
    result, (_, c) = run_kernel(codegen(after, SPEC), [a, np.zeros(C.size, np.int32)])
    assert np.array_equal(c, want)
    return after, result


# ------------------------------------------------------------------------------------------- the pipeline
def test_three_tiles_become_a_pipeline_of_two_buffers(golden):
    """tests/golden/test_double_buffer/: fill tile 0; a loop over a pair of tiles (each prefetches the
    next into the other buffers, computes, waits, drains asynchronously); the third tile; a last wait."""
    after, _ = check(tiles(3), 3)
    golden.check(format_node(after.body) + "\n")


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_any_number_of_tiles_computes_the_same_on_the_card(count):
    after, result = check(tiles(count), count)
    assert result.instructions["memcpyr_async"] == 2 * count - 1 and MARK not in format_node(after.body)


def test_the_pieces_loop_partitioning_leaves_run_as_one_pipeline():
    """A loop of two tiles and a last tile after it: the loop's last tile prefetches the single one."""
    single = tile_body(const(2 * N))
    _, result = check(tiles(0, For(t, const(0), const(2), tile_body(t * N)), single), 3)
    assert result.instructions["memcpyr_async"] == 5


def test_one_tile_is_left_as_it_is():
    after = double_buffer(tiles(1), SPEC)
    text = format_node(after.body)
    assert MARK not in text and "async" not in text and "wait" not in text


def test_the_card_overlaps_the_copies_with_the_compute():
    func = tiles(8)
    a = np.arange(A.size, dtype=np.int32)
    serial, _ = run_kernel(codegen(func, SPEC), [a, np.zeros(C.size, np.int32)])
    piped, _ = run_kernel(codegen(double_buffer(func, SPEC), SPEC), [a, np.zeros(C.size, np.int32)])
    assert piped.cycles < serial.cycles
    assert piped.instructions["memcpyr_async"] == 15 and piped.instructions["wait"] == 9


# ------------------------------------------------------------------------------------------------ refusals
def skipped(func: PrimFunc) -> str:
    """The pass's output for ``func``, which must be ``func`` without its mark, and the reason it gives."""
    after = double_buffer(func, SPEC)
    assert MARK not in format_node(after.body) and "async" not in format_node(after.body)
    (reason,) = [value for key, value in after.attrs if key == "double_buffer"]
    return reason


def test_a_tile_that_does_not_start_with_its_fill_runs_as_it_is_and_says_why():
    body = Allocate(IN, Allocate(OUT, seq(vadd(OUT, IN, IN), copy(C, t * N, OUT, 0))))
    reason = skipped(tiles(0, For(t, const(0), const(2), body)))
    assert reason.startswith("double_buffer: loop t: a tile's body must start with its fill")


def test_a_drain_into_what_the_tile_reads_is_refused():
    body = Allocate(IN, Allocate(OUT, seq(copy(IN, 0, A, t * N), vadd(OUT, IN, IN), copy(A, t * N, OUT, 0))))
    reason = skipped(tiles(0, For(t, const(0), const(2), body)))
    assert "the tile writes A, which the next tile's fill reads" in reason


def test_a_bound_loop_cannot_be_double_buffered():
    loop = For(t, const(0), const(2), tile_body(t * N), ForKind.THREAD_BINDING, "core")
    reason = skipped(PrimFunc("f", (A, C), Attr(MARK, 1, loop)))
    assert "loop t: a double-buffered loop must be serial" in reason


# ------------------------------------------------------------------------------------ the spec's instructions
def test_the_async_copy_and_the_wait_come_from_what_the_spec_says():
    assert async_twin(SPEC, SPEC.instruction("memcpy")).name == "memcpy_async"
    assert async_twin(SPEC, SPEC.instruction("memcpyr")).name == "memcpyr_async"
    assert async_twin(SPEC, SPEC.instruction("vadd")) is None
    assert wait_instruction(SPEC).name == "wait" and can_double_buffer(SPEC, "memcpy")
    assert not can_double_buffer(isa.load_isa("vita"), "LOAD_INP")


# ------------------------------------------------------------------------------- SMEM and NMEM tiles at once
def conv_run(plan, skip=()):
    """A 12 x 12 x 8 -> 32 int8 conv layer cut by ``plan``, compiled and run on the card."""
    from compiler.ops import diannao as dops
    from compiler.ops.nn import ConvShape
    from tandem.flows.diannao import compile_conv2d, conv2d_matches
    from tandem.flows.targets import load_target

    target = load_target("diannao")
    _, func = compile_conv2d(ConvShape(12, 12, 8, 32, 3, 1, 1), "int8", 16, target, plan=plan, skip=skip)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (12, 12, 8), dtype=np.int8)
    wt = rng.integers(-128, 128, (32, 3, 3, 8), dtype=np.int8)
    result, outs = run_kernel(codegen(func, SPEC), [x, dops.block_weights(wt.transpose(1, 2, 3, 0)),
                                                    np.zeros((12, 12, 32), np.int32)])
    assert conv2d_matches(outs[-1], x, wt, 1, 1)
    return func, result


def test_a_clusters_smem_tiles_and_their_nmem_tiles_run_as_one_pipeline():
    """Two clusters of 6 rows each, in SMEM tiles of 2 (3 per cluster, two buffers), each core's NMEM tiles
    of 1 row: one pipeline over every NMEM tile, the SMEM tiles filled two ahead, one cluster barrier per
    SMEM tile after the first fill; bit-exact on the card (where every access is checked against the copies
    in flight) and faster than without the pass."""
    from compiler.ops.diannao_conv_plans import ConvPlan

    plan = ConvPlan(oh=12, ow=12, row_groups=2, cout_groups=2, tile_rows=1, estimate=0, sub_rows=2,
                    smem_rows=2, cluster_groups=2)
    func, piped = conv_run(plan)
    text = format_node(func.body)
    assert "Xp.smem.0" in text and "Xp.smem.1" in text and "cluster_prefetch" in text and MARK not in text
    # each of the 4 clusters reads its rows once from GMEM (6 output rows need 7 input rows of 12 x 8 bytes;
    # the halo row two SMEM tiles share is copied on chip, reuse_rows) and its 16 channels' 3 x 3 x 8 weights
    assert piped.bytes_moved["GMEM->SMEM"] == 4 * 7 * 96 + 4 * 16 * 9 * 8
    assert piped.bytes_moved["SMEM->SMEM"] == 4 * 2 * 2 * 96   # 2 rows into each of 2 later tiles
    _, serial = conv_run(plan, skip=("double_buffer",))
    assert piped.cycles < serial.cycles
    assert piped.instructions["barrier"] < serial.instructions["barrier"]


def test_a_spec_whose_copies_are_all_synchronous_gets_no_pipeline(tmp_path):
    """A user's spec that makes the asynchronous copies synchronous (an extension file, no Python): the
    conv schedule marks nothing to double-buffer, and the layer runs bit-exact without a wait."""
    from compiler.ops.diannao_conv_plans import ConvPlan
    from compiler.ops.nn import ConvShape
    from tandem.flows.diannao import compile_conv2d

    path = tmp_path / "sync.toml"
    path.write_text('[isa]\nname = "diannao"\nextends = "diannao"\nsummary = "no asynchronous copies"\n'
                    '[instructions.memcpy_async]\ntiming = { async = false }\n'
                    '[instructions.memcpyr_async]\ntiming = { async = false }\n')
    from tandem.flows.targets import load_target

    target = load_target("diannao", spec=str(path))
    spec = target.spec
    assert not can_double_buffer(spec, "memcpy")
    plan = ConvPlan(oh=12, ow=12, row_groups=2, cout_groups=2, tile_rows=1, estimate=0, sub_rows=2,
                    smem_rows=2, cluster_groups=2)
    _, func = compile_conv2d(ConvShape(12, 12, 8, 32, 3, 1, 1), "int8", 16, target, plan=plan)
    text = format_node(func.body)
    assert MARK not in text and "async" not in text and "wait" not in text
    assert not [key for key, _ in func.attrs if key == "double_buffer"]
    from compiler.ops.diannao import block_weights
    from tandem.flows.diannao import conv2d_matches

    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (12, 12, 8), dtype=np.int8)
    wt = rng.integers(-128, 128, (32, 3, 3, 8), dtype=np.int8)
    result, outs = run_kernel(codegen(func, spec), [x, block_weights(wt.transpose(1, 2, 3, 0)),
                                                    np.zeros((12, 12, 32), np.int32)], config=target)
    assert conv2d_matches(outs[-1], x, wt, 1, 1) and "wait" not in result.instructions
