"""VITA end to end: schedule -> vita pipeline -> program -> sim/vita, bit-exact with a numpy int8 conv2d /
dense (int32 accumulate, arithmetic shift, clip), whatever the tiling."""

import functools

import numpy as np
import pytest

import isa
from compiler.backend.vita import build_vita
from compiler.ops import vita
from compiler.pipeline import build
from compiler.target import Target
from sim.vita.machine import simulate

VITA = isa.load_isa("vita")
TARGET = Target("vita", VITA)
vconv2d = functools.partial(vita.conv2d, spec=VITA)
vdense = functools.partial(vita.dense, spec=VITA)


def _run(vs, inputs, config="vta-default"):
    func = build(vs.schedule, vs.args, target=TARGET)
    kernel = build_vita(func, VITA)
    result = simulate(kernel.program, kernel.dram_image(inputs), config)
    return kernel.read(result.dram, vs.args[-1].name).reshape(vs.args[-1].shape), result


LAYERS = [
    (vita.ConvShape(8, 8, 32, 32, 3, 1, 1), vita.Tiling(4, 1, 1), False),
    (vita.ConvShape(9, 9, 32, 64, 3, 2, 1), vita.Tiling(5, 2, 2), False),
    (vita.ConvShape(6, 6, 48, 32, 1, 1, 0), vita.Tiling(3, 1, 3), True),
    (vita.ConvShape(7, 7, 32, 32, 3, 1, 1), None, False),
]


@pytest.mark.parametrize("vthreads", [0, 2])
@pytest.mark.parametrize("layer,tiling,relu", LAYERS)
def test_conv2d_on_the_simulator_equals_numpy(layer, tiling, relu, vthreads):
    # with virtual threads the schedule chooses the tiling (and the axis the threads split)
    vs = vconv2d(layer, relu=relu, tiling=None if vthreads else tiling, vthreads=vthreads)
    rng = np.random.default_rng(3)
    data = rng.integers(-128, 128, vs.args[0].shape, dtype=np.int8)
    kernel = rng.integers(-128, 128, vs.args[1].shape, dtype=np.int8)
    got, result = _run(vs, [data, kernel])
    np.testing.assert_array_equal(got, vita.conv2d_reference(data, kernel, layer, 8, relu))
    assert result.counters["gemm_counter"] > 0


def test_dense_on_the_simulator_equals_numpy():
    m, n, k = 8, 48, 64
    vs = vdense(m, n, k, tiling=vita.Tiling(4, 1, 2))
    rng = np.random.default_rng(4)
    data = rng.integers(-128, 128, vs.args[0].shape, dtype=np.int8)
    weight = rng.integers(-128, 128, vs.args[1].shape, dtype=np.int8)
    got, _ = _run(vs, [data, weight])
    np.testing.assert_array_equal(got, vita.dense_reference(data, weight))


def test_same_program_same_cycles():
    vs = vconv2d(vita.ConvShape(8, 8, 32, 32, 3, 1, 1), tiling=vita.Tiling(4, 1, 1))
    rng = np.random.default_rng(5)
    inputs = [rng.integers(-128, 128, a.shape, dtype=np.int8) for a in vs.args[:2]]
    first, second = _run(vs, inputs)[1], _run(vs, inputs)[1]
    assert first.cycles == second.cycles


@pytest.mark.parametrize("ic,oc", [(3, 16), (16, 40), (20, 15)])
def test_the_layout_transforms_pad_to_whole_blocks_and_come_back(ic, oc):
    """pack_conv puts NCHW/OIHW arrays in the packed layouts with zero lanes past IC and OC, unpack_conv
    drops them again; a conv2d schedule of such a layer runs bit-exact on the padded arrays (COM)."""
    rng = np.random.default_rng(ic * oc)
    layer = vita.ConvShape(6, 6, ic, oc, 3, 1, 1)
    x = rng.integers(-128, 128, (1, ic, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (oc, ic, 3, 3), dtype=np.int8)
    data, kernel = vita.pack_conv(x, w, VITA)
    assert data.shape == (1, -(-ic // 16), 6, 6, 1, 16) and kernel.shape == (-(-oc // 16), -(-ic // 16), 3, 3,
                                                                               16, 16)
    back = vita.unpack_conv(data, kernel, layer)
    assert np.array_equal(back[0], x) and np.array_equal(back[1], w)
    assert data.sum(dtype=np.int64) == x.sum(dtype=np.int64)   # everything else is zero
    vs = vconv2d(layer, 8)
    assert [tuple(a.shape) for a in vs.args[:2]] == [data.shape, kernel.shape]
    out, _ = _run(vs, [data, kernel])
    want = vita.conv2d_reference(data, kernel, layer, 8)
    np.testing.assert_array_equal(out, want)
    assert not out[:, -1, ..., oc % 16 or 16:].any()   # the extra output lanes of the last block: zero
    assert vita.unpack_out(out, "conv2d", oc).shape == (1, oc, 6, 6)
