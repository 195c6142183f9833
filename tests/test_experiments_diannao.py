"""experiments/diannao_loop_partition.py, seed 001's experiment: its case table is Table II's, ``--quick``
writes a CSV whose numbers come from validated runs, failing variants are recorded and left out of the means,
and the rows do not depend on ``--jobs``."""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tandem.flows.diannao import conv2d_within_bound, run_diannao
from tandem.flows.flow import RunError

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "diannao_loop_partition.py"


def _load():
    spec = importlib.util.spec_from_file_location("diannao_loop_partition", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


exp = _load()

# Seed 001's Table II as the working notes print it (written out here, independently of the script).
TABLE_II_ELEMENTWISE = [
    (256, 56, 56, 15), (256, 56, 56, 8), (256, 56, 56), (128, 56, 56), (64, 56, 56), (32, 56, 56),
    (256, 28, 28), (128, 28, 28), (255, 55, 55, 14), (255, 55, 55, 7), (255, 55, 55), (127, 55, 55),
    (63, 55, 55), (31, 55, 55), (255, 27, 27), (127, 27, 27),
]
TABLE_II_CONV = [
    ((56, 56, 256), (128, 3, 3, 256)), ((56, 56, 256), (64, 3, 3, 256)), ((56, 56, 256), (32, 3, 3, 256)),
    ((56, 56, 128), (128, 3, 3, 256)), ((56, 56, 128), (64, 3, 3, 256)), ((56, 56, 128), (32, 3, 3, 256)),
    ((56, 56, 64), (128, 3, 3, 256)), ((56, 56, 64), (64, 3, 3, 256)), ((55, 55, 256), (128, 3, 3, 256)),
    ((55, 55, 256), (64, 3, 3, 256)), ((55, 55, 256), (32, 3, 3, 256)), ((55, 55, 128), (128, 3, 3, 256)),
    ((55, 55, 128), (64, 3, 3, 256)), ((55, 55, 128), (32, 3, 3, 256)), ((55, 55, 64), (128, 3, 3, 256)),
    ((55, 55, 64), (64, 3, 3, 256)),
]


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``--quick`` run in-process (one job) into a fresh folder."""
    out = tmp_path_factory.mktemp("quick")
    rows = exp.run_cases(exp.quick_cases(), with_b=True, jobs=1)
    exp.write_csv(rows, out / "diannao_loop_partition.csv")
    return out


# ------------------------------------------------------------------------------------------- case table
def test_the_case_table_is_table_ii_sixteen_shapes_per_class():
    cases = exp.table_ii_cases()
    for op in ("add", "sub", "mul"):
        assert [c.shape for c in cases if c.cls == "binary" and c.op == op] == TABLE_II_ELEMENTWISE
    assert [c.shape for c in cases if c.cls == "relu"] == TABLE_II_ELEMENTWISE
    conv = [c for c in cases if c.cls == "conv"]
    assert [c.shape for c in conv] == [x for x, _ in TABLE_II_CONV]
    # weights (Cout, KH, KW, Cin): Cout and the kernel as printed, Cin from the input
    assert [c.weights for c in conv] == [(w[0], w[1], w[2], x[2]) for x, w in TABLE_II_CONV]
    assert len(cases) == 3 * 16 + 16 + 16
    assert [c.index for c in conv] == list(range(1, 17))


def test_quick_cases_are_small_and_not_table_ii():
    cases = exp.quick_cases()
    assert {c.cls for c in cases} == {"binary", "relu", "conv"}
    assert all(math.prod(c.shape) < 20_000 for c in cases)
    assert not {c.shape for c in cases} & set(TABLE_II_ELEMENTWISE)


def test_an_unknown_class_is_named():
    with pytest.raises(ValueError, match="unknown class 'gemm'"):
        exp.table_ii_cases(["binary", "gemm"])


# ------------------------------------------------------------------------------------------- --quick run
def test_quick_csv_has_one_row_per_case_with_the_expected_columns(quick: Path):
    columns, rows = read_csv(quick / "diannao_loop_partition.csv")
    assert columns == list(exp.COLUMNS)
    expected = [(c.cls, c.op, str(c.index), "x".join(map(str, c.shape))) for c in exp.quick_cases()]
    assert [(r["class"], r["op"], r["case"], r["shape"]) for r in rows] == expected


def test_quick_variants_that_ran_validated_and_their_speedups_are_cycle_ratios(quick: Path):
    _, rows = read_csv(quick / "diannao_loop_partition.csv")
    for r in rows:
        for v in "abc":
            assert r[f"status_{v}"] == "ok" or r[f"status_{v}"].startswith("error: "), r
            if r[f"status_{v}"] == "ok":
                assert r[f"validated_{v}"] == "True", (v, r)
                assert int(r[f"cycles_{v}"]) > 0
            else:
                assert r[f"cycles_{v}"] == "" and r[f"validated_{v}"] == ""
        ratios = (("speedup_ab", "cycles_b", "cycles_a_on_b"), ("speedup_ac", "cycles_c", "cycles_a"))
        for key, slow, fast in ratios:
            if r[fast] and r[slow]:
                assert float(r[key]) == pytest.approx(int(r[slow]) / int(r[fast]), abs=1e-4)
            else:
                assert r[key] == ""
    elementwise = [r for r in rows if r["class"] != "conv"]
    assert elementwise and all(r[f"status_{v}"] == "ok" for r in elementwise for v in "abc")
    conv = [r for r in rows if r["class"] == "conv"]
    assert conv and all(r[f"status_{v}"] == "ok" for r in conv for v in "abc")


def test_quick_conv_b_runs_on_the_cin_scaled_twin_and_stays_scalar(quick: Path):
    _, rows = read_csv(quick / "diannao_loop_partition.csv")
    for r in (r for r in rows if r["class"] == "conv"):
        (h, w, cin), (cout, kh, kw, _) = (tuple(map(int, d.split("x"))) for d in (r["shape"], r["weights"]))
        s = exp.CONV_B_SCALE
        assert r["shape_b"] == f"{h}x{w}x{cin // s} * {cout}x{kh}x{kw}x{cin // s}"
        assert r["cycles_a_on_b"] != r["cycles_a"] and int(r["cycles_a_on_b"]) > 0
        assert int(r["scalar_fallback_b"]) > 0 and r["unmatched_b"]
        assert float(r["speedup_ab"]) > 1


def test_conv_twin_refuses_a_scale_that_does_not_divide_the_channels():
    layer = exp.table_ii_cases(["conv"])[0]
    twin = exp.conv_twin(layer, 32)
    assert (twin.shape, twin.weights) == ((56, 56, 8), (128, 3, 3, 8))
    with pytest.raises(ValueError, match="must divide the layer's Cin 256"):
        exp.conv_twin(layer, 3)


def test_quick_a_never_falls_back_to_scalar_code_and_b_does_when_cores_do_not_divide(quick: Path):
    _, rows = read_csv(quick / "diannao_loop_partition.csv")
    assert all(r["scalar_fallback_a"] == "0" for r in rows if r["status_a"] == "ok")
    ragged = [r for r in rows if r["shape"] == "15x27x27"]   # 10935 elements over 16 cores
    assert {r["class"] for r in ragged} == {"binary", "relu"}
    for r in ragged:
        assert int(r["scalar_fallback_b"]) > 0 and r["unmatched_b"]
        assert int(r["tensor_insns_a"]) > int(r["tensor_insns_b"])
        assert float(r["speedup_ab"]) > 1


def test_roofline_percentage_is_roofline_over_cycles(quick: Path):
    _, rows = read_csv(quick / "diannao_loop_partition.csv")
    for r in (r for r in rows if r["status_a"] == "ok"):
        pct = 100 * int(r["roofline_cycles_a"]) / int(r["cycles_a"])
        assert float(r["roofline_pct_a"]) == pytest.approx(pct, abs=0.01)
        assert 0 < pct <= 100


def test_cli_writes_csv_summary_and_figures_and_rows_do_not_depend_on_jobs(quick: Path, tmp_path: Path):
    out = tmp_path / "cli"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--jobs", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    csv_name = "diannao_loop_partition.csv"
    assert (out / csv_name).read_text() == (quick / csv_name).read_text()
    for name in ("speedup_binary.png", "speedup_relu.png", "speedup_conv.png", "summary.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000, name
    assert "[5/5]" in done.stdout and "paper a/c" in done.stdout
    assert (out / "summary.json").stat().st_size > 0


# ------------------------------------------------------------------------------------------- means
def test_geomean_is_the_nth_root_of_the_product():
    assert exp.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert exp.geomean([1.5, 2.0, 3.0]) == pytest.approx((1.5 * 2.0 * 3.0) ** (1 / 3))
    assert exp.geomean([0.5, 2.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least one value"):
        exp.geomean([])
    with pytest.raises(ValueError, match="positive values"):
        exp.geomean([1.0, 0.0])


def synthetic_row(cls: str, op: str, cycles: tuple[int | None, int, int], roof: float | None,
                  status_a: str = "ok", validated_c: bool = True) -> dict:
    """A row with cycles (a, b, c), as run_case would record it."""
    row = dict.fromkeys(exp.COLUMNS)
    row.update({"class": cls, "op": op, "status_a": status_a, "status_b": "ok", "status_c": "ok",
                "cycles_a": cycles[0], "cycles_b": cycles[1], "cycles_c": cycles[2], "roofline_pct_a": roof,
                "cycles_a_on_b": cycles[0],
                "validated_a": status_a == "ok", "validated_b": True, "validated_c": validated_c})
    return row


def test_summary_leaves_out_errors_and_unvalidated_variants():
    rows = [
        synthetic_row("binary", "add", (100, 1000, 120), 90.0),
        synthetic_row("binary", "sub", (30, 1200, 90), 70.0),
        synthetic_row("binary", "mul", (None, 500, 400), None, status_a="error: RunError: boom"),
        synthetic_row("relu", "relu", (10, 20, 990), 50.0, validated_c=False),
        synthetic_row("relu", "relu", (7, 56, 21), 60.0),
    ]
    summary = {s["group"]: s for s in exp.summarize(rows)}
    binary = summary["binary"]
    assert (binary["cases"], binary["cases_ab"], binary["cases_ac"]) == (3, 2, 2)
    assert binary["geomean_ab"] == pytest.approx(math.sqrt(1000 / 100 * 1200 / 30))
    assert binary["geomean_ac"] == pytest.approx(math.sqrt(120 / 100 * 90 / 30))
    assert binary["roofline_pct_a"] == pytest.approx(80.0)
    assert binary["paper_ac"] == 1.2511
    assert summary["binary:mul"]["geomean_ac"] is None and summary["binary:mul"]["cases"] == 1
    relu = summary["relu"]
    assert relu["geomean_ab"] == pytest.approx(math.sqrt(2.0 * 8.0))
    assert relu["geomean_ac"] == pytest.approx(21 / 7)
    assert exp.problems(rows[2]) == ["(a) error: RunError: boom"]
    assert exp.problems(rows[3]) == ["(c) did not validate against numpy"]


# ------------------------------------------------------------------------------------------- helpers
def test_conv_bound_accepts_an_f16_rounded_conv_and_rejects_a_perturbed_one():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5, 4)).astype(np.float16)
    wt = rng.standard_normal((16, 3, 3, 4)).astype(np.float16)
    xp = np.pad(x.astype(np.float64), ((1, 1), (1, 1), (0, 0)))
    exact = np.zeros((6, 5, 16))
    for y in range(6):
        for z in range(5):
            for co in range(16):
                exact[y, z, co] = np.sum(xp[y:y + 3, z:z + 3, :] * wt[co].astype(np.float64))
    out = exact.astype(np.float16)
    assert conv2d_within_bound(out, x, wt, 1, 1)
    bad = out.copy()
    bad[2, 3, 7] += np.float16(0.25)
    assert not conv2d_within_bound(bad, x, wt, 1, 1)


def test_run_diannao_takes_explicit_inputs_of_any_shape_with_as_many_elements():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((3, 50)).astype(np.float32) for _ in range(2))
    assert run_diannao("mul", (150,), "float32", cores=4, inputs=[a, b]).validated
    with pytest.raises(RunError, match="expected 2 input array"):
        run_diannao("mul", (150,), "float32", cores=4, inputs=[a])
    with pytest.raises(RunError, match="input 1: expected 150 elements of float32, but got 150 elements of "
                                       "float64"):
        run_diannao("mul", (150,), "float32", cores=4, inputs=[a, b.astype(np.float64)])
