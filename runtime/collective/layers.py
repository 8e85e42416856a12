"""Layers over embedding tables, with SOK's and DeepRec's semantics (docs/collective.md).

- `bag(table, values, offsets, combiner)`: multi-hot bags, ragged as values + offsets (SOK's
  DistributedEmbedding, torch's EmbeddingBag): one row per bag, the `sum` or the `mean` of its members'
  rows; an empty bag gives zeros. Repeated members count as often as they occur.
- `slots(ids, pad)`: SOK's fixed layout, a (batch, slot_num, max_nnz) tensor padded with `pad`, as
  values + offsets of batch * slot_num bags; `bag` of it reshaped to (batch, slot_num, dim) is SOK's
  output.
- `group_lookup(tables, ids)`: several collective tables looked up in one exchange (DeepRec's
  group_embedding_lookup_sparse): one header, one key and one row all-to-all for all of them.
- `split_embedding_parameters(objs)`: sparse tables apart from dense parameters, for the two optimizers
  (SOK's split_embedding_variable_from_others).

`bag` and `split_embedding_parameters` take any table with the lookup protocol: SparseEmbedding (in
process), DistEmbedding (shard servers) or CollectiveEmbedding (trainer ranks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

import torch

from graphtrain.runtime.collective import exchange as ex
from graphtrain.runtime.collective.embedding import CollectiveEmbedding
from graphtrain.runtime.errors import SparseInputError

Combiner = Literal["sum", "mean"]


class Table(Protocol):
    dim: int

    def __call__(self, ids: torch.Tensor) -> torch.Tensor: ...


def _check_offsets(values: torch.Tensor, offsets: torch.Tensor) -> None:
    if values.dim() != 1 or offsets.dim() != 1 or len(offsets) < 1:
        raise SparseInputError("bag: values and offsets must be 1-D, offsets with at least one entry")
    if int(offsets[0]) != 0 or int(offsets[-1]) != len(values) or bool((offsets.diff() < 0).any()):
        raise SparseInputError(
            f"bag: offsets must rise from 0 to len(values) = {len(values)}, got "
            f"{offsets[:3].tolist()}...{offsets[-1:].tolist()}"
        )


def bag(
    table: Table, values: torch.Tensor, offsets: torch.Tensor, combiner: Combiner = "sum"
) -> torch.Tensor:
    """(len(offsets) - 1, dim): bag b combines the rows of values[offsets[b]:offsets[b+1]]."""
    if combiner not in ("sum", "mean"):
        raise SparseInputError(f"bag: combiner must be 'sum' or 'mean', got {combiner!r}")
    values = values.reshape(-1).to(torch.int64)
    offsets = offsets.to(device=values.device, dtype=torch.int64)
    _check_offsets(values, offsets)
    rows = table(values)
    lengths = offsets.diff()
    member_of = torch.repeat_interleave(torch.arange(len(lengths), device=values.device), lengths)
    out = rows.new_zeros((len(lengths), table.dim)).index_add(0, member_of.to(rows.device), rows)
    if combiner == "mean":
        out = out / lengths.clamp_min(1).to(out.device, out.dtype).unsqueeze(1)
    return out


def slots(ids: torch.Tensor, pad: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """values, offsets of a (batch, slot_num, max_nnz) tensor whose unused places hold `pad`."""
    if ids.dim() != 3:
        raise SparseInputError(f"slots: ids must be (batch, slot_num, max_nnz), got shape {tuple(ids.shape)}")
    flat = ids.reshape(-1, ids.shape[2])
    keep = flat != pad
    offsets = torch.zeros(len(flat) + 1, dtype=torch.int64, device=ids.device)
    offsets[1:] = torch.cumsum(keep.sum(dim=1), 0)
    return flat[keep].to(torch.int64), offsets


def slot_bag(table: Table, ids: torch.Tensor, combiner: Combiner = "sum", pad: int = -1) -> torch.Tensor:
    """SOK's DistributedEmbedding: (batch, slot_num, max_nnz) ids padded with `pad` ->
    (batch, slot_num, dim), each slot combining its ids."""
    values, offsets = slots(ids, pad)
    return bag(table, values, offsets, combiner).view(ids.shape[0], ids.shape[1], table.dim)


def group_lookup(tables: Sequence[CollectiveEmbedding], ids: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The rows of ids[k] in tables[k] for every k, in one exchange; each result takes part in autograd
    like a lookup of its table. The tables must share a process group and a device."""
    if len(tables) != len(ids) or not tables:
        raise SparseInputError(f"group_lookup: {len(tables)} tables for {len(ids)} id tensors")
    world, device = tables[0].world, tables[0].device
    if any(
        t.world != world or t.device != device or t.comm.group is not tables[0].comm.group for t in tables
    ):
        raise SparseInputError("group_lookup: the tables must share one process group and one device")
    flats = [i.reshape(-1).to(device=device, dtype=torch.int64) for i in ids]
    uniq, inverse = zip(*(torch.unique(f, return_inverse=True) for f in flats), strict=True)
    rows = _group_fetch(list(tables), list(uniq))
    out = []
    for t, f, r, inv, i in zip(tables, flats, rows, inverse, ids, strict=True):
        out.append(t._capture.rows(f, r.index_select(0, inv)).view(*i.shape, t.dim))
    return out


def _group_fetch(tables: list[CollectiveEmbedding], keys: list[torch.Tensor]) -> list[torch.Tensor]:
    """Unique keys of each table -> their rows: owners are found for all tables at once."""
    comm, world, device, n = tables[0].comm, tables[0].world, tables[0].device, len(tables)
    status, detail = ex.OK, ""
    for t, k in zip(tables, keys, strict=True):
        why = t.place.refuse(k, f"group lookup of {t.name!r}")
        if why and status == ex.OK:
            status, detail = ex.BAD_IDS, why
    if status != ex.OK:
        keys = [k[:0] for k in keys]
    # send order: by owner, then by table, then the keys' own order
    table_of = torch.cat(
        [torch.full((len(k),), j, dtype=torch.int64, device=device) for j, k in enumerate(keys)]
    )
    allkeys = torch.cat(keys)
    owner = ex.owners(allkeys, world)
    order = torch.argsort(owner * n + table_of, stable=True)
    counts = torch.bincount(owner * n + table_of, minlength=world * n).view(world, n)
    send = counts.sum(dim=1).tolist()
    what = "group lookup of " + ", ".join(repr(t.name) for t in tables)
    recv = comm.header(send, status, device, what, detail)
    table_counts = comm.rows(counts.reshape(-1), [n] * world, [n] * world).view(world, n)
    asked = comm.rows(allkeys.index_select(0, order), send, recv)
    # gather what each peer asked, one table after the other, into one float buffer per peer
    seg = table_counts.tolist()
    pieces, sizes, pos, problem = [], [], 0, ""
    for q in range(world):
        size = 0
        for j, t in enumerate(tables):
            k = asked[pos : pos + seg[q][j]]
            pos += seg[q][j]
            found, why = t.serve(k)
            problem = problem or why
            pieces.append(found.reshape(-1))
            size += seg[q][j] * t.dim
        sizes.append(size)
    if any(t.dynamic for t in tables):  # a full shard's verdict reaches every rank before rows move
        comm.header(recv, ex.FULL if problem else ex.OK, device, what, problem)
    flat = torch.cat(pieces) if pieces else torch.empty(0, device=device)
    mine = counts.tolist()
    back = comm.rows(
        flat, sizes, [sum(mine[q][j] * t.dim for j, t in enumerate(tables)) for q in range(world)]
    )
    # unpack: rows arrive by owner, then table; put each table's rows back in its key order
    per_table: list[list[torch.Tensor]] = [[] for _ in tables]
    pos = 0
    for q in range(world):
        for j, t in enumerate(tables):
            size = mine[q][j] * t.dim
            per_table[j].append(back[pos : pos + size].view(-1, t.dim))
            pos += size
    out = []
    for j, (t, k) in enumerate(zip(tables, keys, strict=True)):
        ordered = torch.cat(per_table[j]) if per_table[j] else torch.empty((0, t.dim), device=device)
        mask = table_of.index_select(0, order) == j
        positions = order[mask] - sum(len(x) for x in keys[:j])
        rows = torch.empty((len(k), t.dim), device=device)
        rows[positions] = ordered
        out.append(rows)
    return out


def split_embedding_parameters(objs: Iterable[Any]) -> tuple[list[Any], list[torch.nn.Parameter]]:
    """(sparse tables, dense parameters) of modules, tables and parameters: tables found as attributes
    of a module (at any depth) go to the sparse optimizer, the modules' parameters to the dense one."""
    tables: list[Any] = []
    dense: list[torch.nn.Parameter] = []
    seen: set[int] = set()

    def add_table(t: Any) -> None:
        if id(t) not in seen:
            seen.add(id(t))
            tables.append(t)

    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            for m in obj.modules():
                for value in vars(m).values():
                    if _is_table(value):
                        add_table(value)
            dense.extend(p for p in obj.parameters() if id(p) not in seen and not seen.add(id(p)))
        elif isinstance(obj, torch.nn.Parameter):
            if id(obj) not in seen:
                seen.add(id(obj))
                dense.append(obj)
        elif _is_table(obj):
            add_table(obj)
        else:
            raise TypeError(f"split_embedding_parameters: {type(obj).__name__} is neither a table nor dense")
    return tables, dense


def _is_table(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("attach", "pending", "apply_gradients", "dim"))
