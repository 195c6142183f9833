"""Simulator of a DianNao-style multicore accelerator card.

A card of clusters of cores (4x4 by default) with a global memory (GMEM), per-cluster shared memory
(SMEM, 2 MB), per-core neuron and weight memories (NMEM 512 KB, WMEM 1 MB), tensor units (vector
binary/unary, conv/matmul), DMA between every pair of memory spaces, scalar control for SPMD kernels
(core and cluster ids, loops, branches) and barriers. Contention on GMEM and SMEM is modelled;
default timing parameters are documented assumptions in a TOML config, each with its source.
"""
