"""A pull whose every shard is mapped in this process (standalone shards, or a host's shared memory):
read in one in-order pass by the native core (native/pull.py), with no request.

The per-shard path grouped the ids by owner (a stable sort) and gathered each shard's rows to scattered
places of the output: 1.30 ms for a WordNet batch's 13,659 feature rows of 256 over two shards, against
0.74 ms here.
"""

from __future__ import annotations

import numpy as np

from graphtrain.runtime.kvstore.client.reads import count
from graphtrain.runtime.kvstore.client.transport import Transport
from graphtrain.runtime.kvstore.wire import protocol


def pull_local(
    transport: Transport,
    name: str,
    ids: np.ndarray,
    bounds: np.ndarray,
    row_shape: tuple[int, ...],
    dtype: np.dtype,
    path: str,
) -> np.ndarray | None:
    """The rows of `ids` in their order, each read counted under `path`; None where that cannot be (a
    shard behind a socket, rows of another dtype than asked for, no native core): the caller's
    per-shard path then runs. A bad id is refused in that path's words."""
    from graphtrain.runtime.errors import SparseInputError
    from graphtrain.runtime.native.backend import CoreBackend, choose
    from graphtrain.runtime.native.pull import OutsideShard, gather_parts
    from graphtrain.runtime.optim.functional import threads

    if choose() is not CoreBackend.CPU:
        return None
    views = []
    for s in range(transport.num_shards):
        view = transport.local_view(s, name)
        if view is None or view[0].dtype != dtype or view[0].shape[1:] != tuple(row_shape):
            return None
        if not view[0].flags.c_contiguous:
            return None
        views.append(view)
    out = np.empty((len(ids), *row_shape), dtype=dtype)
    try:
        counts = gather_parts(ids, views, bounds, out, threads(out.size))
    except OutsideShard as e:
        raise protocol.ProtocolError(f"an id of {name!r} is outside shard {e.shard}'s rows") from None
    except SparseInputError as e:
        raise protocol.ProtocolError(str(e)) from None
    for s, c in enumerate(counts.tolist()):
        if c:
            count(s, path, c)
    return out
