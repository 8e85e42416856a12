"""The run's status in the GraphTraining status schema, computed from what the launcher observed (pure).

A condition's lastTransitionTime is the time its status last changed (Kubernetes semantics), not the
time of the latest write: build() takes the conditions it returned last time and the current time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from graphtrain.runtime import spec as S


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class Observed:
    phase: str = S.Phase.pending.value
    partition: dict[str, Any] | None = None  # the partition config's stats
    shards: list[dict[str, Any]] = field(default_factory=list)  # index, state, address, restarts
    progress: dict[str, Any] | None = None  # the trainers' progress.json
    restarts: int = 0
    failure: str | None = None
    start_time: str | None = None
    completion_time: str | None = None


def condition(kind: S.ConditionType, ok: bool, reason: str, message: str = "") -> S.Condition:
    """A condition without its transition time (build() stamps it)."""
    return S.Condition(type=kind, status="True" if ok else "False", reason=reason, message=message)


def stamp(conditions: list[S.Condition], previous: list[S.Condition], at: str) -> list[S.Condition]:
    """Each condition with its transition time: the previous one's while its status holds, else `at`."""
    before = {c.type: c for c in previous}
    out = []
    for c in conditions:
        old = before.get(c.type)
        held = old is not None and old.status == c.status and old.last_transition_time is not None
        out.append(c.model_copy(update={"last_transition_time": old.last_transition_time if held else at}))
    return out


def partition_status(config: dict[str, Any]) -> S.PartitionStatus:
    """The status' partition section from a partition config (its stats, counted when written)."""
    st = config["stats"]
    return S.PartitionStatus(
        algorithm=config["algorithm"],
        parts=config["num_parts"],
        num_nodes=st["num_nodes"],
        num_edges=st["num_edges"],
        cut_edges=st["cut_edges"],
        edge_cut_fraction=st["edge_cut_fraction"],
        balance=st["balance"],
        nodes_per_part=st["nodes_per_part"],
        edges_per_part=st["edges_per_part"],
        halo_per_part=st["halo_per_part"],
        seconds=st.get("seconds", {}).get("total", 0.0),
    )


def build(gt: S.GraphTraining, obs: Observed, previous: list[S.Condition], at: str) -> S.GraphTrainingStatus:
    """The status from what was observed; `previous`: the conditions of the last status built (their
    transition times carry over), `at`: the time of this one."""
    conds = [condition(S.ConditionType.spec_valid, True, "Valid")]
    part = None
    if obs.partition is not None:
        part = partition_status(obs.partition)
        conds.append(condition(S.ConditionType.partition_ready, True, "Partitioned"))
    ready = [s for s in obs.shards if s.get("state") == S.ShardState.ready.value]
    if obs.shards:
        all_ready = len(ready) == len(obs.shards)
        conds.append(
            condition(
                S.ConditionType.shards_ready,
                all_ready,
                "AllReady" if all_ready else "Waiting",
                f"{len(ready)}/{len(obs.shards)} shard servers ready",
            )
        )
    progress = None
    if obs.progress is not None:
        p = obs.progress
        progress = S.Progress(
            epoch=p.get("epoch", 0),
            epochs=p.get("epochs", 0),
            step=p.get("step", 0),
            loss=p.get("loss"),
            samples_per_second=p.get("samples_per_second"),
            eval_metric=p.get("eval_metric"),
            eval_value=p.get("eval_value"),
            summary=p.get("summary", ""),
            updated_at=p.get("updated_at"),
        )
        conds.append(condition(S.ConditionType.trainers_ready, True, "Running"))
    if obs.phase == S.Phase.succeeded.value:
        conds.append(condition(S.ConditionType.succeeded, True, "Completed"))
    if obs.phase == S.Phase.failed.value:
        conds.append(condition(S.ConditionType.failed, True, "ProcessFailed", obs.failure or ""))
    return S.GraphTrainingStatus(
        phase=obs.phase,
        conditions=stamp(conds, previous, at),
        partition=part,
        progress=progress,
        shards=[
            S.ShardStatus(
                index=s["index"],
                state=s.get("state", "Pending"),
                address=s.get("address"),
                restarts=s.get("restarts", 0),
            )
            for s in obs.shards
        ],
        restarts=obs.restarts,
        start_time=obs.start_time,
        completion_time=obs.completion_time,
    )
