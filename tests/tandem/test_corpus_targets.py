"""The corpus (tests/models/corpus: PyTorch's exports of real architectures, both exporters) as int8 networks
(tandem/network/quantize.py) on every target (tandem/network/run.py): every step bit-exact with the integer
graph, every step left to the host named with its reason, and no more than ``MAX_HOST_MACS`` of a CNN's
multiply-adds on the host. The default suite runs a representative subset (a ResNet on the three targets, a
ShuffleNet's channel split and shuffle on the CPU, a GPT-2 decoding step's Split and KV-cache Concat on
VITA); ``-m slow`` runs the whole corpus on the three targets.

A batch (issue 45): the symbolic-batch exports (``corpus.BATCHED``: ResNet-18 and the GPT-2 block, prefill and
decoding step) imported at batch 1 and at ``BATCH`` run bit-exact on every target with no host step at the
batch that one image does not have (the default suite: the GPT-2 prefill on the three targets, its decoding
step and ResNet-18 on VITA, about a minute; ``-m slow`` the rest, about six)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tandem.flows.targets import load_target
from tandem.network import graph as tg
from tandem.network import quantize
from tandem.network.run import NetworkReport, run_network

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import corpus  # noqa: E402

TARGETS = ("vita", "cpu", "diannao")
#: the CPU's kernels are timed for real: briefly here
OPTIONS = {"cpu": {"threads": 1, "min_time": 0.001}}
#: the most of a CNN's multiply-adds that may run on the host
MAX_HOST_MACS = 0.10
CNNS = tuple(name for name in corpus.ARCHITECTURES if not name.startswith("vit"))
SUBSET = [("resnet18", "dynamo", kind) for kind in TARGETS] + [("shufflenet_v2_x0_5", "torchscript", "cpu"),
                                                                ("gpt2_decode", "dynamo", "vita")]
EVERY = [(name, exporter, kind) for name in (*corpus.ARCHITECTURES, *corpus.TRANSFORMERS)
         for exporter in corpus.EXPORTERS for kind in TARGETS]


def host_macs_share(report: NetworkReport) -> float:
    """The share of the network's multiply-adds its host steps computed."""
    return sum(r.macs for r in report.rows if r.where == "host") / report.macs if report.macs else 0.0


def run_corpus_model(name: str, exporter: str, kind: str) -> NetworkReport:
    """The corpus model quantized and run on ``kind``: bit-exact, its host steps named with their reasons,
    a CNN's host share of multiply-adds within ``MAX_HOST_MACS``."""
    q = quantize.quantize(tg.load(corpus.load(name, exporter)), samples=2)
    report = run_network(q, load_target(kind), options=OPTIONS.get(kind))
    assert report.validated, [(r.step, r.why) for r in report.rows if not r.validated]
    host = [r for r in report.rows if r.where == "host"]
    assert all(r.why for r in host)
    if name in CNNS:
        on_host = [(r.step, r.op, r.macs, r.why) for r in host if r.macs]
        assert host_macs_share(report) <= MAX_HOST_MACS, on_host
    return report


def _ids(cases: list[tuple[str, str, str]]) -> list[str]:
    return ["-".join(case) for case in cases]


@pytest.mark.parametrize(("name", "exporter", "kind"), SUBSET, ids=_ids(SUBSET))
def test_a_representative_subset_runs_bit_exact_with_its_macs_on_the_target(name, exporter, kind):
    report = run_corpus_model(name, exporter, kind)
    if name == "resnet18":   # every conv and the classifier on the target
        assert host_macs_share(report) == 0.0
    if name == "gpt2_decode":   # the Split of Q, K, V: one host step writing its three outputs
        (split,) = [r for r in report.rows if r.op == "Split"]
        assert split.where == "host" and split.why.startswith("data movement")


REST = [case for case in EVERY if case not in SUBSET]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "exporter", "kind"), REST, ids=_ids(REST))
def test_every_corpus_model_runs_bit_exact_on_every_target(name, exporter, kind):
    run_corpus_model(name, exporter, kind)


BATCH = 4
BATCH_SUBSET = [("gpt2_prefill", "dynamo", kind) for kind in TARGETS] + [("gpt2_decode", "dynamo", "vita"),
                                                                          ("resnet18", "dynamo", "vita")]
BATCH_REST = [(name, exporter, kind) for name in corpus.BATCHED for exporter in corpus.EXPORTERS
              for kind in TARGETS if (name, exporter, kind) not in BATCH_SUBSET]


def run_batched(name: str, exporter: str, kind: str, batch: int) -> NetworkReport:
    """The symbolic-batch export of corpus model ``name`` imported at ``batch`` (every graph input's first
    axis), quantized and run on ``kind``: every step bit-exact with the integer graph."""
    model = corpus.load(name, exporter, batch=True)
    constants = {t.name for t in model.graph.initializer}
    shapes = {i.name: (batch, *[d.dim_value for d in i.type.tensor_type.shape.dim][1:])
              for i in model.graph.input if i.name not in constants}
    q = quantize.quantize(tg.load(model, shapes), samples=2)
    report = run_network(q, load_target(kind), options=OPTIONS.get(kind))
    assert report.validated, (batch, [(r.step, r.why) for r in report.rows if not r.validated])
    return report


def host_steps(report: NetworkReport) -> dict[tuple[str, str], str]:
    """The steps a run left to the host, each by its first layer's name and its layers' operators (neither
    depends on the batch), with the reason its row gives."""
    return {(r.step, r.op): r.why for r in report.rows if r.where == "host"}


def check_batch_adds_no_host_step(name: str, exporter: str, kind: str) -> None:
    """Batch 1 and ``BATCH`` of the model on ``kind``: both bit-exact, the same steps, and no step on the
    host at ``BATCH`` that batch 1 runs on the target (the extra ones named with their reasons)."""
    one, many = (run_batched(name, exporter, kind, batch) for batch in (1, BATCH))
    assert [(r.step, r.op) for r in many.rows] == [(r.step, r.op) for r in one.rows]
    extra = {step: why for step, why in host_steps(many).items() if step not in host_steps(one)}
    assert not extra, f"on the host at batch {BATCH} only: {extra}"


@pytest.mark.parametrize(("name", "exporter", "kind"), BATCH_SUBSET, ids=_ids(BATCH_SUBSET))
def test_a_batch_runs_bit_exact_with_no_host_step_that_one_image_has_not(name, exporter, kind):
    check_batch_adds_no_host_step(name, exporter, kind)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "exporter", "kind"), BATCH_REST, ids=_ids(BATCH_REST))
def test_every_batched_export_runs_bit_exact_with_no_host_step_that_one_image_has_not(name, exporter, kind):
    check_batch_adds_no_host_step(name, exporter, kind)
