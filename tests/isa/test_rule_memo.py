"""``check_constraints`` and ``timing_of`` keep each instruction's rule and timing results by the values of
the names they read (programs repeat an instruction with other addresses): what they answer for an instance
is what they answer with nothing kept, on random instances of every instruction of the built-in specs, field
values in and out of range."""

from __future__ import annotations

import numpy as np
import pytest

import isa
from isa import instance
from isa.errors import ExecError

SPECS = {name: isa.load_isa(name) for name in ("vita", "diannao")}


def random_instances(spec: isa.ISA, name: str, rng: np.random.Generator, count: int) -> list[isa.Insn]:
    """``count`` instances of ``name``: each field small (where rules bite), anywhere in its range, or just
    past it."""
    instr = spec.instruction(name)
    out = []
    for _ in range(count):
        fields = {}
        for f in instr.fields:
            if f.kind != "int" or f.enum is not None or f.name in instr.types:
                continue
            pick = rng.integers(0, 10)
            fields[f.name] = int(rng.integers(f.lo, min(f.hi, f.lo + 4) + 1)) if pick < 6 else \
                int(rng.integers(f.lo, f.hi + 1)) if pick < 9 else f.hi + 1
        base = dict(spec.insn(name).fields)   # the type and enum fields' defaults
        out.append(isa.Insn(name, tuple(sorted({**base, **fields}.items()))))
    return out


def answers(spec: isa.ISA, insn: isa.Insn) -> tuple:
    try:
        timing = instance.timing_of(spec, insn)
    except ExecError as e:
        timing = str(e)
    return tuple(isa.check_constraints(spec, insn, which="static")), timing


@pytest.mark.parametrize("spec_name", SPECS)
def test_kept_results_equal_fresh_ones_on_random_instances(spec_name):
    spec = SPECS[spec_name]
    rng = np.random.default_rng(len(spec_name))
    kinds = set()
    for name in spec.instructions:
        insns = random_instances(spec, name, rng, 40)
        kept = [answers(spec, insn) for insn in insns]   # later instances find earlier ones' results
        fresh = []
        for insn in insns:
            instance._MEMOS.clear()
            fresh.append(answers(spec, insn))
        assert kept == fresh, name
        kinds |= {v.kind for violations, _ in kept for v in violations}
    assert "range" in kinds and len(kinds) > 1   # out-of-range fields found as well as broken rules
