"""Backends: turn the final loop IR of a target into what runs on it.

- ``diannao``: an SPMD ``isa.Program`` for the DianNao card (sim/diannao); ``codegen(func) -> DiannaoKernel``.
- ``vita``, ``llvm`` (this CPU and cross targets), ``nvptx`` (NVIDIA GPUs): one module each, imported by the
  flow that uses it; the names below are read from their modules when first used (``isa.lazy``).
"""

from isa.lazy import lazy_names

__all__ = ["DiannaoKernel", "codegen"]
__getattr__, __dir__ = lazy_names(__name__, {"DiannaoKernel": "diannao", "codegen": "diannao"})
