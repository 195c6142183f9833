"""Hand-written SPMD kernels for the DianNao simulator: what a BANG C programmer would write, in Tandem
assembly. Tests, the demo and the benchmarks run them; each ``run_*`` function places its inputs in GMEM,
launches, reads the output back and returns it with the numpy reference.

Conventions of every kernel: R0, R1, R2 hold the GMEM addresses of the operands (kernel arguments); R31 is
kept 0 (the base register of NMEM/WMEM addresses, which are fixed); each core finds its global index from
CLUSTER_ID * CORE_DIM + CORE_ID and works on its own contiguous slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import isa
from compiler.ops.diannao import block_weights
from sim.diannao.config import load_config
from sim.diannao.machine import Card, DiannaoResult

NP_DTYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f16": np.float16, "f32": np.float32}
MAX_ROW = 65535  # bytes in one memcpy row (the dma format's len field)
MAX_COUNT = 255  # rows in one memcpy (the dma format's count field)




def default_card() -> Card:
    """A fresh card of the default config running the built-in DianNao spec (these kernels' machine)."""
    return Card(load_config("default"), spec=isa.load_isa("diannao"))

@dataclass
class KernelRun:
    """A launch of a hand-written kernel: what the simulator measured, its output and numpy's."""

    result: DiannaoResult
    output: np.ndarray
    reference: np.ndarray
    program: isa.Program


def _prologue(in_bytes: int, out_bytes: int | None = None) -> list[str]:
    """R6 = global core index; R10, R11 = R0, R1 + R6 * in_bytes; R12 = R2 + R6 * out_bytes (in_bytes when
    not given: the output slice is as large as the inputs'); R31 = 0."""
    lines = [
        *_core_index("r6", "r5"),
        f"    li r7, {in_bytes}",
        "    mul r8, r6, r7",
        "    add r10, r0, r8",
        "    add r11, r1, r8",
    ]
    if out_bytes is None:
        lines.append("    add r12, r2, r8")
    else:
        lines += [f"    li r9, {out_bytes}", "    mul r9, r6, r9", "    add r12, r2, r9"]
    return [*lines, "    li r31, 0"]


def _core_index(rd: str, tmp: str) -> list[str]:
    """``rd`` = this core's global index, CLUSTER_ID * CORE_DIM + CORE_ID (``tmp`` is clobbered)."""
    return [f"    rdid {rd}, CLUSTER_ID", f"    rdid {tmp}, CORE_DIM", f"    mul {rd}, {rd}, {tmp}",
            f"    rdid {tmp}, CORE_ID", f"    add {rd}, {rd}, {tmp}"]


def _copy(dst_space: str, dst_reg: str, dst_off: int, src_space: str, src_reg: str, src_off: int,
          nbytes: int) -> str:
    """A contiguous copy of ``nbytes``: one memcpyr of equal rows of at most MAX_ROW bytes where ``nbytes``
    splits into at most MAX_COUNT such rows, else rows of MAX_ROW bytes (in memcpyrs of at most MAX_COUNT
    rows) and one last shorter row. Several instructions come back as lines of one string."""
    rows = next((r for r in range(1, MAX_COUNT + 1) if nbytes % r == 0 and nbytes // r <= MAX_ROW), None)
    if rows is not None:
        pieces = [(0, nbytes // rows, rows)]
    else:
        full, last = divmod(nbytes, MAX_ROW)
        pieces = [(k * MAX_ROW, MAX_ROW, min(MAX_COUNT, full - k)) for k in range(0, full, MAX_COUNT)]
        pieces += [(full * MAX_ROW, last, 1)] if last else []
    return "\n".join(
        f"    memcpyr dst_space={dst_space}, src_space={src_space}, rd={dst_reg}, rs1={src_reg}, "
        f"dst_off={dst_off + at}, src_off={src_off + at}, len={row}, count={count}, dst_stride={row}, "
        f"src_stride={row}" for at, row, count in pieces)


def elementwise_program(op: str, dtype: str, elems_per_core: int, tile: int, scalar: bool = False,
                        params: dict[str, int] | None = None) -> isa.Program:
    """C = A op B (op in vadd, vsub, vmul, vmax, vmin) or A = relu(A) (op relu, in place) over a slice of
    ``elems_per_core`` elements per core, in tiles of ``tile`` elements: copy in, compute, copy out.

    With ``scalar``, the compute is a scalar loop over the tile (element loads, one scalar op, a store)
    instead of one vector instruction: the same result, many more instructions and cycles."""
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    buf_a, buf_b = 0, _align(tile * size)
    lines = [".isa diannao", *[f".param {k} = {v}" for k, v in (params or {}).items()], ".text"]
    lines += _prologue(elems_per_core * size)
    unary = op == "relu"
    full, tail = divmod(elems_per_core, tile)
    for k, (n, reps) in enumerate([(tile, full), (tail, 1)]):
        if n == 0 or reps == 0:
            continue
        nbytes = n * size
        loop = f"tile{k}"
        if reps > 1:
            lines += [f"    li r13, {reps}", "    li r14, 0", f"{loop}:"]
        lines.append(_copy("NMEM", "r31", buf_a, "GMEM", "r10", 0, nbytes))
        if not unary:
            lines.append(_copy("NMEM", "r31", buf_b, "GMEM", "r11", 0, nbytes))
        if scalar:
            lines += _scalar_body(op, dtype, size, buf_a, buf_b, n, f"{loop}_e")
        elif unary:
            lines.append(f"    relu.{dtype} dst={buf_a}, n={n}")
        else:
            lines.append(f"    {op}.{dtype} dst={buf_a}, a={buf_a}, b={buf_b}, n={n}")
        out_reg = "r10" if unary else "r12"
        lines.append(_copy("GMEM", out_reg, 0, "NMEM", "r31", buf_a, nbytes))
        lines += [f"    addi r{r}, r{r}, {nbytes}" for r in (10, 11, 12)]
        if reps > 1:
            lines += ["    addi r14, r14, 1", f"    blt r14, r13, {loop}"]
    lines.append("    halt")
    return isa.assemble("\n".join(lines) + "\n")


def _scalar_body(op: str, dtype: str, size: int, buf_a: int, buf_b: int, n: int, label: str) -> list[str]:
    """A scalar loop over ``n`` elements: a[i] = a[i] op b[i] (or relu(a[i]))."""
    is_float = dtype.startswith("f")
    load, store = ("fld", "fst") if is_float else ("lde", "ste")
    reg = "r"  # float registers are written rN too: the instruction says which file it reads
    lines = ["    li r20, 0", f"    li r21, {n * size}", f"{label}:",
             f"    {load}.{dtype} rd={reg}1, rs1=r20, space=NMEM, imm={buf_a}"]
    if op == "relu":
        if is_float:
            lines += ["    fcvt rd=r2, rs1=r31", "    fmax rd=r1, rs1=r1, rs2=r2"]
        else:
            lines += [f"    bge r1, r31, {label}_keep", "    li r1, 0", f"{label}_keep:"]
    else:
        lines.append(f"    {load}.{dtype} rd={reg}2, rs1=r20, space=NMEM, imm={buf_b}")
        name = {"vadd": "add", "vsub": "sub", "vmul": "mul", "vmax": "max", "vmin": "min"}[op]
        if is_float:
            lines.append(f"    f{name} rd=r1, rs1=r1, rs2=r2")
        elif name in ("max", "min"):
            cond = "bge" if name == "max" else "blt"
            lines += [f"    {cond} r1, r2, {label}_keep", "    add r1, r2, r31", f"{label}_keep:"]
        else:
            lines.append(f"    {name} r1, r1, r2")
    lines += [f"    {store}.{dtype} rs1=r20, rs2={reg}1, space=NMEM, imm={buf_a}",
              f"    addi r20, r20, {size}", f"    blt r20, r21, {label}"]
    return lines


def _align(nbytes: int, to: int = 64) -> int:
    return -(-nbytes // to) * to


def run_elementwise(op: str, shape: tuple[int, ...], dtype: str = "f32", cores: int = 16,
                    tile: int | None = None, scalar: bool = False, seed: int = 0,
                    card: Card | None = None) -> KernelRun:
    """Run ``op`` (vadd, vsub, vmul, vmax, vmin, relu) on random tensors of ``shape`` split over ``cores``."""
    card = card or default_card()
    np_dt = NP_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    total = int(np.prod(shape))
    if total % (cores * 64):
        raise ValueError(f"{total} elements do not split into {cores} slices of whole 64-element vectors")
    per_core = total // cores
    size = np.dtype(np_dt).itemsize
    tile = tile or min(per_core, (MAX_ROW // size) // 64 * 64)

    def sample() -> np.ndarray:
        if dtype.startswith("f"):
            return (rng.standard_normal(shape) * 8).astype(np_dt)
        info = np.iinfo(np_dt)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(np_dt)

    a, b = sample(), sample()
    buf_a, buf_b = card.to_gmem(a), card.to_gmem(b)
    buf_c = card.to_gmem(np.zeros(shape, np_dt))
    program = elementwise_program(op, dtype, per_core, tile, scalar)
    result = card.launch(program, cores=cores, args=[buf_a.addr, buf_b.addr, buf_c.addr])
    out = card.from_gmem(buf_a if op == "relu" else buf_c)
    ufunc = {"vadd": np.add, "vsub": np.subtract, "vmul": np.multiply, "vmax": np.maximum, "vmin": np.minimum}
    with np.errstate(over="ignore"):
        ref = np.maximum(a, np_dt(0)) if op == "relu" else ufunc[op](a, b)
    return KernelRun(result, out, ref.astype(np_dt), program)


def matmul_program(m_per_core: int, k: int, n: int, dtype: str) -> isa.Program:
    """out[M, N] = a[M, K] @ b[K, N], the rows of a split over the cores: each core copies its rows of a to
    NMEM and all of the blocked b to WMEM, runs one matmul, and copies its rows of out back."""
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    a_bytes, b_bytes, out_bytes = m_per_core * k * size, k * n * size, m_per_core * n * size
    buf_a, buf_out = 0, _align(a_bytes)
    lines = [".isa diannao", ".text", *_prologue(a_bytes, out_bytes),
             _copy("NMEM", "r31", buf_a, "GMEM", "r10", 0, a_bytes),
             _copy("WMEM", "r31", 0, "GMEM", "r1", 0, b_bytes),
             f"    matmul.{dtype} out={buf_out}, a={buf_a}, b=0, m={m_per_core}, k={k}, n={n}",
             _copy("GMEM", "r12", 0, "NMEM", "r31", buf_out, out_bytes),
             "    halt"]
    return isa.assemble("\n".join(lines) + "\n")


def run_matmul(m: int, k: int, n: int, dtype: str = "f16", cores: int = 16, seed: int = 0,
               card: Card | None = None) -> KernelRun:
    card = card or default_card()
    np_dt = NP_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np_dt)
    b = rng.standard_normal((k, n)).astype(np_dt)
    ga, gb = card.to_gmem(a), card.to_gmem(block_weights(b))
    gout = card.to_gmem(np.zeros((m, n), np_dt))
    program = matmul_program(m // cores, k, n, dtype)
    result = card.launch(program, cores=cores, args=[ga.addr, gb.addr, gout.addr])
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(np_dt)
    return KernelRun(result, card.from_gmem(gout), ref, program)


def conv_program(rows_per_core: int, h: int, w: int, cin: int, cout: int, kh: int, kw: int,
                 dtype: str) -> isa.Program:
    """A valid, stride-1 convolution of an HWC input, the output rows split over the cores: each core copies
    the input rows its output rows need (its rows plus kh - 1 more) to NMEM and the blocked weights to WMEM,
    runs one conv and copies its output rows back."""
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    wo = w - kw + 1
    in_rows = rows_per_core + kh - 1
    row_in, row_out = w * cin * size, wo * cout * size
    inp_bytes, out_bytes, wgt_bytes = in_rows * row_in, rows_per_core * row_out, kh * kw * cin * cout * size
    buf_in, buf_out = 0, _align(inp_bytes)
    lines = [".isa diannao", ".text", *_prologue(rows_per_core * row_in, out_bytes),
             _copy("NMEM", "r31", buf_in, "GMEM", "r10", 0, inp_bytes),
             _copy("WMEM", "r31", 0, "GMEM", "r1", 0, wgt_bytes),
             f"    conv.{dtype} out={buf_out}, inp={buf_in}, wgt=0, h={in_rows}, w={w}, cin={cin}, "
             f"cout={cout}, kh={kh}, kw={kw}, s=1",
             _copy("GMEM", "r12", 0, "NMEM", "r31", buf_out, out_bytes),
             "    halt"]
    return isa.assemble("\n".join(lines) + "\n")


def run_conv(h: int, w: int, cin: int, cout: int, k: int = 3, dtype: str = "f16", cores: int = 16,
             seed: int = 0, card: Card | None = None) -> KernelRun:
    """A k x k valid convolution of a random (h, w, cin) input with (k, k, cin, cout) weights."""
    card = card or default_card()
    np_dt = NP_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((h, w, cin)).astype(np_dt)
    wt = rng.standard_normal((k, k, cin, cout)).astype(np_dt)
    ho, wo = h - k + 1, w - k + 1
    if ho % cores:
        raise ValueError(f"{ho} output rows do not split over {cores} cores")
    gx, gw = card.to_gmem(x), card.to_gmem(block_weights(wt))
    gout = card.to_gmem(np.zeros((ho, wo, cout), np_dt))
    program = conv_program(ho // cores, h, w, cin, cout, k, k, dtype)
    result = card.launch(program, cores=cores, args=[gx.addr, gw.addr, gout.addr])
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(0, 1))
    ref = np.einsum("yxcij,ijco->yxo", windows, wt.astype(np.float64)).astype(np_dt)
    return KernelRun(result, card.from_gmem(gout), ref, program)
