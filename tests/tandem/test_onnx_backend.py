"""ONNX's own conformance tests against Tandem's backend (tandem/onnx_backend.py): the node cases the
installed onnx package generates, every one of them.

A case whose operators Tandem claims (tandem/network/operators' table, Constant and Identity) runs in
``onnx.backend.test.BackendTest`` (ONNX's runner: its tolerances, its dtype checks) unless
tandem/network/operators/gaps.py lists it; every other case (the listed ones and those of operators Tandem
does not claim) must be refused with a GraphError: no wrong result, no untyped exception.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

from tandem.network.graph import GraphError
from tandem.network.operators import OPERATORS
from tandem.network.operators.gaps import GAPS, TOLERANCES, UNCOVERED
from tandem.onnx_backend import TandemBackend

CLAIMED = frozenset(OPERATORS) | {"Constant", "Identity"}

with warnings.catch_warnings():   # the generators overflow casts on purpose (Cast's cases)
    warnings.simplefilter("ignore")
    CASES = load_model_tests(kind="node")


def claims(case) -> bool:
    """Whether every operator of ``case``'s graph is one Tandem claims."""
    return {node.op_type for node in case.model.graph.node} <= CLAIMED


PASSING = sorted(case.name for case in CASES if claims(case) and case.name not in {**GAPS, **TOLERANCES})
REFUSED = [case for case in CASES if not claims(case) or case.name in GAPS]

backend_test = onnx.backend.test.BackendTest(TandemBackend, __name__)
backend_test.include("^(" + "|".join(re.escape(name) for name in PASSING) + ")_cpu$")
for _name, _case in backend_test.test_cases.items():   # ONNX's runner skips what is not included: drop it
    for _test in [t for t in vars(_case) if t.startswith("test_")]:
        if getattr(getattr(_case, _test), "__unittest_skip__", False):
            delattr(_case, _test)
    globals()[_name] = _case


def test_every_claimed_operator_passes_conformance_cases_of_its_own():
    """Every claimed operator but those that pass no case of ONNX's (gaps.py's UNCOVERED, tested elsewhere);
    95% of the claimed cases."""
    by_name = {case.name: case for case in CASES}
    tested = {node.op_type for name in PASSING for node in by_name[name].model.graph.node}
    assert CLAIMED - tested == set(UNCOVERED)
    assert len(PASSING) >= 0.95 * sum(claims(case) for case in CASES)


def test_every_gap_is_a_case_of_a_claimed_operator():
    names = {case.name for case in CASES if claims(case)}
    listed = set(GAPS) | set(TOLERANCES)
    assert not listed - names, f"gaps.py lists cases that are not claimed cases: {listed - names}"


@pytest.mark.parametrize("name", sorted(TOLERANCES))
def test_a_case_with_a_stated_tolerance_passes_within_it_and_not_within_onnxs(name):
    (case,) = [case for case in CASES if case.name == name]
    rtol, why = TOLERANCES[name]
    rep = TandemBackend.prepare(case.model)
    for inputs, outputs in case.data_sets:
        got = list(rep.run([_normalize_tensor(x) for x in inputs]))
        want = [_normalize_tensor(y) for y in outputs]
        Runner.assert_similar_outputs(want, got, rtol=rtol, atol=case.atol)
        with pytest.raises(AssertionError):   # else it leaves the list
            Runner.assert_similar_outputs(want, got, rtol=case.rtol, atol=case.atol)
    assert len(why) > 20


def _outcome(case) -> str:
    """'refused' (a GraphError), or what else happened."""
    try:
        rep = TandemBackend.prepare(case.model)
        for inputs, _ in case.data_sets:
            rep.run([_normalize_tensor(x) for x in inputs])
    except GraphError:
        return "refused"
    except Exception as exc:   # noqa: BLE001 (what the test reports)
        return f"{type(exc).__name__}: {exc}"[:200]
    return "computed"


def test_every_other_case_is_refused_with_a_typed_error():
    """The gaps and the operators Tandem does not claim: a GraphError naming the node, nothing else (a
    listed gap that now computes must leave gaps.py)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        bad = {case.name: outcome for case in REFUSED if (outcome := _outcome(case)) != "refused"}
    assert not bad, "\n".join(f"{name}: {outcome}" for name, outcome in sorted(bad.items()))


@pytest.mark.parametrize("name", sorted(GAPS))
def test_a_gap_says_why(name):
    assert len(GAPS[name]) > 20


def test_the_readmes_backend_example_runs_as_written():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Tandem as an ONNX backend"):]
    (example,) = re.findall(r"```python\n(.*?)```", section[:section.index("\n## ")], flags=re.S)
    exec(compile(example, "README.md", "exec"), {})
