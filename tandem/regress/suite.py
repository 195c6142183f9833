"""Regression suites: every case compiled, run, validated and compared with a baseline (``tandem regress``).

    [suite]
    name = "experiments"
    seed = 0

    [[targets]]                     # the machines the cases run on (simulated: their cycles are exact)
    target = "vita"
    config = "tvm-paper"            # optional: a built-in name or a file next to the suite
    spec = "my-vita.toml"           # optional: a spec file of the target's family
    name = "vita-paper"             # optional: the label cases and reports use

    [[cases]]                       # what runs: the workloads of a sweep file (tandem/sweep/file.py)
    layers = "resnet18"             # a layer table (resnet18, unit_table1, vita_quick)
    targets = ["vita-paper"]        # optional: the labels of the targets it runs on (default: every one)
    [[cases]]
    layer = "my_ops.py:scaled_add"  # one operator of tandem run (builtin, or FILE.py:NAME) with params
    params = { shape = [64, 64] }
    name = "scaled add"             # optional: the case's name (default: the operator and its params)
    [[cases]]
    onnx = "model.onnx"             # a network end to end (or model = "resnet18"), int8
    input_shape = { input = [1, 3, 32, 32] }

Each case on each of its targets is one row: validated, cycles, instruction counts by opcode, DRAM bytes,
compile time (``sweep_run.evaluate``, the sweep's run of a point, on its engines). ``compare`` sets the rows
against a baseline (a JSON file of the same suite): a case that stops validating, fails, or whose cycles
grow by more than the tolerance (default 0%: cycles are exact) is a regression; fewer cycles are an
improvement; cases new to the suite or gone from it are listed. Errors in the suite or the baseline are a
``RegressError`` naming the file and the line or the case, before any case runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.sweep.file import (
    SIMULATED,
    Point,
    SourceLines,
    SweepError,
    Workload,
    read_toml,
    read_workloads,
    resolve_file,
    resolve_name,
)

FORMAT = 1
RECORD = ("instructions", "compile_s")


class RegressError(ValueError):
    """A suite or baseline that cannot be used: the message names the file and the line or the case."""


@dataclass(frozen=True)
class SuiteTarget:
    label: str
    target: str
    config: str | None
    spec: str | None


@dataclass(frozen=True)
class Case:
    """One workload on one target: its key is ``<target label> | <workload name>``."""

    target: SuiteTarget
    workload: Workload

    @property
    def key(self) -> str:
        return f"{self.target.label} | {self.workload.name}"


@dataclass(frozen=True)
class Suite:
    path: Path
    name: str
    seed: int
    cases: tuple[Case, ...]

    def points(self) -> list[tuple[str, Point]]:
        """Each case as a sweep point (the key, the point), for the sweep engines."""
        return [(case.key, Point(self.name, k, case.target.target, case.target.config, case.target.spec, (),
                                 case.workload, self.seed, RECORD))
                for k, case in enumerate(self.cases)]


def read_suite(path: str | Path) -> Suite:
    """The suite file at ``path``, checked (RegressError naming the line): its targets load, its cases name
    known operators, layer tables, models and existing files, and no case runs twice on a target."""
    path = Path(path)
    doc, lines = read_toml(path, "suite", RegressError)
    head = doc.get("suite", {})
    if not isinstance(head, dict):
        raise _error(lines, "suite", "[suite] is a table (name, seed)")
    unknown = sorted(set(head) - {"name", "seed"}) + sorted(set(doc) - {"suite", "targets", "cases"})
    if unknown:
        raise _error(lines, unknown[0], f"unknown key {unknown[0]!r}; a suite has [suite] (name, seed), "
                                        "[[targets]] and [[cases]]")
    name = head.get("name", path.stem)
    seed = head.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise _error(lines, "seed", f"seed must be a non-negative integer, not {seed!r}")
    targets = _targets(doc.get("targets"), path, lines)
    raw = doc.get("cases")
    if not isinstance(raw, list) or not raw:
        raise _error(lines, "cases", "at least one [[cases]] table is required")
    cases: list[Case] = []
    for k, item in enumerate(raw):
        where = f"{path}:{lines.table('cases', k)}"
        wanted = item.get("targets", list(targets))
        if not isinstance(wanted, list) or not all(isinstance(t, str) for t in wanted):
            raise RegressError(f"{where}: targets is a list of target labels ({', '.join(targets)})")
        missing = [t for t in wanted if t not in targets]
        if missing:
            raise RegressError(f"{where}: no target {missing[0]!r} in the suite; its targets are "
                               f"{', '.join(targets)}")
        workload = {key: v for key, v in item.items() if key != "targets"}
        for label in wanted:
            t = targets[label]
            try:
                from tandem.flows.targets import load_target

                machine = load_target(t.target, t.config, t.spec)
                found = read_workloads([workload], path, _OneTable(lines, k), t.target, machine)
            except SweepError as e:
                raise RegressError(str(e).replace(f"{path}:?", where)) from None
            cases += [Case(t, w) for w in found]
    keys = [c.key for c in cases]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise RegressError(f"{path}: case {twice[0]!r} runs twice; give one of them a name")
    return Suite(path, name, seed, tuple(cases))


class _OneTable(SourceLines):
    """``SourceLines`` of the suite where ``read_workloads`` asks for the line of its one table: the
    ``k``-th case."""

    def __init__(self, lines: SourceLines, k: int) -> None:
        self.path, self.lines, self.k = lines.path, lines.lines, k

    def table(self, name: str, k: int) -> str:
        return super().table("cases", self.k)


def _targets(raw: Any, path: Path, lines: SourceLines) -> dict[str, SuiteTarget]:
    from tandem.flows.targets import load_target

    if not isinstance(raw, list) or not raw:
        raise _error(lines, "targets", "at least one [[targets]] table is required (target, config, spec)")
    out: dict[str, SuiteTarget] = {}
    for k, item in enumerate(raw):
        where = f"{path}:{lines.table('targets', k)}"
        unknown = sorted(set(item) - {"target", "config", "spec", "name"})
        if unknown:
            raise RegressError(f"{where}: unknown key {unknown[0]!r}; a target has target, config, spec, "
                               "name")
        kind = item.get("target")
        if kind not in SIMULATED:
            raise RegressError(f"{where}: target must be one of {', '.join(SIMULATED)} (a simulated target: "
                               f"its cycles are exact), not {kind!r}")
        config = resolve_name(path, item["config"]) if "config" in item else None
        try:
            spec = resolve_file(path, item["spec"], lines, "spec") if "spec" in item else None
        except SweepError as e:
            raise RegressError(str(e)) from None
        label = item.get("name") or "-".join(x for x in (kind, item.get("config"), item.get("spec")) if x)
        if label in out:
            raise RegressError(f"{where}: a second target named {label!r}; give each a name")
        try:
            load_target(kind, config, spec)
        except Exception as e:  # noqa: BLE001 - a config or spec of any kind of fault
            raise RegressError(f"{where}: target {label!r} cannot be loaded: {e}") from None
        out[label] = SuiteTarget(label, kind, config, spec)
    return out


def _error(lines: SourceLines, key: str, message: str) -> RegressError:
    return RegressError(str(lines.error(key, message)))


# ------------------------------------------------------------------------------------------ results
def result_of(row: dict[str, Any]) -> dict[str, Any]:
    """What a baseline keeps of a case's row."""
    metrics = row.get("metrics") or {}
    return {"status": row["status"], "validated": bool(row.get("validated", False)),
            "cycles": row.get("cycles"), "instructions": metrics.get("instructions"),
            "dram_bytes": row.get("dram_bytes"), "compile_s": metrics.get("compile_s"),
            **({"error": row["error"]} if "error" in row else {})}


def baseline_json(suite: Suite, results: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    return {"tandem_regress": FORMAT, "suite": suite.name, "seed": suite.seed, "tandem": version,
            "cases": dict(sorted(results.items()))}


def read_baseline(path: str | Path, suite: Suite) -> dict[str, dict[str, Any]]:
    """The cases of the baseline at ``path``, which must be one of ``suite`` (RegressError otherwise)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise RegressError(f"{path}: cannot read the baseline: {e.strerror} (record one with --update)"
                           ) from None
    except json.JSONDecodeError as e:
        raise RegressError(f"{path}: the baseline is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("tandem_regress") != FORMAT or \
            not isinstance(doc.get("cases"), dict):
        raise RegressError(f"{path}: not a tandem regress baseline (format {FORMAT})")
    if doc.get("suite") != suite.name:
        raise RegressError(f"{path}: this baseline is of suite {doc.get('suite')!r}, not {suite.name!r} "
                           f"({suite.path}); give the suite's own baseline, or record one with --update")
    if doc.get("seed") != suite.seed:
        raise RegressError(f"{path}: this baseline ran with seed {doc.get('seed')}, the suite with seed "
                           f"{suite.seed}")
    return doc["cases"]


@dataclass
class Comparison:
    """The suite's results against a baseline."""

    regressions: list[dict[str, Any]] = field(default_factory=list)
    improvements: list[dict[str, Any]] = field(default_factory=list)
    tolerated: list[dict[str, Any]] = field(default_factory=list)   # slower, within the tolerance
    unchanged: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.regressions

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "regressions": self.regressions, "improvements": self.improvements,
                "tolerated": self.tolerated, "unchanged": self.unchanged, "new": self.new, "gone": self.gone}


def compare(results: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]],
            tolerance_pct: float = 0.0) -> Comparison:
    """Each case's result against its baseline: a regression when it no longer runs or validates, or its
    cycles grew by more than ``tolerance_pct`` percent; an improvement when its cycles fell; tolerated when
    they grew within the tolerance; unchanged only when they are equal."""
    out = Comparison()
    for key, now in results.items():
        old = baseline.get(key)
        if old is None:
            out.new.append(key)
            continue
        entry = {"case": key, "old_cycles": old.get("cycles"), "new_cycles": now.get("cycles")}
        if old.get("validated") and not now.get("validated"):
            why = now.get("error") or "the output differs from numpy"
            out.regressions.append({**entry, "why": f"no longer validates: {why}"})
        elif now.get("cycles") is not None and old.get("cycles") is not None:
            before, after = old["cycles"], now["cycles"]
            if after > before * (1 + tolerance_pct / 100):
                change = 100 * (after - before) / before if before else float("inf")
                out.regressions.append({**entry, "change_pct": round(change, 3),
                                        "why": f"cycles {before:,} -> {after:,} ({change:+.2f}%)"})
            elif after != before:
                change = 100 * (after - before) / before
                (out.improvements if after < before else out.tolerated).append(
                    {**entry, "change_pct": round(change, 3)})
            else:
                out.unchanged.append(key)
        else:
            out.unchanged.append(key)
    out.gone = sorted(set(baseline) - set(results))
    return out
