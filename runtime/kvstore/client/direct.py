"""Standalone mode's GPU tables used where they lie: pulls and pushes that never cross the host.

Why: in standalone mode the shards live in the trainer's process (inproc.py), their learnable tables on
the trainer's GPU. Through the protocol every pull went GPU -> host (gather, download) -> GPU and every
push back the same way, deduplicated on the host in between: 2.2 + 3.1 ms of a 15 ms WordNet step on
an H200 (bench/RESULTS.md, third lease). Here ids, rows and gradients stay on the device: a pull is one
range check and a gather per shard; a push hands each shard its raw (ids, gradients) and the shard's
optimizer step reduces the duplicates itself (the CUDA core's deterministic, skew-proof reduction), under
the same lock, write order and step count as a shard server's push_grad (state.locked_step).

Which tables (`usable`): float32, float16 or bfloat16 rows on a GPU (a half table's rows are pulled in
half and widened by the caller, its step rounds back as on a shard server: the same round seeds), ids
that are row numbers (not a dynamic vocabulary's keys), every shard's piece on one device. Everything
else takes the protocol path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from graphtrain.runtime.errors import NonFiniteGradient, SparseInputError
from graphtrain.runtime.kvstore.wire.protocol import RemoteError
from graphtrain.runtime.storage import gpu
from graphtrain.runtime.storage.shard import TensorShard
from graphtrain.runtime.storage.update import locked_step, nonfinite_refusal

DEVICE_TYPES = ("cuda",)  # where the protocol path costs host round trips (host tables are mapped)
STEPPED = (torch.float32, torch.float16, torch.bfloat16)  # the row types the CUDA core steps


def usable(pieces: Sequence[TensorShard | None]) -> bool:
    """Whether a table's pieces (one per shard, None where absent) can be used directly."""
    if not pieces or any(t is None for t in pieces):
        return False
    devices = {t.data.device for t in pieces if t is not None}
    return len(devices) == 1 and all(
        t.data.device.type in DEVICE_TYPES
        and t.keyed is None
        and t.data.dtype in STEPPED
        and t.data.dim() == 2
        and t.config is not None  # set_optimizer placed it: it stays where it is
        for t in pieces
        if t is not None
    )


Split = tuple[torch.Tensor | None, list[torch.Tensor]]  # (order grouping ids by shard, each's local rows)


def split(pieces: Sequence[TensorShard], ids: torch.Tensor) -> Split:
    """Each shard's local row numbers of `ids` (on their device), and the order that groups `ids` by
    shard (None for one shard). One wait for the device: the ids are checked against the table's rows
    in the same read as the shards' counts. A pull's split serves the push of the same ids
    (DistEmbedding keeps it), so a step waits once per table for it.

    Raises:
        SparseInputError: an id outside [0, num_rows); nothing was read or written.
    """
    num_rows = pieces[0].num_rows
    outside = (ids < 0) | (ids >= num_rows)
    order = None
    if len(pieces) == 1:
        counts, bad = [len(ids)], int(outside.sum())
    else:
        owner = torch.zeros_like(ids)
        for t in pieces[1:]:  # a shard's rows start at its lo: as many kernels as shards, no upload
            owner += ids >= t.lo
        order = torch.argsort(owner, stable=True)
        *counts, bad = torch.cat(
            [torch.bincount(owner, minlength=len(pieces)), outside.sum(0, True)]
        ).tolist()
    if bad:
        pos = int(torch.nonzero(outside)[0])
        raise SparseInputError(
            f"ids[{pos}] = {int(ids[pos])} of {pieces[0].name!r} is outside the table's rows [0, {num_rows})"
        )
    grouped = ids if order is None else ids.index_select(0, order)
    return order, [p - t.lo for p, t in zip(grouped.split(counts), pieces, strict=True)]


def split_for(pieces: Sequence[TensorShard], ids: torch.Tensor, op: str) -> Split:
    """split(), its refusal worded as a shard server's refusal of `op`.

    Raises:
        RemoteError: an id outside the table.
    """
    try:
        return split(pieces, ids)
    except SparseInputError as exc:
        raise RemoteError(f"in-process {pieces[0].name!r} refused {op}: {exc}") from None


def pull(pieces: Sequence[TensorShard], ids: torch.Tensor, parts: Split | None = None) -> torch.Tensor:
    """The rows of `ids` (1-D int64 on the pieces' device), on that device, after each piece's last
    write; `parts`: split_for(pieces, ids, "pull"), if already made. Like a pull from a shard server it
    takes no lock: it may see a row a concurrent step is updating, never memory that is not the table's.

    Raises:
        RemoteError: an id outside the table (the message a shard server's refusal would give).
    """
    order, local = parts if parts is not None else split_for(pieces, ids, "pull")
    for t in pieces:
        gpu.wait_written(t)
    rows = [t.data.index_select(0, loc) for t, loc in zip(pieces, local, strict=True)]
    if order is None:
        return rows[0]
    out = torch.empty((len(ids), pieces[0].data.shape[1]), dtype=pieces[0].data.dtype, device=ids.device)
    return out.index_copy_(0, order, torch.cat(rows))


def push_grad(
    pieces: Sequence[TensorShard],
    ids: torch.Tensor,
    grads: torch.Tensor,
    step: int | None,
    parts: Split | None = None,
) -> int:
    """Apply each piece's optimizer to its rows of (ids, grads), duplicates and all (the step reduces
    them by the table's rule); `parts`: the split of `ids`, if already made (by their pull). Gradients
    holding NaN or infinity: each shard refuses its rows whole (as each shard server does its push), or
    with the table's nonfinite "skip" their ids are left out, every occurrence (on the protocol path the
    client's sum of the occurrences is what is not finite). Returns the unique rows updated.

    Raises:
        RemoteError: the message a shard server's refusal of the same push would give.
    """
    name, config = pieces[0].name, pieces[0].config
    assert config is not None
    refuse = config.nonfinite == "refuse"
    try:
        if not refuse:  # "skip": one wait for the device, only for tables that asked for it
            bad = ~torch.isfinite(grads).all(dim=1)
            if bool(bad.any()):  # every occurrence of such an id goes, as its reduced row would
                keep = ~torch.isin(ids, ids[bad])
                ids, grads, parts = ids[keep], grads[keep], None
        order, local = parts if parts is not None else split(pieces, ids)
        grouped = grads if order is None else grads.index_select(0, order)
        updated = 0
        for t, loc, g in zip(pieces, local, grouped.split([len(x) for x in local]), strict=True):
            with t.lock:
                try:
                    updated += locked_step(t, loc, g, step, finite=refuse)  # the core scans first
                except NonFiniteGradient as exc:
                    rows = ~torch.isfinite(g).all(dim=1)
                    at = int(torch.nonzero(rows)[0]) if bool(rows.any()) else exc.row  # else: a sum overflows
                    first = int(loc[at]) + t.lo
                    raise SparseInputError(nonfinite_refusal(name, int(rows.sum()), first)) from None
    except SparseInputError as exc:
        raise RemoteError(f"in-process {name!r} refused push_grad: {exc}") from None
    return updated
