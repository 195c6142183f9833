"""stream_copies (compiler/passes/stream_copies.py): a buffer several copies fill before it is read part by
part is filled as it is read; each test states the placement it expects (the printed IR), runs the function
before and after the pass in the interpreter, and runs it on the card (which checks every access against the
copies in flight)."""

from __future__ import annotations

import numpy as np

import isa
from compiler.backend.diannao import codegen
from compiler.interp import run
from compiler.ir import (
    Allocate,
    Attr,
    Buffer,
    For,
    ForKind,
    InsnField,
    PrimFunc,
    Region,
    TensorInsn,
    Var,
    const,
    dtypes,
    seq,
)
from compiler.ir.printer import format_node
from compiler.passes.stream_copies import stream_copies
from tandem.flows.diannao import run_kernel

SPEC = isa.load_isa("diannao")
SPACE = {name: s.id for name, s in SPEC.spaces.items()}
SCOPE = {"global": "GMEM", "nmem": "NMEM"}
N = 64   # int32 elements of a part (VECTOR_ELEMS)
I32 = dtypes.dtype("int32")
A, C = Buffer("A", (3 * N,), I32), Buffer("C", (3 * N,), I32)
W, OUT = Buffer("W", (3 * N,), I32, "nmem"), Buffer("Out", (3 * N,), I32, "nmem")
tid = Var("tid")


def copy(dst: Buffer, dst_off: int, src: Buffer, src_off: int, n: int = N) -> Attr:
    fields = {"dst_space": SPACE[SCOPE[dst.scope]], "src_space": SPACE[SCOPE[src.scope]], "len": 4 * n,
              "count": 1, "dst_stride": 0, "src_stride": 0}
    insn = TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", dst, const(dst_off)), Region("src", src, const(src_off))))
    return Attr("pragma_intrin", "copy", insn)


def vadd(k: int) -> Attr:
    """Out[part k] = W[part k] + W[part k]."""
    insn = TensorInsn(SPEC, "vadd", (InsnField("n", const(N)),),
                      (Region("dst", OUT, const(k * N)), Region("a", W, const(k * N)),
                       Region("b", W, const(k * N))))
    return Attr("pragma_intrin", "vadd", insn)


def kernel(fills, reads) -> PrimFunc:
    """One core: W filled by ``fills``, read by ``reads``, Out copied to C."""
    body = Allocate(W, Allocate(OUT, seq(*fills, *reads, copy(C, 0, OUT, 0, 3 * N))))
    return PrimFunc("f", (A, C), For(tid, const(0), const(1), body, ForKind.THREAD_BINDING, "core"))


def check(func: PrimFunc):
    """The function after the pass computes what it did before, in the interpreter and on the card."""
    after = stream_copies(func, SPEC)
    a = np.arange(A.size, dtype=np.int32) * 7 - 50
    for f in (func, after):
        args = [a.copy(), np.zeros(C.size, np.int32)]
        run(f, args)
        assert np.array_equal(args[1], 2 * a)
    result, (_, c) = run_kernel(codegen(after, SPEC), [a, np.zeros(C.size, np.int32)])
    assert np.array_equal(c, 2 * a)
    return after, result


def test_each_part_is_issued_while_the_one_before_is_read_and_waited_for_before_its_own_reader():
    fills = [copy(W, k * N, A, k * N) for k in range(3)]
    after, streamed = check(kernel(fills, [vadd(k) for k in range(3)]))
    lines = [x.strip().split("(")[0] for x in format_node(after.body).splitlines() if "diannao." in x]
    assert lines == ["diannao.memcpy", "diannao.memcpy_async", "diannao.vadd", "diannao.wait",
                     "diannao.memcpy_async", "diannao.vadd", "diannao.wait", "diannao.vadd", "diannao.memcpy"]
    assert streamed.instructions["wait"] == 2 and streamed.instructions["memcpyr_async"] == 2


def test_an_unrolled_loop_of_copies_is_streamed_like_its_statements():
    r = Var("r")
    fills = [For(r, const(0), const(3), _copy_at(r), ForKind.UNROLLED)]
    after, _ = check(kernel(fills, [vadd(k) for k in range(3)]))
    assert format_node(after.body).count("memcpy_async") == 2


def _copy_at(r: Var) -> Attr:
    fields = {"dst_space": SPACE["NMEM"], "src_space": SPACE["GMEM"], "len": 4 * N, "count": 1,
              "dst_stride": 0, "src_stride": 0}
    insn = TensorInsn(SPEC, "memcpy", tuple(InsnField(k, const(v)) for k, v in fields.items()),
                      (Region("dst", W, r * N), Region("src", A, r * N)))
    return Attr("pragma_intrin", "copy", insn)


def test_a_buffer_whose_first_reader_reads_every_part_stays_as_it_is():
    fills = [copy(W, k * N, A, k * N) for k in range(3)]
    whole = TensorInsn(SPEC, "vadd", (InsnField("n", const(3 * N)),),
                       (Region("dst", OUT, const(0)), Region("a", W, const(0)), Region("b", W, const(0))))
    func = kernel(fills, [Attr("pragma_intrin", "vadd", whole)])
    after, _ = check(func)
    assert after is func


def test_a_single_copy_or_a_spec_without_a_wait_changes_nothing(tmp_path):
    one = kernel([copy(W, 0, A, 0, 3 * N)], [vadd(k) for k in range(3)])
    assert stream_copies(one, SPEC) is one
    path = tmp_path / "nowait.toml"
    path.write_text('[isa]\nname = "diannao"\nextends = "diannao"\nsummary = "no wait"\n'
                    '[instructions.wait]\ngroup = "ctrl"\n')
    from tandem.flows.targets import load_target

    spec = load_target("diannao", spec=str(path)).spec
    func = kernel([copy(W, k * N, A, k * N) for k in range(3)], [vadd(k) for k in range(3)])
    assert stream_copies(func, spec) is func
