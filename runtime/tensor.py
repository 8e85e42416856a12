"""Distributed tensors over the shard servers: the partition book, DistTensor and DistEmbedding.

Ownership is a range lookup: ids are relabeled so that each partition owns one contiguous range, and
the partition book is the num_parts+1 boundaries. A DistTensor reads and writes rows of any shape on
their owning shards (one request per shard, all in flight together); a DistEmbedding is a float32 (or
float16 / bfloat16) DistTensor with a sparse optimizer on the servers, whose rows take part in autograd like
SparseEmbedding's. The same code runs standalone (in-process shards) and distributed (ZMQ shards):
only the KVClient's transport differs.

    client = kvstore.connect(addresses, token)        # or kvstore.standalone()
    emb = DistEmbedding(n, 128, "node", client=client, init={"kind": "uniform", "low": -1, "high": 1})
    opt = SparseAdam([emb], lr=0.003)
    loss = model(emb(ids)).sum(); loss.backward(); opt.step()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from graphtrain.runtime import dtypes
from graphtrain.runtime.kvstore import default_client
from graphtrain.runtime.kvstore.client import direct
from graphtrain.runtime.kvstore.client.kvclient import KVClient
from graphtrain.runtime.kvstore.client.local import sum_local
from graphtrain.runtime.optim.capture import GradientCapture
from graphtrain.runtime.optim.config import OptimConfig
from graphtrain.runtime.storage.keyed import share_bounds
from graphtrain.runtime.storage.shard import TensorShard


@dataclass(frozen=True)
class PartitionBook:
    """Row ranges of the partitions: partition p owns rows [bounds[p], bounds[p+1])."""

    bounds: np.ndarray

    def __post_init__(self) -> None:
        b = np.asarray(self.bounds, dtype=np.int64)
        if b.ndim != 1 or len(b) < 2 or b[0] != 0 or np.any(np.diff(b) < 0):
            raise ValueError(f"partition bounds must be non-decreasing from 0, got {self.bounds}")
        object.__setattr__(self, "bounds", b)

    @classmethod
    def even(cls, num_rows: int, num_parts: int) -> PartitionBook:
        """Equal contiguous ranges (tables not keyed by graph nodes)."""
        return cls(np.array([num_rows * p // num_parts for p in range(num_parts + 1)], dtype=np.int64))

    @property
    def num_parts(self) -> int:
        return len(self.bounds) - 1

    @property
    def num_rows(self) -> int:
        return int(self.bounds[-1])

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bounds, ids, side="right") - 1

    def range(self, part: int) -> tuple[int, int]:
        return int(self.bounds[part]), int(self.bounds[part + 1])


@dataclass(frozen=True)
class DynamicVocabulary:
    """Arbitrary int64 keys mapped to rows on first sight by the shard that owns them (key mod shards),
    `capacity` rows in all; a full shard refuses (evict False) or evicts its least recently used rows
    (storage/keyed.py)."""

    capacity: int
    evict: bool = False


def _book(book: PartitionBook | None, num_rows: int, client: KVClient) -> PartitionBook:
    book = book or PartitionBook.even(num_rows, client.num_shards)
    if book.num_rows != num_rows:
        raise ValueError(f"partition book covers {book.num_rows} rows, the tensor has {num_rows}")
    if book.num_parts != client.num_shards:
        raise ValueError(
            f"partition book has {book.num_parts} parts but there are {client.num_shards} shards"
        )
    return book


class DistTensor:
    """A (num_rows, *row_shape) tensor whose rows live on the shard owning them.

    `t[ids]` pulls rows, `t[ids] = values` overwrites them. Creating a DistTensor that exists with the
    same description attaches to it (every trainer may create the same tensors)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        name: str,
        init: dict[str, Any] | None = None,
        book: PartitionBook | None = None,
        client: KVClient | None = None,
        vocabulary: DynamicVocabulary | None = None,
    ):
        """`vocabulary`: the ids are keys of a dynamic vocabulary (no partition book: key mod shards)."""
        wire = dtypes.wire_name(dtype) if isinstance(dtype, torch.dtype) else None
        if wire is None:
            raise ValueError(f"DistTensor dtype must be torch's one of {list(dtypes.NUMPY)}, got {dtype}")
        if len(shape) < 1:
            raise ValueError("a DistTensor needs at least one dimension (rows)")
        self.client = client or default_client()
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.wire = wire
        self.np_dtype = dtypes.NUMPY[wire]
        self.keyed = vocabulary is not None
        if vocabulary is None:
            self.book = _book(book, self.shape[0], self.client)
            self.client.create(name, self.shape[0], self.shape[1:], wire, self.book.bounds, init)
            return
        if vocabulary.capacity < self.client.num_shards:
            raise ValueError(
                f"{name}: a dynamic vocabulary of {vocabulary.capacity} rows cannot cover "
                f"{self.client.num_shards} shards: each needs at least one"
            )
        self.book = PartitionBook(share_bounds(vocabulary.capacity, self.client.num_shards))
        cap = vocabulary.capacity
        self.client.create(name, cap, self.shape[1:], wire, self.book.bounds, init, vocabulary.evict)

    def __len__(self) -> int:
        return self.shape[0]

    def _ids(self, ids: Any) -> np.ndarray:
        arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: ids must be integers, got {arr.dtype}")
        return np.ascontiguousarray(arr.reshape(-1), dtype=np.int64)

    def __getitem__(self, ids: Any) -> torch.Tensor:
        return self.pull(ids)

    def pull(self, ids: Any, insert: bool = True) -> torch.Tensor:
        """Rows of `ids`; a dynamic vocabulary's unseen keys get rows, or with `insert` False read their
        initial value."""
        flat = self._ids(ids)
        rows = self.client.pull(
            self.name, flat, self.book.bounds, self.shape[1:], self.np_dtype, self.keyed, insert
        )
        shape = tuple(ids.shape) if hasattr(ids, "shape") else (len(flat),)
        return dtypes.from_numpy(rows, self.wire).view(*shape, *self.shape[1:])

    def local_sums(self, crow: np.ndarray, ids: np.ndarray, weights: np.ndarray) -> torch.Tensor | None:
        """Row v: the sum over e in [crow[v], crow[v + 1]) of weights[e] * row ids[e], read where every
        shard's rows lie mapped in this process or host (a float32 matrix of fixed rows), with none of
        the rows copied out; None where they do not: pull the rows instead."""
        if self.keyed or self.dtype != torch.float32 or len(self.shape) != 2:
            return None
        c, width = self.client, self.shape[1]
        out = sum_local(c.transport, self.name, crow, ids, weights, self.book.bounds, width, c.local_path)
        return None if out is None else torch.from_numpy(out)

    def __setitem__(self, ids: Any, values: Any) -> None:
        flat = self._ids(ids)
        if isinstance(values, torch.Tensor):
            vals = dtypes.to_numpy(values.detach().cpu().to(self.dtype).contiguous())
        else:
            vals = np.asarray(values)
        vals = np.ascontiguousarray(vals.reshape(len(flat), *self.shape[1:]), dtype=self.np_dtype)
        self.client.push(self.name, flat, vals, self.book.bounds, self.keyed)


def pull_together(tables: list[DistTensor], ids: list[np.ndarray]) -> list[torch.Tensor]:
    """The rows of `ids[i]` of `tables[i]`, all in one exchange (KVClient.pull_many: a shard asked for
    several tables' rows at once, one round trip): a step's features, labels and embedding rows. The
    tables share one client and none is a dynamic vocabulary's."""
    client = tables[0].client
    if any(t.client is not client or t.keyed for t in tables):
        raise ValueError("pull_together: the tables must share one client and have fixed rows")
    flat = [t._ids(i) for t, i in zip(tables, ids, strict=True)]  # noqa: SLF001 - this module's own
    rows = client.pull_many(
        [(t.name, f, t.book.bounds, t.shape[1:], t.np_dtype) for t, f in zip(tables, flat, strict=True)]
    )
    return [
        dtypes.from_numpy(r, t.wire).view(len(f), *t.shape[1:])
        for t, f, r in zip(tables, flat, rows, strict=True)
    ]


class DistEmbedding:
    """A learnable table sharded over the servers, trained by the sparse optimizers.

    `emb(ids)` pulls the rows (all owning shards in parallel) as a leaf that takes part in autograd; the
    optimizer's step() deduplicates the gradients on the client and pushes each shard its rows, where the
    native core applies the update (one writer per row). `dtype` float16 or bfloat16: the servers hold
    and send the rows in half (half the memory and pull bytes), the model reads them widened to float32,
    and the reduced gradients cross a socket in the table's type (through shared memory or in process
    in float32) to a step in float32 rounded back stochastically."""

    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        name: str,
        init: dict[str, Any] | None = None,
        book: PartitionBook | None = None,
        client: KVClient | None = None,
        vocabulary: DynamicVocabulary | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        if num_embeddings < 1 or dim < 1:
            raise ValueError(f"embedding {name!r}: num_embeddings and dim must be >= 1")
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"embedding {name!r}: dtype must be float32, float16 or bfloat16, got {dtype}")
        self.num_embeddings = num_embeddings
        self.dim = dim
        self.name = name
        self.table = DistTensor(
            (num_embeddings, dim),
            dtype,
            name,
            init or {"kind": "uniform", "low": -1.0, "high": 1.0},
            book,
            client,
            vocabulary,
        )
        self.config: OptimConfig | None = None
        self.steps = 0
        self._capture = GradientCapture(dim)
        self._split: tuple[torch.Tensor, direct.Split] | None = None  # the last direct pull's ids, split

    @property
    def client(self) -> KVClient:
        return self.table.client

    def __call__(self, ids: torch.Tensor, pulled: torch.Tensor | None = None) -> torch.Tensor:
        """The rows of `ids` as a leaf that takes part in autograd: on the GPU the shards' pieces live on
        when they are in this process (standalone), else in host memory. `pulled`: those rows, pulled
        already (pull_together, with the batch's features), as this client reads them now."""
        flat = ids.reshape(-1).to(torch.int64)
        pieces = self.direct_pieces()
        if pulled is not None:
            rows = pulled.reshape(len(flat), self.dim).float()
        elif pieces is not None:
            flat = flat.to(pieces[0].data.device, non_blocking=True)
            parts = direct.split_for(pieces, flat, "pull")
            rows = direct.pull(pieces, flat, parts).float()  # widened from half
            if torch.is_grad_enabled():  # its push (the same ids tensor) reuses the split
                self._split = (flat, parts)
        else:
            rows = self.table.pull(flat, insert=torch.is_grad_enabled()).float()  # widened from half
        return self._capture.rows(flat, rows).view(*ids.shape, self.dim)

    def stand_in(self, ids: torch.Tensor) -> torch.Tensor:
        """A leaf for the rows of `ids` that is never read, only given their gradient, which the optimizer's
        step pushes as it pushes pulled rows' (a layer that reads the rows' mean where they lie:
        loader.MeanInput). One zero row broadcast: nothing is pulled or written."""
        flat = ids.reshape(-1).to(torch.int64)
        return self._capture.rows(flat, torch.zeros(1, self.dim).expand(len(flat), self.dim))

    def direct_pieces(self) -> list[TensorShard] | None:
        """The shards' pieces of this table, when they can be used where they lie (kvstore/client/direct.py);
        only once the optimizer is set, which fixed their place."""
        return None if self.config is None or self.table.keyed else self.client.direct(self.name)

    @property
    def device(self) -> torch.device:
        """Where its rows come from and its gradients go: the GPU of standalone's direct path, else the
        host."""
        pieces = self.direct_pieces()
        return torch.device("cpu") if pieces is None else pieces[0].data.device

    def attach(self, config: OptimConfig) -> None:
        """Give the table an optimizer on every shard (idempotent for the same config)."""
        if self.config is not None and self.config != config:
            raise ValueError(f"embedding {self.name!r} already has optimizer {self.config.kind}")
        self.client.set_optimizer(self.name, dataclasses.asdict(config))
        self.config = config

    def pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._capture.pending()

    def clear(self) -> None:
        self._capture.clear()

    def apply_gradients(
        self, ids: torch.Tensor, grads: torch.Tensor, backend: str | None = None, wait: bool = True
    ) -> int:
        """Deduplicate and push (ids, grads); the shards apply the optimizer. Returns unique rows pushed.
        wait=False: return once sent; the client's next request, push or read of this table waits for the
        update (KVClient.push_grad)."""
        if self.config is None:
            raise ValueError(f"embedding {self.name!r} has no optimizer")
        self.steps += 1
        pieces = self.direct_pieces()
        known, self._split = self._split, None
        if pieces is not None and ids.device == pieces[0].data.device:
            parts = known[1] if known is not None and known[0] is ids else None
            return direct.push_grad(pieces, ids, grads.detach(), self.steps, parts)
        return self.client.push_grad(
            self.name,
            ids.cpu().numpy(),
            grads.detach().cpu().numpy(),
            self.table.book.bounds,
            mean=self.config.duplicate == "mean",
            step=self.steps,
            wait=wait,
            keyed=self.table.keyed,
            half=self.table.wire if self.table.wire in dtypes.HALF else None,
        )

    def rows(self, ids: Any) -> torch.Tensor:
        """Current rows without autograd (evaluation, export), where the table's rows are (`device`): a
        dynamic vocabulary's unseen keys read their initial value."""
        pieces = self.direct_pieces()
        if pieces is None:
            return self.table.pull(ids, insert=False).float()
        given = torch.as_tensor(ids)
        flat = given.reshape(-1).to(device=pieces[0].data.device, dtype=torch.int64)
        return direct.pull(pieces, flat).float().view(*given.shape, self.dim)
