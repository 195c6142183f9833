"""Kernels that do a CPU inference's host work (tandem/network/inference.py): the float input quantized,
an 8-bit operand moved to a kernel's multiplier type. Each replaces numpy passes on one thread by one
vectorized pass of a compiled operator of compiler/ops/network.py, and falls back to numpy for an array it
does not take.

- ``input_quantizer``: the float input straight into the inside of a stem conv's padded data, blocked;
- ``plain_quantizer``: the float input in the graph's layout, into an array it keeps;
- ``byte_mover``: ``compiler.ops.cpu.moved`` by a parallel kernel, bound to the arrays it last moved;
- ``flat_lookup``: a table of results looked up on an 8-bit tensor, a pair of bytes at a time;
- ``view_mover``, ``column_packer``: attention's operands, strided views of kept arrays, moved as every
  head's GEMM data, packed as their weights and summed into their biases (``by_layout``).
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

    call = rebinding(kernel) if kernel is not None else None

    def move(x: np.ndarray, out: np.ndarray) -> object:
        if call is not None and x.dtype == src and x.flags.c_contiguous and out.flags.c_contiguous and \
                x.size == out.size == size:
            return call((x, out), lambda: (x.reshape(-1), out.reshape(-1)))
        return cpu_ops.moved(x.reshape(out.shape), offset, out)
    return move


def rebinding(kernel: CpuKernel) -> Callable[[tuple[np.ndarray, ...], Callable[[], tuple]], None]:
    """A call of ``kernel`` bound to the arrays it last ran on: ``call(given, operands)`` runs it on
    ``operands()`` (the kernel's arrays made from ``given``), binding anew only where ``given`` are not the
    very arrays of the last call (a step's inputs are mostly the same kept arrays each inference)."""
    bound: list = [(), None]   # the last call's given arrays and the kernel bound to their operands

    def call(given: tuple[np.ndarray, ...], operands: Callable[[], tuple]) -> None:
        last, run = bound
        if len(last) != len(given) or any(a is not b for a, b in zip(last, given, strict=True)):
            run = kernel.bind(*operands())
            bound[:] = given, run
        run()
    return call


#: an array as a view of a flat one (``flat_view``): that array, the view's first element, its strides
FlatView = tuple[np.ndarray, int, tuple[int, ...]]


def flat_view(v: np.ndarray) -> FlatView | None:
    """``v`` as a view of a flat array: that array (of ``v``'s type, over all of the contiguous array that
    ``v`` views), the index of ``v``'s first element in it and ``v``'s strides in elements; None where
    ``v`` views no contiguous array or not in whole elements."""
    root, size = _root(v), v.itemsize
    start = v.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if not root.flags.c_contiguous or root.nbytes % size or start % size or any(s % size for s in v.strides):
        return None
    return root.reshape(-1).view(np.uint8).view(v.dtype), start // size, tuple(s // size for s in v.strides)


def _root(v: np.ndarray) -> np.ndarray:
    """The array that owns the memory ``v`` views (``v`` itself where it owns its own)."""
    while isinstance(v.base, np.ndarray):
        v = v.base
    return v


#: the layouts ``by_layout`` compiles for, at most: the inference's check on the integer graph's arrays when
#: it is prepared, then each inference's view of a kept array (one layout, its memory kept)
LAYOUTS = 4


def by_layout(shape: tuple[int, ...], make: Callable[[FlatView], Callable[[], None] | None]
              ) -> Callable[[np.ndarray], bool]:
    """A call that runs, on ``v`` (of ``shape``, 8-bit: a strided view of an array a kernel keeps), the
    kernels that ``make`` compiles and binds for ``v``'s layout and memory (``flat_view``), the first time
    they come (the view of the kept array that each inference reads again), for up to ``LAYOUTS`` of them.
    It returns False (nothing done) for an array of another shape, not a view in whole elements, of a
    layout ``make`` refuses (None), or past those ``LAYOUTS``."""
    made: dict[tuple, Callable[[], None] | None] = {}

    def run(v: np.ndarray) -> bool:
        if v.shape != shape or v.itemsize != 1:
            return False
        key = (id(_root(v)), v.ctypes.data, v.strides)   # (a bound call keeps its root alive: no id reused)
        call = made.get(key, run)
        if call is run and len(made) < LAYOUTS:
            view = flat_view(v)
            call = made[key] = make(view) if view is not None else None
        if call is None or call is run:
            return False
        call()
        return True
    return run


def _layout(view: FlatView, names: str) -> dict[str, object]:
    """The parameters of a ``compiler.ops.network`` operator that reads ``view``: the flat array's size
    and type, the view's first element and its strides (named ``names``, outermost first)."""
    flat, start, strides = view
    return {"SIZE": flat.size, "OFF": start, **dict(zip(names.split(), strides, strict=True)),
            "T": flat.dtype.name}


def view_mover(out: np.ndarray, offset: int, target: Target, threads: int) -> Callable[[np.ndarray], bool]:
    """A call that moves ``a`` ``[H, M, K]`` (attention's queries as the MatMul holds them: a transposed
    view) by ``offset`` into contiguous 8-bit ``out`` of its shape (``compiler.ops.network.moved_view``,
    one pass; ``by_layout``)."""
    heads, m, k = out.shape

    def make(view: FlatView) -> Callable[[], None] | None:
        try:
            mover = prepare(network.user_op("moved_view"), target,
                            {"H": heads, "M": m, "K": k, "OFFSET": offset, "TO": out.dtype.name,
                             "threads": threads, **_layout(view, "SH SM SK")}, inputs=[view[0]])
        except RunError:   # (a type or a layout the operator does not take)
            return None
        return mover.compiled[1].bind(view[0], out)
    return by_layout(out.shape, make)


def column_packer(shape: tuple[int, int, int], weights: np.ndarray, biases: np.ndarray, base: np.ndarray,
                  moved: int, target: Target, threads: int) -> Callable[[np.ndarray], bool]:
    """A call that packs ``b`` ``[H, K, N]`` (attention's keys or values as the MatMul holds them: a strided
    view of an array a kernel keeps) into ``weights`` ``[H, N/Y, K/X, Y, X]``
    (``compiler.ops.network.pack_columns``) and writes each head's bias, ``base + moved * sum(k, b)``,
    into ``biases[:, :N]`` (``column_sums``; none where ``moved`` is 0: the biases are ``base`` then, which
    the caller writes once, and where K is not contiguous the caller sums, as numpy does that faster);
    ``by_layout``."""
    heads, k, n = shape
    wide = base.astype(np.int32)
    whole = biases if biases.shape[1] == n else np.empty((heads, n), np.int32)

    def make(view: FlatView) -> Callable[[], None] | None:
        layout = {"H": heads, "K": k, "N": n, "threads": threads, **_layout(view, "SH SK SN")}
        try:
            pack = prepare(network.user_op("pack_columns"), target,
                           {**layout, "Y": weights.shape[-2], "X": weights.shape[-1]}, inputs=[view[0]])
            sums = prepare(network.user_op("column_sums"), target, {**layout, "MOVED": moved},
                           inputs=[view[0], wide]) if moved and layout["SK"] == 1 else None
        except RunError:   # (a type or a layout the operators do not take)
            return None
        if pack.compiled[0].params[-1].shape != weights.shape:
            return None
        packed = pack.compiled[1].bind(view[0], weights.view(view[0].dtype))
        summed = sums.compiled[1].bind(view[0], wide, whole) if sums is not None else None

        def call() -> None:
            packed()
            if summed is not None:
                summed()
                if whole is not biases:
                    biases[:, :n] = whole
        return call
    return by_layout(shape, make)


def flat_lookup(x: np.ndarray, table: np.ndarray, shape: tuple[int, ...], target: Target, threads: int
                ) -> Callable[[np.ndarray], np.ndarray] | None:
    """A call that looks each value of 8-bit ``x`` (its type's least first) up in ``table`` and returns the
    results, of ``shape``, in an array it keeps: ``compiler.ops.network.lookup`` (compiled here, on
    ``threads``: its int32 table's lookups vectorize as dword gathers) on the input as a flat array, its
    bytes a pair at a time (``network.pair_table``: half the gathers) where its size is even and the
    results are 8-bit; None where ``x`` is not 8-bit or the operator refuses it."""
    if x.dtype not in (np.int8, np.uint8) or x.size == 0:
        return None
    paired = x.size % 2 == 0 and table.dtype.itemsize == 1
    wide = network.pair_table(table, x.dtype.name) if paired else table.astype(np.int32)
    types = ("int16", "int16") if paired else (x.dtype.name, table.dtype.name)
    try:
        look = prepare(network.user_op("lookup"), target,
                       {"N": x.size // (1 + paired), "T": types[0], "TO": types[1], "threads": threads},
                       inputs=[x.reshape(-1).view(types[0]), wide])
    except RunError:   # (a type the operator does not take)
        return None
    func, kernel = look.compiled
    out = np.empty(func.params[-1].shape, func.params[-1].dtype.numpy)
    call, result = rebinding(kernel), out.view(table.dtype).reshape(shape)

    def run(x: np.ndarray) -> np.ndarray:
        call((x,), lambda: (np.ascontiguousarray(x).reshape(-1).view(types[0]), wide, out))
        return result
    return run
