"""The run's status in the GraphTraining status schema, computed from what the launcher observed (pure).

Its conditions come from the setters the operator uses too (spec.conditions): the same reasons, the
same meaning. A condition's lastTransitionTime is the time its status last changed (Kubernetes
semantics), not the time of the latest write: build() takes the conditions it returned last time and
the current time.

An ended run (Succeeded or Failed) has stopped every process before its last status is written (the
launcher stops them all, then writes it): that status says so as the operator's does, through
conditions.set_stopped, and its shard servers' states say Stopped, not Ready.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from graphtrain.contract import conditions
from graphtrain.contract.spec import (
    Condition,
    ConditionType,
    GraphTraining,
    GraphTrainingStatus,
    PartitionStatus,
    Phase,
    Progress,
    ShardState,
    ShardStatus,
)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass
class RunObserved:
    phase: str = Phase.pending.value
    partition: dict[str, Any] | None = None  # the partition config's stats
    shards: list[dict[str, Any]] = field(default_factory=list)  # index, state, address, restarts
    progress: Progress | None = None  # trainer 0's last report (progress.json)
    restarts: int = 0
    failure: str | None = None
    stalled: str | None = None  # trainer 0 silent past runPolicy.stallTimeoutSeconds (stall_note), else None
    failure_reason: conditions.Reason = conditions.Reason.process_failed
    start_time: str | None = None
    completion_time: str | None = None


def stall_note(silent: float, timeout: int) -> str | None:
    """What a run whose trainer 0 has not reported for `silent` seconds says of it (the Stalled
    condition's message, as the operator's silent_rank words it), None while within `timeout`."""
    if silent <= timeout:
        return None
    return f"trainer 0 has not reported for {silent:.0f} s (runPolicy.stallTimeoutSeconds {timeout})"


def partition_status(config: dict[str, Any]) -> PartitionStatus:
    """The status' partition section from a partition config (its stats, counted when written)."""
    st = config["stats"]
    return PartitionStatus(
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


def build(gt: GraphTraining, obs: RunObserved, previous: list[Condition], at: str) -> GraphTrainingStatus:
    """The status from what was observed; `previous`: the conditions of the last status built (their
    transition times carry over), `at`: the time of this one."""
    conds = conditions.Conditions(previous, at)
    conditions.set_spec_valid(conds)
    part = None
    if obs.partition is not None:
        part = partition_status(obs.partition)
        conditions.set_partitioned(conds)
    if obs.shards:
        ready = sum(s.get("state") == ShardState.ready.value for s in obs.shards)
        conditions.set_shards_ready(conds, ready, len(obs.shards))
    if obs.phase == Phase.succeeded.value:  # as the operator says it: the trainers are done
        conditions.set_trainers_waiting(conds, conditions.Reason.completed, "every trainer finished")
        conditions.set_succeeded(conds)
    elif obs.progress is not None:
        conditions.set_trainers_running(conds)
        if obs.phase == Phase.training.value:
            conditions.set_stalled(conds, obs.stalled)
    if obs.phase == Phase.failed.value:
        conditions.set_failed(conds, obs.failure_reason, obs.failure or "")
    ended = obs.phase in (Phase.succeeded.value, Phase.failed.value)
    if ended:
        for c in previous:  # a Stalled said while training ends as the operator's does: False / Stopped
            if c.type == ConditionType.stalled:
                conds.keep(c)
        stopped = {ConditionType.shards_ready: "shard servers", ConditionType.trainers_ready: "trainers"}
        conditions.set_stopped(conds, stopped, f"the run {obs.phase.lower()}")
    return GraphTrainingStatus(
        phase=obs.phase,
        conditions=conds.as_list(),
        partition=part,
        progress=obs.progress,
        shards=[
            ShardStatus(
                index=s["index"],
                state=ShardState.stopped if ended else s.get("state", "Pending"),
                address=s.get("address"),
                restarts=s.get("restarts", 0),
            )
            for s in obs.shards
        ],
        restarts=obs.restarts,
        start_time=obs.start_time,
        completion_time=obs.completion_time,
    )
