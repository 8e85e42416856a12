"""Link prediction's pure parts: the pair exclusion of the sampler, the decoders' candidate scores
against their pairwise scores, and the gathering of every trainer's rows on one trainer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from graphtrain.contract.spec import Exclude, load_yaml
from graphtrain.runtime.graph.loader import drop_pairs, pair_keys
from graphtrain.runtime.models.decoders import Decoder
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.pairs import exclusion

EXAMPLE = Path(__file__).parents[3] / "examples" / "nations-rgcn-lp.yaml"


def test_drop_pairs_removes_exactly_the_excluded_edges_and_recounts_each_destination() -> None:
    n = 10
    frontier = np.array([3, 7, 1])
    counts = np.array([3, 2, 2])  # 3 <- {0, 5, 5}, 7 <- {3, 9}, 1 <- {2, 3}
    src = np.array([0, 5, 5, 3, 9, 2, 3])
    exclude = pair_keys(np.array([5, 3, 4]), np.array([3, 7, 4]), n)  # 5->3 (twice), 3->7; 4->4 absent
    kept, new_counts = drop_pairs(frontier, src, counts, exclude, n)
    assert kept.tolist() == [True, False, False, False, True, True, True]
    assert new_counts.tolist() == [1, 1, 2]
    # nothing excluded: everything kept
    kept, same = drop_pairs(frontier, src, counts, pair_keys(np.array([], int), np.array([], int), n), n)
    assert kept.all() and same.tolist() == counts.tolist()


def test_exclude_unset_is_reverse_with_reverse_edges_and_self_without() -> None:
    """What every pair task's trainer excludes (train/pairs.py exclusion): an explicit task.exclude as
    it is; unset, reverse when graph.reverseEdges made a reverse of every edge, else self."""
    assert exclusion(None, True) == Exclude.reverse
    assert exclusion(None, False) == Exclude.self
    for chosen in Exclude:
        assert exclusion(chosen, True) == chosen and exclusion(chosen, False) == chosen


def test_pair_keys_are_directed() -> None:
    keys = pair_keys(np.array([1]), np.array([2]), 5)
    kept, _ = drop_pairs(np.array([1, 2]), np.array([2, 1]), np.array([1, 1]), keys, 5)
    assert kept.tolist() == [True, False]  # 2->1 stays, 1->2 goes


@pytest.mark.parametrize("kind", ["dot", "distmult", "mlp"])
def test_candidate_scores_equal_the_pairwise_scores(kind: str) -> None:
    """tails(h, r, E)[i, j] == score(h_i, r_i, E_j) and heads(r, t, E)[i, j] == score(E_j, r_i, t_i),
    also batched over a leading chunk dimension (the joint negatives' shape)."""
    torch.manual_seed(0)
    d = Decoder(kind, 8, 3)
    h, t, ents = torch.randn(4, 8), torch.randn(4, 8), torch.randn(6, 8)
    r = d.relation(torch.tensor([0, 1, 2, 1]))
    tails, heads = d.tails(h, r, ents), d.heads(r, t, ents)
    r_ = None if r is None else r.unsqueeze(1)
    torch.testing.assert_close(tails, d.score(h.unsqueeze(1), r_, ents.unsqueeze(0)))
    torch.testing.assert_close(heads, d.score(ents.unsqueeze(0), r_, t.unsqueeze(1)))
    chunked = d.tails(h.view(2, 2, 8), None if r is None else r.view(2, 2, 8), ents.view(2, 3, 8))
    torch.testing.assert_close(chunked[1], d.tails(h[2:], None if r is None else r[2:], ents[3:]))


def test_decoders_start_with_scores_of_order_one() -> None:
    """64-wide embeddings of unit scale score O(1) at the start (not ~8: a softmax over such scores
    saturated and killed a ReLU encoder on Nations)."""
    torch.manual_seed(0)
    h, t = torch.randn(4096, 64), torch.randn(4096, 64)
    for kind in ("dot", "distmult"):
        d = Decoder(kind, 64, 5)
        s = d.score(h, d.relation(torch.randint(5, (4096,))), t)
        assert 0.5 < float(s.detach().std()) < 2.0, (kind, float(s.std()))


def test_gather_rows_of_one_trainer_is_its_rows() -> None:
    rows = torch.randn(3, 4)
    assert Dist().gather_rows(rows) is rows


def test_an_unknown_decoder_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown link decoder"):
        Decoder("bilinear", 4, 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["graphsage", "rgcn", "gat", "rgat"])
def test_layer_by_layer_embeddings_equal_the_full_neighbourhood_forward(
    nations_partition: tuple[dict, Path], kind: str
) -> None:
    """embed_all (each layer over every node once, what evaluation ranks with) gives every node the
    embedding a forward over its whole 2-hop neighbourhood gives it, within 1e-5: one model, two orders
    of the same sums."""
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.graph.loader import sample_blocks
    from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

    spec, cfg = nations_partition
    spec = yaml.safe_load(yaml.safe_dump(spec))
    model = {"kind": kind, "useFeatures": False, "nodeEmbedding": "entity", "hiddenDim": 16, "numLayers": 2}
    if kind in ("gat", "rgat"):
        model["heads"] = 2
    spec["spec"]["model"] = model
    spec["spec"]["embeddings"][0]["dim"] = 16
    gt = load_yaml(yaml.safe_dump(spec))
    graph = DistGraph(cfg, standalone_client(cfg))
    task = GNNLinkPrediction(gt, graph, Dist())
    layered = task.embed_all()
    model_ = task.model
    model_.eval()
    with torch.no_grad():
        mb = sample_blocks(graph, np.arange(graph.num_nodes), [-1, -1])
        whole = task.enc.forward(model_, mb, task.enc.pull(mb), None)
    torch.testing.assert_close(layered, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["graphsage", "rgcn", "gat", "rgat"])
def test_mixed_precision_casts_a_training_forward_and_leaves_evaluation_in_float32(
    nations_partition: tuple[dict, Path], kind: str
) -> None:
    """training.mixedPrecision bfloat16: the encoder's forward (a training step's) runs its products
    in bfloat16 and hands the decoder float32; embed_all (evaluation, inference) is float32's."""
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.graph.loader import sample_blocks
    from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

    spec, cfg = nations_partition
    spec = yaml.safe_load(yaml.safe_dump(spec))
    spec["spec"]["model"] = {"kind": kind, "useFeatures": False, "nodeEmbedding": "entity", "hiddenDim": 16}
    if kind in ("gat", "rgat"):
        spec["spec"]["model"]["heads"] = 2
    spec["spec"]["embeddings"][0]["dim"] = 16
    spec["spec"]["training"]["mixedPrecision"] = "bfloat16"
    graph = DistGraph(cfg, standalone_client(cfg))
    task = GNNLinkPrediction(load_yaml(yaml.safe_dump(spec)), graph, Dist())
    task.model.eval()
    mb = sample_blocks(graph, np.arange(graph.num_nodes), [-1, -1])
    with torch.no_grad():
        e = task.enc.pull(mb)
        cast = task.enc.forward(task.model, mb, e, None)
        task.enc.bfloat16 = False
        plain = task.enc.forward(task.model, mb, e, None)
        task.enc.bfloat16 = True
    assert cast.dtype == torch.float32 and not torch.equal(cast, plain)
    assert float((cast - plain).norm() / plain.norm()) < 0.02  # bfloat16 keeps 8 bits: 0.4 % a rounding
    torch.testing.assert_close(task.embed_all(), plain, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def nations_partition(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """examples/nations-rgcn-lp.yaml's spec and its partition, made as `graphtrain run` makes it."""
    from graphtrain.runtime.launch.local import LocalRun

    where = tmp_path_factory.mktemp("nations-lp")
    doc = yaml.safe_load(EXAMPLE.read_text())
    text = yaml.safe_dump(doc)
    (where / "spec.yaml").write_text(text)
    cfg = LocalRun(
        load_yaml(text), where / "spec.yaml", where / "run", standalone=True, echo=False
    ).partition()
    return doc, cfg


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("sampler", "decoder", "loss", "side"),
    [
        ("uniform", "mlp", "softplus", "tail"),
        ("uniform", "distmult", "crossentropy", "both"),
        ("joint", "dot", "crossentropy", "tail"),
        ("joint", "distmult", "softplus", "both"),
        ("local", "distmult", "margin", "tail"),
        ("inBatch", "mlp", "crossentropy", "tail"),
    ],
)
def test_every_sampler_and_decoder_trains(
    nations_partition: tuple[dict, Path], sampler: str, decoder: str, loss: str, side: str
) -> None:
    """Ten steps of each negative sampler with a decoder and a loss, on either side: finite losses, the
    loss of the last steps below the first's, negatives drawn where the sampler says (local: the
    trainer's own partition), and a uniform negative's kept entity the positive's (every tail replaced
    with negativeSide tail, the heads of the first half with both)."""
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

    doc, cfg = nations_partition
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc["spec"]["task"].update(
        sampler=sampler, decoder=decoder, loss=loss, negatives=8, chunk=16, negativeSide=side
    )
    doc["spec"]["training"]["batchSize"] = 64
    graph = DistGraph(cfg, standalone_client(cfg))
    task = GNNLinkPrediction(load_yaml(yaml.safe_dump(doc)), graph, Dist())
    task.start(0, False)

    class Clock:
        def lap(self, stage: str) -> None:
            pass

    losses = []
    for epoch in range(2):
        for batch in task.batches(epoch, 0):
            if sampler == "local":
                lo, hi = task.own_nodes
                assert int(batch.neg.min()) >= lo and int(batch.neg.max()) < hi
            if sampler == "uniform":
                flat, orig = batch.neg.reshape(-1, 3), batch.pos.repeat_interleave(8, 0)
                heads = 0 if side == "tail" else (len(flat) + 1) // 2
                assert torch.equal(flat[:heads, 2], orig[:heads, 2])  # the head side keeps its tail
                assert torch.equal(flat[heads:, 0], orig[heads:, 0])  # the tail side keeps its head
            losses.append(float(task.step(batch, Clock())[0]))  # type: ignore[arg-type]
    assert all(np.isfinite(losses)) and len(losses) >= 10, losses
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses


def test_local_negatives_of_fewer_trainers_than_partitions_reach_every_partition() -> None:
    """train/link_prediction.own_nodes: each trainer's local range is whole partitions, and the ranges
    of all trainers cover every node once when trainers are fewer than partitions (a lone trainer over
    2 partitions drew its local negatives from the first only); with at least as many trainers, each
    its one partition rank * parts // world, as before."""
    from graphtrain.runtime.train.link_prediction import own_nodes

    bounds = np.array([0, 7, 14])
    assert own_nodes(bounds, 0, 1) == (0, 14)
    assert [own_nodes(bounds, r, 2) for r in range(2)] == [(0, 7), (7, 14)]
    assert [own_nodes(bounds, r, 3) for r in range(3)] == [(0, 7), (0, 7), (7, 14)]
    for parts in range(1, 7):
        b = np.concatenate([[0], np.cumsum(np.arange(parts) + 3)])
        for world in range(1, 9):
            ranges = [own_nodes(b, r, world) for r in range(world)]
            assert all(lo in b and hi in b and lo < hi for lo, hi in ranges), (parts, world, ranges)
            covered = np.zeros(int(b[-1]), dtype=int)
            for lo, hi in dict.fromkeys(ranges):
                covered[lo:hi] += 1
            assert (covered == 1).all(), (parts, world, ranges)


@pytest.mark.timeout(120)
def test_a_lone_trainers_local_negatives_come_from_both_partitions(
    nations_partition: tuple[dict, Path],
) -> None:
    """examples/nations-rgcn-lp.yaml's 2 partitions, one trainer, sampler local: its negatives are
    drawn from the nodes of both partitions (every Nations entity), not the first's 7 alone."""
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

    doc, cfg = nations_partition
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc["spec"]["task"].update(sampler="local", negatives=8, chunk=16)
    graph = DistGraph(cfg, standalone_client(cfg))
    assert len(graph.book.bounds) == 3
    task = GNNLinkPrediction(load_yaml(yaml.safe_dump(doc)), graph, Dist())
    drawn = np.unique(np.concatenate([b.neg.numpy().ravel() for b in task.batches(0, 0)]))
    assert drawn.tolist() == list(range(graph.num_nodes)), drawn


def block_pairs(mb: object) -> list[np.ndarray]:
    """Each block's edges as (source, destination) pair keys in node ids (num_nodes-based: pair_keys')."""
    nodes = mb.input_nodes  # type: ignore[attr-defined]
    out = []
    for block in mb.blocks:  # type: ignore[attr-defined]
        out.append(np.stack([nodes[block.src.numpy()], nodes[block.dst.numpy()]], 1))
        nodes = nodes[: block.num_dst]
    assert np.array_equal(nodes, mb.seeds)  # type: ignore[attr-defined]
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("sampler", "exclude", "side"),
    [
        ("uniform", "reverse", "both"),
        ("inBatch", "reverse", "tail"),
        ("joint", "self", "tail"),
        ("local", "none", "tail"),
    ],
)
def test_no_layer_of_a_batch_holds_its_target_pairs(
    nations_partition: tuple[dict, Path], sampler: str, exclude: str, side: str
) -> None:
    """Every block of every batch of an epoch on Nations' 2 partitions (the sampler reads both shards):
    no edge from a target's head to its tail, of any relation (and with reverse none from tail to
    head either), in any layer, whatever the negatives; exclude none leaves them in (the check sees
    them)."""
    from graphtrain.runtime.graph import DistGraph, standalone_client
    from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

    doc, cfg = nations_partition
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc["spec"]["task"].update(sampler=sampler, exclude=exclude, negativeSide=side, negatives=8, chunk=16)
    doc["spec"]["training"]["batchSize"] = 64
    graph = DistGraph(cfg, standalone_client(cfg))
    task = GNNLinkPrediction(load_yaml(yaml.safe_dump(doc)), graph, Dist())
    n, leaked, seen = graph.num_nodes, 0, 0
    for batch in task.batches(0, 0):
        h, t = batch.pos[:, 0].numpy(), batch.pos[:, 2].numpy()
        banned = set((h * n + t).tolist()) | (set((t * n + h).tolist()) if exclude == "reverse" else set())
        for pairs in block_pairs(batch.mb):
            keys = pairs[:, 0] * n + pairs[:, 1]
            leaked += int(np.isin(keys, np.fromiter(banned, dtype=np.int64)).sum())
            seen += len(keys)
    assert seen > 10_000
    assert (leaked > 1000) if exclude == "none" else (leaked == 0), leaked
