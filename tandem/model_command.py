"""``tandem model FILE.onnx | --builtin NAME``: import a network (tandem/graph.py) and print its layers.

Prints a table of the imported graph (each layer's operator, output shape and multiply-accumulates; the
batch norms folded into their convolutions) or, with ``--json``, one JSON object. Where onnxruntime is
installed, the import is checked: the graph as Tandem computes it (``graph.run_reference``, float32 layers)
against onnxruntime's run of the same model on seeded random inputs, within FP32_TOLERANCE of the output's
largest magnitude. Compiling and running the layers on a target is the next step of the networks issue.
With ``--int8``, the graph is also quantized (tandem/quantize.py) and the integer graph compared with float32.
Exit status: 0 when the import checks (or cannot be checked), 1 when it differs, 2 for bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tandem.console import fail
from tandem.workloads import WorkloadError, parse_shape

#: the largest |Tandem - onnxruntime| accepted, relative to the largest |output|: float32 layers computed in
#: another order, and batch norms folded into float32 weights (a few ulps per layer, over 50-150 layers)
FP32_TOLERANCE = 1e-4


def model_command(
    file: Annotated[Path | None, typer.Argument(help="An ONNX model file.")] = None,
    builtin: Annotated[str | None, typer.Option(
        help="A builtin model instead of a file: resnet18, resnet50, mobilenet_v2, bert_encoder, "
             "vit_block.")] = None,
    input_shape: Annotated[list[str] | None, typer.Option(
        "--input-shape", help="NAME=1x3x224x224: a graph input's shape (needed where it is symbolic).")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the builtin model's weights and of the check's "
                                                  "inputs.")] = 0,
    int8: Annotated[bool, typer.Option("--int8", help="Also quantize to int8 (tandem.quantize: VTA's rule) "
                                                      "and compare the integer graph with float32.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Import a network (an ONNX file or a builtin model), fold its batch norms, and print its layers."""
    from tandem import graph as tg
    from tandem import models

    if (file is None) == (builtin is None):
        raise fail("give an ONNX file or --builtin NAME (one of them)", 2)
    try:
        shapes = {}
        for item in input_shape or ():
            name, sep, text = item.partition("=")
            if not sep or not name:
                raise WorkloadError("--input-shape", f"expected NAME=1x3x224x224, got {item!r}")
            shapes[name] = parse_shape(text)
        model = models.build(builtin, seed) if builtin else None
        g = tg.load(model if model is not None else file, shapes)
        check = _check(g, model if model is not None else file, seed)
        quantized = _int8(g, seed) if int8 else None
    except (WorkloadError, tg.GraphError, models.ModelError) as exc:
        raise fail(str(exc), 2) from None
    report = {"model": builtin or str(file), "inputs": {k: list(v) for k, v in g.inputs.items()},
              "layers": [{"name": layer.name, "op": layer.op, "shape": list(layer.shape), "macs": layer.macs,
                          "inputs": list(layer.inputs)} for layer in g.layers],
              "macs": g.macs, "folded_batch_norms": len(g.folded), "check": check,
              **({"int8": quantized} if quantized is not None else {})}
    if as_json:
        typer.echo(json.dumps(report))
    else:
        _print(g, report)
    if check["checked"] and not check["passed"]:
        raise typer.Exit(1)


def _check(g, model, seed: int) -> dict:
    """The imported graph against onnxruntime's run of the model, where onnxruntime is installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"checked": False, "passed": None,
                "detail": "onnxruntime is not installed (pip install -e '.[peers]'): the import is not "
                          "checked"}
    from tandem import graph as tg

    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in g.inputs.items()}
    source = model.SerializeToString() if not isinstance(model, Path | str) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    options = [o.name for o in session.get_outputs()]
    want = session.run([g.output] if g.output in options else None, inputs)[0]
    got = tg.run_reference(g, inputs)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    scale = float(np.max(np.abs(want))) or 1.0
    passed = got.shape == want.shape and err <= FP32_TOLERANCE * scale
    return {"checked": True, "passed": passed, "max_abs_err": err, "relative": err / scale,
            "detail": f"{'matches' if passed else 'differs from'} onnxruntime: max |err| {err:.3g} "
                      f"({err / scale:.2g} of the largest output; tolerance {FP32_TOLERANCE:g})"}


def _int8(g, seed: int) -> dict:
    """The graph quantized with VTA's rule (calibrated on seed's inputs), against float32 on another input."""
    from tandem import quantize

    q = quantize.quantize(g, seed)
    return {"rule": "per-tensor power-of-two exponents, calibrated on 4 seeded inputs",
            **quantize.check_against_float(q, seed + 1)}


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
    if "int8" in report:
        q = report["int8"]
        agree = "agrees" if q["top1_agrees"] else "differs"
        console.print(f"int8 ({q['rule']}): relative L2 error {q['relative_l2']:.3f} against float32; the "
                      f"top output {agree}", markup=False)
