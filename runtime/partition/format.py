"""The versioned on-disk partition format.

Layout of `<out>/` (written under a temporary name and renamed into place when complete):

    <graph>.json             the partition config (below)
    node_map.npy             int64, new node id -> original node id
    node_map_inverse.npy     int64, original node id -> new node id
    edge_map.npy             int64, new edge id -> original edge id (position in the input's CSR order)
    external_ids.npy         original node id -> the user's own id (when it has one): int64, or
                             unicode for string ids (np.save/np.load of '<U' arrays need no pickle)
    class_names.npy          unicode, label i -> class_names[i] (string labels)
    relation_names.npy       unicode, edge type / relation i -> relation_names[i]
    feature_names.npy        unicode, feature column j -> feature_names[j] (WordNet: the gloss words),
                             which names the rows of a `keys: features` table in exports
    kg/<split>.npy           int64 (n, 3) (head, relation, tail) in ORIGINAL node ids: a knowledge
                             graph's train/valid/test triples (KGE evaluation needs all three)
    edges/<split>.npy        labelled edges and edge_class_names.npy (edge_targets.py)
    part-<i>/indptr.npy      int64, in-CSR over the partition's nodes (local row = new id - node_bounds[i])
    part-<i>/indices.npy     int64, global new id of each in-edge's source; edge ids are
                             edge_bounds[i] + position, so no edge-id array is stored
    part-<i>/etype.npy       int64, edge type of each in-edge (when the graph has types); a typed graph's
                             in-edges of a node are sorted by it (one run per relation)
    part-<i>/edata/efeat.npy float32, the features of each in-edge, in the in-CSR's order (typed graphs
                             with edge features)
    part-<i>/halo.npy        int64, sorted new ids of the remote nodes adjacent to the partition
    part-<i>/ndata/<key>...  node data of the partition's nodes in new-id order: feat (.npy, or
                             .indptr/.indices/.data.npy when sparse), label, train/val/test_mask, ntype

Every file is .npy (mmap-able) and its sha256 is in the config. The config (JSON):
    format "graphtrain-partition", format_version, graph_name, graph_identity and made_for
    (identity.py), num_nodes, num_edges, num_parts,
    algorithm, seed, balance, max_imbalance, node_bounds, edge_bounds, edge_owner "destination",
    num_classes, ndata (entry description per key), parts [{dir, ndata entries}], stats,
    has_external_ids, has_class_names, has_relation_names, has_feature_names, kg {num_relations,
    triples {split: count}}
    (knowledge graphs only), graphtrain_version, created, files {relative path: sha256}; a typed graph's
    ntype_names, canonical_etypes ([source type, relation, destination type] per edge type id),
    type_bounds (per part, where each node type's range of new ids starts, and its end), feature_blocks
    ({type: [first column, width]}) and edata (edge data descriptions, shape [num_edges, d]).

The names, the KG splits and the graph identity are additive (format version 1): a partition written
before them reads as one without names, splits or identity.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.runtime.data import store
from graphtrain.runtime.data.cache import (
    atomic_dir,
    check_creatable,
    files_problem,
    first_unlisted,
    hash_tree,
    read_json,
    verify_files,
    write_json,
)
from graphtrain.runtime.data.graph import MASKS, Graph
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.partition.edge_targets import edge_targets_meta, write_edge_targets
from graphtrain.runtime.partition.identity import KEY, MADE_FOR, graph_identity
from graphtrain.runtime.partition.npyfiles import check_ids, check_shapes, load_files, load_npy
from graphtrain.runtime.partition.pipeline import PartitionResult
from graphtrain.runtime.partition.relabel import local_in_csr

FORMAT = "graphtrain-partition"
FORMAT_VERSION = 1


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("graphtrain")
    except PackageNotFoundError:
        return "unknown"


def _node_data(graph: Graph, ids: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if graph.feat is not None:
        out["feat"] = graph.feat[ids]
    if graph.label is not None:
        out["label"] = graph.label[ids]
    for key in MASKS:
        if key in graph.masks:
            out[f"{key}_mask"] = graph.masks[key][ids]
    if graph.ntype is not None:
        out["ntype"] = graph.ntype[ids]
    return out


def _num_classes(graph: Graph) -> int | None:
    """The dataset's class count, else the number of class names (a class no node has still counts),
    else 1 + the largest integer label (file graphs carry no count)."""
    if graph.num_classes is not None:
        return graph.num_classes
    if graph.class_names is not None:
        return len(graph.class_names)
    label = graph.label
    if label is None or label.size == 0 or label.dtype.kind not in "iu":
        return None
    return int(label.max()) + 1


SPLITS = ("train", "valid", "test")


def _kg_meta(graph: Graph) -> dict[str, Any] | None:
    """The config's `kg` entry: relation count and triples per split (None: not a knowledge graph)."""
    if not graph.triples:
        return None
    if graph.relation_names is not None:
        num_relations = len(graph.relation_names)
    else:
        seen = [t[:, 1] for t in graph.triples.values() if t.size]
        if graph.etype is not None and graph.etype.size:
            seen.append(graph.etype)
        num_relations = int(max(int(r.max()) for r in seen)) + 1 if seen else 0
    return {
        "num_relations": num_relations,
        "triples": {s: int(len(graph.triples[s])) for s in SPLITS if s in graph.triples},
    }


def check_output(out: Path, overwrite: bool = False) -> None:
    """Refuse, before any work, an output directory `write` could not or must not replace: one that
    exists (unless `overwrite`, and then only an empty directory or a partition: never a directory of
    other files), or one that cannot be created because a file is in the way.

    Raises:
        DataError: naming `out` and the reason.
    """
    out = Path(out)
    if not out.exists():
        check_creatable(out)
        return
    if not overwrite:
        raise DataError(f"{out}: already exists (pass --overwrite to replace it)")
    if not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory")
    configs = [p for p in out.glob("*.json") if _is_config(p)]
    if any(out.iterdir()) and not configs:
        raise DataError(f"{out}: holds no graphtrain partition; --overwrite replaces only a partition")
    listed = {p.name for p in configs} | {rel for p in configs for rel in _recorded(p)}
    stranger = first_unlisted(out, listed)
    if stranger is not None:
        raise DataError(
            f"{out / stranger}: not a file of the partition in {out}, and --overwrite replaces the "
            "directory whole: move it out first"
        )


def _recorded(config: Path) -> list[str]:
    files = read_json(config).get("files")
    return [str(rel) for rel in files] if isinstance(files, dict) else []


def _is_config(path: Path) -> bool:
    try:
        data = read_json(path)
    except DataError:
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def write(
    graph: Graph, result: PartitionResult, out: Path, overwrite: bool = False, made_for: str | None = None
) -> Path:
    """Write the partition atomically under `out`; return the config path. `made_for`: the partition key
    of the spec it is made for (identity.py), kept in the config.

    Raises:
        DataError: `out` exists and `overwrite` is False.
    """
    rl = result.relabeling
    out = Path(out)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        write_node_files(tmp, graph, rl.node_map, rl.node_map_inverse)
        np.save(tmp / "edge_map.npy", rl.edge_map)
        parts_meta: list[dict[str, Any]] = []
        ndata_desc: dict[str, Any] = {}
        for p in range(result.num_parts):
            indptr, indices = local_in_csr(rl, p)
            etype = None
            elo, ehi = rl.edge_bounds[p], rl.edge_bounds[p + 1]
            if graph.etype is not None:
                etype = graph.etype[rl.edge_map[elo:ehi]].astype(np.int64)
            ids = rl.node_map[rl.node_bounds[p] : rl.node_bounds[p + 1]]
            parts_meta.append(
                write_part(tmp, p, graph, ids, indptr, indices, etype, result.halos[p], ndata_desc)
            )
            if graph.efeat is not None:
                parts_meta[-1]["edata"] = write_edata(tmp, p, graph.efeat[rl.edge_map[elo:ehi]])
        config = config_of(
            graph, graph.num_edges, result, rl.node_bounds, rl.edge_bounds, parts_meta, ndata_desc
        )
        efeat = graph.efeat
        config.update(typed_meta(graph, rl.type_bounds, None if efeat is None else efeat.shape))
        write_config(tmp, graph, config, made_for)
    return out / f"{graph.name}.json"


def write_edata(tmp: Path, p: int, efeat: np.ndarray) -> dict[str, Any]:
    """Part `p`'s edge features (its in-edges' rows, in in-CSR order); returns their entries."""
    return store.write_values(tmp / f"part-{p}" / "edata", {"efeat": efeat})


def typed_meta(
    graph: Graph, type_bounds: np.ndarray | None, efeat_shape: tuple[int, ...] | None
) -> dict[str, Any]:
    """The config's typed-graph entries (module docstring), and the edge data's of (num_edges, width)
    edge features; none for an untyped graph without them."""
    out: dict[str, Any] = {}
    if graph.typed:
        assert graph.ntype_names is not None and graph.canonical_etypes is not None
        out["ntype_names"] = graph.ntype_names.tolist()
        out["canonical_etypes"] = graph.canonical_etypes.tolist()
        if type_bounds is not None:
            out["type_bounds"] = type_bounds.tolist()
        out["feature_blocks"] = {t: list(b) for t, b in graph.feature_blocks.items()}
    if efeat_shape is not None:
        shape = [int(efeat_shape[0]), int(efeat_shape[1])]
        out["edata"] = {"efeat": {"kind": "array", "shape": shape, "dtype": "float32"}}
    return out


def write_node_files(tmp: Path, graph: Graph, node_map: np.ndarray, inverse: np.ndarray) -> None:
    """The node maps, the user's names and a knowledge graph's splits (everything but the edges)."""
    np.save(tmp / "node_map.npy", node_map)
    np.save(tmp / "node_map_inverse.npy", inverse)
    if graph.node_ids is not None:
        np.save(tmp / "external_ids.npy", graph.node_ids)
    for key in ("class_names", "relation_names", "feature_names"):
        names = getattr(graph, key)
        if names is not None:
            np.save(tmp / f"{key}.npy", names)
    if graph.triples:
        (tmp / "kg").mkdir()
        for split, t in graph.triples.items():
            np.save(tmp / "kg" / f"{split}.npy", np.ascontiguousarray(t, dtype=np.int64))
    write_edge_targets(tmp, graph)


def write_part(
    tmp: Path,
    p: int,
    graph: Graph,
    ids: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    etype: np.ndarray | None,
    halo: np.ndarray,
    ndata_desc: dict[str, Any],
) -> dict[str, Any]:
    """One part's directory: its in-CSR, edge types, halo and node data (`ids`: its original node ids);
    returns its config entry and adds its node data to `ndata_desc`."""
    pdir = tmp / f"part-{p}"
    pdir.mkdir()
    np.save(pdir / "indptr.npy", indptr)
    np.save(pdir / "indices.npy", indices)
    if etype is not None:
        np.save(pdir / "etype.npy", etype)
    np.save(pdir / "halo.npy", halo)
    entries = store.write_values(pdir / "ndata", _node_data(graph, ids))
    for key, entry in entries.items():
        desc = {k2: v for k2, v in entry.items() if k2 != "shape"}
        if "shape" in entry:
            desc["shape"] = [graph.num_nodes, *entry["shape"][1:]]
        ndata_desc[key] = desc
    return {"dir": f"part-{p}", "ndata": entries}


def config_of(
    graph: Graph,
    num_edges: int,
    result: PartitionResult,
    node_bounds: np.ndarray,
    edge_bounds: np.ndarray,
    parts_meta: list[dict[str, Any]],
    ndata_desc: dict[str, Any],
) -> dict[str, Any]:
    """The partition config (module docstring) but its files' hashes (write_config adds them)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "graph_name": graph.name,
        KEY: graph_identity(graph, num_edges),
        "num_nodes": graph.num_nodes,
        "num_edges": num_edges,
        "num_parts": result.num_parts,
        "algorithm": result.algorithm,
        "seed": result.seed,
        "balance": result.constraints.names,
        "balance_skipped": result.constraints.skipped,
        "max_imbalance": result.max_imbalance,
        "node_bounds": node_bounds.tolist(),
        "edge_bounds": edge_bounds.tolist(),
        "edge_owner": "destination",
        "has_etype": graph.etype is not None,
        "has_external_ids": graph.node_ids is not None,
        "has_class_names": graph.class_names is not None,
        "has_relation_names": graph.relation_names is not None,
        "has_feature_names": graph.feature_names is not None,
        "num_classes": _num_classes(graph),
        "ndata": ndata_desc,
        **({"kg": kg} if (kg := _kg_meta(graph)) is not None else {}),
        **({"edge_targets": et} if (et := edge_targets_meta(graph)) is not None else {}),
        "parts": parts_meta,
        "strategy": result.info.strategy,
        "stats": result.stats.to_dict(),
        "graphtrain_version": _version(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_config(tmp: Path, graph: Graph, config: dict[str, Any], made_for: str | None = None) -> None:
    """The config, with the sha256 of every file written before it (and `made_for`, the spec's partition
    key, when given), as <graph>.json."""
    extra = {MADE_FOR: made_for} if made_for is not None else {}
    write_json(tmp / f"{graph.name}.json", {**config, **extra, "files": hash_tree(tmp)})


@dataclass(frozen=True)
class PartitionConfig:
    """A partition config read from disk: where it is and what it says."""

    path: Path
    data: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def num_parts(self) -> int:
        return int(self.data["num_parts"])

    @property
    def node_bounds(self) -> np.ndarray:
        return np.asarray(self.data["node_bounds"], dtype=np.int64)

    @property
    def edge_bounds(self) -> np.ndarray:
        return np.asarray(self.data["edge_bounds"], dtype=np.int64)

    def verify(self) -> None:
        """Check the sha256 of every file of the partition."""
        verify_files(self.root, self.data["files"])


_REQUIRED = (
    "format",
    "format_version",
    "num_nodes",
    "num_edges",
    "num_parts",
    "node_bounds",
    "edge_bounds",
    "parts",
    "files",
)


def load_config(path: str | Path) -> PartitionConfig:
    """Read a partition config from its JSON path or from the partition directory.

    Raises:
        DataError: missing, not a graphtrain partition, an unsupported version, or inconsistent bounds.
    """
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.json"))
        if len(found) != 1:
            raise DataError(f"{path}: expected exactly one partition config (*.json), found {len(found)}")
        path = found[0]
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{path}: not a graphtrain partition config")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise DataError(f"{path}: missing fields {missing}")
    if (wrong := files_problem(data["files"])) is not None:  # a hand edit: no hash covers the config
        raise DataError(f"{path}: not a graphtrain partition config: files {wrong}")
    for count in ("num_nodes", "num_edges", "num_parts"):
        if type(data[count]) is not int or data[count] < 0:
            raise DataError(f"{path}: not a graphtrain partition config: {count} is not a count")
    if data["format_version"] != FORMAT_VERSION:
        raise DataError(
            f"{path}: format version {data['format_version']} is not supported (expected {FORMAT_VERSION})"
        )
    k = data["num_parts"]
    for key, total in (("node_bounds", data["num_nodes"]), ("edge_bounds", data["num_edges"])):
        b = np.asarray(data[key])
        if b.shape != (k + 1,) or b[0] != 0 or b[-1] != total or np.any(np.diff(b) < 0):
            raise DataError(f"{path}: {key} is not a non-decreasing list of {k + 1} values from 0 to {total}")
    return PartitionConfig(path=path, data=data)


@dataclass
class PartData:
    """One partition as a shard server loads it."""

    part: int
    node_range: tuple[int, int]
    edge_range: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    etype: np.ndarray | None
    halo: np.ndarray
    ndata: dict[str, Any]
    edata: dict[str, Any] = field(default_factory=dict)  # edge data of the in-edges, in in-CSR order


def load_part(cfg: PartitionConfig, part: int, verify: bool = True, mmap: bool = True) -> PartData:
    """Load partition `part` (arrays memory-mapped by default), checking its files' sha256 first.

    Raises:
        DataError: `part` out of range, a file missing or changed (ChecksumError), or (verify) arrays
            whose shapes or node ids disagree with the config.
    """
    if not 0 <= part < cfg.num_parts:
        raise DataError(f"partition {part} does not exist ({cfg.path} has {cfg.num_parts})")
    meta = cfg.data["parts"][part]
    pdir = cfg.root / meta["dir"]
    if verify:
        verify_files(
            cfg.root, {k: v for k, v in cfg.data["files"].items() if k.startswith(meta["dir"] + "/")}
        )
    mode = "r" if mmap else None
    nb, eb = cfg.node_bounds, cfg.edge_bounds
    etype_path = pdir / "etype.npy"
    data = {}
    for kind in ("ndata", "edata"):
        try:  # store.read_values loads without pickle too: an object array there is a ValueError
            data[kind] = store.read_values(pdir / kind, meta[kind], mmap=mmap) if kind in meta else {}
        except ValueError as exc:
            raise DataError(f"{pdir / kind}: a file is not a plain .npy array ({exc})") from None
    ndata, edata = data["ndata"], data["edata"]
    csr = (
        load_npy(pdir / "indptr.npy", mode),
        load_npy(pdir / "indices.npy", mode),
        load_npy(etype_path, mode) if etype_path.exists() else None,
    )
    nodes, edges = int(nb[part + 1] - nb[part]), int(eb[part + 1] - eb[part])
    check_shapes(pdir, nodes, edges, csr, ndata, edata)
    if verify:
        check_ids(pdir, int(cfg.data["num_nodes"]), csr[0], csr[1])
    return PartData(
        part=part,
        node_range=(int(nb[part]), int(nb[part + 1])),
        edge_range=(int(eb[part]), int(eb[part + 1])),
        indptr=csr[0],
        indices=csr[1],
        etype=csr[2],
        halo=load_npy(pdir / "halo.npy", mode),
        ndata=ndata,
        edata=edata,
    )


def load_sparse_rows(cfg: PartitionConfig, part: int, key: str = "feat") -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of partition `part`'s sparse node data `key`, memory-mapped: the nonzero columns
    of local row i are indices[indptr[i]:indptr[i+1]]. Unchecked, as the trainers read masks (the shard
    server of the partition checked every file of it when it loaded).

    Raises:
        DataError: `part` out of range, or `key` is not sparse node data of the partition.
    """
    if not 0 <= part < cfg.num_parts:
        raise DataError(f"partition {part} does not exist ({cfg.path} has {cfg.num_parts})")
    meta = cfg.data["parts"][part]
    if meta["ndata"].get(key, {}).get("kind") != "csr":
        raise DataError(f"{cfg.path}: partition {part} holds no sparse node data {key!r}")
    ndata = cfg.root / meta["dir"] / "ndata"
    indptr = load_npy(ndata / f"{key}.indptr.npy", "r")
    indices = load_npy(ndata / f"{key}.indices.npy", "r")
    rows = cfg.node_bounds[part + 1] - cfg.node_bounds[part]
    if indptr.shape != (rows + 1,) or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise DataError(f"{ndata / key}: not the CSR rows of the partition's {rows} nodes")
    return indptr, indices


_NAMES = {"node_ids": "external_ids", "class_names": "class_names", "relation_names": "relation_names"}
_OTHER_NAMES = {"feature_names": "feature_names"}  # names of no id map: load_names only


def load_maps(cfg: PartitionConfig, verify: bool = True) -> dict[str, np.ndarray]:
    """The id maps: node_map, node_map_inverse, edge_map and, when present, external_ids, class_names
    and relation_names."""
    names = ["node_map", "node_map_inverse", "edge_map"] + [
        n for n in _NAMES.values() if cfg.data.get(f"has_{n}")
    ]
    loaded = load_files(cfg, [f"{n}.npy" for n in names], verify)
    return {n: loaded[f"{n}.npy"] for n in names}


def load_names(cfg: PartitionConfig, verify: bool = True) -> dict[str, np.ndarray]:
    """The user's names kept with the partition, under the Graph's field names: node_ids (int64 or
    unicode: original node id i is node_ids[i]), class_names, relation_names, feature_names; only those
    present."""
    present = {k: f for k, f in (_NAMES | _OTHER_NAMES).items() if cfg.data.get(f"has_{f}")}
    loaded = load_files(cfg, [f"{f}.npy" for f in present.values()], verify)
    return {k: loaded[f"{f}.npy"] for k, f in present.items()}


def load_triples(cfg: PartitionConfig, verify: bool = True) -> dict[str, np.ndarray]:
    """A knowledge graph's splits {"train", "valid", "test"}: int64 (n, 3) (head, relation, tail) in
    ORIGINAL node ids (map them with node_map_inverse for table rows); empty for other graphs."""
    splits = [s for s in SPLITS if s in cfg.data.get("kg", {}).get("triples", {})]
    loaded = load_files(cfg, [f"kg/{s}.npy" for s in splits], verify)
    out = {s: loaded[f"kg/{s}.npy"] for s in splits}
    for split, t in out.items():
        if t.dtype != np.int64 or t.ndim != 2 or t.shape[1] != 3:
            raise DataError(f"{cfg.root / 'kg' / split}.npy: not an int64 (n, 3) triple array")
    return out


def reassemble(cfg: PartitionConfig, verify: bool = True) -> Graph:
    """Rebuild the input graph in original ids and original edge order from all partitions."""
    maps = load_maps(cfg, verify)
    n, m = int(cfg.data["num_nodes"]), int(cfg.data["num_edges"])
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    etype = np.empty(m, dtype=np.int64) if cfg.data.get("has_etype") else None
    edata_desc = cfg.data.get("edata", {}).get("efeat")
    efeat = np.empty(edata_desc["shape"], dtype=np.float32) if edata_desc else None
    ndata: dict[str, Any] = {}
    node_map = maps["node_map"]
    edge_map = maps["edge_map"]
    for p in range(cfg.num_parts):
        part = load_part(cfg, p, verify=verify, mmap=False)
        lo, hi = part.node_range
        elo, ehi = part.edge_range
        local_dst = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(part.indptr))
        orig_edges = edge_map[elo:ehi]
        src[orig_edges] = node_map[part.indices]
        dst[orig_edges] = node_map[local_dst]
        if etype is not None and part.etype is not None:
            etype[orig_edges] = part.etype
        if efeat is not None:
            efeat[orig_edges] = part.edata["efeat"]
        for key, value in part.ndata.items():
            ndata.setdefault(key, []).append(value)
    inverse = maps["node_map_inverse"]
    feats: dict[str, Any] = {}
    for key, chunks in ndata.items():
        if hasattr(chunks[0], "tocsr"):
            import scipy.sparse as sp

            feats[key] = sp.vstack(chunks, format="csr")[inverse]
        else:
            feats[key] = np.concatenate(chunks)[inverse]
    # The original CSR is sorted by source with edges in input order: edge ids already say where.
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    if np.any(np.diff(src) < 0):
        raise DataError(f"{cfg.path}: edge map does not restore a source-sorted edge order")
    return Graph(
        name=str(cfg.data.get("graph_name", "graph")),
        num_nodes=n,
        indptr=indptr,
        indices=dst,
        feat=feats.get("feat"),
        label=feats.get("label"),
        masks={k: feats[f"{k}_mask"] for k in MASKS if f"{k}_mask" in feats},
        etype=etype,
        node_ids=maps.get("external_ids"),
        ntype=feats.get("ntype"),
        num_classes=cfg.data.get("num_classes"),
        class_names=maps.get("class_names"),
        relation_names=maps.get("relation_names"),
        feature_names=load_names(cfg, verify).get("feature_names"),
        triples=load_triples(cfg, verify),
        **typed_fields(cfg),
        efeat=efeat,
    )


def typed_fields(cfg: PartitionConfig) -> dict[str, Any]:
    """A typed partition's Graph fields from its config (none for an untyped one)."""
    if "canonical_etypes" not in cfg.data:
        return {}
    return {
        "ntype_names": np.asarray(cfg.data["ntype_names"], dtype=str),
        "canonical_etypes": np.asarray(cfg.data["canonical_etypes"], dtype=str).reshape(-1, 3),
        "feature_blocks": {t: (int(a), int(b)) for t, (a, b) in cfg.data.get("feature_blocks", {}).items()},
    }
