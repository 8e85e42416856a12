"""A GPU shard server end to end: `graphtrain shard-server --device cuda` holds its tables and optimizer
state on the GPU and applies pushes with the CUDA core; a trainer computing on the CPU and one computing
on the GPU train against it and end where the same training against a CPU shard server ends (within
1e-5), checkpoints included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphtrain.runtime import kvstore
from graphtrain.runtime.optim import SparseAdam
from graphtrain.runtime.tensor import DistEmbedding
from tests.runtime.conftest import TOKEN, servers

ROWS, DIM, STEPS = 20_000, 64, 5


def train(address: str, root: Path, name: str, trainer_device: str) -> torch.Tensor:
    client = kvstore.connect([address], TOKEN)
    try:
        emb = DistEmbedding(ROWS, DIM, name, client=client, init={"kind": "uniform", "seed": 1})
        opt = SparseAdam([emb], lr=0.01, step_count="global")
        g = torch.Generator().manual_seed(0)
        for _ in range(STEPS):
            ids = torch.randint(0, ROWS, (4096,), generator=g)
            target = torch.randn(4096, DIM, generator=g).to(trainer_device)
            rows = emb(ids).to(trainer_device)  # a GPU trainer computes its loss on the GPU
            ((rows - target) ** 2).sum().backward()
            opt.step()
        client.checkpoint(f"ck-{name}", root=root)
        return emb.rows(torch.arange(ROWS))
    finally:
        client.close()


@pytest.mark.timeout(300)
def test_gpu_shard_server_trains_as_a_cpu_one(tmp_path: Path) -> None:
    cpu_root, gpu_root = tmp_path / "cpu", tmp_path / "gpu"
    cpu_root.mkdir()
    gpu_root.mkdir()
    with servers(1, cpu_root) as cpu_srv, servers(1, gpu_root, "--device", "cuda") as gpu_srv:
        for trainer in ["cpu", "cuda"]:
            want = train(cpu_srv[0].address, cpu_root, f"e-{trainer}", trainer)
            got = train(gpu_srv[0].address, gpu_root, f"e-{trainer}", trainer)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for trainer in ["cpu", "cuda"]:  # the GPU server's checkpoint holds its rows and Adam state
        assert sorted((gpu_root / f"ck-{trainer}").rglob("state.exp_avg.npy"))
