"""TensorIR's kinds (``compiler.ops.contractions``) on TVM: the convolutions tensorized with vpdpbusd on
Tandem's packed layouts, a batch matmul as tensorized GEMMs, a depthwise conv on TVM's NCHW16c schedule."""

from __future__ import annotations

from typing import Any

import numpy as np

from baselines.cpu_layers import GemmSpec
from baselines.peer import Runner, check_threads
from baselines.tvm_peer import import_tvm, largest_divisor
from baselines.tvm_vnni_peer import TVM_VNNI_PEER, TvmVnniPeer, x86_intrinsics
from compiler.ops import cpu as cpu_ops


def prepare_contraction_tvm(op: Any, data: np.ndarray, weight: np.ndarray, threads: int) -> Runner | str:
    """TVM 0.27 on one of TensorIR's kinds (``compiler.ops.contractions``), on the plain u8 data and s8
    weights, its callable returning the exact int32 result in the kind's plain layout; or, where TVM cannot
    run it here, the reason. The convolutions (conv1d to conv3d, dilated, grouped, transposed as the conv of
    the spread input) are TE computes on Tandem's packed layouts (``compiler.ops.cpu.pack_window``: channels
    in blocks of 4, output channels of 16), tensorized with vpdpbusd by ``Schedule.tensorize`` (one compiled
    function, called per group); a batch matmul runs the tensorized GEMM per batch. TVM's VNNI intrinsic
    broadcasts its data operand to all 16 lanes, so it has no mapping for a depthwise conv: that runs TVM's
    NCHW16c schedule, the 16 channels a vectorized loop of int32 multiply-adds. Packing happens before the
    timed call; unpacking the blocked output is inside it."""
    vnni = TVM_VNNI_PEER
    reason = vnni.available()
    if reason:
        return reason
    check_threads("prepare_contraction_tvm", threads)
    if op.kind == "batch_matmul":
        batch, m, k = data.shape
        runs = [vnni.prepare_gemm(GemmSpec(m, weight.shape[1], k), data[q], weight[q], threads)
                for q in range(batch)]
        return lambda: np.stack([run() for run in runs])
    window, groups = cpu_ops.window_of(op)
    layout_data, layout_weight = op.layout_data(data), op.layout_weight(weight)
    if window.depthwise:
        run = _tvm_depthwise(window, layout_data[:, :, 0], layout_weight[:, 0, 0], threads)
        return lambda: op.layout_out(run())
    intrinsic = vnni._ready_intrinsic()
    packed = [cpu_ops.pack_window(layout_data[:, g], layout_weight[g], blocked=cpu_ops.U8.group)
              for g in range(groups)]
    sch = _vnni_window_schedule(window, packed[0][0].shape, packed[0][1].shape, intrinsic)
    call = vnni._compiled(sch, threads)
    tvm = import_tvm()
    dev = tvm.cpu()
    shape = (window.n, packed[0][1].shape[0], *window.out, 16)
    args = [[tvm.runtime.tensor(a, dev) for a in pair] for pair in packed]
    outs = [tvm.runtime.tensor(np.zeros(shape, np.int32), dev) for _ in packed]

    def run() -> np.ndarray:
        for pair, out in zip(args, outs, strict=True):
            call(*pair, out)
        blocks = [cpu_ops.unpack_window(out.numpy(), window.oc) for out in outs]
        return op.layout_out(np.stack(blocks, axis=1))

    return run


def _vnni_window_schedule(window: Any, data_shape: tuple[int, ...], kernel_shape: tuple[int, ...],
                          intrinsic: str) -> Any:
    """A convolution of 1 to 3 dimensions with stride and dilation on packed data [N, C/4, *sizes, 4] and
    kernel [K/16, C/4, *k, 16, 4], tensorized as ``_vnni_conv_schedule`` does the 2-D one."""
    tvm = import_tvm()
    x86_intrinsics()
    from tvm import te

    dims, s, dil = len(window.sizes), window.s, window.dil
    x = te.placeholder(data_shape, "uint8", name="data")
    w = te.placeholder(kernel_shape, "int8", name="kernel")
    rc, ri = te.reduce_axis((0, kernel_shape[1]), "rc"), te.reduce_axis((0, 4), "ri")
    taps = [te.reduce_axis((0, window.k), f"r{d}") for d in range(dims)]

    def body(*index):
        n, ko, *xs, ki = index
        at = [p * s + t * dil for p, t in zip(xs, taps, strict=True)]
        return te.sum(x[(n, rc, *at, ri)].astype("int32") * w[(ko, rc, *taps, ki, ri)].astype("int32"),
                      axis=[rc, *taps, ri])

    y = te.compute((window.n, kernel_shape[0], *window.out, 16), body, name="conv")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    conv = sch.get_sblock("conv")
    n, ko, *spatial, ki, lrc = sch.get_loops(conv)[: 4 + dims]
    ltaps, lri = sch.get_loops(conv)[4 + dims: 4 + 2 * dims], sch.get_loops(conv)[-1]
    jo, ji = sch.split(spatial[-1], [None, largest_divisor(window.out[-1], TvmVnniPeer.ROW_TILE)])
    sch.reorder(n, ko, *spatial[:-1], jo, lrc, *ltaps, ji, ki, lri)
    sch.reverse_compute_at(sch.cache_write(conv, 0, "global"), jo)
    sch.parallel(sch.fuse(n, ko, *spatial[:-1]))
    sch.unroll(ji)
    sch.decompose_reduction(conv, lrc)
    sch.tensorize(ki, intrinsic)
    return sch


def _tvm_depthwise(window: Any, data: np.ndarray, weight: np.ndarray, threads: int) -> Runner:
    """TVM's depthwise conv on NCHW16c: data [N, C/16, Hp, Wp, 16] u8, kernel [C/16, k, k, 16] s8, the 16
    channels of each output a vectorized loop of int32 multiply-adds, 8 outputs along W unrolled, the fused
    batch x channel-block x row loop parallel; its output unpacked to [N, C, OH, OW] inside the call."""
    tvm = import_tvm()
    from tvm import te

    n, c, hp, wp = data.shape
    c16, k, s, dil = -(-c // 16), window.k, window.s, window.dil
    d = np.zeros((n, c16 * 16, hp, wp), np.uint8)
    d[:, :c] = data
    wt = np.zeros((c16 * 16, k, k), np.int8)
    wt[:c] = weight
    packed_data = np.ascontiguousarray(d.reshape(n, c16, 16, hp, wp).transpose(0, 1, 3, 4, 2))
    packed_weight = np.ascontiguousarray(wt.reshape(c16, 16, k, k).transpose(0, 2, 3, 1))
    oh, ow = window.out
    x = te.placeholder(packed_data.shape, "uint8", name="data")
    w = te.placeholder(packed_weight.shape, "int8", name="kernel")
    ry, rx = te.reduce_axis((0, k), "ry"), te.reduce_axis((0, k), "rx")
    y = te.compute((n, c16, oh, ow, 16), lambda b, cb, i, j, ci: te.sum(
        x[b, cb, i * s + ry * dil, j * s + rx * dil, ci].astype("int32")
        * w[cb, ry, rx, ci].astype("int32"), axis=[ry, rx]), name="depthwise")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, w, y]))
    block = sch.get_sblock("depthwise")
    b, cb, i, j, ci, lry, lrx = sch.get_loops(block)
    jo, ji = sch.split(j, [None, largest_divisor(ow, TvmVnniPeer.ROW_TILE)])
    sch.reorder(b, cb, i, jo, lry, lrx, ji, ci)
    sch.reverse_compute_at(sch.cache_write(block, 0, "global"), jo)
    sch.parallel(sch.fuse(b, cb, i))
    sch.unroll(ji)
    sch.vectorize(ci)
    sch.decompose_reduction(block, lry)
    run = TVM_VNNI_PEER._runner(sch, [packed_data, packed_weight], (n, c16, oh, ow, 16), threads)
    return lambda: cpu_ops.unpack_window(run(), c)
