"""Built-in specs kept parsed on disk, next to the compiled kernels (tandem/flows/kernel_cache.py).

    spec = builtin_spec("vita", {"LOG_INP_BUFF_SIZE": 15})   # isa.load_isa's value, read from disk if kept

Every command that runs something reads a spec; parsing the built-in VITA spec's TOML and building its
instructions takes ~40 ms, reading it back pickled ~3 ms. A spec is kept under the kernel cache's folder of
this code fingerprint (which covers the built-in spec files: they are part of ``isa``), named by the SHA-256
of its name and parameters, and only a built-in one: a user's spec file may ``extends`` other files, whose
contents the name would not cover. In a process, ``isa.load_isa`` keeps each spec once as before; a file
that cannot be read back is a miss, written again; with the cache off (``TANDEM_CACHE_DIR=off``) every spec
is parsed.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
import types
import warnings
from collections.abc import Mapping

import isa
from tandem.flows import kernel_cache

_KEPT: dict[tuple, isa.ISA] = {}   # this process's specs read from disk, by name and parameters


def builtin_spec(name: str, params: Mapping[str, int] | None = None) -> isa.ISA:
    """``isa.load_isa(name, params)``, read from the disk cache where it is kept (and kept there if not)."""
    key = (name, tuple(sorted((params or {}).items())))
    known = _KEPT.get(key)
    if known is not None:
        return known
    directory = kernel_cache.default_directory()
    if directory is None:
        return isa.load_isa(name, params)
    name_of = hashlib.sha256(repr(key).encode()).hexdigest()
    path = kernel_cache.generation(directory) / "specs" / f"{name_of}.pkl"
    try:
        spec = pickle.loads(path.read_bytes())
    except Exception:   # missing, cut short or unreadable: parse it, and keep it for the next run
        spec = isa.load_isa(name, params)
        buffer = io.BytesIO()
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(spec)
        try:
            kernel_cache.write_whole(path, buffer.getvalue())
        except OSError as why:
            warnings.warn(f"spec cache: cannot write under {directory} ({why}); the spec is parsed in every "
                          f"run", RuntimeWarning, stacklevel=2)
    if len(_KEPT) >= 64:   # a sweep over spec parameters makes a spec per point: keep the last few
        _KEPT.clear()
    _KEPT[key] = spec
    return spec


def _proxy(items: dict) -> types.MappingProxyType:
    return types.MappingProxyType(items)


class _Pickler(pickle.Pickler):
    """A spec's read-only tables (MappingProxyType) pickled as the dicts they show."""

    dispatch_table = copyreg.dispatch_table.copy()
    dispatch_table[types.MappingProxyType] = lambda m: (_proxy, (dict(m),))
