"""Which graph a partition was made of, carried in the partition's own config so that it travels with it.

A checkpoint's rows are in its partition's node order and its ids are that partition's id maps: read
through another graph's partition, `infer`, `predict` and `export` wrote wrong ids with exit 0. The
launcher's partition.settings (launch/reuse.py) told them apart only beside a partition a local
`graphtrain run` made; the operator's partition Job leaves none, and a copied partition leaves it
behind. So the partitioner (both its in-memory and its streaming path, through format.config_of) writes
two entries into the config:

    graph_identity  {"digest": sha256 of the graph's node and edge counts, node/edge type names,
                    relation and class names and its id map (the user's node ids), "num_nodes",
                    "num_edges"}: what the graph is, whatever the partitioning; the checkpoint records
                    it at save time (checkpoint/pieces.py partition_record)
    made_for        (partition_step) the partition key (launch/reuse.py partition_key: the graph
                    settings, the input files' sha256, the partition settings), which a spec is
                    compared with field by field without loading its graph; the checkpoint records it
                    too, and its copy is the one compared (the config's own bytes are in no hash)

The digest leaves the edges' endpoints out (hashing them would read the edge files once more on the
streaming path): two graphs of equal counts, without ids or names, share a digest; the node map's sha256
(which the checkpoint has always recorded) and the inputs' hashes in made_for still tell those apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from graphtrain.runtime.data.graph import Graph

KEY = "graph_identity"
MADE_FOR = "made_for"
HEX = "0123456789abcdef"
SHOWN = 12  # hex digits of a digest in a message: enough to tell two graphs apart by eye


def _array_sha(values: np.ndarray | None) -> str | None:
    """sha256 of an array's dtype, shape and bytes (None: no array)."""
    if values is None:
        return None
    a = np.ascontiguousarray(values)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return h.hexdigest()


def _names(values: np.ndarray | None) -> list[Any] | None:
    return None if values is None else np.asarray(values).tolist()


def graph_identity(graph: Graph, num_edges: int) -> dict[str, Any]:
    """The config's graph_identity of `graph` (a streamed graph has no edges: `num_edges` is theirs)."""
    doc = {
        "num_nodes": int(graph.num_nodes),
        "num_edges": int(num_edges),
        "ntype_names": _names(graph.ntype_names),
        "canonical_etypes": _names(graph.canonical_etypes),
        "relation_names": _names(graph.relation_names),
        "class_names": _names(graph.class_names),
        "node_ids": _array_sha(graph.node_ids),
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return {"digest": digest, "num_nodes": doc["num_nodes"], "num_edges": doc["num_edges"]}


def problem(entry: object) -> str | None:
    """What is wrong with a graph_identity entry (a checkpoint's record or a partition config's: no hash
    covers either), or None: a hand-edited digest that is no sha256 was taken without a word (an
    integer, {}), and one holding a line break or a lone surrogate broke the refusal's one line."""
    if not isinstance(entry, Mapping):
        return "is not a map"
    digest = entry.get("digest")
    if not isinstance(digest, str) or len(digest) != 64 or set(digest) - set(HEX):
        return "digest is not a sha256 (64 hex digits)"
    for count in ("num_nodes", "num_edges"):
        value = entry.get(count, 0)
        if type(value) is not int or value < 0:
            return f"{count} is not a count"
    return None


def config_problem(config: Mapping[str, Any]) -> str | None:
    """What is wrong with the graph_identity and made_for a partition config (or a checkpoint's partition
    record) carries, named by field; None when each is absent (made before them) or well formed."""
    if KEY in config and (wrong := problem(config[KEY])) is not None:
        return f"{KEY}.{wrong}" if wrong != "is not a map" else f"{KEY} {wrong}"
    if MADE_FOR in config and not isinstance(config[MADE_FOR], str):
        return f"{MADE_FOR} is not a string"
    return None


def digest_of(config: Mapping[str, Any]) -> str | None:
    """The graph digest a partition config (or a checkpoint's partition record) carries; None when it
    has none (made before graph identities) or a malformed one."""
    entry = config.get(KEY)
    digest = entry.get("digest") if isinstance(entry, dict) else None
    return digest if isinstance(digest, str) else None


def described(entry: Mapping[str, Any] | None) -> str:
    """'graph 3f2a9c01d4e7 (2,708 nodes, 10,556 edges)' of a graph_identity entry."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("digest"), str):
        return "a graph of unknown identity"
    counts = ""
    if isinstance(entry.get("num_nodes"), int) and isinstance(entry.get("num_edges"), int):
        counts = f" ({entry['num_nodes']:,} nodes, {entry['num_edges']:,} edges)"
    return f"graph {entry['digest'][:SHOWN]}{counts}"


def mismatch(trained: Mapping[str, Any] | None, found: Mapping[str, Any] | None) -> bool:
    """Whether two graph_identity entries (a checkpoint's, a partition's) name different graphs; an
    absent one (made before graph identities) is no mismatch: the caller warns instead."""
    a = trained.get("digest") if isinstance(trained, Mapping) else None
    b = found.get("digest") if isinstance(found, Mapping) else None
    return isinstance(a, str) and isinstance(b, str) and a != b
