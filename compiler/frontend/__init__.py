"""Frontends: programs written for other compilers, read into Tandem's loop IR.

- ``tvm_import``: a lowered TVM PrimFunc (apache-tvm 0.27's TIR) as a ``PrimFunc`` of the loop IR, for the
  differential tests of Tandem's passes against TVM's own (tests/compiler/test_tvm_differential.py).
"""
