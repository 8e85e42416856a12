"""GraphSAGE's learnable input from sparse node features (model.featureBag): each input node's nonzero
feature columns (FeatureBags, read from the partition) looked up as one multi-hot bag in a `keys:
features` table and combined by `sum` or `mean` (SOK's DistributedEmbedding, torch's EmbeddingBag).

The function is collective.layers.bag's, computed the way a batch of graph nodes wants it: a trainer's
512-seed WordNet batch has ~7,400 input nodes with ~82,000 word occurrences of ~10,000 distinct words,
so the words are looked up once each (the table's rows and, in backward, their gradients travel per
word, not per occurrence) and the bags are a sparse (nodes x words) product with its transpose ready
for backward. Measured on such batches, one thread: forward + backward + the collective Adam step
55 ms instead of bag()'s 140 ms, most of it the step reducing 82,000 gradient rows. A table whose
duplicate gradients are averaged (duplicateGrads: mean) needs each occurrence counted: it takes bag().

`node_input` is a node table's input the same way: a table over some node types
(spec.embeddings[].nodeTypes) gives their nodes its rows and the other nodes zeros, whose features
carry them (a typed graph's types of other widths hold their features in columns of their own too).

One function of each serves training (the table on the shard servers or across the trainers, its rows in
autograd) and `graphtrain predict` (the checkpoint's rows in this process, FixedRows), so a prediction
combines a node's words exactly as training did.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from graphtrain.runtime.collective import bag
from graphtrain.runtime.graph import FeatureBags
from graphtrain.runtime.graph.loader import csr_tensor
from graphtrain.runtime.models.layers import SparseProduct
from graphtrain.runtime.partition.typed_ids import NodeRows
from graphtrain.runtime.train.device import to_device


class FixedRows:
    """A trained table's rows as a lookup table (no optimizer, no autograd): what predict reads."""

    def __init__(self, rows: torch.Tensor):
        self.weight = rows
        self.num_embeddings, self.dim = int(rows.shape[0]), int(rows.shape[1])

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids.to(torch.int64)]


def distinct_words(values: np.ndarray, num_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """(words, member): the distinct values ascending, and each value's place among them. By counting
    when the columns are few against the values (no sort: a WordNet batch in 1 ms instead of 10)."""
    if num_columns > 16 * len(values):
        words, member = np.unique(values, return_inverse=True)
        return words, member.reshape(-1)
    present = np.bincount(values, minlength=num_columns) > 0
    place = np.cumsum(present) - 1
    return np.flatnonzero(present), place[values]


def bag_matrices(
    offsets: np.ndarray, member: np.ndarray, num_words: int, combiner: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, A^T) as CSR: A is (bags x words), its row b weighing bag b's words (value i is word member[i]
    of the bag it falls in by `offsets`): 1 for `sum`, 1 / the bag's size for `mean`."""
    lengths = np.diff(offsets)
    if combiner == "mean":
        weights = np.repeat(1.0 / np.maximum(lengths, 1), lengths).astype(np.float32)
    else:
        weights = np.ones(len(member), dtype=np.float32)
    shape = (len(lengths), num_words)
    t = sp.csr_matrix((weights, member, offsets), shape=shape).tocsc()  # the transpose, by counting
    a = csr_tensor(offsets, member, weights, shape)
    a_t = csr_tensor(t.indptr.astype(np.int64), t.indices.astype(np.int64), t.data, (shape[1], shape[0]))
    return a, a_t


def bag_input(
    table: Any,
    bags: FeatureBags,
    nodes: np.ndarray,
    combiner: str,
    device: torch.device,
    per_word: bool = True,
) -> torch.Tensor:
    """(len(nodes), table.dim) on `device`: node i's row is the `combiner` of the table's rows of its
    nonzero feature columns (zeros for a node without one). One lookup of `table`: collective tables
    call it on every trainer alike. `per_word` False: every occurrence looked up (bag() itself), as a
    table that averages duplicate gradients needs."""
    values, offsets = bags(nodes)
    if not per_word:
        rows = bag(table, torch.from_numpy(values), torch.from_numpy(offsets), combiner)  # type: ignore[arg-type]
        return to_device(rows, device)
    words, member = distinct_words(values, bags.num_columns)
    rows = to_device(table(torch.from_numpy(words)), device)
    a, a_t = to_device(list(bag_matrices(offsets, member, len(words), combiner)), device)
    return SparseProduct.apply(rows, a, a_t)


def node_input(
    table: Any, rows: NodeRows, nodes: np.ndarray, device: torch.device, ids: torch.Tensor | None = None
) -> torch.Tensor:
    """(len(nodes), table.dim) on `device`: each node's row of `table` (one lookup: collective tables
    call it on every trainer alike), zeros for a node of a type the table has no rows for. `ids`: the
    nodes as a tensor already where the table's rows are (a table over every node only)."""
    if rows.types is None:
        return to_device(table(ids if ids is not None else torch.from_numpy(nodes)), device)
    row = rows.rows(nodes)
    has = np.flatnonzero(row >= 0)
    found = to_device(table(torch.from_numpy(row[has])), device)
    out = torch.zeros(len(nodes), found.shape[1], dtype=found.dtype, device=found.device)
    return out.index_copy(0, torch.from_numpy(has).to(found.device), found)
