"""`graphtrain run` with `sharding: collective` tables: rows on the trainers, exchanged all-to-all.

TransE on Nations with collective entity and relation tables on 2 trainers learns, and its checkpoint
(the shard servers' format) exports and resumes into 3 trainers; GraphSAGE with a collective node
embedding trains with trainers whose evaluation splits differ in size (their lookups still pair up), and
in standalone mode (one trainer, world 1). A dynamic entity vocabulary trains and exports the user's
names; one too small for the graph stops the run with a line naming table, shard and capacity.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.launch.local import RunFailed
from tests.runtime.launch.test_run import CLI, graph_file, launch, nations, run_and_kill, sage_spec, status

__all__ = ["graph_file"]  # the module's fixture, used here


def collective(doc: dict) -> dict:
    for t in doc["spec"]["embeddings"]:
        t["sharding"] = "collective"
    return doc


def trained(doc: dict, run_dir: Path, mrr: float) -> tuple[Path, dict]:
    """Run `doc` into `run_dir`: its test MRR passes `mrr`; its latest checkpoint and that one's listing."""
    result = launch(doc, run_dir).run()
    assert result["test_mrr"] > mrr, result
    latest = ckpt.resolve_latest(run_dir / "checkpoints")
    assert latest is not None
    return latest, ckpt.read_top(latest)


@pytest.mark.timeout(400)
def test_transe_with_collective_tables_learns_and_resumes_into_3_trainers(tmp_path: Path) -> None:
    doc = collective(nations(epochs=12))
    doc["spec"]["training"].update(evalEvery=12, checkpointInterval=50)
    run_dir = tmp_path / "run"
    # 14 entities: a random scorer's filtered MRR is about 0.25; TransE passes 0.33 within 12 epochs
    latest, top = trained(doc, run_dir, 0.33)
    assert {p["name"] for ps in top["tensors"].values() for p in ps} == {"entity", "relation"}
    assert [(p["lo"], p["hi"]) for p in top["tensors"]["entity"]] == [(0, 7), (7, 14)]  # one per trainer
    rows = ckpt.export_table(latest, "entity")
    assert rows.shape == (14, 128) and np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-4)

    doc["spec"]["training"]["epochs"] = 14
    doc["spec"]["trainers"]["replicas"] = 3
    resumed = launch(doc, run_dir, resume=True).run()
    log = (run_dir / "logs" / "trainer-2.log").read_text()
    assert "resuming from step" in (run_dir / "logs" / "trainer-0.log").read_text()
    assert "Traceback" not in log
    assert resumed["test_mrr"] > 0.33, resumed
    assert status(run_dir)["progress"]["epoch"] == 14


@pytest.mark.timeout(400)
@pytest.mark.parametrize("standalone", [False, True])
def test_graphsage_with_a_collective_node_embedding(
    graph_file: Path, tmp_path: Path, standalone: bool
) -> None:
    doc = collective(sage_spec(graph_file, epochs=3))
    if standalone:
        doc["spec"]["trainers"]["replicas"] = 1
    result = launch(doc, tmp_path / "run", standalone=standalone).run()
    assert result["test_accuracy"] > 0.6, result
    st = status(tmp_path / "run")
    assert st["phase"] == "Succeeded", json.dumps(st)[:400]


@pytest.mark.timeout(400)
def test_transe_with_a_dynamic_entity_vocabulary_exports_the_users_names(tmp_path: Path) -> None:
    doc = collective(nations(epochs=6))
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 16}
    run_dir = tmp_path / "run"
    result = launch(doc, run_dir).run()
    assert result["test_mrr"] > 0.3, result
    export_and_predict(run_dir, tmp_path)


def export_and_predict(run_dir: Path, tmp_path: Path) -> None:
    """`graphtrain export` of a Nations run's dynamic entity table writes the 14 countries once each by
    name, and `predict` answers a query from its checkpoint."""
    out = tmp_path / "entity.csv"
    done = subprocess.run(
        [*CLI, "export", str(run_dir / "checkpoints"), "--name", "entity", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 15 and lines[0].startswith('"id","dim_0"')  # the 14 countries, each once
    assert sorted(line.split(",")[0].strip('"') for line in lines[1:])[:2] == ["brazil", "burma"]
    pred = tmp_path / "pred.csv"
    spec = tmp_path / "run.yaml"  # where launch() wrote the spec
    query = ["--spec", str(spec), "--head", "brazil", "--relation", "embassy", "-k", "3", "-o", str(pred)]
    done = subprocess.run(
        [*CLI, "predict", str(run_dir / "checkpoints"), *query], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert len(pred.read_text().splitlines()) == 4  # a header and the 3 best tails


@pytest.mark.timeout(400)
def test_a_full_dynamic_vocabulary_stops_the_run_naming_table_shard_and_capacity(tmp_path: Path) -> None:
    doc = collective(nations(epochs=2))
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 8, "onFull": "error"}
    with pytest.raises(RunFailed):
        launch(doc, tmp_path / "run").run()
    logs = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("trainer-*.log"))
    assert re.search(r"table 'entity' shard [01] of 2 is full: capacity 4 rows, all in use", logs), logs[
        -2000:
    ]


@pytest.mark.timeout(400)
def test_a_killed_trainer_restarts_every_rank_from_the_collective_checkpoint(
    graph_file: Path, tmp_path: Path
) -> None:
    """The survivors' shards are newer than the checkpoint: every trainer must restart from it, or the
    restarted rank's rows and its peers' would belong to different steps."""
    run = launch(collective(sage_spec(graph_file, epochs=6, backoff=1)), tmp_path / "run")
    result, error = run_and_kill(run, "trainer-1", after_checkpoint=True)
    assert error is None, error
    assert result is not None and result["test_accuracy"] > 0.6, result
    st = status(run.run_dir)
    assert st["phase"] == "Succeeded" and st["restarts"] == 1 and st["progress"]["epoch"] == 6
    log0 = (run.run_dir / "logs" / "trainer-0.log").read_text()
    assert "resuming from step" in log0  # rank 0, which was not killed, restarted from the checkpoint too
