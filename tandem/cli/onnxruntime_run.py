"""onnxruntime's run of a model in a child process (``run``): a model onnxruntime crashes on is an
``OnnxRuntimeFailure`` of Tandem's, not the end of Tandem's process.

``tandem model`` checks Tandem's import against onnxruntime's run of the same model. onnxruntime refuses
most models it cannot run with an exception, but some malformed ones (found by tests/fuzz/test_fuzz_onnx.py)
crash it while it builds its session: a segmentation fault or a failed assertion (SIGABRT) in its graph
optimizers, which no ``except`` catches. The child loads the model, runs it on the inputs and writes the
output; its exception, or the signal that ended it, comes back as the failure's message.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

#: the child: argv = model, inputs (.npz of a0, a1, ...), their names (JSON), output (.npy), the output's
#: name ("" for the first)
CHILD = """
import json
import sys
import numpy as np
import onnxruntime as ort

model, inputs, names, out, name = sys.argv[1:6]
try:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    arrays = np.load(inputs, allow_pickle=False)
    feed = {n: arrays[f"a{i}"] for i, n in enumerate(json.loads(open(names).read()))}
    names = [o.name for o in session.get_outputs()]
    np.save(out, np.asarray(session.run([name] if name in names else None, feed)[0]), allow_pickle=False)
except Exception as exc:   # onnxruntime's Fail, InvalidGraph, InvalidArgument, NotImplemented, ...
    print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
    sys.exit(3)
"""


class OnnxRuntimeFailure(Exception):
    """onnxruntime could not run the model: its exception, or the signal that ended it."""


def run(model: bytes | str | Path, inputs: Mapping[str, np.ndarray], output: str | None) -> np.ndarray:
    """onnxruntime's value of ``output`` (None, or a name it does not know: its first output) for
    ``inputs``, computed in a child process; an OnnxRuntimeFailure where it cannot."""
    with tempfile.TemporaryDirectory(prefix="tandem-ort-") as folder:
        work = Path(folder)
        if isinstance(model, bytes):
            (work / "model.onnx").write_bytes(model)
            model = work / "model.onnx"
        np.savez(work / "inputs.npz", **{f"a{i}": np.asarray(v) for i, v in enumerate(inputs.values())})
        (work / "names.json").write_text(json.dumps(list(inputs)))
        done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(work / "inputs.npz"),
                               str(work / "names.json"), str(work / "output.npy"), output or ""],
                              capture_output=True, text=True)
        if done.returncode == 0:
            return np.load(work / "output.npy", allow_pickle=False)
    said = [line.strip() for line in done.stderr.splitlines() if line.strip() and ":onnxruntime:" not in line]
    last = said[-1] if said else ""
    if done.returncode < 0:
        code = -done.returncode
        name = signal.Signals(code).name if code in signal.valid_signals() else f"signal {code}"
        raise OnnxRuntimeFailure(f"onnxruntime crashed ({name})" + (f": {last}" if last else ""))
    raise OnnxRuntimeFailure(last or f"onnxruntime exited with status {done.returncode}")
