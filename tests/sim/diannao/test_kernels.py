"""Hand-written SPMD kernels (baselines/diannao_kernels.py) on the simulated card equal numpy: the acceptance
kernels of the DianNao simulator — element-wise add of a (256, 56, 56) tensor over 16 cores, relu, a 3x3 conv,
a matmul — and the same add written as scalar loops."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from baselines.diannao_kernels import run_conv, run_elementwise, run_matmul

SHAPE = (256, 56, 56)


def bit_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_add_of_a_256x56x56_tensor_over_16_cores_is_bit_exact(dtype):
    run = run_elementwise("vadd", SHAPE, dtype, cores=16)
    assert bit_equal(run.output, run.reference)
    result = run.result
    assert result.scalar_instructions < result.tensor_instructions * 3
    assert result.instructions["vadd"] >= 16
    size = 2 if dtype == "f16" else 4
    total = int(np.prod(SHAPE)) * size
    assert result.bytes_moved == {"GMEM->NMEM": 2 * total, "NMEM->GMEM": total}


def test_the_add_over_16_cores_is_bound_by_the_shared_gmem_bandwidth():
    run16 = run_elementwise("vadd", SHAPE, "f32", cores=16).result
    run1 = run_elementwise("vadd", SHAPE, "f32", cores=1).result
    from sim.diannao.config import load_config

    moved = sum(run16.bytes_moved.values())
    bound = moved / load_config("default").gmem_bytes_per_cycle
    assert bound <= run16.cycles < 1.05 * bound       # within 5% of the GMEM roofline
    assert run16.cycles < run1.cycles                 # more cores still help: they hide each other's latency


@pytest.mark.parametrize(("op", "dtype"), [("vadd", "i8"), ("vsub", "i16"), ("vmul", "i32"), ("vmax", "f16"),
                                           ("vmin", "f32"), ("relu", "i8"), ("relu", "f16")])
def test_elementwise_kernels_over_4_cores_are_bit_exact(op, dtype):
    run = run_elementwise(op, (16, 32, 32), dtype, cores=4)
    assert bit_equal(run.output, run.reference)


def test_relu_of_a_256x56x56_tensor_over_16_cores_is_bit_exact():
    run = run_elementwise("relu", SHAPE, "f32", cores=16)
    assert bit_equal(run.output, run.reference)
    assert run.result.instructions["relu"] >= 16


def test_the_add_as_scalar_loops_gives_the_same_result_with_many_more_cycles():
    vector = run_elementwise("vadd", SHAPE, "f32", cores=16)
    scalar = run_elementwise("vadd", SHAPE, "f32", cores=16, scalar=True)
    assert bit_equal(scalar.output, vector.output)
    assert scalar.result.instructions.get("vadd", 0) == 0
    assert scalar.result.instructions["fadd"] == np.prod(SHAPE)
    assert scalar.result.scalar_instructions > 100 * vector.result.scalar_instructions
    assert scalar.result.cycles > 5 * vector.result.cycles


@pytest.mark.parametrize(("op", "dtype"), [("vadd", "i16"), ("vmul", "i8"), ("vmax", "f16"), ("relu", "f32"),
                                           ("relu", "i32"), ("vmin", "i32")])
def test_scalar_loops_match_the_vector_instructions(op, dtype):
    vector = run_elementwise(op, (4, 16, 32), dtype, cores=4)
    scalar = run_elementwise(op, (4, 16, 32), dtype, cores=4, scalar=True)
    assert bit_equal(scalar.output, vector.output)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_a_3x3_conv_of_a_small_layer_matches_numpy(dtype):
    run = run_conv(18, 18, 32, 64, 3, dtype, cores=16)
    tol = 2e-2 if dtype == "f16" else 1e-4  # f32 accumulation rounded once to T, relative to the output scale
    scale = np.abs(run.reference.astype(np.float64)).max()
    assert np.abs(run.output.astype(np.float64) - run.reference.astype(np.float64)).max() <= tol * scale
    assert run.result.instructions["conv"] == 16
    assert run.result.utilization("tfu") > 0


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_a_matmul_matches_numpy(dtype):
    run = run_matmul(128, 96, 64, dtype, cores=16)
    tol = 2e-2 if dtype == "f16" else 1e-5
    scale = np.abs(run.reference.astype(np.float64)).max()
    assert np.abs(run.output.astype(np.float64) - run.reference.astype(np.float64)).max() <= tol * scale
    assert run.result.instructions["matmul"] == 16


@pytest.mark.parametrize(("op", "ref"), [("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("tanh", np.tanh)])
def test_activations_without_a_fast_path_run_through_the_spec(op, ref):
    """sigmoid and tanh have no numpy fast path: the machine runs them with the generic executor."""
    from sim.diannao.machine import Card

    card = Card(spec=isa.load_isa("diannao"))
    x = np.linspace(-6, 6, 1024, dtype=np.float32)
    buf = card.to_gmem(x)
    program = isa.assemble("\n".join([
        ".isa diannao", ".text",
        f"memcpy dst_space=NMEM, src_space=GMEM, dst=0, src={buf.addr}, len=4096, count=1",
        f"{op}.f32 dst=0, n=1024",
        f"memcpy dst_space=GMEM, src_space=NMEM, dst={buf.addr}, src=0, len=4096, count=1", "halt"]) + "\n")
    result = card.launch(program, cores=1)
    assert np.allclose(card.from_gmem(buf), ref(x.astype(np.float64)), rtol=1e-6, atol=1e-6)
    assert result.instructions[op] == 1
