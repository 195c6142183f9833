"""int8 accuracy on the models users bring: each CNN of the test corpus (tests/models/corpus: PyTorch's own
exports of torchvision's architectures, their weights filled with seeded values at load) quantized by each of
Tandem's int8 schemes and by onnxruntime's ``quantize_static``, against the float32 network on seeded inputs.

Per model and scheme: the mean (and largest) relative L2 error of the output against float32 over ``--inputs``
seeded standard-normal inputs (seeds 100, 101, ...), and on how many of them the top class agrees; per model
the median gap between the float output's top two values (``top_two_gap``, in units of the output's root mean
square), which says how far an error can go before the top class flips. Every scheme is calibrated on the same
``--samples`` seeded inputs (seeds 0, 1, ...; not the evaluated ones). The schemes:

- ``pow2-max``, ``pow2-mse``: per-tensor power-of-two exponents (tandem/network/quantize.py, VTA's rule, the
  one every target runs), calibrated by max or mse (tandem/network/calibrate.py);
- ``affine``, ``affine-per-channel``: onnxruntime's ``quantize_static`` rule as Tandem writes it
  (tandem/network/qdq_write.py: uint8 activations by their min/max, int8 weights with a float scale per
  tensor or per output channel), computed by Tandem's integer graph (tandem/network/qdq.py; the CPU and
  DianNao run it); ``affine-per-channel-mse`` the same with each activation's range calibrated by least
  squared error (tandem/network/calibrate.py's ``affine_ranges``), and ``-bc`` with each conv's and GEMM's
  bias corrected for its weights' rounding (tandem/network/bias_correction.py);
- ``ort``, ``ort-per-channel``: onnxruntime's own ``quantize_static`` (QDQ, QUInt8 activations, QInt8
  weights, MinMax) of the same model on the same calibration inputs, run by onnxruntime (on a CPU without
  VNNI its u8 x s8 kernels saturate pair sums at int16, which its figures then include);
- ``int8-weights``, ``int8-weights-bc``: not schemes but bounds: the float32 network with only its weights
  rounded to int8 (a float scale per output channel), every activation in float, its biases as they are or
  corrected for the rounding (``-bc``). A scheme that rounds weights so carries this error before it
  quantizes a single activation; where the bound already misses the top class, so does such a scheme.

Writes ``<out>/int8_accuracy.csv`` (one row per model and scheme), ``<out>/summary.json`` and
``<out>/int8_accuracy.png`` (the errors by model and scheme, the budget of tandem/cli/model.py drawn).

    python experiments/int8_accuracy.py [--models resnet18,...] [--exporter torchscript] [--inputs 10]
                                        [--samples 4] [--no-onnxruntime] [--quick] [--out DIR]
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tandem.cli.model import RELATIVE_L2_BUDGET
from tandem.network import graph as tg
from tandem.network import qdq_write
from tandem.network.bias_correction import correct_biases
from tandem.network.graph import Graph
from tandem.network.quantize import quantize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))
import corpus  # noqa: E402

CNNS = tuple(name for name in corpus.ARCHITECTURES if not name.startswith("vit"))
TANDEM = ("pow2-max", "pow2-mse", "affine", "affine-per-channel", "affine-per-channel-mse",
          "affine-per-channel-mse-bc")
PEER = ("ort", "ort-per-channel")
BOUNDS = ("int8-weights", "int8-weights-bc")
EVALUATED_SEED = 100
#: an output function: float input dict -> the network's dequantized output
Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


def seeded_inputs(graph: Graph, first_seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """``count`` standard-normal input dicts, one per seed from ``first_seed``."""
    return [tg.random_inputs(graph, np.random.default_rng(first_seed + i)) for i in range(count)]


def tandem_runner(graph: Graph, scheme: str, calibration: list[dict[str, np.ndarray]]) -> Runner:
    """The graph quantized by one of Tandem's schemes: its integer graph's output, dequantized."""
    if scheme.startswith("pow2"):
        q = quantize(graph, calibration=scheme.removeprefix("pow2-"), inputs=calibration)
    else:
        q = qdq_write.quantize(graph, per_channel="per-channel" in scheme, inputs=calibration,
                               calibration="mse" if "-mse" in scheme else "max",
                               bias_correction=scheme.endswith("-bc"))
    return lambda x: q.dequantize(q.graph.output, q.run_integer(x)[q.graph.output])


def onnxruntime_runner(model, per_channel: bool, calibration: list[dict[str, np.ndarray]]) -> Runner:
    """onnxruntime's quantize_static of ``model`` (QDQ, uint8 activations, int8 weights, MinMax) on the
    calibration inputs, run by onnxruntime."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = list(calibration)

        def get_next(self):
            return self.left.pop(0) if self.left else None

    logging.getLogger().setLevel(logging.ERROR)   # its advice to pre-process, its per-bias warnings
    with tempfile.TemporaryDirectory() as tmp:
        source, quantized = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        source.write_bytes(model.SerializeToString())
        quantize_static(str(source), str(quantized), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=per_channel)
        options = ort.SessionOptions()
        options.log_severity_level = 3   # not its notes on initializers the quantizer left unused
        session = ort.InferenceSession(quantized.read_bytes(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, x)[0].astype(np.float64)


def int8_weights_runner(graph: Graph) -> Runner:
    """The float network with each Conv's, Gemm's and MatMul's weights rounded to int8 (a float scale per
    output channel for a Conv or a transposed Gemm, per tensor otherwise), all else float32."""
    layers = []
    for layer in graph.layers:
        if layer.op in qdq_write.CONTRACTIONS and 1 in layer.weights:
            rounded = qdq_write.rounded_weights(layer, per_channel=True).astype(layer.weights[1].dtype)
            layer = dataclasses.replace(layer, weights={**layer.weights, 1: rounded})
        layers.append(layer)
    rounded_graph = dataclasses.replace(graph, layers=tuple(layers))
    return lambda x: tg.tensors(rounded_graph, x)[graph.output].astype(np.float64)


def measure(name: str, exporter: str, inputs: int, samples: int, schemes: tuple[str, ...]) -> list[dict]:
    """One row per scheme of ``name``: its error against float32 over the evaluated inputs."""
    model = corpus.load(name, exporter)
    graph = tg.load(model)
    calibration = seeded_inputs(graph, 0, samples)
    evaluated = seeded_inputs(graph, EVALUATED_SEED, inputs)
    wants = [tg.tensors(graph, x)[graph.output].astype(np.float64) for x in evaluated]
    gap = float(np.median([top_two_gap(want) for want in wants]))
    rows = []
    for scheme in schemes:
        row = {"model": name, "exporter": exporter, "scheme": scheme, "top_two_gap": gap,
               "relative_l2": float("nan"),
               "worst_relative_l2": float("nan"), "top1_agree": 0, "inputs": inputs, "within": False,
               "error": ""}
        try:
            run = runner(scheme, model, graph, calibration)
            errors, agree = [], 0
            for x, want in zip(evaluated, wants, strict=True):
                got = np.asarray(run(x), np.float64).reshape(want.shape)
                errors.append(float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)))
                agree += int(np.argmax(got) == np.argmax(want))
        except Exception as exc:   # a scheme that cannot quantize the model (Tandem's or onnxruntime's)
            rows.append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        rows.append({**row, "relative_l2": float(np.mean(errors)), "worst_relative_l2": float(np.max(errors)),
                     "top1_agree": agree,
                     "within": bool(np.mean(errors) <= RELATIVE_L2_BUDGET and agree >= 0.9 * inputs)})
    return rows


def top_two_gap(want: np.ndarray) -> float:
    """How far the float output's top value leads the next, in units of the output's root mean square: an
    int8 output whose relative L2 error is r moves a value by about r of it, so below ~2r the top class
    can flip (with seeded weights the classes stand close: a median of 0.1-0.3)."""
    values = np.sort(np.asarray(want, np.float64).ravel())
    return float((values[-1] - values[-2]) / max(np.sqrt(np.mean(values**2)), 1e-30))


def runner(scheme: str, model, graph: Graph, calibration: list[dict[str, np.ndarray]]) -> Runner:
    """The output function of ``scheme`` for the model (its ModelProto and its imported graph)."""
    if scheme in TANDEM:
        return tandem_runner(graph, scheme, calibration)
    if scheme in PEER:
        return onnxruntime_runner(model, scheme == "ort-per-channel", calibration)
    if scheme == "int8-weights-bc":
        graph = correct_biases(graph, calibration, lambda layer: qdq_write.rounded_weights(layer, True))
    return int8_weights_runner(graph)


def plot(rows: list[dict], path: Path) -> None:
    """Grouped bars: each model's error by scheme, the int8 budget as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    width = 0.8 / len(schemes)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.3 * len(models)), 4.8))
    for i, scheme in enumerate(schemes):
        values = [next((r["relative_l2"] for r in rows if r["model"] == m and r["scheme"] == scheme), np.nan)
                  for m in models]
        ax.bar(np.arange(len(models)) + (i - (len(schemes) - 1) / 2) * width, values, width, label=scheme)
    ax.axhline(RELATIVE_L2_BUDGET, color="black", linestyle="--", linewidth=1,
               label=f"budget {RELATIVE_L2_BUDGET}")
    ax.set_xticks(np.arange(len(models)), models, rotation=20, ha="right")
    ax.set_ylabel("relative L2 error vs float32 (mean)")
    ax.set_title("int8 accuracy on PyTorch's exports (seeded weights)")
    ax.legend(fontsize=8, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(
    models: Annotated[str, typer.Option(help="Comma-separated corpus CNNs.")] = ",".join(CNNS),
    exporter: Annotated[str, typer.Option(help="torchscript or dynamo: which export of each model.")]
    = "torchscript",
    inputs: Annotated[int, typer.Option(min=1, help="Evaluated seeded inputs per model.")] = 10,
    samples: Annotated[int, typer.Option(min=1, help="Calibration inputs (the same for every scheme).")] = 4,
    onnxruntime: Annotated[bool, typer.Option(help="Measure onnxruntime's quantize_static too.")] = True,
    quick: Annotated[bool, typer.Option(help="squeezenet1_0 only, 2 inputs, 2 samples: seconds.")] = False,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("experiments/out/int8_accuracy"),
) -> None:
    console = Console(width=200)
    names = ["squeezenet1_0"] if quick else [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in names if m not in CNNS]
    if unknown or exporter not in corpus.EXPORTERS:
        what = f"model {unknown[0]!r}" if unknown else f"exporter {exporter!r}"
        Console(stderr=True).print(f"{what}: expected one of "
                                   f"{', '.join(CNNS if unknown else corpus.EXPORTERS)}", markup=False)
        raise typer.Exit(2)
    if quick:
        inputs, samples = 2, 2
    out.mkdir(parents=True, exist_ok=True)
    schemes = (*TANDEM, *(PEER if onnxruntime else ()), *BOUNDS)
    rows: list[dict] = []
    for name in names:
        console.print(f"{name} ({exporter}): {len(schemes)} schemes on {inputs} inputs ...", markup=False)
        rows += measure(name, exporter, inputs, samples, schemes)
    with open(out / "int8_accuracy.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = {f"{r['model']}/{r['scheme']}": {k: r[k] for k in ("relative_l2", "top1_agree", "within")}
               for r in rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(rows, out / "int8_accuracy.png")
    table = Table(title=f"int8 vs float32: mean relative L2 error, top-1 agreements of {inputs}")
    table.add_column("model")
    table.add_column("top-2 gap", justify="right")
    for scheme in schemes:
        table.add_column(scheme, justify="right")
    for name in names:
        cells = {r["scheme"]: "error" if r["error"] else f"{r['relative_l2']:.3f}, {r['top1_agree']}"
                 for r in rows if r["model"] == name}
        gap = next(r["top_two_gap"] for r in rows if r["model"] == name)
        table.add_row(name, f"{gap:.2f}", *(cells[s] for s in schemes))
    console.print(table)
    for r in (r for r in rows if r["error"]):
        console.print(f"{r['model']} / {r['scheme']}: {r['error']}", markup=False)
    console.print(f"wrote {out / 'int8_accuracy.csv'}, summary.json, int8_accuracy.png", markup=False)


if __name__ == "__main__":
    typer.run(main)
