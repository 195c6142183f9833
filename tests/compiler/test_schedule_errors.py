"""Bad inputs to the front end raise typed errors whose messages name the culprit and the rule.

Each case builds a fresh, small program, performs one illegal request and checks the error class
(``IRTypeError`` for malformed tensor expressions, ``ScheduleError`` for illegal schedule primitives,
``LoweringError`` for schedules or argument lists that cannot be lowered) and the exact message
fragments: the stage, axis or tensor at fault and the rule it breaks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from compiler import ops, te
from compiler.errors import IRTypeError, LoweringError, ScheduleError
from compiler.ir import nodes as ir
from compiler.lower import lower
from compiler.schedule import Schedule, create_schedule
from compiler.te import Tensor


@dataclass
class Chain:
    """A -> B (= A*2) -> C (= B+1), all [8, 8] float32; C is the output."""

    A: Tensor
    B: Tensor
    C: Tensor
    s: Schedule


def chain() -> Chain:
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    return Chain(A, B, C, create_schedule(C))


@dataclass
class RowSum:
    """S[i] = sum_k A[i, k] followed by T[i] = S[i] + 1; T is the output."""

    A: Tensor
    k: te.IterVar
    S: Tensor
    T: Tensor
    s: Schedule


def row_sum() -> RowSum:
    A = te.placeholder((8, 8), "float32", name="A")
    k = te.reduce_axis(8, name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    T = te.compute((8,), lambda i: S[i] + 1.0, name="T")
    return RowSum(A, k, S, T, create_schedule(T))


def _match(*fragments: str) -> str:
    """A regex matching the exact fragments, in order, anywhere in the message."""
    return ".*".join(re.escape(f) for f in fragments)


# --------------------------------------------------------------------------------------------------
# Each case: (callable performing the illegal request, error class, exact message fragments in order)


def _add_wrong_shapes():
    ops.add(te.placeholder((3, 4), "float32", name="A"), te.placeholder((4, 3), "float32", name="B"))


def _wrong_index_count():
    A = te.placeholder((3, 4), "float32", name="A")
    te.compute((3,), lambda i: A[i], name="X")


def _split_by_zero():
    c = chain()
    c.s[c.C].split(c.C.op.axis[0], factor=0)


def _split_by_negative():
    c = chain()
    c.s[c.C].split(c.C.op.axis[0], nparts=-2)


def _split_by_float():
    c = chain()
    c.s[c.C].split(c.C.op.axis[1], factor=2.0)


def _split_with_factor_and_nparts():
    c = chain()
    c.s[c.C].split(c.C.op.axis[0], factor=2, nparts=4)


def _split_twice():
    c = chain()
    c.s[c.C].split(c.C.op.axis[0], factor=2)
    c.s[c.C].split(c.C.op.axis[0], factor=4)


def _reorder_loops_of_two_stages():
    c = chain()
    c.s[c.C].reorder(c.C.op.axis[1], c.B.op.axis[0])


def _split_unknown_axis():
    c = chain()
    c.s[c.C].split(te.reduce_axis(3, name="zz"), factor=2)


def _split_plain_var():
    c = chain()
    c.s[c.C].split(ir.Var("q"), factor=2)


def _reorder_duplicate():
    c = chain()
    i, j = c.C.op.axis
    c.s[c.C].reorder(j, i, j)


def _fuse_non_adjacent():
    c = chain()
    io, ii = c.s[c.C].split(c.C.op.axis[0], factor=2)
    c.s[c.C].fuse(io, c.C.op.axis[1])


def _fuse_spatial_with_reduce():
    r = row_sum()
    r.s[r.S].fuse(r.S.op.axis[0], r.k)


def _bind_twice():
    c = chain()
    c.s[c.C].bind(c.C.op.axis[0], te.thread_axis("core", name="tid"))
    c.s[c.C].bind(c.C.op.axis[0], te.thread_axis("cluster", name="cid"))


def _bind_reduce_axis():
    r = row_sum()
    r.s[r.S].bind(r.k, te.thread_axis("core", name="tid"))


def _bind_thread_to_two_loops():
    c = chain()
    tid = te.thread_axis("core", name="tid")
    c.s[c.C].bind(c.C.op.axis[0], tid)
    c.s[c.C].bind(c.C.op.axis[1], tid)


def _parallel_reduce_axis():
    r = row_sum()
    r.s[r.S].parallel(r.k)


def _compute_at_of_output():
    c = chain()
    c.s[c.C].compute_at(c.s[c.B], c.B.op.axis[0])


def _compute_at_itself():
    c = chain()
    c.s[c.B].compute_at(c.s[c.B], c.B.op.axis[0])


def _compute_at_cycle():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: C[i] - 1.0, name="D")
    s = create_schedule(D)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].compute_at(s[B], B.op.axis[0])


def _compute_at_inlined_stage():
    c = chain()
    c.s[c.B].compute_inline()
    D = c.s.cache_read(c.A, "nmem", [c.B])
    c.s[D].compute_at(c.s[c.B], c.B.op.axis[0])


def _compute_inline_reduction():
    r = row_sum()
    r.s[r.S].compute_inline()


def _cache_read_for_a_non_reader():
    c = chain()
    c.s.cache_read(c.A, "nmem", [c.C])


def _cache_write_after_split():
    c = chain()
    c.s[c.C].split(c.C.op.axis[0], factor=2)
    c.s.cache_write(c.C, "acc")


def _lower_missing_placeholder():
    c = chain()
    lower(c.s, [c.C], name="f")


def _lower_argument_twice():
    c = chain()
    lower(c.s, [c.A, c.C, c.C], name="f")


def _lower_without_the_output():
    c = chain()
    lower(c.s, [c.A], name="f")


def _lower_with_a_compute_at_argument():
    c = chain()
    c.s[c.B].compute_at(c.s[c.C], c.C.op.axis[0])
    lower(c.s, [c.A, c.B, c.C], name="f")


def _lower_reader_outside_compute_at_scope():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: A[i] - 1.0, name="D")
    s = create_schedule([C, D])
    s[B].compute_at(s[D], D.op.axis[0])  # D does not read B
    lower(s, [A, C, D], name="f")


def _stage_of_unknown_tensor():
    c = chain()
    c.s[te.placeholder((3,), "float32", name="X")]


def _reduce_axis_empty_range():
    te.reduce_axis((3, 3), name="r")


def _reduce_axis_zero_extent():
    te.reduce_axis(0, name="r")


def _compute_arity_mismatch():
    X = te.placeholder((3,), "float32", name="X")
    te.compute((3, 4), lambda i: X[i], name="Y")


def _nested_reduction():
    Z = te.placeholder((3, 3), "float32", name="Z")
    r = te.reduce_axis(3, name="r")
    te.compute((3,), lambda i: te.sum(Z[i, r], axis=r) + 1.0, name="N")


def _reduction_inside_a_reduction():
    Z = te.placeholder((3, 3), "float32", name="Z")
    r, q = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="q")
    te.compute((1,), lambda i: te.sum(te.sum(Z[r, q], axis=q), axis=r), name="N")


def _sum_over_a_spatial_axis():
    X = te.placeholder((3,), "float32", name="X")
    te.compute((3,), lambda i: te.sum(X[i], axis=i), name="Y")


def _split_a_placeholder():
    c = chain()
    c.s[c.A].split(c.C.op.axis[0], factor=2)


def _vectorize_an_unrolled_loop():
    c = chain()
    c.s[c.C].unroll(c.C.op.axis[1])
    c.s[c.C].vectorize(c.C.op.axis[1])


def _inline_an_output():
    c = chain()
    c.s[c.C].compute_inline()


def _schedule_a_placeholder_output():
    create_schedule(te.placeholder((3,), "float32", name="X"))


def _prefetch_a_tensor_not_read():
    c = chain()
    c.s[c.C].prefetch(c.A, c.C.op.axis[0], c.C.op.axis[0])


def _prefetch_by_zero():
    c = chain()
    c.s[c.C].prefetch(c.B, c.C.op.axis[0], c.C.op.axis[0], 0)


def _prefetch_along_an_inner_loop():
    c = chain()
    i, j = c.C.op.axis
    c.s[c.C].prefetch(c.B, i, j)
    lower(c.s, [c.A, c.C])


CASES = [
    pytest.param(
        _add_wrong_shapes, IRTypeError, ["add: operand shapes differ: A[3, 4] vs B[4, 3]"], id="add-shapes"
    ),
    pytest.param(
        _wrong_index_count,
        IRTypeError,
        ["tensor A: expected 2 indices for shape [3, 4], but got 1"],
        id="index-count",
    ),
    pytest.param(
        _split_by_zero,
        ScheduleError,
        ["split on stage 'C'", "factor must be a positive integer, but got 0"],
        id="split-zero",
    ),
    pytest.param(
        _split_by_negative,
        ScheduleError,
        ["split on stage 'C'", "nparts must be a positive integer, but got -2"],
        id="split-negative",
    ),
    pytest.param(
        _split_by_float,
        ScheduleError,
        ["split on stage 'C'", "factor must be a positive integer, but got 2.0"],
        id="split-float",
    ),
    pytest.param(
        _split_with_factor_and_nparts,
        ScheduleError,
        ["split on stage 'C'", "expected exactly one of factor= and nparts="],
        id="split-factor-and-nparts",
    ),
    pytest.param(
        _split_twice,
        ScheduleError,
        ["split on stage 'C'", "axis 'i' was already split or fused", "loops are i.outer, i.inner, j"],
        id="split-already-split",
    ),
    pytest.param(
        _reorder_loops_of_two_stages,
        ScheduleError,
        ["reorder on stage 'C'", "axis 'i' belongs to stage 'B', not to 'C'"],
        id="reorder-other-stage",
    ),
    pytest.param(
        _split_unknown_axis,
        ScheduleError,
        ["split on stage 'C'", "axis 'zz' belongs to no stage of this schedule"],
        id="unknown-axis",
    ),
    pytest.param(
        _split_plain_var,
        ScheduleError,
        ["split on stage 'C'", "expected an axis (IterVar) for 'axis', but got Var(name='q'"],
        id="plain-var",
    ),
    pytest.param(
        _reorder_duplicate,
        ScheduleError,
        ["reorder on stage 'C'", "axis 'j' appears more than once"],
        id="reorder-duplicate",
    ),
    pytest.param(
        _fuse_non_adjacent,
        ScheduleError,
        [
            "fuse on stage 'C'",
            "axes i.outer, j are not adjacent loops in this order",
            "the loops are i.outer, i.inner, j",
        ],
        id="fuse-non-adjacent",
    ),
    pytest.param(
        _fuse_spatial_with_reduce,
        ScheduleError,
        ["fuse on stage 'S'", "cannot fuse spatial and reduce axes together (i, k)"],
        id="fuse-spatial-reduce",
    ),
    pytest.param(
        _bind_twice,
        ScheduleError,
        ["bind on stage 'C'", "axis 'i' is already bound to 'core' (tid)"],
        id="bind-axis-twice",
    ),
    pytest.param(
        _bind_reduce_axis,
        ScheduleError,
        ["bind on stage 'S'", "cannot bind reduce axis 'k' to a thread axis"],
        id="bind-reduce-axis",
    ),
    pytest.param(
        _bind_thread_to_two_loops,
        ScheduleError,
        ["bind on stage 'C'", "thread axis 'tid' is already bound to loop 'i'"],
        id="bind-thread-two-loops",
    ),
    pytest.param(
        _parallel_reduce_axis,
        ScheduleError,
        ["parallel on stage 'S'", "cannot run reduce axis 'k' in parallel (a race)"],
        id="parallel-reduce-axis",
    ),
    pytest.param(
        _compute_at_of_output,
        ScheduleError,
        ["compute_at on stage 'C'", "an output must be computed at the root"],
        id="compute-at-output",
    ),
    pytest.param(
        _compute_at_itself,
        ScheduleError,
        ["compute_at on stage 'B'", "a stage cannot be computed at itself"],
        id="compute-at-itself",
    ),
    pytest.param(
        _compute_at_cycle,
        ScheduleError,
        ["compute_at on stage 'C'", "'B' is itself computed inside this stage"],
        id="compute-at-cycle",
    ),
    pytest.param(
        _compute_at_inlined_stage,
        ScheduleError,
        ["compute_at on stage 'A.nmem'", "stage 'B' is inlined; it has no loops"],
        id="compute-at-inlined",
    ),
    pytest.param(
        _compute_inline_reduction,
        ScheduleError,
        ["compute_inline on stage 'S'", "a reduction cannot be inlined"],
        id="inline-reduction",
    ),
    pytest.param(
        _inline_an_output,
        ScheduleError,
        ["compute_inline on stage 'C'", "an output cannot be inlined"],
        id="inline-output",
    ),
    pytest.param(
        _cache_read_for_a_non_reader,
        ScheduleError,
        ["cache_read of 'A'", "stage 'C' does not read 'A'"],
        id="cache-read-non-reader",
    ),
    pytest.param(
        _cache_write_after_split,
        ScheduleError,
        ["cache_write of 'C'", "stage 'C' already has loop transformations; apply cache_write first"],
        id="cache-write-after-split",
    ),
    pytest.param(
        _lower_missing_placeholder,
        LoweringError,
        ["lower f", "placeholder 'A' is read but is not in the argument list (C)"],
        id="lower-missing-placeholder",
    ),
    pytest.param(
        _lower_argument_twice,
        LoweringError,
        ["lower f", "tensor 'C' is passed twice"],
        id="lower-argument-twice",
    ),
    pytest.param(
        _lower_without_the_output,
        LoweringError,
        ["lower f", "output 'C' is not in the argument list (A)"],
        id="lower-missing-output",
    ),
    pytest.param(
        _lower_with_a_compute_at_argument,
        LoweringError,
        ["lower f", "argument 'B' must be computed at the root to be a parameter"],
        id="lower-argument-not-at-root",
    ),
    pytest.param(
        _lower_reader_outside_compute_at_scope,
        LoweringError,
        ["stage 'B' is computed at 'D', but its reader 'C' is not computed inside 'D'"],
        id="lower-reader-outside-compute-at",
    ),
    pytest.param(
        _stage_of_unknown_tensor,
        ScheduleError,
        ["Tensor(X, [3], float32) is not part of this schedule (stages: A, B, C)"],
        id="stage-of-unknown-tensor",
    ),
    pytest.param(
        _reduce_axis_empty_range,
        IRTypeError,
        ["reduce_axis r: expected a non-empty range, but got [3, 3)"],
        id="reduce-axis-empty-range",
    ),
    pytest.param(
        _reduce_axis_zero_extent,
        IRTypeError,
        ["reduce_axis r: expected a non-empty range, but got [0, 0)"],
        id="reduce-axis-zero-extent",
    ),
    pytest.param(
        _compute_arity_mismatch,
        IRTypeError,
        ["compute Y: fcompute takes 1 indices but the shape [3, 4] has 2 dims"],
        id="compute-arity",
    ),
    pytest.param(
        _nested_reduction,
        IRTypeError,
        ["compute N: a reduction must be the whole body, but 'sum(Z[i, r]", "is nested inside it"],
        id="nested-reduction",
    ),
    pytest.param(
        _reduction_inside_a_reduction,
        IRTypeError,
        ["compute N: a reduction must be the whole body, but 'sum(Z[r, q]", "is nested inside it"],
        id="reduction-inside-reduction",
    ),
    pytest.param(
        _sum_over_a_spatial_axis,
        IRTypeError,
        ["sum: expected reduce axes made by reduce_axis()"],
        id="sum-over-spatial-axis",
    ),
    pytest.param(
        _split_a_placeholder,
        ScheduleError,
        ["split on stage 'A'", "a placeholder has no loops to schedule"],
        id="split-placeholder",
    ),
    pytest.param(
        _vectorize_an_unrolled_loop,
        ScheduleError,
        ["vectorize on stage 'C'", "axis 'j' is already marked unroll"],
        id="vectorize-unrolled",
    ),
    pytest.param(
        _prefetch_a_tensor_not_read,
        ScheduleError,
        ["prefetch on stage 'C'", "stage 'C' does not read tensor A"],
        id="prefetch-unread",
    ),
    pytest.param(
        _prefetch_by_zero,
        ScheduleError,
        ["prefetch on stage 'C'", "expected a nonzero int offset, but got 0"],
        id="prefetch-zero-offset",
    ),
    pytest.param(
        _prefetch_along_an_inner_loop,
        LoweringError,
        ["stage 'C': prefetch of 'B' at loop 'i' advances loop 'j'", "neither 'i' nor a loop around it"],
        id="prefetch-along-inner",
    ),
    pytest.param(
        _schedule_a_placeholder_output,
        ScheduleError,
        ["create_schedule: output 'X' is a placeholder, not computed"],
        id="schedule-placeholder-output",
    ),
]


@pytest.mark.parametrize("request_fn, error, fragments", CASES)
def test_bad_input_raises_a_typed_error_naming_the_culprit(
    request_fn: Callable[[], None], error: type[Exception], fragments: list[str]
):
    with pytest.raises(error, match=_match(*fragments)):
        request_fn()


def test_ir_type_errors_are_also_type_errors_and_schedule_errors_value_errors():
    # callers that catch the builtin families still catch Tandem's errors
    with pytest.raises(TypeError, match=re.escape("tensor A: expected 2 indices")):
        _wrong_index_count()
    with pytest.raises(ValueError, match=re.escape("factor must be a positive integer")):
        _split_by_zero()


def test_a_rejected_primitive_leaves_the_stage_unchanged():
    c = chain()
    stage = c.s[c.C]
    before = list(stage.leaf_iter_vars)
    with pytest.raises(ScheduleError):
        stage.split(c.C.op.axis[0], factor=2, nparts=2)
    with pytest.raises(ScheduleError):
        stage.reorder(c.C.op.axis[1], c.C.op.axis[1])
    with pytest.raises(ScheduleError):
        stage.fuse(c.C.op.axis[1], c.C.op.axis[0])
    assert stage.leaf_iter_vars == before
    assert stage.relations == []
    # and the schedule still lowers
    assert "C[i_1, j_1] = B[i_1, j_1] + f32(1.0)" in str(lower(c.s, [c.A, c.C]))


@pytest.mark.parametrize("transform", ["split", "fuse"])
def test_splitting_or_fusing_a_loop_that_a_stage_is_computed_at_names_both(transform):
    A = te.placeholder((8, 4), "float32", name="A")
    B = te.compute((8, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = create_schedule(B)
    AL = s.cache_read(A, "nmem", [B])
    i, j = B.op.axis
    s[AL].compute_at(s[B], i)
    with pytest.raises((ScheduleError, LoweringError), match=_match("A.nmem", "'i'")):
        if transform == "split":
            s[B].split(i, factor=2)
        else:
            s[B].fuse(i, j)
        lower(s, [A, B], name="f")
