"""training.cudaGraph for GraphSAGE node classification on a CPU (train/captured_sage.py): the captured
step's own code, run eagerly over its fixed-capacity buffers (models/fixed_blocks.py), as the CUDA graph
replays it on a GPU. It trains as the eager step does (bit for bit on the build VM's CPU; held to 1e-5,
as padded GEMMs may sum in other blocks elsewhere); every full batch after the capacity is learned goes
through it or is counted as beyond it; it reads nothing back inside the step but the CPU twin's own
checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from graphtrain.contract.spec import DuplicateRule, GraphTraining, MixedPrecision
from graphtrain.runtime.errors import GraphtrainError
from graphtrain.runtime.models import fixed_blocks as fb
from graphtrain.runtime.train import captured_sage
from graphtrain.runtime.train.captured_sage import CapturedSage
from tests.runtime.train.test_graphed_step import HostReads, collective
from tests.runtime.train.test_resume import (  # noqa: F401
    INTERVAL,
    STOP_AFTER,
    final_state,
    one_thread,
    partitions,
    train,
)


def _sage(gt: GraphTraining, graph: bool, dropout: float = 0.0, mixed: str = "none") -> GraphTraining:
    spec = collective(gt, graph)
    spec.spec.model.dropout = dropout
    spec.spec.training.mixed_precision = MixedPrecision(mixed)
    return spec


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("learn", "precision"),
    [
        (captured_sage.LEARN_STEPS, "float32"),
        (1, "float32"),
        (captured_sage.LEARN_STEPS, "products"),
        (captured_sage.LEARN_STEPS, "autocast"),
    ],
    ids=["learned", "tight", "bfloat16-products", "bfloat16-autocast"],
)
def test_the_captured_sage_step_trains_as_the_eager_one(
    learn: int,
    precision: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tight`: a capacity of one batch's sizes with no headroom, so larger batches go beyond it and
    are trained eagerly between captured ones. training.mixedPrecision bfloat16 as float32 GEMMs done in
    bfloat16 (`products`: what a CPU with AMX runs) or under autocast (a CPU without AMX, and GPUs)."""
    gt, partition = partitions["graphsage"]
    monkeypatch.setattr(CapturedSage.__init__, "__defaults__", (learn,))
    if learn == 1:
        monkeypatch.setattr(fb.capacity_for, "__defaults__", (0.0,))
    if precision != "float32":  # either form on any CPU (without bfloat16 instructions, products are float32)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: precision == "products")
    mixed = "none" if precision == "float32" else "bfloat16"
    eager, eager_result = train("graphsage", _sage(gt, False, 0.2, mixed), partition, tmp_path / "eager")
    assert eager.task.captured is None
    assert eager.task.enc.implicit == (precision == "products")
    graphed, graphed_result = train("graphsage", _sage(gt, True, 0.2, mixed), partition, tmp_path / "graphed")
    cap = graphed.task.captured
    assert cap is not None and cap.graphed is not None and cap.cap is not None
    seeds = len(graphed.task.train_ids)
    full = seeds // graphed.task.loader.batch_size * gt.spec.training.epochs
    assert cap.graphed.runs + cap.eager_beyond == full - learn  # every full batch after the learning
    assert cap.graphed.runs > 0 and (cap.eager_beyond > 0) == (learn == 1)
    said = [line for line in capsys.readouterr().err.splitlines() if "beyond the captured capacity" in line]
    assert len(said) == len(str(cap.eager_beyond)) * (learn == 1)  # the 1st, the 10th, ...
    assert len(graphed.steps) == len(eager.steps)
    for (batch_a, loss_a), (batch_b, loss_b) in zip(eager.steps, graphed.steps, strict=True):
        assert batch_a == batch_b  # the same batches in the same order
        assert loss_b == pytest.approx(loss_a, rel=1e-5, abs=1e-6)
    a, b = final_state(eager.task), final_state(graphed.task)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert graphed.task.emb.steps == eager.task.emb.steps  # the count a checkpoint keeps
    assert graphed.task.updates == eager.task.updates
    assert eager_result is not None and graphed_result is not None
    for key in ("val_accuracy", "test_accuracy"):
        if key in eager_result:
            assert graphed_result[key] == pytest.approx(eager_result[key], abs=1e-6)


@pytest.mark.timeout(120)
def test_the_captured_sage_step_reads_nothing_back_but_the_twins_checks(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without dropout: the CPU's dropout draws its seed on the host (a GPU's is torch's, on the device)."""
    gt, partition = partitions["graphsage"]
    reads = HostReads()
    original = CapturedSage._graph_step

    def watched(self: CapturedSage, buffers: list[torch.Tensor], cap: Any) -> torch.Tensor:
        with reads:
            return original(self, buffers, cap)

    monkeypatch.setattr(CapturedSage, "_graph_step", watched)
    spec = _sage(gt, True)
    spec.spec.training.epochs = 1
    recorded, _ = train("graphsage", spec, partition, tmp_path / "graphed")
    assert recorded.task.captured.graphed.runs > 0
    assert reads.seen and all(twin for _, twin in reads.seen), reads.seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["server table", "mean duplicates"])
def test_a_step_that_cannot_be_captured_is_refused_in_one_line(
    what: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    gt, partition = partitions["graphsage"]
    spec = gt.model_copy(deep=True)
    spec.spec.training.cuda_graph = True
    want = r"training.cudaGraph: embeddings\[node\] must have sharding: collective"
    if what == "mean duplicates":
        spec = _sage(gt, True)
        spec.spec.embeddings[0].duplicate_grads = DuplicateRule.mean
        want = r"training.cudaGraph: embeddings\[node\].duplicateGrads must be sum"
    with pytest.raises(GraphtrainError, match=want):
        train("graphsage", spec, partition, tmp_path / "refused")


def test_host_ids_go_to_the_captured_step_as_they_are() -> None:
    """Ids looked up from the host (a batch sampled there) stay there: GraphedStep copies them up through
    its pinned buffers, without a wait. Moved first (`.to(device)` of pageable memory), each captured
    step's host waited for the last replay to end."""
    from types import SimpleNamespace

    from graphtrain.runtime.graph.loader import MiniBatch
    from tests.runtime.models.test_fixed_blocks import batch

    blocks = batch()
    cap = fb.capacity_for([fb.sizes(blocks)], seeds=97)
    ids = torch.arange(blocks[0].num_src)
    mb = MiniBatch(seeds=ids[:97].numpy(), input_nodes=ids.numpy(), blocks=blocks)
    mb.data["y"] = torch.zeros(97, dtype=torch.int64)
    meta = torch.device("meta")  # stands for the GPU: whatever is moved there shows it
    enc = SimpleNamespace(emb=object(), feat=None)
    task = SimpleNamespace(enc=enc, device=meta, loader=SimpleNamespace(batch_size=97))
    task._ids = lambda table, b: torch.from_numpy(b.input_nodes)
    captured = CapturedSage.__new__(CapturedSage)
    captured.task = task
    inputs = captured._inputs(mb, cap)
    assert inputs[0].device.type == "cpu" and inputs[0].shape == (cap.nodes[0],)
    assert torch.equal(inputs[0][: len(ids)], ids) and bool((inputs[0][len(ids) :] == ids[0]).all())


def test_a_step_with_no_table_needs_no_cuda_core() -> None:
    """A features-only GraphSAGE on a GPU has nothing for the CUDA core to step: not refused for it."""
    from graphtrain.runtime.train import graphed

    assert graphed.tables_refusal(torch.device("cuda"), [], 1) == ""
    assert "one trainer" in graphed.tables_refusal(torch.device("cuda"), [], 2)


@pytest.mark.timeout(180)
def test_a_captured_run_resumed_mid_epoch_ends_as_the_uninterrupted_one(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """Stopped after a checkpoint inside epoch 2 (some steps captured), then resumed: the resumed
    trainer learns its capacity again over its first full batches and ends where the uninterrupted
    captured run does (both train as the eager step here)."""
    gt, partition = partitions["graphsage"]
    spec = _sage(gt, True, 0.2)
    spec.spec.training.checkpoint_interval = INTERVAL
    whole, whole_result = train("graphsage", spec, partition, tmp_path / "whole")
    run_dir = tmp_path / "stopped"
    first, result = train("graphsage", spec, partition, run_dir, stop_after=STOP_AFTER)
    assert result is None and first.task.captured.graphed is not None  # it had captured steps
    second, resumed_result = train("graphsage", spec, partition, run_dir)
    assert second.steps == whole.steps[STOP_AFTER:]
    assert resumed_result == whole_result
    ours, theirs = final_state(second.task), final_state(whole.task)
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, rtol=1e-5, atol=1e-6, msg=name)
