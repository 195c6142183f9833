"""Whole networks: ONNX import (graph.py), the builtin models (models.py), int8 quantization in two schemes
(quantize.py: power-of-two exponents; qdq.py: a quantized ONNX model's affine scales), the steps a network
runs in (steps.py), where each step runs on a target (place.py) and the run that checks every step against
the integer reference (run.py)."""
