"""Kernels that do a CPU inference's host work (tandem/network/inference.py): the float input quantized,
an 8-bit operand moved to a kernel's multiplier type. Each replaces numpy passes on one thread by one
vectorized pass of a compiled operator of compiler/ops/network.py, and falls back to numpy for an array it
does not take.

- ``input_quantizer``: the float input straight into the inside of a stem conv's padded data, blocked;
- ``plain_quantizer``: the float input in the graph's layout, into an array it keeps;
- ``byte_mover``: ``compiler.ops.cpu.moved`` by a parallel kernel, bound to the arrays it last moved.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from compiler.backend.llvm import CpuKernel, build
from compiler.ir import nodes as ir
from compiler.ops import cpu as cpu_ops
from compiler.ops import network
from compiler.passes.place_output import place_output
from compiler.target import Target
from tandem.flows.flow import RunError
from tandem.flows.run import prepare
from tandem.network.quantized import LinearQuantization, QuantizedGraph


def _quantizer(rule: LinearQuantization, chw: tuple[int, int, int], group: int, offset: int, dtype: np.dtype,
               target: Target, threads: int) -> tuple[tuple[ir.PrimFunc, CpuKernel], np.ndarray] | None:
    """``compiler.ops.network.quantize_blocked`` compiled for ``rule`` on float32 ``chw`` ``[C, H, W]`` in
    blocks of ``group`` channels, moved by ``offset`` into ``dtype`` (the function and its kernel), with
    its scale operand; None where the operator refuses it."""
    (c, h, w), scale = chw, np.array([rule.scale], np.float32)
    try:
        look = prepare(network.user_op("quantize_blocked"), target,
                       {"C": c, "H": h, "W": w, "G": group, "ZP": rule.zero_point, "LO": rule.lo,
                        "HI": rule.hi, "OFFSET": offset, "TO": np.dtype(dtype).name, "threads": threads},
                       inputs=[np.zeros(chw, np.float32), scale])
    except RunError:   # (a type or range the operator does not take)
        return None
    return look.compiled, scale


def _takes(x: np.ndarray | None, shape: tuple[int, ...]) -> bool:
    """Whether a quantizer takes ``x``: a C-contiguous float32 array of ``shape``."""
    return x is not None and x.dtype == np.float32 and x.shape == shape and x.flags.c_contiguous


def input_quantizer(q: QuantizedGraph, name: str, shape: tuple[int, ...], packed: np.ndarray, pad: int,
                     offset: int, target: Target, threads: int) -> Callable[[np.ndarray | None], bool] | None:
    """A call that quantizes float input ``name`` (of ``shape``, ``[1, C, H, W]``) straight into the inside
    of a conv's padded data ``packed`` ``[1, C/G, H + 2 * pad, W + 2 * pad, G]``, moved by ``offset``
    (``_quantizer``'s kernel, written there by ``place_output``): one pass where ``quantize_input``, the
    move and ``to_blocks`` take several. It returns False (nothing done) for an array it does not take
    (``_takes``: the input is then quantized as before); None where there is no such kernel."""
    rule = q.input_quantization(name)
    made = _quantizer(rule, shape[1:], packed.shape[-1], offset, packed.dtype, target, threads) \
        if rule is not None and len(shape) == 4 and shape[0] == 1 and packed.ndim == 5 else None
    if made is None:
        return None
    (func, _), scale = made
    kernel = build(place_output(func, packed.shape[1:], (0, pad, pad, 0)), threads=threads)
    inside = packed.reshape(packed.shape[1:])

    def quantize(x: np.ndarray | None) -> bool:
        if not _takes(x, shape):
            return False
        kernel(x.reshape(shape[1:]), scale, inside)
        return True
    return quantize


def plain_quantizer(q: QuantizedGraph, name: str, x: np.ndarray, target: Target, threads: int
                     ) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """A call that quantizes float input ``name`` (``x``'s shape) in the graph's layout, into an array it
    keeps (``_quantizer``'s kernel in blocks of one channel: one pass where ``quantize_input`` takes
    several); it returns None for an array it does not take (``_takes``). None where there is no such
    kernel."""
    shape, rule = x.shape, q.input_quantization(name)
    chw = (1, math.prod(shape[:-1]), shape[-1]) if x.ndim else (1, 1, 1)
    made = _quantizer(rule, chw, 1, 0, np.dtype(rule.dtype), target, threads) if rule is not None else None
    if made is None:
        return None
    (func, call), scale = made
    out = np.empty((1, *chw[1:], 1), func.params[-1].dtype.numpy)
    shaped = out.reshape(shape)   # (one array each time: a reader's kernel stays bound to it)

    def quantize(x: np.ndarray) -> np.ndarray | None:
        if not _takes(x, shape):
            return None
        call(x.reshape(chw), scale, out)
        return shaped
    return quantize


def byte_mover(size: int, offset: int, src: np.dtype, dst: np.dtype, target: Target, threads: int
                ) -> Callable[[np.ndarray, np.ndarray], object]:
    """``compiler.ops.cpu.moved(x, offset, out)`` for 8-bit ``x`` of ``size`` elements of type ``src`` into
    ``out`` of ``dst``, by a kernel on ``threads`` (``compiler.ops.network.moved_bytes``: vectorized, and
    parallel, where numpy's one pass reads what another core's kernel wrote from that core's cache) where
    both arrays are contiguous; by numpy otherwise."""
    kernel = None
    if size % cpu_ops.LANES == 0 and np.dtype(src).itemsize == np.dtype(dst).itemsize == 1:
        try:
            kernel = prepare(network.user_op("moved_bytes"), target,
                             {"N": size, "OFFSET": offset, "T": np.dtype(src).name, "TO": np.dtype(dst).name,
                              "threads": threads}, inputs=[np.zeros(size, src)]).compiled[1]
        except RunError:   # (a type the operator does not take)
            kernel = None

    bound: list = [None, None, None]   # the arrays of the last call and the kernel bound to them

    def move(x: np.ndarray, out: np.ndarray) -> object:
        if bound[0] is x and bound[1] is out:   # (a step's input is mostly the same kept array each time)
            return bound[2]()
        if kernel is not None and x.dtype == src and x.flags.c_contiguous and out.flags.c_contiguous and \
                x.size == out.size == size:
            bound[:] = x, out, kernel.bind(x.reshape(-1), out.reshape(-1))
            return bound[2]()
        return cpu_ops.moved(x.reshape(out.shape), offset, out)
    return move
