"""The Python cost of one call of the CUDA core's sparse step (issue 45, item 7: "at most 15 us of Python per
step"), measured without a GPU: `functional.sparse_step` -> `native.cuda.sparse_step` -> ctypes, with the
library replaced by a stub compiled here that exports `gt_cuda_sparse_step` with the real signature
(runtime/native/abi.py) and returns at once. Everything in Python runs as on a GPU machine: the checks of
every tensor, the workspace lookup, the argument marshalling. What it leaves out: torch's current-stream
lookup (a CUDA call; the stub stream is 0) and, of course, the core's own launches.

The tensors are host tensors that the checks are told live on cuda:0 (cuda.describe's device replaced);
the table is 5M x 128 float32 as bench/optim.py's, a batch 100,000 ids.

    python bench/core_call.py [--calls 20000] [--rounds 5]      (or make bench-core-call)
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from graphtrain.runtime.native import abi, cuda
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.optim import OptimConfig, functional, make_state

STUB = (
    "long long gt_cuda_sparse_step("
    + ", ".join(f"void* a{i}" for i in range(14))
    + """,
    struct params { float f[7]; int i; double d[2]; float r; } params, float row_norm, int finite, int device,
    void* stream, void* ws, long long ws_bytes, void* flags, void* bad) { return 0; }
"""
)
GPU = torch.device("cuda", 0)


def stub_library(directory: Path) -> ctypes.CDLL:
    """A library exporting gt_cuda_sparse_step that does nothing, typed as the real one."""
    src, lib = directory / "stub.c", directory / "stub.so"
    src.write_text(STUB)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    loaded = ctypes.CDLL(str(lib))
    sig = abi.SIGNATURES["gt_cuda_sparse_step"]
    fn = loaded.gt_cuda_sparse_step
    fn.restype, fn.argtypes = sig.restype, sig.argtypes
    return loaded


def patched(lib: ctypes.CDLL) -> None:
    """Host tensors pass the CUDA core's checks as cuda:0 ones, and its calls reach the stub."""

    def describe(t: torch.Tensor) -> cuda.Desc:
        if not isinstance(t, torch.Tensor):
            raise TypeError(type(t).__name__)
        return tuple.__new__(cuda.Desc, (GPU, t.dtype, tuple(t.shape), t.is_contiguous()))

    cuda.describe = describe  # type: ignore[assignment]
    cuda._ready = lambda table: (lib, 0, 0)  # type: ignore[assignment]
    cuda._workspace_bytes = lambda op, n, rows, dim, device: 1  # type: ignore[assignment]
    functional.choose_backend = lambda device, requested=None: CoreBackend.CUDA  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        patched(stub_library(Path(tmp)))
        table = torch.empty((a.rows, 128))
        ids = torch.zeros(a.batch, dtype=torch.int64)
        grads = torch.empty((a.batch, 128))
        flags = torch.full((3,), -1, dtype=torch.int64)
        workspace = torch.empty(1, dtype=torch.uint8)
        print(f"| optimizer | call | us per call (median of {a.rounds} x {a.calls:,}) | 15 us bar |")
        print("|---|---|---|---|")
        for kind in ("rowwise_adagrad", "adagrad", "adam", "sgd"):
            config = OptimConfig(kind, 0.01, duplicate="mean" if kind == "rowwise_adagrad" else "sum")
            state = make_state(config, a.rows, 128)
            for how, extra in (("deferred", {"flags": flags, "workspace": workspace}), ("waiting", {})):
                step = functional.sparse_step
                rounds = []
                for _ in range(a.rounds):
                    start = time.perf_counter()
                    for _ in range(a.calls):
                        step(config, table, state, ids, grads, **extra)  # type: ignore[arg-type]
                    rounds.append((time.perf_counter() - start) / a.calls)
                us = 1e6 * statistics.median(rounds)
                print(f"| {kind} | {how} | {us:.1f} | {'met' if us <= 15 else 'not met'} |")


if __name__ == "__main__":
    main()
