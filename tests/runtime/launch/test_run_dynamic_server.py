"""`graphtrain run` with a dynamic vocabulary on the shard servers (`sharding: server`, storage/keyed.py):
TransE on Nations with a dynamic entity table learns, its checkpoint exports the user's names and serves
`predict`; one too small for the graph stops the run with a line naming table, shard and capacity."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.launch.local import RunFailed
from tests.runtime.launch.test_run import CLI, launch, nations, run_and_kill, status
from tests.runtime.launch.test_run_collective import export_and_predict, trained


@pytest.mark.timeout(400)
def test_transe_with_a_dynamic_entity_table_on_the_servers_learns_and_exports(tmp_path: Path) -> None:
    doc = nations(epochs=6)
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 16}
    doc["spec"]["embeddings"][1]["vocabulary"] = {"kind": "dynamic", "capacity": 64}  # 55 relations
    run_dir = tmp_path / "run"
    latest, top = trained(doc, run_dir, 0.3)
    assert [(p["lo"], p["hi"]) for p in top["tensors"]["entity"]] == [(0, 8), (8, 16)]  # one per shard
    keys, _ = ckpt.export_keyed(latest, "entity") or (None, None)
    assert keys is not None and keys.tolist() == list(range(14))  # every entity, inserted once
    export_and_predict(run_dir, tmp_path)
    rel = ckpt.export_keyed(latest, "relation")  # started on the sphere: nowhere near N(0, 1)'s 11.3
    assert rel is not None and len(rel[0]) == 55 and np.linalg.norm(rel[1], axis=1).mean() < 3
    argv = [*CLI, "export", str(latest), "--name", "relation", "-o"]
    done = subprocess.run([*argv, str(tmp_path / "relation.csv")], capture_output=True)
    assert done.returncode == 0
    assert (tmp_path / "relation.csv").read_text().splitlines()[1].split(",")[0] == '"accusation"'


@pytest.mark.timeout(400)
def test_a_full_dynamic_table_on_the_servers_stops_the_run_naming_table_shard_and_capacity(
    tmp_path: Path,
) -> None:
    doc = nations(epochs=2)
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 8, "onFull": "error"}
    with pytest.raises(RunFailed):
        launch(doc, tmp_path / "run").run()
    logs = "".join(p.read_text() for p in (tmp_path / "run" / "logs").glob("trainer-*.log"))
    assert re.search(r"table 'entity' shard [01] of 2 is full: capacity 4 rows, all in use", logs), logs[
        -2000:
    ]


@pytest.mark.timeout(400)
def test_a_shard_killed_mid_run_comes_back_with_its_keys_and_the_run_succeeds(tmp_path: Path) -> None:
    """kill -9 of a shard server holding a dynamic table, after a checkpoint: the launcher restarts it,
    it restores its keys and rows from that checkpoint, and the run ends as it should."""
    doc = nations(epochs=6)
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 16}
    doc["spec"]["training"]["checkpointInterval"] = 20
    doc["spec"]["runPolicy"] = {"backoffLimit": 1, "stallTimeoutSeconds": 120}
    run = launch(doc, tmp_path / "run")
    result, error = run_and_kill(run, "shard-0", after_checkpoint=True)
    assert error is None, error
    assert result is not None and result["test_mrr"] > 0.3, result
    st = status(run.run_dir)
    assert st["phase"] == "Succeeded" and st["shards"][0]["restarts"] == 1
    keys, _ = ckpt.export_keyed(ckpt.resolve_latest(run.run_dir / "checkpoints"), "entity") or (None, None)
    assert keys is not None and keys.tolist() == list(range(14))
