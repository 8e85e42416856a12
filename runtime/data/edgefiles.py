"""An edge list left on disk and read in bounded chunks: the streaming partitioner's input.

A graph too big for the partition step's memory cannot be loaded as a `Graph` (its CSR alone is 16
bytes an edge); its edges stay in their .npy files (src, dst and optionally etype, one int per edge,
as the dataset cache stores them) and are read `size` edges at a time with plain reads, never a memory
map: `ulimit -v` (and a pod's address-space accounting) counts a mapped file as if it were read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphtrain.runtime.errors import DataError

CHUNK_EDGES = 1 << 18  # 262,144 edges: ~25 MB of chunk arrays in the partitioner


@dataclass(frozen=True)
class NpyColumn:
    """One 1-D integer .npy file: where its data starts, its dtype and length."""

    path: Path
    offset: int
    dtype: np.dtype
    length: int


def column(path: Path) -> NpyColumn:
    """The header of a 1-D integer .npy (nothing else read).

    Raises:
        DataError: missing, not a .npy, not 1-D, Fortran order, or not integers.
    """
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read(f)
            offset = f.tell()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise DataError(f"{path}: not a .npy array ({exc})") from None
    if len(shape) != 1 or fortran or dtype.kind not in "iu" or dtype.hasobject:
        raise DataError(f"{path}: expected a 1-D integer array, got {dtype} of shape {shape}")
    return NpyColumn(Path(path), offset, dtype, int(shape[0]))


@dataclass(frozen=True)
class EdgeFiles:
    """src[i] -> dst[i] (etype[i]) for i in [0, num_edges), ids in [0, num_nodes)."""

    name: str
    num_nodes: int
    src: NpyColumn
    dst: NpyColumn
    etype: NpyColumn | None = None

    @property
    def num_edges(self) -> int:
        return self.src.length

    @classmethod
    def open(cls, name: str, num_nodes: int, src: Path, dst: Path, etype: Path | None = None) -> EdgeFiles:
        """Check the headers agree (one entry per edge in each file).

        Raises:
            DataError: a file is not a 1-D integer .npy, or the lengths differ.
        """
        cols = [column(src), column(dst)] + ([column(etype)] if etype is not None else [])
        if len({c.length for c in cols}) != 1:
            lengths = ", ".join(f"{c.path.name} {c.length}" for c in cols)
            raise DataError(f"graph {name!r}: edge files differ in length ({lengths})")
        return cls(name, num_nodes, cols[0], cols[1], cols[2] if etype is not None else None)

    def chunks(
        self, size: int = CHUNK_EDGES
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(first edge index, src, dst, etype or None) of `size` edges at a time, ids checked.

        Raises:
            DataError: an endpoint outside [0, num_nodes), naming the edge.
        """
        files = [self.src, self.dst] + ([self.etype] if self.etype is not None else [])
        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(c.path, "rb")) for c in files]
            for h, c in zip(handles, files, strict=True):
                h.seek(c.offset)
            for lo in range(0, self.num_edges, size):
                count = min(size, self.num_edges - lo)
                arrays = [
                    np.fromfile(h, dtype=c.dtype, count=count).astype(np.int64, copy=False)
                    for h, c in zip(handles, files, strict=True)
                ]
                if any(len(a) != count for a in arrays):
                    raise DataError(f"graph {self.name!r}: an edge file ends before edge {lo + count}")
                for label, ids in (("source", arrays[0]), ("destination", arrays[1])):
                    bad = (ids < 0) | (ids >= self.num_nodes)
                    if bad.any():
                        at = int(np.flatnonzero(bad)[0])
                        raise DataError(
                            f"graph {self.name!r}: edge {lo + at} has {label} id {int(ids[at])} "
                            f"outside [0, {self.num_nodes})"
                        )
                yield lo, arrays[0], arrays[1], arrays[2] if len(arrays) > 2 else None
