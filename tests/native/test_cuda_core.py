"""The CUDA core on a machine without a GPU or driver (the build machines): every exported function
returns an error code with a message naming itself and the CUDA error, and the process lives (Thrust's
exceptions used to abort it: `gt_cuda_gather(n=1)` died with SIGABRT on cudaErrorInsufficientDriver);
`available()` is False and says why; every device, dtype and shape mistake is refused in Python before
any CUDA call, on descriptions of tensors for devices this machine does not have. tests/gpu runs the
same core on a GPU."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.native import abi, cuda
from graphtrain.runtime.native.optim import optim_args

GPU0, GPU1, CPU = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")
F32, I64 = torch.float32, torch.int64

# Calls every CUDA entry point of the library at argv[1] as a GPU-less machine would see them, and prints
# {name: [return code, message]}. Null device pointers: no kernel may be reached without a driver.
NO_DRIVER_SCRIPT = r"""
import ctypes, json, sys
from pathlib import Path
from graphtrain.runtime.native import abi
lib = abi.load(Path(sys.argv[1]), abi.CUDA)
params = abi.OptimParams(0.01, 1e-8, 0.9, 0.999, 0.1, 0.001, 0.0, 0, 0.9, 0.999)
bad, size, info = ctypes.c_int64(0), ctypes.c_int64(0), (ctypes.c_int64 * 6)()
step = lib.gt_cuda_sparse_step
nulls = (None, None)  # ids and gradients (or values); table, states: None too
B, S = ctypes.byref(bad), ctypes.byref(size)
F = [None, 0, 7, None, None, None]  # table, its element type (float32), rounding seed, state0, state1, steps
calls = {
    "gt_cuda_probe": lambda: lib.gt_cuda_probe(0, info),
    "gt_cuda_workspace_bytes": lambda: lib.gt_cuda_workspace_bytes(0, 1, 10, 4, 0, S),
    "gt_cuda_sparse_step": lambda: step(
        3, 1, *nulls, 4, 10, 0, *F, 0, params, 0.0, 0, 0, *nulls, 1 << 20, None, B
    ),
    "gt_cuda_sparse_step (global Adam, empty batch)": lambda: step(
        3, 0, *nulls, 4, 10, 0, *F, 1, params, 0.0, 0, 0, *nulls, 1 << 20, None, B
    ),
    "gt_cuda_sparse_step (a half table)": lambda: step(
        0, 1, *nulls, 4, 10, 0, None, 2, 7, None, None, None, 0, params, 0.0, 0, 0, *nulls, 1 << 20, None, B
    ),
    "gt_cuda_sparse_step (an unknown element type)": lambda: step(
        0, 1, *nulls, 4, 10, 0, None, 5, 7, None, None, None, 0, params, 0.0, 0, 0, *nulls, 1 << 20, None, B
    ),
    "gt_cuda_sparse_step (a row norm on a half table)": lambda: step(
        0, 1, *nulls, 4, 10, 0, None, 1, 7, None, None, None, 0, params, 1.0, 0, 0, *nulls, 1 << 20, None, B
    ),
    "gt_cuda_sparse_step (too many ids)": lambda: step(
        0, 1 << 32, *nulls, 4, 10, 0, *F, 0, params, 0.0, 0, 0, *nulls, 0, None, B
    ),
    "gt_cuda_gather": lambda: lib.gt_cuda_gather(1, *nulls, 4, 10, None, 0, *nulls, 256, B),
    "gt_cuda_scatter": lambda: lib.gt_cuda_scatter(1, *nulls, None, 4, 10, 0, *nulls, 1 << 20, B),
    "gt_cuda_sample_workspace_bytes": lambda: lib.gt_cuda_sample_workspace_bytes(16, 0, S),
    "gt_cuda_sample_count": lambda: lib.gt_cuda_sample_count(
        None, 10, None, 1, 2, *nulls, 0, *nulls, 1 << 20, S, B
    ),
    "gt_cuda_sample_count (too many seeds)": lambda: lib.gt_cuda_sample_count(
        None, 10, None, 1 << 32, 2, *nulls, 0, *nulls, 1 << 20, S, B
    ),
    "gt_cuda_sample_fill": lambda: lib.gt_cuda_sample_fill(None, None, None, 1, 7, *nulls, None, 0, None),
    "gt_cuda_sample_edges_count": lambda: lib.gt_cuda_sample_edges_count(
        None, None, 10, None, 1, 2, None, 0, *nulls, 0, *nulls, 1 << 20, S, B
    ),
    "gt_cuda_sample_edges_count (fan-outs per type without types)": lambda: lib.gt_cuda_sample_edges_count(
        None, None, 10, None, 1, -1, info, 3, *nulls, 0, *nulls, 1 << 20, S, B
    ),
    "gt_cuda_sample_edges_fill": lambda: lib.gt_cuda_sample_edges_fill(
        None, None, None, 1, 2, None, 0, 7, *nulls, None, 0, None
    ),
    "gt_cuda_sample_edges_fill (fan-outs per type without types)": lambda: lib.gt_cuda_sample_edges_fill(
        None, None, None, 1, -1, info, 3, 7, *nulls, None, 0, None
    ),
}
out = {}
for name, call in calls.items():
    rc = call()
    out[name] = [rc, lib.gt_cuda_last_error().decode()]
out["gt_abi_version"] = [lib.gt_abi_version(), ""]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def no_driver(cuda_build: tuple[Path, str]) -> Path:
    """The session's CUDA build, on a machine where it finds no driver (else these tests do not apply:
    tests/gpu covers a machine with one)."""
    lib = abi.load(cuda_build[0], abi.CUDA)
    found = cuda.probe_library(lib)
    if found.driver:
        pytest.skip(f"a CUDA driver is present ({found.describe()}): tests/gpu covers this machine")
    return cuda_build[0]


def test_every_entry_point_returns_an_error_and_the_process_lives(no_driver: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_DRIVER_SCRIPT, str(no_driver)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert "terminate called" not in result.stderr
    got = json.loads(result.stdout)
    # every CUDA export with work to do is called (the ABI check's two and the message getter aside)
    exported = {n for n, sig in abi.SIGNATURES.items() if sig.libraries == (abi.CUDA,)} - {
        "gt_cuda_last_error"
    }
    assert exported == {name.split(" ")[0] for name in got if name.startswith("gt_cuda")}
    for name, (rc, message) in got.items():
        if name == "gt_abi_version":
            assert rc == abi.ABI_VERSION
            continue
        function = name.split(" ")[0]
        assert rc < 0, (name, rc)
        assert message.startswith(function + ":"), (name, message)
        if "too many ids" in name:
            assert rc == cuda.RC_BAD_ARGUMENT and "at most 2147483135" in message
        elif "too many seeds" in name:
            assert rc == cuda.RC_BAD_ARGUMENT and "at most 2147483647" in message
        elif "without types" in name:
            assert rc == cuda.RC_BAD_ARGUMENT and "need the edge types" in message
        elif "unknown element type" in name:
            assert rc == cuda.RC_BAD_ARGUMENT and "table element type 5" in message
        elif "row norm on a half" in name:
            assert rc == cuda.RC_BAD_ARGUMENT and "projected after the step" in message
        else:
            assert rc == cuda.RC_CUDA_ERROR
            assert "cudaErrorInsufficientDriver" in message or "no CUDA driver" in message, message


def test_gather_of_one_id_no_longer_aborts_and_raises_naming_the_call(no_driver: Path) -> None:
    """The crash of issue 19, in process now: the error code becomes a CudaCoreError."""
    lib = abi.load(no_driver, abi.CUDA)
    bad = ctypes.c_int64(0)
    rc = lib.gt_cuda_gather(1, None, None, 4, 10, None, 0, None, None, 256, ctypes.byref(bad))
    with pytest.raises(
        cuda.CudaCoreError, match=r"gt_cuda_gather failed: gt_cuda_gather: .*cudaErrorInsufficientDriver"
    ):
        cuda._raise(lib, rc, "gt_cuda_gather")


def test_probe_says_there_is_no_driver(no_driver: Path) -> None:
    found = cuda.probe_library(abi.load(no_driver, abi.CUDA))
    assert not found.ok
    assert "no CUDA driver" in found.reason or "cudaErrorInsufficientDriver" in found.reason
    assert found.runtime // 1000 >= 12 and found.driver == 0
    assert "driver none" in found.describe()


def test_available_is_false_here_with_a_reason() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/gpu checks the core on it")
    assert not cuda.available()
    assert cuda.unavailable_reason()


def test_unbuilt_core_is_unavailable_and_says_how_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_library_path", lambda: None)
    cuda._lib.cache_clear()
    cuda.probe.cache_clear()
    try:
        assert not cuda.available()
        assert "make cuda" in cuda.unavailable_reason()
    finally:
        cuda._lib.cache_clear()
        cuda.probe.cache_clear()


def test_a_call_where_the_core_cannot_run_raises_its_reason(
    no_driver: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = abi.load(no_driver, abi.CUDA)
    monkeypatch.setattr(cuda, "_lib", lambda: lib)
    monkeypatch.setattr(cuda, "probe", lambda device=0: cuda.probe_library(lib, device))
    with pytest.raises(cuda.CudaUnavailable, match="cannot run on cuda:0: .*driver"):
        cuda._ready(SimpleNamespace(device=GPU0))  # type: ignore[arg-type]


def test_torch_of_another_cuda_major_makes_the_core_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    class Lib:
        def gt_cuda_probe(self, device: int, info: ctypes.Array) -> int:
            info[0], info[1], info[2], info[3] = 13000, 13000, 1, 90
            return 0

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    found = cuda.probe_library(Lib())  # type: ignore[arg-type]
    assert not found.ok and "built with CUDA 13, torch with CUDA 12.8" in found.reason
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert cuda.probe_library(Lib()).ok  # type: ignore[arg-type]
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only" in cuda.probe_library(Lib()).reason  # type: ignore[arg-type]


# ------------------------------------------------------------------ checks before any CUDA call


def d(device: torch.device, dtype: torch.dtype, *shape: int, contiguous: bool = True) -> cuda.Desc:
    return cuda.Desc(device, dtype, tuple(shape), contiguous)


ROWS, DIM, N = 10, 4, 3
TABLE = d(GPU0, F32, ROWS, DIM)
IDS = d(GPU0, I64, N)
GRADS = d(GPU0, F32, N, DIM)


def adam_state(device: torch.device = GPU0, steps: tuple[int, ...] = (ROWS,)) -> dict[str, cuda.Desc]:
    return {
        "exp_avg": d(device, F32, ROWS, DIM),
        "exp_avg_sq": d(GPU0, F32, ROWS, DIM),
        "step": d(GPU0, I64, *steps),
    }


def args(kind: str, global_step: bool = False):  # noqa: ANN201
    return optim_args(kind, 0.01, 1e-8, 0.9, 0.999, 0.0, mean=False, global_step=global_step)


def test_valid_descriptions_pass() -> None:
    cuda.check_step(args("adam"), TABLE, adam_state(), IDS, GRADS)
    cuda.check_step(args("adam", global_step=True), TABLE, adam_state(steps=(1,)), IDS, GRADS)
    cuda.check_step(args("rowwise_adagrad"), TABLE, {"sum": d(GPU0, F32, ROWS)}, IDS, GRADS)
    cuda.check_step(args("adagrad"), TABLE, {"sum": d(GPU0, F32, ROWS, DIM)}, IDS, GRADS)
    cuda.check_step(args("sgd"), TABLE, {}, IDS, GRADS)
    cuda.check_step(args("sgd"), d(torch.device("cuda"), F32, ROWS, DIM), {}, IDS, GRADS)  # cuda = cuda:0
    cuda.check_gather(TABLE, IDS)
    cuda.check_scatter(TABLE, IDS, GRADS)


@pytest.mark.parametrize(
    ("table", "state", "ids", "grads", "message"),
    [
        (d(CPU, F32, ROWS, DIM), None, IDS, GRADS, "needs a table on a GPU"),
        (d(GPU0, torch.float64, ROWS, DIM), None, IDS, GRADS, "2-D float32"),
        (d(GPU0, F32, ROWS, DIM, contiguous=False), None, IDS, GRADS, "contiguous 2-D"),
        (TABLE, None, d(GPU0, I64, N, 1), GRADS, r"ids must be 1-D, got shape \(3, 1\)"),
        (TABLE, None, d(GPU0, torch.int32, N), GRADS, "ids must be torch.int64"),
        (TABLE, None, d(GPU1, I64, N), GRADS, "ids is on cuda:1; the table is on cuda:0"),
        (TABLE, None, d(CPU, I64, N), GRADS, "ids is on cpu; the table is on cuda:0"),
        (TABLE, None, IDS, d(GPU1, F32, N, DIM), "grads is on cuda:1"),
        (TABLE, None, IDS, d(GPU0, F32, N + 1, DIM), r"grads must have shape \(3, 4\)"),
        (TABLE, None, IDS, d(GPU0, F32, N, DIM + 1), r"grads must have shape \(3, 4\)"),
        (TABLE, None, IDS, d(GPU0, F32, N, DIM, contiguous=False), "grads must be contiguous"),
        (TABLE, adam_state(GPU1), IDS, GRADS, "state 'exp_avg' is on cuda:1"),
        (TABLE, adam_state(CPU), IDS, GRADS, "state 'exp_avg' is on cpu"),
        (TABLE, adam_state(steps=(1,)), IDS, GRADS, r"state 'step' must have shape \(10,\)"),
        (TABLE, {"exp_avg": adam_state()["exp_avg"]}, IDS, GRADS, "needs entries"),
    ],
)
def test_step_refuses_before_any_cuda_call(table, state, ids, grads, message) -> None:  # noqa: ANN001
    with pytest.raises(SparseInputError, match=message):
        cuda.check_step(args("adam"), table, adam_state() if state is None else state, ids, grads)


def test_rowwise_state_of_the_wrong_shape_or_device_is_refused() -> None:
    with pytest.raises(SparseInputError, match=r"state 'sum' must have shape \(10,\)"):
        cuda.check_step(args("rowwise_adagrad"), TABLE, {"sum": d(GPU0, F32, ROWS, DIM)}, IDS, GRADS)
    with pytest.raises(SparseInputError, match="state 'sum' is on cuda:1"):
        cuda.check_step(args("adagrad"), TABLE, {"sum": d(GPU1, F32, ROWS, DIM)}, IDS, GRADS)


def test_scatter_checks_the_values_shape_and_gather_the_ids() -> None:
    with pytest.raises(SparseInputError, match=r"values must have shape \(3, 4\), got \(3, 5\)"):
        cuda.check_scatter(TABLE, IDS, d(GPU0, F32, N, DIM + 1))
    with pytest.raises(SparseInputError, match=r"values must have shape \(3, 4\), got \(2, 4\)"):
        cuda.check_scatter(TABLE, IDS, d(GPU0, F32, N - 1, DIM))
    with pytest.raises(SparseInputError, match="values is on cuda:1"):
        cuda.check_scatter(TABLE, IDS, d(GPU1, F32, N, DIM))
    with pytest.raises(SparseInputError, match="ids must be 1-D"):
        cuda.check_gather(TABLE, d(GPU0, I64, N, 2))
    with pytest.raises(SparseInputError, match="at most"):
        cuda.check_gather(TABLE, d(GPU0, I64, 2**31))


def test_sampling_checks_the_graph_and_seeds_before_any_cuda_call() -> None:
    graph = (d(GPU0, I64, ROWS + 1), d(GPU0, I64, 40))
    cuda.check_sample(*graph, IDS)
    for args_, message in [
        ((d(CPU, I64, ROWS + 1), graph[1], IDS), "samples a graph on a GPU, this one is on cpu"),
        ((graph[0], d(GPU1, I64, 40), IDS), "indices is on cuda:1; the graph's indptr is on cuda:0"),
        ((*graph, d(GPU0, torch.int32, N)), "seeds must be torch.int64"),
        ((*graph, d(GPU0, I64, N, 2)), "seeds must be 1-D"),
        ((d(GPU0, I64, 0), graph[1], IDS), "at least one entry"),
        ((*graph, d(GPU0, I64, 2**31)), "at most"),
    ]:
        with pytest.raises(SparseInputError, match=message):
            cuda.check_sample(*args_)


def test_public_calls_refuse_cpu_tensors_before_touching_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """With real (CPU) tensors: the checks run first, so the library is never asked for."""

    def no_library() -> None:
        raise AssertionError("the CUDA core was reached")

    monkeypatch.setattr(cuda, "_ready", no_library)
    table, ids = torch.zeros(ROWS, DIM), torch.tensor([1, 2], dtype=I64)
    state = {
        "step": torch.zeros(1, dtype=I64),
        "exp_avg": torch.zeros(ROWS, DIM),
        "exp_avg_sq": torch.zeros(ROWS, DIM),
    }
    with pytest.raises(SparseInputError, match="needs a table on a GPU"):
        cuda.sparse_step(args("adam", global_step=True), table, state, ids, torch.zeros(2, DIM))
    assert int(state["step"][0]) == 0  # nothing counted
    with pytest.raises(SparseInputError, match="needs a table on a GPU"):
        cuda.gather(table, ids)
    with pytest.raises(SparseInputError, match="needs a table on a GPU"):
        cuda.scatter(table, ids, torch.zeros(2, DIM))
    with pytest.raises(SparseInputError, match="expected a torch.Tensor"):
        cuda.gather(table, [1, 2])  # type: ignore[arg-type]


def test_shard_server_device_option_is_checked_where_no_gpu_is_needed() -> None:
    from graphtrain.runtime.kvstore.tables.state import ShardTensors
    from graphtrain.runtime.storage.errors import StorageError

    # --shm with cuda is allowed (host tables are shared, learnable ones go to the GPU): the GPU is checked
    with pytest.raises(StorageError, match="no such GPU here"):
        ShardTensors(0, use_shm=True, device="cuda")
    with pytest.raises(StorageError, match="not on meta"):
        ShardTensors(0, device="meta")
    for bad in ("gpu", "cuda:-1", "cuda:0,cpu"):
        with pytest.raises(StorageError, match="is not a device"):
            ShardTensors(0, device=bad)
    # before: a server with GPU tables here announced ready, then failed its first create
    with pytest.raises(StorageError, match="no such GPU here"):
        ShardTensors(0, use_shm=False, device="cuda")
    assert ShardTensors(0, device="cpu").device == CPU
