"""A partition's .npy files read back: never unpickled, each checked against the sha256 its config
records when asked (format.py writes them; edge_targets.py and format.py read them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from graphtrain.runtime.data.cache import verify_files
from graphtrain.runtime.errors import DataError


class Recorded(Protocol):
    """What reading a partition's files needs of its config (format.PartitionConfig)."""

    @property
    def path(self) -> Path: ...

    @property
    def root(self) -> Path: ...

    @property
    def data(self) -> dict[str, Any]: ...


def load_npy(path: Path, mmap_mode: str | None = None) -> np.ndarray:
    """One .npy of a partition, never unpickled: a file that is not a plain array (an object array, a
    truncated or foreign file; its sha256 may have been edited to match) is one line naming it.

    Raises:
        DataError: naming `path` and why it cannot be read.
    """
    if Path(path).exists() and not Path(path).is_file():  # a FIFO: np.load waited for a writer for good
        raise DataError(f"{path}: not a regular file: not a graphtrain partition file")
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except ValueError as exc:  # object arrays ("cannot be loaded when allow_pickle=False"), bad headers
        objects = "allow_pickle" in str(exc) or "Python objects" in str(exc)  # np.load, or mmap'd
        what = "holds Python objects" if objects else f"not a .npy array ({exc})"
        raise DataError(f"{path}: {what}: not a graphtrain partition file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def load_files(cfg: Recorded, rels: list[str], verify: bool) -> dict[str, np.ndarray]:
    """Arrays at `rels` (paths relative to the partition), each checked against its recorded sha256."""
    if verify:
        missing = [r for r in rels if r not in cfg.data["files"]]
        if missing:
            raise DataError(f"{cfg.path}: {missing[0]} is not recorded in the partition's files")
        verify_files(cfg.root, {r: cfg.data["files"][r] for r in rels})
    return {r: load_npy(cfg.root / r) for r in rels}


def check_shapes(
    pdir: Path,
    nodes: int,
    edges: int,
    csr: tuple[np.ndarray, np.ndarray, np.ndarray | None],
    ndata: dict[str, Any],
    edata: dict[str, Any],
) -> None:
    """A partition's arrays agree with the `nodes` and `edges` its config's bounds give it (shapes and
    indptr's ends only: O(1) on memory-mapped files). Each file can match its recorded sha256 while the
    config's bounds were edited, or files of two partitions swapped with their sha256: a shard server
    then served another partition's rows and `inspect` died in numpy.

    Raises:
        DataError: naming the file, what it holds and what the config gives the partition.
    """
    indptr, indices, etype = csr
    expect = [("indptr.npy", indptr, nodes + 1), ("indices.npy", indices, edges)]
    expect += [] if etype is None else [("etype.npy", etype, edges)]
    expect += [(f"ndata/{k}", v, nodes) for k, v in ndata.items()]
    expect += [(f"edata/{k}", v, edges) for k, v in edata.items()]
    for name, arr, want in expect:
        rows = arr.shape[0] if arr.ndim else None
        if rows != want:
            raise DataError(
                f"{pdir / name}: holds {rows} rows but the config's bounds give this partition {want:,}: "
                "the files and the config are of different partitions"
            )
    if int(indptr[0]) != 0 or int(indptr[-1]) != edges:
        raise DataError(
            f"{pdir / 'indptr.npy'}: runs from {int(indptr[0])} to {int(indptr[-1])}, not 0 to {edges:,}"
        )


def check_ids(pdir: Path, num_nodes: int, indptr: np.ndarray, indices: np.ndarray) -> None:
    """The in-CSR's values (one pass over the edges, beside the sha256 pass that reads them anyway): node
    ids within [0, num_nodes) and offsets that never go back. A writer who also rewrote the config's
    sha256 could otherwise hand a shard server's sampler ids it never checks.

    Raises:
        DataError: naming the file and the first value at fault.
    """
    if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        at = int(np.argmax((indices < 0) | (indices >= num_nodes)))
        raise DataError(
            f"{pdir / 'indices.npy'}: node id {int(indices[at])} (edge {at}) is not in [0, {num_nodes:,})"
        )
    back = np.flatnonzero(np.diff(indptr) < 0)
    if back.size:
        raise DataError(f"{pdir / 'indptr.npy'}: goes back at row {int(back[0]) + 1}")
