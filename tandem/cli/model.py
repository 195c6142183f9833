"""``tandem model FILE.onnx | --builtin NAME``: import a network (tandem/network/load.py,
tandem/network/graph.py) and print its layers.

Prints a table of the imported graph (each layer's operator, output shape and multiply-accumulates; the
batch norms folded into their convolutions) or, with ``--json``, one JSON object. Where onnxruntime is
installed, the import is checked: the graph as Tandem computes it (``graph.run_reference``, float32 layers)
against onnxruntime's run of the same model on seeded random inputs, within FP32_TOLERANCE of the output's
largest magnitude. With ``--int8``, the graph is also quantized (``--scheme``: pow2,
tandem/network/quantize.py, VTA's rule; affine or affine-per-channel, tandem/network/qdq_write.py,
onnxruntime's) and the integer graph compared with float32.

With ``--target vita|cpu|diannao`` (and ``--config``, ``--spec`` as ``tandem run`` takes them), the int8
network runs on the target, step by step (tandem/network/run.py), each step's output checked bit for bit
against the integer graph: a per-layer table (operator, shape, where it ran and why a step ran on the host,
the kernels, cycles or time, utilization, DRAM bytes) and the totals; ``--save FILE.json`` and ``--csv
FILE.csv`` write it, ``--trace FILE.json`` one Chrome/Perfetto trace of the whole network. The network's
output is compared with onnxruntime's float32 run of the model on the same input, held to the int8 budget
(RELATIVE_L2_BUDGET of relative L2 error; the same top output where the float output's top two values stand
further apart than the budget can move them). A model already quantized (QDQ, tandem/network/qdq.py)
keeps its quantization, and both its integer graph and the target's output are compared with onnxruntime's
run of it bit for bit. Exit status: 0 when the import, every step and the output check (or cannot be
checked), 1 when one differs, 2 for bad input.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from tandem.cli.console import CACHE_HELP, fail, resolve_target
from tandem.flows.params import WorkloadError, parse_shape

if TYPE_CHECKING:   # numpy is imported by the functions that use it: ``tandem --help`` starts without it
    import numpy as np

#: the largest |Tandem - onnxruntime| accepted, relative to the largest |output|: float32 layers computed in
#: another order, and batch norms folded into float32 weights (a few ulps per layer, over 50-150 layers)
FP32_TOLERANCE = 1e-4
#: a graph that computes in a narrower float type than float32 is held to this many of its ulps instead
NARROW_ULPS = 16
#: the accuracy an int8 network's output is held to against the float32 model's: its relative L2 error
RELATIVE_L2_BUDGET = 0.15


def model_command(
    file: Annotated[Path | None, typer.Argument(help="An ONNX model file.")] = None,
    builtin: Annotated[str | None, typer.Option(
        help="A builtin model instead of a file: resnet18, resnet50, mobilenet_v2, bert_encoder, "
             "vit_block; or a quantized CNN: resnet18_qdq, resnet50_qdq, mobilenet_v2_qdq.")] = None,
    input_shape: Annotated[list[str] | None, typer.Option(
        "--input-shape", help="NAME=1x3x224x224: a graph input's shape (needed where it is symbolic).")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the builtin model's weights and of the check's "
                                                  "inputs.")] = 0,
    int8: Annotated[bool, typer.Option("--int8", help="Also quantize to int8 (by --scheme) and compare "
                                                      "the integer graph with float32.")] = False,
    calibration: Annotated[str, typer.Option(
        help="How the int8 graph's ranges are calibrated: max (nothing clips) or mse (the least squared "
             "error, clipping outliers).")] = "max",
    calibrate: Annotated[Path | None, typer.Option(
        help="An .npz file of calibration inputs (one array per graph input, with a leading axis of "
             "samples); default: 4 seeded random inputs.")] = None,
    scheme: Annotated[str, typer.Option(
        help="A float model's int8 scheme: pow2 (per-tensor power-of-two exponents, VTA's rule; every "
             "target), affine or affine-per-channel (onnxruntime's quantize_static: uint8 activations, "
             "float scales; the CPU and DianNao).")] = "pow2",
    bias_correction: Annotated[bool, typer.Option(
        "--bias-correction", help="Correct each conv's and GEMM's bias for the rounding of its int8 weights "
                                  "(the mean shift of its outputs on the calibration inputs).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    target: Annotated[str | None, typer.Option(
        help="Run the int8 network on a target: vita, cpu or diannao.")] = None,
    config: Annotated[str | None, typer.Option(
        help="The target's simulator config (built-in name or TOML file), as tandem run takes it.")] = None,
    spec: Annotated[Path | None, typer.Option(help="A spec file of the target's ISA family.")] = None,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads for every kernel (--target cpu).")] = 1,
    resimulate: Annotated[bool, typer.Option(
        "--resimulate", help="Simulate every step, also kernels whose timing was already measured on a "
                             "target whose timing does not depend on the data (VITA).")] = False,
    jobs: Annotated[int | None, typer.Option(min=0, help="Worker processes that compile and simulate the "
                                                         "kernels (a simulated target's; default and 0: one "
                                                         "per CPU).")] = None,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help=CACHE_HELP)] = True,
    save: Annotated[Path | None, typer.Option(help="Write the network run as JSON to this file.")] = None,
    csv_file: Annotated[Path | None, typer.Option("--csv", help="Write the per-layer table as CSV to this "
                                                                 "file.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Write the network's run as one Chrome/Perfetto trace "
                                                    "(a slice per step and per kernel).")] = None,
) -> None:
    """Import a network (an ONNX file or a builtin model) and print its layers, or run it with --target.

    Batch norms are folded; with --target, the network runs in int8 on the target, every layer is checked
    against the integer graph and the output against onnxruntime."""
    from tandem.network import graph as tg
    from tandem.network import models
    from tandem.network.load import load_network

    if (file is None) == (builtin is None):
        raise fail("give an ONNX file or --builtin NAME (one of them)", 2)
    _check_folders({"--save": save, "--csv": csv_file, "--trace": trace})
    resolved = resolve_target(target, config, spec) if target is not None else None
    _check_jobs(jobs, resolved)
    try:
        loaded = load_network(file, builtin=builtin, seed=seed, input_shapes=_input_shapes(input_shape),
                              calibration=calibration, calibrate=calibrate, scheme=scheme,
                              bias_correction=bias_correction)
        check, quantized = _import_checks(loaded, seed, int8)
    except (WorkloadError, tg.GraphError, models.ModelError) as exc:
        raise fail(str(exc), 2) from None
    network, versus_ort = None, None
    if resolved is not None:
        network, versus_ort = _run_network(loaded, resolved, seed, threads, resimulate, jobs, cache,
                                           quiet=as_json)
    report = _report(builtin or str(file), loaded.graph, check, quantized, network, versus_ort)
    if network is not None:
        _write(network, report, resolved, save, csv_file, trace)
    if as_json:
        typer.echo(json.dumps(report))
    elif network is not None:
        _print_network(network, check, versus_ort)
    else:
        _print(loaded.graph, report)
    if (check["checked"] and not check["passed"]) or (network is not None and not network.validated) or \
            (network is not None and versus_ort["checked"] and not versus_ort["passed"]):
        raise typer.Exit(1)


def _check_folders(paths: dict[str, Path | None]) -> None:
    """Each output file's folder exists (exit 2 naming the option otherwise)."""
    for flag, path in paths.items():
        if path is not None and not path.parent.is_dir():
            raise fail(f"{flag} {path}: the folder {path.parent} does not exist", 2)


def _input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """--input-shape NAME=1x3x224x224 options as {name: shape}."""
    shapes = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise WorkloadError("--input-shape", f"expected NAME=1x3x224x224, got {item!r}")
        shapes[name] = parse_shape(text)
    return shapes


def _import_checks(loaded, seed: int, int8: bool) -> tuple[dict, dict | None]:
    """The import checked against onnxruntime (a QDQ model's integer graph: bit for bit; a float model's
    graph: within FP32_TOLERANCE), and with ``int8`` the quantization's error against float32."""
    import numpy as np

    from tandem.network import graph as tg

    if loaded.own is not None:   # already quantized: its own integer graph, exact against onnxruntime
        inputs = tg.random_inputs(loaded.graph, np.random.default_rng(seed))
        check = _exact_against_onnxruntime(loaded.model, loaded.own, inputs, None)
        return check, {"rule": "the model's own (QDQ): --int8 quantizes nothing more"} if int8 else None
    check = _check(loaded.graph, loaded.model, seed)
    return check, _int8(loaded, seed) if int8 else None


def _report(model: str, g, check: dict, quantized: dict | None, network, versus_ort: dict | None) -> dict:
    """The command's JSON object: the graph's inputs and layers, the checks, and the network's run."""
    return {"model": model, "inputs": {k: list(v) for k, v in g.inputs.items()},
            "layers": [{"name": layer.name, "op": layer.op, "shape": list(layer.shape), "macs": layer.macs,
                        "inputs": list(layer.inputs)} for layer in g.layers],
            "macs": g.macs, "folded_batch_norms": len(g.folded), "folded_biases": len(g.biases),
            "check": check,
            **({"int8": quantized} if quantized is not None else {}),
            **({"network": {**network.to_json(), "onnxruntime": versus_ort}} if network else {})}


def _write(network, report: dict, target, save: Path | None, csv_file: Path | None, trace: Path | None
           ) -> None:
    """The network's run as --save JSON, --csv table and --trace Chrome/Perfetto trace, those asked for."""
    if save is not None:
        save.write_text(json.dumps(report["network"], indent=1))
    if csv_file is not None:
        csv_file.write_text(network.to_csv())
    if trace is not None:
        from sim.core.trace import write_json

        write_json(network.chrome_trace(_clock_mhz(target)), trace)


def _clock_mhz(target) -> float:
    """The clock a trace's cycles run at: the simulator config's, or this CPU's time-stamp counter's."""
    if target.kind == "cpu":
        from compiler.backend.llvm_probe import tsc_hz

        return tsc_hz() / 1e6
    return float(target.config.clock_mhz)


def _check_jobs(jobs: int | None, target) -> None:
    """``--jobs`` refused (status 2, before any work) where it does not apply: without --target, and on a
    target that runs its kernels for real (each timing needs the machine to itself)."""
    if jobs is None:
        return
    if target is None:
        raise fail("--jobs: the kernels' worker processes run a network on a target; give --target", 2)
    from tandem.network.run import runs_for_real

    if jobs != 1 and runs_for_real(target):
        raise fail(f"--jobs: the {target.kind} target times each kernel for real, one at a time (a timing "
                   f"needs the machine to itself); worker processes run the kernels of simulated targets",
                   2)


def _run_network(loaded, target, seed: int, threads: int, resimulate: bool, jobs: int | None, cache: bool,
                 quiet: bool):
    """The int8 network (``loaded.quantized``: a QDQ model's own, or the float graph quantized with VTA's
    rule) on ``target``, its kernels by ``jobs`` worker processes on a simulated target (None: one per
    CPU), compiled kernels found in and kept in the kernel cache on disk with ``cache``, with a progress bar
    of its steps (none with --json), and its output against onnxruntime's run of the model on the same
    input (``_against_onnxruntime``; a QDQ model's: exactly)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tandem.flows.flow import RunError
    from tandem.flows.kernel_cache import KernelCache
    from tandem.network.run import run_inputs, run_network

    q = loaded.quantized
    inputs = run_inputs(loaded.graph, seed)
    options = {"threads": threads, "min_time": 0.05} if target.kind == "cpu" else None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True, disable=quiet) as bar:
        task = bar.add_task("layers", total=None)

        def progress(done: int, total: int, step: str) -> None:
            bar.update(task, completed=done, total=total, description=step or "done")
        try:
            network = run_network(q, target, inputs, options=options, resimulate=resimulate,
                                  progress=progress, jobs=0 if jobs is None else jobs,
                                  cache=KernelCache.default() if cache else None)
        except RunError as exc:
            raise fail(str(exc), 2) from None
    if loaded.own is not None:
        return network, _exact_against_onnxruntime(loaded.model, q, inputs, network.output)
    return network, _against_onnxruntime(loaded.model, q, inputs, network.output, seed)


def _exact_against_onnxruntime(model, q, inputs: dict, output: np.ndarray | None) -> dict:
    """A quantized model's output (``output``: a target's; None: the integer graph's) against
    onnxruntime's run of the same model on the same inputs: equal bit for bit, or the count that differ.
    On a CPU without VNNI onnxruntime's own kernels do not compute the exact sums (``_why_not_exact``):
    the count is reported, but the output is not held to it (``checked`` false, the reason in ``detail``)."""
    import numpy as np
    try:
        import onnxruntime  # noqa: F401  (whether it is installed)
    except ImportError:
        return {"checked": False, "passed": None, "detail": "onnxruntime is not installed (pip install -e "
                "'.[peers]'): the quantized model's output is not compared with it"}
    if output is None:
        output = q.run_integer(inputs)[q.graph.output]
    want = _onnxruntime(model, inputs, None)
    got = q.dequantize(q.graph.output, output).astype(want.dtype)
    differ = int(np.count_nonzero(got != want)) if got.shape == want.shape else want.size
    passed = differ == 0
    verdict = "equal bit for bit to" if passed else f"{differ} of {want.size} values differ from"
    detail = f"{verdict} onnxruntime's run of the quantized model ({want.size} values, its integer kernels)"
    why = _why_not_exact()
    if why and not passed:
        return {"checked": False, "passed": None, "exact": False, "differ": differ, "values": int(want.size),
                "detail": f"{detail}; not held to it: {why}"}
    return {"checked": True, "passed": passed, "exact": passed, "differ": differ, "values": int(want.size),
            "detail": detail}


def _why_not_exact() -> str:
    """Why onnxruntime's integer kernels do not give the exact sums on this CPU ("" where they do)."""
    from compiler.backend.llvm import host_cpu

    if host_cpu()["avx512vnni"] or host_cpu()["avxvnni"]:
        return ""
    return ("this CPU has no VNNI, and there onnxruntime's u8 x s8 kernels add pairs of products in int16 "
            "with saturation (VPMADDUBSW: its documented saturation issue), while Tandem's kernels and its "
            "integer graph compute the exact sums")


def _against_onnxruntime(model, q, inputs: dict, output: np.ndarray, seed: int) -> dict:
    """The target's int8 output, dequantized, against onnxruntime's float32 run of the model on the same
    inputs, held to the accuracy budget of an int8 network (``RELATIVE_L2_BUDGET``), whatever error the
    quantization itself has: its relative L2 error within the budget, and its top output the float
    output's where the float output's own statistics make that output decisive (``_decisive``)."""
    try:
        import onnxruntime  # noqa: F401  (whether it is installed)
    except ImportError:
        return {"checked": False, "passed": None, "detail": "onnxruntime is not installed (pip install -e "
                "'.[peers]'): the network's output is not compared with it"}
    want = _onnxruntime(model, inputs, q.graph.output)   # in a child: its session's memory is its own
    got = q.compare_output(output, want)
    decisive = _decisive(want)
    within = got["relative_l2"] <= RELATIVE_L2_BUDGET
    passed = within and (bool(got["top1_agrees"]) or not decisive)
    top = ("agrees" if got["top1_agrees"] else "differs") + (
        "" if decisive else " (not decisive: the float output's top two are closer than the budget)")
    return {"checked": True, "passed": passed, **got, "tolerance": RELATIVE_L2_BUDGET,
            "top1_decisive": decisive,
            "detail": f"relative L2 error {got['relative_l2']:.4f} against onnxruntime's float32 output "
                      f"({'within' if within else 'OUTSIDE'} the int8 budget {RELATIVE_L2_BUDGET}); the top "
                      f"output {top}"}


def _decisive(want: np.ndarray) -> bool:
    """Whether the float output's top value leads the next by more than the error budget lets an int8
    output move them (twice the budget times the output's root mean square): then its top output must
    agree."""
    import numpy as np
    values = np.sort(np.asarray(want, np.float64).ravel())
    if values.size < 2:
        return False
    rms = float(np.sqrt(np.mean(values**2)))
    return float(values[-1] - values[-2]) > 2 * RELATIVE_L2_BUDGET * rms


def _print_network(network, check: dict, versus_ort: dict) -> None:
    console = Console(width=max(Console().width, 150))   # the table's ten columns, also when piped
    totals = network.totals()
    table = Table(title=f"{network.model} on {network.target} ({network.config or 'this CPU'}): int8, "
                        f"{totals['steps']} steps")
    cpu = network.target == "cpu"
    for column in ("step", "op", "output", "where", "kernels", "MACs", "time (ms)" if cpu else "cycles",
                   "util", "DRAM bytes", "check"):
        table.add_column(column, justify="right" if column in ("MACs", "cycles", "time (ms)", "util",
                                                               "DRAM bytes") else "left")
    for r in network.rows:
        measured = (f"{r.seconds * 1e3:.3f}" if cpu and r.seconds is not None else
                    f"{r.cycles:,}" if r.cycles is not None and not cpu else "")
        reused = f" ({r.timing})" if "reused" in r.timing else ""
        status = ("bit-exact" if r.validated else "DIFFERS") + reused
        table.add_row(r.step, r.op, "x".join(map(str, r.shape)), r.where, r.kernel or "(see below)",
                      f"{r.macs:,}" if r.macs else "", measured,
                      f"{r.utilization:.1%}" if r.utilization is not None and r.macs else "",
                      f"{r.dram_bytes:,}" if r.dram_bytes is not None else "", status)
    console.print(table)
    for r in network.rows:
        if r.where == "host":
            console.print(f"{r.step} ran on the host: {r.why}", markup=False)
    measured = (f"{totals['seconds'] * 1e3:.3f} ms" if cpu and totals["seconds"] is not None else
                f"{totals['cycles']:,} cycles")
    console.print(f"total: {measured}, {totals['macs'] / 1e9:.3f} GMACs, "
                  f"{totals['tensor_macs_share']:.2%} of them on tensor instructions; on the host: "
                  f"{', '.join(totals['on_host']) or 'nothing'}; every step "
                  f"{'bit-exact with the integer graph' if network.validated else 'NOT bit-exact'} "
                  f"({totals['wall_s']:.1f} s)", markup=False)
    if network.inference_s is not None:
        console.print(f"one inference end to end: {network.inference_s * 1e3:.3f} ms (the median of "
                      f"{network.inference_runs}: the input quantized, every step's data moved to its "
                      f"kernel's layout and back, every kernel, the host's steps; the kernels alone "
                      f"{totals['seconds'] * 1e3:.3f} ms)", markup=False)
        placed = network.inference_placed
        if placed:
            reasons = "; ".join(f"{n} because {why}" for why, n in Counter(placed.values()).most_common())
            console.print(f"placed again on every inference ({len(placed)} of the target's steps; the others "
                          f"hand their blocked outputs on): {reasons}", markup=False)
    console.print(f"import check: {check['detail']}", markup=False)
    console.print(f"end to end: {versus_ort['detail']}", markup=False)


def _check(g, model, seed: int) -> dict:
    """The imported graph against onnxruntime's run of the model, where onnxruntime is installed."""
    import numpy as np
    try:
        import onnxruntime  # noqa: F401  (whether it is installed)
    except ImportError:
        return {"checked": False, "passed": None,
                "detail": "onnxruntime is not installed (pip install -e '.[peers]'): the import is not "
                          "checked"}
    from tandem.network import graph as tg

    inputs = tg.random_inputs(g, np.random.default_rng(seed))
    got = tg.run_reference(g, inputs)   # first: a node Tandem refuses is named as Tandem refuses it
    want = _onnxruntime(model, inputs, g.output)
    err, scale = _max_error(got, want)
    tolerance = _tolerance(g)
    passed = got.shape == want.shape and err <= tolerance * scale
    return {"checked": True, "passed": passed, "max_abs_err": err, "relative": err / scale,
            "detail": f"{'matches' if passed else 'differs from'} onnxruntime: max |err| {err:.3g} "
                      f"({err / scale:.2g} of the largest output; tolerance {tolerance:g})"}


def _tolerance(g) -> float:
    """FP32_TOLERANCE, or NARROW_ULPS of the narrowest floating-point type the graph computes in where
    that is wider (float16, bfloat16, float8: a value rounded to it differs by its ulps from one computed
    in another order or width)."""
    import ml_dtypes
    import numpy as np

    eps = []
    for name in (*g.input_types.values(), *(d for layer in g.layers for d in layer.dtypes)):
        try:
            eps.append(float(ml_dtypes.finfo(np.dtype(name)).eps))
        except (TypeError, ValueError):   # not a floating-point type
            continue
    return max([FP32_TOLERANCE, *(NARROW_ULPS * e for e in eps)])


#: what each int8 scheme of a float model is (tandem/network/load.py's SCHEMES)
SCHEME_RULES = {"pow2": "per-tensor power-of-two exponents, calibrated ({calibration})",
                "affine": "onnxruntime's quantize_static rule: uint8 activations calibrated ({calibration}), "
                          "int8 weights with a float scale per tensor",
                "affine-per-channel": "onnxruntime's quantize_static rule: uint8 activations calibrated "
                                      "({calibration}), int8 weights with a float scale per output channel"}


def _int8(loaded, seed: int) -> dict:
    """The graph quantized by the network's scheme (calibrated by its rule on its inputs), against float32
    on another input."""
    inputs = f"{len(loaded.samples)} inputs of the calibration file" if loaded.samples else "4 seeded inputs"
    rule = SCHEME_RULES[loaded.scheme].format(calibration=loaded.calibration) + (
        ", biases corrected for the weights' rounding" if loaded.bias_correction else "")
    return {"rule": f"{rule}, on {inputs}", "scheme": loaded.scheme,
            **loaded.quantized.check_against_float(seed + 1, loaded.graph)}


def _max_error(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """The largest |got - want| (values NaN in both, or the same infinity in both, agree; where one alone is
    NaN, or the shapes differ: inf) and the largest finite |want| (1.0 where there is none, or it is 0)."""
    import numpy as np
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf"), 1.0
    with np.errstate(invalid="ignore"):
        agree = (got == want) | (np.isnan(got) & np.isnan(want))
        diff = np.nan_to_num(np.where(agree, 0.0, np.abs(got - want)), nan=np.inf)
    finite = np.abs(want[np.isfinite(want)])
    return float(diff.max()) if diff.size else 0.0, (float(finite.max()) if finite.size else 0.0) or 1.0


def _onnxruntime(model, inputs: dict, output: str | None) -> np.ndarray:
    """onnxruntime's value of ``output`` (None, or one it does not name: its first output) for ``inputs``;
    an error exit (status 1) where onnxruntime cannot run the model: Tandem's result would go unchecked."""
    from tandem.cli import onnxruntime_run

    source = model.SerializeToString() if not isinstance(model, Path | str) else str(model)
    try:   # in a child process: onnxruntime crashes on some malformed models
        return onnxruntime_run.run(source, inputs, output)
    except onnxruntime_run.OnnxRuntimeFailure as exc:
        raise fail(f"onnxruntime cannot run the model, so Tandem's result is not checked against it "
                   f"({exc})", 1) from None


def _print(g, report: dict) -> None:
    console = Console()
    table = Table(title=f"{report['model']}: {len(g.layers)} layers, {g.macs / 1e9:.3f} GMACs, "
                        f"{len(g.folded)} batch norms folded")
    for column in ("#", "layer", "op", "output", "MACs"):
        table.add_column(column, justify="right" if column in ("#", "MACs") else "left")
    for k, layer in enumerate(g.layers):
        table.add_row(str(k), layer.name, layer.op, "x".join(map(str, layer.shape)),
                      f"{layer.macs:,}" if layer.macs else "")
    console.print(table)
    console.print(f"import check: {report['check']['detail']}", markup=False)   # keeps '.[peers]' as text
    if "int8" in report and "relative_l2" not in report["int8"]:
        console.print(f"int8: {report['int8']['rule']}", markup=False)
    elif "int8" in report:
        q = report["int8"]
        agree = "agrees" if q["top1_agrees"] else "differs"
        console.print(f"int8 ({q['rule']}): relative L2 error {q['relative_l2']:.3f} against float32; the "
                      f"top output {agree}", markup=False)
