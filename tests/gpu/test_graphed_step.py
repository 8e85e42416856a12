"""training.cudaGraph on a GPU (train/graphed.py, optim/late.py, the CUDA core's deferred step): a step
captured once and replayed trains bit for bit as the same step run eagerly, its replays make no implicit
synchronisation (torch's sync debug mode set to error), and a bad id in a replayed step is reported at the
next one, that step having changed nothing; Nations TransE and DistMult (uniform and joint negatives)
captured whole train as their eager GPU runs do. The same code's CPU twin: tests/runtime/train/
test_graphed_step.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime.collective import CollectiveEmbedding
from graphtrain.runtime.errors import SparseInputError
from graphtrain.runtime.optim.late import LateFlags
from graphtrain.runtime.train.graphed import GraphedStep
from tests.runtime.train.test_graphed_review import spec
from tests.runtime.train.test_graphed_step import table_step
from tests.runtime.train.test_resume import final_state, one_thread, partitions, train  # noqa: F401

ROWS, DIM, IDS = 100_000, 64, 4096
CUDA = torch.device("cuda")


def captured(kind: str) -> tuple[GraphedStep, CollectiveEmbedding]:
    return table_step(LateFlags(CUDA), ROWS, DIM, IDS, kind)


def batches(n: int) -> Iterator[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield torch.randint(0, ROWS, (IDS,), generator=gen)  # duplicates included


@pytest.mark.parametrize("kind", ["adam", "rowwise_adagrad", "sgd"])
def test_replays_train_as_the_eager_step(kind: str) -> None:
    graphed, table = captured(kind)
    eager, twin = captured(kind)
    eager.warmup = 10**9  # never captured
    one = torch.ones(1)
    for k, ids in enumerate(batches(12), start=1):
        a, b = graphed([ids, one], k), eager([ids, one], k)
        assert torch.equal(a, b), k
    graphed.settle()
    eager.settle()
    assert graphed.captured and not eager.captured
    assert torch.equal(table.weight, twin.weight)
    for key in table.state:
        assert torch.equal(table.state[key], twin.state[key]), key


def test_replays_make_no_implicit_synchronisation() -> None:
    graphed, _ = captured("adam")
    one = torch.ones(1)
    steps = list(batches(8))
    for k, ids in enumerate(steps[:4], start=1):  # warm-up and capture
        graphed([ids, one], k)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for k, ids in enumerate(steps[4:], start=5):
            graphed([ids, one], k)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graphed.settle()


def test_a_bad_id_in_a_replay_is_reported_at_the_next_step_and_changed_nothing() -> None:
    graphed, table = captured("adam")
    one = torch.ones(1)
    steps = list(batches(6))
    for k, ids in enumerate(steps[:5], start=1):
        graphed([ids, one], k)
    graphed.settle()
    before = table.weight.clone()
    bad = steps[5].clone()
    bad[7] = ROWS
    graphed([bad, one], 6)
    with pytest.raises(SparseInputError, match=r"step 6: lookup of 'e': ids\[7\] is outside"):
        graphed.settle()
    assert torch.equal(table.weight, before)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["transe", "distmult", "transe-joint"])
def test_a_captured_kge_run_trains_as_the_eager_one(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    _, partition = partitions["transe"]
    joint = {"sampler": "joint", "chunk": 48, "negatives": 6} if kind.endswith("-joint") else {}
    model = kind.removesuffix("-joint")
    eager, eager_result = train(
        model, spec(False, model, **joint), partition, tmp_path / "eager", device=CUDA
    )
    graphed, graphed_result = train(
        model, spec(True, model, **joint), partition, tmp_path / "graphed", device=CUDA
    )
    assert graphed.task.graphed is not None and graphed.task.graphed.captured
    close_training(eager, graphed, eager_result, graphed_result)


def close_training(eager: Any, graphed: Any, eager_result: dict, graphed_result: dict) -> None:
    """The same batches, and losses, rows and metrics equal up to the GPU's float order: unlike the CPU
    twin's, a GPU's eager and captured steps are not bit for bit (its lookups' backward adds with
    atomics, and the two paths gather differently; the first H200 run differed by 1e-7 at step 3)."""
    assert [h for h, _ in graphed.steps] == [h for h, _ in eager.steps]
    for (_, a), (_, b) in zip(eager.steps, graphed.steps, strict=True):
        assert b == pytest.approx(a, rel=1e-3)
    a, b = final_state(eager.task), final_state(graphed.task)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-3, atol=1e-3, msg=name)
    assert graphed.task.ent.steps == eager.task.ent.steps
    for key, value in eager_result.items():
        assert graphed_result[key] == pytest.approx(value, abs=0.02), key
