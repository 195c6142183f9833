"""Typed simulator errors: each names where (file and key, or cycle, module and instruction) and the rule."""

from __future__ import annotations


class SimError(Exception):
    """Base class of every error a simulator raises on bad input or a bad program."""


class SimConfigError(SimError):
    """A simulator config is malformed: names the file, the key and the broken rule."""

    def __init__(self, message: str, *, file: str = "<config>", key: str | None = None) -> None:
        self.file = file
        self.key = key
        self.detail = message
        where = f"{file}: key '{key}'" if key else file
        super().__init__(f"{where}: {message}")


class ConstraintError(SimError):
    """An instruction breaks a rule of its ISA spec; both simulators raise it (or a subclass of it).

    ``pc`` is the instruction's index in the program, ``unit`` what runs it (a VITA unit such as "load",
    a DianNao core such as "core 5"), ``insn`` the instruction as assembly text and ``rule`` the rule as the
    spec writes it.
    """

    def __init__(self, message: str, *, pc: int | None = None, unit: str | None = None,
                 insn: str | None = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.pc, self.unit, self.insn, self.rule = pc, unit, insn, rule
        self.detail = message


class DeadlockError(SimError):
    """Units wait on each other and no event can wake them; both simulators raise it (or a subclass).

    ``cycle`` is when the machine stopped, ``waiting`` maps each waiting unit ("load", "core 3") to what it
    waits for, as the message says it.
    """

    def __init__(self, message: str, *, cycle: int | None = None, waiting: dict[str, str] | None = None
                 ) -> None:
        super().__init__(message)
        self.cycle, self.waiting = cycle, dict(waiting or {})


def deadlock_message(cycle: int, waits: dict[str, str], what: str = "deadlock") -> str:
    """The one wording of a deadlock report: ``<what> at cycle C: <unit> <waits for>; ...``."""
    return f"{what} at cycle {cycle}: " + "; ".join(f"{unit} {why}" for unit, why in waits.items())
