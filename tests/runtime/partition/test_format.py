"""The on-disk partition format: exact round trips, atomic writes, checksums, config validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import partition
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph
from graphtrain.runtime.errors import ChecksumError, DataError
from tests.conftest import planted_graph


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.num_nodes == b.num_nodes
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    for key in ("etype", "label", "node_ids", "ntype"):
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None and y is None) or np.array_equal(x, y), key
    assert a.masks.keys() == b.masks.keys()
    assert all(np.array_equal(a.masks[k], b.masks[k]) for k in a.masks)
    if hasattr(a.feat, "toarray"):
        assert (a.feat != b.feat).nnz == 0
    else:
        assert np.array_equal(a.feat, b.feat)


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("algorithm", ["metis", "random"])
def test_round_trip_is_exact(tmp_path: Path, planted: Graph, k: int, algorithm: str) -> None:
    cfg = partition.write(
        planted, partition.partition_graph(planted, k, algorithm=algorithm), tmp_path / "out"
    )
    assert cfg.name == "planted.json"
    assert_same_graph(planted, partition.reassemble(partition.load_config(cfg)))


def test_round_trip_dense_features_and_no_optional_data(tmp_path: Path) -> None:
    g = planted_graph(n=300, k=3)
    dense = Graph.from_edges("dense", g.num_nodes, *g.edges(), feat=np.random.default_rng(0).random((300, 5)))
    cfg = partition.write(dense, partition.partition_graph(dense, 3), tmp_path / "d")
    back = partition.reassemble(partition.load_config(cfg))
    assert_same_graph(dense, back)
    assert back.etype is None and back.node_ids is None


def test_every_edge_maps_back_through_the_original_id_map(tmp_path: Path, planted: Graph) -> None:
    cfg = partition.load_config(
        partition.write(planted, partition.partition_graph(planted, 4), tmp_path / "o")
    )
    maps = partition.load_maps(cfg)
    expected = sorted(zip(*(x.tolist() for x in planted.edges()), strict=True))
    got = []
    for p in range(4):
        part = partition.load_part(cfg, p)
        lo, hi = part.node_range
        dst = np.repeat(np.arange(lo, hi), np.diff(part.indptr))
        got += zip(maps["node_map"][part.indices].tolist(), maps["node_map"][dst].tolist(), strict=True)
        assert part.ndata["label"].shape == (hi - lo,)
        assert np.array_equal(
            maps["external_ids"][maps["node_map"][lo:hi]], planted.node_ids[maps["node_map"][lo:hi]]
        )
    assert sorted(got) == expected


def test_existing_output_is_kept_unless_overwrite(tmp_path: Path, planted: Graph) -> None:
    result = partition.partition_graph(planted, 2)
    partition.write(planted, result, tmp_path / "o")
    with pytest.raises(DataError, match="already exists"):
        partition.write(planted, result, tmp_path / "o")
    partition.write(planted, partition.partition_graph(planted, 3), tmp_path / "o", overwrite=True)
    assert partition.load_config(tmp_path / "o").num_parts == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_overwrite_refuses_a_partition_directory_holding_other_files(tmp_path: Path, planted: Graph) -> None:
    """--overwrite replaces the directory whole: a file the partition's config does not record (the
    user's notes, a symlink, a file in a part's ndata) was deleted with it."""
    out = tmp_path / "o"
    partition.write(planted, partition.partition_graph(planted, 2), out)
    partition.check_output(out, overwrite=True)  # the partition's own files only
    for extra in ("notes.txt", "part-1/ndata/mine.npy"):
        (out / extra).write_text("precious")
        with pytest.raises(DataError, match=f"o/{extra}: not a file of the partition in .*: move it out"):
            partition.check_output(out, overwrite=True)
        (out / extra).unlink()
    (out / "link").symlink_to(tmp_path)
    with pytest.raises(DataError, match="o/link: not a file of the partition"):
        partition.check_output(out, overwrite=True)
    (out / "link").unlink()
    (out / "part-0" / "empty").mkdir()  # an empty directory loses nothing
    partition.check_output(out, overwrite=True)


def test_a_failing_write_leaves_nothing_behind(tmp_path: Path, planted: Graph, monkeypatch) -> None:
    result = partition.partition_graph(planted, 2)
    partition.write(planted, result, tmp_path / "o")
    import graphtrain.runtime.partition.format as fmt

    def explode(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError("disk full")

    monkeypatch.setattr(fmt, "local_in_csr", explode)
    with pytest.raises(DataError, match="o: cannot write .disk full"):
        partition.write(planted, partition.partition_graph(planted, 4), tmp_path / "o", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"], "no temporary directory is left"
    assert partition.load_config(tmp_path / "o").num_parts == 2, "the previous partition is untouched"
    partition.load_config(tmp_path / "o").verify()


def test_changed_file_is_detected(tmp_path: Path, planted: Graph) -> None:
    cfg = partition.load_config(
        partition.write(planted, partition.partition_graph(planted, 2), tmp_path / "o")
    )
    path = tmp_path / "o" / "part-1" / "indices.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    partition.load_part(cfg, 0)  # other partitions still load
    with pytest.raises(ChecksumError, match="part-1/indices.npy"):
        partition.load_part(cfg, 1)
    with pytest.raises(ChecksumError):
        cfg.verify()
    (tmp_path / "o" / "node_map.npy").unlink()
    with pytest.raises(ChecksumError, match="node_map.npy: missing"):
        partition.load_maps(cfg)


def test_bad_configs(tmp_path: Path, planted: Graph) -> None:
    path = partition.write(planted, partition.partition_graph(planted, 2), tmp_path / "o")
    good = json.loads(path.read_text())
    cases = [
        ({**good, "format": "dgl"}, "not a graphtrain partition"),
        ({**good, "format_version": 99}, "format version 99"),
        ({**good, "node_bounds": [0, 5, 3, 2000][:3]}, "node_bounds"),
        ({k: v for k, v in good.items() if k != "edge_bounds"}, "missing fields"),
        # these four were an AttributeError or TypeError from export, predict and infer (no hash covers
        # the config: a hand edit), and a name with ../ was hashed outside the partition
        ({**good, "files": []}, "files is not a map of file names to sha256"),
        ({**good, "files": {**good["files"], "../../x": "0" * 64}}, "files name '../../x' is outside"),
        ({**good, "num_parts": "2"}, "num_parts is not a count"),
        ({**good, "num_nodes": -1}, "num_nodes is not a count"),
    ]
    for doc, needle in cases:
        path.write_text(json.dumps(doc))
        with pytest.raises(DataError, match=needle):
            partition.load_config(path)
    path.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        partition.load_config(path)
    with pytest.raises(DataError, match="not found"):
        partition.load_config(tmp_path / "nope.json")
    path.write_text(json.dumps(good))
    with pytest.raises(DataError, match="partition 5 does not exist"):
        partition.load_part(partition.load_config(path), 5)


def test_a_fifo_in_place_of_a_partition_file_is_named(tmp_path: Path, planted: Graph) -> None:
    """np.load of a FIFO waited for a writer for good: `infer` of a partition holding one hung."""
    import os

    path = partition.write(planted, partition.partition_graph(planted, 2), tmp_path / "o")
    (tmp_path / "o" / "node_map.npy").unlink()
    os.mkfifo(tmp_path / "o" / "node_map.npy")
    with pytest.raises(DataError, match="node_map.npy: not a regular file"):
        partition.load_maps(partition.load_config(path), verify=False)


def string_kg() -> KnowledgeGraph:
    """A small knowledge graph with string entity and relation labels and its own three splits."""
    names = np.array(["ann", "bob", "cy", "dee", "eve", "fay"])
    rels = np.array(["likes", "parent_of"])
    rng = np.random.default_rng(1)
    t = np.stack([rng.integers(0, 6, 40), rng.integers(0, 2, 40), rng.integers(0, 6, 40)], 1)
    return KnowledgeGraph("family", 6, 2, t[:30], t[30:35], t[35:], names, rels)


@pytest.mark.parametrize("k", [1, 2])
def test_a_knowledge_graph_keeps_its_names_and_splits(tmp_path: Path, k: int) -> None:
    kg = string_kg()
    g = kg.to_graph()
    cfg = partition.load_config(
        partition.write(g, partition.partition_graph(g, k, algorithm="random"), tmp_path / "kg")
    )
    assert cfg.data["kg"] == {"num_relations": 2, "triples": {"train": 30, "valid": 5, "test": 5}}
    assert cfg.data["has_relation_names"] and not cfg.data["has_class_names"]
    assert {"kg/train.npy", "kg/valid.npy", "kg/test.npy", "relation_names.npy"} <= set(cfg.data["files"])
    triples = partition.load_triples(cfg)
    for split in ("train", "valid", "test"):  # original ids, whatever the relabeling
        assert np.array_equal(triples[split], getattr(kg, split)), split
    names = partition.load_names(cfg)
    assert sorted(names) == ["node_ids", "relation_names"]
    assert names["node_ids"].dtype.kind == "U" and list(names["node_ids"]) == list(kg.entity_names)
    assert list(names["relation_names"]) == ["likes", "parent_of"]
    assert list(partition.load_maps(cfg)["relation_names"]) == ["likes", "parent_of"]
    back = partition.reassemble(cfg)
    assert_same_graph(g, back)
    assert list(back.relation_names) == ["likes", "parent_of"]
    assert back.triples.keys() == g.triples.keys()
    assert all(np.array_equal(back.triples[s], g.triples[s]) for s in g.triples)


def test_string_ids_and_class_names_round_trip_without_pickle(tmp_path: Path) -> None:
    g0 = planted_graph(n=300, k=3)
    g = Graph.from_edges(
        "named",
        g0.num_nodes,
        *g0.edges(),
        label=g0.label,
        masks=g0.masks,
        node_ids=np.array([f"user-{i:04d}" for i in range(300)]),
        class_names=np.array(["blue", "green", "red", "unused"]),  # a class no node has still counts
    )
    cfg = partition.load_config(partition.write(g, partition.partition_graph(g, 3), tmp_path / "n"))
    assert cfg.data["num_classes"] == 4 and cfg.data["has_class_names"]
    assert "kg" not in cfg.data and partition.load_triples(cfg) == {}
    for key in ("external_ids", "class_names"):  # plain unicode arrays: no pickle to read them
        arr = np.load(cfg.root / f"{key}.npy", allow_pickle=False)
        assert arr.dtype.kind == "U"
    back = partition.reassemble(cfg)
    assert_same_graph(g, back)
    assert list(back.class_names) == ["blue", "green", "red", "unused"]


def test_a_changed_triples_file_is_detected(tmp_path: Path) -> None:
    g = string_kg().to_graph()
    cfg = partition.load_config(partition.write(g, partition.partition_graph(g, 1), tmp_path / "kg"))
    valid = np.load(cfg.root / "kg" / "valid.npy")
    valid[0, 0] = (valid[0, 0] + 1) % 6
    np.save(cfg.root / "kg" / "valid.npy", valid)
    with pytest.raises(ChecksumError, match="valid.npy"):
        partition.load_triples(cfg)
    assert partition.load_triples(cfg, verify=False)["valid"][0, 0] == valid[0, 0]


def test_a_partition_written_before_names_reads_as_one_without_them(tmp_path: Path) -> None:
    g = string_kg().to_graph()
    cfg = partition.load_config(partition.write(g, partition.partition_graph(g, 1), tmp_path / "kg"))
    data = {k: v for k, v in cfg.data.items() if k not in ("kg", "has_class_names", "has_relation_names")}
    old = partition.PartitionConfig(cfg.path, data)
    assert partition.load_triples(old) == {} and sorted(partition.load_names(old)) == ["node_ids"]


def tamper(cfg: partition.PartitionConfig, rel: str, value: np.ndarray) -> partition.PartitionConfig:
    """Replace a partition file with `value` (np.save, pickling an object array) and record its sha256,
    as an attacker with write access would: the checksum no longer catches it."""
    import hashlib

    np.save(cfg.root / rel, value, allow_pickle=True)
    cfg.data["files"][rel] = hashlib.sha256((cfg.root / rel).read_bytes()).hexdigest()
    cfg.path.write_text(json.dumps(cfg.data))
    return partition.load_config(cfg.path)


OBJECTS = np.array([{"a": 1}, "x", None], dtype=object)


@pytest.mark.parametrize(
    ("rel", "load"),
    [
        ("class_names.npy", partition.load_names),
        ("external_ids.npy", partition.load_maps),
        ("node_map.npy", partition.load_maps),
        ("part-0/halo.npy", lambda cfg: partition.load_part(cfg, 0)),
        ("part-1/ndata/label.npy", lambda cfg: partition.load_part(cfg, 1)),
    ],
)
def test_an_object_array_in_a_partition_is_one_line_never_unpickled(tmp_path: Path, rel: str, load) -> None:  # noqa: ANN001
    g0 = planted_graph(n=300, k=3)
    g = Graph.from_edges(
        "named",
        300,
        *g0.edges(),
        label=g0.label,
        node_ids=np.array([f"u{i}" for i in range(300)]),
        class_names=np.array(["a", "b", "c"]),
    )
    cfg = tamper(
        partition.load_config(partition.write(g, partition.partition_graph(g, 2), tmp_path / "p")),
        rel,
        OBJECTS,
    )
    with pytest.raises(
        DataError, match=r"p/part-1/ndata: a file is not a plain \.npy array|holds Python objects"
    ) as e:
        load(cfg)
    assert "\n" not in str(e.value) and str(tmp_path / "p") in str(e.value)


def test_files_that_disagree_with_the_bounds_are_one_line(tmp_path: Path, planted: Graph) -> None:
    """Each file matches its recorded sha256, but the config's bounds were edited, or a file replaced
    with another partition's (its sha256 too): the shapes name the file, where inspect died in numpy."""
    path = partition.write(planted, partition.partition_graph(planted, 2), tmp_path / "o")
    cfg = partition.load_config(path)
    bounds = cfg.data["node_bounds"]
    path.write_text(json.dumps({**cfg.data, "node_bounds": [0, bounds[1] + 7, bounds[2]]}))
    with pytest.raises(DataError, match=r"o/part-0/indptr.npy: holds \d+ rows but the config's bounds"):
        partition.load_part(partition.load_config(path), 0)
    path.write_text(json.dumps(cfg.data))
    other = np.load(tmp_path / "o" / "part-1" / "ndata" / "label.npy")
    cfg = tamper(cfg, "part-0/ndata/label.npy", other[: bounds[1] - 1])
    with pytest.raises(DataError, match=r"o/part-0/ndata/label: holds \d+ rows"):
        partition.load_part(cfg, 0)
    partition.load_part(cfg, 1)  # the other partition still loads


def test_node_ids_outside_the_graph_are_refused_on_load(tmp_path: Path, planted: Graph) -> None:
    """Review hA: with its sha256 rewritten too, an in-CSR naming node ids past the graph (or offsets
    going back) passed load_part and reached a shard server's sampler unchecked."""
    path = partition.write(planted, partition.partition_graph(planted, 2), tmp_path / "o")
    cfg = partition.load_config(path)
    indices = np.load(tmp_path / "o" / "part-0" / "indices.npy")
    bad = indices.copy()
    bad[3] = planted.num_nodes
    cfg = tamper(cfg, "part-0/indices.npy", bad)
    with pytest.raises(
        DataError, match=rf"o/part-0/indices.npy: node id {planted.num_nodes} \(edge 3\) is not in"
    ):
        partition.load_part(cfg, 0)
    cfg = tamper(cfg, "part-0/indices.npy", indices)
    indptr = np.load(tmp_path / "o" / "part-0" / "indptr.npy")
    swapped = indptr.copy()
    first = int(np.argmax(indptr[1:-1] < indptr[2:])) + 1  # a row with edges: moving it past the next
    swapped[first] = indptr[first + 1] + 1
    cfg = tamper(cfg, "part-0/indptr.npy", swapped)
    with pytest.raises(DataError, match="o/part-0/indptr.npy: goes back at row"):
        partition.load_part(cfg, 0)
    partition.load_part(cfg, 1)  # the other partition still loads
