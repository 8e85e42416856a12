"""Whether a checkpoint can be resumed under a spec: it must have been trained with the same model (pure,
no torch: the launcher checks before it starts anything, every trainer again before it restores).

A checkpoint's trainer.json records the fields that fix the shapes of the dense model and the tables
(model_record); a changed one is named with both values, rather than surfacing as torch's
`size mismatch for layers.0.bias` from deep inside load_state_dict.
"""

from __future__ import annotations

from typing import Any

from graphtrain.runtime.errors import GraphtrainError

# a GNN's own fields that change no parameter's shape: a resumed run may change them
NOT_SHAPES = {"attention_dropout", "negative_slope"}


def model_record(spec: Any) -> dict[str, Any]:
    """What a checkpoint must have been trained with to be resumed under `spec`: the fields that fix the
    shapes of the dense model and the tables, and the graph they learned (wire names, as the user
    writes them)."""
    from pydantic.alias_generators import to_camel

    from graphtrain.contract.spec import GNNModel, KGEModel, LinkPredictionTask

    m = spec.model.variant
    record: dict[str, Any] = {"model.kind": str(spec.model.kind), "task.kind": str(spec.task_kind)}
    task = spec.task.variant if spec.task is not None else None
    if isinstance(task, LinkPredictionTask):
        record["task.decoder"] = str(task.decoder)  # dot has no relation rows, mlp its own layers
    if isinstance(m, KGEModel):  # its score's own fields (TransE's norm) and its tables' names
        own = set(type(m).model_fields) - NOT_SHAPES
        record.update({f"model.{to_camel(f)}": _plain(getattr(m, f)) for f in sorted(own) if f != "kind"})
    if isinstance(m, GNNModel):  # the KGE models have no dense part: their tables are all
        record.update(
            {
                "model.hiddenDim": m.hidden_dim,
                "model.numLayers": m.num_layers,
                "model.useFeatures": m.use_features,
                "model.nodeEmbedding": m.node_embedding,
                "model.featureProjection": m.feature_projection,
                "model.featureBag.embedding": m.feature_bag.embedding if m.feature_bag else None,
            }
        )
        # the kind's own fields that fix its parameters' shapes (heads, bases, ...)
        own = set(type(m).model_fields) - set(GNNModel.model_fields) - NOT_SHAPES
        record.update({f"model.{to_camel(f)}": getattr(m, f) for f in sorted(own)})
    # the graph it learned: predict and infer read the checkpoint's own partition, so a spec naming
    # another graph (kinships against a Nations checkpoint) was answered for the checkpoint's silently
    record["graph.dataset"] = _plain(spec.graph.dataset)
    record["graph.typed"] = spec.graph.typed
    record["graph.reverseEdges"] = spec.graph.reverse_edges
    for t in spec.embeddings:
        record[f"embeddings[{t.name}].dim"] = t.dim
        record[f"embeddings[{t.name}].nodeTypes"] = t.node_types  # which nodes the rows are
        record[f"embeddings[{t.name}].dtype"] = _plain(t.dtype)
        # the optimizer its state was kept for: a resumed shard server refused a changed one only after
        # every process had started, as a repr of its config naming no field
        optimizer = t.optimizer.model_dump(by_alias=True, exclude_none=True, mode="json")
        record.update({f"embeddings[{t.name}].optimizer.{k}": v for k, v in sorted(_flat(optimizer).items())})
    return record


TRAINING_ONLY = (".optimizer.",)
"""Record fields infer and predict do not compare: how the rows were stepped, not what they are."""


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict's leaves by dotted key."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _plain(value: Any) -> Any:
    """A record's value as JSON keeps it (an enum as its name)."""
    return value.value if hasattr(value, "value") else value


def model_changes(recorded: dict[str, Any] | None, spec: Any, ignore: tuple[str, ...] = ()) -> list[str]:
    """The fields of `spec` that differ from a checkpoint's model record, each as 'FIELD OLD, the spec says
    NEW' (nothing to compare when the checkpoint has no record: load_dense checks shapes then). Fields a
    record lacks are not compared (an older record), but a table it lacks is a change; fields containing
    one of `ignore` are not compared."""
    if not recorded:
        return []
    now = model_record(spec)
    changes = []
    added = (k for k in now if k.startswith("embeddings[") and k.endswith(".dim") and k not in recorded)
    for k in [*recorded, *added]:
        if any(part in k for part in ignore):
            continue
        if k not in now:
            what = "table" if k.startswith("embeddings[") else "field"
            changes.append(f"{k} {recorded[k]}, the spec has no such {what}")
        elif k not in recorded:
            changes.append(f"no {k.split('.')[0]}, the spec has one")
        elif recorded[k] != now[k]:
            changes.append(f"{k} {recorded[k]}, the spec says {now[k]}")
    return changes


def check_same_model(
    recorded: dict[str, Any] | None, spec: Any, name: str, then: str, ignore: tuple[str, ...] = ()
) -> None:
    """Refuse checkpoint `name` under a spec whose model differs from the one it was trained with; `then`
    says what to do. Resuming, inferring and predicting all need the same model: a field that changes
    no shape (model.edgeWeight, TransE's norm) makes another model's outputs as much as one that does.

    Raises:
        GraphtrainError: one line naming every changed field with both values.
    """
    changes = model_changes(recorded, spec, ignore)
    if changes:
        raise GraphtrainError(f"checkpoint {name} was trained with {'; '.join(changes)}: {then}")


def check_inferable(recorded: dict[str, Any] | None, spec: Any, name: str) -> None:
    """check_same_model for `graphtrain infer` and `predict`."""
    check_same_model(recorded, spec, name, "give the spec the run trained with", TRAINING_ONLY)


def check_resumable(recorded: dict[str, Any] | None, spec: Any, name: str) -> None:
    """check_same_model for --resume."""
    check_same_model(recorded, spec, name, "--resume needs the same model (or --overwrite to start over)")
