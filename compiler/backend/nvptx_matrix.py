"""The matrix instructions the NVPTX emitter lowers, read from their spec: which operand plays which role,
the tile shapes, and how a thread's part of each operand sits in registers.

    geo = geometry(spec, "wmma_m16n16k16_f16_f32")     # Geometry: m, n, k, roles a/b/c, element types
    elem, count = fragment_registers("a", "f16", (16, 16))   # <2 x half> x 8: LLVM's NVVM fragment ABI

Two families: NVVM's ``llvm.nvvm.wmma`` intrinsics (a warp, every operand in register fragments) and PTX's
``wgmma.mma_async`` (sm_90a: a warpgroup of 128 threads, a and b read from shared memory through matrix
descriptors, the accumulator in registers). The roles come from the instruction's semantics: the written
operand is the accumulator ``c``; of the two others, the one indexed by c's first index is ``a``.

Non-goals: emitting the instructions (``compiler.backend.nvptx_emit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

import isa
from compiler.backend.llvm_types import HALF, I32
from compiler.errors import CodegenError
from compiler.ir import nodes as n
from compiler.ir.cuda import WARP
from compiler.passes.inspector import instruction_accesses
from isa.instance import operand_shape


@dataclass(frozen=True)
class Geometry:
    """A warp- or warpgroup-level matrix instruction read from its spec: ``d[m, n] (+)= a[m, k] x b[k, n]``,
    with the operand that plays each role (``a``, ``b``, ``c``: c is read and written), each one's element
    type, the threads that run it together (32: a warp; 128: a warpgroup) and whether a and b are read from
    shared memory (``shared``: a warpgroup instruction's descriptors) or from register fragments."""

    instruction: str
    intrinsic: str
    m: int
    n: int
    k: int
    roles: dict[str, str]          # role -> operand name
    dtypes: dict[str, str]         # role -> element type (the spec's short name: f16, f32, s8, s32)
    threads: int = WARP
    shared: bool = False

    def shape(self, role: str) -> tuple[int, int]:
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[role]

    def name(self, op: str) -> str:
        """The NVVM name of the geometry, as in ``llvm.nvvm.wmma.m16n16k16.load.a...``."""
        return f"llvm.nvvm.wmma.m{self.m}n{self.n}k{self.k}.{op}"


#: The instruction families the emitter lowers: NVVM's wmma intrinsics (warp, register fragments) and PTX's
#: wgmma.mma_async (warpgroup, shared operands; emitted as inline PTX).
WMMA_PREFIX, WGMMA_PREFIX = "llvm.nvvm.wmma.", "wgmma.mma_async."


def geometry(spec: isa.ISA, name: str) -> Geometry:
    """The roles of instruction ``name``'s operands, from its semantics: the written operand is the
    accumulator ``c``; of the two others, the one indexed by c's first index is ``a``, the other ``b``."""
    instr = spec.instruction(name)
    shared = (instr.intrinsic or "").startswith(WGMMA_PREFIX)
    if not (instr.intrinsic or "").startswith(WMMA_PREFIX) and not shared:
        raise CodegenError(f"nvptx: {spec.name}.{name} names intrinsic {instr.intrinsic!r}, not a matrix "
                           f"instruction ({WMMA_PREFIX}* or PTX {WGMMA_PREFIX}*)")
    sem = instr.typed_semantics()
    if len(sem.writes) != 1:
        raise CodegenError(f"nvptx: {spec.name}.{name} writes {list(sem.writes)}; a matrix instruction "
                           "writes one accumulator")
    (c,) = sem.writes
    accesses = _operand_indices(sem)
    rows = accesses[c][0]
    others = [op.name for op in instr.operands if op.name != c]
    if len(others) != 2:
        raise CodegenError(f"nvptx: {spec.name}.{name} has operands {[o.name for o in instr.operands]}; "
                           "a matrix instruction has two factors and an accumulator")
    a = next((o for o in others if accesses[o][0] == rows), None)
    if a is None:
        raise CodegenError(f"nvptx: no operand of {spec.name}.{name} is indexed by its result's rows "
                           f"({rows})")
    b = next(o for o in others if o != a)
    insn = spec.insn(name)
    (m, k), (_, ncols) = (tuple(operand_shape(spec, insn, x)) for x in (a, b))
    roles = {"a": a, "b": b, "c": c}
    kinds = {r: instr.operand(o).kind for r, o in roles.items()}
    want = {"a": "tensor", "b": "tensor", "c": "register"} if shared else dict.fromkeys(roles, "register")
    if kinds != want or instr.threads != (4 * WARP if shared else WARP):
        raise CodegenError(f"nvptx: {spec.name}.{name}: a {'warpgroup' if shared else 'warp'} matrix "
                           f"instruction has operands of kinds {want} and threads = "
                           f"{4 * WARP if shared else WARP}, not {kinds} and {instr.threads}")
    return Geometry(name, instr.intrinsic, m, ncols, k, roles,
                    {r: instr.operand(o).dtype for r, o in roles.items()}, instr.threads, shared)


def _operand_indices(sem) -> dict[str, tuple[str, ...]]:
    """Each operand's index variables, in the order the semantics writes them (``c[i, j]`` -> (i, j))."""
    return {name: tuple(str(i) for i in access.indices) for name, access in instruction_accesses(sem).items()}


def fragment_registers(role: str, dtype: str, shape: tuple[int, int], threads: int = WARP
                       ) -> tuple[ll.Type, int]:
    """The registers of one thread's part of a fragment, as LLVM's NVVM intrinsics pass them (LLVM's
    ``WMMA_REGS`` in IntrinsicsNVPTX.td): the ``threads`` of a warp (or warpgroup) share ``rows x cols``
    elements; an f16 factor of every k16 geometry (m16n16k16, m32n8k16, m8n32k16) is 16 halves per lane,
    replicated as Volta's quad pairs need, as eight ``<2 x half>``; an f16 accumulator two to a
    ``<2 x half>``; f32/s32 accumulators one per register; 8-bit factors four to an ``i32``."""
    per_lane = shape[0] * shape[1] // threads
    if dtype == "f16":
        return ll.VectorType(HALF, 2), 8 if role in ("a", "b") else per_lane // 2
    if dtype in ("f32", "s32"):
        return (ll.FloatType() if dtype == "f32" else I32), per_lane
    if dtype in ("s8", "u8"):
        return I32, per_lane // 4
    raise CodegenError(f"nvptx: no Tensor Core fragment of {dtype} elements (operand role {role})")


def operand_region(geo: Geometry, regions: dict[str, n.Region], role: str, text: str) -> n.Region:
    """The region of the operand playing ``role``, of the instruction's element type."""
    r = regions.get(geo.roles[role])
    if r is None:
        raise CodegenError(f"nvptx: {text}: no region for operand {geo.roles[role]}")
    if r.buffer.dtype.short != geo.dtypes[role]:
        raise CodegenError(f"nvptx: {text}: operand {r.operand} is {geo.dtypes[role]}, but buffer "
                           f"{r.buffer.name} holds {r.buffer.dtype.short}")
    return r

