"""spec.graph.nodes and spec.graph.edges: a typed graph from the user's own files, described as
GraphStorm's graph-construction config describes one, so its users translate a config field by field:

| GraphStorm (gconstruct)            | graphtrain                         |
|------------------------------------|------------------------------------|
| nodes[].node_type                  | nodes[].type                       |
| nodes[].files, format.name         | nodes[].files, format              |
| nodes[].node_id_col                | nodes[].idColumn                   |
| nodes[].features[].feature_col     | nodes[].features                   |
| nodes[].labels[].label_col         | nodes[].label                      |
| nodes[].labels[].split_pct         | nodes[].split                      |
| edges[].relation                   | edges[].relation                   |
| edges[].source_id_col, dest_id_col | edges[].sourceColumn, destinationColumn |
| edges[].features[].feature_col     | edges[].features                   |
| edges[].labels[].label_col         | edges[].label                      |

Node ids are scoped per node type (paper "1" and author "1" are two nodes), read as text. Every node
type an edge type names has a nodes entry, whose files list its nodes (a type without features lists
ids only).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from graphtrain.contract.spec.base import MAX_TYPES, SpecModel, TypeName
from graphtrain.contract.spec.rules import Rule, add_rules, first_repeated

Column = str  # a column's name in a file (its header)
_FILE = Field(min_length=1, max_length=4096)


class TableFormat(StrEnum):
    """How a node or edge file is read."""

    auto = "auto"  # by extension: .csv, .tsv/.txt, .parquet
    csv = "csv"  # comma-separated with a header line
    tsv = "tsv"  # tab-separated with a header line
    parquet = "parquet"  # Apache Parquet (pyarrow)


class NodeTypeFiles(SpecModel):
    """The nodes of one node type: their ids, features and labels."""

    type: TypeName = Field(description="The node type (GraphStorm: node_type); required.")
    files: list[str] = Field(
        min_length=1,
        max_length=MAX_TYPES,
        description="Files holding the type's nodes, one row each, with a header (GraphStorm: files); "
        "relative paths from the spec's directory (in Kubernetes: from storage.mountPath); required.",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 4096}},
    )
    format: TableFormat = Field(
        default=TableFormat.auto, description="How files are read: auto (by extension), csv, tsv or parquet."
    )
    id_column: Column = Field(
        default="id", min_length=1, max_length=255, description="The column of node ids (node_id_col)."
    )
    features: list[Column] = Field(
        default_factory=list,
        max_length=MAX_TYPES,
        description="Columns read as the type's node features, in this order (features[].feature_col): "
        "numbers, or (parquet) lists of numbers. Empty: the type has no features.",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 255}},
    )
    label: Column | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="The column of class labels (labels[].label_col): integers or class names; an empty "
        "cell is an unlabelled node. Unset: the type has no labels.",
    )


class EdgeTypeFiles(SpecModel):
    """The edges of one canonical edge type: (source type, relation, destination type)."""

    relation: list[TypeName] = Field(
        min_length=3,
        max_length=3,
        description="[source type, relation, destination type] (GraphStorm: relation); required.",
    )
    files: list[str] = Field(
        min_length=1,
        max_length=MAX_TYPES,
        description="Files holding the edges, one row each, with a header (files); required.",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 4096}},
    )
    format: TableFormat = Field(
        default=TableFormat.auto, description="How files are read: auto (by extension), csv, tsv or parquet."
    )
    source_column: Column = Field(
        default="src",
        min_length=1,
        max_length=255,
        description="The column of source node ids (source_id_col).",
    )
    destination_column: Column = Field(
        default="dst",
        min_length=1,
        max_length=255,
        description="The column of destination node ids (dest_id_col).",
    )
    features: list[Column] = Field(
        default_factory=list,
        max_length=MAX_TYPES,
        description="Columns read as the edge features (features[].feature_col). Empty: none.",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 255}},
    )
    label: Column | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="The column of edge class labels (labels[].label_col, task edgeClassification): "
        "integers or class names; an empty cell is an unlabelled edge. The labelled edges are split by "
        "graph.split. Unset: the edge type has no labels.",
    )


add_rules(
    EdgeTypeFiles,
    Rule(
        "edge-columns-distinct",
        "destinationColumn",
        lambda e: e.source_column != e.destination_column,
        cel="self.sourceColumn != self.destinationColumn",
        message="must differ from sourceColumn",
    ),
    Rule(
        "edge-label-not-data",
        "label",
        lambda e: e.label is None or e.label not in (e.source_column, e.destination_column, *e.features),
        cel="!has(self.label) || (self.label != self.sourceColumn && self.label != self.destinationColumn "
        "&& !(self.label in self.features))",
        message="is also the source, destination or a feature column",
    ),
)
add_rules(
    NodeTypeFiles,
    Rule(
        "node-id-column-not-data",
        "idColumn",
        lambda n: n.id_column not in n.features and n.id_column != n.label,
        cel="!(self.idColumn in self.features) && (!has(self.label) || self.label != self.idColumn)",
        message="is also a feature or the label column",
    ),
)


def node_type_names(nodes: list[NodeTypeFiles]) -> list[str]:
    return [n.type for n in nodes]


def undeclared_types(nodes: list[NodeTypeFiles] | None, edges: list[EdgeTypeFiles] | None) -> list[str]:
    """Node types an edge type names that no nodes entry declares, in first-use order."""
    declared = set(node_type_names(nodes or []))
    out: list[str] = []
    for e in edges or []:
        for t in (e.relation[0], e.relation[2]):
            if t not in declared and t not in out:
                out.append(t)
    return out


def repeated_node_type(nodes: list[NodeTypeFiles] | None) -> str | None:
    return first_repeated(node_type_names(nodes or []))


def repeated_edge_type(edges: list[EdgeTypeFiles] | None) -> str | None:
    return first_repeated([":".join(e.relation) for e in edges or []])
