"""Specs written before the task had a field of its own (the old form), read into the new one.

Before, `model.kind` stood for the task too (graphsage: node classification; transe, distmult:
knowledge-graph embedding), and one model object held every kind's fields: a KGE model its negatives,
loss and margin; a graphsage model TransE's norm, unread (only the table inputs were refused on a kind
that does not read them). The old CRD also stored every field's default
on every training, so a GraphSAGE training already on an API server holds `negatives: 64`.

A spec without `spec.task` is read as the old form: the task is the model's own, a KGE model's
negatives, loss and margin move to the task, and a field of the old model that its kind does not read
is dropped (the executors ignored it before too). A spec with `spec.task` is the new form and is read
strictly: a field its model kind does not hold is an error. `notes()` says how to write an old spec in
the new form; `graphtrain validate` prints it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# The old model's fields that any kind could hold (as written, camelCase): the old rules refused a table
# input on a kind that does not read it (nodeEmbedding on transe), but not these, and the old CRD stored
# the defaults of all but featureProjection on every training. The new form gives each kind its own.
OLD_MODEL_FIELDS = (
    "hiddenDim",
    "numLayers",
    "dropout",
    "useFeatures",
    "featureProjection",
    "negatives",
    "loss",
    "margin",
    "norm",
)


def _model_dict(model: Any) -> dict[str, Any] | None:
    if isinstance(model, BaseModel):
        return model.model_dump(by_alias=True, exclude_none=True)
    return dict(model) if isinstance(model, dict) else None


def _rewrite(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """The new form of an old-form spec and what changed (None: not an old-form spec we can read:
    it has a task, or its model is not an object of a known kind; the schema reports those)."""
    from pydantic.alias_generators import to_camel

    from graphtrain.contract.spec.model import MOVED_TO_TASK, ModelSpec, tasks_of

    if "task" in spec:
        return None
    model = _model_dict(spec.get("model", {}))
    if model is None:
        return None
    kind = model.get("kind", "graphsage")
    if not isinstance(kind, str) or kind not in ModelSpec.VARIANTS:
        return None
    task_kind = tasks_of(kind)[0]
    task: dict[str, Any] = {"kind": task_kind}
    owned = {to_camel(f) for f in ModelSpec.fields_of(kind)}
    changes = [f"spec.task: unset; read as {{kind: {task_kind}}} (model.kind {kind}'s task): write it"]
    for field in OLD_MODEL_FIELDS:
        if field not in model:
            continue
        if field in {to_camel(m) for m in MOVED_TO_TASK}:
            value = model.pop(field)
            if task_kind == "kge":
                task[field] = value
                changes.append(f"spec.model.{field}: moved to spec.task.{field}")
            else:
                changes.append(f"spec.model.{field}: {kind} does not read it; dropped (remove it)")
        elif field not in owned:
            model.pop(field)
            changes.append(f"spec.model.{field}: {kind} does not read it; dropped (remove it)")
    return {**spec, "model": model, "task": task}, changes


def read_old_form(spec: Any) -> Any:
    """`spec` (the spec object as written) in the new form when it is the old form, else unchanged."""
    if not isinstance(spec, dict):
        return spec
    rewritten = _rewrite(spec)
    return spec if rewritten is None else rewritten[0]


def notes(spec: Any) -> list[str]:
    """How to write an old-form spec (the spec object as written) in the new form, one line each;
    empty for a spec in the new form."""
    if not isinstance(spec, dict):
        return []
    rewritten = _rewrite(spec)
    return [] if rewritten is None else rewritten[1]
