"""UNIT's Inspector (compiler/passes/inspector.py) on conv2d, GEMM and operations VNNI cannot compute.

The golden cases are the paper's: conv2d in NCHW[4]c / KCRS[16]k[4]c maps the instruction's 16 lanes to the
packed output channels and its 4-wide reduction to the packed input channels (UNIT Fig. 5), with every
register bound to the access the paper lists; GEMM maps them the same way on the packed operand. Each
inapplicable case must be rejected with the reason that names the failed check.
"""

from __future__ import annotations

import pytest

import isa
from compiler import te
from compiler.ir import cast
from compiler.ops.cpu import conv2d, gemm
from compiler.ops.nn import ConvShape
from compiler.passes.inspector import Mapping, NotApplicable, inspect_op

X86 = isa.load_isa("x86")


def vnni(op) -> Mapping | NotApplicable:
    return inspect_op(op, X86, "vpdpbusd_512")


def test_conv2d_maps_lanes_to_output_channels_and_the_group_to_input_channels() -> None:
    """The data in blocks of 16 channels (``data_lanes``): the reduction over the blocks ``cb``, then the
    groups ``cg`` of 4 in a block."""
    sched = conv2d(ConvShape(14, 14, 64, 32, 3, 1, 1), spec=X86)
    mapping = sched.mapping
    assert isinstance(mapping, Mapping)
    assert str(mapping) == (
        "x86.vpdpbusd_512: i -> ki (16 of 16), j -> ci (4 of 4); "
        "a = data[n, cb, y + r, x + s, cg*4 + ci], b = kernel[ko, cb*4 + cg, r, s, ki, ci], "
        "c = conv.local[n, ko, y, x, ki], d = conv.local[n, ko, y, x, ki]"
    )
    assert mapping.lanes == {"a": ("i", "j"), "b": ("i", "j"), "c": ("i",), "d": ("i",)}


def test_gemm_maps_lanes_to_packed_columns_and_the_group_to_k() -> None:
    mapping = gemm(32, 48, 64, spec=X86).mapping
    assert str(mapping) == (
        "x86.vpdpbusd_512: i -> ni (16 of 16), j -> kk (4 of 4); "
        "a = A[i, ko*4 + kk], b = B[no, ko, ni, kk], c = gemm.local[i, no, ni], d = gemm.local[i, no, ni]"
    )


def test_an_unpacked_gemm_maps_the_lanes_to_the_innermost_fitting_loop() -> None:
    """The subset test alone admits several mappings; innermost-first picks the output's last dimension."""
    a, b = te.placeholder((32, 64), "uint8", "A"), te.placeholder((64, 48), "int8", "B")
    k = te.reduce_axis(64, "k")
    c = te.compute(
        (32, 48), lambda i, j: te.sum(cast(a[i, k], "int32") * cast(b[k, j], "int32"), axis=[k]), name="C"
    )
    mapping = vnni(c.op)
    assert isinstance(mapping, Mapping)
    assert (mapping.loops["i"].var.name, mapping.loops["j"].var.name) == ("j", "k")


def _dot(a_dtype: str, b_dtype: str, k: int = 64, n: int = 48, body=None, combine=te.sum, m: int = 32):
    a, b = te.placeholder((m, k), a_dtype, "A"), te.placeholder((n, k), b_dtype, "B")
    r = te.reduce_axis(k, "r")
    body = body or (lambda i, j: cast(a[i, r], "int32") * cast(b[j, r], "int32"))
    return te.compute((m, n), lambda i, j: combine(body(i, j), axis=[r]), name="C"), a, b


REJECTED = {
    "signed activations": (lambda: _dot("int8", "int8")[0], "compute", "dtype mismatch"),
    "float operands": (lambda: _dot("float32", "float32", body=None)[0], "compute", "dtype mismatch"),
    "no reduction of width 4": (
        lambda: _dot("uint8", "int8", k=6)[0],
        "access",
        "no reduce loop whose extent is a multiple of 4",
    ),
    "no 16 output lanes": (
        lambda: _dot("uint8", "int8", n=10, m=12)[0],
        "access",
        "no spatial loop whose extent is a multiple of 16",
    ),
    "a sum of products is not a max": (
        lambda: _dot("uint8", "int8", combine=te.max)[0],
        "compute",
        "reduces with max",
    ),
    "an add is not a multiply": (lambda: _add_of_loads(), "compute", "opcode mismatch"),
    "not a reduction": (lambda: _elementwise(), "compute", "not a reduction"),
    "non-affine index": (lambda: _non_affine(), "access", "not affine"),
}


def _add_of_loads():
    c, a, b = _dot("uint8", "int8")
    r = c.op.reduce_axis[0]
    return te.compute(
        (32, 48), lambda i, j: te.sum(cast(a[i, r], "int32") + cast(b[j, r], "int32"), axis=[r]), name="C2"
    ).op


def _elementwise():
    a = te.placeholder((32, 64), "int32", "A")
    return te.compute((32, 64), lambda i, j: a[i, j] + a[i, j], name="E").op


def _non_affine():
    a, b = te.placeholder((32, 64), "uint8", "A"), te.placeholder((48, 64), "int8", "B")
    r = te.reduce_axis(64, "r")
    return te.compute(
        (32, 48),
        lambda i, j: te.sum(cast(a[i, (r * r) % 64], "int32") * cast(b[j, r], "int32"), axis=[r]),
        name="C",
    ).op


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_inapplicable_operations_are_rejected_with_a_reason(case: str) -> None:
    build, check, reason = REJECTED[case]
    op = build()
    result = vnni(op if not isinstance(op, te.Tensor) else op.op)
    assert isinstance(result, NotApplicable), result
    assert result.check == check
    assert reason in result.reason, result.reason
    assert str(result).startswith("vpdpbusd_512 is not applicable")
