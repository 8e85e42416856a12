"""Checkpoints of collective tables, in the shard servers' format (checkpoint/).

A rank owns strided keys (r, r+W, ...), but a checkpoint piece holds a contiguous row range: so `save`
re-deals the rows: rank r writes rows [N*r/W, N*(r+1)/W), receiving them from their owners in rounds of
at most `CHUNK_ROWS` rows per rank (bounded extra memory). The result is an ordinary checkpoint:
`graphtrain export`, `predict`, verification and restore into shard servers read it unchanged, and a
collective table restores from any checkpoint of its table, taken with any number of ranks or shards.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import dtypes
from graphtrain.runtime.checkpoint import chain
from graphtrain.runtime.collective import dynamic_checkpoint as dynamic
from graphtrain.runtime.collective import exchange as ex
from graphtrain.runtime.collective.embedding import CollectiveEmbedding
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.optim import make_state
from graphtrain.runtime.storage.keyed import refuse_keyed, refuse_nonfinite
from graphtrain.runtime.storage.shard import TensorShard

CHUNK_ROWS = 1 << 16


def piece_range(num_rows: int, world: int, rank: int) -> tuple[int, int]:
    return num_rows * rank // world, num_rows * (rank + 1) // world


def _owned(lo: int, hi: int, world: int, owner: int) -> torch.Tensor:
    """Keys in [lo, hi) that `owner` holds, ascending."""
    return torch.arange(lo + (owner - lo) % world, hi, world, dtype=torch.int64)


def _global_step(t: CollectiveEmbedding) -> bool:
    return t.config is not None and t.config.kind == "adam" and t.config.step_count == "global"


def _arrays(t: CollectiveEmbedding) -> dict[str, torch.Tensor]:
    """What a piece holds per row: data, then each per-row state tensor."""
    out = {"data": t.weight}
    out.update({k: v for k, v in t.state.items() if not (k == "step" and _global_step(t))})
    return out


def _shard_view(t: CollectiveEmbedding, lo: int, hi: int) -> TensorShard:
    """The piece's description for write_piece: shapes only (meta tensors); the writer fills the files."""
    state = {
        k: torch.empty(
            (1,) if (k == "step" and _global_step(t)) else (hi - lo, *v.shape[1:]),
            dtype=v.dtype,
            device="meta",
        )
        for k, v in t.state.items()
    }
    data = torch.empty((hi - lo, t.dim), dtype=t.dtype, device="meta")
    steps = np.array(
        [t.steps], dtype=np.int64
    )  # a half table's rounding count: a resumed run goes on from it
    return TensorShard(
        t.name, t.num_embeddings, (t.dim,), t.wire, lo, hi, data, t.config, state, round_steps=steps
    )


def _np_dtype(v: torch.Tensor) -> np.dtype:
    """The numpy type a piece's file holds `v`'s rows as (a bfloat16 table's: its bits, int16)."""
    return dtypes.NUMPY[str(v.dtype).removeprefix("torch.")]


def _file(key: str) -> str:
    return "data.npy" if key == "data" else f"state.{key}.npy"


def _writer(t: CollectiveEmbedding, lo: int, hi: int):  # type: ignore[no-untyped-def]
    """Writes the piece while redealing it (collective): each round's rows go straight to the files."""

    def write(directory: Path, view: TensorShard) -> None:
        arrays = _arrays(t)
        files = {
            k: np.lib.format.open_memmap(
                directory / _file(k),
                mode="w+",
                dtype=_np_dtype(v),
                shape=(hi - lo, *v.shape[1:]),
            )
            for k, v in arrays.items()
        }
        if _global_step(t):
            np.save(directory / "state.step.npy", t.state["step"].cpu().numpy())
        _redeal(t, arrays, files)
        for f in files.values():
            f.flush()
            del f

    return write


def piece_bytes(t: CollectiveEmbedding, lo: int, hi: int) -> int:
    """Bytes of the piece [lo, hi) of `t` (rows and per-row state): what freezing it takes."""
    return sum((hi - lo) * v[0].numel() * v.element_size() for v in _arrays(t).values() if len(v))


def _frozen(t: CollectiveEmbedding, lo: int, hi: int) -> dict[str, np.ndarray]:
    """The piece redealt (collective) into host arrays, as its files will hold them."""
    arrays = _arrays(t)
    host = {k: np.empty((hi - lo, *v.shape[1:]), dtype=_np_dtype(v)) for k, v in arrays.items()}
    _redeal(t, arrays, host)
    if _global_step(t):
        host["step"] = t.state["step"].cpu().numpy().copy()
    return host


def _write_frozen(host: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    def write(directory: Path, view: TensorShard) -> None:
        for key, array in host.items():
            np.save(directory / _file(key), array)

    return write


def _redeal(t: CollectiveEmbedding, arrays: dict[str, torch.Tensor], files: dict[str, np.ndarray]) -> None:
    """Rounds of all-to-all: in round j rank q receives rows [lo_q + jC, lo_q + (j+1)C) of its piece."""
    world, rank, n, comm = t.world, t.rank, t.num_embeddings, t.comm
    ranges = [piece_range(n, world, q) for q in range(world)]
    rounds = max((hi - lo + CHUNK_ROWS - 1) // CHUNK_ROWS for lo, hi in ranges)
    my_lo, _ = ranges[rank]
    for j in range(rounds):
        windows = [(lo + j * CHUNK_ROWS, min(hi, lo + (j + 1) * CHUNK_ROWS)) for lo, hi in ranges]
        send_keys = [
            _owned(a, b, world, rank) if a < b else torch.empty(0, dtype=torch.int64) for a, b in windows
        ]
        send = [len(k) for k in send_keys]
        a, b = windows[rank]
        recv_keys = [
            _owned(a, b, world, p) if a < b else torch.empty(0, dtype=torch.int64) for p in range(world)
        ]
        recv = [len(k) for k in recv_keys]
        local = ex.local_rows(torch.cat(send_keys), world).to(t.device)
        where = (torch.cat(recv_keys) - my_lo).numpy() if sum(recv) else None
        for key, value in arrays.items():
            got = comm.rows(value.index_select(0, local), send, recv)
            if where is not None:
                files[key][where] = dtypes.to_numpy(got.cpu())


def save(tables: list[CollectiveEmbedding], root: Path) -> list[dict[str, Any]]:
    """Write every rank's piece of each table under `root` (collective); returns the description of all
    pieces of all ranks, as kvstore's write_top lists them."""
    return freeze(tables, root, room=-1)[0]


Job = tuple[dict[str, Any], Callable[[], object]]  # a piece's entry and the write that puts it in place


def freeze(
    tables: list[CollectiveEmbedding], root: Path, room: int
) -> tuple[list[dict[str, Any]], list[Job]]:
    """save(), with the files written later: every rank's piece entries, and this rank's writes. A static
    table's piece is redealt now (collective, like save) into host memory while `room` bytes hold it;
    the returned writes put those pieces' files in place (on a thread, beside training). A piece
    without room (all with room -1), and a dynamic table, is written now: never more memory than there is."""
    pieces: list[dict[str, Any]] = []
    writes: list[Job] = []
    for t in tables:
        if t.dynamic:
            pieces += dynamic.save(t, root, _arrays(t), _global_step(t))
            continue
        for q in range(t.world):
            lo, hi = piece_range(t.num_embeddings, t.world, q)
            size = piece_bytes(t, lo, hi) if q == t.rank else 0
            if q == t.rank and size <= room:
                room -= size
                view, host = _shard_view(t, lo, hi), _frozen(t, lo, hi)
                write = functools.partial(ckpt.write_piece, root, view, _write_frozen(host))
                writes.append((ckpt.piece_entry(root, t.name, lo, hi), write))
            elif q == t.rank:
                ckpt.write_piece(root, _shard_view(t, lo, hi), _writer(t, lo, hi))
            pieces.append(ckpt.piece_entry(root, t.name, lo, hi))
    return pieces, writes


def failure_marker(root: Path, entry: dict[str, Any]) -> Path:
    """Where a rank's background write of a piece says why it failed."""
    final = root / entry["dir"]
    return final.parent / f"{final.name}.failed"


def written(root: Path, pieces: list[dict[str, Any]]) -> bool:
    """Whether every piece is in place (written by its rank, here or on another host).

    Raises:
        DataError: a rank could not write its piece (its reason).
    """
    for entry in pieces:
        marker = failure_marker(root, entry)
        if marker.exists():
            raise DataError(f"{entry['name']} rows {entry['lo']}-{entry['hi']}: {marker.read_text().strip()}")
    return all((root / e["dir"] / chain.MANIFEST).is_file() for e in pieces)


class Writer:
    """A rank's frozen pieces written on a thread, one after the other. A failure leaves the piece's
    failure marker (its reason), which the rank completing the checkpoint reports (written())."""

    def __init__(self, root: Path, jobs: list[Job]):
        self.root, self.jobs = root, jobs
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name="collective-checkpoint", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for entry, write in self.jobs:
            try:
                write()
            except Exception as exc:  # noqa: BLE001 - any failure is the checkpoint's, said where it is read
                self.error = f"not written: {type(exc).__name__}: {exc}"
                marker = failure_marker(self.root, entry)
                with contextlib.suppress(OSError):
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text(self.error + "\n")
                return

    def join(self, timeout: float) -> bool:
        """Whether the writes ended within `timeout` seconds."""
        self.thread.join(timeout)
        return not self.thread.is_alive()


def write_checkpoint(
    tables: list[CollectiveEmbedding], root: Path, extra: dict[str, Any] | None = None
) -> Path:
    """A complete checkpoint of `tables` alone: every rank's pieces, then rank 0's checkpoint.json."""
    pieces = save(tables, root)
    world = tables[0].world if tables else 1
    if world > 1:
        dist.barrier(group=tables[0].comm.group)
    if not tables or tables[0].rank == 0:
        ckpt.write_top(root, pieces, world, extra)
    if world > 1:
        dist.barrier(group=tables[0].comm.group)
    return root / ckpt.TOP


def restore(t: CollectiveEmbedding, root: Path, verify: bool = True) -> bool:
    """Load this rank's rows (keys r, r+W, ...) and their optimizer state from a checkpoint of the table,
    whatever split it was written with. False if the table is not in it.

    Raises:
        DataError: shape or optimizer mismatch, incomplete coverage, or a changed file.
    """
    pieces = ckpt.pieces_of(root, t.name)
    if not pieces:
        return False
    # a dynamic vocabulary restores by key into any capacity that holds its keys (restore_keyed refuses
    # one too small, as a shard server's table does): its row count is not the checkpoint's to match
    rows = int(pieces[0][0]["num_rows"]) if t.dynamic else t.num_embeddings
    config = ckpt.saved_config(pieces[0][0], t.name, (rows, (t.dim,), t.wire), t.config)
    if config is not None:
        t.config = config
        t.state = make_state(config, len(t.weight), t.dim, t.device)
    t.steps = ckpt.saved_round_steps(pieces)  # every rank counts every step
    arrays = _arrays(t)
    if t.dynamic:
        if _global_step(t):
            for _, d in pieces:
                saved = np.load(d / "state.step.npy", allow_pickle=False)
                t.state["step"][0] = max(int(t.state["step"][0]), int(saved[0]))
        dynamic.restore(t, pieces, arrays, verify)
        return True
    refuse_keyed(pieces, t.name)
    for manifest, d in pieces:
        if verify:
            chain.verify_piece((root, manifest, d))
        lo, hi = manifest["lo"], manifest["hi"]
        keys = _owned(lo, hi, t.world, t.rank)
        saved = chain.load_piece((root, manifest, d))  # a shard server's piece may be incremental
        if _global_step(t):
            t.state["step"][0] = max(int(t.state["step"][0]), int(saved["state.step"][0]))
        if not len(keys):
            continue
        rows = ex.local_rows(keys, t.world).to(t.device)
        start = int(keys[0]) - lo
        for key, value in arrays.items():
            src = saved["data" if key == "data" else f"state.{key}"][start :: t.world]
            held = dtypes.from_numpy(np.ascontiguousarray(src), str(value.dtype).removeprefix("torch."))
            if key == "data":  # rows of NaN are refused, as a shard server's restore refuses them
                refuse_nonfinite(src, t.wire, d / "data.npy", lambda i, k=keys: f"row {int(k[i])}")
            value[rows] = held.to(t.device)
    return True
