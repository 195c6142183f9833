"""Splitting a cluster fill among the cluster's cores (the DianNao backend's ``cluster_fill`` and
``cluster_prefetch``).

A cluster-shared SMEM tile is filled once for the cluster (``share_smem``). One core filling it leaves the
others waiting and queues the whole fill on that core's DMA unit; split by rows, each core fills a part: its
share of the copy's rows, and the zero fill of exactly the bytes between its rows and the next core's (so
each core zeroes what it then copies into, in order, and no two cores write one byte).

    parts = split_fill(body, cores=4, align=64)   # one list of statements per core, or None
    sent = written_rows(parts[k])                   # what part k writes (a card fill sends it on)

Shapes split: a copy alone (rows; one row: its bytes), copies whose rows follow each other (rows), or a
zero fill of the whole range followed by such copies into it (preprocess's padding: ``vzero`` + ``memcpy``;
the rows of the tile before come first where ``reuse_rows`` took them from it) whose row boundaries fall on
``align`` bytes (the zero fill's alignment); with fewer rows than cores, such a fill splits by ``align``-ed
runs of its zeroed bytes instead (each core zeroes its run and copies the pieces of rows in it). Anything
else is None, and one core fills the tile.
"""

from __future__ import annotations

import dataclasses

from compiler.ir import nodes as ir
from compiler.ir.functor import marked_insn, with_marks

_COPY_FIELDS = {"len", "count", "dst_stride", "src_stride"}


def split_fill(body: ir.Stmt, cores: int, align: int) -> list[list[ir.Stmt]] | None:
    """The statements of ``body`` split among ``cores`` cores (module docstring), or None."""
    stmts = list(body.stmts) if isinstance(body, ir.Seq) else [body]
    insns = [marked_insn(x) for x in stmts]
    if cores < 2 or any(i is None for i in insns):
        return None
    if len(insns) == 1 and _is_copy(insns[0]):
        return _split_copy(stmts[0], insns[0], cores)
    if len(insns) >= 2 and _is_zero(insns[0]) and all(_is_copy(i) for i in insns[1:]):
        return _split_zero_and_copies(stmts, insns, cores, align)
    if len(insns) >= 2 and all(_is_copy(i) for i in insns):
        return _split_rows(stmts, insns, cores)
    return None


@dataclasses.dataclass(frozen=True)
class Written:
    """Rows a part of a fill writes in its buffer: ``count`` rows of ``length`` bytes, ``stride`` apart, from
    ``region`` (a card fill sends them on as they are)."""

    region: ir.Region
    length: int
    count: int
    stride: int


def written_rows(part: list[ir.Stmt]) -> list[Written] | None:
    """What one part of ``split_fill`` writes into SMEM: its zero fill's bytes (its copies land inside them),
    or its copies' rows; None for anything else."""
    insns = [marked_insn(x) for x in part]
    if any(i is None for i in insns) or any(not _in_smem(i) for i in insns):
        return None
    if insns and _is_zero(insns[0]) and all(_is_copy(i) for i in insns[1:]):
        n = _constant(insns[0], "n")
        return None if n is None else [Written(insns[0].regions[0], n, 1, n)]
    out = []
    for insn in insns:
        f = _fields(insn) if _is_copy(insn) else None
        if f is None:
            return None
        out.append(Written(next(r for r in insn.regions if r.operand == "dst"), f["len"], f["count"],
                           f["dst_stride"]))
    return out


def _in_smem(insn: ir.TensorInsn) -> bool:
    dst = next((r for r in insn.regions if r.operand == "dst"), None)
    return dst is not None and dst.buffer.scope == "smem"


def _split_rows(stmts: list[ir.Stmt], copies: list[ir.TensorInsn], cores: int) -> list[list[ir.Stmt]] | None:
    """Copies of rows that follow each other in one buffer (a tile's rows, the first from the tile before:
    ``reuse_rows``), split by rows."""
    fs, dsts = [_fields(c) for c in copies], [_byte_region(c, "dst") for c in copies]
    if None in fs or None in dsts or any(d[0] is not dsts[0][0] for d in dsts) or not _consecutive(fs, dsts):
        return None
    count = sum(x["count"] for x in fs)
    return [_rows_of(stmts, copies, fs, lo, hi) for lo, hi in _bounds(count, cores)]


def _consecutive(fs: list[dict[str, int]], dsts: list[tuple[ir.Buffer, int]]) -> bool:
    """Whether each copy's rows come right after the one before's (the same row length and stride)."""
    stride = fs[0]["dst_stride"]
    return all(fs[k]["dst_stride"] == stride and fs[k]["len"] == fs[0]["len"] and
               dsts[k][1] == dsts[k - 1][1] + fs[k - 1]["count"] * stride for k in range(1, len(fs)))


def _rows_of(stmts: list[ir.Stmt], copies: list[ir.TensorInsn], fs: list[dict[str, int]], lo: int,
             hi: int) -> list[ir.Stmt]:
    """Rows [lo, hi) of copies whose rows follow each other, as parts of those copies."""
    part, at = [], 0
    for stmt, copy, f in zip(stmts, copies, fs, strict=True):
        a, b = max(lo, at) - at, min(hi, at + f["count"]) - at
        if b > a:
            part.append(_copy_rows(stmt, copy, f, a, b))
        at += f["count"]
    return part


def _split_copy(stmt: ir.Stmt, copy: ir.TensorInsn, cores: int) -> list[list[ir.Stmt]] | None:
    f = _fields(copy)
    if f is None:
        return None
    if f["count"] > 1:
        bounds = _bounds(f["count"], cores)
        return [[_copy_rows(stmt, copy, f, lo, hi)] if hi > lo else [] for lo, hi in bounds]
    step = -(-f["len"] // cores)
    parts = []
    for c in range(cores):
        lo, hi = c * step, min(f["len"], (c + 1) * step)
        parts.append([with_marks(stmt, _shifted(copy, {"len": hi - lo}, lo, lo))] if hi > lo else [])
    return parts


def _split_zero_and_copies(stmts: list[ir.Stmt], insns: list[ir.TensorInsn], cores: int,
                           align: int) -> list[list[ir.Stmt]] | None:
    """A zero fill and copies whose rows follow each other in the zeroed range (the rows of one tile, some
    from the tile before it: ``reuse_rows``), split by rows."""
    zero, copies = insns[0], insns[1:]
    fs, z = [_fields(c) for c in copies], _byte_region(zero, "dst")
    dsts = [_byte_region(c, "dst") for c in copies]
    n = _constant(zero, "n")
    if None in fs or z is None or None in dsts or n is None or any(d[0] is not z[0] for d in dsts):
        return None
    f, z0, d0 = fs[0], z[1], dsts[0][1]
    stride = f["dst_stride"]
    if not _consecutive(fs, dsts):
        return None
    count = sum(x["count"] for x in fs)
    if count < cores:   # fewer rows than cores: each core takes bytes of the zeroed range instead
        return _split_bytes(stmts, insns, fs, (z, n), cores, align)
    first, offset = divmod(d0 - z0, stride) if stride else (0, 0)   # the tile row of the first copied row
    if offset + f["len"] > stride or d0 < z0 or \
            d0 + (count - 1) * stride + f["len"] > z0 + n:
        return None   # rows that would not each lie in their core's part of the zero fill
    bounds = _bounds(count, cores)
    cuts = [z0] + [min(z0 + n, z0 + (first + lo) * stride) for lo, _ in bounds[1:]] + [z0 + n]
    if any(c % align or not z0 <= c <= z0 + n for c in cuts):
        return None
    parts = []
    for k, (lo, hi) in enumerate(bounds):
        part = []
        if cuts[k + 1] > cuts[k]:
            zeroed = _shifted(zero, {"n": cuts[k + 1] - cuts[k]}, cuts[k] - z0, None)
            part.append(with_marks(stmts[0], zeroed))
        parts.append(part + _rows_of(stmts[1:], copies, fs, lo, hi))
    return parts


def _split_bytes(stmts: list[ir.Stmt], insns: list[ir.TensorInsn], fs: list[dict[str, int]],
                 zeroed: tuple[tuple[ir.Buffer, int], int], cores: int, align: int) -> list[list[ir.Stmt]]:
    """A zero fill and copies into the zeroed range, split into ``cores`` runs of ``align``-aligned bytes of
    that range: each core zeroes its run and copies the pieces of rows that fall in it (one row each)."""
    ((_, z0), n), zero = zeroed, insns[0]
    step = -(-n // cores // align) * align or align
    parts = []
    for lo in range(z0, z0 + cores * step, step):
        hi = min(lo + step, z0 + n)
        if hi <= lo:
            parts.append([])
            continue
        part = [with_marks(stmts[0], _shifted(zero, {"n": hi - lo}, lo - z0, None))]
        for stmt, copy, f in zip(stmts[1:], insns[1:], fs, strict=True):
            start = _byte_region(copy, "dst")[1]
            for r in range(f["count"]):
                row = start + r * f["dst_stride"]
                a, b = max(lo, row), min(hi, row + f["len"])
                if b > a:
                    piece = _shifted(copy, {"count": 1, "len": b - a}, a - start,
                                     r * f["src_stride"] + a - row)
                    part.append(with_marks(stmt, piece))
        parts.append(part)
    return parts


def _bounds(count: int, cores: int) -> list[tuple[int, int]]:
    """Rows [lo, hi) of each core: ceil(count / cores) each, the last ones fewer or none."""
    step = -(-count // cores)
    return [(min(count, c * step), min(count, (c + 1) * step)) for c in range(cores)]


def _copy_rows(stmt: ir.Stmt, copy: ir.TensorInsn, f: dict[str, int], lo: int, hi: int) -> ir.Stmt:
    return with_marks(stmt, _shifted(copy, {"count": hi - lo}, lo * f["dst_stride"], lo * f["src_stride"]))


def _shifted(insn: ir.TensorInsn, fields: dict[str, int], dst_bytes: int, src_bytes: int | None
             ) -> ir.TensorInsn:
    """``insn`` with ``fields`` set and its dst (and src) region moved by that many bytes."""
    new_fields = tuple(ir.InsnField(x.name, ir.const(fields[x.name])) if x.name in fields else x
                       for x in insn.fields)
    regions = []
    for r in insn.regions:
        moved = dst_bytes if r.operand == "dst" else src_bytes if r.operand == "src" else None
        if moved:
            size = r.buffer.dtype.bits // 8
            offset = ir.const(r.offset.value + moved // size) if isinstance(r.offset, ir.IntImm) else \
                r.offset + ir.const(moved // size)
            regions.append(dataclasses.replace(r, offset=offset))
        else:
            regions.append(r)
    return dataclasses.replace(insn, fields=new_fields, regions=tuple(regions))


def _fields(copy: ir.TensorInsn) -> dict[str, int] | None:
    """A copy's row fields, when constant and its strides are whole elements of both buffers."""
    f = {x.name: x.value.value for x in copy.fields if isinstance(x.value, ir.IntImm)}
    if not _COPY_FIELDS <= f.keys():
        return None
    sizes = {r.operand: r.buffer.dtype.bits // 8 for r in copy.regions}
    if f["dst_stride"] % sizes["dst"] or f["src_stride"] % sizes["src"] or f["len"] % sizes["dst"] or \
            f["len"] % sizes["src"]:
        return None
    return f


def _byte_region(insn: ir.TensorInsn, operand: str) -> tuple[ir.Buffer, int] | None:
    r = next((r for r in insn.regions if r.operand == operand), None)
    if r is None or not isinstance(r.offset, ir.IntImm):
        return None
    return r.buffer, r.offset.value * (r.buffer.dtype.bits // 8)


def _constant(insn: ir.TensorInsn, name: str) -> int | None:
    value = next((x.value for x in insn.fields if x.name == name), None)
    return value.value if isinstance(value, ir.IntImm) else None


def _is_copy(insn: ir.TensorInsn) -> bool:
    """A strided copy: the memcpy family's fields and a dst and src operand."""
    return {r.operand for r in insn.regions} == {"dst", "src"} and \
        _COPY_FIELDS <= {x.name for x in insn.fields}


def _is_zero(insn: ir.TensorInsn) -> bool:
    """A zero fill: one operand, ``dst[i] = 0`` for n bytes."""
    instr = insn.isa.instruction(insn.name)
    return [r.operand for r in insn.regions] == ["dst"] and instr.semantics.replace(" ", "") == "dst[i]=0" \
        and any(x.name == "n" for x in insn.fields)
