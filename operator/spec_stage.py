"""The spec stage, first of plan()'s stages (stages.py runs the others): is the spec valid, and which
spec the training runs with. Before the first children that is the current spec; after, the applied
one (the config ConfigMap's) with only the fields a running job takes on (contract/spec/updates.py:
ANY_TIME). status.appliedSpecHash (spec_hash) tells a changed spec once that ConfigMap is lost.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from graphtrain.contract import conditions
from graphtrain.contract.children import names
from graphtrain.contract.spec import GraphTraining, Locality, SpecError, parse
from graphtrain.contract.spec.locality import resolved
from graphtrain.contract.spec.updates import ANY_TIME, refused
from graphtrain.operator import volume
from graphtrain.operator.observation import Obj, Observed, applied_spec


@dataclass(frozen=True)
class SpecDecision:
    """The spec stage's outcome: the spec the training runs with (None: invalid and never applied, so
    the training fails without children) and the generation its status reports (a refused update's is
    not observed)."""

    gt: GraphTraining | None
    observed_generation: int | None
    hold: bool = False  # the applied spec is lost and the current one is not it: nothing is done


def spec_hash(gt: GraphTraining) -> str:
    """status.appliedSpecHash of `gt`: its spec as the config ConfigMap holds it (the default locality
    resolved), less the sections a running job takes on (contract/spec/updates.py: ANY_TIME)."""
    spec = resolved(gt.spec).model_dump(by_alias=True, exclude_none=True, mode="json")
    kept = {k: v for k, v in spec.items() if k not in ANY_TIME}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:32]


def _lost_spec(obs: Observed, current: GraphTraining | None, problem: str) -> str | None:
    """Why the training must wait, or None: its config ConfigMap (the applied spec) is gone while other
    children of it exist, and the current spec is not the one it runs (status.appliedSpecHash). Taken
    as new, a change refused until then (mode, trainers, task) would be applied to running roles."""
    stored = (obs.training.get("status") or {}).get("appliedSpecHash")
    if not stored or not obs.children or (current is not None and spec_hash(current) == stored):
        return None
    config = names(obs.training["metadata"]["name"])["config"]
    why = (
        f"the new spec is invalid: {problem}" if current is None else "the spec differs from the one it runs"
    )
    return (
        f"ConfigMap {config} (the applied spec) was deleted while the training ran, and {why}: revert "
        "the spec to what it runs (or create a new GraphTraining); nothing is made or restarted until then"
    )


def _failed_for_spec(body: Obj) -> bool:
    """The training failed for a spec that broke a rule (Failed True / InvalidSpec)."""
    said = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("reason") == "InvalidSpec" for c in said)


def _with_locality(gt: GraphTraining, locality: Locality | None) -> GraphTraining:
    placement = gt.spec.placement.model_copy(update={"locality": locality})
    return gt.model_copy(update={"spec": gt.spec.model_copy(update={"placement": placement})})


def spec_stage(obs: Observed, conds: conditions.Conditions) -> SpecDecision:
    """Is the spec valid, and which applies. Before the first children, the current spec (invalid:
    SpecValid False and Failed). After, the applied one (the config ConfigMap's), taking only the
    current runPolicy and suspend; any other change is refused (SpecValid False / UpdateRefused) and
    its generation is not reported as observed. Which fields a running training takes is
    contract/spec/updates.py's table, which the CRD's transition rules refuse at admission too; this
    refusal stays for what they did not see (a change made before the operator first wrote the status)
    and for clusters that do not run them."""
    body = obs.training
    meta = body["metadata"]
    generation = meta.get("generation")
    try:
        current: GraphTraining | None = parse(
            {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        )
        problem = ""
    except SpecError as exc:
        current, problem = None, "; ".join(map(str, exc.problems))
    off_volume = volume.outside_volume(current) if current is not None else []
    if off_volume:  # valid as a document, but no pod could honour it: its paths are on no volume of ours
        current, problem = None, "; ".join(off_volume)
    applied = applied_spec(obs.children, meta["name"])
    lost = _lost_spec(obs, current, problem) if applied is None else None
    if lost is not None:
        conditions.set_update_refused(conds, lost)
        return SpecDecision(None, (body.get("status") or {}).get("observedGeneration"), hold=True)
    if applied is None:
        if current is None:
            conditions.set_spec_invalid(conds, problem)
        elif _failed_for_spec(body):
            conditions.set_spec_valid(  # fixed after it failed for its spec: Failed is final
                conds,
                "the spec is valid now, but the training failed for its earlier spec and a failed training "
                "never starts again: delete it and create it again (kubectl replace --force -f FILE)",
            )
        else:
            conditions.set_spec_valid(conds)
        return SpecDecision(current, generation)
    if applied.spec.placement.locality is None:  # applied before spec.placement: its pods had none
        applied = _with_locality(applied, Locality.none)
    if current is not None and current.spec.placement.locality is None:  # unset: the default decided
        current = _with_locality(current, applied.spec.placement.locality)
    new = current.spec.model_dump(by_alias=True, mode="json") if current else None
    had = applied.spec.model_dump(by_alias=True, mode="json")
    observed_generation = generation
    changed = refused(had, new)
    if current is None:
        conditions.set_update_refused(conds, f"the new spec is invalid: {problem}")
        observed_generation = (body.get("status") or {}).get("observedGeneration")
    elif changed:
        fields = ", ".join(f"spec.{k}" for k in changed)
        conditions.set_update_refused(
            conds,
            f"{fields} cannot change once the training started; the job goes on with the applied spec "
            "(revert the change or create a new GraphTraining)",
        )
        observed_generation = (body.get("status") or {}).get("observedGeneration")
    else:
        conditions.set_spec_valid(conds)
    if current is not None:
        declared = type(current.spec).model_fields
        mutable = {k: getattr(current.spec, k) for k, f in declared.items() if (f.alias or k) in ANY_TIME}
        applied = applied.model_copy(update={"spec": applied.spec.model_copy(update=mutable)})
    return SpecDecision(applied, observed_generation)
