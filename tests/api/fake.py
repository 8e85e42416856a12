"""A status source held in memory, for the API's tests: trainings built from literal values, and
switches that make it fail as a real source can (unavailable: 503; broken: an unexpected error, 500)."""

from __future__ import annotations

from graphtrain.api import models
from graphtrain.api.sources.base import ListQuery, NotFound, SourceUnavailable, page
from graphtrain.contract.reporting import encode_history
from graphtrain.contract.spec import (
    Condition,
    ConditionType,
    GraphTrainingSpec,
    GraphTrainingStatus,
    Phase,
    Progress,
    ShardState,
    ShardStatus,
)

SPEC = {
    "graph": {"dataset": "wordnet"},
    "embeddings": [{"name": "node", "dim": 8}],
    "model": {"nodeEmbedding": "node"},
    "partition": {"parts": 2},
    "trainers": {"replicas": 2},
}
AT = "2025-01-02T03:04:05+00:00"


def progress(epoch: int, loss: float = 1.0) -> Progress:
    return Progress(
        epoch=epoch,
        epochs=10,
        step=epoch * 20,
        loss=loss,
        samples_per_second=1000.0 + epoch,
        eval_metric="val_accuracy",
        eval_value=0.5 + epoch / 100,
        summary=f"epoch {epoch}/10",
        updated_at=AT,
    )


def training(
    namespace: str, name: str, phase: Phase = Phase.training, labels: dict[str, str] | None = None
) -> models.TrainingResource:
    status = GraphTrainingStatus(
        phase=phase,
        conditions=[
            Condition(type=ConditionType.spec_valid, status="True", reason="Valid", last_transition_time=AT),
            Condition(
                type=ConditionType.failed,
                status="True" if phase == Phase.failed else "False",
                reason="ProcessFailed" if phase == Phase.failed else "NotFailed",
                last_transition_time=AT,
            ),
        ],
        progress=progress(3),
        shards=[ShardStatus(index=i, state=ShardState.ready, restarts=i) for i in range(2)],
        restarts=1,
        start_time=AT,
    )
    return models.TrainingResource(
        metadata=models.Metadata(namespace=namespace, name=name, labels=labels or {}, creation_timestamp=AT),
        spec=models.spec_summary(GraphTrainingSpec.model_validate(SPEC)),
        status=status,
        trainers=[
            models.TrainerStatus(
                rank=r, state=models.TrainerState.running, last_heartbeat=AT, progress=progress(3)
            )
            for r in range(2)
        ],
    )


class FakeSource:
    def __init__(self, trainings: list[models.TrainingResource]):
        self.trainings = {(t.metadata.namespace, t.metadata.name): t for t in trainings}
        self.unavailable = False
        self.broken = False
        self.calls = 0

    def _answer(self) -> None:
        self.calls += 1
        if self.unavailable:
            raise SourceUnavailable("the fake source is down")
        if self.broken:
            raise RuntimeError("/secret/path token=abc: an unexpected failure")

    def _get(self, namespace: str, name: str) -> models.TrainingResource:
        self._answer()
        try:
            return self.trainings[(namespace, name)]
        except KeyError:
            raise NotFound(f"no training {namespace}/{name}") from None

    def list_trainings(self, query: ListQuery) -> models.TrainingList:
        self._answer()
        return page((models.summary(t.metadata, t.status) for t in self.trainings.values()), query)

    def get_training(self, namespace: str, name: str) -> models.TrainingResource:
        return self._get(namespace, name)

    def events(self, namespace: str, name: str) -> list[models.TrainingEvent]:
        return models.condition_events(self._get(namespace, name).status, "fake")

    def history(self, namespace: str, name: str) -> bytes:
        self._get(namespace, name)
        return models.history_answer(encode_history([progress(e, loss=1.0 / (e + 1)) for e in range(1, 4)]))

    def check(self) -> None:
        self._answer()


def many(count: int = 7) -> list[models.TrainingResource]:
    """Trainings in two namespaces, with labels and phases to filter on."""
    phases = [Phase.training, Phase.succeeded, Phase.failed]
    return [
        training(
            "team-a" if i % 2 == 0 else "team-b",
            f"job-{i}",
            phases[i % 3],
            {"team": "a" if i % 2 == 0 else "b", "size": "big" if i < 3 else "small"},
        )
        for i in range(count)
    ]


def epochs(answer: bytes) -> list[int]:
    """The epochs of a source's /history answer, read back through the History model (its schema)."""
    return [p.epoch for p in models.History.model_validate_json(answer).items]
