"""GraphTraining documents: two valid ones, and for every spec Rule one that breaks it.

Shared by the unit tests (the Python side of each rule) and tests/operator/test_crd_validation.py (the
same documents sent to a real API server, whose CEL side must refuse each with the same message).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Doc = dict[str, Any]


def document(name: str, spec: Doc) -> Doc:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": name},
        "spec": spec,
    }


GRAPHSAGE = document(
    "wn",
    {
        "graph": {"dataset": "wordnet"},
        "partition": {"parts": 2},
        "embeddings": [{"name": "node", "dim": 16, "optimizer": {"kind": "adam", "lr": 0.003}}],
        "model": {"kind": "graphsage", "nodeEmbedding": "node"},
    },
)

TRANSE = document(
    "nations",
    {
        "graph": {"dataset": "nations"},
        "embeddings": [
            {"name": "entity", "dim": 16},
            {"name": "relation", "dim": 16, "keys": "relations"},
        ],
        "model": {"kind": "transe", "entityEmbedding": "entity", "relationEmbedding": "relation"},
    },
)

# GraphSAGE reading WordNet's gloss words through a collective bag of word vectors, beside a node table
WORDBAG = document(
    "wn-bag",
    {
        "graph": {"dataset": "wordnet"},
        "partition": {"parts": 2},
        "embeddings": [
            {"name": "word", "dim": 16, "keys": "features", "sharding": "collective"},
            {"name": "node", "dim": 16},
        ],
        "model": {"kind": "graphsage", "featureBag": {"embedding": "word"}, "nodeEmbedding": "node"},
    },
)


def edit(base: Doc, change: Callable[[Doc], object]) -> Doc:
    """A deep copy of `base` changed in place by `change` (given the copy's spec)."""
    doc = copy.deepcopy(base)
    change(doc["spec"])
    return doc


def _table(**fields: Any) -> Callable[[Doc], object]:
    return lambda s: s["embeddings"][0].update(fields)


def _toleration(toleration: Doc) -> Callable[[Doc], object]:
    return lambda s: s.update(shardServers={"tolerations": [{"key": "ok", "operator": "Exists"}, toleration]})


def _long_name() -> Doc:
    doc = copy.deepcopy(GRAPHSAGE)
    doc["metadata"]["name"] = "a" * 41  # a valid Kubernetes name, too long for the children's names
    return doc


# a valid value of each model and task field, for the documents that put it on a kind that lacks it
SAMPLES: dict[str, Any] = {
    "hiddenDim": 8,
    "numLayers": 1,
    "dropout": 0.1,
    "useFeatures": True,
    "featureProjection": 8,
    "featureBag": {"embedding": "word"},
    "nodeEmbedding": "node",
    "heads": 2,
    "attentionDropout": 0.1,
    "negativeSlope": 0.1,
    "edgeFeatures": True,
    "numBases": 2,
    "selfLoop": False,
    "edgeWeight": True,
    "entityEmbedding": "entity",
    "relationEmbedding": "relation",
    "norm": 2,
    "negatives": 4,
    "sampler": "joint",
    "chunk": 16,
    "loss": "margin",
    "margin": 2.0,
    "targetNodeTypes": ["noun"],
    "decoder": "mlp",
    "targetRelations": ["hypernym"],
    "exclude": "none",
    "negativeSide": "both",
}


def kind_breaks() -> dict[str, Doc]:
    """For each rule that only some kinds may hold a model or task field: a new-form document (with
    spec.task) whose kind lacks the field; for the old model fields now the task's, a model holding one."""
    from pydantic.alias_generators import to_camel

    from graphtrain.contract.spec import ModelSpec, TaskSpec

    out: dict[str, Doc] = {}
    gnn = edit(GRAPHSAGE, lambda s: s.update(task={"kind": "nodeClassification"}))
    kge = edit(TRANSE, lambda s: s.update(task={"kind": "kge"}))
    for wire, part in ((ModelSpec, "model"), (TaskSpec, "task")):
        for name in wire.model_fields:
            camel = to_camel(name)
            if name == "kind":
                continue
            if not wire.kinds_holding(name):
                out[f"model-{camel}-moved"] = edit(kge, lambda s, c=camel: s["model"].update({c: SAMPLES[c]}))
                continue
            base = (
                kge
                if "graphsage" in wire.kinds_holding(name) or "nodeClassification" in wire.kinds_holding(name)
                else gnn
            )
            out[f"{part}-{camel}-kinds"] = edit(base, lambda s, p=part, c=camel: s[p].update({c: SAMPLES[c]}))
    return out


# a typed graph from files, for the rules of graph.nodes and graph.edges
TYPED_FILES = {
    "nodes": [
        {"type": "paper", "files": ["papers.csv"], "features": ["year"], "label": "topic"},
        {"type": "author", "files": ["authors.csv"]},
    ],
    "edges": [{"relation": ["author", "writes", "paper"], "files": ["writes.csv"]}],
}
TYPED = edit(GRAPHSAGE, lambda s: s.update(graph=TYPED_FILES, embeddings=[], model={"kind": "graphsage"}))
# the typed graph with a learnable embedding for its featureless authors (spec.embeddings[].nodeTypes)
TYPED_EMB = edit(
    GRAPHSAGE,
    lambda s: (
        s.update(
            graph=TYPED_FILES, model={"kind": "graphsage", "nodeEmbedding": "node", "useFeatures": True}
        ),
        s["embeddings"][0].update(nodeTypes=["author"]),
    ),
)


def _odd(s: dict) -> None:
    """Both tables of odd width (a complex model's rows hold pairs)."""
    for table in s["embeddings"]:
        table["dim"] = 15


# rule name -> a document that breaks it (and as few others as it can)
BREAKS: dict[str, Doc] = {
    "name-dns-label": _long_name(),
    "split-fractions-together": edit(GRAPHSAGE, lambda s: s["graph"].update(split={"train": 0.6})),
    "split-sums-to-one": edit(
        GRAPHSAGE, lambda s: s["graph"].update(split={"train": 0.9, "val": 0.2, "test": 0.2})
    ),
    "graph-one-source": edit(GRAPHSAGE, lambda s: s.update(graph={})),
    "graph-standard-split": edit(TRANSE, lambda s: s["graph"].update(split={})),
    "init-uniform-ordered": edit(GRAPHSAGE, _table(init={"low": 1, "high": 0})),
    "init-uniform-float32": edit(GRAPHSAGE, _table(init={"low": -3e38, "high": 3e38})),
    "init-normal-float32": edit(GRAPHSAGE, _table(init={"kind": "normal", "mean": -1e37, "std": 2e37})),
    "dynamic-capacity-per-shard": edit(GRAPHSAGE, _table(vocabulary={"kind": "dynamic", "capacity": 1})),
    "dynamic-capacity-per-trainer": edit(
        GRAPHSAGE,
        lambda s: (
            s["embeddings"][0].update(sharding="collective", vocabulary={"kind": "dynamic", "capacity": 2}),
            s.update(trainers={"replicas": 3}),
        ),
    ),
    "vocabulary-dynamic-capacity": edit(GRAPHSAGE, _table(vocabulary={"kind": "dynamic"})),
    "vocabulary-capacity-dynamic-only": edit(GRAPHSAGE, _table(vocabulary={"capacity": 100})),
    "table-keys-not-custom": edit(GRAPHSAGE, _table(keys="custom", numEmbeddings=10)),
    "table-custom-rows": edit(GRAPHSAGE, _table(keys="custom")),
    "table-rows-custom-only": edit(GRAPHSAGE, _table(numEmbeddings=10)),
    "table-float16-init-range": edit(
        GRAPHSAGE, _table(dtype="float16", init={"kind": "uniform", "low": -1e5, "high": 1e5})
    ),
    "locality-even-trainers": edit(
        GRAPHSAGE, lambda s: s.update(trainers={"replicas": 3}, placement={"locality": "partition"})
    ),
    "gnn-has-input": edit(
        GRAPHSAGE, lambda s: s.update(embeddings=[], model={"kind": "graphsage", "useFeatures": False})
    ),
    "kge-needs-entityEmbedding": edit(TRANSE, lambda s: s["model"].pop("entityEmbedding")),
    "kge-needs-relationEmbedding": edit(TRANSE, lambda s: s["model"].pop("relationEmbedding")),
    "all-rows-kge-tables": edit(GRAPHSAGE, _table(optimizer={"kind": "adam", "lr": 0.01, "rows": "all"})),
    "complex-rows-even": edit(
        TRANSE, lambda s: (s["model"].update(kind="rotate"), s["model"].pop("norm", None), _odd(s))
    ),
    "fanouts-positive": edit(GRAPHSAGE, lambda s: s.update(training={"fanouts": [10, 0]})),
    "mixed-precision-models": edit(
        TRANSE, lambda s: s.setdefault("training", {}).update(mixedPrecision="bfloat16")
    ),
    "cuda-graph": edit(TRANSE, lambda s: s.setdefault("training", {}).update(cudaGraph=True)),
    "table-names-unique": edit(GRAPHSAGE, lambda s: s["embeddings"].append({"name": "node", "dim": 8})),
    "tables-used": edit(GRAPHSAGE, lambda s: s["embeddings"].append({"name": "spare", "dim": 8})),
    "nodeEmbedding-exists": edit(GRAPHSAGE, lambda s: s["model"].update(nodeEmbedding="nope")),
    "nodeEmbedding-keys": edit(GRAPHSAGE, _table(keys="relations")),
    "entityEmbedding-exists": edit(TRANSE, lambda s: s["model"].update(entityEmbedding="nope")),
    "entityEmbedding-keys": edit(TRANSE, lambda s: s["embeddings"][0].update(keys="relations")),
    "relationEmbedding-exists": edit(TRANSE, lambda s: s["model"].update(relationEmbedding="nope")),
    "relationEmbedding-keys": edit(TRANSE, lambda s: s["embeddings"][1].update(keys="nodes")),
    "feature-bag-uses-features": edit(WORDBAG, lambda s: s["model"].update(useFeatures=False)),
    "feature-bag-or-projection": edit(WORDBAG, lambda s: s["model"].update(featureProjection=64)),
    "featureBag-exists": edit(WORDBAG, lambda s: s["model"]["featureBag"].update(embedding="nope")),
    "featureBag-keys": edit(WORDBAG, _table(keys="nodes")),
    "fanouts-per-layer": edit(GRAPHSAGE, lambda s: s.update(training={"fanouts": [10]})),
    "node-classification-labelled-graph": edit(
        GRAPHSAGE, lambda s: (s["graph"].update(dataset="nations"), s["model"].update(useFeatures=False))
    ),
    "gnn-knowledge-graph-features": edit(
        GRAPHSAGE,
        lambda s: (
            s["graph"].update(dataset="nations"),
            s.update(task={"kind": "linkPrediction", "decoder": "dot"}),
        ),
    ),
    "kge-knowledge-graph": edit(TRANSE, lambda s: s["graph"].update(dataset="wordnet")),
    "linkPrediction-knowledge-graph": edit(
        GRAPHSAGE, lambda s: s.update(task={"kind": "linkPrediction", "decoder": "dot"})
    ),
    "kge-sampler": edit(TRANSE, lambda s: s.update(task={"kind": "kge", "sampler": "inBatch"})),
    "node-classification-no-triples": edit(
        GRAPHSAGE, lambda s: s.update(graph={"triples": {"path": "t.tsv"}})
    ),
    "task-model": edit(TRANSE, lambda s: s.update(task={"kind": "nodeClassification"})),
    "graph-node-files-need-path": edit(GRAPHSAGE, lambda s: s["graph"].update(labels="labels.csv")),
    "triples-split-or-own": edit(
        TRANSE,
        lambda s: s.update(graph={"triples": {"path": "a", "valid": "b", "test": "c"}, "split": {}}),
    ),
    "kge-no-reverse": edit(TRANSE, lambda s: s["graph"].update(reverseEdges=True)),
    "triples-valid-with-test": edit(
        TRANSE, lambda s: s.update(graph={"triples": {"path": "a", "valid": "b"}})
    ),
    "triples-text-format": edit(
        TRANSE, lambda s: s.update(graph={"triples": {"path": "a", "format": "npz"}})
    ),
    "triples-columns-distinct": edit(
        TRANSE, lambda s: s.update(graph={"triples": {"path": "a", "columns": ["head", "head", "tail"]}})
    ),
    "shards-per-partition": edit(GRAPHSAGE, lambda s: s.update(shardServers={"replicas": 3})),
    "nccl-needs-cuda": edit(GRAPHSAGE, lambda s: s.update(trainers={"backend": "nccl"})),
    "toleration-exists-without-value": edit(
        GRAPHSAGE, _toleration({"key": "gpu", "operator": "Exists", "value": "a100"})
    ),
    "toleration-key-or-exists": edit(GRAPHSAGE, _toleration({"value": "a100"})),
    "edge-type-fanouts-per-layer": edit(
        GRAPHSAGE, lambda s: s.update(training={"edgeTypeFanouts": {"a": [1]}})
    ),
    "edge-type-fanouts-range": edit(
        GRAPHSAGE, lambda s: s.update(training={"edgeTypeFanouts": {"a": [1, -2]}})
    ),
    "attention-heads-divide-width": edit(
        GRAPHSAGE, lambda s: s.update(model={"kind": "gat", "nodeEmbedding": "node", "heads": 3})
    ),
    "edge-columns-distinct": edit(
        TYPED, lambda s: s["graph"]["edges"][0].update(sourceColumn="x", destinationColumn="x")
    ),
    "node-id-column-not-data": edit(TYPED, lambda s: s["graph"]["nodes"][0].update(idColumn="year")),
    "edge-label-not-data": edit(TYPED, lambda s: s["graph"]["edges"][0].update(label="src")),
    "edgeClassification-labelled-edges": edit(
        GRAPHSAGE, lambda s: s.update(task={"kind": "edgeClassification"})
    ),
    "edgeRegression-labelled-edges": edit(GRAPHSAGE, lambda s: s.update(task={"kind": "edgeRegression"})),
    "inference-checkpoint": edit(GRAPHSAGE, lambda s: s.update(mode="inference")),
    "task-target-relations-distinct": edit(
        GRAPHSAGE,
        lambda s: (
            s["graph"].update(dataset="nations"),
            s["model"].update(useFeatures=False),
            s.update(task={"kind": "linkPrediction", "targetRelations": ["accusation", "accusation"]}),
        ),
    ),
    "inference-mode": edit(GRAPHSAGE, lambda s: s.update(inference={"checkpoint": "runs/wn/checkpoints"})),
    "gang-scheduler": edit(GRAPHSAGE, lambda s: s.update(scheduling={"gang": True})),
    "inference-gnn": edit(
        TRANSE, lambda s: s.update(mode="inference", inference={"checkpoint": "runs/nations/checkpoints"})
    ),
    "graph-nodes-with-edges": edit(TYPED, lambda s: s["graph"].pop("edges")),
    "graph-edge-node-types": edit(
        TYPED, lambda s: s["graph"]["edges"][0].update(relation=["editor", "writes", "paper"])
    ),
    "graph-node-types-distinct": edit(
        TYPED, lambda s: s["graph"]["nodes"].append({"type": "author", "files": ["b"]})
    ),
    "graph-edge-types-distinct": edit(
        TYPED,
        lambda s: s["graph"]["edges"].append({"relation": ["author", "writes", "paper"], "files": ["c"]}),
    ),
    "graph-typed-dataset": edit(TRANSE, lambda s: s["graph"].update(typed=True, dataset="metis-4elt")),
    "fennel-streams-a-graph-dataset": edit(TRANSE, lambda s: s.update(partition={"algorithm": "fennel"})),
    "table-node-types-nodes-keys": edit(
        TRANSE,
        lambda s: (
            s.update(graph={"dataset": "gene-kg", "typed": True}),
            s["embeddings"][1].update(nodeTypes=["gene"]),
        ),
    ),
    "table-node-types-distinct": edit(
        TYPED_EMB, lambda s: s["embeddings"][0].update(nodeTypes=["author"] * 2)
    ),
    "table-node-types-fixed-vocabulary": edit(
        TYPED_EMB, lambda s: s["embeddings"][0].update(vocabulary={"kind": "dynamic", "capacity": 100})
    ),
    "table-node-types-typed-graph": edit(GRAPHSAGE, _table(nodeTypes=["noun"])),
    "table-node-types-known": edit(TYPED_EMB, lambda s: s["embeddings"][0].update(nodeTypes=["editor"])),
    "toleration-seconds-no-execute": edit(
        GRAPHSAGE, _toleration({"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60})
    ),
}

BREAKS |= kind_breaks()


def _pod_metadata(**fields: Any) -> Doc:
    return edit(GRAPHSAGE, lambda s: s.update(podMetadata=fields))


# spec.podMetadata (contract/spec/pod_metadata.py): a key that is no qualified name, one of the operator's
BREAKS |= {
    "pod-label-keys": _pod_metadata(labels={"team": "a", "bad key!": "x"}),
    "pod-label-own-keys": _pod_metadata(labels={"graphtrain.io/role": "trainer"}),
    "pod-annotation-keys": _pod_metadata(annotations={"a" * 254 + "/inject": "false"}),
    "pod-annotation-own-keys": _pod_metadata(annotations={"kueue.x-k8s.io/queue-name": "q"}),
    # bytes, not characters, as the API server counts: 66198 characters, 132198 bytes
    "pod-annotations-size": _pod_metadata(annotations={f"note-{i}": "\u00e9" * 2000 for i in range(33)}),
}

# field constraints outside the rules: (document, where the CRD refuses it too). The CRD's structural
# schema cannot constrain map keys or (on an int-or-string) a quantity's text, so those two are refused
# by the Python side only: the operator then says SpecValid False instead of the API server refusing
# the pods later.
FIELD_BREAKS: dict[str, tuple[Doc, bool]] = {
    "negative-request": (
        edit(
            GRAPHSAGE,
            lambda s: s.update(
                trainers={"resources": {"requests": {"cpu": "-1"}, "limits": {"cpu": "1", "memory": "1Gi"}}}
            ),
        ),
        False,
    ),
    "negative-claim-size": (edit(GRAPHSAGE, lambda s: s.update(storage={"size": "-1Gi"})), False),
    "node-selector-key": (
        edit(GRAPHSAGE, lambda s: s.update(trainers={"nodeSelector": {"bad key!": "x"}})),
        False,
    ),
    "node-selector-key-newline": (  # Python's `$` matches before a final newline; the API server's not
        edit(GRAPHSAGE, lambda s: s.update(trainers={"nodeSelector": {"zone\n": "a"}})),
        False,
    ),
    "node-selector-value": (
        edit(GRAPHSAGE, lambda s: s.update(trainers={"nodeSelector": {"pool": "bad value!"}})),
        True,
    ),
    "pod-label-value": (_pod_metadata(labels={"team": "no spaces allowed"}), True),
    "pod-label-value-length": (_pod_metadata(labels={"team": "a" * 64}), True),
    "storage-class-name": (
        edit(GRAPHSAGE, lambda s: s.update(storage={"storageClassName": "Bad Class!"})),
        True,
    ),
    "toleration-seconds": (
        edit(GRAPHSAGE, _toleration({"key": "gpu", "effect": "NoExecute", "tolerationSeconds": -5})),
        True,
    ),
    # the lifecycle fields (issue 17): each refused by both sides, naming the field
    "clean-pod-policy": (edit(GRAPHSAGE, lambda s: s.update(runPolicy={"cleanPodPolicy": "Finished"})), True),
    "ttl-negative": (edit(GRAPHSAGE, lambda s: s.update(runPolicy={"ttlSecondsAfterFinished": -1})), True),
    "start-timeout": (edit(GRAPHSAGE, lambda s: s.update(runPolicy={"startTimeoutSeconds": 0})), True),
    "stall-policy": (edit(GRAPHSAGE, lambda s: s.update(runPolicy={"stallPolicy": "Kill"})), True),
    "when-deleted": (edit(GRAPHSAGE, lambda s: s.update(storage={"whenDeleted": "Keep"})), True),
    "suspend-not-boolean": (edit(GRAPHSAGE, lambda s: s.update(suspend="yes")), True),
    # past a shard server's sample request (1 << 20): refused before the first distributed step
    "fanout-huge": (edit(GRAPHSAGE, lambda s: s.update(training={"fanouts": [10, 1_048_577]})), True),
    "edge-type-fanout-huge": (
        edit(GRAPHSAGE, lambda s: s.update(training={"edgeTypeFanouts": {"cites": [10, 1_048_577]}})),
        True,
    ),
}
# durations beyond ten years (runPolicy's MAX_SECONDS): a timer or a date from them overflows
HUGE_DURATIONS = {
    f"{field}-huge": field
    for field in (
        "startTimeoutSeconds",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "stallTimeoutSeconds",
    )
}
for _case, _field in HUGE_DURATIONS.items():
    FIELD_BREAKS[_case] = (edit(GRAPHSAGE, lambda s, f=_field: s.update(runPolicy={f: 400_000_000})), True)

# the field each lifecycle case above breaks, as `graphtrain validate` and the API server name it
LIFECYCLE_FIELDS = {
    "clean-pod-policy": "spec.runPolicy.cleanPodPolicy",
    "ttl-negative": "spec.runPolicy.ttlSecondsAfterFinished",
    "start-timeout": "spec.runPolicy.startTimeoutSeconds",
    **{case: f"spec.runPolicy.{field}" for case, field in HUGE_DURATIONS.items()},
    "stall-policy": "spec.runPolicy.stallPolicy",
    "when-deleted": "spec.storage.whenDeleted",
    "suspend-not-boolean": "spec.suspend",
}
