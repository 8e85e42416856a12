"""Issue 32, item 3: one epoch loop for both models, resumed mid-epoch at the checkpoint's step.

Each model (GraphSAGE with dropout, a node embedding and features, as tests/runtime/launch trains it;
TransE on Nations) trains in this process on in-process shards with one thread, three times from one
partition: without a stop; stopped right after a checkpoint taken inside its second epoch (the next
step raises, as a killed trainer would never take it); resumed from that checkpoint on fresh shards.
The resume must say it starts at that step and take the next batch of that epoch, and the steps of both
parts together must be the uninterrupted run's: the same batches with the same losses, and in the end
the same tables, dense model, result and metrics.csv (an epoch's mean loss included, though part of it
was trained before the stop).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from graphtrain.contract.spec import GraphTraining, load_yaml
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.kvstore.client import direct
from graphtrain.runtime.launch.local import LocalRun
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.kge import LinkPrediction
from graphtrain.runtime.train.loop import EpochLoop
from graphtrain.runtime.train.metrics import StageClock
from graphtrain.runtime.train.node_classification import NodeClassification
from tests.conftest import planted_graph
from tests.runtime.launch.test_run import sage_spec

ROOT = Path(__file__).parents[3]
INTERVAL = 8  # training.checkpointInterval: steps 8 and 16 fall inside epochs 1 and 2 of both models
STOP_AFTER = 16  # the second checkpoint: epoch 2 of 12 (GraphSAGE) or 13 (TransE) steps, a few steps in


def transe_doc() -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=3, evalEvery=1)
    for table in doc["spec"]["embeddings"]:
        table["dim"] = 16
    doc["spec"]["task"]["negatives"] = 4
    return doc


def joint_doc() -> dict:
    """TransE with joint negatives: chunks of 4 positives share 6 entities (uneven last chunks)."""
    doc = transe_doc()
    doc["spec"]["task"].update(sampler="joint", chunk=4, negatives=6)
    return doc


@pytest.fixture(scope="module")
def partitions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[GraphTraining, Path]]:
    """Each model's spec (checkpoint interval set) and partition, made as `graphtrain run` makes it."""
    where = tmp_path_factory.mktemp("resume")
    g = planted_graph(n=600, k=3, seed=4)
    rng = np.random.default_rng(0)
    feat = rng.standard_normal((g.num_nodes, 8)).astype(np.float32)
    feat[np.arange(g.num_nodes), g.label] += 1.0
    masks = {f"{k}_mask": v for k, v in g.masks.items()}
    npz = where / "planted.npz"
    np.savez(npz, indptr=g.indptr, indices=g.indices, feat=feat, label=g.label, **masks)
    made = {}
    docs = {
        "graphsage": sage_spec(npz, epochs=3, batch=32),
        "transe": transe_doc(),
        "transe-joint": joint_doc(),
    }
    for kind, doc in docs.items():
        doc["spec"]["training"]["checkpointInterval"] = INTERVAL
        spec_path = where / f"{kind}.yaml"
        spec_path.write_text(yaml.safe_dump(doc))
        gt = load_yaml(spec_path.read_text())
        made[kind] = gt, LocalRun(gt, spec_path, where / kind, standalone=True, echo=False).partition()
    return made


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Killed(Exception):
    """The trainer ends here, before this step."""


class Recorded:
    """A task that records each step it takes (its batch's fingerprint and loss) and, given `stop_after`,
    ends training before the step after that many."""

    def __init__(self, task: Any, stop_after: int | None = None):
        self.task, self.stop_after = task, stop_after
        self.metric_names, self.report_every = task.metric_names, task.report_every
        self.steps: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def step(self, batch: Any, clock: StageClock) -> tuple[torch.Tensor, int]:
        if self.stop_after is not None and len(self.steps) == self.stop_after:
            raise Killed
        parts = batch if isinstance(batch, tuple) else (batch.seeds, batch.input_nodes)
        digest = hashlib.sha256(b"".join(np.asarray(p).tobytes() for p in parts)).hexdigest()[:12]
        loss, samples = self.task.step(batch, clock)
        self.steps.append((digest, float(loss.detach())))
        return loss, samples


def train(
    kind: str,
    gt: GraphTraining,
    partition: Path,
    run_dir: Path,
    stop_after: int | None = None,
    direct_to: torch.device | None = None,
    device: torch.device | None = None,
) -> tuple[Recorded, dict[str, Any] | None]:
    """One trainer's life on fresh in-process shards (they restore the run's latest checkpoint, if any);
    `direct_to`: the trainer's device, whose tables it uses where they lie; `device`: the trainer's
    (where it computes, and where its collective tables live)."""
    root = run_dir / "checkpoints"
    client = standalone_client(partition, root, direct_to=direct_to)
    graph, dist = DistGraph(partition, client), Dist()
    sage = kind == "graphsage"
    if sage:
        task: Any = NodeClassification(gt, graph, client, dist, device)
    else:
        task = LinkPrediction(gt, graph, dist, device)
    recorded = Recorded(task, stop_after)
    loop = EpochLoop(recorded, gt.spec, graph, dist, run_dir, root)
    try:
        return recorded, loop.run()
    except Killed:
        return recorded, None
    finally:
        if loop.metrics_log is not None:
            loop.metrics_log.close()


def final_state(task: Any) -> dict[str, torch.Tensor]:
    """Every learnt value: the tables' rows and the dense model's parameters."""
    tables = [task.emb] if isinstance(task, NodeClassification) else [task.ent, task.rel]
    state = {t.name: t.rows(torch.arange(t.num_embeddings)) for t in tables}
    if isinstance(task, NodeClassification):
        state.update(task.model.state_dict())
    return state


def metrics_rows(run_dir: Path) -> list[list[str]]:
    """metrics.csv without its timing columns."""
    return [r.split(",")[:-2] for r in (run_dir / "metrics.csv").read_text().splitlines()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["graphsage", "transe", "transe-joint"])
def test_a_run_resumed_mid_epoch_takes_the_steps_of_the_uninterrupted_one(
    kind: str, partitions: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gt, partition = partitions[kind]
    whole, whole_result = train(kind, gt, partition, tmp_path / "whole")
    per_epoch = whole.task.steps_per_epoch()
    stop = STOP_AFTER
    assert len(whole.steps) == 3 * per_epoch and per_epoch < stop < 2 * per_epoch - 1  # inside epoch 2

    run_dir = tmp_path / "stopped"
    first, result = train(kind, gt, partition, run_dir, stop_after=stop)
    assert result is None and (run_dir / "checkpoints" / "LATEST").read_text().strip() == f"step-{stop:09d}"
    capsys.readouterr()
    second, resumed_result = train(kind, gt, partition, run_dir)
    said = capsys.readouterr().err
    assert f"resuming from step {stop} (epoch 1, checkpoint step-{stop:09d})" in said, said

    assert first.steps == whole.steps[:stop]
    assert second.steps == whole.steps[stop:]  # the next batch of epoch 2 on, not the epoch's first
    assert resumed_result == whole_result
    ours, theirs = final_state(second.task), final_state(whole.task)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    assert metrics_rows(run_dir) == metrics_rows(tmp_path / "whole")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["graphsage", "transe", "transe-joint"])
def test_tables_used_where_they_lie_train_and_resume_as_the_protocol_path(
    kind: str, partitions: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standalone's GPU tables are pulled and stepped where they lie (kvstore/client/direct.py). Opened
    to host tables here, both models train as on the protocol path (to float tolerance: the shard's
    step, not the client, reduces the duplicates), and a run stopped and resumed on that path is its own
    uninterrupted run exactly."""
    gt, partition = partitions[kind]
    protocol, protocol_result = train(kind, gt, partition, tmp_path / "protocol")
    monkeypatch.setattr(direct, "DEVICE_TYPES", ("cuda", "cpu"))
    cpu = torch.device("cpu")
    whole, whole_result = train(kind, gt, partition, tmp_path / "whole", direct_to=cpu)
    tables = [whole.task.emb] if kind == "graphsage" else [whole.task.ent, whole.task.rel]
    assert all(t.client.direct(t.name) is not None for t in tables)
    assert [d for d, _ in whole.steps] == [d for d, _ in protocol.steps]
    np.testing.assert_allclose([x for _, x in whole.steps], [x for _, x in protocol.steps], rtol=1e-4)
    ours, theirs = final_state(whole.task), final_state(protocol.task)
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, rtol=1e-4, atol=1e-5)
    assert whole_result is not None and protocol_result is not None
    for key, value in protocol_result.items():
        if isinstance(value, float):
            assert whole_result[key] == pytest.approx(value, abs=0.02), key

    run_dir = tmp_path / "stopped"
    first, _ = train(kind, gt, partition, run_dir, stop_after=STOP_AFTER, direct_to=cpu)
    second, resumed_result = train(kind, gt, partition, run_dir, direct_to=cpu)
    assert first.steps + second.steps == whole.steps
    assert resumed_result == whole_result
    for name, value in final_state(whole.task).items():
        assert torch.equal(final_state(second.task)[name], value), name


@pytest.mark.timeout(120)
def test_the_model_a_run_ends_with_is_its_latest_checkpoint(
    partitions: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpointInterval 8 does not divide TransE's 39 steps: the last interval checkpoint is step 32.
    With no validation pass improving at the end (forced here), LATEST stayed at step 32 while the run
    reported the test metric of step 39's model: export, predict and infer read another model, and
    --resume retrained 7 steps instead of saying the run is complete."""
    from graphtrain.runtime.train import loop as loop_module

    first = {"seen": False}

    def update(best: Any, this: Any, min_delta: float, lower: bool) -> tuple[Any, bool]:
        improved = not first["seen"]  # only the first pass improves
        first["seen"] = True
        return (loop_module.best_record.Best(best=this, reference=this.value) if improved else best), improved

    monkeypatch.setattr(loop_module.best_record, "update", update)
    gt, partition = partitions["transe"]
    whole, _ = train("transe", gt, partition, tmp_path / "whole")
    steps = len(whole.steps)
    assert steps % INTERVAL
    assert (tmp_path / "whole" / "checkpoints" / "LATEST").read_text().strip() == f"step-{steps:09d}"
