"""Baselines: what Tandem's compiled kernels are compared with, kept out of the driver.

- ``diannao_library``: the vendor-style hand-written DianNao library (seed 001's baseline (c));
- ``diannao_kernels``: hand-assembled DianNao kernels (vadd, matmul, conv) for the simulator's tests and
  ``tandem demo``;
- ``vita_gemm``: a hand-assembled, double-buffered VITA GEMM (the TVM paper's Sec. 3.5 pattern);
- ``cpu_peers``: the CPU experiment's peers on the same inputs (TVM 0.27 with and without its own VNNI
  schedule, onnxruntime, numpy): the list of them, and the overview; ``cpu_layers`` (the layers, their
  inputs and exact references), ``peer`` (the Peer interface, timing, the numpy peer), ``onnxruntime_peer``,
  ``tvm_peer``, ``tvm_vnni_peer`` (with its subprocess probe) and ``tvm_contractions`` (TensorIR's kinds
  on TVM) hold them.

Layer rule: baselines import isa/, compiler/ and sim/, never tandem/ (tests/test_layers.py enforces it);
like tandem/, they sit at the edge and may load a built-in spec by name.
"""
