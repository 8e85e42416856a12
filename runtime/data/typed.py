"""The bundled datasets with their node and edge types (`graph.typed: true`), derived from what the cache
already holds: the same nodes, edges, features and labels, with a type for each.

- wordnet: noun, verb, adjective and adverb synsets (a synset's external id starts with its part of
  speech, wordnet.POS_CODE; adjective satellites are adjectives), and its 26 pointer relations named as
  wndb(5WN) names them; a canonical edge type per (source type, relation, destination type) that occurs.
- gene-pubmed: genes and papers, (gene, cited_in, paper).
- gene-kg: its entities by kind (the prefix of their names: EG: genes, PMID: papers, GO terms, ...), its
  relations between them.

Pure functions of a loaded Graph (no file is read), so typed and untyped runs share one cached copy.
The streaming partitioner's typed graphs come from the same functions: the node types need only the
node data (`wordnet_types`, `gene_pubmed_types`), and the edges stay in their files, typed chunk by
chunk (`stream_typed`, edgefiles.EdgeTyping): the cache stores no column for the types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from graphtrain.contract.spec import DATASET_NODE_TYPES, KG_ENTITY_TYPE, Dataset
from graphtrain.runtime.data import wordnet
from graphtrain.runtime.data.edgefiles import CHUNK_EDGES, EdgeFiles, EdgeTyping
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.errors import DataError, GraphtrainError

# wndb(5WN)'s pointer symbols and their names (the adverb's "\" is "derived from adjective")
POINTERS = {
    "!": "antonym",
    "@": "hypernym",
    "@i": "instance_hypernym",
    "~": "hyponym",
    "~i": "instance_hyponym",
    "#m": "member_holonym",
    "#s": "substance_holonym",
    "#p": "part_holonym",
    "%m": "member_meronym",
    "%s": "substance_meronym",
    "%p": "part_meronym",
    "=": "attribute",
    "+": "derivation",
    ";c": "topic_domain",
    "-c": "topic_member",
    ";r": "region_domain",
    "-r": "region_member",
    ";u": "usage_domain",
    "-u": "usage_member",
    "*": "entailment",
    ">": "cause",
    "^": "also_see",
    "$": "verb_group",
    "&": "similar_to",
    "<": "participle",
    "\\": "pertainym",
}
WORDNET_TYPES = DATASET_NODE_TYPES[Dataset.wordnet]  # wordnet.POS_CODE 1..4
GENE_PUBMED_TYPES = DATASET_NODE_TYPES[Dataset.gene_pubmed]
# gene-kg entity kinds by the prefix of their names (gene.py writes them); the rest are Pfam and PROSITE;
# named as the spec names them (DATASET_NODE_TYPES, which spec.embeddings[].nodeTypes is checked against)
KG_PREFIXES = (
    ("EG:", "gene"),
    ("PMID:", "paper"),
    ("GO:", "go_term"),
    ("OMIM:", "omim"),
    ("EC:", "ec"),
    ("PF", "pfam"),
    ("PS", "prosite"),
)
GO_ROOT = "all"  # GO.db's parent of the three ontologies' roots: a GO term without the GO: prefix


class NodeTypes(NamedTuple):
    """A dataset's node type per node, the types' names and the names of its relations (the values of
    the edges' relation column; none stored: one relation)."""

    ntype: np.ndarray
    names: tuple[str, ...]
    relations: list[str]


def with_types(graph: Graph, types: NodeTypes, relation: np.ndarray | None) -> Graph:
    """`graph` typed: `types.ntype` per node, `relation` per edge (indexing `types.relations`; None: all
    the first); each (source type, relation, destination type) that occurs becomes a canonical edge
    type, numbered in that sorted order (edgefiles.EdgeTyping). Node types without nodes are kept (a
    type may be featureless or empty in a sample of the data)."""
    src, dst = graph.edges()
    typing = EdgeTyping.scan(types.ntype, len(types.names), len(types.relations), [(src, relation, dst)])
    _set_types(graph, types, typing, typing.etype(src, relation, dst))
    return graph


def _set_types(graph: Graph, types: NodeTypes, typing: EdgeTyping, etype: np.ndarray) -> None:
    graph.ntype = typing.ntype
    graph.ntype_names = np.asarray(types.names, dtype=str)
    graph.etype = etype
    graph.canonical_etypes = typing.canonical_etypes(types.names, types.relations)
    # a typed graph's edge types are named by canonical_etypes; a knowledge graph's relation names
    # still name its triples' relation column (task linkPrediction's targetRelations, predict's answers)
    graph.relation_names = np.asarray(types.relations, dtype=str) if graph.triples else None
    graph.validate()


def stream_typed(
    graph: Graph, edges: EdgeFiles, types: NodeTypes, chunk: int = CHUNK_EDGES
) -> tuple[Graph, EdgeFiles]:
    """A graph to stream, typed: `graph` (its node data, no edges) gets the node types and the
    canonical edge types found by one read of `edges` (its etype column, if any, the relation), and
    the edge files yield each edge's canonical type (the same ids with_types gives in memory)."""
    chunks = ((s, et, d) for _, s, d, et in edges.chunks(chunk))
    typing = EdgeTyping.scan(types.ntype, len(types.names), len(types.relations), chunks)
    _set_types(graph, types, typing, np.empty(0, dtype=np.int64))
    return graph, dataclasses.replace(edges, typing=typing)


def wordnet_types(graph: Graph, symbols: list[str]) -> NodeTypes:
    """WordNet's synsets by part of speech (from their ids), its pointers by name."""
    if graph.node_ids is None:
        raise DataError("wordnet: the cached dataset lacks node ids: fetch it again")
    pos = graph.node_ids.astype(np.int64) // 100_000_000 - 1
    if pos.min() < 0 or pos.max() >= len(WORDNET_TYPES) or len(wordnet.POS_CODE) != len(WORDNET_TYPES):
        raise DataError("wordnet: a synset id does not start with its part of speech")
    unknown = sorted(set(symbols) - set(POINTERS))
    if unknown:
        raise DataError(f"wordnet: unknown pointer symbols {unknown}")
    return NodeTypes(pos, WORDNET_TYPES, [POINTERS[s] for s in symbols])


def wordnet_typed(graph: Graph, symbols: list[str]) -> Graph:
    """WordNet's synsets by part of speech, its pointers by name."""
    if graph.node_ids is None or graph.etype is None:
        raise DataError("wordnet: the cached dataset lacks node ids or edge types: fetch it again")
    return with_types(graph, wordnet_types(graph, symbols), graph.etype)


def gene_pubmed_types(graph: Graph) -> NodeTypes:
    """Genes and papers (the stored node types), one relation: a gene cited in a paper."""
    if graph.ntype is None:
        raise DataError("gene-pubmed: the cached dataset lacks node types: fetch it again")
    return NodeTypes(graph.ntype, GENE_PUBMED_TYPES, ["cited_in"])


def gene_pubmed_typed(graph: Graph) -> Graph:
    """Genes and papers, each edge a gene cited in a paper."""
    return with_types(graph, gene_pubmed_types(graph), None)


def kg_typed(graph: Graph, relations: list[str]) -> Graph:
    """gene-kg's entities by kind (the prefix of their names), its triples' relations."""
    if graph.node_ids is None or graph.etype is None:
        raise DataError("gene-kg: the cached dataset lacks entity names or relations: fetch it again")
    names = graph.node_ids.astype(str)
    ntype = np.full(len(names), -1, dtype=np.int64)
    assert tuple(n for _, n in KG_PREFIXES) == DATASET_NODE_TYPES[Dataset.gene_kg]
    for t, (prefix, _) in enumerate(KG_PREFIXES):
        ntype[(ntype < 0) & np.char.startswith(names, prefix)] = t
    ntype[(ntype < 0) & (names == GO_ROOT)] = [n for _, n in KG_PREFIXES].index("go_term")
    if (ntype < 0).any():
        raise DataError(f"gene-kg: entity {str(names[np.flatnonzero(ntype < 0)[0]])!r} is of no known kind")
    return with_types(graph, NodeTypes(ntype, DATASET_NODE_TYPES[Dataset.gene_kg], relations), graph.etype)


def single_type_kg(graph: Graph) -> Graph:
    """A knowledge graph without entity kinds (nations, kinships, umls, graph.triples): one node type, and
    an edge type per relation, so that a relational encoder tells its relations apart."""
    if graph.etype is None:
        raise DataError(f"{graph.name}: the cached dataset lacks relations: fetch it again")
    names = graph.relation_names
    count = len(names) if names is not None else int(graph.etype.max(initial=-1)) + 1
    relations = names.tolist() if names is not None else [f"r{i}" for i in range(count)]
    types = NodeTypes(np.zeros(graph.num_nodes, dtype=np.int64), (KG_ENTITY_TYPE,), relations)
    return with_types(graph, types, graph.etype)


def edge_type_index(canonical_etypes: Sequence[tuple[str, str, str]], name: str) -> int:
    """The id of the edge type written `name` (a unique relation, or source:relation:destination).

    Raises:
        GraphtrainError: no such edge type, or a relation several edge types share (naming them).
    """
    parts = name.split(":")
    if len(parts) == 3:
        for i, c in enumerate(canonical_etypes):
            if tuple(parts) == tuple(c):
                return i
    elif len(parts) == 1:
        found = [i for i, c in enumerate(canonical_etypes) if c[1] == name]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            shown = ", ".join(":".join(canonical_etypes[i]) for i in found[:4])
            raise GraphtrainError(
                f"training.edgeTypeFanouts: {name!r} is the relation of {len(found)} edge types ({shown}"
                f"{', ...' if len(found) > 4 else ''}): name one as source:relation:destination"
            )
    relations = sorted({c[1] for c in canonical_etypes})
    raise GraphtrainError(
        f"training.edgeTypeFanouts: no edge type {name!r} (relations: {', '.join(relations[:12])}"
        f"{', ...' if len(relations) > 12 else ''})"
    )
