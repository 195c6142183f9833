"""Enforce the one rule between layers (DESIGN.md, "Layers and the one rule between them").

isa/ imports nothing of ours; compiler/ imports isa/ only; sim/ imports isa/ only and never
compiler/; baselines/ (what kernels are compared with) imports isa/, compiler/ and sim/; tandem/ may import
all of them. Every ``.py`` file under those folders is parsed with
``ast``; ``import``, ``from ... import`` (relative ones resolved against the file's package) and
``importlib.import_module("...")`` / ``__import__("...")`` with a literal name are checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("isa", "compiler", "sim", "baselines", "tandem")
ALLOWED: dict[str, frozenset[str]] = {
    "isa": frozenset({"isa"}),
    "compiler": frozenset({"compiler", "isa"}),
    "sim": frozenset({"sim", "isa"}),
    "baselines": frozenset({"baselines", "isa", "compiler", "sim"}),
    "tandem": frozenset(LAYERS),
}


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """Dotted module name of ``path`` under ``root`` and whether it is a package ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str | None:
    """Absolute name of ``from <level dots><target> import ...`` inside ``module``.

    Returns None when the import climbs above the top-level package.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 >= len(package):
        return None
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``tree``; '' for an unresolvable one."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.lineno, node.module or ""))
            else:
                name = resolve_relative(module, is_package, node.level, node.module)
                found.append((node.lineno, name or ""))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            arg = node.args[0]
            if (
                called in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and not arg.value.startswith(".")
            ):
                found.append((node.lineno, arg.value))
    return found


def check_source(source: str, module: str, is_package: bool, filename: str) -> list[str]:
    """Layer-rule violations in one file's source, as 'file:line: message' strings."""
    layer = module.split(".")[0]
    allowed = ALLOWED[layer]
    tree = ast.parse(source, filename=filename)
    errors = []
    for line, name in imported_modules(tree, module, is_package):
        if not name:
            errors.append(f"{filename}:{line}: relative import climbs above package '{layer}'")
            continue
        top = name.split(".")[0]
        if top in LAYERS and top not in allowed:
            errors.append(
                f"{filename}:{line}: layer '{layer}' must not import '{name}' "
                f"(it may import only: {', '.join(sorted(allowed))})"
            )
    return errors


def scan(root: Path) -> tuple[list[Path], list[str]]:
    """All layer files under ``root`` and every violation found in them."""
    files = sorted(p for layer in LAYERS for p in (root / layer).rglob("*.py"))
    errors: list[str] = []
    for path in files:
        module, is_package = module_name(path, root)
        shown = path.relative_to(root).as_posix()
        errors += check_source(path.read_text(encoding="utf-8"), module, is_package, shown)
    return files, errors


def test_layers_import_only_what_design_allows() -> None:
    files, errors = scan(REPO)
    assert files, "no .py files found under isa/, compiler/, sim/, tandem/"
    assert not errors, "layer rule violated:\n" + "\n".join(errors)


def test_every_layer_has_files() -> None:
    files, _ = scan(REPO)
    layers = {p.relative_to(REPO).parts[0] for p in files}
    assert {"isa", "sim", "tandem"} <= layers


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("sim.vita.core", "import numpy\nfrom compiler.ir import For\n", "compiler.ir"),
        ("sim.diannao", "import tandem.cli.app\n", "tandem.cli.app"),
        ("isa.spec", "import os\n\nimport sim\n", "sim"),
        ("compiler.lower", "from sim.core import Memory\n", "sim.core"),
        ("compiler.lower", "import importlib\nm = importlib.import_module('tandem')\n", "tandem"),
        ("isa.spec", "def f():\n    from compiler import te\n", "compiler"),
    ],
)
def test_checker_catches_violation(module: str, source: str, bad: str) -> None:
    errors = check_source(source, module, False, "x.py")
    line = source[: source.index(bad)].count("\n") + 1
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"x.py:{line}: ") and f"'{bad}'" in errors[0]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("compiler.passes.flatten", "from ..ir import nodes\nfrom isa.spec import Spec\n"),
        ("sim.vita.core", "import numpy as np\nfrom isa.program import Program\n"),
        ("tandem.cli.app", "import compiler\nimport sim\nimport isa\n"),
        ("isa.spec", "from . import expr\nimport tomllib\n"),
    ],
)
def test_checker_allows_permitted_imports(module: str, source: str) -> None:
    assert check_source(source, module, False, "x.py") == []


def test_relative_imports_resolve_against_the_package() -> None:
    assert resolve_relative("sim.vita.core", False, 1, "queues") == "sim.vita.queues"
    assert resolve_relative("sim.vita.core", False, 2, "core") == "sim.core"
    assert resolve_relative("sim.vita", True, 1, "core") == "sim.vita.core"
    assert resolve_relative("sim.vita", True, 2, None) == "sim"
    assert resolve_relative("sim", True, 2, "compiler") is None


def test_scan_finds_violation_in_a_file_tree(tmp_path: Path) -> None:
    (tmp_path / "sim" / "vita").mkdir(parents=True)
    (tmp_path / "sim" / "__init__.py").write_text("")
    (tmp_path / "sim" / "vita" / "__init__.py").write_text("from .. import core\n")
    (tmp_path / "sim" / "vita" / "run.py").write_text('"""doc"""\n\nfrom ...compiler import te\n')
    (tmp_path / "sim" / "core.py").write_text("import isa\nfrom compiler.lower import lower\n")
    files, errors = scan(tmp_path)
    assert len(files) == 4
    assert errors == [
        "sim/core.py:2: layer 'sim' must not import 'compiler.lower' "
        "(it may import only: isa, sim)",
        "sim/vita/run.py:3: relative import climbs above package 'sim'",
    ]


def code_executing_calls(source: str, filename: str) -> list[str]:
    """'file:line: ...' for every eval/exec/compile call and pickle/marshal/shelve import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "eval", "exec", "compile", "__import__"):
            found.append(f"{filename}:{node.lineno}: calls {node.func.id}()")
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{filename}:{node.lineno}: imports {n}" for n in names
                  if n.split(".")[0] in ("pickle", "marshal", "shelve", "dill")]
    return found


def test_isa_never_executes_code_from_its_input():
    """DESIGN.md: loading a spec never executes code (no eval, no exec, no pickle)."""
    problems = []
    for path in sorted((REPO / "isa").rglob("*.py")):
        problems += code_executing_calls(path.read_text(), str(path.relative_to(REPO)))
    assert problems == []


def test_the_code_execution_check_can_fail():
    bad = "import pickle\nfrom marshal import loads\nx = eval('1')\nexec('y = 2')\n"
    assert code_executing_calls(bad, "bad.py") == [
        "bad.py:1: imports pickle", "bad.py:2: imports marshal", "bad.py:3: calls eval()",
        "bad.py:4: calls exec()"]
