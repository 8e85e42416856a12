"""partition.algorithm fennel and auto through the partition step (the operator's Job and `graphtrain
run` run it alike): a stored graph dataset streams, `auto` picks by the memory budget (one real
partition each way), a graph that cannot stream is one line naming the field, and WordNet partitioned
by Fennel trains end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from graphtrain.runtime.data import datasets, store
from tests.conftest import planted_graph
from tests.runtime.launch.test_partition_step import write_spec

GRAPHTRAIN = [sys.executable, "-m", "graphtrain.cli"]
ENV = {**os.environ, "GRAPHTRAIN_QUIET": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A private dataset cache holding a planted graph under a graph dataset's name (its edges as the
    cache stores edges: src.npy, dst.npy)."""
    g = planted_graph(n=3000, seed=5)
    src, dst = g.edges()
    values = {
        "src": src,
        "dst": dst,
        "num_nodes": np.array(g.num_nodes, dtype=np.int64),
        "label": g.label,
        "feat": g.feat.toarray(),
    }
    return save_dataset(tmp_path / "cache", "metis-4elt", values)


def save_dataset(cache: Path, name: str, values: dict) -> Path:
    """`values` stored in the dataset cache `cache` as the graph dataset `name`; returns `cache`."""
    directory = cache / "datasets" / name
    directory.mkdir(parents=True)
    meta = {"format_version": datasets.FORMAT_VERSION, "name": name, "kind": "graph"}
    store.save(directory, values, meta)
    return cache


def spec(tmp_path: Path, graph: dict, partition: dict) -> Path:
    """The partition step's tests' spec (GraphSAGE), in 3 parts balancing nodes and degree."""
    return write_spec(tmp_path, graph, {"parts": 3, "balance": ["nodes", "degree"], **partition})


def partition(path: Path, out: Path, data: Path) -> subprocess.CompletedProcess:
    """The partition Job's command line (`graphtrain partition --spec ... --report-file ...`)."""
    return subprocess.run(
        [*GRAPHTRAIN, "partition", "--spec", str(path), "--out", str(out), "--data-dir", str(data)]
        + ["--report-file", str(out.parent / "termination-log")],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("settings", "algorithm", "said"),
    [
        ({"algorithm": "fennel"}, "fennel", None),
        ({"algorithm": "auto", "memoryLimit": "64Gi"}, "metis", "metis (METIS needs about"),
        (  # neither fits; on a graph smaller than one chunk of edges fennel needs more
            {"algorithm": "auto", "resources": {"limits": {"memory": "1Mi"}}},
            "metis",
            "in 3 parts, both above 0.0 B (1.0 MiB from partition.resources.limits.memory, less",
        ),
    ],
    ids=["fennel", "auto-fits", "auto-neither"],
)
def test_the_job_streams_or_runs_metis(
    tmp_path: Path, stored: Path, settings: dict, algorithm: str, said: str | None
) -> None:
    out = tmp_path / "part"
    split = {"train": 0.6, "val": 0.2, "test": 0.2, "seed": 0}
    done = partition(spec(tmp_path, {"dataset": "metis-4elt", "split": split}, settings), out, stored)
    assert done.returncode == 0, done.stderr
    config = json.loads(next(out.glob("*.json")).read_text())
    assert config["algorithm"] == algorithm
    assert config["stats"]["balance"]["nodes"] <= 1.05
    if said is not None:
        assert said in done.stdout + done.stderr
    report = json.loads((tmp_path / "termination-log").read_text())
    assert report, "the Job's report file is written"
    from graphtrain.runtime import partition as partitioning

    cfg = partitioning.load_config(out)
    cfg.verify()
    assert sum(partitioning.load_part(cfg, p).indices.shape[0] for p in range(3)) == config["num_edges"]


@pytest.mark.timeout(120)
def test_auto_streams_when_metis_does_not_fit_and_fennel_does(
    tmp_path: Path, stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget between the two estimates: fennel runs. This graph is smaller than a chunk of edges,
    whose buffers would make fennel's estimate the larger, so the chunk is made small (in process)."""
    from typer.testing import CliRunner

    from graphtrain.cli.app import app
    from graphtrain.runtime.launch import streaming_step
    from graphtrain.runtime.partition import memory

    monkeypatch.setattr(streaming_step, "CHUNK_EDGES", 1024)
    graph, edges = datasets.load_streamed("metis-4elt", stored)
    n, m, feat = graph.num_nodes, edges.num_edges, memory.feature_bytes(graph)
    metis, fennel = memory.metis_need(n, m, feat), memory.streaming_need(n, m, 3, 1024, feat)
    assert fennel < metis
    limit = (metis + fennel) // 2
    split = {"train": 0.6, "val": 0.2, "test": 0.2, "seed": 0}
    path = spec(
        tmp_path, {"dataset": "metis-4elt", "split": split}, {"algorithm": "auto", "memoryLimit": str(limit)}
    )
    out = tmp_path / "part"
    argv = ["partition", "--spec", str(path), "--out", str(out), "--data-dir", str(stored)]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 0, done.output
    assert "partition.algorithm auto: fennel (METIS needs about" in done.output
    assert json.loads(next(out.glob("*.json")).read_text())["algorithm"] == "fennel"


def test_the_specs_knowledge_graphs_are_the_datasets_that_do_not_stream() -> None:
    """The spec rule fennel-streams-a-graph-dataset (contract, at admission) and the partition step
    (streaming_step.unstreamable) name the same datasets."""
    from graphtrain.contract.spec import KG_DATASETS, Dataset

    assert {d for d in Dataset if datasets.recipe(d.value).kind != "graph"} == KG_DATASETS


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("options", "field"),
    [
        (["--dataset", "nations"], "graph.dataset nations is a knowledge graph"),
        (["--dataset", "metis-4elt", "--reverse-edges"], "graph.reverseEdges"),
        (["--input", "edges.tsv"], "graph.path is loaded whole"),
    ],
)
def test_fennel_on_a_graph_that_cannot_stream_is_one_line(
    tmp_path: Path, stored: Path, options: list[str], field: str
) -> None:
    """Asked by the command's options (a spec with such a graph is refused before: the next test)."""
    (tmp_path / "edges.tsv").write_text("0\t1\n1\t2\n")
    argv = [*GRAPHTRAIN, "partition", *options, "--algorithm", "fennel", "-k", "2", "--out", "part"]
    argv += ["--data-dir", str(stored)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV, cwd=tmp_path)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: partition.algorithm fennel: " + field), (
        done.stderr
    )
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "graph",
    [{"dataset": "nations"}, {"dataset": "metis-4elt", "reverseEdges": True}, {"path": "edges.tsv"}],
)
def test_a_spec_asking_fennel_of_a_graph_that_cannot_stream_is_refused_before_partitioning(
    tmp_path: Path, stored: Path, graph: dict
) -> None:
    """The spec rule fennel-streams-a-graph-dataset: `kubectl apply` and `graphtrain validate` refuse it,
    so the operator never starts a partition Job that can only fail."""
    (tmp_path / "edges.tsv").write_text("0\t1\n1\t2\n")
    path = spec(tmp_path, graph, {"algorithm": "fennel"})
    if graph.get("dataset") == "nations":  # a valid KGE spec: its own example's
        doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text())
        doc["spec"]["partition"]["algorithm"] = "fennel"
        path.write_text(yaml.safe_dump(doc))
    done = partition(path, tmp_path / "part", stored)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        "error: invalid GraphTraining: spec.partition.algorithm: fennel streams a bundled graph dataset's "
    ), done.stderr
    assert not (tmp_path / "part").exists()


@pytest.mark.timeout(420)
def test_wordnet_partitioned_by_fennel_trains(tmp_path: Path) -> None:
    """`graphtrain run` of WordNet GraphSAGE (2 shard servers x 2 trainers, 1 small epoch) with fennel."""
    doc = yaml.safe_load((Path(__file__).parents[3] / "examples" / "wordnet-sage.yaml").read_text())
    s = doc["spec"]
    s["partition"]["algorithm"] = "fennel"
    s["embeddings"][0]["dim"] = 16
    s["model"].update(hiddenDim=64, featureProjection=64)
    s["training"].update(epochs=1, fanouts=[5, 5])
    path = tmp_path / "wordnet.yaml"
    path.write_text(yaml.safe_dump(doc))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [*GRAPHTRAIN, "run", str(path), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=400,
        env=ENV,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["phase"] == "Succeeded"
    config = json.loads(next((run_dir / "partition").glob("*.json")).read_text())
    assert config["algorithm"] == "fennel" and config["stats"]["balance"]["nodes"] <= 1.05
    result = json.loads((run_dir / "result.json").read_text())
    # 45 classes, the largest 12.3 % of the nodes: one epoch already learns well past it (0.36 measured)
    assert result["test_accuracy"] > 0.25, result


# `graphtrain partition` whose streaming bucket pass marks that it began and then waits to be stopped
_STOPPED_IN_BUCKETS = """
import sys, time
from pathlib import Path
from graphtrain.runtime.partition import streaming

MARK = Path(sys.argv.pop(1))

def bucket(*args, **kwargs):
    MARK.write_text("")
    time.sleep(60)

streaming.bucket = bucket
from graphtrain.cli import main
main()
"""


@pytest.mark.timeout(120)
def test_sigterm_mid_partition_leaves_no_scratch_or_temporary_files(tmp_path: Path, stored: Path) -> None:
    """SIGTERM during the bucket pass (the Job's pod stopped): exit 143 in one line, and neither the
    scratch files nor the output's temporary directory stay beside --out."""
    split = {"train": 0.6, "val": 0.2, "test": 0.2, "seed": 0}
    path = spec(tmp_path, {"dataset": "metis-4elt", "split": split}, {"algorithm": "fennel"})
    parent, mark = tmp_path / "parts", tmp_path / "in-buckets"
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_IN_BUCKETS, str(mark), "partition", "--spec", str(path)]
        + ["--out", str(parent / "out"), "--data-dir", str(stored)],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        for _ in range(600):
            if mark.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert mark.exists(), proc.stderr.read() if proc.stderr else "the bucket pass began"
        made = sorted(p.name for p in parent.iterdir())  # the temporary directory, its scratch, its lock
        assert [n.split("-")[0] for n in made] == [".out.tmp"] * 3
        assert sorted(n.rsplit(".", 1)[-1] for n in made if n.count(".") == 3) == ["lock", "scratch"]
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines() == [f"terminated (SIGTERM): nothing written to {parent / 'out'}"]
    assert list(parent.iterdir()) == []
