"""Issue 20 end to end with `graphtrain run`: one stamped line per finished epoch with its own metric,
metrics.csv and TensorBoard events, a changed model refused on --resume in one line (by the launcher
and by a trainer alone), Ctrl-C's hint and the resume that follows it, and early stopping across two
trainers with the best checkpoint kept. Small planted graph, standalone where the point allows."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
import yaml

from graphtrain.runtime.graph import node_split
from graphtrain.runtime.partition import load_config
from tests.runtime.launch.test_run import (
    CLI,
    ONE_THREAD,
    complete,
    graph_file,  # noqa: F401 - the module's fixture
    sage_spec,
    start_launcher,
    stop_launcher,
    wait_for,
    write_spec,
)

HHMMSS = r"\d\d:\d\d:\d\d"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def epoch_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.search(r"\[run\] epoch \d+/\d+ ", line)]


@pytest.mark.timeout(300)
def test_one_line_per_epoch_a_history_and_a_changed_model_refused_in_one_line(
    graph_file: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=3)
    doc["spec"]["training"]["evalEvery"] = 2
    write_spec(doc, run_dir)
    done = complete(run_dir, "--standalone")
    assert done.returncode == 0, done.stderr[-3000:]

    # item 8: exactly one line per finished epoch, its own metric only (epoch 1 was not evaluated)
    lines = epoch_lines(done.stderr)
    assert [re.search(r"epoch (\d)/3", line).group(1) for line in lines] == ["1", "2", "3"], done.stderr
    assert "val_" not in lines[0] and "val_accuracy" in lines[1] and "val_accuracy" in lines[2]
    assert all(re.match(HHMMSS + r" \[run\] ", line) for line in done.stderr.splitlines() if "[run]" in line)
    trainer_log = (run_dir / "logs" / "trainer-0.log").read_text().splitlines()
    assert all(re.match(ISO + " ", line) for line in trainer_log if "[trainer]" in line), trainer_log
    said = [line for line in trainer_log if "[trainer] epoch" in line]  # the last: 3/3, never 4/3 running
    assert said[-1].split("[trainer] ")[1].startswith("epoch 3/3  ") and "epoch 4/3" not in "".join(said)
    result = json.loads((run_dir / "result.json").read_text())
    assert "(the last model, epoch 3)" in done.stdout and f"at epoch {result['best_epoch']}" in done.stdout

    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,step,loss,val_accuracy") and len(rows) == 4
    assert rows[1].split(",")[3] == "" and rows[2].split(",")[3] != ""
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))

    # item 6: --resume after changing model.hiddenDim, refused by the launcher before anything starts
    doc["spec"]["model"]["hiddenDim"] = 64
    spec_path = write_spec(doc, run_dir)
    refused = complete(run_dir, "--standalone", "--resume")
    assert refused.returncode == 1
    said = refused.stderr.strip().splitlines()[-1]
    assert "model.hiddenDim 32, the spec says 64: --resume needs the same model" in said, refused.stderr
    assert "Traceback" not in refused.stderr and "size mismatch" not in refused.stderr

    # ... and by a trainer alone (a pod has no launcher): one `error:` line, no traceback
    partition = next((run_dir / "partition").glob("*.json"))
    alone = subprocess.run(
        [*CLI, "train", "--standalone", "--spec", str(spec_path), "--partition", str(partition)]
        + ["--checkpoint-root", str(run_dir / "checkpoints")],
        capture_output=True,
        text=True,
        timeout=120,
        env=ONE_THREAD,
    )
    assert alone.returncode == 1
    assert "Traceback" not in alone.stderr, alone.stderr[-3000:]
    last = alone.stderr.strip().splitlines()[-1]
    assert last.startswith("error: checkpoint step-") and "model.hiddenDim 32, the spec says 64" in last


@pytest.mark.timeout(400)
def test_ctrl_c_says_how_to_resume_and_the_resume_says_where_it_starts(
    graph_file: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=300, batch=32)
    # a checkpoint every 25 steps, none at an epoch's end (no validation pass before the last epoch): the
    # launch stops after a checkpoint inside an epoch, and the resume continues that epoch
    doc["spec"]["training"].update(checkpointInterval=25, evalEvery=1000)
    proc = start_launcher(doc, run_dir, "--standalone")
    children: list[psutil.Process] = []
    try:
        wait_for((run_dir / "checkpoints" / "LATEST").exists, proc, "checkpoint")
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        stop_launcher(proc, children)
    said = (tmp_path / "run.out").read_text()
    spec_path = tmp_path / "run.yaml"
    hint = f"interrupted; continue with: graphtrain run {spec_path} --run-dir {run_dir} --standalone --resume"
    assert proc.returncode == 130 and said.strip().splitlines()[-1] == hint, said[-3000:]
    assert "Traceback" not in said and "Aborted" not in said

    latest = (run_dir / "checkpoints" / "LATEST").read_text().strip()
    meta = json.loads((run_dir / "checkpoints" / latest / "trainer.json").read_text())
    doc["spec"]["training"]["epochs"] = meta["epoch"] + 1  # one more epoch is enough to see it go on
    write_spec(doc, run_dir)
    done = complete(run_dir, "--standalone", "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from step {meta['step']} (epoch {meta['epoch']}, checkpoint {latest})" in done.stderr
    lines = epoch_lines(done.stderr)  # the epochs printed before the interrupt are not printed again
    assert len(lines) == 1 and f"epoch {meta['epoch'] + 1}/{meta['epoch'] + 1}" in lines[0], done.stderr
    # it went on inside the epoch: only the epoch's remaining steps were taken
    train_ids = node_split(load_config(next((run_dir / "partition").glob("*.json"))), "train", 0, 1)
    per_epoch = -(-len(train_ids) // 32)
    assert 0 < meta["epoch_step"] == meta["step"] - meta["epoch"] * per_epoch < per_epoch, (meta, per_epoch)
    progress = json.loads((run_dir / "status.json").read_text())["progress"]
    assert progress["step"] == (meta["epoch"] + 1) * per_epoch, (progress, meta, per_epoch)
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, meta["epoch"] + 2))


@pytest.mark.timeout(300)
def test_early_stopping_stops_both_trainers_and_keeps_the_best_checkpoint(
    graph_file: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    doc = sage_spec(graph_file, epochs=20)
    # minDelta 1: no accuracy can rise by more, so the second pass is stale and patience 1 ends it there
    doc["spec"]["training"]["earlyStopping"] = {"patience": 1, "minDelta": 1.0}
    write_spec(doc, run_dir)
    done = complete(run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["last_epoch"] == 2 and "training.earlyStopping.patience" in result["stopped_early"]
    assert "[run] stopped early after epoch 2: val_accuracy has not improved by more than 1" in done.stderr
    st = json.loads((run_dir / "status.json").read_text())
    assert st["phase"] == "Succeeded" and st["progress"]["epoch"] == 2
    root = run_dir / "checkpoints"
    assert (root / "BEST").read_text().strip() == result["best_checkpoint"]
    assert (root / result["best_checkpoint"] / "checkpoint.json").exists()
    assert (
        f"best: val_accuracy {result['best_val_accuracy']:.4f} at epoch {result['best_epoch']}" in done.stdout
    )
    assert len((run_dir / "metrics.csv").read_text().splitlines()) == 3
    for rank in (0, 1):  # both trainers ended by themselves, at the same epoch
        beat = json.loads((run_dir / "trainers" / f"rank-{rank}.json").read_text())
        assert beat["epoch"] == 2, beat
    assert yaml.safe_load((tmp_path / "run.yaml").read_text())["spec"]["training"]["epochs"] == 20
