"""VITA backend: lowered IR (after inject_dma, tensorize_tiles, inject_sync) -> a VITA Program for sim/vita.

VTA has no control flow: its runtime runs the kernel's outer loops on the host and emits one instruction
stream. So does this backend, at compile time:

- serial and bound loops around instructions are unrolled; fields and offsets are evaluated;
- a nest of loops around one GEMM/ALU tile instruction (what ``tensorize_tiles`` leaves) becomes ONE
  instruction with micro-ops, as VTA's runtime builds them: the two outermost loops become
  ``iter_out``/``iter_in`` with each operand's step as its factor, the inner loops are enumerated into
  the micro-op list (``dst_idx``, ``src_idx``, ``wgt_idx``, in tiles). Which micro-op field and which
  factor fields an operand has are the spec's (isa/micro_ops.py), so only the fields of the operands the
  instruction has are written; a format without one is a ``LoweringError`` naming the instruction and the
  field. Equal micro-op lists are stored once; all of them are loaded by one LOAD_UOP at the start;
- on-chip buffers get tile addresses in their space (nested allocations stack; capacity is checked);
  parameters get DRAM addresses aligned to the largest tile;
- ``push_dep`` sets the push flag of the pushing unit's last instruction, ``pop_dep`` the pop flag of its
  unit's next one; where a flag is taken or no instruction exists, a no-op of that unit carries it (a
  zero-sized LOAD_INP, LOAD_UOP or STORE_OUT, as VTA's runtime does);
- FINISH waits for a last token from the store unit.

``VitaKernel.tokens`` lists every push and pop with its queue, token and evaluated label, in program
order, for ``check_token_order``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

import isa
from compiler.arith import LinearForm, linear_form
from compiler.errors import LoweringError
from compiler.interp import evaluate
from compiler.ir import nodes as ir
from compiler.ir.dae_tokens import DAE_UNITS, DepToken
from compiler.ir.functor import substitute
from compiler.passes.check_token_order import Token
from compiler.passes.tensorize import space_of
from isa import micro_ops

#: (unit, other unit) -> the flag name suffix: "prev" is the unit before in load -> compute -> store.
_SIDE = {("load", "compute"): "next", ("compute", "load"): "prev", ("compute", "store"): "next",
         ("store", "compute"): "prev"}
_TILE_SPACES = {"INP": "INP_ELEM_BYTES", "WGT": "WGT_ELEM_BYTES", "ACC": "ACC_ELEM_BYTES"}
_NOOP = {"load": "LOAD_INP", "compute": "LOAD_UOP", "store": "STORE_OUT"}


@dataclass(frozen=True)
class VitaKernel:
    """A compiled VITA program, where each parameter lives in DRAM, and the tokens it pushes and pops."""

    program: isa.Program
    params: tuple[ir.Buffer, ...]
    addresses: dict[str, int]
    dram_bytes: int
    tokens: tuple[Token, ...] = field(default=(), repr=False)

    def dram_image(self, arrays: Mapping[str, np.ndarray] | list[np.ndarray]) -> np.ndarray:
        """A DRAM image with the micro-ops and the given parameter arrays (by name or in order)."""
        named = arrays if isinstance(arrays, Mapping) else \
            {b.name: a for b, a in zip(self.params, arrays, strict=False)}
        dram = np.zeros(self.dram_bytes, np.uint8)
        words = isa.binary.record_stream(self.program, "uop")
        dram[:len(words)] = np.frombuffer(words, np.uint8)
        for b in self.params:
            if b.name in named:
                raw = np.ascontiguousarray(named[b.name], dtype=b.dtype.numpy).view(np.uint8).reshape(-1)
                dram[self.addresses[b.name]:self.addresses[b.name] + raw.size] = raw
        return dram

    def read(self, dram: np.ndarray, name: str) -> np.ndarray:
        """Parameter ``name``'s array in a DRAM image (flat)."""
        b = next(p for p in self.params if p.name == name)
        nbytes = b.nbytes
        start = self.addresses[name]
        return dram[start:start + nbytes].view(b.dtype.numpy).reshape(b.shape)


def build_vita(func: ir.PrimFunc, spec: isa.ISA) -> VitaKernel:
    """Emit the VITA program of ``func`` (see the module docstring)."""
    return _Emitter(func, spec).run()


class _Emitter:
    def __init__(self, func: ir.PrimFunc, spec: isa.ISA) -> None:
        self.func, self.spec, self.p = func, spec, spec.params
        self.insns: list[dict] = []          # {"name", "unit", fields...}
        self.last: dict[str, int] = {}       # unit -> index of its last instruction
        self.pending: dict[str, list[tuple[str, Token]]] = {u: [] for u in DAE_UNITS}
        self.tokens: list[Token] = []
        self.uops: list[isa.Insn] = []
        self.uop_lists: dict[tuple, int] = {}
        self.alloc: dict[ir.Buffer, int] = {}
        self.top = {space: 0 for space in _TILE_SPACES}
        align = max(self.p[k] for k in _TILE_SPACES.values())
        self.addresses: dict[str, int] = {}
        self.uop_area = 0   # the micro-ops first, as many as the UOP buffer holds
        at = align * math.ceil(self.p["UOP_BUFF_DEPTH"] * self.p["UOP_ELEM_BYTES"] / align)
        for b in func.params:
            self.addresses[b.name] = at
            at += align * math.ceil(b.nbytes / align)
        self.dram_bytes = at
        self.forms: dict[int, tuple[ir.Expr, LinearForm | None]] = {}   # id -> (expression, affine form)

    # ---- the walk

    def run(self) -> VitaKernel:
        self.emit("LOAD_UOP", "compute", {})   # filled in at the end, when the micro-ops are known
        self.walk(self.func.body, {})
        for unit in ("load", "store"):
            while self.pending[unit]:
                self.emit(_NOOP[unit], unit, _zero_sized(_NOOP[unit]))
        if any(i["unit"] == "store" for i in self.insns):
            self.push("store", "compute", Token(-1, "push", "store", "compute", "finish", ()))
            finish = Token(-1, "pop", "store", "compute", "finish", ())
            self.pending["compute"].append((f"pop_{_SIDE[('compute', 'store')]}_dep", finish))
        self.emit("FINISH", "compute", {})
        n = len(self.uops)
        if n > self.p["UOP_BUFF_DEPTH"]:
            raise LoweringError(f"VITA: {n} micro-ops do not fit the UOP buffer ({self.p['UOP_BUFF_DEPTH']})")
        self.insns[0].update(dram_base=self.uop_area // self.p["UOP_ELEM_BYTES"], y_size=1, x_size=n,
                             x_stride=max(n, 1))
        insns = [self.spec.insn(i["name"], **{k: v for k, v in i.items() if k not in ("name", "unit")})
                 for i in self.insns]
        program = isa.Program(self.spec, insns, {"uop": self.uops})
        return VitaKernel(program, self.func.params, self.addresses, self.dram_bytes, tuple(self.tokens))

    def walk(self, s: ir.Stmt, env: dict[ir.Var, int]) -> None:
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.walk(x, env)
        elif isinstance(s, ir.Attr):
            self.walk(s.body, env)
        elif isinstance(s, ir.Allocate):
            self.allocate(s, env)
        elif isinstance(s, ir.For):
            if self.micro_op_nest(s):
                self.compute(s, env)
                return
            lo, ext = self.value(s.min, env), self.value(s.extent, env)
            for v in range(lo, lo + ext):
                self.walk(s.body, {**env, s.var: v})
        elif isinstance(s, ir.IfThenElse):   # a guard on host loop variables: decided now
            if self.value(s.cond, env):
                self.walk(s.then_case, env)
            elif s.else_case is not None:
                self.walk(s.else_case, env)
        elif isinstance(s, DepToken):
            label = tuple(self.value(x, env) for x in s.label)
            tok = Token(len(self.insns), s.action, s.src, s.dst, s.token, label)
            if s.action == "push":
                self.push(s.src, s.dst, tok)
            else:
                self.pending[s.dst].append((f"pop_{_SIDE[(s.dst, s.src)]}_dep", tok))
        elif isinstance(s, ir.TensorInsn):
            group = self.spec.instruction(s.name).group
            if group in ("load", "store"):
                self.dma(s, env)
            else:
                self.compute(s, env)
        else:
            raise LoweringError(f"VITA backend: cannot emit `{str(s).strip().splitlines()[0]}` "
                                f"(VITA runs only tensor instructions)")

    def value(self, e: ir.Expr, env: dict[ir.Var, int]) -> int:
        """``e``'s value at ``env``: from its affine form where it has one (read once per expression:
        the same fields and bounds are evaluated at every point of the unrolled loops), else evaluated."""
        if isinstance(e, ir.IntImm):
            return int(e.value)
        form = self.affine(e)
        if form is not None and all(v in env for v in form.terms):
            return form.const + sum(c * env[v] for v, c in form.terms.items())
        return int(evaluate(e, env))

    def affine(self, e: ir.Expr) -> LinearForm | None:
        """``e``'s linear form if every atom of it is a variable, else None (cached by the expression)."""
        cached = self.forms.get(id(e))
        if cached is None:
            form = linear_form(e)
            if form is not None and not all(isinstance(a, ir.Var) for a in form.terms):
                form = None
            cached = self.forms[id(e)] = (e, form)   # the expression kept, so that its id stays its own
        return cached[1]

    def allocate(self, s: ir.Allocate, env: dict[ir.Var, int]) -> None:
        space = space_of(s.buffer.scope)
        if space not in _TILE_SPACES:
            raise LoweringError(f"VITA backend: buffer {s.buffer.name} is in scope {s.buffer.scope!r}; VITA "
                                f"has {', '.join(k.lower() for k in _TILE_SPACES)}")
        nbytes = s.buffer.nbytes
        tiles = math.ceil(nbytes / self.p[_TILE_SPACES[space]])
        depth = self.p[f"{space}_BUFF_DEPTH"]
        base = self.top[space]
        if base + tiles > depth:
            raise LoweringError(f"VITA backend: {s.buffer.name} needs {tiles} {space} tiles at {base}, but "
                                f"{space} has {depth}")
        self.alloc[s.buffer] = base
        self.top[space] = base + tiles
        self.walk(s.body, env)
        self.top[space] = base
        del self.alloc[s.buffer]

    # ---- instructions

    def emit(self, name: str, unit: str, fields: dict[str, int]) -> None:
        """Append an instruction of ``unit``, carrying the pops waiting for it (one per queue; no-ops
        before it carry the rest)."""
        flags = self.take_pops(unit)
        while self.pending[unit]:
            self.append(_NOOP[unit], unit, _zero_sized(_NOOP[unit]), flags)
            flags = self.take_pops(unit)
        self.append(name, unit, fields, flags)

    def take_pops(self, unit: str) -> dict[str, int]:
        flags: dict[str, int] = {}
        waiting = self.pending[unit]
        while waiting and waiting[0][0] not in flags:
            flag, tok = waiting.pop(0)
            flags[flag] = 1
            self.tokens.append(Token(len(self.insns), tok.action, tok.src, tok.dst, tok.token, tok.label))
        return flags

    def append(self, name: str, unit: str, fields: dict[str, int], flags: dict[str, int]) -> None:
        self.insns.append({"name": name, "unit": unit, **fields, **flags})
        self.last[unit] = len(self.insns) - 1

    def push(self, src: str, dst: str, tok: Token) -> None:
        flag = f"push_{_SIDE[(src, dst)]}_dep"
        k = self.last.get(src)
        if k is None or self.insns[k].get(flag):
            self.append(_NOOP[src], src, _zero_sized(_NOOP[src]), self.take_pops(src))
            k = self.last[src]
        self.insns[k][flag] = 1
        self.tokens.append(Token(k, tok.action, tok.src, tok.dst, tok.token, tok.label))

    def dma(self, s: ir.TensorInsn, env: dict[ir.Var, int]) -> None:
        instr = self.spec.instruction(s.name)
        fields = {f.name: self.value(f.value, env) for f in s.fields}
        regions = {r.operand: r for r in s.regions}
        sram, dram = regions["sram"], regions["dram"]
        space = instr.operand("sram").space
        tile_bytes = self.p[_TILE_SPACES[space]]
        item = sram.buffer.dtype.bits // 8
        offset = self.value(sram.offset, env) * item
        if offset % tile_bytes:
            raise LoweringError(f"VITA backend: {s.name} starts {offset} bytes into {sram.buffer.name}, "
                                f"not at a tile")
        fields["sram_base"] = self.alloc[sram.buffer] + offset // tile_bytes
        dram_item = dram.buffer.dtype.bits // 8
        dram_tile = tile_bytes // item * dram_item
        start = self.addresses[dram.buffer.name] + self.value(dram.offset, env) * dram_item
        if start % dram_tile:
            raise LoweringError(f"VITA backend: {s.name} reads DRAM byte {start}, not a multiple of its "
                                f"{dram_tile}-byte tiles")
        fields["dram_base"] = start // dram_tile
        self.emit(s.name, instr.timing.unit, fields)

    # ---- micro-op nests

    def micro_op_nest(self, s: ir.For) -> bool:
        while isinstance(s, ir.For):
            s = s.body
        return isinstance(s, ir.TensorInsn) and self.spec.instruction(s.name).group in ("gemm", "alu")

    def compute(self, s: ir.Stmt, env: dict[ir.Var, int]) -> None:
        loops = []
        while isinstance(s, ir.For):
            loops.append((s.var, self.value(s.min, env), self.value(s.extent, env)))
            s = s.body
        instr = self.spec.instruction(s.name)
        fields = {f.name: self.value(f.value, env) for f in s.fields}
        try:   # where the spec says each operand of a micro-op lies: its micro-op field and loop factors
            where = {a.operand: a for a in micro_ops.addresses(self.spec, instr)}
        except micro_ops.MicroOpError as e:
            raise LoweringError(f"VITA backend: cannot emit {s.name} as a micro-op loop: {e}") from None
        loop_vars = {v for v, _, _ in loops}
        steps: dict[str, tuple[int, dict[ir.Var, int]]] = {}
        for r in s.regions:
            tile = self.p[_TILE_SPACES[instr.operand(r.operand).space]] // (r.buffer.dtype.bits // 8)
            form = self.affine(r.offset)
            if form is not None:   # the enclosing loops' values folded into the constant
                form = LinearForm({v: c for v, c in form.terms.items() if v not in env},
                                  form.const + sum(c * env[v] for v, c in form.terms.items() if v in env))
            else:
                form = linear_form(substitute(r.offset, {v: ir.const(x, v.dtype) for v, x in env.items()}))
            if any(a not in loop_vars for a in form.terms):
                raise LoweringError(f"VITA backend: operand {r.operand} of {s.name} is not affine in its "
                                    f"loops")
            coefs = {v: form.coef(v) for v in loop_vars}
            if form.const % tile or any(c % tile for c in coefs.values()):
                raise LoweringError(f"VITA backend: operand {r.operand} of {s.name} steps by part of a tile")
            base = self.alloc[r.buffer] + form.const // tile
            steps[r.operand] = (base, {v: c // tile for v, c in coefs.items()})
        iters = loops[:2] + [(None, 0, 1)] * (2 - min(len(loops), 2))
        inner = loops[2:]
        key_fields = {}
        for k, (var, _lo, ext) in enumerate(iters):
            key_fields[("iter_out", "iter_in")[k]] = ext
            for operand, (_, coefs) in steps.items():
                key_fields[where[operand].factors[k]] = coefs.get(var, 0) if var is not None else 0
        lows = {var: lo for var, lo, _ in iters if var is not None}
        # the inner loops' points in order (the last loop fastest), and each operand's tile index at each
        points = np.stack(np.meshgrid(*(np.arange(lo, lo + ext, dtype=np.int64) for _, lo, ext in inner),
                                      indexing="ij"), -1).reshape(-1, len(inner)) if inner else \
            np.zeros((1, 0), np.int64)
        indices = {}
        for operand, (base, coefs) in steps.items():
            start = base + sum(c * lows.get(v, 0) for v, c in coefs.items() if v in lows)
            scale = np.array([coefs.get(var, 0) for var, _, _ in inner], np.int64)
            indices[where[operand].index] = start + points @ scale
        key = self.uop_key(indices, len(points))
        begin = self.uop_lists.get(key)
        if begin is None:   # a new list: its micro-ops built (and each field checked) once
            begin = self.uop_lists[key] = len(self.uops)
            self.uops += [self.spec.insn("uop", **{name: int(column[k]) for name, column in indices.items()})
                          for k in range(len(points))]
        fields.update(key_fields, uop_bgn=begin, uop_end=begin + len(points))
        self.emit(s.name, instr.timing.unit, fields)

    def uop_key(self, indices: dict[str, np.ndarray], count: int) -> tuple:
        """What makes two micro-op lists equal: every field of the spec's micro-op record at each micro-op
        (a field an instruction does not write holds its default)."""
        return (count, *(indices.get(f.name, np.full(count, f.default or 0, np.int64)).tobytes()
                         for f in self.spec.data["uop"].format.fields))


def _zero_sized(name: str) -> dict[str, int]:
    """The fields of a no-op ``name``: a DMA that moves nothing."""
    return {"y_size": 0, "x_size": 0}
