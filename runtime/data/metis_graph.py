"""Reader for METIS `.graph` files (the example meshes of Debian `libmetis-doc`, Apache-2.0).

Format (METIS manual §4.1.1): an optional run of `%` comment lines, a header `n m [fmt [ncon]]`, then one
line per vertex listing its 1-based neighbours. Only unweighted graphs (fmt 0) are read; each undirected
edge is returned once (u < v).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphtrain.runtime.errors import DataError


def parse(path: Path) -> dict[str, np.ndarray | int]:
    """Return num_nodes and src/dst with every undirected edge once (src < dst).

    Raises:
        DataError: missing file, weighted format, wrong line count or a neighbour out of range.
    """
    if not path.is_file():
        raise DataError(f"{path}: not found")
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("%")]
    if not lines:
        raise DataError(f"{path}: empty METIS graph file")
    header = lines[0].split()
    n, m = int(header[0]), int(header[1])
    if len(header) > 2 and int(header[2]) != 0:
        raise DataError(f"{path}: weighted METIS graphs (fmt={header[2]}) are not supported")
    body = lines[1 : n + 1]
    if len(body) != n:
        raise DataError(f"{path}: header says {n} vertices but the file has {len(body)} vertex lines")
    counts = np.fromiter((len(ln.split()) for ln in body), dtype=np.int64, count=n)
    nbrs = np.array(" ".join(body).split(), dtype=np.int64) - 1
    src = np.repeat(np.arange(n, dtype=np.int64), counts)
    if nbrs.size and (nbrs.min() < 0 or nbrs.max() >= n):
        raise DataError(f"{path}: a neighbour id is outside [1, {n}]")
    keep = nbrs > src
    src, dst = src[keep], nbrs[keep]
    if len(src) != m:
        raise DataError(f"{path}: header says {m} edges but the adjacency lists hold {len(src)}")
    return {"num_nodes": n, "src": src, "dst": dst}
