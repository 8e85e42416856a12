"""A seeded graph shaped like ogbn-products (issue 45's B1), written as one .npz that `graph.path` reads.

ogbn-products: 2,449,029 nodes, 123,718,280 directed edges (each undirected one both ways), degrees from
1 to 17k with a heavy tail, 100-d features, 47 classes of very unequal size. Its data cannot be had here
(no network beyond the package registries), so this draws a graph of the same shape, and gives it a
planted signal so that accuracy means something:
- classes: 47, their sizes Zipf-like (the largest ~30 times the smallest, as products');
- degrees: a Chung-Lu graph, each node's expected degree drawn from a Pareto law (exponent ALPHA),
  capped at MAX_RATIO times the mean; an undirected edge picks its first end by weight, and its second
  by weight inside the first's class with probability HOMOPHILY, else anywhere. Self-loops are
  dropped, each kept edge is stored both ways;
- features: the class's centre plus Gaussian noise of scale NOISE, standardised: the Bayes rule on the
  features alone is right for 58 % of the nodes; the neighbours' features (the homophily) tell more, so
  a GNN has something to learn.
At --scale 1 (the default): 2,449,029 nodes, 119.9M directed edges, degrees of median 18, mean 49 and
maximum 20.7k; a 1.4 GiB file (CSR: int64 offsets, int32 ids), drawn in 95 s with 3.5 GB of memory on
one core of the build VM. The file is named by scale and seed, written atomically, and reused when it
is there (`ensure`): the cache.

    python bench/products_like.py [--scale 1.0] [--seed 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

NODES = 2_449_029
MEAN_DEGREE = 49.0  # directed edges per node (ogbn-products: 50.5, before this draw's dropped self-loops)
CLASSES = 47
FEATURES = 100
ALPHA = 2.2  # Pareto exponent of the expected degrees
MAX_RATIO = 350.0  # the largest expected degree over the mean (products: 17k over 50)
HOMOPHILY = 0.75  # share of an edge's second ends drawn inside the first end's class
NOISE = 4.5  # feature noise around the class centres (N(0, 1) each): the Bayes rule on features alone: 0.58
CHUNK = 1 << 23  # edges drawn at a time


def path(out: Path, scale: float, seed: int) -> Path:
    return out / f"products-like-s{scale:g}-seed{seed}.npz"


def draw(scale: float, seed: int) -> dict[str, np.ndarray]:
    """The graph's arrays: indptr/indices (CSR by source, both directions), feat, label, num_nodes."""
    rng = np.random.default_rng(seed)
    n = max(CLASSES * 4, int(NODES * scale))
    shares = 1.0 / np.arange(1, CLASSES + 1) ** 0.9
    label = rng.choice(CLASSES, n, p=shares / shares.sum()).astype(np.int64)
    weight = rng.pareto(ALPHA - 1.0, n) + 1.0
    np.minimum(weight, MAX_RATIO * weight.mean(), out=weight)
    # nodes in class order: a class's nodes are one range, its weights one stretch of the cumulative sum
    by_class = np.argsort(label, kind="stable")
    cum = np.cumsum(weight[by_class])
    cum /= cum[-1]
    starts = np.searchsorted(label[by_class], np.arange(CLASSES + 1))
    lo = np.where(starts[:-1] > 0, cum[np.maximum(starts[:-1] - 1, 0)], 0.0)
    hi = cum[np.maximum(starts[1:] - 1, 0)]
    undirected = int(n * MEAN_DEGREE / 2)
    src_parts, dst_parts = [], []
    for first in range(0, undirected, CHUNK):
        m = min(CHUNK, undirected - first)
        a = by_class[np.searchsorted(cum, rng.random(m), side="right").clip(max=n - 1)]
        u = rng.random(m)
        inside = rng.random(m) < HOMOPHILY
        c = label[a]
        u = np.where(inside, lo[c] + u * (hi[c] - lo[c]), u)
        b = by_class[np.searchsorted(cum, u, side="right").clip(max=n - 1)]
        keep = a != b
        src_parts.append(a[keep].astype(np.int32))
        dst_parts.append(b[keep].astype(np.int32))
    a = np.concatenate(src_parts)
    b = np.concatenate(dst_parts)
    del src_parts, dst_parts
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    del a, b
    order = np.argsort(src, kind="stable")
    indices = dst[order]
    del order, dst
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    del src
    centres = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    feat = centres[label] + NOISE * rng.standard_normal((n, FEATURES), dtype=np.float32)
    feat /= np.float32(np.sqrt(1.0 + NOISE**2))  # unit variance, as standardised features are
    return {
        "indptr": indptr,
        "indices": indices,
        "feat": feat,
        "label": label,
        "num_nodes": np.array(n, dtype=np.int64),
    }


def ensure(out: Path, scale: float = 1.0, seed: int = 0, log=print) -> Path:  # noqa: ANN001
    """The graph's file under `out`, drawn and written (atomically) unless it is there already."""
    target = path(out, scale, seed)
    if target.exists():
        return target
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    arrays = draw(scale, seed)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, target)
    edges, nodes = len(arrays["indices"]), int(arrays["num_nodes"])
    log(
        f"[products-like] {nodes:,} nodes, {edges:,} directed edges, {CLASSES} classes, "
        f"{FEATURES}-d features: {target} ({target.stat().st_size / 2**30:.2f} GiB, "
        f"{time.perf_counter() - t0:.0f} s)"
    )
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="share of ogbn-products' node count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/.cache"))
    a = ap.parse_args()
    if not 0 < a.scale <= 1 or a.seed < 0:
        raise SystemExit(
            f"bench/products_like.py: --scale must be in (0, 1] and --seed >= 0, got {a.scale}, {a.seed}"
        )
    print(ensure(a.out, a.scale, a.seed))


if __name__ == "__main__":
    main()
