"""A block's two CSR means in one pass of the CPU core (sampling.cpp: gt_block_means) against the numpy
passes that loader.mean_matrices falls back to: the same matrices and edge order, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.graph import loader
from graphtrain.runtime.native.graph import block_means


def numpy_means(counts: np.ndarray, src: np.ndarray, num_src: int, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as m:
        m.setattr(loader, "choose", lambda *a: None)  # not the CPU core: numpy's passes
        return loader.mean_matrices(counts, src, num_src)


@pytest.mark.parametrize(
    ("num_dst", "num_src", "most"),
    [(0, 0, 0), (1, 1, 0), (40, 200, 9), (3_000, 70_000, 25)],  # past 2^16 sources: not 16-bit keys
)
def test_the_core_builds_numpys_matrices_and_order(
    num_dst: int, num_src: int, most: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(num_dst)
    counts = rng.integers(0, most + 1, num_dst).astype(np.int64)
    src = rng.integers(0, max(num_src, 1), int(counts.sum())).astype(np.int64)
    got = loader.mean_matrices(counts, src, num_src)
    want = numpy_means(counts, src, num_src, monkeypatch)
    for a, b in zip(got[:2], want[:2], strict=True):
        assert a.shape == b.shape
        for part in ("crow_indices", "col_indices", "values"):
            assert torch.equal(getattr(a, part)(), getattr(b, part)()), part
    assert torch.equal(got[2], want[2])


def test_bad_counts_or_sources_are_named() -> None:
    src = np.array([0, 1, 2], np.int64)
    with pytest.raises(SparseInputError, match=r"counts\[1\] is negative"):
        block_means(np.array([4, -1], np.int64), src, 3)
    with pytest.raises(SparseInputError, match="counts add up to other than 3"):
        block_means(np.array([1, 1], np.int64), src, 3)
    with pytest.raises(SparseInputError, match=r"src_local\[2\] = 2 is outside \[0, 2\)"):
        block_means(np.array([3], np.int64), src, 2)
    with pytest.raises(SparseInputError, match="src_local must be a contiguous 1-D int64"):
        block_means(np.array([3], np.int64), src.astype(np.int32), 3)
