"""TensorIR's ReIndex and characteristic-vector mapping (compiler/passes/reindex.py), as a specification.

Each operator kind of TensorIR's suite is written once as a tensor expression over already padded inputs;
where a mapping onto VITA's GEMM (``acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])``) exists, the operator
computed as GEMMs on the reindexed operands (numpy, one per outer iteration) equals the operator run by the
reference interpreter, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import isa
from compiler import te
from compiler.interp import run
from compiler.lower import lower
from compiler.passes.inspector import NotApplicable
from compiler.passes.reindex import IntrinsicMapping, map_to_intrinsic
from compiler.schedule import create_schedule

VITA = isa.load_isa("vita")


def _mac(a, b):
    return te.cast(a, "int32") * te.cast(b, "int32")


def conv1d(n=2, c=5, oc=7, w=9, r=3, s=2):
    a = te.placeholder((n, c, (w - 1) * s + r), "int8", name="A")
    b = te.placeholder((oc, c, r), "int8", name="B")
    rc, rr = te.reduce_axis(c, "rc"), te.reduce_axis(r, "rr")
    return a, b, te.compute((n, oc, w), lambda i, o, x: te.sum(_mac(a[i, rc, x * s + rr], b[o, rc, rr]),
                                                                axis=[rc, rr]), name="C")


def conv2d(n=1, c=3, oc=6, h=4, w=5, r=3, s=1, d=1):
    """NCHW, stride s, dilation d (DIL when d > 1)."""
    a = te.placeholder((n, c, (h - 1) * s + d * (r - 1) + 1, (w - 1) * s + d * (r - 1) + 1), "int8", name="A")
    b = te.placeholder((oc, c, r, r), "int8", name="B")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(r, "rx")
    return a, b, te.compute((n, oc, h, w), lambda i, o, y, x: te.sum(
        _mac(a[i, rc, y * s + ry * d, x * s + rx * d], b[o, rc, ry, rx]), axis=[rc, ry, rx]), name="C")


def conv3d(c=2, oc=3, dd=3, h=3, w=4, r=2):
    a = te.placeholder((1, c, dd + r - 1, h + r - 1, w + r - 1), "int8", name="A")
    b = te.placeholder((oc, c, r, r, r), "int8", name="B")
    rc, rz, ry, rx = (te.reduce_axis(c, "rc"), te.reduce_axis(r, "rz"), te.reduce_axis(r, "ry"),
                      te.reduce_axis(r, "rx"))
    return a, b, te.compute((1, oc, dd, h, w), lambda i, o, z, y, x: te.sum(
        _mac(a[i, rc, z + rz, y + ry, x + rx], b[o, rc, rz, ry, rx]), axis=[rc, rz, ry, rx]), name="C")


def group_conv(groups=3, cg=2, og=4, h=4, w=4, r=3):
    """GRP: out[g*og + o] sums input channels g*cg ... only; the group g is a loop around separate GEMMs."""
    a = te.placeholder((groups, cg, h + r - 1, w + r - 1), "int8", name="A")
    b = te.placeholder((groups, og, cg, r, r), "int8", name="B")
    rc, ry, rx = te.reduce_axis(cg, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(r, "rx")
    return a, b, te.compute((groups, og, h, w), lambda g, o, y, x: te.sum(
        _mac(a[g, rc, y + ry, x + rx], b[g, o, rc, ry, rx]), axis=[rc, ry, rx]), name="C")


def batch_matmul(batch=3, m=5, n=6, k=7):
    a = te.placeholder((batch, m, k), "int8", name="A")
    b = te.placeholder((batch, n, k), "int8", name="B")
    r = te.reduce_axis(k, "r")
    return a, b, te.compute((batch, m, n), lambda q, i, j: te.sum(_mac(a[q, i, r], b[q, j, r]), axis=r),
                            name="C")


def gemv(n=9, k=11):
    a = te.placeholder((1, k), "int8", name="A")
    b = te.placeholder((n, k), "int8", name="B")
    r = te.reduce_axis(k, "r")
    return a, b, te.compute((1, n), lambda i, j: te.sum(_mac(a[i, r], b[j, r]), axis=r), name="C")


def depthwise(c=4, h=4, w=4, r=3):
    a = te.placeholder((c, h + r - 1, w + r - 1), "int8", name="A")
    b = te.placeholder((c, r, r), "int8", name="B")
    ry, rx = te.reduce_axis(r, "ry"), te.reduce_axis(r, "rx")
    return a, b, te.compute((c, h, w), lambda q, y, x: te.sum(_mac(a[q, y + ry, x + rx], b[q, ry, rx]),
                                                              axis=[ry, rx]), name="C")


MAPPED = {"C1D": conv1d, "C2D": conv2d, "C2D-stride2": lambda: conv2d(s=2), "DIL": lambda: conv2d(d=2),
          "C3D": conv3d, "GRP": group_conv, "BMM": batch_matmul, "GEMV": gemv}


def reference(a, b, c, arrays):
    out = np.zeros(c.shape, np.int32)
    run(lower(create_schedule(c), [a, b, c], "op"), [*arrays, out])
    return out


def as_gemms(mapping: IntrinsicMapping, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The operator computed the intrinsic's way: out[l, b, o] = sum_k inp[l, b, k] * wgt[l, o, k]."""
    inp = mapping.reindex(arrays, "inp").astype(np.int64)
    wgt = mapping.reindex(arrays, "wgt").astype(np.int64)
    return np.einsum("lbk,lok->lbo", inp, wgt).astype(np.int32)


@pytest.mark.parametrize("kind", MAPPED)
def test_each_mapped_kind_computed_as_gemms_equals_the_operator(kind):
    a, b, c = MAPPED[kind]()
    mapping = map_to_intrinsic(c.op, VITA, "GEMM")
    assert isinstance(mapping, IntrinsicMapping), mapping
    rng = np.random.default_rng(len(kind))
    arrays = [rng.integers(-128, 128, t.shape, dtype=np.int8) for t in (a, b)]
    got = mapping.restore(as_gemms(mapping, {"A": arrays[0], "B": arrays[1]}))
    np.testing.assert_array_equal(got, reference(a, b, c, arrays))


def test_fig9_conv2d_fuses_the_pixels_into_the_rows_and_the_window_into_the_reduction():
    """TensorIR Fig. 9's mapping, here on NCHW: fuse(n, h, w) -> b, oc -> o, fuse(rc, ry, rx) -> k."""
    _, _, c = conv2d(n=2, c=3, oc=6, h=4, w=5, r=3)
    mapping = map_to_intrinsic(c.op, VITA, "GEMM")
    assert str(mapping) == ("GEMM: b <- fuse(i, y, x) (40), o <- fuse(o) (6), k <- fuse(rc, ry, rx) (27); "
                            "outer loops: none")
    assert [it.chi for it in mapping.groups["b"]] == [(1, 1, 0)] * 3     # output, inp, wgt
    assert mapping.shape("inp") == (1, 40, 27) and mapping.shape("wgt") == (1, 6, 27)


def test_a_group_or_batch_is_a_loop_around_separate_gemms():
    _, _, c = group_conv(groups=3)
    mapping = map_to_intrinsic(c.op, VITA, "GEMM")
    assert [it.var.name for it in mapping.outer] == ["g"] and mapping.outer[0].chi == (1, 1, 1)
    assert mapping.shape("acc") == (3, 16, 4)


def test_depthwise_has_no_gemm_mapping_and_says_why():
    """Depthwise: no iterator appears in the output and the weights only (the intrinsic's o), so no mapping:
    the channel is in every operand."""
    _, _, c = depthwise()
    result = map_to_intrinsic(c.op, VITA, "GEMM")
    assert isinstance(result, NotApplicable)
    assert "no iterator of the operator appears where the intrinsic's index o does (characteristic vector " \
           "(1, 0, 1))" in result.reason


def test_an_operator_that_is_not_a_multiply_accumulate_is_refused_by_the_matcher():
    a = te.placeholder((4, 8), "int8", name="A")
    r = te.reduce_axis(8, "r")
    c = te.compute((4,), lambda i: te.sum(te.cast(a[i, r], "int32"), axis=r), name="C")
    result = map_to_intrinsic(c.op, VITA, "GEMM")
    assert isinstance(result, NotApplicable) and result.check == "compute"


def test_the_canonical_gemm_of_the_element_types_is_what_a_cpu_kind_maps_onto():
    """A target whose GEMM is a schedule (the CPU's) maps onto c[m, n] += i32(a[m, k]) * i32(b[n, k]) of the
    operator's own element types; another pair of types is a compute mismatch the matcher names."""
    from compiler.ops.contractions import contraction
    from compiler.passes.reindex import canonical_gemm

    op = contraction("conv1d", {"W": 8, "IC": 4, "OC": 6}, ("uint8", "int8")).out.op
    mapping = map_to_intrinsic(op, *canonical_gemm("uint8", "int8"))
    assert str(mapping) == ("GEMM: m <- fuse(n, w) (8), n <- fuse(o) (6), k <- fuse(rc, rw) (12); "
                            "outer loops: g (1)")
    refused = map_to_intrinsic(op, *canonical_gemm("int8", "int8"))
    assert isinstance(refused, NotApplicable) and "dtype mismatch" in refused.reason


def test_depthwise_maps_onto_the_lane_wise_dot_channels_on_lanes():
    """The canonical DOT, c[m, n] += a[m, n, k] * b[n, k], gives every lane its own data: the depthwise
    channel (in every operand) is its n, the pixels its m, the window its k; computed that way it equals the
    operator. A conv's output channel (in the output and weights only) has no place in it."""
    from compiler.passes.reindex import canonical_dot

    a, b, c = depthwise(c=4, h=4, w=5)
    spec, name = canonical_dot("int8", "int8")
    mapping = map_to_intrinsic(c.op, spec, name)
    assert str(mapping) == ("DOT: m <- fuse(y, x) (20), n <- fuse(q) (4), k <- fuse(ry, rx) (9); "
                            "outer loops: none")
    rng = np.random.default_rng(3)
    arrays = [rng.integers(-128, 128, t.shape, dtype=np.int8) for t in (a, b)]
    data = mapping.reindex({"A": arrays[0], "B": arrays[1]}, "a").astype(np.int64)
    weight = mapping.reindex({"A": arrays[0], "B": arrays[1]}, "b").astype(np.int64)
    got = mapping.restore(np.einsum("lmnk,lnk->lmn", data, weight).astype(np.int32))
    np.testing.assert_array_equal(got, reference(a, b, c, arrays))
    refused = map_to_intrinsic(conv1d()[2].op, spec, name)
    assert isinstance(refused, NotApplicable)   # conv1d: no channel in every operand, for the DOT's n
    assert "no iterator of the operator appears where the intrinsic's index n does" in refused.reason


def test_a_loop_of_one_iteration_fits_anywhere():
    """A depthwise conv written as a grouped one has an output-channel loop of one iteration per group: it
    does not keep the operator off the DOT (it is an outer loop of extent 1)."""
    from compiler.ops.contractions import contraction
    from compiler.passes.reindex import canonical_dot

    op = contraction("depthwise", {"H": 5, "W": 5, "C": 8}, ("uint8", "int8")).out.op
    mapping = map_to_intrinsic(op, *canonical_dot("uint8", "int8"))
    assert [(it.var.name, it.extent) for it in mapping.outer] == [("o", 1)]
    assert (mapping.extent("m"), mapping.extent("n"), mapping.extent("k")) == (25, 8, 9)
