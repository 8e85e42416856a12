"""An edge list left on disk and read in bounded chunks: the streaming partitioner's input.

A graph too big for the partition step's memory cannot be loaded as a `Graph` (its CSR alone is 16
bytes an edge); its edges stay in their .npy files (src, dst and optionally etype, one int per edge,
as the dataset cache stores them, and optionally efeat, a (num_edges, d) float row per edge) and are
read `size` edges at a time with plain reads, never a memory map: `ulimit -v` (and a pod's
address-space accounting) counts a mapped file as if it were read.

A typed graph's edge files need no column beyond an untyped one's: its canonical edge type (source
type, relation, destination type) follows from the stored relation (the etype column; none: one
relation) and its endpoints' node types, which the node data holds (O(nodes)). `EdgeTyping` is that
map, its codes found by one read of the files (`EdgeTyping.scan`), and an EdgeFiles carrying one
yields the canonical type in place of the relation, chunk by chunk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphtrain.runtime import arrays
from graphtrain.runtime.errors import DataError

CHUNK_EDGES = 1 << 18  # 262,144 edges: ~25 MB of chunk arrays in the partitioner


@dataclass(frozen=True)
class NpyColumn:
    """One 1-D integer .npy file (or a 2-D float one, `width` values a row): where its data starts, its
    dtype and length."""

    path: Path
    offset: int
    dtype: np.dtype
    length: int
    width: int = 0  # 0: a 1-D column


def column(path: Path) -> NpyColumn:
    """The header of a 1-D integer .npy (nothing else read).

    Raises:
        DataError: missing, not a .npy, not 1-D, Fortran order, or not integers.
    """
    shape, fortran, dtype, offset = _header(path)
    if len(shape) != 1 or fortran or dtype.kind not in "iu" or dtype.hasobject:
        raise DataError(f"{path}: expected a 1-D integer array, got {dtype} of shape {shape}")
    return NpyColumn(Path(path), offset, dtype, int(shape[0]))


def matrix(path: Path) -> NpyColumn:
    """The header of a 2-D float .npy of rows (edge features: one row per edge).

    Raises:
        DataError: missing, not a .npy, not 2-D, Fortran order, or not floats.
    """
    shape, fortran, dtype, offset = _header(path)
    if len(shape) != 2 or fortran or dtype.kind != "f" or shape[1] < 1:
        raise DataError(f"{path}: expected a 2-D float array of rows, got {dtype} of shape {shape}")
    return NpyColumn(Path(path), offset, dtype, int(shape[0]), int(shape[1]))


def _header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, data offset) of a .npy."""
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
    return tuple(shape), bool(fortran), dtype, offset


@dataclass(frozen=True)
class EdgeTyping:
    """Each edge's canonical type from its relation and its endpoints' node types: (source type,
    relation, destination type) coded as ((s * num_relations) + r) * num_ntypes + d, the codes that
    occur sorted, canonical type i being codes[i]: the order of np.unique over the (s, r, d) rows, so the
    ids are those data/typed.py's with_types gives the graph in memory."""

    ntype: np.ndarray  # int64 node type of every node
    num_ntypes: int
    num_relations: int
    codes: np.ndarray  # int64, sorted: the (s, r, d) that occur

    def code(self, src: np.ndarray, relation: np.ndarray | None, dst: np.ndarray) -> np.ndarray:
        """The code of each edge (relation None: every edge of relation 0).

        Raises:
            DataError: a relation outside [0, num_relations).
        """
        rel = np.zeros(len(src), dtype=np.int64) if relation is None else relation.astype(np.int64)
        bad = (rel < 0) | (rel >= self.num_relations)
        if bad.any():
            raise DataError(f"edge relation {int(rel[bad][0])} is outside the {self.num_relations} relations")
        return (self.ntype[src] * self.num_relations + rel) * self.num_ntypes + self.ntype[dst]

    def etype(self, src: np.ndarray, relation: np.ndarray | None, dst: np.ndarray) -> np.ndarray:
        """The canonical edge type (int64) of each edge.

        Raises:
            DataError: an edge of a type the scan did not see (the files changed since).
        """
        code = self.code(src, relation, dst)
        at = np.minimum(np.searchsorted(self.codes, code), max(len(self.codes) - 1, 0))
        if len(code) and (not len(self.codes) or np.any(self.codes[at] != code)):
            raise DataError("an edge is of a type the scan of the edge files did not see: they changed")
        return at.astype(np.int64)

    def canonical_etypes(self, ntype_names: Iterable[str], relations: Iterable[str]) -> np.ndarray:
        """(k, 3) unicode: the (source type, relation, destination type) of each canonical type."""
        names, rels = list(ntype_names), list(relations)
        st, rest = np.divmod(self.codes, self.num_relations * self.num_ntypes)
        rel, dt = np.divmod(rest, self.num_ntypes)
        rows = [
            [names[s], rels[r], names[d]]
            for s, r, d in zip(st.tolist(), rel.tolist(), dt.tolist(), strict=True)
        ]
        return np.array(rows, dtype=str).reshape(-1, 3)

    @classmethod
    def scan(
        cls,
        ntype: np.ndarray,
        num_ntypes: int,
        num_relations: int,
        chunks: Iterable[tuple[np.ndarray, np.ndarray | None, np.ndarray]],
    ) -> EdgeTyping:
        """The typing of the (src, relation, dst) chunks: every code that occurs, one read."""
        ntype = ntype.astype(np.int64)
        empty = cls(ntype, num_ntypes, num_relations, np.empty(0, dtype=np.int64))
        found = [arrays.unique(empty.code(s, r, d)) for s, r, d in chunks]
        codes = arrays.unique(np.concatenate(found)) if found else empty.codes
        return cls(ntype, num_ntypes, num_relations, codes.astype(np.int64))


@dataclass(frozen=True)
class EdgeFiles:
    """src[i] -> dst[i] (etype[i], efeat[i]) for i in [0, num_edges), ids in [0, num_nodes).

    With `typing`, the etype a chunk yields is the canonical edge type of (the source's node type,
    etype[i] or relation 0 without an etype file, the destination's node type) (EdgeTyping)."""

    name: str
    num_nodes: int
    src: NpyColumn
    dst: NpyColumn
    etype: NpyColumn | None = None
    efeat: NpyColumn | None = None  # (num_edges, width) float rows
    typing: EdgeTyping | None = None

    @property
    def num_edges(self) -> int:
        return self.src.length

    @property
    def has_etype(self) -> bool:
        """Chunks yield an edge type per edge (a stored relation, or a typed graph's canonical type)."""
        return self.etype is not None or self.typing is not None

    @classmethod
    def open(
        cls,
        name: str,
        num_nodes: int,
        src: Path,
        dst: Path,
        etype: Path | None = None,
        efeat: Path | None = None,
    ) -> EdgeFiles:
        """Check the headers agree (one entry per edge in each file, one row in efeat).

        Raises:
            DataError: a file is not a 1-D integer .npy (efeat: a 2-D float one), or the lengths differ.
        """
        cols = [column(src), column(dst)] + ([column(etype)] if etype is not None else [])
        cols += [matrix(efeat)] if efeat is not None else []
        if len({c.length for c in cols}) != 1:
            lengths = ", ".join(f"{c.path.name} {c.length}" for c in cols)
            raise DataError(f"graph {name!r}: edge files differ in length ({lengths})")
        et = cols[2] if etype is not None else None
        return cls(name, num_nodes, cols[0], cols[1], et, cols[-1] if efeat is not None else None)

    def feature_chunks(self, size: int = CHUNK_EDGES) -> Iterator[np.ndarray]:
        """The efeat rows (float32) of `size` edges at a time, in step with chunks(size).

        Raises:
            DataError: no efeat file, or it ends early.
        """
        if self.efeat is None:
            raise DataError(f"graph {self.name!r}: no edge feature file")
        c = self.efeat
        with open(c.path, "rb") as h:
            h.seek(c.offset)
            for lo in range(0, self.num_edges, size):
                count = min(size, self.num_edges - lo)
                rows = np.fromfile(h, dtype=c.dtype, count=count * c.width)
                if len(rows) != count * c.width:
                    raise DataError(f"graph {self.name!r}: {c.path.name} ends before edge {lo + count}")
                yield rows.reshape(count, c.width).astype(np.float32, copy=False)

    def chunks(
        self, size: int = CHUNK_EDGES, types: bool = True
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(first edge index, src, dst, etype or None) of `size` edges at a time, ids checked;
        `types` False: no etype read or typed (passes that need the endpoints only).

        Raises:
            DataError: an endpoint outside [0, num_nodes), naming the edge.
        """
        files = [self.src, self.dst] + ([self.etype] if self.etype is not None and types else [])
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
                et = arrays[2] if len(arrays) > 2 else None
                if self.typing is not None and types:
                    et = self.typing.etype(arrays[0], et, arrays[1])
                yield lo, arrays[0], arrays[1], et
