"""The file_sd targets a local run writes (launch/targets.py) and how the launcher keeps them."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from graphtrain.contract.spec import Phase, parse
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch import local, plan, processes, targets
from tests.contract.spec_cases import GRAPHSAGE


def test_the_document_has_every_known_port_with_its_labels() -> None:
    doc = targets.document(
        "ml", "wn", [7001, None], [8001, 8002], 9001, [("graphtrain-api", 9500, {"extra": "x"})]
    )
    assert doc == [
        {
            "targets": ["127.0.0.1:7001"],
            "labels": {"job": "graphtrain-shard", "namespace": "ml", "training": "wn", "shard": "0"},
        },
        {
            "targets": ["127.0.0.1:8001"],
            "labels": {"job": "graphtrain-trainer", "namespace": "ml", "training": "wn", "rank": "0"},
        },
        {
            "targets": ["127.0.0.1:8002"],
            "labels": {"job": "graphtrain-trainer", "namespace": "ml", "training": "wn", "rank": "1"},
        },
        {
            "targets": ["127.0.0.1:9001"],
            "labels": {"job": "graphtrain-launcher", "namespace": "ml", "training": "wn"},
        },
        {
            "targets": ["127.0.0.1:9500"],
            "labels": {"job": "graphtrain-api", "namespace": "ml", "training": "wn", "extra": "x"},
        },
    ]
    assert targets.document("ml", "wn", [], [], None) == []


def test_the_file_is_replaced_whole(tmp_path: Path) -> None:
    path = targets.write(tmp_path, [targets.target("j", 1, "ns", "t")])
    assert path == tmp_path / "prometheus" / "targets.json"
    targets.write(tmp_path, [])
    assert json.loads(path.read_text()) == []
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]  # no temporary file left


def fake_child(tmp_path: Path, rank: int, pid: int) -> processes.Child:
    proc = subprocess.Popen.__new__(subprocess.Popen)
    proc.pid = pid
    p = plan.ProcessPlan(f"trainer-{rank}", [], plan.port_file(tmp_path, rank))
    return processes.Child(p, proc, tmp_path / "log")


def test_a_trainers_port_is_learnt_from_its_own_port_file_only(tmp_path: Path) -> None:
    child = fake_child(tmp_path, 1, pid=os.getpid())
    assert not child.learn_port()  # not written yet
    assert child.plan.port_file is not None
    child.plan.port_file.parent.mkdir(parents=True)
    child.plan.port_file.write_text(json.dumps({"port": 4242, "pid": os.getpid() + 1}))
    assert not child.learn_port() and child.metrics_port is None  # a predecessor's
    child.plan.port_file.write_text("{half")
    assert not child.learn_port()
    child.plan.port_file.write_text(json.dumps({"port": 4242, "pid": os.getpid()}))
    assert child.learn_port() and child.metrics_port == 4242
    assert not child.learn_port()  # known already: nothing new


def test_the_launcher_rewrites_its_targets_with_the_callers_ones(tmp_path: Path) -> None:
    gt = parse({**GRAPHSAGE, "metadata": {"name": "wn", "namespace": "ml"}})
    run = local.LocalRun(gt, tmp_path / "spec.yaml", tmp_path / "run", echo=False)
    run.add_target(targets.JOB_API, 9500)  # before the run: kept for its first write
    assert not (run.run_dir / targets.TARGETS_FILE).exists()
    run.metrics_port = 9001
    run.trainers = [fake_child(tmp_path, 0, pid=1)]
    run.trainers[0].metrics_port = 8001
    run.write_targets()
    run.add_target("graphtrain-other", 9600, {"k": "v"})  # during the run: written at once
    doc = json.loads((run.run_dir / targets.TARGETS_FILE).read_text())
    assert [(e["labels"]["job"], e["targets"][0]) for e in doc] == [
        ("graphtrain-trainer", "127.0.0.1:8001"),
        ("graphtrain-launcher", "127.0.0.1:9001"),
        ("graphtrain-api", "127.0.0.1:9500"),
        ("graphtrain-other", "127.0.0.1:9600"),
    ]
    assert {e["labels"]["namespace"] for e in doc} == {"ml"} and doc[-1]["labels"]["k"] == "v"


def test_a_run_directory_deleted_mid_run_is_not_made_again_for_the_targets(tmp_path: Path) -> None:
    """The user deleted the run directory while the run ran: stopping, and a target added late, write no
    targets file, so no prometheus/ alone makes the next run into it refuse it as someone else's."""
    import shutil

    from graphtrain.runtime.launch.reuse import foreign_run_dir

    run = local.LocalRun(parse(GRAPHSAGE), tmp_path / "spec.yaml", tmp_path / "run", echo=False)
    run.write_targets()
    shutil.rmtree(run.run_dir)
    run.add_target(targets.JOB_API, 9500)
    run._stop_metrics()
    assert not run.run_dir.exists()
    assert foreign_run_dir(run.run_dir) is None


def test_a_final_status_that_cannot_be_written_never_hides_the_runs_error(
    tmp_path: Path, monkeypatch
) -> None:
    """A full disk under the run directory (review hB): the failing write of the last status.json in
    the launcher's clean-up replaced the run's own error. A failed run now says it and keeps its error;
    a run that succeeded fails naming the file."""
    run = local.LocalRun(parse(GRAPHSAGE), tmp_path / "spec.yaml", tmp_path / "run", echo=True)
    run.run_dir.mkdir()
    said: list[str] = []
    monkeypatch.setattr(run, "say", said.append)

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local, "write_json", full)
    run.obs.phase = Phase.failed.value
    run.final_status()
    assert said == [
        f"warning: {run.run_dir / 'status.json'}: the final status cannot be written (No space left on "
        "device); it keeps an earlier one"
    ]
    run.obs.phase = Phase.succeeded.value
    with pytest.raises(GraphtrainError, match=r"status.json: the final status cannot be written \(No space"):
        run.final_status()


def test_a_process_whose_log_was_deleted_says_so_not_an_empty_tail(tmp_path: Path) -> None:
    """`rm -rf` of the run directory mid-run: the trainers fail, and their failure names the log as gone
    rather than printing "last lines of" a file that is not there."""
    child = fake_child(tmp_path, 0, pid=1)
    child.proc.returncode = 1
    said = child.why()
    gone = "is gone (was the run directory deleted while it ran?)"
    assert said == f"trainer-0 exited with code 1; its log {tmp_path / 'log'} {gone}"
    (tmp_path / "log").write_text("Traceback (most recent call last):\nOSError: [Errno 2] No such file\n")
    assert (
        child.why()
        == f"trainer-0 exited with code 1: OSError: [Errno 2] No such file (log: {tmp_path / 'log'})"
    )


def test_a_run_directory_holding_what_the_launcher_wrote_while_it_was_deleted_is_a_runs(
    tmp_path: Path,
) -> None:
    """`rm -rf` of the run directory at epoch 3: the launcher wrote its status, progress and targets in
    the middle of the deletion, rm failed ("Directory not empty"), and the next `make run` (--overwrite)
    refused those files as someone else's. A launcher's status.json says the directory is a run's; a
    status.json of another shape does not."""
    from graphtrain.runtime.launch.reuse import foreign_run_dir

    run = tmp_path / "run"
    (run / "prometheus").mkdir(parents=True)
    (run / "progress.json").write_text("{}")
    (run / "status.json").write_text(json.dumps({"phase": "Failed", "conditions": [], "restarts": 0}))
    assert foreign_run_dir(run) is None
    (run / "status.json").write_text(json.dumps({"status": "ok"}))  # someone else's
    assert "holds files that are not a graphtrain run's" in (foreign_run_dir(run) or "")
    (run / "status.json").write_text("[not json")
    assert foreign_run_dir(run) is not None
