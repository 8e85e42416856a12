"""`graphtrain run` with `sharding: collective` tables: rows on the trainers, exchanged all-to-all.

TransE on Nations with collective entity and relation tables on 2 trainers learns, and its checkpoint
(the shard servers' format) exports and resumes into 3 trainers; GraphSAGE with a collective node
embedding trains with trainers whose evaluation splits differ in size (their lookups still pair up), and
in standalone mode (one trainer, world 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime.kvstore import checkpoint as ckpt
from tests.runtime.launch.test_run import graph_file, launch, nations, sage_spec, status

__all__ = ["graph_file"]  # the module's fixture, used here


def collective(doc: dict) -> dict:
    for t in doc["spec"]["embeddings"]:
        t["sharding"] = "collective"
    return doc


@pytest.mark.timeout(400)
def test_transe_with_collective_tables_learns_and_resumes_into_3_trainers(tmp_path: Path) -> None:
    doc = collective(nations(epochs=12))
    doc["spec"]["training"].update(evalEvery=12, checkpointInterval=50)
    run_dir = tmp_path / "run"
    result = launch(doc, run_dir).run()
    # 14 entities: a random scorer's filtered MRR is about 0.25; TransE passes 0.33 within 12 epochs
    assert result["test_mrr"] > 0.33, result
    latest = ckpt.resolve_latest(run_dir / "checkpoints")
    assert latest is not None
    top = ckpt.read_top(latest)
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
