"""check_token_order: TVM's Theorem 3.1 on an emitted decoupled access/execute program.

A dependency queue between two units is a FIFO of anonymous tokens: the k-th pop of a queue takes the
k-th push, whatever either of them meant. A program is correct when, on every queue, each pop takes the
token it was written for: the sequence of pushes and the sequence of pops, each in its unit's program
order, name the same tokens with the same labels. Virtual-thread interleaving keeps this when every
thread's pushes and pops of a queue come in the same thread order (Sec. 3.5); a wrong interleaving breaks
it, and then a unit either waits for a token that never comes (deadlock) or runs on someone else's token
(a race).

The input is the token record of a compiled program (``compiler.backend.vita.VitaKernel.tokens``): per
push or pop, the instruction index ``pc`` that carries it, ``action``, the queue ``src -> dst``, the
``token`` name and its evaluated ``label`` (the iteration numbers and thread that ``inject_sync`` put on
it). Each unit runs its instructions in program order, so ordering by ``pc`` gives each side's order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from compiler.errors import TokenOrderError


@dataclass(frozen=True)
class Token:
    """One push or pop in an emitted program: instruction index, action, queue (src, dst), token, label."""

    pc: int
    action: str
    src: str
    dst: str
    token: str
    label: tuple[int, ...]

    def __reduce__(self) -> tuple:
        return Token, (self.pc, self.action, self.src, self.dst, self.token, self.label)


def check_token_order(tokens: Iterable[Token]) -> None:
    """Raise ``TokenOrderError`` naming the first push/pop pair that breaks Theorem 3.1: the earliest pop
    in the program that takes a token other than its own (on its queue, the k-th pop and the k-th push
    name different tokens or labels), or, failing that, a queue with more pops than pushes (a pop that
    waits forever) or more pushes than pops (a token nobody takes)."""
    queues: dict[tuple[str, str], dict[str, list[Token]]] = {}
    for t in tokens:
        if t.action not in ("push", "pop"):
            raise TokenOrderError(f"token {t.token!r} at instruction {t.pc}: action {t.action!r} is neither "
                                  "push nor pop")
        queues.setdefault((t.src, t.dst), {"push": [], "pop": []})[t.action].append(t)
    wrong: list[tuple[int, str]] = []
    unbalanced: list[str] = []
    for (src, dst), sides in sorted(queues.items()):
        pushes = sorted(sides["push"], key=lambda t: t.pc)
        pops = sorted(sides["pop"], key=lambda t: t.pc)
        for k, (push, pop) in enumerate(zip(pushes, pops, strict=False)):
            if (push.token, tuple(push.label)) != (pop.token, tuple(pop.label)):
                wrong.append((pop.pc, f"queue {src} -> {dst}: pop #{k} at instruction {pop.pc} is for "
                                      f"{_name(pop)}, but push #{k}, the token it takes, is {_name(push)} at "
                                      f"instruction {push.pc}"))
                break
        if len(pops) > len(pushes):
            pop = pops[len(pushes)]
            unbalanced.append(f"queue {src} -> {dst}: pop #{len(pushes)} at instruction {pop.pc} "
                              f"({_name(pop)}) has no push: {len(pushes)} pushes, {len(pops)} pops")
        elif len(pushes) > len(pops):
            push = pushes[len(pops)]
            unbalanced.append(f"queue {src} -> {dst}: push #{len(pops)} at instruction {push.pc} "
                              f"({_name(push)}) is never popped: {len(pushes)} pushes, {len(pops)} pops")
    if wrong:
        raise TokenOrderError(min(wrong)[1])
    if unbalanced:
        raise TokenOrderError(unbalanced[0])


def _name(t: Token) -> str:
    return f"{t.token!r} {list(t.label)}"
