"""Functional state and execution of DianNao tensor instructions: the card's memories and one numpy call per
instruction.

Memories are flat uint8 arrays: one GMEM for the card, one SMEM per cluster, one NMEM and one WMEM per core.
Operands are typed views into them at the byte address and strides the ISA spec gives. Two ways run an
instruction, and tests/sim/diannao/test_functional.py proves them equal on random instances:

- ``execute_generic``: the spec's semantics through ``isa.execute`` (the reference);
- ``FAST_PATHS``: hand-written numpy for the instructions kernels run most (copies, vector ops, conv,
  matmul), several times cheaper than the generic executor, each keyed by the contract it implements
  (``fast_path(instr)``: by semantics and operands, never by mnemonic). Any other instruction, or one whose
  spec changed what it computes, runs generically.

Neither checks the spec's constraints: the machine does that once per instruction before the first run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import isa
from isa.dtypes import DTYPES
from isa.lang.scalar import evaluate
from sim.core.contract import fast_path_for


class CardMemory:
    """Every memory of one card, for the ISA ``spec`` (its spaces give the sizes and the space codes).

    ``gmem`` may be an existing 1-D uint8 array (used in place, not copied). Memories of cores that are not
    launched are never touched; numpy's zero-filled arrays only take real memory where written.
    """

    def __init__(self, spec: isa.ISA, gmem: np.ndarray | None = None) -> None:
        p = spec.params
        self.spec = spec
        self.cores_per_cluster = p["CORES_PER_CLUSTER"]
        cores = p["CLUSTERS"] * self.cores_per_cluster
        sizes = {name: s.bytes for name, s in spec.spaces.items()}
        if gmem is None:
            gmem = np.zeros(sizes["GMEM"], np.uint8)
        if gmem.dtype != np.uint8 or gmem.ndim != 1 or gmem.size != sizes["GMEM"]:
            raise ValueError(f"GMEM must be a 1-D uint8 array of {sizes['GMEM']} bytes, but got {gmem.dtype} "
                             f"with shape {gmem.shape}")
        self.gmem = gmem
        self.smem = [np.zeros(sizes["SMEM"], np.uint8) for _ in range(p["CLUSTERS"])]
        self.nmem = [np.zeros(sizes["NMEM"], np.uint8) for _ in range(cores)]
        self.wmem = [np.zeros(sizes["WMEM"], np.uint8) for _ in range(cores)]
        self.names = {s.id: name for name, s in spec.spaces.items()}  # space code -> "GMEM", ...

    def space(self, code: int, core: int, cluster: int | None = None) -> np.ndarray:
        """The memory that space ``code`` means for global core index ``core``; with ``cluster``, the copy
        of SMEM of that cluster (an operand's ``cluster``; the decoder allows it on SMEM only)."""
        name = self.names[code]
        if name == "GMEM":
            return self.gmem
        if name == "SMEM":
            return self.smem[core // self.cores_per_cluster if cluster is None else cluster]
        return self.nmem[core] if name == "NMEM" else self.wmem[core]

    def home(self, code: int, core: int) -> tuple[int, int]:
        """Which copy of space ``code`` global core ``core`` addresses, as ``space`` picks it: (code, 0 for
        GMEM, its cluster for SMEM, the core for NMEM and WMEM)."""
        name = self.names[code]
        return code, 0 if name == "GMEM" else core // self.cores_per_cluster if name == "SMEM" else core


def _space_code(spec: isa.ISA, op: isa.Operand, fields: dict[str, int]) -> int:
    return fields[op.space] if op.space_is_field else spec.spaces[op.space].id


def operand_views(spec: isa.ISA, insn: isa.Insn, memory: CardMemory, core: int,
                  registers: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Typed views of ``insn``'s memory operands into ``memory`` (as core ``core`` sees it, with register
    files ``registers`` for addresses that read them), at the address, shape and strides its spec gives.
    Raises ``IndexError`` naming the operand if one reaches outside its memory."""
    spec_instr = spec.instruction(insn.name)
    types = spec.types_of(insn)
    fields = insn.values
    env = spec.scalar_env(fields, types, registers or {})
    views = {}
    for op in spec_instr.operands:
        if op.kind != "tensor":
            continue
        dt = np.dtype(DTYPES[spec_instr.operand_dtype(op, types)].numpy)
        shape = tuple(int(evaluate(e, env)) for e in op.shape)
        if op.strides is not None:
            elem_strides = [int(evaluate(e, env)) for e in op.strides]
        else:
            elem_strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
        addr = int(evaluate(op.addr, env))
        cluster = None if op.cluster is None else int(evaluate(op.cluster, env))
        if cluster is not None and not 0 <= cluster < len(memory.smem):
            raise IndexError(f"operand '{op.name}' is in cluster {cluster}, but the card has clusters 0 to "
                             f"{len(memory.smem) - 1}")
        mem = memory.space(_space_code(spec, op, fields), core, cluster)
        last = addr + sum((n - 1) * s for n, s in zip(shape, elem_strides, strict=True)) * dt.itemsize
        if min(shape, default=1) > 0 and (addr < 0 or last + dt.itemsize > mem.size):
            raise IndexError(f"operand '{op.name}' ({shape} {dt} at byte {addr}) reaches outside its memory "
                             f"of {mem.size} bytes")
        views[op.name] = np.ndarray(shape, dt, buffer=mem, offset=addr if mem.size else 0,
                                    strides=tuple(s * dt.itemsize for s in elem_strides))
    return views


def execute_generic(spec: isa.ISA, insn: isa.Insn, memory: CardMemory, core: int,
                    registers: dict[str, np.ndarray] | None = None) -> None:
    """Run ``insn`` on ``memory`` through the spec's semantics (``isa.execute``), as core ``core`` with
    register files ``registers`` (needed where an operand's address reads a register)."""
    views = operand_views(spec, insn, memory, core, registers)
    declared = {op.name for op in spec.instruction(insn.name).operands}
    files = {name: regs for name, regs in (registers or {}).items() if name in declared}
    for name, value in isa.execute(spec, insn, {**files, **views}).items():
        views[name][...] = value


# ----------------------------------------------------------------------------------------------- fast paths
# Each takes (memory, core, fields, dtype of T or None) and writes its results in place. For an instruction
# whose operand addresses read registers (memcpyr), the machine passes fields where each such operand's name
# maps to its address, as memcpy's own fields do.

def _typed(mem: np.ndarray, addr: int, n: int, dt: np.dtype) -> np.ndarray:
    return mem[addr:addr + n * dt.itemsize].view(dt)


def _rows(mem: np.ndarray, addr: int, count: int, length: int, stride: int) -> np.ndarray:
    return np.ndarray((count, length), np.uint8, buffer=mem, offset=addr, strides=(stride, 1))


def _memcpy(memory: CardMemory, core: int, f: dict[str, int], dt) -> None:
    dst = memory.space(f["dst_space"], core)
    src = memory.space(f["src_space"], core)
    count, length = f["count"], f["len"]
    if count == 1 or (f["dst_stride"] == length and f["src_stride"] == length):
        n = count * length
        dst[f["dst"]:f["dst"] + n] = src[f["src"]:f["src"] + n]
    else:
        _rows(dst, f["dst"], count, length, f["dst_stride"])[...] = _rows(src, f["src"], count, length,
                                                                         f["src_stride"])


def _vzero(memory: CardMemory, core: int, f: dict[str, int], dt) -> None:
    memory.space(f["dst_space"], core)[f["dst"]:f["dst"] + f["n"]] = 0


def _binary(ufunc) -> Callable:
    def run(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
        mem, n = memory.nmem[core], f["n"]
        ufunc(_typed(mem, f["a"], n, dt), _typed(mem, f["b"], n, dt), out=_typed(mem, f["dst"], n, dt))
    return run


def _relu(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
    x = _typed(memory.nmem[core], f["dst"], f["n"], dt)
    np.maximum(x, dt.type(0), out=x)


def _vabs(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
    x = _typed(memory.nmem[core], f["dst"], f["n"], dt)
    np.abs(x, out=x)


def _conv_parts(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype, acc: np.dtype):
    """The input as sliding windows and the weights as a (kh, kw, cin, cout) matrix, both in ``acc``."""
    h, w, cin, cout, kh, kw, s = (f[k] for k in ("h", "w", "cin", "cout", "kh", "kw", "s"))
    inp = _typed(memory.nmem[core], f["inp"], h * w * cin, dt).reshape(h, w, cin)
    block = _block_of(memory)
    wgt = _typed(memory.wmem[core], f["wgt"], kh * kw * cin * cout, dt)
    wgt = wgt.reshape(cout // block, kh, kw, cin, block)
    wgt = wgt.transpose(1, 2, 3, 0, 4).reshape(kh, kw, cin, cout)
    windows = np.lib.stride_tricks.sliding_window_view(inp, (kh, kw), axis=(0, 1))[::s, ::s]
    # windows: (ho, wo, cin, kh, kw)
    return windows.astype(acc), wgt.astype(acc), (windows.shape[0], windows.shape[1], cout)


def _conv(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
    windows, wgt, shape = _conv_parts(memory, core, f, dt, np.dtype(np.float32))
    out = np.tensordot(windows, wgt.transpose(2, 0, 1, 3), axes=([2, 3, 4], [0, 1, 2]))
    _typed(memory.nmem[core], f["out"], out.size, dt)[...] = out.astype(dt).reshape(-1)


def _qconv(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
    windows, wgt, shape = _conv_parts(memory, core, f, dt, np.dtype(np.int64))
    out = np.tensordot(windows, wgt.transpose(2, 0, 1, 3), axes=([2, 3, 4], [0, 1, 2]))
    # i32 products and sums wrap; a sum modulo 2**32 does not depend on the order: int64 then wrap is exact
    _typed(memory.nmem[core], f["out"], out.size, np.dtype(np.int32))[...] = out.astype(np.int32).reshape(-1)


def _matmul(memory: CardMemory, core: int, f: dict[str, int], dt: np.dtype) -> None:
    m, k, n = f["m"], f["k"], f["n"]
    a = _typed(memory.nmem[core], f["a"], m * k, dt).reshape(m, k).astype(np.float32)
    b = _typed(memory.wmem[core], f["b"], k * n, dt)
    block = _block_of(memory)
    b = b.reshape(n // block, k, block).transpose(1, 0, 2).reshape(k, n).astype(np.float32)
    _typed(memory.nmem[core], f["out"], m * n, dt)[...] = (a @ b).astype(dt).reshape(-1)


def _block_of(memory: CardMemory) -> int:
    return memory.spec.params["CONV_BLOCK"]


# ---------------------------------------------------------------------------- the fast paths' contracts
# A fast path runs an instruction only when the instruction's contract (sim/core/contract.py: semantics,
# indices, types, operands with spaces, dtypes, shapes, strides and addresses) is the one below, whatever the
# instruction is called; tests/sim/diannao/test_functional.py proves each path equal to the generic executor.

_VECTOR_TYPES = "type T in i8, i16, i32, f16, f32"


def _vector(statement: str, operands: str) -> str:
    """The contract of an element-wise NMEM instruction over ``n`` elements of T."""
    return "\n".join([statement, "indices i spatial", _VECTOR_TYPES,
                      *(f"{op}: NMEM T shape [n] strides - at {op}" for op in operands.split())])


def _copy(registers: bool) -> str:
    dst, src = ("R[rd] + dst_off", "R[rs1] + src_off") if registers else ("dst", "src")
    return "\n".join(["dst[r, c] = src[r, c]", "indices r spatial, c spatial",
                      *(["R: register i32"] if registers else []),
                      f"dst: dst_space u8 shape [count, len] strides [dst_stride, 1] at {dst}",
                      f"src: src_space u8 shape [count, len] strides [src_stride, 1] at {src}"])


_CONV_WINDOW = "inp[y * s + ky, x * s + kx, ci]) * {t}(wgt[co // CONV_BLOCK, ky, kx, ci, co % CONV_BLOCK])"
_CONV_OPERANDS = ["inp: NMEM T shape [h, w, cin] strides - at inp",
                  "wgt: WMEM T shape [cout // CONV_BLOCK, kh, kw, cin, CONV_BLOCK] strides - at wgt"]
_CONV_INDICES = "indices y spatial, x spatial, co spatial, ky reduce, kx reduce, ci reduce"
_CONV_OUT = "out: NMEM {t} shape [(h - kh) // s + 1, (w - kw) // s + 1, cout] strides - at out"

FAST_PATHS: dict[str, Callable] = {
    _copy(False): _memcpy,
    _copy(True): _memcpy,
    "\n".join(["dst[i] = 0", "indices i spatial", "dst: dst_space u8 shape [n] strides - at dst"]): _vzero,
    _vector("dst[i] = a[i] + b[i]", "dst a b"): _binary(np.add),
    _vector("dst[i] = a[i] - b[i]", "dst a b"): _binary(np.subtract),
    _vector("dst[i] = a[i] * b[i]", "dst a b"): _binary(np.multiply),
    _vector("dst[i] = max(a[i], b[i])", "dst a b"): _binary(np.maximum),
    _vector("dst[i] = min(a[i], b[i])", "dst a b"): _binary(np.minimum),
    _vector("dst[i] = max(dst[i], 0)", "dst"): _relu,
    _vector("dst[i] = abs(dst[i])", "dst"): _vabs,
    "\n".join([f"out[y, x, co] = T(sum(ky, kx, ci, f32({_CONV_WINDOW.format(t='f32')}))", _CONV_INDICES,
               "type T in f16, f32", _CONV_OUT.format(t="T"), *_CONV_OPERANDS]): _conv,
    "\n".join([f"out[y, x, co] = sum(ky, kx, ci, i32({_CONV_WINDOW.format(t='i32')})", _CONV_INDICES,
               "type T in i8, i16", _CONV_OUT.format(t="i32"), *_CONV_OPERANDS]): _qconv,
    "\n".join(["out[i, j] = T(sum(r, f32(a[i, r]) * f32(b[j // CONV_BLOCK, r, j % CONV_BLOCK])))",
               "indices i spatial, j spatial, r reduce", "type T in f16, f32",
               "out: NMEM T shape [m, n] strides - at out", "a: NMEM T shape [m, k] strides - at a",
               "b: WMEM T shape [n // CONV_BLOCK, k, CONV_BLOCK] strides - at b"]): _matmul,
}


def fast_path(instr: isa.Instruction) -> Callable | None:
    """The fast path whose contract ``instr`` has, or None: the generic executor runs it."""
    return fast_path_for(instr, FAST_PATHS)
