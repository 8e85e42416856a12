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

The id map is hashed by value, not by its array's layout (_ids_sha): integers as int64 little-endian,
strings as little-endian UCS-4 at the width of the longest. The first digests hashed the array's dtype and
raw bytes (_legacy_sha), so the same ids stored as <U2 and <U5, or int32 and int64 (two loaders, a
loader's new version), named two graphs. Where the ids were stored that way already (int64, as every
integer loader stores them; strings at their narrowest, as np.array and np.unique make them) both forms
are one digest. Partitions and checkpoints written before carry the legacy digest: where two digests
differ, the partition's own files are read and its forms computed (the legacy one only when the
normalised one does not match: `forms`), and a match on either is the same graph. Only the normalised
digest is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from graphtrain.runtime.data.graph import Graph

KEY = "graph_identity"
MADE_FOR = "made_for"
HEX = "0123456789abcdef"
SHOWN = 12  # hex digits of a digest in a message: enough to tell two graphs apart by eye


NAMES = ("ntype_names", "canonical_etypes", "relation_names", "class_names")  # hashed as JSON lists


def _legacy_sha(values: np.ndarray | None) -> str | None:
    """sha256 of an array's dtype, shape and bytes (None: no array): the first digests' form."""
    if values is None:
        return None
    a = np.ascontiguousarray(values)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return h.hexdigest()


def _ids_sha(values: np.ndarray | None) -> str | None:
    """sha256 of an id array's values, whatever its dtype (None: no array): integers as int64
    little-endian, strings as little-endian UCS-4 padded to the longest one's length (numpy pads with
    NULs and drops trailing NULs from a string, so the padding is the values' own)."""
    if values is None:
        return None
    a = np.asarray(values)
    if a.dtype.kind in "iu" and not (
        a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max
    ):
        h = hashlib.sha256(f"<i8{a.shape}".encode())  # as _legacy_sha of int64: the same digest
        h.update(np.ascontiguousarray(a, dtype="<i8").view(np.uint8).reshape(-1))
    elif a.dtype.kind == "U":  # UCS-4 at the narrowest width that holds them: set by the values alone
        narrowest = np.dtype(f"<U{max(int(np.strings.str_len(a).max(initial=0)), 1)}")
        h = hashlib.sha256(f"{narrowest.str}{a.shape}".encode())  # as _legacy_sha of that array
        h.update(np.ascontiguousarray(a, dtype=narrowest).view(np.uint8).reshape(-1))
    else:  # no loader makes another kind (Graph allows integers and strings): as stored
        return _legacy_sha(a)
    return h.hexdigest()


def _names(values: Any) -> list[Any] | None:
    return None if values is None else np.asarray(values).tolist()


def _digest(num_nodes: int, num_edges: int, names: Mapping[str, Any], ids_sha: str | None) -> str:
    doc = {"num_nodes": int(num_nodes), "num_edges": int(num_edges), "node_ids": ids_sha}
    doc |= {key: _names(names.get(key)) for key in NAMES}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def forms(
    num_nodes: int, num_edges: int, names: Mapping[str, Any], node_ids: np.ndarray | None
) -> Iterator[str]:
    """The digest of a graph's counts, names (NAMES) and id map: normalised, then (asked for only when
    that one did not match) the legacy form, which partitions and checkpoints written before carry."""
    yield _digest(num_nodes, num_edges, names, _ids_sha(node_ids))
    yield _digest(num_nodes, num_edges, names, _legacy_sha(node_ids))


def graph_identity(graph: Graph, num_edges: int) -> dict[str, Any]:
    """The config's graph_identity of `graph` (a streamed graph has no edges: `num_edges` is theirs)."""
    names = {key: getattr(graph, key) for key in NAMES}
    digest = next(forms(graph.num_nodes, num_edges, names, graph.node_ids))
    return {"digest": digest, "num_nodes": int(graph.num_nodes), "num_edges": int(num_edges)}


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


def mismatch(
    trained: Mapping[str, Any] | None,
    found: Mapping[str, Any] | None,
    found_forms: Callable[[], Iterable[str]] | None = None,
) -> bool:
    """Whether two graph_identity entries (a checkpoint's, a partition's) name different graphs; an
    absent one (made before graph identities) is no mismatch: the caller warns instead. Where the two
    digests differ, `found_forms()` (the found partition's digests computed from its files: `forms`)
    are asked one by one, and the trained digest matching one of them is the same graph."""
    a = trained.get("digest") if isinstance(trained, Mapping) else None
    b = found.get("digest") if isinstance(found, Mapping) else None
    if not (isinstance(a, str) and isinstance(b, str)) or a == b:
        return False
    return found_forms is None or all(a != form for form in found_forms())
