"""Export the corpus of PyTorch architectures (tests/models/corpus/) with both of PyTorch's ONNX exporters,
their weights stripped: the graphs users bring, small enough to commit, and loaded in CI without PyTorch
(tests/models/corpus.py fills the weights with seeded values).

    python tests/models/export_corpus.py [--out DIR] [NAME ...]     # needs the `models` extra (torch)

Each architecture is exported at opset 18 by the TorchScript exporter (``dynamo=False``) and by the dynamo
exporter (``dynamo=True``), in eval mode, batch 1, from torchvision's random initialisation; those of
``BATCHED`` also with a symbolic batch axis (``NAME.EXPORTER.batch.onnx``).
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import ARCHITECTURES, BATCHED, TRANSFORMERS, strip  # noqa: E402


def build(name: str, batch: int = 1):
    """The torchvision architecture ``name`` (or one of the transformer blocks of tests/models/blocks.py) in
    eval mode, and an example input of ``batch``."""
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)   # attention as its operators, which both exporters write
    if name in TRANSFORMERS:
        import blocks

        return blocks.build(name, batch)
    model = getattr(torchvision.models, name)(weights=None).eval()
    size = 224 if name.startswith("vit") else 64
    return model, (torch.randn(batch, 3, size, size),)


def export(name: str, exporter: str, batch: bool = False):
    """The ONNX model of ``name`` as ``exporter`` ("torchscript" or "dynamo") writes it; with ``batch``,
    every input's first axis symbolic (the exporter's dynamic axes), so that it imports at any batch."""
    import onnx
    import torch

    model, args = build(name, 2 if batch else 1)   # an example batch of 1 would be specialized to 1
    names = [f"input_{i}" if len(args) > 1 else "input" for i in range(len(args))]
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims = tuple({0: torch.export.Dim("batch", min=1, max=64)} for _ in args) if batch else None
            program = torch.onnx.export(model, args, dynamo=True, opset_version=18, external_data=False,
                                        input_names=names, dynamic_shapes=dims)
            proto = program.model_proto
        else:
            axes = {n: {0: "batch"} for n in names} if batch else None
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=18, input_names=names,
                              dynamic_axes=axes)
            proto = onnx.load_from_string(buffer.getvalue())
    return proto


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=[*ARCHITECTURES, *TRANSFORMERS])
    parser.add_argument("--out", type=Path, default=HERE / "corpus")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, batch in [(n, False) for n in args.names] + [(n, True) for n in args.names if n in BATCHED]:
        for exporter in ("torchscript", "dynamo"):
            path = args.out / f"{name}.{exporter}{'.batch' if batch else ''}.onnx"
            try:
                proto = export(name, exporter, batch)
            except Exception as exc:   # noqa: BLE001 (an exporter's failure is reported, the rest go on)
                print(f"{path.name}: the exporter failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            path.write_bytes(strip(proto).SerializeToString())
            print(f"{path.name}: {len(proto.graph.node)} nodes, {path.stat().st_size // 1024} KiB stripped")


if __name__ == "__main__":
    main()
