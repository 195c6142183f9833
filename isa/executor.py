"""The generic executor: runs typed semantics on numpy arrays, vectorized over all index variables.

Every value is a *labelled array*: a numpy array whose axes are the index variables it depends on, in
declaration order (size-1 axes broadcast). Loads gather with index arrays (or slice, when a subscript is a
bare index), reductions sum over axes (``np.einsum`` for a sum of a product, so a convolution never
materializes its full iteration space), ``select`` masks the loads (and divisions by zero) of the side it does
not choose, and so do ``and``/``or`` for their right side. A statement whose intermediate values would
exceed ``ELEMENT_BUDGET`` elements is evaluated in chunks of its outermost spatial index; all chunks are
computed before any is written, so a statement always reads the tensors as they were before it. A ``+=`` adds
every contribution, also where computed subscripts hit one element several times.

Integer arithmetic wraps at the dtype's width, float arithmetic rounds to the dtype (bf16 through float32 with
a round-to-nearest-even after each operation), as isa/README.md specifies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from isa.dtypes import DTYPES, convert, round_bf16
from isa.errors import ExecError
from isa.lang.scalar import ScalarEnv, evaluate
from isa.lang.tree import Access, Assign, Binary, Call, Cast, Expr, Name, Num, Reduce, Unary, to_text
from isa.lang.typecheck import Semantics

ELEMENT_BUDGET = 1 << 23
#: the most elements one index of an instruction's semantics may count (a spec's constant extent is checked
#: against it when loaded, one that reads fields when an instance runs)
MAX_INDEX_EXTENT = 1 << 32


@dataclass(frozen=True, slots=True)
class _LV:
    """A labelled array: ``arr`` has one axis per label, labels in declaration order."""

    arr: np.ndarray
    labels: tuple[str, ...]


def _np_dtype(name: str) -> np.dtype:
    if name == "int":
        return np.dtype(np.int64)
    if name == "float":
        return np.dtype(np.float64)
    return DTYPES[name].numpy


def _to(lv: _LV, name: str) -> _LV:
    """``lv`` converted to dtype ``name`` (a dtype or the weak "int"/"float")."""
    if name in ("int", "float"):
        want = _np_dtype(name)
        return lv if lv.arr.dtype == want else _LV(lv.arr.astype(want), lv.labels)
    dt = DTYPES[name]
    if lv.arr.dtype == dt.numpy and dt.name != "bf16":
        return lv
    return _LV(convert(lv.arr, dt), lv.labels)


class _Run:
    def __init__(self, sem: Semantics, tensors: dict[str, np.ndarray], env: ScalarEnv) -> None:
        self.sem = sem
        self.tensors = tensors
        self.env = env
        self.order = {iv.name: k for k, iv in enumerate(sem.indices)}
        self.extent = {}
        for iv in sem.indices:
            n = evaluate(iv.extent, env)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_INDEX_EXTENT:
                raise ExecError(f"index '{iv.name}' has extent {to_text(iv.extent)} = {n!r}; "
                                f"expected an integer from 0 to {MAX_INDEX_EXTENT:,} (2**32)")
            self.extent[iv.name] = n
        self.ranges: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------ labelled-array plumbing
    def union(self, *label_sets: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set().union(*label_sets), key=self.order.__getitem__))

    def expand(self, lv: _LV, labels: tuple[str, ...]) -> np.ndarray:
        """``lv.arr`` reshaped to have one (possibly size-1) axis per label of ``labels``."""
        if lv.labels == labels:
            return lv.arr
        shape = []
        it = iter(zip(lv.labels, lv.arr.shape, strict=True))
        cur = next(it, None)
        for lab in labels:
            if cur is not None and cur[0] == lab:
                shape.append(cur[1])
                cur = next(it, None)
            else:
                shape.append(1)
        return lv.arr.reshape(shape)

    def full(self, lv: _LV, labels: tuple[str, ...]) -> np.ndarray:
        shape = tuple(self.ranges[lab][1] - self.ranges[lab][0] for lab in labels)
        return np.broadcast_to(self.expand(lv, labels), shape)

    def where(self, labels: tuple[str, ...], flat: int) -> str:
        """Index values at flat position ``flat`` of the full array over ``labels`` (for error messages)."""
        shape = tuple(self.ranges[lab][1] - self.ranges[lab][0] for lab in labels)
        pos = np.unravel_index(flat, shape) if shape else ()
        return ", ".join(f"{lab}={self.ranges[lab][0] + int(p)}" for lab, p in zip(labels, pos, strict=True))

    # ------------------------------------------------------------------ expressions
    def value_of(self, e: Expr, mask: _LV | None) -> _LV:
        if isinstance(e, Num):
            value = _int64(e.value) if isinstance(e.value, int) else e.value
            return _LV(np.asarray(value, dtype=_np_dtype(e.dtype)), ())
        if isinstance(e, Name):
            if e.kind == "index":
                lo, hi = self.ranges[e.id]
                return _LV(np.arange(lo, hi, dtype=np.int64), (e.id,))
            return _LV(np.asarray(_int64(self.scalar(e)), dtype=np.int64), ())
        if isinstance(e, Access):
            return self.load(e, mask)
        if isinstance(e, Cast):
            return _to(self.value_of(e.value, mask), e.dtype)
        if isinstance(e, Unary):
            x = self.value_of(e.operand, mask)
            if e.op == "not":
                return _LV(~(x.arr != 0), x.labels)
            x = _to(x, e.dtype)
            out = np.negative(x.arr) if e.op == "-" else np.invert(x.arr)
            return self.rounded(_LV(out, x.labels), e.dtype)
        if isinstance(e, Binary):
            return self.binary(e, mask)
        if isinstance(e, Reduce):
            return self.reduce(e, mask)
        if isinstance(e, Call):
            return self.call(e, mask)
        raise ExecError(f"cannot execute {type(e).__name__}")

    def scalar(self, e: Expr) -> int:
        return evaluate(e, self.env)

    def rounded(self, lv: _LV, dtype_name: str) -> _LV:
        return _LV(round_bf16(lv.arr), lv.labels) if dtype_name == "bf16" else lv

    def binary(self, e: Binary, mask: _LV | None) -> _LV:
        a = self.value_of(e.lhs, mask)
        if e.op in ("and", "or"):  # like select: the right side's loads only where the left does not decide
            undecided = _LV(a.arr != 0 if e.op == "and" else a.arr == 0, a.labels)
            b = self.value_of(e.rhs, self.and_mask(mask, undecided))
            labels = self.union(a.labels, b.labels)
            x, y = self.expand(a, labels) != 0, self.expand(b, labels) != 0
            return _LV(x & y if e.op == "and" else x | y, labels)
        b = self.value_of(e.rhs, mask)
        a, b = _to(a, e.arg_dtype), _to(b, e.arg_dtype)
        labels = self.union(a.labels, b.labels)
        x, y = self.expand(a, labels), self.expand(b, labels)
        op = e.op
        if op in ("//", "%", "/") and e.arg_dtype not in ("float",) and _np_dtype(e.arg_dtype).kind in "iu":
            zero = _LV(y == 0, labels)
            if mask is not None:  # a lane that select() does not choose cannot fail
                zero = self.and_mask(mask, zero)
            if np.any(zero.arr):
                raise ExecError(f"'{to_text(e)}': division by zero")
        bits = 64 if e.arg_dtype == "int" else DTYPES.get(e.arg_dtype, DTYPES["i64"]).bits
        if op in ("<<", ">>"):
            out = _shift(x, y, op, bits)
        else:
            out = _BINARY[op](x, y)
        if e.dtype == "bool":
            return _LV(out, labels)
        return self.rounded(_LV(out.astype(_np_dtype(e.dtype), copy=False), labels), e.dtype)

    def call(self, e: Call, mask: _LV | None) -> _LV:
        f = e.func
        if f == "select":
            c = self.value_of(e.args[0], mask)
            cond = _LV(c.arr != 0, c.labels)
            a = _to(self.value_of(e.args[1], self.and_mask(mask, cond)), e.dtype)
            b = _to(self.value_of(e.args[2], self.and_mask(mask, _LV(~cond.arr, cond.labels))), e.dtype)
            labels = self.union(cond.labels, a.labels, b.labels)
            out = np.where(self.expand(cond, labels), self.expand(a, labels), self.expand(b, labels))
            return _LV(out, labels)
        if f in ("min", "max"):
            vals = [_to(self.value_of(x, mask), e.dtype) for x in e.args]
            labels = self.union(*(v.labels for v in vals))
            fn = np.minimum if f == "min" else np.maximum
            out = self.expand(vals[0], labels)
            for v in vals[1:]:
                out = fn(out, self.expand(v, labels))
            return _LV(np.asarray(out), labels)
        if f in ("abs", "exp", "tanh", "sqrt", "log"):
            x = _to(self.value_of(e.args[0], mask), e.dtype)
            fn = {"abs": np.abs, "exp": np.exp, "tanh": np.tanh, "sqrt": np.sqrt, "log": np.log}[f]
            return self.rounded(_LV(np.asarray(fn(x.arr)), x.labels), e.dtype)
        # ceil_div, bytes, log2, capacity: scalar functions of fields and parameters
        return _LV(np.asarray(_int64(self.scalar(e)), dtype=np.int64), ())

    def and_mask(self, mask: _LV | None, cond: _LV) -> _LV:
        if mask is None:
            return cond
        labels = self.union(mask.labels, cond.labels)
        return _LV(self.expand(mask, labels) & self.expand(cond, labels), labels)

    def reduce(self, e: Reduce, mask: _LV | None) -> _LV:
        for ax in e.axes:
            self.ranges[ax] = (0, self.extent[ax])
        try:
            body = e.body
            if _is_einsum(e):
                return self.einsum(e, body, mask)
            v = _to(self.value_of(body, mask), e.dtype)
            labels = self.union(v.labels, e.axes)
            arr = self.full(v, labels) if any(ax not in v.labels for ax in e.axes) else self.expand(v, labels)
            axes = tuple(labels.index(ax) for ax in e.axes)
            if e.op == "sum":
                out = np.sum(arr, axis=axes, dtype=arr.dtype)
            elif any(arr.shape[a] == 0 for a in axes) and all(
                    n for k, n in enumerate(arr.shape) if k not in axes):
                raise ExecError(f"'{to_text(e)}': {e.op}() over an empty range "
                                f"({', '.join(f'{ax} < {self.extent[ax]}' for ax in e.axes)})")
            else:
                out = (np.max if e.op == "max" else np.min)(arr, axis=axes)
            keep = tuple(lab for lab in labels if lab not in e.axes)
            return self.rounded(_LV(np.asarray(out), keep), e.dtype)
        finally:
            for ax in e.axes:
                del self.ranges[ax]

    def einsum(self, e: Reduce, body: Binary, mask: _LV | None) -> _LV:
        a = _to(self.value_of(body.lhs, mask), e.dtype)
        b = _to(self.value_of(body.rhs, mask), e.dtype)
        letters = {lab: chr(ord("a") + k) for k, lab in enumerate(self.order)}
        out_labels = self.union(*(tuple(lab for lab in v.labels if lab not in e.axes) for v in (a, b)))
        missing = [ax for ax in e.axes if ax not in a.labels and ax not in b.labels]
        spec = (f"{''.join(letters[lab] for lab in a.labels)},{''.join(letters[lab] for lab in b.labels)}"
                f"->{''.join(letters[lab] for lab in out_labels)}")
        # size-1 (broadcast) axes of a label shared by both operands are fine for einsum only if equal: expand
        a_arr, b_arr = self._einsum_operands(a, b)
        out = np.einsum(spec, a_arr, b_arr, dtype=a_arr.dtype, optimize=False)
        for ax in missing:  # a sum over an index the body does not use multiplies by the extent
            out = out * np.asarray(self.extent[ax], dtype=out.dtype)
        return _LV(np.asarray(out, dtype=_np_dtype(e.dtype)), out_labels)

    def _einsum_operands(self, a: _LV, b: _LV) -> tuple[np.ndarray, np.ndarray]:
        def sized(v: _LV) -> np.ndarray:
            shape = tuple(self.ranges[lab][1] - self.ranges[lab][0] for lab in v.labels)
            return v.arr if v.arr.shape == shape else np.broadcast_to(v.arr, shape)
        return sized(a), sized(b)

    def load(self, e: Access, mask: _LV | None) -> _LV:
        arr = self.tensors[e.tensor]
        if arr.ndim != len(e.indices):
            raise ExecError(f"tensor '{e.tensor}' has {arr.ndim} dimensions, but is indexed with "
                            f"{len(e.indices)}")
        fast = self.slice_view(e, arr, mask)
        if fast is not None:
            return fast
        idx, labels = self.indices(e, arr, mask)
        if arr.size == 0:  # indices() found no element that select() reads: any value will do
            return _LV(np.zeros(self.full_shape(labels), arr.dtype), labels)
        return _LV(arr[idx], labels)

    def slice_view(self, e: Access, arr: np.ndarray, mask: _LV | None) -> _LV | None:
        """A view when every subscript is a distinct bare index whose range lies inside its dimension."""
        names = [i.id if isinstance(i, Name) and i.kind == "index" else None for i in e.indices]
        if None in names or len(set(names)) != len(names):
            return None
        slices = []
        for name, n in zip(names, arr.shape, strict=True):
            lo, hi = self.ranges[name]
            if hi > n:
                return None  # let the general path report (or mask) the out-of-range part
            slices.append(slice(lo, hi))
        view = arr[tuple(slices)]
        labels = self.union(tuple(names))
        return _LV(view.transpose([names.index(lab) for lab in labels]), labels)

    def indices(self, e: Access, arr: np.ndarray, mask: _LV | None) -> tuple[tuple[np.ndarray, ...], tuple]:
        """Index arrays for ``e``, bounds-checked where ``mask`` holds (and clipped where it does not)."""
        subs = [_to(self.value_of(i, mask), "int") for i in e.indices]
        labels = self.union(*(s.labels for s in subs), mask.labels if mask is not None else ())
        shape = self.full_shape(labels)
        held = None if mask is None else np.broadcast_to(self.expand(mask, labels), shape)
        out = []
        for dim, (s, n) in enumerate(zip(subs, arr.shape, strict=True)):
            x = self.expand(s, labels)
            bad = (x < 0) | (x >= n)
            if held is not None:
                bad = bad & held
            if np.any(bad):
                flat = int(np.argmax(np.broadcast_to(bad, shape).ravel()))
                val = int(np.broadcast_to(x, shape).ravel()[flat])
                raise self.out_of_range(e, dim, val, n, self.where(labels, flat))
            out.append(np.clip(x, 0, max(n - 1, 0)) if held is not None else x)
        return tuple(out), labels

    def full_shape(self, labels: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(self.ranges[lab][1] - self.ranges[lab][0] for lab in labels)

    def out_of_range(self, e: Access, dim: int, val: int, n: int, where: str) -> ExecError:
        at = f" (at {where})" if where else ""
        return ExecError(f"'{to_text(e)}': subscript {dim} of '{e.tensor}' is {val}, outside [0, {n}){at}")

    # ------------------------------------------------------------------ statements
    def statement(self, s: Assign) -> None:
        target = self.tensors[s.target.tensor]
        spatial = [iv.name for iv in self.sem.indices if iv.kind == "spatial" and iv.name in _names(s.target)]
        for name in spatial:
            self.ranges[name] = (0, self.extent[name])
        chunk_var, chunks = self.chunking(s, spatial)
        results = []
        for lo, hi in chunks:
            if chunk_var is not None:
                self.ranges[chunk_var] = (lo, hi)
            results.append(self.compute(s, target))
        for idx, value, accumulate in results:
            if accumulate:
                self.accumulate(target, idx, value, s.target.dtype)
            else:
                target[idx] = value
        for name in spatial:
            del self.ranges[name]

    def compute(self, s: Assign, target: np.ndarray) -> tuple[tuple, np.ndarray, bool]:
        """(where to write, what to write, whether to add it) for statement ``s`` over the current ranges.

        A ``+=`` through computed subscripts may hit one element several times (``d[i // 2] += a[i]``); its
        values are added when written (``accumulate``) so that every one counts."""
        dt = s.target.dtype
        value = _to(self.value_of(s.value, None), dt)
        view = self.slice_view(s.target, target, None)
        if view is not None:
            names = [i.id for i in s.target.indices]
            idx = tuple(slice(*self.ranges[n]) for n in names)
            val = self.full(value, view.labels).transpose([view.labels.index(n) for n in names])
        else:
            idx, labels = self.indices(s.target, target, None)
            shape = self.full_shape(labels)
            idx = tuple(np.broadcast_to(i, shape) for i in idx)
            val = self.full(value, labels)
            if s.op == "+=":
                return idx, np.array(val, copy=True), True
        if s.op == "+=":
            total = np.add(np.asarray(target[idx], dtype=_np_dtype(dt)), val)
            val = self.rounded(_LV(total.astype(_np_dtype(dt), copy=False), ()), dt).arr
        return idx, np.array(val, dtype=target.dtype, copy=True), False

    def accumulate(self, target: np.ndarray, idx: tuple[np.ndarray, ...], val: np.ndarray, dt: str) -> None:
        """``target[idx] += val`` element by element in iteration order, rounding after each addition."""
        flat_idx = tuple(i.ravel() for i in idx)
        flat_val = val.ravel()
        if flat_val.size == 0:
            return
        lin = np.ravel_multi_index(flat_idx, target.shape)
        order = np.argsort(lin, kind="stable")
        first = np.ones(lin.size, dtype=bool)
        first[1:] = lin[order][1:] != lin[order][:-1]
        start = np.maximum.accumulate(np.where(first, np.arange(lin.size), 0))
        rank = np.empty(lin.size, dtype=np.intp)
        rank[order] = np.arange(lin.size) - start  # 0 for the first hit of an element, 1 for the second...
        for r in range(int(rank.max()) + 1):  # each round adds at most once to every element
            sel = rank == r
            at = tuple(i[sel] for i in flat_idx)
            total = np.add(target[at].astype(_np_dtype(dt)), flat_val[sel]).astype(_np_dtype(dt), copy=False)
            target[at] = self.rounded(_LV(total, ()), dt).arr

    def chunking(self, s: Assign, spatial: list[str]):
        """(index, [(lo, hi), ...]): how to split ``s`` so no intermediate exceeds ELEMENT_BUDGET elements."""
        peak = _peak_elements(s.value, self.extent)
        if peak <= ELEMENT_BUDGET or not spatial:
            return None, [(0, 0)]
        var = next((v for v in spatial if self.extent[v] > 1), None)
        if var is None:
            return None, [(0, 0)]
        n = self.extent[var]
        pieces = min(n, math.ceil(peak / ELEMENT_BUDGET))
        step = math.ceil(n / pieces)
        return var, [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def _names(e: Expr) -> set[str]:
    from isa.lang.tree import walk
    return {n.id for n in walk(e) if isinstance(n, Name)}


def _is_einsum(e: Reduce) -> bool:
    """Whether ``e`` runs as one ``np.einsum``: a sum of a product, in a dtype whose products einsum rounds
    like the generic path (for f16 it keeps them in float32, and bf16 has no numpy type)."""
    return (e.op == "sum" and isinstance(e.body, Binary) and e.body.op == "*"
            and e.dtype not in ("f16", "bf16"))


def _peak_elements(e: Expr, extent: Mapping[str, int]) -> int:
    """Largest number of elements any intermediate of ``e`` materializes (einsum products excluded)."""
    from isa.lang.tree import children

    peak = 1

    def labels(node: Expr, under_einsum: bool) -> set[str]:
        nonlocal peak
        if isinstance(node, Name) and node.kind == "index":
            own = {node.id}
        elif isinstance(node, Reduce):
            inner = labels(node.body, _is_einsum(node))
            own = inner - set(node.axes)
        else:
            own = set()
            for c in children(node):
                own |= labels(c, False)
        if not under_einsum:
            peak = max(peak, math.prod(extent.get(x, 1) for x in own))
        return own

    labels(e, False)
    return peak


def _int64(value: int) -> int:
    """``value`` wrapped to int64 (weak integer arithmetic is 64-bit; 0xFFFF_FFFF_FFFF_FFFF is -1 there)."""
    return (int(value) + (1 << 63)) % (1 << 64) - (1 << 63)


def _shift(x: np.ndarray, y: np.ndarray, op: str, bits: int) -> np.ndarray:
    """Shifts with amounts clamped to [0, bits]: ``>>`` by bits or more sign-fills, ``<<`` by bits gives 0."""
    amount = np.clip(y, 0, bits).astype(x.dtype if x.dtype.kind in "iu" else np.int64)
    if op == ">>":
        return np.right_shift(x, np.minimum(amount, bits - 1)) if x.dtype.kind == "i" else \
            np.where(amount >= bits, 0, np.right_shift(x, np.minimum(amount, bits - 1))).astype(x.dtype)
    return np.where(amount >= bits, 0, np.left_shift(x, np.minimum(amount, bits - 1))).astype(x.dtype)


_BINARY = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide,
    "%": np.mod, "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor,
    "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal,
}


def run_semantics(sem: Semantics, tensors: Mapping[str, np.ndarray], env: ScalarEnv) -> dict[str, np.ndarray]:
    """Execute ``sem`` and return the new value of every tensor it writes.

    ``tensors`` maps every tensor the semantics reads or writes to an array of its storage dtype; they are not
    modified (written tensors are copied first). Scalars (fields, parameters) come from ``env``.
    """
    arrays = dict(tensors)
    for name in sem.writes:
        arrays[name] = np.array(tensors[name], copy=True)
    run = _Run(sem, arrays, env)
    with np.errstate(all="ignore"):
        for s in sem.statements:
            run.statement(s)
    return {name: arrays[name] for name in sem.writes}
