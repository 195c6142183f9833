"""The data-movement operators: they move, view, copy or pad values without computing new ones (Flatten,
Reshape, Transpose, Concat, Squeeze, Unsqueeze, Expand, Tile, Split, Slice, Pad, DepthToSpace,
SpaceToDepth), each with the operands and attributes every opset gives it (an attribute before opset 10 or
13 that later became an input, Split's num_outputs, Pad's axes and wrap mode)."""

from __future__ import annotations

import math

import numpy as np

from compiler.ops import reference
from tandem.network.operators.registry import Node, OperatorError, axis_of, operator


@operator("Flatten", attrs=("axis",))
def flatten(node: Node) -> np.ndarray:
    x = node.arg(0)
    axis = node.attr("axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise OperatorError(f"axis {axis} is out of range for a tensor of rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@operator("Reshape", attrs=("allowzero", "shape"))
def reshape(node: Node) -> np.ndarray:
    """The target shape: the ``shape`` attribute before opset 5, the second input after. A 0 copies the
    input's size there (with ``allowzero=1``: a size of zero); one -1 is inferred."""
    x = node.arg(0)
    given = list(node.attr("shape", ())) if node.opset < 5 else list(node.ints(1))
    target = given
    if not node.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(given)]
    try:
        return x.reshape(target)
    except ValueError:
        raise OperatorError(f"cannot reshape {list(x.shape)} to {given}") from None


@operator("Transpose", attrs=("perm",))
def transpose(node: Node) -> np.ndarray:
    x = node.arg(0)
    perm = node.attr("perm", list(range(x.ndim))[::-1])
    if sorted(perm) != list(range(x.ndim)):
        raise OperatorError(f"perm {list(perm)} is not a permutation of {x.ndim} axes")
    return np.transpose(x, perm)


@operator("Concat", attrs=("axis",),
          refuse=lambda node: "axis is required (opset 4 on)" if node.opset >= 4 and "axis" not in node.attrs
          else None)
def concat(node: Node) -> np.ndarray:
    """Along ``axis`` (before opset 4 optional, default 1)."""
    parts = [node.arg(k) for k in range(len(node.args)) if node.given(k)]
    return reference.concat(parts, axis=axis_of(node.attr("axis", 1), parts[0].ndim))


def listed(node: Node, name: str, position: int, since: int) -> tuple[int, ...] | None:
    """A list of integers that is attribute ``name`` before opset ``since`` and the optional input at
    ``position`` from it on; None where not given."""
    if node.opset < since:
        value = node.attr(name)
        return None if value is None else tuple(int(v) for v in value)
    return node.ints(position) if node.given(position) else None


def distinct_axes(axes: tuple[int, ...], rank: int, what: str = "axes") -> list[int]:
    """``axes`` (negative counting from the end) as indices into ``rank`` axes; a repeated one is an
    OperatorError."""
    out = [axis_of(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise OperatorError(f"{what} {list(axes)} name an axis twice")
    return out


@operator("Squeeze", attrs=("axes",))
def squeeze(node: Node) -> np.ndarray:
    """The axes of size 1 listed (``axes`` attribute before opset 13, input after) removed; all of them
    where none are listed. A listed axis of another size is an OperatorError."""
    x = node.arg(0)
    axes = listed(node, "axes", 1, since=13)
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    drop = distinct_axes(axes, x.ndim)
    for a in drop:
        if x.shape[a] != 1:
            raise OperatorError(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {list(x.shape)})")
    return x.reshape([d for i, d in enumerate(x.shape) if i not in drop])


@operator("Unsqueeze", attrs=("axes",))
def unsqueeze(node: Node) -> np.ndarray:
    """Axes of size 1 inserted at ``axes`` (attribute before opset 13, input after), which index the
    output's axes in any order."""
    x = node.arg(0)
    axes = listed(node, "axes", 1, since=13)
    if axes is None:
        raise OperatorError("axes is required")
    rank = x.ndim + len(axes)
    inserted = set(distinct_axes(axes, rank))
    sizes = iter(x.shape)
    return x.reshape([1 if i in inserted else next(sizes) for i in range(rank)])


@operator("Expand")
def expand(node: Node) -> np.ndarray:
    """The input broadcast with ``shape`` (both ways: a 1 in ``shape`` keeps the input's size)."""
    x, shape = node.arg(0), node.ints(1)
    try:
        return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, shape)))
    except ValueError:
        raise OperatorError(f"cannot expand {list(x.shape)} to {list(shape)}") from None


@operator("Tile")
def tile(node: Node) -> np.ndarray:
    """Opset 6 on: the input repeated ``repeats[i]`` times along each axis i. Before: ``tiles`` times along
    the one ``axis`` (both scalar inputs)."""
    x = node.arg(0)
    if node.opset < 6:
        repeats = [1] * x.ndim
        repeats[axis_of(int(node.ints(2)[0]), x.ndim)] = int(node.ints(1)[0])
    else:
        repeats = list(node.ints(1))
    if len(repeats) != x.ndim or min(repeats, default=0) < 0:
        raise OperatorError(f"repeats {repeats} must hold one count >= 0 per axis of {list(x.shape)}")
    return np.tile(x, repeats)


@operator("Split", attrs=("axis", "split", "num_outputs"), outputs=("outputs...",))
def split(node: Node) -> tuple[np.ndarray, ...]:
    """The input cut along ``axis`` into consecutive parts of the sizes ``_split_sizes`` gives."""
    x = node.arg(0)
    axis = axis_of(node.attr("axis", 0), x.ndim)
    sizes = _split_sizes(node, x.shape[axis])
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _split_sizes(node: Node, length: int) -> list[int]:
    """The parts' sizes: ``split`` (the attribute before opset 13, the second input from opset 13, either
    at opset 1); else, from opset 18, ``num_outputs`` parts of ceil(length / num_outputs), the last
    smaller; else, before opset 18, one equal part per output."""
    count = len(node.wanted)
    if node.given(1) or "split" in node.attrs:
        sizes = list(node.ints(1)) if node.given(1) else list(node.attr("split"))
    elif "num_outputs" in node.attrs:
        if node.attr("num_outputs") != count:
            raise OperatorError(f"num_outputs {node.attr('num_outputs')} differs from its {count} outputs")
        chunk = -(-length // count)
        sizes = [chunk] * (count - 1) + [length - chunk * (count - 1)]
    elif node.opset >= 18:
        raise OperatorError("neither split nor num_outputs is given (opset 18 asks for one)")
    elif length % count:
        raise OperatorError(f"an axis of size {length} does not split into {count} equal parts")
    else:
        sizes = [length // count] * count
    if len(sizes) != count or sum(sizes) != length or min(sizes) < 0:
        raise OperatorError(f"split {sizes} does not cut an axis of size {length} into {count} parts")
    return sizes


@operator("Slice", attrs=("starts", "ends", "axes"))
def slice_(node: Node) -> np.ndarray:
    """``starts``, ``ends`` and ``axes`` (attributes before opset 10, inputs with ``steps`` after): each
    listed axis sliced as ``_bounds`` clamps it; the others whole."""
    x = node.arg(0)
    if node.opset < 10:
        starts, ends = tuple(node.attr("starts", ())), tuple(node.attr("ends", ()))
        axes = tuple(node.attr("axes", range(len(starts))))
        steps = (1,) * len(starts)
    else:
        starts, ends = node.ints(1), node.ints(2)
        axes = node.ints(3) if node.given(3) else tuple(range(len(starts)))
        steps = node.ints(4) if node.given(4) else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OperatorError(f"starts {list(starts)}, ends {list(ends)}, axes {list(axes)} and steps "
                            f"{list(steps)} differ in length")
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(distinct_axes(axes, x.ndim), starts, ends, steps, strict=True):
        index[axis] = _bounds(x.shape[axis], start, end, step)
    return x[tuple(index)]


def _bounds(size: int, start: int, end: int, step: int) -> slice:
    """One axis's slice as ONNX defines it: a negative start or end counts from the end (``size`` added);
    then, stepping forward, both are clamped to [0, size]; stepping backward, start to [0, size - 1] and
    end to [-1, size - 1] (-1: through the first element)."""
    if step == 0:
        raise OperatorError("a step of 0")
    start, end = start + size if start < 0 else start, end + size if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), size), min(max(end, 0), size), step)
    start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step)


PAD_MODES = ("constant", "reflect", "edge")


def _refuse_pad(node: Node) -> str | None:
    """The modes of ``node``'s opset: constant, reflect and edge; wrap from opset 19."""
    modes = PAD_MODES + ("wrap",) if node.opset >= 19 else PAD_MODES
    mode = node.attr("mode", "constant")
    if mode not in modes:
        return f"mode {mode!r} is not one of {', '.join(modes)} (opset {node.opset})"
    return None


@operator("Pad", attrs=("mode", "pads", "paddings", "value"), refuse=_refuse_pad)
def pad(node: Node) -> np.ndarray:
    """Each axis padded (or cut, where negative) by its (begin, end) pads, as ``_pad_axis`` does."""
    x = node.arg(0)
    pads, axes, value = _pad_operands(node, x.ndim)
    mode = node.attr("mode", "constant")
    for i, axis in enumerate(axes):
        x = _pad_axis(x, axis, pads[i], pads[i + len(axes)], mode, value)
    return x


def _pad_operands(node: Node, rank: int) -> tuple[tuple[int, ...], list[int], float]:
    """``pads`` [x1_begin, x2_begin, ..., x1_end, ...] (attribute ``paddings`` at opset 1, ``pads`` before
    opset 11, the second input after), the axes they pad (the optional fourth input from opset 18, else
    all) and the constant value (attribute ``value`` before opset 11, the optional third input after;
    default 0)."""
    if node.opset < 11:
        pads = tuple(node.attr("paddings" if node.opset < 2 else "pads", ()))
        value = node.attr("value", 0.0)
    else:
        pads = node.ints(1)
        value = node.arg(2).reshape(()) if node.given(2) and node.raw(2).size else 0
    axes = distinct_axes(node.ints(3), rank) if node.given(3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise OperatorError(f"pads {list(pads)} must hold a begin and an end for each of {len(axes)} axes")
    return pads, axes, value


def _pad_axis(x: np.ndarray, axis: int, begin: int, end: int, mode: str, value) -> np.ndarray:
    """``x`` padded along ``axis``: output position i reads input position i - begin, which outside the
    input is ``value`` (constant) or the position ``_mirrored`` gives; a negative pad cuts."""
    size = x.shape[axis]
    if size + begin + end < 0:
        raise OperatorError(f"pads ({begin}, {end}) cut more than the {size} elements of axis {axis}")
    source = np.arange(-begin, size + end)
    outside = (source < 0) | (source >= size)
    if not outside.any():
        return np.take(x, source, axis=axis)
    if mode != "constant":
        if size == 0 or (mode == "reflect" and max(begin, end) >= size):
            raise OperatorError(f"{mode} padding by ({begin}, {end}) of an axis of size {size} (reflect pads "
                                f"less than the size)")
        return np.take(x, _mirrored(source, size, mode), axis=axis)
    out = np.full(x.shape[:axis] + source.shape + x.shape[axis + 1:], value, np.result_type(x, value))
    inside = np.flatnonzero(~outside)
    out[(slice(None),) * axis + (inside,)] = np.take(x, source[inside], axis=axis)
    return out


def _mirrored(source: np.ndarray, size: int, mode: str) -> np.ndarray:
    """Positions outside an axis of ``size`` mapped into it: to the nearest edge (edge), to their mirror
    image about the edge, the edge not repeated (reflect), or modulo the size (wrap)."""
    if mode == "edge":
        return np.clip(source, 0, size - 1)
    if mode == "wrap":
        return source % size
    return np.where(source < 0, -source, np.where(source >= size, 2 * size - 2 - source, source))


def _blocks(node: Node) -> tuple[np.ndarray, int]:
    """The [N, C, H, W] input and ``blocksize`` of DepthToSpace and SpaceToDepth."""
    x, block = node.arg(0), node.attr("blocksize")
    if x.ndim != 4 or not block or block < 1:
        raise OperatorError(f"blocksize {block} and an input of shape {list(x.shape)}: an [N, C, H, W] input "
                            f"and a blocksize >= 1")
    return x, block


@operator("DepthToSpace", attrs=("blocksize", "mode"),
          refuse=lambda node: f"mode {node.attr('mode')!r} is not DCR or CRD"
          if node.attr("mode", "DCR") not in ("DCR", "CRD") else None)
def depth_to_space(node: Node) -> np.ndarray:
    """[N, C, H, W] to [N, C/b², H·b, W·b]: the channels read as [b, b, C/b²] (DCR, the default) or
    [C/b², b, b] (CRD), the two b's moved into the rows and columns."""
    x, b = _blocks(node)
    n, c, h, w = x.shape
    if c % (b * b):
        raise OperatorError(f"{c} channels do not divide into blocks of {b}x{b}")
    if node.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@operator("SpaceToDepth", attrs=("blocksize", "mode"),
          refuse=lambda node: f"mode {node.attr('mode')!r} is not DCR or CRD"
          if node.attr("mode", "DCR") not in ("DCR", "CRD") else None)
def space_to_depth(node: Node) -> np.ndarray:
    """[N, C, H, W] to [N, C·b², H/b, W/b], DepthToSpace's inverse: each b×b block moved into the channels,
    ordered [b, b, C] (DCR, the default; opset 28 adds ``mode``) or [C, b, b] (CRD)."""
    x, b = _blocks(node)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise OperatorError(f"height {h} and width {w} do not divide into blocks of {b}x{b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)
