"""Compiler passes: one module per pass, one public function named after the pass (STYLE rule 4).

The order in which a target runs them is in ``compiler.pipeline``.
"""

from compiler.passes.check_token_order import check_token_order
from compiler.passes.flatten import flatten
from compiler.passes.fuse_reduction_ends import fuse_reduction_ends
from compiler.passes.inject_dma import inject_dma
from compiler.passes.inject_sync import inject_sync
from compiler.passes.inject_virtual_thread import inject_virtual_thread
from compiler.passes.inplace import inplace
from compiler.passes.lift_alloc import lift_alloc
from compiler.passes.loop_partition import loop_partition
from compiler.passes.narrow_output import narrow_output
from compiler.passes.place_output import place_output
from compiler.passes.preprocess import fold_padding, preprocess
from compiler.passes.share_smem import share_smem
from compiler.passes.simplify import simplify
from compiler.passes.tensorize import tensorize
from compiler.passes.tensorize_registers import tensorize_registers
from compiler.passes.tensorize_tiles import tensorize_tiles

__all__ = ["check_token_order", "flatten", "fold_padding", "fuse_reduction_ends", "inject_dma", "inject_sync",
           "inject_virtual_thread", "inplace", "lift_alloc", "loop_partition", "narrow_output",
           "place_output", "preprocess", "share_smem", "simplify", "tensorize", "tensorize_registers",
           "tensorize_tiles"]
