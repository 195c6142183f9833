"""Peer implementations of int8 CPU convolution and GEMM, against which our compiler's kernels are compared.

The UNIT reproduction compares our compiled u8 x s8 -> s32 convolution and GEMM with what established
libraries do on the same numpy inputs. Every peer turns one layer plus its inputs into a callable that runs
one inference (``prepare_conv`` / ``prepare_gemm``); all compilation, session creation and weight
re-layout happen before, so ``time_callable`` times inference only.

Peers (``PEERS``; ``ALL_PEERS`` adds ``TVM_VNNI_PEER`` and the timing-only ``QLINEAR_PEER``):

- ``numpy``: im2col (``sliding_window_view``) + an int32 ``matmul``. numpy's BLAS has no integer matmul, so
  this runs numpy's own single-threaded loops and ``threads`` is ignored. ``conv_reference`` and
  ``gemm_reference`` (int64 accumulation, then int32) are the bit-exact references everything is checked
  against.
- ``onnxruntime``: an in-memory ONNX model with ``ConvInteger`` (x uint8 [1, c, h, w], w int8 [k, c, r, r],
  y int32) and ``MatMulInteger`` (A uint8 [m, k], B int8 [k, n] -- ``b`` is transposed before the timed
  call, y int32). onnxruntime 1.31 accepts int8 weights for both (checked: bit-exact with the references),
  so the integer operators give the exact int32 result and no workaround is needed. Weights are graph
  initializers so that onnxruntime can prepack them; only the data / A tensor is fed.
- ``tvm``: ``tvm.topi.nn.conv2d_nchw`` with ``out_dtype="int32"`` (a TE compute), ``te.create_prim_func``,
  a hand-written ``tvm.s_tir.Schedule`` (tile output channels by up to 16 and the output row by up to 16
  and vectorize it, accumulate in a local buffer, parallelize the fused channel-block x row loop), built by
  ``tvm.compile`` for ``llvm`` with the host cpu. The GEMM is a TE compute scheduled the same way.
- ``onnxruntime-fp32`` (``FP32_PEER``, not exact): onnxruntime's fp32 ``Conv`` / ``MatMul`` (MLAS, its
  own kernels standing in for oneDNN's) on float32 operands, PolyDL's setting.
- ``onnxruntime-qlinear`` (timing only, ``exact = False``): ``QLinearConv`` / ``QLinearMatMul`` with u8 x s8
  inputs and a uint8 output, scales 1 except ``y_scale = 2**shift`` and zero points 0, so its output is
  ``clip(round_half_even(acc / 2**shift), 0, 255)`` (``requantize``) -- onnxruntime's requantizing kernel,
  which is what the UNIT paper compares against. On a zen4 host it is an order of magnitude faster than
  ``ConvInteger``, which onnxruntime runs as a generic im2col + integer GEMM.
- ``tvm-vnni`` (``TVM_VNNI_PEER``, in ``ALL_PEERS`` only, exact): TVM's VNNI path, where it works here (see
  below). The conv on Tandem's packed layouts (``compiler.ops.cpu.pack_conv`` in blocks of 4 channels: data
  [1, C/4, H+2p, W+2p, 4] u8 zero-padded, kernel [K/16, C/4, R, S, 16, 4] s8, output [1, K/16, OH, OW, 16]
  s32) and the GEMM (A [M, K/4, 4], B [N/16, K/4, 16, 4], output [M, N/16, 16]) are TE computes whose
  innermost output-channel (16) and reduction (4) axes are the intrinsic's block, so no split is needed; the
  ``tvm.s_tir.Schedule`` tiles the output row (or GEMM rows) by up to 8 and unrolls it, accumulates in a
  cache-write buffer (scope ``global``: the intrinsic's desc buffers are global and tensorize rejects a
  ``local`` one), parallelizes the fused outer loops, then tensorizes the 16 x 4 loops. Packing is
  outside the timed call; unpacking the blocked output to NCHW / [m, n] (a transposing copy) is inside it.

TensorIR's kinds (``compiler.ops.contractions``): ``prepare_contraction`` runs them on onnxruntime
(ConvInteger / MatMulInteger, or the QLinear forms for timing), ``prepare_contraction_tvm`` on TVM (the
convolutions tensorized with vpdpbusd on Tandem's packed layouts, in 1 to 3 dimensions with stride, dilation
and groups; a batch matmul as tensorized GEMMs; a depthwise conv, which TVM's VNNI intrinsic cannot take, on
TVM's vectorized NCHW16c schedule).

Modules: ``cpu_layers`` (ConvSpec, GemmSpec, conv_inputs, gemm_inputs, conv_reference, gemm_reference,
requantize, qlinear_shift), ``peer`` (Peer, NumpyPeer, time_callable), ``onnxruntime_peer``
(OnnxRuntimePeer, prepare_contraction), ``tvm_peer`` (TvmPeer), ``tvm_vnni_peer`` (TvmVnniPeer,
TVM_VNNI_PEER, VnniProbe, tvm_vnni_probe, VNNI_INTRIN, VNNI_INTRIN_I8; TVM's VNNI notes),
``tvm_contractions`` (prepare_contraction_tvm); this one lists the peers (PEERS, QLINEAR_PEER, FP32_PEER,
ALL_PEERS).
"""

from __future__ import annotations

from baselines.onnxruntime_peer import OnnxRuntimePeer
from baselines.peer import NumpyPeer, Peer
from baselines.tvm_peer import TvmPeer
from baselines.tvm_vnni_peer import TVM_VNNI_PEER

PEERS: tuple[Peer, ...] = (NumpyPeer(), OnnxRuntimePeer(), TvmPeer())
#: onnxruntime's requantizing QLinearConv / QLinearMatMul: for timing only (``exact = False``).
QLINEAR_PEER: Peer = OnnxRuntimePeer(qlinear=True)
FP32_PEER: Peer = OnnxRuntimePeer(float32=True)   # PolyDL's setting: fp32 (experiments/polydl.py)
ALL_PEERS: tuple[Peer, ...] = (*PEERS, TVM_VNNI_PEER, QLINEAR_PEER)
