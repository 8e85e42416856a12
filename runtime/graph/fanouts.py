"""Each layer's fan-out for sampling: training.fanouts' number, or on a typed graph with
training.edgeTypeFanouts one fan-out per edge type (pure).

An edge type is written as its relation when no other canonical edge type has that relation (WordNet's
`hypernym`), else as `source:relation:destination`; an edge type not listed takes the layer's number
from training.fanouts, per type. -1 takes every edge of the type, 0 none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graphtrain.runtime.data.typed import edge_type_index
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.graph.loader import Fanout


def layer_fanouts(
    fanouts: Sequence[int],
    per_type: Mapping[str, Sequence[int]] | None,
    canonical_etypes: Sequence[tuple[str, str, str]],
) -> list[Fanout]:
    """The fan-out of each layer, input layer first: training.fanouts' numbers, or with `per_type` an
    array of one fan-out per edge type for each layer.

    Raises:
        GraphtrainError: `per_type` on an untyped graph, or naming an edge type the graph lacks.
    """
    if not per_type:
        return [int(f) for f in fanouts]
    if not canonical_etypes:
        raise GraphtrainError(
            "training.edgeTypeFanouts: the graph has no edge types (graph.typed, graph.edges)"
        )
    out = np.tile(np.asarray(fanouts, dtype=np.int64)[:, None], (1, len(canonical_etypes)))
    for name, values in per_type.items():
        if len(values) != len(fanouts):
            raise GraphtrainError(
                f"training.edgeTypeFanouts.{name}: {len(values)} fan-outs for {len(fanouts)} layers"
            )
        out[:, edge_type_index(canonical_etypes, name)] = values
    return [np.ascontiguousarray(row) for row in out]
