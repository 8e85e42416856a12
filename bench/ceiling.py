"""The model-only ceiling of a node-classification spec's training step: `python bench/ceiling.py SPEC`.

What the trainer's step could reach if sampling, fetching and the tables cost nothing (issue 45 item 6's
"model-only ceiling"; on the CPU, the floor the e2e ratios against DGL stand on). The spec's graph is
partitioned as `graphtrain run` partitions it, and --batches real mini-batches are sampled from it once,
before the clock (the spec's batch size and fan-outs, so the blocks have the real shapes). Then the
timed loop runs, over those batches in turn, exactly the model part of the trainer's step:
- the inputs are random tensors of the real widths on --device: the features (no gradient) and the
  learnable rows of the node embedding or feature bag (a leaf that gets its gradient, as the pulled rows
  do; nothing is pushed);
- the module the trainer builds (the spec's registered model, its shape from the graph), its forward,
  cross-entropy against random labels, backward, and the dense optimizer's step (training.denseOptimizer,
  training.denseLr).
samples/s is seeds per second over --steps steps after --warmup; the median of --repeat rounds. With
--full the same spec also runs whole (`graphtrain run --standalone`, bench/e2e.py's timed window,
--epochs epochs) in the same call, so the two rates sit side by side: their gap is what sampling,
fetching and the tables cost the step.

    python bench/ceiling.py examples/wordnet-sage-features.yaml [--device cpu] [--threads N] [--full]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    from graphtrain.contract.spec import GraphTraining
    from graphtrain.runtime.graph.loader import MiniBatch
    from graphtrain.runtime.partition import PartitionConfig
    from graphtrain.runtime.train.encoder import GNNEncoder


def sampled_batches(
    spec_path: Path, work: Path, count: int, device: torch.device, partition: Path | None = None
) -> tuple[GraphTraining, GNNEncoder, list[MiniBatch]]:
    """(encoder, batches): the spec's GNN encoder over its partitioned graph and `count` mini-batches
    of the spec's batch size and fan-outs, their blocks on `device`. `partition`: a partition of the
    spec's graph made already (a `graphtrain run` of the same graph and partition settings), read
    instead of partitioning again when it loads: on the B1 graph a partition costs a minute or more."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.graph import DistGraph, node_split, sample_blocks
    from graphtrain.runtime.graph.dist_graph import standalone_client
    from graphtrain.runtime.graph.fanouts import layer_fanouts
    from graphtrain.runtime.launch import partition_step
    from graphtrain.runtime.train.dist import seed_everything
    from graphtrain.runtime.train.encoder import GNNEncoder

    gt = load_yaml(spec_path.read_text())
    if str(gt.spec.task.kind) != "nodeClassification":
        raise SystemExit(f"bench/ceiling.py: task.kind {gt.spec.task.kind}: only nodeClassification")
    config = made_partition(partition)
    if config is None:
        work_item = partition_step.from_spec(gt, spec_path.resolve().parent)
        config = partition_step.partition(
            work_item, work / "partition", overwrite=True, data_dir=None, warn=lambda m: None
        )
    graph = DistGraph(config, standalone_client(config.path))
    tr = gt.spec.training
    seed_everything(tr.seed)
    enc = GNNEncoder(gt.spec, graph, device, int(graph.num_classes), bare_output=True)  # as the task
    fanouts = layer_fanouts(tr.fanouts, tr.edge_type_fanouts, graph.canonical_etypes)
    ids = node_split(graph.config, "train", 0, 1)
    rng = np.random.default_rng(tr.seed)
    batches = []
    for i in range(count):
        seeds = rng.choice(ids, min(tr.batch_size, len(ids)), replace=False)
        mb = sample_blocks(graph, seeds, fanouts, seed=i)
        mb.blocks = [b.to(device) for b in mb.blocks]
        batches.append(mb)
    return gt, enc, batches


def made_partition(path: Path | None) -> PartitionConfig | None:
    """The partition in `path` when there is one that loads, else None."""
    from graphtrain.runtime.errors import GraphtrainError
    from graphtrain.runtime.partition import load_config

    if path is None or not path.is_dir():
        return None
    try:
        return load_config(path)
    except (OSError, ValueError, GraphtrainError):
        return None


def learnable_width(enc: GNNEncoder) -> int:
    """The width of the rows the encoder pulls (feature bag, then node embedding)."""
    return sum(t.dim for t in (enc.words, enc.emb) if t is not None)


def ceiling(
    gt: GraphTraining,
    enc: GNNEncoder,
    batches: list[MiniBatch],
    device: torch.device,
    steps: int,
    warmup: int,
    repeat: int,
) -> tuple[float, float]:
    """(samples/s, ms per step) of the model-only step over `batches` in turn: median of `repeat`."""
    from graphtrain.runtime.train.dense import dense_optimizer

    tr = gt.spec.training
    model = enc.module
    model.train()
    opt = dense_optimizer(str(tr.dense_optimizer), model.parameters(), tr.dense_lr)
    gen = torch.Generator(device=device).manual_seed(tr.seed)
    feat_dim = enc.feat.shape[1] if enc.feat is not None else 0
    width = learnable_width(enc)
    inputs = []
    for mb in batches:
        n = len(mb.input_nodes)
        x = torch.randn(n, feat_dim, generator=gen, device=device) if feat_dim else None
        e = torch.randn(n, width, generator=gen, device=device).requires_grad_() if width else None
        inputs.append((x, e))
    with torch.no_grad():
        out_dim = enc.forward(model, batches[0], inputs[0][1], inputs[0][0]).shape[1]
    labels = [torch.randint(out_dim, (len(mb.seeds),), generator=gen, device=device) for mb in batches]

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(i: int) -> None:
        k = i % len(batches)
        x, e = inputs[k]
        if e is not None:
            e.grad = None
        logits = enc.forward(model, batches[k], e, x)
        loss = torch.nn.functional.cross_entropy(logits, labels[k])
        opt.zero_grad()
        with enc.products():  # bfloat16 GEMMs in backward too, where the forward ran them (encoder.py)
            loss.backward()
        opt.step()

    rates, times = [], []
    for _ in range(repeat):
        for i in range(warmup):
            step(i)
        sync()
        t0 = time.perf_counter()
        seeds = 0
        for i in range(steps):
            step(i)
            seeds += len(batches[i % len(batches)].seeds)
        sync()
        dt = time.perf_counter() - t0
        rates.append(seeds / dt)
        times.append(dt / steps * 1e3)
    return statistics.median(rates), statistics.median(times)


_SIZES = (lambda b: b.num_dst, lambda b: b.num_src, lambda b: len(b.src))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", type=Path, help="a nodeClassification GraphTraining YAML")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--batches", type=int, default=16, help="mini-batches sampled before the clock")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also run the spec whole, standalone")
    ap.add_argument("--epochs", type=int, default=3, help="the whole run's epochs (--full)")
    a = ap.parse_args()
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    if min(a.batches, a.steps, a.repeat) < 1 or a.warmup < 0:
        raise SystemExit("bench/ceiling.py: --batches, --steps and --repeat must be >= 1, --warmup >= 0")
    from graphtrain.contract.spec import SpecError
    from graphtrain.runtime.errors import GraphtrainError

    with tempfile.TemporaryDirectory(prefix="graphtrain-ceiling-") as tmp:
        try:
            gt, enc, batches = sampled_batches(a.spec, Path(tmp), a.batches, device)
        except (OSError, SpecError, GraphtrainError) as exc:
            raise SystemExit(f"bench/ceiling.py: {a.spec}: {exc}") from None
        rate, ms = ceiling(gt, enc, batches, device, a.steps, a.warmup, a.repeat)
        full = None
        if a.full:
            from e2e import graphtrain_run

            doc = yaml.safe_load(a.spec.read_text())
            tr = doc["spec"].setdefault("training", {})
            tr.update({"epochs": a.epochs, "evalEvery": 1000, "checkpointInterval": 10**9})
            full = graphtrain_run(doc, Path(tmp), standalone=True, measure=True)["samples_per_second"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    blocks = [
        tuple(int(np.median([f(mb.blocks[i]) for mb in batches])) for f in _SIZES)
        for i in range(len(batches[0].blocks))
    ]
    print(
        f"# bench/ceiling.py {a.spec.name}, {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, "
        f"{name}, torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}"
    )
    print("blocks (median destinations, sources, edges), input layer first: " + ", ".join(map(str, blocks)))
    print("| step | samples/s | ms per step |\n|---|---|---|")
    print(f"| model only (ceiling) | {rate:,.0f} | {ms:.2f} |")
    if full is not None:
        bs = gt.spec.training.batch_size
        print(f"| whole, standalone | {full:,.0f} | {bs / full * 1e3:.2f} |")
        print(f"\nthe whole step at {full / rate:.0%} of the ceiling's rate")


if __name__ == "__main__":
    main()
