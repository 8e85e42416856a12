"""Standalone's GPU tables used where they lie (kvstore/client/direct.py): pulls give rows on the GPU, pushes
step them there with duplicates reduced by the CUDA core, and training matches the same table on the
host path; a bad id is refused without a sticky CUDA error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphtrain.runtime.kvstore.client.kvclient import InProcTransport, KVClient
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from graphtrain.runtime.optim import OptimConfig
from graphtrain.runtime.optim.optimizers import SparseOptimizer
from graphtrain.runtime.tensor import DistEmbedding

ROWS, DIM = 20_000, 64
INIT = {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 3}


def _table(device: str, config: OptimConfig, shards: int = 2) -> DistEmbedding:
    """In-process shards with their tables on `device`, for a trainer there (standalone)."""
    states = [ShardTensors(s, device=device) for s in range(shards)]
    trainer = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
    client = KVClient(InProcTransport(states, direct_to=trainer))
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client)
    emb.attach(config)
    return emb


def _train(emb: DistEmbedding, steps: int = 5) -> None:
    opt = SparseOptimizer([emb], emb.config)  # type: ignore[arg-type]
    g = np.random.default_rng(7)
    w = torch.linspace(-1.0, 1.0, DIM)
    for _ in range(steps):
        ids = torch.from_numpy((g.zipf(1.2, 4096) - 1) % ROWS)  # hub rows many times per batch
        rows = emb(ids)
        ((rows * w.to(rows.device)).sum(-1) ** 2).sum().backward()
        opt.step()


CONFIGS = [
    OptimConfig("rowwise_adagrad", 0.1, duplicate="mean"),
    OptimConfig("adam", 0.01, step_count="global"),
    dataclasses.replace(OptimConfig("adagrad", 0.1), row_norm=1.0),
    dataclasses.replace(OptimConfig("adam", 0.01), unit_complex=True),  # RotatE's relations
]


@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: c.kind + ("-unit-complex" if c.unit_complex else "")
)
def test_gpu_tables_train_on_the_gpu_as_host_tables_do(config: OptimConfig) -> None:
    on_gpu, on_host = _table("cuda", config), _table("cpu", config)
    pieces = on_gpu.client.direct("emb")
    assert pieces is not None and all(p.data.is_cuda for p in pieces)
    assert on_gpu(torch.tensor([1, 2])).is_cuda
    assert on_gpu.device == pieces[0].data.device and on_host.device.type == "cpu"  # where KGE dedups
    _train(on_gpu)
    _train(on_host)
    ids = torch.arange(ROWS)
    assert on_gpu.rows(ids[:3]).is_cuda  # evaluation reads them where they are
    torch.testing.assert_close(on_gpu.rows(ids).cpu(), on_host.rows(ids), rtol=1e-4, atol=1e-5)


def test_the_direct_path_is_deterministic() -> None:
    config = OptimConfig("adam", 0.01)
    a, b = _table("cuda", config), _table("cuda", config)
    _train(a)
    _train(b)
    ids = torch.arange(ROWS)
    assert torch.equal(a.rows(ids), b.rows(ids))


def test_a_bad_id_is_refused_and_the_gpu_stays_usable() -> None:
    emb = _table("cuda", OptimConfig("sgd", 0.1))
    with pytest.raises(RemoteError, match=rf"ids\[1\] = {ROWS} of 'emb' is outside"):
        emb(torch.tensor([0, ROWS]))
    assert emb(torch.tensor([0, ROWS - 1])).shape == (2, DIM)
    torch.cuda.synchronize()  # no sticky error behind the refusal


def test_a_cpu_trainer_beside_gpu_tables_gets_host_rows() -> None:
    """standalone with shardServers.device cuda and trainers.device cpu: the tables are on the GPU, the
    model on the host; its rows and gradients take the protocol path."""
    states = [ShardTensors(s, device="cuda") for s in range(2)]
    client = KVClient(InProcTransport(states, direct_to=torch.device("cpu")))
    emb = DistEmbedding(ROWS, DIM, "emb", INIT, client=client)
    emb.attach(OptimConfig("adam", 0.01))
    assert all(s.tensors["emb"].data.is_cuda for s in states) and client.direct("emb") is None
    rows = emb(torch.tensor([1, 2, 3]))
    assert rows.device.type == "cpu" and emb.device.type == "cpu"
    rows.sum().backward()
    assert emb.apply_gradients(*emb.pending()) == 3
