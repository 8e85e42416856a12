"""Typed graphs end to end with `graphtrain run`, on the typed example examples/own-data/make_data.py
writes (users, items and shops; a user's label only its edges' ratings tell):

- GAT reading edge features classifies the users (>= 0.95 test accuracy, issue 44's acceptance); the
  same run without them cannot (near chance); RGAT's per-relation attention reads them too, sampled on
  the trainer's device;
- R-GCN on 2 shard servers x 2 trainers, sampling per edge type and training the user type only, trains,
  resumes from its checkpoint with more epochs, and `graphtrain predict` answers per user by the user's
  own id.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.runtime.launch.test_own_data import EXAMPLES, graphtrain, predict_nodes

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The typed example's spec beside its data, as a user's project folder."""
    root = tmp_path_factory.mktemp("shop")
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_data.py"), str(root / "data")], check=True, timeout=120
    )
    shutil.copy(EXAMPLES / "shop-gat.yaml", root)
    return root


def variant(root: Path, name: str, model: dict, **changes: object) -> Path:
    doc = yaml.safe_load((root / "shop-gat.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["model"] = model
    for section, fields in changes.items():
        doc["spec"].setdefault(section, {}).update(fields)
    out = root / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_gat_learns_a_label_only_edge_features_carry(shop: Path) -> None:
    accuracy = {}
    for with_edges in (True, False):
        model = {"kind": "gat", "hiddenDim": 32, "heads": 4, "dropout": 0.1, "edgeFeatures": with_edges}
        spec = variant(shop, f"shop-gat-{str(with_edges).lower()}", model)
        run = shop / "runs" / spec.stem
        res = graphtrain("run", str(spec), "--standalone", "--run-dir", str(run), cwd=shop)
        assert res.returncode == 0, res.stderr[-3000:]
        accuracy[with_edges] = result(run)["test_accuracy"]
    assert accuracy[True] >= 0.95, accuracy
    assert accuracy[False] <= 0.65, accuracy  # two balanced classes: chance is 0.5


def test_rgat_reads_the_edge_features_in_its_per_relation_attention(shop: Path) -> None:
    """Sampled by the device sampler (training.sampler device: the joined graph with its edge types, ids
    and features, on this CPU trainer the CPU core's twin of the CUDA draw), whose typed blocks equal the
    host sampler's (tests/runtime/graph/test_device_sampler_typed.py): the path a GPU trainer takes."""
    model = {"kind": "rgat", "hiddenDim": 32, "heads": 4, "dropout": 0.1, "edgeFeatures": True}
    spec = variant(shop, "shop-rgat", model, training={"sampler": "device"})
    run = shop / "runs" / spec.stem
    res = graphtrain("run", str(spec), "--standalone", "--run-dir", str(run), cwd=shop)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[trainer] sampling on cpu" in (run / "logs" / "trainer-0.log").read_text()
    assert result(run)["test_accuracy"] >= 0.95, result(run)


def test_rgcn_on_shard_servers_samples_per_type_resumes_and_predicts_by_user_id(shop: Path) -> None:
    model = {"kind": "rgcn", "hiddenDim": 16, "numBases": 2, "dropout": 0.1}
    spec = variant(
        shop,
        "shop-rgcn",
        model,
        training={"epochs": 2, "edgeTypeFanouts": {"rated": [4, 4], "sold_by": [0, 0]}},
    )
    run = shop / "runs" / "shop-rgcn"
    res = graphtrain("run", str(spec), "--run-dir", str(run), cwd=shop)
    assert res.returncode == 0, res.stderr[-3000:]
    # without the edge features no model can beat chance here (0.5): the run trains, that is all
    assert 0.4 <= result(run)["test_accuracy"] <= 1.0, result(run)
    doc = yaml.safe_load(spec.read_text())
    doc["spec"]["training"]["epochs"] = 3
    spec.write_text(yaml.safe_dump(doc))
    res = graphtrain("run", str(spec), "--run-dir", str(run), "--resume", cwd=shop)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming" in (res.stdout + res.stderr)
    assert result(run)["last_epoch"] == 3, result(run)
    rows = predict_nodes(
        run / "checkpoints" / "BEST", spec, "user:u3,user:u0", shop / "predictions.csv", shop
    )
    assert [r["id"] for r in rows] == ["user:u3", "user:u0"]
    assert {r["predicted"] for r in rows} <= {"likes", "dislikes"}
