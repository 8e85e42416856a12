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
