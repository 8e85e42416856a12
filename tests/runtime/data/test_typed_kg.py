"""gene-kg's entity kinds: every name of the real dataset has one (its GO root `all` too)."""

from __future__ import annotations

import numpy as np
import pytest

from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.data.typed import kg_typed
from graphtrain.runtime.errors import DataError


def _kg(names: list[str]) -> Graph:
    """A path over `names` (entity i -> i + 1), every edge relation 0."""
    n = len(names)
    indptr = np.concatenate([np.arange(n, dtype=np.int64), [n - 1]])
    return Graph(
        "gene-kg",
        n,
        indptr,
        np.arange(1, n, dtype=np.int64),
        etype=np.zeros(n - 1, dtype=np.int64),
        node_ids=np.array(names),
    )


def test_each_entity_gets_its_kind_and_the_go_root_is_a_go_term() -> None:
    names = ["EG:1", "PMID:7", "GO:0008150", "all", "OMIM:3", "EC:1.1.1.1", "PF00001", "PS00001"]
    typed = kg_typed(_kg(names), ["go_is_a"])
    assert typed.ntype_names is not None and typed.ntype is not None
    kinds = {str(typed.node_ids[i]): str(typed.ntype_names[typed.ntype[i]]) for i in range(len(names))}
    assert kinds == {
        "EG:1": "gene",
        "PMID:7": "paper",
        "GO:0008150": "go_term",
        "all": "go_term",
        "OMIM:3": "omim",
        "EC:1.1.1.1": "ec",
        "PF00001": "pfam",
        "PS00001": "prosite",
    }


def test_an_entity_of_no_known_kind_is_named() -> None:
    with pytest.raises(DataError, match="entity 'nothing:1' is of no known kind"):
        kg_typed(_kg(["EG:1", "nothing:1"]), ["r"])
