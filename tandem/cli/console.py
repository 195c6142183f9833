"""What every ``tandem`` command shares: how it reports an error (``error: ...`` lines on stderr, then an exit
status; under ``--json`` also one JSON object on stdout, ``JsonErrors``) and the version it records
(``tandem version``, sweep results, regression baselines).

Exit status, for every command: 0 success; 1 the work ran and failed (a mismatch against numpy, a failed
check or case, a crash inside the work); 2 bad input (an option, a file, a spec or a config), refused
before any work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

import tandem

#: the help of ``--cache/--no-cache`` (tandem run, tandem model): tandem/flows/kernel_cache.py
CACHE_HELP = ("Find compiled kernels in, and keep them in, the kernel cache on disk (VITA's layers and "
              "DianNao's operators; the folder: $TANDEM_CACHE_DIR, else the user's cache folder; `tandem "
              "cache` shows it). --no-cache compiles every kernel.")

#: what the last ``fail`` reported, for the JSON object a ``--json`` command prints when it exits with it
_failure: dict[str, object] = {}


def fail(lines: str | list[str], code: int) -> typer.Exit:
    """Print each line as ``error: ...`` on stderr (literal, no rich markup); return the Exit to raise.

    The error's type is the exception being handled (``raise fail(str(exc), 2) from None``), else
    ``UsageError`` for bad input (status 2) and ``Error`` for failed work."""
    lines = [lines] if isinstance(lines, str) else list(lines)
    err = Console(stderr=True, highlight=False)
    for line in lines:
        err.print(Text(f"error: {line}", style="bold red"), soft_wrap=True)
    handled = sys.exc_info()[1]
    kind = type(handled).__name__ if handled is not None else ("UsageError" if code == 2 else "Error")
    _failure.clear()
    _failure.update(error="\n".join(lines), type=kind, exit=code)
    return typer.Exit(code=code)


def json_failure(error: str, kind: str, code: int) -> str:
    """The one JSON object a ``--json`` command prints on stdout when it fails."""
    return json.dumps({"error": error, "type": kind, "exit": code})


class JsonErrors(TyperGroup):
    """The root command group: with ``--json`` on the command line, a failure prints one JSON object on stdout
    (``{"error": ..., "type": ..., "exit": ...}``) as well as its lines on stderr, whether the options were
    refused before the command ran (click's usage errors), the command refused its input (``fail``) or the
    work crashed; so ``tandem ... --json | python -m json.tool`` reads an object either way. A command that
    printed its own JSON report before exiting 1 (a mismatch, a failed case) prints nothing more."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        _failure.clear()
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            if not _is_usage_error(exc):   # a crash: the object on stdout, the traceback on stderr
                typer.echo(json_failure(f"{type(exc).__name__}: {exc}", type(exc).__name__, 1))
                raise
            exc.show()
            code = exc.exit_code
            _failure.update(error=exc.format_message(), type=type(exc).__name__, exit=code)
        code = code if isinstance(code, int) else 0
        if code and _failure:
            typer.echo(json_failure(str(_failure["error"]), str(_failure["type"]), code))
        if standalone_mode:
            sys.exit(code)
        return code


def tandem_version() -> str:
    """Tandem's version from the installed metadata, falling back to ``tandem.__version__``."""
    from importlib import metadata  # ~20 ms: only where a version is printed or recorded

    try:
        return metadata.version("tandem")
    except metadata.PackageNotFoundError:
        return tandem.__version__


def resolve_target(kind: str, config: str | None, spec: Path | None):
    """The target of ``--target``/``--config``/``--spec`` (tandem/flows/targets.py), or the Exit (status 2)
    naming what is wrong: a kind no flow runs, or a config or spec that does not load."""
    from compiler.errors import TandemError
    from isa.errors import ISAError
    from sim.core.errors import SimError
    from tandem.flows.run import FLOWS
    from tandem.flows.targets import TargetError, load_target

    if kind not in FLOWS:
        raise fail(f"unknown target {kind!r}; expected one of {', '.join(FLOWS)}", 2)
    try:
        return load_target(kind, config, spec)
    except (TargetError, TandemError, SimError, ISAError) as exc:
        raise fail(str(exc), 2) from None


def _is_usage_error(exc: Exception) -> bool:
    """Whether ``exc`` is one of click's usage errors (an unknown option, a bad value), which the group shows
    itself outside standalone mode. (Typer vendors click in newer releases, so the class is recognized by
    what it carries rather than imported.)"""
    return all(hasattr(exc, name) for name in ("exit_code", "format_message", "show"))
