"""The spec's input files: relative paths are the spec's directory's, and a partition is reused only
while the inputs hold the same bytes (issue 20, items 2 and 9; a directed input is named, item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from graphtrain.contract.spec import API_VERSION, GraphSource, GraphTraining, load_yaml, parse
from graphtrain.runtime import partition
from graphtrain.runtime.cli import app
from graphtrain.runtime.data import inputs
from graphtrain.runtime.errors import DataError, GraphtrainError
from graphtrain.runtime.launch.local import LocalRun


def spec_doc(graph: dict, **model: object) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "GraphTraining",
        "metadata": {"name": "mine"},
        "spec": {
            "graph": graph,
            "partition": {"parts": 2},
            "model": {"kind": "graphsage", "hiddenDim": 8, **model},
            "training": {"epochs": 1, "fanouts": [2, 2]},
        },
    }


def write_npz(path: Path, label: np.ndarray, n: int = 200, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 4 * n)
    dst = rng.integers(0, n, 4 * n)
    feat = rng.normal(size=(n, 4)).astype(np.float32)
    np.savez(path, src=np.r_[src, dst], dst=np.r_[dst, src], num_nodes=np.int64(n), feat=feat, label=label)


def npz_project(tmp_path: Path, n: int) -> tuple[Path, Path, GraphTraining]:
    """mine.npz (n nodes, 3 classes) and mine.yaml reading it by a relative path."""
    data = tmp_path / "mine.npz"
    write_npz(data, np.arange(n) % 3)
    spec_file = tmp_path / "mine.yaml"
    spec_file.write_text(yaml.safe_dump(spec_doc({"path": "mine.npz"})))
    return data, spec_file, load_yaml(spec_file.read_text())


def test_relative_paths_start_at_the_spec_directory(tmp_path: Path) -> None:
    source = GraphSource.model_validate(
        {
            "triples": {"path": "kg/train.tsv", "valid": "/abs/valid.tsv", "test": "kg/test.tsv"},
        }
    )
    got = inputs.resolve(source, tmp_path / "specs")
    assert got.triples is not None
    assert got.triples.path == str(tmp_path / "specs" / "kg" / "train.tsv")
    assert got.triples.valid == "/abs/valid.tsv"
    graph = inputs.resolve(
        GraphSource.model_validate({"path": "g.tsv", "features": "f.npy", "labels": "/l.csv"}), tmp_path
    )
    assert (graph.path, graph.features, graph.labels) == (
        str(tmp_path / "g.tsv"),
        str(tmp_path / "f.npy"),
        "/l.csv",
    )
    assert inputs.input_files(graph) == {
        "graph.path": tmp_path / "g.tsv",
        "graph.features": tmp_path / "f.npy",
        "graph.labels": Path("/l.csv"),
    }


def test_the_fingerprint_sees_new_bytes_under_the_same_size_and_mtime(tmp_path: Path) -> None:
    f = tmp_path / "g.tsv"
    f.write_text("0\t1\n1\t2\n")
    source = inputs.resolve(GraphSource.model_validate({"path": "g.tsv"}), tmp_path)
    before = inputs.fingerprint(source)
    stat = f.stat()
    f.write_text("0\t2\n1\t2\n")  # same size
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
    assert inputs.fingerprint(source) != before
    f.unlink()
    with pytest.raises(DataError, match=r"graph.path: .*g.tsv: file not found"):
        inputs.fingerprint(source)


def test_partition_cli_reads_relative_paths_from_the_spec_directory(tmp_path: Path, monkeypatch) -> None:
    specs = tmp_path / "project"
    specs.mkdir()
    n = 200
    write_npz(specs / "mine.npz", np.arange(n) % 3)
    (specs / "mine.yaml").write_text(yaml.safe_dump(spec_doc({"path": "mine.npz"})))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # on main this read ./mine.npz: "file not found"
    result = CliRunner().invoke(
        app, ["partition", "--spec", str(specs / "mine.yaml"), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert partition.load_config(tmp_path / "out").data["num_nodes"] == n


def test_a_rewritten_input_is_partitioned_again(tmp_path: Path) -> None:
    """Issue 20 item 2: the same spec over a rewritten .npz (labels shuffled) trained on the old labels."""
    n = 200
    data, spec_file, gt = npz_project(tmp_path, n)
    said: list[str] = []

    def partition_labels() -> np.ndarray:
        run = LocalRun(gt, spec_file, tmp_path / "run", echo=False)
        run.say = said.append  # type: ignore[method-assign]
        (tmp_path / "run").mkdir(exist_ok=True)
        return partition.reassemble(partition.load_config(run.partition())).label  # type: ignore[return-value]

    first = partition_labels()
    again = partition_labels()
    assert said[-1].startswith("[run] reusing the partition")
    np.testing.assert_array_equal(first, again)
    stat = data.stat()
    shuffled = np.random.default_rng(1).permutation(np.arange(n) % 3)
    write_npz(data, shuffled)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert data.stat().st_size == stat.st_size
    np.testing.assert_array_equal(partition_labels(), shuffled)
    assert said[-1].startswith("[run] partitioning")


def test_an_input_rewritten_while_it_is_partitioned_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review hA: the inputs were hashed before they were read, so a file rewritten in between was recorded
    under the old hash, and the next run reused a partition of other bytes. Now they are hashed again
    after the partition step: when they differ, the partition is used once and not recorded."""
    from graphtrain.runtime.launch import partition_step

    n = 200
    data, spec_file, gt = npz_project(tmp_path, n)
    said: list[str] = []
    real = partition_step.partition

    def rewritten_meanwhile(*args: object, **kwargs: object) -> object:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        write_npz(data, np.random.default_rng(2).permutation(np.arange(n) % 3))  # a writer, meanwhile
        return out

    def run_partition() -> None:
        run = LocalRun(gt, spec_file, tmp_path / "run", echo=False)
        run.say = said.append  # type: ignore[method-assign]
        (tmp_path / "run").mkdir(exist_ok=True)
        run.partition()

    monkeypatch.setattr(partition_step, "partition", rewritten_meanwhile)
    run_partition()
    assert (
        said[-1] == "[run] warning: an input changed while it was partitioned; the next run partitions again"
    )
    monkeypatch.setattr(partition_step, "partition", real)
    run_partition()
    assert said[-1].startswith("[run] partitioning"), said  # not "reusing": the record was not made
    run_partition()
    assert said[-1].startswith("[run] reusing the partition"), said


def test_a_one_direction_edge_list_for_graphsage_is_named(tmp_path: Path) -> None:
    """Issue 20 item 4: a directed input without reverseEdges trained to 0.654 instead of 0.845, silently."""
    n = 200
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, 800)
    dst = rng.integers(0, n, 800)
    feat = rng.normal(size=(n, 4)).astype(np.float32)
    np.savez(
        tmp_path / "one_way.npz", src=src, dst=dst, num_nodes=np.int64(n), feat=feat, label=np.arange(n) % 2
    )
    for reverse, warned in ((False, True), (True, False)):
        doc = spec_doc({"path": "one_way.npz", "reverseEdges": reverse})
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
        result = CliRunner().invoke(
            app,
            ["partition", "--spec", str(tmp_path / "s.yaml"), "--out", str(tmp_path / f"out{reverse}")],
        )
        assert result.exit_code == 0, result.output
        assert ("reverseEdges: true" in result.output) == warned, result.output


def test_a_fifo_input_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "g.tsv"
    os.mkfifo(fifo)
    source = inputs.resolve(GraphSource.model_validate({"path": "g.tsv"}), tmp_path)
    with pytest.raises(DataError, match=r"graph.path: .*g.tsv is not a regular file"):
        inputs.fingerprint(source)  # on the first version: open() blocked until a writer came


def test_a_directory_input_is_refused_by_its_field(tmp_path: Path) -> None:
    """A directory where a split file goes (graph.triples.valid): a DataError naming the field, not the
    IsADirectoryError of opening it (a traceback from `graphtrain run`)."""
    (tmp_path / "train.tsv").write_text("a\tr\tb\n")
    (tmp_path / "test.tsv").write_text("a\tr\tb\n")
    (tmp_path / "valid.tsv").mkdir()
    triples = {"path": "train.tsv", "valid": "valid.tsv", "test": "test.tsv"}
    source = inputs.resolve(GraphSource.model_validate({"triples": triples}), tmp_path)
    with pytest.raises(DataError, match=r"graph.triples.valid: .*valid.tsv is a directory, not a file"):
        inputs.fingerprint(source)


def test_resume_refuses_a_partition_made_from_changed_inputs(tmp_path: Path) -> None:
    """A --resume after the data file changed continued the old tables on a new partition: every node
    took another node's trained row, silently, and the old checkpoints lost the partition they need."""
    n = 200
    data, spec_file, gt = npz_project(tmp_path, n)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = LocalRun(gt, spec_file, run_dir, echo=False).partition()
    node_map = (first.parent / "node_map.npy").read_bytes()
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "LATEST").write_text("step-000000010\n")
    write_npz(data, np.arange(n) % 3, seed=1)  # other edges
    with pytest.raises(
        GraphtrainError, match=r"cannot resume: graph.path \(contents\) changed .*--overwrite"
    ):
        LocalRun(gt, spec_file, run_dir, echo=False, resume=True).partition()
    assert (first.parent / "node_map.npy").read_bytes() == node_map  # the old partition is kept
    doc = spec_doc({"path": "mine.npz"})
    doc["spec"]["partition"]["parts"] = 3
    more = parse(doc)
    with pytest.raises(GraphtrainError, match=r"graph.path \(contents\), partition settings changed"):
        LocalRun(more, spec_file, run_dir, echo=False, resume=True).partition()
    LocalRun(gt, spec_file, run_dir, echo=False, overwrite=True).partition()  # asked for: partitioned anew


def test_the_launcher_starts_without_torch_and_names_the_latest_marker_as_checkpoints_do() -> None:
    """`graphtrain run` imports torch only to read a checkpoint on --resume (1.9 s of CPU a run
    otherwise); its name for the LATEST marker is checkpoint/'s."""
    code = "import sys; from graphtrain.runtime.launch import local; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    from graphtrain.runtime import checkpoint
    from graphtrain.runtime.launch import reuse

    assert reuse.LATEST == checkpoint.LATEST


def test_what_a_killed_launch_left_while_partitioning_is_removed(tmp_path: Path) -> None:
    """A launch killed (SIGKILL, the OOM killer) while it partitioned leaves the output's temporary
    directory and, streaming, scratch files as big as the edge list beside <run>/partition; no later
    launch removed them. The next one, holding the run's lock, does and says so; other files stay."""
    _, spec_file, gt = npz_project(tmp_path, 200)
    run_dir = tmp_path / "run"
    left = [".partition.tmp-k2j4", ".partition.scratch-x81q", ".partition.old-4242"]
    for name in left:
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / "0.src").write_bytes(b"\0" * 64)
    (run_dir / ".partition.tmp-notes").write_text("a file of the user's, not a directory")
    (run_dir / ".partition.tmp-k2j4.lock").write_bytes(b"")  # its writer's lock (data/leftovers.py)
    said: list[str] = []
    run = LocalRun(gt, spec_file, run_dir, echo=False)
    run.say = said.append  # type: ignore[method-assign]
    run.partition()
    assert sorted(p.name for p in run_dir.glob(".partition*")) == [".partition.tmp-notes"]
    removed = [
        f"[run] removed {run_dir / name}: left by a launch stopped while it partitioned" for name in left
    ]
    assert sorted(line for line in said if line.startswith("[run] removed")) == sorted(removed)


def test_inference_compares_what_the_inputs_hold_not_where_they_are(tmp_path: Path) -> None:
    """inference_changes: the fields an inference's spec changes of the graph its checkpoint's partition
    was made from, by spec field; moved inputs of the same bytes, and inputs it cannot read (moved away,
    a dataset not cached: inference reads the partition), change nothing."""
    from graphtrain.runtime.launch.reuse import inference_changes, partition_key

    data, spec_file, gt = npz_project(tmp_path, 60)
    source = inputs.resolve(gt.spec.graph, tmp_path)
    trained = partition_key(gt.spec, source, inputs.fingerprint(source))
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "mine.npz").write_bytes(data.read_bytes())
    there = inputs.resolve(gt.spec.graph, moved)
    assert inference_changes(trained, partition_key(gt.spec, there, inputs.fingerprint(there))) == []
    assert inference_changes(trained, partition_key(gt.spec, there, {"graph.path": "missing"})) == []
    write_npz(moved / "mine.npz", np.arange(60) % 2)
    doc = spec_doc({"path": "mine.npz", "split": {"seed": 3}, "reverseEdges": True})
    doc["spec"]["partition"]["parts"] = 3
    other = parse(doc)
    given = partition_key(other.spec, inputs.resolve(other.spec.graph, moved), inputs.fingerprint(there))
    assert inference_changes(trained, given) == [
        "graph.path (contents)",
        "graph.reverseEdges",
        "graph.split",
        "partition.parts",
    ]


@pytest.mark.parametrize(
    "made_for, said",
    [
        ('{"inputs": 5}', "its inputs are not a map of content hashes"),
        ('{"inputs": {"graph.path": []}}', "its inputs are not a map of content hashes"),
        ('{"partition": 5}', "its partition is not a map"),
        ('{"graph": []}', "its graph is not a map"),
        ('"text"', "not a JSON object"),
        ("[" * 100_000, "nested too deeply"),
        ("garbage", "Expecting value"),
    ],
)
def test_a_hand_edited_made_for_is_a_value_error(made_for: str, said: str) -> None:
    """A checkpoint's or a partition's made_for (no hash covers either) reached inference_changes as a
    TypeError or a RecursionError, a traceback from `infer` and `predict`; a ValueError is said in one line
    (launch/inference.py graph_changes)."""
    from graphtrain.runtime.launch.reuse import inference_changes

    with pytest.raises(ValueError, match=said):
        inference_changes(made_for, '{"graph": {}, "inputs": {}, "partition": {}, "projection": null}')
