"""The executor-level training metrics (spec.telemetry): one pure mapping from a status to samples,
which the operator and the launcher both export."""

from __future__ import annotations

from typing import Any

import pytest

from graphtrain.contract import telemetry
from graphtrain.contract.spec import GraphTrainingStatus, Phase

PHASES = [p.value for p in Phase]


def values(samples: list[telemetry.Sample], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in samples if s.name == name}


def one(samples: list[telemetry.Sample], name: str) -> float | None:
    found = [s.value for s in samples if s.name == name]
    assert len(found) <= 1
    return found[0] if found else None


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "a new training: pending, nothing reported yet",
        {},
        {"phase": "Pending", "restarts": 0, "shards": {}, "epoch": 0, "ratio": 0.0, "stamp": None},
    ),
    (
        "training, half way, a shard restarted twice",
        {
            "phase": "Training",
            "restarts": 1,
            "shards": [{"index": 0, "restarts": 0}, {"index": 1, "restarts": 2}],
            "progress": {"epoch": 5, "epochs": 10, "updatedAt": "2025-01-02T03:04:05+00:00"},
        },
        {
            "phase": "Training",
            "restarts": 1,
            "shards": {"0": 0, "1": 2},
            "epoch": 5,
            "ratio": 0.5,
            "stamp": 1735787045.0,
        },
    ),
    (
        "epochs unknown: the ratio is 0; a Z time and a naive one are UTC",
        {"phase": "Starting", "progress": {"epoch": 3, "epochs": 0, "updatedAt": "2025-01-02T03:04:05Z"}},
        {"phase": "Starting", "restarts": 0, "shards": {}, "epoch": 3, "ratio": 0.0, "stamp": 1735787045.0},
    ),
    (
        "an unreadable time: no timestamp sample (an alert on its age must not fire)",
        {"phase": "Succeeded", "progress": {"epoch": 4, "epochs": 4, "updatedAt": "yesterday"}},
        {"phase": "Succeeded", "restarts": 0, "shards": {}, "epoch": 4, "ratio": 1.0, "stamp": None},
    ),
    (
        "failed after restarts",
        {"phase": "Failed", "restarts": 3, "progress": {"epoch": 1, "epochs": 4}},
        {"phase": "Failed", "restarts": 3, "shards": {}, "epoch": 1, "ratio": 0.25, "stamp": None},
    ),
]


@pytest.mark.parametrize(("status", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_training_samples(status: dict[str, Any], expected: dict[str, Any]) -> None:
    samples = telemetry.training_samples("ns", "gt", GraphTrainingStatus.model_validate(status))
    training = {"namespace": "ns", "training": "gt"}
    assert all(s.labels.items() >= training.items() for s in samples)
    phases = {dict(k)["phase"]: v for k, v in values(samples, telemetry.PHASE.name).items()}
    assert phases == {p: float(p == expected["phase"]) for p in PHASES}  # every phase, one of them 1
    assert one(samples, telemetry.RESTARTS.name) == expected["restarts"]
    shards = {dict(k)["shard"]: v for k, v in values(samples, telemetry.SHARD_RESTARTS.name).items()}
    assert shards == expected["shards"]
    assert one(samples, telemetry.EPOCH.name) == expected["epoch"]
    assert one(samples, telemetry.PROGRESS_RATIO.name) == expected["ratio"]
    assert one(samples, telemetry.LAST_PROGRESS.name) == expected["stamp"]


def test_a_naive_time_is_utc() -> None:
    assert telemetry.unix_seconds("2025-01-02T03:04:05") == 1735787045.0
    assert telemetry.unix_seconds("2025-01-02T04:04:05+01:00") == 1735787045.0
    assert telemetry.unix_seconds(None) is None and telemetry.unix_seconds("") is None


def test_every_sample_has_exactly_its_familys_labels_and_grouped_keeps_every_family() -> None:
    status = GraphTrainingStatus.model_validate(
        {"shards": [{"index": 0}], "progress": {"epoch": 1, "epochs": 2, "updatedAt": "2025-01-01T00:00:00Z"}}
    )
    samples = telemetry.training_samples("ns", "gt", status)
    families = {f.name: f for f in telemetry.FAMILIES}
    assert {s.name for s in samples} == set(families)
    for s in samples:
        assert tuple(s.labels) == families[s.name].labels
    groups = telemetry.grouped(samples)
    assert [f for f, _ in groups] == list(telemetry.FAMILIES)
    assert sum(len(v) for _, v in groups) == len(samples)
    phase_values = dict(groups)[telemetry.PHASE]
    assert (["ns", "gt", "Pending"], 1.0) in phase_values
    assert all(len(f.labels) == len(lv) for f, v in groups for lv, _ in v)
    assert all(f.name.startswith("graphtrain_training_") for f in telemetry.FAMILIES)
    assert [f for f, v in telemetry.grouped([]) if v] == []  # no training: every family, no sample
