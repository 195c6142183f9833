"""inject_virtual_thread: lower a ``vthread`` loop into one interleaved stream (TVM Sec. 3.5).

A loop bound to "vthread" holds n virtual threads, each a program whose tokens ``inject_sync`` has
already placed (per thread, none between threads). This pass removes the loop:

- every buffer allocated inside it gets one copy per thread (``res`` becomes ``res.vt0``, ``res.vt1``,
  ...), so the threads touch disjoint on-chip memory (TVM expands the allocation n times; separate
  buffers are the same memory plan, and keep each thread's conflicts its own);
- a host loop (one that holds tokens) whose bounds do not depend on the thread is kept once, and the
  threads are interleaved inside its body;
- a statement list is interleaved round-robin: its statements are cut into units, each a run of
  statements on one unit of the machine (the loads of an input chunk and of its weights, say) together
  with the pops just before it and the pushes just after it (a token between two host loops is a unit of
  its own), and every unit is emitted once per thread, thread 0 first, before the next unit. Keeping a
  thread's run together lets its GEMM start as soon as its own loads are done; a push does not end a run
  that the thread's next statements on the same machine unit continue (a thread's GEMMs and then its ALU
  epilogue stay together, so its store starts while the next thread computes);
- any other statement (an instruction, a micro-op nest, a run of DMAs) is a unit: copied per thread with
  the thread variable replaced by the thread's number.

Each thread's statements keep their order, so each thread computes what it computed alone. Every unit is
emitted for the threads in the same order, so on each token queue the pushes and the pops come in the
same thread order: the condition of Theorem 3.1, which ``check_token_order`` verifies on the program.
While one thread waits for its loads, the next thread's GEMM is already in the compute stream: the
latency hiding of Sec. 3.5.

Contract: the IR computes the same as before (the interpreter runs the threads in interleaved order;
they write disjoint outputs and, after this pass, disjoint buffers).
"""

from __future__ import annotations

import isa
from compiler.errors import LoweringError
from compiler.ir import nodes as ir
from compiler.ir.dae_tokens import DepToken
from compiler.ir.functor import IRMutator, free_vars, post_order_visit, substitute
from compiler.passes.inject_sync import insn_unit, is_pop


def inject_virtual_thread(func: ir.PrimFunc, spec: isa.ISA) -> ir.PrimFunc:
    """Replace every loop bound to "vthread" by its threads, interleaved (see the module docstring)."""

    def units_of(s: ir.Stmt) -> frozenset[str]:
        found: set[str] = set()
        post_order_visit(s, lambda x: found.add(insn_unit(spec, x)) if isinstance(x, ir.TensorInsn) else None)
        return frozenset(found)

    body = _Lower(units_of).mutate(func.body)
    return func if body is func.body else ir.PrimFunc(func.name, func.params, body, func.attrs)


class _Lower(IRMutator):
    def __init__(self, units_of) -> None:
        self.units_of = units_of

    def mutate_For(self, s: ir.For) -> ir.Stmt:
        if s.thread != "vthread":
            return self.generic_mutate(s)
        extent = s.extent.value if isinstance(s.extent, ir.IntImm) else None
        start = s.min.value if isinstance(s.min, ir.IntImm) else None
        if extent is None or start is None or extent < 1:
            raise LoweringError(f"inject_virtual_thread: vthread loop {s.var.name} needs constant bounds, "
                                f"got min {s.min} and extent {s.extent}")
        body = self.mutate(s.body)   # threads nested inside threads: the inner ones first
        threads = [ir.const(start + t, s.var.dtype) for t in range(extent)]
        return _Interleave(s.var, threads, self.units_of).stmt(body, {})


class _Interleave:
    """The threads of one vthread loop: its variable and the value it takes in each thread."""

    def __init__(self, var: ir.Var, threads: list[ir.Expr], units_of) -> None:
        self.var = var
        self.threads = threads
        self.units_of = units_of

    def stmt(self, s: ir.Stmt, copies: dict[ir.Buffer, list[ir.Buffer]]) -> ir.Stmt:
        if isinstance(s, ir.Allocate):
            own = [ir.Buffer(f"{s.buffer.name}.vt{t}", s.buffer.shape, s.buffer.dtype, s.buffer.scope)
                   for t in range(len(self.threads))]
            body = self.stmt(s.body, {**copies, s.buffer: own})
            for b in reversed(own):
                body = ir.Allocate(b, body)
            return body
        if isinstance(s, ir.For) and _has_tokens(s):
            if self.var in free_vars(s.min) | free_vars(s.extent):
                raise LoweringError(f"inject_virtual_thread: the bounds of loop {s.var.name} depend on the "
                                    f"virtual thread {self.var.name}, so the threads cannot share it")
            return ir.For(s.var, s.min, s.extent, self.stmt(s.body, copies), s.kind, s.thread)
        if isinstance(s, ir.Seq):
            out: list[ir.Stmt] = []
            for unit in _units(list(s.stmts), self.units_of):
                if len(unit) == 1 and _is_host(unit[0]):
                    out.append(self.stmt(unit[0], copies))
                else:
                    out += [self.copy(x, t, copies) for t in range(len(self.threads)) for x in unit]
            return ir.seq(*out)
        return ir.seq(*(self.copy(s, t, copies) for t in range(len(self.threads))))

    def copy(self, s: ir.Stmt, t: int, copies: dict[ir.Buffer, list[ir.Buffer]]) -> ir.Stmt:
        """Thread ``t``'s instance of ``s``: its number for the variable, its copies of the buffers."""
        mine = {b: own[t] for b, own in copies.items()}
        return _Rename(mine).mutate(substitute(s, {self.var: self.threads[t]}))


def _units(stmts: list[ir.Stmt], units_of) -> list[list[ir.Stmt]]:
    """``stmts`` cut into units: pops, a run of statements on one unit of the machine with no token
    between them, pushes. A host statement (a loop or allocation that holds tokens) and the tokens next to
    it are units of their own."""
    units: list[list[ir.Stmt]] = []
    runs: list[frozenset[str] | None] = []   # the machine units of each unit's statements (None: closed)
    pending: list[ir.Stmt] = []   # pops waiting for their statement

    def close(new: list[list[ir.Stmt]]) -> None:
        units.extend(new)
        runs.extend([None] * len(new))

    for s in stmts:
        if is_pop(s):
            pending.append(s)
        elif isinstance(s, DepToken):   # a push ends the unit of the statement before it
            if pending or not units or _is_host(units[-1][-1]):
                close([[x] for x in [*pending, s]])
                pending = []
            else:   # the thread's next statements on the same machine unit may follow in this unit
                units[-1].append(s)
        elif _is_host(s):
            close([[x] for x in [*pending, s]])
            pending = []
        else:
            machine = units_of(s)
            if not pending and runs and runs[-1] is not None and runs[-1] == machine and len(machine) == 1:
                units[-1].append(s)
            else:
                units.append([*pending, s])
                runs.append(machine)
                pending = []
    close([[x] for x in pending])
    return units


def _is_host(s: ir.Stmt) -> bool:
    """Whether the threads are interleaved inside ``s`` rather than around it."""
    return isinstance(s, ir.For | ir.Allocate | ir.Seq) and _has_tokens(s)


def _has_tokens(s: ir.Stmt) -> bool:
    found = []
    post_order_visit(s, lambda node: found.append(node) if isinstance(node, DepToken) else None)
    return bool(found)


class _Rename(IRMutator):
    def __init__(self, mapping: dict[ir.Buffer, ir.Buffer]) -> None:
        self.mapping = mapping

    def mutate_buffer(self, buffer: ir.Buffer) -> ir.Buffer:
        return self.mapping.get(buffer, buffer)
