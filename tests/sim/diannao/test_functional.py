"""The DianNao fast paths equal the ISA spec: for every instruction in ``FAST_PATHS`` and every dtype the
spec allows it, a random valid instance run by its numpy fast path and by ``execute_generic`` (the spec's
semantics through ``isa.execute``) on two identical copies of a randomly filled card leaves the same bytes in
every memory of the card, and changes nothing outside the bytes its destination operand covers.

Exactness: integer results, copies, fills and element-wise float results are bit-exact (a NaN equals any
NaN, since the spec does not fix NaN payloads). conv and matmul on floats sum their products in f32 in an
order the spec leaves open and round to T once, so they are compared with a float64 reference within

    |result - exact| <= K * eps(f32) * sum(|products|) + ulp_T(|exact|)

per output element (K products per sum): twice the worst error of K - 1 f32 additions, plus one unit in the
last place of T for the final rounding. qconv wraps in i32, which no order changes: bit-exact.

The card here has the default shape (4 clusters of 4 cores) and small memories (``SMALL``), so that each
example can fill and compare every memory of every core; the fast paths read nothing else from the spec.
Last, whole kernels run with and without fast paths must leave the same memory in the same cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import isa
from baselines.diannao_kernels import elementwise_program
from isa.asm import format_insn
from sim.diannao.functional import FAST_PATHS, CardMemory, execute_generic, fast_path
from sim.diannao.machine import Card, DiannaoResult

SMALL = {"GMEM_BYTES": 1 << 16, "SMEM_BYTES": 1 << 14, "NMEM_BYTES": 1 << 14, "WMEM_BYTES": 1 << 14}
SPEC = isa.load_isa("diannao", params=SMALL)
P = SPEC.params
CAPACITY = {name: s.bytes for name, s in SPEC.spaces.items()}
SPACE_NAME = {s.id: name for name, s in SPEC.spaces.items()}
CORES = P["CLUSTERS"] * P["CORES_PER_CLUSTER"]
ALIGN = P["VECTOR_ALIGN"]
BLOCK = P["CONV_BLOCK"]
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "f16": np.float16, "f32": np.float32}
EXAMPLES = settings(max_examples=8, deadline=None)

VECTOR_BINARY = ("vadd", "vsub", "vmul", "vmax", "vmin")
VECTOR_UNARY = ("relu", "vabs")
COPIES = ("memcpy", "memcpyr", "memcpy_async", "memcpyr_async")
# every (dst, src) pair memcpy may name: all but WMEM to WMEM
COPY_PAIRS = [(d, s) for d in SPEC.spaces for s in SPEC.spaces if d != s or d != "WMEM"]


def allowed_types(name: str) -> list[str]:
    """The dtypes the spec allows for instruction ``name``'s T."""
    return list(SPEC.instruction(name).types["T"])


def test_every_fast_path_is_covered_here():
    """Each fast path is the one of exactly one synchronous built-in instruction (by contract), and of its
    asynchronous twin if it has one (the same contract); all are tested here."""
    covered = {*VECTOR_BINARY, *VECTOR_UNARY, *COPIES, "vzero", "conv", "qconv", "matmul"}
    with_fast_path = {name for name, instr in SPEC.instructions.items() if fast_path(instr) is not None}
    synchronous = {name for name in covered if not SPEC.instruction(name).timing.asynchronous}
    assert with_fast_path == covered and len(FAST_PATHS) == len(synchronous)


# ------------------------------------------------------------------------------------------ the card
def memory_name(space: str, core: int) -> str:
    """The name this file gives the memory that ``space`` means for ``core``: SMEM is its cluster's."""
    if space == "GMEM":
        return "GMEM"
    if space == "SMEM":
        return f"SMEM{core // P['CORES_PER_CLUSTER']}"
    return f"{space}{core}"


def memories(memory: CardMemory) -> dict[str, np.ndarray]:
    """Every memory of the card by name (GMEM, SMEM<cluster>, NMEM<core>, WMEM<core>)."""
    out = {"GMEM": memory.gmem}
    out.update({f"SMEM{k}": m for k, m in enumerate(memory.smem)})
    out.update({f"NMEM{k}": m for k, m in enumerate(memory.nmem)})
    out.update({f"WMEM{k}": m for k, m in enumerate(memory.wmem)})
    return out


def random_card(rng: np.random.Generator) -> CardMemory:
    memory = CardMemory(SPEC)
    for mem in memories(memory).values():
        mem[...] = np.frombuffer(rng.bytes(mem.size), np.uint8)
    return memory


def clone(memory: CardMemory) -> CardMemory:
    twin = CardMemory(SPEC, memory.gmem.copy())
    for name, mem in memories(twin).items():
        mem[...] = memories(memory)[name]
    return twin


def put(memory: CardMemory, space: str, core: int, addr: int, values: np.ndarray) -> None:
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    memories(memory)[memory_name(space, core)][addr:addr + raw.size] = raw


# ------------------------------------------------------------------------------------------ operand values
def float_specials(dt: type) -> np.ndarray:
    info = np.finfo(dt)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, info.max, -info.max,
                     info.smallest_subnormal, -info.smallest_subnormal, 1.0, -1.0], dt)


def int_specials(dt: type) -> np.ndarray:
    info = np.iinfo(dt)
    return np.array([info.min, info.max, info.min + 1, -1, 0, 1], dt)


def edgy(rng: np.random.Generator, n: int, dt: type) -> np.ndarray:
    """``n`` values of ``dt``: every encoding equally likely (NaN payloads, subnormals and all), moderate
    normal values, and the special values (signed zeros, infinities, NaN, extremes) at random places."""
    itemsize = np.dtype(dt).itemsize
    out = np.frombuffer(rng.bytes(n * itemsize), dt).copy()
    kind = rng.integers(0, 3, n)
    if np.issubdtype(dt, np.floating):
        scaled = rng.standard_normal(n) * 10.0 ** rng.integers(-4, 4, n)
        out[kind == 1] = scaled[kind == 1].astype(dt)
        specials = float_specials(dt)
    else:
        specials = int_specials(dt)
    out[kind == 2] = rng.choice(specials, int(np.sum(kind == 2)))
    return out


def special_pairs(dt: type, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two vectors of ``n`` elements whose first elements hold every pair of special values (in a random
    order when ``n`` holds fewer than all pairs); the rest as ``edgy``."""
    s = float_specials(dt) if np.issubdtype(dt, np.floating) else int_specials(dt)
    pairs = [(x, y) for x in range(s.size) for y in range(s.size)]
    order = rng.permutation(len(pairs))[:n]
    a, b = edgy(rng, n, dt), edgy(rng, n, dt)
    a[:order.size] = s[[pairs[k][0] for k in order]]
    b[:order.size] = s[[pairs[k][1] for k in order]]
    return a, b


# ------------------------------------------------------------------------------------------ one comparison
@dataclass(frozen=True)
class Case:
    """One instance: the instruction, the core that runs it, the fields its fast path gets (register-based
    addresses resolved, as the machine passes them), the register files the generic executor reads."""

    insn: isa.Insn
    core: int
    fields: dict[str, int]
    registers: dict[str, np.ndarray] | None = None

    def __str__(self) -> str:
        return f"{format_insn(SPEC, self.insn)} on core {self.core}"


@dataclass(frozen=True)
class Written:
    """The bytes an instruction may write: memory ``memory`` at byte indices ``idx``, holding ``dtype``."""

    memory: str
    idx: np.ndarray
    dtype: np.dtype


def span(addr: int, nbytes: int) -> np.ndarray:
    return np.arange(addr, addr + nbytes)


def written(case: Case) -> Written:
    """Where ``case``'s destination operand lies, worked out from the spec's operand shapes by hand."""
    f, name, core = case.fields, case.insn.name, case.core
    if name in COPIES:
        rows = f["dst"] + np.arange(f["count"])[:, None] * f["dst_stride"] + np.arange(f["len"])[None, :]
        return Written(memory_name(SPACE_NAME[f["dst_space"]], core), rows.reshape(-1), np.dtype(np.uint8))
    if name == "vzero":
        return Written(memory_name(SPACE_NAME[f["dst_space"]], core), span(f["dst"], f["n"]),
                       np.dtype(np.uint8))
    dt = np.dtype(NUMPY[SPEC.types_of(case.insn)["T"]])
    if name in VECTOR_BINARY or name in VECTOR_UNARY:
        return Written(f"NMEM{core}", span(f["dst"], f["n"] * dt.itemsize), dt)
    if name in ("conv", "qconv"):
        out_dt = np.dtype(np.int32) if name == "qconv" else dt
        ho, wo = (f["h"] - f["kh"]) // f["s"] + 1, (f["w"] - f["kw"]) // f["s"] + 1
        return Written(f"NMEM{core}", span(f["out"], ho * wo * f["cout"] * out_dt.itemsize), out_dt)
    assert name == "matmul", name
    return Written(f"NMEM{core}", span(f["out"], f["m"] * f["n"] * dt.itemsize), dt)


def run_both(case: Case, before: CardMemory) -> tuple[CardMemory, CardMemory]:
    """``case`` run by its fast path and by the generic executor, each on its own copy of ``before``."""
    fast, generic = clone(before), clone(before)
    types = SPEC.types_of(case.insn)
    dt = np.dtype(NUMPY[types["T"]]) if "T" in types else None
    with np.errstate(all="ignore"):  # IEEE overflow and NaN have defined results here, not warnings
        fast_path(SPEC.instruction(case.insn.name))(fast, case.core, dict(case.fields), dt)
    execute_generic(SPEC, case.insn, generic, case.core, case.registers)
    return fast, generic


def assert_only_destination_changed(case: Case, before: CardMemory, after: CardMemory, who: str) -> None:
    w = written(case)
    old = memories(before)
    for name, mem in memories(after).items():
        changed = mem != old[name]
        if name == w.memory:
            changed[w.idx] = False
        if changed.any():
            first = int(np.flatnonzero(changed)[0])
            raise AssertionError(f"{case}: the {who} changed {name} byte {first} "
                                 f"({old[name][first]} -> {mem[first]}), outside the destination operand")


def result_of(case: Case, memory: CardMemory) -> np.ndarray:
    w = written(case)
    return memories(memory)[w.memory][w.idx].view(w.dtype)


def assert_same_bits(case: Case, fast: np.ndarray, generic: np.ndarray) -> None:
    """Bit-exact equality, except that any NaN equals any NaN."""
    same = fast.view(np.uint8).reshape(fast.size, -1) == generic.view(np.uint8).reshape(generic.size, -1)
    same = same.all(axis=1)
    if np.issubdtype(fast.dtype, np.floating):
        same |= np.isnan(fast) & np.isnan(generic)
    if not same.all():
        k = int(np.flatnonzero(~same)[0])
        raise AssertionError(f"{case}: element {k} is {fast[k]!r} on the fast path but {generic[k]!r} in the "
                             f"spec ({int(np.sum(~same))} of {same.size} differ)")


def check(case: Case, before: CardMemory) -> tuple[np.ndarray, np.ndarray]:
    """Run ``case`` both ways from ``before``; check that only the destination changed, and that every byte
    outside it matches; return the two results (the destination as its dtype)."""
    assert isa.check_constraints(SPEC, case.insn, case.registers) == [], case
    fast, generic = run_both(case, before)
    assert_only_destination_changed(case, before, fast, "fast path")
    assert_only_destination_changed(case, before, generic, "generic executor")
    return result_of(case, fast), result_of(case, generic)


# ------------------------------------------------------------------------------------------ strategies
seeds = st.integers(0, 2**32 - 1)
cores = st.integers(0, CORES - 1)


def aligned_address(draw, nbytes: int, capacity: int, align: int = ALIGN) -> int:
    """An ``align``-aligned address where ``nbytes`` fit below ``capacity`` (ends included)."""
    top = (capacity - nbytes) // align
    return draw(st.one_of(st.just(top), st.integers(0, top))) * align


@st.composite
def vector_cases(draw, name: str, dtype: str) -> Case:
    size = np.dtype(NUMPY[dtype]).itemsize
    n = draw(st.integers(1, 8)) * P["VECTOR_ELEMS"]
    cap = CAPACITY["NMEM"]
    core = draw(cores)
    if name in VECTOR_UNARY:
        insn = SPEC.insn(name, T=dtype, dst=aligned_address(draw, n * size, cap), n=n)
    else:
        a, b, other = (aligned_address(draw, n * size, cap) for _ in range(3))
        b = draw(st.sampled_from([a, b]))  # b may be a itself
        dst = draw(st.sampled_from([a, b, other]))  # dst may be a or b (in place), or lie apart from both
        insn = SPEC.insn(name, T=dtype, dst=dst, a=a, b=b, n=n)
        assume(isa.check_constraints(SPEC, insn) == [])  # dst overlapping a or b partially
    return Case(insn, core, insn.values)


@st.composite
def copy_cases(draw, name: str, dst_space: str, src_space: str) -> Case:
    length = draw(st.integers(1, 300))
    count = draw(st.integers(1, 6))
    if count == 1:  # strides do not matter for one row: any value, also below len
        dst_stride, src_stride = draw(st.integers(0, 400)), draw(st.integers(0, 400))
    else:
        gaps = st.one_of(st.just(0), st.integers(1, 100))
        dst_stride, src_stride = length + draw(gaps), length + draw(gaps)
    dst_extent = (count - 1) * dst_stride + length
    src_extent = (count - 1) * src_stride + length
    dst = aligned_address(draw, dst_extent, CAPACITY[dst_space], align=1)
    src = aligned_address(draw, src_extent, CAPACITY[src_space], align=1)
    shape = dict(dst_space=dst_space, src_space=src_space, len=length, count=count, dst_stride=dst_stride,
                 src_stride=src_stride)
    core = draw(cores)
    if name in ("memcpy", "memcpy_async"):
        insn = SPEC.insn(name, dst=dst, src=src, **shape)
        assume(isa.check_constraints(SPEC, insn) == [])  # an NMEM->NMEM copy onto its own source
        return Case(insn, core, insn.values)
    R = np.frombuffer(np.random.default_rng(draw(seeds)).bytes(4 * P["NUM_REGS"]), np.int32).copy()
    rd, rs1 = draw(st.integers(0, P["NUM_REGS"] - 1)), draw(st.integers(0, P["NUM_REGS"] - 1))
    offsets = st.integers(-(1 << 24), (1 << 24) - 1)
    dst_off = draw(offsets)
    R[rd] = dst - dst_off
    src_off = src - int(R[rs1]) if rs1 == rd else draw(offsets)
    assume(-(1 << 24) <= src_off < 1 << 24)
    if rs1 != rd:
        R[rs1] = src - src_off
    insn = SPEC.insn(name, rd=rd, rs1=rs1, dst_off=dst_off, src_off=src_off, **shape)
    assume(isa.check_constraints(SPEC, insn, {"R": R}) == [])
    fields = {**insn.values, "dst": int(R[rd]) + dst_off, "src": int(R[rs1]) + src_off}
    return Case(insn, core, fields, {"R": R})


@st.composite
def conv_cases(draw, name: str, dtype: str) -> Case:
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kh, kw = draw(st.integers(1, min(h, 3))), draw(st.integers(1, min(w, 3)))
    s, cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.sampled_from([BLOCK, 2 * BLOCK]))
    size = np.dtype(NUMPY[dtype]).itemsize
    out_size = 4 if name == "qconv" else size
    ho, wo = (h - kh) // s + 1, (w - kw) // s + 1
    out = aligned_address(draw, ho * wo * cout * out_size, CAPACITY["NMEM"])
    inp = aligned_address(draw, h * w * cin * size, CAPACITY["NMEM"])
    wgt = aligned_address(draw, kh * kw * cin * cout * size, CAPACITY["WMEM"], align=P["WMEM_ALIGN"])
    insn = SPEC.insn(name, T=dtype, out=out, inp=inp, wgt=wgt, h=h, w=w, cin=cin, cout=cout, kh=kh, kw=kw,
                     s=s)
    assume(isa.check_constraints(SPEC, insn) == [])  # out overlapping inp
    return Case(insn, draw(cores), insn.values)


@st.composite
def matmul_cases(draw, dtype: str) -> Case:
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(1, 40)), draw(st.sampled_from([BLOCK, 2 * BLOCK, 48]))
    size = np.dtype(NUMPY[dtype]).itemsize
    out = aligned_address(draw, m * n * size, CAPACITY["NMEM"])
    a = aligned_address(draw, m * k * size, CAPACITY["NMEM"])
    b = aligned_address(draw, k * n * size, CAPACITY["WMEM"], align=P["WMEM_ALIGN"])
    insn = SPEC.insn("matmul", T=dtype, out=out, a=a, b=b, m=m, k=k, n=n)
    assume(isa.check_constraints(SPEC, insn) == [])  # out overlapping a
    return Case(insn, draw(cores), insn.values)


# ------------------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize(("dst_space", "src_space"), COPY_PAIRS)
@pytest.mark.parametrize("name", COPIES)
@EXAMPLES
@given(data=st.data(), seed=seeds)
def test_copies_between_every_allowed_pair_of_spaces_equal_the_spec(name, dst_space, src_space, data, seed):
    case = data.draw(copy_cases(name, dst_space, src_space))
    fast, generic = check(case, random_card(np.random.default_rng(seed)))
    assert_same_bits(case, fast, generic)


@pytest.mark.parametrize("space", [s for s in SPEC.spaces if s != "GMEM"])
@EXAMPLES
@given(data=st.data(), seed=seeds)
def test_vzero_of_every_on_chip_space_equals_the_spec(space, data, seed):
    n = data.draw(st.integers(1, 16)) * ALIGN
    dst = aligned_address(data.draw, n, CAPACITY[space])
    insn = SPEC.insn("vzero", dst_space=space, dst=dst, n=n)
    case = Case(insn, data.draw(cores), insn.values)
    fast, generic = check(case, random_card(np.random.default_rng(seed)))
    assert_same_bits(case, fast, generic)
    assert not fast.any()


def fill_vector_operands(case: Case, before: CardMemory, rng: np.random.Generator) -> None:
    """Special-value-rich contents for the operands (a before b: where they overlap, b's values win)."""
    f = case.fields
    dt = NUMPY[SPEC.types_of(case.insn)["T"]]
    if case.insn.name in VECTOR_UNARY:
        put(before, "NMEM", case.core, f["dst"], edgy(rng, f["n"], dt))
        return
    a, b = special_pairs(dt, f["n"], rng)
    put(before, "NMEM", case.core, f["a"], a)
    put(before, "NMEM", case.core, f["b"], b)


VECTOR_OPS = [(name, t) for name in (*VECTOR_BINARY, *VECTOR_UNARY) for t in allowed_types(name)]


@pytest.mark.parametrize(("name", "dtype"), VECTOR_OPS)
@EXAMPLES
@given(data=st.data(), seed=seeds)
def test_vector_ops_are_bit_exact_with_the_spec(name, dtype, data, seed):
    case = data.draw(vector_cases(name, dtype))
    rng = np.random.default_rng(seed)
    before = random_card(rng)
    fill_vector_operands(case, before, rng)
    assert_same_bits(case, *check(case, before))


@pytest.mark.parametrize(("name", "dtype"), [(n, t) for n, t in VECTOR_OPS if t.startswith("f")])
def test_float_vector_ops_agree_with_the_spec_on_every_pair_of_special_values(name, dtype):
    dt = NUMPY[dtype]
    n = -(-float_specials(dt).size ** 2 // P["VECTOR_ELEMS"]) * P["VECTOR_ELEMS"]
    size = np.dtype(dt).itemsize
    rng = np.random.default_rng(VECTOR_OPS.index((name, dtype)))
    before = random_card(rng)
    if name in VECTOR_UNARY:
        insn = SPEC.insn(name, T=dtype, dst=0, n=n)
        put(before, "NMEM", 5, 0, special_pairs(dt, n, rng)[0])
    else:
        insn = SPEC.insn(name, T=dtype, dst=0, a=0, b=n * size, n=n)
        a, b = special_pairs(dt, n, rng)
        put(before, "NMEM", 5, 0, a)
        put(before, "NMEM", 5, n * size, b)
    case = Case(insn, 5, insn.values)
    assert_same_bits(case, *check(case, before))


def reference_conv(case: Case, before: CardMemory) -> tuple[np.ndarray, np.ndarray, int]:
    """(exact result, sum of |products|, products per output) of a conv or matmul in float64, read from
    ``before`` by the layout the spec states (blocks of CONV_BLOCK output channels in WMEM)."""
    f, core = case.fields, case.core
    dt = np.dtype(NUMPY[SPEC.types_of(case.insn)["T"]])

    def read(space: str, addr: int, shape: tuple[int, ...]) -> np.ndarray:
        nbytes = int(np.prod(shape)) * dt.itemsize
        raw = memories(before)[memory_name(space, core)][addr:addr + nbytes]
        return raw.view(dt).reshape(shape).astype(np.float64)

    if case.insn.name == "matmul":
        a = read("NMEM", f["a"], (f["m"], f["k"]))
        b = read("WMEM", f["b"], (f["n"] // BLOCK, f["k"], BLOCK))
        b = b.transpose(1, 0, 2).reshape(f["k"], f["n"])
        return (a @ b).reshape(-1), (np.abs(a) @ np.abs(b)).reshape(-1), f["k"]
    h, w, cin, cout, kh, kw, s = (f[k] for k in ("h", "w", "cin", "cout", "kh", "kw", "s"))
    x = read("NMEM", f["inp"], (h, w, cin))
    wgt = read("WMEM", f["wgt"], (cout // BLOCK, kh, kw, cin, BLOCK))
    wgt = wgt.transpose(1, 2, 3, 0, 4).reshape(kh, kw, cin, cout)
    ho, wo = (h - kh) // s + 1, (w - kw) // s + 1
    exact, magnitude = np.zeros((ho, wo, cout)), np.zeros((ho, wo, cout))
    for y in range(ho):
        for xx in range(wo):
            window = x[y * s:y * s + kh, xx * s:xx * s + kw, :]
            exact[y, xx] = np.einsum("ijc,ijco->o", window, wgt)
            magnitude[y, xx] = np.einsum("ijc,ijco->o", np.abs(window), np.abs(wgt))
    return exact.reshape(-1), magnitude.reshape(-1), kh * kw * cin


def fill_float_operands(case: Case, before: CardMemory, rng: np.random.Generator) -> None:
    """Finite values (zeros of both signs among them) for a float conv or matmul's inputs."""
    f, core = case.fields, case.core
    dt = NUMPY[SPEC.types_of(case.insn)["T"]]

    def values(n: int) -> np.ndarray:
        x = rng.standard_normal(n).astype(dt)
        x[rng.random(n) < 0.1] = np.array(-0.0, dt)
        x[rng.random(n) < 0.1] = 0
        return x

    if case.insn.name == "matmul":
        put(before, "NMEM", core, f["a"], values(f["m"] * f["k"]))
        put(before, "WMEM", core, f["b"], values(f["k"] * f["n"]))
    else:
        put(before, "NMEM", core, f["inp"], values(f["h"] * f["w"] * f["cin"]))
        put(before, "WMEM", core, f["wgt"], values(f["kh"] * f["kw"] * f["cin"] * f["cout"]))


def assert_within_f32_accumulation(case: Case, got: np.ndarray, before: CardMemory, who: str) -> None:
    exact, magnitude, terms = reference_conv(case, before)
    tol = terms * float(np.finfo(np.float32).eps) * magnitude + np.spacing(np.abs(exact).astype(got.dtype))
    err = np.abs(got.astype(np.float64) - exact)
    bad = ~(err <= tol)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{case}: the {who} gives {got[k]!r} at output {k}, the exact sum is "
                             f"{exact[k]!r} (error {err[k]:.3g} > tolerance {tol[k]:.3g})")


@pytest.mark.parametrize(("name", "dtype"), [(n, t) for n in ("conv", "matmul") for t in allowed_types(n)])
@EXAMPLES
@given(data=st.data(), seed=seeds)
def test_float_conv_and_matmul_equal_the_spec_up_to_the_order_of_f32_sums(name, dtype, data, seed):
    case = data.draw(conv_cases(name, dtype) if name == "conv" else matmul_cases(dtype))
    rng = np.random.default_rng(seed)
    before = random_card(rng)
    fill_float_operands(case, before, rng)
    fast, generic = check(case, before)
    assert_within_f32_accumulation(case, fast, before, "fast path")
    assert_within_f32_accumulation(case, generic, before, "generic executor")


@pytest.mark.parametrize("dtype", allowed_types("qconv"))
@EXAMPLES
@given(data=st.data(), seed=seeds)
def test_qconv_over_the_full_integer_range_is_bit_exact_with_the_spec(dtype, data, seed):
    case = data.draw(conv_cases("qconv", dtype))
    fast, generic = check(case, random_card(np.random.default_rng(seed)))  # random bytes: the full range
    assert_same_bits(case, fast, generic)


# ------------------------------------------------------------------------------------------ whole kernels
# (op, dtype, cores): every op of the element-wise kernel, every dtype, one core, one cluster, four clusters
KERNELS = [("vadd", "f32", 4), ("vsub", "i8", 16), ("vmul", "f16", 4), ("vmax", "i16", 16),
           ("vmin", "f32", 1), ("relu", "i32", 4), ("vmax", "f16", 16), ("vmin", "i8", 4),
           ("relu", "f16", 16)]


def launch_elementwise(op: str, dtype: str, cores: int, fast: bool) -> tuple[Card, DiannaoResult]:
    """``elementwise_program`` (copy in, one vector op per tile, copy out; two tiles of 128 elements per
    core) on a fresh default card, on inputs rich in edge values."""
    rng = np.random.default_rng(KERNELS.index((op, dtype, cores)))
    n, dt = cores * 256, NUMPY[dtype]
    card = Card("default", spec=isa.load_isa("diannao"))
    bufs = [card.to_gmem(edgy(rng, n, dt)), card.to_gmem(edgy(rng, n, dt)), card.to_gmem(np.zeros(n, dt))]
    program = elementwise_program(op, dtype, 256, 128)
    with np.errstate(all="ignore"):  # the fast paths' IEEE warnings (overflow, invalid) are not under test
        result = card.launch(program, cores=cores, args=[b.addr for b in bufs], fast=fast)
    return card, result


def assert_same_bytes(name: str, fast: np.ndarray, slow: np.ndarray) -> None:
    differ = np.flatnonzero(fast != slow)
    assert differ.size == 0, (f"{name} byte {differ[0]} is {fast[differ[0]]} with fast paths but "
                              f"{slow[differ[0]]} without ({differ.size} bytes differ)")


@pytest.mark.parametrize(("op", "dtype", "cores"), KERNELS)
def test_a_kernel_leaves_the_same_memory_in_the_same_cycles_with_and_without_fast_paths(op, dtype, cores):
    fast_card, fast = launch_elementwise(op, dtype, cores, fast=True)
    slow_card, slow = launch_elementwise(op, dtype, cores, fast=False)
    assert fast.cycles == slow.cycles
    assert fast == slow  # and every other statistic: per-core cycles, instruction counts, bytes moved
    assert fast_card.next_free == slow_card.next_free
    assert_same_bytes("GMEM", fast_card.memory.gmem[:fast_card.next_free],
                      slow_card.memory.gmem[:slow_card.next_free])
    for kind in ("smem", "nmem", "wmem"):
        pairs = zip(getattr(fast_card.memory, kind), getattr(slow_card.memory, kind), strict=True)
        for k, (a, b) in enumerate(pairs):
            assert_same_bytes(f"{kind.upper()}{k}", a, b)
