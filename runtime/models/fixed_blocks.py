"""A GraphSAGE batch at a fixed capacity: the same shapes at every step, so its step can be captured
once as a CUDA graph and replayed (issue 45, item 4; train/graphed.py, train/captured_sage.py).

A sampled batch's node and edge counts change every step. Packed here, each layer's nodes are padded
to `Capacity.nodes` and each block's edges to `Capacity.edges`, and the step then reads its blocks
from fixed buffers. Exact, not approximate:
- the added nodes of a layer come after its real ones, so a layer's first rows are still its
  destinations (dst i = src i) and the next layer's sources are this layer's padded destinations;
- the added edges (value 0) sit in the added rows of the mean and of its transpose (every capacity is
  at least one more than what it holds, so there is one): no real row's sum gains a term, and an
  added node's output and gradient are 0 or never read;
- the input layer's added ids repeat its first real id, so a table lookup reads a real row and the
  gradient it gives back to that row is 0: the sparse step's sum over duplicates is unchanged (a table
  that averages duplicates is refused: train/captured_sage.refusal);
- the seeds' rows are the output's first, cut back to the batch (layers.fitted).
A batch beyond the capacity is trained eagerly; `fits` says which.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphtrain.runtime.graph.loader import Block, csr_tensor
from graphtrain.runtime.models.padding import row_bucket

HEADROOM = 1.25  # a capacity over the most a batch needed while it was learned


@dataclass(frozen=True)
class Capacity:
    """Each layer's rows, input layer first and the seeds' last (one more than blocks), and each
    block's edges."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]

    def tensors(self) -> int:
        """Buffers a packed batch's blocks take: each block's mean and its transpose, three apiece."""
        return 6 * len(self.edges)


@dataclass(frozen=True)
class Sizes:
    """What one batch needs: its layers' node counts (as Capacity.nodes) and its blocks' edge counts."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]


def sizes(blocks: list[Block]) -> Sizes:
    """The node and edge counts of a batch's blocks (input layer first), which must carry their means.

    Raises:
        ValueError: a block without its mean and transpose, or blocks that do not chain.
    """
    for b in blocks:
        if b.mean is None or b.mean_t is None:
            raise ValueError("a block packed at a fixed capacity needs its mean and its transpose")
    for a, b in zip(blocks, blocks[1:], strict=False):
        if a.num_dst != b.num_src:
            raise ValueError(f"blocks do not chain: {a.num_dst} destinations, then {b.num_src} sources")
    nodes = tuple(b.num_src for b in blocks) + ((blocks[-1].num_dst,) if blocks else ())
    return Sizes(nodes, tuple(int(b.mean.values().shape[0]) for b in blocks if b.mean is not None))


def capacity_for(seen: list[Sizes], seeds: int, headroom: float = HEADROOM) -> Capacity:
    """A capacity over the batches `seen` (the steps it was learned on) with `headroom`, each count
    rounded up to padding.row_bucket's sizes and at least one more than the most seen; the seeds' layer
    holds `seeds` + 1. A layer never holds more rows than the one before it (its destinations are the
    first of that layer's sources).

    Raises:
        ValueError: nothing seen, or batches of other depths.
    """
    if not seen or len({len(s.nodes) for s in seen}) != 1:
        raise ValueError("a capacity is learned from one or more batches of the same depth")

    def grown(most: int) -> int:
        return max(row_bucket(int(most * headroom) + 1), most + 1)

    depth = len(seen[0].nodes)
    nodes = [grown(max(s.nodes[i] for s in seen)) for i in range(depth - 1)] + [seeds + 1]
    for i in range(depth - 2, -1, -1):
        nodes[i] = max(nodes[i], nodes[i + 1])
    edges = tuple(grown(max(s.edges[i] for s in seen)) for i in range(depth - 1))
    return Capacity(tuple(nodes), edges)


def fits(need: Sizes, cap: Capacity) -> bool:
    """Whether a batch of `need` packs into `cap`: each layer with room for an added node, each block's
    edges within its capacity."""
    return (
        len(need.nodes) == len(cap.nodes)
        and all(n < c for n, c in zip(need.nodes, cap.nodes, strict=True))
        and all(e <= c for e, c in zip(need.edges, cap.edges, strict=True))
    )


def padded_csr(
    a: torch.Tensor, rows: int, nnz: int, cols: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row pointer, columns, values) of CSR `a` grown to `rows` rows (of `cols` columns) and `nnz`
    entries. The added entries (value 0) are spread over the added rows, which `a` must leave at least
    one of, each row's at columns 0, 1, ...: sorted and distinct within a row (cuSPARSE's CSR asks for
    no repeated pair) while the added rows times `cols` hold them. No host read: every size is a shape."""
    crow, col, val = a.crow_indices(), a.col_indices(), a.values()
    real_rows, real = len(crow) - 1, len(col)
    added, extra = rows - real_rows, nnz - real
    if added < 1 or extra < 0:
        raise ValueError(
            f"a {real_rows}-row CSR of {real} entries does not fit {rows - 1} rows, {nnz} entries"
        )
    per_row = torch.full((added,), extra // added, dtype=crow.dtype, device=crow.device)
    per_row[: extra % added] += 1
    ends = per_row.cumsum(0)
    crow = torch.cat([crow, ends + real])
    within = torch.arange(extra, dtype=col.dtype, device=col.device) - torch.repeat_interleave(
        ends - per_row, per_row, output_size=extra
    )
    col = torch.cat([col, within % cols])
    val = torch.cat([val, val.new_zeros(extra)])
    return crow, col, val


def pack(blocks: list[Block], cap: Capacity) -> list[torch.Tensor]:
    """The buffers of a batch's blocks at capacity `cap` (the batch must fit: `fits`): per block, its
    mean's row pointer, columns and values, then its transpose's."""
    out: list[torch.Tensor] = []
    for i, b in enumerate(blocks):
        assert b.mean is not None and b.mean_t is not None
        out += padded_csr(b.mean, cap.nodes[i + 1], cap.edges[i], cap.nodes[i])
        out += padded_csr(b.mean_t, cap.nodes[i], cap.edges[i], cap.nodes[i + 1])
    return out


def unpack(buffers: list[torch.Tensor], cap: Capacity) -> list[Block]:
    """The blocks that read `buffers` (pack's, or the captured step's copies of them), of the
    capacity's shapes. They carry no edge lists: GraphSAGE reads a block's mean and its transpose."""
    blocks = []
    none = buffers[0].new_empty(0)
    for i, e in enumerate(cap.edges):
        crow, col, val, crow_t, col_t, val_t = buffers[6 * i : 6 * i + 6]
        src, dst = cap.nodes[i], cap.nodes[i + 1]
        mean = csr_tensor(crow, col, val, (dst, src))
        mean_t = csr_tensor(crow_t, col_t, val_t, (src, dst))
        assert len(col) == e
        blocks.append(Block(src, dst, none, none, mean, mean_t))
    return blocks


def padded_rows(x: torch.Tensor, rows: int, repeat_first: bool = False) -> torch.Tensor:
    """`x` grown to `rows` rows: zeros, or (`repeat_first`: ids a table looks up) copies of its first."""
    extra = rows - x.shape[0]
    if extra < 0:
        raise ValueError(f"{x.shape[0]} rows do not fit {rows}")
    if not extra:
        return x
    if repeat_first:
        return torch.cat([x, x[:1].expand(extra, *x.shape[1:])])
    return torch.cat([x, x.new_zeros((extra, *x.shape[1:]))])
