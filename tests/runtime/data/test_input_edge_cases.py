"""The review of issue 20's own-data inputs (findings-20): each test is one finding's reproduction, which
passed silently, crashed or said the wrong thing before its fix."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from graphtrain.contract.spec import TriplesSource
from graphtrain.runtime.data.files import load_file
from graphtrain.runtime.data.requirements import problems
from graphtrain.runtime.data.summary import summarise
from graphtrain.runtime.data.triples import load_triples
from graphtrain.runtime.errors import DataError, DataWarning
from tests.runtime.data.test_summary_requirements import spec


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def quiet_load(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return load_file(*args, **kwargs)


EDGES = "src\tdst\n" + "".join(f"{i}\t{(i + 1) % 6}\n" for i in range(6))


# 2: float64 and integer features are float32 (the models compute in float32)
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_2_npy_features_are_float32(tmp_path: Path, dtype: type) -> None:
    np.save(tmp_path / "f.npy", (np.arange(12) % 5).reshape(6, 2).astype(dtype))
    g = load_file(write(tmp_path / "e.tsv", EDGES), features=tmp_path / "f.npy")
    assert g.feat.dtype == np.float32 and g.feat[1].tolist() == [2.0, 3.0]


def test_2_npz_feat_is_float32_and_beyond_float32_is_refused(tmp_path: Path) -> None:
    src, dst = np.arange(3), np.array([1, 2, 0])
    np.savez(tmp_path / "g.npz", src=src, dst=dst, feat=np.random.default_rng(0).random((3, 4)))
    assert load_file(tmp_path / "g.npz").feat.dtype == np.float32
    np.save(tmp_path / "f.npy", np.array([[1.0], [1e300], [0.0]]))
    with pytest.raises(DataError, match=r"f.npy: feature 1e\+300 at \[1, 0\] is beyond float32's range"):
        load_file(tmp_path / "g.npz", features=tmp_path / "f.npy")


# 3: under auto, 007 and 7 are two nodes (strings), and typed ids that collide name both rows
def test_3_non_canonical_integer_ids_are_strings_under_auto(tmp_path: Path) -> None:
    edges = write(tmp_path / "z.tsv", "src\tdst\n007\t1\n7\t2\n1\t2\n2\t007\n")
    labels = write(tmp_path / "l.csv", "id,label\n007,a\n7,b\n1,a\n2,b\n")
    g = load_file(edges, labels=labels)
    assert g.node_ids.tolist() == ["007", "1", "2", "7"]
    assert g.class_names[g.label].tolist() == ["a", "a", "b", "b"]
    assert quiet_load(write(tmp_path / "p.csv", "+5,1\n1,2\n")).node_ids.tolist() == ["+5", "1", "2"]
    assert load_file(write(tmp_path / "c.csv", "5,1\n1,20\n")).node_ids.tolist() == [1, 5, 20]


def test_3_labels_naming_one_integer_twice_name_both_rows(tmp_path: Path) -> None:
    labels = write(tmp_path / "l.csv", "id,label\n1,a\n007,a\n7,b\n")
    said = r"l.csv: ids '007' and '7' \(the same integer\) on line 3 and line 4"
    with pytest.raises(DataError, match=said):
        load_file(write(tmp_path / "e.tsv", "1\t7\n7\t2\n"), labels=labels)


# 4: a byte order mark is not part of the header
def test_4_bom_is_stripped_for_every_text_input(tmp_path: Path) -> None:
    bom = "\ufeff"
    g = load_file(write(tmp_path / "s.tsv", f"{bom}src\tdst\nalice\tbob\nbob\tcarol\n"))
    assert g.num_nodes == 3 and g.num_edges == 2
    triples = write(tmp_path / "t.tsv", f"{bom}head\trelation\ttail\n" + "a\tr\tb\nb\tr\tc\n" * 1)
    kg = load_triples(TriplesSource(path=str(triples)), None, "k", None)
    assert kg.relation_names.tolist() == ["r"] and kg.entity_names.tolist() == ["a", "b", "c"]


# 5: names with spaces (tabs) or quoted commas under auto
def test_5_string_ids_with_spaces_or_commas_under_auto(tmp_path: Path) -> None:
    sp = load_file(write(tmp_path / "sp.tsv", "src\tdst\nJohn Smith\tJane Doe\nJane Doe\tBob\n"))
    assert sp.node_ids.tolist() == ["Bob", "Jane Doe", "John Smith"]
    q = load_file(write(tmp_path / "q.csv", 'src,dst\n"Smith, John","Doe, Jane"\n"Doe, Jane",Bob\n'))
    assert q.node_ids.tolist() == ["Bob", "Doe, Jane", "Smith, John"]


# 6: labels in a float column (pandas' astype(float)), also parquet
def test_6_float_label_column(tmp_path: Path) -> None:
    labels = write(tmp_path / "l.csv", "id,label\n" + "".join(f"{i},{float(i % 3)}\n" for i in range(6)))
    g = load_file(write(tmp_path / "e.tsv", EDGES), labels=labels)
    assert g.label.tolist() == [0, 1, 2, 0, 1, 2]
    pq.write_table(pa.table({"label": [0.0, 1.0, None, 1.0, 0.0, 1.0]}), tmp_path / "l.parquet")
    g = load_file(tmp_path / "e.tsv", labels=tmp_path / "l.parquet")
    assert g.label.tolist() == [0, 1, -1, 1, 0, 1]


# 7: a .npy header claiming more than the file holds is refused before allocating
@pytest.mark.parametrize("rows", [10**12, 3 * 10**8])
@pytest.mark.parametrize("what", ["features", "labels"])
def test_7_npy_header_is_checked_first(tmp_path: Path, rows: int, what: str) -> None:
    path = tmp_path / "huge.npy"
    shape = (rows, 4) if what == "features" else (rows,)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.write(b"\0" * 64)
    with pytest.raises(DataError, match=r"huge.npy: its array declares shape .* but holds 64 bytes"):
        load_file(write(tmp_path / "e.tsv", EDGES), **{what: path})


# 9: a huge integer class id is refused by the requirements check (validate), naming graph.labels
def test_9_sparse_class_ids_are_a_problem(tmp_path: Path) -> None:
    labels = write(tmp_path / "l.csv", "id,label\n0,0\n1,1\n2,2\n3,1000000000000\n4,1\n5,0\n")
    g = quiet_load(write(tmp_path / "e.tsv", EDGES), labels=labels)
    found = [
        p
        for p in problems(spec("{path: e.tsv, labels: l.csv}"), summarise(g))
        if p.path == "spec.graph.labels"
    ]
    assert len(found) == 1
    assert "largest class id is 1,000,000,000,000" in found[0].message
    assert "give the classes as names" in found[0].message
    small = quiet_load(tmp_path / "e.tsv", labels=write(tmp_path / "k.csv", "id,label\n0,0\n1,1\n2,599\n"))
    found = problems(spec("{path: e.tsv, labels: k.csv}"), summarise(small))
    assert "spec.graph.labels" in [p.path for p in found]  # 599 > 100 x 3 labelled nodes


# 10: duplicate triples, leakage into valid/test, valid sharing test's triples
def _kg(tmp_path: Path, lines: list[str]) -> Path:
    return write(tmp_path / "train.tsv", "".join(f"{ln}\n" for ln in lines))


def test_10_duplicates_are_dropped_before_the_split(tmp_path: Path) -> None:
    lines = [f"e{i}\tr{i % 3}\te{i + 1}" for i in range(30)]
    path = _kg(tmp_path, lines + lines)
    with pytest.warns(DataWarning, match=r"train.tsv: 30 duplicate triples dropped \(the first at .*:31\)"):
        kg = load_triples(TriplesSource(path=str(path)), None, "k", None)
    every = np.concatenate([kg.train, kg.valid, kg.test])
    assert len(every) == 30 and len(np.unique(every, axis=0)) == 30


def test_10_valid_or_test_triples_in_train_are_refused(tmp_path: Path) -> None:
    train = _kg(tmp_path, ["a\tr\tb", "b\tr\tc", "c\tr\ta"])
    valid = write(tmp_path / "valid.tsv", "a\tr\tc\n")
    test = write(tmp_path / "test.tsv", "c\tr\tb\nb\tr\tc\na\tr\tb\n")
    source = TriplesSource(path=str(train), valid=str(valid), test=str(test))
    with pytest.raises(
        DataError, match=r"test.tsv:2: the triple 'b r c' .* also a training triple .* as are 1 more"
    ):
        load_triples(source, None, "k", None)
    write(tmp_path / "test.tsv", "a\tr\tc\n")
    with pytest.warns(DataWarning, match=r"test.tsv: 1 of its 1 test triples are also valid triples"):
        load_triples(source, None, "k", None)


# 11: keyed ids the edge list lacks are named in a warning; ids are stripped like edge-list fields
def test_11_keyed_ids_without_edges_warn_and_are_stripped(tmp_path: Path) -> None:
    edges = write(tmp_path / "s.tsv", "src\tdst\nalice\tbob\nbob\tcarol\n")
    labels = write(tmp_path / "l.csv", "id,label\nalice,a\nbob,b\ncarol ,a\nAlice,b\n")
    with pytest.warns(DataWarning, match=r"l.csv: 1 ids are not in .*s.tsv \('Alice'\): they become nodes"):
        g = load_file(edges, labels=labels)
    assert g.node_ids.tolist() == ["Alice", "alice", "bob", "carol"]


# 16: a triples file read as an edge list says so
def test_16_triples_read_as_an_edge_list_warn(tmp_path: Path) -> None:
    header = write(tmp_path / "h.tsv", "head\trelation\ttail\na\tlikes\tb\nb\tknows\tc\n")
    with pytest.warns(
        DataWarning, match=r"h.tsv: looks like \(head, relation, tail\) triples .*graph.triples"
    ):
        load_file(header)
    many = write(tmp_path / "m.tsv", "".join(f"{i}\t{i + 1}\t{i}\n" for i in range(40)))
    with pytest.warns(DataWarning, match=r"40 edge types among 40 edges"):
        load_file(many, num_nodes=41)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_file(write(tmp_path / "ok.tsv", "".join(f"{i}\t{i + 1}\t{i % 2}\n" for i in range(40))))


def test_16_a_triples_file_with_a_relation_per_triple_warns(tmp_path: Path) -> None:
    path = _kg(tmp_path, [f"e{i}\te{i + 1}\tr{i}" for i in range(40)])  # head, tail, relation
    with pytest.warns(DataWarning, match=r"40 relations among .* triples: is the column order"):
        load_triples(TriplesSource(path=str(path)), None, "k", None)


# 17: the minor ones
def test_17_a_directory_given_as_features_is_called_so(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(DataError, match=r"adir: is a directory, not a features file"):
        load_file(write(tmp_path / "e.tsv", EDGES), features=tmp_path / "adir")


def test_17_a_fifo_or_a_symlink_loop_as_triples(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.tsv")
    with pytest.raises(DataError, match=r"fifo.tsv: not a regular file"):
        load_triples(TriplesSource(path=str(tmp_path / "fifo.tsv")), None, "k", None)
    os.symlink(tmp_path / "loop.tsv", tmp_path / "loop.tsv")
    with pytest.raises(DataError, match=r"loop.tsv: Too many levels of symbolic links"):
        load_triples(TriplesSource(path=str(tmp_path / "loop.tsv")), None, "k", None)


def test_17_comment_lines_are_counted_and_only_at_a_line_start(tmp_path: Path) -> None:
    path = write(tmp_path / "h.csv", "src,dst\n1,2\n2,3\n#c,3\n")
    with pytest.warns(
        DataWarning, match=r"h.csv: 1 line\(s\) starting with '#' skipped as comments \(line 4\)"
    ):
        assert load_file(path).num_edges == 2
    kg = write(tmp_path / "k.tsv", "head\trelation\ttail\n #tag\tlikes\tbob\nbob\tlikes\t#tag\n")
    assert load_triples(TriplesSource(path=str(kg)), None, "k", None).entity_names.tolist() == ["#tag", "bob"]


def test_17_ids_beyond_int64_hint_at_string_ids(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not fit in int64 \(set graph.nodeIds: string"):
        load_file(write(tmp_path / "e.tsv", f"1\t{2**64}\n"))


def test_17_dictionary_label_column(tmp_path: Path) -> None:
    column = pa.array(["x", "y", "x", None, "y", "x"]).dictionary_encode()
    pq.write_table(pa.table({"label": column}), tmp_path / "l.parquet")
    g = load_file(write(tmp_path / "e.tsv", EDGES), labels=tmp_path / "l.parquet")
    assert g.class_names.tolist() == ["x", "y"] and g.label.tolist() == [0, 1, 0, -1, 1, 0]


# review hA: a float label beyond int64 was cast to -2**63 ("negative"), and the cast's RuntimeWarning,
# shown again inside data_warnings' recording, was recorded again without end until memory ran out
def test_a_label_beyond_int64_is_not_a_class_id(tmp_path: Path) -> None:
    labels = write(tmp_path / "l.csv", "id,label\n0,99999999999999999999\n1,1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(DataError, match=r"l.csv: label 1e\+20 \(line 2\) is not a class id"):
            load_file(write(tmp_path / "e.tsv", EDGES), labels=labels)


SHOWN_ONCE = """
import warnings
from graphtrain.runtime.errors import DataWarning, data_warnings
said = []
with warnings.catch_warnings(record=True) as outer:
    warnings.simplefilter("always")
    with data_warnings(said.append):
        warnings.warn("a data warning", DataWarning, stacklevel=1)
        warnings.warn("a runtime warning", RuntimeWarning, stacklevel=1)
print(said, [str(w.message) for w in outer])
"""


def test_data_warnings_shows_other_warnings_once() -> None:
    """In a process of its own, its memory bounded: before the fix this recorded without end."""

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-c", SHOWN_ONCE], capture_output=True, text=True, timeout=120, preexec_fn=bounded
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "['a data warning'] ['a runtime warning']"


# review hA: a features or labels table naming a column twice was a KeyError traceback from pyarrow
@pytest.mark.parametrize(
    ("kind", "header"), [("features", "id,a,a"), ("features", "id,id,a"), ("labels", "id,label,label")]
)
def test_a_node_table_naming_a_column_twice_is_one_line(tmp_path: Path, kind: str, header: str) -> None:
    table = write(tmp_path / "t.csv", header + "\n" + "".join(f"{i},{i % 2},1\n" for i in range(6)))
    twice = header.split(",")[-1] if kind == "labels" or header.count("a") == 2 else "id"
    with pytest.raises(DataError, match=f"t.csv: the header names column '{twice}' twice"):
        load_file(write(tmp_path / "e.tsv", EDGES), **{kind: table})


# review hA: a sparse features archive's indices were trusted by scipy's native code: out of range in a
# csc, the conversion to csr wrote outside its arrays (a segfault); in a csr, a row read another's columns
@pytest.mark.parametrize(
    ("kind", "indices", "indptr", "needle"),
    [
        ("csc", [0, 900_000, 1], [0, 1, 2, 3, 3], "indices must be < 6"),
        ("csr", [0, 9, 1], [0, 1, 2, 3, 3, 3, 3], "indices must be < 4"),
        ("csr", [0, 1, 1], [0, 3, 1, 3, 3, 3, 3], "indptr must be a non-decreasing"),
    ],
)
def test_sparse_features_are_checked_before_scipy_trusts_them(
    tmp_path: Path, kind: str, indices: list[int], indptr: list[int], needle: str
) -> None:
    """Run in a process of its own: before the fix, the csc case crashed the interpreter."""
    np.savez(
        tmp_path / "f.npz",
        format=np.array(kind.encode()),
        shape=np.array([6, 4]),
        data=np.ones(3),
        indices=np.array(indices),
        indptr=np.array(indptr),
    )
    code = (
        "import sys\nfrom graphtrain.runtime.data.files import load_file\nfrom graphtrain.runtime.errors "
        "import DataError\ntry:\n    load_file(sys.argv[1], features=sys.argv[2])\nexcept DataError as e:\n"
        "    print(e)\n"
    )
    edges = write(tmp_path / "e.tsv", EDGES)
    done = subprocess.run(
        [sys.executable, "-c", code, str(edges), str(tmp_path / "f.npz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert f"f.npz: not a consistent {kind} matrix ({needle}" in done.stdout


# review hA: features of no column validated, and the trainer died on its first batch
def test_features_of_no_column_are_refused(tmp_path: Path) -> None:
    edges = write(tmp_path / "e.tsv", EDGES)
    np.save(tmp_path / "f.npy", np.ones((6, 0), np.float32))
    with pytest.raises(DataError, match=r"f.npy: features of shape \(6, 0\) have no column"):
        load_file(edges, features=tmp_path / "f.npy")
    sp.save_npz(tmp_path / "s.npz", sp.csr_matrix((6, 0), dtype=np.float32))
    with pytest.raises(DataError, match=r"s.npz: features of shape \(6, 0\) have no column"):
        load_file(edges, features=tmp_path / "s.npz")
    np.savez(tmp_path / "g.npz", src=np.array([0, 1]), dst=np.array([1, 2]), feat=np.ones((3, 0)))
    with pytest.raises(DataError, match=r"g.npz: features of shape \(3, 0\) have no column"):
        load_file(tmp_path / "g.npz")


# review hA: a sparse features file declaring 2**40 columns validated with featureProjection, and the
# partition step asked numpy for the 128 TiB random matrix (on a smaller claim it took the machine's memory)
def test_a_projection_beyond_the_memory_is_refused_before_allocating() -> None:
    from graphtrain.runtime.data.transform import random_projection

    feat = sp.csr_matrix((np.ones(3), np.array([0, 1000, 2]), np.arange(4)), shape=(3, 2**40))
    with pytest.raises(DataError, match="model.featureProjection: projecting 1,099,511,627,776 feature"):
        random_projection(feat, 16)
    assert random_projection(sp.csr_matrix(np.eye(3, 5)), 4).shape == (3, 4)
