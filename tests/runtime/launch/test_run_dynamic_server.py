"""`graphtrain run` with a dynamic vocabulary on the shard servers (`sharding: server`, kvstore/keyed.py):
TransE on Nations with a dynamic entity table learns, its checkpoint exports the user's names and serves
`predict`; one too small for the graph stops the run with a line naming table, shard and capacity."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime.kvstore import checkpoint as ckpt
from graphtrain.runtime.launch.local import RunFailed
from tests.runtime.launch.test_run import CLI, launch, nations
from tests.runtime.launch.test_run_collective import export_and_predict


@pytest.mark.timeout(400)
def test_transe_with_a_dynamic_entity_table_on_the_servers_learns_and_exports(tmp_path: Path) -> None:
    doc = nations(epochs=6)
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 16}
    doc["spec"]["embeddings"][1]["vocabulary"] = {"kind": "dynamic", "capacity": 64}  # 55 relations
    run_dir = tmp_path / "run"
    result = launch(doc, run_dir).run()
    assert result["test_mrr"] > 0.3, result
    latest = ckpt.resolve_latest(run_dir / "checkpoints")
    assert latest is not None
    top = ckpt.read_top(latest)
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
