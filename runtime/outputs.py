"""What leaves a run for the user: tables of a checkpoint in the user's own order and ids, as .npy,
.csv or .parquet.

Node-keyed tables are stored in the partition's relabeled order; written out in that order they look
right and are wrong (row i is not node i). So every node-keyed export goes through the partition the
run trained on: the checkpoint names it (checkpoint.json "partition", with the sha256 of its node
map), a `--partition` given by hand must have that same node map, and a checkpoint that names none
needs `--partition`. A table over some node types (embeddings[].nodeTypes, recorded beside the keys)
comes out as the rows of those types' nodes, in original order. The choices are pure functions
(`pick_partition`, `table_keying`); the rest reads and writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.data.cache import atomic_file, make_dirs
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.partition import identity
from graphtrain.runtime.partition.format import PartitionConfig, load_config, load_maps, load_names
from graphtrain.runtime.partition.typed_ids import NodeRows

SUFFIXES = (".npy", ".csv", ".parquet")
Keying = Literal["nodes", "relations", "features", "rows"]


def pick_partition(
    checkpoint: Path, record: dict[str, Any] | None, found: list[tuple[Path, str | None]]
) -> Path:
    """The partition config to read a checkpoint's rows with, from its record and the candidates
    looked at (path, node-map sha256 or None when absent), in preference order.

    Raises:
        GraphtrainError: the checkpoint names no partition, or none found has its node map.
    """
    if record is None:
        raise GraphtrainError(
            f"{checkpoint}: the checkpoint does not name the partition it was trained on: pass "
            "--partition <run-dir>/partition (without it, rows would come out in partition order)"
        )
    for path, sha in found:
        if sha == record["node_map_sha256"]:
            return path
    changed = [str(p) for p, sha in found if sha is not None]
    if changed:
        raise GraphtrainError(
            f"{changed[0]}: not the partition {checkpoint.name} was trained on (its node order differs, "
            "it was partitioned again): pass --partition naming the one the run used"
        )
    raise GraphtrainError(
        f"{checkpoint}: its partition {record['config']} is gone: pass --partition naming a copy of it"
    )


def checkpoint_partition(
    checkpoint: Path, override: Path | None = None, warn: Callable[[str], None] | None = None
) -> PartitionConfig:
    """The partition a checkpoint's node-keyed rows are ordered by: `override` if given (and it must
    have the recorded node map when there is a record), else the one checkpoint.json names; either
    must be of the graph the checkpoint was trained on (same_graph). `warn`: told, once, that one of
    them is too old to say which graph it is.

    Raises:
        GraphtrainError: see pick_partition and same_graph; DataError for an unreadable partition.
    """
    record = ckpt.read_top(checkpoint).get("partition")
    if override is not None:
        cfg = load_config(override)
        if record is not None and _node_map_sha(cfg) != record["node_map_sha256"]:
            raise GraphtrainError(
                f"{cfg.path}: not the partition {checkpoint.name} was trained on ({record['config']}): "
                "its node order differs, so rows would be misplaced"
            )
        return same_graph(checkpoint, record, cfg, warn)
    found: list[tuple[Path, str | None]] = []
    if record is not None:
        for candidate in (checkpoint / record["relative"], Path(record["config"])):
            cfg_or_none = _try_config(candidate)
            found.append((candidate, None if cfg_or_none is None else _node_map_sha(cfg_or_none)))
    return same_graph(checkpoint, record, load_config(pick_partition(checkpoint, record, found)), warn)


def same_graph(
    checkpoint: Path,
    record: dict[str, Any] | None,
    cfg: PartitionConfig,
    warn: Callable[[str], None] | None = None,
) -> PartitionConfig:
    """`cfg`, once its graph identity (partition/identity.py) is the one checkpoint.json recorded: a
    partition of another graph (copied over the run's, or named by --partition) whose node map happens
    to be the same (one part, equal node counts) wrote that graph's ids beside the checkpoint's rows.
    A checkpoint or a partition from before graph identities is `warn`-ed about and taken: refusing it
    would leave its tables unreadable for good (partitioning again gives the nodes other rows), and its
    node map is still checked.

    Raises:
        GraphtrainError: naming both graphs, when they differ; naming the field, when `cfg`'s
            graph_identity or made_for is malformed (checkpoint.json's is read_top's)."""
    trained = (record or {}).get(identity.KEY)
    found = cfg.data.get(identity.KEY)
    where = os.path.normpath(cfg.path)  # <checkpoint>/../../partition/<graph>.json, as the record finds it
    if (wrong := identity.config_problem(cfg.data)) is not None:  # a hand edit: no hash covers the config
        raise GraphtrainError(f"{where}: not a graphtrain partition config: {wrong}")
    if identity.mismatch(trained, found, lambda: partition_forms(cfg)):
        raise GraphtrainError(
            f"{where}: a partition of {identity.described(found)}, but checkpoint {checkpoint.name} was "
            f"trained on {identity.described(trained)}: give it the partition the run trained on"
        )
    if record is not None and (trained is None or found is None) and warn is not None:
        old = f"checkpoint {checkpoint.name}" if trained is None else f"partition {where}"
        warn(
            f"{old} was written before graph identities: that {where} is of the graph the "
            "checkpoint was trained on is told by its node map alone (and a spec's graph only by the "
            "partition.settings a local run leaves beside its partition)"
        )
    return cfg


def partition_forms(cfg: PartitionConfig) -> Iterator[str]:
    """The graph digests of partition `cfg` computed from its files (identity.forms: the normalised one,
    then the legacy one), for a checkpoint whose recorded digest is not the one its config carries: the
    same ids stored with another dtype, or a digest of the other form.

    Raises:
        DataError: a names file missing, changed (its sha256) or not a plain array."""
    names = load_names(cfg)
    data = cfg.data
    names |= {key: data[key] for key in ("ntype_names", "canonical_etypes") if key in data}
    return identity.forms(data["num_nodes"], data["num_edges"], names, names.get("node_ids"))


def _node_map_sha(cfg: PartitionConfig) -> str | None:
    sha = cfg.data["files"].get("node_map.npy")
    return None if sha is None else str(sha)


def _try_config(path: Path) -> PartitionConfig | None:
    try:
        return load_config(path) if path.is_file() else None
    except GraphtrainError:
        return None


def table_keying(
    name: str, num_rows: int, num_nodes: int, num_relations: int | None, table_keys: dict[str, str]
) -> Keying:
    """What a table's rows stand for: the graph's nodes (stored in partition order), its relations
    (stored in relation order), its feature columns (in column order) or nothing known (written as
    stored). The spec's `keys`, as the checkpoint records it, decides; a checkpoint without it is judged
    by the row count."""
    recorded = table_keys.get(name)
    if recorded is not None:
        known: dict[str, Keying] = {"nodes": "nodes", "relations": "relations", "features": "features"}
        return known.get(recorded, "rows")
    if num_rows == num_nodes:
        return "nodes"
    if num_relations is not None and num_rows == num_relations:
        return "relations"
    return "rows"


@dataclass
class Rows:
    """A table in the user's order: `ids[i]` (their id or label) names `values[i]`."""

    name: str
    keying: Keying
    ids: np.ndarray
    values: np.ndarray
    some: bool = False  # a dynamic vocabulary's: only the keys it holds (a .npy could not say which)


def original_order(checkpoint: Path, name: str, cfg: PartitionConfig) -> Rows:
    """Table `name` of `checkpoint` with node rows in original node order and the user's ids.

    Raises:
        DataError: the table is not in the checkpoint or a file changed.
    """
    keyed = ckpt.export_keyed(checkpoint, name)
    record = ckpt.read_top(checkpoint).get("partition") or {}
    if keyed is not None:
        return _keyed_rows(name, *keyed, cfg, dict(record.get("table_keys", {})))
    table = ckpt.export_table(checkpoint, name)
    num_nodes = int(cfg.data["num_nodes"])
    kg = cfg.data.get("kg")
    keying = table_keying(
        name,
        len(table),
        num_nodes,
        None if kg is None else int(kg["num_relations"]),
        dict(record.get("table_keys", {})),
    )
    names = load_names(cfg)
    node_types = dict(record.get("table_node_types", {})).get(name)
    if node_types:  # a row per node of these types: their nodes in original order
        row = NodeRows.of(cfg.data, name, node_types).rows(load_maps(cfg)["node_map_inverse"])
        has = row >= 0
        table = table[row[has]]
        ids = names.get("node_ids", np.arange(num_nodes, dtype=np.int64))[has]
    elif keying == "nodes":
        table = table[load_maps(cfg)["node_map_inverse"]]  # row of original id i = new row inverse[i]
        ids = names.get("node_ids", np.arange(num_nodes, dtype=np.int64))
    elif keying == "relations" and "relation_names" in names and len(names["relation_names"]) == len(table):
        ids = names["relation_names"]
    elif keying == "features" and "feature_names" in names and len(names["feature_names"]) == len(table):
        ids = names["feature_names"]  # the words of a bag of words
    else:
        ids = np.arange(len(table), dtype=np.int64)
    return Rows(name, keying, ids, table)


def _keyed_rows(
    name: str, keys: np.ndarray, values: np.ndarray, cfg: PartitionConfig, table_keys: dict
) -> Rows:
    """A dynamic vocabulary's rows: only the keys it holds. Keys of a node-keyed table are the graph's
    (relabeled) node ids: they go back to the user's ids, in original node order."""
    inverse = load_maps(cfg)["node_map_inverse"]
    relations = load_names(cfg).get("relation_names")
    lo, hi = (int(keys.min()), int(keys.max())) if len(keys) else (0, -1)
    if table_keys.get(name) == "relations" and relations is not None and lo >= 0 and hi < len(relations):
        return Rows(name, "relations", relations[keys], values, len(keys) < len(relations))  # in order
    if table_keys.get(name) != "nodes" or lo < 0 or hi >= len(inverse):
        return Rows(name, "rows", keys, values, True)
    original = np.empty_like(inverse)
    original[inverse] = np.arange(len(inverse))
    orig = original[keys]
    order = np.argsort(orig, kind="stable")
    names = load_names(cfg).get("node_ids")
    ids = orig[order] if names is None else names[orig[order]]
    return Rows(name, "nodes", ids, values[order], len(keys) < len(inverse))


def columns(ids: np.ndarray, values: np.ndarray, prefix: str = "dim_") -> dict[str, np.ndarray]:
    """The columns of a table file: `id` first, then one per value column."""
    flat = values.reshape(len(values), -1)
    return {"id": ids, **{f"{prefix}{j}": flat[:, j] for j in range(flat.shape[1])}}


def write_columns(out: Path, cols: dict[str, np.ndarray]) -> None:
    """Columns as .csv or .parquet (pyarrow), written under a temporary name and renamed into place."""
    import pyarrow as pa  # type: ignore[import-untyped]

    table = pa.table({k: pa.array(np.asarray(v)) for k, v in cols.items()})
    make_dirs(out.parent)
    with atomic_file(out) as f:
        if out.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            pq.write_table(table, f)
        else:
            import pyarrow.csv as pcsv  # type: ignore[import-untyped]

            pcsv.write_csv(table, f)


def write_rows(out: Path, rows: Rows) -> None:
    """.npy: the values alone (row i = the i-th id); .csv/.parquet: the ids first, then the values.

    Raises:
        GraphtrainError: a .npy of a dynamic vocabulary holding only some keys (it could not say which).
    """
    if out.suffix.lower() == ".npy" and rows.some:
        raise GraphtrainError(
            f"{out}: {rows.name!r} holds rows for {len(rows.ids):,} of its keys only, which a .npy cannot "
            "name; write .csv or .parquet (an id column first)"
        )
    if out.suffix.lower() == ".npy":
        make_dirs(out.parent)
        with atomic_file(out) as f:
            np.save(f, rows.values)
        return
    write_columns(out, columns(rows.ids, rows.values))
