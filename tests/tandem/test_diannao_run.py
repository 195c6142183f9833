"""Tests of tandem/flows/diannao.py: ``run_kernel`` checks the arrays against the kernel's parameters, places
them in GMEM, launches the kernel on its cores and reads every array back with its own shape and dtype."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

import isa
from compiler.backend.diannao import DiannaoKernel, codegen
from compiler.ir import Buffer, For, ForKind, PrimFunc, Store, Var, const, dtypes
from sim.diannao.config import DiannaoConfig
from sim.diannao.errors import LaunchError
from tandem.flows.diannao import run_kernel

CORES, PER_CORE = 3, 4


DIANNAO = isa.load_isa("diannao")


def triple_kernel(spec: isa.ISA = DIANNAO) -> DiannaoKernel:
    """B = A * 3 (int16), four elements per core on three cores."""
    a, b = Buffer("A", (CORES * PER_CORE,), dtypes.int16), Buffer("B", (CORES * PER_CORE,), dtypes.int16)
    tid, i = Var("tid"), Var("i")
    at = tid * PER_CORE + i
    body = For(tid, const(0), const(CORES), For(i, const(0), const(PER_CORE), Store(b, (at,), a[at] * 3)),
               ForKind.THREAD_BINDING, "core")
    return codegen(PrimFunc("triple", (a, b), body), spec)


def test_run_kernel_round_trips_every_array_with_its_shape_and_dtype() -> None:
    kernel = triple_kernel()
    a = np.arange(-6, 6, dtype=np.int16).reshape(3, 4)  # any shape with as many elements as the flat param
    b = np.full(12, 7, np.int16)
    result, (a_out, b_out) = run_kernel(kernel, [a, b])
    assert a_out.shape == (3, 4) and a_out.dtype == np.int16 and np.array_equal(a_out, a)
    assert b_out.shape == (12,) and np.array_equal(b_out, a.reshape(-1) * 3)
    assert np.array_equal(b, np.full(12, 7, np.int16))  # the caller's arrays are not written
    assert len(result.cores) == CORES
    assert len(result.executed) == len(kernel.program)
    assert sum(result.executed) == sum(result.instructions.values())
    assert result.trace == []


def test_run_kernel_records_a_trace_when_asked() -> None:
    result, _ = run_kernel(triple_kernel(), [np.zeros(12, np.int16), np.zeros(12, np.int16)], trace=True)
    assert {track for track, *_ in result.trace} == {f"core {c}" for c in range(CORES)}


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ([np.zeros(12, np.int16)], r"expected 2 arrays \(A, B\), but got 1"),
        (np.zeros((2, 12), np.int16), "expected a sequence of arrays for \\(A, B\\), but got ndarray"),
        ([np.zeros(12, np.int16), [0] * 12], "argument 1, 'B': expected a numpy array, but got list"),
        ([np.zeros(12, np.int32), np.zeros(12, np.int16)],
         "argument 0, 'A': expected dtype int16, but got int32"),
        ([np.zeros(12, np.int16), np.zeros(13, np.int16)],
         r"argument 1, 'B': expected shape \[12\] \(12 elements\), but got \[13\]"),
    ],
)
def test_run_kernel_checks_the_arrays_against_the_parameters(arrays, message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        run_kernel(triple_kernel(), arrays)


def test_a_kernel_compiled_for_another_card_runs_on_that_card_only() -> None:
    small = DiannaoConfig(name="small", summary="half the NMEM",
                          isa_params=MappingProxyType({"NMEM_BYTES": 262144}))
    kernel = triple_kernel(small.spec_for(isa.load_isa("diannao")))
    a = np.arange(12, dtype=np.int16)
    _, (_, b) = run_kernel(kernel, [a, np.zeros_like(a)], config=small)
    assert np.array_equal(b, a * 3)
    with pytest.raises(LaunchError, match="ISA parameters differ"):
        run_kernel(kernel, [a, np.zeros_like(a)])


def test_tuning_tries_distinct_cuts_each_with_the_tiles_the_estimate_ranks_first_for_it() -> None:
    """``tune=N``: the estimate's first N cuts (``ConvPlan.cut``), each with its best-estimated tile sizes,
    in the estimate's order: cuts differ more than one cut's tile sizes do."""
    from compiler.ops import diannao as dops
    from compiler.ops.nn import ConvShape
    from tandem.flows.diannao import tuning_plans
    from tandem.flows.targets import load_target

    target = load_target("diannao")
    plans = tuning_plans(ConvShape(28, 28, 64, 64, 3, 1, 1), "float32", 16, target, 4)
    every = dops.conv_plans(28, 28, 64, 64, 3, 1, 1, 4, 16, target.spec)
    assert len({p.cut for p in plans}) == len(plans) == 4
    assert [p.estimate for p in plans] == sorted(p.estimate for p in plans)
    for p in plans:
        assert p.estimate == min(q.estimate for q in every if q.cut == p.cut)
    assert plans[0].estimate == min(q.estimate for q in every)
