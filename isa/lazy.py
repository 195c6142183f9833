"""A package's names imported when first read (PEP 562), so that importing one module of a package does not
import all of its siblings: ``isa.builtin_specs`` without the assembler, ``compiler.backend.vita`` without the
DianNao backend. A command line that runs one target imports that target's modules only. (Here, in the layer
every other may import, so that isa/, compiler/ and sim/ packages share it.)"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``homes`` (name -> the module that defines
    it, relative to ``package``) is imported from its module when it is first read, as is a submodule read
    as an attribute before anything imported it."""

    def __getattr__(name: str) -> object:
        if name in homes:
            value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
            setattr(sys.modules[package], name, value)   # read from the package itself from now on
            return value
        try:   # a submodule not imported yet (``isa.binary.MAGIC``)
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list:
        return sorted(homes)

    return __getattr__, __dir__
