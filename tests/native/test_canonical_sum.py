"""The canonical order of duplicate sums (cuda/include/graphtrain/optim_math.h, kSumChunk): an id's
gradient rows in batch order, in chunks of 256, each chunk summed from its first row, the chunk sums
added in order. The CPU core's step and dedup follow it bit for bit, whatever the thread count, so the
CUDA core (tests/gpu/test_cuda_skew.py), which sums a hot id's chunks on many warps, can equal them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.native import optim as native
from graphtrain.runtime.optim import OptimConfig, make_state
from graphtrain.runtime.optim.functional import native_args

CHUNK = 256


def canonical_sums(ids: np.ndarray, grads: np.ndarray) -> dict[int, np.ndarray]:
    """Each id's rows summed in the canonical order, in float32 (numpy adds float32 arrays exactly as
    IEEE single precision, one add per element)."""
    out: dict[int, np.ndarray] = {}
    for i in np.unique(ids):
        rows = grads[ids == i]
        chunks = []
        for c in range(0, len(rows), CHUNK):
            part = rows[c].copy()
            for r in rows[c + 1 : c + CHUNK]:
                part = part + r
            chunks.append(part)
        total = chunks[0]
        for part in chunks[1:]:
            total = total + part
        out[int(i)] = total
    return out


def skewed(rows: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One id 1,000 times, one exactly 512 times (two full chunks), one 300 times, a tail seen once or twice,
    shuffled."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([np.full(1000, 3), np.full(512, 7), np.full(300, 11), rng.integers(20, rows, 700)])
    rng.shuffle(ids)
    grads = rng.standard_normal((len(ids), dim)).astype(np.float32) * 10
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(grads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dim", [1, 33, 128])
def test_the_cpu_step_sums_in_the_canonical_order(threads: int, dim: int) -> None:
    """SGD with lr 1 on a zero table leaves each row at exactly minus its reduced gradient."""
    rows = 2000
    ids, grads = skewed(rows, dim)
    config = OptimConfig("sgd", 1.0)
    table = torch.zeros(rows, dim)
    native.sparse_step(native_args(config), table, make_state(config, rows, dim), ids, grads, threads)
    for i, want in canonical_sums(ids.numpy(), grads.numpy()).items():
        np.testing.assert_array_equal(-table[i].numpy(), want, err_msg=f"row {i}")


@pytest.mark.parametrize("threads", [1, 2])
def test_the_cpu_dedup_sums_in_the_canonical_order(threads: int) -> None:
    ids, grads = skewed(2000, 16, seed=1)
    uniq, reduced, _ = native.dedup(ids, grads, 2000, mean=False, threads=threads)
    want = canonical_sums(ids.numpy(), grads.numpy())
    for k, i in enumerate(uniq.tolist()):
        np.testing.assert_array_equal(reduced[k].numpy(), want[i], err_msg=f"id {i}")


def test_the_mean_divides_the_canonical_sum() -> None:
    ids, grads = skewed(2000, 8, seed=2)
    uniq, reduced, _ = native.dedup(ids, grads, 2000, mean=True, threads=2)
    counts = {int(i): int(c) for i, c in zip(*np.unique(ids.numpy(), return_counts=True), strict=True)}
    want = canonical_sums(ids.numpy(), grads.numpy())
    for k, i in enumerate(uniq.tolist()):
        np.testing.assert_array_equal(reduced[k].numpy(), want[i] / np.float32(counts[i]))
