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
    line = choice.reason("auto", 3 * GiB, choice.budget(None, 2 * GiB, None, None, 0, GiB, 0))
    assert line.endswith(
        "which exceeds 1.0 GiB (2.0 GiB from partition.resources.limits.memory, less 1.0 GiB this "
        "process holds))"
    )


@pytest.mark.parametrize(
    ("algorithm", "need", "expected"),
    [
        ("auto", 1 * GiB, "metis"),
        ("auto", 2 * GiB, "metis"),  # exactly the budget fits
        ("auto", 2 * GiB + 1, "fennel"),
        ("metis", 9 * GiB, "metis"),  # an explicit choice stays (metis then refuses above memoryLimit)
        ("fennel", 1, "fennel"),
        ("random", 9 * GiB, "random"),
    ],
)
def test_auto_picks_metis_when_it_fits(algorithm: str, need: int, expected: str) -> None:
    assert choice.choose(algorithm, need, choice.Budget(2 * GiB, "partition.memoryLimit")) == expected


def test_the_reason_names_need_limit_and_source() -> None:
    line = choice.reason("auto", 3 * GiB, choice.Budget(2 * GiB, "partition.resources.limits.memory"))
    assert line == (
        "partition.algorithm auto: fennel (METIS needs about 3.0 GiB, which exceeds 2.0 GiB from "
        "partition.resources.limits.memory)"
    )
