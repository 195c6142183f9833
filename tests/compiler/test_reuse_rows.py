"""Rows a tile's fill copies again (compiler/passes/reuse_rows.py): the rows two consecutive fills both copy
from GMEM are copied on chip from the tile before, so that each input row crosses the GMEM port once per
cluster; the fill writes what it wrote before."""

from __future__ import annotations

import numpy as np

import isa
from compiler.backend.diannao_fill import split_fill
from compiler.interp import run
from compiler.ir import Attr, Buffer, InsnField, PrimFunc, Region, TensorInsn, const, dtypes, seq
from compiler.passes.reuse_rows import reuse_rows, skip_zero_fills

SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}
ROW, STRIDE, ROWS = 224, 256, 6          # bytes copied per row, bytes between tile rows, rows of a tile
F32 = dtypes.dtype("float32")
X = Buffer("X", (12 * ROW // 4,), F32)


def tile(name: str, scope: str = "smem") -> Buffer:
    return Buffer(name, (ROWS * STRIDE // 4,), F32, scope)


def fill(buffer: Buffer, first_row: int, rows: int = ROWS) -> list:
    """Zero ``buffer``, then copy rows ``first_row``.. of X into it, 16 bytes into each tile row."""
    space = SPACE[buffer.scope.upper()]
    zero = TensorInsn(SPEC, "vzero", (InsnField("dst_space", const(space)),
                                      InsnField("n", const(ROWS * STRIDE))),
                      (Region("dst", buffer, const(0)),))
    fields = {"dst_space": space, "src_space": SPACE["GMEM"], "len": ROW, "count": rows, "dst_stride": STRIDE,
              "src_stride": ROW}
    copy = TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", buffer, const(4)), Region("src", X, const(first_row * ROW // 4))))
    return [Attr("pragma_intrin", "zero", zero), Attr("pragma_intrin", "copy", copy)]


def after(stmts: list, *tiles: Buffer) -> list[np.ndarray]:
    """The tiles after running ``stmts`` in the interpreter on a known X."""
    func = PrimFunc("f", (X, *tiles), seq(*stmts))
    x = np.arange(X.shape[0], dtype=np.float32) + 1
    arrays = [x, *(np.full(t.shape[0], -1, np.float32) for t in tiles)]
    run(func, arrays)
    return arrays[1:]


def field(stmt, name: str) -> int:
    return next(f.value.value for f in stmt.body.fields if f.name == name)


def test_the_rows_both_fills_copy_come_from_the_tile_before():
    a, b = tile("A"), tile("B")
    before, nxt = fill(a, 0), fill(b, 4)   # rows 0-5, then rows 4-9: rows 4 and 5 in both
    got = reuse_rows(nxt, before, a)
    zero, on_chip, rest = got
    assert zero is nxt[0]
    assert [r.buffer.name for r in on_chip.body.regions] == ["B", "A"] and field(on_chip, "count") == 2
    assert field(on_chip, "src_space") == SPACE["SMEM"] and field(on_chip, "src_stride") == STRIDE
    assert [r.buffer.name for r in rest.body.regions] == ["B", "X"] and field(rest, "count") == ROWS - 2
    for want, have in zip(after(before + nxt, a, b), after(before + got, a, b), strict=True):
        assert np.array_equal(want, have)


def test_fills_that_share_no_row_or_cannot_copy_on_chip_stay_as_they_are():
    a, b = tile("A"), tile("B")
    assert reuse_rows(fill(b, 6), fill(a, 0), a) == fill(b, 6)        # rows 6-11 after rows 0-5
    assert reuse_rows(fill(b, 0), fill(a, 4), a) == fill(b, 0)        # an earlier start
    wa, wb = tile("WA", "wmem"), tile("WB", "wmem")   # the spec has no WMEM -> WMEM copy
    assert reuse_rows(fill(wb, 4), fill(wa, 0), wa) == fill(wb, 4)


def test_a_fill_with_rows_from_the_tile_before_still_splits_among_the_cores():
    a, b = tile("A"), tile("B")
    before, got = fill(a, 0), reuse_rows(fill(b, 4), fill(a, 0), a)
    parts = split_fill(seq(*got), 2, 64)
    assert parts is not None and [len(p) for p in parts] == [3, 2]   # the first core copies from both
    whole = after(before + got, a, b)
    for order in (parts, parts[::-1]):
        split = after(before + [x for p in order for x in p], a, b)
        assert all(np.array_equal(w, h) for w, h in zip(whole, split, strict=True))


def test_a_fill_that_rewrites_every_row_the_fill_two_before_wrote_needs_no_zero_fill():
    """Tiles alternating between two buffers: the third fill (the first tile's buffer again) writes the same
    rows the first did, so its zero fill is left out; a fill of fewer rows (the walk's last tile) keeps it,
    and the buffers hold what the whole fills leave."""
    a, b = tile("A"), tile("B")
    fills = [fill(a, 0), fill(b, 3), fill(a, 6), fill(b, 9, rows=3)]
    got = skip_zero_fills(fills)
    assert got[0] == fills[0] and got[1] == fills[1] and got[2] == fills[2][1:] and got[3] == fills[3]
    whole, skipped = after([x for f in fills for x in f], a, b), after([x for f in got for x in f], a, b)
    assert all(np.array_equal(w, h) for w, h in zip(whole, skipped, strict=True))
