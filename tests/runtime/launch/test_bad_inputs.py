"""`graphtrain run` with a data path that is wrong: refused in one line, leaving no run directory.

A spec whose graph.path named a missing file was refused in one line, but only after a fresh
runs/<name> had been made holding a Failed status (and a token, logs, the applied spec): debris the
corrected run then had to take over. An input that cannot be opened is now refused before the run
directory is made or changed (a run it would resume keeps every file as it was); one that opens but
cannot be read as a graph fails while partitioning, and the launch then removes what it made itself,
never a directory or a file that was there before it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.local import LocalRun
from tests.runtime.launch.test_run import CLI, ONE_THREAD, graph_file, sage_spec, status, tree_hashes

__all__ = ["graph_file"]  # test_run's fixture, used here


def spec_file(tmp_path: Path, graph: Path, epochs: int = 1) -> Path:
    """A one-trainer spec of `graph` in its own directory, apart from any run directory."""
    doc = sage_spec(graph, epochs=epochs)
    doc["spec"]["trainers"]["replicas"] = 1
    path = tmp_path / "specs" / "planted.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def run_cli(spec: Path, run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "run", str(spec), "--run-dir", str(run_dir), "--standalone", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=ONE_THREAD,
    )


def launch(spec: Path, run_dir: Path, **options: bool) -> LocalRun:
    return LocalRun(load_yaml(spec.read_text()), spec, run_dir, standalone=True, echo=False, **options)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The refusal: exit 1, one line on stderr, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    return lines[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_an_input_that_cannot_be_opened_is_refused_before_the_run_directory_is_made(
    tmp_path: Path, kind: str
) -> None:
    graph = tmp_path / "graph.npz"
    if kind == "directory":
        graph.mkdir()
    elif kind == "fifo":
        os.mkfifo(graph)  # opened without blocking: refused, not waited on
    run_dir = tmp_path / "runs" / "planted"
    said = one_line(run_cli(spec_file(tmp_path, graph), run_dir))
    assert said.startswith(f"error: spec.graph.path: {graph}"), said
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(300)
def test_an_input_that_is_no_graph_leaves_nothing_and_the_corrected_run_needs_no_overwrite(
    graph_file: Path, tmp_path: Path
) -> None:
    """Refused while partitioning (it opens, but is no .npz): the run directory and the parents the
    launch made are removed; the corrected spec then runs there as in a new directory."""
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"not an npz")
    (tmp_path / "runs").mkdir()  # there before: kept
    run_dir = tmp_path / "runs" / "made" / "planted"
    with pytest.raises(GraphtrainError, match="broken.npz"):
        launch(spec_file(tmp_path, bad), run_dir).run()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == []

    done = run_cli(spec_file(tmp_path, graph_file), run_dir)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert status(run_dir)["phase"] == "Succeeded"


@pytest.mark.timeout(120)
def test_an_empty_run_directory_made_before_is_kept_empty(tmp_path: Path) -> None:
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"not an npz")
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    with pytest.raises(GraphtrainError, match="broken.npz"):
        launch(spec_file(tmp_path, bad), run_dir).run()
    assert run_dir.is_dir() and list(run_dir.iterdir()) == []


@pytest.mark.timeout(300)
def test_a_run_whose_input_is_gone_keeps_every_file_whatever_it_is_asked(
    graph_file: Path, tmp_path: Path
) -> None:
    """A finished run whose graph file moved: --resume, a plain run and --overwrite are each refused in
    one line naming the field, and every file of the run stays as it was (its checkpoints, status,
    logs, token and lock)."""
    moved = tmp_path / "planted.npz"
    moved.write_bytes(graph_file.read_bytes())
    spec = spec_file(tmp_path, moved)
    run_dir = tmp_path / "runs" / "planted"
    launch(spec, run_dir).run()
    before = tree_hashes(run_dir)
    moved.unlink()
    for args in (["--resume"], [], ["--overwrite"]):
        said = one_line(run_cli(spec, run_dir, *args))
        assert said == f"error: spec.graph.path: {moved}: file not found", (args, said)
        assert tree_hashes(run_dir) == before, args
