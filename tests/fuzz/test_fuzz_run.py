"""Fuzz ``tandem run``'s parameters through the typer app in process (``--json``).

Run the full fuzzer with ``pytest -m fuzz tests/fuzz`` (2,000 examples, random); the default run takes a small
derandomized slice of the same test (tests/fuzz/conftest.py).

About half the requests are legal (a target's operator on a small layer, with options it takes: they must
run and validate, or be refused); the others are anything: random operators, targets, ``-p KEY=VALUE`` (known
keys and unknown ones; values small, zero, negative, huge, not integers, empty), ``--shape``, ``--dtype``,
``--vthreads``, ``--tune``, ``--isa``, ``--threads`` and switches. Every request either runs (exit 0, one
JSON object that validated) or is refused (exit 1 or 2 with an ``error:`` line, or click's usage error with
exit 2), never with a traceback. Legal sizes are drawn small, so that a request that runs compiles and
simulates in well under the 10 s every example is given; the extreme values must be refused in ``plan``,
before any work.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st
from typer.testing import CliRunner

from compiler.ops.contractions import KINDS
from compiler.ops.network import OPERATORS
from tandem.cli.app import app

RUNNER = CliRunner()
TENSORIR_KINDS = [kind for kind in KINDS if kind != "conv2d"]   # on vita and cpu
VITA_NETWORK = ["residual_add", "relu", "clip", "concat", "max_pool", "avg_pool", "global_avg_pool"]   # ALU
ROWS = ["softmax", "layer_norm", "gelu"]   # over [R, D]
OPS = {"diannao": ["add", "sub", "mul", "maximum", "relu", "conv2d", *OPERATORS],
       "vita": ["conv2d", "gemm", *TENSORIR_KINDS, *VITA_NETWORK],
       "cpu": ["conv2d", "gemm", *TENSORIR_KINDS, *OPERATORS]}
KEYS = {"diannao": ["cores", "tile", "H", "W", "IC", "OC", "K", "S", "P", "C", "C2", "LO", "HI", "R", "D"],
        "vita": ["H", "W", "IC", "OC", "K", "S", "P", "N", "M", "D", "DIL", "G", "B", "C", "C2", "LO", "HI"],
        "cpu": ["H", "W", "IC", "OC", "K", "S", "P", "M", "N", "D", "DIL", "G", "B", "C", "LO", "HI"]}
API_KEYS = ["seed", "shape", "dtype", "skip", "vthreads", "tune", "relu", "tiling", "isa", "threads",
            "tuning", "min_time", "cores", "tile"]
EXTREME = ["0", "-1", "-7", str(10**30), str(2**31), str(2**63), "9" * 5000, "", " ", "abc", "1.5", "1e3",
           "0x10", "1_0", "+3", "٣", "=", "1=2"]
HUGE = ["0", "-1", "1000", str(10**12), str(2**31), str(2**63), str(10**30)]   # integers plan must refuse
SMALL = st.integers(1, 8).map(str)
#: options each target takes, drawn more often for it than the others
OWN_OPTIONS = {"diannao": ["--dtype", "--shape"], "vita": ["--vthreads", "--tune", "--config"],
               "cpu": ["--isa", "--threads", "--tune", "--dtype"]}


def value() -> st.SearchStrategy[str]:
    """A -p value: mostly a small integer, often one of the extremes that ``plan`` must refuse."""
    return st.one_of(SMALL, SMALL, SMALL, st.sampled_from(["16", "32", "64"]), st.sampled_from(EXTREME),
                     st.sampled_from(HUGE), st.text(max_size=6))


@st.composite
def legal(draw) -> list[str]:
    """A request each target should serve (it may still refuse some layers): small, so it runs fast."""
    target = draw(st.sampled_from(sorted(OPS)))
    op = draw(st.sampled_from(OPS[target]))
    small = st.sampled_from(["1", "2", "3", "5", "8"])
    args = ["run", op, "--target", target, "-p", f"seed={draw(st.integers(0, 10**6))}"]
    if op == "gemm":
        for key in ("M", "N", "K"):
            args += ["-p", f"{key}={draw(st.sampled_from(['1', '5', '16', '17', '32']))}"]
    elif op == "conv2d":
        hw, ic = draw(small), draw(st.sampled_from(["1", "3", "16", "32"]))   # padded to blocks as needed
        args += ["--shape", f"{hw}x{hw}x{ic}", "-p", f"OC={draw(st.sampled_from(['5', '16', '32', '40']))}"]
        for key, values in (("K", ["1", "3"]), ("S", ["1", "2"]), ("P", ["0", "1"])):
            args += ["-p", f"{key}={draw(st.sampled_from(values))}"]
    elif target in ("vita", "diannao") and op in OPERATORS and op != "relu" or op in VITA_NETWORK:
        # network.py's operators: [C, H, W] (a pool's window K, stride S) or [R, D] rows
        for key in ("R", "D") if op in ROWS else ("C", "H", "W"):
            args += ["-p", f"{key}={draw(st.sampled_from(['1', '3', '5', '8', '17']))}"]
        extra = {"max_pool": ["K", "S"], "avg_pool": ["K", "S"], "clip": ["LO", "HI"], "concat": ["C2"]}
        for key in extra.get(op, []):
            if draw(st.booleans()):
                args += ["-p", f"{key}={draw(st.sampled_from(['-200', '-5', '0', '1', '2', '3', '90']))}"]
        if target == "diannao":
            args += ["-p", f"cores={draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16]))}"]
        return [*args, "--json"]
    elif op in KINDS:   # TensorIR's kinds on VITA: every size small, groups dividing the channels
        for key, default in KINDS[op].items():
            if default is None or draw(st.booleans()):
                value = {"G": "2", "IC": "4", "OC": "6"}.get(key) if op == "group_conv" else None
                args += ["-p", f"{key}={value or draw(st.sampled_from(['1', '2', '3', '5']))}"]
    else:
        dims = draw(st.lists(st.sampled_from(["1", "3", "7", "16", "33"]), min_size=1, max_size=3))
        args += ["--shape", "x".join(dims)]
    if target == "diannao":
        args += ["-p", f"cores={draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16]))}"]
        if draw(st.booleans()):
            args += ["-p", f"tile={draw(st.sampled_from(['1', '16', '64', '1000']))}"]
        if op != "conv2d" and draw(st.booleans()):
            args += ["--dtype", draw(st.sampled_from(["f32", "f16", "i32", "i16", "i8"]))]
        switches = st.sampled_from(["--no-partition", "--no-preprocess"])
        args += draw(st.lists(switches, max_size=2, unique=True))
    elif target == "vita":
        args += ["--vthreads", str(draw(st.integers(0, 3))), "--tune", str(draw(st.integers(0, 3)))]
        args += draw(st.lists(st.just("--relu"), max_size=1))
        args += draw(st.lists(st.sampled_from(["vta-default", "tvm-paper"]), max_size=1).map(
            lambda c: ["--config", *c] if c else []))
    else:
        args += ["--isa", draw(st.sampled_from(["x86-vnni", "x86-avx512", "none"])),
                 "--threads", str(draw(st.integers(1, 2))), "--tune", str(draw(st.integers(0, 2)))]
    return [*args, "--json"]


@st.composite
def chaotic(draw) -> list[str]:
    """Anything: unknown targets and operators, garbage and extreme values, options that do not apply."""
    target = draw(st.one_of(st.sampled_from(sorted(OPS)), st.sampled_from(sorted(OPS)),
                            st.sampled_from(["", "gpu", "DIANNAO"]), st.text(max_size=5)))
    ops = OPS.get(target, ["add", "conv2d"])
    op = draw(st.one_of(st.sampled_from(ops), st.sampled_from(ops),
                        st.sampled_from(sorted({o for v in OPS.values() for o in v}) + ["dense", "", "nope"]),
                        st.sampled_from(["nope.py:f", "x.py:", ":f", "tests/fuzz/missing.py:op"]),
                        st.text(max_size=6)))
    args = ["run", op, "--target", target]
    if draw(st.integers(0, 9)) < 8:   # a small shape, or the layer's dims, so that legal requests run fast
        if op == "gemm":
            for key in ("M", "N", "K"):
                args += ["-p", f"{key}={draw(st.sampled_from(['1', '3', '16', '17', '32']))}"]
        elif op == "conv2d":
            hw = draw(st.sampled_from(["1", "3", "4", "7", "8"]))
            args += ["--shape", f"{hw}x{hw}x{draw(st.sampled_from(['1', '3', '16', '32']))}"]
            args += ["-p", f"OC={draw(st.sampled_from(['1', '16', '32']))}"]
        else:
            dims = draw(st.lists(st.sampled_from(["1", "3", "7", "16", "33"]), min_size=1, max_size=3))
            args += ["--shape", "x".join(dims)]
    for _ in range(draw(st.integers(0, 3))):   # more parameters: known, the run() API's, unknown ones
        key = draw(st.one_of(st.sampled_from(KEYS.get(target, ["H"])), st.sampled_from(API_KEYS),
                             st.sampled_from(["", "x", "OC ", " K"]), st.text(max_size=4)))
        args += ["-p", draw(st.one_of(value().map(lambda v, k=key: f"{k}={v}"), st.text(max_size=8)))]
    options = {
        "--shape": st.one_of(st.lists(st.sampled_from(["1", "3", "8"]), min_size=1, max_size=4).map("x".join),
                             st.sampled_from(["0", "x", "", "3x", "-1", "9" * 5000, str(2**63),
                                              "1x" * 40 + "1", "٣", " 3 "]), st.text(max_size=6)),
        "--dtype": st.one_of(st.sampled_from(["f32", "f16", "i32", "i16", "i8", "u8", "float32", "bool",
                                              "x"]),
                             st.text(max_size=4)),
        "--vthreads": st.one_of(st.integers(0, 3).map(str), st.sampled_from(EXTREME), st.sampled_from(HUGE)),
        # the CPU times each tuning asked for (0.1 s each, about 20 of them: 5 s), which is legal but slow
        "--tune": st.one_of(st.integers(0, 3).map(str), st.sampled_from(EXTREME),
                            st.sampled_from(["-1"] if target == "cpu" else HUGE)),
        "--isa": st.one_of(st.sampled_from(["x86-vnni", "x86-avx512", "none", "arm"]), st.text(max_size=4)),
        "--threads": st.one_of(st.integers(1, 2).map(str), st.sampled_from(HUGE), st.sampled_from(EXTREME)),
        "--config": st.sampled_from(["default", "vta-default", "tvm-paper", "nope", "", "/"]),
        "--spec": st.sampled_from(["isa/specs/vita.toml", "isa/specs/diannao.toml", "nope.toml", "", "/"]),
    }
    names = st.one_of(st.sampled_from(OWN_OPTIONS.get(target, ["--shape"])), st.sampled_from(sorted(options)))
    for name in draw(st.lists(names, max_size=3, unique=True)):
        args += [name, draw(options[name])]
    args += draw(st.lists(st.sampled_from(["--relu", "--no-partition", "--no-preprocess"]), max_size=2))
    return [*args, "--json"]


def check_request(args: list[str]) -> None:
    result = RUNNER.invoke(app, args)
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in out, out
    if result.exit_code == 0:
        report = json.loads(result.stdout)
        assert report["validated"] is True, report
        return
    assert result.exit_code in (1, 2), (result.exit_code, out)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    usage = result.exit_code == 2 and ("Usage:" in out or "Error" in out)   # click's usage error
    assert len(errors) == 1 or usage, out


def test_run_parameters_run_or_are_refused_with_one_error_line(fuzz) -> None:
    fuzz.check(st.one_of(legal(), chaotic()), check_request, ci_examples=60, slow=True, pinned=[
        # found by this fuzzer: run() parameters that are not integers, given as -p (TypeError), or min_time
        # (seconds of timing per measurement: -p min_time=100000 ran for a day)
        ["run", "add", "--shape", "4", "-p", "skip=3", "--json"],
        ["run", "add", "-p", "shape=3", "--json"],
        ["run", "conv2d", "--target", "cpu", "-p", "shape=3", "--json"],
        ["run", "gemm", "--target", "cpu", "-p", "min_time=100000", "--json"],
        ["run", "nope.py:f", "--target", "cpu", "-p", "min_time=100000", "--json"],
        # a --shape of more digits than int() reads (ValueError)
        ["run", "add", "--shape", "9" * 5000, "--json"],
        # CPU layers too large to index or to hold: numpy's ValueError, llvmlite's ValueError, the OOM killer
        ["run", "gemm", "--target", "cpu", "-p", f"M={10**22}", "--json"],
        ["run", "gemm", "--target", "cpu", "-p", "M=70000", "-p", "N=70000", "--json"],
        ["run", "gemm", "--target", "cpu", "-p", "M=40000", "-p", "N=40000", "--json"],
        # more CPU threads than cores: 64 took 9 s on 2 cores, 10**21 never ended
        ["run", "gemm", "--target", "cpu", "--threads", str(10**21), "--json"],
        # VITA's fallback tried every count of virtual threads below a huge one (MemoryError, OverflowError)
        ["run", "conv2d", "--target", "vita", "--shape", "1x1x1", "-p", "OC=1", "--vthreads", str(10**12),
         "--json"],
        ["run", "gemm", "--target", "vita", "--vthreads", str(10**30), "--json"],
    ])
