"""What the chosen model needs from the data, checked before anything runs.

The spec's rules (contract/spec) see only the spec's text; whether `graph.path` holds labels, whether the
features are sparse or the graph has fewer nodes than partitions is known only from the files. Before
this check a spec validated and then died at run time with a traceback in a trainer (`node
classification needs labels`). `problems` is pure: it reads the spec and the input's Summary, and
names the spec field to change in each Problem; `graphtrain validate` and the partition step call it,
so a spec that validates does not fail on its data later. `notes` are the warnings (usable, probably
not meant).
"""

from __future__ import annotations

from graphtrain.contract.spec import (
    EDGE_REGRESSION,
    EDGE_TASKS,
    LINK_PREDICTION,
    NODE_CLASSIFICATION,
    GraphSource,
    GraphTrainingSpec,
    gnn,
)
from graphtrain.contract.spec.rules import Problem
from graphtrain.runtime.data.graph import MASKS
from graphtrain.runtime.data.summary import Summary
from graphtrain.runtime.data.typed import edge_type_index
from graphtrain.runtime.errors import GraphtrainError


def _source_field(graph: GraphSource, own_file: str) -> str:
    """The field a user changes to give the graph what it lacks: its own file (graph.features or
    graph.labels) for a path graph, else the source itself."""
    if graph.path is not None:
        return own_file
    if graph.nodes is not None:  # typed files: a node type's label or features columns
        return "graph.nodes"
    return "graph.triples" if graph.triples is not None else "graph.dataset"


def in_spec(problem: Problem) -> Problem:
    """`problem` with its field named from the document's top, `spec.graph.triples` as the schema's
    problems and the memory limits' name theirs (the checks below spell the field inside spec)."""
    if problem.path.startswith("spec."):
        return problem
    return Problem(path=f"spec.{problem.path}", message=problem.message)


def problems(spec: GraphTrainingSpec, summary: Summary) -> list[Problem]:
    """Everything the data lacks for `spec`'s model and sizes, each naming the spec field (from the
    document's top: spec.model.featureProjection)."""
    out: list[Problem] = []
    name = summary.name
    if spec.task_kind == NODE_CLASSIFICATION:
        out += _node_classification(spec, summary)
        out += _typed(spec, summary)
    elif spec.task_kind in EDGE_TASKS:
        out += _edge_task(spec, summary)
        out += _features(spec, summary)
        out += _typed(spec, summary)
    else:
        if not summary.triples.get("train") or not summary.num_edge_types:
            out.append(
                Problem(
                    path=_source_field(spec.graph, "graph.triples"),
                    message=f"task {spec.task_kind} learns from (head, relation, tail) triples, and {name} "
                    "holds no training triples with relations",
                )
            )
        elif spec.trainers.replicas > summary.triples["train"]:
            out.append(_too_many_trainers(spec, summary.triples["train"], "training triples"))
        if summary.triples.get("train"):
            for key in ("valid", "test"):
                if not summary.triples.get(key):  # ranked over no triples, its MRR would read 0.0
                    out.append(
                        Problem(
                            path="graph.split" if spec.graph.split is not None else "graph.triples",
                            message=f"the {key} split of {name} holds no triples: its MRR and Hits@k "
                            "would be 0 for any model (give it a share of the triples)",
                        )
                    )
        if spec.task_kind == LINK_PREDICTION:  # a GNN encodes the entities: its inputs as for nodes
            out += _features(spec, summary)
            out += _typed(spec, summary)
            out += _target_relations(spec, summary)
    if spec.partition.parts > summary.num_nodes:
        out.append(
            Problem(
                path="partition.parts",
                message=f"is {spec.partition.parts} but {name} has {summary.num_nodes:,} nodes: every "
                "partition needs at least one node",
            )
        )
    return [in_spec(p) for p in out]


def _node_classification(spec: GraphTrainingSpec, s: Summary) -> list[Problem]:
    name, out = s.name, []
    labels = _source_field(spec.graph, "graph.labels")
    if not s.has_labels:
        out.append(
            Problem(
                path=labels,
                message=f"task nodeClassification classifies nodes, but {name} has no labels: "
                + (
                    "give a node type a label column (graph.nodes[].label)"
                    if spec.graph.nodes is not None
                    else "give a labels file (.npy, or .csv/.parquet with columns id and label)"
                ),
            )
        )
    elif s.class_names is None and _too_sparse(s):
        top = (s.num_classes or 0) - 1
        out.append(
            Problem(
                path=labels,
                message=f"{name}'s largest class id is {top:,} but it has {s.labelled:,} labelled nodes: the "
                "model has one output per class id up to the largest, so class ids are 0..k-1; give the "
                "classes as names (a label column of text) or renumber them",
            )
        )
    elif (s.num_classes or 0) < 2:
        out.append(
            Problem(path=labels, message=f"{name} has {s.num_classes} class: classification needs at least 2")
        )
    elif (unlabelled := _unlabelled_targets(spec, s)) is not None:
        out.append(unlabelled)
    else:
        replicas = spec.trainers.replicas
        for key, count in _target_masks(spec, s).items():
            if count < replicas:
                out.append(
                    Problem(
                        path="graph.split" if spec.graph.dataset is None else labels,
                        message=f"the {key} split of {name} holds {count:,} labelled nodes but there are "
                        f"{replicas} trainers (trainers.replicas): each trainer needs at least one",
                    )
                )
    out += _features(spec, s)
    return out


def _targets(spec: GraphTrainingSpec, s: Summary) -> list[str]:
    """task.targetNodeTypes that the graph has (an unknown one is _typed's problem)."""
    task = spec.task.variant if spec.task is not None else None
    return [t for t in getattr(task, "target_node_types", None) or [] if t in s.type_masks]


def _target_masks(spec: GraphTrainingSpec, s: Summary) -> dict[str, int]:
    """The labelled nodes of each split that training and evaluation read: the target types' only."""
    targets = _targets(spec, s)
    if not targets:
        return {key: s.masks.get(key, 0) for key in MASKS}
    return {key: sum(s.type_masks[t].get(key, 0) for t in targets) for key in MASKS}


def _unlabelled_targets(spec: GraphTrainingSpec, s: Summary) -> Problem | None:
    """Target node types none of which has a labelled node: the training would take no step and score
    0.0 (exit 0), so it is refused naming the types that do have labels."""
    targets = _targets(spec, s)
    if not targets or any(any(s.type_masks[t].values()) for t in targets):
        return None
    labelled = [u for u, m in s.type_masks.items() if any(m.values())]
    many = len(targets) > 1
    said = ("node types " if many else "node type ") + ", ".join(repr(t) for t in targets)
    return Problem(
        path="task.targetNodeTypes",
        message=f"{said} {'have' if many else 'has'} no labelled nodes (labelled: "
        f"{', '.join(labelled) or 'none'}): give one a label column (graph.nodes[].label), or name a "
        "labelled type",
    )


def _edge_task(spec: GraphTrainingSpec, s: Summary) -> list[Problem]:
    """Labelled edges (of at least two classes; numbers for regression), each split holding one for
    every trainer."""
    kind = spec.task_kind
    if not s.edge_targets:
        return [
            Problem(
                path="graph.edges",
                message=f"task {kind} learns labelled edges, and {s.name} has none: give an edge type's "
                "files a label column (graph.edges[].label)",
            )
        ]
    if kind == EDGE_REGRESSION and not s.edge_values:
        return [
            Problem(
                path="graph.edges",
                message=f"task edgeRegression predicts numbers, but a label of {s.name}'s edges is not a "
                "finite number (task edgeClassification takes class names)",
            )
        ]
    labelled = sum(s.edge_targets.values())
    if kind != EDGE_REGRESSION and not s.edge_class_names and _sparse_ids(s.edge_classes - 1, labelled):
        return [
            Problem(
                path="graph.edges",
                message=f"{s.name}'s largest edge class id is {s.edge_classes - 1:,} but it has "
                f"{labelled:,} labelled edges: the classifier has one output per class id up to the "
                "largest, so class ids are 0..k-1; give the classes as names or renumber them",
            )
        ]
    if kind != EDGE_REGRESSION and s.edge_classes < 2:
        return [
            Problem(
                path="graph.edges",
                message=f"{s.name}'s labelled edges have {s.edge_classes} class: classification needs at "
                "least 2",
            )
        ]
    replicas, out = spec.trainers.replicas, []
    for key in ("train", "valid", "test"):
        count = s.edge_targets.get(key, 0)
        if count < replicas:
            out.append(
                Problem(
                    path="graph.split",
                    message=f"the {key} split of {s.name} holds {count:,} labelled edges but there are "
                    f"{replicas} trainers (trainers.replicas): each trainer needs at least one",
                )
            )
    return out


def _features(spec: GraphTrainingSpec, s: Summary) -> list[Problem]:
    """What the model's feature input (as they are, projected or as bags) needs from the features."""
    m, name, out = gnn(spec.model), s.name, []
    # only a graph of your own files takes a features file; a bundled dataset or triples have none to give
    give = "give graph.features, or " if spec.graph.path is not None else ""
    if m.use_features and s.feature_dims is None and m.feature_bag is not None:
        out.append(
            Problem(
                path="model.featureBag",
                message=f"{name} has no node features: {give}remove featureBag and set useFeatures: false "
                "with a model.nodeEmbedding",
            )
        )
    elif m.use_features and s.feature_dims is None:
        out.append(
            Problem(
                path="model.useFeatures",
                message=f"{name} has no node features: {give}set useFeatures: false with a "
                "model.nodeEmbedding",
            )
        )
    elif m.feature_bag is not None and not s.sparse_features:
        out.append(
            Problem(
                path="model.featureBag",
                message=f"reads sparse features (each node's nonzero columns), but {name}'s "
                f"{s.feature_dims:,} feature columns are dense: remove featureBag to feed them as they are",
            )
        )
    elif m.use_features and s.sparse_features and m.feature_projection is None and m.feature_bag is None:
        out.append(
            Problem(
                path="model.featureProjection",
                message=f"{name}'s features are sparse ({s.feature_dims:,} dims): set featureProjection "
                "(e.g. 256) or featureBag (a learnable row per column) to feed them to the first layer",
            )
        )
    if m.feature_projection is not None and s.feature_dims is None:
        out.append(Problem(path="model.featureProjection", message=f"{name} has no node features to project"))
    return out


def _typed(spec: GraphTrainingSpec, s: Summary) -> list[Problem]:
    """What a GNN's typed inputs need from the graph: edge features to read, node types to target, edge
    types to sample by."""
    m, out = gnn(spec.model), []
    for field in ("edge_features", "edge_weight"):
        if getattr(m, field, False) and not s.edge_feature_dims:
            camel = "edgeFeatures" if field == "edge_features" else "edgeWeight"
            out.append(
                Problem(
                    path=f"model.{camel}",
                    message=f"{s.name} has no edge features: give graph.edges[].features (typed files)",
                )
            )
    task = spec.task.variant if spec.task is not None else None
    targets = getattr(task, "target_node_types", None) or []
    for t in targets:
        if not s.node_types:
            out.append(
                Problem(path="task.targetNodeTypes", message=f"the graph {s.name!r} has no node types")
            )
            break
        if t not in s.node_types:
            out.append(
                Problem(
                    path="task.targetNodeTypes",
                    message=f"the graph {s.name!r} has no node type {t!r} (node types: "
                    f"{', '.join(s.node_types)})",
                )
            )
    for name in spec.training.edge_type_fanouts or {}:
        try:
            edge_type_index(s.canonical_etypes or [], name)
        except GraphtrainError as exc:
            out.append(Problem(path="training.edgeTypeFanouts", message=str(exc).split(": ", 1)[1]))
    return out


def _target_relations(spec: GraphTrainingSpec, s: Summary) -> list[Problem]:
    """task.targetRelations the knowledge graph has (by name), with triples in each split: relations
    with no training triples have nothing to learn from, and none held out would be ranked over no
    triples (MRR 0 for any model)."""
    names = getattr(spec.task.variant if spec.task is not None else None, "target_relations", None) or []
    known = s.relation_names or []
    if not names or not known:
        return []
    missing = [n for n in names if n not in known]
    if missing:
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        return [
            Problem(
                path="task.targetRelations",
                message=f"{s.name} has no relation {missing[0]!r} (relations: {shown})",
            )
        ]
    ids = [known.index(n) for n in names]
    out = []
    for split in ("train", "valid", "test"):
        counts = s.relation_triples.get(split)
        if counts is None or not s.triples.get(split):
            continue  # an empty split is refused for the whole graph (problems)
        if sum(counts[i] for i in ids if i < len(counts)) == 0:
            which = repr(names[0]) if len(names) == 1 else "any of " + ", ".join(repr(n) for n in names)
            out.append(
                Problem(
                    path="task.targetRelations",
                    message=f"the {split} split of {s.name} holds no triples of {which}"
                    + (
                        ": nothing to learn from"
                        if split == "train"
                        else ": its MRR would be 0 for any model"
                    )
                    + " (name relations that have triples in every split)",
                )
            )
    return out


def _target_relation_notes(spec: GraphTrainingSpec, s: Summary) -> list[str]:
    """Target relations that are trained but never ranked (no held-out triples of their own), when the
    others are: the reported MRR then says nothing about them."""
    names = getattr(spec.task.variant if spec.task is not None else None, "target_relations", None) or []
    known = s.relation_names or []
    if len(names) < 2 or any(n not in known for n in names):
        return []
    out = []
    for n in names:
        i = known.index(n)
        empty = [
            k
            for k in ("valid", "test")
            if i < len(s.relation_triples.get(k, [])) and not s.relation_triples[k][i]
        ]
        if empty:
            out.append(
                f"task.targetRelations: {s.name} holds no {' or '.join(empty)} triples of {n!r}: it is "
                "trained, but the reported MRR does not measure it"
            )
    return out


MAX_CLASS_ID = 1_000_000  # integer labels are class ids: the model's output layer has one row per id
CLASS_SPREAD = 100  # ... and at most this many per labelled node (a sparse id such as 10**12 is a name)


def _too_sparse(s: Summary) -> bool:
    return _sparse_ids((s.num_classes or 0) - 1, s.labelled)


def _sparse_ids(top: int, labelled: int) -> bool:
    """Integer labels whose largest id `top` is too large for `labelled` rows to be class ids."""
    return top > MAX_CLASS_ID or top > CLASS_SPREAD * max(labelled, 1)


def _too_many_trainers(spec: GraphTrainingSpec, available: int, what: str) -> Problem:
    return Problem(
        path="trainers.replicas",
        message=f"is {spec.trainers.replicas} but there are {available:,} {what}: each trainer needs a share",
    )


DIRECTED_SHARE = 0.5  # above this share of one-way edges, an edge list was probably written one way


def notes(spec: GraphTrainingSpec, summary: Summary) -> list[str]:
    """Warnings: the run works, but probably not as meant (a one-direction edge list for GraphSAGE)."""
    out = []
    if (
        spec.task_kind == NODE_CLASSIFICATION
        and not spec.graph.reverse_edges
        and summary.directed > DIRECTED_SHARE
    ):
        out.append(
            f"{summary.name}: {summary.directed:.0%} of edges have no reverse edge, and a GNN aggregates "
            "in-neighbours only: set graph.reverseEdges: true if the graph is undirected"
        )
    if spec.task_kind == LINK_PREDICTION:
        out += _target_relation_notes(spec, summary)
    return out
