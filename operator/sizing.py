"""The memory stage, in plan()'s order between the partition and the shard servers: once the partition
measured what each role's pods need (status.partition.memory), shard servers or trainers whose memory
limit is below it are refused before any of them is made. The training fails (Failed /
InsufficientMemory, and its event) naming each role's field, limit and need, and no StatefulSet or
trainer pod is created: a pod that would be OOM-killed for sure is not worth scheduling. A role whose
spec states no memory is never refused: its request is sized to the need (contract/memory.py).
"""

from __future__ import annotations

from graphtrain.contract import conditions, memory
from graphtrain.contract.spec import GraphTrainingSpec, MemoryNeed, Phase, Problem
from graphtrain.operator import placement
from graphtrain.operator.config import OperatorConfig
from graphtrain.operator.context import Context, Step, clean_up

ROLES: tuple[tuple[str, placement.Role], ...] = (("shardServers", "shards"), ("trainers", "trainer"))
"""The roles whose memory is checked: the spec's field, the pods' role."""


def pod_limits(spec: GraphTrainingSpec, config: OperatorConfig, need: MemoryNeed) -> dict[str, str | None]:
    """The memory limit each role's pods get (the spec's, else the default's sized to the need), by
    the spec's field; None: no memory limit."""
    needs = {"shards": need.shard_server, "trainer": need.trainer}
    return {
        field: placement.pod_settings(spec, config, role, needs[role])
        .resources.get("limits", {})
        .get("memory")
        for field, role in ROLES
    }


def refusals(spec: GraphTrainingSpec, config: OperatorConfig, need: MemoryNeed) -> list[Problem]:
    """The roles whose pods' memory limit cannot hold what they need, each naming limit and need."""
    return memory.limit_problems(need, pod_limits(spec, config, need))


def memory_stage(ctx: Context, conds: conditions.Conditions) -> Step:
    """Refuse the training (Failed / InsufficientMemory) when a role's memory limit is below its need;
    hand on when it fits or the partition said no need."""
    need = ctx.memory
    found = refusals(ctx.gt.spec, ctx.config, need) if need is not None else []
    if not found:
        return Step()
    conditions.set_failed(conds, conditions.Reason.insufficient_memory, "; ".join(map(str, found)))
    return Step(clean_up(ctx), phase=Phase.failed)
