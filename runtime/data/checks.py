"""The check of a loaded graph against the spec, before anything is partitioned or started.

A spec can be valid and still not fit its data (GraphSAGE on a graph without labels, a feature projection
with no features): requirements.problems names the spec field for each, and this raises them all at once
in every executor's partition step, as `graphtrain validate` reports them, so a run never dies on its data
after its servers started. What is legal but probably not meant (a one-direction edge list given to
GraphSAGE, which then sees only in-neighbours) comes back as DataWarnings.
"""

from __future__ import annotations

import warnings

from graphtrain.contract.spec import GraphTraining, GraphTrainingSpec, Problem, SpecError
from graphtrain.runtime.data import requirements
from graphtrain.runtime.data.graph import Graph
from graphtrain.runtime.data.summary import summarise
from graphtrain.runtime.errors import DataWarning


def review(spec: GraphTrainingSpec, graph: Graph) -> tuple[list[Problem], list[str]]:
    """What `graph` lacks for `spec` (problems naming spec fields) and what is probably not meant (notes)."""
    summary = summarise(graph)
    return requirements.problems(spec, summary), requirements.notes(spec, summary)


def check_data(gt: GraphTraining, graph: Graph, notes: bool = True) -> None:
    """Raise every problem `graph` has for `gt`'s model, then warn about what is probably not meant
    (`notes` False: a graph whose edges are not in memory, where the notes could not be counted).

    Raises:
        SpecError: naming the spec field of each problem.
    """
    found, said = review(gt.spec, graph)
    if found:
        raise SpecError(found, title=f"{gt.spec.graph.described} does not fit the spec")
    for note in said if notes else []:
        warnings.warn(note, DataWarning, stacklevel=2)
