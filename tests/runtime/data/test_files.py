"""Generic graph files: edge lists and npz, with every bad-input case named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime.data.files import load_file
from graphtrain.runtime.errors import DataError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_tsv_with_header_comments_and_sparse_ids(tmp_path: Path) -> None:
    g = load_file(
        write(tmp_path, "e.tsv", "# a comment\nsrc\tdst\n10\t2000000000000\n2000000000000\t7\n\n10\t7\n")
    )
    assert g.num_nodes == 3
    assert g.node_ids.tolist() == [7, 10, 2000000000000]
    src, dst = g.edges()
    pairs = sorted(zip(g.node_ids[src].tolist(), g.node_ids[dst].tolist(), strict=True))
    assert pairs == [(10, 7), (10, 2000000000000), (2000000000000, 7)]


def test_a_header_is_names_only(tmp_path: Path) -> None:
    g = load_file(write(tmp_path, "e.csv", f"source,target,type\n0,{2**62},1\n{2**63 - 1},0,0\n"))
    assert g.node_ids.tolist() == [0, 2**62, 2**63 - 1] and g.etype.tolist() == [1, 0]
    for first in ("0.5\t1", "0x10\t1", "src\t1", "nan\tinf"):
        with pytest.raises(DataError, match="e.tsv:1: .* is not an integer id"):
            load_file(write(tmp_path, "e.tsv", f"{first}\n1\t2\n"), node_ids="integer")
        # auto: a file whose ids are not all integers has string ids
        assert load_file(write(tmp_path, "e.tsv", f"{first}\n1\t2\n")).node_ids.dtype.kind == "U"


def test_csv_with_edge_types_and_num_nodes(tmp_path: Path) -> None:
    g = load_file(write(tmp_path, "e.csv", "0,1,2\n1,2,0\n"), num_nodes=5)
    assert g.num_nodes == 5 and g.node_ids is None
    assert g.etype.tolist() == [2, 0]


@pytest.mark.parametrize(
    ("text", "kwargs", "needle"),
    [
        ("", {}, "no edges"),
        ("# only comments\n", {}, "no edges"),
        ("0 1\n-3 2\n", {}, "negative id"),
        ("0 1\n1 9\n", {"num_nodes": 5}, "outside"),
        ("0 1\n1 x\n", {"node_ids": "integer"}, r"e.tsv:2: .x. is not an integer id \(set graph.nodeIds"),
        ("0 1\n1 2 3\n", {}, "e.tsv:2: expected 2 columns"),
        ("0 1 2 3\n", {}, "2 or 3 columns"),
        ("0 99999999999999999999\n", {}, "int64"),
        # rows of 3 and 1 fields add up to whole edges: read as one stream they shifted every later edge
        ("0 1\n2 3 4\n5\n6 7\n", {}, "e.tsv:2: expected 2 columns, found 3"),
        ("0 1\n2 3 4\n5\n6 7\n", {"node_ids": "integer"}, "e.tsv:2: expected 2 columns, found 3"),
        ("0 1 2\n3 4\n5 6 7 8\n", {"node_ids": "integer"}, "e.tsv:2: expected 3 columns, found 2"),
    ],
)
def test_bad_edge_lists(tmp_path: Path, text: str, kwargs: dict, needle: str) -> None:
    with pytest.raises(DataError, match=needle):
        load_file(write(tmp_path, "e.tsv", text), **kwargs)


def test_a_csv_empty_field_is_a_field(tmp_path: Path) -> None:
    for text in ("0,1\n1,,2\n", "0,1\n1,2,\n3\n"):
        with pytest.raises(DataError, match="e.csv:2: expected 2 columns, found 3"):
            load_file(write(tmp_path, "e.csv", text))


def test_missing_file_and_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        load_file(tmp_path / "nope.tsv")
    with pytest.raises(DataError, match="--format"):
        load_file(write(tmp_path, "e.bin", "0 1\n"))


def test_npz_with_node_data(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(
        path,
        src=np.array([0, 1]),
        dst=np.array([1, 2]),
        num_nodes=4,
        feat=np.ones((4, 3), np.float32),
        label=np.array([0, 1, 0, 1]),
        train_mask=np.array([1, 1, 0, 0], bool),
    )
    g = load_file(path)
    assert g.num_nodes == 4 and g.feat.shape == (4, 3) and g.masks["train"].sum() == 2


def test_npz_csr(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, indptr=np.array([0, 2, 2, 3]), indices=np.array([1, 2, 0]))
    g = load_file(path)
    assert g.num_nodes == 3 and g.num_edges == 3


@pytest.mark.parametrize(
    ("arrays", "needle"),
    [
        (
            {"src": np.array([0]), "dst": np.array([1]), "num_nodes": 2, "feat": np.ones((3, 2))},
            "feat has 3 rows",
        ),
        ({"src": np.array([0, -1]), "dst": np.array([1, 1]), "num_nodes": 2}, "source id -1"),
        ({"src": np.array([0]), "dst": np.array([5]), "num_nodes": 2}, "destination id 5"),
        ({"src": np.array([], np.int64), "dst": np.array([], np.int64)}, "empty graph"),
        ({"edges": np.array([0, 1])}, "needs arrays"),
        ({"src": np.array([0]), "dst": np.array([1]), "weird": np.array([1])}, "unknown arrays"),
        ({"src": np.array([0.5]), "dst": np.array([1.0])}, "src must be a 1-D integer array"),
        ({"src": np.array([0]), "dst": np.array([1]), "feat": np.ones(2)}, "2-D"),
    ],
)
def test_bad_npz(tmp_path: Path, arrays: dict, needle: str) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError, match=needle):
        load_file(path)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"label": np.array([0, -5, 1, 0])}, r"label -5 \(node 1\) is negative"),
        (
            {"label": np.array([0, -1, 1, 0]), "train_mask": np.array([1, 1, 0, 0], bool)},
            "train_mask selects node 1, which is unlabelled",
        ),
        (
            {"train_mask": np.array([1, 1, 0, 0], bool), "test_mask": np.array([0, 1, 1, 0], bool)},
            "test_mask and train_mask both select node 1: a node belongs to one split",
        ),
        ({"node_ids": np.array([7, 9, 7, 8])}, "node_ids holds 7 for nodes 0 and 2: one id per node"),
    ],
)
def test_npz_node_arrays_mean_what_a_labels_file_would(tmp_path: Path, extra: dict, needle: str) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0, 1, 2]), dst=np.array([1, 2, 3]), num_nodes=4, **extra)
    with pytest.raises(DataError, match=needle):
        load_file(path)


def test_npz_never_unpickles(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0]), dst=np.array([1]), feat=np.array([{"x": 1}, None], dtype=object))
    with pytest.raises(DataError, match="feat.npy holds Python objects"):
        load_file(path)


def test_corrupt_npz(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(DataError, match="not a readable"):
        load_file(path)
