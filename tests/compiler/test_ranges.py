"""compiler/passes/ranges.py: the range proof that lets a saturating instruction (vpdpbusds, in
tests/extensions/x86_vpdpbusds.toml) stand for the loop IR's wrapping int32 sum, and only where no partial
sum of the whole reduction can reach its clamps, for every u8 x s8 input (issue 46, item 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import isa
from compiler import te
from compiler.arith import Interval
from compiler.ir import cast
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, post_order_visit
from compiler.lower import lower
from compiler.ops import cpu
from compiler.passes import ranges
from compiler.passes.inspector import NotApplicable, inspect_op
from compiler.passes.tensorize import unmatched
from compiler.pipeline import passes_for
from compiler.schedule import create_schedule
from compiler.target import Target

SPEC = isa.load_spec_file(Path(__file__).parents[1] / "extensions" / "x86_vpdpbusds.toml")
SAT = "vpdpbusds_512"
PRODUCT = Interval(255 * -128, 255 * 127)   # u8 x s8


ZERO = Interval.point(0)
ENVELOPE = ranges.envelope_of(SPEC.instruction(SAT))


def whole(terms: int, init: Interval = ZERO) -> ranges.Accumulation:
    return ranges.Accumulation(terms, init, "the reduction over k")


def test_the_envelope_of_vpdpbusds_is_a_clamp_around_a_widened_sum_and_vpdpbusd_has_none() -> None:
    env = ENVELOPE
    assert env is not None and (env.acc, env.acc_casts, env.reduce.dtype) == ("c", ("i64",), "i64")
    assert [str(x) for x in env.layers] == ["i32(...)", "min(..., 2147483647)", "max(..., -2147483648)"]
    assert ranges.node_range(env.reduce.body) == PRODUCT
    assert ranges.envelope_of(SPEC.instruction("vpdpbusd_512")) is None   # a plain sum: nothing to prove
    assert str(ranges.narrowed(env, "i32")) == "sum(j, i32(a[4 * i + j]) * i32(b[4 * i + j]))"


@pytest.mark.parametrize(("terms", "holds"), [(256, True), (65792, True), (65796, False), (70000, False)])
def test_the_clamp_is_the_identity_up_to_2_to_the_31_over_the_largest_product(terms: int, holds: bool):
    """65792 * 32640 = 2,147,450,880 <= 2**31, the clamp's low end; 65796 (65793 padded to 4) is past it."""
    reason = ranges.prove(ENVELOPE, SAT, whole(terms), "i32")
    assert (reason is None) == holds, reason


def test_a_refusal_names_the_bound_and_the_sum_that_reaches_past_it() -> None:
    reason = ranges.prove(ENVELOPE, SAT, whole(70000), "i32")
    assert reason == ("vpdpbusds_512 saturates at -2,147,483,648 and 2,147,483,647, but the sum of 70,000 "
                      "terms in [-32,640, 32,385] (the reduction over k) reaches -2,284,800,000 and "
                      "2,266,950,000")
    near = ranges.prove(ENVELOPE, SAT, whole(256, Interval(0, 2**31 - 10)), "i32")
    assert near == ("vpdpbusds_512 saturates at 2,147,483,647, but the sum of 256 terms in [-32,640, 32,385] "
                    "(the reduction over k) from [0, 2,147,483,638] reaches 2,155,774,198")


def test_an_unknown_accumulation_or_a_float_one_is_refused() -> None:
    env = ENVELOPE
    assert "the range of what it accumulates is not known: why" in ranges.prove(env, SAT, "why", "i32")
    assert "not f32" in ranges.prove(env, SAT, whole(4), "f32")


WIDE = """[isa]
name = "x86"
extends = "x86"
summary = "a widening dot product"
[instructions.wide]
summary = "16 int32 lanes, each = i32(lane + the sum of 2 u16 x u16 products, in i64)"
operands = [{ name = "a", kind = "register", dtype = "u16", shape = [32] },
            { name = "b", kind = "register", dtype = "u16", shape = [32] },
            { name = "c", kind = "register", dtype = "i32", shape = [16] },
            { name = "d", kind = "register", dtype = "i32", shape = [16] }]
indices = { i = "spatial", j = { kind = "reduce", extent = 2 } }
semantics = "d[i] = i32(i64(c[i]) + sum(j, i64(a[2*i + j]) * i64(b[2*i + j])))"
"""


def test_a_widened_body_that_leaves_the_statements_dtype_is_refused(tmp_path: Path) -> None:
    """u16 x u16 reaches 4,294,836,225: the loop IR's i32 product wraps where the instruction's i64 one
    does not, however short the reduction."""
    (tmp_path / "wide.toml").write_text(WIDE)
    env = ranges.envelope_of(isa.load_spec_file(tmp_path / "wide.toml").instruction("wide"))
    assert [str(x) for x in env.layers] == ["i32(...)"]
    assert ranges.prove(env, "wide", whole(2), "i32") == (
        "wide computes i64(a[2 * i + j]) * i64(b[2 * i + j]) ([0, 4294836225]) in i64, which reaches past "
        "i32's [-2147483648, 2147483647]")


def _gemm(k: int, spec: isa.ISA = SPEC) -> ir.PrimFunc:
    s = cpu.gemm(2, 16, k, "x86-vnni", cpu.CpuTuning(2, 1, 2), spec=spec)
    return lower(s.schedule, s.args)


def test_the_inspector_refuses_vpdpbusds_for_a_long_reduction_with_the_range_check() -> None:
    a, b = te.placeholder((4, 70000), "uint8", "A"), te.placeholder((16, 70000), "int8", "B")
    k = te.reduce_axis(70000, "k")
    op = te.compute((4, 16), lambda i, j: te.sum(cast(a[i, k], "int32") * cast(b[j, k], "int32"), axis=[k]),
                    name="C").op
    result = inspect_op(op, SPEC, SAT)
    assert isinstance(result, NotApplicable) and result.check == "range", result
    assert "sum of 70,000 terms in [-32,640, 32,385] (the reduction over k)" in result.reason


def _store(func: ir.PrimFunc) -> ir.Store:
    """The accumulating store of ``func``: ``buf[idx] = buf[idx] + term``."""
    found: list[ir.Store] = []

    def update(n) -> None:
        if isinstance(n, ir.Store) and isinstance(n.value, ir.Add) and isinstance(n.value.a, ir.Load) \
                and n.value.a.buffer is n.buffer:
            found.append(n)

    post_order_visit(func.body, update)
    return found[0]


def test_the_accumulation_around_an_accumulator_counts_the_reduction_loops_and_reads_the_init() -> None:
    func = _gemm(256)
    acc = ranges.accumulation_in(func.body, _store(func))
    assert acc == ranges.Accumulation(256, Interval.point(0), "the accumulation into gemm.local", PRODUCT)


def test_an_accumulator_the_caller_passes_starts_anywhere_in_its_type() -> None:
    a, b = te.placeholder((2, 8), "uint8", "A"), te.placeholder((16, 8), "int8", "B")
    k = te.reduce_axis(8, "k")
    c = te.compute((2, 16), lambda i, j: te.sum(cast(a[i, k], "int32") * cast(b[j, k], "int32"), axis=[k]),
                   name="C")
    func = lower(create_schedule(c), [a, b, c])
    acc = ranges.accumulation_in(func.body, _store(func))
    assert acc.terms == 8 and acc.init == Interval(-2**31, 2**31 - 1)


class _Mark(IRMutator):
    """Every tensorize mark names ``name`` (the schedule asked for vpdpbusd)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        s = self.generic_mutate(s)
        return dataclasses.replace(s, value=self.name) if s.key == "tensorize" else s


@pytest.mark.parametrize(("k", "selected"), [(256, True), (70000, False)])
def test_the_tensorize_pass_proves_the_range_from_the_loops_around_the_mark(k: int, selected: bool) -> None:
    """A mark asking for vpdpbusds (here: a vpdpbusd schedule, its marks renamed) becomes the instruction
    only where the whole accumulation cannot saturate; else it stays scalar and ``unmatched`` says why."""
    func = _gemm(k, isa.load_isa("x86"))
    func = dataclasses.replace(func, body=_Mark(SAT).mutate(func.body))
    target = Target("cpu", SPEC)
    for p in passes_for("cpu"):
        func = p(func, target)
    found: list[ir.TensorInsn] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, ir.TensorInsn) else None)
    reasons = [str(x) for x in unmatched(func, SPEC)]
    assert bool(found) == selected and bool(reasons) != selected
    if not selected:
        assert "(range): vpdpbusds_512 saturates at -2,147,483,648 and 2,147,483,647, but the sum of " \
               "70,000 terms in [-32,640, 32,385] (the accumulation into gemm.local)" in reasons[0]
