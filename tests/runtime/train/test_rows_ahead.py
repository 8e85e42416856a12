"""Issue 47, item 2: a GraphSAGE step's labels, features and embedding rows in one exchange.

With batches made inline (training.prefetch 0), node classification's fetch pulls the batch's labels,
input features and embedding rows together on the client its pushes go by (tensor.pull_together:
over the fast lane, one batch per shard), and the step reads the embedding rows from there instead of
pulling them again. Against a real shard server (its ZMQ port and fast lane, pushes sent with
wait=False), a run that pulls ahead takes exactly the steps, losses and final tables of one that pulls
each table on its own: the rows it reads ahead already hold the previous step's update.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtrain.contract.spec import GraphTraining
from graphtrain.runtime import kvstore
from graphtrain.runtime.graph import DistGraph
from graphtrain.runtime.train.dist import Dist
from graphtrain.runtime.train.loop import EpochLoop
from graphtrain.runtime.train.node_classification import NodeClassification
from tests.runtime.conftest import TOKEN
from tests.runtime.train.shards import partition_servers
from tests.runtime.train.test_resume import Recorded, final_state, one_thread, partitions  # noqa: F401


def train(
    gt, partition: Path, run_dir: Path, ahead: bool, monkeypatch: pytest.MonkeyPatch, shm: bool = False
):
    """One trainer against the partition's real shard servers in this process (`shm`: their tables in
    shared memory); its steps, final state, the lanes' counters summed and, per batch, whether its
    embedding rows were pulled ahead and whether it came as its mean."""
    with partition_servers(partition, run_dir / "checkpoints", shm=shm) as servers:
        addresses = [s.address for s in servers]
        client = kvstore.connect(addresses, TOKEN, timeout=30, shm=shm)
        loader = kvstore.connect(addresses, TOKEN, timeout=30, shm=shm)
        try:
            graph = DistGraph(partition, client)
            task = NodeClassification(gt, graph, loader, Dist())
            assert (task.feat is not None) == (gt.spec.model.use_features is not False)
            if not ahead:
                monkeypatch.setattr(task, "_rows_ahead", lambda: False)
            pulled = []
            fetch = task._fetch

            def counted(mb):
                fetch(mb)
                pulled.append(("emb_rows" in mb.data, "emb_mean" in mb.data))

            task.loader.fetch = counted
            recorded = Recorded(task)
            loop = EpochLoop(recorded, gt.spec, graph, Dist(), run_dir, run_dir / "checkpoints")
            try:
                loop.run()
            finally:
                if loop.metrics_log is not None:
                    loop.metrics_log.close()
            lanes = [s.fastlane.stats() for s in servers if s.fastlane is not None]
            stats = {k: sum(lane[k] for lane in lanes) for k in lanes[0]}
            return recorded.steps, final_state(task), stats, pulled
        finally:
            client.close()
            loader.close()


def _spec(made: dict, features: bool) -> tuple[GraphTraining, Path]:
    """The graphsage spec, inlined batches; without features the embedding is the only input (labels and
    rows pulled together)."""
    gt, partition = made["graphsage"]
    assert gt.spec.training.prefetch == 0
    if not features:
        doc = gt.model_dump(mode="json", by_alias=True, exclude_none=True)
        doc["spec"]["model"]["useFeatures"] = False
        gt = GraphTraining.model_validate(doc)
    return gt, partition


@pytest.mark.timeout(180)
@pytest.mark.parametrize("features", [True, False], ids=["features", "embedding-only"])
@pytest.mark.parametrize("shm", [False, True], ids=["sockets", "shared-memory"])
def test_pulling_a_steps_rows_ahead_takes_the_steps_of_pulling_each_table_alone(
    partitions: dict,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    features: bool,
    shm: bool,
) -> None:
    """With servers whose tables lie in shared memory (`graphtrain run`'s), a batch pulled ahead brings
    its embedding as its destinations' rows and their means, summed where the rows lie
    (encoder.emb_means), and its gradient still reaches every input row: the same steps either way."""
    gt, partition = _spec(partitions, features)
    ahead = train(gt, partition, tmp_path / "ahead", True, monkeypatch, shm)
    alone = train(gt, partition, tmp_path / "alone", False, monkeypatch, shm)
    assert ahead[3] and all(rows for rows, _ in ahead[3]) and not any(rows for rows, _ in alone[3])
    assert all(mean == shm for _, mean in ahead[3])  # without shared memory every input row is pulled
    assert ahead[0] == alone[0]  # the same batches and losses, bit for bit
    for name, value in alone[1].items():
        assert torch.equal(ahead[1][name], value), name
    assert np.isfinite([loss for _, loss in ahead[0]]).all()
    if not shm:  # ahead, a step's labels, features and rows went as one batch on the lane; alone, never
        steps = len(ahead[0])
        assert ahead[2]["batches"] >= steps and alone[2]["batches"] == 0
        assert ahead[2]["pushes_ok"] + ahead[2]["pushes_busy"] >= steps
