"""The DianNao pipeline (compiler/pipeline.py, target ``diannao``) on its element-wise schedules
(compiler/ops/diannao.py): every pass is interpreted before and after on random inputs, with non-dividing
splits and core counts that do not divide the work; with all passes every marked statement becomes a
tensor instruction, and without loop partitioning or preprocessing the report says where and why not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import isa
from compiler.errors import LoweringError
from compiler.interp import run
from compiler.ir import PrimFunc
from compiler.lower import lower
from compiler.ops import diannao as dops
from compiler.passes.tensorize import unmatched
from compiler.pipeline import compile_func, passes_for
from compiler.target import Target
from compiler.testing import assert_same_results, random_args

DIANNAO = isa.load_isa("diannao")
TARGET = Target("diannao", DIANNAO)


def stages(op: str, shape, dtype: str, cores: int, tile: int | None, skip=()) -> list[tuple[str, PrimFunc]]:
    d = dops.elementwise(op, shape, dtype, cores, tile, spec=DIANNAO)
    out: list[tuple[str, PrimFunc]] = []
    compile_func(lower(d.schedule, list(d.args), op), TARGET, dump=lambda n, f: out.append((n, f)),
                 skip=skip)
    return out


def check_each_pass(funcs: list[tuple[str, PrimFunc]]) -> None:
    for (_, before), (name, after) in zip(funcs, funcs[1:], strict=False):
        assert_same_results(before, after, name, seeds=1)


@settings(max_examples=20, deadline=None)
@given(
    op=st.sampled_from(["add", "sub", "mul", "maximum", "relu"]),
    dims=st.lists(st.integers(1, 24), min_size=1, max_size=3),
    dtype=st.sampled_from(["float32", "float16", "int8", "int32"]),
    cores=st.sampled_from([1, 2, 3, 4, 8, 16]),
    tile=st.sampled_from([None, 64, 128, 192]),
)
def test_every_pass_keeps_the_result_and_all_marks_become_instructions(op, dims, dtype, cores, tile) -> None:
    funcs = stages(op, tuple(dims), dtype, cores, tile)
    note(str(funcs[-1][1]))
    check_each_pass(funcs)
    assert unmatched(funcs[-1][1], DIANNAO) == []


def test_without_partitioning_guarded_tiles_stay_scalar_with_a_reason() -> None:
    funcs = stages("add", (255, 3), "float32", 16, 64, skip=("loop_partition",))
    check_each_pass(funcs)
    reasons = [str(x) for x in unmatched(funcs[-1][1], DIANNAO)]
    assert reasons and all("guarded by" in r for r in reasons)


def test_without_preprocessing_tails_and_in_place_ops_stay_scalar() -> None:
    add = unmatched(stages("add", (255, 3), "float32", 16, 64, skip=("preprocess",))[-1][1], DIANNAO)
    assert {x.constraint.kind for x in add if x.constraint} == {"divisible"}
    relu = unmatched(stages("relu", (4096,), "float32", 16, None, skip=("preprocess",))[-1][1], DIANNAO)
    assert relu and all("operand dst is both" in str(x) for x in relu)


def test_dividing_shapes_need_neither_pass() -> None:
    funcs = stages("add", (16 * 128,), "float32", 16, 64, skip=("loop_partition", "preprocess"))
    assert unmatched(funcs[-1][1], DIANNAO) == []


def test_only_optional_passes_may_be_skipped() -> None:
    names = [p.name for p in passes_for("diannao", ("preprocess",))]
    assert names[-6:] == ["tensorize", "share_smem", "double_buffer", "stream_copies", "share_card",
                          "hoist_fill"]
    assert "fold_padding" not in names
    names = [p.name for p in passes_for("diannao", ("double_buffer", "stream_copies", "hoist_fill",
                                                    "share_card"))]
    assert names[-2:] == ["tensorize", "share_smem"]
    with pytest.raises(LoweringError, match="cannot skip pass 'tensorize'; optional passes: "
                                            "double_buffer, hoist_fill, loop_partition, preprocess, "
                                            "share_card, stream_copies"):
        passes_for("diannao", ("tensorize",))


def test_a_full_size_case_interprets_like_numpy() -> None:
    """One of seed 001's awkward shapes at reduced size: 31 x 55 x 5 f32 over 16 cores."""
    funcs = stages("sub", (31, 55, 5), "float32", 16, None)
    final = funcs[-1][1]
    args = random_args(final, np.random.default_rng(3))
    a, b = args[0].copy(), args[1].copy()
    run(final, args)
    assert (args[2] == a - b).all()
