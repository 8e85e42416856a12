"""TransE's rows looked up where the tables lie (kge.py: every occurrence, on a GPU trainer's own tables)
train as the deduplicated path does: the same losses and tables within float rounding. On the CPU the
path is opened to host tables (the GPU one runs in tests/gpu and scripts/gpu-accept)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime.train.kge import LinkPrediction
from tests.runtime.train.test_resume import final_state, one_thread, partitions, train  # noqa: F401


@pytest.mark.timeout(120)
def test_every_occurrence_looked_up_trains_as_the_deduplicated_path(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions["transe"]
    gt = gt.model_copy(deep=True)
    gt.spec.training.checkpoint_interval = 0
    dedup, dedup_result = train("transe", gt, partition, tmp_path / "dedup")
    used: list[bool] = []
    original = LinkPrediction._rows_on_device

    def on_device(self: LinkPrediction, *args):  # noqa: ANN002, ANN202
        used.append(True)
        return original(self, *args)

    monkeypatch.setattr(LinkPrediction, "_where_they_lie", lambda self: True)
    monkeypatch.setattr(LinkPrediction, "_rows_on_device", on_device)
    each, each_result = train("transe", gt, partition, tmp_path / "each")
    assert used and len(used) == len(each.steps)
    assert [d for d, _ in dedup.steps] == [d for d, _ in each.steps]  # the same batches
    np.testing.assert_allclose([x for _, x in each.steps], [x for _, x in dedup.steps], rtol=1e-4, atol=1e-5)
    a, b = final_state(dedup.task), final_state(each.task)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-4)
    assert dedup_result is not None and each_result is not None
    assert abs(each_result["test_mrr"] - dedup_result["test_mrr"]) < 1e-3


@pytest.mark.timeout(120)
def test_optimizer_rows_all_reads_and_steps_every_row(
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """optimizer.rows: all (bench/e2e.py's PyKEEN pairs): each step reads the whole entity and relation
    tables, so every row is pushed and stepped; touched: only the batch's distinct rows."""
    from graphtrain.contract.spec import RowsStepped
    from graphtrain.runtime.train import kge

    gt, partition = partitions["transe"]
    looked: list[tuple[int, int | None]] = []
    original = kge._lookup

    def lookup(ids: torch.Tensor, whole: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        rows, inverse = original(ids, whole)
        looked.append((len(rows), whole))
        torch.testing.assert_close(rows[inverse], ids)  # each id finds its own row
        return rows, inverse

    monkeypatch.setattr(kge, "_lookup", lookup)
    runs = {}
    for rows in (RowsStepped.all, RowsStepped.touched):
        spec = gt.model_copy(deep=True)
        spec.spec.training.checkpoint_interval = 0
        spec.spec.training.epochs = 1
        for table in spec.spec.embeddings:
            table.optimizer.rows = rows
        looked.clear()
        recorded, result = train("transe", spec, partition, tmp_path / str(rows))
        assert result is not None and len(recorded.steps) > 0
        runs[rows] = list(looked)
    task_rows = {"entity": recorded.task.graph.num_nodes, "relation": recorded.task.kg.num_relations}
    every = runs[RowsStepped.all]
    assert every and all(whole is not None and n == whole for n, whole in every)
    assert {n for n, _ in every} == set(task_rows.values())
    lazy = runs[RowsStepped.touched]
    assert lazy and all(whole is None for _, whole in lazy)
    assert any(n < task_rows["relation"] for n, _ in lazy[1::2])  # a batch that misses some relations
