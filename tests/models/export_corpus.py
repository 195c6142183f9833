"""Export the corpus of PyTorch architectures (tests/models/corpus/) with both of PyTorch's ONNX exporters,
their weights stripped: the graphs users bring, small enough to commit, and loaded in CI without PyTorch
(tests/models/corpus.py fills the weights with seeded values).

    python tests/models/export_corpus.py [--out DIR] [NAME ...]     # needs the `models` extra (torch)

Each architecture is exported at opset 18 by the TorchScript exporter (``dynamo=False``) and by the dynamo
exporter (``dynamo=True``), in eval mode, batch 1, from torchvision's random initialisation.
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import ARCHITECTURES, TRANSFORMERS, strip  # noqa: E402


def build(name: str):
    """The torchvision architecture ``name`` (or one of the transformer blocks of tests/models/blocks.py) in
    eval mode, and an example input."""
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)   # attention as its operators, which both exporters write
    if name in TRANSFORMERS:
        import blocks

        return blocks.build(name)
    model = getattr(torchvision.models, name)(weights=None).eval()
    size = 224 if name.startswith("vit") else 64
    return model, (torch.randn(1, 3, size, size),)


def export(name: str, exporter: str):
    """The ONNX model of ``name`` as ``exporter`` ("torchscript" or "dynamo") writes it."""
    import onnx
    import torch

    model, args = build(name)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(model, args, dynamo=True, opset_version=18, external_data=False)
            proto = program.model_proto
        else:
            torch.onnx.export(model, args, buffer, dynamo=False, opset_version=18)
            proto = onnx.load_from_string(buffer.getvalue())
    return proto


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=[*ARCHITECTURES, *TRANSFORMERS])
    parser.add_argument("--out", type=Path, default=HERE / "corpus")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        for exporter in ("torchscript", "dynamo"):
            path = args.out / f"{name}.{exporter}.onnx"
            try:
                proto = export(name, exporter)
            except Exception as exc:   # noqa: BLE001 (an exporter's failure is reported, the rest go on)
                print(f"{path.name}: the exporter failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            path.write_bytes(strip(proto).SerializeToString())
            print(f"{path.name}: {len(proto.graph.node)} nodes, {path.stat().st_size // 1024} KiB stripped")


if __name__ == "__main__":
    main()
