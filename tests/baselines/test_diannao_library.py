"""The vendor-library kernels (baselines/diannao_library.py), baseline (c) of seed 001's experiment: one
program per element-wise op and dtype runs every shape bit-exactly, with the tails of seed 001's Table II
shapes taken by run-time control flow; the conv pads on the host, uses no SMEM and matches a float64
reference within the rounding bound of an f32 accumulation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isa
from baselines.diannao_kernels import _copy
from baselines.diannao_library import conv2d, conv_program, elementwise, library_program
from sim.diannao.config import DiannaoConfig
from sim.diannao.machine import Card

NP = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f16": np.float16, "f32": np.float32}
VECTOR_ELEMS = 64


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def numpy_op(op: str, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "relu":
            return np.maximum(a, a.dtype.type(0))
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a, b)


def random_tensor(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    if dtype.startswith("f"):
        return (rng.standard_normal(shape) * 8).astype(NP[dtype])
    info = np.iinfo(NP[dtype])
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(NP[dtype])


def shares(total: int, cores: int) -> list[int]:
    """Elements per core when the first total % cores cores take one more."""
    return [total // cores + (i < total % cores) for i in range(cores)]


def small_card(**isa_params: int) -> Card:
    """A card with ISA parameter overrides (small memories make every tiling path run on small data)."""
    params = "\n".join(f"{k} = {v}" for k, v in isa_params.items())
    config = DiannaoConfig.from_text(f'name = "small"\nsummary = "test card"\n[isa_params]\n{params}\n')
    return Card(config, spec=config.spec_for(isa.load_isa("diannao")))


# ----------------------------------------------------------------------------------------------- element-wise
def test_the_add_of_a_255x55x55_tensor_over_16_cores_is_bit_exact_with_a_scalar_tail():
    """Table II's (255, 55, 55): 771375 elements = 48210 per core (the first 15 cores take 48211), so each
    core runs vector tiles for the bits of its count and a scalar loop over its last count % 64 elements."""
    shape = (255, 55, 55)
    run = elementwise("add", shape, "f32", cores=16)
    assert bit_equal(run.output, run.reference)
    counts = shares(int(np.prod(shape)), 16)
    assert run.result.instructions["fadd"] == sum(n % VECTOR_ELEMS for n in counts)
    nbytes = int(np.prod(shape)) * 4
    assert run.result.bytes_moved["GMEM->NMEM"] == 2 * nbytes
    assert run.result.bytes_moved["NMEM->GMEM"] == nbytes
    assert run.host_bytes == 0


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "i16", "i8"])
def test_the_add_of_table_ii_31x55x55_over_4_cores_is_bit_exact_in_every_dtype(dtype):
    run = elementwise("add", (31, 55, 55), dtype, cores=4, seed=1)
    assert bit_equal(run.output, run.reference)


@pytest.mark.parametrize(("op", "dtype", "shape"), [
    ("sub", "f32", (63, 55, 55)), ("mul", "f16", (127, 27, 27)), ("sub", "i8", (255, 27, 27)),
    ("mul", "i32", (31, 55, 55))])
def test_sub_and_mul_of_awkward_table_ii_shapes_are_bit_exact(op, dtype, shape):
    run = elementwise(op, shape, dtype, cores=8)
    assert bit_equal(run.output, run.reference)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_relu_is_bit_exact_on_negative_zero_nan_and_infinities_in_the_vector_part_and_the_tail(dtype):
    """Special values sit both in the first 64 elements (a vector tile) and in the last few (the scalar tail):
    relu is numpy's maximum(x, 0) everywhere, so every NaN stays a NaN with its bits and -0.0 comes out as
    numpy gives it for the dtype."""
    np_dt = NP[dtype]
    specials = np.array([-0.0, np.nan, -np.nan, np.inf, -np.inf, 0.0, -1.5, 2.5], np_dt)
    x = random_tensor(np.random.default_rng(7), (64 + 37,), dtype)
    x[3:3 + specials.size] = specials
    x[-specials.size:] = specials
    run = elementwise("relu", x.shape, dtype, cores=1, inputs=[x])
    assert bit_equal(run.output, numpy_op("relu", x, None))


def test_relu_of_the_255x55x55_tensor_over_16_cores_is_bit_exact_and_leaves_its_input_alone():
    shape = (255, 55, 55)
    x = random_tensor(np.random.default_rng(3), shape, "f32")
    run = elementwise("relu", shape, "f32", cores=16, inputs=[x.copy()])
    assert bit_equal(run.output, numpy_op("relu", x, None))
    assert run.result.instructions["relu"] >= 16


@pytest.mark.parametrize("dtype", ["i8", "i16", "i32"])
def test_integer_relu_is_bit_exact(dtype):
    run = elementwise("relu", (3, 7, 11), dtype, cores=2)
    assert bit_equal(run.output, run.reference)


@settings(max_examples=30, deadline=None)
@given(total=st.integers(1, 3000), cores=st.sampled_from([1, 2, 3, 4, 8, 16]),
       op=st.sampled_from(["add", "sub", "mul", "relu"]),
       dtype=st.sampled_from(["i8", "i16", "i32", "f16", "f32"]),
       seed=st.integers(0, 2**16))
def test_any_size_over_any_core_count_is_bit_exact_with_every_tiling_path(total, cores, op, dtype, seed):
    """With NMEM_BYTES = 4096 a tile is at most 2048 elements, so a few thousand elements run the whole-tile
    loop, the per-bit vector tiles and the scalar tail."""
    rng = np.random.default_rng(seed)
    a = random_tensor(rng, (total,), dtype)
    b = random_tensor(rng, (total,), dtype)
    inputs = [a] if op == "relu" else [a, b]
    run = elementwise(op, (total,), dtype, cores=cores, card=small_card(NMEM_BYTES=4096), inputs=inputs)
    assert bit_equal(run.output, numpy_op(op, a, b)), f"mismatch: {op=} {dtype=} {total=} {cores=} {seed=}"


def test_the_whole_tile_loop_runs_count_over_tile_times():
    """NMEM_BYTES = 4096 holds two buffers of 512 f32 elements: 1000 elements on one core are one whole tile
    of 512, then tiles for the bits 256, 128, 64 of 488, then a scalar tail of 40."""
    run = elementwise("add", (1000,), "f32", cores=1, card=small_card(NMEM_BYTES=4096))
    assert bit_equal(run.output, run.reference)
    assert run.result.instructions["vadd"] == 1 + 3
    assert run.result.instructions["fadd"] == 1000 % VECTOR_ELEMS


def test_one_program_serves_every_shape_of_an_op_and_dtype():
    runs = [elementwise("add", shape, "f16", cores=4) for shape in [(1,), (63, 5), (255, 27, 27)]]
    assert all(run.program is library_program("add", "f16") for run in runs)
    assert all(bit_equal(run.output, run.reference) for run in runs)
    assert library_program("add", "f16") is not library_program("sub", "f16")


def test_fewer_elements_than_cores_leave_the_other_cores_idle():
    run = elementwise("mul", (5,), "i16", cores=16)
    assert bit_equal(run.output, run.reference)
    assert run.result.instructions["mul"] >= 5


def test_the_caller_s_inputs_are_used_as_given():
    rng = np.random.default_rng(11)
    a, b = random_tensor(rng, (4, 100), "i32"), random_tensor(rng, (4, 100), "i32")
    run = elementwise("sub", (4, 100), "i32", cores=4, inputs=[a, b])
    assert bit_equal(run.output, a - b)


# ------------------------------------------------------------------------------------------------------- conv
def conv_reference(x: np.ndarray, wt: np.ndarray, stride: int, pad: int):
    """Exact (float64) conv of HWC ``x`` with (cout, k, k, cin) weights, and the same sum of |products|."""
    k = wt.shape[1]
    xp = np.pad(x.astype(np.float64), ((pad, pad), (pad, pad), (0, 0)))
    ho, wo = (xp.shape[0] - k) // stride + 1, (xp.shape[1] - k) // stride + 1
    exact = np.zeros((ho, wo, wt.shape[0]))
    magnitude = np.zeros_like(exact)
    w64 = wt.astype(np.float64)
    for ky in range(k):
        for kx in range(k):
            patch = xp[ky:ky + (ho - 1) * stride + 1:stride, kx:kx + (wo - 1) * stride + 1:stride]
            exact += patch @ w64[:, ky, kx, :].T
            magnitude += np.abs(patch) @ np.abs(w64[:, ky, kx, :]).T
    return exact, magnitude


def assert_within_accumulation_bound(run, x, wt, stride, pad, dtype):
    """Products are summed in f32 (an f16 product is exact in f32, an f32 product is rounded once) and the sum
    is rounded once to T: |out - exact| <= (n + 2) * 2**-24 * sum|x w| + u_T * |exact| + smallest_T / 2, with
    n = k * k * cin terms, u_T = 2**-11 for f16 and 0 for f32."""
    exact, magnitude = conv_reference(x, wt, stride, pad)
    n = wt.shape[1] * wt.shape[2] * wt.shape[3]
    u, tiny = (2.0**-11, 2.0**-25) if dtype == "f16" else (0.0, 2.0**-150)
    bound = (n + 2) * 2.0**-24 * magnitude * (1 + u) + u * np.abs(exact) + tiny
    err = np.abs(run.output.astype(np.float64) - exact)
    assert run.output.shape == exact.shape
    worst = np.unravel_index((err - bound).argmax(), err.shape)
    assert (err <= bound).all(), f"error {err[worst]} over the bound {bound[worst]} at {worst}"


def conv_inputs(h, w, cin, cout, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((h, w, cin)).astype(NP[dtype]),
            rng.standard_normal((cout, k, k, cin)).astype(NP[dtype]))


def test_a_55x55x64_to_32_conv_over_16_cores_pads_on_the_host_and_uses_no_smem():
    x, wt = conv_inputs(55, 55, 64, 32, 3, "f16")
    run = conv2d(55, 55, 64, 32, 3, 1, 1, "f16", cores=16, inputs=[x, wt])
    assert_within_accumulation_bound(run, x, wt, 1, 1, "f16")
    assert run.host_bytes == 57 * 57 * 64 * 2
    assert not any("SMEM" in key for key in run.result.bytes_moved)
    assert run.result.instructions["conv"] == 16   # 55 rows: 7 cores take 4, 9 cores take 3, one tile each


def test_one_core_tiles_the_rows_to_fit_nmem():
    """55 output rows of 57 x 64 f16 input rows do not fit 512 KiB of NMEM at once: several tiles."""
    x, wt = conv_inputs(55, 55, 64, 32, 3, "f16", seed=2)
    run = conv2d(55, 55, 64, 32, 3, 1, 1, "f16", cores=1, inputs=[x, wt])
    assert_within_accumulation_bound(run, x, wt, 1, 1, "f16")
    in_row, out_row = 57 * 64 * 2, 55 * 32 * 2
    assert 55 * out_row + 57 * in_row > 512 * 1024
    assert run.result.instructions["conv"] >= 2


@pytest.mark.parametrize(("h", "w", "cin", "cout", "k", "stride", "pad", "dtype", "cores"), [
    (9, 11, 8, 16, 3, 2, 1, "f32", 4),
    (12, 7, 5, 32, 1, 1, 0, "f16", 16),
    (10, 10, 3, 16, 5, 3, 2, "f32", 2),
])
def test_strides_pads_and_more_cores_than_rows_match_float64(h, w, cin, cout, k, stride, pad, dtype, cores):
    x, wt = conv_inputs(h, w, cin, cout, k, dtype, seed=h)
    run = conv2d(h, w, cin, cout, k, stride, pad, dtype, cores=cores, inputs=[x, wt])
    assert_within_accumulation_bound(run, x, wt, stride, pad, dtype)
    assert run.host_bytes == ((h + 2 * pad) * (w + 2 * pad) * cin * x.itemsize if pad else 0)
    ho = (h + 2 * pad - k) // stride + 1
    assert run.result.instructions["conv"] >= min(ho, cores)


def test_output_channel_blocks_and_row_tiles_when_wmem_and_nmem_are_small():
    """WMEM of 6 KiB holds the f16 weights of 32 of the 64 output channels (3x3x8 each): two blocks, each
    written to GMEM with a strided copy; NMEM of 8 KiB holds a few rows at a time."""
    x, wt = conv_inputs(20, 13, 8, 64, 3, "f16", seed=5)
    card = small_card(WMEM_BYTES=6144, NMEM_BYTES=8192)
    run = conv2d(20, 13, 8, 64, 3, 1, 1, "f16", cores=2, card=card, inputs=[x, wt])
    assert_within_accumulation_bound(run, x, wt, 1, 1, "f16")
    assert run.result.bytes_moved["GMEM->WMEM"] == 2 * wt.nbytes   # each of 2 cores loads both blocks once
    assert run.result.instructions["conv"] > 2 * 2


def test_the_conv_program_is_generated_once_per_layer_shape():
    assert conv_program(56, 56, 64, 64) is conv_program(56, 56, 64, 64)
    assert conv_program(56, 56, 64, 64) is not conv_program(55, 55, 64, 64)


# ----------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("call", "match"), [
    (lambda: elementwise("div", (64,)), "no element-wise op 'div'; it has add, sub, mul, relu"),
    (lambda: elementwise("add", (64,), "f64"), "no dtype 'f64'; dtypes are i8, i16, i32, f16, f32"),
    (lambda: library_program("max", "f32"), "no element-wise op 'max'"),
    (lambda: library_program("conv", "f16"), "conv has no shape-agnostic program"),
    (lambda: conv2d(8, 8, 4, 16, dtype="i8"), "operator 'conv' has no dtype 'i8'; dtypes are f16, f32"),
    (lambda: conv2d(8, 8, 4, 20), "expected cout a multiple of CONV_BLOCK = 16, but got cout = 20"),
    (lambda: elementwise("add", (0, 3)), r"expected a shape of at least one element, but got \(0, 3\)"),
    (lambda: elementwise("add", (4,), inputs=[np.zeros(4, np.float32)]), "expected 2 input array"),
    (lambda: elementwise("relu", (4,), inputs=[np.zeros(4, np.float64)]), "input 0: expected shape"),
])
def test_unsupported_ops_dtypes_and_shapes_raise_value_errors_naming_the_culprit(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------ the shared copy helper
def test_a_copy_whose_size_has_no_even_split_into_255_rows_copies_every_byte():
    """131074 = 2 x 65537 bytes: no count <= 255 of rows <= 65535 bytes divides it, so the copy is rows of
    65535 bytes and a shorter last row."""
    import isa

    nbytes = 2 * 65537
    card = Card(spec=isa.load_isa("diannao"))
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    src, dst = card.to_gmem(data), card.to_gmem(np.zeros(nbytes, np.uint8))
    text = "\n".join([".isa diannao", ".text", _copy("NMEM", "r31", 0, "GMEM", "r0", 0, nbytes),
                      _copy("GMEM", "r1", 0, "NMEM", "r31", 0, nbytes), "    halt"])
    result = card.launch(isa.assemble(text + "\n"), cores=1, args=[src.addr, dst.addr])
    assert bit_equal(card.from_gmem(dst), data)
    assert result.instructions["memcpyr"] == 4
