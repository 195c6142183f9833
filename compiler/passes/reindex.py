"""TensorIR's mapping of an operator onto a tensor intrinsic (Feng et al., ASPLOS 2023, Sec. 4.2): ReIndex and
characteristic vectors.

A multiply-accumulate operator ``out[v0] = sum(A[g1(v)] * B[g2(v)])`` (a conv of any dimension, dilated,
grouped, a batch matmul, a GEMV, ...) rarely has the intrinsic's form ``O[x, y] += I1[x, k] * I2[y, k]``.
TensorIR reaches it in three steps, implemented here:

1. **Compute isomorphism**: the operator's body and the intrinsic's are the same tree (the one matcher,
   through ``inspector.compute_binding``), which binds each intrinsic operand to one access of the operator.
2. **ReIndex**: each input access ``A[g(v)]`` becomes a buffer ``Â[v_A]`` indexed by the iterators themselves
   (``Â[v_A] = A[g(v)]``, a gather), so that every access is a list of bare iterators.
3. **Characteristic vectors**: ``χ(v)`` says in which operands (output first, then the inputs) iterator ``v``
   appears. The intrinsic's iterators have distinct vectors; each is mapped to the fusion, in loop order, of
   every operator iterator with the same vector. An operator iterator whose vector is none of the intrinsic's
   but appears in the output and every input (a batch, a group) stays an outer loop over separate intrinsic
   problems. Any other iterator (a reduction only one input sees, an intrinsic iterator with no operator
   iterator of its vector, as in a depthwise conv against a matmul) means there is no mapping, and
   ``NotApplicable`` says which.

``IntrinsicMapping.reindex`` gathers numpy arrays of the operator's inputs into the intrinsic's canonical
operands ``[outer..., fused extents in the order the intrinsic operand names its indices]``; ``restore`` turns
the canonical output back into the operator's. Padding the fused extents to the instruction's blocks and the
instruction's own operand layout are the target's layout transforms (``compiler.ops.vita.pack_dense``, ...).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

import isa
from compiler import te
from compiler.arith import linear_form
from compiler.ir import dtypes
from compiler.ir import nodes as ir
from compiler.ir.functor import free_vars
from compiler.passes.inspector import Access, NotApplicable, compute_binding, instruction_accesses
from isa.lang import tree as t


@dataclass(frozen=True)
class Iterator:
    """An iterator of the operator: its variable, extent and characteristic vector (output, inputs...)."""

    var: ir.Var
    extent: int
    chi: tuple[int, ...]


@dataclass(frozen=True)
class IntrinsicMapping:
    """How an operator maps onto an intrinsic: ``groups[index]`` are the operator iterators fused (outer
    first) into the intrinsic's index ``index``; ``outer`` the iterators left as loops around separate
    problems."""

    instruction: str
    groups: dict[str, tuple[Iterator, ...]]
    outer: tuple[Iterator, ...]
    operands: dict[str, Access]                 # intrinsic operand -> the operator's access it binds to
    layouts: dict[str, tuple[str, ...]]         # intrinsic operand -> its index names, in order
    output: str                                 # the intrinsic's output operand
    out_axes: tuple[ir.Var, ...]                # the operator output's axes, in order

    def extent(self, index: str) -> int:
        """The fused extent the intrinsic's index ``index`` runs over."""
        return math.prod(it.extent for it in self.groups[index])

    @property
    def outer_extent(self) -> int:
        return math.prod(it.extent for it in self.outer)

    def shape(self, operand: str) -> tuple[int, ...]:
        """The canonical operand's shape: the outer problems, then its indices' fused extents."""
        return (self.outer_extent, *(self.extent(i) for i in self.layouts[operand]))

    def reindex(self, arrays: dict[str, np.ndarray], operand: str) -> np.ndarray:
        """ReIndex and fuse: the canonical ``operand`` gathered from the operator's input ``arrays`` (by
        buffer name), shape ``shape(operand)``."""
        access = self.operands[operand]
        loops = [*self.outer, *(it for i in self.layouts[operand] for it in self.groups[i])]
        grid = np.ix_(*(np.arange(it.extent) for it in loops))
        position = dict(zip((it.var for it in loops), grid, strict=True))
        index = []
        for expr in access.indices:
            form = linear_form(expr)
            value: np.ndarray | int = form.const
            for atom, coef in form.terms.items():
                value = value + coef * position[atom]
            index.append(np.broadcast_to(value, tuple(it.extent for it in loops)))
        return np.asarray(arrays[access.buffer.name])[tuple(index)].reshape(self.shape(operand))

    def restore(self, canonical: np.ndarray) -> np.ndarray:
        """The operator's output from the canonical output (shape ``shape(output)``)."""
        loops = [*self.outer, *(it for i in self.layouts[self.output] for it in self.groups[i])]
        unfused = np.asarray(canonical).reshape(tuple(it.extent for it in loops))
        order = [next(k for k, it in enumerate(loops) if it.var is v) for v in self.out_axes]
        return unfused.transpose(order)

    def __str__(self) -> str:
        fused = ", ".join(f"{i} <- fuse({', '.join(it.var.name for it in its)}) ({self.extent(i)})"
                          for i, its in self.groups.items())
        outer = ", ".join(f"{it.var.name} ({it.extent})" for it in self.outer) or "none"
        return f"{self.instruction}: {fused}; outer loops: {outer}"


def map_to_intrinsic(op: te.ComputeOp, spec: isa.ISA, instruction: str) -> IntrinsicMapping | NotApplicable:
    """The mapping of ``op`` (``out[axes] = sum(reduce axes, A[...] * B[...])``, accesses affine in the
    axes) onto ``instruction`` of ``spec`` by characteristic vectors, or why there is none.

    Implements TensorIR Sec. 4.2 (ReIndex, characteristic vectors, the mapping rule; the fusion order is the
    operator's loop order, TensorIR's one default).
    """
    out = Access(op.output.buffer, tuple(iv.var for iv in op.axis))
    binding = compute_binding(out, op.body, spec, instruction)
    if isinstance(binding, NotApplicable):
        return binding
    sem = spec.instruction(instruction).typed_semantics()
    accesses = instruction_accesses(sem)
    output = sem.statements[0].target.tensor
    inputs = [name for name in accesses if name != output]
    order = [output, *inputs]
    layouts = {name: _index_names(accesses[name]) for name in order}
    intrinsic = {iv.name: tuple(int(iv.name in layouts[name]) for name in order) for iv in sem.indices}
    if len(set(intrinsic.values())) < len(intrinsic):
        return NotApplicable(instruction, "access", "two of the intrinsic's indices have the same "
                             f"characteristic vector ({intrinsic}); the mapping rule needs them distinct")
    for name in inputs:
        for expr in binding[name].indices:
            form = linear_form(expr)
            if form is None or any(atom not in _axes(op) for atom in form.terms):
                return NotApplicable(instruction, "access", f"the index {expr} of "
                                     f"{binding[name].buffer.name} is not affine in the operator's iterators")
    iterators = [Iterator(iv.var, iv.extent, tuple(int(iv.var in _vars(binding[name])) for name in order))
                 for iv in (*op.axis, *op.reduce_axis)]
    groups = {index: tuple(it for it in iterators if it.chi == chi) for index, chi in intrinsic.items()}
    for index, group in groups.items():
        if not group:
            return NotApplicable(instruction, "access", f"no iterator of the operator appears where the "
                                 f"intrinsic's index {index} does (characteristic vector {intrinsic[index]})")
    outer = tuple(it for it in iterators if it.chi not in intrinsic.values())
    for it in outer:
        if it.extent > 1 and not all(it.chi):   # a loop of one iteration fits anywhere
            where = ", ".join(n for n, c in zip(order, it.chi, strict=True) if c) or "no operand"
            return NotApplicable(instruction, "access", f"iterator {it.var.name} appears in {where} only: "
                                 "neither an index of the intrinsic nor a loop around separate problems")
    return IntrinsicMapping(instruction, groups, outer, {n: binding[n] for n in order}, layouts, output,
                            out.indices)


def canonical_gemm(data: str, weight: str) -> tuple[isa.ISA, str]:
    """(spec, instruction) of the canonical GEMM ``c[m, n] += i32(a[m, k]) * i32(b[n, k])`` on ``data`` and
    ``weight`` elements (short dtype names, "u8", "i8", "i16"): what an operator maps onto for a target whose
    GEMM is a whole schedule (the CPU's, of vpdpbusd) rather than one instruction."""
    return _canonical(dtypes.dtype(data).short, dtypes.dtype(weight).short), "GEMM"


def canonical_dot(data: str, weight: str) -> tuple[isa.ISA, str]:
    """(spec, instruction) of the canonical lane-wise dot ``c[m, n] += i32(a[m, n, k]) * i32(b[n, k])``:
    every lane n sums its own data against its own weights, as a depthwise convolution's channels do (its
    iterators map: pixels to m, channels to n, window to k). A register dot instruction (vpdpbusd: each of
    16 lanes the sum of 4 products of its own bytes) computes this form natively; a GEMM needs the data
    shared by all lanes, which a depthwise convolution does not have."""
    return _canonical(dtypes.dtype(data).short, dtypes.dtype(weight).short), "DOT"


@functools.lru_cache(maxsize=16)
def _canonical(data: str, weight: str) -> isa.ISA:
    """The canonical intrinsics of ``data`` x ``weight`` elements: GEMM and DOT."""
    def operands(a_shape: str) -> str:
        return ", ".join(f'{{ name = "{name}", space = "MEM", dtype = "{dt}", shape = {shape} }}'
                         for name, dt, shape in (("c", "i32", "[4, 4]"), ("a", data, a_shape),
                                                 ("b", weight, "[4, 4]")))

    def instruction(name: str, opcode: int, summary: str, a_shape: str, semantics: str) -> str:
        return (f'[instructions.{name}]\nsummary = "{summary}"\nformat = "f"\n'
                f'fixed = {{ opcode = {opcode} }}\noperands = [{operands(a_shape)}]\n'
                f'indices = {{ m = "spatial", n = "spatial", k = "reduce" }}\nsemantics = "{semantics}"\n\n')

    text = ('[isa]\nname = "canonical"\nsummary = "the canonical intrinsics operators map onto"\n'
            'insn_bits = 8\n\n[formats.f]\nfields = [{ name = "opcode", bits = 8 }]\n\n'
            '[spaces.MEM]\nbytes = 1024\n\n'
            + instruction("GEMM", 1, "c += a x b^T", "[4, 4]", "c[m, n] += i32(a[m, k]) * i32(b[n, k])")
            + instruction("DOT", 2, "each lane n: c += its data . its weights", "[4, 4, 4]",
                          "c[m, n] += i32(a[m, n, k]) * i32(b[n, k])"))
    return isa.load_spec_text(text, "canonical.toml")


def _index_names(access: t.Access) -> tuple[str, ...]:
    """The index names an intrinsic operand's access uses, in order of first appearance."""
    names: dict[str, None] = {}
    for index in access.indices:
        for node in t.walk(index):
            if isinstance(node, t.Name) and node.kind == "index":
                names.setdefault(node.id)
    return tuple(names)


def _axes(op: te.ComputeOp) -> set[ir.Var]:
    return {iv.var for iv in (*op.axis, *op.reduce_axis)}


def _vars(access: Access) -> set[ir.Var]:
    return {v for index in access.indices for v in free_vars(index)}
