"""Issue 45, item 3 for KGE: a step's gradient pushes are sent without waiting (kge.py). Real shard
servers in this process (their ZMQ ports and fast lanes) apply them while the loop draws the next batch,
and the client's next pull waits for them. The pipelined run takes the steps of the unpipelined one (each
push waiting for its shards) to the last bit: the same losses, rows and metrics, checkpoints included,
so the write order per row is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime import kvstore
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.kge import LinkPrediction
from graphtrain.runtime.train.loop import EpochLoop
from tests.runtime.conftest import TOKEN
from tests.runtime.train.shards import partition_servers
from tests.runtime.train.test_resume import Recorded, final_state, one_thread, partitions  # noqa: F401


def train(
    gt: GraphTraining, partition: Path, run_dir: Path, wait: bool
) -> tuple[Recorded, dict[str, torch.Tensor], Any, int]:
    """One KGE trainer against the partition's two shard servers; its recorded steps, its final tables,
    its result and the pushes it left in flight."""
    with partition_servers(partition, run_dir / "checkpoints") as servers:
        client = kvstore.connect([s.address for s in servers], TOKEN, timeout=30)
        in_flight = [0]
        begin = client.transport.begin_many

        def counted(calls: Any, timeout: Any = None) -> None:
            in_flight[0] += 1
            begin(calls, timeout)

        client.transport.begin_many = counted  # type: ignore[method-assign]
        try:
            graph = DistGraph(partition, client)
            task = LinkPrediction(gt, graph, Dist())
            task.push_wait = wait
            recorded = Recorded(task)
            loop = EpochLoop(recorded, gt.spec, graph, Dist(), run_dir, run_dir / "checkpoints")
            try:
                result = loop.run()
            finally:
                if loop.metrics_log is not None:
                    loop.metrics_log.close()
            return recorded, final_state(task), result, in_flight[0]
        finally:
            client.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["transe", "transe-joint"])
def test_pipelined_pushes_train_as_waiting_ones(
    kind: str,
    partitions: dict[str, tuple[GraphTraining, Path]],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    gt, partition = partitions[kind]  # checkpoints every few steps, mid-epoch included
    piped, a, piped_result, left = train(gt, partition, tmp_path / "pipelined", wait=False)
    waited, b, waited_result, none_left = train(gt, partition, tmp_path / "waiting", wait=True)
    assert left >= 2 * len(piped.steps) and none_left == 0  # both tables' pushes, every step
    assert piped.steps == waited.steps  # the same batches and losses, bit for bit
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert piped_result is not None and piped_result == waited_result
