"""``tandem sweep SWEEP.toml --db RESULTS.sqlite`` and ``tandem report RESULTS.sqlite --out DIR``.

``sweep`` reads and checks the sweep file (tandem/sweep/file.py: a typed error naming the line before any
point runs), opens the results store (tandem/sweep/results.py: resumed by default, ``--fresh`` starts over),
runs the points it does not have on the chosen engine (tandem/sweep/run.py) with a progress bar (points
done and failed, the time left, the best point so far) and prints a summary (``--json``: one object);
``--csv FILE`` exports the sweep's rows. ``report`` writes an HTML page with its figures
(tandem/sweep/report.py) and the rows as CSV.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tandem.cli.console import fail, tandem_version


def sweep_command(
    file: Annotated[Path, typer.Argument(help="The sweep file (TOML): target, base config, parameters, "
                                              "workloads.")],
    db: Annotated[Path, typer.Option(help="The SQLite results store (created if missing).")],
    engine: Annotated[str, typer.Option(help="local (a process pool) or ray (Ray tasks).")] = "local",
    address: Annotated[str | None, typer.Option(help="ray: the address of a cluster to join (default: "
                                                     "start a local one).")] = None,
    jobs: Annotated[int | None, typer.Option(min=1, help="Processes (local) or CPUs of a local Ray "
                                                         "(default: every core).")] = None,
    resume: Annotated[bool, typer.Option("--resume/--fresh", help="Resume (the default): run only the points "
                                                                  "not stored yet; --fresh drops the stored "
                                                                  "rows and starts over.")] = True,
    csv_file: Annotated[Path | None, typer.Option("--csv", help="Also write the sweep's rows as CSV.")
                        ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
) -> None:
    """Run a design-space sweep into a SQLite results store.

    Every point is compiled, simulated, validated and measured (cycles, energy, area) and stored as it
    finishes; a killed sweep run again does only the missing points."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tandem.sweep.file import SweepError, read_sweep
    from tandem.sweep.results import ResultsError, ResultStore, write_csv
    from tandem.sweep.run import ENGINES, import_ray, sweep

    if engine not in ENGINES:
        raise fail(f"--engine {engine}: expected one of {', '.join(ENGINES)}", 2)
    if address is not None and engine != "ray":
        raise fail("--address joins a Ray cluster: it needs --engine ray", 2)
    if csv_file is not None and not csv_file.parent.is_dir():
        raise fail(f"--csv {csv_file}: the folder {csv_file.parent} does not exist", 2)
    version = tandem_version()
    try:
        definition = read_sweep(file)
        if engine == "ray":
            import_ray()
        store = ResultStore(db, version, fresh=not resume)
    except (SweepError, ResultsError) as e:
        raise fail(str(e), 2) from None
    best: dict = {}
    failed = [0]
    terminal = sys.stdout.isatty()
    lines = _ProgressLines(definition.name, enabled=not as_json and not terminal)
    with store, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeRemainingColumn(), disable=as_json or not terminal, transient=False) as bar:
        task = bar.add_task(f"{definition.name}", total=None)

        def on_row(row: dict, done: int, total: int) -> None:
            failed[0] += row["status"] != "ok"
            if row["status"] == "ok" and (not best or row["cycles"] < best["cycles"]):
                best.update(row)
            shown = f"best {best['cycles']:,} cycles ({best['workload']}, {best['config']})" if best else ""
            bar.update(task, completed=done, total=total,
                       description=f"{definition.name}: {failed[0]} failed  {shown}")
            lines.show(done, total, failed[0], shown)
        try:
            with _terminated_as_exit():
                summary = sweep(definition, store, version, engine, jobs, address, on_row)
        except SweepError as e:
            raise fail(str(e), 2) from None
        rows = store.rows(definition.name)
    if csv_file is not None:
        write_csv(rows, csv_file)
    out = summary.to_json()
    out["stored"] = len(rows)
    out["failed_total"] = sum(r["status"] != "ok" for r in rows)
    if as_json:
        typer.echo(json.dumps(out))
        return
    console = Console(highlight=False, soft_wrap=True)   # whole lines, whatever the terminal's width
    overhead = f" (engine start {summary.startup_s:.1f} s, then {summary.overhead_pct:.1f}% of a point's " \
        "own time)" if summary.overhead_pct is not None else ""
    console.print(f"{definition.name}: {summary.points} points, {summary.skipped} already stored, "
                  f"{summary.ran} run now ({summary.failed} failed) in {summary.wall_s:.1f} s on "
                  f"{summary.engine} x{summary.jobs}{overhead}; {len(rows)} rows in {db}", markup=False)
    failures = [r for r in rows if r["status"] != "ok"]
    for r in failures[:SHOWN_FAILURES]:
        console.print(f"  failed: {r['workload']} {r['setting']}: {(r['error'] or '').splitlines()[0]}",
                      markup=False)
    if len(failures) > SHOWN_FAILURES:
        console.print(f"  ... and {len(failures) - SHOWN_FAILURES} more failed point(s): every one is in the "
                      f"store's rows (--csv, tandem report)", markup=False)


@contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM (a scheduler's kill, ``timeout``) ends the sweep as Ctrl-C does: the stored rows stay, the
    engine stops its workers (none is left running, no semaphore leaks), and the exit status is 143."""
    def stop(signum, frame) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: failed points the closing summary lists one by one
SHOWN_FAILURES = 5


class _ProgressLines:
    """Progress as plain lines on stderr when stdout is not a terminal (a log, a pipe, CI): one when the
    first point is stored, then at most one every ``every_s`` seconds, and one at the end."""

    def __init__(self, name: str, enabled: bool, every_s: float = 10.0) -> None:
        self.name, self.enabled, self.every_s = name, enabled, every_s
        self.start = self.last = time.monotonic()
        self.shown = 0

    def show(self, done: int, total: int, failed: int, best: str) -> None:
        now = time.monotonic()
        if not self.enabled or (self.shown and done < total and now - self.last < self.every_s):
            return
        self.last, self.shown = now, self.shown + 1
        typer.echo(f"{self.name}: {done:,}/{total:,} points, {failed} failed, {now - self.start:.1f} s"
                   + (f"; {best}" if best else ""), err=True)


def report_command(
    db: Annotated[Path, typer.Argument(help="A results store written by tandem sweep.")],
    out: Annotated[Path, typer.Option(help="The folder to write index.html, its figures and results.csv "
                                           "into (created).")],
    sweep: Annotated[str | None, typer.Option(help="Only this sweep's rows (default: all).")] = None,
) -> None:
    """Write an HTML report of a results store.

    The Pareto fronts of cycles vs area and energy vs cycles, each parameter's effect, and the per-layer
    breakdown of the best points, as PNG figures."""
    from tandem.sweep.report import write_report
    from tandem.sweep.results import ResultsError, open_results, write_csv

    if not out.parent.is_dir():
        raise fail(f"--out {out}: the folder {out.parent} does not exist", 2)
    try:
        with open_results(db) as store:
            rows = store.rows(sweep)
    except ResultsError as e:
        raise fail(str(e), 2) from None
    if not rows:
        raise fail(f"{db}: no rows{f' of sweep {sweep!r}' if sweep else ''} to report", 2)
    out.mkdir(exist_ok=True)
    names = sorted({r["sweep"] for r in rows})   # the sweep's own name (the store may hold several)
    page = write_report(rows, out, title=sweep or ", ".join(names))
    write_csv(rows, out / "results.csv")
    Console(highlight=False).print(f"wrote {page} ({len(rows)} points) and {out / 'results.csv'}")
