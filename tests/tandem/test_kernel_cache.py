"""The kernel cache (tandem/flows/kernel_cache.py): a kernel compiled once is found again, in another
process's cache on the same folder, by the content of everything it depends on; what it finds runs exactly
as what was compiled; a different spec, config or layer is a different kernel; a broken file is a miss; the
CPU's kernels and a user's operators are never written; ``--no-cache`` and ``tandem cache`` on the command
line."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compiler.passes import cover as covering
from compiler.passes.explain import selection
from tandem.cli.app import app
from tandem.flows import kernel_cache
from tandem.flows.kernel_cache import KernelCache, default_directory
from tandem.flows.run import flow_for, run
from tandem.flows.targets import load_target

RUNNER = CliRunner()
VITA_CONV = {"H": 8, "W": 8, "IC": 32, "OC": 32, "K": 3, "S": 1, "P": 1, "vthreads": 2}
DIANNAO_CONV = {"H": 6, "W": 6, "IC": 16, "OC": 16, "K": 3, "S": 1, "P": 1, "cores": 4, "dtype": "int8"}
HERE = Path(__file__).parent
USER_OPS = HERE.parent / "extensions" / "my_ops.py"


def kernels(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.pkl") if p.parent.name != "specs")


def same_run(a, b) -> None:
    """Two reports of one kernel: the same program, cycles, output and selection."""
    assert a.validated and b.validated
    assert (a.cycles, a.instructions, a.utilization, str(a.program)) == \
        (b.cycles, b.instructions, b.utilization, str(b.program))
    assert np.array_equal(a.output, b.output)
    assert a.selection == b.selection


def never_compile(monkeypatch: pytest.MonkeyPatch, kind: str, op: str, params: dict) -> None:
    """Make the flow that compiles ``op`` on ``kind`` fail if asked to compile."""
    flow = flow_for(kind, op)
    target = flow.flows[op] if hasattr(flow, "flows") else flow

    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the kernel cache holds the kernel")
    monkeypatch.setattr(type(target), "compile", refuse)


@pytest.mark.parametrize(("kind", "config", "op", "params"), [
    ("vita", "tvm-paper", "conv2d", VITA_CONV),
    ("vita", "vta-default", "gemm", {"M": 16, "N": 32, "K": 32, "relu": True}),
    ("diannao", None, "conv2d", DIANNAO_CONV),
    ("diannao", None, "relu", {"shape": (4, 64), "cores": 2}),
])
def test_a_kernel_compiled_once_is_found_by_another_cache_on_the_folder_and_runs_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, config: str | None, op: str,
        params: dict) -> None:
    target = load_target(kind, config)
    first = KernelCache(tmp_path)
    compiled = run(op, target, params, cache=first)
    assert (first.hits, first.misses) == (0, 1) and len(kernels(tmp_path)) == 1

    never_compile(monkeypatch, kind, op, params)
    later = KernelCache(tmp_path)   # as another process would: nothing in memory
    found = run(op, load_target(kind, config), params, cache=later)
    assert (later.hits, later.misses) == (1, 0)
    same_run(compiled, found)


def test_the_selection_found_explains_as_the_one_compiled(tmp_path: Path) -> None:
    """A VITA kernel's cover records travel with their search: --explain's unused instructions too."""
    target = load_target("vita", "tvm-paper")
    compiled = run("gemm", target, {"M": 16, "N": 16, "K": 16}, cache=KernelCache(tmp_path), explain=True)
    found = run("gemm", target, {"M": 16, "N": 16, "K": 16}, cache=KernelCache(tmp_path), explain=True)
    assert compiled.selection["unused"] and found.selection == compiled.selection


def test_a_select_without_a_recipe_refuses_to_pickle_by_name() -> None:
    select = covering.Select((), {}, lambda e: True, lambda *a: 1)
    with pytest.raises(TypeError, match="without a recipe"):
        pickle.dumps(select)
    assert selection([]) == {"statements": [], "unused": None}


def test_a_different_spec_config_or_layer_is_a_different_kernel(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    run("gemm", load_target("vita", "tvm-paper"), {"M": 16, "N": 16, "K": 16}, cache=cache)
    run("gemm", load_target("vita", "vta-default"), {"M": 16, "N": 16, "K": 16}, cache=cache)
    run("gemm", load_target("vita", "tvm-paper"), {"M": 16, "N": 16, "K": 32}, cache=cache)
    run("gemm", load_target("vita", "tvm-paper"), {"M": 16, "N": 16, "K": 16, "seed": 3}, cache=cache)
    assert len(kernels(tmp_path)) == 3   # the seed changes the inputs, not the kernel: the first one's file
    assert cache.misses == 3 and cache.hits == 1


def test_a_file_cut_short_is_a_miss_and_is_written_again(tmp_path: Path) -> None:
    target, params = load_target("vita", "tvm-paper"), {"M": 16, "N": 16, "K": 16}
    want = run("gemm", target, params, cache=KernelCache(tmp_path))
    (path,) = kernels(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    again = KernelCache(tmp_path)
    got = run("gemm", target, params, cache=again)
    assert (again.hits, again.misses) == (0, 1) and path.read_bytes() == whole
    same_run(want, got)


def test_the_cpu_s_kernels_and_a_user_s_operators_stay_in_memory(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    run("gemm", load_target("cpu"), {"M": 16, "N": 16, "K": 32}, cache=cache)
    run(f"{USER_OPS}:add_relu", load_target("diannao"), {"n": 256, "cores": 1}, cache=cache)
    assert kernels(tmp_path) == [] and len(cache.memory) == 2


def test_the_folder_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TANDEM_CACHE_DIR", "off")
    assert default_directory() is None and KernelCache.default().directory is None
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "mine"))
    assert default_directory() == tmp_path / "mine"
    monkeypatch.delenv("TANDEM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == tmp_path / "xdg" / "tandem" / "kernels"


def test_a_new_code_fingerprint_keeps_the_most_recent_folders(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(6):
        (tmp_path / f"old{n}").mkdir()
    monkeypatch.setattr(kernel_cache, "code_fingerprint", lambda: "new")
    run("gemm", load_target("vita"), {"M": 16, "N": 16, "K": 16}, cache=KernelCache(tmp_path))
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert "new" in folders and len(folders) == kernel_cache.KEEP
    assert len(kernels(tmp_path / "new")) == 1


def test_a_folder_that_cannot_be_written_warns_once_and_the_run_goes_on(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    cache = KernelCache(blocked)
    with pytest.warns(RuntimeWarning, match="kept in memory only"):
        report = run("gemm", load_target("vita"), {"M": 16, "N": 16, "K": 16}, cache=cache)
    assert report.validated and len(cache.memory) == 1


def test_the_command_line_keeps_kernels_unless_told_not_to(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    args = ["run", "gemm", "--target", "vita", "-p", "M=16", "-p", "N=16", "-p", "K=16", "--json"]
    result = RUNNER.invoke(app, [*args, "--no-cache"])
    assert result.exit_code == 0, result.output
    assert kernels(tmp_path) == []
    first, second = (json.loads(RUNNER.invoke(app, args).output) for _ in range(2))
    assert len(kernels(tmp_path)) == 1 and first["cycles"] == second["cycles"]
    shown = RUNNER.invoke(app, ["cache"])
    assert shown.exit_code == 0 and str(tmp_path) in shown.output
    assert "1 compiled kernels and 1 parsed specs" in shown.output
    cleared = RUNNER.invoke(app, ["cache", "--clear"])
    assert cleared.exit_code == 0 and "removed 1" in cleared.output and kernels(tmp_path) == []
    monkeypatch.setenv("TANDEM_CACHE_DIR", "off")
    assert "off" in RUNNER.invoke(app, ["cache"]).output


def test_a_built_in_spec_is_read_back_parsed_and_equal(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """tandem/flows/spec_cache.py: the first run parses and keeps it; the next reads it, equal; a file cut
    short is parsed again and kept whole."""
    import isa
    from tandem.flows import spec_cache

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(spec_cache, "_KEPT", {})
    params, parse = {"LOG_INP_BUFF_SIZE": 15}, isa.load_isa
    parsed = spec_cache.builtin_spec("vita", params)
    (kept,) = tmp_path.rglob("specs/*.pkl")
    assert parsed == parse("vita", params)

    monkeypatch.setattr(spec_cache, "_KEPT", {})
    monkeypatch.setattr(isa, "load_isa", lambda *a: pytest.fail("parsed although the spec is kept"))
    read = spec_cache.builtin_spec("vita", params)
    assert read == parsed and repr(read) == repr(parsed) and read is not parsed

    monkeypatch.setattr(isa, "load_isa", parse)
    monkeypatch.setattr(spec_cache, "_KEPT", {})
    whole = kept.read_bytes()
    kept.write_bytes(whole[:100])
    assert spec_cache.builtin_spec("vita", params) == parsed and kept.read_bytes() == whole


def test_the_plan_s_schedule_compiles_as_a_new_one_and_lowering_leaves_it_as_it_was() -> None:
    """The VITA flow compiles the schedule its plan made for the first candidate (tandem/flows/vita.py):
    twice from it, or from a schedule made anew, the same program."""
    from tandem.flows.vita import LAYER_FLOW, compile_layer

    target = load_target("vita", "tvm-paper")
    job = LAYER_FLOW.plan("conv2d", {"H": 14, "W": 14, "IC": 64, "OC": 64, "vthreads": 2}, target)
    first, again = (LAYER_FLOW.compile(job, job.candidates[0], target) for _ in range(2))
    anew = compile_layer(job.layer, job.candidates[0], target, job.epilogue)
    assert first[0] is job.scheduled is again[0] and anew[0] is not job.scheduled
    assert str(first[1].program) == str(again[1].program) == str(anew[1].program)


def test_a_sweep_point_run_again_compiles_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tandem/sweep/run.py's points keep their kernels in the cache folder: the same point (or a regression
    suite's case) run again finds them, and gives the same row."""
    from tandem.sweep.file import expand, read_sweep
    from tandem.sweep.run import evaluate

    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[sweep]\nname = "again"\ntarget = "vita"\nconfig = "vta-default"\n[parameters]\n'
                     '"isa_params.LOG_INP_BUFF_SIZE" = [15]\n[[workloads]]\nlayer = "gemm"\n'
                     'params = { M = 16, N = 32, K = 64 }\n')
    (point,) = expand(read_sweep(sweep))
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    first = evaluate(point)
    assert first["status"] == "ok" and len(kernels(tmp_path / "cache")) == 1
    never_compile(monkeypatch, "vita", "gemm", {})
    again = evaluate(point)
    assert again["status"] == "ok" and again["cycles"] == first["cycles"]


def test_the_folder_keeps_to_its_bound_removing_the_least_recently_written(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch
                                                                           ) -> None:
    import os

    for n in range(10):   # 10 files of 100 kB, written one second apart
        path = tmp_path / "gen" / f"{n}.pkl"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 100_000)
        os.utime(path, ns=(n * 10**9, n * 10**9))
    assert kernel_cache.bound(tmp_path, 2_000_000) == 0
    assert kernel_cache.bound(tmp_path, 500_000) == 6   # down to 80% of the bound: the 4 newest stay
    assert sorted(p.name for p in tmp_path.rglob("*.pkl")) == ["6.pkl", "7.pkl", "8.pkl", "9.pkl"]
    monkeypatch.setenv("TANDEM_CACHE_MAX_MB", "0.3")
    assert kernel_cache.max_bytes() == 300_000
    monkeypatch.setenv("TANDEM_CACHE_MAX_MB", "lots")
    with pytest.warns(RuntimeWarning, match="TANDEM_CACHE_MAX_MB"):
        assert kernel_cache.max_bytes() == kernel_cache.MAX_MB * 1_000_000


def test_the_network_operators_written_as_user_operators_are_stored_a_user_s_are_not(tmp_path: Path) -> None:
    """compiler/ops/network.py's operators are Tandem's own code (the fingerprint covers them): stored on
    both simulators; a user's file is not."""
    from tandem.flows import kernel_cache as kc

    network = Path(kc.__file__).resolve().parents[2] / "compiler" / "ops" / "network.py"
    assert kc.ours(network) and not kc.ours(USER_OPS)
    cache = KernelCache(tmp_path)
    shape = {"C": 16, "H": 4, "W": 4}
    for kind in ("vita", "diannao"):
        run("residual_add", load_target(kind), shape, cache=cache)
    assert len(kernels(tmp_path)) == 2
