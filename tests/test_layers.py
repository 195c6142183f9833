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


# ---- tandem/'s packages: one order between them, no import circle

#: tandem/'s packages in dependency order: each may import the ones before it (and itself), never after
TANDEM_ORDER = ("flows", "network", "sweep", "regress", "cli")


def tandem_package(module: str) -> str | None:
    """The package of ``TANDEM_ORDER`` a ``tandem.*`` module belongs to (None for tandem itself and
    tandem/__main__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tandem" and parts[1] in TANDEM_ORDER else None


def runtime_imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``imported_modules`` less the imports under ``if TYPE_CHECKING:`` (they never run) and with
    ``from package import submodule`` resolved to the submodule where one exists under REPO."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = (node.module or "") if node.level == 0 else resolve_relative(
                module, is_package, node.level, node.module) or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                path = REPO.joinpath(*sub.split("."))
                is_module = path.with_suffix(".py").exists() or path.is_dir()
                found.append((node.lineno, sub if is_module else base))
        elif isinstance(node, ast.Import | ast.Call):
            holder = ast.Module(body=[node] if isinstance(node, ast.Import) else [ast.Expr(node)],
                                type_ignores=[])
            found += imported_modules(holder, module, is_package)
    return found


def tandem_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the tandem modules it imports (anywhere in the file, functions included)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / "tandem").rglob("*.py")):
        module, is_package = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {name for _, name in runtime_imports(tree, module, is_package)
                         if name.split(".")[0] == "tandem" and name != module}
    return graph


def package_order_violations(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import of a tandem package that comes later in TANDEM_ORDER."""
    bad = []
    for module, imports in sorted(graph.items()):
        mine = tandem_package(module)
        for name in sorted(imports):
            theirs = tandem_package(name)
            if mine and theirs and TANDEM_ORDER.index(theirs) > TANDEM_ORDER.index(mine):
                bad.append(f"{module} imports {name} ({mine} comes before {theirs}: "
                           f"{' <- '.join(TANDEM_ORDER)})")
    return bad


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted: the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_tandem_packages_import_in_one_order() -> None:
    graph = tandem_graph(REPO)
    assert {tandem_package(m) for m in graph} >= set(TANDEM_ORDER)
    bad = package_order_violations(graph)
    assert not bad, "tandem/ package order violated:\n" + "\n".join(bad)


def test_tandem_has_no_import_circle() -> None:
    circles = import_circles(tandem_graph(REPO))
    assert not circles, "import circles in tandem/ (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_typer_is_imported_only_by_the_command_line() -> None:
    offenders = []
    for path in sorted((REPO / "tandem").rglob("*.py")):
        module, is_package = module_name(path, REPO)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if tandem_package(module) != "cli" and any(
                name.split(".")[0] == "typer" for _, name in imported_modules(tree, module, is_package)):
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"typer imported outside tandem/cli: {offenders}"


def test_the_circle_and_order_checks_can_fail() -> None:
    graph = {"tandem.flows.a": {"tandem.flows.b"}, "tandem.flows.b": {"tandem.flows.c"},
             "tandem.flows.c": {"tandem.flows.a", "tandem.cli.app"}, "tandem.cli.app": set(),
             "tandem.network.x": {"tandem.network.x"}}
    assert import_circles(graph) == [["tandem.flows.a", "tandem.flows.b", "tandem.flows.c"]]
    assert package_order_violations(graph) == [
        "tandem.flows.c imports tandem.cli.app (flows comes before cli: flows <- network <- sweep <- regress "
        "<- cli)"]


def test_imports_inside_functions_and_from_package_imports_are_edges() -> None:
    source = "def f():\n    from tandem.network import graph\n\nimport typing\nif typing.TYPE_CHECKING:\n" \
             "    from tandem.cli import app\n"
    tree = ast.parse(source)
    found = sorted(runtime_imports(tree, "tandem.flows.x", False))
    assert found == [(2, "tandem.network.graph"), (4, "typing")]
