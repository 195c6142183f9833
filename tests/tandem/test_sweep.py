"""``tandem sweep`` and ``tandem report``: sweep files checked before any point runs, the SQLite store
resumable after kill -9, the local and Ray engines giving the same rows, and the report in headless
Chromium."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tandem.cli.app import app
from tandem.cli.console import tandem_version
from tandem.sweep.file import SweepError, expand, read_sweep
from tandem.sweep.results import TIMING_COLUMNS, ResultsError, ResultStore
from tandem.sweep.run import sweep

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
VERSION = tandem_version()

SMALL = """\
[sweep]
name = "small"
target = "vita"
config = "vta-default"

[parameters]
"isa_params.LOG_INP_BUFF_SIZE" = [14, 15]
"isa_params.DRAM_BYTES_PER_CYCLE" = {{ from = 4, to = 8, step = 4 }}
{extra}
[[workloads]]
layer = "gemm"
params = {{ M = 16, N = 32, K = 64 }}

[[workloads]]
layers = "vita_quick"
"""


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def table(rows: list[dict]) -> list[dict]:
    """The rows without their measured wall times (everything else is deterministic)."""
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def run_sweep(path: Path, db: Path, **options) -> list[dict]:
    with ResultStore(db, VERSION, fresh=options.pop("fresh", False)) as store:
        sweep(read_sweep(path), store, VERSION, **options)
        return store.rows()


# ----------------------------------------------------------------------------------------- the sweep file
def test_the_points_are_the_product_of_the_values_times_the_workloads(tmp_path: Path) -> None:
    points = expand(read_sweep(write(tmp_path, SMALL.format(extra=""))))
    assert len(points) == 2 * 2 * (1 + 3)
    assert [dict(p.setting) for p in points[:5:4]] == [
        {"isa_params.LOG_INP_BUFF_SIZE": 14, "isa_params.DRAM_BYTES_PER_CYCLE": 4},
        {"isa_params.LOG_INP_BUFF_SIZE": 14, "isa_params.DRAM_BYTES_PER_CYCLE": 8}]
    assert [p.workload.name for p in points[:4]] == ["gemm:M=16,N=32,K=64", "vita_quick:q1", "vita_quick:q2",
                                                     "vita_quick:q3"]


def test_zip_pairs_the_values(tmp_path: Path) -> None:
    text = SMALL.format(extra="").replace('name = "small"', 'name = "small"\ncombine = "zip"')
    points = expand(read_sweep(write(tmp_path, text)))
    assert len(points) == 2 * 4


@pytest.mark.parametrize("change,line,message", [
    (("[parameters]", '[parameters]\n"isa_params.LOG_BLOK" = [4]'), 7, "no parameter 'LOG_BLOK'"),
    (("[parameters]", "[parameters]\nclock = [100]"), 7, "unknown parameter 'clock'"),
    (("[parameters]", "[parameters]\nclock_mhz = []"), 7, "has no values"),
    (("[parameters]", "[parameters]\nclock_mhz = { from = 300, to = 100 }"), 7, "has no values"),
    (('layers = "vita_quick"', 'layers = "resnet99"'), 14, "no layer table 'resnet99'"),
    (('layers = "vita_quick"', 'model = "resnet99"'), 14, "no builtin model 'resnet99'"),
    (('layers = "vita_quick"', 'onnx = "missing.onnx"'), 14, "missing.onnx does not exist"),
    (('layer = "gemm"', 'layer = "softmax"'), 10, "softmax"),
    (('target = "vita"', 'target = "tpu"'), 3, "target must be one of vita, diannao"),
    (('config = "vta-default"', 'config = "no-such-config"'), 4, "base machine cannot be loaded"),
    (("[parameters]", '[parameters]\nspec = ["nothing.toml"]'), 7, "nothing.toml does not exist"),
    (('config = "vta-default"', 'config = "vta-default"\nrecord = ["utilisation"]'), 5,
     "record names 'utilisation', which no run reports \\(did you mean 'utilization'\\?\\)"),
    (('layers = "vita_quick"', 'layers = "vita_quick"\nlayer_filter = "q1"'), 14,
     "unknown key 'layer_filter' in a layers workload; its keys are layers"),
    (('[[workloads]]\nlayers', '[[workload]]\nlayers'), 14,
     "unknown table \\[\\[workload\\]\\] \\(did you mean \\[\\[workloads\\]\\]\\?\\)"),
    (("[parameters]", "[parameters]\nclock_mhz = { from = 1, to = 10000000 }"), 7,
     "clock_mhz has 10,000,000 values, more than the 1,000,000 points a sweep may have"),
    (("[parameters]", "[parameters]\nclock_mhz = { from = 1, to = 1000 }\nfetch_cycles_per_insn = "
                      "{ from = 1, to = 1000 }"), 6,
     "the sweep has 4,000,000 settings x 4 workload\\(s\\) = 16,000,000 points, more than the 1,000,000"),
    (('[parameters]', '[parameter]'), 6,
     "unknown table \\[parameter\\] \\(did you mean \\[parameters\\]\\?\\)"),
])
def test_bad_input_is_a_typed_error_naming_the_line(tmp_path: Path, change, line, message) -> None:
    path = write(tmp_path, SMALL.format(extra="").replace(*change))
    with pytest.raises(SweepError, match=message) as info:
        read_sweep(path)
    assert f"{path}:{line}:" in str(info.value)


def test_the_core_shape_example_builds_an_8x8_a_16x16_and_a_32x32_core_that_each_run_bit_exact() -> None:
    """examples/sweeps/vita-core-shapes.toml (docs/design-space-exploration.md): each block size with its
    buffers moved along loads, and runs a GEMM bit-exact on its core."""
    from tandem.flows.run import run
    from tandem.sweep.run import machine
    points = expand(read_sweep(ROOT / "examples/sweeps/vita-core-shapes.toml"))
    machines = {p.setting: machine(p) for p in points}
    assert sorted(m.spec.params["BLOCK_IN"] for m in machines.values()) == [8, 16, 32]
    for target in machines.values():
        assert run("gemm", target, {"M": 32, "N": 64, "K": 64}).validated


def test_every_recordable_key_is_one_a_layer_or_a_network_reports() -> None:
    """``record`` accepts exactly the keys of ``tandem run --json`` and of a network's totals."""
    from tandem.flows.run import run
    from tandem.flows.targets import load_target
    from tandem.sweep.file import recordable
    report = run("gemm", load_target("vita"), {"M": 16, "N": 16, "K": 16}).to_json()
    assert set(report) <= recordable()
    assert {"utilization", "roofline_pct", "dram_bytes", "energy_uj", "tensor_macs_share"} <= recordable()


def test_without_a_terminal_progress_is_plain_lines_and_the_summary_counts_every_failure(tmp_path) -> None:
    """In a pipe or a log: progress lines on stderr; the closing summary's lines whole (not cut at 80
    columns) and, past the five failures it lists, how many more there are."""
    dram = '"isa_params.DRAM_BYTES_PER_CYCLE" = { from = 4, to = 8, step = 4 }'
    text = SMALL.format(extra="").replace(dram, '"isa_params.LOG_BLOCK" = [3]')
    text = text[:text.index("[[workloads]]\nlayers")].replace("[14, 15]", "[10, 11, 12, 13, 14, 15]")
    result = RUNNER.invoke(app, ["sweep", str(write(tmp_path, text)), "--db", str(tmp_path / "r.sqlite")])
    assert result.exit_code == 0, result.output
    assert "small: 1/6 points, 1 failed" in result.stderr and "small: 6/6 points, 6 failed" in result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("  failed: ")]
    assert len(failed) == 5 and all(len(line) > 200 for line in failed)   # whole lines
    assert "  ... and 1 more failed point(s)" in result.stdout


def test_sigterm_stops_a_sweep_like_ctrl_c_keeping_its_rows_and_leaking_nothing(tmp_path: Path) -> None:
    """A scheduler's kill: exit status 143, the rows stored so far kept, the worker pool shut down (no
    'leaked semaphore' warning from multiprocessing's resource tracker)."""
    import signal
    import subprocess
    import sys
    db = tmp_path / "r.sqlite"
    quick = str(ROOT / "examples/sweeps/vita-quick.toml")
    proc = subprocess.Popen([sys.executable, "-m", "tandem", "sweep", quick, "--db", str(db), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    first = proc.stderr.readline()   # the first progress line: a row is stored
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "1/24 points" in first, first + err
    assert proc.returncode == 143, err
    assert "leaked" not in err and "Traceback" not in err, err
    with ResultStore(db, VERSION) as store:
        assert 1 <= len(store.rows()) < 24


def test_the_command_refuses_a_bad_sweep_before_any_point_runs(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL.format(extra="").replace("[parameters]", "[parameters]\nclock = [1]"))
    db = tmp_path / "r.sqlite"
    result = RUNNER.invoke(app, ["sweep", str(path), "--db", str(db)])
    assert result.exit_code == 2 and "unknown parameter 'clock'" in result.output
    assert not db.exists()


# ----------------------------------------------------------------------------------------- running
def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # LOG_ACC_BUFF_SIZE = 18 alone makes VTA's micro-op fields outgrow 32 bits: the spec refuses it
    text = SMALL.format(extra="").replace('"isa_params.LOG_INP_BUFF_SIZE" = [14, 15]',
                                          '"isa_params.LOG_ACC_BUFF_SIZE" = [17, 18]')
    rows = run_sweep(write(tmp_path, text), tmp_path / "r.sqlite", jobs=1)
    assert len(rows) == 16
    bad = [r for r in rows if r["setting"]["isa_params.LOG_ACC_BUFF_SIZE"] == 18]
    good = [r for r in rows if r["setting"]["isa_params.LOG_ACC_BUFF_SIZE"] == 17]
    assert all(r["status"] == "failed" and "do not give a valid vita ISA" in r["error"] for r in bad)
    assert all(r["status"] == "ok" and r["validated"] and r["cycles"] > 0 and r["energy_uj"] > 0
               and r["area_mm2"] > 0 for r in good)


def test_a_resumed_sweep_runs_only_the_missing_points_and_fresh_starts_over(tmp_path: Path) -> None:
    path, db = write(tmp_path, SMALL.format(extra="")), tmp_path / "r.sqlite"
    first = run_sweep(path, db, jobs=1)
    with ResultStore(db, VERSION) as store:
        summary = sweep(read_sweep(path), store, VERSION, jobs=1)
    assert (summary.points, summary.skipped, summary.ran) == (16, 16, 0)
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM points WHERE idx >= 10")
    with ResultStore(db, VERSION) as store:
        summary = sweep(read_sweep(path), store, VERSION, jobs=1)
        assert (summary.skipped, summary.ran) == (10, 6)
        assert table(store.rows()) == table(first)
    with ResultStore(db, VERSION, fresh=True) as store:
        assert store.rows() == []


def test_the_process_pool_gives_the_rows_of_one_process(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL.format(extra=""))
    one = run_sweep(path, tmp_path / "one.sqlite", jobs=1)
    pool = run_sweep(path, tmp_path / "pool.sqlite", jobs=2)
    assert table(pool) == table(one) and len(one) == 16


def test_ray_gives_the_rows_of_the_local_engine(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is the optional extra [dist]: pip install -e '.[dist]'")
    path = write(tmp_path, SMALL.format(extra=""))
    local = run_sweep(path, tmp_path / "local.sqlite", jobs=2)
    ray_rows = run_sweep(path, tmp_path / "ray.sqlite", engine="ray", jobs=2)
    assert table(ray_rows) == table(local)


def test_without_ray_the_ray_engine_says_how_to_install_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    result = RUNNER.invoke(app, ["sweep", str(write(tmp_path, SMALL.format(extra=""))), "--db",
                                 str(tmp_path / "r.sqlite"), "--engine", "ray"])
    assert result.exit_code == 2 and 'pip install -e ".[dist]"' in result.output


def test_kill_9_in_the_middle_then_resume_gives_the_uninterrupted_table(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL.format(extra=""))
    whole = run_sweep(path, tmp_path / "whole.sqlite", jobs=1)
    db = tmp_path / "killed.sqlite"
    command = [sys.executable, "-m", "tandem.cli.app", "sweep", str(path), "--db", str(db), "--jobs", "1",
               "--json"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=5) as con:
                    stored = con.execute("SELECT count(*) FROM points").fetchone()[0]
            except sqlite3.OperationalError:
                stored = 0
        if stored >= 4:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 4 <= stored < 16, f"the sweep was not killed mid-way ({stored} rows stored)"
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["skipped"] >= 4 and summary["skipped"] + summary["ran"] == 16
    with ResultStore(db, VERSION) as store:
        rows = store.rows()
    assert table(rows) == table(whole)
    assert len({r["key"] for r in rows}) == 16


def test_a_database_of_another_version_is_refused(tmp_path: Path) -> None:
    path, db = write(tmp_path, SMALL.format(extra="")), tmp_path / "r.sqlite"
    ResultStore(db, VERSION).close()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value = '0.0.1' WHERE name = 'tandem_version'")
    with pytest.raises(ResultsError, match="written by Tandem 0.0.1.*--fresh"):
        ResultStore(db, VERSION)
    result = RUNNER.invoke(app, ["sweep", str(path), "--db", str(db)])
    assert result.exit_code == 2 and "written by Tandem 0.0.1" in result.output
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(ResultsError, match="not a Tandem results database"):
        ResultStore(tmp_path / "junk.sqlite", VERSION)


def test_a_network_workload_records_its_layers(tmp_path: Path) -> None:
    text = SMALL.format(extra="").replace(
        '[[workloads]]\nlayer = "gemm"\nparams = { M = 16, N = 32, K = 64 }\n\n[[workloads]]\n'
        'layers = "vita_quick"\n',
        '[[workloads]]\nmodel = "resnet18"\ninput_shape = { input = [1, 3, 32, 32] }\n')
    text = text.replace('"isa_params.LOG_INP_BUFF_SIZE" = [14, 15]', '"isa_params.LOG_INP_BUFF_SIZE" = [15]')
    text = text.replace("{ from = 4, to = 8, step = 4 }", "[8]")
    rows = run_sweep(write(tmp_path, text), tmp_path / "r.sqlite", jobs=1)
    assert len(rows) == 1 and all(r["status"] == "ok" and r["validated"] for r in rows)
    for r in rows:
        ran = [x for x in r["layers"] if x["where"] == "vita"]
        assert sum(x["cycles"] for x in ran) == r["cycles"]
        assert sum(x["energy_uj"] for x in ran) == pytest.approx(r["energy_uj"])


# ----------------------------------------------------------------------------------------- the report
def test_the_report_renders_in_headless_chromium_with_every_figure(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    path, db, out = write(tmp_path, SMALL.format(extra="")), tmp_path / "r.sqlite", tmp_path / "report"
    run_sweep(path, db, jobs=1)
    result = RUNNER.invoke(app, ["report", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "results.csv").read_text().count("\n") == 17
    page = (out / "index.html").read_text()
    assert "<title>Tandem sweep: small</title>" in page   # the sweep's name, not the database file's
    assert page.count("<figcaption>") == 5 and "Lower left is better" in page   # how to read each figure
    assert "Each pair of swept parameters together" in page   # the interaction view
    assert 'id="all-points"' in page and page.count("<tr><td data-v=") == 4 and 'href="results.csv"' in page
    assert "What this model does not price" in page and "DRAM_BYTES_PER_CYCLE has no area" in page
    from tandem.sweep.report import FIGURES

    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if browser is None:
        pytest.skip("no Chromium here (CI installs Debian's chromium): the page was written but not opened")
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=5000", "--dump-dom",
         (out / "index.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-figures="{len(FIGURES)}"' in dom.stdout, dom.stdout[:500]
    assert 'data-broken="0"' in dom.stdout
    assert 'class="sortable" id="all-points"' in dom.stdout


def test_a_parameter_value_whose_points_all_failed_is_shown_as_failed(tmp_path: Path, monkeypatch) -> None:
    """LOG_BLOCK = 3 cannot be built on vta-default (its fields no longer fit): its bar is marked, not
    dropped from the parameter chart."""
    import matplotlib.axes

    from tandem.sweep.report import write_report
    dram = '"isa_params.DRAM_BYTES_PER_CYCLE" = { from = 4, to = 8, step = 4 }'
    text = SMALL.format(extra="").replace(dram, '"isa_params.LOG_BLOCK" = [3, 4]').replace("[14, 15]", "[15]")
    text = text[:text.index("[[workloads]]\nlayers")]
    rows = run_sweep(write(tmp_path, text), tmp_path / "r.sqlite", jobs=1)
    assert sorted(r["status"] for r in rows) == ["failed", "ok"]
    notes: list[str] = []
    real = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate",
                        lambda self, text, *a, **k: notes.append(text) or real(self, text, *a, **k))
    (tmp_path / "report").mkdir()
    write_report(rows, tmp_path / "report")
    assert notes.count("failed") == 1


def test_a_report_with_a_broken_figure_is_seen_as_broken(tmp_path: Path) -> None:
    """The page's own check counts an image that does not load (so the test above can fail)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium here (CI installs Debian's chromium)")
    path, db, out = write(tmp_path, SMALL.format(extra="")), tmp_path / "r.sqlite", tmp_path / "report"
    run_sweep(path, db, jobs=1)
    assert RUNNER.invoke(app, ["report", str(db), "--out", str(out)]).exit_code == 0
    (out / "parameters.png").unlink()
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=5000",
         "--dump-dom", (out / "index.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert 'data-broken="1"' in dom.stdout


@pytest.mark.parametrize("name,points", [("vita-quick.toml", 24), ("vita-resnet18.toml", 216),
                                         ("diannao-card.toml", 24)])
def test_the_shipped_sweep_files_read_and_expand(name: str, points: int) -> None:
    assert len(expand(read_sweep(ROOT / "examples" / "sweeps" / name))) == points


def test_a_spec_file_that_does_not_load_is_refused_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text('[isa]\nname = "diannao"\nextends = "diannao"\n')
    text = SMALL.format(extra="").replace("[parameters]", '[parameters]\nspec = ["broken.toml"]')
    path = write(tmp_path, text)
    with pytest.raises(SweepError, match="spec .*broken.toml.*vita") as info:
        read_sweep(path)
    assert f"{path}:7:" in str(info.value)


def test_the_report_reads_a_store_without_writing_it(tmp_path: Path) -> None:
    from tandem.sweep.results import open_results

    db = tmp_path / "r.sqlite"
    run_sweep(write(tmp_path, SMALL.format(extra="")), db, jobs=1)
    before = db.read_bytes()
    with open_results(db) as store:
        assert len(store.rows()) == 16
    assert db.read_bytes() == before
    wal = tmp_path / "r.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0   # nothing written ahead either
    with pytest.raises(ResultsError, match="no such results database"):
        open_results(tmp_path / "missing.sqlite")
