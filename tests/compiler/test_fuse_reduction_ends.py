"""fuse_reduction_ends: a reduction's init and epilogue fused into its first and last GEMM steps where the
spec has instructions for them (tests/extensions/vita_gemm_first.toml, vita_gemm_last_shrclip.toml), chosen
by the spec's timing; the built-in spec's programs are unchanged."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from compiler import interp
from compiler.ir import nodes as ir
from compiler.ir.functor import post_order_visit
from compiler.lower import lower
from compiler.ops import vita
from compiler.ops.nn import ConvShape
from compiler.pipeline import passes_for
from tandem.flows.targets import load_target
from tandem.flows.vita import run_vita

F = importlib.import_module("compiler.passes.fuse_reduction_ends")
EXT = Path(__file__).resolve().parents[1] / "extensions"
FUSED = EXT / "vita_pipelined_fused_ends.toml"
PIPELINED = EXT / "vita_pipelined.toml"
LAYER = ConvShape(14, 14, 64, 64, 3, 1, 1)


def _tensorized(spec_file: Path | None, layer: ConvShape, tiling: vita.Tiling):
    target = load_target("vita", "tvm-paper", spec_file)
    vs = vita.conv2d(layer, tiling=tiling, vthreads=tiling.vthreads, spec=target.spec)
    func = lower(vs.schedule, vs.args)
    for p in passes_for("vita"):
        if p.name == "fuse_reduction_ends":
            return func, target
        func = p(func, target)
    raise AssertionError("no fuse_reduction_ends in the vita pipeline")


def _names(func: ir.PrimFunc) -> dict[str, int]:
    counts: dict[str, int] = {}

    def visit(node) -> None:
        if isinstance(node, ir.TensorInsn):
            counts[node.name] = counts.get(node.name, 0) + 1
    post_order_visit(func.body, visit)
    return counts


def _interpret(func: ir.PrimFunc, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    args = [rng.integers(-128, 128, p.shape).astype(p.dtype.numpy) if i < len(func.params) - 1
            else np.zeros(p.shape, p.dtype.numpy) for i, p in enumerate(func.params)]
    interp.run(func, args)
    return args[-1]


def test_pieces_cover_the_box_less_its_corners() -> None:
    box = ((0, 2), (0, 3), (0, 3))
    for first, last in ((True, False), (False, True), (True, True)):
        points = [p for b in F._pieces(box, first, last)
                  for p in np.ndindex(*(hi - lo for lo, hi in b))
                  for p in [tuple(lo + x for (lo, _), x in zip(b, p, strict=True))]]
        want = set(np.ndindex(2, 3, 3)) - ({(0, 0, 0)} if first else set()) - ({(1, 2, 2)} if last else set())
        assert sorted(points) == sorted(want)   # each point once
    assert F._pieces(((0, 1),), True, False) == []


@pytest.mark.parametrize("tiling", [vita.Tiling(7, 1, 1, 2, "oc"), vita.Tiling(7, 2, 4, 0, "oc"),
                                    vita.Tiling(7, 1, 2, 2, "oc")])
def test_the_pass_computes_what_it_was_given(tiling: vita.Tiling) -> None:
    layer = ConvShape(14, 14, 64, 64, 3, 1, 1)
    before, target = _tensorized(FUSED, layer, tiling)
    after = F.fuse_reduction_ends(before, target.spec)
    counts = _names(after)
    assert counts.get("GEMM_FIRST") and counts.get("GEMM_LAST_SHRCLIP")
    assert not {"GEMM_RESET", "ALU_SHR", "ALU_MAX", "ALU_MIN"} & counts.keys()
    np.testing.assert_array_equal(_interpret(before), _interpret(after))


def test_the_built_in_spec_program_is_unchanged() -> None:
    before, target = _tensorized(None, LAYER, vita.Tiling(7, 1, 1, 2, "oc"))
    assert F.fuse_reduction_ends(before, target.spec) is before
    before, target = _tensorized(PIPELINED, LAYER, vita.Tiling(7, 1, 1, 2, "oc"))
    assert F.fuse_reduction_ends(before, target.spec) is before


def test_the_fused_ends_run_faster_bit_exact_with_no_alu_work() -> None:
    base = run_vita(LAYER, 2, load_target("vita", "tvm-paper", PIPELINED))
    fused = run_vita(LAYER, 2, load_target("vita", "tvm-paper", FUSED))
    assert base.validated and fused.validated
    assert fused.cycles < base.cycles
    assert fused.instructions["GEMM_FIRST"] and fused.instructions["GEMM_LAST_SHRCLIP"]
    assert not {"GEMM_RESET", "ALU_SHR", "ALU_MAX", "ALU_MIN"} & set(fused.instructions)
    assert fused.utilization["gemm"] > base.utilization["gemm"]


@pytest.mark.parametrize("slow", ["GEMM_FIRST", "GEMM_LAST_SHRCLIP"])
def test_an_end_slower_than_its_decomposition_is_not_selected(slow: str, tmp_path: Path) -> None:
    spec = tmp_path / "slow.toml"
    spec.write_text(f'[isa]\nname = "vita"\nextends = "{FUSED}"\nsummary = "slow {slow}"\n\n'
                    f'[instructions.{slow}]\ntiming = {{ unit = "compute", latency = "GEMM_PIPELINE_CYCLES", '
                    f'cycles = "16 * iter_out * iter_in * max(uop_end - uop_bgn, 0)" }}\n')
    before, target = _tensorized(spec, LAYER, vita.Tiling(7, 1, 1, 2, "oc"))
    counts = _names(F.fuse_reduction_ends(before, target.spec))
    assert slow not in counts
    other = "GEMM_LAST_SHRCLIP" if slow == "GEMM_FIRST" else "GEMM_FIRST"
    assert counts.get(other)
    kept = "GEMM_RESET" if slow == "GEMM_FIRST" else "ALU_SHR"
    assert counts.get(kept)


def test_the_cost_model_charges_no_reset_or_epilogue_per_vector_where_the_ends_fuse() -> None:
    from tandem.flows.vita import DEFAULT_EPILOGUE, machine_costs
    assert F.fusable_ends(load_target("vita", "tvm-paper").spec) == (False, False)
    first_only = load_target("vita", "tvm-paper", EXT / "vita_gemm_first.toml").spec
    assert F.fusable_ends(first_only) == (True, False)
    fused = machine_costs(load_target("vita", "tvm-paper", FUSED), DEFAULT_EPILOGUE)
    plain = machine_costs(load_target("vita", "tvm-paper", PIPELINED), DEFAULT_EPILOGUE)
    assert (fused.reset_per_vector, fused.epilogue_ops) == (0, 0)
    assert (plain.reset_per_vector, plain.epilogue_ops) == (1, 3)
