"""Command lines of a local run's processes (pure): the same entry points the operator puts in pods."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessPlan:
    name: str  # shard-0, trainer-1, ...
    argv: list[str]


def entry() -> list[str]:
    return [sys.executable, "-m", "graphtrain.runtime.cli"]


def shard_server(index: int, run_dir: Path, partition: Path, threads: int | None, shm: bool) -> ProcessPlan:
    argv = [
        *entry(),
        "shard-server",
        "--shard",
        str(index),
        "--bind",
        f"ipc://{run_dir / f'shard-{index}.sock'}",
        "--partition",
        str(partition),
        "--token-file",
        str(run_dir / "token"),
        "--checkpoint-root",
        str(run_dir / "checkpoints"),
        "--restore",
        "latest",
        "--workers",
        "2",
    ]
    if shm:
        argv.append("--shm")
    return ProcessPlan(f"shard-{index}", argv)


def trainer(
    rank: int, world: int, run_dir: Path, spec_path: Path, partition: Path, servers: list[str], init: str
) -> ProcessPlan:
    argv = [
        *entry(),
        "train",
        "--spec",
        str(spec_path),
        "--partition",
        str(partition),
        "--rank",
        str(rank),
        "--world",
        str(world),
        "--init",
        init,
        "--servers",
        ",".join(servers),
        "--token-file",
        str(run_dir / "token"),
        "--run-dir",
        str(run_dir),
        "--checkpoint-root",
        str(run_dir / "checkpoints"),
    ]
    return ProcessPlan(f"trainer-{rank}", argv)
