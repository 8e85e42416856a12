"""training.mixedPrecision bfloat16 as float32 GEMMs done in bfloat16 on padded blocks (models/padding.py),
the form node classification with GraphSAGE takes on a CPU with AMX (implicit_bf16; AMX is said present
here, so the path runs on any CPU: where torch has no bfloat16 GEMMs it falls back to float32).

A planted graph (features and a node embedding) trains in this process on in-process shards, once in
float32 and once so: every GEMM of a training step, forward and backward, runs with oneDNN's bf16 flag
set and on bucketed rows, the flag is put back after the step (evaluation is float32), and the run
learns what float32's learns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from graphtrain.contract.spec import load_yaml
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.graph.dist_graph import standalone_client
from graphtrain.runtime.models.padding import row_bucket
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.loop import EpochLoop
from graphtrain.runtime.train.node_classification import NodeClassification
from tests.runtime.train.test_resume import Recorded, one_thread, partitions  # noqa: F401

GEMMS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default}


class Gemms(TorchDispatchMode):
    """Each float32 GEMM's precision flag and the sizes of its operands."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in GEMMS:
            flag = torch.backends.mkldnn.matmul.fp32_precision
            dims = tuple(d for a in args if isinstance(a, torch.Tensor) and a.dim() == 2 for d in a.shape)
            self.seen.append((flag, dims))
        return func(*args, **(kwargs or {}))


class Watched(Recorded):
    """Records the GEMMs of each training step."""

    def __init__(self, task: Any) -> None:
        super().__init__(task)
        self.gemms = Gemms()

    def step(self, batch: Any, clock: Any) -> tuple[torch.Tensor, int]:
        with self.gemms:
            out = super().step(batch, clock)
        assert torch.backends.mkldnn.matmul.fp32_precision == "none"
        return out


def train(partition: Path, spec: dict, run_dir: Path) -> tuple[Watched, dict, NodeClassification]:
    gt = load_yaml(yaml.safe_dump(spec))
    client = standalone_client(partition, run_dir / "checkpoints")
    graph = DistGraph(partition, client)
    task = NodeClassification(gt, graph, client, Dist())
    watched = Watched(task)
    loop = EpochLoop(watched, gt.spec, graph, Dist(), run_dir, run_dir / "checkpoints")
    try:
        result = loop.run()
    finally:
        if loop.metrics_log is not None:
            loop.metrics_log.close()
    return watched, result, task


@pytest.mark.timeout(180)
def test_a_bfloat16_run_takes_every_gemm_in_bfloat16_on_bucketed_rows_and_learns_float32s_model(
    partitions: dict,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gt, partition = partitions["graphsage"]
    doc = yaml.safe_load(yaml.safe_dump(gt.model_dump(by_alias=True, exclude_none=True, mode="json")))
    doc["spec"]["model"]["useFeatures"] = True
    plain, plain_result, plain_task = train(partition, doc, tmp_path / "float32")
    assert not plain_task.enc.implicit
    assert {flag for flag, _ in plain.gemms.seen} == {"none"}

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    doc["spec"]["training"]["mixedPrecision"] = "bfloat16"
    low, low_result, low_task = train(partition, doc, tmp_path / "bfloat16")
    assert low_task.enc.implicit
    assert low.gemms.seen and {flag for flag, _ in low.gemms.seen} == {"bf16"}
    odd = sorted({d for _, dims in low.gemms.seen for d in dims if row_bucket(d) != d})
    assert odd == [], odd  # seen unpadded: the batch's sampled counts
    raw = sorted({d for _, dims in plain.gemms.seen for d in dims if row_bucket(d) != d})
    assert raw, "the float32 run's GEMMs had no sampled counts to pad"

    assert [d for d, _ in low.steps] == [d for d, _ in plain.steps]  # the same batches
    losses = [(a, b) for (_, a), (_, b) in zip(low.steps, plain.steps, strict=True)]
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():  # else torch falls back to float32
        assert losses[0][0] != losses[0][1]  # rounded: not float32's bit for bit
    assert abs(losses[-1][0] - losses[-1][1]) < 0.05 * abs(losses[-1][1]) + 0.02
    for split in ("val", "test"):
        key = f"{split}_accuracy"
        assert abs(low_result[key] - plain_result[key]) <= 0.03, (key, low_result, plain_result)
    assert plain_result["test_accuracy"] > 0.6
