"""Fennel streaming partitioning: the score and the choice by hand, the native loop against the Python
oracle, chunked reading against whole arrays, seeds, and the streamed partition against the in-memory
writer's (the same files, byte for byte, and the same statistics)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import partition
from graphtrain.runtime.data.edgefiles import EdgeFiles
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.partition import fennel, streaming
from tests.conftest import planted_graph
from tests.runtime.partition.test_format import assert_same_graph

pytestmark = pytest.mark.timeout(120)

BALANCE = ["nodes", "degree", "train", "val", "test"]


def test_params_are_the_papers() -> None:
    p = fennel.params(num_nodes=10_000, num_edges=50_000, num_parts=4, max_imbalance=0.05)
    assert p.gamma == 1.5
    assert p.alpha == pytest.approx(2 * 50_000 / 10_000**1.5)
    assert p.cap == 2625  # floor(1.05 * 10000 / 4)
    assert fennel.params(10, 5, 4, 0.01).cap == 3  # never below ceil(n / k)


def test_choice_follows_neighbours_within_capacity() -> None:
    p = fennel.FennelParams(num_parts=3, alpha=0.1, gamma=1.5, cap=5)
    loads = np.array([1, 1, 1])
    assert fennel.choose(np.array([2, 0, 1]), loads, p, seed=0, v=7) == 0
    # part 0 full: the next best by neighbours
    assert fennel.choose(np.array([2, 0, 1]), np.array([5, 1, 1]), p, seed=0, v=7) == 2
    # no neighbours placed: the lighter part (the penalty grows with load)
    assert fennel.choose(np.zeros(3), np.array([3, 1, 2]), p, seed=0, v=7) == 1
    # every part full: the least loaded
    assert fennel.choose(np.ones(3), np.array([6, 5, 7]), p, seed=0, v=7) == 1
    s = fennel.scores(np.array([2, 0]), np.array([4, 1]), dataclasses.replace(p, num_parts=2))
    assert s == pytest.approx([2 - 0.15 * 2, -0.15])


def test_two_blocks_cut_well_below_random() -> None:
    """Two random blocks streamed interleaved: Fennel finds them (random assignment cuts half)."""
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 200, 2000), rng.integers(0, 200, 2000)
    second = rng.random(2000) < 0.5
    src[second] += 200
    dst[second] += 200
    parts = fennel.stream_assign(lambda: [(src, dst)], 400, 2000, 2, 0.05, seed=0)
    assert np.bincount(parts).max() <= 210  # floor(1.05 * 400 / 2)
    assert np.mean(parts[src] != parts[dst]) < 0.2
    rand = partition.partition_graph(Graph.from_edges("b", 400, src, dst), 2, "random", ["nodes"])
    assert np.mean(rand.parts[src] != rand.parts[dst]) > 0.4


def with_leaves(g: Graph, extra: int = 300, seed: int = 0) -> tuple[int, np.ndarray, np.ndarray]:
    """g's edges plus `extra` degree-1 leaves hung on random nodes, the edges shuffled."""
    rng = np.random.default_rng(seed)
    src, dst = g.edges()
    leaf = np.arange(g.num_nodes, g.num_nodes + extra)
    src, dst = np.concatenate([src, rng.integers(0, g.num_nodes, extra)]), np.concatenate([dst, leaf])
    order = rng.permutation(len(src))
    return g.num_nodes + extra, src[order], dst[order]


@pytest.mark.parametrize("chunk", [97, 1000, 100_000])
def test_native_equals_python_oracle(chunk: int) -> None:
    """Both passes, with leaves deferred (weights, DEFERRED vertices neither placed nor voting)."""
    n, src, dst = with_leaves(planted_graph(n=800, seed=1))
    p = fennel.params(n, len(src), 3, 0.05)
    leaves = fennel.Leaves(n)
    leaves.add(src, dst)
    parts, weight = fennel.defer(leaves.anchors(), leaves.isolated())
    assert (parts == fennel.DEFERRED).sum() >= 300
    assert weight[parts != fennel.DEFERRED].sum() == n - leaves.isolated().sum()
    native = parts.copy(), np.zeros(3, np.int64)
    oracle = parts.copy(), np.zeros(3, np.int64)
    for s, d in fennel.in_chunks(src, dst, chunk):
        c = fennel.chunk_adjacency(s, d)
        fennel.assign_chunk(c, *native, p, 5, weight)
        fennel.assign_chunk_reference(c, *oracle, p, 5, weight)
    assert np.array_equal(native[0], oracle[0]) and np.array_equal(native[1], oracle[1])
    first = native[0].copy()
    seen = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    for s, d in fennel.in_chunks(src, dst, chunk):
        c = fennel.chunk_adjacency(s, d)
        fennel.assign_chunk(c, *native, p, 5, weight, seen[0])
        fennel.assign_chunk_reference(c, *oracle, p, 5, weight, seen[1])
    assert np.array_equal(native[0], oracle[0]) and np.array_equal(native[1], oracle[1])
    assert not np.array_equal(native[0], first)  # the restreaming pass moved some
    assert np.array_equal(native[0] == fennel.DEFERRED, first == fennel.DEFERRED)
    placed = native[0] >= 0
    assert native[1].tolist() == np.bincount(native[0][placed], weights=weight[placed]).tolist()


def star(leaves: int) -> tuple[np.ndarray, np.ndarray]:
    """Centre 0 with `leaves` leaves; a ring of 40 core nodes (100..139), the centre tied to it."""
    ring = np.arange(100, 140)
    src = np.concatenate([np.zeros(leaves, np.int64), ring, [0]])
    dst = np.concatenate([np.arange(1, leaves + 1), np.roll(ring, 1), [100]])
    return src, dst


@pytest.mark.parametrize("passes", [0, 2])
def test_star_leaves_follow_their_centre(passes: int) -> None:
    """Room for the star in one part: after one pass every leaf lands with the centre (none of its edges
    cut). Restreaming counts nodes without the leaves' reservation, so there the centre's part may fill
    with core nodes first: the leaves then follow it up to the cap and the rest level the parts."""
    src, dst = star(30)  # 140 nodes, 4 parts, cap 36 >= the centre and its 30 leaves
    n = 140
    leaves = fennel.Leaves(n)
    leaves.add(src, dst)
    assert leaves.anchors()[1:31].tolist() == [0] * 30 and leaves.isolated()[31:100].all()
    parts = fennel.stream_assign(lambda: [(src, dst)], n, len(src), 4, 0.05, 0, leaves, passes)
    loads = np.bincount(parts, minlength=4)
    cap = fennel.params(n, len(src), 4, 0.05).cap
    assert loads.max() <= cap
    with_centre = parts[1:31] == parts[0]
    if passes == 0:
        assert with_centre.all()
    else:
        assert with_centre.all() or loads[parts[0]] == cap


def test_star_too_big_keeps_the_balance() -> None:
    """A star larger than a part: the centre's part fills to the cap, the other leaves level the rest."""
    src, dst = star(99)  # 140 nodes, 4 parts, cap 36: at most 35 leaves with the centre
    n = 140
    leaves = fennel.Leaves(n)
    leaves.add(src, dst)
    parts = fennel.stream_assign(lambda: [(src, dst)], n, len(src), 4, 0.05, 0, leaves)
    loads = np.bincount(parts, minlength=4)
    cap = fennel.params(n, len(src), 4, 0.05).cap
    assert loads.max() <= cap and loads[parts[0]] == cap and (parts >= 0).all()
    assert (parts[1:100] == parts[0]).sum() == cap - 1 - (parts[100:140] == parts[0]).sum()


def test_place_deferred_respects_the_cap() -> None:
    parts = np.array([0, 1, -2, -2, -2, -2, -2], dtype=np.int32)
    anchor = np.array([-1, -1, 0, 0, 0, 1, -1])
    loads = fennel.place_deferred(parts, anchor, cap=3, num_parts=3)
    assert parts.tolist() == [0, 1, 0, 0, 2, 1, 2] and loads.tolist() == [3, 2, 2]


def test_chunk_adjacency_orders_by_first_appearance() -> None:
    c = fennel.chunk_adjacency(np.array([5, 2, 5, 3]), np.array([2, 9, 5, 5]))
    assert c.verts.tolist() == [5, 2, 9, 3]
    rows = {int(v): sorted(c.adj[c.xadj[i] : c.xadj[i + 1]].tolist()) for i, v in enumerate(c.verts)}
    assert rows == {5: [2, 3], 2: [5, 9], 9: [2], 3: [5]}  # the self-loop 5-5 is dropped


def test_seed_decides_and_repeats() -> None:
    g = planted_graph(n=1500, seed=2)
    src, dst = g.edges()

    def run(seed: int) -> np.ndarray:
        chunks = lambda: fennel.in_chunks(src, dst, 500)  # noqa: E731
        return fennel.stream_assign(chunks, g.num_nodes, g.num_edges, 4, 0.05, seed)

    assert np.array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_isolated_nodes_level_the_parts() -> None:
    parts = np.array([0, 0, 0, 1, -1, -1, -1, -1, -1], dtype=np.int32)
    loads = np.array([3, 1, 0], dtype=np.int64)
    fennel.place_isolated(parts, loads)
    assert (parts >= 0).all() and loads.tolist() == [3, 3, 3] == np.bincount(parts).tolist()


def save_edges(g: Graph, root: Path) -> EdgeFiles:
    src, dst = g.edges()
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "src.npy", src)
    np.save(root / "dst.npy", dst.astype(np.int32))  # any integer type reads as int64
    np.save(root / "etype.npy", g.etype)
    return EdgeFiles.open(g.name, g.num_nodes, root / "src.npy", root / "dst.npy", root / "etype.npy")


@pytest.mark.parametrize("size", [1, 333, 10**6])
def test_chunked_reading_equals_whole(tmp_path: Path, size: int) -> None:
    g = planted_graph(n=600, seed=4)
    edges = save_edges(g, tmp_path)
    got = list(edges.chunks(size))
    src, dst = g.edges()
    assert [lo for lo, *_ in got] == list(range(0, g.num_edges, size))
    assert np.array_equal(np.concatenate([s for _, s, _, _ in got]), src)
    assert np.array_equal(np.concatenate([d for _, _, d, _ in got]), dst)
    assert np.array_equal(np.concatenate([e for *_, e in got]), g.etype)


def test_bad_edge_files_are_named(tmp_path: Path) -> None:
    np.save(tmp_path / "src.npy", np.array([0, 1, 7]))
    np.save(tmp_path / "dst.npy", np.array([1, 2, 0]))
    np.save(tmp_path / "short.npy", np.array([1, 2]))
    np.save(tmp_path / "float.npy", np.array([1.0, 2.0, 3.0]))
    edges = EdgeFiles.open("g", 5, tmp_path / "src.npy", tmp_path / "dst.npy")
    with pytest.raises(DataError, match=r"edge 2 has source id 7 outside \[0, 5\)"):
        list(edges.chunks(2))
    with pytest.raises(DataError, match="differ in length"):
        EdgeFiles.open("g", 5, tmp_path / "src.npy", tmp_path / "short.npy")
    with pytest.raises(DataError, match="float.npy: expected a 1-D integer array"):
        EdgeFiles.open("g", 5, tmp_path / "src.npy", tmp_path / "float.npy")


def node_only(g: Graph) -> Graph:
    empty = np.empty(0, dtype=np.int64)
    fields = {f.name: getattr(g, f.name) for f in dataclasses.fields(g)}
    return Graph(
        **{**fields, "indptr": np.zeros(g.num_nodes + 1, np.int64), "indices": empty, "etype": empty}
    )


def test_streamed_partition_is_the_in_memory_one(tmp_path: Path) -> None:
    """Same parts, same files byte for byte, same statistics, and it reassembles into the input."""
    g = planted_graph(n=2000, seed=3)
    edges = save_edges(g, tmp_path / "edges")
    chunk = 700
    config, res = streaming.partition_stream(
        node_only(g), edges, 3, tmp_path / "s", balance=BALANCE, max_imbalance=0.05, seed=1, chunk=chunk
    )
    src, dst = g.edges()
    leaves = fennel.Leaves(g.num_nodes)
    leaves.add(src, dst)
    chunks = lambda: fennel.in_chunks(src, dst, chunk)  # noqa: E731
    parts = fennel.stream_assign(chunks, g.num_nodes, g.num_edges, 3, 0.05, 1, leaves)
    assert np.array_equal(res.parts, parts)
    mem = partition.partition_graph(g, 3, "random", BALANCE, 0.05, 1)
    # the in-memory pipeline with the same parts: relabel and stats from the whole graph
    from graphtrain.runtime.partition import adjacency, relabel, stats

    rl = relabel.relabel(g, parts, 3)
    adj = adjacency.undirected(g)
    halos = stats.halos(adj, parts, rl, 3)
    st = stats.compute(adj, parts, 3, mem.constraints, rl, halos, src, dst, mem.stats.directed)
    mem = dataclasses.replace(mem, algorithm="fennel", parts=parts, relabeling=rl, halos=halos, stats=st)
    mem.info.strategy = "fennel"
    balance = assert_same_partition(config, partition.write(g, mem, tmp_path / "m"))
    cfg = partition.load_config(config)
    assert_same_graph(partition.reassemble(cfg), g)
    assert balance["nodes"] <= 1.05
    assert not list(tmp_path.glob(".s.*"))  # the scratch files and the lock went with the run


def assert_same_partition(streamed: Path, in_memory: Path) -> dict[str, float]:
    """The two partitions' files are the same byte for byte and their configs the same but for the
    time they were written and took, and the directedness the streamed pass does not count (a sort of
    every edge); returns the balance of their statistics."""
    a, b = json.loads(Path(streamed).read_text()), json.loads(Path(in_memory).read_text())
    assert a["files"] == b["files"]
    sa, sb = a.pop("stats"), b.pop("stats")
    sa.pop("seconds"), sb.pop("seconds")
    assert sa.pop("directed") is None and 0 <= sb.pop("directed") <= 1
    assert sa.pop("balance") == pytest.approx(balance := sb.pop("balance"))
    assert sa.pop("remote_edge_fraction") == pytest.approx(sb.pop("remote_edge_fraction"))
    assert sa == sb
    for d in (a, b):
        d.pop("created"), d.pop("files")
    assert a == b
    return balance


def test_the_output_parents_are_made_and_an_unwritable_one_is_one_line(tmp_path: Path) -> None:
    """As the METIS path: --out under directories not there yet is written (they are made), and an
    output whose parent cannot be made is a DataError naming it, nothing left behind (the scratch
    directory is made inside the output's atomic block, not before it)."""
    g = planted_graph(n=300, seed=2)
    edges = save_edges(g, tmp_path / "edges")
    args = {"balance": ["nodes"], "max_imbalance": 0.05, "seed": 0, "chunk": 500}
    config, _ = streaming.partition_stream(node_only(g), edges, 2, tmp_path / "a" / "b" / "out", **args)
    assert partition.load_config(config).num_parts == 2
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["out"]
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(DataError, match=r"/file: exists and is not a directory"):
        streaming.partition_stream(node_only(g), edges, 2, tmp_path / "file" / "out", **args)


def test_many_parts_fit_a_small_open_files_limit(tmp_path: Path) -> None:
    """The bucket pass holds no file per (part, kind) open across the pass: 40 parts (240 bucket files)
    partition under a limit of 48 more open files than the process holds."""
    import os
    import resource

    g = planted_graph(n=400, seed=2)
    edges = save_edges(g, tmp_path / "edges")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 48, hard))
    try:
        config, _ = streaming.partition_stream(
            node_only(g), edges, 40, tmp_path / "out", balance=["nodes"], max_imbalance=0.05, seed=0
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert_same_graph(partition.reassemble(partition.load_config(config)), g)


def test_a_full_disk_is_named_though_numpy_drops_the_systems_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy's short write on a full disk says only 'N requested and M written' (no errno): the one line
    says what that nearly always is, and nothing is left beside the output."""
    g = planted_graph(n=300, seed=2)
    edges = save_edges(g, tmp_path / "edges")

    def save_to_a_full_disk(path: object, array: np.ndarray, *args: object, **kwargs: object) -> None:
        with open("/dev/full", "wb") as f:  # numpy's own write, on a device that is always full
            np.asarray(array).tofile(f)

    monkeypatch.setattr(np, "save", save_to_a_full_disk)
    with pytest.raises(DataError) as caught:
        streaming.partition_stream(
            node_only(g), edges, 2, tmp_path / "out", balance=["nodes"], max_imbalance=0.05, seed=0
        )
    short = r"a short write \(\d+ requested and 0 written\): no space left on the device\?"
    assert re.fullmatch(rf".*/out: cannot write \({short}\)", str(caught.value))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edges"]


def test_a_chunk_costs_its_edges_not_the_node_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes counted each chunk's degrees with a bincount as long as the graph's nodes: O(nodes)
    a chunk, O(nodes x chunks) a pass (at 100M nodes 1.4 s a chunk of 262,144 edges, hours a pass over
    1B edges). No count of the node count's length is made per chunk now: a few, whatever the chunk
    size."""
    g = planted_graph(n=600, seed=4)
    edges = save_edges(g, tmp_path / "edges")
    real = np.bincount
    counted: list[int] = []

    def spy(x: np.ndarray, weights: np.ndarray | None = None, minlength: int = 0) -> np.ndarray:
        counted.append(minlength)
        return real(x, weights, minlength)

    monkeypatch.setattr(np, "bincount", spy)
    whole: list[int] = []
    for chunk in (10**6, 50):
        counted.clear()
        streaming.partition_stream(
            node_only(g),
            edges,
            3,
            tmp_path / f"out-{chunk}",
            balance=BALANCE,
            max_imbalance=0.05,
            seed=0,
            chunk=chunk,
        )
        whole.append(sum(1 for m in counted if m >= g.num_nodes))
    assert g.num_edges // 50 > 50  # chunks of 50: over fifty a pass
    assert max(whole) <= 10, f"node-count-long counts: {whole[0]} whole, {whole[1]} in chunks of 50"
