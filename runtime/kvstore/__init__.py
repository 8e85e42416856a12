"""The shard servers and their clients: protocol, state, server, client, checkpoints, metrics.

    client = connect(["tcp://10.0.0.5:7000", ...], token)   # distributed
    client = standalone(num_shards=1)                        # the same API, shards in this process

`set_default_client` makes one client the default of DistTensor and DistEmbedding in this process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from graphtrain.runtime.kvstore.client.kvclient import KVClient

_default: KVClient | None = None


def connect(
    addresses: list[str],
    token: str,
    timeout: float = 30.0,
    retries: int = 2,
    shm: bool = False,
    fast: bool = True,
) -> KVClient:
    """A client of running shard servers (tcp:// or ipc:// addresses, one per shard, in order).

    shm: read the rows of servers on this host from their shared memory, and pass them gradients the same
    way (servers started with --shm). fast: send small pulls over the servers' fast lanes where they
    have one (client/fastlane.py)."""
    from graphtrain.runtime.kvstore.client.kvclient import KVClient, ZmqTransport
    from graphtrain.runtime.native.memory import keep_freed_memory

    keep_freed_memory()
    return KVClient(ZmqTransport(addresses, token, timeout, retries, shm, fast))


def standalone(
    num_shards: int = 1, checkpoint_root: Path | None = None, direct_to: torch.device | None = None
) -> KVClient:
    """A client whose shards live in this process: no sockets, no copies. `direct_to`: the device whose
    tables are used where they lie (InProcTransport)."""
    from graphtrain.runtime.kvstore.client.kvclient import InProcTransport, KVClient
    from graphtrain.runtime.kvstore.tables.state import ShardTensors
    from graphtrain.runtime.native.memory import keep_freed_memory

    keep_freed_memory()
    return KVClient(InProcTransport([ShardTensors(s) for s in range(num_shards)], checkpoint_root, direct_to))


def set_default_client(client: KVClient | None) -> None:
    global _default
    _default = client


def default_client() -> KVClient:
    if _default is None:
        raise RuntimeError("no shard-server client: pass client=, or call kvstore.set_default_client(...)")
    return _default
