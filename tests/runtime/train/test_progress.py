"""Issue 20's training and progress parts, their pure pieces: the epoch line (one per finished epoch, its
own metric, never a stale one), trainer log timestamps, metrics.csv and TensorBoard events, the best
epoch and early stopping, the one-line refusal to resume a changed model, the one-line reason of a
failed trainer, the resume hint after Ctrl-C, `--data-dir` in a trainer's command line and `graphtrain
plot`. The end-to-end runs are in tests/runtime/launch/test_run_progress.py."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from graphtrain.contract import reporting
from graphtrain.contract.spec import GraphTraining, GraphTrainingSpec, Progress, load_yaml
from graphtrain.runtime import checkpoint as ckpt
from graphtrain.runtime.cli import app
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.launch.processes import failure_line
from graphtrain.runtime.plot import plot_run, read_metrics
from graphtrain.runtime.report import result_lines, resume_command
from graphtrain.runtime.train import best, history
from graphtrain.runtime.train.dense import load_dense, save_dense
from graphtrain.runtime.train.reporter import Reporter
from graphtrain.runtime.train.resumable import check_resumable, model_changes, model_record
from graphtrain.runtime.train.tally import TrainerProgress

ROOT = Path(__file__).parents[3]
EXAMPLE = ROOT / "examples" / "nations-transe.yaml"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def entry(epoch: int, **kw: object) -> Progress:
    fields: dict[str, object] = {"epoch": epoch, "epochs": 5, "step": 10 * epoch, "loss": 0.5 / epoch}
    return Progress.model_validate({**fields, **kw})


def sage_spec(**model: object) -> GraphTrainingSpec:
    doc = {
        "apiVersion": "graphtrain.io/v1alpha1",
        "kind": "GraphTraining",
        "metadata": {"name": "t"},
        "spec": {
            "graph": {"path": "g.npz"},
            "embeddings": [{"name": "node", "dim": 8}],
            "model": {"hiddenDim": 32, "nodeEmbedding": "node", **model},
            "training": {"fanouts": [5, 5]},
        },
    }
    return GraphTraining.model_validate(doc).spec


# ------------------------------------------------------------------------------------ epoch lines


def test_an_epoch_line_has_its_mean_loss_its_own_metric_and_its_rate() -> None:
    line = reporting.epoch_line(
        entry(2, loss=0.25, eval_metric="val_accuracy", eval_value=0.8125, samples_per_second=12345.6)
    )
    assert line == "epoch 2/5  loss 0.2500  val_accuracy 0.8125  12,346 samples/s"
    assert reporting.epoch_line(entry(3, loss=0.125)) == "epoch 3/5  loss 0.1250"


def test_a_reader_gets_each_history_entry_once_and_an_epoch_trained_again_anew() -> None:
    seen: set = set()
    history = [entry(1), entry(2)]
    assert [p.epoch for p in reporting.unseen(history, seen)] == [1, 2]
    seen |= {reporting.entry_key(p) for p in history}
    assert reporting.unseen(history, seen) == []
    again = [entry(1), entry(2, step=21, updated_at="2026-01-01T00:00:00+00:00")]  # after a resume
    assert [p.step for p in reporting.unseen(again, seen)] == [21]


def test_the_trainer_logs_one_stamped_epoch_line_without_a_stale_metric(
    capsys: pytest.CaptureFixture,
) -> None:
    reporter = Reporter(0, [])
    p = TrainerProgress(epoch=1, epochs=3, step=10, loss=0.5, eval_metric="val_accuracy", eval_value=0.7)
    reporter.report(p, epoch_end=True, evaluated=True)
    p.__dict__.update(epoch=2, step=20, loss=0.4)  # not evaluated: the tally still holds epoch 1's value
    reporter.report(p, epoch_end=True, evaluated=False)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(re.match(ISO + r" \[trainer\] epoch \d/3", line) for line in lines), lines
    assert lines[0].endswith("epoch 1/3  loss 0.5000  val_accuracy 0.7000")
    assert lines[1].endswith("epoch 2/3  loss 0.4000")


def test_a_running_epoch_line_says_it_is_running() -> None:
    p = entry(2, step=25, loss=0.3, samples_per_second=1000.0)
    assert reporting.in_epoch_line(p) == "epoch 3/5 running  step 25  loss 0.3000  1,000 samples/s"


# ------------------------------------------------------------------------------ metrics history


def test_metrics_csv_has_a_row_per_epoch_and_an_empty_cell_when_not_evaluated(tmp_path: Path) -> None:
    log = history.MetricsLog(tmp_path, ["val_accuracy"])
    log.open(0, 0)
    log.epoch(entry(1, samples_per_second=100.0), {"val_accuracy": 0.5})
    log.epoch(entry(2), {})
    log.final(20, {"test_accuracy": 0.75, "best_checkpoint": "step-000000010"})
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "epoch,step,loss,val_accuracy,samples_per_second,wall_time"
    assert rows[1].startswith("1,10,0.5,0.5,100.0,") and rows[2].startswith("2,20,0.25,,,")
    m = read_metrics((tmp_path / "metrics.csv").read_text())
    assert m.epochs == [1, 2] and m.loss == [0.5, 0.25]
    assert m.validation["val_accuracy"][0] == 0.5 and math.isnan(m.validation["val_accuracy"][1])

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"loss", "val_accuracy", "test_accuracy"} <= set(events.Tags()["scalars"])
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(10, 0.5), (20, 0.25)]
    assert [e.step for e in events.Scalars("val_accuracy")] == [10]


def test_a_symlinked_tensorboard_directory_is_not_followed(tmp_path: Path, capsys) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").symlink_to(outside)
    log = history.MetricsLog(run, ["val_accuracy"])
    log.open(0, 0)
    log.epoch(entry(1), {"val_accuracy": 0.5})
    log.final(10, {"test_accuracy": 0.75})
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert "is a symbolic link" in capsys.readouterr().err
    assert (run / "metrics.csv").read_text().count("\n") == 2  # the CSV is kept all the same


def test_a_resumed_run_drops_the_rows_of_the_epochs_it_trains_again(tmp_path: Path) -> None:
    log = history.MetricsLog(tmp_path, ["val_mrr"])
    log.open(0, 0)
    for e in (1, 2, 3):
        log.epoch(entry(e), {"val_mrr": 0.1 * e})
    log.close()
    again = history.MetricsLog(tmp_path, ["val_mrr"])
    again.open(1, 10)  # resumed from epoch 1's checkpoint
    again.epoch(entry(2, loss=0.9), {"val_mrr": 0.9})
    again.close()
    m = read_metrics((tmp_path / "metrics.csv").read_text())
    assert m.epochs == [1, 2] and m.loss == [0.5, 0.9]


# ------------------------------------------------------------------------ best and early stopping


def test_an_error_metric_is_best_when_lowest_and_patience_counts_falls_over_min_delta() -> None:
    """Edge regression's RMSE (lower: the task's lower_is_better): the mirror of the case below."""
    passes = [best.Pass(1, 10, 0.50), best.Pass(2, 20, 0.48), best.Pass(3, 30, 0.49), best.Pass(4, 40, 0.30)]
    state = best.Best()
    said = []
    for p in passes:
        state, improved = best.update(state, p, min_delta=0.05, lower=True)
        said.append((improved, state.stale))
    assert said == [(True, 0), (True, 1), (False, 2), (True, 0)]
    assert state.best == passes[3] and best.replay(passes, 0.05, lower=True) == state


def test_the_best_pass_moves_on_any_rise_and_patience_counts_rises_over_min_delta() -> None:
    passes = [best.Pass(1, 10, 0.50), best.Pass(2, 20, 0.52), best.Pass(3, 30, 0.51), best.Pass(4, 40, 0.70)]
    state = best.Best()
    said = []
    for p in passes:
        state, improved = best.update(state, p, min_delta=0.05)
        said.append((improved, state.stale))
    # 0.52 is the best so far but not 0.05 over 0.50: patience goes on counting
    assert said == [(True, 0), (True, 1), (False, 2), (True, 0)]
    assert state.best == passes[3] and best.replay(passes, 0.05) == state
    assert not best.should_stop(best.replay(passes[:3], 0.05), None)  # no earlyStopping: never
    assert best.should_stop(best.replay(passes[:3], 0.05), 2) and not best.should_stop(
        best.replay(passes[:3], 0.05), 3
    )
    why = best.stop_reason(best.replay(passes[:3], 0.05), "val_mrr", 2, 0.05)
    assert why == (
        "val_mrr has not improved by more than 0.05 for 2 validation passes "
        "(training.earlyStopping.patience); best 0.5200 at epoch 2"
    )


def test_the_passes_replayed_on_resume_end_at_the_checkpoint(tmp_path: Path) -> None:
    passes = [best.Pass(1, 10, 0.5), best.Pass(2, 20, 0.9), best.Pass(3, 30, 0.4)]
    best.save(tmp_path, passes)
    assert (
        best.until(best.load(tmp_path), 10) == passes[:1]
    )  # resumed from step 10: epoch 2's 0.9 never happened
    (tmp_path / best.VALIDATION_FILE).write_text("{not json")
    assert best.load(tmp_path) == []


def test_a_checkpoint_at_an_epochs_last_step_has_not_seen_its_validation_pass() -> None:
    # checkpointInterval dividing the epoch: the checkpoint at step 26 records epoch 1 still running
    # (epoch_step 13 of 13); epoch 2's pass, at the same step, came after it and is evaluated again
    passes = [best.Pass(1, 13, 0.28), best.Pass(2, 26, 0.31)]
    assert best.until(passes, 26, 1) == passes[:1]
    assert best.until(passes, 26, 2) == passes
    assert best.until(passes, 26) == passes


def test_prune_keeps_the_best_checkpoint(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        d = tmp_path / best.checkpoint_name(step)
        d.mkdir()
        (d / ckpt.TOP).write_text("{}")
    ckpt.mark_best(tmp_path, best.checkpoint_name(10))
    ckpt.mark_latest(tmp_path, best.checkpoint_name(40))
    assert ckpt.prune(tmp_path, 2) == [best.checkpoint_name(20)]
    assert (tmp_path / "BEST").read_text().strip() == best.checkpoint_name(10)
    with pytest.raises(GraphtrainError, match="not a complete checkpoint"):
        ckpt.mark_best(tmp_path, "step-000000099")


# ---------------------------------------------------------------------------------- resume checks


def test_resuming_a_changed_hidden_dim_names_the_field_and_both_values() -> None:
    recorded = model_record(sage_spec(hiddenDim=256))
    assert model_changes(recorded, sage_spec(hiddenDim=256)) == []
    with pytest.raises(GraphtrainError) as err:
        check_resumable(recorded, sage_spec(hiddenDim=64), "step-000000120")
    assert str(err.value) == (
        "checkpoint step-000000120 was trained with model.hiddenDim 256, the spec says 64: --resume needs "
        "the same model (or --overwrite to start over)"
    )
    assert model_changes(None, sage_spec()) == []  # an older checkpoint: load_dense checks the shapes


def test_a_kge_record_ignores_graphsage_fields_but_not_a_table_dim() -> None:
    doc = load_yaml(EXAMPLE.read_text())
    recorded = model_record(doc.spec)
    assert not any(k.startswith("model.hidden") for k in recorded)
    changed = doc.spec.model_copy(deep=True)
    changed.embeddings[0].dim += 1
    name = changed.embeddings[0].name
    assert model_changes(recorded, changed) == [
        f"embeddings[{name}].dim {doc.spec.embeddings[0].dim}, the spec says {changed.embeddings[0].dim}"
    ]


def test_resuming_a_table_over_other_node_types_is_refused_and_an_older_record_compares_none() -> None:
    typed = sage_spec().model_copy(deep=True)
    typed.embeddings[0].node_types = ["user"]
    recorded = model_record(typed)
    assert recorded["embeddings[node].nodeTypes"] == ["user"]
    assert model_changes(recorded, sage_spec()) == ["embeddings[node].nodeTypes ['user'], the spec says None"]
    older = {k: v for k, v in model_record(sage_spec()).items() if not k.endswith(".nodeTypes")}
    assert model_changes(older, sage_spec()) == []  # a record from before nodeTypes


def test_another_graph_is_refused_naming_it_and_an_older_record_compares_none() -> None:
    """predict and infer read the checkpoint's own partition: a spec naming another graph was answered
    for the checkpoint's without a word (an attack review's kinships against a Nations checkpoint)."""
    doc = load_yaml(EXAMPLE.read_text())
    recorded = model_record(doc.spec)
    other = doc.spec.model_copy(deep=True)
    other.graph.dataset = "kinships"
    other.graph.reverse_edges = not doc.spec.graph.reverse_edges
    assert model_changes(recorded, other) == [
        f"graph.dataset {doc.spec.graph.dataset}, the spec says kinships",
        f"graph.reverseEdges {doc.spec.graph.reverse_edges}, the spec says {other.graph.reverse_edges}",
    ]
    older = {k: v for k, v in recorded.items() if not k.startswith("graph.")}
    assert model_changes(older, other) == []  # a record from before the graph was recorded


def test_a_dense_state_of_other_shapes_is_one_line_not_a_size_mismatch(tmp_path: Path) -> None:
    big, small = torch.nn.Linear(4, 256), torch.nn.Linear(4, 64)
    save_dense(tmp_path / "dense.pt", big, torch.optim.Adam(big.parameters()))
    with pytest.raises(GraphtrainError) as err:
        load_dense(tmp_path / "dense.pt", small, torch.optim.Adam(small.parameters()))
    assert "bias: checkpoint [256], spec [64]" in str(err.value) and "model.hiddenDim" in str(err.value)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- failures and hints


def test_a_failed_process_is_its_error_line_else_its_exception_line() -> None:
    said = "2026-01-01T00:00:00+00:00 [trainer] epoch 1/3\nerror: checkpoint x was trained with ...\n"
    assert failure_line(said) == "checkpoint x was trained with ..."
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "    model.load_state_dict(state)\n"
        "RuntimeError: Error(s) in loading state_dict for GraphSAGE:\n"
        "\tsize mismatch for layers.0.bias: copying a param with shape torch.Size([256])\n"
    )
    assert failure_line(traceback) == "RuntimeError: Error(s) in loading state_dict for GraphSAGE:"
    assert failure_line("epoch 1/3\nepoch 2/3\n") is None  # killed by a signal: nothing said


def test_the_hint_after_ctrl_c_is_the_same_command_with_resume() -> None:
    spec = Path("my specs/a.yaml")
    assert (
        resume_command(spec, Path("runs/a"), False, False, None)
        == "graphtrain run 'my specs/a.yaml' --resume"
    )
    assert resume_command(spec, Path("r"), True, True, Path("/d")) == (
        "graphtrain run 'my specs/a.yaml' --run-dir r --standalone --data-dir /d --resume"
    )


def test_the_final_lines_name_the_last_model_and_the_best_epoch() -> None:
    result = {
        "val_accuracy": 0.8,
        "test_accuracy": 0.75,
        "last_epoch": 9,
        "best_epoch": 6,
        "best_val_accuracy": 0.85,
        "best_checkpoint": "step-000000120",
    }
    assert result_lines("planted", result, Path("runs/planted")) == [
        "planted: val_accuracy 0.8000, test_accuracy 0.7500 (the last model, epoch 9)",
        "best: val_accuracy 0.8500 at epoch 6: runs/planted/checkpoints/step-000000120 (checkpoints/BEST)",
    ]


def test_counts_in_the_final_line_are_whole_numbers() -> None:
    result = {"val_mrr": 0.5, "val_triples": 1000.0, "test_mrr": 1.0, "test_triples": 40, "last_epoch": 2}
    assert result_lines("kg", result, Path("runs/kg"))[0] == (
        "kg: val_mrr 0.5000, val_triples 1000, test_mrr 1.0000, test_triples 40 (the last model, epoch 2)"
    )


def test_a_step_line_names_the_epoch_in_progress_and_no_stale_metric(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Step 140 runs inside epoch 6 of 6 after epoch 5 was evaluated: the trainer log says epoch 6/6
    running (as the launcher's in-epoch line does), and not epoch 5's val_accuracy."""
    p = TrainerProgress(epoch=5, epochs=6, step=140, loss=0.25, samples_per_second=1000.0)
    p.eval_metric, p.eval_value = "val_accuracy", 0.7907
    Reporter(0, []).report(p)
    said = capsys.readouterr()
    line = (said.out + said.err).strip().splitlines()[-1]
    assert line.endswith("[trainer] epoch 6/6 running  step 140  loss 0.2500  1,000 samples/s"), line
    assert p.summary().startswith("epoch 5/6")  # the status summary keeps its meaning: epochs done


def test_the_final_report_says_the_last_epoch_not_one_more_running(capsys: pytest.CaptureFixture) -> None:
    """After 200 of 200 epochs the trainer's last line said `epoch 201/200 running`: the final report (not
    an epoch's end) was worded as a step report, whose epoch is the one after those done. It is the
    training's summary now, as status.progress.summary says it."""
    p = TrainerProgress(epoch=200, epochs=200, step=4000, loss=0.25, samples_per_second=1000.0)
    p.eval_metric, p.eval_value, p.state = "test_accuracy", 0.85, "Succeeded"
    Reporter(0, []).report(p)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith("[trainer] epoch 200/200  loss 0.2500  test_accuracy 0.8500"), line
    assert p.to_spec().summary == "epoch 200/200  loss 0.2500  test_accuracy 0.8500"


def finished_run(run_dir: Path, spec: GraphTrainingSpec, epoch: int, phase: str = "Succeeded") -> dict:
    """A run directory as a launch that trained `epoch` epochs leaves it: a checkpoint of that epoch
    (LATEST names it), status.json in `phase` and trainer 0's result.json."""
    from graphtrain.runtime import kvstore
    from graphtrain.runtime.tensor import DistEmbedding

    root = run_dir / "checkpoints"
    client = kvstore.standalone(1, checkpoint_root=root)
    DistEmbedding(4, 2, "node", client=client)
    tag = best.checkpoint_name(10 * epoch)
    client.checkpoint(
        tag, extra={"trainer": {"epoch": epoch, "step": 10 * epoch, "model": model_record(spec)}}, root=root
    )
    ckpt.mark_latest(root, tag)
    result = {"val_accuracy": 0.8, "test_accuracy": 0.75, "last_epoch": epoch}
    (run_dir / "result.json").write_text(json.dumps(result))
    (run_dir / "status.json").write_text(json.dumps({"phase": phase}))
    return result


def sage_training(epochs: int) -> GraphTraining:
    return GraphTraining.model_validate(
        {
            "apiVersion": "graphtrain.io/v1alpha1",
            "kind": "GraphTraining",
            "metadata": {"name": "t"},
            "spec": {
                "graph": {"path": "g.npz"},
                "embeddings": [{"name": "node", "dim": 2}],
                "model": {"hiddenDim": 32, "nodeEmbedding": "node"},
                "training": {"fanouts": [5, 5], "epochs": epochs},
            },
        }
    )


def test_resuming_a_complete_run_starts_nothing_and_gives_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphtrain.runtime.launch.local import LocalRun
    from graphtrain.runtime.launch.reuse import finished_result

    gt = sage_training(3)
    result = finished_run(tmp_path, gt.spec, 3)

    def launch(self: LocalRun) -> dict:
        raise AssertionError("servers and trainers started for a complete run")

    monkeypatch.setattr(LocalRun, "_launch", launch)
    (tmp_path / "g.npz").touch()  # the spec's input: a launch refuses one it cannot open before all else
    run = LocalRun(gt, tmp_path / "t.yaml", tmp_path, resume=True, echo=False)
    assert run.run() == result
    assert json.loads((tmp_path / "result.json").read_text()) == result  # left as it was
    # anything else trains: more epochs asked, a launch that failed, no result, an older checkpoint
    meta = {"epoch": 3, "step": 30}
    assert finished_result(tmp_path, meta, 3) == result
    assert finished_result(tmp_path, meta, 4) is None
    assert finished_result(tmp_path, {"epoch": 2}, 3) is None
    (tmp_path / "status.json").write_text(json.dumps({"phase": "Failed"}))
    assert finished_result(tmp_path, meta, 3) is None
    (tmp_path / "status.json").write_text(json.dumps({"phase": "Succeeded"}))
    (tmp_path / "result.json").unlink()
    assert finished_result(tmp_path, meta, 3) is None


def test_resuming_a_run_that_stopped_early_starts_nothing(tmp_path: Path) -> None:
    """It trained on to the next validation pass and stopped again, replacing the result each time."""
    from graphtrain.runtime.launch.reuse import finished_result

    result = {"val_accuracy": 0.5, "last_epoch": 2, "stopped_early": "val_accuracy has not improved"}
    (tmp_path / "result.json").write_text(json.dumps(result))
    (tmp_path / "status.json").write_text(json.dumps({"phase": "Succeeded"}))
    meta = {"epoch": 2, "step": 20}
    assert finished_result(tmp_path, meta, 10, early_stopping=True) == result
    assert finished_result(tmp_path, meta, 10) is None  # earlyStopping removed from the spec: train on
    assert finished_result(tmp_path, {"epoch": 1, "step": 10}, 10, early_stopping=True) is None  # older
    (tmp_path / "result.json").write_text(json.dumps({**result, "stopped_early": None}))
    assert finished_result(tmp_path, meta, 10, early_stopping=True) is None  # interrupted, not stopped


# ------------------------------------------------------------------------------------------- plot


def test_plot_draws_a_png_from_a_runs_metrics(tmp_path: Path) -> None:
    log = history.MetricsLog(tmp_path, ["val_mrr", "val_hits@10"])
    log.open(0, 0)
    for e in (1, 2, 3, 4):
        log.epoch(entry(e), {"val_mrr": 0.1 * e, "val_hits@10": 0.2 * e} if e % 2 == 0 else {})
    log.close()
    out = CliRunner().invoke(app, ["plot", str(tmp_path), "-o", str(tmp_path / "c.png")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_run(tmp_path) == tmp_path / "metrics.png"
    # inside the run directory the plot is private, as the run's own files are
    assert (tmp_path / "metrics.png").stat().st_mode & 0o777 == 0o600


def test_plot_of_a_run_directory_that_does_not_exist_says_so(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["plot", str(tmp_path / "nope")])
    assert out.exit_code == 1
    assert out.output.strip().splitlines() == [f"error: {tmp_path / 'nope'}: no such run directory"]
    assert not (tmp_path / "nope").exists()


def test_plot_of_a_run_without_history_is_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert out.exit_code == 1
    said = "has no metric history (metrics.csv): not a run directory, or no epoch finished yet"
    assert out.output.strip().splitlines() == [f"error: {tmp_path} {said}"]
    (tmp_path / "metrics.csv").write_text(",".join(history.columns(["val_mrr"])) + "\n")
    out = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert out.exit_code == 1 and "no epoch finished yet, nothing to plot" in out.output
    assert json.dumps(out.output).count("\\n") == 1  # one line


def one_line_error(args: list[str]) -> str:
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.output
    return lines[0]


def write_metrics(run: Path, rows: list[str]) -> Path:
    run.mkdir(exist_ok=True)
    (run / "metrics.csv").write_text(
        "epoch,step,loss,val_accuracy,samples_per_second,wall_time\n" + "".join(rows)
    )
    return run


@pytest.mark.parametrize("cell", ["", "inf", "nan", "-1", "1.5", "x"])
def test_plot_of_a_damaged_epoch_cell_names_the_line(tmp_path: Path, cell: str) -> None:
    run = write_metrics(tmp_path / "r", ["1,1,0.5,0.3,1,1\n", f"{cell},2,0.4,0.5,1,1\n"])
    said = one_line_error(["plot", str(run)])
    assert f"metrics.csv:3: epoch {cell!r} is not a whole number of epochs" in said
    assert not (run / "metrics.png").exists()


def test_plot_of_a_non_utf8_metrics_csv_is_one_line(tmp_path: Path) -> None:
    run = write_metrics(tmp_path / "r", ["1,1,0.5,0.3,1,1\n"])
    (run / "metrics.csv").write_bytes((run / "metrics.csv").read_bytes() + b"2,2,\xff\n")
    assert "metrics.csv:3: not UTF-8 text" in one_line_error(["plot", str(run)])


def test_plot_refuses_a_directory_a_fifo_or_another_format(tmp_path: Path) -> None:
    run = write_metrics(tmp_path / "r", ["1,1,0.5,0.3,1,1\n"])
    said = one_line_error(["plot", str(run), "-o", str(tmp_path)])
    assert (
        said
        == f"error: --output {tmp_path}: is a directory; give the file to write, e.g. {tmp_path}/metrics.png"
    )
    assert not (tmp_path.parent / f"{tmp_path.name}.png").exists()
    assert "unknown output format '.txt' (use .png)" in one_line_error(
        ["plot", str(run), "-o", str(run / "x.txt")]
    )
    assert "unknown output format ''" in one_line_error(["plot", str(run), "-o", str(run / "x")])
    (run / "metrics.csv").unlink()
    os.mkfifo(run / "metrics.csv")
    assert one_line_error(["plot", str(run)]) == f"error: {run / 'metrics.csv'}: not a regular file"


def test_plot_creates_missing_directories_and_writes_atomically(tmp_path: Path) -> None:
    """The rule of export and predict: a missing parent is created; the PNG appears only when whole."""
    run = write_metrics(tmp_path / "r", ["1,1,0.5,0.3,1,1\n", "2,2,0.4,,1,1\n"])
    target = tmp_path / "new" / "deeper" / "c.png"
    out = CliRunner().invoke(app, ["plot", str(run), "-o", str(target)])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["c.png"]  # no temporary left
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in one_line_error(["plot", str(run), "-o", str(tmp_path / "file" / "c.png")])


def test_the_rate_counts_the_training_steps_and_not_the_validation_after_them(monkeypatch):
    """An epoch's samples/s ends with its steps: a slow validation pass after stop() does not lower it,
    and the epoch's line reports the pass's seconds beside the rate."""
    from graphtrain.contract.reporting import epoch_line
    from graphtrain.runtime.train import tally

    now = [100.0]
    monkeypatch.setattr(tally.time, "perf_counter", lambda: now[0])
    window = tally.Throughput()
    window.add(1000)
    now[0] += 2.0  # two seconds of steps
    window.stop()
    now[0] += 30.0  # a long validation pass
    assert window.rate() == 500.0
    assert window.rate(world=2) == 1000.0
    p = TrainerProgress(epoch=1, epochs=2, loss=0.5, samples_per_second=1000.0, eval_seconds=30.0)
    p.eval_metric, p.eval_value = "val_accuracy", 0.75
    assert epoch_line(p.to_spec()).endswith("1,000 samples/s  validation 30.0 s")
    p.eval_metric = p.eval_value = None  # an epoch not evaluated shows no pass
    assert "validation" not in epoch_line(p.to_spec())


def test_a_changed_optimizer_or_dtype_is_refused_before_a_resume_starts_and_names_the_field() -> None:
    """An attack review: an lr change was refused by a shard server after every process had started,
    as a repr of its config. The record holds each table's dtype and optimizer settings, so the
    launcher names the field; infer and predict do not compare how the rows were stepped."""
    from graphtrain.runtime.train.resumable import TRAINING_ONLY, check_inferable

    doc = load_yaml(EXAMPLE.read_text())
    recorded = model_record(doc.spec)
    name = doc.spec.embeddings[0].name
    assert recorded[f"embeddings[{name}].dtype"] == "float32"
    changed = doc.spec.model_copy(deep=True)
    lr = changed.embeddings[0].optimizer.lr
    changed.embeddings[0].optimizer.lr = lr / 2
    with pytest.raises(
        GraphtrainError, match=rf"embeddings\[{name}\]\.optimizer\.lr {lr}, the spec says {lr / 2}"
    ):
        check_resumable(recorded, changed, "step-000000010")
    assert model_changes(recorded, changed, TRAINING_ONLY) == []
    check_inferable(recorded, changed, "step-000000010")  # the rows are the same rows
    older = {k: v for k, v in recorded.items() if ".optimizer." not in k and not k.endswith(".dtype")}
    assert model_changes(older, changed) == []  # a record from before these fields
