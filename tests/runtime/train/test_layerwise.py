"""The pure parts of whole-graph inference (train/layerwise.py, contract/spec/inference.py) and the
shard servers' scratch tensors, which no checkpoint holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtrain.contract.spec.inference import checkpoint_root
from graphtrain.runtime.kvstore.tables.state import ShardTensors
from graphtrain.runtime.train.layerwise import SCRATCH, node_share


@pytest.mark.parametrize(
    ("bounds", "world"),
    [([0, 10, 25], 2), ([0, 10, 25], 4), ([0, 10, 25], 3), ([0, 7, 7, 20], 6), ([0, 3], 5), ([0, 100], 1)],
)
def test_node_shares_cover_every_node_once(bounds: list[int], world: int) -> None:
    b = np.asarray(bounds)
    shares = [node_share(b, r, world) for r in range(world)]
    covered = np.concatenate([np.arange(lo, hi) for lo, hi in shares])
    assert (np.sort(covered) == np.arange(b[-1])).all()
    if world % (len(b) - 1) == 0:  # each trainer inside its own partition's range
        per = world // (len(b) - 1)
        for r, (lo, hi) in enumerate(shares):
            p = r // per
            assert b[p] <= lo <= hi <= b[p + 1], (r, lo, hi)


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("/v/runs/wn/u1/checkpoints/LATEST", "/v/runs/wn/u1/checkpoints"),
        ("/v/runs/wn/u1/checkpoints/BEST", "/v/runs/wn/u1/checkpoints"),
        ("/v/runs/wn/u1/checkpoints/step-000000138", "/v/runs/wn/u1/checkpoints"),
        ("/v/runs/wn/u1/checkpoints/", "/v/runs/wn/u1/checkpoints"),
        ("runs/wn/checkpoints", "runs/wn/checkpoints"),
    ],
)
def test_the_checkpoint_root_is_read_from_the_path_alone(path: str, root: str) -> None:
    assert checkpoint_root(path) == root


def test_scratch_tensors_are_never_checkpointed(tmp_path: Path) -> None:
    s = ShardTensors(0)
    s.create("emb", 10, (4,), "float32", 0, 10, {"kind": "uniform", "seed": 1})
    s.create(f"{SCRATCH}0", 10, (4,), "float32", 0, 10)
    pieces = s.checkpoint(tmp_path)
    assert [p["name"] for p in pieces] == ["emb"]
    assert not list(tmp_path.rglob(f"{SCRATCH}*"))
