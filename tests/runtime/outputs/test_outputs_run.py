"""A real standalone `graphtrain run`, then its outputs: the trainer's checkpoint names its partition, so
`export .../checkpoints/LATEST` needs no --partition, and `predict` reproduces the run's own test accuracy
from the checkpoint (same model, same full-neighbour evaluation, ids mapped back)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pytest
from typer.testing import CliRunner

from graphtrain.cli.app import app
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime import partition
from tests.conftest import planted_graph
from tests.runtime.launch.test_run import launch, sage_spec

runner = CliRunner()


@pytest.mark.timeout(300)
def test_a_runs_checkpoint_exports_and_predicts_in_original_order(tmp_path: Path) -> None:
    g = planted_graph(n=600, k=4, seed=3)
    feat = np.random.default_rng(0).standard_normal((g.num_nodes, 8)).astype(np.float32)
    feat[np.arange(g.num_nodes), g.label] += 1.0
    graph = tmp_path / "g.npz"
    masks = {f"{k}_mask": v for k, v in g.masks.items()}
    np.savez(graph, indptr=g.indptr, indices=g.indices, feat=feat, label=g.label, **masks)
    doc = sage_spec(graph, epochs=2, batch=64)
    doc["spec"]["model"]["useFeatures"] = True
    doc["spec"]["trainers"]["replicas"] = 1
    run = tmp_path / "run"
    result = launch(doc, run, standalone=True).run()

    latest = run / "checkpoints" / "LATEST"
    record = ckpt.read_top(ckpt.resolve_checkpoint(latest))["partition"]
    assert record["table_keys"] == {"node": "nodes"} and record["num_nodes"] == 600
    res = runner.invoke(app, ["export", str(latest), "-o", str(tmp_path / "node.npy")])
    assert res.exit_code == 0, res.output
    cfg = partition.load_config(run / "partition")
    stored = ckpt.export_table(ckpt.resolve_checkpoint(latest), "node")  # partition order
    np.testing.assert_array_equal(
        np.load(tmp_path / "node.npy"), stored[partition.load_maps(cfg)["node_map_inverse"]]
    )

    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["predict", str(latest), "--spec", str(tmp_path / "run.yaml"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = pcsv.read_csv(out).to_pydict()
    assert table["id"] == list(range(600))
    test = g.masks["test"]
    accuracy = float((np.array(table["predicted"])[test] == g.label[test]).mean())
    assert accuracy == pytest.approx(result["test_accuracy"], abs=1e-9), (accuracy, result)
