"""partition.algorithm auto as pure functions: which limit is the budget, and what it picks."""

from __future__ import annotations

import pytest

from graphtrain.runtime.partition import choice

pytestmark = pytest.mark.timeout(30)

GiB = 2**30


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ((1 * GiB, 2 * GiB, 3 * GiB, 4 * GiB), choice.Budget(1 * GiB, "partition.memoryLimit")),
        ((None, 2 * GiB, 3 * GiB, 4 * GiB), choice.Budget(2 * GiB, "partition.resources.limits.memory")),
        ((None, None, 3 * GiB, 4 * GiB), choice.Budget(3 * GiB, "the cgroup memory limit")),
        ((None, None, None, 4 * GiB), choice.Budget(4 * GiB, "the address-space limit (ulimit -v)")),
        ((None, None, None, None), choice.Budget(5 * GiB, "the memory available")),
    ],
)
def test_the_first_limit_set_is_the_budget(limits: tuple, expected: choice.Budget) -> None:
    assert choice.budget(*limits, available=5 * GiB) == expected


def test_process_limits_count_what_the_process_holds() -> None:
    rss, vms = 100, 1000
    assert choice.budget(None, 2 * GiB, None, None, 0, rss, vms).bytes == 2 * GiB - rss
    assert choice.budget(None, None, 3 * GiB, None, 0, rss, vms).bytes == 3 * GiB - rss
    assert choice.budget(None, None, None, 4 * GiB, 0, rss, vms).bytes == 4 * GiB - vms
    assert choice.budget(1 * GiB, None, None, None, 0, rss, vms).bytes == 1 * GiB  # the estimate's own
    assert choice.budget(None, None, None, 10, 0, rss, vms).bytes == 0
    line = choice.reason(3 * GiB, choice.budget(None, 2 * GiB, None, None, 0, GiB, 0), GiB // 2, 4)
    assert line.endswith(
        "which exceeds 1.0 GiB (2.0 GiB from partition.resources.limits.memory, less 1.0 GiB this "
        "process holds); fennel about 512.0 MiB in 4 parts)"
    )


@pytest.mark.parametrize(
    ("algorithm", "need", "stream", "expected"),
    [
        ("auto", 1 * GiB, 1, "metis"),
        ("auto", 2 * GiB, 1, "metis"),  # exactly the budget fits
        ("auto", 2 * GiB + 1, 1 * GiB, "fennel"),
        ("auto", 3 * GiB, 3 * GiB, "fennel"),  # neither fits, a tie: streaming
        # neither fits and fennel needs more (many parts, or fewer edges than a chunk): streaming would
        # only run out of memory sooner
        ("auto", 3 * GiB, 4 * GiB, "metis"),
        ("metis", 9 * GiB, 1, "metis"),  # an explicit choice stays (metis then refuses above memoryLimit)
        ("fennel", 1, 9 * GiB, "fennel"),
        ("random", 9 * GiB, 1, "random"),
    ],
)
def test_auto_picks_metis_when_it_fits_else_the_smaller_need(
    algorithm: str, need: int, stream: int, expected: str
) -> None:
    budget = choice.Budget(2 * GiB, "partition.memoryLimit")
    assert choice.choose(algorithm, need, budget, stream) == expected


def test_the_reason_names_both_needs_the_limit_and_its_source() -> None:
    budget = choice.Budget(2 * GiB, "partition.resources.limits.memory")
    assert choice.reason(3 * GiB, budget, GiB, 8) == (
        "partition.algorithm auto: fennel (METIS needs about 3.0 GiB, which exceeds 2.0 GiB from "
        "partition.resources.limits.memory; fennel about 1.0 GiB in 8 parts)"
    )
    assert choice.reason(3 * GiB, budget, 4 * GiB, 256) == (
        "partition.algorithm auto: metis (METIS needs about 3.0 GiB and fennel about 4.0 GiB in 256 parts, "
        "both above 2.0 GiB from partition.resources.limits.memory: METIS needs less)"
    )
    assert choice.reason(GiB, budget, 4 * GiB, 256) == (
        "partition.algorithm auto: metis (METIS needs about 1.0 GiB, which fits 2.0 GiB from "
        "partition.resources.limits.memory)"
    )
