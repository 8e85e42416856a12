"""bench/products_like.py (issue 45's B1 graph) and bench/ceiling.py's model-only step, at a small scale:
the graph has the shape it claims (symmetric, no self-loops, every class, a heavy degree tail, the planted
homophily), `graph.path` reads it, and the ceiling runs the trainer's module over real blocks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))

import ceiling  # noqa: E402
import gpu  # noqa: E402
import products_like  # noqa: E402

SCALE = 0.004  # ~9,800 nodes, ~240k directed edges


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    return products_like.draw(SCALE, 0)


def test_shape(arrays: dict[str, np.ndarray]) -> None:
    n = int(arrays["num_nodes"])
    indptr, indices, label = arrays["indptr"], arrays["indices"], arrays["label"]
    assert n == int(products_like.NODES * SCALE)
    assert len(indptr) == n + 1 and indptr[-1] == len(indices)
    src = np.repeat(np.arange(n), np.diff(indptr))
    assert not np.any(src == indices), "a self-loop"
    forward = np.sort(src.astype(np.int64) * n + indices)
    backward = np.sort(indices.astype(np.int64) * n + src)
    assert np.array_equal(forward, backward), "an edge without its reverse"
    mean = len(indices) / n
    assert 0.9 * products_like.MEAN_DEGREE < mean <= products_like.MEAN_DEGREE
    degree = np.diff(indptr)
    assert degree.max() > 10 * mean  # the Pareto tail
    assert set(np.unique(label)) == set(range(products_like.CLASSES))
    sizes = np.bincount(label)
    assert sizes.max() > 10 * sizes.min()  # unequal classes, as products'
    inside = np.mean(label[src] == label[indices])
    assert products_like.HOMOPHILY - 0.05 < inside < products_like.HOMOPHILY + 0.1  # less self-loops
    assert arrays["feat"].shape == (n, products_like.FEATURES) and arrays["feat"].dtype == np.float32


def test_seeded(arrays: dict[str, np.ndarray]) -> None:
    again = products_like.draw(SCALE, 0)
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
    other = products_like.draw(SCALE, 1)
    assert not np.array_equal(arrays["label"], other["label"])


def test_cached_file_is_what_graph_path_reads(tmp_path: Path) -> None:
    from graphtrain.runtime.data.files import load_file

    lines: list[str] = []
    target = products_like.ensure(tmp_path, SCALE, 0, log=lines.append)
    assert len(lines) == 1 and target.exists()
    mtime = target.stat().st_mtime_ns
    assert products_like.ensure(tmp_path, SCALE, 0, log=lines.append) == target
    assert len(lines) == 1 and target.stat().st_mtime_ns == mtime  # reused, not drawn again
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left
    g = load_file(target)
    drawn = products_like.draw(SCALE, 0)
    assert g.num_nodes == int(drawn["num_nodes"]) and g.num_edges == len(drawn["indices"])
    assert np.array_equal(g.label, drawn["label"])


@pytest.mark.parametrize(
    ("variant", "mixed"), [*((v, "none") for v in gpu.VARIANTS), ("features", "bfloat16")]
)
def test_ceiling_runs_the_trainers_module(tmp_path: Path, variant: str, mixed: str) -> None:
    """The model-only step over real blocks of the B1 spec: the module learns (its weights move, its loss
    on a fixed batch falls), and the rate is a positive number; with training.mixedPrecision too."""
    npz = products_like.ensure(tmp_path / "cache", SCALE, 0)
    spec = tmp_path / "b1.yaml"
    spec.write_text(yaml.safe_dump(gpu.b1_spec(npz, "cpu", variant, 1, mixed)))
    device = torch.device("cpu")
    gt, enc, batches = ceiling.sampled_batches(spec, tmp_path / "work", 2, device)
    assert [len(b) for b in (batches[0].blocks,)] == [3]  # three layers, fan-outs [15, 10, 5]
    assert (enc.emb is not None) == (variant == "table")
    before = [p.detach().clone() for p in enc.module.parameters()]
    rate, ms = ceiling.ceiling(gt, enc, batches, device, steps=2, warmup=1, repeat=1)
    assert rate > 0 and ms > 0
    after = list(enc.module.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
