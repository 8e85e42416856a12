"""A real `graphtrain run` (2 shard servers x 2 trainers) is scrapeable the way a local Prometheus would
scrape it: <run_dir>/prometheus/targets.json names every process' metrics port with its labels, and each
answers /metrics in the Prometheus text format while the run goes on. Rank 0 leaves one history entry
per epoch, every rank its heartbeat file."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from graphtrain.contract import reporting, rundir
from graphtrain.runtime.launch import targets
from tests.runtime.launch.test_run import graph_file, launch, sage_spec  # noqa: F401 - graph_file: a fixture

EPOCHS = 10
STAGES = {"sample", "pull", "forward_backward", "push"}


def scrape(url: str) -> dict[str, Any]:
    """name -> {labels tuple: value} of every sample at `url`, parsed as Prometheus would."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def read_targets(run_dir: Path) -> list[dict[str, Any]]:
    try:
        return json.loads((run_dir / targets.TARGETS_FILE).read_text())
    except (OSError, ValueError):
        return []


def by_job(doc: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    jobs: dict[str, list[dict[str, Any]]] = {}
    for entry in doc:
        jobs.setdefault(entry["labels"]["job"], []).append(entry)
    return jobs


def trainer_stepping(url: str, rank: str) -> bool:
    """The trainer at `url` has taken steps and observed every stage."""
    try:
        m = scrape(url)
    except OSError:
        return False
    steps = m.get("graphtrain_trainer_steps_total", {}).get((("rank", rank),), 0)
    counts = m.get("graphtrain_trainer_stage_seconds_count", {})
    return steps > 0 and all(counts.get((("rank", rank), ("stage", s)), 0) > 0 for s in STAGES)


@pytest.mark.timeout(300)
def test_every_process_of_a_run_is_a_scrape_target(graph_file: Path, tmp_path: Path) -> None:  # noqa: F811
    run_dir = tmp_path / "run"
    run = launch(sage_spec(graph_file, epochs=EPOCHS, batch=32), run_dir)
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(result=run.run()), daemon=True)
    thread.start()
    try:
        deadline, jobs = time.monotonic() + 180, {}
        while time.monotonic() < deadline and thread.is_alive():  # every target known, trainers stepping
            jobs = by_job(read_targets(run_dir))
            trainers = jobs.get(targets.JOB_TRAINER, [])
            if len(trainers) == 2 and all(
                trainer_stepping(f"http://{t['targets'][0]}/metrics", t["labels"]["rank"]) for t in trainers
            ):
                break
            time.sleep(0.2)
        assert {k: len(v) for k, v in jobs.items()} == {
            targets.JOB_SHARD: 2,
            targets.JOB_TRAINER: 2,
            targets.JOB_LAUNCHER: 1,
        }, f"targets while the run went on: {jobs} (run alive: {thread.is_alive()})"
        for entry in read_targets(run_dir):
            (address,) = entry["targets"]
            assert address.startswith("127.0.0.1:")
            labels = entry["labels"]
            assert labels["namespace"] == "default" and labels["training"] == "planted"
            m = scrape(f"http://{address}/metrics")
            if labels["job"] == targets.JOB_SHARD:
                shard = (("shard", labels["shard"]),)
                assert shard in m["graphtrain_kvstore_rows_pulled_total"]
                assert m["process_resident_memory_bytes"][()] > 0
            elif labels["job"] == targets.JOB_TRAINER:
                rank = (("rank", labels["rank"]),)
                steps = m["graphtrain_trainer_steps_total"][rank]
                assert steps > 0 and m["graphtrain_trainer_samples_total"][rank] >= steps
                assert m["graphtrain_trainer_step_seconds_count"][rank] > 0
                stages = m["graphtrain_trainer_stage_seconds_count"]
                assert {dict(k)["stage"] for k, v in stages.items() if v > 0} == STAGES
                assert m["process_resident_memory_bytes"][()] > 0
            else:  # the launcher: its training's executor-level metrics
                phases = {dict(k)["phase"]: v for k, v in m["graphtrain_training_phase"].items()}
                assert phases["Training"] == 1 and sum(phases.values()) == 1
                key = (("namespace", "default"), ("training", "planted"))
                assert m["graphtrain_training_restarts"][key] == 0
                shards = {tuple(sorted([*key, ("shard", s)])) for s in "01"}
                assert set(m["graphtrain_training_shard_restarts"]) == shards
    finally:
        thread.join(timeout=240)
    assert not thread.is_alive() and "result" in out, "the run did not finish"
    # the launch is over: none of its ports is a target any more
    assert json.loads((run_dir / targets.TARGETS_FILE).read_text()) == []
    history = reporting.decode_history((run_dir / rundir.HISTORY_FILE).read_text())
    assert [p.epoch for p in history] == list(range(1, EPOCHS + 1))
    assert all(p.eval_metric == "val_accuracy" and p.eval_value is not None for p in history)
    for rank in (0, 1):
        beat = reporting.decode((run_dir / rundir.rank_file(rank)).read_text())
        assert beat is not None and beat.epoch == EPOCHS
