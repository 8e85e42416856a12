"""`graphtrain infer`: every node's outputs from a trained checkpoint, layer by layer over the whole graph
on 2 trainers x 2 shard servers, against a single-process computation of the same model (predict.py:
each node's whole neighbourhood expanded, no shard servers), the training's own final evaluation, and
the inputs a user gets wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.checkpoint import verified
from graphtrain.runtime.cli_launch import inference_name
from graphtrain.runtime.outputs import checkpoint_partition
from graphtrain.runtime.predict import node_outputs
from tests import forked
from tests.runtime.launch.test_run import launch, planted_npz, sage_spec

CLI = [sys.executable, "-m", "graphtrain.runtime.cli"]


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return planted_npz(tmp_path_factory.mktemp("graph") / "planted.npz")


@pytest.fixture(scope="module")
def trained(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(spec path, run directory, result) of a 2x2 GraphSAGE training on the planted graph."""
    run_dir = tmp_path_factory.mktemp("infer") / "train"
    result = launch(sage_spec(graph_file, epochs=2), run_dir).run()
    return run_dir.parent / "train.yaml", run_dir, result


def infer(
    spec: Path, checkpoint: Path, run_dir: Path, *args: str, refused: bool = False
) -> subprocess.CompletedProcess:
    """`graphtrain infer`; one that is `refused` (its launcher says no before its children would work)
    forked with torch imported (tests/forked.py): the launcher's ~2.5 s of CPU importing it is spared."""
    argv = [*CLI, "infer", str(checkpoint), "--spec", str(spec), "--run-dir", str(run_dir), *args]
    if refused:
        return forked.complete_argv(argv, timeout=240)
    return subprocess.run(argv, capture_output=True, text=True, timeout=240)


def read_output(out: Path) -> tuple[dict, dict[str, np.ndarray]]:
    manifest = json.loads((out / "manifest.json").read_text())
    parts = [pq.read_table(out / p).to_pydict() for p in manifest["parts"]]
    cols = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(cols["id"])
    return manifest, {k: v[order] for k, v in cols.items()}


def settle(root: Path) -> None:
    """Wait (at most verified.RACY_NS) until no file under `root` changed within RACY_NS: files changed
    closer to the check are left out of its record (checkpoint/verified.py), which this test reads."""
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in root.rglob("*") if p.is_file())
    time.sleep(max(0.0, (newest + verified.RACY_NS - time.time_ns()) / 1e9 + 0.05))


@pytest.mark.timeout(300)
def test_infer_on_2x2_equals_one_process_and_the_trainings_evaluation(
    trained: tuple[Path, Path, dict],
    graph_file: Path,
    tmp_path: Path,
) -> None:
    spec, run_dir, result = trained
    settle(run_dir / "checkpoints")
    done = infer(spec, run_dir / "checkpoints" / "LATEST", tmp_path / "inf")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows/s" in done.stdout and "test_accuracy" in done.stdout, done.stdout
    # the run goes by its directory's name: the local API, which knows runs by their document's name,
    # served only the last written of a training and its inference when they shared one
    assert json.loads((tmp_path / "inf" / "graphtraining.json").read_text())["metadata"]["name"] == "inf"
    assert done.stdout.startswith("inf: inferred"), done.stdout
    manifest, cols = read_output(tmp_path / "inf" / "inference")
    data = np.load(graph_file)
    n = len(data["label"])
    assert manifest["rows"] == n and manifest["parts"] == ["part-00000.parquet", "part-00001.parquet"]
    assert (cols["id"] == np.arange(n)).all()  # every node once, by its own id
    # the test accuracy of the written predictions is the training's final evaluation (the last model)
    test = data["test_mask"].astype(bool)
    accuracy = float((cols["predicted"][test] == data["label"][test]).mean())
    assert accuracy == pytest.approx(result["test_accuracy"], abs=1e-9)
    assert manifest["test_accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-9)
    # every node's outputs within 1e-5 of one process computing each node's whole neighbourhood
    gt = load_yaml(spec.read_text())
    checkpoint = run_dir / "checkpoints" / (run_dir / "checkpoints" / "LATEST").read_text().strip()
    cfg = checkpoint_partition(checkpoint)
    probs = node_outputs(gt, checkpoint, cfg)
    hidden = node_outputs(gt, checkpoint, cfg, embeddings=True)
    assert (probs.ids == np.arange(n)).all()
    for name, values in probs.columns.items():
        if name.startswith("p_"):
            np.testing.assert_allclose(cols[name], values, atol=1e-5)
    emb = np.stack(cols["embedding"])
    np.testing.assert_allclose(emb, np.stack(list(hidden.columns.values()), 1), atol=1e-5)
    assert emb.shape == (n, 32)  # model.hiddenDim
    # the layers' scratch rows never reach a checkpoint, and no process of the run printed a traceback
    # (the servers' scratch segments once broke Python's resource tracker, which splits names at ':')
    assert not list((run_dir / "checkpoints").rglob("scratch:*"))
    # the files hashed before start, which the shard servers (--verified) do not hash again
    record = json.loads((tmp_path / "inf" / "checkpoint-verified.json").read_text())
    assert set(record["files"]) >= {os.path.realpath(p) for p in checkpoint.rglob("*.npy")}
    for log in (tmp_path / "inf" / "logs").glob("*.log"):
        assert "Traceback" not in log.read_text(), log


@pytest.mark.timeout(300)
def test_standalone_infers_what_2x2_does_and_a_rerun_replaces_the_output(
    trained: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    spec, run_dir, _ = trained
    out = tmp_path / "emb"
    first = infer(spec, run_dir / "checkpoints", tmp_path / "a", "--out", str(out), "--standalone")
    assert first.returncode == 0, first.stderr[-3000:]
    _, alone = read_output(out)
    (out / "notes.txt").write_text("the user's")  # an earlier output holding a file of the user's ...
    refused = infer(spec, run_dir / "checkpoints" / "BEST", tmp_path / "b", "--out", str(out), refused=True)
    assert refused.returncode == 1 and "holds files an inference did not write (notes.txt)" in refused.stderr
    assert (out / "notes.txt").read_text() == "the user's"  # ... is not replaced, nor the file deleted
    (out / "notes.txt").unlink()
    again = infer(spec, run_dir / "checkpoints" / "BEST", tmp_path / "b", "--out", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    _, two = read_output(out)
    np.testing.assert_allclose(np.stack(two["embedding"]), np.stack(alone["embedding"]), atol=1e-5)
    assert (two["predicted"] == alone["predicted"]).all()


@pytest.mark.timeout(120)
def test_what_infer_refuses_changes_nothing(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    spec, run_dir, _ = trained
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("not an inference output")
    cases = {
        "exists and is not an earlier inference's output": (run_dir / "checkpoints", ["--out", str(keep)]),
        "no such checkpoint": (tmp_path / "nowhere" / "LATEST", []),
    }
    for said, (checkpoint, args) in cases.items():
        done = infer(spec, checkpoint, tmp_path / "r", *args, refused=True)
        assert done.returncode == 1, (said, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert (keep / "notes.txt").read_text() == "not an inference output"
    # the training's own run directory: refused before anything is written there
    done = infer(spec, run_dir / "checkpoints", run_dir, refused=True)
    assert done.returncode == 1 and "holds a training's checkpoints" in done.stderr, done.stderr
    assert not (run_dir / "inference.yaml").exists()
    # a spec of another graph (here its split): inference reads the checkpoint's partition, and
    # answered for the training's graph without a word; now refused, naming the field
    other = yaml.safe_load(spec.read_text())
    other["spec"]["graph"]["split"] = {"seed": 7}
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    done = infer(tmp_path / "other.yaml", run_dir / "checkpoints", tmp_path / "o", refused=True)
    assert done.returncode == 1 and "spec graph.split: not what checkpoint" in done.stderr, done.stderr
    # an output inside the checkpoints directory, which training's retention prunes
    done = infer(
        spec,
        run_dir / "checkpoints",
        tmp_path / "c",
        "--out",
        str(run_dir / "checkpoints" / "o"),
        refused=True,
    )
    assert done.returncode == 1 and "inside the checkpoints directory" in done.stderr, done.stderr
    assert not (run_dir / "checkpoints" / "o").exists()
    # a knowledge-graph model has no layers to infer: refused before anything starts
    nations = yaml.safe_load((Path(__file__).parents[3] / "examples" / "nations-transe.yaml").read_text())
    (tmp_path / "kge.yaml").write_text(yaml.safe_dump(nations))
    done = infer(tmp_path / "kge.yaml", run_dir / "checkpoints", tmp_path / "k", refused=True)
    assert done.returncode == 1 and "has no layers to infer" in done.stderr, done.stderr
    assert not (tmp_path / "k").exists()


def test_predict_refuses_a_spec_of_another_graph_but_not_of_other_parts(
    trained: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    """predict reads the checkpoint's partition as infer does: a spec of another graph answered for the
    training's graph with exit 0. It runs in one process, so partition.parts is no concern of it."""
    spec, run_dir, _ = trained
    doc = yaml.safe_load(spec.read_text())
    doc["spec"]["graph"]["reverseEdges"] = not doc["spec"]["graph"].get("reverseEdges", False)
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(doc))
    argv = [*CLI, "predict", str(run_dir / "checkpoints"), "-o", str(tmp_path / "p.csv"), "--spec"]
    done = forked.complete_argv([*argv, str(tmp_path / "other.yaml")], timeout=240)
    assert done.returncode == 1 and "spec graph.reverseEdges: not what checkpoint" in done.stderr, done.stderr
    assert not (tmp_path / "p.csv").exists()
    doc = yaml.safe_load(spec.read_text())
    doc["spec"]["partition"]["parts"] = 3
    (tmp_path / "parts.yaml").write_text(yaml.safe_dump(doc))
    done = forked.complete_argv([*argv, str(tmp_path / "parts.yaml")], timeout=240)
    assert done.returncode == 0 and (tmp_path / "p.csv").exists(), done.stderr


@pytest.mark.parametrize(
    ("run_dir", "expected"),
    [
        ("wordnet-sage-inference", "wordnet-sage-inference"),  # the default run directory
        ("inf", "inf"),
        ("Inf_2", "wordnet-sage"),  # no training name: the trained one's
        ("x" * 41, "wordnet-sage"),  # past the 40 characters a name may have
    ],
)
def test_an_inference_goes_by_its_run_directorys_name_when_it_can(run_dir: str, expected: str) -> None:
    assert inference_name("wordnet-sage", run_dir) == expected
