"""Compiled kernels kept between runs: in this process's memory, and on disk under the user's cache directory.

    cache = KernelCache.default()     # memory, and disk unless TANDEM_CACHE_DIR=off
    compiled = cache.get(stores, target, op, params, candidate)    # None: compile, then cache.put(...)

A network compiles each distinct kernel once (in memory), and a run repeated in another process (a regression
loop, a sweep, the same layer in `tandem run` again) loads the kernel instead of compiling it (on disk). A
kernel is found on disk by its content, never by a name: the SHA-256 of the target kind, the spec and the
machine config (their full values, as ``repr`` prints them: every instruction, parameter and field), the
operator, its parameters, the schedule candidate, and the code that compiles (every source file of
``compiler``, ``isa``, ``sim`` and ``tandem``, by path, size and modification time), Python's and numpy's
versions. A different spec, config, layer or edited compiler is a different entry; stale entries are never
read. A file that cannot be read back (cut short, or written by other code) is a miss, replaced.

What is stored: only kernels of flows whose ``TargetFlow.stores_kernels`` is true for the job (VITA's layers,
DianNao's own operators, and both simulators' network operators, whose file compiler/ops/network.py is
Tandem's own code: ``ours``; programs and their records); not the CPU's (machine code loaded into this
process, which a file cannot hold) nor a user's operator (``FILE.py:NAME``: its file is not in the key). The
target's spec and config, and the spec's instructions, formats, spaces, data kinds and enums, are written as
references (``persistent_id``) and bound to the running target's on load: a file holds the kernel, not a copy
of the spec. A kernel that does not pickle is not stored: a warning names the operator and the reason, once
per process.

Where: ``$TANDEM_CACHE_DIR`` (``off``: memory only), else ``$XDG_CACHE_HOME/tandem/kernels``, else
``~/.cache/tandem/kernels``; entries under a folder per code fingerprint, files written whole (a temporary
file renamed), so that processes running side by side (``--jobs``) share them safely. When a new
fingerprint's folder is made, folders of other fingerprints beyond the ``KEEP`` most recent are removed;
the folder holds at most ``$TANDEM_CACHE_MAX_MB`` (2000 by default): past it, the least recently written
files go (``bound``). The files are the user's own, read as pickles: a folder others may write to is not a
place for the cache.
``tandem cache`` shows the folder and its size; ``tandem cache --clear`` empties it. Parsed built-in specs
live there too (tandem/flows/spec_cache.py).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compiler.target import Target

#: the packages whose code decides what a compiled kernel is
CODE = ("compiler", "isa", "sim", "tandem")
#: how many code fingerprints' folders are kept on disk
KEEP = 4
ENV = "TANDEM_CACHE_DIR"
#: the most the folder may hold, in MB (``$TANDEM_CACHE_MAX_MB``); past it, the least recently written
#: files go until it holds 80% of that (checked when a process first writes, then every ``CHECK_EVERY``)
MAX_MB_ENV, MAX_MB = "TANDEM_CACHE_MAX_MB", 2000
CHECK_EVERY = 256
_ROOT = Path(__file__).resolve().parents[2]   # the folder holding the packages of CODE


def default_directory() -> Path | None:
    """Where kernels are kept on disk (see the module docstring), or None when ``$TANDEM_CACHE_DIR`` is
    ``off``."""
    given = os.environ.get(ENV)
    if given is not None and given.strip().lower() in ("off", "0", "no", "none"):
        return None
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tandem" / "kernels"


@functools.cache
def code_fingerprint() -> str:
    """A digest of the source files of ``CODE`` (path, size, modification time) and of Python's and numpy's
    versions: it changes whenever the code that compiles might."""
    import numpy as np  # here: `tandem --help` imports this module (through the targets' edge)

    h = hashlib.sha256(f"{sys.version}|{np.__version__}|{pickle.HIGHEST_PROTOCOL}".encode())
    for package in CODE:
        for folder, dirs, files in sorted(os.walk(_ROOT / package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".toml", ".json")):
                    st = os.stat(os.path.join(folder, name))
                    where = f"{os.path.relpath(folder, _ROOT)}/{name}"
                    h.update(f"{where}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


class KernelCache:
    """Compiled kernels by flow, target, operator, parameters and candidate (module docstring): always in
    memory, and under ``directory`` when one is given. ``hits``/``misses`` count the disk's answers."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.memory: dict[tuple, Any] = {}
        self.hits = self.misses = self.written = 0
        self._warned: set[str] = set()

    @classmethod
    def default(cls) -> KernelCache:
        """A cache in memory and in ``default_directory()``."""
        return cls(default_directory())

    def get(self, stores: bool, target: Target, op: str, params: Mapping[str, Any] | None,
            candidate: Any) -> Any | None:
        """The compiled kernel, or None when it has not been compiled (or cannot be read back); ``stores``:
        whether the flow's kernels for this job may be kept on disk (``TargetFlow.stores_kernels``)."""
        key = _memory_key(target, op, params, candidate)
        found = self.memory.get(key)
        if found is not None:
            return found
        path = self._path(stores, target, op, params, candidate)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                found = _Unpickler(f, target).load()
        except Exception:   # not there, cut short or unreadable: a miss, which the next put replaces
            self.misses += 1
            return None
        self.hits += 1
        self.memory[key] = found
        return found

    def put(self, stores: bool, target: Target, op: str, params: Mapping[str, Any] | None, candidate: Any,
            compiled: Any) -> None:
        """Keep ``compiled`` in memory, and on disk where the flow's kernels can be stored."""
        self.memory[_memory_key(target, op, params, candidate)] = compiled
        path = self._path(stores, target, op, params, candidate)
        if path is None:
            return
        buffer = io.BytesIO()
        try:
            _Pickler(buffer, target).dump(compiled)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as why:
            self._warn(op, f"kernel cache: the compiled kernels of {target.kind} {op} cannot be stored on "
                           f"disk ({why}); they are kept in memory only")
            return
        try:
            if self.written % CHECK_EVERY == 0:
                bound(self.directory, max_bytes())
            write_whole(path, buffer.getvalue())
            self.written += 1
        except OSError as why:
            self._warn("disk", f"kernel cache: cannot write under {self.directory} ({why}); compiled kernels "
                               f"are kept in memory only")

    def _warn(self, what: str, message: str) -> None:
        """Warn once per process and ``what``."""
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _path(self, stores: bool, target: Target, op: str, params: Mapping[str, Any] | None,
              candidate: Any) -> Path | None:
        """The file of this kernel, or None where it is not kept on disk (no directory, a flow whose kernels
        do not store, a spec built in Python or a parameter whose text is not its value)."""
        if self.directory is None or not stores:
            return None
        text = _content_key(target, op, params, candidate)
        if text is None:
            return None
        return generation(self.directory) / f"{hashlib.sha256(text.encode()).hexdigest()}.pkl"

    def size(self) -> tuple[int, int, int]:
        """(kernels, specs, bytes) on disk under the directory (specs: tandem/flows/spec_cache.py)."""
        if self.directory is None or not self.directory.is_dir():
            return 0, 0, 0
        files = [p for p in self.directory.rglob("*.pkl") if p.is_file()]
        specs = sum(p.parent.name == "specs" for p in files)
        return len(files) - specs, specs, sum(p.stat().st_size for p in files)

    def clear(self) -> int:
        """Remove every kernel and spec on disk (and the kernels in memory); return how many kernels were
        removed."""
        self.memory.clear()
        count, _, _ = self.size()
        if self.directory is not None and self.directory.is_dir():
            import shutil

            shutil.rmtree(self.directory)
        return count


def ours(file: str | Path) -> bool:
    """Whether ``file``, the file of an operator written as a user's (``FILE.py:NAME``), is Tandem's own: it
    lies in the code the fingerprint covers (``compiler/ops/network.py``'s network operators), so that the
    operator's kernels may be stored like the built-in operators'."""
    path = Path(file).resolve()
    return any(path.is_relative_to(_ROOT / package) for package in CODE)


def _given(params: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The parameters that decide a kernel, as text: all but the seed (it draws the inputs)."""
    return tuple(sorted((k, repr(v)) for k, v in (params or {}).items() if k != "seed"))


def _memory_key(target: Target, op: str, params: Mapping[str, Any] | None, candidate: Any) -> tuple:
    return (target.kind, id(target.spec), id(target.config), op, _given(params), repr(candidate))


def _content_key(target: Target, op: str, params: Mapping[str, Any] | None, candidate: Any) -> str | None:
    """The text the file name digests; None where part of it would name an object's address rather than its
    value (a parameter without a value repr), or the spec was built in Python (no text to reload it by)."""
    if target.spec is not None and not target.spec.text:
        return None
    text = "\n".join([target.kind, _described(target.spec), _described(target.config), op,
                      repr(list(_given(params))), repr(candidate)])
    return None if " at 0x" in text else text


def _described(value: Any) -> str:
    """A spec's or config's full value as text (kept per object: a spec prints in a few milliseconds)."""
    known = _DESCRIBED.get(id(value))
    if known is None or known[0] is not value:
        if len(_DESCRIBED) >= 64:   # a sweep makes a config per point: keep the last few
            _DESCRIBED.clear()
        known = _DESCRIBED[id(value)] = (value, repr(value))
    return known[1]


_DESCRIBED: dict[int, tuple[Any, str]] = {}


def _references(target: Target) -> dict[int, tuple]:
    """The objects a stored kernel names instead of holding: the target, its spec and config, and the
    spec's tables by name."""
    refs: dict[int, tuple] = {id(target): ("target",)}
    if target.spec is not None:
        refs[id(target.spec)] = ("spec",)
        for table in _TABLES:
            for name, item in getattr(target.spec, table).items():
                refs[id(item)] = (table, name)
    if target.config is not None:
        refs[id(target.config)] = ("config",)
    return refs


_TABLES = ("instructions", "formats", "spaces", "data", "enums")


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, target: Target) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.refs = _references(target)

    def persistent_id(self, obj: Any) -> tuple | None:
        return self.refs.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, target: Target) -> None:
        super().__init__(file)
        self.target = target

    def persistent_load(self, pid: tuple) -> Any:
        kind, *name = pid
        if kind == "target":
            return self.target
        if kind in ("spec", "config"):
            return getattr(self.target, kind)
        return getattr(self.target.spec, kind)[name[0]]


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader sees a part of it (a temporary file renamed)."""
    import tempfile  # here and below: a run that finds its kernels writes nothing (the start of a run)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
        raise


def max_bytes() -> int:
    """The folder's bound in bytes (``MAX_MB_ENV``, else ``MAX_MB``); a value that is not a positive number
    of MB is named in a warning, and the default bound holds."""
    given = os.environ.get(MAX_MB_ENV)
    if not given:
        return int(MAX_MB * 1e6)
    try:
        mb = float(given)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        warnings.warn(f"${MAX_MB_ENV} must be a positive number of megabytes, but is {given!r}; the kernel "
                      f"cache keeps at most {MAX_MB} MB", RuntimeWarning, stacklevel=3)
        return int(MAX_MB * 1e6)
    return int(mb * 1e6)


def bound(directory: Path, limit: int) -> int:
    """Remove the least recently written files under ``directory`` while it holds more than ``limit`` bytes,
    down to 80% of it; return how many were removed."""
    files = []
    for path in directory.rglob("*.pkl"):
        try:
            st = path.stat()
        except OSError:   # removed meanwhile by another process
            continue
        files.append((st.st_mtime_ns, st.st_size, path))
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return 0
    removed = 0
    for _, size, path in sorted(files):
        if total <= 0.8 * limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed += 1
    return removed


def generation(directory: Path) -> Path:
    """The folder of this code fingerprint under ``directory``; when it is new, the oldest other folders
    beyond ``KEEP`` are removed (a folder that cannot be made is left to the write that needs it)."""
    folder = directory / code_fingerprint()
    if folder.is_dir():
        return folder
    import shutil

    try:
        folder.mkdir(parents=True, exist_ok=True)
        others = sorted((p for p in directory.iterdir() if p.is_dir() and p != folder),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[KEEP - 1:]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
    return folder
