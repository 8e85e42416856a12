"""training.cudaGraph for GraphSAGE node classification on a GPU (train/captured_sage.py): its batches
packed at a fixed capacity, captured once and replayed, train as the eager GPU step does; a replay, its
packing and its copies make no implicit synchronisation (torch's sync debug mode set to error). Without
dropout: a GPU's dropout draws a mask of the padded shape, so its masks differ from the eager step's
(the CPU twin, whose dropout is counter-based, is held to the eager step with dropout:
tests/runtime/train/test_captured_sage.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime.train.captured_sage import CapturedSage
from tests.runtime.train.test_captured_sage import _sage
from tests.runtime.train.test_resume import final_state, one_thread, partitions, train  # noqa: F401

CUDA = torch.device("cuda")


@pytest.mark.parametrize("mixed", ["none", "bfloat16"])
def test_replays_train_as_the_eager_gpu_step(
    mixed: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """bfloat16: autocast, in the captured step without its cache of cast weights."""
    gt, partition = partitions["graphsage"]
    eager, eager_result = train(
        "graphsage", _sage(gt, False, mixed=mixed), partition, tmp_path / "e", device=CUDA
    )
    graphed, graphed_result = train(
        "graphsage", _sage(gt, True, mixed=mixed), partition, tmp_path / "g", device=CUDA
    )
    loose = 10.0 if mixed == "bfloat16" else 1.0  # bfloat16 products of other shapes round apart
    cap = graphed.task.captured
    assert cap is not None and cap.graphed is not None and cap.graphed.captured
    for (batch_a, loss_a), (batch_b, loss_b) in zip(eager.steps, graphed.steps, strict=True):
        assert batch_a == batch_b
        assert loss_b == pytest.approx(loss_a, rel=1e-4 * loose, abs=1e-5 * loose)
    a, b = final_state(eager.task), final_state(graphed.task)
    for name in a:  # the rows' gradients are summed by atomics on a GPU: not bit for bit
        torch.testing.assert_close(b[name], a[name], rtol=1e-3 * loose, atol=1e-4 * loose, msg=name)
    assert eager_result is not None and graphed_result is not None


def test_captured_steps_make_no_implicit_synchronisation(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions["graphsage"]
    spec = _sage(gt, True)
    spec.spec.training.prefetch = 0  # sampling on this thread, between steps, outside the watched window
    spec.spec.training.epochs = 1
    original = CapturedSage.step
    watched = []

    def step(self: CapturedSage, mb: Any, clock: Any) -> Any:
        if self.graphed is None or not self.graphed.captured:
            return original(self, mb, clock)
        torch.cuda.set_sync_debug_mode("error")
        try:
            done = original(self, mb, clock)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        watched.append(done is not None)
        return done

    monkeypatch.setattr(CapturedSage, "step", step)
    train("graphsage", spec, partition, tmp_path / "graphed", device=CUDA)
    assert watched and all(watched)
