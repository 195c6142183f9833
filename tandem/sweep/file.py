"""Sweep files: what ``tandem sweep`` varies and runs, read and checked before any point runs.

    [sweep]
    name = "vita-buffers"
    target = "vita"                 # a simulated target: vita or diannao
    config = "vta-default"          # the base machine config (a built-in name, or a file next to this one)
    spec = "my-vita.toml"           # optional: the base spec file
    combine = "product"             # or "zip": the parameters' values side by side
    seed = 0
    record = ["utilization", "roofline_pct"]   # optional: more of each run's report to keep

    [parameters]                    # each a list, or a range {from = A, to = B, step = S} (both ends in)
    "isa_params.LOG_INP_BUFF_SIZE" = [14, 15, 16]   # a spec parameter, set in the config's [isa_params]
    clock_mhz = { from = 100, to = 300, step = 100 } # a config value
    spec = ["vita-alu-clip.toml"]                    # spec files: instruction variants

    [[workloads]]
    layers = "resnet18"             # a layer table: every layer of it (resnet18, unit_table1, vita_quick)
    [[workloads]]
    layer = "gemm"                  # one layer of ``tandem run``'s operators, with its parameters
    params = { M = 64, N = 256, K = 256 }
    [[workloads]]
    model = "resnet18"              # a builtin model end to end (or onnx = "file.onnx")
    input_shape = { input = [1, 3, 32, 32] }

Every error is a ``SweepError`` naming the file and the line of the culprit. ``expand`` gives the points:
every combination of the parameters' values (or the zip of them) times every workload, in file order.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import itertools
import json
import math
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.flows import layer_tables as layer_tables

SIMULATED = ("vita", "diannao")
LAYER_TABLES = {"resnet18": layer_tables.RESNET18, "vita_quick": layer_tables.VITA_QUICK,
                "unit_table1": layer_tables.UNIT_TABLE1}
#: config fields a sweep may not vary (they name the machine or its files)
FIXED = ("name", "summary", "isa_params", "source", "spec", "energy_table")
WORKLOAD_KINDS = ("layers", "layer", "model", "onnx")


class SweepError(ValueError):
    """A sweep file that cannot run: the message names the file and the line."""


@dataclass(frozen=True)
class Workload:
    """One thing each configuration runs: a layer of ``tandem run`` (``op`` with ``params``), or a network
    (``model``: a builtin name, or ``onnx``: a file) with its input shapes."""

    name: str
    op: str | None = None
    params: tuple[tuple[str, Any], ...] = ()
    model: str | None = None
    onnx: str | None = None
    input_shape: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "params": [list(p) for p in self.params], "model": self.model,
                               "input_shape": [[k, list(v)] for k, v in self.input_shape]}
        if self.onnx is not None:
            out["onnx"] = _file_hash(self.onnx)
        return out


@dataclass(frozen=True)
class Sweep:
    """A checked sweep file."""

    path: Path
    name: str
    target: str
    config: str                                   # a built-in name or an absolute path
    spec: str | None
    combine: str
    seed: int
    record: tuple[str, ...]
    parameters: tuple[tuple[str, tuple[Any, ...]], ...]
    workloads: tuple[Workload, ...]

    def settings(self) -> Iterator[dict[str, Any]]:
        """Every combination of the parameters' values (or their zip), in file order, made as it is taken."""
        if not self.parameters:
            yield {}
            return
        names = [n for n, _ in self.parameters]
        values = [v for _, v in self.parameters]
        combos = zip(*values, strict=True) if self.combine == "zip" else itertools.product(*values)
        for combo in combos:
            yield dict(zip(names, combo, strict=True))

    @property
    def count(self) -> int:
        """How many points the sweep has (settings x workloads), without making them."""
        values = [len(v) for _, v in self.parameters]
        settings = (values[0] if values else 1) if self.combine == "zip" else math.prod(values)
        return settings * len(self.workloads)


@dataclass(frozen=True)
class Point:
    """One run of a sweep: a setting of the parameters on the base machine, and a workload."""

    sweep: str
    index: int
    target: str
    config: str | None              # None: the target's default config
    spec: str | None
    setting: tuple[tuple[str, Any], ...]
    workload: Workload
    seed: int
    record: tuple[str, ...]


def read_sweep(path: str | Path) -> Sweep:
    """The sweep file at ``path``, checked: every parameter known to the target's config or spec, every
    range non-empty, every workload found (SweepError naming the line)."""
    path = Path(path)
    doc, lines = read_toml(path, "sweep file", SweepError)
    _check_tables(doc, lines)
    head = doc.get("sweep")
    if not isinstance(head, dict):
        raise lines.error("sweep", "a [sweep] table is required (name, target, config)")
    unknown = set(head) - {"name", "target", "config", "spec", "combine", "seed", "record"}
    if unknown:
        key = sorted(unknown)[0]
        raise lines.error(key, f"unknown key {key!r} in [sweep]; keys are name, target, config, spec, "
                               "combine, seed, record")
    name = head.get("name", path.stem)
    target = head.get("target")
    if target not in SIMULATED:
        raise lines.error("target", f"target must be one of {', '.join(SIMULATED)} (a simulated target: "
                                    f"its cycles are deterministic), not {target!r}")
    from tandem.flows.targets import load_config, load_target

    config = resolve_name(path, head.get("config", "vta-default" if target == "vita" else "default"))
    spec = resolve_file(path, head["spec"], lines, "spec") if "spec" in head else None
    try:
        base = load_config(target, config)
        base_target = load_target(target, base, spec)
    except Exception as e:  # noqa: BLE001 - a config or spec of any kind of fault
        raise lines.error("config", f"the base machine cannot be loaded: {e}") from None
    combine = head.get("combine", "product")
    if combine not in ("product", "zip"):
        raise lines.error("combine", f"combine must be 'product' or 'zip', not {combine!r}")
    seed = head.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise lines.error("seed", f"seed must be a non-negative integer, not {seed!r}")
    record = _record(head.get("record", []), lines)
    parameters = []
    config_fields = {f.name: f for f in dataclasses.fields(base)}
    for key, raw in (doc.get("parameters") or {}).items():
        values = _values(raw, key, lines)
        if key == "spec":
            values = tuple(resolve_file(path, v, lines, key) for v in values)
            for v in values:
                try:
                    load_target(target, base, v)
                except Exception as e:  # noqa: BLE001 - a spec file of any kind of fault
                    raise lines.error(key, f"spec {v}: {e}") from None
        elif key.startswith("isa_params."):
            param = key.split(".", 1)[1]
            if param not in base_target.spec.defaults:
                known = ", ".join(sorted(base_target.spec.defaults))
                raise lines.error(key, f"unknown parameter: the {target} spec has no parameter {param!r}; "
                                       f"its parameters are {known}")
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise lines.error(key, "spec parameters take integers")
        elif key in config_fields and key not in FIXED:
            want = float if isinstance(config_fields[key].default, float) else int
            if not all(isinstance(v, want | int) and not isinstance(v, bool) and v > 0 for v in values):
                raise lines.error(key, f"{key} takes positive {'numbers' if want is float else 'integers'}")
            values = tuple(want(v) for v in values)
        else:
            variable = sorted(n for n in config_fields if n not in FIXED)
            raise lines.error(key, f"unknown parameter {key!r}: a sweep varies 'isa_params.NAME' (a spec "
                                   f"parameter), 'spec' (spec files) or a {target} config value "
                                   f"({', '.join(variable)})")
        parameters.append((key, values))
    if combine == "zip" and len({len(v) for _, v in parameters}) > 1:
        raise lines.error("combine", "combine = 'zip' needs every parameter to have as many values: "
                          + ", ".join(f"{k} has {len(v)}" for k, v in parameters))
    workloads = read_workloads(doc.get("workloads"), path, lines, target, base_target)
    out = Sweep(path, name, target, str(config), spec, combine, seed, tuple(record), tuple(parameters),
                tuple(workloads))
    if out.count > MAX_POINTS:
        raise lines.error("parameters", f"the sweep has {out.count // len(workloads):,} settings x "
                                        f"{len(workloads)} workload(s) = {out.count:,} points, more than the "
                                        f"{MAX_POINTS:,} a sweep may have: split it, or zip parameters "
                                        f"(combine = 'zip')")
    return out


def _check_tables(doc: dict[str, Any], lines: SourceLines) -> None:
    """SweepError naming a table a sweep file does not have, and the nearest one it does."""
    for table in doc:
        if table not in ("sweep", "parameters", "workloads"):
            header = f"[[{table}]]" if isinstance(doc[table], list) else f"[{table}]"
            near = difflib.get_close_matches(table, ("sweep", "parameters", "workloads"), n=1)
            hint = f" (did you mean {'[[workloads]]' if near == ['workloads'] else f'[{near[0]}]'}?)" \
                if near else ""
            raise lines.error(table, f"unknown table {header}{hint}; a sweep file has [sweep], [parameters] "
                                     f"and [[workloads]]")


def _record(record: Any, lines: SourceLines) -> list[str]:
    """``record``: report keys that some run reports (SweepError naming another, and the nearest one)."""
    if not isinstance(record, list) or not all(isinstance(r, str) for r in record):
        raise lines.error("record", "record must be a list of report keys (e.g. \"utilization\")")
    for key in record:
        if key not in recordable():
            near = difflib.get_close_matches(key, sorted(recordable()), n=1)
            raise lines.error("record", f"record names {key!r}, which no run reports"
                                        + (f" (did you mean {near[0]!r}?)" if near else "")
                                        + f"; keys are {', '.join(sorted(recordable()))}")
    return record


def read_toml(path: Path, what: str, error: type[Exception]) -> tuple[dict[str, Any], SourceLines]:
    """The TOML document at ``path`` and its lines (for errors naming a line); ``error`` naming the file
    when it cannot be read or parsed."""
    try:
        text = path.read_text()
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None
    return doc, SourceLines(path, text)


def points(sweep: Sweep) -> Iterator[Point]:
    """Every point of ``sweep``, each setting of the parameters times each workload, made as it is taken
    (a sweep of a million points holds one at a time)."""
    index = 0
    for setting in sweep.settings():
        for workload in sweep.workloads:
            yield Point(sweep.name, index, sweep.target, sweep.config, sweep.spec, tuple(setting.items()),
                        workload, sweep.seed, sweep.record)
            index += 1


def expand(sweep: Sweep) -> list[Point]:
    """Every point of ``sweep``, as a list (``points`` makes them one at a time)."""
    return list(points(sweep))


def _values(raw: Any, key: str, lines: SourceLines) -> tuple[Any, ...]:
    if isinstance(raw, dict):
        if set(raw) - {"from", "to", "step"} or not {"from", "to"} <= set(raw):
            raise lines.error(key, "a range is {from = A, to = B} or {from = A, to = B, step = S}")
        start, stop, step = raw["from"], raw["to"], raw.get("step", 1)
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (start, stop, step)) \
                or step <= 0:
            raise lines.error(key, "a range's from, to and step are numbers, step positive")
        count = int((stop - start) // step) + 1 if stop >= start else 0
        if count > MAX_POINTS:   # refused before its values are made
            raise lines.error(key, f"{key} has {count:,} values, more than the {MAX_POINTS:,} points a sweep "
                                   f"may have: a larger step, or a list of the values wanted")
        values = tuple(start + i * step for i in range(count))
    elif isinstance(raw, list):
        values = tuple(raw)
    else:
        values = (raw,)
    if not values:
        raise lines.error(key, f"{key} has no values (an empty list or a range whose end is before its "
                               "start)")
    return values


def read_workloads(raw: Any, path: Path, lines: SourceLines, target: str, base_target: Any) -> list[Workload]:
    from tandem.network.models import NAMES, QUANTIZED

    builtin = NAMES + QUANTIZED
    from tandem.flows.flow import RunError
    from tandem.flows.run import flow_for

    if not isinstance(raw, list) or not raw:
        raise lines.error("workloads", "at least one [[workloads]] table is required")
    out: list[Workload] = []
    for k, item in enumerate(raw):
        where = lines.table("workloads", k)
        kinds = [kind for kind in WORKLOAD_KINDS if kind in item]
        if len(kinds) != 1:
            raise SweepError(f"{path}:{where}: a workload is one of {', '.join(WORKLOAD_KINDS)}, but this "
                             f"one has {', '.join(kinds) or 'none'}")
        kind = kinds[0]
        unknown = sorted(set(item) - WORKLOAD_KEYS[kind])
        if unknown:
            raise SweepError(f"{path}:{where}: unknown key {unknown[0]!r} in a {kind} workload; its keys are "
                             f"{', '.join(sorted(WORKLOAD_KEYS[kind]))}")
        if kind == "layers":
            table = item["layers"]
            if table not in LAYER_TABLES:
                raise SweepError(f"{path}:{where}: no layer table {table!r}; tables are "
                                 f"{', '.join(LAYER_TABLES)}")
            for name, shape in LAYER_TABLES[table].items():
                if table == "unit_table1":
                    c, hw, oc, r, s = shape
                    params = {"H": hw, "W": hw, "IC": c, "OC": oc, "K": r, "S": s, "P": 0}
                else:
                    hw, ic, oc, kk, s = shape
                    params = {"H": hw, "W": hw, "IC": ic, "OC": oc, "K": kk, "S": s,
                              "P": layer_tables.padding(kk)}
                out.append(Workload(f"{table}:{name}", "conv2d", tuple(params.items())))
        elif kind == "layer":
            op, params = item["layer"], item.get("params", {})
            if isinstance(op, str) and ".py:" in op:   # an operator of your own: its file beside this one
                file, _, name = op.rpartition(":")
                op = f"{resolve_name(path, file)}:{name}"
            if not isinstance(params, dict):
                raise SweepError(f"{path}:{where}: params must be a table of name = value")
            try:
                flow_for(target, op).plan(op, dict(params), base_target)
            except RunError as e:
                raise SweepError(f"{path}:{where}: {e}") from None
            label = item.get("name") or f"{op}:" + ",".join(f"{k}={v}" for k, v in params.items())
            out.append(Workload(label, op, tuple(params.items())))
        else:
            shapes = item.get("input_shape", {})
            if not isinstance(shapes, dict) or not all(isinstance(v, list) for v in shapes.values()):
                raise SweepError(f"{path}:{where}: input_shape is a table of input name = [dims]")
            shape = tuple((k, tuple(v)) for k, v in shapes.items())
            if kind == "model":
                if item["model"] not in builtin:
                    raise SweepError(f"{path}:{where}: no builtin model {item['model']!r}; builtin models "
                                     f"are {', '.join(builtin)}")
                out.append(Workload(item.get("name") or item["model"], model=item["model"],
                                    input_shape=shape))
            else:
                file = resolve_name(path, item["onnx"])
                if not Path(file).is_file():
                    raise SweepError(f"{path}:{where}: the ONNX file {file} does not exist")
                out.append(Workload(item.get("name") or Path(file).stem, onnx=str(file), input_shape=shape))
    return out


#: the most points a sweep may have (settings x workloads), checked before any is made
MAX_POINTS = 1_000_000

#: the keys each kind of workload table takes
WORKLOAD_KEYS = {"layers": {"layers"}, "layer": {"layer", "params", "name"},
                 "model": {"model", "input_shape", "name"}, "onnx": {"onnx", "input_shape", "name"}}


@functools.cache
def recordable() -> frozenset[str]:
    """What ``record`` may name: a key of a layer run's report (``tandem run --json``: its fields, a
    target's measures, the energy and area) or of a network's totals (``tandem model --json``). A point
    whose report lacks a recorded key stores null for it."""
    from sim.core.energy import CostReport
    from tandem.flows.flow import MEASURED_KEYS, RunReport
    from tandem.network.run import TOTALS_KEYS

    fields = {f.name for f in dataclasses.fields(RunReport)} - set(RunReport.NOT_IN_JSON)
    costs = set(CostReport({}, {}, "", 0.0).to_json())
    return frozenset(fields | costs | set(MEASURED_KEYS) | set(TOTALS_KEYS))


def resolve_name(sweep: Path, value: str) -> str:
    """A config or file named in the sweep: a path relative to the sweep file's folder if such a file
    exists, else the name as given (a built-in config)."""
    candidate = sweep.parent / value
    return str(candidate.resolve()) if candidate.is_file() else value


def resolve_file(sweep: Path, value: Any, lines: SourceLines, key: str) -> str:
    file = sweep.parent / str(value)
    if not file.is_file():
        raise lines.error(key, f"the file {file} does not exist")
    return str(file.resolve())


class SourceLines:
    """Where a key of the sweep file is, for errors (tomllib keeps no positions)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line(self, key: str) -> int | None:
        name = key.split(".")[-1] if not key.startswith("isa_params.") else key
        pattern = re.compile(rf'^\s*(\[\[?{re.escape(name)}\]\]?|"?{re.escape(name)}"?\s*=)')
        return next((k + 1 for k, text in enumerate(self.lines) if pattern.match(text)), None)

    def table(self, name: str, k: int) -> str:
        """'line N' of the ``k``-th ``[[name]]`` header."""
        found = [i + 1 for i, text in enumerate(self.lines) if text.strip() == f"[[{name}]]"]
        return f"{found[k]}" if k < len(found) else "?"

    def error(self, key: str, message: str) -> SweepError:
        line = self.line(key)
        return SweepError(f"{self.path}:{line if line is not None else '?'}: {message}")


@functools.lru_cache(maxsize=64)
def _file_hash(path: str) -> str:
    """The sha256 of the file at ``path`` ("" where there is none: a built-in spec), read once."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path and Path(path).is_file() else ""


def point_key(point: Point, config: Any, spec: Any, version: str) -> str:
    """The results store's key of ``point``: a hash of the target, the spec (its parameters and the file it
    came from), the machine config's values, the workload and Tandem's version."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
              if f.name not in ("name", "summary", "source")}
    values["isa_params"] = dict(values["isa_params"])
    if spec is None:   # a machine that does not build: its setting is its identity
        spec_ident: Any = {"setting": [list(s) for s in point.setting]}
    else:
        spec_ident = {"params": dict(spec.params), "name": spec.name, "file": _file_hash(spec.source or "")}
    ident = {"target": point.target, "spec": spec_ident, "config": values,
             "workload": point.workload.fingerprint(), "seed": point.seed, "version": version}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]
