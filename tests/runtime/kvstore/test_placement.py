"""Where a GPU shard server keeps each table and how it serves it, tested without a GPU: the placement and
gather-routing decisions, the memory check with an injected source, set_optimizer's all-or-nothing
allocation, shared memory on a GPU server, and the chunked checkpoint writer run over host tensors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.kvstore.tables import state as state_mod
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.native.backend import CoreBackend
from graphtrain.runtime.native.cuda import CudaCoreError
from graphtrain.runtime.optim import OptimConfig, make_state
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage import placement as place
from graphtrain.runtime.storage.errors import StorageError
from graphtrain.runtime.storage.sizes import state_bytes

CPU, GPU0, GPU1 = torch.device("cpu"), torch.device("cuda:0"), torch.device("cuda:1")


@pytest.mark.parametrize(
    ("dtype", "row_shape", "learnable", "server", "shared", "want"),
    [
        ("float32", (16,), True, GPU1, False, GPU1),  # a learnable table: on the server's GPU
        ("float32", (16,), False, GPU0, False, CPU),  # no optimizer yet (or ever): host
        ("float32", (16,), True, CPU, False, CPU),  # a CPU server keeps everything on the host
        ("int64", (), True, GPU0, False, CPU),  # labels cannot be learnable
        ("float32", (), True, GPU0, False, CPU),  # 1-D float table: no optimizer takes it
        ("float32", (4, 4), True, GPU0, False, CPU),
        ("float64", (16,), True, GPU0, False, CPU),
        ("float32", (16,), True, GPU0, True, CPU),  # in shared memory: clients may have mapped it
        ("bfloat16", (16,), True, GPU0, False, GPU0),  # half rows: the CUDA core steps them too
        ("float16", (16,), True, GPU1, False, GPU1),
        ("bfloat16", (16,), False, GPU0, False, CPU),
    ],
)
def test_placement(dtype, row_shape, learnable, server, shared, want) -> None:
    assert place.placement(dtype, row_shape, learnable, server, shared) == want


@pytest.mark.parametrize(
    ("dtype", "row_shape", "node_data", "server", "want"),
    [
        ("float32", (16,), False, CPU, True),  # a CPU server shares every table
        ("float32", (16,), False, GPU0, False),  # a client's embedding on a GPU server: moves later
        ("float32", (16,), True, GPU0, True),  # features from the partition: shared
        ("int64", (), False, GPU0, True),
        ("int32", (), True, GPU0, True),  # masks
    ],
)
def test_shareable(dtype, row_shape, node_data, server, want) -> None:
    assert place.shareable(dtype, row_shape, node_data, server) is want


@pytest.mark.parametrize(
    ("dtype", "dim", "contiguous", "backend", "want"),
    [
        (torch.float32, 2, True, CoreBackend.CPU, place.Gather.NATIVE_CPU),
        (torch.float32, 2, True, CoreBackend.CUDA, place.Gather.CUDA_CORE),
        (torch.float32, 2, True, CoreBackend.TORCH, place.Gather.INDEX_SELECT),
        (torch.float32, 2, False, CoreBackend.CUDA, place.Gather.INDEX_SELECT),
        (torch.int64, 1, True, CoreBackend.CUDA, place.Gather.INDEX_SELECT),  # the refused pull of issue 29
        (torch.int32, 1, True, CoreBackend.CPU, place.Gather.INDEX_SELECT),
        (torch.float32, 1, True, CoreBackend.CUDA, place.Gather.INDEX_SELECT),
        (torch.float32, 3, True, CoreBackend.CUDA, place.Gather.INDEX_SELECT),
        (torch.float64, 2, True, CoreBackend.CUDA, place.Gather.INDEX_SELECT),
    ],
)
def test_gather_route(dtype, dim, contiguous, backend, want) -> None:
    assert place.gather_route(dtype, dim, contiguous, backend) is want


@pytest.mark.parametrize(
    ("exc", "sticky"),
    [
        (CudaCoreError("CUDA core call gt_cuda_sparse_step failed: step: cudaErrorIllegalAddress"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), True),
        (CudaCoreError("CUDA core call gt_cuda_gather failed: cudaErrorLaunchFailure"), True),
        (RuntimeError("CUDA error: device-side assert triggered"), True),
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
        (CudaCoreError("CUDA core call gt_cuda_gather failed: cudaErrorMemoryAllocation"), False),
        (StorageError("id 5 is outside an illegal memory access"), False),  # a client's words, not CUDA's
        (ValueError("illegal memory access"), False),
        (KeyError("x"), False),
    ],
)
def test_is_sticky(exc: BaseException, sticky: bool) -> None:
    assert place.is_sticky(exc) is sticky


def test_fits_asks_the_device_it_allocates_on() -> None:
    asked: list[torch.device] = []

    def free(device: torch.device) -> int:
        asked.append(device)
        return 1 << 30 if device.type == "cuda" else 1 << 40

    place.fits("t", 1 << 29, GPU1, free)
    with pytest.raises(StorageError, match=r"table 't' needs 2.00 GiB; cuda:1 has 1.00 GiB available"):
        place.fits("table 't'", 2 << 30, GPU1, free)
    place.fits("t", 2 << 30, CPU, free)
    assert asked == [GPU1, GPU1, CPU]


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("step_count", ["row", "global"])
def test_state_bytes_is_what_make_state_allocates(kind: str, step_count: str) -> None:
    cfg = OptimConfig(kind=kind, lr=0.1, step_count=step_count)  # type: ignore[arg-type]
    made = make_state(cfg, 37, 5)
    assert state_bytes(kind, step_count, 37, 5) == sum(v.numel() * v.element_size() for v in made.values())


def test_a_create_that_does_not_fit_is_refused_by_the_injected_source() -> None:
    s = ShardTensors(0, free=lambda device: 1000)
    with pytest.raises(StorageError, match="table 'big' needs"):
        s.create("big", 1000, (4,), "float32", 0, 1000)
    assert "big" not in s.tensors
    s.create("small", 10, (4,), "float32", 0, 10)


ADAM = {"kind": "adam", "lr": 0.1}


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError("CUDA out of memory"), MemoryError()])
def test_set_optimizer_that_cannot_allocate_leaves_the_table_working(monkeypatch, error) -> None:
    s = ShardTensors(0)
    t = s.create("emb", 100, (8,), "float32", 0, 100, {"kind": "uniform", "seed": 1})
    before = t.data.clone()

    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(state_mod, "make_state", failing)
    with pytest.raises(StorageError, match=r"optimizer state of 'emb': 7200 bytes do not fit on cpu"):
        s.set_optimizer("emb", ADAM)
    assert t.config is None and t.state == {}  # nothing recorded
    ids = np.arange(3, dtype=np.int64)
    assert np.array_equal(s.pull_stream("emb", ids, 1 << 20).next()[2], before[:3].numpy())
    monkeypatch.setattr(state_mod, "make_state", make_state)
    s.set_optimizer("emb", ADAM)  # the retry succeeds
    assert t.config is not None and set(t.state) == {"exp_avg", "exp_avg_sq", "step"}
    assert s.push_grad("emb", [(ids, np.ones((3, 8), np.float32))]) == (3, 0)


def test_set_optimizer_that_does_not_fit_is_refused_before_allocating() -> None:
    room = {"bytes": 1 << 30}
    s = ShardTensors(0, free=lambda device: room["bytes"])
    t = s.create("emb", 100, (8,), "float32", 0, 100)
    room["bytes"] = 100
    with pytest.raises(StorageError, match="optimizer state of 'emb' needs"):
        s.set_optimizer("emb", ADAM)
    assert t.config is None
    room["bytes"] = 1 << 30
    s.set_optimizer("emb", ADAM)
    assert t.config is not None


def test_unit_complex_needs_rows_of_pairs_and_keeps_what_a_push_touches_on_the_circle() -> None:
    """RotatE's relation constraint on a server table: refused on rows of an odd width (no table
    changes), and after a push each touched row's complex numbers have modulus 1."""
    s = ShardTensors(0)
    odd = s.create("odd", 10, (7,), "float32", 0, 10)
    with pytest.raises(StorageError, match="unit_complex needs rows of an even width"):
        s.set_optimizer("odd", {**ADAM, "unit_complex": True})
    assert odd.config is None
    s.create("rel", 10, (8,), "float32", 0, 10)
    s.set_optimizer("rel", {**ADAM, "unit_complex": True})
    ids = np.array([2, 5], dtype=np.int64)
    s.push_grad("rel", [(ids, np.ones((2, 8), np.float32))])
    rows = s.pull_stream("rel", ids, 1 << 20).next()[2]
    np.testing.assert_allclose(np.hypot(rows[:, :4], rows[:, 4:]), 1.0, rtol=1e-5)


# tables of every dtype and row shape a server holds (tests/gpu pulls them from a GPU server too)
TABLES = [
    ("int64", ()),
    ("int32", ()),
    ("float32", ()),
    ("float64", (3,)),
    ("float32", (2, 3)),
    ("float32", (6,)),
]


@pytest.mark.parametrize(("dtype", "row_shape"), TABLES)
def test_every_dtype_and_shape_can_be_pulled(dtype: str, row_shape: tuple[int, ...]) -> None:
    s = ShardTensors(0)
    t = s.create("t", 50, row_shape, dtype, 10, 50)
    values = torch.arange(t.data.numel()).reshape(t.data.shape).to(t.data.dtype)
    t.data.copy_(values)
    ids = np.array([49, 10, 17, 17], dtype=np.int64)
    stream = s.pull_stream("t", ids, 1 << 20)
    out = torch.empty((len(ids), *row_shape), dtype=t.data.dtype)
    assert np.array_equal(stream.next(out)[2], values[ids - 10].numpy())


def test_a_gpu_server_shares_node_data_but_not_the_tables_that_move_to_the_gpu(monkeypatch) -> None:
    """--shm with --device cuda: labels, masks and features stay shared; a client's float32 table, which
    moves to the GPU when its optimizer attaches, is never put in shared memory, so no client maps a copy
    that would go stale."""
    monkeypatch.setattr(state_mod, "check_usable", lambda device: None)  # no GPU here: none is touched
    s = ShardTensors(0, use_shm=True, shm_prefix=f"gt-placement-{os.getpid()}", device="cuda")
    try:
        feat = s.create("ndata.feat", 10, (4,), "float32", 0, 10, node_data=True)
        label = s.create("ndata.label", 10, (), "int64", 0, 10, node_data=True)
        counts = s.create("counts", 10, (), "int64", 0, 10)
        emb = s.create("emb", 10, (4,), "float32", 0, 10)
        assert feat.shm is not None and label.shm is not None and counts.shm is not None
        assert emb.shm is None and emb.data.device == CPU  # on the host until set_optimizer
        assert place.placement(emb.dtype, emb.row_shape, True, s.device, emb.shm is not None) == s.device
        assert place.placement(feat.dtype, feat.row_shape, True, s.device, feat.shm is not None) == CPU
    finally:
        s.close()


@pytest.mark.parametrize("optimizer", [None, {"kind": "adam", "lr": 0.1, "step_count": "global"}, ADAM])
@pytest.mark.parametrize("chunk_bytes", [1, 100, 1 << 20])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_chunked_checkpoint_writes_what_the_whole_one_writes(
    tmp_path: Path, optimizer, chunk_bytes, dtype: str
) -> None:
    """gpu.save_chunked over host tensors (the same code a GPU table runs, less the device copies):
    the files hold what np.save of the whole tensors holds (a bfloat16 table's rows as their bits), the
    manifest hashes them and a restore brings the rows and state back."""
    s = ShardTensors(0)
    t = s.create("emb", 37, (5,), dtype, 0, 37, {"kind": "normal", "seed": 3})
    if optimizer:
        s.set_optimizer("emb", optimizer)
        s.push_grad("emb", [(np.arange(0, 37, 3, dtype=np.int64), np.ones((13, 5), np.float32))], step=4)
    ckpt.write_piece(tmp_path / "whole", t)
    view = t  # what ShardTensors.checkpoint passes for a GPU table: its tensors at the start
    piece = ckpt.write_piece(tmp_path / "chunked", view, lambda d, v: gpu.save_chunked(d, v, t, chunk_bytes))
    whole = ckpt.piece_dir(tmp_path / "whole", "emb", 0, 37)
    chunked = ckpt.piece_dir(tmp_path / "chunked", "emb", 0, 37)
    names = sorted(p.name for p in whole.glob("*.npy"))
    assert names == sorted(p.name for p in chunked.glob("*.npy"))
    for name in names:
        a, b = np.load(whole / name), np.load(chunked / name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    ckpt.write_top(tmp_path / "chunked", [piece], 1)
    fresh = ShardTensors(0).create("emb", 37, (5,), dtype, 0, 37)
    assert ckpt.restore_into(tmp_path / "chunked", fresh)
    assert torch.equal(fresh.data, t.data)
    for key, value in t.state.items():
        assert torch.equal(fresh.state[key], value), key


@pytest.mark.parametrize(("text", "want"), [("cpu", "cpu"), ("cuda", "cuda:0"), ("cuda:1", "cuda:1")])
def test_a_bare_cuda_device_is_the_first_gpu(text: str, want: str) -> None:
    assert state_mod.table_device(text) == torch.device(want)
