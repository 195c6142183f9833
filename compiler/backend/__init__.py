"""Backends: turn the final loop IR of a target into what runs on it.

- ``diannao``: an SPMD ``isa.Program`` for the DianNao card (sim/diannao); ``codegen(func) -> DiannaoKernel``.
"""

from compiler.backend.diannao import DiannaoKernel, codegen

__all__ = ["DiannaoKernel", "codegen"]
