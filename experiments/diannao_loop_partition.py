"""Seed 001's experiment: tensor instructions fused with loop partitioning on the DianNao card (Sec. V,
Table II, Figs. 5-8).

For each of Table II's 48 cases (16 shapes each of element-wise binary, in-place relu and conv), three
variants run on the simulated card (sim/diannao, 16 cores, the ``default`` config):

- (a) Tandem with every pass: ``tandem.flows.diannao.run_diannao(op, shape)``;
- (b) the same without seed 001's passes: ``skip=("loop_partition", "preprocess")``, so guarded or misfit
  statements stay scalar code;
- (c) the vendor's hand-written library (``baselines.diannao_library``), the paper's baseline.

All three see the same input arrays (seed 0, standard normal). Each case records cycles of a, b and c, the
speedups a/b = cycles_b / cycles_a and a/c = cycles_c / cycles_a (the paper's S = T_baseline / T_generated),
tensor and scalar instruction counts and scalar fallback of a and b, the roofline of a, validation of all
three, and why the first statement of b stayed scalar. A variant that raises is recorded as
``error: <message>`` with empty numbers, a warning is printed, and the case is left out of the means; so is a
case whose variants did not validate. Per class, the means are geometric over the cases (the paper's
"geometric mean over 16 cases"; binary pools add, sub and mul, 48 cases), and the % of roofline of (a) is
their arithmetic mean.

Assumptions (the paper does not say, or says ambiguously):

- element-wise operators run in float32 on the flat tensor (a 4-tuple of Table II is just more elements);
- conv: input (H, W, Cin) HWC, weights (Cout, 3, 3, Cin) with Cin taken from the input (Table II prints 256
  as the weights' last dimension even where Cin is 128 or 64), stride 1, pad 1, float32 (the compiler does
  not state f16 inputs summed in f32 in one stage; (c) runs f32 too, so both pay the TFU's f32 rate).
  (a) and (c) are validated against a float64 reference within the f32 summation error bound.
- conv (b): without the passes the whole layer stays scalar code (the reduction is not in the form the
  conv instruction matches), about 65 simulated instructions per MAC; a Table II layer (up to 924M MACs)
  would take hours of simulation each. So (b) runs on the layer's *twin*: the same H, W, Cout, kernel,
  stride and padding with Cin divided by ``--conv-b-scale`` (32 by default: 32x fewer MACs, the same core
  split, tails and output blocks; Cout stays a multiple of the conv unit's 16), and (a) runs again on the
  twin. (b) runs with an instruction budget of ``B_INSTRUCTION_BUDGET`` per core. A conv row's a/b is
  ``cycles_b / cycles_a_on_b``, both on the twin (``shape_b`` names it); why the full layer stays scalar
  (``unmatched_b``) comes from compiling the full layer without the passes.

Writes ``<out>/diannao_loop_partition.csv``, ``<out>/summary.json`` (the means), ``<out>/speedup_<class>.png``
(per-case speedups of a over c and, on a log axis, of a over b: the paper's Figs. 5-8) and
``<out>/summary.png`` (the geometric means next to the paper's: conv 1.94x, binary 1.25x, relu 1.18x).

    python experiments/diannao_loop_partition.py [--quick] [--no-b] [--jobs N] [--classes binary,relu,conv]
                                                 [--conv-b-scale 8] [--tune 6]

``--classes`` also takes one binary op alone (add, sub or mul).

``--quick`` runs a few small cases that are NOT Table II's (scaled-down shapes of the same character: one
that divides over 16 cores, one that does not; one small conv layer) in a few seconds; the tests run it.
Variant (b) of a full run is slow (the scalar fallback of a 255x55x55 add simulates ~70M instructions, ~30 s;
the 4-tuple shapes are 15x larger; a 55x55 conv twin runs ~10^9): ``--no-b`` leaves it out.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import textwrap
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from baselines import diannao_library as library
from compiler.ops.nn import ConvShape
from compiler.passes.tensorize import unmatched
from sim.diannao.config import load_config
from tandem.flows.diannao import compile_conv2d, conv2d_within_bound, run_diannao
from tandem.flows.layer_tables import SEED001_CONV
from tandem.flows.targets import load_target

# ----------------------------------------------------------------------------------------- Table II
#: Element-wise binary (add, sub, mul) and relu shapes, Table II order.
ELEMENTWISE_SHAPES: tuple[tuple[int, ...], ...] = (
    (256, 56, 56, 15), (256, 56, 56, 8), (256, 56, 56), (128, 56, 56), (64, 56, 56), (32, 56, 56),
    (256, 28, 28), (128, 28, 28), (255, 55, 55, 14), (255, 55, 55, 7), (255, 55, 55), (127, 55, 55),
    (63, 55, 55), (31, 55, 55), (255, 27, 27), (127, 27, 27),
)
#: Conv layers as Table II prints them: ((H, W, Cin), (Cout, KH, KW, ?)); see the module docstring for "?".
CONV_LAYERS: tuple[tuple[tuple[int, int, int], tuple[int, int, int, int]], ...] = tuple(
    ((hw, hw, cin), (cout, 3, 3, 256)) for hw, cin, cout in SEED001_CONV)
BINARY_OPS = ("add", "sub", "mul")
CLASSES = ("binary", "relu", "conv")
#: The paper's geometric-mean speedups over the vendor library (Sec. V).
PAPER_AC = {"binary": 1.2511, "relu": 1.1789, "conv": 1.9433}

# --quick: NOT Table II shapes; scaled-down ones of the same character (12544 = 16 x 784 divides over the 16
# cores; 10935 does not), one binary op, and one small conv layer.
QUICK_SHAPES: tuple[tuple[int, ...], ...] = ((16, 28, 28), (15, 27, 27))
QUICK_BINARY_OPS = ("add",)
QUICK_CONV_LAYERS = (((14, 14, 32), (32, 3, 3, 32)),)

ELEMENTWISE_DTYPE = "float32"
CONV_DTYPE = "float32"
LIBRARY_DTYPES = {"float32": "f32", "float16": "f16"}
CORES = 16
SEED = 0
SKIP_B = ("loop_partition", "preprocess")
CONV_B_SCALE = 32   # conv variant (b) runs on the layer with Cin divided by this (module docstring)
#: Instructions a core may run in variant (b): scalar conv code runs billions (the default config's budget,
#: a guard against runaway loops, is 10^8).
B_INSTRUCTION_BUDGET = 20_000_000_000

COLUMNS = (
    "class", "op", "case", "shape", "weights", "dtype",
    "status_a", "status_b", "status_c", "cycles_a", "cycles_b", "cycles_c", "shape_b", "cycles_a_on_b",
    "speedup_ab", "speedup_ac",
    "tensor_insns_a", "scalar_insns_a", "tensor_insns_b", "scalar_insns_b",
    "scalar_fallback_a", "scalar_fallback_b", "roofline_cycles_a", "roofline_pct_a",
    "validated_a", "validated_b", "validated_c", "unmatched_b",
)
REASON_CHARS = 100   # unmatched_b and error messages are cut to this many characters


@dataclass(frozen=True)
class Case:
    """One measurement: class ``cls``, operator ``op``, its 1-based position ``index`` in its table, the
    input shape and, for conv, the weight shape (Cout, KH, KW, Cin)."""

    cls: str
    op: str
    index: int
    shape: tuple[int, ...]
    weights: tuple[int, ...] | None = None


def table_ii_cases(classes: Iterable[str] = CLASSES) -> list[Case]:
    """Table II's cases of ``classes``: 16 shapes per binary op (48), 16 relu shapes, 16 conv layers."""
    return _cases(classes, ELEMENTWISE_SHAPES, BINARY_OPS, CONV_LAYERS)


def quick_cases(classes: Iterable[str] = CLASSES) -> list[Case]:
    """The ``--quick`` cases of ``classes`` (not Table II shapes; see QUICK_SHAPES)."""
    return _cases(classes, QUICK_SHAPES, QUICK_BINARY_OPS, QUICK_CONV_LAYERS)


def _cases(classes: Iterable[str], shapes: Sequence[tuple[int, ...]], binary_ops: Sequence[str],
           layers: Sequence[tuple[tuple[int, int, int], tuple[int, ...]]]) -> list[Case]:
    classes = list(classes)
    unknown = [c for c in classes if c not in CLASSES + BINARY_OPS]
    if unknown:
        raise ValueError(f"unknown class {unknown[0]!r}; expected some of {', '.join(CLASSES + BINARY_OPS)}")
    ops = binary_ops if "binary" in classes else [op for op in binary_ops if op in classes]
    out: list[Case] = [Case("binary", op, k, s) for op in ops for k, s in enumerate(shapes, 1)]
    if "relu" in classes:
        out += [Case("relu", "relu", k, s) for k, s in enumerate(shapes, 1)]
    if "conv" in classes:
        out += [Case("conv", "conv2d", k, x, (w[0], w[1], w[2], x[2])) for k, (x, w) in enumerate(layers, 1)]
    return out


# ----------------------------------------------------------------------------------------- running
def run_case(case: Case, with_b: bool = True, conv_b_scale: int = CONV_B_SCALE, tune: int = 0) -> dict:
    """Run variants (a), (b) (unless ``with_b`` is false) and (c) of ``case`` on the same inputs; return its
    CSV row (COLUMNS; None where a variant failed or was skipped) plus ``wall_s`` (not written to the CSV).
    Conv's (b) runs on the twin ``conv_twin(case, conv_b_scale)``, next to (a) on that twin."""
    start = time.perf_counter()
    dtype = CONV_DTYPE if case.cls == "conv" else ELEMENTWISE_DTYPE
    inputs = _inputs(case, dtype)
    row: dict = dict.fromkeys(COLUMNS)
    row.update({"class": case.cls, "op": case.op, "case": case.index, "shape": _dims(case.shape),
                "weights": _dims(case.weights) if case.weights else "", "dtype": dtype})
    a = _attempt(lambda: _compiled(case, dtype, inputs, (), tune=tune))
    row["status_a"] = a[0]
    if a[1] is not None:
        r = a[1]
        row.update(cycles_a=r.cycles, tensor_insns_a=r.tensor_instructions,
                   scalar_insns_a=r.scalar_instructions, scalar_fallback_a=r.scalar_fallback,
                   roofline_cycles_a=r.roofline_cycles,
                   roofline_pct_a=r.roofline_pct, validated_a=r.validated)
    if with_b:
        _run_b(case, dtype, inputs, conv_b_scale, row)
    else:
        row["status_b"] = "skipped"
    c = _attempt(lambda: _library(case, dtype, inputs))
    row["status_c"] = c[0]
    if c[1] is not None:
        row.update(cycles_c=c[1][0], validated_c=c[1][1])
    if row["cycles_a_on_b"] and row["cycles_b"]:
        row["speedup_ab"] = round(row["cycles_b"] / row["cycles_a_on_b"], 4)
    if row["cycles_a"] and row["cycles_c"]:
        row["speedup_ac"] = round(row["cycles_c"] / row["cycles_a"], 4)
    row["wall_s"] = time.perf_counter() - start
    return row


def conv_twin(case: Case, scale: int) -> Case:
    """The conv layer ``case`` with Cin divided by ``scale`` (same H, W, Cout, kernel, stride, padding):
    where conv variant (b) runs (see the module docstring)."""
    (h, w, cin), (cout, kh, kw, _) = case.shape, case.weights
    if scale < 1 or cin % scale:
        raise ValueError(f"--conv-b-scale {scale} must divide the layer's Cin {cin}")
    return Case(case.cls, case.op, case.index, (h, w, cin // scale), (cout, kh, kw, cin // scale))


def _run_b(case: Case, dtype: str, inputs: list[np.ndarray], conv_b_scale: int, row: dict) -> None:
    """Variant (b) into ``row``: on the case itself, or, for conv, on its twin next to (a) on the twin."""
    on, on_inputs = case, inputs
    if case.cls == "conv":
        reasons = _attempt(lambda: _conv_unmatched(case, dtype))
        row["unmatched_b"] = _short(reasons[1][0]) if reasons[1] else reasons[0]
        on = conv_twin(case, conv_b_scale)
        on_inputs = _inputs(on, dtype)
        a_twin = _attempt(lambda: _compiled(on, dtype, on_inputs, ()))
        if a_twin[1] is None or not a_twin[1].validated:
            row["status_b"] = f"error: (a) on the twin: {a_twin[0] if a_twin[1] is None else 'not validated'}"
            return
        row["cycles_a_on_b"] = a_twin[1].cycles
    row["shape_b"] = _dims(on.shape) + (f" * {_dims(on.weights)}" if on.weights else "")
    b = _attempt(lambda: _compiled(on, dtype, on_inputs, SKIP_B, B_INSTRUCTION_BUDGET))
    row["status_b"] = b[0]
    if b[1] is not None:
        r = b[1]
        row.update(cycles_b=r.cycles, tensor_insns_b=r.tensor_instructions,
                   scalar_insns_b=r.scalar_instructions, scalar_fallback_b=r.scalar_fallback,
                   validated_b=r.validated)
        if case.cls != "conv":
            row.update(cycles_a_on_b=row["cycles_a"],
                       unmatched_b=_short(r.unmatched[0]) if r.unmatched else "")


def _inputs(case: Case, dtype: str) -> list[np.ndarray]:
    """The case's input arrays, shared by all three variants: seeded standard normal values."""
    rng = np.random.default_rng(SEED)
    np_dt = np.dtype(dtype)
    if case.cls == "conv":
        shapes = [case.shape, case.weights]
    else:
        shapes = [case.shape] * (1 if case.op == "relu" else 2)
    return [rng.standard_normal(s).astype(np_dt) for s in shapes]


def _compiled(case: Case, dtype: str, inputs: list[np.ndarray], skip: tuple[str, ...],
              budget: int | None = None, tune: int = 0):
    """Variant (a) (``skip`` empty) or (b) of ``case``: Tandem's compiled kernel, a ``RunReport``;
    ``budget`` replaces the config's instruction budget per core; a conv's ``tune`` (> 0) simulates the
    estimate's first ``tune`` cuts and keeps the fastest."""
    conv = ConvShape(*case.shape, case.weights[0], case.weights[1], 1, 1) if case.cls == "conv" else None
    config = load_config("default")
    if budget is not None:
        config = dataclasses.replace(config, instruction_budget=budget)
    return run_diannao(case.op, case.shape, dtype, cores=CORES, skip=skip, inputs=inputs, conv=conv,
                       config=config, tune=tune if conv is not None else 0)


def _conv_unmatched(case: Case, dtype: str) -> list[str]:
    """Why conv variant (b) keeps statements scalar, from compiling it without the passes."""
    target = load_target("diannao")
    layer = ConvShape(*case.shape, case.weights[0], case.weights[1], 1, 1)
    _, func = compile_conv2d(layer, dtype, CORES, target, SKIP_B)
    return sorted({str(x) for x in unmatched(func, target.spec)}) or ["(nothing: every statement matched)"]


def _library(case: Case, dtype: str, inputs: list[np.ndarray]) -> tuple[int, bool]:
    """Variant (c) of ``case``: the library's cycles, and whether its output validated."""
    lib_dtype = LIBRARY_DTYPES[dtype]
    if case.cls == "conv":
        h, w, cin = case.shape
        run = library.conv2d(h, w, cin, case.weights[0], k=case.weights[1], stride=1, pad=1, dtype=lib_dtype,
                             cores=CORES, inputs=inputs)
        return run.result.cycles, conv2d_within_bound(run.output, inputs[0], inputs[1], 1, 1)
    run = library.elementwise(case.op, case.shape, lib_dtype, cores=CORES, inputs=inputs)
    return run.result.cycles, bool(np.array_equal(run.output, run.reference, equal_nan=True))


def _attempt(variant) -> tuple[str, object]:
    """``("ok", result)``, or ``("error: <message>", None)`` when the variant raises."""
    try:
        return "ok", variant()
    except Exception as exc:   # any failure is recorded, never replaced by a number
        return f"error: {_short(f'{type(exc).__name__}: {exc}')}", None


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _dims(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


def run_cases(cases: Sequence[Case], with_b: bool = True, jobs: int = 1, console: Console | None = None,
              conv_b_scale: int = CONV_B_SCALE, tune: int = 0) -> list[dict]:
    """Run every case (over ``jobs`` processes; the rows do not depend on it), printing one line per case
    and a warning per failed or unvalidated variant; return the rows in the order of ``cases``."""
    if jobs < 1:
        raise ValueError(f"expected jobs >= 1, but got {jobs}")
    console = console or Console(highlight=False, soft_wrap=True)
    rows: list[dict] = []
    if jobs == 1:
        results = (run_case(c, with_b, conv_b_scale, tune) for c in cases)
        for k, row in enumerate(results, 1):
            _report(console, k, len(cases), row)
            rows.append(row)
        return rows
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(run_case, cases, [with_b] * len(cases), [conv_b_scale] * len(cases),
                           [tune] * len(cases))
        for k, row in enumerate(results, 1):
            _report(console, k, len(cases), row)
            rows.append(row)
    return rows


def _report(console: Console, k: int, total: int, row: dict) -> None:
    ac = f"{row['speedup_ac']:.3f}x" if row["speedup_ac"] else "-"
    ab = f"{row['speedup_ab']:.2f}x" if row["speedup_ab"] else "-"
    what = row["shape"] + (f" * {row['weights']}" if row["weights"] else "")
    console.print(f"[{k}/{total}] {row['class']} {row['op']} {what}: cycles a {row['cycles_a'] or '-'}, "
                  f"b {row['cycles_b'] or '-'}, c {row['cycles_c'] or '-'}; a/c {ac}, a/b {ab} "
                  f"({row['wall_s']:.1f} s)", markup=False)
    for problem in problems(row):
        console.print(f"  warning: {problem}; left out of the means", style="yellow", markup=False)


def problems(row: dict) -> list[str]:
    """Why ``row``'s variants cannot enter the means: errors and failed validations (b when it ran)."""
    out = []
    for v in ("a", "b", "c"):
        status = row[f"status_{v}"]
        if status.startswith("error"):
            out.append(f"({v}) {status}")
        elif status == "ok" and row[f"validated_{v}"] is False:
            out.append(f"({v}) did not validate against numpy")
    return out


# ----------------------------------------------------------------------------------------- means
def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values`` (ValueError if there are none or one is not positive)."""
    if not values:
        raise ValueError("expected at least one value for a geometric mean, but got none")
    if any(not v > 0 for v in values):
        raise ValueError(f"expected positive values for a geometric mean, but got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: Sequence[dict]) -> list[dict]:
    """Per class (and per binary op): how many cases, how many entered the means, the geometric means of a/b
    and a/c (from the cycles, unrounded), the arithmetic mean % of roofline of (a), and the paper's a/c. A
    mean is None when no case has both of its variants ok and validated."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["class"], []).append(row)
        if row["class"] == "binary":
            groups.setdefault(f"binary:{row['op']}", []).append(row)
    out = []
    for name, members in groups.items():
        ab = [r["cycles_b"] / r["cycles_a_on_b"] for r in members if _usable(r, "b") and r["cycles_a_on_b"]]
        ac = [r["cycles_c"] / r["cycles_a"] for r in members if _usable(r, "a") and _usable(r, "c")]
        roof = [r["roofline_pct_a"] for r in members if _usable(r, "a")]
        out.append({"group": name, "cases": len(members), "cases_ac": len(ac), "cases_ab": len(ab),
                    "geomean_ab": geomean(ab) if ab else None, "geomean_ac": geomean(ac) if ac else None,
                    "roofline_pct_a": sum(roof) / len(roof) if roof else None,
                    "paper_ac": PAPER_AC.get(name)})
    return out


def _usable(row: dict, variant: str) -> bool:
    return row[f"status_{variant}"] == "ok" and row[f"validated_{variant}"] is True


# ----------------------------------------------------------------------------------------- output
def write_csv(rows: Sequence[dict], path: Path) -> None:
    """The rows as CSV with COLUMNS (None written as an empty field)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: ("" if row[k] is None else row[k]) for k in COLUMNS} for row in rows)


def print_summary(summary: Sequence[dict], console: Console) -> None:
    table = Table(title="Seed 001, Sec. V: geometric-mean speedups of (a) Tandem with all passes")
    for name in ("class", "cases", "a/b (no partition)", "a/c (library)", "% roofline (a)", "paper a/c"):
        table.add_column(name, justify="left" if name == "class" else "right")

    def fmt(value, used, total, spec):
        return "-" if value is None else f"{value:{spec}}" + ("" if used == total else f" ({used}/{total})")

    for s in summary:
        table.add_row(s["group"], str(s["cases"]), fmt(s["geomean_ab"], s["cases_ab"], s["cases"], ".3f"),
                      fmt(s["geomean_ac"], s["cases_ac"], s["cases"], ".3f"),
                      "-" if s["roofline_pct_a"] is None else f"{s['roofline_pct_a']:.1f}",
                      "-" if s["paper_ac"] is None else f"{s['paper_ac']:.4f}")
    console.print(table)
    if any(s["group"] == "conv" and s["cases_ab"] for s in summary):
        console.print("conv a/b: (a) and (b) both on the layers' twins with Cin / --conv-b-scale "
                      "(column shape_b)", markup=False)


def plot_class(rows: Sequence[dict], cls: str, path: Path) -> None:
    """Per-case speedups of one class: a over c (bars, the paper's mean dashed) above a over b (log axis);
    one bar per op and case, a line at 1.0; cases with no number say so in the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    members = [r for r in rows if r["class"] == cls]
    ops = list(dict.fromkeys(r["op"] for r in members))
    cases = sorted({r["case"] for r in members})
    labels = {r["case"]: r["shape"] + (f"\n{r['weights']}" if r["weights"] else "") for r in members}
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.7 * len(cases) + 2), 7), sharex=True)
    width = 0.8 / len(ops)
    for ax, key, title in ((axes[0], "speedup_ac", "(a) over the library (c)"),
                           (axes[1], "speedup_ab", "(a) over no loop partitioning / preprocessing (b)")):
        plotted = 0
        for j, op in enumerate(ops):
            got = {r["case"]: r[key] for r in members if r["op"] == op and r[key]}
            xs = [cases.index(c) + (j - (len(ops) - 1) / 2) * width for c in got]
            ax.bar(xs, list(got.values()), width, label=op)
            plotted += len(got)
        ax.axhline(1.0, color="black", linewidth=0.8)
        twin = " (both on the Cin-scaled twin)" if cls == "conv" and key == "speedup_ab" else ""
        ax.set_title(f"{cls}: speedup of {title}{twin}")
        ax.set_ylabel("speedup (cycles)")
        if key == "speedup_ab":
            ax.set_yscale("log")
        elif cls in PAPER_AC:
            ax.axhline(PAPER_AC[cls], color="gray", linestyle="--", linewidth=0.8,
                       label=f"paper's mean {PAPER_AC[cls]:.2f}x")
        if not plotted:
            ax.text(0.5, 0.5, textwrap.fill(_why_empty(members, key), 60), ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
        if plotted and (len(ops) > 1 or key == "speedup_ac"):
            ax.margins(y=0.3)   # room for the legend above the bars
            ax.legend(fontsize=8, loc="upper left", ncols=len(ops) + 1)
    axes[1].set_xticks(range(len(cases)), [labels[c] for c in cases], rotation=60, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _why_empty(members: Sequence[dict], key: str) -> str:
    variants = ("a", "b") if key == "speedup_ab" else ("a", "c")
    for row in members:
        for v in variants:
            if row[f"status_{v}"] != "ok":
                return f"no measurement: ({v}) {row[f'status_{v}']}"
    return "no measurement"


def plot_summary(summary: Sequence[dict], path: Path) -> None:
    """Geometric-mean speedup of (a) over the library per class, next to the paper's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = [s for s in summary if s["group"] in CLASSES]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = np.arange(len(classes))
    ours = [s["geomean_ac"] or 0.0 for s in classes]
    ax.bar(xs - 0.2, ours, 0.4, label="Tandem (a) over library (c), simulated")
    ax.bar(xs + 0.2, [s["paper_ac"] for s in classes], 0.4, label="paper (Sec. V)")
    for x, s in zip(xs, classes, strict=True):
        if s["geomean_ac"] is None:
            ax.text(x - 0.2, 0.05, "n/a", ha="center", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(xs, [s["group"] for s in classes])
    ax.set_ylabel("geometric-mean speedup")
    ax.set_title("Seed 001: speedup over the vendor library")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(rows: Sequence[dict], out: Path) -> list[dict]:
    """The CSV, summary.json and the PNGs under ``out``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "diannao_loop_partition.csv")
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for cls in dict.fromkeys(r["class"] for r in rows):
        plot_class(rows, cls, out / f"speedup_{cls}.png")
    plot_summary(summary, out / "summary.png")
    return summary


# ----------------------------------------------------------------------------------------- CLI
DEFAULT_OUT = Path("experiments/out/diannao_loop_partition")
OutOption = Annotated[Path, typer.Option(help="Output folder.")]
QuickOption = Annotated[bool, typer.Option("--quick", help="A few small cases (not Table II's).")]
ClassesOption = Annotated[str, typer.Option(
    help="Comma-separated classes: binary, relu, conv; or one binary op alone: add, sub, mul.")]
NoBOption = Annotated[bool, typer.Option("--no-b", help="Skip variant (b), the slow scalar fallback.")]
JobsOption = Annotated[int, typer.Option(min=1, help="Processes over the cases (rows do not depend on it).")]
ConvBScaleOption = Annotated[int, typer.Option(
    min=1, help="Conv variant (b) runs on the layer with Cin divided by this (a/b on that twin).")]
TuneOption = Annotated[int, typer.Option(
    min=0, help="Conv variant (a): simulate the estimate's first N cuts, keep the fastest (0: its choice).")]


def main(out: OutOption = DEFAULT_OUT, quick: QuickOption = False,
         classes: ClassesOption = "binary,relu,conv",
         no_b: NoBOption = False, jobs: JobsOption = 1,
         conv_b_scale: ConvBScaleOption = CONV_B_SCALE, tune: TuneOption = 0) -> None:
    """Run seed 001's experiment (Table II) on the simulated DianNao card; write CSV, JSON and PNGs."""
    console = Console(highlight=False, soft_wrap=True)
    try:
        chosen = [c.strip() for c in classes.split(",") if c.strip()]
        cases = quick_cases(chosen) if quick else table_ii_cases(chosen)
    except ValueError as exc:
        console.print(f"error: --classes: {exc}", markup=False)
        raise typer.Exit(code=2) from None
    start = time.perf_counter()
    rows = run_cases(cases, with_b=not no_b, jobs=jobs, console=console, conv_b_scale=conv_b_scale, tune=tune)
    summary = write_outputs(rows, out)
    print_summary(summary, console)
    console.print(f"{len(rows)} cases in {time.perf_counter() - start:.1f} s; wrote {out}", markup=False)


if __name__ == "__main__":
    typer.run(main)
