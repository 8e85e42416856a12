"""One progress schema: what a trainer reports through either sink (progress.json in a run directory, the
progress ConfigMap in a pod) is the spec's Progress, and each executor reads it back with the same
decoder."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from graphtrain.contract import reporting, rundir
from graphtrain.contract.spec import Progress, load_yaml
from graphtrain.operator import observation
from graphtrain.runtime.launch import status
from graphtrain.runtime.train import progress_k8s
from graphtrain.runtime.train.metrics import TrainerMetrics
from graphtrain.runtime.train.reporter import Reporter
from graphtrain.runtime.train.sinks import progress_sinks
from graphtrain.runtime.train.tally import TrainerProgress

EXAMPLE = Path(__file__).parents[2] / "examples" / "nations-transe.yaml"


def tally(**kw: Any) -> TrainerProgress:
    return TrainerProgress(
        **{"epoch": 2, "epochs": 5, "step": 40, "loss": 0.25, "samples_per_second": 1200.0, **kw}
    )


class FakeApi:
    """CoreV1Api's one call a trainer makes."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def patch_namespaced_config_map(
        self, name: str, namespace: str, body: dict[str, Any], _request_timeout: Any = None
    ) -> None:
        assert _request_timeout == progress_k8s.ConfigMapSink.TIMEOUT  # a hung API server cannot hang it
        self.patches.append((name, namespace, body))

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        return SimpleNamespace(data=None)  # a new training's ConfigMap: no history yet


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(progress_k8s, "load_config", lambda: None)
    monkeypatch.setattr(progress_k8s.kubernetes.client, "CoreV1Api", lambda: fake)
    return fake


def test_both_sinks_write_the_spec_schema_and_both_executors_read_it(tmp_path: Path, api: FakeApi) -> None:
    sinks = progress_sinks(tmp_path, 0, "t-progress")
    assert [type(s).__name__ for s in sinks] == ["FileSink", "HeartbeatFileSink", "ConfigMapSink"]
    Reporter(0, sinks, echo=False).report(tally(eval_metric="val_accuracy", eval_value=0.8))

    on_disk = json.loads((tmp_path / rundir.PROGRESS_FILE).read_text())
    ((name, _, body),) = api.patches
    assert name == "t-progress"
    in_map = json.loads(body["data"][reporting.PROGRESS_KEY])
    assert on_disk == in_map == json.loads(body["data"]["rank-0"])
    assert Progress.model_validate(on_disk).summary == "epoch 2/5  loss 0.2500  val_accuracy 0.8000"
    assert set(on_disk) <= {f.alias for f in Progress.model_fields.values()}  # nothing beside the schema

    # the launcher's status and the operator's status carry the same document
    report = reporting.decode((tmp_path / rundir.PROGRESS_FILE).read_text())
    gt = load_yaml(EXAMPLE.read_text())
    local = status.build(gt, status.RunObserved(progress=report), [], "2026-01-01T00:00:00+00:00")
    operator = observation.progress_status({"data": body["data"]})
    assert local.model_dump(by_alias=True, exclude_none=True, mode="json")["progress"] == operator["progress"]


def test_only_rank_zero_writes_the_file_and_every_rank_its_heartbeat(tmp_path: Path, api: FakeApi) -> None:
    assert [type(s).__name__ for s in progress_sinks(tmp_path, 1, None)] == ["HeartbeatFileSink"]
    assert progress_sinks(None, 1, None) == []
    Reporter(1, progress_sinks(tmp_path, 1, "t-progress"), echo=False).report(tally(), epoch_end=True)
    assert not (tmp_path / rundir.PROGRESS_FILE).exists()
    assert not (tmp_path / rundir.HISTORY_FILE).exists()  # the history is rank 0's
    on_disk = reporting.decode((tmp_path / rundir.rank_file(1)).read_text())
    assert on_disk is not None and on_disk.step == 40
    ((_, _, body),) = api.patches
    assert set(body["data"]) == {"rank-1"}
    beat = reporting.rank_report(body["data"], 1)
    assert beat is not None and beat.step == 40 and beat.updated_at


def test_rank_zero_keeps_one_history_entry_per_epoch_end_in_both_sinks(tmp_path: Path, api: FakeApi) -> None:
    metrics = TrainerMetrics(0, CollectorRegistry())
    reporter = Reporter(0, progress_sinks(tmp_path, 0, "t-progress"), echo=False, metrics=metrics)
    for epoch in (1, 2):
        reporter.report(tally(epoch=epoch))  # a step window's report: no entry
        tallied = tally(epoch=epoch, eval_metric="val_mrr", eval_value=0.1 * epoch)
        reporter.report(tallied, epoch_end=True, evaluated=True)
    history = reporting.decode_history((tmp_path / rundir.HISTORY_FILE).read_text())
    assert [(p.epoch, p.eval_value) for p in history] == [(1, 0.1), (2, 0.2)]
    assert all(reporting.HISTORY_KEY not in b["data"] for _, _, b in api.patches)  # within a heartbeat
    reporter.report(tally(epoch=2, state="Succeeded"))  # the final report carries it
    assert reporting.decode_history(api.patches[-1][2]["data"][reporting.HISTORY_KEY]) == history
    # the gauges follow the reports
    assert metrics.registry.get_sample_value("graphtrain_trainer_epoch", {"rank": "0"}) == 2
    assert metrics.registry.get_sample_value("graphtrain_trainer_loss", {"rank": "0"}) == 0.25
    said = {"rank": "0", "metric": "val_mrr"}
    assert metrics.registry.get_sample_value("graphtrain_trainer_eval_metric", said) == pytest.approx(0.2)
    stamp = metrics.registry.get_sample_value(
        "graphtrain_trainer_last_report_timestamp_seconds", {"rank": "0"}
    )
    assert stamp is not None and abs(stamp - time.time()) < 60

    # a restarted rank 0 continues the history it finds; epochs trained again replace their entries
    again = Reporter(0, progress_sinks(tmp_path, 0, None), echo=False)
    again.report(tally(epoch=2, eval_metric="val_mrr", eval_value=0.5), epoch_end=True, evaluated=True)
    history = reporting.decode_history((tmp_path / rundir.HISTORY_FILE).read_text())
    assert [(p.epoch, p.eval_value) for p in history] == [(1, 0.1), (2, 0.5)]
    # an epoch without an evaluation carries none (the last one's value, repeated, read as measured)
    again.report(tally(epoch=3, eval_metric="val_mrr", eval_value=0.5), epoch_end=True)
    history = reporting.decode_history((tmp_path / rundir.HISTORY_FILE).read_text())
    assert [(p.epoch, p.eval_metric, p.eval_value) for p in history][-1] == (3, None, None)


def test_the_history_goes_with_the_next_patch_sent_and_the_final_one(api: FakeApi) -> None:
    now = [100.0]
    sink = progress_k8s.ConfigMapSink("t-progress", 0, clock=lambda: now[0])
    one, two = tally(epoch=1).to_spec(), tally(epoch=2).to_spec()
    sink.write(one, False, [one])  # sent at once with it
    now[0] = 101.0
    sink.write(two, False, [one, two])  # within the heartbeat: kept
    now[0] = 102.0
    sink.write(two, final=True)  # the final report carries it
    keys = [set(b["data"]) for _, _, b in api.patches]
    assert keys == [{"rank-0", "progress", "history"}] * 2
    assert reporting.decode_history(api.patches[-1][2]["data"]["history"]) == [one, two]
    sink.write(two, final=True)
    assert "history" not in api.patches[-1][2]["data"]  # sent once


def test_a_restarted_rank_reads_the_history_from_the_config_map(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = reporting.encode_history([tally(epoch=1).to_spec()])
    api.read_namespaced_config_map = lambda name, ns: SimpleNamespace(data={"history": stored})  # type: ignore[attr-defined]
    assert [p.epoch for p in progress_k8s.ConfigMapSink("t-progress", 0).load_history()] == [1]

    def gone(name: str, ns: str) -> None:
        raise progress_k8s.kubernetes.client.ApiException(status=403, reason="Forbidden")

    api.read_namespaced_config_map = gone  # type: ignore[attr-defined]
    assert progress_k8s.ConfigMapSink("t-progress", 0).load_history() == []


def test_the_config_map_is_patched_at_most_every_heartbeat_and_always_at_the_end(api: FakeApi) -> None:
    now = [100.0]
    sink = progress_k8s.ConfigMapSink("t-progress", 0, namespace="ml", clock=lambda: now[0])
    report = tally().to_spec()
    for t, final in [(100.0, False), (101.0, False), (104.9, False), (105.0, False), (105.1, True)]:
        now[0] = t
        sink.write(report, final)
    assert len(api.patches) == 3 and {ns for _, ns, _ in api.patches} == {"ml"}


def test_a_patch_refused_for_a_conflict_is_sent_again(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks patch one ConfigMap; a server that does not retry a patch's conflict itself answers
    409 to one of them. The final report (the test metric) must not be lost to it (the shard-fault
    test saw a Succeeded training keep epoch 83's val_mrr)."""
    refusals = [2]
    patch = api.patch_namespaced_config_map

    def contested(name: str, namespace: str, body: dict[str, Any], **kw: Any) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise progress_k8s.kubernetes.client.ApiException(status=409, reason="Conflict")
        patch(name, namespace, body, **kw)

    monkeypatch.setattr(api, "patch_namespaced_config_map", contested)
    monkeypatch.setattr(progress_k8s.time, "sleep", lambda s: None)
    progress_k8s.ConfigMapSink("t-progress", 0).write(tally().to_spec(), final=True)
    assert len(api.patches) == 1


def test_a_failed_patch_costs_a_heartbeat_not_the_training(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def refuse() -> None:
        raise RuntimeError("no cluster here")

    monkeypatch.setattr(progress_k8s, "load_config", refuse)
    progress_k8s.ConfigMapSink("t-progress", 0).write(tally().to_spec(), final=True)
    assert "no cluster here" in capsys.readouterr().err


@pytest.mark.parametrize("text", [None, "", "{", '{"step": -1}', '{"nope": 1}', "[]"])
def test_an_unreadable_report_reads_as_none(text: str | None) -> None:
    assert reporting.decode(text) is None


def test_a_report_round_trips() -> None:
    p = Progress(
        epoch=1, epochs=2, step=3, loss=0.5, summary="x", updated_at=dt.datetime(2026, 1, 1).isoformat()
    )
    assert reporting.decode(reporting.encode(p)) == p


def test_only_rank_zero_exports_the_eval_metric() -> None:
    metrics = TrainerMetrics(1, CollectorRegistry())
    Reporter(1, [], echo=False, metrics=metrics).report(tally(eval_metric="val_mrr", eval_value=0.5))
    assert (
        metrics.registry.get_sample_value(
            "graphtrain_trainer_eval_metric", {"rank": "1", "metric": "val_mrr"}
        )
        is None
    )
    assert metrics.registry.get_sample_value("graphtrain_trainer_epoch", {"rank": "1"}) == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_diverging_training_reports_its_loss_absent_and_keeps_training(bad: float) -> None:
    """The schema refuses NaN and infinity; a trainer whose loss diverged died on its own report."""
    report = TrainerProgress(epoch=1, epochs=2, step=3, loss=bad, samples_per_second=bad).to_spec()
    assert report.loss is None and report.samples_per_second is None
    assert reporting.decode(reporting.encode(report)) == report
    assert str(bad) in report.summary  # people still see it
