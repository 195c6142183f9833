"""Whole networks: ONNX import (graph.py), the builtin models (models.py), int8 quantization in two schemes,
one type each behind one interface (quantized.py; quantize.py: power-of-two exponents; qdq.py: a quantized
ONNX model's affine scales; qdq_write.py writes one), a network loaded for a run (load.py), the steps a
network runs in (steps.py), where each step runs on a target (place.py) and the run that checks every step
against the integer graph (run.py)."""
