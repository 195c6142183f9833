"""double_buffer: a marked tile loop loads its next tile and stores its last one while it computes (TVM's
InjectDoubleBuffer, with asynchronous copies: Cambricon's ``__memcpy_async`` and ``__sync_io``, anchors §3.2).

A schedule marks a loop over tiles ``Attr("pragma_double_buffer", 1, ...)`` (``Stage.pragma``); after loop
partitioning the mark holds the pieces of that loop, each a loop or a single tile. Every tile has the same
shape of body: allocations of tile buffers in the loop body, then

- the **fill**: statements that write only tile buffers and read none (copies in, zero fills);
- the **compute**: what follows;
- the **drain**: the copies at the end that read a tile buffer and write outside the tile.

A cluster-shared SMEM tile (``share_smem``) is a tile too: its buffer, its cluster fill, the rest as its
compute. When that compute is itself a marked loop of NMEM tiles, the two levels become one pipeline over
every NMEM tile (``_two_level``).

The pass gives each buffer the fill writes or the drain reads two copies (``B.0``, ``B.1``: tile ``i`` uses
copy ``i % 2``) and runs the tiles, all the pieces' tiles in order, as a software pipeline:

    fill(0)                                         # synchronous: nothing to overlap yet
    for each tile i:
        fill(i + 1) into the other copies           # its copies issued asynchronously
        compute(i)
        wait                                        # fill(i + 1) and drain(i - 1) done
        drain(i), asynchronously
    wait

so that a core's copies run on its DMA unit while its compute units work. A loop piece is unrolled by two
(the copy a tile uses must be known where the instruction's addresses are immediates): pairs of tiles in a
loop, then the one or two tiles left with their own next tile.

Which instructions: each copy becomes its asynchronous twin in the spec (the instruction whose operands,
fields and semantics are the copy's and whose timing is ``async``); the wait is the spec's instruction of
group ``wait`` (``can_double_buffer`` says whether a spec has both).

Why it computes the same: fill(i + 1) moves before compute(i) and drain(i - 1); it writes the other copies,
which neither touches, and reads no buffer they write (checked: the fill reads no tile buffer and no buffer
the compute or the drain writes; the drain writes no buffer the compute reads). The interpreter runs
asynchronous copies at once and waits as nothing, so the function before and after the pass computes the
same; the DianNao simulator checks every access against the outstanding copies (``HazardError``).

Precondition: tensorized flat IR. Postcondition: the same function with each marked loop pipelined and its
mark removed; a marked loop of another shape (or a spec without an asynchronous copy and a wait) runs as it
is, and the function's ``attrs`` say why: ("double_buffer", reason).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import isa
from compiler import arith
from compiler.errors import LoweringError
from compiler.interp.args import stored_buffers
from compiler.interp.tensor_insn import read_operands, written_operands
from compiler.ir import nodes as ir
from compiler.ir.functor import IRMutator, allocations, loads_in, marked_insn, post_order_visit, substitute
from compiler.lower import SHARED_SCOPES
from compiler.passes.reuse_rows import reuse_rows, skip_zero_fills
from compiler.passes.share_smem import CLUSTER_FILL, CLUSTER_SHARED

MARK = "pragma_double_buffer"
#: the next cluster-shared tile's fill, without barriers (the backend splits it among the cluster's cores)
CLUSTER_PREFETCH = "cluster_prefetch"
#: the cluster's cores wait (the body: the wait instruction), then meet at a cluster barrier
CLUSTER_SYNC = "cluster_sync"


def can_double_buffer(spec: isa.ISA, copy: str) -> bool:
    """Whether ``spec`` has an asynchronous twin of instruction ``copy`` and a wait instruction."""
    return async_twin(spec, spec.instruction(copy)) is not None and wait_instruction(spec) is not None


def async_twin(spec: isa.ISA, instr: isa.Instruction) -> isa.Instruction | None:
    """The asynchronous instruction of ``spec`` with ``instr``'s operands, fields and semantics, if any."""
    if instr.timing.asynchronous:
        return instr
    fields = _fields(instr)
    for other in spec.instructions.values():
        if other.timing.asynchronous and other.semantics == instr.semantics and \
                other.operands == instr.operands and other.types == instr.types and \
                _fields(other) == fields:
            return other
    return None


def _fields(instr: isa.Instruction) -> list[tuple[str, str]]:
    """The fields an instance of ``instr`` sets, by name and kind (the fixed ones left out)."""
    return [(f.name, f.kind) for f in instr.fields if f.name not in instr.fixed]


def wait_instruction(spec: isa.ISA) -> isa.Instruction | None:
    """The instruction of group ``wait`` of ``spec`` (no operands, no fields to set), if it has one."""
    for instr in spec.instructions.values():
        if instr.group == "wait" and not instr.operands:
            return instr
    return None


def wait_statement(spec: isa.ISA) -> ir.TensorInsn | None:
    """The statement that waits for a core's asynchronous copies (``wait_instruction``), if ``spec`` has
    one."""
    instr = wait_instruction(spec)
    return None if instr is None else ir.TensorInsn(spec, instr.name, (), ())


def double_buffer(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Pipeline every loop marked ``pragma_double_buffer`` (see the module docstring). A marked loop whose
    tiles have another shape runs as it is, its mark removed, and the reason is kept in the function's
    ``attrs`` as ("double_buffer", reason)."""
    mutator = _DoubleBuffer(spec)
    body = mutator.mutate(func.body)
    if body is func.body:
        return func
    notes = tuple(("double_buffer", reason) for reason in dict.fromkeys(mutator.skipped))
    return ir.PrimFunc(func.name, func.params, body, func.attrs + notes)


class _DoubleBuffer(IRMutator):
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec
        self.skipped: list[str] = []   # why a marked loop runs as it is

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key != MARK:
            return self.generic_mutate(s)
        if _count(s.body) >= 2 and _private_smem(s.body):
            self.skipped.append("tiles in SMEM of their own core (not shared by the cluster) stay single")
            return self.mutate(s.body)
        try:
            if _count(s.body) >= 2:
                tiles = _tiles(s.body)
                if tiles[0].shared:
                    two_level = _two_level(self.spec, tiles)
                    if two_level is not None:
                        return two_level
            body = self.mutate(s.body)   # a marked loop inside this one first
            if _count(body) < 2:
                return body   # one tile: nothing to overlap
            return _Pipeline(self.spec, _tiles(body)).build()
        except LoweringError as e:   # a shape this pass does not pipeline: the loop runs as it is
            self.skipped.append(str(e))
            return self.mutate(s.body)


# ------------------------------------------------------------------------------------------------ tiles
class _Tile:
    """One piece of the marked loop: ``count`` tiles of a body, the piece's loop variable running from
    ``lo`` (None: a single tile). A body is allocations around fill, compute and drain (tensor instructions),
    or a cluster-shared tile (``share_smem``): its one SMEM buffer, the cluster fill, and anything after it
    as the compute (no drain)."""

    def __init__(self, stmt: ir.Stmt, var: ir.Var | None, lo: int, count: int) -> None:
        self.var, self.lo, self.count = var, lo, count
        self.where = f"loop {var.name}" if var is not None else "a tile after loop partitioning"
        self.shared = isinstance(stmt, ir.Attr) and stmt.key == CLUSTER_SHARED
        if self.shared:
            self.buffers = {stmt.body.buffer.name: stmt.body.buffer}
            stmts = _stmts(stmt.body.body)
            if not (isinstance(stmts[0], ir.Attr) and stmts[0].key == CLUSTER_FILL):
                raise LoweringError(f"double_buffer: {self.where}: a cluster-shared tile must start with its "
                                    "cluster fill")
            self.fill, self.compute, self.drain = _stmts(stmts[0].body), stmts[1:], []
        else:
            buffers, inner = allocations(stmt)
            self.buffers = {b.name: b for b in buffers}
            self.fill, self.compute, self.drain = self._split(_stmts(inner))
        compute_reads = {b for x in self.compute for b in buffers_read(x)}
        if clash := compute_reads & {b for x in self.drain for b in buffers_written(x)}:
            raise LoweringError(f"double_buffer: {self.where}: the drain writes {sorted(clash)[0]}, which "
                                "the compute reads")
        fill_reads = {b for x in self.fill for b in buffers_read(x)}
        if clash := fill_reads & {b for x in (*self.compute, *self.drain) for b in buffers_written(x)}:
            raise LoweringError(f"double_buffer: {self.where}: the tile writes {sorted(clash)[0]}, which the "
                                "next tile's fill reads")

    def at(self, k: int, stmts: list[ir.Stmt]) -> list[ir.Stmt]:
        """``stmts`` of the piece's ``k``-th tile (``k`` an int or an expression of the unrolled loop)."""
        if self.var is None:
            return stmts
        value = ir.const(self.lo + k) if isinstance(k, int) else k + self.lo if self.lo else k
        return [substituted(x, {self.var: value}) for x in stmts]

    def _split(self, stmts: list[ir.Stmt]) -> tuple[list[ir.Stmt], list[ir.Stmt], list[ir.Stmt]]:
        """(fill, compute, drain): the leading tensor instructions that write only tile buffers and read
        none, the trailing copies out of tile buffers, and the rest."""
        local = set(self.buffers)
        insns = [marked_insn(x) for x in stmts]
        fill = 0
        while fill < len(stmts) and insns[fill] is not None and _writes(insns[fill]) <= local and \
                not _reads(insns[fill]) & local:
            fill += 1
        drain = len(stmts)
        while drain > fill and insns[drain - 1] is not None and _is_drain(insns[drain - 1], local):
            drain -= 1
        if not any(_copy_like(i) for i in insns[:fill]):
            raise LoweringError(f"double_buffer: {self.where}: a tile's body must start with its fill "
                                "(copies into tile buffers), then compute and drain (copies out of tile "
                                "buffers), but it starts with " + str(stmts[0]).splitlines()[0].strip())
        return stmts[:fill], stmts[fill:drain], stmts[drain:]


def _stmts(stmt: ir.Stmt) -> list[ir.Stmt]:
    return list(stmt.stmts) if isinstance(stmt, ir.Seq) else [stmt]


def buffers_written(stmt: ir.Stmt) -> set[str]:
    """The buffers ``stmt`` stores to or writes through a tensor instruction, by name."""
    return {b.name for b in stored_buffers(stmt)}


def buffers_read(stmt: ir.Stmt) -> set[str]:
    """The buffers ``stmt`` loads from or reads through a tensor instruction, by name."""
    found = {load.buffer.name for load in loads_in(stmt)}
    post_order_visit(stmt, lambda x: found.update(_reads(x)) if isinstance(x, ir.TensorInsn) else None)
    return found


def _writes(insn: ir.TensorInsn) -> set[str]:
    written = written_operands(insn)
    return {r.buffer.name for r in insn.regions if r.operand in written}


def _reads(insn: ir.TensorInsn) -> set[str]:
    read = read_operands(insn)
    return {r.buffer.name for r in insn.regions if r.operand in read}


def _copy_like(insn: ir.TensorInsn) -> bool:
    """A copy the spec can issue asynchronously: one buffer read, one written, an asynchronous twin."""
    return len(_reads(insn)) == 1 and len(_writes(insn)) == 1 and \
        async_twin(insn.isa, insn.isa.instruction(insn.name)) is not None


def _is_drain(insn: ir.TensorInsn, local: set[str]) -> bool:
    return _copy_like(insn) and _reads(insn) <= local and not _writes(insn) & local


def _private_smem(body: ir.Stmt) -> bool:
    """Whether the tiles of a marked loop allocate SMEM buffers of their own core (not cluster-shared):
    addressed through a register, they cannot be doubled behind immediate addresses."""
    found = []
    post_order_visit(body, lambda x: found.append(x) if isinstance(x, ir.Allocate) and
                     x.buffer.scope in SHARED_SCOPES else None)
    shared = []
    post_order_visit(body, lambda x: shared.append(x.value) if isinstance(x, ir.Attr) and
                     x.key == CLUSTER_SHARED else None)
    return any(a.buffer.name not in shared for a in found)


def _count(body: ir.Stmt) -> int:
    """How many tiles the pieces of a marked loop run (a loop with unknown bounds counts as many)."""
    pieces = body.stmts if isinstance(body, ir.Seq) else (body,)
    return sum(x.extent.value if isinstance(x, ir.For) and isinstance(x.extent, ir.IntImm) else
               2 if isinstance(x, ir.For) else 1 for x in pieces)


def _tiles(body: ir.Stmt) -> list[_Tile]:
    """The pieces of a marked loop, in order: loops over tiles (constant bounds) and single tiles."""
    out = []
    for stmt in body.stmts if isinstance(body, ir.Seq) else (body,):
        if isinstance(stmt, ir.For):
            if not (isinstance(stmt.min, ir.IntImm) and isinstance(stmt.extent, ir.IntImm)) or \
                    stmt.kind != ir.ForKind.SERIAL or stmt.thread:
                raise LoweringError(f"double_buffer: loop {stmt.var.name}: a double-buffered loop must be "
                                    "serial, with constant bounds")
            if stmt.extent.value > 0:
                out.append(_Tile(stmt.body, stmt.var, stmt.min.value, stmt.extent.value))
        else:
            out.append(_Tile(stmt, None, 0, 1))
    return out


# --------------------------------------------------------------------------------------------- pipeline
class _Pipeline:
    """The software pipeline of a marked loop's tiles (module docstring)."""

    def __init__(self, spec: isa.ISA, tiles: list[_Tile]) -> None:
        self.spec, self.tiles = spec, tiles
        wait = wait_statement(spec)
        if wait is None:
            raise LoweringError(f"double_buffer: {spec.name} has no instruction of group 'wait'")
        self.wait = wait
        if len({t.shared for t in tiles}) > 1:
            raise LoweringError(f"double_buffer: {tiles[0].where}: some pieces of the loop share their tile "
                                "with the cluster and some do not")
        self.shared = tiles[0].shared
        names = {}
        for t in tiles:   # the buffers the fill writes and the drain reads; a shared tile's SMEM buffer
            doubled = {b for x in t.fill for b in buffers_written(x)} | \
                {b for x in t.drain for b in buffers_read(x)}
            for name in (n for n in t.buffers if n in doubled):   # in the order of the allocations
                size = max(t.buffers[name].size, names[name].size if name in names else 0)
                names[name] = ir.Buffer(name, (size,), t.buffers[name].dtype, t.buffers[name].scope)
        self.copies = {name: tuple(ir.Buffer(f"{name}.{k}", b.shape, b.dtype, b.scope) for k in (0, 1))
                       for name, b in names.items()}

    def build(self, head: Sequence[ir.Stmt] = (), after_first: Sequence[ir.Stmt] = (),
              hooks: Mapping[tuple[int, int], tuple[list, list]] | None = None) -> ir.Stmt:
        """The pipeline; ``head`` before the first tile's fill, ``after_first`` right after it, and
        ``hooks[(piece, k)]`` = (statements before tile ``k`` of piece ``piece``: between the wait and the
        drain of the tile before it, statements right after the step's prefetch is issued). The loops leave
        a hooked tile and the one before it straight."""
        hooks = dict(hooks or {})
        first = self._in(self.tiles[0], 0, self.tiles[0].fill, 0, asynchronous=False)
        steps: list[ir.Stmt] = [*head, *([self._cluster(CLUSTER_FILL, 0, first)] if self.shared else first),
                                *after_first]
        parity, drain_at = 0, None   # where the drain of the last straight step starts in ``steps``
        for n, tile in enumerate(self.tiles):
            after = self.tiles[n + 1] if n + 1 < len(self.tiles) else None
            straight = 2 if any(key[0] == n for key in hooks) else 1
            pairs = max(0, (tile.count - straight) // 2) if tile.var is not None else 0
            if pairs:
                j = ir.Var(f"{tile.var.name}.pair", tile.var.dtype)
                body = [*self._step(tile, j * 2, parity, (tile, j * 2 + 1)),
                        *self._step(tile, j * 2 + 1, 1 - parity, (tile, j * 2 + 2))]
                steps.append(ir.For(j, ir.const(0), ir.const(pairs), ir.seq(*body)))
                drain_at = None
            for k in range(2 * pairs, tile.count):
                following = (tile, k + 1) if k + 1 < tile.count else (after, 0) if after is not None else None
                before, issued = hooks.pop((n, k), ([], []))
                if drain_at is None:
                    steps += before
                else:
                    steps[drain_at:drain_at] = before
                step = self._step(tile, k, (parity + k) % 2, following, issued)
                drain_at = len(steps) + len(step) - len(tile.drain)
                steps += step
            parity = (parity + tile.count) % 2
        if hooks:
            raise LoweringError(f"double_buffer: {self.tiles[0].where}: hooks at tiles it does not run: "
                                f"{sorted(hooks)}")
        steps.append(self.wait)
        stmt = ir.seq(*steps)
        for name in reversed(list(self.copies)):
            for buf in reversed(self.copies[name]):
                stmt = ir.Allocate(buf, stmt)
                if self.shared:
                    stmt = ir.Attr(CLUSTER_SHARED, buf.name, stmt)
        others = {b.name: b for t in self.tiles for b in t.buffers.values() if b.name not in self.copies}
        for buf in others.values():   # tile buffers of the compute alone: one copy, as before
            stmt = ir.Allocate(buf, stmt)
        return stmt

    def _step(self, tile: _Tile, k, parity: int, following, issued: Sequence[ir.Stmt] = ()) -> list[ir.Stmt]:
        """Tile ``k`` of ``tile`` on copies ``parity``: the next tile's fill issued (then ``issued``),
        compute, wait, drain. A cluster-shared tile's fill (``CLUSTER_PREFETCH``) is issued after the
        compute's first synchronous copy (a core's DMA unit runs its copies in order: the one the compute
        needs first goes first); the cluster meets at a barrier after the wait."""
        compute = self._in(tile, k, tile.compute, parity, asynchronous=False)
        if following is None:
            return [*issued, *compute, self.wait, *self._in(tile, k, tile.drain, parity, asynchronous=True)]
        nxt, at = following
        prefetch = self._in(nxt, at, nxt.fill, 1 - parity, asynchronous=True)
        if not self.shared:
            return [*prefetch, *issued, *compute, self.wait,
                    *self._in(tile, k, tile.drain, parity, asynchronous=True)]
        return [*_after_first_copy(compute, self._cluster(CLUSTER_PREFETCH, 1 - parity, prefetch)),
                self._cluster(CLUSTER_SYNC, parity, [self.wait])]

    def _cluster(self, key: str, parity: int, stmts: list[ir.Stmt]) -> ir.Stmt:
        (buffers,) = self.copies.values()
        return ir.Attr(key, buffers[parity].name, ir.seq(*stmts))

    def _in(self, tile: _Tile, k, stmts: list[ir.Stmt], parity: int, asynchronous: bool) -> list[ir.Stmt]:
        """``stmts`` of tile ``k`` on copies ``parity``; if ``asynchronous``, the copies that end them (a
        zero fill before them stays synchronous) issued asynchronously."""
        rename = _Rebuffer({tile.buffers[name]: copies[parity] for name, copies in self.copies.items()
                            if name in tile.buffers})
        out = [rename.mutate(x) for x in tile.at(k, stmts)]
        return asynchronous_copies(self.spec, out) if asynchronous else out


def asynchronous_copies(spec: isa.ISA, stmts: list[ir.Stmt]) -> list[ir.Stmt]:
    """``stmts`` with the copies that end them issued asynchronously (a zero fill before them stays)."""
    first = len(stmts)
    while first > 0 and is_async_copy(stmts[first - 1]):
        first -= 1
    return stmts[:first] + [_Async(spec).mutate(x) for x in stmts[first:]]


def is_async_copy(stmt: ir.Stmt) -> bool:
    """A tensor instruction (under its marks) that is a copy the spec can issue asynchronously."""
    insn = marked_insn(stmt)
    return insn is not None and _copy_like(insn)


def _after_first_copy(stmts: list[ir.Stmt], extra: ir.Stmt) -> list[ir.Stmt]:
    """``stmts`` with ``extra`` right after their first statement (inside the allocations that open them)
    when that is a synchronous copy, else before them."""
    if stmts and isinstance(stmts[0], ir.Allocate):
        inner = _after_first_copy(_stmts(stmts[0].body), extra)
        return [ir.Allocate(stmts[0].buffer, ir.seq(*inner)), *stmts[1:]]
    if stmts and is_async_copy(stmts[0]):
        return [stmts[0], extra, *stmts[1:]]
    return [extra, *stmts]


def _two_level(spec: isa.ISA, outer: list[_Tile]) -> ir.Stmt | None:
    """Cluster-shared SMEM tiles whose compute is a marked loop of NMEM tiles, as one pipeline of the NMEM
    tiles of every SMEM tile in order (None when a compute is anything else). The SMEM tiles alternate
    between two buffers, filled two tiles ahead: before the last NMEM tile of SMEM tile i (the step that
    prefetches the first NMEM tile of tile i + 1), the cores wait and meet at a barrier (tile i + 1's fill is
    done; every NMEM tile of tile i has been read), and the cluster's first core issues the fill of tile
    i + 2 into tile i's buffer right after that step's prefetch (its DMA unit serves the prefetch first)."""
    (name,) = outer[0].buffers
    ref = outer[0].buffers[name]
    size = max(t.buffers[name].size for t in outer)
    smem = tuple(ir.Buffer(f"{name}.{p}", (size,), ref.dtype, ref.scope) for p in (0, 1))
    instances = [(t, k) for t in outer for k in range(t.count)]
    fills, inner, last = [], [], []
    for i, (t, k) in enumerate(instances):
        rename = _Rebuffer({t.buffers[name]: smem[i % 2]})
        compute = [rename.mutate(x) for x in t.at(k, t.compute)]
        if len(compute) != 1 or not (isinstance(compute[0], ir.Attr) and compute[0].key == MARK):
            return None
        pieces = _tiles(compute[0].body)
        if not pieces or pieces[0].shared:
            return None
        fills.append([rename.mutate(x) for x in t.at(k, t.fill)])
        inner += pieces
        last.append((len(inner) - 1, pieces[-1].count - 1))
    pipeline = _Pipeline(spec, inner)
    if pipeline.shared or name in pipeline.copies:
        return None
    fills = [fills[0]] + [reuse_rows(fill, before, smem[i % 2]) for i, (before, fill) in
                          enumerate(zip(fills, fills[1:], strict=False))]   # the halo, from the tile before
    fills = skip_zero_fills(fills)

    def cluster(key: str, p: int, stmts: list[ir.Stmt]) -> ir.Stmt:
        return ir.Attr(key, smem[p].name, ir.seq(*stmts))
    head = [cluster(CLUSTER_FILL, 0, fills[0])]
    after_first = [cluster(CLUSTER_PREFETCH, 1, asynchronous_copies(spec, fills[1]))] if len(fills) > 1 \
        else []
    hooks = {}
    for i, at in enumerate(last[:-1]):
        refill = [cluster(CLUSTER_PREFETCH, i % 2, asynchronous_copies(spec, fills[i + 2]))] \
            if i + 2 < len(fills) else []
        hooks[at] = ([cluster(CLUSTER_SYNC, (i + 1) % 2, [pipeline.wait])], refill)
    stmt = pipeline.build(head, after_first, hooks)
    for buf in reversed(smem):
        stmt = ir.Attr(CLUSTER_SHARED, buf.name, ir.Allocate(buf, stmt))
    return stmt


def substituted(stmt: ir.Stmt, mapping: Mapping[ir.Var, ir.Expr]) -> ir.Stmt:
    """``stmt`` with ``mapping`` substituted and its instructions' offsets and fields simplified (a tile's or
    an unrolled iteration's index made constant)."""
    return _Fold().mutate(substitute(stmt, mapping))


class _Fold(IRMutator):
    """Simplify the operands' offsets and the fields after substituting a tile's index."""

    def mutate_Region(self, r: ir.Region) -> ir.Region:
        return dataclasses.replace(r, offset=arith.simplify(r.offset))

    def mutate_InsnField(self, f: ir.InsnField) -> ir.InsnField:
        return dataclasses.replace(f, value=arith.simplify(f.value))


class _Rebuffer(IRMutator):
    def __init__(self, mapping: dict[ir.Buffer, ir.Buffer]) -> None:
        self.mapping = mapping

    def mutate_buffer(self, buffer: ir.Buffer) -> ir.Buffer:
        return self.mapping.get(buffer, buffer)


class _Async(IRMutator):
    def __init__(self, spec: isa.ISA) -> None:
        self.spec = spec

    def mutate_TensorInsn(self, s: ir.TensorInsn) -> ir.Stmt:
        twin = async_twin(self.spec, self.spec.instruction(s.name))
        return ir.TensorInsn(s.isa, twin.name, s.fields, s.regions)
