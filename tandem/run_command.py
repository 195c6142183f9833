"""``tandem run OP --target TARGET``: compile, simulate and validate one operator (tandem/run.py).

Prints a table (or, with ``--json``, one JSON object: the contract in tandem/run.py). Exit status: 0 when
the simulated output equals numpy's, 1 when it does not, 2 for bad input or a compiler error.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tandem.console import fail
from tandem.workloads import WorkloadError, int_param, parse_params, parse_shape

TARGETS = ("diannao",)
CONV_PARAMS = ("H", "W", "IC", "OC", "K", "S", "P")
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "i32": "int32", "i16": "int16", "i8": "int8"}


def run_command(
    op: Annotated[str, typer.Argument(help="Operator: add, sub, mul, maximum, relu, conv2d.")],
    target: Annotated[str, typer.Option(help="Target: diannao.")] = "diannao",
    shape: Annotated[str | None, typer.Option(
        help="Tensor shape, e.g. 256x56x56 (default); for conv2d the input's HxWxIC.")] = None,
    params: Annotated[
        list[str] | None,
        typer.Option("-p", "--param", help="KEY=VALUE: cores=N (default 16), tile=ELEMENTS, seed=N; conv2d "
                                           "also H, W, IC, OC (default 16), K (3), S (1), P (1)."),
    ] = None,
    dtype: Annotated[str, typer.Option(help="Element type: f32, f16, i32, i16, i8.")] = "f32",
    config: Annotated[str, typer.Option(help="Simulator config: built-in name or TOML file.")] = "default",
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
    from sim.core.errors import SimError
    from tandem.run import RunError, run_diannao

    if target not in TARGETS:
        raise fail(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}", 2)
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
                             ints.get("tile"), config, skip, ints.get("seed", 0), conv=conv)
    except (WorkloadError, RunError, TandemError, SimError, OSError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        typer.echo(json.dumps(report.to_json()))
    else:
        _print(report)
    if not report.validated:
        raise typer.Exit(code=1)


def _conv_layer(dims: tuple[int, ...], ints: dict[str, int], shape_given: bool):
    """The conv2d input shape (H, W, IC) and ConvParams from ``--shape`` and ``-p H= W= IC= OC= K= S= P=``."""
    from tandem.run import ConvParams

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
    return dims, ConvParams(ints.get("OC", 16), ints.get("K", 3), ints.get("S", 1), ints.get("P", 1))


def _print(r) -> None:
    console = Console(highlight=False)
    table = Table(title=f"{r.op} {'x'.join(map(str, r.params['shape']))} {r.params['dtype']} on {r.target} "
                  f"({r.params.get('cores_used', r.params['cores'])} cores, tile {r.params['tile']})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("validated", ("[green]yes[/green] " if r.validated else "[red]NO[/red] ") + r.detail),
        ("cycles", f"{r.cycles:,}"),
        ("roofline", f"{r.roofline_cycles:,} cycles ({r.roofline_pct:.1f}% reached)"),
        ("tensor / scalar instructions", f"{r.tensor_instructions:,} / {r.scalar_instructions:,}"),
        ("scalar fallback", f"{r.scalar_fallback:,}"),
        ("utilization", ", ".join(f"{k} {v:.1%}" for k, v in r.utilization.items())),
        ("passes skipped", ", ".join(r.params["skip"]) or "none"),
        ("compile / simulate", f"{r.compile_s:.2f} s / {r.simulate_s:.2f} s"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    for reason in r.unmatched:
        console.print(f"  not tensorized: {reason}", markup=False)
