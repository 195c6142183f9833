"""The target is a value: no module of compiler/ or sim/ looks an ISA spec up by name (issue 19).

Only the edge (tandem/, tests, experiments) turns a name or a file into a spec; every pass, schedule, emitter
and simulator receives it. This test reads the source of compiler/ and sim/ and fails on any call of
``load_isa`` (under any import spelling) or any import of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("compiler", "sim")


def _modules() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py"))


def name_lookups(source: str, name: str) -> list[str]:
    """Every place in ``source`` (the text of file ``name``) that imports or calls ``load_isa``, as
    'file:line: code'."""
    tree = ast.parse(source, name)
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.ImportFrom):
            hit = any(alias.name == "load_isa" for alias in node.names)
        elif isinstance(node, ast.Call):
            f = node.func
            hit = (isinstance(f, ast.Name) and f.id == "load_isa") or (
                isinstance(f, ast.Attribute) and f.attr == "load_isa")
        if hit:
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_layers_are_checked_at_all():
    assert len(_modules()) > 40


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_of_the_compiler_or_the_simulators_looks_a_spec_up_by_name(path: Path):
    assert name_lookups(path.read_text(), str(path.relative_to(ROOT))) == []


def test_the_check_finds_a_lookup():
    """The scanner is not vacuous: it reports both spellings of a lookup, and not a spec passed in."""
    source = 'import isa\nfrom isa import load_isa\nSPEC = isa.load_isa("vita")\ndef f(spec): return spec\n'
    found = [line.split(": ", 1)[0] for line in name_lookups(source, "probe.py")]
    assert found == ["probe.py:2", "probe.py:3"]
