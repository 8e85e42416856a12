"""Blocks whose destination counts are rounded up to a few sizes, so a step's GEMMs take few shapes.

oneDNN builds (JIT-compiles) a GEMM primitive for each new shape and caches up to 1,024 of them. A
sampled block's destination count changes every step, so a bfloat16 GEMM paid for a new primitive
each step and the cache grew a trainer by 1 GB (bench/RESULTS.md, 12-01). `padded_blocks` gives each
block `row_bucket(num_dst)` destinations instead (eight sizes per power of two, at most 12.5 % more
rows), with no copy of any input:
- the added destinations have no in-edges (their rows of the mean are empty, so their mean is zero);
- a destination's own row is a source row (dst i = src i), so a layer reads h[:num_dst] of the padded
  count as a view of rows that exist; the added rows are finite, and their outputs are cut off at the
  end (`fitted`), so their gradient is zero and nothing they computed reaches a real row or a weight;
- the next block's sources are this block's padded destinations: its mean gains empty columns.

Every GEMM of a GraphSAGE step then has its rows (or its inner dimension, for the weights' gradients)
in one of the bucket sizes, and a float32 GEMM done in bfloat16 inside oneDNN (`bf16_products`) reuses
the few primitives it made. The input layer's sources are not padded: only sparse products read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from graphtrain.runtime.graph.loader import Block, csr_tensor


def row_bucket(n: int) -> int:
    """n rounded up to one of eight sizes in each power of two: at most 12.5 % more rows."""
    step = 1 << max(0, n.bit_length() - 4)
    return -(-n // step) * step


def padded_blocks(blocks: list[Block]) -> list[Block]:
    """`blocks` (input layer first) with each block's destinations padded to row_bucket(num_dst), at
    most as many as its sources (a destination row is a source row), and each later block's sources
    the padded destinations of the one before. The last block's output has rows for the padded count:
    its first `blocks[-1].num_dst` are the seeds'."""
    out: list[Block] = []
    num_src = blocks[0].num_src if blocks else 0
    for b in blocks:
        num_dst = min(row_bucket(b.num_dst), num_src)
        out.append(padded_block(b, num_src, num_dst))
        num_src = out[-1].num_dst
    return out


def padded_block(b: Block, num_src: int, num_dst: int) -> Block:
    """Block `b` with `num_dst` >= b.num_dst destinations (the added ones without in-edges) and `num_src`
    >= b.num_src sources (the added ones without out-edges). The edges and their order are unchanged."""
    if (num_src, num_dst) == (b.num_src, b.num_dst):
        return b
    if num_src < b.num_src or num_dst < b.num_dst or num_dst > num_src:
        raise ValueError(f"cannot pad a {b.num_dst} x {b.num_src} block to {num_dst} x {num_src}")
    return Block(
        num_src,
        num_dst,
        b.src,
        b.dst,
        None if b.mean is None else _grown(b.mean, num_dst, num_src),
        None if b.mean_t is None else _grown(b.mean_t, num_src, num_dst),
        b.etype,
        b.eid,
        b.efeat,
        b.order,
    )


def _grown(a: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """CSR matrix `a` with empty rows appended up to `rows` and its column count raised to `cols`."""
    crow = a.crow_indices()
    extra = rows - (len(crow) - 1)
    if extra:
        crow = torch.cat([crow, crow[-1:].expand(extra)])
    return csr_tensor(crow, a.col_indices(), a.values(), (rows, cols))


def implicit_bf16(bfloat16: bool, device: str, pads: bool, bare_output: bool, amx: bool) -> bool:
    """Whether training.mixedPrecision bfloat16 runs as float32 GEMMs done in bfloat16 (bf16_products)
    on padded blocks rather than under autocast: on a CPU with AMX (WordNet GraphSAGE's model step there,
    features: autocast 9.8 ms, this 7.7, float32 12.0; with a 128-d embedding 17.2, 12.4 and 19.0 ms:
    autocast's casts and pads cost more than its bfloat16 GEMMs save), for a model whose every GEMM runs
    on padded blocks (`pads`: GraphSAGE), in a task whose loss reads the output with no GEMMs of its own
    (`bare_output`: a decoder's GEMMs over a batch's edge count would each make a primitive). Elsewhere
    (GPUs, CPUs without AMX, where it was not measured) autocast, as before."""
    return bfloat16 and device == "cpu" and pads and bare_output and amx


@contextlib.contextmanager
def bf16_products() -> Iterator[None]:
    """float32 GEMMs done in bfloat16 inside oneDNN (inputs rounded to bfloat16, float32 sums and
    outputs) while inside: no casts in the graph, unlike autocast's. torch falls back to float32 where
    the CPU has no bfloat16 instructions. Process-wide: only the training thread runs GEMMs."""
    flags = torch.backends.mkldnn.matmul
    was = flags.fp32_precision
    flags.fp32_precision = "bf16"
    try:
        yield
    finally:
        flags.fp32_precision = was
