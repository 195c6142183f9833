"""What a CPU peer is: the ``Peer`` interface (check the inputs, compile, return a callable that runs one
inference), ``time_callable`` that times such a callable, and ``NumpyPeer``, the peer every machine has."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np

from baselines.cpu_layers import ConvSpec, GemmSpec, im2col
from compiler.backend.llvm import median_seconds

Runner = Callable[[], np.ndarray]


def time_callable(fn: Callable[[], Any], *, repeats: int = 5, min_time: float = 0.05) -> float:
    """The median seconds of one call of ``fn`` (``compiler.backend.llvm.median_seconds``: one warm-up
    call, then ``repeats`` samples of as many calls as last ``min_time`` seconds)."""
    if repeats < 1:
        raise ValueError(f"argument 'repeats' to time_callable: expected a positive integer, "
                         f"but got {repeats}")
    if min_time < 0:
        raise ValueError(f"argument 'min_time' to time_callable: expected a non-negative number, "
                         f"but got {min_time}")
    return median_seconds(lambda calls: [fn() for _ in range(calls)], min_time, repeats)


def _check_array(where: str, arg: str, x: np.ndarray, dtype: type, shape: tuple[int, ...]) -> None:
    if x.dtype != dtype or x.shape != shape:
        raise ValueError(f"argument '{arg}' to {where}: expected {np.dtype(dtype)} {shape}, "
                         f"but got {x.dtype} {x.shape}")


def check_threads(where: str, threads: int) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"argument 'threads' to {where}: expected a positive integer, but got {threads!r}")


class Peer(abc.ABC):
    """An implementation of u8 x s8 -> s32 conv and GEMM to compare against.

    ``prepare_conv`` / ``prepare_gemm`` check the inputs against the spec, then do all compilation and
    weight re-layout; the callable they return runs one inference. ``exact`` peers return the int32 result,
    bit-exact with ``conv_reference`` / ``gemm_reference``; ``threads`` is the number of intra-op threads.
    """

    name: str
    exact: bool = True
    operands: tuple[type, type] = (np.uint8, np.int8)   # the data's and the weights' element types

    @abc.abstractmethod
    def available(self) -> str | None:
        """None when the peer can run here, else why not (e.g. "onnxruntime is not installed")."""

    def prepare_conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [1, k, oh, ow]."""
        where = f"{self.name}.prepare_conv"
        _check_array(where, "data", data, self.operands[0], (1, spec.c, spec.h, spec.w))
        _check_array(where, "kernel", kernel, self.operands[1], (spec.k, spec.c, spec.r, spec.r))
        check_threads(where, threads)
        return self._conv(spec, data, kernel, threads)

    def prepare_gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        """Compile ``spec`` for ``threads`` threads; the callable returns int32 [m, n]."""
        where = f"{self.name}.prepare_gemm"
        _check_array(where, "a", a, self.operands[0], (spec.m, spec.k))
        _check_array(where, "b", b, self.operands[1], (spec.n, spec.k))
        check_threads(where, threads)
        return self._gemm(spec, a, b, threads)

    @abc.abstractmethod
    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner: ...

    @abc.abstractmethod
    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner: ...

    def __repr__(self) -> str:
        return f"<peer {self.name}>"


class NumpyPeer(Peer):
    """im2col + int32 matmul in numpy; single-threaded whatever ``threads`` says (no integer BLAS)."""

    name = "numpy"

    def available(self) -> str | None:
        return None

    def _conv(self, spec: ConvSpec, data: np.ndarray, kernel: np.ndarray, threads: int) -> Runner:
        weights = kernel.astype(np.int32).reshape(spec.k, -1)
        shape = (1, spec.k, spec.oh, spec.ow)
        return lambda: (weights @ im2col(data, spec, np.int32)).reshape(shape)

    def _gemm(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, threads: int) -> Runner:
        bt = np.ascontiguousarray(b.astype(np.int32).T)
        return lambda: a.astype(np.int32) @ bt
