"""share_card: a cluster fill whose values are the same in every cluster crosses GMEM once for the card, each
cluster loading a part and sending it to the others' SMEM (Cambricon's SRAM2SRAM with a destination cluster,
anchors §3.2; the DianNao spec's ``memcpyc``).

``share_smem`` lets a cluster's cores fill a shared SMEM tile once per cluster (``Attr("cluster_fill")``).
Where the fill mentions no variable of the loop bound to "cluster" (a conv's weights when the clusters take
row groups: every cluster loads all of them), each cluster loading it moves the same bytes through the one
GMEM port once per cluster. This pass marks such a fill ``Attr("card_fill", name, fill)`` instead: the
backend splits it among every launched core (``compiler.backend.diannao_fill.split_fill``), each core
sends its part to the other clusters' copies of the buffer with the spec's cluster copy, between barriers of
every core (compiler/backend/diannao.py).

A cluster fill becomes a card fill when all of these hold, and stays as it is otherwise:

1. the spec has a cluster copy (``cluster_copy``: a synchronous copy whose written operand names a
   ``cluster``, with memcpyr's fields, ``SEND_FIELDS``, and a register field for the cluster);
2. it lies inside a loop bound to "cluster" of two or more clusters;
3. its statements mention no variable of that loop, nor a ``Let`` that depends on one: every cluster fills
   the same bytes;
4. every cluster runs the card fills, and their barriers, alike: the loops between the cluster loop and the
   fill do not depend on the cluster, and a condition that does (loop partitioning splits the cluster loop
   where the first or last cluster's rows differ) has the same card fills, under the same loops, on every
   path through it;
5. it pays, by the spec's timing: the GMEM time of the copies the other clusters no longer make (the fill's
   copies' cycles, K - 1 times over for K clusters) is at least ``PAYS`` times what the card fill adds on
   the way (two barriers of every core, and a core's K - 1 sends one after another, each at least the cluster
   copy's latency). Measured: GoogLeNet's 8x8 layers (as PyTorch exports it), whose 10 KB first tiles lost
   ~900 cycles each as card fills; Table II's weights (147 KB and more) save thousands.

Precondition: after ``share_smem`` (and ``double_buffer``, ``stream_copies``, which know cluster fills only;
``hoist_fill`` runs after it and leaves card fills where they are).
Postcondition: the same function with marks renamed; the IR means every core filling its own copy, as
before, so the interpreter gives the same results.
"""

from __future__ import annotations

import dataclasses

import isa
from compiler.ir import nodes as ir
from compiler.ir.functor import free_vars, post_order_visit
from compiler.passes.share_smem import CLUSTER_FILL, AlignedFills
from isa.lang.scalar import evaluate
from isa.lang.tree import Access

CARD_FILL = "card_fill"
#: how many times the GMEM time a card fill saves must exceed the latency it adds (rule 5)
PAYS = 4
#: the fields the DianNao backend sets on a cluster copy, as on memcpyr (and the cluster's register field)
SEND_FIELDS = frozenset({"rd", "rs1", "dst_off", "src_off", "len", "count", "dst_stride", "src_stride"})


def share_card(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Mark the cluster fills every cluster makes alike as card fills (module docstring)."""
    if cluster_copy(spec) is None:
        return func
    body = _Share(spec).mutate(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


def cluster_copy(spec: isa.ISA) -> isa.Instruction | None:
    """The spec's synchronous copy into another cluster's SMEM (its written operand names a ``cluster``;
    DianNao's ``memcpyc``), or None."""
    for instr in spec.instructions.values():
        if instr.group != "dma" or instr.timing.asynchronous:
            continue
        clustered = [op for op in instr.operands if op.cluster is not None]
        if len(clustered) == 1 and clustered[0].name in instr.typed_semantics({}).writes and \
                cluster_register(instr) is not None and SEND_FIELDS <= {f.name for f in instr.fields}:
            return instr
    return None


def cluster_register(instr: isa.Instruction) -> str | None:
    """The field of ``instr`` whose register names the destination cluster (``cluster = "R[rc]"``)."""
    (op,) = [op for op in instr.operands if op.cluster is not None]
    if not isinstance(op.cluster, Access) or len(op.cluster.indices) != 1:
        return None
    name = getattr(op.cluster.indices[0], "id", None)
    return name if name in {f.name for f in instr.fields} else None


class _Share(AlignedFills):
    threads = frozenset({"cluster"})

    def __init__(self, spec: isa.ISA) -> None:
        super().__init__()
        self.spec, self.clusters = spec, 0

    def entered(self, s: ir.For) -> bool:   # two or more clusters to share with
        self.clusters = s.extent.value if isinstance(s.extent, ir.IntImm) else 0
        return self.clusters >= 2

    def fills(self, stmt: ir.Stmt | None) -> tuple[str, ...]:
        return _card_fills(stmt)

    def mutate_Attr(self, s: ir.Attr) -> ir.Stmt:
        if s.key == CLUSTER_FILL and self.aligned and not free_vars(s.body) & self.thread_vars and \
                self._pays(s.body):
            return ir.Attr(CARD_FILL, s.value, s.body)
        return self.generic_mutate(s)

    def _pays(self, fill: ir.Stmt) -> bool:
        """Rule 5 of the module docstring, from the spec's timing of the fill's copies, its cluster copy and
        its barrier (a fill whose copies' timing cannot be read is not shared)."""
        spec, others = self.spec, self.clusters - 1
        copies = []
        post_order_visit(fill, lambda x: copies.append(x) if isinstance(x, ir.TensorInsn) else None)
        try:
            saved = others * sum(_cycles(spec, insn) for insn in copies)
        except (KeyError, ValueError, isa.ISAError):
            return False
        barrier = next((i for i in spec.instructions.values() if i.group == "sync"), None)
        send = cluster_copy(spec)
        added = 2 * _constant(spec, barrier.timing.latency if barrier else None) + \
            others * _constant(spec, send.timing.latency)
        return saved >= PAYS * added


def _card_fills(stmt: ir.Stmt | None) -> tuple[str, ...]:
    """The card fills ``stmt`` runs, with the loops around them, as text; a condition whose branches run the
    same ones is no condition for them (so nested pieces of a partitioned cluster loop compare as equal)."""
    if stmt is None:
        return ()
    if isinstance(stmt, ir.Attr) and stmt.key == CARD_FILL:
        return (str(stmt),)
    if isinstance(stmt, ir.Seq):
        return tuple(line for x in stmt.stmts for line in _card_fills(x))
    if isinstance(stmt, ir.For):
        inner = _card_fills(stmt.body)
        return (f"for {stmt.var.name} in [{stmt.min}, +{stmt.extent}):", *inner, "end") if inner else ()
    if isinstance(stmt, ir.IfThenElse):
        then_case, else_case = _card_fills(stmt.then_case), _card_fills(stmt.else_case)
        return then_case if then_case == else_case else (f"if {stmt.cond}:", *then_case, "else:", *else_case,
                                                         "end")
    if isinstance(stmt, ir.Allocate | ir.Attr | ir.Let):
        return _card_fills(stmt.body)
    return ()


def _cycles(spec: isa.ISA, insn: ir.TensorInsn) -> int:
    """An IR instruction's cycles by its spec's timing expression, on its fields (constant; addresses count
    as 0, and a field wider than its encoding is fine: the backend splits such a copy)."""
    instr = spec.instruction(insn.name)
    fields = {f.name: 0 for f in instr.fields} | {f.name: f.value.value for f in insn.fields}
    types = {name: insn.regions[0].buffer.dtype.short for name in instr.types}
    cycles = instr.timing.cycles
    return 0 if cycles is None else int(evaluate(cycles, spec.scalar_env(fields, types)))


def _constant(spec: isa.ISA, e) -> int:
    """A timing expression that reads parameters alone (a latency), evaluated; 0 for none."""
    return 0 if e is None else int(evaluate(e, spec.scalar_env({}, {})))
