"""``tandem isa``: list, show and check ISA specs (isa/specs/*.toml or a user's file).

    tandem isa list                          the built-in specs: name, summary, sizes, encodable or not
    tandem isa show NAME [-p K=V] [-i INSN]  one spec (a built-in name or a path to a .toml file)
    tandem isa check FILE                    load a spec file; print "ok: N instructions" or every error

Exit status: 0 on success; 1 when ``check`` finds errors in a spec (or ``list`` cannot load a built-in one);
2 on a bad argument (an unknown NAME, a malformed or unknown --param, an unknown instruction, a missing file),
like ``tandem compile``. Every error is printed as ``error: ...`` lines on stderr, never as a traceback.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

import isa
from isa.lang.tree import Expr, to_text
from tandem.cli.console import fail

isa_app = typer.Typer(
    name="isa",
    help="List, show and check ISA specs (isa/specs/*.toml, or a spec file of your own).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _Usage(Exception):
    """A bad command-line argument: printed as ``error: ...`` with exit status 2."""


def _out() -> Console:
    return Console(highlight=False)


def _spec_errors(e: isa.ISASpecError) -> list[str]:
    """One entry per error the loader collected (an entry may span lines: the caret under the column)."""
    return [str(x) for x in e.errors]


def _internal(name: str, e: Exception) -> str:
    return f"{name}: internal error while loading the spec ({type(e).__name__}: {e}); please report it"


def parse_params(items: list[str] | None) -> dict[str, int]:
    """``["K=V", ...]`` as a dict of ints (decimal, 0x.., 0b..); raises _Usage naming the bad item."""
    out: dict[str, int] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise _Usage(f"--param: expected KEY=VALUE, but got {item!r}")
        if key in out:
            raise _Usage(f"--param {key}: given twice")
        try:
            out[key] = int(value, 0)
        except ValueError:
            raise _Usage(f"--param {key}: expected an integer, but got {value!r}") from None
    return out


def _looks_like_path(name: str) -> bool:
    return name.endswith(".toml") or "/" in name or "\\" in name or Path(name).is_file()


def load_named(name: str, params: dict[str, int]) -> isa.ISA:
    """A built-in spec by name, or the spec file at path ``name``; raises _Usage or ISASpecError."""
    builtins = isa.builtin_specs()
    if name in builtins and not Path(name).is_file():
        return _with_params(lambda: isa.load_isa(name, params=params), params)
    if _looks_like_path(name):
        path = Path(name)
        if not path.is_file():
            what = "is a directory, not a spec file" if path.is_dir() else "no such file"
            raise _Usage(f"{name}: {what}")
        return _with_params(lambda: isa.load_spec_file(path, params=params), params)
    raise _Usage(f"unknown ISA {name!r}; built-in ones are {', '.join(builtins) or 'none'} "
                 "(or give the path of a .toml spec file)")


def _with_params(load, params: dict[str, int]) -> isa.ISA:
    """Run ``load``; an error about an overridden parameter becomes a usage error naming the --param."""
    try:
        return load()
    except isa.ISASpecError as e:
        if e.instruction == "table [params]" and e.field in params:
            raise _Usage(f"--param {e.field}: {e.detail}") from None
        raise


# ---------------------------------------------------------------------------------------------- list


@isa_app.command("list")
def list_() -> None:
    """A table of the built-in ISA specs (isa/specs/*.toml). Exits 1 if one of them does not load."""
    table = Table(title="built-in ISA specs")
    for column in ("name", "summary", "instructions", "params", "encodings"):
        table.add_column(column, overflow="fold")
    broken = []
    names = isa.builtin_specs()
    for name in names:
        try:
            spec = isa.load_isa(name)
        except isa.ISASpecError as e:
            broken.extend(_spec_errors(e))
            table.add_row(Text(name), Text("does not load (see below)", style="bold red"), "", "", "")
            continue
        table.add_row(Text(spec.name), Text(spec.summary), str(len(spec.instructions)),
                      str(len(spec.defaults)), _encodings(spec))
    if not names:
        _out().print("no built-in ISA specs in isa/specs/")
        return
    _out().print(table)
    if broken:
        raise fail(broken, 1)


def _encodings(spec: isa.ISA) -> str:
    coded = sum(1 for i in spec.instructions.values() if i.format is not None)
    if not coded:
        return "no"
    width = f"{spec.insn_bits}-bit" if spec.insn_bits else "yes"
    return width if coded == len(spec.instructions) else f"{width} ({coded} of {len(spec.instructions)})"


# ---------------------------------------------------------------------------------------------- show


def _text(e: Expr | None) -> str:
    return "" if e is None else to_text(e)


def _operand(op: isa.Operand) -> str:
    shape = ", ".join(to_text(s) for s in op.shape)
    text = f"{op.name}: {op.dtype}[{shape}]"
    if op.space is not None:
        text += f" @{op.space}"
    if op.cluster is not None:
        text += f" of cluster {to_text(op.cluster)}"
    if op.kind != "tensor":
        text += f" ({op.kind})"
    return text


def _timing(t: isa.Timing) -> str:
    parts = []
    if t.unit is not None:
        parts.append(f"unit {t.unit}" + (" (async)" if t.asynchronous else ""))
    if t.engine is not None:
        parts.append(f"engine {_text(t.engine)}")
    if t.latency is not None:
        parts.append(f"latency {_text(t.latency)}")
    if t.cycles is not None:
        parts.append(f"cycles {_text(t.cycles)}")
    return "\n".join(parts)


def _header(spec: isa.ISA) -> list[str]:
    lines = [f"ISA {spec.name}: {spec.summary}", f"source: {spec.source}"]
    if spec.insn_bits is not None:
        lines.append(f"instruction width: {spec.insn_bits} bits")
    if spec.defaults:
        shown = []
        for key, default in spec.defaults.items():
            value = spec.params[key]
            shown.append(f"{key} = {value}" + (f" (default {default})" if value != default else ""))
        lines.append("parameters: " + ", ".join(shown))
    else:
        lines.append("parameters: none")
    derived = {k: v for k, v in spec.params.items() if k not in spec.defaults}
    if derived:
        lines.append("derived: " + ", ".join(f"{k} = {v}" for k, v in derived.items()))
    return lines


COLUMNS = ("instruction", "operands", "semantics", "constraints", "timing", "intrinsic")
WIDE = 140  # narrower consoles get one two-column table per instruction instead of one wide table


def instruction_cells(ins: isa.Instruction) -> tuple[str, ...]:
    """The text of each of COLUMNS for one instruction."""
    head = [ins.name] + [f"{tv}: {', '.join(dts)}" for tv, dts in ins.types.items()]
    operands = "\n".join(_operand(op) for op in ins.operands)
    # a rule as written, on one line (specs wrap long rules over several)
    constraints = "\n".join(f"{c.kind}: {' '.join(c.text.split())} — {c.message}" for c in ins.constraints)
    return ("\n".join(head), operands, textwrap.dedent(ins.semantics).strip(), constraints,
            _timing(ins.timing), ins.intrinsic or "")


def instruction_tables(spec: isa.ISA, names: list[str], width: int) -> list[Table]:
    """What ``tandem isa show`` prints after the header: a wide table, or a small table per instruction."""
    title = f"{len(names)} instruction{'s' if len(names) != 1 else ''} of {spec.name}"
    if width >= WIDE:
        table = Table(title=Text(title), show_lines=True)
        for column in COLUMNS:
            table.add_column(column, overflow="fold")
        for name in names:
            table.add_row(*(Text(cell) for cell in instruction_cells(spec.instruction(name))))
        return [table]
    tables = []
    for name in names:
        ins = spec.instruction(name)
        table = Table(title=Text(f"{ins.name}: {ins.summary}"), show_header=False, show_lines=True)
        table.add_column("property", style="bold")
        table.add_column("value", overflow="fold")
        for column, cell in zip(COLUMNS, instruction_cells(ins), strict=True):
            if cell:
                table.add_row(column, Text(cell))
        tables.append(table)
    return tables


@contextmanager
def _loading(name: str, bad_spec: int) -> Iterator[None]:
    """A spec being loaded by a command: a usage mistake exits 2, a spec's errors exit ``bad_spec`` listing
    each, anything else is a bug in isa/ (exit 1, said to be one, with no traceback)."""
    try:
        yield
    except _Usage as e:
        raise fail([str(e)], 2) from None
    except isa.ISASpecError as e:
        raise fail(_spec_errors(e), bad_spec) from None
    except Exception as e:  # a bug in isa/: still no traceback, but say it is one
        raise fail([_internal(name, e)], 1) from None


@isa_app.command()
def show(
    name: Annotated[
        str, typer.Argument(help="A built-in ISA name (tandem isa list) or the path of a .toml spec.")
    ],
    params: Annotated[
        list[str] | None,
        typer.Option("-p", "--param", help="KEY=VALUE: override a parameter of the spec (repeatable)."),
    ] = None,
    instruction: Annotated[
        str | None, typer.Option("-i", "--instruction", help="Show only this instruction.")
    ] = None,
) -> None:
    """Print a spec: header and parameters, then a table of its instructions (exit 2 on a bad argument)."""
    with _loading(name, bad_spec=2):
        spec = load_named(name, parse_params(params))
        names = list(spec.instructions)
        if instruction is not None:
            if instruction not in spec.instructions:
                raise _Usage(f"--instruction: ISA '{spec.name}' has no instruction {instruction!r}; it has "
                             f"{', '.join(names) or 'none'}")
            names = [instruction]
    out = _out()
    for line in _header(spec):
        out.print(Text(line), soft_wrap=True)
    for table in instruction_tables(spec, names, out.width):
        out.print(table)


# ---------------------------------------------------------------------------------------------- check


@isa_app.command()
def check(
    file: Annotated[str, typer.Argument(help="The .toml spec file to check (or a built-in ISA name).")],
) -> None:
    """Load a spec file and report every error in it: exit 0 and "ok: N instructions", or exit 1.

    A missing or unreadable file exits with status 2.
    """
    path = Path(file)
    with _loading(file, bad_spec=1):
        if not path.exists() and file in isa.builtin_specs():
            spec = isa.load_isa(file)
        elif not path.is_file():
            raise _Usage(f"{file}: {'is a directory, not a spec file' if path.is_dir() else 'no such file'}")
        else:
            spec = isa.load_spec_file(path)
    _out().print(f"ok: {len(spec.instructions)} instructions")
