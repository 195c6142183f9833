"""Run cross-compiled code (``compiler.backend.llvm_cross``) under a user-mode emulator: AArch64 on this host.

    reason = unavailable("aarch64-unknown-linux-gnu")   # None where qemu-aarch64 and a linker are installed
    run_emulated(obj, [a, b, out])                       # in place, as CpuKernel and compiler.interp do

The kernel's object is linked with a freestanding harness into a static executable: no C library is needed
(this host has none for AArch64). The harness, written here in LLVM IR and compiled for the same triple, holds
every argument as an initialized global and every workspace as a zeroed one, calls the segments in order
(each over its iterations ``[0, n)``), exits with a segment's nonzero return code (its fault), and else
writes the buffers the function stores to to standard output with the ``write`` system call and exits 0.
The executable runs under ``qemu-aarch64 -cpu max`` (any CPU feature, sdot's ``dotprod`` included) and its
output is copied back into the arrays.

Tools: the emulator is Debian's ``qemu-user`` (``qemu-aarch64``, or ``qemu-aarch64-static``); the linker
``aarch64-linux-gnu-ld`` (Debian's ``binutils-aarch64-linux-gnu``) or LLVM's ``ld.lld``. ``unavailable``
says which one is missing, so that tests skip with that reason.

Limits: AArch64 Linux only (the harness's system calls are AArch64's); a kernel that calls a C library
function (``malloc`` for an allocation over ``llvm_emit.STACK_LIMIT``, or a ``memset`` LLVM chose) cannot be
linked, and says so; the arguments are copied into the executable, so it suits test-sized arrays.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir as ll

from compiler.backend.llvm import target_machine
from compiler.backend.llvm_cross import CrossObject
from compiler.backend.llvm_types import I8, I32, I64, PTR, declare
from compiler.errors import CodegenError, CpuRuntimeError
from compiler.interp.args import check_array, match_args, stored_buffers

__all__ = ["emulator", "linker", "run_emulated", "unavailable"]

#: AArch64 Linux system calls: the numbers of write and exit_group, and the stub that makes one. llvmlite has
#: no AArch64 assembly parser (inline asm cannot be compiled), so the stub is three instruction words in an
#: executable section: mov x8, x3 (the number, passed as the fourth argument); svc #0; ret.
WRITE, EXIT = 64, 94
SYSCALL_STUB = "tandem.syscall"
STUB_WORDS = (0xAA0303E8, 0xD4000001, 0xD65F03C0)
TIMEOUT_S = 120


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def emulator(triple: str) -> str | None:
    """The path of a user-mode emulator for ``triple`` (``qemu-<arch>``), or None."""
    arch = _arch(triple)
    return shutil.which(f"qemu-{arch}") or shutil.which(f"qemu-{arch}-static")


def linker(triple: str) -> list[str] | None:
    """The command that links static executables for ``triple``: binutils' cross ``ld`` or ``ld.lld``."""
    gnu = shutil.which(f"{_arch(triple)}-linux-gnu-ld")
    if gnu:
        return [gnu]
    lld = shutil.which("ld.lld")
    return [lld] if lld else None


def unavailable(triple: str) -> str | None:
    """Why code for ``triple`` cannot be run here (a missing emulator or linker), or None if it can."""
    arch = _arch(triple)
    if arch != "aarch64":
        return f"only aarch64 code is run under an emulator, not {arch}"
    if emulator(triple) is None:
        return f"no qemu-{arch} on PATH (Debian: apt-get install qemu-user)"
    if linker(triple) is None:
        return f"no linker for {arch} on PATH (Debian: apt-get install binutils-{arch}-linux-gnu, or lld)"
    return None


def run_emulated(obj: CrossObject, args, timeout_s: float = TIMEOUT_S) -> None:
    """Run ``obj`` on ``args`` (arrays, positional or by parameter name) under the emulator, in place."""
    reason = unavailable(obj.triple)
    if reason is not None:
        raise CodegenError(f"cannot run {obj.func.name} for {obj.triple}: {reason}")
    func = obj.func
    arrays = match_args(func, args, CpuRuntimeError)
    stored = stored_buffers(func.body)
    for k, (param, array) in enumerate(zip(func.params, arrays, strict=True)):
        check_array(f"argument {k}, '{param.name}' to {func.name}", param, array, writeable=param in stored,
                    error=CpuRuntimeError)
    _check_calls(obj)
    written = [p for p in func.params if p in stored]
    with tempfile.TemporaryDirectory(prefix="tandem-qemu-") as tmp:
        work = Path(tmp)
        (work / "kernel.o").write_bytes(obj.object_code)
        tm = target_machine(obj.triple, obj.cpu, ",".join(f"+{f}" for f in obj.features))
        harness = harness_module(obj, arrays)
        (work / "harness.o").write_bytes(bytes(tm.emit_object(llvm.parse_assembly(str(harness)))))
        exe = work / func.name
        link = subprocess.run([*linker(obj.triple), "-static", "-nostdlib", "-e", "_start", "-o", str(exe),
                               str(work / "kernel.o"), str(work / "harness.o")],
                              capture_output=True, text=True, timeout=timeout_s)
        if link.returncode != 0:
            raise CodegenError(f"linking {func.name} for {obj.triple} failed: {link.stderr.strip()}")
        done = subprocess.run([emulator(obj.triple), "-cpu", "max", str(exe)], capture_output=True,
                              timeout=timeout_s)
    if done.returncode != 0:
        code = done.returncode
        why = obj.errors[code - 1] if 0 < code <= len(obj.errors) else \
            f"exit status {code}: {done.stderr.decode(errors='replace').strip()}"
        raise CpuRuntimeError(f"{func.name} under {Path(emulator(obj.triple)).name}: {why}")
    out, at = done.stdout, 0
    for param in written:
        array = arrays[func.params.index(param)]
        size = array.size * array.itemsize
        if at + size > len(out):
            raise CpuRuntimeError(f"{func.name}: the emulated run wrote {len(out)} bytes, fewer than its "
                                  f"outputs hold")
        array[...] = np.frombuffer(out[at : at + size], array.dtype).reshape(array.shape)
        at += size


def _check_calls(obj: CrossObject) -> None:
    """CodegenError when the code calls a function the harness does not define (a C library one)."""
    own = {s.name for s in obj.segments}
    called = set(re.findall(r"^\s*bl?\s+([A-Za-z_][\w.$]*)\s*$", obj.assembly, re.MULTILINE)) - own
    called = {name for name in called if not name.startswith(".L")}
    if called:
        raise CodegenError(f"{obj.func.name}: the code calls {', '.join(sorted(called))}, which the "
                           "freestanding harness has no C library for")


def harness_module(obj: CrossObject, arrays: list[np.ndarray]) -> ll.Module:
    """The LLVM module of ``_start``: the arguments as globals, the segments called, the outputs written."""
    module = ll.Module(name=f"{obj.func.name}.harness")
    module.triple = obj.triple
    ptrs = {}
    for k, (param, array) in enumerate(zip(obj.func.params, arrays, strict=True)):
        data = np.ascontiguousarray(array).tobytes()
        gv = ll.GlobalVariable(module, ll.ArrayType(I8, len(data)), f"tandem.arg{k}")
        gv.initializer = ll.Constant(gv.value_type, bytearray(data))
        gv.align = 64
        ptrs[param] = gv
    for k, w in enumerate(obj.workspaces):
        gv = ll.GlobalVariable(module, ll.ArrayType(I8, w.nbytes), f"tandem.workspace{k}")
        gv.initializer = ll.Constant(gv.value_type, None)
        gv.align = 64
        ptrs[w] = gv
    start = ll.Function(module, ll.FunctionType(ll.VoidType(), []), "_start")
    b = ll.IRBuilder(start.append_basic_block("entry"))
    for seg in obj.segments:
        fn = declare(module, seg.name, ll.FunctionType(I32, [PTR] * len(seg.buffers) + [I64, I64]))
        code = b.call(fn, [ptrs[buf] for buf in seg.buffers] + [ll.Constant(I64, 0),
                                                                 ll.Constant(I64, seg.iterations)])
        with b.if_then(b.icmp_unsigned("!=", code, ll.Constant(I32, 0)), likely=False):
            _syscall(b, EXIT, b.zext(code, I64))
    stored = stored_buffers(obj.func.body)
    for param in obj.func.params:
        if param in stored:
            _syscall(b, WRITE, ll.Constant(I64, 1), ptrs[param],
                     ll.Constant(I64, ptrs[param].value_type.count))
    _syscall(b, EXIT, ll.Constant(I64, 0))
    b.unreachable()
    return module


def _syscall(b: ll.IRBuilder, number: int, *args: ll.Value) -> ll.Value:
    """An AArch64 Linux system call with up to three arguments (x0-x2), the result in x0: a call of
    ``SYSCALL_STUB`` with the number as the fourth argument (x3)."""
    module = b.module
    try:
        stub = module.get_global(SYSCALL_STUB)
    except KeyError:
        stub = ll.GlobalVariable(module, ll.ArrayType(I32, len(STUB_WORDS)), SYSCALL_STUB)
        stub.initializer = ll.Constant(stub.value_type, list(STUB_WORDS))
        stub.global_constant = True
        stub.section = ".text.tandem"
        stub.align = 4
    padded = [*args, *(ll.Constant(I64, 0) for _ in range(3 - len(args)))]
    call = b.bitcast(stub, ll.FunctionType(I64, [I64] * 4).as_pointer())   # a callee with a function type
    return b.call(call, [*(b.ptrtoint(a, I64) if a.type == PTR else a for a in padded),
                         ll.Constant(I64, number)])
