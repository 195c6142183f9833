"""The CPU's kernels for quantized models (issue 48): a conv or GEMM requantizes its int32 sums to 8 bits
inside the operator, as onnxruntime's x86-64 kernels compute it, with no pass of its own; a conv's padded
border holds the input's zero point, written by the packing (no padded copy of its own).

These run on any x86-64 CPU: with AVX-512 VNNI the sums are vpdpbusd's, without it the vectorized
schedule's (the default isa of each)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ops import reference
from compiler.ops.cpu import CpuTuning
from compiler.ops.cpu_epilogue import Requantize, ShiftClip
from compiler.ops.nn import ConvShape, GemmShape
from tandem.flows import cpu_layers
from tandem.flows.cpu import compile_layer, default_isa, run_cpu
from tandem.flows.cpu_layers import CpuOptions, Layer
from tandem.flows.cpu_tuning import tuning_space
from tandem.flows.flow import RunError
from tandem.flows.run import run
from tandem.flows.targets import load_target

UINT8 = Requantize(zero_point=100, lo=0, hi=255)
RELU_INT8 = Requantize(zero_point=-5, lo=-5, hi=127)   # int8 with a fused ReLU: the bounds start at the zero


@pytest.mark.parametrize(("layer", "requantize"), [
    (ConvShape(14, 14, 32, 40), UINT8), (ConvShape(9, 9, 24, 20, 3, 2, 1), RELU_INT8),
    (GemmShape(33, 40, 70), UINT8), (GemmShape(1, 100, 512), RELU_INT8)], ids=lambda x: str(x)[:20])
def test_the_sums_are_requantized_in_the_operator_as_onnxruntime_does(layer: Layer,
                                                                       requantize: Requantize) -> None:
    """Each output is numpy's sum plus the bias, wrapped to int32, then ``reference.requantize_scaled`` by
    its channel's scale (MLAS's arithmetic): bit for bit, also on the extremes of the data, the weights and
    the bias; 40, 20 and 100 channels leave padding lanes, which read the packed scale's zeros. Some outputs
    saturate at each bound and some lie between (the seeded scales span the 8-bit range)."""
    options = CpuOptions(bias=True, requantize=requantize)
    r = run_cpu(layer, threads=1, min_time=0.005, options=options)
    assert r.validated
    assert r.detail.startswith("bit-exact with numpy, also on 5 inputs at their types' extremes")
    assert r.params["epilogue"] == "requantize"
    data, weight, bias, scale = cpu_layers.inputs(layer, 0, options)
    sums = cpu_layers.reference(layer, data, weight, bias, options=CpuOptions(bias=True))
    channel = (-1, 1, 1) if isinstance(layer, ConvShape) else (-1,)
    want = reference.requantize_scaled(sums, scale.reshape(channel), requantize.zero_point, requantize.lo,
                                       requantize.hi)
    np.testing.assert_array_equal(r.output, want)
    assert (r.output == requantize.lo).any() and (r.output == requantize.hi).any()
    assert ((r.output > requantize.lo) & (r.output < requantize.hi)).mean() > 0.2


def test_the_requantization_is_fused_into_the_reduction_nest() -> None:
    """PolyDL's Algorithm 3: the scale is a parameter after the bias, and the requantization runs where the
    bias add would, in the operator's own loops (no nest of its own)."""
    layer, target = ConvShape(14, 14, 32, 32), load_target("cpu")
    options = CpuOptions(bias=True, requantize=UINT8)
    isa = default_isa(options, target)
    first = tuning_space(layer, options=options)[0]
    func, _ = compile_layer(layer, isa, first, 1, target, options)
    assert [p.name for p in func.params][-3:] == ["bias", "scale", func.params[-1].name]
    assert "12582912" in str(func.body)   # the rounding of a float32 to the nearest even integer
    plain, _ = compile_layer(layer, isa, first, 1, target, CpuOptions())
    assert str(plain.body).count("for ") == str(func.body).count("for ")


def test_a_fused_loop_leaves_the_requantization_fusable() -> None:
    """A tuning that fuses loops into the parallel one indexes the data with ``fused % 8`` and ``fused // 8``:
    quasi-affine, which Algorithm 3's analysis (ISL) takes, so the epilogue still fuses."""
    layer, target = ConvShape(8, 8, 16, 64), load_target("cpu")
    options = CpuOptions(bias=True, requantize=UINT8)
    fusing = CpuTuning(parallel=3, unroll_oc=2, unroll_x=4)   # oc blocks, rows and column tiles fused
    func, _ = compile_layer(layer, default_isa(options, target), fusing, 2, target, options)
    assert "%" in str(func.body) and "12582912" in str(func.body)


@pytest.mark.parametrize(("params", "match"), [
    ({"dtype": "float32"}, "epilogue=requantize requantizes integer sums; dtype float32 has none"),
    ({"bias": 0}, "epilogue=requantize takes a bias"),
    ({"ZP": 300}, r"the zero point ZP = 300 must lie in \[LO, HI\] = \[0, 255\]"),
    ({"LO": 10, "HI": 5}, r"\[LO, HI\] = \[10, 5\]"),
])
def test_a_bad_requantization_is_refused_before_it_compiles(params: dict, match: str) -> None:
    with pytest.raises(RunError, match=match):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "epilogue": "requantize", **params})


def test_the_inputs_of_a_requantizing_operator_are_named() -> None:
    with pytest.raises(RunError, match=r"\(data, weights, bias, scale\), but got"):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "epilogue": "requantize"},
            inputs=[np.zeros((8, 8), np.uint8), np.zeros((16, 8), np.int8), np.zeros(16, np.int32)])


def test_requantize_takes_a_bias_and_no_other_epilogue() -> None:
    with pytest.raises(ValueError, match="requantize takes an integer type"):
        CpuOptions(epilogue="relu", bias=True, requantize=UINT8)
    with pytest.raises(ValueError, match="requantize takes an integer type"):
        CpuOptions(requantize=UINT8)


def test_a_conv_border_holds_the_pad_value_written_by_the_packing() -> None:
    """A quantized input's zero point is what its padding holds: the sums over the border taps count it,
    so the result is numpy's conv of the input padded with that value, not with 0."""
    layer = ConvShape(9, 9, 5, 20, 3, 1, 1)
    options = CpuOptions(pad_value=77)
    r = run_cpu(layer, threads=1, min_time=0.005, options=options)
    assert r.validated and r.params["pad_value"] == 77
    data, weight = cpu_layers.inputs(layer, 0, options)
    zeros = cpu_layers.reference(layer, data, weight, options=CpuOptions())
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=77)
    np.testing.assert_array_equal(r.output, reference.conv2d(padded, weight).astype(np.int32))
    assert not np.array_equal(r.output, zeros)


@pytest.mark.parametrize(("params", "match"), [
    ({"op": "gemm", "pad_value": 3}, "pad_value is the padded border of a conv2d's data; gemm has none"),
    ({"pad_value": 256}, r"pad_value must be an integer of the data's type uint8 \(0..255\), but got 256"),
    ({"pad_value": 1, "dtype": "float32"}, "pad_value is for integer data"),
])
def test_a_bad_pad_value_is_refused(params: dict, match: str) -> None:
    op = params.pop("op", "conv2d")
    layer = {"M": 8, "N": 16, "K": 8} if op == "gemm" else {"H": 6, "W": 6, "IC": 4}
    with pytest.raises(RunError, match=match):
        run(op, load_target("cpu"), {**layer, **params})


@pytest.mark.parametrize(("layer", "shift"), [(ConvShape(14, 14, 32, 40), ShiftClip(12, 0, 127)),
                                              (GemmShape(33, 40, 70), ShiftClip(9, -128, 127))],
                         ids=["conv-relu", "gemm"])
def test_a_power_of_two_requantization_is_a_shift_and_clip_in_the_operator(layer: Layer, shift: ShiftClip
                                                                           ) -> None:
    """A power-of-two int8 network's epilogue (``epilogue=shift``): the sum plus the bias (which holds the
    rounding constant) shifted right and clipped, bit for bit numpy's ``shift_clip``, no scale input."""
    options = CpuOptions(bias=True, requantize=shift)
    r = run_cpu(layer, threads=1, min_time=0.005, options=options)
    assert r.validated and r.params["epilogue"] == "shift"
    data, weight, bias = cpu_layers.inputs(layer, 0, options)
    sums = cpu_layers.reference(layer, data, weight, bias, options=CpuOptions(bias=True))
    want = reference.shift_clip(sums, shift.shift, bounds=(shift.lo, shift.hi))
    np.testing.assert_array_equal(r.output, want)
    assert (r.output == shift.lo).any() and (r.output == shift.hi).any()


def test_the_shift_does_not_take_the_stride():
    """The shift epilogue's parameter is ``shift``: a conv's ``S`` stays its stride."""
    r = run("conv2d", load_target("cpu"), {"H": 7, "W": 7, "IC": 3, "OC": 16, "S": 2, "epilogue": "shift",
                                           "shift": 6, "threads": 1, "min_time": 0.005})
    assert r.validated and r.output.shape == (1, 16, 4, 4)
    with pytest.raises(RunError, match=r"shift = 40 must lie in \[0, 31\)"):
        run("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 8, "epilogue": "shift", "shift": 40})
