"""Typed errors of the DianNao simulator. Each names the core, the pc, the instruction (as assembly text) and
the rule it broke, so that a message alone says what to fix:

    core 5 (cluster 1, core 1), pc 12 (vadd.f32 dst=0x40, a=0x80, b=0x100, n=100): the element count must
    be a multiple of VECTOR_ELEMS: violated 'n % VECTOR_ELEMS == 0' (VECTOR_ELEMS = 64, n = 100)

A rule of the ISA spec that a tensor instruction breaks raises the subclass of ``ConstraintError`` for its
constraint kind (``align``, ``divisible``, ``space``, ``capacity``; every other kind raises
``ConstraintError`` itself).
"""

from __future__ import annotations

from sim.core import errors as core_errors
from sim.core.errors import SimError


class DiannaoError(SimError):
    """An error of a DianNao simulation; ``core`` and ``pc`` are None when it concerns the whole launch."""

    def __init__(self, message: str, *, core: int | None = None, pc: int | None = None,
                 insn: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.core, self.pc, self.insn, self.rule = core, pc, insn, rule
        self.unit = f"core {core}" if core is not None else None
        self.detail = message


class LaunchError(DiannaoError):
    """The launch itself is wrong: a core count the card cannot run, a program for another ISA or parameters,
    host data that does not fit in GMEM."""


class ConstraintError(DiannaoError, core_errors.ConstraintError):
    """A tensor instruction breaks a rule of its ISA spec (the error both simulators share, with the core)."""


class MisalignedError(ConstraintError):
    """An address is not aligned as the instruction requires (constraint kind ``align``)."""


class ElementCountError(ConstraintError):
    """An element or byte count is not a multiple the instruction requires (constraint kind ``divisible``)."""


class MemorySpaceError(ConstraintError):
    """An instruction names a memory space it cannot use (constraint kind ``space``)."""


class ScratchpadOverflowError(ConstraintError):
    """An operand reaches past the end of its memory (constraint kind ``capacity``)."""


class OutOfBoundsError(DiannaoError):
    """A scalar load or store addresses bytes outside its memory space (its address comes from a register,
    so only the running simulator can check it)."""


class ControlError(DiannaoError):
    """Control left the program: a core ran past the last instruction without ``halt``."""


class RunawayLoopError(DiannaoError):
    """A core executed more instructions than the config's instruction budget allows."""


class HazardError(DiannaoError):
    """A core touched what one of its outstanding asynchronous instructions reads or writes (it read or wrote
    the destination of a copy, or wrote its source) before a ``wait``, or reached a barrier, a halt or an
    access the simulator cannot check with such work outstanding."""


class BarrierDeadlockError(DiannaoError, core_errors.DeadlockError):
    """Cores wait at a barrier that can never complete: some core of its scope halted, or waits at another
    barrier."""


CONSTRAINT_ERRORS: dict[str, type[ConstraintError]] = {
    "align": MisalignedError,
    "divisible": ElementCountError,
    "space": MemorySpaceError,
    "capacity": ScratchpadOverflowError,
}


def core_ranges(cores: list[int]) -> str:
    """'cores 0-3, 5' for [0, 1, 2, 3, 5]."""
    spans: list[list[int]] = []
    for c in cores:
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
    return f"core{'s' if len(cores) > 1 else ''} {text}"


def barrier_waits(waiting: dict[int, tuple[tuple, int]], barriers: dict[tuple, tuple[tuple[int, ...], dict]],
                  halted: dict[int, tuple[int, int]]) -> dict[str, str]:
    """What the cores of a barrier deadlock wait for, by core range: ``waiting`` (core -> (barrier key, pc)),
    ``barriers`` (key -> (its members, arrived core -> pc)), ``halted`` (core -> (cycle, pc))."""
    parts: dict[str, str] = {}
    by_barrier: dict[tuple, list[int]] = {}
    for core, (key, _pc) in sorted(waiting.items()):
        by_barrier.setdefault(key, []).append(core)
    for key, cores in by_barrier.items():
        members, arrived = barriers[key]
        scope = f"cluster {key[1]}" if key[0] == "cluster" else "every core"
        pcs = sorted({arrived[c] for c in cores})
        missing = []
        for m in members:
            if m in arrived:
                continue
            if m in halted:
                missing.append(f"core {m} halted at pc {halted[m][1]}")
            elif m in waiting:
                other = waiting[m][0]
                what = f"cluster {other[1]}'s barrier" if other[0] == "cluster" else "the card barrier"
                missing.append(f"core {m} waits at {what} (pc {waiting[m][1]})")
        at = ", ".join(map(str, pcs))
        parts[core_ranges(cores)] = f"wait at the barrier of {scope} (pc {at}), but {'; '.join(missing)}"
    return parts
