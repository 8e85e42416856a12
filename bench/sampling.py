"""Mini-batch sampling, host against device, side by side: `python bench/sampling.py [--device cuda]`.

What a GraphSAGE trainer waits for per batch before its model runs (its "sample" stage), on WordNet
partitioned in 2 (standalone shards: the graph mapped in this process), 1,024 seeds, fan-outs 10 and 25:
- host: loader.sample_blocks, the shards' native sampler, numpy relabelling and mean matrices;
- host + copy: the same, its blocks then copied to --device (what a GPU trainer did before it sampled
  on its GPU; on the CPU nothing is copied);
- device: device_sampler.sample_blocks_on, the graph on --device (the CUDA core's draw there, the CPU
  core's on the host), relabelling and mean matrices by tensor ops.
All three draw the same samples (checked on the first batch). Then the batch's input features (the
"fetch" that follows on the loader thread):
- host fetch + copy: the input nodes' rows pulled from the shards (read in place) and copied to --device;
- device gather: one gather from the features held whole on --device (device_data.py).
ms per batch, median of --batches after 2 warm-ups, each batch's device work waited for. Needs the
WordNet dataset (graphtrain data fetch wordnet).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from graphtrain.runtime import partition
from graphtrain.runtime.data import datasets
from graphtrain.runtime.data.transform import project_graph_features
from graphtrain.runtime.graph import DistGraph, node_split, sample_blocks
from graphtrain.runtime.graph import device_data as dd
from graphtrain.runtime.graph import device_sampler as ds
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.graph.loader import MiniBatch


def timed(
    make: Callable[[np.ndarray, int], MiniBatch], batches: list[np.ndarray], device: torch.device
) -> float:
    def wait() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for i in range(2):
        make(batches[i], i)
    times = []
    for i, seeds in enumerate(batches):
        wait()
        start = time.perf_counter()
        make(seeds, i)
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[10, 25])
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)  # a trainer's sampling runs on one thread
    with tempfile.TemporaryDirectory() as tmp:
        g = project_graph_features(datasets.load("wordnet"), 256)  # examples/wordnet-sage.yaml's features
        config = partition.write(
            g, partition.partition_graph(g, 2, "metis", ["nodes"], 0.05, 0), Path(tmp) / "p"
        )
        graph = DistGraph(config, standalone_client(config))
        on_device = ds.device_graph("device", device, graph.client, graph.num_nodes)
        assert on_device is not None
        ids = node_split(graph.config, "train", 0, 1)
        rng = np.random.default_rng(0)
        batches = [rng.choice(ids, args.batch_size, replace=False) for _ in range(args.batches)]
        fanouts = list(args.fanouts)

        def host(seeds: np.ndarray, i: int) -> MiniBatch:
            return sample_blocks(graph, seeds, fanouts, seed=i)

        def host_copy(seeds: np.ndarray, i: int) -> MiniBatch:
            mb = host(seeds, i)
            mb.blocks = [b.to(device) for b in mb.blocks] if device.type == "cuda" else mb.blocks
            return mb

        def device_(seeds: np.ndarray, i: int) -> MiniBatch:
            return ds.sample_blocks_on(on_device, seeds, fanouts, seed=i)

        a, b = host(batches[0], 0), device_(batches[0], 0)
        same = np.array_equal(a.input_nodes, b.input_nodes) and all(
            torch.equal(x.mean.to_dense(), y.mean.to_dense().cpu())
            for x, y in zip(a.blocks, b.blocks, strict=True)
        )
        rows = [
            (name, timed(f, batches, device))
            for name, f in (("host", host), ("host + copy", host_copy), ("device", device_))
        ]
        feat = graph.ndata["feat"]
        data = dd.device_node_data({"feat": feat}, graph.num_nodes, device, None)
        made = [device_(seeds, i) for i, seeds in enumerate(batches)]
        by_seeds = {id(seeds): mb for seeds, mb in zip(batches, made, strict=True)}

        def fetch(seeds: np.ndarray, i: int) -> MiniBatch:
            mb = by_seeds[id(seeds)]
            mb.data["x"] = feat[mb.input_nodes].to(device)
            return mb

        def gather(seeds: np.ndarray, i: int) -> MiniBatch:
            mb = by_seeds[id(seeds)]
            assert mb.input_device is not None
            mb.data["x"] = data["feat"].index_select(0, mb.input_device)
            return mb

        inputs = int(np.median([len(mb.input_nodes) for mb in made]))
        fetched = [(name, timed(f, batches, device)) for name, f in (("fetch", fetch), ("gather", gather))]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(
        f"# bench/sampling.py, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"torch {torch.__version__}, {name}"
    )
    print(f"WordNet, {args.batch_size} seeds, fan-outs {fanouts}, device {device}, same samples: {same}")
    print("| sampler | ms per batch | vs host + copy |\n|---|---|---|")
    base = rows[1][1]
    for label, ms in rows:
        print(f"| {label} | {ms:.2f} | {base / ms:.2f}x |")
    print(f"\ninput features: {inputs:,} input nodes per batch (median) x {feat.shape[1]} float32")
    print("| features | ms per batch | vs host fetch + copy |\n|---|---|---|")
    for label, ms in (("host fetch + copy", fetched[0][1]), ("device gather", fetched[1][1])):
        print(f"| {label} | {ms:.2f} | {fetched[0][1] / ms:.2f}x |")


if __name__ == "__main__":
    main()
