"""Issue 20 inputs: string node ids (item 1), features and labels files (item 3's second half), triples
files (item 1), the silent wrong results made loud (items 4, 9) and load_source wiring (relative paths)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from graphtrain.contract.spec import GraphSource, Split, TriplesSource
from graphtrain.runtime.data import datasets
from graphtrain.runtime.data.files import load_file
from graphtrain.runtime.data.triples import load_triples
from graphtrain.runtime.errors import DataError, DataWarning


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def edges_of(g) -> list[tuple]:
    src, dst = g.edges()
    return sorted(zip(g.node_ids[src].tolist(), g.node_ids[dst].tolist(), strict=True))


# ------------------------------------------------------------------------------------ string ids


def test_string_ids_are_sorted_into_0_to_n(tmp_path: Path) -> None:
    g = load_file(write(tmp_path / "e.tsv", "src\tdst\nF_0_0002\tF_0_0000\nF_0_0000\tF_0_0001\n"))
    assert g.node_ids.dtype.kind == "U"
    assert g.node_ids.tolist() == ["F_0_0000", "F_0_0001", "F_0_0002"]
    assert edges_of(g) == [("F_0_0000", "F_0_0001"), ("F_0_0002", "F_0_0000")]


def test_string_ids_keep_spaces_between_tabs_and_a_names_line_is_an_edge(tmp_path: Path) -> None:
    g = load_file(write(tmp_path / "e.tsv", "alice\tbob smith\nbob smith\tcarol\n"))
    assert g.num_nodes == 3 and edges_of(g) == [("alice", "bob smith"), ("bob smith", "carol")]
    csv = load_file(write(tmp_path / "e.csv", 'a,"x, y",likes\nb,a,knows\n'))
    assert csv.node_ids.tolist() == ["a", "b", "x, y"]
    assert csv.relation_names.tolist() == ["knows", "likes"]
    assert csv.relation_names[csv.etype].tolist() == ["likes", "knows"]


@pytest.mark.parametrize(("mode", "kind"), [("auto", "i"), ("string", "U"), ("integer", "i")])
def test_node_ids_mode(tmp_path: Path, mode: str, kind: str) -> None:
    g = load_file(write(tmp_path / "e.tsv", "10\t2\n2\t7\n"), node_ids=mode)
    assert g.node_ids.dtype.kind == kind
    assert [str(v) for v in g.node_ids] == (["10", "2", "7"] if kind == "U" else ["2", "7", "10"])


def test_integer_mode_names_the_line_and_the_field(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"e.tsv:2: 'F_0_0000' is not an integer id \(set graph.nodeIds"):
        load_file(write(tmp_path / "e.tsv", "0\t1\n1\tF_0_0000\n"), node_ids="integer")
    with pytest.raises(DataError, match=r"e.tsv:3: expected 2 columns, found 3"):
        load_file(write(tmp_path / "e.tsv", "a\tb\nb\tc\nc\td\te\n"))


# ------------------------------------------------------------------------------ node files


def test_npy_features_and_csv_string_labels(tmp_path: Path) -> None:
    edges = write(tmp_path / "e.tsv", "0\t1\n1\t2\n")
    feat = np.arange(12, dtype=np.float32).reshape(4, 3)  # 4 rows: node 3 has no edge and is kept
    np.save(tmp_path / "f.npy", feat)
    labels = write(tmp_path / "l.csv", "id,label\n0,cat\n2,dog\n3,cat\n")
    g = load_file(edges, features=tmp_path / "f.npy", labels=labels)
    assert g.num_nodes == 4 and np.array_equal(g.feat, feat)
    assert g.class_names.tolist() == ["cat", "dog"] and g.num_classes == 2
    assert g.label.tolist() == [0, -1, 1, 0]  # node 1 has no row: unlabelled


def test_keyed_files_add_isolated_nodes(tmp_path: Path) -> None:
    edges = write(tmp_path / "e.tsv", "n1\tn2\nn2\tn3\n")
    pq.write_table(
        pa.table({"id": ["n4", "n3", "n2", "n1"], "x": [4.0, 3.0, 2.0, 1.0], "y": [0, 0, 1, 1]}),
        tmp_path / "f.parquet",
    )
    labels = write(tmp_path / "l.csv", "id,label\nn1,2\nn4,0\n")
    with pytest.warns(
        DataWarning, match=r"1 ids are not in .*e.tsv \('n4'\): they become nodes without edges"
    ):
        g = load_file(edges, features=tmp_path / "f.parquet", labels=labels)
    assert g.node_ids.tolist() == ["n1", "n2", "n3", "n4"]
    assert g.feat.tolist() == [[1, 1], [2, 1], [3, 0], [4, 0]]
    assert g.label.tolist() == [2, -1, -1, 0] and g.class_names is None and g.num_classes == 3


def test_sparse_npz_features(tmp_path: Path) -> None:
    mat = sp.random(5, 7, density=0.3, format="csr", random_state=0, dtype=np.float32)
    sp.save_npz(tmp_path / "f.npz", mat)
    g = load_file(write(tmp_path / "e.tsv", "0\t4\n"), features=tmp_path / "f.npz")
    assert sp.issparse(g.feat) and (g.feat != mat).nnz == 0 and g.num_nodes == 5


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ({"l.csv": "id,label\n0,a\n0,b\n"}, r"l.csv: id '0' on line 2 and line 3: one row per node"),
        ({"l.csv": "id,kind\n0,a\n"}, r"l.csv: no `label` column \(columns: id, kind\)"),
        ({"l.csv": "id,label\nx,a\n"}, r"l.csv: id 'x' \(line 2\) is not a non-negative integer id"),
        ({"f.csv": "id,x\n0,1.5\n1,abc\n2,1\n"}, r"f.csv: column 'x' holds string, not numbers"),
        ({"f.csv": "id,x\n0,1.5\n2,1\n"}, r"f.csv: 1 nodes have no row \(e.g. 1\)"),
        ({"f.npy": np.ones((2, 2))}, r"id 2 is outside \[0, 2\) \(the rows of .*f.npy\)"),
        ({"l.npy": np.array([0, 1, -2])}, r"l.npy: label -2 \(index 2\) is negative"),
        ({"f.npy": np.array([{"a": 1}], dtype=object)}, r"f.npy: its array holds Python objects"),
        # an id column under another name: the rows would be matched to nodes by their order
        ({"l.csv": "node,label\n2,a\n0,b\n1,a\n"}, r"l.csv: column 'node' looks like node ids, .* `id`"),
        ({"f.csv": "ID,x\n2,1\n0,2\n1,3\n"}, r"f.csv: column 'ID' looks like node ids, .* `id`"),
        ({"f.parquet": {"node_id": [2, 0, 1], "x": [1.0, 2, 3]}}, r"f.parquet: column 'node_id' looks like"),
    ],
)
def test_bad_node_files(tmp_path: Path, files: dict, needle: str) -> None:
    kwargs = {}
    for name, content in files.items():
        path = tmp_path / name
        if name.endswith(".npy"):
            np.save(path, content, allow_pickle=True)
        elif name.endswith(".parquet"):
            pq.write_table(pa.table(content), path)
        else:
            path.write_text(content)
        kwargs["features" if name.startswith("f") else "labels"] = path
    with pytest.raises(DataError, match=needle):
        load_file(write(tmp_path / "e.tsv", "0\t1\n1\t2\n"), **kwargs)


def test_keyed_labels_of_an_npz_name_its_nodes(tmp_path: Path) -> None:
    np.savez(tmp_path / "g.npz", src=np.array([0, 1]), dst=np.array([1, 2]))
    g = load_file(tmp_path / "g.npz", labels=write(tmp_path / "l.csv", "id,label\n2,b\n0,a\n"))
    assert g.label.tolist() == [0, -1, 1] and g.class_names.tolist() == ["a", "b"]
    with pytest.raises(DataError, match=r"l.csv: id 9 is not a node of .*g.npz"):
        load_file(tmp_path / "g.npz", labels=write(tmp_path / "l.csv", "id,label\n9,b\n"))


def test_string_ids_need_keyed_node_files(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.ones((2, 2)))
    with pytest.raises(DataError, match="node ids are strings, so .*f.npy .* cannot number them"):
        load_file(write(tmp_path / "e.tsv", "a\tb\n"), features=tmp_path / "f.npy")


def test_masks_split_only_labelled_nodes(tmp_path: Path) -> None:
    n = 50
    write(tmp_path / "e.tsv", "".join(f"{i}\t{(i + 1) % n}\n" for i in range(n)))
    write(tmp_path / "l.csv", "id,label\n" + "".join(f"{i},{i % 3}\n" for i in range(0, n, 2)))
    src = GraphSource(path="e.tsv", labels="l.csv", split=Split(train=0.6, val=0.2, test=0.2, seed=3))
    g = datasets.load_source(src, base_dir=tmp_path)
    labelled = g.label >= 0
    total = sum(int(m.sum()) for m in g.masks.values())
    assert total == int(labelled.sum()) == 25
    assert all(not (m & ~labelled).any() for m in g.masks.values())
    assert [int(m.sum()) for m in g.masks.values()] == [15, 5, 5]
    again = datasets.load_source(src, base_dir=tmp_path)
    assert all(np.array_equal(g.masks[k], again.masks[k]) for k in g.masks)


# ---------------------------------------------------------------------------------- triples


def family(tmp_path: Path) -> Path:
    write(
        tmp_path / "train.tsv",
        "head\trelation\ttail\nann\tparent_of\tbob\nbob\tparent_of\tcid\n"
        "cid\tsibling_of\tdee\nann\tparent_of\tdee\n",
    )
    write(tmp_path / "valid.tsv", "bob\tparent_of\tdee\n")
    write(tmp_path / "test.tsv", "# a comment\ncid\tsibling_of\tbob\n")
    return tmp_path


def test_own_split_string_labels_sorted_ids(tmp_path: Path) -> None:
    family(tmp_path)
    kg = load_triples(
        TriplesSource(path="train.tsv", valid="valid.tsv", test="test.tsv"), None, "fam", tmp_path
    )
    assert kg.entity_names.tolist() == ["ann", "bob", "cid", "dee"]
    assert kg.relation_names.tolist() == ["parent_of", "sibling_of"]
    assert kg.train.tolist() == [[0, 0, 1], [1, 0, 2], [2, 1, 3], [0, 0, 3]]
    assert kg.valid.tolist() == [[1, 0, 3]] and kg.test.tolist() == [[2, 1, 1]]


def test_column_order_and_integer_labels(tmp_path: Path) -> None:
    write(tmp_path / "t.csv", "1,10,7\n7,1,2\n")  # h, t, r: integer labels are labels
    kg = load_triples(TriplesSource(path="t.csv", columns=["head", "tail", "relation"]), None, "k", tmp_path)
    assert kg.entity_names.tolist() == ["1", "10", "7"] and kg.relation_names.tolist() == ["2", "7"]
    everything = np.concatenate([kg.train, kg.valid, kg.test]).tolist()
    names = [[kg.entity_names[h], kg.relation_names[r], kg.entity_names[t]] for h, r, t in everything]
    assert sorted(names) == [["1", "7", "10"], ["7", "2", "1"]]


def test_header_must_agree_with_columns(tmp_path: Path) -> None:
    write(tmp_path / "t.tsv", "head\ttail\trelation\na\tb\tr\n")
    with pytest.raises(
        DataError,
        match=r"t.tsv:1: the header names the columns head, tail, relation .* "
        r"graph.triples.columns is \[head, relation, tail\]",
    ):
        load_triples(TriplesSource(path="t.tsv"), None, "k", tmp_path)


def test_unknown_label_in_valid_names_file_and_line(tmp_path: Path) -> None:
    family(tmp_path)
    write(tmp_path / "test.tsv", "cid\tsibling_of\tbob\n\nann\tcousin_of\tbob\n")
    with pytest.raises(DataError, match=r"test.tsv:3: relation 'cousin_of' is not in the training triples"):
        load_triples(TriplesSource(path="train.tsv", valid="valid.tsv", test="test.tsv"), None, "f", tmp_path)
    write(tmp_path / "t.tsv", "a\tr\n")
    with pytest.raises(DataError, match=r"t.tsv:1: expected 3 columns \(head, relation, tail\), found 2"):
        load_triples(TriplesSource(path="t.tsv"), None, "k", tmp_path)


def test_one_file_seeded_split(tmp_path: Path) -> None:
    write(tmp_path / "t.tsv", "".join(f"e{i}\tr{i % 3}\te{(i * 7) % 40}\n" for i in range(100)))
    src = TriplesSource(path="t.tsv")
    kg = load_triples(src, None, "k", tmp_path)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == (80, 10, 10)
    again = load_triples(src, None, "k", tmp_path)
    assert np.array_equal(kg.test, again.test)
    other = load_triples(src, Split(train=0.5, val=0.25, test=0.25, seed=1), "k", tmp_path)
    assert len(other.train) == 50
    reseeded = load_triples(src, Split(seed=1), "k", tmp_path)  # a seed alone keeps 80/10/10
    assert (len(reseeded.train), len(reseeded.valid), len(reseeded.test)) == (80, 10, 10)
    assert not np.array_equal(np.sort(reseeded.test, axis=0), np.sort(kg.test, axis=0))


def test_a_seed_alone_keeps_the_labelled_nodes_and_a_datasets_own_fractions(tmp_path: Path) -> None:
    n = 50
    write(tmp_path / "e.tsv", "".join(f"{i}\t{(i + 1) % n}\n" for i in range(n)))
    write(tmp_path / "l.csv", "id,label\n" + "".join(f"{i},{i % 3}\n" for i in range(n)))
    g = datasets.load_source(
        GraphSource(path="e.tsv", labels="l.csv", split=Split(seed=4)), base_dir=tmp_path
    )
    assert [int(m.sum()) for m in g.masks.values()] == [30, 10, 10]
    assert Split(seed=4).over(Split(train=0.9, val=0.05, test=0.05)) == Split(
        train=0.9, val=0.05, test=0.05, seed=4
    )


def test_load_source_triples_is_the_training_graph_with_splits(tmp_path: Path) -> None:
    family(tmp_path)
    source = GraphSource(triples=TriplesSource(path="train.tsv", valid="valid.tsv", test="test.tsv"))
    g = datasets.load_source(source, base_dir=tmp_path)
    assert g.num_edges == 4 and g.node_ids.tolist() == ["ann", "bob", "cid", "dee"]
    assert g.relation_names.tolist() == ["parent_of", "sibling_of"]
    assert {k: len(v) for k, v in g.triples.items()} == {"train": 4, "valid": 1, "test": 1}


def test_typed_triples_with_reverses_give_a_relation_and_its_reverse_their_own_edge_types(
    tmp_path: Path,
) -> None:
    """graph.typed on triples: one node type (entity), an edge type per relation; reverseEdges adds the
    reverse of every training triple under its own reverse type (what a relational encoder of task
    linkPrediction reads), and every split is kept."""
    family(tmp_path)
    triples = TriplesSource(path="train.tsv", valid="valid.tsv", test="test.tsv")
    g = datasets.load_source(GraphSource(triples=triples, typed=True, reverseEdges=True), base_dir=tmp_path)
    assert g.ntype_names.tolist() == ["entity"] and g.num_edges == 8
    relations = sorted(c[1] for c in g.canonical_etypes.tolist())
    assert relations == ["parent_of", "rev_parent_of", "rev_sibling_of", "sibling_of"]
    assert {k: len(v) for k, v in g.triples.items()} == {"train": 4, "valid": 1, "test": 1}
    assert g.relation_names.tolist() == ["parent_of", "sibling_of"]  # the triples' relation column's


def test_load_source_resolves_relative_paths_from_base_dir(tmp_path: Path, monkeypatch) -> None:
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    write(spec_dir / "e.tsv", "0\t1\n1\t2\n")
    np.save(spec_dir / "f.npy", np.ones((3, 2), np.float32))
    monkeypatch.chdir(tmp_path)  # not the spec's directory
    g = datasets.load_source(GraphSource(path="e.tsv", features="f.npy"), base_dir=spec_dir)
    assert g.feat.shape == (3, 2)
    absolute = datasets.load_source(
        GraphSource(path=str(spec_dir / "e.tsv")), base_dir=tmp_path / "elsewhere"
    )
    assert absolute.num_nodes == 3


# ------------------------------------------------------------------- silent wrong results, loud


def test_compaction_that_drops_ids_warns(tmp_path: Path) -> None:
    path = write(tmp_path / "e.tsv", "".join(f"{i}\t{i + 1}\n" for i in range(0, 40, 2)))  # 0-1 2-3 ... 38-39
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_file(path)  # no gap: silent
    write(path, "0\t1\n1\t5\n5\t6\n")  # 2, 3, 4 have no edge
    with pytest.warns(DataWarning, match=r"3 ids between 0 and 6 have no edge .* set graph.numNodes"):
        g = load_file(path)
    assert g.num_nodes == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_file(path, num_nodes=7).num_nodes == 7
        load_file(write(tmp_path / "k.tsv", "10\t2000000000000\n"))  # database keys: not a range


def test_npz_whose_feat_outruns_the_edges_says_add_num_nodes(tmp_path: Path) -> None:
    np.savez(tmp_path / "g.npz", src=np.array([0, 1]), dst=np.array([1, 2]), feat=np.ones((5, 2)))
    with pytest.raises(DataError, match="the last 2 nodes have no edge: add num_nodes to the archive"):
        load_file(tmp_path / "g.npz")
