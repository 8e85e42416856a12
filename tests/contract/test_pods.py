"""contract/spec/pods.py: the spec problems with what the pods would be given, Python's alone (a request
above its limit; dynamic vocabularies too large for any pod when the role states no memory)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from graphtrain.contract.spec import check, parse
from graphtrain.contract.spec.pods import (
    POD_MEMORY_CEILING,
    oversized_vocabularies,
    quantity_value,
    requests_above_limits,
)
from tests.contract.spec_cases import GRAPHSAGE, edit


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", 2),
        ("4Gi", 4 * 2**30),
        ("1e3", 1000),
        ("1.5k", 1500),
        ("+.5", Decimal("0.5")),
    ],
)
def test_a_quantity_reads_as_its_exact_value(text: str, value: Decimal) -> None:
    assert quantity_value(text) == value


def test_a_text_that_is_no_quantity_has_no_value() -> None:
    assert quantity_value("4GB") is None and quantity_value("-1") is None


def resources(role: str, requests: dict, limits: dict) -> dict:
    return edit(
        GRAPHSAGE, lambda s: s.update({role: {"resources": {"requests": requests, "limits": limits}}})
    )


@pytest.mark.parametrize(
    ("role", "name", "want", "limit"),
    [
        ("trainers", "memory", "8Gi", "4Gi"),
        ("shardServers", "cpu", "1500m", "1"),
        ("partition", "ephemeral-storage", "10G", "9Gi"),
        ("trainers", "nvidia.com/gpu", "2", "1"),
    ],
)
def test_a_request_above_its_limit_names_both_fields(role: str, name: str, want: str, limit: str) -> None:
    problems = check(resources(role, {name: want}, {name: limit}))[1]
    assert [str(p) for p in problems] == [
        f"spec.{role}.resources.requests.{name}: {want} is above spec.{role}.resources.limits.{name} "
        f"{limit}: Kubernetes refuses a pod whose request is above its limit"
    ]


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"memory": "4096Mi", "cpu": "1000m"}, {"memory": "4Gi", "cpu": "1"}),  # equal, other units
        ({"memory": "8Gi"}, {"cpu": "1"}),  # no limit of the same resource
        ({}, {"memory": "1Gi"}),
    ],
)
def test_a_request_at_or_below_its_limit_or_without_one_is_fine(requests: dict, limits: dict) -> None:
    assert requests_above_limits(parse(resources("trainers", requests, limits)).spec) == []


def dynamic(capacity: int, dim: int = 128, **spec: object) -> dict:
    return edit(
        GRAPHSAGE,
        lambda s: (
            s["embeddings"][0].update(vocabulary={"kind": "dynamic", "capacity": capacity}, dim=dim),
            s.update(spec),
        ),
    )


def test_a_dynamic_vocabulary_beyond_any_pod_is_refused_naming_table_and_need() -> None:
    problems = check(dynamic(10**12))[1]  # 10^12 rows x (128 x 4 + 16) bytes over 2 shard servers
    assert [str(p) for p in problems] == [
        "spec.embeddings[0].vocabulary.capacity: dynamic vocabulary of node needs at least 240.1Ti per "
        "shard server (its rows and keys alone), above the 4.0Ti the operator requests for a pod on its "
        "own; state spec.shardServers.resources.limits.memory or lower the capacity"
    ]


def test_a_collective_vocabulary_is_weighed_per_trainer() -> None:
    doc = dynamic(10**12, trainers={"replicas": 4})
    doc["spec"]["embeddings"][0]["sharding"] = "collective"
    doc["spec"]["model"]["kind"] = "graphsage"
    (problem,) = check(doc)[1]
    assert "per trainer" in problem.message and "spec.trainers.resources.limits.memory" in problem.message


@pytest.mark.parametrize(
    "doc",
    [
        dynamic(10**9),  # 10^9 rows over 2 shards: about 245Gi each, below the ceiling
        dynamic(10**12, shardServers={"resources": {"limits": {"memory": "300Ti"}}}),  # stated: kept
        dynamic(10**12, shardServers={"resources": {"requests": {"memory": "300Ti"}}}),
    ],
    ids=["below-the-ceiling", "limit-stated", "request-stated"],
)
def test_a_vocabulary_that_fits_or_whose_role_states_memory_is_not_refused(doc: dict) -> None:
    assert check(doc)[1] == []


def test_the_ceiling_counts_rows_on_the_gpu_out() -> None:
    """With shardServers.device cuda the rows live on the GPU: only their keys weigh on the pod."""
    assert check(dynamic(10**11))[1] != []  # on CPU: about 24Ti per shard server
    spec = parse(dynamic(10**11, shardServers={"device": "cuda"})).spec  # keys alone: about 0.7Ti
    assert oversized_vocabularies(spec) == []
    assert oversized_vocabularies(spec, ceiling=POD_MEMORY_CEILING // 8) != []


def test_a_field_that_failed_the_schema_skips_the_check() -> None:
    problems = check(dynamic(10**12, dim="wide"))[1]
    assert [p.path for p in problems] == ["spec.embeddings[0].dim"]


# What the API server refuses of a resource it cannot overcommit (extended resources, hugepages); the
# same cases go to a real API server in tests/operator/test_resources_apiserver.py.
NOT_OVERCOMMITABLE = [
    ("trainers", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}, "requests.nvidia.com/gpu", "is below"),
    (
        "shardServers",
        {"hugepages-2Mi": "1Gi"},
        {"hugepages-2Mi": "2Gi"},
        "requests.hugepages-2Mi",
        "is below",
    ),
    ("trainers", {"example.com/fpga": "1"}, {}, "requests.example.com/fpga", "has no"),
    ("partition", {}, {"example.com/fpga": "500m"}, "limits.example.com/fpga", "not a whole number"),
    ("trainers", {"nvidia.com/gpu": "1.5"}, {"nvidia.com/gpu": "1.5"}, "requests.nvidia.com/gpu", "whole"),
]
OVERCOMMITABLE_OR_EQUAL = [
    ("trainers", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"}),
    ("trainers", {}, {"nvidia.com/gpu": "1"}),  # the request defaults to the limit
    ("trainers", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}),
    ("shardServers", {"hugepages-2Mi": "1Gi"}, {"hugepages-2Mi": "1Gi", "memory": "2Gi"}),
]


@pytest.mark.parametrize(("role", "requests", "limits", "field", "says"), NOT_OVERCOMMITABLE)
def test_a_resource_that_cannot_be_overcommitted_needs_a_whole_limit_equal_to_its_request(
    role: str, requests: dict, limits: dict, field: str, says: str
) -> None:
    problems = check(resources(role, requests, limits))[1]
    paths = [p.path for p in problems]
    assert paths and set(paths) <= {
        f"spec.{role}.resources.{field}",
        f"spec.{role}.resources.limits.{field.split('.', 1)[1]}",
    }
    assert says in str(problems[0]) and len(str(problems[0]).splitlines()) == 1


@pytest.mark.parametrize(("role", "requests", "limits"), OVERCOMMITABLE_OR_EQUAL)
def test_a_limit_equal_to_the_request_or_a_native_resource_below_it_is_fine(
    role: str, requests: dict, limits: dict
) -> None:
    assert requests_above_limits(parse(resources(role, requests, limits)).spec) == []


def test_a_gpu_request_without_a_limit_is_fine_on_a_cuda_role_the_operator_gives_it_the_limit() -> None:
    doc = edit(
        GRAPHSAGE,
        lambda s: s.update(
            trainers={"device": "cuda", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
        ),
    )
    assert requests_above_limits(parse(doc).spec) == []
    on_cpu = resources("trainers", {"nvidia.com/gpu": "1"}, {})
    assert [p.path for p in check(on_cpu)[1]] == ["spec.trainers.resources.requests.nvidia.com/gpu"]
