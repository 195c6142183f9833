"""compiler/analysis/issued.py: each tensor instruction counted once per iteration of the constant-extent
loops around it, through every statement kind (an ``IRVisitor``: none is skipped, a foreign node is
refused)."""

from __future__ import annotations

import dataclasses

import pytest

import isa
from compiler.analysis.issued import issued_instructions
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.ops import cpu
from compiler.pipeline import compile_func
from compiler.target import Target

TARGET = Target("arm", isa.load_isa("arm"))
PER_CALL = 8 * (8 // 4) * (16 // 4)   # rows x column blocks of 4 lanes x reduction steps of 4


def gemm() -> ir.PrimFunc:
    """An 8 x 8 x 16 int8 GEMM tensorized onto the arm spec's sdot (compiled, not run)."""
    sched = cpu.gemm(8, 8, 16, "arm-dot", cpu.CpuTuning(), spec=TARGET.spec, dtype="int8")
    return compile_func(lower(sched.schedule, sched.args), TARGET)


def test_each_instruction_counts_the_extents_of_the_loops_around_it() -> None:
    assert issued_instructions(gemm()) == {"sdot_v4i32": PER_CALL}


def test_the_count_passes_through_every_statement_kind() -> None:
    """A loop of 3 around a Let, an Attr and both branches of an IfThenElse (each counted in full: an upper
    bound), inside a loop whose extent is not a constant (counted once)."""
    func = gemm()
    n = ir.Var("n")
    guarded = ir.IfThenElse(ir.LT(n, ir.const(2)), func.body, func.body)
    body = ir.For(ir.Var("u"), ir.const(0), n, ir.For(ir.Var("t"), ir.const(0), ir.const(3),
                                                      ir.Attr("pragma", "x", guarded)))
    wrapped = dataclasses.replace(func, body=ir.Let(n, ir.const(1), body))
    assert issued_instructions(wrapped) == {"sdot_v4i32": 3 * 2 * PER_CALL}


def test_a_node_of_no_kind_is_refused() -> None:
    func = dataclasses.replace(gemm(), body=object())
    with pytest.raises(NotImplementedError, match="no case for object"):
        issued_instructions(func)
