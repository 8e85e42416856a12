"""Review of training.cudaGraph on a CPU (train/graphed.py, optim/late.py): the gaps of test_graphed_step.py.

DistMult and ComplEx train bit for bit as the GPU's eager step (as TransE does there); a run killed inside
its second epoch and resumed takes the uninterrupted run's steps; the captured step creates no tensor from
host data (on a GPU each is a copy and a stream synchronisation, which no capture can hold); a joint
sampler whose chunk does not divide the batch's halves is captured like any other; a step with a bad id
changes neither table, as its message says (the review's three findings, each fixed)."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from graphtrain.contract.spec import GraphTraining, load_yaml
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.kge import LinkPrediction, Triples
from graphtrain.runtime.train.loop import EpochLoop
from tests.runtime.train.test_resume import (  # noqa: F401 - fixtures
    INTERVAL,
    final_state,
    metrics_rows,
    one_thread,
    partitions,
    train,
    transe_doc,
)

RUNTIME = str(Path(__file__).parents[3] / "runtime")
STOP = 16  # a checkpoint inside epoch 2 (13 steps an epoch), after the step was captured


def spec(graph: bool, kind: str = "transe", interval: int = 0, **task: Any) -> GraphTraining:
    """The fixture's Nations TransE spec as `kind`, its tables collective on one trainer, with `graph`."""
    doc = transe_doc()
    s = doc["spec"]
    s["model"]["kind"] = kind
    if kind != "transe":
        s["model"].pop("norm")
    s["task"].update(task)
    s["trainers"] = {"replicas": 1}
    s["training"].update(cudaGraph=graph, checkpointInterval=interval)
    for table in s["embeddings"]:
        table["sharding"] = "collective"
    return load_yaml(yaml.safe_dump(doc))


def same_training(eager: Any, graphed: Any) -> None:
    """The same losses step by step and the same rows, step counts and result to the last bit."""
    assert graphed.steps == eager.steps
    a, b = final_state(eager.task), final_state(graphed.task)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert graphed.task.ent.steps == eager.task.ent.steps


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "loss"), [("distmult", "crossentropy"), ("complex", "crossentropy"), ("complex", "margin")]
)
def test_distmult_and_complex_graphed_steps_train_bit_for_bit_as_the_eager_ones(
    kind: str,
    loss: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, partition = partitions["transe"]  # Nations: the model is the spec's, not the partition's
    monkeypatch.setattr(LinkPrediction, "_where_they_lie", lambda self: True)  # the GPU's eager path
    eager, eager_result = train(kind, spec(False, kind, loss=loss), partition, tmp_path / "eager")
    graphed, graphed_result = train(kind, spec(True, kind, loss=loss), partition, tmp_path / "graphed")
    step = graphed.task.graphed
    full = len(graphed.task.triples) // graphed.task.batch_size
    assert step is not None and step.runs == full * 3  # every full batch of the 3 epochs went there
    same_training(eager, graphed)
    assert eager_result is not None and graphed_result == eager_result


@pytest.mark.timeout(120)
def test_a_graphed_run_resumed_mid_epoch_takes_the_steps_of_the_uninterrupted_one(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, partition = partitions["transe"]
    gt = spec(True, interval=INTERVAL)
    whole, whole_result = train("transe", gt, partition, tmp_path / "whole")
    assert whole.task.steps_per_epoch() < STOP < 2 * whole.task.steps_per_epoch() - 1
    run_dir = tmp_path / "stopped"
    first, result = train("transe", gt, partition, run_dir, stop_after=STOP)
    assert result is None and (run_dir / "checkpoints" / "LATEST").read_text().strip() == f"step-{STOP:09d}"
    capsys.readouterr()
    second, resumed_result = train("transe", gt, partition, run_dir)
    assert f"resuming from step {STOP} " in capsys.readouterr().err
    assert first.steps == whole.steps[:STOP] and second.steps == whole.steps[STOP:]
    assert second.task.graphed is not None and second.task.graphed.runs > second.task.graphed.warmup
    ours, theirs = final_state(second.task), final_state(whole.task)
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    assert second.task.ent.steps == whole.task.ent.steps
    assert resumed_result == whole_result
    assert metrics_rows(run_dir) == metrics_rows(tmp_path / "whole")


class HostData(TorchDispatchMode):
    """Every tensor made from host data (lift_fresh: torch.tensor, a list index) outside the CPU twin. On a
    GPU each is a pageable copy up and a synchronisation: 'operation not permitted when stream is
    capturing'."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket.__name__ in ("lift_fresh", "lift_fresh_copy"):
            stack = traceback.extract_stack()
            if not any(f.name == "_deferred_twin" for f in stack):
                ours = [f for f in stack if f.filename.startswith(RUNTIME)]
                self.seen.append(f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?")
        return func(*args, **(kwargs or {}))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["transe", "transe-joint", "distmult", "complex"])
def test_the_captured_step_makes_no_tensor_from_host_data(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, partition = partitions["transe"]
    joint = {"sampler": "joint", "chunk": 4, "negatives": 6} if kind == "transe-joint" else {}
    gt = spec(True, kind.removesuffix("-joint"), **joint)
    gt.spec.training.epochs = 1
    made = HostData()
    original = LinkPrediction._graph_step

    def watched(self: LinkPrediction, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        with made:
            return original(self, pos, neg)

    monkeypatch.setattr(LinkPrediction, "_graph_step", watched)
    recorded, _ = train(kind, gt, partition, tmp_path / "run")
    assert recorded.task.graphed is not None and recorded.task.graphed.runs > 0
    assert made.seen == [], sorted(set(made.seen))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chunk", [256, 48])
def test_a_joint_sampler_whose_chunks_straddle_the_sides_is_captured(
    chunk: int,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batch 128: 64 positives a side, so chunk 256 (the default) draws 2 rows, 48 draws 4 (not 1, 3)."""
    _, partition = partitions["transe"]
    monkeypatch.setattr(LinkPrediction, "_where_they_lie", lambda self: True)
    joint = {"sampler": "joint", "chunk": chunk, "negatives": 6}
    eager, eager_result = train("transe", spec(False, **joint), partition, tmp_path / "eager")
    graphed, graphed_result = train("transe", spec(True, **joint), partition, tmp_path / "graphed")
    assert graphed.task.graphed is not None and graphed.task.graphed.runs > 0
    same_training(eager, graphed)
    assert graphed_result == eager_result


class NoClock:
    def lap(self, stage: str) -> None:
        pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("column", [2, 1])  # a tail entity, a relation
def test_a_step_with_a_bad_id_changes_neither_table(
    column: int,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    _, partition = partitions["transe"]
    client = standalone_client(partition, tmp_path / "checkpoints")
    task = LinkPrediction(spec(True), DistGraph(partition, client), Dist())
    task.start(0, False)
    batches = list(task.batches(0, 0))
    for batch in batches[:2]:
        task.step(batch, NoClock())  # type: ignore[arg-type]
    before = final_state(task)
    pos = batches[2].pos.clone()
    table = "entity" if column == 2 else "relation"
    pos[5, column] = len(before[table])  # one past the table's last row
    task.step(Triples(pos, batches[2].neg), NoClock())  # type: ignore[arg-type]
    after = final_state(task)
    with pytest.raises(SparseInputError, match=rf"step 3: lookup of '{table}': ids\[\d+\] is outside"):
        task.step(batches[3], NoClock())  # type: ignore[arg-type]
    for name in before:  # "the step changed nothing"
        assert torch.equal(before[name], after[name]), name


@pytest.mark.timeout(60)
def test_a_flagged_step_is_raised_before_a_checkpoint_is_begun(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """The loop asks the task for its pending checks first (check_pending): a step flagged on the
    device fails the checkpoint after it before any of its files is written."""
    _, partition = partitions["transe"]
    gt = spec(True, interval=6)
    client = standalone_client(partition, tmp_path / "checkpoints")
    task = LinkPrediction(gt, DistGraph(partition, client), Dist())
    bad = [0]
    original = task.batches

    def batches(epoch: int, start: int):  # noqa: ANN202 - step 6 of epoch 1 holds an entity past the table
        for k, batch in enumerate(original(epoch, start), start=start + 1):
            if epoch == 0 and k == 6:
                pos = batch.pos.clone()
                pos[0, 2] = task.graph.num_nodes
                batch = Triples(pos, batch.neg)
                bad[0] += 1
            yield batch

    task.batches = batches  # type: ignore[method-assign]
    loop = EpochLoop(task, gt.spec, task.graph, Dist(), tmp_path, tmp_path / "checkpoints")
    with pytest.raises(SparseInputError, match=r"step 6: lookup of 'entity'"):
        loop.run()
    if loop.metrics_log is not None:
        loop.metrics_log.close()
    assert bad == [1]
    assert not list((tmp_path / "checkpoints").glob("step-*")), "a checkpoint was begun"
