"""`graphtrain run` with model.featureBag: each node's sparse feature columns ("words") looked up as one
multi-hot bag in a learnable `keys: features` table (issue 31, item 3).

A planted-block graph whose sparse features name words of each node's block: GraphSAGE with a collective
mean bag of word vectors beside a server node embedding learns on 2 shard servers x 2 trainers; its
checkpoint holds the word table in the trainers' pieces, `graphtrain export` writes it in column order,
`graphtrain predict` computes the bags in process and agrees with the run's test accuracy, and `--resume`
continues it on 3 trainers. A server word table with a sum bag, the model's only input, learns
standalone.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from graphtrain.runtime import checkpoint as ckpt
from tests.conftest import planted_graph
from tests.runtime.launch.test_run import CLI, ONE_THREAD, launch, status

WORDS, PER_BLOCK = 64, 16  # block b's own words are b*16 .. b*16+15


@pytest.fixture(scope="module")
def bag_graph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(graph .npz, sparse features .npz): 4 words per node from its block's own, 2 from any block, and
    every 10th node without words (an empty bag)."""
    g = planted_graph(n=2000, k=4, seed=3)
    rng = np.random.default_rng(1)
    rows, cols = [], []
    for i, b in enumerate(g.label.tolist()):
        if i % 10 == 0:
            continue
        words = np.concatenate(
            [b * PER_BLOCK + rng.choice(PER_BLOCK, 4, replace=False), rng.choice(WORDS, 2)]
        )
        rows += [i] * len(words)
        cols += words.tolist()
    feat = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(g.num_nodes, WORDS))
    root = tmp_path_factory.mktemp("bag")
    graph, features = root / "planted.npz", root / "words.npz"
    np.savez(
        graph,
        indptr=g.indptr,
        indices=g.indices,
        label=g.label,
        **{f"{k}_mask": v for k, v in g.masks.items()},
    )
    sp.save_npz(features, feat)
    return graph, features


def bag_spec(graph: tuple[Path, Path], sharding: str, combiner: str, epochs: int = 3) -> dict:
    return {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "planted-bag"},
        "spec": {
            "graph": {"path": str(graph[0]), "features": str(graph[1])},
            "partition": {"parts": 2, "balance": ["nodes", "train"], "maxImbalance": 0.1},
            "embeddings": [
                {
                    "name": "word",
                    "dim": 8,
                    "keys": "features",
                    "sharding": sharding,
                    "optimizer": {"kind": "adam", "lr": 0.01, "eps": 1e-8},
                },
                {"name": "node", "dim": 8, "optimizer": {"kind": "adam", "lr": 0.01, "eps": 1e-8}},
            ],
            "model": {
                "hiddenDim": 32,
                "dropout": 0.2,
                "featureBag": {"embedding": "word", "combiner": combiner},
                "nodeEmbedding": "node",
            },
            "training": {"epochs": epochs, "batchSize": 128, "fanouts": [5, 5], "denseLr": 0.01},
            "trainers": {"replicas": 2},
            "runPolicy": {"stallTimeoutSeconds": 120},
        },
    }


def graphtrain(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180, env=ONE_THREAD)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def predicted_test_accuracy(checkpoint: Path, run_dir: Path, graph: Path, out: Path) -> float:
    """`graphtrain predict` of a checkpoint with the run's spec: its accuracy on the graph's test nodes."""
    graphtrain("predict", str(checkpoint), "--spec", str(run_dir.parent / "run.yaml"), "-o", str(out))
    with out.open() as f:
        predicted = np.array([int(r["predicted"]) for r in csv.DictReader(f)])
    data = np.load(graph)
    test = data["test_mask"]
    return float((predicted[test] == data["label"][test]).mean())


@pytest.mark.timeout(500)
def test_a_collective_mean_bag_learns_exports_predicts_and_resumes(
    bag_graph: tuple[Path, Path], tmp_path: Path
) -> None:
    doc = bag_spec(bag_graph, "collective", "mean")
    run_dir = tmp_path / "run"
    result = launch(doc, run_dir).run()
    assert result["test_accuracy"] > 0.9, result  # 0.97; the node embedding alone: 0.52
    latest = ckpt.resolve_latest(run_dir / "checkpoints")
    assert latest is not None
    top = ckpt.read_top(latest)
    assert [(p["lo"], p["hi"]) for p in top["tensors"]["word"]] == [(0, 32), (32, 64)]  # one per trainer
    assert top["partition"]["table_keys"] == {"node": "nodes", "word": "features"}

    words = tmp_path / "words.csv"
    said = graphtrain("export", str(latest), "--name", "word", "-o", str(words)).stderr
    assert "64 x (8,)" in said and "feature column order" in said, said
    with words.open() as f:
        table = list(csv.DictReader(f))
    assert [int(r["id"]) for r in table] == list(range(WORDS))
    assert np.allclose([float(r["dim_0"]) for r in table], ckpt.export_table(latest, "word")[:, 0], atol=1e-6)

    # predict computes each node's bag itself: on the test nodes it scores as the run's evaluation did
    accuracy = predicted_test_accuracy(latest, run_dir, bag_graph[0], tmp_path / "pred.csv")
    assert abs(accuracy - result["test_accuracy"]) < 0.01, (accuracy, result)

    doc["spec"]["training"]["epochs"] = 4
    doc["spec"]["trainers"]["replicas"] = 3
    resumed = launch(doc, run_dir, resume=True).run()
    assert "resuming from step" in (run_dir / "logs" / "trainer-0.log").read_text()
    assert "Traceback" not in (run_dir / "logs" / "trainer-2.log").read_text()
    assert resumed["test_accuracy"] > 0.9, resumed
    after = ckpt.read_top(ckpt.resolve_latest(run_dir / "checkpoints"))  # type: ignore[arg-type]
    assert len(after["tensors"]["word"]) == 3


@pytest.mark.timeout(300)
def test_a_server_sum_bag_alone_learns_standalone(bag_graph: tuple[Path, Path], tmp_path: Path) -> None:
    doc = bag_spec(bag_graph, "server", "sum")
    del doc["spec"]["embeddings"][1], doc["spec"]["model"]["nodeEmbedding"]
    doc["spec"]["trainers"]["replicas"] = 1
    result = launch(doc, tmp_path / "run", standalone=True).run()
    assert result["test_accuracy"] > 0.9, result
    st = status(tmp_path / "run")
    assert st["phase"] == "Succeeded", json.dumps(st)[:400]


@pytest.mark.timeout(300)
def test_a_dynamic_vocabulary_bag_predicts_as_the_run_evaluated(
    bag_graph: tuple[Path, Path], tmp_path: Path
) -> None:
    """A word table with a dynamic vocabulary (rows by first sight, not by column): `graphtrain predict`
    reads each column's row through the checkpoint's keys and scores the test nodes as the run did."""
    doc = bag_spec(bag_graph, "server", "sum")
    del doc["spec"]["embeddings"][1], doc["spec"]["model"]["nodeEmbedding"]
    doc["spec"]["embeddings"][0]["vocabulary"] = {"kind": "dynamic", "capacity": 96}
    doc["spec"]["trainers"]["replicas"] = 1
    run_dir = tmp_path / "run"
    result = launch(doc, run_dir, standalone=True).run()
    assert result["test_accuracy"] > 0.9, result
    latest = ckpt.resolve_latest(run_dir / "checkpoints")
    assert latest is not None and ckpt.export_keyed(latest, "word") is not None
    accuracy = predicted_test_accuracy(latest, run_dir, bag_graph[0], tmp_path / "pred.csv")
    assert abs(accuracy - result["test_accuracy"]) < 0.01, (accuracy, result)
