"""A local run with GPU shard servers spreads its shards over the visible GPUs (shard i on
cuda:(i mod GPUs)) and keeps host tables in shared memory for its trainers; a CPU run is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphtrain.runtime.launch import plan


@pytest.mark.parametrize(
    ("device", "gpus", "want"),
    [
        ("cpu", 0, ["cpu"] * 5),
        ("cpu", 4, ["cpu"] * 5),
        ("cuda", 1, ["cuda:0"] * 5),
        ("cuda", 2, ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]),
        ("cuda", 8, ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4"]),
        ("cuda", 0, ["cuda"] * 5),  # no GPU seen: the server refuses to start, saying so
    ],
)
def test_shard_device(device: str, gpus: int, want: list[str]) -> None:
    assert [plan.shard_device(device, i, gpus) for i in range(5)] == want


@pytest.mark.parametrize("device", ["cpu", "cuda:1"])
def test_shard_servers_share_host_tables_on_either_device(tmp_path: Path, device: str) -> None:
    where = plan.files(tmp_path, tmp_path / "spec.yaml", tmp_path / "part" / "g.json")
    argv = plan.shard_server(1, where, tmp_path, device).argv
    assert "--shm" in argv
    given = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"  # the default goes unsaid
    assert given == device


@pytest.mark.parametrize(
    ("shards", "trainers", "gpus", "needle"),
    [
        ("cpu", "cpu", 0, None),
        ("cuda", "cpu", 1, None),
        ("cpu", "cuda", 2, None),
        ("cuda", "cpu", 0, "shardServers.device cuda"),
        ("cpu", "cuda", 0, "trainers.device cuda"),
        ("cuda", "cuda", 0, "shardServers.device and trainers.device cuda"),
    ],
)
def test_a_run_on_gpus_without_any_is_refused_before_it_starts(
    shards: str, trainers: str, gpus: int, needle: str | None
) -> None:
    why = plan.missing_gpus(shards, trainers, gpus)
    assert (why is None) if needle is None else (needle in why and "shows no GPU" in why)


@pytest.mark.parametrize(
    ("backend", "replicas", "gpus", "refused"),
    [
        ("nccl", 1, 1, False),
        ("nccl", 2, 2, False),
        ("nccl", 2, 1, True),  # NCCL: "Duplicate GPU detected", after the data was loaded
        ("gloo", 2, 1, False),  # gloo trainers share the GPU
        ("gloo", 4, 1, False),
    ],
)
def test_nccl_trainers_need_a_gpu_each(backend: str, replicas: int, gpus: int, refused: bool) -> None:
    why = plan.missing_gpus("cuda", "cuda", gpus, backend, replicas)
    if not refused:
        assert why is None
    else:
        assert why is not None
        assert f"trainers.replicas is {replicas}" in why and "trainers.backend: gloo" in why
