"""A whole inference on this CPU, timed end to end (tandem/network/inference.py, issue 48): the kernels
compiled once, then every step's host work and kernel calls, as a user times onnxruntime's session.run."""

from __future__ import annotations

import numpy as np
import pytest

import tandem.network.run as network_run
from compiler.ops import cpu as cpu_ops
from tandem.flows.cpu import same_memory
from tandem.flows.run import prepare
from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import models, qdq, qdq_write, quantize
from tandem.network.inference import MIN_RUNS, Tensors, prepare_inference
from tandem.network.place import place
from tandem.network.run import run_network
from tandem.network.steps import steps


def _qdq(name: str = "resnet18", size: int = 16):
    return qdq.load(qdq_write.write(tg.load(models.build(name), {"input": (1, 3, size, size)})))


def _inputs(q, seed: int = 3) -> dict[str, np.ndarray]:
    return tg.random_inputs(q.graph, np.random.default_rng(seed))


def test_a_cpu_run_times_one_whole_inference_which_gives_the_checked_output():
    q = _qdq()
    report = run_network(q, load_target("cpu"), _inputs(q), options={"min_time": 0.001})
    assert report.validated and report.inference_validated is True
    assert report.inference_runs >= MIN_RUNS and report.inference_s > 0
    totals = report.totals()
    assert totals["inference_s"] == round(report.inference_s, 6)
    # the steps placed again on every inference, each with why: none of its convs
    assert not {r.step for r in report.rows if r.op.startswith("Conv")} & set(report.inference_placed)
    assert "gemm_171" not in report.inference_placed   # the classifier: a GEMM by constant weights


def _compiled(q, monkeypatch):
    """The plan and compiled kernels of a checked CPU run of ``q`` (what ``time_inference`` is given)."""
    captured = {}
    original = network_run.time_inference

    def keep(*args, **kwargs):
        captured["args"] = args
        return original(*args, **kwargs)

    monkeypatch.setattr(network_run, "time_inference", keep)
    report = run_network(q, load_target("cpu"), _inputs(q), options={"min_time": 0.001})
    assert report.validated and report.inference_validated
    _, target, plan, kernels, _ = captured["args"][:5]
    return target, plan, kernels


@pytest.mark.parametrize("graph", ["qdq", "power_of_two", "transformer", "vit"])
def test_an_inference_on_new_inputs_equals_the_integer_graph(graph, monkeypatch):
    """The compiled kernels are called again on another input: the output is the integer graph's for it
    (nothing of the first input is kept, the weights' packed layouts are)."""
    q = _qdq("mobilenet_v2") if graph == "qdq" else quantize.quantize(
        tg.load(models.build("resnet18"), {"input": (1, 3, 16, 16)}) if graph == "power_of_two"
        else tg.load(models.build("vit_block" if graph == "vit" else "bert_encoder")), samples=1)
    target, plan, kernels = _compiled(q, monkeypatch)
    other = _inputs(q, seed=9)
    inference = prepare_inference(q, target, plan, kernels, _inputs(q))
    packed_by_numpy = []
    numpy_pack = cpu_ops.pack_columns
    monkeypatch.setattr(cpu_ops, "pack_columns", lambda *a: packed_by_numpy.append(a) or numpy_pack(*a))
    moved_by_numpy = []
    numpy_move = cpu_ops.moved
    monkeypatch.setattr(cpu_ops, "moved", lambda *a: moved_by_numpy.append(a) or numpy_move(*a))
    got, real = inference(other)
    if graph == "power_of_two":   # its adds and its pool read blocked outputs of another integer type
        assert {reason for step, reason in zip(plan, inference.general, strict=True)
                if step.op.startswith(("Add", "GlobalAveragePool"))} == {None}
    if graph in ("transformer", "vit"):   # its projections and MLP: GEMMs by constant weights, run without
        # placing;
        gemms = [reason for step, reason in zip(plan, inference.general, strict=True)
                 if step.op == "MatMul" and step.name in q.weights]
        assert len(gemms) == 6 and set(gemms) == {None}
        # its attention's MatMuls of two activations: one kernel for the 12 heads, run without placing (ViT's
        # 197 tokens: K and N padded to the kernel's blocks)
        heads = [reason for step, reason in zip(plan, inference.general, strict=True)
                 if step.op == "MatMul" and step.name not in q.weights]
        assert len(heads) == 2 and set(heads) == {None}
        # ... whose second operands, strided views of the projections' outputs, kernels pack and sum
        # (``host_kernels.column_packer``): numpy packs none; BERT's data, the queries' transposed view
        # included, kernels move (ViT's 197 tokens do not fill the kernel's groups of 4: numpy pads them)
        assert not packed_by_numpy and (graph == "vit" or not moved_by_numpy)
        # its softmax and layer norms: the integer graph's, one kernel over the rows each; its GELU and its
        # Mul by 1/sqrt(d): their tables looked up by a kernel; its residual adds: on their int8 inputs
        assert {reason for step, reason in zip(plan, inference.general, strict=True)
                if step.op in ("Softmax", "LayerNormalization", "Gelu", "Mul", "Add")} == {None}
        # the heads' transposes: views of their inputs, no copy (the MatMuls' packing reads them so)
        assert {reason for step, reason in zip(plan, inference.general, strict=True)
                if step.op == "Transpose"} == {"it runs on the host: a view of its input"}
        # its Mul by 1/sqrt(64) = 2^-3, whose output exponent is its input's plus 3, maps every int8 to
        # itself: its step hands on its input's array (no lookup, no copy)
        (k, mul), = [(k, step) for k, step in enumerate(plan) if step.op == "Mul"]
        np.testing.assert_array_equal(q.tables[mul.name], np.arange(-128, 128))
        scores = np.arange(24, dtype=np.int8)
        tensors = Tensors({mul.inputs[0]: scores})
        inference.runners[k](tensors)
        assert tensors.plain[mul.output] is scores
        # the float input: quantized by a kernel in the graph's layout (no stem conv to do it)
        assert set(inference.quantizers) == {"input"} and not inference.quantized_by_runner
    want = q.run_integer(other)[q.graph.output]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(real, q.dequantize(q.graph.output, want))
    assert plan == steps(q)
    if graph in ("qdq", "power_of_two"):
        _the_float_input_is_quantized_by_one_kernel(q, inference, monkeypatch)


def _the_float_input_is_quantized_by_one_kernel(q, inference, monkeypatch):
    """A CNN's float input is quantized by one kernel (compiler.ops.network.quantize_blocked) straight into
    the inside of its stem's padded data (the stem's runner does it; a transformer's in the graph's layout,
    above), not by ``quantize_input`` on the host. The output on an input that probes the quantization's
    rules (a nan, infinities, values past the clamps) is the integer graph's, which quantizes by
    ``quantize_input``; an input the kernel does not take (float64) is quantized on the host, as the
    integer graph does."""
    assert inference.quantized_by_runner == {"input"} and not inference.quantizers
    doubles = {name: x.astype(np.float64) for name, x in _inputs(q, seed=16).items()}
    np.testing.assert_array_equal(inference(doubles)[0], q.run_integer(doubles)[q.graph.output])
    other = _inputs(q, seed=15)
    other["input"].reshape(-1)[:4] = [np.nan, np.inf, -np.inf, 1e30]
    want = q.run_integer(other)[q.graph.output]
    monkeypatch.setattr(type(q), "quantize_input", lambda *a: pytest.fail("the input quantized on the host"))
    np.testing.assert_array_equal(inference(other)[0], want)


def test_convs_and_adds_hand_their_blocked_outputs_to_the_next_kernel(monkeypatch):
    """In a QDQ ResNet-18 every conv runs without a placement, on its kept padded buffer, the max pool on the
    stem's blocked output, and every add on its two inputs blocked alike; the output on a new input is the
    integer graph's."""
    q = _qdq(size=32)
    target, plan, kernels = _compiled(q, monkeypatch)
    inference = prepare_inference(q, target, plan, kernels, _inputs(q))
    why = dict(zip((step.op for step in plan), inference.general, strict=True))
    kinds = {(step.op, reason) for step, reason in zip(plan, inference.general, strict=True)}
    assert {reason for op, reason in kinds if op in ("Conv", "Add", "MaxPool")} == {None}
    assert why["Flatten"] == "it runs on the host: a view of its input"
    other = _inputs(q, seed=11)
    np.testing.assert_array_equal(inference(other)[0], q.run_integer(other)[q.graph.output])


def test_depthwise_convs_run_on_the_blocked_arrays_and_are_written_into_by_the_convs_before(monkeypatch):
    """MobileNet V2's depthwise convs (their requantization by a scale per channel fused) take the 1 x 1
    convs' blocked outputs as they are and hand theirs on: no conv, add or pool of it is placed again; its
    expanding 1 x 1 convs write straight into the inside of their depthwise convs' padded data
    (compiler.passes.place_output): an inference copies no conv's output into a padded buffer, and its
    output on a new input is the integer graph's."""
    q = _qdq("mobilenet_v2", size=32)
    target, plan, kernels = _compiled(q, monkeypatch)
    inference = prepare_inference(q, target, plan, kernels, _inputs(q))
    convs = [reason for step, reason in zip(plan, inference.general, strict=True) if step.op == "Conv"]
    assert len(convs) > 17 and set(convs) == {None}
    # its adds of 24 channels (blocks of 16 lanes, 8 past the channels) and its global average pool too
    assert {reason for step, reason in zip(plan, inference.general, strict=True)
            if step.op in ("Add", "GlobalAveragePool")} == {None}
    copies, reblock = [], cpu_ops.reblock

    def counted(src, dst, offset=0):
        copies.append(dst.shape)
        reblock(src, dst, offset)
    monkeypatch.setattr(cpu_ops, "reblock", counted)
    other = _inputs(q, seed=14)
    got = inference(other)[0]
    padded = [shape for shape in copies if shape[-1] == 16]   # the depthwise convs' data: 16 lanes
    assert copies and not padded   # (the 24-channel convs' data still regroups blocks of 16 into 4s)
    monkeypatch.undo()
    np.testing.assert_array_equal(got, q.run_integer(other)[q.graph.output])


def test_a_runner_that_disagrees_with_its_placement_is_not_used(monkeypatch):
    """Each step's own runner is checked against its placement when the inference is prepared: a wrong one
    (here: every regrouped input off by one) leaves the step placed on every inference, the output right."""
    q = _qdq(size=32)
    target, plan, kernels = _compiled(q, monkeypatch)

    def wrong(src, dst, offset=0):
        cpu_ops.to_blocks(dst, cpu_ops.unpack_window(src, src.shape[1] * src.shape[-1]) + offset + 1,
                          dst.shape[-1])
    monkeypatch.setattr(cpu_ops, "reblock", wrong)
    inference = prepare_inference(q, target, plan, kernels, _inputs(q))
    assert "its own runner's output differed from its placement's" in inference.general
    other = _inputs(q, seed=12)
    np.testing.assert_array_equal(inference(other)[0], q.run_integer(other)[q.graph.output])


def test_a_zero_point_border_is_written_by_the_packing_not_padded_on_the_host():
    """A QDQ conv's uint8 input has a zero point: the kernel's packing pads with it (``pad_value``), the
    step hands the kernel the unpadded input."""
    q = _qdq()
    values = q.run_integer(_inputs(q))
    step = steps(q)[0]   # the stem: a 7 x 7 conv padded by 3 of the image, whose zero point is not 0
    zero = q.affine[step.inputs[0]].zero_point
    assert step.op == "Conv" and zero != 0
    (part,) = place(step, q, values, load_target("cpu")).parts
    assert part.params["P"] == 3 and part.params["pad_value"] == zero
    assert part.inputs[0].shape == values[step.inputs[0]].shape


def test_a_simulated_target_has_cycles_not_an_inference_time():
    q = _qdq()
    report = run_network(q, load_target("diannao"), _inputs(q))
    assert report.inference_s is None and report.totals()["inference_s"] is None


def test_the_weights_are_packed_again_when_other_weights_come():
    """A kernel keeps its weights' packed layout only for the same memory: other weights (another array, or
    another view) are packed again, so a kernel shared by two layers never runs on the other's weights."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (8, 32)).astype(np.uint8)
    w1, w2 = (rng.integers(-128, 128, (16, 32)).astype(np.int8) for _ in range(2))
    kernel = prepare("gemm", load_target("cpu"), {"M": 8, "N": 16, "K": 32, "threads": 1},
                     inputs=[a, w1])
    for w in (w1, w2, w1[:, :], w2.copy()):
        np.testing.assert_array_equal(kernel.output([a, w]), a.astype(np.int64) @ w.T.astype(np.int64))


@pytest.mark.parametrize(("view", "same"), [
    (lambda w: w, True), (lambda w: w[:, :], True), (lambda w: w.T.T, True),
    (lambda w: w.copy(), False), (lambda w: w[:, 1:], False), (lambda w: w.T, False),
    (lambda w: w.view(np.uint8), False)])
def test_same_memory_is_the_same_elements_at_the_same_address(view, same):
    w = np.arange(12, dtype=np.int8).reshape(3, 4)
    assert same_memory(w, view(w)) is same


def test_a_gather_by_one_constant_index_is_a_view_of_its_input(monkeypatch):
    """PyTorch's export of attention splits its packed query, key and value projection with a Gather by a
    constant index: on the host, a view of its input (no copy, the same array each inference, which the
    next kernel stays bound to); the output on a new input is the integer graph's."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 48)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([8, 3, 16], np.int64), "shape"),
             numpy_helper.from_array(np.array(1, np.int64), "k"),
             numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["input", "w"], ["qkv"]),
             helper.make_node("Reshape", ["qkv", "shape"], ["split"]),
             helper.make_node("Gather", ["split", "k"], ["key"], axis=1),
             helper.make_node("MatMul", ["key", "w2"], ["output"])]
    graph = helper.make_graph(nodes, "select",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, 16])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [8, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    q = quantize.quantize(tg.load(model), samples=1)
    target, plan, kernels = _compiled(q, monkeypatch)
    inference = prepare_inference(q, target, plan, kernels, _inputs(q))
    assert {reason for step, reason in zip(plan, inference.general, strict=True) if step.op == "Gather"} == \
        {"it runs on the host: a view of its input"}
    other = _inputs(q, seed=21)
    np.testing.assert_array_equal(inference(other)[0], q.run_integer(other)[q.graph.output])
