"""The sweep results store: SQLite, one row per point, keyed by the point's hash.

``points`` holds a row per point (``tandem.sweep.file.point_key``: target, spec, config values, workload,
seed and Tandem's version), written in its own transaction as the point finishes: a sweep killed at any
moment leaves whole rows only, and run again it skips the keys it finds (no point lost, none twice).
``meta`` holds the schema and the Tandem version that wrote the file; a file of another version is
refused with what to do (``ResultsError``), since its cycles came from another compiler and simulator.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCHEMA = 1
#: the columns of a row, in order; JSON columns hold dicts or lists
COLUMNS = ("key", "sweep", "idx", "target", "workload", "setting", "config", "status", "error", "validated",
           "cycles", "energy_uj", "area_mm2", "dram_bytes", "metrics", "layers", "point_s")
JSON_COLUMNS = ("setting", "metrics", "layers")
#: measured wall time: differs from run to run (everything else is deterministic)
TIMING_COLUMNS = ("point_s",)


class ResultsError(ValueError):
    """A results file that cannot be used: names the file and what to do."""


class ResultStore:
    """The results of sweeps in the SQLite file ``path`` (created if missing; emptied with ``fresh``), for
    Tandem ``version``; with ``readonly``, an existing file of any version, opened for reading only."""

    def __init__(self, path: str | Path, version: str, fresh: bool = False, readonly: bool = False) -> None:
        self.path = Path(path)
        if not (self.path.is_file() if readonly else self.path.parent.is_dir()):
            raise ResultsError(f"{self.path}: no such results database" if readonly else
                               f"{self.path}: the folder {self.path.parent} does not exist")
        try:
            if readonly:
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            else:
                self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise ResultsError(f"{self.path}: not a Tandem results database ({e})") from None
        if (tables or readonly) and not {"meta", "points"} <= tables:
            raise ResultsError(f"{self.path}: not a Tandem results database (tables {sorted(tables)})")
        if readonly:
            return
        if tables and not fresh:
            meta = dict(self.db.execute("SELECT name, value FROM meta"))
            if meta.get("schema") != str(SCHEMA) or meta.get("tandem_version") != version:
                raise ResultsError(
                    f"{self.path} was written by Tandem {meta.get('tandem_version')} (results schema "
                    f"{meta.get('schema')}); this is Tandem {version} (schema {SCHEMA}), whose cycles and "
                    f"energy may differ: run with --fresh to start it over, or give another --db")
        with self.db:
            self.db.execute("BEGIN")
            if fresh:
                self.db.execute("DROP TABLE IF EXISTS points")
                self.db.execute("DROP TABLE IF EXISTS meta")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
            cols = ", ".join(f"{c} {'TEXT PRIMARY KEY' if c == 'key' else ''}" for c in COLUMNS)
            self.db.execute(f"CREATE TABLE IF NOT EXISTS points ({cols})")
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [("schema", str(SCHEMA)), ("tandem_version", version)])

    def done(self) -> set[str]:
        """The keys of the points already stored."""
        return {r[0] for r in self.db.execute("SELECT key FROM points")}

    def put(self, row: dict[str, Any]) -> None:
        """Store one point's row, in its own transaction (a row already there is kept)."""
        values = [json.dumps(row.get(c)) if c in JSON_COLUMNS else row.get(c) for c in COLUMNS]
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(f"INSERT OR IGNORE INTO points VALUES ({', '.join('?' * len(COLUMNS))})", values)

    def rows(self, sweep: str | None = None) -> list[dict[str, Any]]:
        """Every row (of ``sweep``), in sweep and point order, JSON columns decoded."""
        query = "SELECT * FROM points" + (" WHERE sweep = ?" if sweep else "") + " ORDER BY sweep, idx"
        out = []
        for values in self.db.execute(query, (sweep,) if sweep else ()):
            row = dict(zip(COLUMNS, values, strict=True))
            for c in JSON_COLUMNS:
                row[c] = json.loads(row[c]) if row[c] is not None else None
            row["validated"] = None if row["validated"] is None else bool(row["validated"])
            out.append(row)
        return out

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_results(path: str | Path) -> ResultStore:
    """An existing results file, of whatever version, for reading only (``tandem report``)."""
    return ResultStore(path, "", readonly=True)


def flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row as flat columns (pandas-friendly): each parameter of the setting and each recorded metric a
    column of its own, the per-layer table left out."""
    out = {c: row[c] for c in COLUMNS if c not in ("setting", "metrics", "layers", "config")}
    out.update({f"param:{k}": v for k, v in (row["setting"] or {}).items()})
    out.update({f"metric:{k}": v for k, v in (row["metrics"] or {}).items()})
    return out


def write_csv(rows: Iterable[dict[str, Any]], path: str | Path) -> None:
    """``rows`` as a CSV file of ``flat`` columns (the union of every row's)."""
    table = [flat(r) for r in rows]
    names: list[str] = []
    for r in table:
        names += [k for k in r if k not in names]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        writer.writerows(table)
