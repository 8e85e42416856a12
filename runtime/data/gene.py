"""The gene–PubMed graph and the gene knowledge graph (Debian `r-bioc-org.hs.eg.db`, `r-bioc-go.db`).

Bioconductor's org.Hs.eg.db 3.16 (Entrez Gene 2022-09, GO 2022-07, UniProt 2022-09; Artistic-2.0, the
underlying NCBI data public, GO and UniProt CC BY 4.0) ships as an SQLite file.
- gene-pubmed: the bipartite graph gene -> paper of table `pubmed`: 46,898 genes + 754,859 papers =
  801,757 nodes, 1,793,637 edges; heavy-tailed (one paper cites 19,919 genes).
- gene-kg: 13 relations (cited_in, GO annotations, Pfam, PROSITE, OMIM, EC, and the GO term hierarchy
  from GO.db). The KEGG relation is left out: its licence forbids redistribution.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from graphtrain.runtime.errors import DataError

GENE, PAPER = 0, 1

# relation -> SQL giving (head, tail) names; KEGG deliberately absent.
_GENE_RELATIONS = {
    "cited_in": "select 'EG:'||g.gene_id, 'PMID:'||p.pubmed_id from pubmed p join genes g using(_id)",
    **{
        name: f"select distinct 'EG:'||g.gene_id, '{prefix}'||x.{col} from {table} x join genes g using(_id) "
        f"where x.{col} is not null"
        for name, table, col, prefix in [
            ("go_bp", "go_bp", "go_id", ""),
            ("go_mf", "go_mf", "go_id", ""),
            ("go_cc", "go_cc", "go_id", ""),
            ("pfam", "pfam", "pfam_id", ""),
            ("prosite", "prosite", "prosite_id", ""),
            ("omim", "omim", "omim_id", "OMIM:"),
            ("ec", "ec", "ec_number", "EC:"),
        ]
    },
}
_GO_PARENTS = (
    "select t1.go_id, t2.go_id, p.relationship_type from go_{ont}_parents p "
    "join go_term t1 on t1._id = p._id join go_term t2 on t2._id = p._parent_id"
)


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise DataError(f"{path}: SQLite database not found")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def parse_gene_pubmed(org_sqlite: Path) -> dict[str, np.ndarray]:
    """Genes are nodes [0, G) in Entrez-table order, papers [G, G+P) in PMID order.

    Returns src (gene), dst (paper), node_ids (Entrez gene id or PMID) and node_type (0 gene, 1 paper).
    """
    try:
        with _connect(org_sqlite) as db:
            rows = np.array(
                db.execute("select g.gene_id, p.pubmed_id from pubmed p join genes g using(_id)").fetchall(),
                dtype=np.int64,
            )
    except sqlite3.Error as exc:
        raise DataError(f"{org_sqlite}: not an org.Hs.eg.db database ({exc})") from None
    if rows.size == 0:
        raise DataError(f"{org_sqlite}: table pubmed is empty")
    genes, g = np.unique(rows[:, 0], return_inverse=True)
    papers, p = np.unique(rows[:, 1], return_inverse=True)
    node_type = np.concatenate([np.full(len(genes), GENE), np.full(len(papers), PAPER)]).astype(np.int8)
    return {
        "src": g.astype(np.int64),
        "dst": (p + len(genes)).astype(np.int64),
        "node_ids": np.concatenate([genes, papers]),
        "node_type": node_type,
    }


def parse_gene_kg(org_sqlite: Path, go_sqlite: Path) -> dict[str, np.ndarray | list[str]]:
    """All triples (head, relation, tail) with entity and relation names; no split applied."""
    pairs: dict[str, list[tuple[str, str]]] = {}
    try:
        with _connect(org_sqlite) as db:
            for rel, sql in _GENE_RELATIONS.items():
                pairs[rel] = db.execute(sql).fetchall()
        with _connect(go_sqlite) as db:
            for ont in ("bp", "mf", "cc"):
                for child, parent, kind in db.execute(_GO_PARENTS.format(ont=ont)):
                    pairs.setdefault("go_" + kind.replace(" ", "_").replace("-", "_"), []).append(
                        (child, parent)
                    )
    except sqlite3.Error as exc:
        raise DataError(f"{org_sqlite} / {go_sqlite}: unexpected schema ({exc})") from None
    entities: dict[str, int] = {}
    heads: list[int] = []
    tails: list[int] = []
    rels: list[np.ndarray] = []
    relations = list(pairs)
    for r, rel in enumerate(relations):
        for head, tail in pairs[rel]:
            heads.append(entities.setdefault(head, len(entities)))
            tails.append(entities.setdefault(tail, len(entities)))
        rels.append(np.full(len(pairs[rel]), r, dtype=np.int64))
    triples = np.stack(
        [np.asarray(heads, np.int64), np.concatenate(rels), np.asarray(tails, np.int64)], axis=1
    )
    return {"triples": triples, "entities": list(entities), "relations": relations}
