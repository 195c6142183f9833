"""Compiler passes: one module per pass, one public function named after the pass (STYLE rule 4).

The order in which a target runs them is in ``compiler.pipeline``.
"""

from compiler.passes.flatten import flatten
from compiler.passes.loop_partition import loop_partition
from compiler.passes.preprocess import fold_padding, preprocess
from compiler.passes.share_smem import share_smem
from compiler.passes.simplify import simplify
from compiler.passes.tensorize import tensorize

__all__ = ["flatten", "fold_padding", "loop_partition", "preprocess", "share_smem", "simplify", "tensorize"]
