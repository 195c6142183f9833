"""The HTML report of a sweep's results: figures (matplotlib PNGs) and tables.

A design point is one setting of the parameters (one machine); its cost is summed over the workloads it
ran (all of them valid: a machine that failed a workload is listed but not plotted). Figures:

- ``pareto_area.png``: cycles vs area, the Pareto front (no other point is both smaller and faster);
- ``pareto_energy.png``: energy vs cycles, its Pareto front;
- ``parameters.png``: each parameter's effect, the geometric mean of cycles over the points with each value;
- ``best_layers.png``: the fastest and the smallest points of the front, cycles per workload (a network's
  per-layer table when the workload is a network).

The page marks itself once loaded: ``<body data-figures="N" data-broken="M">``, where M counts images that
did not load (a test opens it in headless Chromium and reads them).
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from sim.core.energy import NOT_PRICED

FIGURES = ("pareto_area.png", "pareto_energy.png", "parameters.png", "interactions.png", "best_layers.png")
#: what each figure shows and how to read it (the page's captions)
CAPTIONS = {
    "pareto_area.png": "Cycles against area, one dot per design point (its number is its row in the table "
                       "of all points). The red line is the Pareto front: no other point is both smaller and "
                       "faster. Lower left is better.",
    "pareto_energy.png": "Energy against cycles, one dot per design point, numbered as in the table. The red "
                         "line is the Pareto front: no other point uses less energy and fewer cycles. Lower "
                         "left is better.",
    "parameters.png": "Each swept parameter alone: the geometric mean of cycles over the design points with "
                      "each value (other parameters vary underneath; two parameters together are in the "
                      "next figure). A value whose points all failed is marked 'failed'.",
    "interactions.png": "Each pair of swept parameters together: cycles, energy and area of the design "
                        "points at each pair of values (the geometric mean over the other parameters), "
                        "darker is more; does one parameter's effect depend on the other? A blank cell: "
                        "every point there failed.",
    "best_layers.png": "Per workload (a network's per-layer steps), the cycles of the two ends of the "
                       "cycles-area front: the fastest design point and the smallest.",
}


def design_points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per setting of the parameters: its rows, and its cycles and energy summed over them and
    its area (None where a row failed)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[repr(sorted((r["setting"] or {}).items()))].append(r)
    out = []
    for members in groups.values():
        ok = all(r["status"] == "ok" for r in members)
        energy = [r["energy_uj"] for r in members]
        out.append({"setting": members[0]["setting"] or {}, "config": members[0]["config"], "rows": members,
                    "ok": ok, "cycles": sum(r["cycles"] for r in members) if ok else None,
                    "energy_uj": sum(energy) if ok and None not in energy else None,
                    "area_mm2": members[0]["area_mm2"] if ok else None})
    return out


def pareto(points: list[dict[str, Any]], x: str, y: str) -> list[dict[str, Any]]:
    """The points no other point beats on both ``x`` and ``y`` (smaller is better), by increasing x."""
    ok = sorted((p for p in points if p[x] is not None and p[y] is not None), key=lambda p: (p[x], p[y]))
    front, best = [], math.inf
    for p in ok:
        if p[y] < best:
            front.append(p)
            best = p[y]
    return front


def label(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('isa_params.')}={Path(str(v)).name if k == 'spec' else v}"
                     for k, v in setting.items()) or "base"


def write_report(rows: list[dict[str, Any]], out: Path, title: str = "sweep") -> Path:
    """Write ``out``/index.html and its figures for ``rows`` (a results store's); return the page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = design_points(rows)
    for number, p in enumerate(points, start=1):
        p["number"] = number
    by_area = pareto(points, "area_mm2", "cycles")
    by_energy = pareto(points, "cycles", "energy_uj")
    _scatter(plt, points, by_area, "area_mm2", "cycles", "area (mm²)", "cycles (sum over workloads)",
             "Cycles vs area", out / FIGURES[0])
    _scatter(plt, points, by_energy, "cycles", "energy_uj", "cycles (sum over workloads)", "energy (µJ)",
             "Energy vs cycles", out / FIGURES[1])
    _parameters(plt, points, out / FIGURES[2])
    _interactions(plt, points, out / FIGURES[3])
    ends = [p for p in (by_area[-1] if by_area else None, by_area[0] if by_area else None) if p]
    _layers(plt, list({id(p): p for p in ends}.values()), out / FIGURES[4])
    page = out / "index.html"
    page.write_text(_html(title, rows, points, by_area, by_energy))
    return page


def _scatter(plt, points, front, x, y, xlabel, ylabel, title, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = [p for p in points if p[x] is not None and p[y] is not None]
    ax.scatter([p[x] for p in ok], [p[y] for p in ok], s=22, color="#999", label="design points (numbered)")
    on_front = {p["number"] for p in front}
    for p in ok:
        if p["number"] not in on_front:
            ax.annotate(str(p["number"]), (p[x], p[y]), fontsize=7, color="#555", xytext=(2, -8),
                        textcoords="offset points")
    ax.plot([p[x] for p in front], [p[y] for p in front], "o-", color="#c0392b", label="Pareto front")
    for p in front:   # the number only: the front's table beside the figure gives the setting
        ax.annotate(str(p["number"]), (p[x], p[y]), fontsize=9, fontweight="bold", color="#c0392b",
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(xlabel, fontsize=11)
    ax.set_ylabel(ylabel, fontsize=11)
    ax.set_title(title, fontsize=12)
    if ok and min(p[y] for p in ok) > 0 and max(p[y] for p in ok) / min(p[y] for p in ok) > 20:
        ax.set_yscale("log")
    _plain_numbers(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plain(value: float, _=None) -> str:
    """An axis number written out: thousands separators, no "1e6" offset."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"


def _plain_numbers(ax, which: str = "xy") -> None:
    """Numbers on the ``which`` axes written out with thousands separators (no "1e6" offset) where linear
    (a bar chart's categories are left alone: ``which="y"``)."""
    from matplotlib.ticker import FuncFormatter

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if axis.axis_name not in which:
            continue
        if scale == "linear":
            axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_tick_params(labelsize=9)


def _parameters(plt, points, path: Path) -> None:
    names = list(dict.fromkeys(k for p in points for k in p["setting"]))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(3.6 * max(len(names), 1), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names or ["(no parameters)"], strict=False):
        values: dict[Any, list[float]] = defaultdict(list)
        for p in points:
            if name in p["setting"]:
                values[p["setting"][name]].extend([p["cycles"]] if p["cycles"] else [])
        keys = sorted(values, key=_in_order)
        geo = [math.exp(sum(math.log(c) for c in v) / len(v)) if v else 0 for v in (values[k] for k in keys)]
        ax.bar([_shown(k) for k in keys], geo, color="#2c7fb8")
        for i, k in enumerate(keys):
            if not values[k]:   # every point with this value failed: shown, not dropped
                ax.annotate("failed", (i, 0), ha="center", va="bottom", color="#c0392b", fontsize=9)
        ax.set_title(name.removeprefix("isa_params."), fontsize=11)
        ax.set_ylabel("geomean cycles", fontsize=10)
        ax.tick_params(axis="x", labelrotation=45, labelsize=9)
        _plain_numbers(ax, "y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _values_of(points, name: str) -> list[Any]:
    """The values parameter ``name`` takes over ``points``, in order (numbers before file names)."""
    return sorted({p["setting"][name] for p in points if name in p["setting"]}, key=_in_order)


def _in_order(value: Any) -> tuple[bool, Any]:
    """A parameter's values in order: numbers, then file names."""
    return isinstance(value, str), value


def _shown(value: Any) -> str:
    """A parameter's value as the page shows it (a spec file by its name)."""
    return Path(str(value)).name


def _interactions(plt, points, path: Path) -> None:
    """Heat maps of cycles, energy and area over each pair of swept parameters' values."""
    from matplotlib.ticker import FuncFormatter

    names = list(dict.fromkeys(k for p in points for k in p["setting"]))
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    metrics = (("cycles", "cycles"), ("energy_uj", "energy (µJ)"), ("area_mm2", "area (mm²)"))
    fig, axes = plt.subplots(len(metrics), max(len(pairs), 1), squeeze=False,
                             figsize=(4.2 * max(len(pairs), 1), 3.4 * len(metrics)))
    if not pairs:
        for ax in axes[:, 0]:
            ax.axis("off")
        axes[0][0].text(0.5, 0.5, "fewer than two swept parameters: no pair to show", ha="center")
    for col, (a, b) in enumerate(pairs):
        xs, ys = _values_of(points, a), _values_of(points, b)
        for row, (key, name) in enumerate(metrics):
            grid = [[_geomean([p[key] for p in points if p["setting"].get(a) == x and p["setting"].get(b) == y
                               and p[key]]) for x in xs] for y in ys]
            ax = axes[row][col]
            image = ax.imshow(grid, cmap="Blues", aspect="auto", origin="lower")
            ax.set_xticks(range(len(xs)), [_shown(x) for x in xs], fontsize=8, rotation=45)
            ax.set_yticks(range(len(ys)), [_shown(y) for y in ys], fontsize=8)
            ax.set_xlabel(a.removeprefix("isa_params."), fontsize=9)
            ax.set_ylabel(b.removeprefix("isa_params."), fontsize=9)
            ax.set_title(name, fontsize=10)
            known = [v for line in grid for v in line if not math.isnan(v)]
            middle = (max(known) + min(known)) / 2 if known else 0
            for j, line in enumerate(grid):
                for i, v in enumerate(line):
                    if not math.isnan(v):
                        ax.text(i, j, f"{v:,.0f}" if v >= 100 else f"{v:.3g}", ha="center", va="center",
                                fontsize=7, color="#222" if v <= middle else "white")
            fig.colorbar(image, ax=ax, shrink=0.8, format=FuncFormatter(_plain))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _layers(plt, ends, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    for k, p in enumerate(ends):
        parts: list[tuple[str, int]] = []
        for r in p["rows"]:
            if r["layers"]:
                parts += [(f"{r['workload']}:{x['step']}", x["cycles"] or 0) for x in r["layers"]]
            else:
                parts.append((r["workload"], r["cycles"] or 0))
        width = 0.8 / max(len(ends), 1)
        ax.bar([i + k * width for i in range(len(parts))], [c for _, c in parts], width,
               label=label(p["setting"]))
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(parts))], [n for n, _ in parts], rotation=60,
                      fontsize=8 if len(parts) <= 40 else 6, ha="right")
    ax.set(ylabel="cycles", title="Per workload: the ends of the cycles-area front")
    _plain_numbers(ax, "y")
    if ends:   # above the bars, not over them
        ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.08), ncol=1, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _all_points(points: list[dict[str, Any]]) -> str:
    """Every design point, numbered as in the figures, in a table sorted by a click on a column's header;
    and the link to every row of the store as CSV."""
    esc = html.escape
    names = list(dict.fromkeys(k for p in points for k in p["setting"]))
    head = "".join(f"<th>{esc(n.removeprefix('isa_params.'))}</th>" for n in names)

    def cell(value, shown=None) -> str:
        return f'<td data-v="{esc(str(value))}">{esc(shown if shown is not None else str(value))}</td>'

    body = "".join(
        "<tr>" + cell(p["number"]) + "".join(cell(_shown(p["setting"].get(n, ""))) for n in names)
        + (cell(p["cycles"], f"{p['cycles']:,}") if p["cycles"] is not None else cell("", "failed"))
        + (cell(p["energy_uj"], f"{p['energy_uj']:.1f}") if p["energy_uj"] is not None else cell("", ""))
        + (cell(p["area_mm2"], f"{p['area_mm2']:.3f}") if p["area_mm2"] is not None else cell("", ""))
        + "</tr>" for p in points)
    return (f'<h2>All design points</h2><p>Click a column to sort. Every row of the store: '
            f'<a href="results.csv">results.csv</a>.</p><table class="sortable" id="all-points"><thead><tr>'
            f"<th>#</th>{head}<th>cycles</th><th>energy (µJ)</th><th>area (mm²)</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _html(title, rows, points, by_area, by_energy) -> str:
    esc = html.escape

    def table(front, caption):
        body = "".join(
            f"<tr><td>{p['number']}</td><td>{esc(label(p['setting']))}</td><td>{p['cycles']:,}</td>"
            f"<td>{p['area_mm2']:.3f}</td><td>{p['energy_uj']:.1f}</td></tr>" for p in front)
        return (f"<table><caption>{esc(caption)}</caption><tr><th>#</th><th>setting</th><th>cycles</th>"
                f"<th>area (mm²)</th><th>energy (µJ)</th></tr>{body}</table>")

    failed = [r for r in rows if r["status"] != "ok"]
    failures = "".join(f"<li>{esc(r['workload'])} at {esc(label(r['setting'] or {}))}: "
                       f"{esc((r['error'] or '').splitlines()[0] if r['error'] else r['status'])}</li>"
                       for r in failed[:50])
    figures = "".join(f'<figure><img src="{name}" alt="{esc(CAPTIONS[name])}"><figcaption>'
                      f'{esc(CAPTIONS[name])}</figcaption></figure>' for name in FIGURES)
    unpriced = "; ".join(esc(gap) for gap in NOT_PRICED)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Tandem sweep: {esc(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} img{{max-width:100%}}
table{{border-collapse:collapse;margin:1em 0}} td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}
th{{cursor:pointer}} figcaption{{font-size:0.95em;color:#333;margin:0.3em 0 1.5em}}
.note{{background:#fff6e0;padding:0.5em}}
</style></head>
<body>
<h1>Tandem sweep: {esc(title)}</h1>
<p>{len(rows)} points ({len(failed)} failed or invalid), {len(points)} design points
({sum(p['ok'] for p in points)} with every workload valid).</p>
<p class="note">What this model does not price: {unpriced}. So a front along area cannot tell a wide DRAM
port from a narrow one, and picks the widest.</p>
{table(by_area, "Pareto front: cycles vs area")}
{table(by_energy, "Pareto front: energy vs cycles")}
{figures}
{_all_points(points)}
{f"<h2>Failed points</h2><ul>{failures}</ul>" if failures else ""}
<script>
document.querySelectorAll("table.sortable th").forEach(function (th, column) {{
  th.addEventListener("click", function () {{   // sort the table's rows by this column (again: reversed)
    var body = th.closest("table").tBodies[0], rows = Array.from(body.rows);
    var down = th.dataset.order !== "up"; th.dataset.order = down ? "up" : "down";
    var key = function (r) {{ var t = r.cells[column].dataset.v || r.cells[column].textContent;
                              var n = parseFloat(t); return isNaN(n) ? t : n; }};
    rows.sort(function (a, b) {{ var x = key(a), y = key(b);
                                 return (x > y ? 1 : x < y ? -1 : 0) * (down ? 1 : -1); }});
    rows.forEach(function (r) {{ body.appendChild(r); }});
  }});
}});
window.addEventListener("load", function () {{
  var images = document.images, broken = 0;
  for (var i = 0; i < images.length; i++) {{
    if (!images[i].complete || images[i].naturalWidth === 0) broken++;
  }}
  document.body.setAttribute("data-figures", images.length);
  document.body.setAttribute("data-broken", broken);
}});
</script>
</body></html>
"""
