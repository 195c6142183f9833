"""Functional state and execution of VITA instructions: bit-exact, one numpy call per instruction.

The on-chip buffers hold whole tiles (``inp[depth, BATCH*BLOCK_IN]`` int8, ``wgt[depth, BLOCK_OUT*BLOCK_IN]``
int8, ``acc[depth, BATCH*BLOCK_OUT]`` int32, ``uop[depth]`` uint32); DRAM is a flat byte array. The
instruction semantics are the spec's: the methods here are hand-written fast paths of them (a GEMM runs all
the micro-ops of its two-level loop as one batched product), each used only for instructions whose contract
(``FAST_PATHS``) is the one it implements, and tests/sim/vita/test_functional.py proves each equal to the
generic executor running the spec's semantics micro-op by micro-op. Any other micro-op instruction on
ACC, INP or WGT tiles (a new ALU operation, a changed one) runs through ``execute_generic``. Which tile each
operand of a micro-op is comes from the spec's addressing (isa/micro_ops.py), for the operands the
instruction has: its format may lay out its other fields as it likes.

Errors are ``VitaExecError`` naming the instruction and the broken rule: an SRAM index outside its buffer,
a micro-op range outside the uop buffer, a DRAM access outside DRAM, padding on a store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

import isa
from isa import micro_ops
from sim.core.contract import fast_path_for
from sim.core.errors import ConstraintError, SimError

# micro-ops of one GEMM/ALU instruction are processed in batches of at most this many
BATCH_UOPS = 1 << 15
# a GEMM loop's products come from a table of every distinct (input, weight) pair where there are at most
# this many pairs per micro-op (one BLAS product of small matrices is faster than a batch of tiny ones)
TABLE_PAIRS_PER_UOP = 4


class VitaExecError(SimError):
    """A VITA instruction cannot execute: names the instruction and the rule it breaks."""


class VitaBudgetError(VitaExecError):
    """A program runs more micro-ops than the machine config's ``uop_budget``: found before cycle 0."""


class VitaConstraintError(VitaExecError, ConstraintError):
    """A VITA instruction breaks a rule of its spec: names its index, unit, the instruction and the rule."""


class VitaUnsupportedError(VitaExecError):
    """The VITA machine cannot run an instruction of the program's spec: found before cycle 0. ``pc`` is its
    index in the program, ``insn`` its assembly text, ``field`` the field its format lacks where that is the
    reason (a micro-op operand's loop factor, a loop field), else None."""

    def __init__(self, message: str, *, pc: int, insn: str, field: str | None = None) -> None:
        super().__init__(message)
        self.pc, self.insn, self.field = pc, insn, field


@dataclass(frozen=True, slots=True)
class TileKind:
    """Geometry of one memory type: elements per tile, numpy dtype, and the buffer depth in tiles."""

    elems: int
    dtype: np.dtype
    depth: int

    @property
    def nbytes(self) -> int:
        return self.elems * self.dtype.itemsize


def tile_kinds(spec: isa.ISA) -> dict[str, TileKind]:
    """The geometry of VITA's five on-chip buffers for ``spec``."""
    p = spec.params
    return {
        "INP": TileKind(p["BATCH"] * p["BLOCK_IN"], np.dtype(np.int8), p["INP_BUFF_DEPTH"]),
        "WGT": TileKind(p["BLOCK_OUT"] * p["BLOCK_IN"], np.dtype(np.int8), p["WGT_BUFF_DEPTH"]),
        "ACC": TileKind(p["BATCH"] * p["BLOCK_OUT"], np.dtype(np.int32), p["ACC_BUFF_DEPTH"]),
        "UOP": TileKind(1, np.dtype(np.uint32), p["UOP_BUFF_DEPTH"]),
        "OUT": TileKind(p["BATCH"] * p["BLOCK_OUT"], np.dtype(np.int8), p["OUT_BUFF_DEPTH"]),
    }


class VitaState:
    """DRAM and the four on-chip buffers of one VITA machine, for the ISA ``spec``."""

    def __init__(self, spec: isa.ISA, dram: np.ndarray, base: int = 0) -> None:
        p = spec.params
        self.spec = spec
        self.base = base   # the physical address of dram[0]: instructions address DRAM relative to it
        self.kinds = tile_kinds(spec)
        self.batch, self.block_in, self.block_out = p["BATCH"], p["BLOCK_IN"], p["BLOCK_OUT"]
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise VitaExecError(f"DRAM must be a 1-D uint8 array, but got {dram.dtype} with shape "
                                f"{dram.shape}")
        self.dram = dram
        self.buffers = {name: np.zeros((k.depth, k.elems), k.dtype) for name, k in self.kinds.items()
                        if name != "OUT"}
        self._uop_cache: dict[tuple, dict] = {}
        self.uop_loads = 0   # loads into the uop buffer so far (a prepared micro-op step plans after one)
        self._gemm_float = self._exact_float()
        self._addresses: dict[str, tuple[micro_ops.Address, ...]] = {}
        uop_fmt = spec.data["uop"].format
        self.uop_fields = {f.name: (f.lsb, (1 << f.bits) - 1) for f in uop_fmt.fields}

    # ------------------------------------------------------------------ prepared steps
    def prepare(self, insn: isa.Insn, action: str, arg: str | None, f: dict[str, int]) -> Callable[[], None]:
        """``insn``'s work on this state (``action`` and ``arg`` as sim/vita/plan.py names them), prepared
        once for every time it runs: a transfer's DRAM and buffer views, a micro-op loop's tile indices and
        products plan (planned again when the uop buffer was loaded since: ``uop_loads``). The machine runs
        a program's equal instructions through one step. A step that cannot run raises its
        ``VitaExecError`` when called, as the instruction would when it ran."""
        if action == "load":
            return self._load_step(insn, arg, f)
        if action == "store":
            return self._store_step(insn, f)
        if action == "gemm":
            return _LoopStep(self, partial(self._plan_loop, insn, f, partial(self._gemm_run, insn)))
        if action == "reset":
            return _LoopStep(self, partial(self._plan_loop, insn, f, partial(self._reset_run, insn)))
        if action == "alu":
            run_of = partial(self._alu_run, insn, arg, f["use_imm"], f["imm"])
            return _LoopStep(self, partial(self._plan_loop, insn, f, run_of))
        if action == "generic":
            return partial(execute_generic, self, insn, f)
        if action == "finish":   # it ends the program: no work
            return _nothing
        raise VitaExecError(f"{insn.name}: no step for the action {action!r}")

    def load(self, insn: isa.Insn, memory: str, f: dict[str, int] | None = None) -> None:
        """LOAD_<memory>: a 2-D strided DRAM block into consecutive tiles, zero-padded on each side; nothing
        at all when x_size is 0.

        ``f`` is ``insn.values`` when the caller already has it (as for every method here).
        """
        self._load_step(insn, memory, insn.values if f is None else f)()

    def store(self, insn: isa.Insn, f: dict[str, int] | None = None) -> None:
        """STORE_OUT: accumulator tiles truncated to int8, into a 2-D strided DRAM block."""
        self._store_step(insn, insn.values if f is None else f)()

    def _load_step(self, insn: isa.Insn, memory: str, f: dict[str, int]) -> Callable[[], None]:
        kind = self.kinds[memory]
        if f["x_size"] == 0:   # VTA skips the load, padding included
            return _nothing
        y0, x0, ys, xs = f["y_pad_0"], f["x_pad_0"], f["y_size"], f["x_size"]
        rows, cols = y0 + ys + f["y_pad_1"], x0 + xs + f["x_pad_1"]
        base = f["sram_base"]
        if base + rows * cols > kind.depth:
            return _raises(VitaExecError(f"{insn.name}: tiles {base}..{base + rows * cols - 1} are outside "
                                         f"the {memory} buffer (depth {kind.depth})"))
        block = self.buffers[memory][base:base + rows * cols].reshape(rows, cols, kind.elems)
        if ys == 0:
            return partial(block.fill, 0)
        try:
            data = self._dram_block(insn, kind, f["dram_base"], ys, xs, f["x_stride"])
        except VitaExecError as e:
            return _raises(e)
        inner = block[y0:y0 + ys, x0:x0 + xs]
        padded = (rows, cols) != (ys, xs)

        def step() -> None:
            if padded:
                block.fill(0)
            np.copyto(inner, data)

        if memory != "UOP":
            return step

        def uop_step() -> None:
            step()
            self.uop_loads += 1

        return uop_step

    def _store_step(self, insn: isa.Insn, f: dict[str, int]) -> Callable[[], None]:
        if f["y_pad_0"] or f["y_pad_1"] or f["x_pad_0"] or f["x_pad_1"]:
            return _raises(VitaExecError(f"{insn.name}: a store cannot pad (fsim rejects padded stores)"))
        out = self.kinds["OUT"]
        ys, xs = f["y_size"], f["x_size"]
        base, depth = f["sram_base"], self.kinds["ACC"].depth
        if base + ys * xs > depth:
            return _raises(VitaExecError(f"{insn.name}: tiles {base}..{base + ys * xs - 1} are outside the "
                                         f"ACC buffer (depth {depth})"))
        if ys * xs == 0:
            return _nothing
        acc = self.buffers["ACC"][base:base + ys * xs].reshape(ys, xs, out.elems)
        try:
            view = self._dram_block(insn, out, f["dram_base"], ys, xs, f["x_stride"], write=True)
        except VitaExecError as e:
            return _raises(e)
        return partial(np.copyto, view, acc, casting="unsafe")   # int32 -> int8 keeps the low byte

    def _dram_block(self, insn: isa.Insn, kind: TileKind, base: int, ys: int, xs: int, stride: int,
                    write: bool = False) -> np.ndarray:
        """A (ys, xs, elems) view of DRAM, rows ``stride`` tiles apart from tile ``base``; a load may read
        overlapping rows (VTA reads them as given), a store (``write``) may not write them."""
        tile = kind.nbytes
        end = (base + (ys - 1) * stride + xs) * tile
        if end > self.dram.size:
            at, first = self.base, base * tile
            raise VitaExecError(f"{insn.name}: DRAM bytes {first}..{end - 1} (physical {at + first:#x}.."
                                f"{at + end - 1:#x}) are outside DRAM ({self.dram.size} bytes at {at:#x})")
        if write and ys > 1 and xs > stride:
            raise VitaExecError(f"{insn.name}: rows overlap (x_size {xs} > x_stride {stride})")
        raw = self.dram[base * tile:end]
        typed = raw.view(kind.dtype)
        if ys == 1 or stride == xs:  # contiguous rows: a plain reshape
            return typed.reshape(ys, xs, kind.elems)
        item = kind.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            typed, shape=(ys, xs, kind.elems), strides=(stride * tile, tile, item), writeable=write)

    # ------------------------------------------------------------------ GEMM and ALU
    def addresses(self, insn: isa.Insn) -> tuple[micro_ops.Address, ...]:
        """Where each operand of ``insn``'s micro-ops lies, as its spec says (isa/micro_ops.py)."""
        found = self._addresses.get(insn.name)
        if found is None:
            try:
                found = micro_ops.addresses(self.spec, self.spec.instruction(insn.name))
            except micro_ops.MicroOpError as e:
                raise VitaExecError(str(e)) from None
            self._addresses[insn.name] = found
        return found

    def uop_chunks(self, insn: isa.Insn, f: dict[str, int] | None = None) -> Iterator[tuple[int, dict]]:
        """The micro-ops of the instruction's two-level loop, in execution order, as runs of at most
        ``BATCH_UOPS``: ``(position of the run's first micro-op, indices)``, where ``indices`` holds the tile
        index of each micro-op for each operand (by its name) and ``independent`` (see ``_indices``).

        Memory stays bounded whatever the loop's size. Programs repeat the same micro-op loops, so a loop of
        one run is cached by its addresses, the loop fields and the micro-op words themselves (never stale,
        whoever writes the uop buffer); treat the arrays as read-only.
        """
        f = insn.values if f is None else f
        bgn, end = f["uop_bgn"], f["uop_end"]
        depth = self.kinds["UOP"].depth
        if not bgn <= end <= depth:
            raise VitaExecError(f"{insn.name}: micro-op range {bgn}..{end} is outside the uop buffer "
                                f"(depth {depth})")
        words = self.buffers["UOP"][bgn:end, 0]
        loop = tuple((a, f[a.factors[0]], f[a.factors[1]]) for a in self.addresses(insn))
        n = uop_count(f)
        if n > BATCH_UOPS:
            for lo in range(0, n, BATCH_UOPS):
                yield lo, self._indices(words, f["iter_in"], loop, lo, min(n, lo + BATCH_UOPS))
            return
        key = (words.tobytes(), f["iter_out"], f["iter_in"], loop)
        cached = self._uop_cache.get(key)
        if cached is None:
            cached = self._indices(words, f["iter_in"], loop, 0, n)
            if len(self._uop_cache) >= 4096:
                self._uop_cache.clear()
            self._uop_cache[key] = cached
        yield 0, cached

    def _indices(self, words: np.ndarray, iter_in: int, loop: tuple, lo: int,
                 hi: int) -> dict[str, np.ndarray]:
        """Tile indices of micro-ops ``lo..hi-1`` of the loop over ``words``: position k runs micro-op
        ``k % n`` of inner iteration ``j = k // n % iter_in`` of outer iteration ``i = k // (n * iter_in)``,
        n words; ``loop`` holds each operand's address with its two factors' values, and the operand is at
        ``record[index] + i * outer factor + j * inner factor``.

        ``independent`` says whether the micro-ops may run as one vector operation: (with an immediate) no
        destination (the operand of role dst) repeats, (with a source tile) neither does any source (role
        src) that is another micro-op's destination.
        """
        k = np.arange(lo, hi, dtype=np.int64)
        u, rest = k % words.size, k // words.size
        j, i = rest % iter_in, rest // iter_in
        out, roles = {}, {}
        for address, outer, inner in loop:
            lsb, mask = self.uop_fields[address.index]
            base = (words.astype(np.int64) >> lsb) & mask
            out[address.operand] = roles[address.role] = base[u] + i * outer + j * inner
        dst = roles.get("dst")
        if dst is None:   # nothing written by role: the micro-ops run one by one
            out["independent"] = (False, False)
            return out
        src = roles.get("src", dst)
        unique = _all_distinct(dst)
        out["independent"] = (unique, unique and not np.isin(src[src != dst], dst).any())
        return out

    def _check(self, insn: isa.Insn, idx: dict, operand: str, memory: str, what: str,
               first: int = 0) -> None:
        """Every tile ``idx[operand]`` addresses lies in ``memory`` (its greatest index kept with the
        loop)."""
        found = idx[operand]
        top = idx.get(("max", operand))
        if top is None:
            top = idx[("max", operand)] = int(found.max()) if found.size else -1
        depth = self.kinds[memory].depth
        if top >= depth:
            k = int(np.argmax(found >= depth))
            raise VitaExecError(f"{insn.name}: micro-op {first + k} of the loop addresses {what} tile "
                                f"{int(found[k])}, outside the {memory} buffer (depth {depth})")

    def gemm(self, insn: isa.Insn, f: dict[str, int] | None = None) -> None:
        """GEMM: acc[dst] += inp[src] x wgt[wgt]^T for every micro-op of the two-level loop.

        A loop's micro-ops pair a few hundred input tiles with a few dozen weight tiles: every distinct pair's
        product comes from one matrix product of the distinct input tiles by the distinct weight tiles
        (``_products``), each micro-op takes its pair's, and the accumulator tiles add them up in order
        (additions modulo 2**32 commute, so repeated tiles add up exactly as in sequence). A loop over
        consecutive accumulator tiles that pairs consecutive tiles of one operand with one tile of the other
        is one matrix product of the buffers' slices (``_sliced_gemm``)."""
        self._plan_loop(insn, insn.values if f is None else f, partial(self._gemm_run, insn))()

    def _plan_loop(self, insn: isa.Insn, f: dict[str, int], run_of) -> Callable[[], None]:
        """The function that runs ``insn``'s micro-op loop as the uop buffer is now: ``run_of(first, idx)``
        of its one run of micro-ops (``uop_chunks``), or, for a loop of more than ``BATCH_UOPS``, of each
        run in turn every time it is called (memory stays bounded)."""
        if uop_count(f) <= BATCH_UOPS:
            return run_of(*next(self.uop_chunks(insn, f)))

        def runs() -> None:
            for first, idx in self.uop_chunks(insn, f):
                run_of(first, idx)()

        return runs

    def _gemm_run(self, insn: isa.Insn, first: int, idx: dict) -> Callable[[], None]:
        self._check(insn, idx, "acc", "ACC", "accumulator", first)
        self._check(insn, idx, "inp", "INP", "input", first)
        self._check(insn, idx, "wgt", "WGT", "weight", first)
        sliced = self._sliced_gemm(idx)
        if sliced is not None:
            return sliced
        plan = idx.get("gemm")
        if plan is None:
            plan = idx["gemm"] = _GemmPlan.of(idx["acc"], idx["inp"], idx["wgt"])
        acc = self.buffers["ACC"]
        a = _first_of_run(plan.rows)
        out = acc[a:a + plan.rows.size] if a is not None else None   # consecutive accumulator tiles

        def run() -> None:
            prod = self._products(plan, idx)
            if plan.starts is not None:   # an accumulator tile more than once: its products summed
                prod = np.add.reduceat(prod, plan.starts, axis=0, dtype=acc.dtype)
            if out is not None:
                np.add(out, prod, out=out)
            else:
                acc[plan.rows] += prod

        return run

    def _sliced_gemm(self, idx: dict) -> Callable[[], None] | None:
        """The GEMM of micro-ops k = 0..n-1 writing accumulator tile a + k from input tile i + k and weight
        tile w (or input tile i and weight tile w + k) as one matrix product of buffer slices, or None for
        any other loop."""
        exact, n = self._gemm_float, idx["acc"].size
        a = _first_of_run(idx["acc"])
        if exact is None or a is None:
            return None
        b, bi, bo = self.batch, self.block_in, self.block_out
        out = self.buffers["ACC"][a:a + n]
        inputs, weights = self.buffers["INP"], self.buffers["WGT"]
        i, w = _first_of_run(idx["inp"]), _constant(idx["wgt"])
        if i is not None and w is not None:    # consecutive input tiles by one weight tile
            inp, wgt = inputs[i:i + n].reshape(n * b, bi), weights[w].reshape(bo, bi)

            def by_one_weight() -> None:
                prod = inp.astype(exact) @ wgt.T.astype(exact)
                np.add(out, prod.astype(np.int32).reshape(n, b * bo), out=out)

            return by_one_weight
        i, w = _constant(idx["inp"]), _first_of_run(idx["wgt"])
        if i is not None and w is not None:    # one input tile by consecutive weight tiles
            inp, wgt = inputs[i].reshape(b, bi), weights[w:w + n].reshape(n * bo, bi)

            def by_one_input() -> None:
                prod = (inp.astype(exact) @ wgt.T.astype(exact)).astype(np.int32)
                np.add(out, prod.reshape(b, n, bo).transpose(1, 0, 2).reshape(n, b * bo), out=out)

            return by_one_input
        return None

    def _products(self, plan: _GemmPlan, idx: dict) -> np.ndarray:
        """Each micro-op's product inp[src] x wgt[wgt]^T as int32 rows (BATCH*BLOCK_OUT), in ``plan``'s
        order."""
        b, bi, bo = self.batch, self.block_in, self.block_out
        exact = self._gemm_float
        if plan.pairs is not None and exact is not None:   # a product of the distinct tiles: one BLAS call
            inp = np.take(self.buffers["INP"], plan.inputs, axis=0).reshape(-1, bi).astype(exact)
            wgt = np.take(self.buffers["WGT"], plan.weights, axis=0).reshape(-1, bi).astype(exact)
            table = (inp @ wgt.T).reshape(len(plan.inputs), b, len(plan.weights), bo).transpose(0, 2, 1, 3)
            # np.take: a gather of whole rows, a few times faster than fancy indexing
            return np.take(table.reshape(-1, b * bo), plan.pairs, axis=0).astype(np.int32)
        inp = np.take(self.buffers["INP"], idx["inp"][plan.order], axis=0).reshape(-1, b, bi)
        wgt = np.take(self.buffers["WGT"], idx["wgt"][plan.order], axis=0).reshape(-1, bo, bi)
        if exact is not None:   # every product sum exact in this float type: a batched matrix product
            prod = (inp.astype(exact) @ wgt.astype(exact).transpose(0, 2, 1)).astype(np.int64)
        else:
            prod = np.einsum("nbk,nok->nbo", inp.astype(np.int64), wgt.astype(np.int64))
        return prod.reshape(-1, b * bo).astype(np.int32)

    def _exact_float(self) -> type | None:
        """The narrowest float type in which every GEMM dot product of BLOCK_IN INP x WGT values is exact
        (float32 for int8 x int8 over 16), or None (then int64)."""
        if not all(np.dtype(self.kinds[m].dtype).kind in "iu" for m in ("INP", "WGT")):
            return None
        bound = self.block_in * max(abs(v) for v in _range(self.kinds["INP"].dtype)) * \
            max(abs(v) for v in _range(self.kinds["WGT"].dtype))
        return np.float32 if bound < 2**24 else np.float64 if bound < 2**53 else None

    def gemm_reset(self, insn: isa.Insn, f: dict[str, int] | None = None) -> None:
        """GEMM with reset_reg: zero every addressed accumulator tile."""
        self._plan_loop(insn, insn.values if f is None else f, partial(self._reset_run, insn))()

    def _reset_run(self, insn: isa.Insn, first: int, idx: dict) -> Callable[[], None]:
        self._check(insn, idx, "acc", "ACC", "accumulator", first)
        acc, tiles = self.buffers["ACC"], idx["acc"]
        a = _first_of_run(tiles)
        if a is not None:
            return partial(acc[a:a + tiles.size].fill, 0)
        return partial(acc.__setitem__, tiles, 0)

    def alu(self, insn: isa.Insn, op: str, f: dict[str, int] | None = None) -> None:
        """ALU_<op>: acc[dst] = op(acc[dst], imm or acc[src]) for every micro-op, in order."""
        f = insn.values if f is None else f
        self._plan_loop(insn, f, partial(self._alu_run, insn, op, f["use_imm"], f["imm"]))()

    def _alu_run(self, insn: isa.Insn, op: str, use_imm: int, imm: int, first: int,
                 idx: dict) -> Callable[[], None]:
        dst, src = idx["dst"], idx["src"]
        self._check(insn, idx, "dst", "ACC", "destination", first)
        if not use_imm:
            self._check(insn, idx, "src", "ACC", "source", first)
        acc = self.buffers["ACC"]
        if idx["independent"][0 if use_imm else 1]:
            d, s = _first_of_run(dst), (0 if use_imm else _first_of_run(src))
            if d is not None and s is not None:   # consecutive tiles: in place, on slices of the buffer
                out = acc[d:d + dst.size]
                call = _alu_ufunc(op, out, imm if use_imm else acc[s:s + src.size])
                if call is not None:
                    ufunc, a, b = call
                    return partial(ufunc, a, b, out=a)
            return lambda: acc.__setitem__(dst, _alu(op, acc[dst], imm if use_imm else acc[src]))

        def in_sequence() -> None:   # dependent micro-ops
            for d, s in zip(dst.tolist(), src.tolist(), strict=True):
                acc[d] = _alu(op, acc[d], imm if use_imm else acc[s])

        return in_sequence


class _LoopStep:
    """A micro-op instruction's prepared step (``VitaState.prepare``): ``plan()`` gives the function that runs
    its loop from the uop buffer as it is; planned again whenever the uop buffer was loaded since."""

    __slots__ = ("state", "plan", "loads", "run")

    def __init__(self, state: VitaState, plan: Callable[[], Callable[[], None]]) -> None:
        self.state, self.plan, self.loads, self.run = state, plan, -1, _nothing

    def __call__(self) -> None:
        loads = self.state.uop_loads
        if self.loads != loads:
            self.run = self.plan()
            self.loads = loads
        self.run()


@dataclass(frozen=True)
class _GemmPlan:
    """How a GEMM loop's micro-ops are computed (``VitaState.gemm``), found once per loop: ``order`` the
    micro-ops sorted by accumulator tile (stable), ``rows`` the accumulator tiles written (one per run of
    equal tiles in that order, or every micro-op's when none repeats: then ``starts`` is None, else where each
    run begins); where the distinct (input, weight) pairs are at most ``TABLE_PAIRS_PER_UOP`` per micro-op,
    ``inputs``/``weights`` the distinct tiles and ``pairs`` each micro-op's row of their product table
    (input-major), in ``order``."""

    order: np.ndarray
    rows: np.ndarray
    starts: np.ndarray | None
    inputs: np.ndarray | None
    weights: np.ndarray | None
    pairs: np.ndarray | None

    @staticmethod
    def of(acc: np.ndarray, inp: np.ndarray, wgt: np.ndarray) -> _GemmPlan:
        if _all_distinct(acc):
            order, rows, starts = np.arange(acc.size), acc, None
        else:
            order = np.argsort(acc, kind="stable")
            ordered = acc[order]
            starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
            rows = ordered[starts]
        inputs, at_input = np.unique(inp, return_inverse=True)
        weights, at_weight = np.unique(wgt, return_inverse=True)
        if inputs.size * weights.size > TABLE_PAIRS_PER_UOP * acc.size:   # mostly unused products
            return _GemmPlan(order, rows, starts, None, None, None)
        pairs = (at_input.reshape(-1) * weights.size + at_weight.reshape(-1))[order]
        return _GemmPlan(order, rows, starts, inputs, weights, pairs)


def uop_count(f: dict[str, int]) -> int:
    """How many micro-ops a GEMM/ALU instruction with fields ``f`` runs: its two-level loop over its range."""
    return f["iter_out"] * f["iter_in"] * max(f["uop_end"] - f["uop_bgn"], 0)


def execute_generic(state: VitaState, insn: isa.Insn, f: dict[str, int] | None = None) -> None:
    """A micro-op instruction whose semantics no fast path implements, through the spec's generic executor:
    for every micro-op of its two-level loop, in order, each operand is the tile of its space its address
    gives (``VitaState.addresses``: the micro-op field and loop factors the spec addresses it by), and the
    written operands are stored back."""
    spaces = {a.operand: a.space for a in state.addresses(insn)}
    shapes = {name: isa.operand_shape(state.spec, insn, name) for name in spaces}
    for first, idx in state.uop_chunks(insn, f):
        for name, space in spaces.items():
            state._check(insn, idx, name, space, name, first)
        for k in range(min((idx[name].size for name in spaces), default=0)):
            tiles = {name: state.buffers[space][idx[name][k]].reshape(shapes[name])
                     for name, space in spaces.items()}
            for name, value in isa.execute(state.spec, insn, tiles).items():
                state.buffers[spaces[name]][idx[name][k]] = np.asarray(value).reshape(-1)


# ---------------------------------------------------------------------------- the fast paths' contracts
# An instruction runs on a fast path only when its contract (sim/core/contract.py: semantics, indices, types
# and operands with spaces, dtypes, shapes, strides and addresses) is the one below, whatever it is called;
# tests/sim/vita/test_functional.py proves each fast path equal to the generic executor.

_PADDED = ("sram[y, x, e] = select(y >= y_pad_0 and y < y_pad_0 + y_size and x >= x_pad_0 and x < x_pad_0 + "
           "x_size, dram[y - y_pad_0, x - x_pad_0, e], 0)")
_YXE = "indices y spatial, x spatial, e spatial"


def _load(space: str, dtype: str, tile: str) -> str:
    """The contract of a 2-D padded load of ``tile``-element tiles of ``dtype`` into ``space``."""
    strides, at = (f"[x_stride * {tile}, {tile}, 1]", f"dram_base * {tile}") if tile != "1" else \
        ("[x_stride, 1, 1]", "dram_base")
    return "\n".join([_PADDED, _YXE,
                      f"sram: {space} {dtype} shape [select(x_size > 0, y_pad_0 + y_size + y_pad_1, 0), "
                      f"x_pad_0 + x_size + x_pad_1, {tile}] strides - at sram_base",
                      f"dram: DRAM {dtype} shape [y_size, x_size, {tile}] strides {strides} at {at}"])


def _tiles(statement: str, indices: str, *operands: str) -> str:
    """The contract of a micro-op instruction: ``operands`` as 'name SPACE dtype ROWS COLS' tiles."""
    lines = [statement, f"indices {indices}"]
    for op in operands:
        name, space, dtype, rows, cols = op.split()
        lines.append(f"{name}: {space} {dtype} shape [{rows}, {cols}] strides - at {name}")
    return "\n".join(lines)


def _alu_op(statement: str) -> str:
    return _tiles(statement, "b spatial, o spatial", "dst ACC i32 BATCH BLOCK_OUT",
                  "src ACC i32 BATCH BLOCK_OUT")


_Y = "select(use_imm != 0, i32(imm), src[b, o])"
#: contract -> (action, argument) of the VITA machine (sim/vita/plan.py)
FAST_PATHS: dict[str, tuple[str, str | None]] = {
    _load("INP", "i8", "INP_TILE"): ("load", "INP"),
    _load("WGT", "i8", "WGT_TILE"): ("load", "WGT"),
    _load("ACC", "i32", "ACC_TILE"): ("load", "ACC"),
    _load("UOP", "u32", "1"): ("load", "UOP"),
    "\n".join(["dram[y, x, e] = i8(sram[y, x, e])", _YXE,
               "sram: ACC i32 shape [y_size, x_size, ACC_TILE] strides - at sram_base",
               "dram: DRAM i8 shape [y_size, x_size, OUT_TILE] strides [x_stride * OUT_TILE, OUT_TILE, 1] at "
               "dram_base * OUT_TILE"]): ("store", None),
    _tiles("acc[b, o] += i32(inp[b, k]) * i32(wgt[o, k])", "b spatial, o spatial, k reduce",
           "acc ACC i32 BATCH BLOCK_OUT", "inp INP i8 BATCH BLOCK_IN",
           "wgt WGT i8 BLOCK_OUT BLOCK_IN"): ("gemm", None),
    _tiles("acc[b, o] = 0", "b spatial, o spatial", "acc ACC i32 BATCH BLOCK_OUT"): ("reset", None),
    _alu_op(f"dst[b, o] = min(dst[b, o], {_Y})"): ("alu", "MIN"),
    _alu_op(f"dst[b, o] = max(dst[b, o], {_Y})"): ("alu", "MAX"),
    _alu_op(f"dst[b, o] = dst[b, o] + {_Y}"): ("alu", "ADD"),
    _alu_op(f"dst[b, o] = dst[b, o] * {_Y}"): ("alu", "MUL"),
    _alu_op("dst[b, o] = select(use_imm != 0, select(imm >= 0, dst[b, o] >> imm % 32, i32(i64(dst[b, o]) << "
            "-i64(imm) % 32)), select(src[b, o] >= 0, dst[b, o] >> src[b, o] % 32, i32(i64(dst[b, o]) << "
            "-i64(src[b, o]) % 32)))"): ("alu", "SHR"),
}


def fast_path(instr: isa.Instruction) -> tuple[str, str | None] | None:
    """The (action, argument) of the fast path whose contract ``instr`` has, or None."""
    return fast_path_for(instr, FAST_PATHS)


def _alu(op: str, x: np.ndarray, y: np.ndarray | int, out: np.ndarray | None = None) -> np.ndarray:
    """VTA's ALU on int32 tiles ``x`` with operand ``y`` (tiles or a scalar immediate), wrapping at 32 bits;
    into ``out`` where given (it may be ``x``).

    SHR shifts right by ``y`` when ``y >= 0`` and left by ``-y`` otherwise, by the amount modulo 32 (VTA's
    shifter takes the amount's low 5 bits).
    """
    call = _alu_ufunc(op, x, y)
    if call is not None:
        ufunc, a, b = call
        return ufunc(a, b, out=None if out is None else out.view(a.dtype)).view(np.int32)
    y = np.asarray(y, dtype=np.int64)   # SHR by tiles: each element its own direction
    right = x >> (y % 32).astype(np.int32)
    left = (x.view(np.uint32) << (-y % 32).astype(np.uint32)).view(np.int32)
    shifted = np.where(y >= 0, right, left).astype(np.int32)
    if out is None:
        return shifted
    np.copyto(out, shifted)
    return out


def _alu_ufunc(op: str, x: np.ndarray, y: np.ndarray | int) -> tuple[np.ufunc, np.ndarray, object] | None:
    """``(ufunc, a, b)`` such that ``ufunc(a, b)`` is ``_alu(op, x, y)`` (``a``: ``x`` or its uint32 view,
    where the operation wraps), or None for a SHR by tiles."""
    if op == "MIN":
        return np.minimum, x, np.int32(y) if isinstance(y, int) else y
    if op == "MAX":
        return np.maximum, x, np.int32(y) if isinstance(y, int) else y
    if op in ("ADD", "MUL"):   # tiles as they are when called (a view), an immediate as int32's bits
        y = np.asarray(y, np.int32) if isinstance(y, np.ndarray) else np.asarray(y).astype(np.int32)
        bits = y.view(np.uint32)
        return np.add if op == "ADD" else np.multiply, x.view(np.uint32), bits
    if op != "SHR":
        raise VitaExecError(f"unknown ALU operation {op!r}")
    if isinstance(y, np.ndarray):
        return None
    y = int(y)   # an immediate: one direction for the whole tile
    if y >= 0:
        return np.right_shift, x, np.int32(y % 32)
    return np.left_shift, x.view(np.uint32), np.uint32(-y % 32)


def _range(dtype: np.dtype) -> tuple[int, int]:
    """The least and greatest value of an integer ``dtype``."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _nothing() -> None:
    """The step of an instruction that moves nothing (an empty transfer)."""


def _raises(error: VitaExecError) -> Callable[[], None]:
    """The step of an instruction that cannot run: it raises ``error`` when it would run."""
    def step() -> None:
        raise error
    return step


def _first_of_run(values: np.ndarray) -> int | None:
    """``values[0]`` where ``values`` counts up by one from it (a slice of the buffer), else None."""
    if values.size == 0:
        return None
    first = int(values[0])
    return first if np.array_equal(values, np.arange(first, first + values.size)) else None


def _constant(values: np.ndarray) -> int | None:
    """The one value of ``values`` where all are equal, else None."""
    if values.size == 0:
        return None
    first = int(values[0])
    return first if bool((values == first).all()) else None


def _all_distinct(values: np.ndarray) -> bool:
    """Whether no value repeats (``np.unique(values).size == values.size``, without the import of numpy.ma
    that np.unique makes, 8 ms of a run's start)."""
    ordered = np.sort(values, axis=None)
    return bool((ordered[1:] != ordered[:-1]).all())
