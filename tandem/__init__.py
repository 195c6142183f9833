"""The Tandem driver: what a user touches first.

The ``tandem`` command line (demo, compile, run, isa, sweep, report), the compile + simulate +
validate flows that check every result against numpy and real CPU runs, workload tables, design-
space sweeps over hardware parameters x workloads, and reports. This is the only layer that imports
all three of ``isa``, ``compiler`` and ``sim``.
"""

__version__ = "0.1.0"
