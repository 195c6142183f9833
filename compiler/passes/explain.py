"""explain: what instruction selection chose and why, as the ``selection`` object of ``tandem run --json``
and the lines of ``tandem run --explain``.

A schedule keeps a ``Selected`` record (compiler/passes/cover.py) for each statement whose instructions a
cover chose: VITA's epilogue, its element-wise network operators and a user's operator on its ALU, DianNao's
element-wise operators (a user's, and residual_add, relu and clip). From those records:

- ``statement``: the statement's expression, the chosen cover (each step: instruction, node, cycles, and a
  scalar step's reason) and the best cover with each other instruction at the root, cheapest first;
- ``unused``: each instruction the covers could have used (a candidate of a statement's ``Select``) that no
  chosen cover uses, with the statement it came closest at and why it was not used there: it lost on cost
  (``costs N cycles where the chosen cover costs M``, at the root or at a subtree), the target refused it
  (a constraint, an immediate that does not fit), or the matcher's reason at the root;
- ``selection``: both, the JSON object; ``lines``: that object as text.

Non-goals: the tensor instructions a schedule marks (a GEMM, a conv, a reduction) are matched by
``tensorize`` without a choice of cover; they are not listed here (``unmatched`` says why one stayed scalar).
"""

from __future__ import annotations

from collections.abc import Sequence

import isa
from compiler.passes import cover as covering
from compiler.passes.cover import Cover, Selected

#: How many alternatives a statement lists (the best cover with each other root instruction).
ALTERNATIVES = 3


def selection(selected: Sequence[Selected], unused_too: bool = False) -> dict:
    """The ``selection`` object of the ``--json`` contract: ``statements`` (``statement`` of each record)
    and ``unused`` (``unused``; null unless ``unused_too``, which ``--explain`` asks for)."""
    return {"statements": [statement(s) for s in selected],
            "unused": unused(selected) if unused_too else None}


def statement(s: Selected) -> dict:
    """One statement: ``statement`` (where), ``expression``, ``chosen`` and ``alternatives`` (covers as
    ``cover_json``)."""
    others = [c for c in covering.rooted(s.expr, s.select) if c.instructions != s.chosen.instructions]
    return {"statement": s.where, "expression": str(s.expr), "chosen": cover_json(s.chosen),
            "alternatives": [cover_json(c) for c in others[:ALTERNATIVES]]}


def cover_json(c: Cover) -> dict:
    """A cover: its ``instructions`` in order, total ``cycles``, and ``steps`` (``instruction``, the
    ``node`` it computes, its ``cycles``, and for a scalar step the ``reason``)."""
    steps = [{"instruction": s.instruction, "node": str(s.node), "cycles": s.cycles,
              **({"reason": s.reason} if s.reason else {})} for s in c.steps]
    return {"instructions": list(c.instructions), "cycles": c.cycles, "steps": steps}


def unused(selected: Sequence[Selected]) -> list[dict]:
    """Each candidate instruction no chosen cover uses (in the spec's order): ``instruction``, the
    ``statement`` where it came closest and the ``reason`` it was not used there."""
    used = {name for s in selected for name in s.chosen.instructions}
    candidates = {i.name: i for s in selected for i in s.select.instructions if i.name not in used}
    out = []
    for name, instr in candidates.items():
        ranked = [(_closest(instr, s), k, s) for k, s in enumerate(selected)
                  if any(i.name == name for i in s.select.instructions)]
        (_, reason), _, s = min(ranked, key=lambda r: (r[0][0], r[1]))
        out.append({"instruction": name, "statement": s.where, "reason": reason})
    return out


def _closest(instr: isa.Instruction, s: Selected) -> tuple[tuple, str]:
    """How close ``instr`` came at statement ``s`` (a rank, lower is closer) and why it was not used: a loss
    on cost at the root; else at a subtree (where it may be the cheapest, but the chosen cover computes that
    subtree inside a fused step); else ``cover.why_not`` at the root."""
    nodes = covering.subtrees(s.expr, s.select)
    mine = _rooted_with(instr.name, s.expr, s)
    if mine is not None:
        gap = mine.cycles - s.chosen.cycles
        if gap == 0:
            return (0, 0), (f"it ties the chosen cover at {mine.cycles} cycles ({_names(mine)}; the search "
                            f"keeps {_names(s.chosen)}, found first or shorter)")
        return (0, gap), f"costs {mine.cycles} cycles where the chosen cover costs {s.chosen.cycles}"
    losses = []
    for depth, node in enumerate(nodes[1:], 1):
        found, best = _rooted_with(instr.name, node, s), covering.best_of(node, s.select)
        if found is not None and isinstance(best, Cover):
            losses.append((found.cycles - best.cycles, depth, node, found, best))
    if losses:
        gap, _, node, found, best = min(losses, key=lambda x: (x[0], x[1]))
        at = f"at '{_brief(str(node))}'"
        if gap:
            return (1, gap), (f"{at} it costs {found.cycles} cycles where the best cover of it costs "
                              f"{best.cycles}")
        return (1, 0), (f"{at} it is the cheapest ({_names(found)}, {found.cycles} cycles), but the chosen "
                        f"cover computes that inside {_fused(node, s)}")
    reason = covering.why_not(instr, s.expr, s.select)
    return (2 if reason.startswith("it matches") else 3, 0), reason


def _names(c: Cover) -> str:
    return " ; ".join(c.instructions)


def _rooted_with(name: str, node, s: Selected) -> Cover | None:
    """The best cover of ``node`` with instruction ``name`` at its root, or None."""
    return next((c for c in covering.rooted(node, s.select) if c.steps[-1].instruction == name), None)


def _fused(node, s: Selected) -> str:
    """The chosen step whose node holds ``node`` (a fused instruction), named."""
    k = covering.key(node)
    for step in s.chosen.steps:
        if any(covering.key(x) == k for x in covering.subtrees(step.node, s.select)):
            return f"{step.instruction} ('{_brief(str(step.node))}')"
    return "a fused step"


def lines(report: dict) -> list[str]:
    """The ``selection`` object as text: per statement its expression, the chosen cover and the
    alternatives with their cycles, then the unused instructions and why."""
    if not report["statements"]:
        return []
    out = []
    for st in report["statements"]:
        out.append(f"{st['statement']}: {st['expression']}")
        out.append(f"  chosen       {_cover_text(st['chosen'])}")
        for alt in st["alternatives"]:
            out.append(f"  alternative  {_cover_text(alt)}")
        for step in st["chosen"]["steps"]:
            if "reason" in step:
                out.append(f"  scalar step  {step['node']}: {step['reason']}")
    if report.get("unused"):
        out.append("unused instructions:")
        out.extend(f"  {u['instruction']}  ({u['statement']}) {u['reason']}" for u in report["unused"])
    elif report.get("unused") is not None:
        out.append("unused instructions: none (every candidate instruction is in a chosen cover)")
    return out


def _cover_text(c: dict) -> str:
    return f"{' ; '.join(c['instructions']) or '(nothing to compute)'}  {c['cycles']} cycles"


def _brief(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
