"""``tandem run OP --target TARGET``: compile, execute and validate one operator through the one flow,
``tandem.flows.run.run`` (simulated on DianNao and VITA; run for real on this CPU).

Prints a table (or, with ``--json``, one JSON object: the contract in tandem/flows/run.py). Exit status: 0
when
the simulated output equals numpy's, 1 when it does not, 2 for bad input or a compiler error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tandem.cli.console import CACHE_HELP, fail, resolve_target
from tandem.flows.params import WorkloadError, int_param, parse_params, parse_shape

OWN = ("cores", "tile", "threads")   # -p options of a flow, not of a user's operator
SIGNED = ("LO", "HI")                # -p values that may be negative (clip's bounds)
# parameters of tandem.flows.run.run that -p does not set (its values are integers): an option of their own,
# or none
NOT_P = {"shape": "--shape", "dtype": "--dtype", "isa": "--isa", "instruction": "--instruction",
         "relu": "--relu",
         "skip": "--no-partition or --no-preprocess", "tiling": None, "tuning": None, "min_time": None,
         "clip": None, "epilogue": None}
# run's parameters that an option of their own sets: how an error names them
FLAGS = {"shape": "--shape", "dtype": "--dtype", "vthreads": "--vthreads", "tune": "--tune", "isa": "--isa",
         "instruction": "--instruction",
         "threads": "--threads", "relu": "--relu", "skip": "--no-partition/--no-preprocess"}
P_HELP = ("KEY=VALUE, integers. conv2d, dilated_conv, conv_transpose: H W IC OC, K (3) S (1) P (1), "
          "N (vita: images); conv1d: W IC OC K S P; conv3d: D H W IC OC K S P; group_conv: H W IC OC G K S "
          "P; depthwise: H W C K S P; gemm: M N K (16 each); batch_matmul: B M N K; max_pool, avg_pool: C H "
          "W K S; global_avg_pool, residual_add: C H W; concat: C H W C2; clip: C H W LO HI; softmax, "
          "layer_norm, gelu: R D; vita conv2d and gemm: shift (8), bias (1: a bias input); diannao: cores "
          "(16), tile; any: seed. A key OP does not take is refused with the keys it takes.")
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "i32": "int32", "i16": "int16", "i8": "int8",
               "u8": "uint8"}


def run_command(
    op: Annotated[str, typer.Argument(help="Operator: add, sub, mul, maximum, relu (diannao); "
                                           "conv2d, gemm, conv1d, conv3d, dilated_conv, group_conv, "
                                           "depthwise, conv_transpose, batch_matmul (diannao, vita, cpu); "
                                           "residual_add, relu, clip, concat, max_pool, avg_pool, "
                                           "global_avg_pool (diannao, vita, cpu); softmax, layer_norm, "
                                           "gelu (diannao, cpu); or FILE.py:NAME, an operator of "
                                           "your own (diannao, vita, cpu), whose -p values NAME "
                                           "takes.")],
    target: Annotated[str, typer.Option(help="Target: diannao, vita, cpu (this machine) or cuda (an NVIDIA "
                                             "GPU here: gemm and conv2d on Tensor Cores).")] = "diannao",
    shape: Annotated[str | None, typer.Option(
        help="Tensor shape, e.g. 256x56x56 (default); for conv2d the input's HxWxIC.")] = None,
    params: Annotated[
        list[str] | None,
        typer.Option("-p", "--param", help=P_HELP),
    ] = None,
    dtype: Annotated[str | None, typer.Option(
        help="diannao: element type f32 (default), f16, i32, i16, i8; cpu: i16 for int16 x int16 (default "
             "u8 x s8).")] = None,
    config: Annotated[str | None, typer.Option(
        help="Machine config: built-in name (diannao: default; vita: vta-default, tvm-paper; cuda: sm90, "
             "sm80) or TOML file.")] = None,
    spec: Annotated[Path | None, typer.Option(
        help="A spec file of the target's ISA family (e.g. a copy of isa/specs/vita.toml with a timing "
             "changed) for the compiler and the simulator alike, instead of the built-in spec.")] = None,
    vthreads: Annotated[int | None, typer.Option(
        min=0, help="vita: virtual threads (default 0 = none), interleaved to hide load latency.")] = None,
    tune: Annotated[int | None, typer.Option(
        min=0, help="vita: simulate this many of the cost model's best tilings and keep the fastest "
                    "(default 0 = the model's first choice); cpu: time this many of UNIT's tunings (default "
                    "0 = PolyDL's top-ranked loop order, nothing timed); cuda: time this many of "
                    "UNIT's tunings.")] = None,
    isa: Annotated[str | None, typer.Option(
        help="cpu: x86-vnni (UNIT's tensorization onto the spec's instruction for the products: vpdpbusd, or "
             "vpmaddwd on an AVX2 CPU; the default for integers where this CPU has one), x86-avx512 "
             "(vectorized, no tensorized instruction; the default otherwise) or none.")] = None,
    instruction: Annotated[str | None, typer.Option(
        help="cpu: the spec's instruction x86-vnni sums the products with (e.g. vpmaddwd_256; default: the "
             "first of the spec's for them that this CPU runs).")] = None,
    threads: Annotated[int | None, typer.Option(
        min=1, help="cpu: threads for parallel loops (default: every core).")] = None,
    relu: Annotated[bool, typer.Option("--relu", help="vita: clip at 0 instead of -128; cpu (conv2d, gemm): "
                                                      "a ReLU fused into the reduction (PolyDL's Algorithm "
                                                      "3); diannao (conv2d): a ReLU on each output tile in "
                                                      "NMEM.")] = False,
    no_partition: Annotated[
        bool, typer.Option("--no-partition", help="diannao: compile without loop partitioning (seed 001 "
                                                  "Alg. 2).")
    ] = False,
    no_preprocess: Annotated[
        bool, typer.Option("--no-preprocess", help="diannao: compile without preprocessing (seed 001 "
                                                   "Alg. 1).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help=CACHE_HELP)] = True,
    explain: Annotated[bool, typer.Option(
        "--explain", help="After the table, per statement whose instructions a cover chose: the chosen "
                          "cover, its cycles and the best alternatives; then each instruction of the spec no "
                          "statement used, with the closest statement and why (with --json: the "
                          "selection's unused list).")] = False,
) -> None:
    """Compile OP for TARGET, run it on seeded random inputs and compare with numpy.

    The run is simulated (diannao, vita) or real (cpu, cuda). An option that does not apply to TARGET is
    refused."""
    from compiler.errors import TandemError
    from isa.errors import ISAError
    from sim.core.errors import SimError
    from tandem.flows.flow import RunError, UnknownParameter
    from tandem.flows.kernel_cache import KernelCache
    from tandem.flows.run import run
    from tandem.flows.user_ops import is_user_op

    resolved = resolve_target(target, config, spec)
    user = is_user_op(op)   # a user's operator takes any integers; the flow's own options stay checked
    skip = [name for name, off in (("loop_partition", no_partition), ("preprocess", no_preprocess)) if off]
    options = {"dtype": DTYPE_NAMES.get(dtype, dtype) if dtype else None, "vthreads": vthreads, "tune": tune,
               "isa": isa, "instruction": instruction, "threads": threads, "relu": relu or None,
               "skip": skip or None}
    try:
        values = _values(params or (), shape, user, options)
        with _tuning_progress(enabled=not as_json and sys.stdout.isatty()) as progress:
            report = run(op, resolved, values, progress=progress, explain=explain,
                         cache=KernelCache.default() if cache else None)
    except UnknownParameter as exc:
        raise fail(_unknown_option(exc, no_partition, no_preprocess), 2) from None
    except (WorkloadError, RunError, TandemError, SimError, ISAError, OSError) as exc:
        raise fail(str(exc), 2) from None
    _show(report, target, user, as_json)
    if explain and not as_json:
        _print_selection(report)
    if not report.validated:
        raise typer.Exit(code=1)


def _unknown_option(exc, no_partition: bool, no_preprocess: bool) -> str:
    """A parameter the run does not take that an option of its own set (``--vthreads`` on DianNao), named as
    that option, with what the run does take in the command line's terms; a ``-p`` key as the run says."""
    if exc.key not in FLAGS:
        return str(exc)
    flags = dict(FLAGS, skip="/".join(f for f, on in (("--no-partition", no_partition),
                                                        ("--no-preprocess", no_preprocess)) if on))
    takes = ", ".join(FLAGS.get(k) or f"-p {k}" for k in exc.known if k in FLAGS or k not in NOT_P)
    return f"{exc.where}: {flags[exc.key]} does not apply here; it takes {takes}"


def _values(params: Sequence[str], shape: str | None, user: bool, options: dict) -> dict:
    """``run``'s parameters: the ``-p`` values as integers (WorkloadError for one that is not, or that has an
    option of its own), ``--shape``, and the ``options`` given."""
    given = parse_params(params)
    for key in given:   # a user's operator may take these names, but min_time the CPU's flow takes first
        if key in NOT_P and (not user or key == "min_time"):
            raise WorkloadError(f"-p {key}", f"give it as {NOT_P[key]}" if NOT_P[key] else
                                "not a command-line parameter (tandem.flows.run.run takes it from Python)")
    at_least = {"seed": 0, "P": 0, "bias": 0}   # else 1, or none for signed and a user operator's own
    values: dict = {k: int_param(k, v, at_least.get(k, None if (user and k not in OWN) or k in SIGNED else 1))
                    for k, v in given.items()}
    if shape is not None:
        values["shape"] = parse_shape(shape)
    values.update({k: v for k, v in options.items() if v is not None})
    return values


def _show(report, target: str, user: bool, as_json: bool) -> None:
    """The report as JSON or as the target's table."""
    if as_json:
        typer.echo(json.dumps(report.to_json()))
    elif (user or "operator" in report.params) and target != "diannao":   # an operator written as a user's
        _print_user(report)
    else:
        PRINTERS[target](report)


def _print_selection(report) -> None:
    """``--explain``: what selection chose per statement, and the instructions no statement used."""
    from compiler.passes.explain import lines

    console = Console(highlight=False)
    text = lines(report.selection)
    console.print("selection:" if text else "selection: no statement's instructions were chosen by a cover "
                  "on this operator (its tensor instructions are matched directly)", markup=False)
    for line in text:
        console.print(f"  {line}", markup=False, soft_wrap=True)


@contextmanager
def _tuning_progress(enabled: bool):
    """A progress bar over the tuning candidates on a terminal (none under --json or in a pipe)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True) as bar:
        task = bar.add_task("tuning", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_user(r) -> None:
    """A user's operator on a target that reports time rather than simulated cycles (this CPU)."""
    seconds = r.measured.get("seconds")
    given = ", ".join(f"{k}={v}" for k, v in r.params["operator"].items())
    table = Table(title=f"{r.op} on {r.target} ({given})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [("validated", ("[green]yes[/green] " if r.validated else "[red]NO[/red] ") + r.detail),
            ("time", f"{seconds * 1e3:.3f} ms ({r.cycles:,} TSC ticks)" if seconds
             else f"{r.cycles:,} cycles"),
            ("instructions", ", ".join(f"{k} {v:,}" for k, v in sorted(r.instructions.items())) or "none"),
            ("compile / run", f"{r.compile_s:.2f} s / {r.simulate_s:.2f} s")]
    for k, v in rows:
        table.add_row(k, v)
    Console(highlight=False).print(table)


def _selection(p: dict) -> str:
    """How a CPU run's tuning was chosen, in words."""
    chosen = p.get("selection", {})
    if chosen.get("by") == "polydl":
        return (f" (PolyDL's top of {chosen['variants']} variants, {chosen['analysis_s']:.2f} s, "
                "nothing timed)")
    timed = f" (best of {len(p['tuned'])} timed)" if len(p["tuned"]) > 1 else ""
    return timed + (f"; {chosen['why']}" if "why" in chosen else "")


def _print_cpu(r) -> None:
    p, m = r.params, r.measured
    layer = " ".join(f"{k}={p[k]}" for k in ("H", "W", "IC", "OC", "K", "S", "P", "M", "N") if k in p)
    table = Table(title=f"{r.op} {layer} {p['dtype']} on this CPU ({p['cpu']}, {p['isa']}, "
                        f"{p['threads']} threads)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    # the instruction whose peak it is held to
    peak = next(iter(r.utilization),
                "fma" if p["dtype"].startswith("f32") else p["instruction"] or "vpdpbusd")
    rows = [
        ("validated", ("[green]yes[/green] " if r.validated else "[red]NO[/red] ") + r.detail),
        ("time", f"{m['seconds'] * 1e3:.3f} ms ({r.cycles:,} TSC ticks)"),
        ("GOPS", f"{m['gops']:.1f} of a measured {peak} peak of {m['peak_gops']:.1f} "
                 f"({r.utilization[peak]:.1%})" if m["peak_gops"]
                 else f"{m['gops']:.1f} (no {peak} here)"),
        ("tuning", p["tuning"] + _selection(p)),
        ("instructions", ", ".join(f"{k} {v:,}" for k, v in sorted(r.instructions.items())) or "none"),
        ("scalar fallback", f"{r.scalar_fallback} marked statements"),
        ("compile / run", f"{r.compile_s:.2f} s / {r.simulate_s:.2f} s"),
    ]
    epilogue = [x for x in ("bias add" if p.get("bias") else "", p.get("epilogue") or "") if x]
    if epilogue:   # fused into the operator (PolyDL's Algorithm 3)
        rows.insert(4, ("epilogue", " then ".join(epilogue) + ", fused into the operator"))
    for k, v in rows:
        table.add_row(k, v)
    console = Console(highlight=False)
    console.print(table)
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)


def _print_vita(r) -> None:
    p = r.params
    if "kernels" in p:   # a network operator on the ALU (VitaNetworkOpFlow)
        shape = " ".join(f"{k}={p[k]}" for k in ("C", "H", "W", "C2", "LO", "HI", "K", "S") if k in p)
        _show_table(f"{r.op} {shape} int32 -> int8 on vita (the ALU)", r, [
            ("chunks", ", ".join(f"{k['tiles'] // k['chunk']} x {k['chunk']} tiles" if "tiles" in k else
                                 f"{k['rows']} output rows of {k['blocks']} channel tiles"
                                 for k in p["kernels"])),
            ("clip", f"[{p['clip'][0]}, {p['clip'][1]}]"),
            ("instructions", ", ".join(f"{k} {v}" for k, v in sorted(r.instructions.items()))),
        ])
        return
    layer = " ".join(f"{k}={p[k]}" for k in ("H", "W", "IC", "OC", "K", "S", "P", "M", "N") if k in p)
    t = p["tiling"]
    asked = f", {p['vthreads']} asked" if p["vthreads_used"] != p["vthreads"] else ""
    title = f"{r.op} {layer} int8 on vita ({p['config']}, {p['vthreads_used']} virtual threads{asked})"
    _show_table(title, r, [
        ("tiling", f"{t['rows']} rows x {t['oc_block']} oc blocks x {t['ic_block']} ic blocks"
                   + (f", threads over {t['vthread_axis']}" if p["vthreads_used"] > 1 else "")),
        ("instructions", ", ".join(f"{k} {v}" for k, v in sorted(r.instructions.items()))),
    ])


def _show_table(title: str, r, rows: list[tuple[str, str]]) -> Console:
    """The report's table: validation, cycles and roofline, then ``rows``, utilization and timings."""
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("validated", ("[green]yes[/green] " if r.validated else "[red]NO[/red] ") + r.detail),
        ("cycles", f"{r.cycles:,}"),
        ("roofline", f"{r.roofline_cycles:,} cycles ({r.roofline_pct:.1f}% reached)"),
        *rows,
        ("utilization", ", ".join(f"{k} {v:.1%}" for k, v in r.utilization.items())),
        ("compile / simulate", f"{r.compile_s:.2f} s / {r.simulate_s:.2f} s"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console = Console(highlight=False)
    console.print(table)
    return console


def _print(r) -> None:
    p = r.params
    gemm = p.get("gemm")   # an operator mapped onto GEMMs: its own parameters, then the GEMMs it ran
    layer = (" ".join(f"{k}={p[k]}" for k in p if k.isupper()) + f" as {gemm['count']} GEMM(s) of "
             f"{gemm['M']}x{gemm['N']}x{gemm['K']}" if gemm else "x".join(map(str, p["shape"])))
    console = _show_table(
        f"{r.op} {layer} {p['dtype']} on {r.target} "
        f"({p.get('cores_used', p['cores'])} cores, tile {p['tile']})", r, [
            ("tensor / scalar instructions", f"{r.tensor_instructions:,} / {r.scalar_instructions:,}"),
            ("instructions", ", ".join(f"{k} {v:,}" for k, v in sorted(r.instructions.items()))),
            ("scalar fallback", f"{r.scalar_fallback:,}"),
            ("passes skipped", ", ".join(r.params["skip"]) or "none"),
            *([("epilogue", f"{' + '.join(e for e in ('bias', 'relu') if p.get(e))} on each output tile in "
                              f"NMEM, before its copy-out")] if p.get("relu") or p.get("bias") else []),
        ])
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)


def _print_cuda(r) -> None:
    p = r.params
    layer = " ".join(f"{k}={p[k]}" for k in ("M", "N", "H", "W", "IC", "OC", "K", "S", "P") if k in p)
    m = r.measured
    title = f"{r.op} {layer} fp16 -> fp32 on {m['device']} ({p['arch']} PTX, {p['tuning']})"
    console = _show_table(title, r, [
        ("time", f"{m['seconds'] * 1e6:,.1f} us: {m['tflops']:,.1f} TFLOP/s, {m['pct_of_peak']:.1f}% of the "
                 f"measured Tensor Core peak ({m['peak_tflops']:,.0f} TFLOP/s, cuBLAS)"),
        ("Tensor Core instructions", f"{r.tensor_instructions:,} executed"),
        ("PTX instructions", ", ".join(f"{k} {v}" for k, v in sorted(r.instructions.items()))),
        ("scalar fallback", f"{r.scalar_fallback} marked nests"),
    ])
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)


PRINTERS = {"diannao": _print, "vita": _print_vita, "cpu": _print_cpu, "cuda": _print_cuda}
