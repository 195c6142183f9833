"""Compiler passes: one module per pass, one public function named after the pass (STYLE rule 4).

The order in which a target runs them is in ``compiler.pipeline``. The functions are imported when first
read (``isa/lazy.py``), so that importing one pass's module (a kernel's records, ``cover.Selected``, read
back from the kernel cache) does not import every pass. A pass function shares its module's name: the
package's attribute of that name is the function, whichever was imported first (``_Passes``).
"""

import sys
import types

from isa.lazy import lazy_names

#: each public name -> the module that defines it
_HOMES = {name: name for name in (
    "check_token_order", "double_buffer", "flatten", "fuse_reduction_ends", "hoist_fill", "inject_dma",
    "inject_sync",
    "inject_virtual_thread", "inplace", "lift_alloc", "loop_partition", "narrow_output", "place_output",
    "preprocess", "share_card", "share_smem", "simplify", "stream_copies", "tensorize", "tensorize_registers",
    "tensorize_tiles")} | {
    "fold_padding": "preprocess"}

__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_names(__name__, _HOMES)


class _Passes(types.ModuleType):
    """The package: importing a pass's module sets the package's attribute of its name to the module; the
    pass function of that name is set instead, as an eager ``from .simplify import simplify`` would."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _HOMES.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Passes
