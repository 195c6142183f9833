"""``tandem regress SUITE.toml [--baseline FILE.json] [--update] [--tolerance PCT] [--jobs N] [--json]``.

Reads and checks the suite (tandem/regress/suite.py: a typed error naming the line before any case runs) and
the
baseline (by default ``<suite>.baseline.json`` beside the suite; one of another suite is refused), runs
every case on the sweep engines (tandem/sweep/run.py: ``--jobs`` processes) with a progress bar, and prints
a table of the regressions, improvements and new or missing cases (``--json``: one object). Exit status 1
on any regression, 0 otherwise, 2 on bad input; ``--update`` writes the results as the new baseline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tandem.cli.console import fail, tandem_version


def regress_command(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="The regression suite (TOML): targets "
                                                                      "and cases.")],
    baseline: Annotated[Path | None, typer.Option(help="The baseline to compare with (default: "
                                                       "SUITE's name with .baseline.json).")] = None,
    update: Annotated[bool, typer.Option("--update", help="Write the results as the new baseline (and "
                                                          "compare with the old one where it exists).")]
    = False,
    tolerance: Annotated[float, typer.Option(min=0.0, help="Percent of cycles a case may grow before it is a "
                                                           "regression (default 0: cycles are exact).")]
    = 0.0,
    jobs: Annotated[int | None, typer.Option(min=1, help="Processes to run cases on (default: every "
                                                         "core).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
) -> None:
    """Run a regression suite and compare every case with its baseline.

    A case that stops validating or gets slower fails the run (exit status 1)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tandem.regress.suite import (
        RegressError,
        baseline_json,
        compare,
        read_baseline,
        read_suite,
        result_of,
    )
    from tandem.sweep.run import engine_for

    path = baseline if baseline is not None else suite_file.with_name(suite_file.stem + ".baseline.json")
    try:
        suite = read_suite(suite_file)
        old = read_baseline(path, suite) if path.exists() or not update else {}
    except RegressError as e:
        raise fail(str(e), 2) from None
    if update and not path.parent.is_dir():
        raise fail(f"--baseline {path}: the folder {path.parent} does not exist", 2)
    todo = suite.points()
    engine = engine_for("local", jobs or os.cpu_count() or 1, points=len(todo))
    results: dict[str, dict] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  disable=as_json, transient=True) as bar:
        task = bar.add_task(suite.name, total=len(todo))
        engine.start()
        try:
            for row in engine.run(todo):
                results[row["key"]] = result_of(row)
                bar.advance(task)
        finally:
            engine.stop()
    results = {key: results[key] for key, _ in todo}
    comparison = compare(results, old, tolerance)
    if update:
        path.write_text(json.dumps(baseline_json(suite, results, tandem_version()), indent=1) + "\n")
    report = {"suite": suite.name, "baseline": str(path), "updated": update, "tolerance_pct": tolerance,
              "cases": len(results), **comparison.to_json(), "results": results}
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print(suite.name, path, results, comparison, update)
    if not comparison.passed:
        raise typer.Exit(code=1)


def _print(name: str, path: Path, results: dict, comparison, update: bool) -> None:
    console = Console(highlight=False)
    if comparison.regressions or comparison.improvements or comparison.tolerated:
        table = Table(title=f"{name}: changes against {path}")
        for col in ("case", "old cycles", "new cycles", "change"):
            table.add_column(col, justify="left" if col == "case" else "right")
        for r in comparison.regressions:
            table.add_row(f"[red]REGRESSION[/red] {r['case']}", _n(r["old_cycles"]), _n(r["new_cycles"]),
                          r["why"])
        for r in comparison.improvements:
            table.add_row(f"[green]improved[/green] {r['case']}", _n(r["old_cycles"]), _n(r["new_cycles"]),
                          f"{r['change_pct']:+.2f}%")
        for r in comparison.tolerated:
            table.add_row(f"[yellow]slower, tolerated[/yellow] {r['case']}", _n(r["old_cycles"]),
                          _n(r["new_cycles"]), f"{r['change_pct']:+.2f}%")
        console.print(table)
    for key in comparison.new:
        console.print(f"  new case (not in the baseline): {key}: {_n(results[key]['cycles'])} cycles",
                      markup=False)
    for key in comparison.gone:
        console.print(f"  in the baseline, not in the suite: {key}", markup=False)
    invalid = [k for k, r in results.items() if not r["validated"]]
    verdict = (f"[red]{len(comparison.regressions)} regression(s)[/red]" if comparison.regressions else
               "[green]no regressions[/green]")
    tolerated = f"{len(comparison.tolerated)} slower within the tolerance, " if comparison.tolerated else ""
    console.print(f"{name}: {len(results)} cases, {verdict}, {len(comparison.improvements)} improved, "
                  f"{tolerated}{len(comparison.unchanged)} unchanged, {len(comparison.new)} new, "
                  f"{len(invalid)} not validated" + (f"; baseline written to {path}" if update else ""))


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"
