"""The DianNao backend: flat loop IR -> one SPMD ``isa.Program`` that every launched core of the DianNao card
(sim/diannao) runs.

    kernel = codegen(func)                       # DiannaoKernel
    result, outputs = tandem.flows.diannao.run_kernel(kernel, arrays)

Calling convention (as baselines/diannao_kernels.py's hand-written kernels): at launch R0, R1, ... hold the
GMEM byte addresses of ``func.params`` in order; the last register (R31) is set to 0 in the prologue and stays
0 (the base of every fixed on-chip address); everything else (the core index, loop counters, Let values,
temporaries) is allocated from the remaining R registers, floats from the F registers.

Accepted IR (anything else raises ``LoweringError`` naming the node):

- a flat function (every buffer one-dimensional) whose parameters are in scope "global" (GMEM);
- on each path through the function, at most one ``For`` bound to thread "core", min 0, constant extent C:
  its variable is the global core index CLUSTER_ID * CORE_DIM + CORE_ID and C is the launch size
  (``DiannaoKernel.cores``), which must be one the card can launch (1 to CORES_PER_CLUSTER, or a multiple of
  it up to NUM_CORES). Inside a ``For`` bound to thread "cluster" (min 0, extent K up to CLUSTERS, its
  variable CLUSTER_ID), the core loop's variable is CORE_ID, its extent is CORES_PER_CLUSTER (or up to that
  when K = 1) and the launch size is K times that. Several bound loops must lie in different branches (a
  partitioned cluster loop has one core loop per piece) and agree on the launch size. Statements outside
  them run on every launched core: keep them free of effects that must happen once (allocations and Attrs
  are fine);
- serial ``For`` loops (counted scalar loops; extent 0 emits nothing, extent 1 runs the body once with the
  variable bound to min) and unrolled ones (the body once per iteration, its variable a constant, so that
  the tensor instructions inside get immediate addresses), ``IfThenElse``, ``Seq``, ``Let``, ``Attr``,
  ``Evaluate`` of a constant;
- ``Allocate`` in scope "nmem", "wmem" or "smem" with a static size: bump allocation per space, aligned to
  VECTOR_ALIGN (WMEM_ALIGN in WMEM) and released at the end of the Allocate. NMEM and WMEM are per core. SMEM
  is shared by a cluster's cores: an allocation marked ``Attr("cluster_shared")`` (``share_smem``) lies at
  the same addresses for all of them, at the bottom of SMEM (its addresses are reused after it ends: the
  barrier that starts the next fill waits for every core to be done with it); every other "smem" buffer
  lies in the running core's private slice of the rest, (SMEM_BYTES - shared peak) / CORES_PER_CLUSTER
  bytes at CORE_ID times that;
- ``Attr("cluster_fill")``: a cluster barrier, the body split by rows among the cluster's cores
  (``diannao_fill.split_fill``: each zeroes and copies its own rows) or, where it does not split, on the
  cluster's first core only (CORE_ID 0), and a second barrier (``share_smem`` states when that computes what
  every core filling its own copy would);
  ``Attr("cluster_prefetch")`` (``double_buffer``): the same without the barriers;
  ``Attr("cluster_sync")``: the body (a wait), then a cluster barrier;
  ``Attr("card_fill")`` (``share_card``): a barrier of every core, the fill split among every launched core,
  each copying its part into its cluster's SMEM and sending it on to the other clusters' (the spec's cluster
  copy, ``memcpyc``), and a second barrier of every core; the buffer must lie at one SMEM address wherever it
  is card filled. A fill that does not split into copies alone is lowered as a cluster fill;
- the spec's ``wait`` instruction (group ``wait``); an asynchronous copy (``memcpy``'s asynchronous twin,
  from ``double_buffer``) becomes memcpyr's asynchronous twin, as ``memcpy`` becomes ``memcpyr``;
- scalar ``Store``/``Load`` and expressions: see compiler/backend/diannao_scalar.py;
- ``TensorInsn(isa="diannao")``: ``memcpy`` becomes ``memcpyr`` with its addresses in registers (region
  offsets may depend on loop variables and the core index), split into rows or several instructions where the
  spec's field widths require it (``split_copy``); every other instruction has immediate addresses, so its
  region offsets must simplify to constants. Type fields follow the regions' buffer dtypes as in
  compiler/interp/, and operands must lie in the spaces the spec gives them.

Marked regions: an ``Attr`` whose key starts with "pragma_" marks code meant to become tensor instructions.
Every scalar instruction emitted inside one (loop control, address arithmetic, loads, ops, stores) is a
*fallback* pc (``DiannaoKernel.fallback_pcs``); tensor instructions and the address setup of a copy are not,
nor is the prologue, which loads the float constants of all scalar code into F registers once.
``DiannaoKernel.fallback_count(result.executed)`` counts how many fallback instructions a launch ran.

The output is deterministic: the same IR gives the same program text.

Non-Goals: register spilling (running out of registers is a LoweringError), instruction scheduling,
strength reduction of addresses, barriers other than those of a cluster or card fill.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import isa
from compiler.arith import Interval, simplify
from compiler.backend.diannao_emit import TENSOR_GROUPS, Code, Label, Late, RegisterFile
from compiler.backend.diannao_fill import Written, split_fill, written_rows
from compiler.backend.diannao_scalar import Binding, Place, Scalar, Val, float_bits
from compiler.errors import InterpError, LoweringError, VerifyError
from compiler.interp.tensor_insn import bind_types
from compiler.ir import nodes as ir
from compiler.ir.functor import IRVisitor, fields_of, post_order_visit
from compiler.passes.double_buffer import CLUSTER_PREFETCH, CLUSTER_SYNC, async_twin
from compiler.passes.share_card import CARD_FILL, cluster_copy, cluster_register
from compiler.passes.share_smem import CLUSTER_FILL, CLUSTER_SHARED
from compiler.passes.tensorize import space_of
from compiler.verify import verify
from isa.lang.tree import Name

_SCRATCH = Late("scratch")
#: F registers kept free for expressions when float constants are hoisted into the others
_F_RESERVE = 8
_SHARED = "SMEM_CLUSTER"  # the pool of cluster-shared SMEM buffers (at the bottom of SMEM)


@dataclass(frozen=True)
class DiannaoKernel:
    """A compiled kernel: its program, launch size, parameters (R0, R1, ... hold their GMEM addresses), the
    pcs of scalar code emitted inside marked regions, and the peak bytes allocated per on-chip space (SMEM:
    per core slice, SMEM_CLUSTER: the cluster-shared buffers; NMEM includes the float scratch word when the
    kernel needs one)."""

    program: isa.Program
    cores: int
    params: tuple[ir.Buffer, ...]
    fallback_pcs: frozenset[int]
    onchip_bytes: dict[str, int]

    def fallback_count(self, executed: Sequence[int]) -> int:
        """How many fallback instructions ran, from per-pc execution counts (``DiannaoResult.executed``)."""
        if len(executed) != len(self.program):
            raise ValueError(f"expected execution counts for the {len(self.program)} pcs of the program, but "
                             f"got {len(executed)}")
        return sum(executed[pc] for pc in self.fallback_pcs)


def codegen(func: ir.PrimFunc, spec: isa.ISA) -> DiannaoKernel:
    """Compile the flat function ``func`` for the DianNao card described by ``spec`` (the built-in spec by
    default)."""
    if spec.name != "diannao":
        raise LoweringError(f"codegen: expected the 'diannao' ISA, but got '{spec.name}'")
    if not isinstance(func, ir.PrimFunc):
        raise LoweringError(f"codegen: expected a PrimFunc, but got {type(func).__name__}")
    return _Codegen(func, spec).run()


# --------------------------------------------------------------------------------------------------
# copies


@dataclass(frozen=True, slots=True)
class Piece:
    """One ``memcpyr``: ``count`` rows of ``length`` bytes, ``dst``/``src`` bytes past the copy's start."""

    dst: int
    src: int
    length: int
    count: int
    dst_stride: int
    src_stride: int


def split_copy(length: int, count: int, dst_stride: int, src_stride: int, max_len: int, max_count: int,
               max_stride: int) -> list[Piece]:
    """The instructions of a copy of ``count`` rows of ``length`` bytes whose fields hold at most ``max_len``,
    ``max_count`` rows and strides of ``max_stride``.

    Rows that fit are issued ``max_count`` at a time. A contiguous copy (one row, or strides equal to the row)
    that is too long is re-split into equal rows when some row count up to ``max_count`` divides it, else into
    rows of the largest length plus one shorter row. A strided copy whose rows or strides do not fit goes row
    by row, each row a contiguous copy.
    """
    if count == 1:
        dst_stride = src_stride = length
    if length <= max_len and dst_stride <= max_stride and src_stride <= max_stride:
        return [Piece(k * dst_stride, k * src_stride, length, min(max_count, count - k), dst_stride,
                      src_stride) for k in range(0, count, max_count)]
    if dst_stride != length or src_stride != length:
        row = split_copy(length, 1, length, length, max_len, max_count, max_stride)
        return [dataclasses.replace(p, dst=r * dst_stride + p.dst, src=r * src_stride + p.src)
                for r in range(count) for p in row]
    total = length * count
    row = min(max_len, max_stride)
    for rows in range(-(-total // row), max_count + 1):
        if total % rows == 0:
            return [Piece(0, 0, total // rows, rows, total // rows, total // rows)]
    full, rest = divmod(total, row)
    pieces = [Piece(k * row, k * row, row, min(max_count, full - k), row, row)
              for k in range(0, full, max_count)]
    if rest:
        pieces.append(Piece(full * row, full * row, rest, 1, rest, rest))
    return pieces


# --------------------------------------------------------------------------------------------------
# the code generator


class _Prescan(IRVisitor):
    """What the prologue needs: the float constants of scalar code and whether private SMEM is allocated."""

    def __init__(self) -> None:
        self.floats: dict[tuple[int, int], None] = {}
        self.smem = False

    def visit_FloatImm(self, e: ir.FloatImm) -> None:
        self.floats[float_bits(e)] = None

    def visit_Attr(self, s: ir.Attr) -> None:
        self.visit(s.body.body if _shared_allocation(s) else s.body)

    def visit_Allocate(self, s: ir.Allocate) -> None:
        self.smem |= s.buffer.scope == "smem"
        self.generic_visit(s)


def _shared_allocation(s: ir.Attr) -> bool:
    """Whether ``s`` is a ``cluster_shared`` mark (which must enclose an "smem" allocation)."""
    if s.key != CLUSTER_SHARED:
        return False
    if not (isinstance(s.body, ir.Allocate) and s.body.buffer.scope == "smem"):
        raise LoweringError(f"a '{CLUSTER_SHARED}' mark must enclose an allocation in scope 'smem': "
                            f"{_first_line(s)}")
    return True


def _statements(node: ir.Stmt) -> Iterator[ir.Stmt]:
    """The statements directly inside ``node``."""
    for f in fields_of(node):
        value = getattr(node, f)
        for x in value if isinstance(value, tuple) else (value,):
            if isinstance(x, ir.Stmt):
                yield x


def _shared_peak(node: ir.Stmt, align: int) -> int:
    """The most bytes of cluster-shared SMEM live at once in ``node`` (allocations aligned to ``align``)."""
    own = 0
    if isinstance(node, ir.Attr) and _shared_allocation(node):
        b = node.body.buffer
        own = -(-b.size * b.dtype.bits // 8 // align) * align
    return own + max((_shared_peak(x, align) for x in _statements(node)), default=0)


def _check_bound_loops(node: ir.Stmt) -> bool:
    """Whether ``node`` holds a bound loop; raises LoweringError where two run one after another."""
    if isinstance(node, ir.For) and node.kind is ir.ForKind.THREAD_BINDING:
        _check_bound_loops(node.body)
        return True
    holding = [x for x in _statements(node) if _check_bound_loops(x)]
    if isinstance(node, ir.Seq) and len(holding) > 1:
        raise LoweringError(f"{_first_line(holding[1])}: bound loops run one after another, but the cores do "
                            "not wait for each other between them (no barrier); use one bound loop")
    return bool(holding)


def _first_line(node: ir.Node) -> str:
    line = str(node).strip().splitlines()[0]
    return f"'{line[:100]}...'" if len(line) > 100 else f"'{line}'"


class _Codegen:
    def __init__(self, func: ir.PrimFunc, spec: isa.ISA) -> None:
        self.func, self.spec = func, spec
        p = spec.params
        nregs = p["NUM_REGS"]
        self.zero = nregs - 1
        if len(func.params) > nregs - 1:
            raise LoweringError(f"{func.name}: {len(func.params)} parameters do not fit in the {nregs - 1} "
                                "argument registers")
        self.code = Code(spec)
        self.s = Scalar(self.code, self.zero, RegisterFile("R", range(len(func.params), nregs - 1)),
                        RegisterFile("F", range(nregs)), _SCRATCH)
        self.cpc = p["CORES_PER_CLUSTER"]
        self.onchip = [name for name in spec.spaces if name != "GMEM"] + [_SHARED]
        self.capacity = {name: spec.spaces[name].bytes for name in self.onchip if name != _SHARED}
        self.top = dict.fromkeys(self.onchip, 0)
        self.peak = dict.fromkeys(self.onchip, 0)
        self.cores: int | None = None   # the launch size all bound loops agree on
        self.open: list[str] = []       # the threads of the bound loops around the statement compiled now
        self.clusters = 0               # the extent of the enclosing cluster-bound loop (0: none)
        self.smem_reg: int | None = None
        self.cluster_cores = 1          # the cores of a cluster the core-bound loop runs on
        # a copy is emitted as memcpyr; an asynchronous one (double_buffer's) as memcpyr's asynchronous twin
        self.copy_reg = spec.instruction("memcpyr")
        self.copy_async = async_twin(spec, spec.instruction("memcpy"))
        self.copy_reg_async = async_twin(spec, self.copy_reg)
        # a card fill's parts go to the other clusters with the spec's cluster copy (``share_card``)
        self.send = cluster_copy(spec)
        self.card_bases: dict[str, int] = {}   # each card-filled buffer's SMEM address, the same everywhere

    def run(self) -> DiannaoKernel:
        func = self.func
        self._check_flat()
        try:
            verify(func, "flat")
        except VerifyError as e:
            raise LoweringError(f"codegen: {e}") from None
        for i, param in enumerate(func.params):
            self.s.places[param] = Place("GMEM", i, 0)
        _check_bound_loops(func.body)
        self._prologue()
        self.stmt(func.body)
        self.code.emit("halt")
        late = {}
        if any(v == _SCRATCH for _, fields in self.code.items for v in fields.values()):
            self.top["NMEM"] = self.peak["NMEM"]  # above every allocation, live or not
            align = self.spec.params["VECTOR_ALIGN"]
            late["scratch"] = self._reserve("NMEM", 4, "the float scratch word", align)
        return DiannaoKernel(self.code.program(late), self.cores or 1, func.params, self.code.fallback_pcs,
                             dict(self.peak))

    def _check_flat(self) -> None:
        func = self.func
        for b in func.params:
            if b.scope != "global":
                raise LoweringError(f"{func.name}: parameter {b.name} is in scope '{b.scope}'; kernel "
                                    "parameters live in GMEM (scope 'global')")
        buffers = list(func.params)

        def collect(node: ir.Node) -> None:
            if isinstance(node, ir.Allocate):
                buffers.append(node.buffer)

        post_order_visit(func.body, collect)
        for b in buffers:
            if len(b.shape) != 1:
                raise LoweringError(f"{func.name}: buffer {b.name}{list(b.shape)} is not flat; run the "
                                    "'reference' pipeline (flatten) before codegen")

    def _prologue(self) -> None:
        scan = _Prescan()
        scan.visit(self.func.body)
        self.code.emit("li", rd=self.zero, imm=0)
        align = self.spec.params["VECTOR_ALIGN"]
        shared = _shared_peak(self.func.body, align)
        self.capacity[_SHARED] = shared
        self.capacity["SMEM"] = (self.capacity["SMEM"] - shared) // self.cpc // align * align
        if scan.smem:
            self.smem_reg = self.s.take()
            slice_bytes = self.s.const(self.capacity["SMEM"])
            self.code.emit("rdid", rd=self.smem_reg, which="CORE_ID")
            self.code.emit("mul", rd=self.smem_reg, rs1=self.smem_reg, rs2=slice_bytes.reg)
            self.s.free(slice_bytes)
            if shared:
                self.code.emit("addi", rd=self.smem_reg, rs1=self.smem_reg, imm=shared)
        hoist = max(0, self.spec.params["NUM_REGS"] - _F_RESERVE)
        for key in list(scan.floats)[:hoist]:
            reg = self.s.take(True)
            self.s.load_float(reg, key)
            self.s.fconsts[key] = reg

    @contextmanager
    def _at(self, s: ir.Stmt) -> Iterator[None]:
        outer, self.s.where = self.s.where, _first_line(s)
        try:
            yield
        finally:
            self.s.where = outer

    def _reserve(self, space: str, nbytes: int, what: str, align: int) -> int:
        base = -(-self.top[space] // align) * align
        if base + nbytes > self.capacity[space]:
            per = {"SMEM": " per core", _SHARED: " for the cluster-shared buffers"}.get(space, "")
            raise LoweringError(f"{what} ({nbytes} bytes) does not fit in {space}: {base} bytes are in use "
                                f"of its {self.capacity[space]}{per}")
        self.top[space] = base + nbytes
        self.peak[space] = max(self.peak[space], self.top[space])
        return base

    # statements ----------------------------------------------------------------------------------
    def stmt(self, s: ir.Stmt) -> None:
        method = getattr(self, "_" + type(s).__name__, None)
        if method is None:
            raise LoweringError(f"the DianNao backend cannot compile a {type(s).__name__}: {_first_line(s)}")
        with self._at(s):
            method(s)

    def _Seq(self, s: ir.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _Attr(self, s: ir.Attr) -> None:
        if _shared_allocation(s):
            self._Allocate(s.body, shared=True)
            return
        if s.key in (CLUSTER_FILL, CLUSTER_PREFETCH):
            self._cluster_fill(s, barriers=s.key == CLUSTER_FILL)
            return
        if s.key == CLUSTER_SYNC:
            self.stmt(s.body)
            self.code.emit("barrier", scope="CLUSTER")
            return
        if s.key == CARD_FILL:
            self._card_fill(s)
            return
        with self.code.marking(s.key.startswith("pragma_")):
            self.stmt(s.body)

    def _cluster_fill(self, s: ir.Attr, barriers: bool = True) -> None:
        """Barrier; the fill split among the cluster's cores (``split_fill``), else on its first core;
        barrier (a prefetch: the fill alone)."""
        if "core" not in self.open:
            raise LoweringError(f"{_first_line(s)}: a cluster fill must be inside the core-bound loop")
        if barriers:
            self.code.emit("barrier", scope="CLUSTER")
        parts = split_fill(s.body, self.cluster_cores, self.spec.params["VECTOR_ALIGN"]) or [[s.body]]
        core = self._core_index(card=False)
        self._by_core(core, parts, lambda c, part: self.stmt(ir.seq(*part)))
        self.s.free(Val(core, temp=True))
        if barriers:
            self.code.emit("barrier", scope="CLUSTER")

    def _by_core(self, core: int, parts: list, emit) -> None:
        """``emit(c, parts[c])`` run by the core whose index (in register ``core``) is ``c``."""
        done = Label()
        for c, part in enumerate(parts):
            skip = Label()
            if c:
                other = self.s.take()
                self.code.emit("li", rd=other, imm=c)
                self.code.emit("bne", rs1=core, rs2=other, target=skip)
                self.s.free(Val(other, temp=True))
            else:
                self.code.emit("bne", rs1=core, rs2=self.zero, target=skip)
            emit(c, part)   # ``core`` stays taken until every part is placed
            self.code.emit("jmp", target=done)
            self.code.place(skip)
        self.code.place(done)

    def _card_fill(self, s: ir.Attr) -> None:
        """Barrier of every core; the fill split among every launched core (``split_fill``), each core's part
        written into its cluster's SMEM and sent to the other clusters' copies of the buffer (the spec's
        cluster copy, to cluster + 1, + 2, ... in turn, so that the clusters' ports share the sends);
        barrier of every core. A fill that does not split so (``written_rows``) is a cluster fill. Prefetches
        the fill carries (``hoist_fill``) are issued after a core's part and before its sends."""
        if "core" not in self.open or not self.clusters:
            raise LoweringError(f"{_first_line(s)}: a card fill must be inside the core- and cluster-bound "
                                "loops")
        body = list(s.body.stmts) if isinstance(s.body, ir.Seq) else [s.body]
        cut = len(body)
        while cut and isinstance(body[cut - 1], ir.Attr) and body[cut - 1].key == CLUSTER_PREFETCH:
            cut -= 1
        fill, carried = ir.seq(*body[:cut]), body[cut:]
        clusters = self.clusters
        parts = split_fill(fill, clusters * self.cpc, self.spec.params["VECTOR_ALIGN"])
        sent = None if parts is None else [written_rows(part) for part in parts]
        if self.send is None or clusters < 2 or self.cluster_cores != self.cpc or sent is None or \
                None in sent:
            self._cluster_fill(ir.Attr(CLUSTER_FILL, s.value, fill))
            self.stmt(ir.seq(*carried))
            return
        for rows in sent:
            for w in rows:
                self._card_base(s, w.region.buffer)
        self.code.emit("barrier", scope="ALL")
        core = self._core_index(card=True)

        def send(c: int, rows: list[Written]) -> None:
            for k in range(1, clusters):
                for w in rows:
                    self._send(w, (c // self.cpc + k) % clusters, _first_line(s))
        self._by_core(core, parts, lambda c, stmts: (self.stmt(ir.seq(*stmts)), send(c, sent[c])))
        self.stmt(ir.seq(*carried))
        self.s.free(Val(core, temp=True))
        self.code.emit("barrier", scope="ALL")

    def _core_index(self, card: bool) -> int:
        """A register taken and set to this core's index in its cluster (CORE_ID) or, with ``card``, on the
        card (CLUSTER_ID * CORE_DIM + CORE_ID)."""
        reg = self.s.take()
        self.code.emit("rdid", rd=reg, which="CORE_ID")
        if card:
            cluster, dim = self.s.take(), self.s.take()
            self.code.emit("rdid", rd=cluster, which="CLUSTER_ID")
            self.code.emit("rdid", rd=dim, which="CORE_DIM")
            self.code.emit("mul", rd=cluster, rs1=cluster, rs2=dim)
            self.code.emit("add", rd=reg, rs1=reg, rs2=cluster)
            self.s.free(Val(cluster, temp=True), Val(dim, temp=True))
        return reg

    def _card_base(self, s: ir.Attr, buffer: ir.Buffer) -> None:
        """Check that ``buffer`` lies at one SMEM address wherever it is card filled (a send writes the
        other clusters' copies at the sender's address)."""
        place = self.s.places[buffer]
        if place.reg != self.zero:
            raise LoweringError(f"{_first_line(s)}: a card-filled buffer must be cluster-shared (a fixed "
                                f"SMEM address), but {buffer.name} is addressed through a register")
        base = self.card_bases.setdefault(buffer.name, place.base)
        if base != place.base:
            raise LoweringError(f"{_first_line(s)}: {buffer.name} lies at SMEM {place.base} here but at "
                                f"{base} where another cluster fills it: a send would miss it")

    def _send(self, rows: Written, cluster: int, what: str) -> None:
        """``rows`` of this cluster's SMEM copied to the same place in ``cluster``'s."""
        fmt = self.send
        stride = min(fmt.field("dst_stride").hi, fmt.field("src_stride").hi)
        pieces = split_copy(rows.length, rows.count, rows.stride, rows.stride, fmt.field("len").hi,
                            fmt.field("count").hi, stride)
        with self.code.setting_up():
            base = self._copy_base(rows.region, max(p.dst for p in pieces), fmt.field("dst_off"))
            to = self.s.take()
            self.code.emit("li", rd=to, imm=cluster)
            for p in pieces:
                fields = {"rd": base[0], "rs1": base[0], cluster_register(fmt): to,
                          "dst_off": base[1] + p.dst, "src_off": base[1] + p.dst, "len": p.length,
                          "count": p.count, "dst_stride": p.dst_stride, "src_stride": p.dst_stride}
                self._check(what, fmt.name, fields)
                self.code.emit(fmt.name, **fields)
            self.s.free(base[2], Val(to, temp=True))

    def _Evaluate(self, s: ir.Evaluate) -> None:
        if not isinstance(s.value, ir.IntImm | ir.FloatImm):
            raise LoweringError(f"the DianNao backend cannot evaluate {_first_line(s)} for its effect")

    def _Store(self, s: ir.Store) -> None:
        self.s.store(s)

    def _Let(self, s: ir.Let) -> None:
        value = simplify(s.value, self.s.ranges) if s.value.dtype.is_int else s.value
        if isinstance(value, ir.IntImm):
            self._bound(s.var, Binding(None, value.value), None, s.body)
            return
        v = self.s.value(value)
        reg = v.reg if v.temp else self.s.take(v.is_float)
        self.s.move(reg, v)
        self._bound(s.var, Binding(reg, 0, v.is_float, v.exact), None, s.body)
        self.s.free(Val(reg, v.is_float, True))

    def _bound(self, var: ir.Var, binding: Binding, interval: Interval | None, body: ir.Stmt) -> None:
        """Compile ``body`` with ``var`` bound (and ranging over ``interval`` when given)."""
        self.s.vars[var] = binding
        if interval is not None:
            self.s.ranges[var] = interval
        try:
            self.stmt(body)
        finally:
            del self.s.vars[var]
            self.s.ranges.pop(var, None)

    def _IfThenElse(self, s: ir.IfThenElse) -> None:
        cond = simplify(s.cond, self.s.ranges)
        if isinstance(cond, ir.IntImm):
            chosen = s.then_case if cond.value else s.else_case
            if chosen is not None:
                self.stmt(chosen)
            return
        other = Label()
        self.s.branch(cond, other, False)
        self.stmt(s.then_case)
        if s.else_case is None:
            self.code.place(other)
            return
        done = Label()
        self.code.emit("jmp", target=done)
        self.code.place(other)
        self.stmt(s.else_case)
        self.code.place(done)

    def _For(self, s: ir.For) -> None:
        if s.kind is ir.ForKind.THREAD_BINDING:
            self._bound_loop(s)
            return
        if s.kind not in (ir.ForKind.SERIAL, ir.ForKind.UNROLLED):
            raise LoweringError(f"a {s.kind.name.lower()} loop has no meaning on one DianNao core (bind it "
                                f"to the 'core' axis or make it serial): {_first_line(s)}")
        lo, extent = simplify(s.min, self.s.ranges), simplify(s.extent, self.s.ranges)
        if not (isinstance(lo, ir.IntImm) and isinstance(extent, ir.IntImm)):
            self._dynamic_loop(s, lo, extent)
            return
        lo, extent = lo.value, extent.value
        if extent <= 0:
            return
        interval = Interval.from_extent(lo, extent)
        if extent == 1 or s.kind is ir.ForKind.UNROLLED:
            for value in range(lo, lo + extent):   # unrolled: the variable a constant in each copy
                self._bound(s.var, Binding(None, value), Interval(value, value), s.body)
            return
        counter, end = self.s.take(), self.s.take()
        self.code.emit("li", rd=counter, imm=lo)
        self.code.emit("li", rd=end, imm=lo + extent)
        top = Label()
        self.code.place(top)
        self._bound(s.var, Binding(counter), interval, s.body)
        self.code.emit("addi", rd=counter, rs1=counter, imm=1)
        self.code.emit("blt", rs1=counter, rs2=end, target=top)
        self.s.free(Val(counter, temp=True), Val(end, temp=True))

    def _dynamic_loop(self, s: ir.For, lo: ir.Expr, extent: ir.Expr) -> None:
        """A loop whose bounds are computed at run time: it may run zero times."""
        counter, end = self.s.take(), self.s.take()
        v = self.s.value(lo)
        self.s.move(counter, v)
        self.s.free(v)
        n = self.s.value(extent)
        self.code.emit("add", rd=end, rs1=counter, rs2=n.reg)
        self.s.free(n)
        top, done = Label(), Label()
        self.code.emit("bge", rs1=counter, rs2=end, target=done)
        self.code.place(top)
        self._bound(s.var, Binding(counter), None, s.body)
        self.code.emit("addi", rd=counter, rs1=counter, imm=1)
        self.code.emit("blt", rs1=counter, rs2=end, target=top)
        self.code.place(done)
        self.s.free(Val(counter, temp=True), Val(end, temp=True))

    def _bound_loop(self, s: ir.For) -> None:
        name = s.var.name
        if s.thread not in ("core", "cluster"):
            raise LoweringError(f"bound loop {name}: the DianNao backend binds loops to the 'core' and "
                                f"'cluster' axes only, not '{s.thread}'")
        if "core" in self.open or s.thread in self.open:
            raise LoweringError(f"bound loop {name}: a kernel has at most one core-bound loop on each path, "
                                f"and at most one cluster-bound loop around it; this '{s.thread}' loop is "
                                f"inside a '{self.open[-1]}' loop")
        lo, extent = simplify(s.min), simplify(s.extent)
        if not (isinstance(lo, ir.IntImm) and lo.value == 0 and isinstance(extent, ir.IntImm)):
            raise LoweringError(f"bound loop {name}: expected min 0 and a constant extent, but got min "
                                f"'{lo}' and extent '{extent}'")
        n, p = extent.value, self.spec.params
        if s.thread == "cluster":
            if not 1 <= n <= p["CLUSTERS"]:
                raise LoweringError(f"bound loop {name}: the card has {p['CLUSTERS']} clusters, not {n}")
            reg = self.s.take()
            self.code.emit("rdid", rd=reg, which="CLUSTER_ID")
            self.clusters = n
            try:
                self._open("cluster", s.var, Binding(reg), Interval(0, n - 1), s.body)
            finally:
                self.clusters = 0
            self.s.free(Val(reg, temp=True))
            return
        if self.clusters:
            if not (n == self.cpc or (self.clusters == 1 and 1 <= n <= self.cpc)):
                raise LoweringError(f"bound loop {name}: inside a loop over {self.clusters} clusters, a "
                                    f"core loop runs over the {self.cpc} cores of each (or up to "
                                    f"{self.cpc} of one cluster), not {n}")
            self._launch(name, n * self.clusters)
        elif not (1 <= n <= self.cpc or (n % self.cpc == 0 and self.cpc <= n <= p["NUM_CORES"])):
            raise LoweringError(f"bound loop {name}: cannot launch {n} cores: use 1 to {self.cpc} cores of "
                                f"one cluster, or a multiple of {self.cpc} up to {p['NUM_CORES']} (whole "
                                "clusters)")
        else:
            self._launch(name, n)
        # several clusters: the global core index CLUSTER_ID * CORE_DIM + CORE_ID
        reg = self._core_index(card=not self.clusters and n > self.cpc)
        self.cluster_cores = min(n, self.cpc)
        self._open("core", s.var, Binding(reg), Interval(0, n - 1), s.body)
        self.s.free(Val(reg, temp=True))

    def _launch(self, name: str, cores: int) -> None:
        if self.cores is not None and self.cores != cores:
            raise LoweringError(f"bound loop {name}: it runs on {cores} cores, but another bound loop of the "
                                f"kernel runs on {self.cores}; all must agree on the launch size")
        self.cores = cores

    def _open(self, thread: str, var: ir.Var, binding: Binding, interval: Interval, body: ir.Stmt) -> None:
        self.open.append(thread)
        try:
            self._bound(var, binding, interval, body)
        finally:
            self.open.pop()

    def _space(self, scope: str, what: str) -> str:
        space = space_of(scope)
        if space not in self.spec.spaces:
            raise LoweringError(f"{what}: scope '{scope}' is no memory space of the DianNao card "
                                f"(spaces: {', '.join(s.lower() for s in self.spec.spaces)})")
        return space

    def _Allocate(self, s: ir.Allocate, shared: bool = False) -> None:
        b = s.buffer
        space = self._space(b.scope, f"allocation {b.name}")
        if space == "GMEM":
            raise LoweringError(f"allocation {b.name}: a kernel cannot allocate GMEM; pass it as a parameter")
        if b.dtype.is_bool or b.dtype.bits % 8:
            raise LoweringError(f"allocation {b.name}: {b.dtype} elements have no byte layout")
        p = self.spec.params
        align = p["WMEM_ALIGN"] if space == "WMEM" else p["VECTOR_ALIGN"]
        pool = _SHARED if shared else space
        outer = self.top[pool]
        base = self._reserve(pool, b.nbytes, f"allocation {b.name}", align)
        reg = self.smem_reg if pool == "SMEM" else self.zero
        self.s.places[b] = Place(space, reg, base)
        try:
            self.stmt(s.body)
        finally:
            del self.s.places[b]
            self.top[pool] = outer

    # tensor instructions -------------------------------------------------------------------------
    def _TensorInsn(self, s: ir.TensorInsn) -> None:
        text, spec = str(s), self.spec
        if s.isa != spec:
            raise LoweringError(f"{text}: the DianNao backend compiles instructions of its spec "
                                f"('{spec.name}', {spec.source}), not of '{s.isa.name}' ({s.isa.source})")
        try:
            instr = spec.instruction(s.name)
        except KeyError as e:
            raise LoweringError(f"{text}: {e.args[0]}") from None
        if instr.group == "wait" and not instr.operands and not s.fields:   # double_buffer's wait
            self.code.emit(s.name)
            return
        if instr.group not in TENSOR_GROUPS or instr in (self.copy_reg, self.copy_reg_async):
            raise LoweringError(f"{text}: '{s.name}' is not a tensor instruction of the IR (memcpyr is what "
                                "memcpy becomes)")
        try:
            types = bind_types(s, instr, text)
        except InterpError as e:
            raise LoweringError(str(e)) from None
        regions = {r.operand: r for r in s.regions}
        operands = [op for op in instr.operands if op.kind == "tensor"]
        missing = [op.name for op in operands if op.name not in regions]
        if missing:
            raise LoweringError(f"{text}: no region for operand(s) {', '.join(missing)}")
        fields = self._fields(s, instr, text, {op.addr.id for op in operands if isinstance(op.addr, Name)})
        for op in operands:  # dtypes as the interpreter checks them; spaces fixed by the spec or a field
            r = regions[op.name]
            have = r.buffer.dtype
            if have.is_bool or have.kind == "bfloat" or (op.dtype not in types and op.dtype not in ("u8",
                                                                                                    have.short)):
                raise LoweringError(f"{text}: operand '{op.name}' is {op.dtype}, but buffer {r.buffer.name} "
                                    f"holds {have}")
            space = self._space(r.buffer.scope, f"{text}: operand '{op.name}'")
            code = spec.spaces[space].id
            if op.space_is_field and op.space not in fields:
                fields[op.space] = code
                continue
            given = spec.space_by_id(fields[op.space]) if op.space_is_field else spec.spaces[op.space]
            if given is None:
                raise LoweringError(f"{text}: field '{op.space}' = {fields[op.space]} is no space code")
            expected = given.name
            if expected != space:
                raise LoweringError(f"{text}: operand '{op.name}' must be in {expected}, but buffer "
                                    f"{r.buffer.name} is in {space}")
        if s.name == "memcpy" or instr == self.copy_async:
            self._memcpy(text, instr, fields, regions["dst"], regions["src"], asynchronous=s.name != "memcpy")
            return
        for op in operands:
            r = regions[op.name]
            offset = simplify(r.offset, self.s.ranges)
            if not isinstance(offset, ir.IntImm):
                raise LoweringError(f"{text}: operand '{op.name}' has the non-constant offset '{offset}', "
                                    f"but the addresses of {s.name} are immediates")
            place = self.s.places[r.buffer]
            if place.reg != self.zero:
                raise LoweringError(f"{text}: operand '{op.name}' on {r.buffer.name} has no fixed address "
                                    f"({place.space} is addressed through a register)")
            fields[op.addr.id] = place.base + offset.value * (r.buffer.dtype.bits // 8)
        self._check(text, s.name, {**fields, **types})
        self.code.emit(s.name, **fields, **types)

    def _fields(self, s: ir.TensorInsn, instr: isa.Instruction, text: str, addresses: set[str]) -> dict:
        """The constant fields the IR sets (none of them a type or an address)."""
        settable = {f.name: f for f in instr.fields}
        out = {}
        for f in s.fields:
            if f.name not in settable:
                raise LoweringError(f"{text}: unknown field '{f.name}'; fields are {', '.join(settable)}")
            if settable[f.name].kind == "type" or f.name in addresses:
                what = "type" if settable[f.name].kind == "type" else "address"
                raise LoweringError(f"{text}: {what} field '{f.name}' is set, but it comes from the regions")
            v = simplify(f.value, self.s.ranges)
            if not isinstance(v, ir.IntImm):
                raise LoweringError(f"{text}: field '{f.name}' must be a constant, but is '{v}'")
            out[f.name] = v.value
        return out

    def _check(self, text: str, name: str, fields: dict) -> None:
        """Raise unless ``name`` with ``fields`` encodes and satisfies every rule its fields decide."""
        try:
            insn = self.spec.insn(name, **fields)
        except isa.EncodingError as e:
            raise LoweringError(f"{text}: {e}") from None
        broken = isa.check_constraints(self.spec, insn, which="static")
        if broken:
            raise LoweringError(f"{text}: " + "; ".join(str(v) for v in broken))

    def _memcpy(self, text: str, instr: isa.Instruction, fields: dict, dst: ir.Region,
                src: ir.Region, asynchronous: bool = False) -> None:
        """A copy as ``memcpyr`` instructions at register + offset addresses (``split_copy`` pieces); an
        asynchronous one as memcpyr's asynchronous twin."""
        value = {f.name: fields.get(f.name, f.default or 0) for f in instr.fields}
        length, count = value["len"], value["count"]
        if length == 0 or count == 0:
            return  # copies nothing, as the interpreter has it
        fmt = self.copy_reg_async if asynchronous else self.copy_reg
        if fmt is None:
            raise LoweringError(f"{text}: the spec has no asynchronous twin of memcpyr to issue it with")
        max_len, max_count = fmt.field("len").hi, fmt.field("count").hi
        max_stride = min(fmt.field("dst_stride").hi, fmt.field("src_stride").hi)
        pieces = split_copy(length, count, value["dst_stride"], value["src_stride"], max_len, max_count,
                            max_stride)
        with self.code.setting_up():
            d = self._copy_base(dst, max(p.dst for p in pieces), fmt.field("dst_off"))
            r = self._copy_base(src, max(p.src for p in pieces), fmt.field("src_off"))
            for p in pieces:
                f = {"dst_space": value["dst_space"], "src_space": value["src_space"], "rd": d[0],
                     "rs1": r[0], "dst_off": d[1] + p.dst, "src_off": r[1] + p.src, "len": p.length,
                     "count": p.count, "dst_stride": p.dst_stride, "src_stride": p.src_stride}
                self._check(text, fmt.name, f)
                self.code.emit(fmt.name, **f)
            self.s.free(d[2], r[2])

    def _copy_base(self, region: ir.Region, span: int, field: isa.Field) -> tuple[int, int, Val | None]:
        """(register, offset, temporary) for a copy operand, the offset fitting ``field`` up to ``span``."""
        reg, off, temp = self.s.address(region.buffer, region.offset)
        if field.lo <= off and off + span <= field.hi:
            return reg, off, temp
        v = self.s.plus(temp if temp is not None else Val(reg), off)
        return v.reg, 0, v
