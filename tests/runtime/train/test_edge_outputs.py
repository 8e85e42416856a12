"""The pure parts of an edge task's inference output (runtime/train/edge_outputs.py): which copy of a
repeated edge each is, and the matching of the graph's edges to their labelled rows, one labelled row
per copy, so a split's counts in the output are the evaluation's."""

from __future__ import annotations

import numpy as np

from graphtrain.runtime.train.edge_outputs import label_rows, occurrence


def test_occurrence_counts_the_equal_keys_before_each() -> None:
    keys = np.array([7, 3, 7, 7, 3, 9], dtype=np.int64)
    assert occurrence(keys).tolist() == [0, 0, 1, 2, 1, 0]
    assert occurrence(np.empty(0, np.int64)).tolist() == []


def test_each_labelled_row_is_matched_once_and_repeated_edges_take_their_copies_in_split_order() -> None:
    # (source, type, destination, class); edge (1, 0, 2) is in the graph three times, labelled twice
    labelled = {
        "train": np.array([[1, 0, 2, 5], [0, 1, 3, 6]], dtype=np.int64),
        "test": np.array([[1, 0, 2, 7]], dtype=np.int64),
    }
    edges = np.array([[1, 0, 2], [0, 1, 3], [1, 0, 2], [2, 0, 1], [1, 0, 2]], dtype=np.int64)
    split, row = label_rows(edges, labelled, num_nodes=4, num_types=2)
    # the first copy takes the train row, the second the test row, the third is unlabelled
    assert split.tolist() == [0, 0, 2, -1, -1]
    assert row.tolist() == [0, 1, 0, -1, -1]
    # the type is part of an edge: (0, 0, 3) is not the labelled (0, 1, 3)
    split, _ = label_rows(np.array([[0, 0, 3]]), labelled, num_nodes=4, num_types=2)
    assert split.tolist() == [-1]


def test_no_labelled_rows_or_no_edges_match_nothing() -> None:
    edges = np.array([[0, 0, 1]], dtype=np.int64)
    assert label_rows(edges, {}, 2, 1)[0].tolist() == [-1]
    empty = np.empty((0, 3), np.int64)
    assert label_rows(empty, {"train": np.array([[0, 0, 1, 0]])}, 2, 1)[0].tolist() == []


def test_the_predicted_types_are_the_labelled_ones_and_every_one_given_a_label_column() -> None:
    from types import SimpleNamespace

    from graphtrain.runtime.train.edge_outputs import label_types

    labelled = {"train": np.array([[0, 0, 1, 2]]), "test": np.array([[1, 0, 2, 1]])}
    files = SimpleNamespace(
        graph=SimpleNamespace(edges=[SimpleNamespace(label="y"), SimpleNamespace(label=None)])
    )
    # type 0 has labels; type 2's column is all empty cells: its edges are the ones to predict
    files.graph.edges.append(SimpleNamespace(label="y"))
    assert label_types(files, labelled).tolist() == [0, 2]
    dataset = SimpleNamespace(graph=SimpleNamespace(edges=None))  # a bundled dataset: its labelled types
    assert label_types(dataset, labelled).tolist() == [0]
