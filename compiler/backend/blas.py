"""numpy's BLAS threads held still while compiled kernels run: ``quiet_blas``. Its own module so that a run
that times nothing natively (a simulated target) does not import the LLVM backend to call it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits


@contextmanager
def quiet_blas() -> Iterator[None]:
    """numpy's BLAS (OpenBLAS) held to one thread while compiled kernels are run and timed between numpy
    work (a network's steps, each checked against numpy): OpenBLAS's worker threads spin for a while after
    each call, and on a 2-core machine a spinning one holds the core a kernel's second thread needs
    (measured on this project's 2-core guests: 2-thread kernels of a few microseconds timed at exactly 8.0
    ms per call after the numpy references of the steps before them)."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield
