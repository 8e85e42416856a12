"""A GPU shard server end to end: `graphtrain shard-server --device cuda` holds its learnable tables and
their optimizer state on the GPU and applies pushes with the CUDA core; a trainer computing on the CPU
and one computing on the GPU train against it and end where the same training against a CPU shard
server ends (within 1e-5; a float16 or bfloat16 table within its rounding), checkpoints included.
Started with --partition (and --shm), it serves the partition's features, labels and masks from host
memory exactly as a CPU server does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.runtime import kvstore, partition
from graphtrain.runtime.optim import SparseAdam
from graphtrain.runtime.tensor import DistEmbedding, DynamicVocabulary
from tests.gpu.test_half_gpu_tables import close_in_half
from tests.runtime.conftest import TOKEN, servers
from tests.runtime.kvstore.test_service import dense_partition

ROWS, DIM, STEPS = 20_000, 64, 5


def train(
    address: str,
    root: Path,
    name: str,
    trainer_device: str,
    vocab: DynamicVocabulary | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """STEPS Adam steps; the rows of every id (with `vocab`: of the int64 keys the ids stand for)."""
    client = kvstore.connect([address], TOKEN)
    key = (lambda ids: ids * 7_919 - 2**40) if vocab else (lambda ids: ids)
    try:
        init = {"kind": "uniform", "seed": 1}
        emb = DistEmbedding(ROWS, DIM, name, client=client, init=init, vocabulary=vocab, dtype=dtype)
        opt = SparseAdam([emb], lr=0.01, step_count="global")
        g = torch.Generator().manual_seed(0)
        for _ in range(STEPS):
            ids = key(torch.randint(0, ROWS, (4096,), generator=g))
            target = torch.randn(4096, DIM, generator=g).to(trainer_device)
            rows = emb(ids).to(trainer_device)  # a GPU trainer computes its loss on the GPU
            ((rows - target) ** 2).sum().backward()
            opt.step()
        client.checkpoint(f"ck-{name}", root=root)
        return emb.rows(key(torch.arange(ROWS)))
    finally:
        client.close()


def same_training(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """float32 tables within the cores' 1e-5; half ones within their rounding (test_half_gpu_tables.py)."""
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    else:
        close_in_half(got, want, dtype)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # float16: test_half_gpu_tables.py
def test_gpu_shard_server_trains_as_a_cpu_one(tmp_path: Path, dtype: torch.dtype) -> None:
    cpu_root, gpu_root = tmp_path / "cpu", tmp_path / "gpu"
    cpu_root.mkdir()
    gpu_root.mkdir()
    with servers(1, cpu_root) as cpu_srv, servers(1, gpu_root, "--device", "cuda") as gpu_srv:
        for trainer in ["cpu", "cuda"]:
            want = train(cpu_srv[0].address, cpu_root, f"e-{trainer}", trainer, dtype=dtype)
            got = train(gpu_srv[0].address, gpu_root, f"e-{trainer}", trainer, dtype=dtype)
            same_training(got, want, dtype)
    for trainer in ["cpu", "cuda"]:  # the GPU server's checkpoint holds its rows and Adam state
        assert sorted((gpu_root / f"ck-e-{trainer}").rglob("state.exp_avg.npy"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_dynamic_table_on_a_gpu_shard_server_trains_as_on_a_cpu_one(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    """Keys mapped on the host, rows and Adam state on the GPU: the same rows as a CPU server's, unseen
    keys read their init, and the checkpoint holds the keys."""
    cpu_root, gpu_root = tmp_path / "cpu", tmp_path / "gpu"
    cpu_root.mkdir()
    gpu_root.mkdir()
    vocab = DynamicVocabulary(ROWS)
    with servers(1, cpu_root) as cpu_srv, servers(1, gpu_root, "--device", "cuda") as gpu_srv:
        want = train(cpu_srv[0].address, cpu_root, "d", "cpu", vocab, dtype)
        got = train(gpu_srv[0].address, gpu_root, "d", "cuda", vocab, dtype)
        same_training(got, want, dtype)
    assert sorted((gpu_root / "ck-d").rglob("keys.npy"))


NODE_DATA = [
    ("ndata.feat", (5,), np.float32),
    ("ndata.label", (), np.int64),
    ("ndata.train_mask", (), np.int32),
]


def learn(client: kvstore.KVClient, bounds: np.ndarray) -> np.ndarray:
    """Five Adam steps on a learnable 600 x 16 table over the partition's nodes; its rows after them."""
    client.create("emb", 600, (16,), "float32", bounds, {"kind": "uniform", "seed": 2})
    client.set_optimizer("emb", {"kind": "adam", "lr": 0.01, "step_count": "global"})
    g = np.random.default_rng(0)
    for step in range(1, 6):
        ids = g.choice(600, 256, replace=False).astype(np.int64)
        client.push_grad("emb", ids, g.standard_normal((256, 16)).astype(np.float32), bounds, False, step)
    return client.pull("emb", np.arange(600), bounds, (16,), np.float32)


@pytest.mark.timeout(300)
def test_gpu_shard_server_with_a_partition_serves_node_data_and_trains(tmp_path: Path) -> None:
    """Before: every partition table went to the GPU and the first pull of ndata.label was refused
    ("table must be a contiguous 2-D float32 tensor, got torch.int64")."""
    _, cfg = dense_partition(tmp_path)
    bounds = partition.load_config(cfg).node_bounds
    cpu_root, gpu_root = tmp_path / "cpu", tmp_path / "gpu"
    cpu_root.mkdir()
    gpu_root.mkdir()
    part = ("--partition", str(cfg))
    with (
        servers(2, cpu_root, *part) as cpu_srv,
        servers(2, gpu_root, *part, "--device", "cuda", "--shm") as gpu_srv,
    ):
        cpu = kvstore.connect([s.address for s in cpu_srv], TOKEN)
        remote = kvstore.connect([s.address for s in gpu_srv], TOKEN)
        local = kvstore.connect([s.address for s in gpu_srv], TOKEN, shm=True)
        try:
            ids = np.random.default_rng(1).permutation(600).astype(np.int64)
            for name, shape, dtype in NODE_DATA:
                want = cpu.pull(name, ids, bounds, shape, dtype)
                for client in (remote, local):
                    got = client.pull(name, ids, bounds, shape, dtype)
                    assert got.dtype == want.dtype and np.array_equal(got, want), name
            want_rows = learn(cpu, bounds)
            got_rows = learn(remote, bounds)
            np.testing.assert_allclose(got_rows, want_rows, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(
                local.pull("emb", ids, bounds, (16,), np.float32), want_rows[ids], rtol=1e-5, atol=1e-6
            )
            # node data is read from shared memory on this host; the GPU table is not offered there
            assert local.transport.local_view(0, "ndata.label") is not None
            assert local.transport.local_view(0, "emb") is None
        finally:
            for client in (cpu, remote, local):
                client.close()
