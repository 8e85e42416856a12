"""contract/memory.py: the rules the operator sizes pods by and the words it refuses a small limit in."""

from __future__ import annotations

import pytest

from graphtrain.contract import memory
from graphtrain.contract.spec import MemoryNeed, Resources

MiB, GiB = 2**20, 2**30
DEFAULT = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}


@pytest.mark.parametrize(("n", "want"), [(1, "1Mi"), (MiB, "1Mi"), (MiB + 1, "2Mi"), (3 * GiB, "3072Mi")])
def test_a_need_reads_as_a_quantity_rounded_up_to_a_mib(n: int, want: str) -> None:
    assert memory.quantity(n) == want


@pytest.mark.parametrize(
    ("resources", "need", "want"),
    [
        (DEFAULT, GiB, DEFAULT),  # the default request covers it: unchanged
        (  # raised to the need, the default limit by as much (its 6Gi headroom kept)
            DEFAULT,
            5 * GiB,
            {"requests": {"cpu": "1", "memory": "5120Mi"}, "limits": {"cpu": "2", "memory": "11264Mi"}},
        ),
        ({"requests": {"cpu": "1"}}, 3 * GiB, {"requests": {"cpu": "1", "memory": "3072Mi"}}),  # no limit
        ({}, GiB, {"requests": {"memory": "1024Mi"}}),
    ],
)
def test_sized_raises_the_request_to_the_need_and_the_limit_by_as_much(
    resources: dict, need: int, want: dict
) -> None:
    assert memory.sized(resources, need) == want
    assert resources.get("requests", {}).get("memory") in (None, "2Gi")  # the input is not changed


@pytest.mark.parametrize(
    ("resources", "stated"),
    [
        (None, False),
        (Resources(requests={"cpu": "2"}), False),
        (Resources(requests={"memory": "1Gi"}), True),
        (Resources(limits={"memory": "1Gi"}), True),
    ],
)
def test_a_role_states_its_memory_by_a_request_or_a_limit(resources: Resources | None, stated: bool) -> None:
    assert memory.states_memory(resources) is stated


def test_a_limit_below_the_need_is_a_problem_naming_field_limit_and_need() -> None:
    need = MemoryNeed(shard_server=600 * MiB, trainer=3 * GiB)
    found = memory.limit_problems(need, {"shardServers": "512Mi", "trainers": "2Gi"})
    assert [str(p).split(":")[0] for p in found] == [
        "spec.shardServers.resources.limits.memory",
        "spec.trainers.resources.limits.memory",
    ]
    assert "512Mi is below the 600Mi a shard server needs" in str(found[0])
    assert "2Gi is below the 3072Mi a trainer needs (its process, and its share of any collective" in str(
        found[1]
    )
    assert "add trainers (trainers.replicas) when collective tables" in str(found[1])


@pytest.mark.parametrize("limit", [None, "3Gi", "4Gi", "500m"])  # none, enough, or not in bytes: no problem
def test_a_limit_that_holds_the_need_or_none_is_no_problem(limit: str | None) -> None:
    assert memory.limit_problems(MemoryNeed(shard_server=0, trainer=3 * GiB), {"trainers": limit}) == []
