"""A learnable embedding for a featureless node type (spec.embeddings[].nodeTypes) with `graphtrain run
--standalone`: users without features, whose label is their community, which only their follows edges
tell; items with features that say nothing about it. The user table (a row per user) trains the
users' input, so the model classifies them (measured: test accuracy 0.97 after 3 epochs; 0.57 with
no table, whose users all read zeros); export writes a row per user under the user's own id;
resume restores the table; predict reads it; a collective table over the users trains as well.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.runtime.launch.test_own_data import graphtrain, predict_nodes

pytestmark = pytest.mark.timeout(600)

USERS, ITEMS = 300, 60


def write_data(root: Path, seed: int = 0) -> np.ndarray:
    """Two communities of users following users (90 % inside their own); items rated at random. Returns
    each user's community."""
    rng = np.random.default_rng(seed)
    community = rng.integers(0, 2, USERS)
    with open(root / "users.csv", "w") as f:
        f.write("user_id,label\n" + "".join(f"u{i},c{community[i]}\n" for i in range(USERS)))
    with open(root / "items.csv", "w") as f:
        rows = rng.random((ITEMS, 2))
        f.write(
            "item_id,price,weight\n" + "".join(f"i{i},{a:.4f},{b:.4f}\n" for i, (a, b) in enumerate(rows))
        )
    follows = set()
    for u in range(USERS):
        for _ in range(6):
            same = rng.random() < 0.9
            pool = np.flatnonzero((community == community[u]) == same)
            follows.add((int(rng.choice(pool)), u))
    with open(root / "follows.csv", "w") as f:
        f.write("src,dst\n" + "".join(f"u{s},u{d}\n" for s, d in sorted(follows) if s != d))
    with open(root / "rated.csv", "w") as f:
        f.write(
            "item,user\n" + "".join(f"i{rng.integers(ITEMS)},u{u}\n" for u in range(USERS) for _ in range(2))
        )
    return community


def spec(root: Path, name: str, epochs: int, **table: object) -> Path:
    doc = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": name},
        "spec": {
            "graph": {
                "nodes": [
                    {"type": "user", "files": ["users.csv"], "idColumn": "user_id", "label": "label"},
                    {
                        "type": "item",
                        "files": ["items.csv"],
                        "idColumn": "item_id",
                        "features": ["price", "weight"],
                    },
                ],
                "edges": [
                    {"relation": ["user", "follows", "user"], "files": ["follows.csv"]},
                    {
                        "relation": ["item", "rated", "user"],
                        "files": ["rated.csv"],
                        "sourceColumn": "item",
                        "destinationColumn": "user",
                    },
                ],
                "split": {"train": 0.6, "val": 0.2, "test": 0.2, "seed": 0},
            },
            "partition": {"parts": 2},
            "embeddings": [
                {
                    "name": "user_emb",
                    "dim": 16,
                    "nodeTypes": ["user"],
                    "optimizer": {"kind": "adam", "lr": 0.1},
                    **table,
                }
            ],
            "task": {"kind": "nodeClassification", "targetNodeTypes": ["user"]},
            "model": {
                "kind": "graphsage",
                "hiddenDim": 16,
                "numLayers": 2,
                "useFeatures": True,
                "nodeEmbedding": "user_emb",
            },
            "training": {"epochs": epochs, "batchSize": 32, "fanouts": [6, 6], "denseLr": 0.03, "threads": 1},
        },
    }
    out = root / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("users")
    return root, write_data(root)


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_a_featureless_type_trains_its_own_embedding_exports_resumes_and_predicts(project) -> None:
    project, community = project
    path = spec(project, "users-emb", epochs=3)
    run = project / "runs" / "users-emb"
    res = graphtrain("run", str(path), "--standalone", "--run-dir", str(run), cwd=project)
    assert res.returncode == 0, res.stderr[-3000:]
    assert result(run)["test_accuracy"] >= 0.85, result(run)  # two communities: chance is 0.5

    out = project / "user_emb.csv"
    res = graphtrain(
        "export", str(run / "checkpoints" / "LATEST"), "--name", "user_emb", "-o", str(out), cwd=project
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == [f"user:u{i}" for i in range(USERS)]  # a row per user, none per item
    assert len(rows[0]) == 1 + 16
    # each user's exported row is its own: the rows tell the communities apart along their means' difference
    x = np.array([[float(r[f"dim_{j}"]) for j in range(16)] for r in rows])
    w = x[community == 1].mean(0) - x[community == 0].mean(0)
    score = x @ w
    split = (score[community == 1].mean() + score[community == 0].mean()) / 2
    separated = ((score > split) == (community == 1)).mean()
    assert separated >= 0.75, separated  # rows given to the wrong users: ~0.57

    doc = yaml.safe_load(path.read_text())
    doc["spec"]["training"]["epochs"] = 4
    path.write_text(yaml.safe_dump(doc))
    res = graphtrain("run", str(path), "--standalone", "--run-dir", str(run), "--resume", cwd=project)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming" in (res.stdout + res.stderr)
    assert result(run)["last_epoch"] == 4 and result(run)["test_accuracy"] >= 0.85, result(run)

    rows = predict_nodes(run / "checkpoints" / "BEST", path, "user:u0,user:u1", project / "p.csv", project)
    assert [r["id"] for r in rows] == ["user:u0", "user:u1"]


def test_a_collective_table_over_a_node_type_trains(project) -> None:
    project, _ = project
    path = spec(project, "users-collective", epochs=3, sharding="collective")
    run = project / "runs" / "users-collective"
    res = graphtrain("run", str(path), "--standalone", "--run-dir", str(run), cwd=project)
    assert res.returncode == 0, res.stderr[-3000:]
    assert result(run)["test_accuracy"] >= 0.85, result(run)
