"""Half-precision tables held on a GPU (issue 47, item 3): a GPU shard server's learnable float16 or
bfloat16 table moves to the GPU with its float32 state and is stepped there by the CUDA core; standalone's
direct path pulls half rows on the device and the caller reads them widened; a collective half table
lives on its trainer's GPU. Each trains as the same table on the host does: the two cores write the same
bits wherever their float32 results agree (tests/gpu/test_half_tables.py), so rows stay within a few
units in the last place of the half type, nearly all of them equal. A GPU table's chunked checkpoint holds
the rows' bits (bfloat16 as int16) and restores onto the GPU bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.checkpoint.points import pieces_of, saved_round_steps
from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.dtypes import to_numpy
from graphtrain.runtime.kvstore.client.kvclient import InProcTransport, KVClient
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.optim.optimizers import SparseOptimizer
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.tensor import DistEmbedding

HALF = ["float16", "bfloat16"]
ROWS, DIM, STEPS = 5000, 32, 5
ADAM = {"kind": "adam", "lr": 0.05, "step_count": "global"}
INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 3}


def close_in_half(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """Rows of a half table trained on two devices: within 4 units in the last place of `dtype` (each step's
    rounding may straddle a cut where the two float32 results differ in their last bits, and what a moved
    row feeds back), and at least 98 % of the elements equal."""
    got, want = got.float().cpu(), want.float().cpu()
    eps = torch.finfo(dtype).eps
    bound = 4 * eps * torch.maximum(got.abs(), want.abs()) + 1e-6
    worst = float(((got - want).abs() - bound).max())
    assert worst <= 0, f"{dtype}: {worst} beyond 4 units in the last place"
    assert float((got == want).float().mean()) >= 0.98


def server_steps(s: ShardTensors, dtype: str) -> None:
    """STEPS Adam steps on "emb", gradients in float32 and (every other step) in the table's own type,
    as a half table's pushes cross a socket."""
    g = np.random.default_rng(0)
    for step in range(1, STEPS + 1):
        ids = g.choice(ROWS, 1000, replace=False).astype(np.int64)
        grads = g.standard_normal((1000, DIM)).astype(np.float32)
        if step % 2 == 0:
            grads = to_numpy(torch.from_numpy(grads).to(getattr(torch, dtype)))
        s.push_grad("emb", [(ids, grads)], step)


def served(s: ShardTensors) -> np.ndarray:
    return s.pull_stream("emb", np.arange(ROWS, dtype=np.int64), 1 << 30).next()[2]


@pytest.mark.parametrize("dtype", HALF)
def test_a_gpu_server_holds_a_half_table_on_the_gpu_and_trains_it_as_a_cpu_server(dtype: str) -> None:
    kind = getattr(torch, dtype)
    rows = []
    for device in ("cuda", "cpu"):
        s = ShardTensors(0, device=device)
        t = s.create("emb", ROWS, (DIM,), dtype, 0, ROWS, {"kind": "normal", "std": 0.1, "seed": 1})
        before = t.data.clone()
        s.set_optimizer("emb", ADAM)
        assert t.data.device.type == device and t.data.dtype == kind
        assert all(v.dtype != kind for v in t.state.values())  # the state stays float32 (and the step)
        server_steps(s, dtype)
        assert not torch.equal(t.data.cpu(), before)
        pulled = served(s)
        assert pulled.itemsize == 2 and np.array_equal(pulled, to_numpy(t.data.cpu()))  # the rows' bits
        rows.append(t.data)
    close_in_half(rows[0], rows[1], kind)


@pytest.mark.parametrize("chunk_bytes", [1000, 1 << 26])
@pytest.mark.parametrize("dtype", HALF)
def test_a_half_gpu_checkpoint_holds_the_bits_and_restores_onto_the_gpu(
    tmp_path: Path, dtype: str, chunk_bytes: int
) -> None:
    s = ShardTensors(0, device="cuda")
    t = s.create("emb", ROWS, (DIM,), dtype, 0, ROWS, {"kind": "normal", "seed": 1})
    s.set_optimizer("emb", ADAM)
    server_steps(s, dtype)
    piece = ckpt.write_piece(tmp_path / "ck", t, lambda d, v: gpu.save_chunked(d, v, t, chunk_bytes))
    ckpt.write_top(tmp_path / "ck", [piece], 1)
    d = tmp_path / "ck" / piece["dir"]
    assert np.array_equal(np.load(d / "data.npy"), to_numpy(t.data.cpu()))
    for key, value in t.state.items():
        assert np.array_equal(np.load(d / f"state.{key}.npy"), value.cpu().numpy()), key
    ckpt.verify_checkpoint(tmp_path / "ck")
    exported = ckpt.export_table(tmp_path / "ck", "emb")  # widened to float32
    assert exported.dtype == np.float32 and np.array_equal(exported, t.data.float().cpu().numpy())
    for device in ("cuda", "cpu"):  # onto a GPU server, and a CPU one, bit for bit
        r = ShardTensors(0, device=device, restore_from=tmp_path / "ck").create(
            "emb", ROWS, (DIM,), dtype, 0, ROWS
        )
        assert r.data.device.type == device and r.config is not None
        assert torch.equal(r.data.cpu(), t.data.cpu()) and int(r.state["step"][0]) == STEPS
    assert s.checkpoint(tmp_path / "whole")  # the server's own path (64 MB chunks)
    assert s.checkpoint(tmp_path / "bg", background=True) == []  # frozen on the device, written by a thread
    server_steps(s, dtype)  # training goes on while it is written
    assert s.background is not None and s.background.wait(60), "not written in 60 s"
    status = s.checkpoint_status(tmp_path / "bg")
    assert status["state"] == "done", status
    ckpt.write_top(tmp_path / "bg", status["pieces"], 1)
    assert np.array_equal(ckpt.export_table(tmp_path / "bg", "emb"), exported)
    # the count the rows were rounded with, not the live table's (a resumed run's seeds go on from it)
    assert saved_round_steps(pieces_of(tmp_path / "bg", "emb")) == STEPS and t.steps == 2 * STEPS


def standalone(device: str, dtype: torch.dtype) -> DistEmbedding:
    """Two in-process shards with their tables on `device`, for a trainer there (standalone)."""
    states = [ShardTensors(s, device=device) for s in range(2)]
    client = KVClient(
        InProcTransport(states, direct_to=torch.device(device, 0) if device == "cuda" else None)
    )
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client, dtype=dtype)
    emb.attach(OptimConfig("adam", 0.01, step_count="global"))
    return emb


def train(table: DistEmbedding | CollectiveEmbedding, device: str) -> None:
    """STEPS steps of a loss over Zipf ids (hub rows many times per batch), computed on `device`."""
    config = table.config
    assert config is not None
    opt = SparseOptimizer([table], config)
    g = np.random.default_rng(7)
    w = torch.linspace(-1.0, 1.0, DIM, device=device)
    for _ in range(STEPS):
        ids = torch.from_numpy((g.zipf(1.2, 2048) - 1) % ROWS)
        rows = table(ids.to(device))
        assert rows.dtype == torch.float32 and rows.device.type == device  # widened where it was read
        ((rows * w).sum(-1) ** 2).sum().backward()
        opt.step()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_standalone_half_tables_on_the_gpu_train_where_they_lie_as_host_tables_do(dtype: torch.dtype) -> None:
    on_gpu, on_host = standalone("cuda", dtype), standalone("cpu", dtype)
    pieces = on_gpu.client.direct("emb")
    assert pieces is not None and all(p.data.is_cuda and p.data.dtype == dtype for p in pieces)
    assert on_host.client.direct("emb") is None
    train(on_gpu, "cuda")
    train(on_host, "cpu")
    ids = torch.arange(ROWS)
    got = on_gpu.rows(ids)
    assert got.is_cuda and got.dtype == torch.float32
    close_in_half(got, on_host.rows(ids), dtype)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_collective_half_table_on_the_gpu_trains_as_on_the_cpu(dtype: torch.dtype, dynamic: bool) -> None:
    tables = []
    for device in ("cuda", "cpu"):
        t = CollectiveEmbedding(
            ROWS, DIM, "h", INIT, device=device, dtype=dtype, capacity=ROWS if dynamic else None
        )
        t.attach(OptimConfig("adam", 0.01, step_count="global"))
        assert t.weight.device.type == device and t.weight.dtype == dtype
        train(t, device)
        tables.append(t)
    ids = torch.arange(ROWS)
    close_in_half(tables[0].rows(ids.cuda()), tables[1].rows(ids), dtype)
