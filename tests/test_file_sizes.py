"""Keep modules and functions small: no source file over 800 lines, no function over 80 (issue 44, item 5).

Every ``.py`` file under compiler/, sim/, isa/, tandem/ and baselines/ is counted. A function's length runs
from its first body statement (its docstring, if it has one) to its last line, so decorators and long
signatures (typer's options) do not count. A failure names every offender with its length.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("compiler", "sim", "isa", "tandem", "baselines")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80


def source_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def long_files(paths: list[Path], limit: int = MAX_FILE_LINES) -> list[str]:
    """``path: N lines`` for each file of more than ``limit`` lines."""
    found = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(REPO)}: {lines} lines")
    return found


def function_lengths(source: str) -> list[tuple[int, str, int]]:
    """(line, name, length) of every function and method in ``source``, nested ones included."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append((node.lineno, node.name, node.end_lineno - node.body[0].lineno + 1))
    return out


def long_functions(paths: list[Path], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name: N lines`` for each function of more than ``limit`` lines."""
    found = []
    for path in paths:
        for line, name, length in sorted(function_lengths(path.read_text())):
            if length > limit:
                found.append(f"{path.relative_to(REPO)}:{line} {name}: {length} lines")
    return found


def test_no_source_file_is_over_800_lines() -> None:
    offenders = long_files(source_files())
    assert not offenders, f"files over {MAX_FILE_LINES} lines (split them):\n" + "\n".join(offenders)


def test_no_function_is_over_80_lines() -> None:
    offenders = long_functions(source_files())
    assert not offenders, (f"functions over {MAX_FUNCTION_LINES} lines, signature aside (name their steps):\n"
                           + "\n".join(offenders))


def test_a_function_is_measured_from_its_body_so_a_long_signature_does_not_count() -> None:
    source = (
        "@decorator\n"
        "def f(\n"
        "    a: int,\n"
        "    b: int,\n"
        ") -> int:\n"
        '    """Doc."""\n'
        "    return a + b\n"
        "\n"
        "\n"
        "class C:\n"
        "    def g(self):\n"
        "        def inner():\n"
        "            pass\n"
        "        return inner\n"
    )
    assert sorted(function_lengths(source)) == [(2, "f", 2), (11, "g", 3), (12, "inner", 1)]
