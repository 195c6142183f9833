"""``tandem run OP --target TARGET``: compile, simulate and validate one operator (tandem/run.py for the
DianNao card, tandem/vita_run.py for VITA, tandem/cpu_run.py for this CPU, where the code runs for real).

Prints a table (or, with ``--json``, one JSON object: the contract in tandem/run.py). Exit status: 0 when
the simulated output equals numpy's, 1 when it does not, 2 for bad input or a compiler error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tandem.console import fail
from tandem.workloads import WorkloadError, int_param, parse_params, parse_shape

TARGETS = ("diannao", "vita", "cpu")
CONV_PARAMS = ("H", "W", "IC", "OC", "K", "S", "P")
GEMM_PARAMS = ("M", "N", "K")
VITA_OPS = ("conv2d", "gemm")
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "i32": "int32", "i16": "int16", "i8": "int8"}


def run_command(
    op: Annotated[str, typer.Argument(help="Operator: add, sub, mul, maximum, relu, conv2d (diannao); "
                                           "conv2d, gemm (vita, cpu).")],
    target: Annotated[str, typer.Option(help="Target: diannao, vita or cpu (this machine).")] = "diannao",
    shape: Annotated[str | None, typer.Option(
        help="Tensor shape, e.g. 256x56x56 (default); for conv2d the input's HxWxIC.")] = None,
    params: Annotated[
        list[str] | None,
        typer.Option("-p", "--param", help="KEY=VALUE: seed=N; diannao: cores=N (default 16), "
                                           "tile=ELEMENTS; conv2d: H, W, IC, OC (default 16), K (3), S (1), "
                                           "P (1), N (vita: images, default 1); gemm (vita): M, N, K."),
    ] = None,
    dtype: Annotated[str, typer.Option(help="Element type: f32, f16, i32, i16, i8.")] = "f32",
    config: Annotated[str | None, typer.Option(
        help="Simulator config: built-in name (diannao: default; vita: vta-default, tvm-paper) or TOML "
             "file.")] = None,
    spec: Annotated[Path | None, typer.Option(
        help="A spec file of the target's ISA family (e.g. a copy of isa/specs/vita.toml with a timing "
             "changed) for the compiler and the simulator alike, instead of the built-in spec.")] = None,
    vthreads: Annotated[int, typer.Option(
        min=0, help="vita: virtual threads (0 = none), interleaved to hide load latency.")] = 0,
    tune: Annotated[int, typer.Option(
        min=0, help="vita: simulate this many of the cost model's best tilings and keep the fastest "
                    "(0 = the model's first choice); cpu: time this many of UNIT's tunings.")] = 0,
    isa: Annotated[str, typer.Option(
        help="cpu: x86-vnni (vpdpbusd, UNIT's tensorization), x86-avx512 (vectorized, no tensorized "
             "instruction) or none.")] = "x86-vnni",
    threads: Annotated[int, typer.Option(
        min=0, help="cpu: threads for parallel loops (0 = every core).")] = 0,
    relu: Annotated[bool, typer.Option("--relu", help="vita: clip at 0 instead of -128.")] = False,
    no_partition: Annotated[
        bool, typer.Option("--no-partition", help="Compile without loop partitioning (seed 001 Alg. 2).")
    ] = False,
    no_preprocess: Annotated[
        bool, typer.Option("--no-preprocess", help="Compile without preprocessing (seed 001 Alg. 1).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Compile OP for TARGET, simulate it on seeded random inputs and compare with numpy."""
    from compiler.errors import TandemError
    from isa.errors import ISAError
    from sim.core.errors import SimError
    from tandem.run import RunError, run_diannao
    from tandem.targets import TargetError, load_target

    if target not in TARGETS:
        raise fail(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}", 2)
    try:
        resolved = load_target(target, config, spec)
    except (TargetError, TandemError, SimError, ISAError) as exc:
        raise fail(str(exc), 2) from None
    if target == "vita":
        _run_vita(op, shape, params, resolved, vthreads, tune, relu, as_json)
        return
    if target == "cpu":
        _run_cpu(op, shape, params, isa, threads, tune, as_json, resolved)
        return
    shape_given = shape is not None
    shape = shape or "256x56x56"
    try:
        values = parse_params(params or ())
        known = {"cores", "tile", "seed", *(CONV_PARAMS if op == "conv2d" else ())}
        unknown = sorted(set(values) - known)
        if unknown:
            raise WorkloadError(f"-p {unknown[0]}", f"unknown parameter; expected {', '.join(sorted(known))}")
        ints = {k: int_param(k, v, 0 if k in ("seed", "P") else 1) for k, v in values.items()}
        dropped = (("loop_partition", no_partition), ("preprocess", no_preprocess))
        skip = [name for name, off in dropped if off]
        dims, conv = parse_shape(shape), None
        if op == "conv2d":
            dims, conv = _conv_layer(dims, ints, shape_given)
        report = run_diannao(op, dims, DTYPE_NAMES.get(dtype, dtype), ints.get("cores", 16),
                             ints.get("tile"), resolved, skip, ints.get("seed", 0), conv=conv)
    except (WorkloadError, RunError, TandemError, SimError, OSError) as exc:
        raise fail(str(exc), 2) from None
    _report(report, as_json, _print)


def _report(report, as_json: bool, show) -> None:
    """Print ``report`` (one JSON object, or ``show``'s table); exit 1 when it did not validate."""
    if as_json:
        typer.echo(json.dumps(report.to_json()))
    else:
        show(report)
    if not report.validated:
        raise typer.Exit(code=1)


def _run_vita(op: str, shape: str | None, params: list[str] | None, config, vthreads: int, tune: int,
              relu: bool, as_json: bool) -> None:
    from compiler.errors import TandemError
    from sim.core.errors import SimError
    from tandem.run import RunError
    from tandem.vita_run import VitaLayer, run_vita

    try:
        if op not in VITA_OPS:
            raise RunError(f"VITA: no schedule for operator {op!r}; expected one of {', '.join(VITA_OPS)}")
        (kind, dims), seed = _layer_from(op, shape, params, "vita")
        layer = VitaLayer.gemm(*dims) if kind == "gemm" else VitaLayer.conv2d(*dims)
        report = run_vita(layer, vthreads, config, tune=tune, relu=relu, seed=seed)
    except (WorkloadError, RunError, TandemError, SimError, OSError) as exc:
        raise fail(str(exc), 2) from None
    _report(report, as_json, _print_vita)


def _layer_from(op: str, shape: str | None, params: list[str] | None, target: str):
    """The operator's layer from ``--shape``/``-p`` (conv2d: H W IC OC K S P; gemm: M N K), and the seed."""
    values = parse_params(params or ())
    known = {"seed", *(CONV_PARAMS if op == "conv2d" else GEMM_PARAMS)}
    if op == "conv2d" and target == "vita":
        known.add("N")   # images in the batch: the GEMM core multiplies BATCH of them at once
    unknown = sorted(set(values) - known)
    if unknown:
        raise WorkloadError(f"-p {unknown[0]}", f"unknown parameter for {op} on {target}; expected "
                                                f"{', '.join(sorted(known))}")
    ints = {k: int_param(k, v, 0 if k in ("seed", "P") else 1) for k, v in values.items()}
    if op == "gemm":
        if shape is not None:
            raise WorkloadError("--shape", f"gemm on {target} takes -p M= N= K=, not --shape")
        return ("gemm", (ints.get("M", 16), ints.get("N", 16), ints.get("K", 16))), ints.get("seed", 0)
    dims, conv = _conv_layer(parse_shape(shape) if shape else (56, 56, 64), ints, shape is not None)
    images = (ints["N"],) if "N" in ints else ()
    return ("conv2d", (*dims, conv.oc, conv.k, conv.s, conv.p, *images)), ints.get("seed", 0)


def _run_cpu(op: str, shape: str | None, params: list[str] | None, isa: str, threads: int, tune: int,
             as_json: bool, target) -> None:
    from compiler.errors import TandemError
    from tandem.cpu_run import CpuLayer, run_cpu
    from tandem.run import RunError

    try:
        if op not in VITA_OPS:
            raise RunError(f"cpu: no schedule for operator {op!r}; expected one of {', '.join(VITA_OPS)}")
        (kind, dims), seed = _layer_from(op, shape, params, "cpu")
        layer = CpuLayer.gemm(*dims) if kind == "gemm" else CpuLayer.conv2d(*dims)
        report = run_cpu(layer, isa, threads or None, tune=tune, seed=seed, target=target)
    except (WorkloadError, RunError, TandemError, OSError) as exc:
        raise fail(str(exc), 2) from None
    _report(report, as_json, _print_cpu)


def _print_cpu(r) -> None:
    p = r.params
    layer = " ".join(f"{k}={p[k]}" for k in ("H", "W", "IC", "OC", "K", "S", "P", "M", "N") if k in p)
    table = Table(title=f"{r.op} {layer} {p['dtype']} on this CPU ({p['cpu']}, {p['isa']}, "
                        f"{p['threads']} threads)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("validated", ("[green]yes[/green] " if r.validated else "[red]NO[/red] ") + r.detail),
        ("time", f"{r.seconds * 1e3:.3f} ms ({r.cycles:,} TSC ticks)"),
        ("GOPS", f"{r.gops:.1f} of a measured vpdpbusd peak of {r.peak_gops:.1f} "
                 f"({r.utilization['vpdpbusd']:.1%})" if r.peak_gops else f"{r.gops:.1f} (no vpdpbusd here)"),
        ("tuning", p["tuning"] + (f" (best of {len(p['tuned'])})" if len(p["tuned"]) > 1 else "")),
        ("instructions", ", ".join(f"{k} {v:,}" for k, v in sorted(r.instructions.items())) or "none"),
        ("scalar fallback", f"{r.scalar_fallback} marked statements"),
        ("compile / run", f"{r.compile_s:.2f} s / {r.simulate_s:.2f} s"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console = Console(highlight=False)
    console.print(table)
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)


def _print_vita(r) -> None:
    p = r.params
    layer = " ".join(f"{k}={p[k]}" for k in ("H", "W", "IC", "OC", "K", "S", "P", "M", "N") if k in p)
    t = p["tiling"]
    _show_table(f"{r.op} {layer} int8 on vita ({p['config']}, {p['vthreads']} virtual threads)", r, [
        ("tiling", f"{t['rows']} rows x {t['oc_block']} oc blocks x {t['ic_block']} ic blocks"
                   + (f", threads over {t['vthread_axis']}" if p["vthreads"] > 1 else "")),
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


def _conv_layer(dims: tuple[int, ...], ints: dict[str, int], shape_given: bool):
    """The conv2d input shape (H, W, IC) and the layer (ConvShape) from ``--shape`` and ``-p H= W= IC= OC= K=
    S= P=``."""
    from compiler.ops.nn import ConvShape

    hw = {k: ints[k] for k in ("H", "W", "IC") if k in ints}
    if shape_given and hw:
        raise WorkloadError("-p " + next(iter(hw)), "give the conv2d input either as --shape HxWxIC or as "
                                                    "-p H= W= IC=, not both")
    if hw:
        missing = [k for k in ("H", "W", "IC") if k not in hw]
        if missing:
            raise WorkloadError(f"-p {missing[0]}", "conv2d needs all of H, W and IC")
        dims = (hw["H"], hw["W"], hw["IC"])
    elif not shape_given:
        dims = (56, 56, 64)
    if len(dims) != 3:
        raise WorkloadError("--shape", f"conv2d takes the input shape HxWxIC, but got {len(dims)} dimensions")
    return dims, ConvShape(*dims, ints.get("OC", 16), ints.get("K", 3), ints.get("S", 1), ints.get("P", 1))


def _print(r) -> None:
    console = _show_table(
        f"{r.op} {'x'.join(map(str, r.params['shape']))} {r.params['dtype']} on {r.target} "
        f"({r.params.get('cores_used', r.params['cores'])} cores, tile {r.params['tile']})", r, [
            ("tensor / scalar instructions", f"{r.tensor_instructions:,} / {r.scalar_instructions:,}"),
            ("scalar fallback", f"{r.scalar_fallback:,}"),
            ("passes skipped", ", ".join(r.params["skip"]) or "none"),
        ])
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)
