"""The native thread pool (compiler/backend/llvm_pool.py) that runs parallel segments: every slice runs once,
on whichever thread takes it, however the pool is reached — more threads than cores, workers asleep, two
callers at once, a fault in a worker's slice, a child process forked from a parent that used it."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest

from compiler.backend.llvm import build, thread_pool
from compiler.backend.llvm_pool import SPINS
from compiler.errors import CpuRuntimeError
from compiler.ir import Buffer, For, ForKind, PrimFunc, Store, Var, const, dtypes

ROWS = 96


def _count(rows: int = ROWS) -> PrimFunc:
    """Adds 1 to every element of each row of ``O``, the rows a parallel loop (each call counted once)."""
    o = Buffer("O", (rows, 16), dtypes.int32)
    i, j = Var("i"), Var("j")
    body = For(j, const(0), const(16), Store(o, (i, j), o[i, j] + 1), ForKind.SERIAL)
    return PrimFunc("count", (o,), For(i, const(0), const(rows), body, ForKind.PARALLEL))


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_every_slice_runs_once_on_any_number_of_threads(threads: int) -> None:
    """Threads beyond the machine's cores still share the rows: each row is counted once per call."""
    kernel = build(_count(), threads=threads)
    out = np.zeros((ROWS, 16), np.int32)
    for _ in range(50):
        kernel(out)
    assert thread_pool().workers >= threads - 1
    np.testing.assert_array_equal(out, 50)


def test_workers_that_fell_asleep_are_woken() -> None:
    """Between calls far apart the workers stop spinning and sleep; the next fork wakes them."""
    kernel = build(_count(), threads=2)
    out = np.zeros((ROWS, 16), np.int32)
    kernel(out)
    time.sleep(0.05 + SPINS * 200e-9)   # longer than the spin budget at any pause latency up to 200 ns
    assert thread_pool().sleeping() >= 1
    caller = threading.Thread(target=lambda: [kernel(out) for _ in range(2)])
    caller.start()
    caller.join(timeout=30)
    assert not caller.is_alive(), "a fork waited for a worker that was never woken"
    np.testing.assert_array_equal(out, 3)


def test_two_callers_at_once_each_get_every_slice() -> None:
    """Two Python threads calling kernels concurrently (ctypes releases the GIL): one holds the pool, the
    other runs its slices itself; neither loses or repeats a row."""
    kernels = [build(_count(), threads=2) for _ in range(2)]
    outs = [np.zeros((ROWS, 16), np.int32) for _ in range(2)]

    def calls(k: int) -> None:
        for _ in range(2000):
            kernels[k](outs[k])

    callers = [threading.Thread(target=calls, args=(k,)) for k in range(2)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    for out in outs:
        np.testing.assert_array_equal(out, 2000)


def test_a_fault_in_a_workers_slice_is_reported() -> None:
    """An out-of-bounds index only the last rows reach (a worker's slice on 2 threads) fails the call."""
    a, o = Buffer("A", (ROWS,), dtypes.int32), Buffer("O", (ROWS,), dtypes.int32)
    i = Var("i")
    kernel = build(PrimFunc("gather", (a, o), For(i, const(0), const(ROWS), Store(o, (i,), a[a[i]]),
                                                  ForKind.PARALLEL)), threads=2)
    data, out = np.arange(ROWS, dtype=np.int32), np.zeros(ROWS, np.int32)
    kernel(data, out)
    np.testing.assert_array_equal(out, data)
    data[-1] = ROWS
    with pytest.raises(CpuRuntimeError, match=r"out-of-bounds access in 'A\[A\[i\]\]'"):
        kernel(data, out)
    data[-1] = 0
    kernel(data, out)   # the pool is whole after the fault
    assert out[-1] == 0


def _child(queue: multiprocessing.Queue) -> None:
    out = np.zeros((ROWS, 16), np.int32)
    kernel = build(_count(), threads=2)
    for _ in range(10):
        kernel(out)
    queue.put((int(out.min()), int(out.max()), thread_pool().workers))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this system")
def test_a_forked_child_starts_its_own_workers() -> None:
    """A child forked after the parent's workers started has none of them (fork copies one thread): its
    pool starts afresh instead of waiting forever for workers that do not exist."""
    build(_count(), threads=2)(np.zeros((ROWS, 16), np.int32))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, f"the child hung or failed (exit code {child.exitcode})"
    assert queue.get(timeout=5) == (10, 10, 1)
