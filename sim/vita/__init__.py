"""Simulator of VITA, a VTA-compatible tensor accelerator.

Fetch, load, compute (GEMM core and tensor ALU) and store modules connected by command queues and
the four finite-depth dependency-token FIFOs (load<->compute, compute<->store), a DRAM model with
latency and bandwidth shared between load and store, and a uop cache. Configs are TOML files (VTA's
default and the TVM paper's 32 KB variant). It reports cycles, per-module busy and stall time, GEMM
utilization, bytes moved and VTA-fsim-compatible counters, and reports a deadlock by naming which
module waits on which queue instead of hanging.
"""
