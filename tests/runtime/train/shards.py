"""A partition's shard servers in the test process: real ShardServers (their ZMQ ports and fast lanes) for
trainers run in process against them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from graphtrain.runtime.kvstore.serving.server import ShardServer
from graphtrain.runtime.kvstore.tables.shm import job_prefix
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from tests.runtime.conftest import TOKEN


@contextlib.contextmanager
def partition_servers(
    partition: Path, checkpoint_root: Path, parts: int = 2, shm: bool = False
) -> Iterator[list[ShardServer]]:
    """One started server per part of `partition`, stopped on the way out; `shm`: its tables in shared
    memory, which a client on this host maps (as `graphtrain run`'s servers do)."""
    servers: list[ShardServer] = []
    try:
        for p in range(parts):
            state = ShardTensors(p, use_shm=shm, shm_prefix=job_prefix(TOKEN))
            state.load_partition(partition, p)
            server = ShardServer(
                state, TOKEN, "tcp://127.0.0.1:0", workers=2, checkpoint_root=checkpoint_root
            )
            servers.append(server)
            server.start()
        yield servers
    finally:
        for s in servers:
            s.stop()
