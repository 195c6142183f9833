"""User operators: ``FILE.py:NAME`` names a function in a file of the user's that builds an operator with
Tandem's tensor expressions.

    def add_relu(n: int = 4096):                 # -p KEY=VALUE arrive as keyword arguments (integers)
        a = te.placeholder((n,), "float32", name="a")
        b = te.placeholder((n,), "float32", name="b")
        return [a, b], te.compute((n,), lambda i: ir.Max(a[i] + b[i], ir.const(0.0, "float32")))

    def add_relu_reference(a, b):                # optional: the numpy reference, on the input arrays (and
        return np.maximum(a + b, 0)              # as keywords, the operator's parameters it names: n=...)

``NAME(**params)`` returns ``(inputs, output)``: the placeholder tensors and the output tensor. Without
``NAME_reference``, Tandem's reference interpreter (compiler/interp.py, on the operator's unscheduled loop
nest) is the oracle. Every mistake in the user's file (missing, not Python, no NAME, NAME raising or returning
the wrong things, a parameter NAME does not take) is a ``UserOpError`` naming the file and, where there is
one, the line; nothing from inside Tandem's own code.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler import te
from tandem.flows.check import Check, compare
from tandem.flows.flow import RunError


class UserOpError(RunError):
    """A mistake in a user's operator file: ``str()`` starts with ``FILE:LINE:`` (or ``FILE:``)."""


def is_user_op(op: str) -> bool:
    """Whether ``op`` names a user operator, ``FILE.py:NAME``."""
    path, sep, name = op.rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(name)


@dataclass(frozen=True)
class UserOp:
    """A user's operator, built: its placeholders, its output and its reference."""

    path: Path
    name: str
    params: dict[str, int]
    inputs: tuple[te.Tensor, ...]
    output: te.Tensor
    reference_fn: Callable | None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.name}"

    def random_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Seeded arrays for the placeholders: integers over their whole range, floats standard normal."""
        out = []
        for t in self.inputs:
            dt = t.dtype.numpy
            if np.dtype(dt).kind in "iu":
                info = np.iinfo(dt)
                out.append(rng.integers(info.min, info.max, size=t.shape, endpoint=True, dtype=dt))
            else:
                out.append(rng.standard_normal(t.shape).astype(dt))
        return out

    def check_inputs(self, given: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The caller's arrays, after checking one per placeholder, each of its shape and dtype (C-contiguous
        and writeable: a view is copied, as a kernel takes its arrays)."""
        arrays = [np.require(a, requirements=("C", "W")) for a in given]
        want = [(tuple(t.shape), np.dtype(t.dtype.numpy)) for t in self.inputs]
        if [(a.shape, a.dtype) for a in arrays] != want:
            raise RunError(f"{self.where}: expected inputs {[(list(s), str(d)) for s, d in want]}, but got "
                           f"{[(list(a.shape), str(a.dtype)) for a in arrays]}")
        return arrays

    def reference(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """``NAME_reference(*arrays, **the operator's parameters it names)`` as the output's dtype and shape,
        else the reference interpreter's."""
        shape, dt = tuple(self.output.shape), np.dtype(self.output.dtype.numpy)
        if self.reference_fn is None:
            # imported here: tandem.flows.run imports this module, and ``tandem --help`` imports that
            from compiler import interp, pipeline
            from compiler.schedule import create_schedule

            func = pipeline.build(create_schedule(self.output), [*self.inputs, self.output], name=self.name)
            out = np.zeros(shape, dt)
            interp.run(func, [*arrays, out])
            return out
        taken = inspect.signature(self.reference_fn).parameters   # the operator's parameters it names
        params = {k: v for k, v in self.params.items() if k in taken}
        got = _call(self.path, f"{self.name}_reference", self.reference_fn, *[a.copy() for a in arrays],
                    **params)
        got = np.asarray(got)
        if got.shape != shape:
            raise UserOpError(f"{self.path}: {self.name}_reference returned shape {list(got.shape)}, but the "
                              f"output {self.output.name} has shape {list(shape)}")
        return got.astype(dt)

    def validate(self, got: np.ndarray, want: np.ndarray) -> Check:
        """Integers bit-exact; floats bit-exact or allclose at the dtype's precision (tandem/flows/check.py),
        with the largest difference."""
        return compare(got.reshape(want.shape), want, self.output.dtype)


def load_user_op(op: str, params: Mapping[str, int]) -> UserOp:
    """Import ``FILE.py``, call ``NAME(**params)`` and check what it returns (UserOpError if anything is
    off)."""
    text, _, name = op.rpartition(":")
    path = Path(text)
    if not path.is_file():
        raise UserOpError(f"{path}: no such operator file")
    module = _import(path)
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ ==
                         module.__name__ and not k.startswith("_"))
        raise UserOpError(f"{path}: defines no function {name!r} (its functions: "
                          f"{', '.join(defined) or 'none'})")
    line = _line_of(fn)
    try:
        inspect.signature(fn).bind(**params)
    except TypeError as exc:
        taken = ", ".join(inspect.signature(fn).parameters) or "nothing"
        given = ", ".join(f"{k}={v}" for k, v in params.items())
        raise UserOpError(f"{path}:{line}: {name}() cannot take {given}: {exc} (it takes {taken})") from None
    result = _call(path, name, fn, **params)
    inputs, output = _check_result(path, line, name, result)
    ref = getattr(module, f"{name}_reference", None)
    return UserOp(path, name, dict(params), inputs, output, ref if callable(ref) else None)


def _import(path: Path):
    module_name = f"tandem_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserOpError(f"{path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserOpError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None
    except Exception as exc:
        raise UserOpError(f"{_frame(path, exc)}: importing it raised {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _call(path: Path, name: str, fn: Callable, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise UserOpError(f"{_frame(path, exc)}: {name} raised {type(exc).__name__}: {exc}") from None


def _frame(path: Path, exc: BaseException) -> str:
    """``FILE:LINE`` of the deepest frame of ``exc``'s traceback in the user's file (``FILE`` if none)."""
    target = str(path.resolve())
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if str(Path(f.filename).resolve()) == target]
    return f"{path}:{lines[-1]}" if lines else str(path)


def _line_of(fn: Callable) -> int | str:
    try:
        return inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return "?"


def _check_result(path: Path, line, name: str, result) -> tuple[tuple[te.Tensor, ...], te.Tensor]:
    where = f"{path}:{line}: {name}"
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise UserOpError(f"{where} must return (inputs, output), but returned {type(result).__name__}"
                          f"{f' of {len(result)}' if isinstance(result, tuple | list) else ''}")
    inputs, output = result
    if not isinstance(inputs, tuple | list) or not all(isinstance(t, te.Tensor) for t in inputs):
        raise UserOpError(f"{where} must return a list of placeholder tensors first, but returned {inputs!r}")
    for t in inputs:
        if not isinstance(t.op, te.PlaceholderOp):
            raise UserOpError(f"{where}: input {t.name} is computed, not a te.placeholder")
    if not isinstance(output, te.Tensor) or not isinstance(output.op, te.ComputeOp):
        raise UserOpError(f"{where} must return a te.compute tensor as the output, but returned {output!r}")
    if len({t.name for t in (*inputs, output)}) != len(inputs) + 1:
        raise UserOpError(f"{where}: its tensors need distinct names, but they are "
                          f"{', '.join(t.name for t in (*inputs, output))}")
    return tuple(inputs), output
