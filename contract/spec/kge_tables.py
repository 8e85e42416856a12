"""The spec's rules on a knowledge-graph model's own tables (model.entityEmbedding, relationEmbedding):
a complex-valued model's rows hold pairs, and only these tables may step every row (optimizer.rows: all).
Each rule is a Python check and the same CEL rule of the CRD (rules.py); document.py adds them."""

from __future__ import annotations

from typing import Any

from graphtrain.contract.spec.enums import RowsStepped, Sharding, VocabularyKind
from graphtrain.contract.spec.model import COMPLEX_KINDS
from graphtrain.contract.spec.rules import Rule
from graphtrain.contract.spec.variants import cel_strings

# the checks read a GraphTrainingSpec (document.py, which imports this module: typed Any here)
GraphTrainingSpec = Any

# CEL: table t is the model's entity or relation table
_CEL_KGE_TABLE = (
    "(has(self.model.entityEmbedding) && t.name == self.model.entityEmbedding) || "
    "(has(self.model.relationEmbedding) && t.name == self.model.relationEmbedding)"
)


def _kge_tables(s: GraphTrainingSpec) -> set[str]:
    names = (getattr(s.model, "entity_embedding", None), getattr(s.model, "relation_embedding", None))
    return {n for n in names if n is not None}


def _odd_complex_tables(s: GraphTrainingSpec) -> list[str]:
    """A complex-valued KGE model's tables (entity, relation) of odd dim."""
    if s.model.kind not in COMPLEX_KINDS:
        return []
    mine = _kge_tables(s)
    return [t.name for t in s.embeddings if t.name in mine and t.dim % 2]


def _all_rows_misplaced(s: GraphTrainingSpec) -> list[str]:
    """Tables whose optimizer steps every row (optimizer.rows: all) but that are not a knowledge-graph
    model's entity or relation table with a fixed vocabulary on the shard servers: the only tables a KGE
    trainer reads whole (a collective table's whole gather at every step is not built)."""
    mine = _kge_tables(s)
    return [
        t.name
        for t in s.embeddings
        if t.optimizer.rows == RowsStepped.all
        and (t.name not in mine or t.vocabulary.kind != VocabularyKind.fixed or t.sharding != Sharding.server)
    ]


_CEL_ALL_ROWS_OK = (
    "!has(t.optimizer) || !has(t.optimizer.rows) || t.optimizer.rows != 'all' || "
    f"(({_CEL_KGE_TABLE}) && (!has(t.vocabulary) || !has(t.vocabulary.kind) || t.vocabulary.kind == 'fixed') "
    "&& (!has(t.sharding) || t.sharding == 'server'))"
)

KGE_TABLE_RULES = (
    Rule(
        "complex-rows-even",
        "embeddings",
        lambda s: not _odd_complex_tables(s),
        cel=f"!(self.model.kind in {cel_strings(COMPLEX_KINDS)}) || self.embeddings.all(t, t.dim % 2 == 0 || "
        f"!({_CEL_KGE_TABLE}))",
        message="model.kind %s holds complex numbers in a row (real parts, then imaginary): the dim of "
        "its tables must be even: %s",
        args=(
            ("self.model.kind", lambda s: s.model.kind),
            (
                f"self.embeddings.filter(t, t.dim % 2 != 0 && ({_CEL_KGE_TABLE})).map(t, t.name)",
                _odd_complex_tables,
            ),
        ),
    ),
    Rule(
        "all-rows-kge-tables",
        "embeddings",
        lambda s: not _all_rows_misplaced(s),
        cel=f"self.embeddings.all(t, {_CEL_ALL_ROWS_OK})",
        message="optimizer.rows: all (every row stepped at every step) is for a knowledge-graph model's "
        "entityEmbedding or relationEmbedding with a fixed vocabulary on the shard servers, not %s",
        args=((f"self.embeddings.filter(t, !({_CEL_ALL_ROWS_OK})).map(t, t.name)", _all_rows_misplaced),),
    ),
)
