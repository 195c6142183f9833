"""Golden printouts of lowered functions, before and after the reference pipeline (``build``).

Each test prints the function ``lower`` returns and the one ``build`` returns (simplified, flattened,
verified after each pass) into one golden file, and runs both in the interpreter against numpy, so a
golden file is known to describe a correct program:

- seed 001's [14, 14] add: split by nparts=4, bound to a core, with the guard ``tid*4 + i < 14``;
- an int8 dense with cache_read into ``nmem``, cache_write into ``acc``, compute_at and a split
  reduce axis;
- conv2d_nchw with its padding stage inlined;
- a reduction whose reduce loop is reordered outside a spatial loop (where its init nest goes);
- a packed GEMM tile whose next weight tile is prefetched through its reduction (``Stage.prefetch``).

Update with ``pytest tests/compiler/test_lower_golden.py --update-golden`` and review the diff.
"""

from __future__ import annotations

import numpy as np

from compiler import ops, te
from compiler.interp import run
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.pipeline import build
from compiler.schedule import Schedule, create_schedule
from compiler.te import Tensor


def _inputs(args: list[Tensor], seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for t in args:
        if t.dtype.is_int:
            arrays.append(rng.integers(-128, 128, size=t.shape).astype(t.dtype.numpy))
        else:
            arrays.append(rng.standard_normal(t.shape).astype(t.dtype.numpy))
    return arrays


def _run(func: ir.PrimFunc, inputs: list[np.ndarray], out: Tensor) -> np.ndarray:
    result = np.full(out.shape, 99, dtype=out.dtype.numpy)  # every element must be written
    run(func, [*(x.copy() for x in inputs), result])
    return result


def lower_and_build(s: Schedule, args: list[Tensor], name: str, expected_of) -> tuple[str, str]:
    """Lower and build, check both against numpy, and return the two printouts."""
    lowered = lower(s, args, name=name)
    built = build(s, args, name=name)
    inputs = _inputs(args[:-1])
    expected = expected_of(*inputs)
    for what, func in (("lowered", lowered), ("built", built)):
        got = _run(func, inputs, args[-1])
        assert got.dtype == expected.dtype, what
        if np.issubdtype(expected.dtype, np.integer):
            np.testing.assert_array_equal(got, expected, err_msg=f"{what}:\n{func}")
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{what}:\n{func}")
    return str(lowered), str(built)


def _golden_text(lowered: str, built: str) -> str:
    return f"# lower\n{lowered}\n\n# build (reference pipeline: simplify, flatten)\n{built}\n"


# --------------------------------------------------------------------------------------------------


def test_seed_001_add_split_bound_and_guarded(golden):
    A = te.placeholder((14, 14), "float32", name="A")
    B = te.placeholder((14, 14), "float32", name="B")
    C = te.compute((14, 14), lambda xx, j: A[xx, j] + B[xx, j], name="C")
    s = create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], nparts=4, names=("xxo", "i"))
    s[C].bind(xo, te.thread_axis("core", name="tid"))
    s[C].pragma(xi, "intrin", "TADD")
    lowered, built = lower_and_build(s, [A, B, C], "add", lambda a, b: a + b)
    # 14 rows in 4 parts of ceil(14/4) = 4: the last part runs rows 12..15, so rows 14 and 15 are
    # guarded off, with the guard printed as in the paper
    assert "if tid*4 + i < 14:" in lowered
    assert "if tid*4 + i < 14:" in built
    assert "C[tid*4 + i, j] = A[tid*4 + i, j] + B[tid*4 + i, j]" in lowered
    assert "C[tid*56 + i*14 + j] = A[tid*56 + i*14 + j] + B[tid*56 + i*14 + j]" in built
    golden.check(_golden_text(lowered, built))


def test_int8_dense_with_caches_and_split_reduce_axis(golden):
    X = te.placeholder((6, 8), "int8", name="X")
    W = te.placeholder((5, 8), "int8", name="W")
    D = ops.dense(X, W, out_dtype="int32")
    s = create_schedule(D)
    DL = s.cache_write(D, "acc")
    XL = s.cache_read(X, "nmem", [DL])
    WL = s.cache_read(W, "nmem", [DL])
    m, n = s[D].op.axis
    s[DL].compute_at(s[D], n)
    (k,) = s[DL].op.reduce_axis
    ko, ki = s[DL].split(k, factor=3)  # 8 = 3 + 3 + 2: the last chunk is guarded
    s[XL].compute_at(s[DL], ko)
    s[WL].compute_at(s[DL], ko)
    lowered, built = lower_and_build(
        s, [X, W, D], "dense", lambda x, w: x.astype(np.int32) @ w.astype(np.int32).T
    )
    # the caches hold the 1 x 3 slice of one k.outer chunk; the accumulator is one element
    assert 'alloc(X.nmem, i8[1, 3], "nmem")' in lowered
    assert 'alloc(dense.acc, i32[1, 1], "acc")' in lowered
    assert "k.outer*3 + k.inner < 8" in lowered
    golden.check(_golden_text(lowered, built))


def conv2d_reference(data: np.ndarray, kernel: np.ndarray, stride: int, padding: int) -> np.ndarray:
    d = np.pad(data.astype(np.int32), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    k = kernel.astype(np.int32)
    _, _, h, w = d.shape
    _, _, r, q = k.shape
    oh, ow = (h - r) // stride + 1, (w - q) // stride + 1
    out = np.zeros((d.shape[0], k.shape[0], oh, ow), dtype=np.int32)
    for y in range(oh):
        for x in range(ow):
            window = d[:, :, y * stride : y * stride + r, x * stride : x * stride + q]
            out[:, :, y, x] = np.einsum("ncrs,kcrs->nk", window, k)
    return out


def test_conv2d_nchw_with_padding_inlined(golden):
    data = te.placeholder((1, 2, 5, 5), "int8", name="data")
    kernel = te.placeholder((3, 2, 3, 3), "int8", name="kernel")
    out = ops.conv2d_nchw(data, kernel, stride=1, padding=1, out_dtype="int32")
    s = create_schedule(out)
    pad_t = out.op.input_tensors[0]
    assert pad_t.name == "conv2d.pad"
    s[pad_t].compute_inline()
    lowered, built = lower_and_build(
        s, [data, kernel, out], "conv2d", lambda d, k: conv2d_reference(d, k, stride=1, padding=1)
    )
    # inlined: no buffer for the padded input, the padding is a select on the index
    assert "conv2d.pad" not in lowered
    assert "alloc(" not in lowered
    assert "if_then_else(" in lowered
    golden.check(_golden_text(lowered, built))


def test_reduce_loop_reordered_outside_a_spatial_loop_places_the_init_nest(golden):
    A = te.placeholder((4, 6), "int32", name="A")
    k = te.reduce_axis(6, name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = create_schedule(B)
    ko, ki = s[B].split(k, factor=2)
    io, ii = s[B].split(B.op.axis[0], factor=2)
    s[B].reorder(io, ko, ii, ki)
    assert [iv.name for iv in s[B].leaf_iter_vars] == ["i.outer", "k.outer", "i.inner", "k.inner"]
    lowered, built = lower_and_build(s, [A, B], "rowsum", lambda a: a.sum(axis=1, dtype=np.int32))
    # the init nest sits inside i.outer, just outside k.outer (the first reduce loop), and keeps the
    # spatial loop i.inner that the update nest runs inside k.outer
    init_at = lowered.index("B[i.outer*2 + i.inner] = 0")
    update_at = lowered.index("for k.outer in range(3):")
    assert lowered.index("for i.outer in range(2):") < init_at < update_at
    golden.check(_golden_text(lowered, built))


def test_gemm_tile_prefetches_the_next_weight_tile_a_line_per_block_and_step(golden):
    """The weights packed [N/16, K/4, 16, 4] (int8: one 64-byte line per block and reduction step), tiles
    of 2 blocks x 8 rows: in each step of the reduction the tile prefetches the line of each of its 2
    blocks one tile on (no.outer + 1), held inside the weights on the last tile; the interpreter runs the
    prefetches as no-ops and the results stay numpy's."""
    m, n, k = 16, 64, 32
    A = te.placeholder((m, k), "uint8", name="A")
    B = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="B")
    ko, kk = te.reduce_axis(k // 4, "ko"), te.reduce_axis(4, "kk")
    out = te.compute((m, n // 16, 16), lambda i, no, ni: te.sum(
        ir.cast(A[i, ko * 4 + kk], "int32") * ir.cast(B[no, ko, ni, kk], "int32"), axis=[ko, kk]),
        name="gemm")
    s = create_schedule(out)
    acc = s.cache_write(out, "local")
    no_o, no_i = s[out].split(out.op.axis[1], 2)
    i_o, i_i = s[out].split(out.op.axis[0], 8)
    s[out].reorder(no_o, i_o, no_i, i_i, out.op.axis[2])
    s[acc].compute_at(s[out], i_o)
    (ai, ano, ani), (ako, akk) = acc.op.axis, acc.op.reduce_axis
    s[acc].reorder(ako, ano, ai, ani, akk)
    s[acc].prefetch(B, ako, no_o)

    def expected(a, b):
        weights = b.astype(np.int32).transpose(0, 2, 1, 3).reshape(n, k)
        return (a.view(np.uint8).astype(np.int32) @ weights.T).reshape(m, n // 16, 16)
    lowered, built = lower_and_build(s, [A, B, out], "gemm", expected)
    assert "prefetch(B[min(no.outer*2 + prefetch.0 + 2, 3), ko, 0, 0])" in lowered
    golden.check(_golden_text(lowered, built))
