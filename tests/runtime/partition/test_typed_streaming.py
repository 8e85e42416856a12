"""The streaming partitioner on typed graphs (partition/streaming.py over edge files typed chunk by chunk,
data/edgefiles.py's EdgeTyping): the streamed partition is the in-memory typed Fennel partition file for
file; from edge files in any order it keeps each node type a range of each part, maps (type, id) through
the partition book, carries every edge's type, original id and features, balances every type within the
tolerance; DistGraph samples the right types over it; and the partition step streams a typed dataset."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from graphtrain.contract.spec import GraphSource, PartitionSpec
from graphtrain.runtime import partition
from graphtrain.runtime.data import datasets, typed
from graphtrain.runtime.data.edgefiles import EdgeFiles
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.graph import DistGraph, sample_blocks, standalone_client
from graphtrain.runtime.launch import partition_step, streaming_step
from graphtrain.runtime.launch.work import PartitionWork
from graphtrain.runtime.partition import pipeline, streaming, typed_ids
from tests.conftest import planted_graph
from tests.contract.spec_cases import TYPED_FILES
from tests.runtime.launch.test_partition_fennel import save_dataset
from tests.runtime.partition.test_fennel import assert_same_partition, node_only
from tests.runtime.partition.test_format import assert_same_graph

pytestmark = pytest.mark.timeout(120)

BALANCE = ["nodes", "degree", "train", "val", "test"]
NAMES = ("paper", "author", "venue")
RELATIONS = ["cites", "writes"]


def typed_planted(n: int = 1600, seed: int = 0, order: np.ndarray | None = None) -> tuple[Graph, np.ndarray]:
    """planted_graph's four communities typed: three node types skewed across them (so Fennel's parts
    leave the types imbalanced), two relations, 3 edge features an edge; with `order`, its edges taken
    in that order (the CSR keeps each source's edges in it). Returns the typed graph and the relation
    of each of its edges (the column its edge files store)."""
    g = planted_graph(n=n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    skew = np.where(g.label < 2, 0.8, 0.15)  # the label is the community
    ntype = np.where(rng.random(n) < skew, 0, np.where(rng.random(n) < 0.8, 1, 2)).astype(np.int64)
    src, dst = g.edges()
    relation = rng.integers(0, len(RELATIONS), g.num_edges)
    efeat = rng.random((g.num_edges, 3)).astype(np.float32)
    if order is not None:
        src, dst, relation, efeat = src[order], dst[order], relation[order], efeat[order]
    fields = {f.name: getattr(g, f.name) for f in dataclasses.fields(g)}
    for key in ("name", "num_nodes", "indptr", "indices", "etype", "efeat", "relation_names"):
        fields.pop(key)
    out = Graph.from_edges("typed-planted", n, src, dst, etype=relation, efeat=efeat, **fields)
    relation = out.etype.copy()  # in the CSR's order
    return typed.with_types(out, typed.NodeTypes(ntype, NAMES, RELATIONS), out.etype), relation


def write_edges(root: Path, src: np.ndarray, dst: np.ndarray, rel: np.ndarray, efeat: np.ndarray) -> None:
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "src.npy", src)
    np.save(root / "dst.npy", dst.astype(np.int32))
    np.save(root / "etype.npy", rel)
    np.save(root / "efeat.npy", efeat)


def streamed(g: Graph, root: Path) -> tuple[Graph, EdgeFiles]:
    """The streaming input of `g` whose edge files are under `root`: node data, typed edge files."""
    files = [root / f"{k}.npy" for k in ("src", "dst", "etype", "efeat")]
    edges = EdgeFiles.open(g.name, g.num_nodes, *files)
    assert g.ntype is not None
    nodes = dataclasses.replace(node_only(dataclasses.replace(g, efeat=None)))
    return typed.stream_typed(nodes, edges, typed.NodeTypes(g.ntype, NAMES, RELATIONS), chunk=500)


def test_the_streamed_typed_partition_is_the_in_memory_one(tmp_path: Path, monkeypatch) -> None:
    """Edge files in the CSR's order: the same parts as the in-memory typed Fennel (pipeline.py, with
    its per-type rebalance), the same files byte for byte and the same statistics."""
    g, rel = typed_planted()
    src, dst = g.edges()
    assert g.efeat is not None
    write_edges(tmp_path / "edges", src, dst, rel, g.efeat)
    node_data, edges = streamed(g, tmp_path / "edges")
    assert node_data.canonical_etypes is not None and g.canonical_etypes is not None
    assert node_data.canonical_etypes.tolist() == g.canonical_etypes.tolist()
    config, res = streaming.partition_stream(
        node_data, edges, 3, tmp_path / "s", balance=BALANCE, max_imbalance=0.05, seed=1, chunk=500
    )
    monkeypatch.setattr(pipeline, "CHUNK_EDGES", 500)  # the in-memory Fennel reads the same chunks
    mem = partition.partition_graph(g, 3, "fennel", BALANCE, 0.05, 1)
    assert mem.info.strategy == res.info.strategy == "fennel+types"
    assert np.array_equal(res.parts, mem.parts)
    balance = assert_same_partition(config, partition.write(g, mem, tmp_path / "m"))
    a = json.loads(Path(config).read_text())
    assert a["type_bounds"] and a["canonical_etypes"] == g.canonical_etypes.tolist()
    assert {k for k in balance if k.startswith("nodes:")} == {f"nodes:{t}" for t in NAMES}
    assert not list(tmp_path.glob(".s.*"))  # scratch, temporary directory and lock


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path, partition.PartitionResult]:
    """The typed graph's edges written in a random order, streamed into 4 parts in chunks of 500."""
    root = tmp_path_factory.mktemp("shuffled")
    base, rel = typed_planted()
    src, dst = base.edges()
    assert base.efeat is not None
    order = np.random.default_rng(5).permutation(base.num_edges)
    write_edges(root / "edges", src[order], dst[order], rel[order], base.efeat[order])
    g, _ = typed_planted(order=order)  # the graph those files hold, original edge ids in its CSR
    node_data, edges = streamed(g, root / "edges")
    config, res = streaming.partition_stream(
        node_data, edges, 4, root / "part", balance=BALANCE, max_imbalance=0.05, seed=0, chunk=500
    )
    return g, config, res


def test_each_type_is_a_range_of_each_part_and_the_book_maps_type_and_id(shuffled) -> None:
    g, config, _ = shuffled
    cfg = partition.load_config(config)
    cfg.verify()
    node_map = partition.load_maps(cfg)["node_map"]
    bounds = np.asarray(cfg.data["type_bounds"])
    nb = cfg.node_bounds
    assert bounds.shape == (4, len(NAMES) + 1)
    assert np.array_equal(bounds[:, 0], nb[:-1]) and np.array_equal(bounds[:, -1], nb[1:])
    for p in range(4):
        for t in range(len(NAMES)):
            assert (g.ntype[node_map[bounds[p, t] : bounds[p, t + 1]]] == t).all()
    counts = typed_ids.type_counts(bounds)
    assert counts.tolist() == np.bincount(g.ntype, minlength=len(NAMES)).tolist()
    for t in range(len(NAMES)):
        local = np.arange(counts[t])
        ids = typed_ids.nodes_to_global(bounds, t, local)
        assert (g.ntype[node_map[ids]] == t).all() and len(np.unique(ids)) == len(ids)
        back_t, back = typed_ids.global_to_nodes(bounds, nb, ids)
        assert (back_t == t).all() and np.array_equal(back, local)
        owner = np.searchsorted(nb, ids, side="right") - 1
        assert np.array_equal(owner, np.repeat(np.arange(4), np.diff(bounds[:, t : t + 2], axis=1)[:, 0]))


def opened(shuffled) -> tuple[Graph, partition.PartitionConfig, np.ndarray, np.ndarray]:
    """The shuffled fixture's graph, partition config, node map and edge map."""
    g, config, _ = shuffled
    assert g.efeat is not None and g.etype is not None
    cfg = partition.load_config(config)
    maps = partition.load_maps(cfg)
    return g, cfg, maps["node_map"], maps["edge_map"]


def test_every_edge_keeps_its_type_id_and_features_and_each_type_is_balanced(shuffled) -> None:
    g, cfg, node_map, edge_map = opened(shuffled)
    src, dst = g.edges()
    res = shuffled[2]
    for p in range(4):
        part = partition.load_part(cfg, p, mmap=False)
        assert part.etype is not None
        lo, hi = part.node_range
        elo, ehi = part.edge_range
        local_dst = np.repeat(np.arange(lo, hi), np.diff(part.indptr))
        got = Counter(
            (int(s), int(d), int(t), tuple(f.tolist()))
            for s, d, t, f in zip(
                node_map[part.indices], node_map[local_dst], part.etype, part.edata["efeat"], strict=True
            )
        )
        mine = np.flatnonzero(res.parts[dst] == p)
        want = Counter((int(src[e]), int(dst[e]), int(g.etype[e]), tuple(g.efeat[e].tolist())) for e in mine)
        assert got == want
        orig = edge_map[elo:ehi]  # each stored edge's original id is that very edge
        assert np.array_equal(src[orig], node_map[part.indices]) and np.array_equal(g.etype[orig], part.etype)
        np.testing.assert_array_equal(g.efeat[orig], part.edata["efeat"])
        for v in range(hi - lo):  # a node's in-edges one run per relation
            assert np.all(np.diff(part.etype[part.indptr[v] : part.indptr[v + 1]]) >= 0)
    back = partition.reassemble(cfg)
    assert_same_graph(back, g)
    assert back.efeat is not None and np.array_equal(back.efeat, g.efeat)
    balance = cfg.data["stats"]["balance"]
    per_type = {k: v for k, v in balance.items() if k.startswith("nodes:")}
    assert set(per_type) == {f"nodes:{t}" for t in NAMES}
    assert max(per_type.values()) <= 1.05 + 1e-9, per_type
    assert cfg.data["strategy"] == "fennel+types"
    assert 0 < cfg.data["stats"]["edge_cut_fraction"] < 0.5


def test_dist_graph_samples_the_right_types_over_the_streamed_partition(shuffled) -> None:
    g, cfg, node_map, edge_map = opened(shuffled)
    src, dst = g.edges()
    graph = DistGraph(cfg.path, standalone_client(cfg.path))
    assert [tuple(c) for c in graph.canonical_etypes] == [tuple(c) for c in g.canonical_etypes.tolist()]
    ids = np.arange(g.num_nodes)
    assert np.array_equal(graph.node_types(ids), g.ntype[node_map])
    seeds = np.random.default_rng(3).permutation(g.num_nodes)[:200]
    got = graph.sample_edges(seeds, 4, 7, np.array([2] * len(g.canonical_etypes)))
    orig = edge_map[got.eid]
    assert len(orig) > 100
    assert np.array_equal(g.etype[orig], got.etype)
    assert np.array_equal(src[orig], node_map[got.src])
    assert np.array_equal(dst[orig], node_map[np.repeat(seeds, got.counts)])
    mb = sample_blocks(graph, seeds[:50], [np.array([3] * len(g.canonical_etypes))] * 2, seed=3)
    for b in mb.blocks:
        assert b.etype is not None and b.efeat is not None and b.eid is not None
        e = edge_map[b.eid]
        assert np.array_equal(b.etype.numpy(), g.etype[e])
        np.testing.assert_array_equal(b.efeat.numpy(), g.efeat[e])


@pytest.fixture
def wordnet_cache(tmp_path: Path) -> Path:
    """A private cache holding a small graph under the name wordnet, stored as wordnet is: synset ids
    that start with their part of speech, a pointer symbol index per edge (etype.npy)."""
    g = planted_graph(n=1200, seed=7)
    src, dst = g.edges()
    rng = np.random.default_rng(7)
    pos = rng.integers(1, 5, g.num_nodes)
    values = {
        "src": src,
        "dst": dst,
        "etype": rng.integers(0, 4, g.num_edges),
        "relations": ["@", "~", "+", "!"],
        "label": g.label,
        "node_ids": pos * 100_000_000 + np.arange(g.num_nodes),
        "feat": g.feat,
    }
    return save_dataset(tmp_path / "cache", "wordnet", values)


def test_the_partition_step_streams_a_typed_dataset(tmp_path: Path, wordnet_cache: Path, monkeypatch) -> None:
    """graph.typed with partition.algorithm fennel takes the streaming branch (loading the graph whole
    fails here), with the types the in-memory load gives the same dataset."""
    whole = datasets.load_source(GraphSource(dataset="wordnet", typed=True), wordnet_cache)

    def refuse(*_args: object, **_kwargs: object) -> Graph:
        raise AssertionError("a typed dataset with fennel was loaded whole")

    monkeypatch.setattr(datasets, "load_source", refuse)
    work = PartitionWork(
        GraphSource(dataset="wordnet", typed=True),
        PartitionSpec(algorithm="fennel", parts=3, balance=["nodes", "train"]),
        None,
        None,
    )
    warned: list[str] = []
    cfg = partition_step.partition(
        work, tmp_path / "part", overwrite=False, data_dir=wordnet_cache, warn=warned.append
    )
    assert "bucket" in cfg.data["stats"]["seconds"]  # the streaming pass, not the in-memory pipeline
    assert cfg.data["strategy"] == "fennel+types"
    assert whole.canonical_etypes is not None and whole.etype is not None
    assert cfg.data["canonical_etypes"] == whole.canonical_etypes.tolist()
    assert cfg.data["ntype_names"] == list(typed.WORDNET_TYPES)
    balance = cfg.data["stats"]["balance"]
    per_type = {k: v for k, v in balance.items() if k.startswith("nodes:")}
    assert len(per_type) == 4 and max(per_type.values()) <= 1.05 + 1e-9, per_type
    assert len([k for k in balance if k.startswith("train:")]) == 4  # reported, as Fennel does, not balanced
    back = partition.reassemble(cfg)
    assert np.array_equal(back.etype, whole.etype) and np.array_equal(back.ntype, whole.ntype)


def test_what_cannot_stream_is_named() -> None:
    rev = GraphSource(dataset="wordnet", typed=True, reverseEdges=True)
    assert streaming_step.unstreamable(rev) == (
        "graph.reverseEdges adds edges that are not stored, so they cannot be streamed"
    )
    assert streaming_step.unstreamable(GraphSource(dataset="wordnet", typed=True)) is None
    files = GraphSource.model_validate(TYPED_FILES)  # a typed graph from the user's files
    assert streaming_step.unstreamable(files) == (
        "graph.nodes is loaded whole; streaming reads a bundled graph dataset's stored edge files"
    )
    assert streaming_step.unstreamable(GraphSource(dataset="gene-pubmed", typed=True)) is None


def test_a_typed_stream_of_a_dataset_without_types_is_refused(tmp_path: Path) -> None:
    g = planted_graph(n=300, seed=1)
    src, dst = g.edges()
    save_dataset(tmp_path, "metis-4elt", {"src": src, "dst": dst, "num_nodes": np.array(g.num_nodes)})
    with pytest.raises(DataError, match="graph.typed: dataset metis-4elt has no node or edge types"):
        datasets.load_streamed("metis-4elt", tmp_path, types=True)
