"""Typed errors of the compiler layer.

Two families (STYLE rule 11): user or program errors raise one of the classes below with a message that
names the culprit; broken internal invariants raise ``InternalError`` (or fail an ``assert``).
"""


class TandemError(Exception):
    """Base class of every error the compiler raises on purpose."""


class IRTypeError(TandemError, TypeError):
    """An IR node was built with operands of the wrong type or dtype."""


class ScheduleError(TandemError, ValueError):
    """A schedule primitive was asked for something illegal; the message says what and why."""


class LoweringError(TandemError):
    """A schedule could not be lowered to loop IR."""


class TokenOrderError(LoweringError):
    """A program pops a dependency token other than the one it means to (TVM Theorem 3.1 broken)."""


class VerifyError(TandemError):
    """A program broke an invariant of its pipeline stage (see ``compiler.verify``)."""


class InterpError(TandemError):
    """The reference interpreter hit a run-time fault (out-of-bounds access, bad argument)."""


class InternalError(TandemError):
    """A compiler invariant broke: a bug in Tandem, not in the user's program."""


class CodegenError(TandemError):
    """A backend cannot generate code for a program; the message names the node and why."""


class CpuRuntimeError(TandemError):
    """JIT-compiled code hit a run-time fault (out-of-bounds access, division by zero, bad argument)."""
