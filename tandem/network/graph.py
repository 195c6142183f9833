"""A network as Tandem sees it: an ONNX model's nodes as layers in order, with every shape known, constant
subgraphs evaluated and each batch norm that follows a convolution folded into it.

    graph = load("model.onnx", {"input": (1, 3, 224, 224)})   # or
    load(tandem.network.models.build("resnet18"))
    for layer in graph.layers: ...              # op, operands, output, attrs, weights, shape, macs
    y = run_reference(graph, {"input": x})                    # numpy, float64 inside, float32 out

Import steps: parse with ``onnx`` (anything else is a ``GraphError`` naming the file); give each graph input
its shape (``input_shapes``, else the model's own, which must be static: a symbolic dimension names the input
and asks for ``--input-shape``); infer every tensor's shape and type (``onnx.shape_inference``, with its
data propagation: a shape computed from Shape nodes, as exporters write ``x.view(x.size(0), -1)``, is
known); check each node against tandem/network/operators' table (an operator, attribute or output it does
not implement is refused by name, never ignored); pass each Identity's input on; evaluate nodes whose inputs
are all constants (a Reshape's target shape) and those that depend on shapes alone (Shape); fold
``BatchNormalization`` into the ``Conv`` it follows when the conv's output feeds nothing else:
``W' = W * g``, ``B' = (B - mean) * g + beta`` with ``g = gamma / sqrt(var + eps)`` per output channel (exact
in real arithmetic; the folded float32 weights differ from the unfolded graph's by rounding); fold each Add
of a constant vector into the MatMul by constant weights it follows, as that layer's bias (a dense layer as
transformer exporters write it).

``tensors`` computes every layer with the operators' functions (compiler/ops/reference.py's arithmetic, exact)
and rounds each result to the type ONNX declares for it; a result whose shape is not the declared one is a
``GraphError`` naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tandem.flows.flow import RunError
from tandem.network.operators import OPERATORS, Node, OperatorError, compute


class GraphError(RunError):
    """A model Tandem cannot import: not ONNX, an unsupported operator or attribute (named with its node),
    a shape left unknown, a computed shape other than the model declares."""


class DynamicInputError(GraphError):
    """A graph input whose shape is symbolic and not given (``input_shapes``, ``--input-shape``)."""


class DataDependentShapeError(GraphError):
    """A tensor whose shape depends on the values of the graph's inputs (ONNX inference declares none):
    Tandem imports a graph whose every shape is known from its input shapes."""


@dataclass(frozen=True)
class Layer:
    """One node of the imported graph: ``operands`` its ONNX inputs in order ("" for an omitted optional
    one), ``weights`` the constant ones by position, ``inputs`` the activations it reads (graph inputs or
    earlier layers' outputs), ``outputs`` its ONNX outputs ("" for an omitted one) with the ``shapes`` and
    ``dtypes`` (numpy names) ONNX inference declares for them, ``opset`` the default domain's version the
    model was written for."""

    name: str
    op: str
    operands: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    weights: dict[int, np.ndarray]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...] = ("float32",)
    opset: int = 18
    macs: int = 0

    @property
    def output(self) -> str:
        return self.outputs[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.shapes[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(n for i, n in enumerate(self.operands) if n and i not in self.weights)

    def operand(self, position: int, values: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The node's input at ``position``: its weight there, the activation it reads, or None (omitted)."""
        if position in self.weights:
            return self.weights[position]
        if position >= len(self.operands) or not self.operands[position]:
            return None
        return values[self.operands[position]]


@dataclass(frozen=True)
class Graph:
    """The imported network: its inputs' shapes (and ``input_types``, numpy names), its layers in order,
    its ``outputs`` (``output`` the first; ``constants`` holds those that fold to constants)."""

    name: str
    inputs: dict[str, tuple[int, ...]]
    layers: tuple[Layer, ...]
    outputs: tuple[str, ...]
    folded: tuple[str, ...] = field(default=())   # the batch norms folded into their convs
    biases: tuple[str, ...] = field(default=())   # the bias Adds folded into their MatMuls
    input_types: dict[str, str] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def output(self) -> str:
        return self.outputs[0]

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)


def read(model: Any) -> tuple[Any, str]:
    """``model`` (a path to an .onnx file, or an ``onnx.ModelProto``) as a ModelProto, and how errors name
    it."""
    import onnx

    if not isinstance(model, str | Path):
        return model, "the model"
    path = Path(model)
    if not path.is_file():
        raise GraphError(f"{path}: no such model file")
    try:
        return onnx.load(str(path)), str(path)
    except Exception as exc:   # protobuf's DecodeError and friends: the file is not a model
        raise GraphError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from None


def load(model: Any, input_shapes: Mapping[str, tuple[int, ...]] | None = None, fold: bool = True,
         where: str | None = None) -> Graph:
    """Import ``model`` (a path to an .onnx file, or an ``onnx.ModelProto``); ``input_shapes`` gives graph
    inputs their shapes (required for symbolic dimensions). ``fold=False`` keeps batch norms and bias Adds
    as layers of their own (a quantized model requantizes between them); ``where`` names the model in
    errors."""
    model, named = read(model)
    where = where or named
    graph = model.graph
    if not graph.node:
        raise GraphError(f"{where}: the graph has no nodes (is it an ONNX model?)")
    opset = opset_of(model, where)
    consts = {t.name: tensor_array(t, f"{where}: initializer {t.name}") for t in graph.initializer}
    check_nodes(graph, opset, where)
    shapes = _input_shapes(graph, consts, dict(input_shapes or {}), where)
    _check_inputs(graph, consts, shapes, where)
    resized = False
    for name, shape in shapes.items():
        dim = graph.input[[i.name for i in graph.input].index(name)].type.tensor_type.shape
        resized |= [d.dim_value if d.HasField("dim_value") else None for d in dim.dim] != list(shape)
        del dim.dim[:]
        for d in shape:
            dim.dim.add().dim_value = d
    if resized:   # the shapes the model declares for other input shapes do not hold: inferred afresh
        for value in (*graph.value_info, *graph.output):
            if value.name not in consts:   # an initializer's shape is its own
                value.type.tensor_type.ClearField("shape")
    types = _declared(_infer(model, {}, where), shapes)
    alias: dict[str, str] = {}       # an Identity's output -> the tensor it passes on
    layers: list[Layer] = []
    evaluated: list[str] = []        # the constants evaluated here (a Shape's, what follows from it)
    fresh = False                    # whether some were evaluated since shapes were last inferred
    for index, node in enumerate(graph.node):
        label = f"{where}: node {node_name(node, index)} ({node.op_type})"
        try:
            layer = _layer(node, alias, consts, shapes, types, opset, label)
        except DataDependentShapeError:
            if not fresh:
                raise
            # shapes computed from constants evaluated here (a Shape's): inferred again, knowing them
            types.update(_declared(_infer(model, {n: consts[n] for n in evaluated}, where), shapes))
            fresh = False
            layer = _layer(node, alias, consts, shapes, types, opset, label)
        if layer is None:
            continue
        if not layer.inputs or OPERATORS[layer.op].static:   # constants, or a function of shapes: now
            known = {n: np.broadcast_to(np.zeros((), types.get(n, "float32")), shapes[n])
                     for n in layer.inputs}
            for name, value in zip(layer.outputs, _outputs(layer, known, where), strict=False):
                if name:
                    consts[name], shapes[name] = value, value.shape
                    evaluated.append(name)
                    fresh = True
            continue
        layers.append(layer)
    layers = [_with_macs(layer, shapes, consts) for layer in layers]
    folded_layers, folded, biases = layers, [], []
    if fold:
        folded_layers, folded = _fold_batch_norms(layers)
        folded_layers, biases = _fold_biases(folded_layers)
    outputs = tuple(alias.get(v.name, v.name) for v in graph.output)
    inputs = _graph_inputs(graph, consts)
    return Graph(graph.name or where, {n: shapes[n] for n in inputs}, tuple(folded_layers), outputs,
                 tuple(folded), tuple(biases), {n: types.get(n, "float32") for n in inputs},
                 {n: consts[n] for n in outputs if n in consts})


def run_reference(graph: Graph, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The graph's output for ``inputs`` (by graph input name), each layer computed exactly (float64) from
    float32 inputs and rounded to float32, as a float32 network computes it."""
    return tensors(graph, inputs)[graph.output]


def random_inputs(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal arrays for the graph's (floating-point) inputs, drawn from ``rng`` in input order."""
    out = {}
    for name, shape in graph.inputs.items():
        dtype = np.dtype(graph.input_types.get(name, "float32"))
        if dtype.kind != "f":
            raise GraphError(f"{graph.name}: input {name} holds {dtype} values, which Tandem cannot draw at "
                             f"random (give the inputs)")
        out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def seeded_inputs(graph: Graph, seed: int, samples: int) -> list[dict[str, np.ndarray]]:
    """``samples`` input dicts of ``random_inputs``, drawn one after another from one generator seeded with
    ``seed`` (the default calibration inputs of both int8 schemes)."""
    rng = np.random.default_rng(seed)
    return [random_inputs(graph, rng) for _ in range(samples)]


def tensors(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor ``run_reference`` computes, by name (the graph inputs too), each in the type ONNX
    declares for it; a layer whose result has another shape than the model declares is a GraphError
    naming it."""
    values: dict[str, np.ndarray] = dict(graph.constants)
    for name, shape in graph.inputs.items():
        if name not in inputs:
            raise GraphError(f"{graph.name}: no array for the graph input {name}")
        x = np.asarray(inputs[name]).astype(graph.input_types.get(name, "float32"), copy=False)
        if x.shape != shape:
            raise GraphError(f"{graph.name}: input {name}: expected shape {list(shape)}, but got "
                             f"{list(x.shape)}")
        values[name] = x
    for layer in graph.layers:
        for name, value in zip(layer.outputs, _outputs(layer, values, graph.name), strict=False):
            if name:
                values[name] = value
    return values


# ------------------------------------------------------------------------------------------ import helpers

#: the most elements a tensor of an imported graph may hold (a graph input, a computed tensor): 2**28,
#: 2 GiB as the float64 the reference computes in; sizes beyond are refused before any work
MAX_ELEMENTS = 2**28


def too_large(shape: Sequence[int]) -> bool:
    """Whether a tensor of ``shape`` holds more than MAX_ELEMENTS elements, or would if its sizes of 0 were
    1 (numpy cannot index such a shape either)."""
    return any(d > MAX_ELEMENTS for d in shape) or math.prod(shape) > MAX_ELEMENTS


def node_name(node, index: int) -> str:
    """How errors name ``node``, the ``index``-th of its graph: its name, else its first output's."""
    return node.name or next((o for o in node.output if o), f"#{index}")


def tensor_array(tensor, what: str) -> np.ndarray:
    """An ONNX TensorProto (an initializer, a Constant's value) as a numpy array; data that does not fit its
    dims or type is a GraphError naming it (``what``)."""
    from onnx import TensorProto
    from onnx.external_data_helper import uses_external_data

    kind = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
        else str(tensor.data_type)
    if uses_external_data(tensor):
        raise GraphError(f"{what}: its data is in an external file that was not loaded")
    if any(d < 0 for d in tensor.dims):
        raise GraphError(f"{what}: its dims {list(tensor.dims)} are negative")
    if too_large(tensor.dims):
        raise GraphError(f"{what}: its dims {list(tensor.dims)} hold more than {MAX_ELEMENTS} elements, more "
                         f"than Tandem computes")
    try:
        return _array(tensor)
    except Exception as exc:   # numpy_helper's ValueError, TypeError, KeyError: data that does not fit
        raise GraphError(f"{what}: its data is not a {kind} tensor of dims {list(tensor.dims)} "
                         f"({type(exc).__name__}: {exc})") from None


def _check_inputs(graph, consts: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]],
                  where: str) -> None:
    """Each graph input of an element type numpy holds and of at most MAX_ELEMENTS elements."""
    from onnx import helper

    for value in graph.input:
        if value.name in consts:
            continue
        elem = value.type.tensor_type.elem_type
        try:
            np.dtype(helper.tensor_dtype_to_np_dtype(elem))
        except (KeyError, TypeError, ValueError):
            raise GraphError(f"{where}: input {value.name} has element type {elem}, which Tandem cannot "
                             f"hold (ONNX's numeric, bool and string tensor types)") from None
        if too_large(shapes[value.name]):
            raise GraphError(f"{where}: input {value.name} of shape {list(shapes[value.name])} holds more "
                             f"than {MAX_ELEMENTS} elements, more than Tandem computes")


def check_nodes(graph, opset: int, where: str) -> None:
    """What ONNX requires of a graph's nodes, checked before anything reads them: each of the default
    domain, its operator defined at ``opset`` with as many inputs and outputs and attributes of the types
    its schema gives (``_schema``), reading only tensors computed before it (graph inputs, initializers,
    earlier nodes' outputs: the nodes topologically sorted) and computing only new ones; the graph's
    outputs, at least one, are tensors of the graph, each named once."""
    known = {*(i.name for i in graph.input), *(t.name for t in graph.initializer)}
    for index, node in enumerate(graph.node):
        label = f"{where}: node {node_name(node, index)} ({node.op_type})"
        if node.domain not in ("", "ai.onnx"):
            raise GraphError(f"{label}: operator of domain {node.domain!r}; Tandem imports the default ONNX "
                             f"domain's operators")
        _schema(node, opset, label)
        if node.op_type == "Constant" and len(node.attribute) != 1:
            raise GraphError(f"{label}: a Constant holds its value in one attribute, not "
                             f"{len(node.attribute)}")
        parts = next((a.i for a in node.attribute if a.name == "num_outputs"), len(node.output))
        if node.op_type == "Split" and parts != len(node.output):   # onnx's shape inference aborts on it
            raise GraphError(f"{label}: num_outputs {parts} differs from its {len(node.output)} outputs")
        for name in node.input:
            if name and name not in known:
                raise GraphError(f"{label}: its input {name} is no graph input, initializer or output of an "
                                 f"earlier node")
        for name in node.output:
            if name in known:
                raise GraphError(f"{label}: its output {name} is already computed by an earlier node or "
                                 f"given as a graph input (each tensor is computed once)")
        known.update(name for name in node.output if name)
    outputs = [v.name for v in graph.output]
    if not outputs:
        raise GraphError(f"{where}: the graph declares no outputs")
    for k, name in enumerate(outputs):
        if name not in known:
            raise GraphError(f"{where}: the graph output {name or '(unnamed)'} is no tensor of the graph")
        if name in outputs[:k]:
            raise GraphError(f"{where}: the graph output {name} is named twice")


def opset_of(model, where: str) -> int:
    """The version of the default (ai.onnx) domain the model imports."""
    from onnx import defs

    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            latest = defs.onnx_opset_version()
            if not 1 <= entry.version <= latest:
                raise GraphError(f"{where}: the model imports opset {entry.version} of the default ONNX "
                                 f"domain; the installed onnx defines opsets 1 to {latest}")
            return int(entry.version)
    raise GraphError(f"{where}: the model imports no version of the default ONNX domain (opset_import)")


#: initializers of more elements than this are given to shape inference as typed inputs (their shapes, not
#: their values: what it needs of a weight), so that inferring a large model's shapes copies no weights
INFERRED_BY_SHAPE = 4096


def _infer(model, constants: Mapping[str, np.ndarray], where: str):
    """The graph as ONNX shape inference (strict, with data propagation) completes it, ``constants``
    (tensors Tandem evaluated) given as initializers in place of the nodes that computed them; large
    initializers are given by their shapes (``INFERRED_BY_SHAPE``)."""
    import onnx
    from onnx import helper, numpy_helper, shape_inference

    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    graph, source = skeleton.graph, model.graph
    graph.name = source.name
    graph.node.extend(n for n in source.node if not all(o in constants for o in n.output if o))
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.input.extend(i for i in source.input if i.name not in constants)
    inputs = {i.name for i in source.input}
    for tensor in source.initializer:
        if math.prod(tensor.dims) > INFERRED_BY_SHAPE:
            if tensor.name not in inputs:
                graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
        else:
            graph.initializer.append(tensor)
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in constants.items())
    try:
        return shape_inference.infer_shapes(skeleton, strict_mode=True, data_prop=True).graph
    except Exception as exc:
        raise GraphError(f"{where}: ONNX shape inference failed: {exc}") from None


def _array(tensor) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


def _declared(inferred, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Fill ``shapes`` with every static shape ONNX inference declares; each tensor's element type (numpy
    name) by name."""
    from onnx import helper

    types = {}
    for v in (*inferred.input, *inferred.value_info, *inferred.output):
        tensor = v.type.tensor_type
        if tensor.elem_type:
            try:
                types[v.name] = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
            except (KeyError, TypeError):
                types[v.name] = "unsupported"
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if tensor.HasField("shape") and None not in dims:
            shapes.setdefault(v.name, tuple(dims))
    return types


def constant_value(node, label: str) -> np.ndarray:
    """A Constant node's value (its one attribute: ``check_nodes``)."""
    import onnx

    (attr,) = node.attribute
    value = onnx.helper.get_attribute_value(attr)
    if attr.name == "value":
        return tensor_array(value, f"{label}: its value")
    if attr.name in ("value_float", "value_floats"):
        return np.asarray(value, np.float32)
    if attr.name in ("value_int", "value_ints"):
        return np.asarray(value, np.int64)
    raise GraphError(f"{label}: a constant given as {attr.name} is not supported (Tandem takes value, "
                     f"value_float(s) and value_int(s))")


def _layer(node, alias: dict[str, str], consts: dict[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]],
           types: Mapping[str, str], opset: int, label: str) -> Layer | None:
    """``node`` as a Layer, its attributes checked; None for a node that makes no layer (a Constant, an
    Identity: their outputs are recorded in ``consts`` and ``alias``)."""
    import onnx

    operands = tuple(alias.get(n, n) for n in node.input)
    schema = _schema(node, opset, label)   # found by check_nodes
    if node.op_type == "Constant":
        consts[node.output[0]] = constant_value(node, label)
        return None
    if node.op_type == "Identity":
        alias[node.output[0]] = operands[0]
        return None
    op = OPERATORS.get(node.op_type)
    if op is None:
        raise GraphError(f"{label}: operator {node.op_type} is not supported; Tandem imports "
                         f"{', '.join(sorted((*OPERATORS, 'Constant', 'Identity')))}")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    weights = {i: consts[n] for i, n in enumerate(operands) if n in consts}
    outputs = tuple(node.output)
    folds = op.static or all(n in consts for n in operands if n)   # evaluated at import: its shapes computed
    for name in outputs:
        if name and name not in shapes and not folds:
            raise DataDependentShapeError(f"{label}: the shape of its output {name} is unknown (it depends "
                                          f"on the values of the graph's inputs)")
        if name and types.get(name) == "unsupported":
            raise GraphError(f"{label}: its output {name} has an element type numpy cannot hold")
        if name in shapes and too_large(shapes[name]):
            raise GraphError(f"{label}: its output {name} of shape {list(shapes[name])} holds more than "
                             f"{MAX_ELEMENTS} elements, more than Tandem computes")
    layer = Layer(node.name or outputs[0], node.op_type, operands, outputs, attrs, weights,
                  tuple(shapes.get(n) for n in outputs), tuple(types.get(n, "float32") for n in outputs),
                  opset)
    in_shapes = tuple(None if not n else consts[n].shape if n in consts else shapes.get(n) for n in operands)
    reason = op.refusal(Node(layer.op, attrs, opset, tuple(weights.get(i) for i in range(len(operands))),
                             layer.shapes, in_shapes=in_shapes), outputs)
    if reason:
        raise GraphError(f"{label}: {reason}")
    for name in attrs:
        if name not in schema.attributes:
            raise GraphError(f"{label}: attribute {name!r} is not {node.op_type}'s at opset {opset} (ONNX's "
                             f"{node.op_type}-{schema.since_version} takes: "
                             f"{', '.join(sorted(schema.attributes)) or 'none'})")
    operand_types = [None if not n else consts[n].dtype if n in consts else types.get(n) for n in operands]
    reason = _type_refusal(node, schema, operand_types)
    if reason:
        raise GraphError(f"{label}: {reason}")
    return layer


def _type_refusal(node, schema, operand_types: Sequence[Any]) -> str | None:
    """Why ``node``'s operands (their numpy types, None where unknown or omitted) are not of the types its
    ONNX schema takes: a type its constraint does not allow, or two operands of one type variable (the T
    of Add's A and B) of different types; None if they are."""
    from onnx import TensorProto, helper

    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    bound: dict[str, str] = {}
    for position, dtype in enumerate(operand_types):
        if dtype is None or dtype == "unsupported" or not schema.inputs:
            continue
        formal = schema.inputs[min(position, len(schema.inputs) - 1)]
        try:
            kind = TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
            given = f"tensor({kind.lower()})"
        except (KeyError, TypeError, ValueError):
            continue
        takes = allowed.get(formal.type_str, [formal.type_str])
        if given not in takes:
            return (f"its input {node.input[position]} is a {given}; ONNX's {node.op_type} takes "
                    f"{', '.join(takes)} there")
        variadic_mixed = position >= len(schema.inputs) - 1 and not formal.is_homogeneous
        if formal.type_str in allowed and not variadic_mixed:
            if bound.setdefault(formal.type_str, given) != given:
                return (f"its inputs of type {formal.type_str} are {bound[formal.type_str]} and {given}; "
                        f"ONNX's {node.op_type} takes one type for them")
    return None


def _schema(node, opset: int, label: str):
    """The ONNX schema of ``node``'s operator at ``opset``; a GraphError where ONNX defines no such operator
    at that opset, or the node's number of inputs or outputs, an attribute's type or a required attribute
    is not the schema's. (Attributes the schema does not name are left to the operator table's refusal.)"""
    from onnx import AttributeProto, defs

    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        if node.op_type not in OPERATORS and node.op_type not in ("Constant", "Identity"):
            return None   # refused by name below
        raise GraphError(f"{label}: ONNX defines no operator {node.op_type} at opset {opset}") from None
    for what, count, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                   ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= count <= high:
            takes = f"{low}" if low == high else f"{low} to {high}" if high < 2**31 - 1 else f"{low} or more"
            raise GraphError(f"{label}: {count} {what}; ONNX's {node.op_type}-{schema.since_version} takes "
                             f"{takes}")
    given = {a.name: a for a in node.attribute}
    for attr in node.attribute:
        if attr.type == AttributeProto.UNDEFINED:
            raise GraphError(f"{label}: attribute {attr.name!r} has no type")
    for name, spec in schema.attributes.items():
        if name in given and given[name].type != spec.type.value:
            raise GraphError(f"{label}: attribute {name!r} is given as "
                             f"{AttributeProto.AttributeType.Name(given[name].type)}; "
                             f"{node.op_type} takes {spec.type.name}")
        if spec.required and name not in given:
            raise GraphError(f"{label}: attribute {name!r} is required by {node.op_type}")
    return schema


def _outputs(layer: Layer, values: Mapping[str, np.ndarray], where: str) -> tuple[np.ndarray, ...]:
    """``layer``'s outputs from ``values``, each in its declared type and checked against its declared
    shape."""
    label = f"{where}: node {layer.name} ({layer.op})"
    try:
        results = evaluate_all(layer, values)
    except OperatorError as exc:
        raise GraphError(f"{label}: {exc}") from None
    out = []
    for name, value, shape, dtype in zip(layer.outputs, results, layer.shapes, layer.dtypes, strict=False):
        value = np.asarray(value)
        if name and shape is not None and value.shape != shape:
            raise GraphError(f"{label}: computes {name} of shape {list(value.shape)}, but the model declares "
                             f"{list(shape)}")
        out.append(value.astype(dtype, copy=False))
    return tuple(out)


def _graph_inputs(graph, consts: Mapping[str, np.ndarray]) -> list[str]:
    return [i.name for i in graph.input if i.name not in consts]


def _input_shapes(graph, consts, given: dict[str, tuple[int, ...]], where: str) -> dict[str, tuple[int, ...]]:
    names = _graph_inputs(graph, consts)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise GraphError(f"{where}: --input-shape names {unknown[0]}, which is not a graph input (inputs: "
                         f"{', '.join(names)})")
    shapes = {}
    for value in graph.input:
        if value.name not in names:
            continue
        if value.name in given:
            shapes[value.name] = tuple(int(d) for d in given[value.name])
            continue
        dims = value.type.tensor_type.shape.dim
        static = [d.dim_value for d in dims if d.HasField("dim_value") and d.dim_value >= 0]
        if len(static) != len(dims):
            shown = [d.dim_param or "?" if not d.HasField("dim_value") else d.dim_value for d in dims]
            raise DynamicInputError(f"{where}: input {value.name} has the dynamic shape {shown}; give it "
                                    f"with --input-shape {value.name}=1x3x224x224 (its real sizes)")
        shapes[value.name] = tuple(static)
    return shapes


def _with_macs(layer: Layer, shapes: Mapping[str, tuple[int, ...]], consts: Mapping[str, np.ndarray]
               ) -> Layer:
    """``layer`` with its multiply-accumulates counted (convolutions and matrix products)."""
    def shape_of(position: int) -> tuple[int, ...]:
        name = layer.operands[position]
        return consts[name].shape if name in consts else shapes[name]

    out = math.prod(layer.shape)
    if layer.op == "Conv":
        return replace(layer, macs=out * math.prod(shape_of(1)[1:]))
    if layer.op in ("MatMul", "Gemm"):
        a = shape_of(0)
        k = a[0] if layer.op == "Gemm" and layer.attrs.get("transA") else a[-1]
        return replace(layer, macs=out * k)
    return layer


def reader_counts(layers: Sequence[Layer]) -> dict[str, int]:
    """How many layers read each tensor."""
    readers: dict[str, int] = {}
    for layer in layers:
        for name in layer.inputs:
            readers[name] = readers.get(name, 0) + 1
    return readers


def _fold(layers: list[Layer], merge: Callable[[Layer, Layer], Layer | None]
          ) -> tuple[list[Layer], list[str]]:
    """Each layer with one activation input that an earlier layer alone produces for it, folded into that
    producer where ``merge(producer, layer)`` gives the merged layer (None: not this pair); the folded
    layers' names."""
    readers = reader_counts(layers)
    by_output = {layer.output: i for i, layer in enumerate(layers)}
    kept: list[Layer | None] = list(layers)
    folded = []
    for i, layer in enumerate(layers):
        j = by_output.get(layer.inputs[0]) if len(layer.inputs) == 1 else None
        if j is None or kept[j] is None or readers.get(layers[j].output) != 1:
            continue
        merged = merge(layers[j], layer)
        if merged is not None:
            kept[j], kept[i] = merged, None
            folded.append(layer.name)
    return [layer for layer in kept if layer is not None], folded


def _fold_batch_norms(layers: list[Layer]) -> tuple[list[Layer], list[str]]:
    """Each BatchNormalization (inference mode, one output) whose input is a Conv's output that nothing
    else reads, folded into it."""
    def merge(conv: Layer, bn: Layer) -> Layer | None:
        if (bn.op != "BatchNormalization" or set(bn.weights) != {1, 2, 3, 4} or conv.op != "Conv"
                or 1 not in conv.weights or bn.attrs.get("training_mode", 0) or any(bn.outputs[1:])):
            return None
        gamma, beta, mean, var = (bn.weights[k].astype(np.float64) for k in (1, 2, 3, 4))
        g = gamma / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        w = conv.weights[1].astype(np.float64)
        b = conv.weights.get(2, np.zeros(w.shape[0])).astype(np.float64)
        weights = {1: (w * g.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32),
                   2: ((b - mean) * g + beta).astype(np.float32)}
        return replace(conv, operands=(conv.operands[0], "W", "B"), outputs=bn.outputs[:1], weights=weights,
                       shapes=bn.shapes[:1], dtypes=bn.dtypes[:1])
    return _fold(layers, merge)


def _fold_biases(layers: list[Layer]) -> tuple[list[Layer], list[str]]:
    """Each Add of a constant vector over the last axis whose other input is a MatMul by constant weights
    that nothing else reads, folded into it as its bias (``weights[2]``): how transformer exporters write
    a dense layer, made one layer as a Gemm is."""
    def merge(mm: Layer, add: Layer) -> Layer | None:
        if add.op != "Add" or len(add.weights) != 1 or mm.op != "MatMul" or set(mm.weights) != {1}:
            return None
        (bias,) = add.weights.values()
        if bias.ndim != 1 or bias.size != mm.shape[-1] or add.shape != mm.shape:
            return None
        return replace(mm, operands=(mm.operands[0], mm.operands[1], "B"), outputs=add.outputs,
                       weights={1: mm.weights[1], 2: bias}, shapes=add.shapes, dtypes=add.dtypes)
    return _fold(layers, merge)


# ------------------------------------------------------------------------------------------ evaluation

def evaluate_all(layer: Layer, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Every output of one layer, exactly (float64 for floating point, int64 for integers), from its
    operands (``values``: the activations by name); an OperatorError for values it cannot compute: the
    operator's own refusal, or numpy's (a ValueError, IndexError, TypeError, ...: operands or attribute
    values that are not what the operator takes, or a result too large to hold)."""
    args = tuple(layer.operand(i, values) for i in range(len(layer.operands)))
    shapes = tuple(None if a is None else np.shape(a) for a in args)
    try:
        return compute(Node(layer.op, layer.attrs, layer.opset, args, layer.shapes,
                            tuple(np.dtype(d) for d in layer.dtypes), shapes,
                            tuple(bool(n) for n in layer.outputs)))
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError, MemoryError,
            AttributeError) as exc:
        raise OperatorError(f"{layer.op} cannot compute these operands and attributes (operand shapes "
                            f"{[list(s) if s is not None else None for s in shapes]}): "
                            f"{type(exc).__name__}: {exc}") from None


def evaluate(layer: Layer, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """One layer's (first) output, exactly (float64), from its operands (``values``: the activations by
    name)."""
    try:
        return evaluate_all(layer, values)[0]
    except OperatorError as exc:
        raise GraphError(f"node {layer.name} ({layer.op}): {exc}") from None
