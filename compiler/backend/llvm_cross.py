"""Cross-compilation with the CPU backend: loop IR -> LLVM IR -> object code and assembly for another machine.

UNIT (Weng et al., CGO 2021) tensorizes onto ARM DOT (Sec. III.A, Fig. 4(b)) as onto AVX-512 VNNI, and
TensorIR's ARM target uses the same sdot; here the ``arm`` target (``compiler.target``) compiles UNIT's
schedules (``compiler.ops.cpu``, tensorized onto the spec's sdot by the one matcher) for AArch64:

    obj = cross_build(func, "aarch64-unknown-linux-gnu")   # func: after the ``arm`` pipeline
    obj.assembly, obj.object_code, obj.llvm_ir

``cross_build`` cuts ``func`` into the segments of ``compiler.backend.llvm`` (``plan``) and emits them with
the same code generator (``compiler.backend.llvm_emit``) and the same tensor-instruction rule
(``llvm_operands.emit_tensor_insn``: the intrinsic, its argument order and the CPU features come from the
spec) into one module for the triple, optimized by the same O3 pipeline (``compile_module``). Each segment is
the function ``i32 name(ptr..., i64 begin, i64 end)`` the host backend calls; parallel loops get no fork
wrapper (the host's thread pool is not the target's): a caller runs each segment's iterations
``[0, iterations)`` itself.

The target machine's features are, unless given, the first feature set that each tensor instruction of
``func`` names in its spec (``features = ["dotprod"]`` for sdot), so that the code assumes nothing more.

Limits: nothing here runs the code. ``compiler.backend.llvm_qemu`` runs it under a user-mode emulator where
one is installed (Debian's qemu-user); without one, the code is only inspected (its assembly) and the loop IR
it was compiled from validated by the reference interpreter (``compiler.interp``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from dataclasses import dataclass

from compiler.backend.llvm import Segment, compile_module, plan, target_machine
from compiler.backend.llvm_operands import emit_tensor_insn
from compiler.backend.llvm_types import ErrorTable
from compiler.errors import CodegenError
from compiler.ir import nodes as n
from compiler.ir.functor import IRVisitor

__all__ = ["CrossObject", "cross_build", "function_assembly", "needed_features"]


@dataclass(frozen=True)
class CrossObject:
    """``func`` compiled for ``triple``: the ELF object, its assembly and the optimized LLVM IR.

    ``segments`` and ``workspaces`` are ``compiler.backend.llvm.plan``'s: a caller allocates the workspaces
    and calls each segment in order; a nonzero return is 1 + the index of its fault in ``errors``.
    """

    func: n.PrimFunc
    triple: str
    cpu: str
    features: tuple[str, ...]
    segments: tuple[Segment, ...]
    workspaces: tuple[n.Buffer, ...]
    errors: tuple[str, ...]
    llvm_ir: str
    assembly: str
    object_code: bytes

    def function(self, name: str) -> str:
        """The assembly of function ``name`` (a segment's name), from its label to its end."""
        return function_assembly(self.assembly, name)


def needed_features(func: n.PrimFunc) -> tuple[str, ...]:
    """The CPU features (LLVM's names) of ``func``'s tensor instructions: each one's first option in its
    spec, in order of first use."""
    found: dict[str, None] = {}

    class _Find(IRVisitor):
        def visit_TensorInsn(self, s: n.TensorInsn) -> None:
            try:
                options = s.isa.instruction(s.name).features
            except KeyError:
                return   # emit_tensor_insn names the unknown instruction
            for feature in options[0] if options else ():
                found.setdefault(feature)

    _Find().visit(func.body)
    return tuple(found)


def cross_build(func: n.PrimFunc, triple: str, cpu: str = "generic",
                features: Collection[str] | None = None) -> CrossObject:
    """Compile ``func`` for ``cpu`` of ``triple`` with ``features`` (LLVM's names, without ``+``; by
    default ``needed_features(func)``)."""
    if not isinstance(func, n.PrimFunc):
        raise CodegenError(f"llvm_cross.build: expected a PrimFunc, but got {type(func).__name__}")
    enabled = tuple(features) if features is not None else needed_features(func)
    tm = target_machine(triple, cpu, ",".join(f"+{f}" for f in enabled))
    workspaces, segments = plan(func)
    errors = ErrorTable()
    rules = functools.partial(emit_tensor_insn, features=frozenset(enabled))
    module = compile_module(func, segments, tm, triple, errors, rules)
    return CrossObject(func, triple, cpu, enabled, segments, workspaces, tuple(errors.messages), str(module),
                       tm.emit_assembly(module), bytes(tm.emit_object(module)))


def function_assembly(assembly: str, name: str) -> str:
    """The lines of function ``name`` in LLVM's ELF assembly: from ``name:`` to its ``.size`` directive."""
    found = re.search(rf"^{re.escape(name)}:.*?^\s*\.size\s+{re.escape(name)},[^\n]*$", assembly,
                      re.MULTILINE | re.DOTALL)
    if found is None:
        raise CodegenError(f"llvm: no function {name!r} in the assembly")
    return found.group(0)
