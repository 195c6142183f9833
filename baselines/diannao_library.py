"""The vendor's operator library on the DianNao card: baseline (c) of seed 001's experiment (Sec. V).

Seed 001 measures its generated kernels against "the accelerator vendor's hand-written operator library",
which "supports different input sizes" (Sec. V-A). This module models that library faithfully: the kernels a
BANG C library author would write once for every shape, in Tandem assembly.

Element-wise kernels (``add``, ``sub``, ``mul``, ``relu``): ONE program per operator and dtype, whatever the
shape (``library_program``). Sizes arrive at run time in registers, so every tail is run-time control flow:

- arguments: R0, R1, R2 = GMEM addresses of A, B, C (relu reads A, writes C and ignores R1; C may be A for an
  in-place relu); R3 = q, R4 = r with q, r = divmod(N, cores), computed by the host because the ISA has no
  divide. The core of global index i = CLUSTER_ID * CORE_DIM + CORE_ID takes n = q + (i < r) elements from
  element i * q + min(i, r) on: the first r cores take one more.
- ``TILE`` elements at a time, the largest power of two whose buffers (A and B for a binary op, the result
  written over A; A alone for relu) fit NMEM: a loop runs n >> log2(TILE) times (sra), each time memcpyr A
  (and B) in, one vector instruction of TILE elements, memcpyr the result out.
- then, for each power of two p from TILE / 2 down to VECTOR_ELEMS, if n & p, one tile of p elements (a
  branch on the bit at run time; the copy lengths and vector counts are immediates fixed per p).
- the last n % VECTOR_ELEMS elements (no vector instruction takes them: their count must be a multiple of
  VECTOR_ELEMS) by a scalar loop. memcpyr lengths are immediates, so the tail is staged into NMEM with one
  memcpyr per set bit of n below VECTOR_ELEMS (32, 16, ..., 1 elements), computed element by element there
  (fld/fst with fadd/fsub/fmul in the F registers for floats, lde/ste with add/sub/mul for integers, which
  wrap), and copied back bit by bit. Staging costs at most 3 * log2(VECTOR_ELEMS) copies; working on GMEM
  directly would pay GMEM_LATENCY on each of 3 accesses per element. The scalar relu reads the element's
  bits as an integer of its width and zeroes it when the sign bit is set and it is not a NaN: max(x, 0) of
  the vector relu exactly, NaN included, and -0.0 as the vector relu treats it (numpy's maximum: kept for
  f16, +0.0 for f32).

Convolution (``conv2d``) is the exception the ISA forces: conv's h, w, cin and cout (and memcpy's lengths)
are immediates, so no single program can take every layer. Like a vendor's conv entry point that generates
its immediates for the layer on the host ("JIT"), ``conv_program`` is built per layer shape and core count
(and cached), and it keeps the library's strategy:

- the host pads the input with zeros to (h + 2 pad, w + 2 pad, cin) and copies that padded tensor to GMEM
  (``host_bytes`` counts its bytes); the host also blocks the weights (cout, kh, kw, cin) into the TFU layout
  [cout / CONV_BLOCK, kh, kw, cin, CONV_BLOCK] (``block_weights``), as every variant of the experiment does.
- no SMEM: every copy is GMEM <-> NMEM or GMEM -> WMEM.
- the ho output rows are split over the cores as above (q, r = divmod(ho, cores), fixed in the program);
  a core branches at run time on i < r to the code for q + 1 rows or for q rows.
- each core: for each block of output channels whose weights fit WMEM (all of cout when they fit), copy the
  block's weights GMEM -> WMEM; then for each tile of output rows whose input rows (with the kh - 1 halo
  rows, stride s) and output rows fit NMEM together, copy the input rows GMEM -> NMEM, run one conv, copy the
  output rows to GMEM (a strided copy when the block is narrower than cout). Whole tiles run in a counted
  loop; the shorter last tile is its own code.

Every ``LibraryRun`` carries the simulator's result, the output, numpy's reference and the program.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

import isa
from baselines.diannao_kernels import (
    MAX_COUNT,
    NP_DTYPES,
    _align,
    _copy,
    _core_index,
    default_card,
)
from compiler.ops import reference
from compiler.ops.diannao import block_weights
from compiler.ops.nn import ConvShape
from sim.diannao.machine import Card, DiannaoResult

BINARY = {"add": "vadd", "sub": "vsub", "mul": "vmul"}   # library op -> vector instruction
SCALAR_FLOAT = {"add": "fadd", "sub": "fsub", "mul": "fmul"}
SCALAR_INT = {"add": "add", "sub": "sub", "mul": "mul"}
OPS = (*BINARY, "relu")
DTYPES = tuple(NP_DTYPES)
CONV_DTYPES = ("f16", "f32")
# the bits of a float as an integer of its width: the load type, the magnitude mask and +inf's bits
FLOAT_BITS = {"f16": ("i16", 0x7FFF, 0x7C00), "f32": ("i32", 0x7FFFFFFF, 0x7F800000)}
# The vector relu is numpy's maximum(x, 0) (the machine's fast path and the spec's executor), whose result for
# -0.0 depends on the dtype: -0.0 for f16, +0.0 for f32. The scalar tail follows it to stay bit-exact.
RELU_KEEPS_NEGATIVE_ZERO = {
    dt: bool(np.signbit(np.maximum(NP_DTYPES[dt](-0.0), NP_DTYPES[dt](0)))) for dt in FLOAT_BITS}


@dataclass
class LibraryRun:
    """A launch of a library kernel: what the simulator measured, its output, numpy's reference, the program,
    and the bytes the host had to prepare besides the plain inputs (conv's padded input; 0 otherwise)."""

    result: DiannaoResult
    output: np.ndarray
    reference: np.ndarray
    program: isa.Program
    host_bytes: int


# ------------------------------------------------------------------------------------------- validation
def _check(op: str, dtype: str, ops: Sequence[str], dtypes: Sequence[str], what: str) -> None:
    if op not in ops:
        raise ValueError(f"the library has no {what} '{op}'; it has {', '.join(ops)}")
    if dtype not in dtypes:
        raise ValueError(f"the library's {what} '{op}' has no dtype '{dtype}'; "
                         f"dtypes are {', '.join(dtypes)}")


def _params(params: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((params or {}).items()))


def _spec_params(params: tuple[tuple[str, int], ...]) -> Mapping[str, int]:
    return isa.load_isa("diannao", params=dict(params)).params


def _header(params: tuple[tuple[str, int], ...]) -> list[str]:
    return [".isa diannao", *[f".param {k} = {v}" for k, v in params], ".text"]


def _inputs(inputs: Sequence[np.ndarray] | None, shapes: Sequence[tuple[int, ...]], np_dt: type,
            sample) -> list[np.ndarray]:
    """The caller's ``inputs`` checked against ``shapes`` and the dtype, or fresh samples."""
    if inputs is None:
        return [sample(s) for s in shapes]
    if len(inputs) != len(shapes):
        raise ValueError(f"expected {len(shapes)} input array(s), but got {len(inputs)}")
    out = []
    for k, (x, shape) in enumerate(zip(inputs, shapes, strict=True)):
        x = np.asarray(x)
        if x.shape != tuple(shape) or x.dtype != np.dtype(np_dt):
            raise ValueError(f"input {k}: expected shape {tuple(shape)} and dtype {np.dtype(np_dt)}, but got "
                             f"shape {x.shape} and dtype {x.dtype}")
        out.append(x)
    return out


# ------------------------------------------------------------------------------- element-wise programs
def tile_elems(op: str, dtype: str, params: Mapping[str, int] | None = None) -> int:
    """TILE of the element-wise kernel: the largest power of two whose buffers (2 for a binary op, 1 for
    relu) of ``dtype`` elements fit NMEM."""
    _check(op, dtype, OPS, DTYPES, "element-wise op")
    p = _spec_params(_params(params))
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    buffers = 1 if op == "relu" else 2
    tile = 1 << ((p["NMEM_BYTES"] // (buffers * size)).bit_length() - 1)
    if tile < p["VECTOR_ELEMS"]:
        raise ValueError(f"NMEM_BYTES = {p['NMEM_BYTES']} holds no {buffers} buffer(s) of VECTOR_ELEMS = "
                         f"{p['VECTOR_ELEMS']} {dtype} elements")
    return tile


def library_program(op: str, dtype: str, params: Mapping[str, int] | None = None) -> isa.Program:
    """The one element-wise program of ``op`` (add, sub, mul, relu) and ``dtype`` for every shape (for the
    ISA with parameter overrides ``params``); cached. Its arguments are in the module docstring."""
    if op == "conv":
        raise ValueError("conv has no shape-agnostic program: its sizes are immediates, so the library "
                         "builds one per layer shape (use conv_program)")
    _check(op, dtype, OPS, DTYPES, "element-wise op")
    return _library_program(op, dtype, _params(params))


@functools.cache
def _library_program(op: str, dtype: str, params: tuple[tuple[str, int], ...]) -> isa.Program:
    p = _spec_params(params)
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    vec = p["VECTOR_ELEMS"]
    tile = tile_elems(op, dtype, dict(params))
    unary = op == "relu"
    buf_a, buf_b = 0, tile * size
    lines = [*_header(params), *_split(), f"    li r7, {size.bit_length() - 1}", "    sll r6, r6, r7",
             "    add r10, r0, r6", "    add r11, r1, r6", "    add r12, r2, r6"]
    # whole tiles: n >> log2(TILE) times
    lines += [f"    li r7, {tile.bit_length() - 1}", "    sra r13, r8, r7", "    beq r13, r31, whole_done",
              "whole:", *_vector_tile(op, dtype, tile, size, buf_a, buf_b),
              "    addi r13, r13, -1", "    bne r13, r31, whole", "whole_done:"]
    # one tile per set bit of n from TILE / 2 down to VECTOR_ELEMS
    for bit in _powers(tile // 2, vec):
        lines += [*_if_bit(bit, f"vec{bit}"), *_vector_tile(op, dtype, bit, size, buf_a, buf_b), f"vec{bit}:"]
    # the last n % VECTOR_ELEMS elements: staged into NMEM bit by bit, a scalar loop, copied back
    lines += [f"    li r7, {vec - 1}", "    and r7, r8, r7", "    beq r7, r31, done", "    li r20, 0"]
    for bit in _powers(vec // 2, 1):
        nbytes = bit * size
        lines += _if_bit(bit, f"in{bit}")
        lines.append(_copy("NMEM", "r20", buf_a, "GMEM", "r10", 0, nbytes))
        if not unary:
            lines.append(_copy("NMEM", "r20", buf_b, "GMEM", "r11", 0, nbytes))
        lines += [f"    addi r{r}, r{r}, {nbytes}" for r in ((10, 20) if unary else (10, 11, 20))]
        lines.append(f"in{bit}:")
    lines += ["    li r21, 0", "scalar:", *_scalar_element(op, dtype, buf_a, buf_b),
              f"    addi r21, r21, {size}", "    blt r21, r20, scalar", "    li r21, 0"]
    for bit in _powers(vec // 2, 1):
        nbytes = bit * size
        lines += [*_if_bit(bit, f"out{bit}"), _copy("GMEM", "r12", 0, "NMEM", "r21", buf_a, nbytes),
                  f"    addi r12, r12, {nbytes}", f"    addi r21, r21, {nbytes}", f"out{bit}:"]
    lines += ["done:", "    halt"]
    return isa.assemble("\n".join(lines) + "\n")


def _split() -> list[str]:
    """Share q * cores + r items (R3 = q, R4 = r) out: r5 = this core's global index i, r8 = its count
    n = q + (i < r), r9 = (i < r), r6 = its first item i * q + min(i, r); r31 = 0."""
    return ["    li r31, 0", *_core_index("r5", "r6"),
            "    slt r9, r5, r4", "    add r8, r3, r9",
            # min(i, r) = r + (i - r) * (i < r)
            "    sub r6, r5, r4", "    mul r6, r6, r9", "    add r6, r6, r4",
            "    mul r7, r5, r3", "    add r6, r6, r7"]


def _powers(high: int, low: int) -> list[int]:
    """The powers of two from ``high`` down to ``low``."""
    out = []
    while high >= low:
        out.append(high)
        high //= 2
    return out


def _if_bit(bit: int, skip: str) -> list[str]:
    """Jump to ``skip`` unless bit ``bit`` of n (r8) is set."""
    return [f"    li r7, {bit}", "    and r7, r8, r7", f"    beq r7, r31, {skip}"]


def _vector_tile(op: str, dtype: str, n: int, size: int, buf_a: int, buf_b: int) -> list[str]:
    """``n`` elements: copy A (and B) in, one vector instruction, copy the result out, advance pointers."""
    nbytes = n * size
    lines = [_copy("NMEM", "r31", buf_a, "GMEM", "r10", 0, nbytes)]
    if op == "relu":
        lines.append(f"    relu.{dtype} dst={buf_a}, n={n}")
    else:
        lines += [_copy("NMEM", "r31", buf_b, "GMEM", "r11", 0, nbytes),
                  f"    {BINARY[op]}.{dtype} dst={buf_a}, a={buf_a}, b={buf_b}, n={n}"]
    lines.append(_copy("GMEM", "r12", 0, "NMEM", "r31", buf_a, nbytes))
    return lines + [f"    addi r{r}, r{r}, {nbytes}" for r in (10, 11, 12)]


def _scalar_element(op: str, dtype: str, buf_a: int, buf_b: int) -> list[str]:
    """The element at NMEM byte r21 of A (and B): A = A op B, or A = relu(A)."""
    at_a, at_b = f"rs1=r21, space=NMEM, imm={buf_a}", f"rs1=r21, space=NMEM, imm={buf_b}"
    if op == "relu":
        bits, mask, inf = FLOAT_BITS.get(dtype, (dtype, 0, 0))
        lines = [f"    lde.{bits} rd=r22, {at_a}", "    bge r22, r31, keep"]
        if dtype in FLOAT_BITS:   # a negative NaN stays: max(NaN, 0) is NaN
            lines += [f"    li r23, {mask}", "    and r23, r22, r23", f"    li r24, {inf}",
                      "    blt r24, r23, keep"]
            lines += ["    beq r23, r31, keep"] if RELU_KEEPS_NEGATIVE_ZERO[dtype] else []
        return [*lines, f"    ste.{bits} {at_a}, rs2=r31", "keep:"]
    if dtype.startswith("f"):
        return [f"    fld.{dtype} rd=r22, {at_a}", f"    fld.{dtype} rd=r23, {at_b}",
                f"    {SCALAR_FLOAT[op]} rd=r22, rs1=r22, rs2=r23", f"    fst.{dtype} {at_a}, rs2=r22"]
    return [f"    lde.{dtype} rd=r22, {at_a}", f"    lde.{dtype} rd=r23, {at_b}",
            f"    {SCALAR_INT[op]} r22, r22, r23", f"    ste.{dtype} {at_a}, rs2=r22"]


# ------------------------------------------------------------------------------------- element-wise run
def elementwise(op: str, shape: tuple[int, ...], dtype: str = "f32", cores: int = 16, seed: int = 0,
                card: Card | None = None, inputs: Sequence[np.ndarray] | None = None) -> LibraryRun:
    """Run the library's ``op`` (add, sub, mul: C = A op B; relu: C = max(A, 0)) on tensors of any ``shape``
    over ``cores`` cores. ``inputs`` are (A, B) for a binary op and (A,) for relu, of ``shape`` and ``dtype``;
    without them, seeded random tensors (floats: normal * 8; integers: uniform over the type)."""
    _check(op, dtype, OPS, DTYPES, "element-wise op")
    shape = tuple(int(d) for d in shape)
    total = int(np.prod(shape, dtype=np.int64))
    if total < 1:
        raise ValueError(f"expected a shape of at least one element, but got {shape}")
    card = card or default_card()
    np_dt = NP_DTYPES[dtype]
    rng = np.random.default_rng(seed)

    def sample(s: tuple[int, ...]) -> np.ndarray:
        if dtype.startswith("f"):
            return (rng.standard_normal(s) * 8).astype(np_dt)
        info = np.iinfo(np_dt)
        return rng.integers(info.min, info.max, s, endpoint=True).astype(np_dt)

    unary = op == "relu"
    arrays = _inputs(inputs, [shape] if unary else [shape, shape], np_dt, sample)
    bufs = [card.to_gmem(x) for x in arrays]
    out = card.to_gmem(np.zeros(shape, np_dt))
    program = library_program(op, dtype, card.config.isa_params)
    q, r = divmod(total, cores)
    a_addr = bufs[0].addr
    b_addr = 0 if unary else bufs[1].addr
    result = card.launch(program, cores=cores, args=[a_addr, b_addr, out.addr, q, r])
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
    with np.errstate(all="ignore"):
        ref = np.maximum(arrays[0], np_dt(0)) if unary else ufunc[op](arrays[0], arrays[1])
    return LibraryRun(result, card.from_gmem(out), ref.astype(np_dt), program, 0)


# ------------------------------------------------------------------------------------------------ conv
@dataclass(frozen=True)
class ConvPlan:
    """How the library's conv cuts a layer: output rows per core (q, r = divmod(ho, cores)), output rows per
    NMEM tile, output channels per WMEM block, and the NMEM address of the output tile."""

    ho: int
    wo: int
    hp: int
    wp: int
    q: int
    r: int
    tile_rows: int
    block: int
    buf_out: int


def conv_plan(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, dtype: str, cores: int,
              params: Mapping[str, int] | None = None) -> ConvPlan:
    """The cuts of the library's conv for this layer (see the module docstring); ValueError names what does
    not fit."""
    p = _spec_params(_params(params))
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    cb_unit = p["CONV_BLOCK"]
    invalid = ConvShape(h, w, cin, cout, k, stride, pad).invalid()
    if invalid:
        raise ValueError(invalid)
    if cout % cb_unit:
        raise ValueError(f"expected cout a multiple of CONV_BLOCK = {cb_unit}, but got cout = {cout}")
    hp, wp = h + 2 * pad, w + 2 * pad
    ho, wo = (hp - k) // stride + 1, (wp - k) // stride + 1
    per_block = k * k * cin * cb_unit * size
    block = min(cout, p["WMEM_BYTES"] // per_block * cb_unit)
    if block < cb_unit:
        raise ValueError(f"the weights of {cb_unit} output channels ({per_block} bytes) do not fit WMEM "
                         f"({p['WMEM_BYTES']} bytes)")
    q, r = divmod(ho, cores)
    pitch = wp * cin * size

    def fits(rows: int) -> bool:
        in_rows = (rows - 1) * stride + k
        return in_rows <= 1023 and _align(in_rows * pitch) + rows * wo * block * size <= p["NMEM_BYTES"]

    if not fits(1):
        raise ValueError(f"one output row of the layer does not fit NMEM ({p['NMEM_BYTES']} bytes): {k} "
                         f"input rows of {pitch} bytes and {wo * block * size} output bytes")
    tile_rows = 1
    while tile_rows < q + (r > 0) and fits(tile_rows + 1):
        tile_rows += 1
    buf_out = _align(((tile_rows - 1) * stride + k) * pitch)
    return ConvPlan(ho, wo, hp, wp, q, r, tile_rows, block, buf_out)


def conv_program(h: int, w: int, cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1,
                 dtype: str = "f16", cores: int = 16, params: Mapping[str, int] | None = None) -> isa.Program:
    """The library's conv for one layer shape and core count (its immediates generated on the host); cached.
    Arguments: R0, R1, R2 = GMEM addresses of the padded input, the blocked weights and the output."""
    _check("conv", dtype, ("conv",), CONV_DTYPES, "operator")
    return _conv_program(h, w, cin, cout, k, stride, pad, dtype, cores, _params(params))


@functools.cache
def _conv_program(h: int, w: int, cin: int, cout: int, k: int, stride: int, pad: int, dtype: str, cores: int,
                  params: tuple[tuple[str, int], ...]) -> isa.Program:
    plan = conv_plan(h, w, cin, cout, k, stride, pad, dtype, cores, dict(params))
    size = np.dtype(NP_DTYPES[dtype]).itemsize
    pitch = plan.wp * cin * size
    lines = [*_header(params), f"    li r3, {plan.q}", f"    li r4, {plan.r}", *_split(),
             f"    li r7, {stride * pitch}", "    mul r7, r6, r7", "    add r13, r0, r7",
             f"    li r7, {plan.wo * cout * size}", "    mul r7, r6, r7", "    add r14, r2, r7"]
    if plan.r:   # the first r cores take q + 1 rows
        lines += ["    beq r9, r31, rows_q",
                  *_conv_rows(plan, plan.q + 1, "q1", cin, cout, k, stride, dtype, size), "rows_q:"]
    lines += _conv_rows(plan, plan.q, "q0", cin, cout, k, stride, dtype, size)
    return isa.assemble("\n".join(lines) + "\n")


def _conv_rows(plan: ConvPlan, rows: int, tag: str, cin: int, cout: int, k: int, stride: int, dtype: str,
               size: int) -> list[str]:
    """A core's ``rows`` output rows, from r13 (its first input row) to r14 (its first output row); halt."""
    lines: list[str] = []
    if rows == 0:
        return ["    halt"]
    full, last = divmod(rows, plan.tile_rows)
    for c0 in range(0, cout, plan.block):
        cb = min(plan.block, cout - c0)
        lines += [_copy("WMEM", "r31", 0, "GMEM", "r1", c0 * k * k * cin * size, k * k * cin * cb * size),
                  "    add r10, r13, r31", f"    addi r12, r14, {c0 * size}"]
        if full:
            loop = f"{tag}_c{c0}"
            lines += [f"    li r15, {full}", f"{loop}:", *_conv_tile(plan, plan.tile_rows, cb, cin, cout, k,
                                                                     stride, dtype, size),
                      "    addi r15, r15, -1", f"    bne r15, r31, {loop}"]
        if last:
            lines += _conv_tile(plan, last, cb, cin, cout, k, stride, dtype, size)
    return [*lines, "    halt"]


def _conv_tile(plan: ConvPlan, rows: int, cb: int, cin: int, cout: int, k: int, stride: int, dtype: str,
               size: int) -> list[str]:
    """``rows`` output rows of a block of ``cb`` channels: input rows in, one conv, output rows out."""
    pitch = plan.wp * cin * size
    in_rows = (rows - 1) * stride + k
    lines = [_copy("NMEM", "r31", 0, "GMEM", "r10", 0, in_rows * pitch),
             f"    conv.{dtype} out={plan.buf_out}, inp=0, wgt=0, h={in_rows}, w={plan.wp}, cin={cin}, "
             f"cout={cb}, kh={k}, kw={k}, s={stride}"]
    pixels = rows * plan.wo
    if cb == cout:
        lines.append(_copy("GMEM", "r12", 0, "NMEM", "r31", plan.buf_out, pixels * cb * size))
    else:   # pixel rows of cb channels into rows of cout channels, at most MAX_COUNT rows a copy
        for p0 in range(0, pixels, MAX_COUNT):
            count = min(MAX_COUNT, pixels - p0)
            lines.append(f"    memcpyr dst_space=GMEM, src_space=NMEM, rd=r12, rs1=r31, "
                         f"dst_off={p0 * cout * size}, src_off={plan.buf_out + p0 * cb * size}, "
                         f"len={cb * size}, count={count}, dst_stride={cout * size}, src_stride={cb * size}")
    return [*lines, f"    addi r10, r10, {rows * stride * pitch}",
            f"    addi r12, r12, {pixels * cout * size}"]


def conv2d(h: int, w: int, cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1, dtype: str = "f16",
           cores: int = 16, seed: int = 0, card: Card | None = None,
           inputs: Sequence[np.ndarray] | None = None) -> LibraryRun:
    """Run the library's conv: input (h, w, cin) HWC, weights (cout, k, k, cin), output (ho, wo, cout) with
    ho = (h + 2 pad - k) // stride + 1 (wo likewise). ``inputs`` are (input, weights) of ``dtype``; without
    them, seeded standard normal tensors. The reference is computed in float64 and rounded to ``dtype``."""
    _check("conv", dtype, ("conv",), CONV_DTYPES, "operator")
    card = card or default_card()
    np_dt = NP_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    program = conv_program(h, w, cin, cout, k, stride, pad, dtype, cores, card.config.isa_params)
    plan = conv_plan(h, w, cin, cout, k, stride, pad, dtype, cores, card.config.isa_params)
    x, wt = _inputs(inputs, [(h, w, cin), (cout, k, k, cin)], np_dt,
                    lambda s: rng.standard_normal(s).astype(np_dt))
    padded = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))   # on the host: the library's way
    gx = card.to_gmem(padded)
    gw = card.to_gmem(block_weights(np.transpose(wt, (1, 2, 3, 0)), card.spec.params["CONV_BLOCK"]))
    gout = card.to_gmem(np.zeros((plan.ho, plan.wo, cout), np_dt))
    result = card.launch(program, cores=cores, args=[gx.addr, gw.addr, gout.addr])
    ref = reference.conv2d(x, wt, stride, pad, layout="HWC")
    return LibraryRun(result, card.from_gmem(gout), ref.astype(np_dt), program, padded.nbytes if pad else 0)
