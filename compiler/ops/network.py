"""The operators a network needs besides its convolutions and matmuls, written the way a user writes an
operator of their own (tandem/flows/user_ops.py): ``NAME(**params) -> (inputs, output)`` as tensor
expressions, and
``NAME_reference(*arrays)``, which calls the one numpy reference (compiler/ops/reference.py).

    residual_add, relu, clip         int32 [C, H, W] element-wise (clip to [LO, HI])
    quantized_add                    int32 [C, H, W] holding int8 values at two exponents -> int8: the int8
                                     network's residual add (each moved by SA, SB bits, clipped to LO, HI)
    requantize                       int32 [C, H, W] sums and bias -> int8: a conv's epilogue (the bias
                                     added, shifted right by S, clipped to LO, HI), as VITA's; element-wise
                                     (the bias repeated over H, W), as every target's user flow takes it
    rounded_mean                     int32 [C, H, W] holding int8 values -> int8 [C]: the rounded mean of
                                     each channel (an int8 network's global average pool)
    concat                           int32 [C, H, W] and [C2, H, W] joined along the channels
    max_pool                         int32 [C, H, W], K x K windows S apart
    avg_pool, global_avg_pool        float32 [C, H, W]: the mean of each K x K window, of each channel
    softmax, layer_norm, gelu        float32 [R, D], row by row (layer_norm: also gamma, beta [D])
    quantize_blocked                 float32 [C, H, W] -> 8-bit [C/G, H, W, G]: a network's input quantized
                                     as onnxruntime does, in a CPU kernel's blocked data layout
    moved_bytes                      8-bit [N] plus an offset, modulo 256: a GEMM's data in its type
    moved_view                       ``moved_bytes`` of ``a[h, m, k]``, a strided view of a flat 8-bit array,
                                     into ``[H, M, K]``: the data of H GEMMs
    pack_columns, column_sums        the second operand of H GEMMs, ``b[h, k, n]`` a strided view of a flat
                                     8-bit array (attention's keys, values): packed as a GEMM's weights
                                     ``[H, N/Y, K/X, Y, X]``; each column's sum, as a bias correction

Targets that compile tensor expressions (the CPU) run them as they run a user's operator.
"""

from __future__ import annotations

import numpy as np

from compiler import te
from compiler.errors import ScheduleError
from compiler.ir import nodes as ir
from compiler.ops import reference

OPERATORS = ("residual_add", "relu", "clip", "concat", "max_pool", "avg_pool", "global_avg_pool", "softmax",
             "softmax_int8", "layer_norm", "layer_norm_int8", "gelu")
EPS = 1e-5   # layer_norm's epsilon (ONNX's and PyTorch's default)


#: the integer types a network operator's typed inputs may hold (``T``, ``TA``, ``TB``, ``TO`` parameters): a
#: kernel's int32 output, or an 8-bit one (a requantizing CPU kernel's, ``narrow_type``)
INT_TYPES = ("int32", "uint8", "int8")


def _int_type(name: str, key: str, value: str) -> str:
    if value not in INT_TYPES:
        raise ScheduleError(f"{name}: {key} = {value!r} is not an integer type of {', '.join(INT_TYPES)}")
    return value


def _wide(x: te.Tensor):
    """``x``'s elements as int32 (``x`` itself where it is)."""
    if x.dtype.name == "int32":
        return lambda *i: x[i]
    return lambda *i: ir.cast(x[i], "int32")


def user_op(name: str) -> str:
    """``FILE.py:NAME`` of operator ``name``: how a target's flow runs it, as it runs a user's operator."""
    return f"{__file__}:{name}"


def residual_add(C: int, H: int, W: int):
    a = te.placeholder((C, H, W), "int32", name="a")
    b = te.placeholder((C, H, W), "int32", name="b")
    return [a, b], te.compute((C, H, W), lambda c, y, x: a[c, y, x] + b[c, y, x], name="out")


def residual_add_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return reference.add(a, b).astype(np.int32)   # int32 sums wrap


def _moved(x: te.Tensor, by: int):
    """``reference.rounding_shift`` as an expression: add half, shift right (a multiply to move left)."""
    wide = _wide(x)
    if by > 0:
        return lambda *i: ir.FloorDiv(wide(*i) + te.const(1 << (by - 1), "int32"), te.const(1 << by, "int32"))
    if by < 0:
        return lambda *i: wide(*i) * te.const(1 << -by, "int32")
    return wide


def quantized_add(C: int, H: int, W: int, SA: int = 0, SB: int = 0, LO: int = -128, HI: int = 127,
                  TA: str = "int32", TB: str = "int32"):
    """An int8 network's sum of two tensors (of types ``TA`` and ``TB``) at their own exponents, int8."""
    if not -128 <= LO <= HI <= 127:
        raise ScheduleError(f"quantized_add: [LO, HI] = [{LO}, {HI}] must lie in int8's [-128, 127]")
    if not (-24 < SA < 31 and -24 < SB < 31):
        raise ScheduleError(f"quantized_add: the shifts SA = {SA}, SB = {SB} must lie in (-24, 31)")
    a = te.placeholder((C, H, W), _int_type("quantized_add", "TA", TA), name="a")
    b = te.placeholder((C, H, W), _int_type("quantized_add", "TB", TB), name="b")
    ma, mb = _moved(a, SA), _moved(b, SB)
    lo, hi = te.const(LO, "int32"), te.const(HI, "int32")
    return [a, b], te.compute((C, H, W), lambda *i: ir.cast(ir.Min(ir.Max(ma(*i) + mb(*i), lo), hi), "int8"),
                              name="out")


def quantized_add_reference(a: np.ndarray, b: np.ndarray, SA: int = 0, SB: int = 0, LO: int = -128,
                            HI: int = 127, TA: str = "int32", TB: str = "int32") -> np.ndarray:
    return reference.quantized_add(a, b, SA, SB, LO, HI)


def requantize(C: int, H: int, W: int, S: int = 8, LO: int = -128, HI: int = 127):
    if not -128 <= LO <= HI <= 127 or not 0 <= S < 31:
        raise ScheduleError(f"requantize: S = {S} must lie in [0, 31) and [LO, HI] = [{LO}, {HI}] in int8's")
    acc = te.placeholder((C, H, W), "int32", name="acc")
    bias = te.placeholder((C, H, W), "int32", name="bias")
    lo, hi = te.const(LO, "int32"), te.const(HI, "int32")
    return [acc, bias], te.compute((C, H, W), lambda *i: ir.cast(ir.Min(ir.Max(ir.FloorDiv(
        acc[i] + bias[i], te.const(1 << S, "int32")), lo), hi), "int8"), name="out")


def requantize_reference(acc: np.ndarray, bias: np.ndarray, S: int = 8, LO: int = -128,
                         HI: int = 127) -> np.ndarray:
    total = (acc.astype(np.int64) + bias.astype(np.int64)).astype(np.int32)   # int32 sums wrap
    return reference.shift_clip(total, S, bounds=(LO, HI))


def rounded_mean(C: int, H: int, W: int):
    x = te.placeholder((C, H, W), "int32", name="x")
    ry, rx = te.reduce_axis(H, name="ry"), te.reduce_axis(W, name="rx")
    total = te.compute((C,), lambda c: te.sum(x[c, ry, rx], axis=[ry, rx]), name="total")
    n = H * W
    return [x], te.compute((C,), lambda c: ir.cast(ir.FloorDiv(total[c] + te.const(n // 2, "int32"),
                                                               te.const(n, "int32")), "int8"), name="out")


def rounded_mean_reference(x: np.ndarray) -> np.ndarray:
    n = x.shape[1] * x.shape[2]
    sums = reference.pool2d(x, (x.shape[1], x.shape[2]), 1, "sum").astype(np.int64).reshape(-1)
    return np.clip(reference.rounded_mean(sums, n), -128, 127).astype(np.int8)


def rounded_mean_blocked(B: int, H: int, W: int, L: int, T: str = "int32"):
    """``rounded_mean`` of a CPU kernel's blocked output ``[B, H, W, L]`` (``B`` blocks of ``L`` channels, of
    type ``T``): each channel's rounded mean as [B, L], which is the channels' order (channel
    ``b * L + l``)."""
    x = te.placeholder((B, H, W, L), _int_type("rounded_mean_blocked", "T", T), name="x")
    ry, rx = te.reduce_axis(H, name="ry"), te.reduce_axis(W, name="rx")
    wide = _wide(x)
    total = te.compute((B, L), lambda b, lane: te.sum(wide(b, ry, rx, lane), axis=[ry, rx]), name="total")
    n = H * W
    return [x], te.compute((B, L), lambda b, lane: ir.cast(ir.FloorDiv(
        total[b, lane] + te.const(n // 2, "int32"), te.const(n, "int32")), "int8"), name="out")


def rounded_mean_blocked_reference(x: np.ndarray, T: str = "int32") -> np.ndarray:
    sums = x.astype(np.int64).sum(axis=(1, 2))
    return np.clip(reference.rounded_mean(sums, x.shape[1] * x.shape[2]), -128, 127).astype(np.int8)


def relu(C: int, H: int, W: int):
    x = te.placeholder((C, H, W), "int32", name="x")
    return [x], te.compute((C, H, W), lambda c, y, w: ir.Max(x[c, y, w], te.const(0, "int32")), name="out")


def relu_reference(x: np.ndarray) -> np.ndarray:
    return reference.clip(x, 0, None)


def clip(C: int, H: int, W: int, LO: int = 0, HI: int = 127):
    if LO > HI:
        raise ScheduleError(f"clip: LO = {LO} must not exceed HI = {HI}")
    x = te.placeholder((C, H, W), "int32", name="x")
    return [x], te.compute((C, H, W), lambda c, y, w: ir.Min(ir.Max(x[c, y, w], te.const(LO, "int32")),
                                                             te.const(HI, "int32")), name="out")


def clip_reference(x: np.ndarray, LO: int = 0, HI: int = 127) -> np.ndarray:
    return reference.clip(x, LO, HI)


def concat(C: int, H: int, W: int, C2: int = 0):
    """[C, H, W] and [C2, H, W] (C2 = C by default) joined along the channels."""
    c2 = C2 or C
    a = te.placeholder((C, H, W), "int32", name="a")
    b = te.placeholder((c2, H, W), "int32", name="b")
    return [a, b], te.compute((C + c2, H, W), lambda c, y, x: te.if_then_else(
        c < C, a[ir.Min(c, te.const(C - 1, "int32")), y, x], b[ir.Max(c - C, te.const(0, "int32")), y, x]),
        name="out")


def concat_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return reference.concat([a, b], axis=0)


def _windows(name: str, C: int, H: int, W: int, K: int, S: int) -> tuple[int, int]:
    if K > H or K > W:
        raise ScheduleError(f"{name}: a window of K = {K} is larger than the {H} x {W} input")
    return (H - K) // S + 1, (W - K) // S + 1


def max_pool(C: int, H: int, W: int, K: int = 2, S: int = 2):
    oh, ow = _windows("max_pool", C, H, W, K, S)
    x = te.placeholder((C, H, W), "int32", name="x")
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    return [x], te.compute((C, oh, ow), lambda c, y, w: te.max(x[c, y * S + ry, w * S + rx], axis=[ry, rx]),
                           name="out")


def max_pool_reference(x: np.ndarray, K: int = 2, S: int = 2) -> np.ndarray:
    return reference.pool2d(x, K, S, "max")


def max_pool_blocked(B: int, H: int, W: int, L: int, K: int = 2, S: int = 2, P: int = 0, T: str = "int32"):
    """``max_pool`` on a CPU kernel's blocked output ``[B, H, W, L]`` (``B`` blocks of ``L`` channels, of type
    ``T``, the output's too), padded
    by ``P`` on every side without a padded copy: a tap past the border reads the nearest row or column
    inside, which is in the same window (``P < K``), so the maximum is that of the window's taps inside,
    as ONNX's padding (which no value can win) has it."""
    if not 0 <= P < K:
        raise ScheduleError(f"max_pool_blocked: the padding P = {P} must be >= 0 and below the window "
                            f"K = {K}")
    oh, ow = _windows("max_pool_blocked", B, H + 2 * P, W + 2 * P, K, S)
    x = te.placeholder((B, H, W, L), _int_type("max_pool_blocked", "T", T), name="x")
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")

    def inside(at: ir.Expr, extent: int) -> ir.Expr:
        return ir.min_(ir.max_(at, ir.const(0)), ir.const(extent - 1))
    return [x], te.compute((B, oh, ow, L), lambda b, y, w, lane: te.max(
        x[b, inside(y * S + ry - P, H), inside(w * S + rx - P, W), lane], axis=[ry, rx]), name="out")


def max_pool_blocked_reference(x: np.ndarray, K: int = 2, S: int = 2, P: int = 0, T: str = "int32"
                               ) -> np.ndarray:
    b, h, w, lanes = x.shape
    planes = x.astype(np.int32).transpose(0, 3, 1, 2).reshape(b * lanes, h, w)
    padded = np.pad(planes, ((0, 0), (P, P), (P, P)), constant_values=np.iinfo(np.int32).min)
    out = reference.pool2d(padded, K, S, "max")
    return out.reshape(b, lanes, *out.shape[1:]).transpose(0, 2, 3, 1).astype(T)


def lookup_blocked(B: int, H: int, W: int, L: int, N: int = 256, T: str = "uint8", TO: str = "uint8"):
    """A table of ``N`` results per channel looked up on a CPU kernel's blocked output ``[B, H, W, L]`` (of
    type ``T``, each value less its type's least one indexing its channel's row): ``table[B * L, N]``, one
    row per channel ``b * L + l``, of type ``TO`` (a quantized model's unfolded BatchNormalization,
    ``tandem.network.quantized.lookup_table``). A value outside the table reads its nearest end."""
    x = te.placeholder((B, H, W, L), _int_type("lookup_blocked", "T", T), name="x")
    table = te.placeholder((B * L, N), _int_type("lookup_blocked", "TO", TO), name="table")
    first = int(np.iinfo(T).min)

    def value(b, y, w, lane):
        at = ir.cast(x[b, y, w, lane], "int32") - te.const(first, "int32")
        inside = ir.Min(ir.Max(at, te.const(0, "int32")), te.const(N - 1, "int32"))
        return table[b * L + lane, inside]
    return [x, table], te.compute((B, H, W, L), value, name="out")


#: the types ``lookup`` looks up (8-bit values, or 16-bit ones: two 8-bit values at once) and writes
LOOKUP_TYPES = {"T": ("int8", "uint8", "int16"), "TO": ("int8", "uint8", "int16", "int32")}


def lookup(N: int, T: str = "int8", TO: str = "int8"):
    """A table of results looked up on a flat array ``x[N]`` of type ``T`` (each value less its type's
    least one indexing ``table[2**bits]``, int32 so that the lookups vectorize as dword gathers), each
    result of type ``TO`` (a power-of-two graph's element-wise float layer of one input: a GELU, a Mul by a
    constant, ``tandem.network.quantized.lookup_table``). With 16-bit ``T`` and ``TO``, an 8-bit array
    viewed as pairs of bytes is looked up a pair at a time in a table of the 65536 pairs of results
    (``pair_table``): half the gathers, from a 256 KB table."""
    for key, value in (("T", T), ("TO", TO)):
        if value not in LOOKUP_TYPES[key]:
            raise ScheduleError(f"lookup: {key} = {value!r} is not one of {', '.join(LOOKUP_TYPES[key])}")
    x = te.placeholder((N,), T, name="x")
    table = te.placeholder((1 << np.iinfo(T).bits,), "int32", name="table")
    first = te.const(int(np.iinfo(T).min), "int32")
    return [x, table], te.compute((N,), lambda i: ir.cast(table[ir.cast(x[i], "int32") - first], TO),
                                  name="out")


def pair_table(table: np.ndarray, T: str = "int8") -> np.ndarray:
    """``lookup``'s int16 table of two 8-bit lookups at once: for each 16-bit value (the bytes of two
    values of 8-bit type ``T``, little-endian), the two results of the 256-entry ``table`` (indexed by
    value less ``T``'s least), their bytes so paired, as int32."""
    pairs = np.arange(-(1 << 15), 1 << 15).astype(np.int16).view(np.uint8).reshape(-1, 2)
    first = np.iinfo(T).min
    results = table[pairs.view(T).astype(np.int64) - first].astype(np.int64) & 0xFF
    return (results[:, 0] | results[:, 1] << 8).astype(np.uint16).view(np.int16).astype(np.int32)


def lookup_reference(x: np.ndarray, table: np.ndarray, N: int, T: str = "int8", TO: str = "int8"
                     ) -> np.ndarray:
    return table[x.astype(np.int64) - np.iinfo(T).min].astype(TO)


def lookup_blocked_reference(x: np.ndarray, table: np.ndarray, N: int = 256, T: str = "uint8",
                             TO: str = "uint8") -> np.ndarray:
    b, _, _, lanes = x.shape
    at = np.clip(x.astype(np.int64) - np.iinfo(T).min, 0, N - 1)
    rows = (np.arange(b)[:, None, None, None] * lanes + np.arange(lanes)) * N
    return table.reshape(-1)[rows + at].astype(TO)


def quantize_blocked(C: int, H: int, W: int, G: int, ZP: int = 0, LO: int = 0, HI: int = 255, OFFSET: int = 0,
                     TO: str = "uint8"):
    """A network's float32 input ``x[C, H, W]`` quantized as onnxruntime's QuantizeLinear computes it (x86-64,
    MLAS; ``reference.quantize_linear``): ``x / scale[0]`` in float32, clamped to [LO - ZP, HI - ZP] (a nan
    to the least), rounded half to even, plus ZP; then moved by OFFSET and written in type ``TO`` blocked as
    a CPU kernel's data ``[ceil(C / G), H, W, G]`` (channel ``b * G + g`` at block ``b``, lane ``g``; the
    lanes past C repeat channel C - 1, for weights of 0)."""
    check_bounds("quantize_blocked", ZP, LO, HI)
    x = te.placeholder((C, H, W), "float32", name="x")
    scale = te.placeholder((1,), "float32", name="scale")
    last, moved = te.const(C - 1, "int32"), te.const(ZP + OFFSET, "int32")

    def value(b, y, w, g):
        v = _rounded_to_int(x[ir.Min(b * G + g, last), y, w] / scale[0], LO - ZP, HI - ZP)
        return ir.cast(v + moved, _int_type("quantize_blocked", "TO", TO))
    return [x, scale], te.compute((-(-C // G), H, W, G), value, name="out")


def quantize_blocked_reference(x: np.ndarray, scale: np.ndarray, C: int, G: int, ZP: int = 0, LO: int = 0,
                               HI: int = 255, OFFSET: int = 0, TO: str = "uint8") -> np.ndarray:
    q = reference.quantize_linear(x, scale[0], ZP, LO, HI) + OFFSET
    channels = np.minimum(np.arange(-(-C // G) * G), C - 1)
    return q[channels].reshape(-1, G, *x.shape[1:]).transpose(0, 2, 3, 1).astype(TO)


def moved_bytes(N: int, OFFSET: int = 128, T: str = "int8", TO: str = "uint8"):
    """8-bit ``x[N]`` moved by ``OFFSET`` into 8-bit type ``TO``, modulo 256 (an int8 moved to uint8 by 128
    is its bits with the top one flipped): a GEMM's data in its multiplier's type."""
    x = te.placeholder((N,), _int_type("moved_bytes", "T", T), name="x")
    to = _int_type("moved_bytes", "TO", TO)
    return [x], te.compute((N,), lambda i: ir.cast(ir.cast(x[i], "int32") + te.const(OFFSET, "int32"), to),
                           name="out")


def moved_bytes_reference(x: np.ndarray, N: int, OFFSET: int = 128, T: str = "int8", TO: str = "uint8"
                          ) -> np.ndarray:
    return ((x.astype(np.int64) + OFFSET) % 256).astype(np.uint8).view(TO)


def _strided(name: str, SIZE: int, OFF: int, strides: tuple[int, int, int], extents: tuple[int, int, int],
             T: str) -> tuple[te.Tensor, object]:
    """A flat 8-bit ``x[SIZE]`` and ``b(h, k, n)``: its element ``OFF + h*SH + k*SK + n*SN`` (a view of it
    ``[H, K, N]`` with those strides, which must stay inside it)."""
    last = OFF + sum(s * (e - 1) for s, e in zip(strides, extents, strict=True))
    if OFF < 0 or min(strides) < 0 or last >= SIZE:
        raise ScheduleError(f"{name}: the view [{', '.join(map(str, extents))}] with strides {list(strides)} "
                            f"from {OFF} reaches element {last} of x[{SIZE}]")
    x = te.placeholder((SIZE,), _int_type(name, "T", T), name="x")
    sh, sk, sn = strides
    return x, lambda h, k, n: x[OFF + h * sh + k * sk + n * sn]


def moved_view(H: int, M: int, K: int, SIZE: int, OFF: int = 0, SH: int = 0, SM: int = 0, SK: int = 1,
               OFFSET: int = 128, T: str = "int8", TO: str = "uint8"):
    """``moved_bytes`` of ``a[h, m, k]`` (a strided view of ``x``, ``_strided``: attention's queries as the
    MatMul holds them, a transposed view) into contiguous ``[H, M, K]``: the data of H GEMMs in their
    multiplier's type, in one pass."""
    x, a = _strided("moved_view", SIZE, OFF, (SH, SM, SK), (H, M, K), T)
    to = _int_type("moved_view", "TO", TO)
    return [x], te.compute((H, M, K), lambda h, m, k: ir.cast(ir.cast(a(h, m, k), "int32") +
                                                               te.const(OFFSET, "int32"), to), name="out")


def moved_view_reference(x: np.ndarray, H: int, M: int, K: int, SIZE: int, OFF: int = 0, SH: int = 0,
                         SM: int = 0, SK: int = 1, OFFSET: int = 128, T: str = "int8", TO: str = "uint8"
                         ) -> np.ndarray:
    a = np.lib.stride_tricks.as_strided(x[OFF:], (H, M, K), tuple(s * x.itemsize for s in (SH, SM, SK)))
    return moved_bytes_reference(a, a.size, OFFSET, T, TO)


def pack_columns(H: int, K: int, N: int, Y: int, X: int, SIZE: int, OFF: int = 0, SH: int = 0, SK: int = 1,
                 SN: int = 1, T: str = "int8"):
    """The second operand of H GEMMs as a MatMul holds it, ``b[h, k, n]`` (a strided view of ``x``,
    ``_strided``), packed as ``compiler.ops.cpu.pack_gemm``'s weights of each ``h``: ``[H, N/Y, K/X, Y, X]``,
    zeros past K and N (attention's keys and values, every head at once)."""
    x, b = _strided("pack_columns", SIZE, OFF, (SH, SK, SN), (H, K, N), T)
    whole = K % X == 0 and N % Y == 0

    def value(h, nb, kb, y, j):   # (past K or N: the last element read, a zero written; no branch)
        k, n = kb * X + j, nb * Y + y
        if whole:
            return b(h, k, n)
        inside = b(h, ir.Min(k, ir.const(K - 1)), ir.Min(n, ir.const(N - 1)))
        return ir.Select(ir.And(k < K, n < N), inside, ir.const(0, x.dtype))
    return [x], te.compute((H, -(-N // Y), -(-K // X), Y, X), value, name="packed")


def pack_columns_reference(x: np.ndarray, H: int, K: int, N: int, Y: int, X: int, SIZE: int, OFF: int = 0,
                           SH: int = 0, SK: int = 1, SN: int = 1, T: str = "int8") -> np.ndarray:
    from compiler.ops import cpu as cpu_ops  # the CPU's packing: a simulated target's run does not import it

    b = np.lib.stride_tricks.as_strided(x[OFF:], (H, K, N), tuple(s * x.itemsize for s in (SH, SK, SN)))
    padded = np.zeros((H, -(-K // X) * X, -(-N // Y) * Y), x.dtype)
    padded[:, :K, :N] = b
    out = np.empty((H, padded.shape[2] // Y, padded.shape[1] // X, Y, X), x.dtype)
    return cpu_ops.pack_columns(padded, out)


def column_sums(H: int, K: int, N: int, SIZE: int, OFF: int = 0, SH: int = 0, SK: int = 1, SN: int = 1,
                MOVED: int = 0, T: str = "int8"):
    """``base[n] + MOVED * sum(k, b[h, k, n])`` (``b`` as ``pack_columns`` reads it) in int32: the bias of
    H GEMMs whose data moved by MOVED (``tandem.network.place``'s correction, every head at once). Its
    reduction runs along K: fast where K is contiguous (keys as columns), a strided walk elsewhere."""
    x, b = _strided("column_sums", SIZE, OFF, (SH, SK, SN), (H, K, N), T)
    base = te.placeholder((N,), "int32", name="base")
    k = te.reduce_axis(K, "k")
    total = te.compute((H, N), lambda h, n: te.sum(ir.cast(b(h, k, n), "int32"), axis=k), name="total")
    return [x, base], te.compute((H, N), lambda h, n: base[n] + total[h, n] * te.const(MOVED, "int32"),
                                 name="bias")


def column_sums_reference(x: np.ndarray, base: np.ndarray, H: int, K: int, N: int, SIZE: int, OFF: int = 0,
                          SH: int = 0, SK: int = 1, SN: int = 1, MOVED: int = 0, T: str = "int8"
                          ) -> np.ndarray:
    b = np.lib.stride_tricks.as_strided(x[OFF:], (H, K, N), tuple(s * x.itemsize for s in (SH, SK, SN)))
    return (base.astype(np.int64) + b.sum(axis=1, dtype=np.int64) * MOVED).astype(np.int32)


def avg_pool(C: int, H: int, W: int, K: int = 2, S: int = 2):
    oh, ow = _windows("avg_pool", C, H, W, K, S)
    x = te.placeholder((C, H, W), "float32", name="x")
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    total = te.compute((C, oh, ow), lambda c, y, w: te.sum(x[c, y * S + ry, w * S + rx], axis=[ry, rx]),
                       name="total")
    return [x], te.compute((C, oh, ow), lambda c, y, w: total[c, y, w] / te.const(float(K * K), "float32"),
                           name="out")


def avg_pool_reference(x: np.ndarray, K: int = 2, S: int = 2) -> np.ndarray:
    return reference.pool2d(x, K, S, "avg")


def global_avg_pool(C: int, H: int, W: int):
    x = te.placeholder((C, H, W), "float32", name="x")
    ry, rx = te.reduce_axis(H, "ry"), te.reduce_axis(W, "rx")
    total = te.compute((C,), lambda c: te.sum(x[c, ry, rx], axis=[ry, rx]), name="total")
    return [x], te.compute((C,), lambda c: total[c] / te.const(float(H * W), "float32"), name="out")


def global_avg_pool_reference(x: np.ndarray) -> np.ndarray:
    return reference.pool2d(x, x.shape[1:], 1, "avg")[:, 0, 0]


def softmax(R: int, D: int):
    """Each row's softmax: the row's maximum subtracted, exponentials, their sum, one division each."""
    x = te.placeholder((R, D), "float32", name="x")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")
    peak = te.compute((R,), lambda r: te.max(x[r, j], axis=j), name="peak")
    e = te.compute((R, D), lambda r, d: te.exp(x[r, d] - peak[r]), name="e")
    total = te.compute((R,), lambda r: te.sum(e[r, k], axis=k), name="total")
    return [x], te.compute((R, D), lambda r, d: e[r, d] / total[r], name="out")


def softmax_reference(x: np.ndarray) -> np.ndarray:
    return reference.softmax(x).astype(np.float32)


def softmax_int8(R: int, D: int, E: int = 7, MASK: int = 0):
    """Each row's softmax in integers as the power-of-two graph computes it (``reference.softmax_int8``):
    int8 ``x[R, D]`` (``MASK`` 1: its -128 stands for -inf), ``table[257]`` (0, then ``softmax_table`` of the
    input's exponent), the result at exponent ``E``: each value's difference from its row's maximum looked
    up, the row's exact int64 sum, ``2**E / sum`` once per row and one float32 product per value, rounded
    half to even, saturated to int8."""
    x = te.placeholder((R, D), "int8", name="x")
    table = te.placeholder((257,), "int32", name="table")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")

    def wide(r, d):
        v = ir.cast(x[r, d], "int32")
        return ir.Select(ir.EQ(x[r, d], te.const(-128, "int8")), te.const(-512, "int32"), v) if MASK else v
    top = te.compute((R,), lambda r: te.max(wide(r, j), axis=j), name="top")
    peak = te.compute((R,), lambda r: ir.Max(top[r], te.const(-256, "int32")), name="peak")
    # (the clamp to 256 never binds, x <= peak, but proves the index in bounds: the lookups vectorize)
    e = te.compute((R, D), lambda r, d: table[ir.Min(ir.Max(wide(r, d) - peak[r] + te.const(256, "int32"),
                                                            te.const(0, "int32")), te.const(256, "int32"))],
                   name="e")
    total = te.compute((R,), lambda r: te.sum(ir.cast(e[r, k], "int64"), axis=k), name="total")

    def reciprocal(r):
        whole = ir.cast(total[r], "float32")
        return ir.Select(ir.GT(total[r], te.const(0, "int64")),
                         te.const(2.0 ** E, "float32") / whole, te.const(0.0, "float32"))
    inv = te.compute((R,), reciprocal, name="inv")

    def out(r, d):
        p = ir.cast(e[r, d], "float32") * inv[r]
        return ir.cast(_rounded(p, -128, 127), "int8")
    return [x, table], te.compute((R, D), out, name="out")


def softmax_int8_reference(x: np.ndarray, table: np.ndarray, E: int = 7, MASK: int = 0) -> np.ndarray:
    return reference.softmax_int8(x, table, E, -128 if MASK else None)


def layer_norm_int8(R: int, D: int):
    """Each row of int8 ``x[R, D]`` normalized as the power-of-two graph computes it
    (``reference.layer_norm_int8``): exact integer sums, then float32 steps (no two fused), by ``gamma[D]``
    and ``beta[D]`` (float32, at the output's exponent) and ``eps[1]`` (float32, at twice the input's);
    int8."""
    x = te.placeholder((R, D), "int8", name="x")
    gamma = te.placeholder((D,), "float32", name="gamma")
    beta = te.placeholder((D,), "float32", name="beta")
    eps = te.placeholder((1,), "float32", name="eps")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")
    s1 = te.compute((R,), lambda r: te.sum(ir.cast(x[r, j], "int32"), axis=j), name="s1")
    s2 = te.compute((R,), lambda r: te.sum(ir.cast(x[r, k], "int32") * ir.cast(x[r, k], "int32"), axis=k),
                    name="s2")
    n = te.const(float(D), "float32")
    mean = te.compute((R,), lambda r: ir.cast(s1[r], "float32") / n, name="mean")

    def inverse(r):
        wide = ir.cast(s1[r], "int64")
        spread = te.const(D, "int64") * ir.cast(s2[r], "int64") - wide * wide
        var = ir.cast(spread, "float32") / te.const(float(D * D), "float32")
        return te.const(1.0, "float32") / te.sqrt(var + eps[0])
    inv = te.compute((R,), inverse, name="inv")

    def out(r, d):
        y = (ir.cast(x[r, d], "float32") - mean[r]) * inv[r] * gamma[d] + beta[d]
        return ir.cast(_rounded(y, -128, 127), "int8")
    return [x, gamma, beta, eps], te.compute((R, D), out, name="out")


def layer_norm_int8_reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: np.ndarray
                              ) -> np.ndarray:
    return reference.layer_norm_int8(x, gamma, beta, np.float32(eps[0]))


def layer_norm(R: int, D: int):
    """Each row normalized by its mean and biased variance (plus EPS), then ``* gamma + beta``."""
    x = te.placeholder((R, D), "float32", name="x")
    gamma = te.placeholder((D,), "float32", name="gamma")
    beta = te.placeholder((D,), "float32", name="beta")
    j, k = te.reduce_axis(D, "j"), te.reduce_axis(D, "k")
    size = te.const(float(D), "float32")
    total = te.compute((R,), lambda r: te.sum(x[r, j], axis=j), name="total")
    centered = te.compute((R, D), lambda r, d: x[r, d] - total[r] / size, name="centered")
    squares = te.compute((R,), lambda r: te.sum(centered[r, k] * centered[r, k], axis=k), name="squares")
    scale = te.compute((R,), lambda r: te.const(1.0, "float32")
                       / te.sqrt(squares[r] / size + te.const(EPS, "float32")), name="scale")
    return [x, gamma, beta], te.compute(
        (R, D), lambda r, d: centered[r, d] * scale[r] * gamma[d] + beta[d], name="out")


def layer_norm_reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return reference.layer_norm(x, gamma, beta, EPS).astype(np.float32)


def gelu(R: int, D: int):
    """GELU in its tanh form (``reference.gelu_tanh``)."""
    x = te.placeholder((R, D), "float32", name="x")

    def body(r, d):
        v = x[r, d]
        cube = te.const(0.044715, "float32") * v * v * v
        inner = te.const(float(np.sqrt(2.0 / np.pi)), "float32") * (v + cube)
        return te.const(0.5, "float32") * v * (te.const(1.0, "float32") + te.tanh(inner))

    return [x], te.compute((R, D), body, name="out")


def gelu_reference(x: np.ndarray) -> np.ndarray:
    return reference.gelu_tanh(x).astype(np.float32)


# ---- a quantized ONNX model's operators (tandem/network/qdq.py): onnxruntime's float32 requantization


_ROUNDER = 12582912.0   # 1.5 * 2**23: adding and subtracting it rounds a float32 of magnitude < 2**22 to an
#                         integer, half to even (IEEE round-to-nearest-even), as onnxruntime's cvtps does


def _rounded(v, lo: int, hi: int, nan_to_lo: bool = True):
    """float32 ``v`` clamped to [lo, hi] and rounded half to even (still float32), as MLAS clamps: a nan to
    ``lo`` (x86's maxps returns its second operand; ``reference.saturated``), so that a conversion of the
    value needs no check (``compiler.arith.float_bounds.never_nan``). ``nan_to_lo`` False: a ``Max`` (a
    float result on a target with no float comparison, DianNao's scalar unit)."""
    low = te.const(float(lo), "float32")
    floor = ir.Select(ir.GT(v, low), v, low) if nan_to_lo else ir.Max(v, low)
    clamped = ir.Min(floor, te.const(float(hi), "float32"))
    rounder = te.const(_ROUNDER, "float32")
    return (clamped + rounder) - rounder


def _rounded_to_int(v, lo: int, hi: int):
    """float32 ``v`` clamped to [lo, hi], rounded half to even, as int32."""
    return ir.cast(_rounded(v, lo, hi), "int32")


def requantized(total, scale, ZP: int, LO: int, HI: int):
    """int32 ``total`` requantized by float32 ``scale`` as onnxruntime's MLAS does (``reference.
    requantize_scaled``): converted to float32, multiplied, rounded half to even, plus the zero point ``ZP``,
    saturated to [LO, HI]; int32. The one expression of requantize_scaled, scaled_mean and the CPU's fused
    conv and GEMM epilogue (compiler/ops/cpu.py ``Requantize``)."""
    return _rounded_to_int(ir.cast(total, "float32") * scale, LO - ZP, HI - ZP) + te.const(ZP, "int32")


def narrow_type(LO: int, HI: int) -> str:
    """The 8-bit type that holds [LO, HI] (a part of uint8's or int8's range, ``check_bounds``): int8 where it
    holds them, else uint8. A requantized output is written so (``compiler.passes.narrow_output``)."""
    if -128 <= LO <= HI <= 127:
        return "int8"
    if 0 <= LO <= HI <= 255:
        return "uint8"
    raise ScheduleError(f"[LO, HI] = [{LO}, {HI}] fits neither int8 nor uint8")


def check_bounds(name: str, ZP: int | None, LO: int, HI: int) -> None:
    """[LO, HI] inside uint8's or int8's range, and the zero point ZP (if any) inside it."""
    if not -128 <= LO <= HI <= 255 or (ZP is not None and not LO <= ZP <= HI):
        raise ScheduleError(f"{name}: the zero point ZP = {ZP} must lie in [LO, HI] = [{LO}, {HI}], a part "
                            f"of [-128, 255] (uint8 or int8)")


def requantize_scaled(C: int, H: int, W: int, ZP: int = 0, LO: int = 0, HI: int = 255, F: int = 0):
    """int32 sums plus bias [C, H, W], times a float32 scale [C, H, W], rounded half to even, plus the zero
    point, saturated to [LO, HI]: held in int32, or with ``F=1`` in float32 (exact integers: for a target
    with no float-to-int conversion)."""
    check_bounds("requantize_scaled", ZP, LO, HI)
    acc = te.placeholder((C, H, W), "int32", name="acc")
    bias = te.placeholder((C, H, W), "int32", name="bias")
    scale = te.placeholder((C, H, W), "float32", name="scale")

    def value(*i):
        if not F:
            return requantized(acc[i] + bias[i], scale[i], ZP, LO, HI)
        v = _rounded(ir.cast(acc[i] + bias[i], "float32") * scale[i], LO - ZP, HI - ZP, nan_to_lo=False)
        return v + te.const(float(ZP), "float32")
    return [acc, bias, scale], te.compute((C, H, W), value, name="out")


def requantize_scaled_reference(acc: np.ndarray, bias: np.ndarray, scale: np.ndarray, ZP: int = 0,
                                LO: int = 0, HI: int = 255, F: int = 0) -> np.ndarray:
    total = (acc.astype(np.int64) + bias.astype(np.int64)).astype(np.int32)   # int32 sums wrap
    out = reference.requantize_scaled(total, scale, ZP, LO, HI)
    return out.astype(np.float32 if F else np.int32)


def dyadic(x: float) -> tuple[int, int]:
    """float32 ``x`` as ``m * 2**e`` with an integer ``|m| < 2**24``."""
    fraction, exponent = np.frexp(np.float32(x))
    return int(np.float32(fraction) * np.float32(2**24)), int(exponent) - 24


def qlinear_add(C: int, H: int, W: int, MA: int = 1, EA: int = 0, MB: int = 1, EB: int = 0, MF: int = 0,
                EF: int = 0, LO: int = 0, HI: int = 255, TA: str = "int32", TB: str = "int32",
                TO: str = "int32"):
    """Two 8-bit tensors (held in types ``TA`` and ``TB``; the output in ``TO``) added as onnxruntime's
    QLinearAdd on x86-64:
    ``fma(a, ka, fma(b, kb, kf))`` in float32 with the constants ``k = M * 2**E``
    (``reference.qlinear_add_constants``, each ``dyadic``: exact in float32), each fused multiply-add
    rounded once (``te.fma``: LLVM's ``llvm.fma``, an FMA instruction where the CPU has one), then
    rounded half to even and saturated to [LO, HI]."""
    check_bounds("qlinear_add", None, LO, HI)   # (the fixed part holds the output's zero point)
    limits = np.iinfo(_int_type("qlinear_add", "TO", TO))
    if not limits.min <= LO <= HI <= limits.max:
        raise ScheduleError(f"qlinear_add: TO = {TO} does not hold [LO, HI] = [{LO}, {HI}]")
    a = te.placeholder((C, H, W), _int_type("qlinear_add", "TA", TA), name="a")
    b = te.placeholder((C, H, W), _int_type("qlinear_add", "TB", TB), name="b")
    ka, kb, kf = (te.const(float(np.float32(m * 2.0**e)), "float32")
                  for m, e in ((MA, EA), (MB, EB), (MF, EF)))

    def value(*i):
        inner = te.fma(ir.cast(b[i], "float32"), kb, kf)
        total = _rounded_to_int(te.fma(ir.cast(a[i], "float32"), ka, inner), LO, HI)
        return total if TO == "int32" else ir.cast(total, TO)
    return [a, b], te.compute((C, H, W), value, name="out")


def qlinear_add_reference(a: np.ndarray, b: np.ndarray, MA: int = 1, EA: int = 0, MB: int = 1, EB: int = 0,
                          MF: int = 0, EF: int = 0, LO: int = 0, HI: int = 255, TA: str = "int32",
                          TB: str = "int32", TO: str = "int32") -> np.ndarray:
    k = [np.float32(m * 2.0**e) for m, e in ((MA, EA), (MB, EB), (MF, EF))]
    return reference.qlinear_add(a, b, *k, LO, HI).astype(TO)


def scaled_mean(C: int, H: int, W: int, Z: int = 0, ZP: int = 0, LO: int = 0, HI: int = 255):
    """onnxruntime's QLinearGlobalAveragePool: each channel's int32 sum minus ``Z`` (the input zero point
    times H * W), times the float32 scale [C], rounded half to even, plus ZP, saturated to [LO, HI]."""
    check_bounds("scaled_mean", ZP, LO, HI)
    x = te.placeholder((C, H, W), "int32", name="x")
    scale = te.placeholder((C,), "float32", name="scale")
    ry, rx = te.reduce_axis(H, name="ry"), te.reduce_axis(W, name="rx")
    total = te.compute((C,), lambda c: te.sum(x[c, ry, rx], axis=[ry, rx]), name="total")
    return [x, scale], te.compute((C,), lambda c: requantized(total[c] - te.const(Z, "int32"), scale[c],
                                                              ZP, LO, HI), name="out")


def scaled_mean_blocked(B: int, H: int, W: int, L: int, Z: int = 0, ZP: int = 0, LO: int = 0, HI: int = 255,
                        T: str = "int32"):
    """``scaled_mean`` of a CPU kernel's blocked output ``[B, H, W, L]`` (``B`` blocks of ``L`` channels, of
    type ``T``): each channel's mean as [B, L], which is the channels' order (channel ``b * L + l``); its
    scale [B, L]."""
    check_bounds("scaled_mean_blocked", ZP, LO, HI)
    x = te.placeholder((B, H, W, L), _int_type("scaled_mean_blocked", "T", T), name="x")
    scale = te.placeholder((B, L), "float32", name="scale")
    ry, rx = te.reduce_axis(H, name="ry"), te.reduce_axis(W, name="rx")
    wide = _wide(x)
    total = te.compute((B, L), lambda b, lane: te.sum(wide(b, ry, rx, lane), axis=[ry, rx]), name="total")
    return [x, scale], te.compute((B, L), lambda b, lane: requantized(
        total[b, lane] - te.const(Z, "int32"), scale[b, lane], ZP, LO, HI), name="out")


def scaled_mean_blocked_reference(x: np.ndarray, scale: np.ndarray, Z: int = 0, ZP: int = 0, LO: int = 0,
                                  HI: int = 255, T: str = "int32") -> np.ndarray:
    sums = x.astype(np.int64).sum(axis=(1, 2)) - Z
    return reference.requantize_scaled(sums, scale, ZP, LO, HI).astype(np.int32)


def scaled_mean_reference(x: np.ndarray, scale: np.ndarray, Z: int = 0, ZP: int = 0, LO: int = 0,
                          HI: int = 255) -> np.ndarray:
    sums = x.astype(np.int64).sum(axis=(1, 2)) - Z
    return reference.requantize_scaled(sums, scale, ZP, LO, HI).astype(np.int32)
