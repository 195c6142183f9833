"""Simulators that execute ISA programs, functionally (bit-exact) and in time (cycle-approximate).

Simulators read only ``isa`` objects: a compiled or hand-written ``Program`` and the ISA spec that
gives each instruction its semantics, constraints and timing. Timing uses simpy discrete events,
with units advancing a local clock between interactions so that the cost of simulating grows with
the number of instructions, not with cycles; the same input always gives the same cycles. Shared
machinery (memories, DMA, statistics, trace export, typed errors) sits beside one subpackage per
machine. This layer imports ``isa`` only and never imports ``compiler``.
"""
