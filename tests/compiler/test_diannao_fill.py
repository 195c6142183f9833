"""A cluster fill split among the cluster's cores (compiler/backend/diannao_fill.py): each core zeroes exactly
the bytes between its rows and the next core's and copies its rows into them, so together they write what
one core would, and no byte twice."""

from __future__ import annotations

import numpy as np

import isa
from compiler.backend.diannao_fill import split_fill
from compiler.interp import run
from compiler.ir import Attr, Buffer, InsnField, PrimFunc, Region, TensorInsn, const, dtypes, seq

SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}
ROW, STRIDE, ROWS = 224, 256, 9           # bytes copied per row, bytes between SMEM rows, rows copied
X = Buffer("X", (ROWS * ROW // 4,), dtypes.dtype("float32"))
S = Buffer("S", (11 * STRIDE // 4,), dtypes.dtype("float32"), "smem")   # a top and a bottom padding row


def fill(rows: int = ROWS, zero_bytes: int = 11 * STRIDE) -> list:
    """Zero the SMEM tile, then copy ``rows`` rows of X into it from its second row on, 16 bytes in."""
    zero = TensorInsn(SPEC, "vzero", (InsnField("dst_space", const(SPACE["SMEM"])),
                                      InsnField("n", const(zero_bytes))),
                      (Region("dst", S, const(0)),))
    fields = {"dst_space": SPACE["SMEM"], "src_space": SPACE["GMEM"], "len": ROW, "count": rows,
              "dst_stride": STRIDE, "src_stride": ROW}
    copy = TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", S, const((STRIDE + 16) // 4)), Region("src", X, const(0))))
    return [Attr("pragma_intrin", "zero", zero), Attr("pragma_intrin", "copy", copy)]


def smem_after(stmts: list) -> np.ndarray:
    """S after running ``stmts`` in the interpreter on a known X (S starts at all ones)."""
    func = PrimFunc("f", (X, S), seq(*stmts))
    x, s = np.arange(X.shape[0], dtype=np.float32) + 1, np.ones(S.shape[0], np.float32)
    run(func, [x, s])
    return s


def test_the_parts_of_four_cores_write_what_the_whole_fill_does():
    parts = split_fill(seq(*fill()), 4, 64)
    assert parts is not None and len(parts) == 4
    whole = smem_after(fill())
    assert np.array_equal(smem_after([x for part in parts for x in part]), whole)
    assert np.array_equal(smem_after([x for part in reversed(parts) for x in part]), whole)   # any order


def test_no_two_cores_zero_the_same_byte_and_each_copies_inside_its_zeroes():
    parts = split_fill(seq(*fill()), 4, 64)
    spans = []
    for part in parts:   # the last core has no row left: it zeroes the bottom padding row only
        zero, *copy = (x.body for x in part)
        lo = zero.regions[0].offset.value * 4
        spans.append((lo, lo + next(f.value.value for f in zero.fields if f.name == "n")))
        assert lo % 64 == 0
        for c in copy:
            first = c.regions[0].offset.value * 4
            count = next(f.value.value for f in c.fields if f.name == "count")
            assert lo <= first and first + (count - 1) * STRIDE + ROW <= spans[-1][1]
    assert [len(p) for p in parts] == [2, 2, 2, 1]
    assert spans[0][0] == 0 and spans[-1][1] == 11 * STRIDE
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_fewer_rows_than_cores_split_the_zeroed_bytes_evenly():
    """3 rows for 4 cores: each core zeroes a run of 64-byte-aligned bytes of the tile (none left idle) and
    copies the pieces of rows in its run."""
    parts = split_fill(seq(*fill(rows=3)), 4, 64)
    assert np.array_equal(smem_after([x for part in parts for x in part]), smem_after(fill(rows=3)))
    assert np.array_equal(smem_after([x for part in reversed(parts) for x in part]), smem_after(fill(rows=3)))
    runs = []
    for part in parts:
        zero, *pieces = (x.body for x in part)
        lo = zero.regions[0].offset.value * 4
        hi = lo + next(f.value.value for f in zero.fields if f.name == "n")
        runs.append((lo, hi))
        for c in pieces:   # one row piece each, inside the run
            f = {x.name: x.value.value for x in c.fields}
            first = c.regions[0].offset.value * 4
            assert f["count"] == 1 and lo <= first and first + f["len"] <= hi
    step = -(-11 * STRIDE // 4 // 64) * 64   # a quarter of the zeroed bytes, rounded up to 64
    assert [lo for lo, _ in runs] == [k * step for k in range(4)] and runs[-1][1] == 11 * STRIDE


def test_fills_it_cannot_split_stay_whole():
    assert split_fill(seq(*fill()), 1, 64) is None                # one core
    assert split_fill(seq(*fill()), 4, 512) is None               # row boundaries off the zero's alignment
    assert split_fill(seq(*reversed(fill())), 4, 64) is None      # copy, then zero: not a padded fill


def test_a_copy_alone_splits_by_rows_or_one_rows_bytes():
    (_, copy) = fill()
    parts = split_fill(copy, 4, 64)
    assert [sum(next(f.value.value for f in x.body.fields if f.name == "count") for x in p) for p in parts] \
        == [3, 3, 3, 0]
